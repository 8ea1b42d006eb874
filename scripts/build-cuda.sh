#!/usr/bin/env bash
# Builds twins against a CUDA LibTorch 2.x, by default the one inside the pip
# torch wheel of `python3` (found through torch.utils.cmake_prefix_path).
#   scripts/build-cuda.sh [BUILD_DIR [cmake -D options]]   default: build-cuda
#   TORCH_PREFIX=/path/to/libtorch scripts/build-cuda.sh   another LibTorch
# Needs nvcc (the CUDA toolkit LibTorch's CMake config looks for), cmake, g++
# and the header dependencies: fmt, CLI11, nlohmann-json and the GoogleTest
# sources, rebuilt here with LibTorch's C++ ABI. They come from the
# dependency folder `scripts/gpu-check.sh --make-deps` unpacks from Debian
# packages (deps/, or TWINS_DEPS), where there is one, else from the system
# (the packages setup.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-cuda}
shift $(($# > 0 ? 1 : 0))
prefix=${TORCH_PREFIX:-$(python3 -c \
  'import torch.utils; print(torch.utils.cmake_prefix_path)')}
command -v nvcc >/dev/null ||
  echo "build-cuda: warning: nvcc not on PATH; LibTorch's CMake config may fail" >&2

deps=${TWINS_DEPS:-deps}
dep_flags=()
if [[ -d $deps/usr ]]; then
  deps=$(realpath "$deps")
  # Each package's CMake config by its directory: find_package's own search
  # of a prefix depends on the host's library-architecture directory names.
  for pkg in fmt:fmt-config.cmake CLI11:CLI11Config.cmake \
             nlohmann_json:nlohmann_jsonConfig.cmake; do
    config=$(find "$deps/usr" -name "${pkg#*:}" -print -quit)
    [[ -n $config ]] || { echo "build-cuda: no ${pkg#*:} under $deps" >&2; exit 2; }
    dep_flags+=("-D${pkg%%:*}_DIR=$(dirname "$config")")
  done
  [[ -f $deps/usr/src/googletest/CMakeLists.txt ]] ||
    { echo "build-cuda: no GoogleTest sources under $deps/usr/src/googletest" >&2; exit 2; }
  dep_flags+=("-DTWINS_GTEST_SOURCE_DIR=$deps/usr/src/googletest")
  echo "build-cuda: header dependencies from $deps"
elif [[ -n ${TWINS_DEPS:-} ]]; then
  echo "build-cuda: TWINS_DEPS=$TWINS_DEPS is not a dependency folder (no usr/)" >&2
  exit 2
fi

cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DTWINS_GTEST_FROM_SOURCE=ON \
  ${dep_flags[@]+"${dep_flags[@]}"} "$@"
cmake --build "$dir" -j "$(nproc)"
echo "build-cuda: built $dir/twin-run against $(python3 -c \
  'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' \
  2>/dev/null || echo "$prefix")"
