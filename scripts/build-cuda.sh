#!/usr/bin/env bash
# Builds twins against the CUDA LibTorch inside PyPI's torch wheel and checks
# that the binary links libtorch_cuda.
#
#   scripts/build-cuda.sh [BUILD_DIR [cmake -D options]]   default: build-cuda
#
# The wheel comes from the venv of scripts/torch-venv.sh (made on first use,
# cached outside the checkout), or from TWINS_TORCH_PYTHON, a Python whose torch
# is a CUDA wheel. nvcc must be on PATH: LibTorch's CMake config looks for
# the CUDA toolkit (twins itself compiles no CUDA code). The build is C++20
# unless -DTWINS_CXX_STANDARD=17 is given (the native build is C++17, so CI
# compiles both), with Ninja where it is installed (the GPU machine has no
# make). CLI11, nlohmann-json and the GoogleTest sources come from the
# dependency folder of scripts/make-deps.sh (deps/, or TWINS_DEPS) where it
# exists, else from the system; fmt is the wheel's own.
#
# The check: twin-run's dynamic section names libtorch_cuda.so, and ldd
# resolves it and every other library of the binary (exit 1 otherwise).
# TWINS_JOBS sets the build's parallelism (default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
die() { echo "build-cuda: $*" >&2; exit 2; }

dir=${1:-build-cuda}
shift $(($# > 0 ? 1 : 0))
command -v nvcc >/dev/null ||
  die "nvcc not on PATH: LibTorch's CMake config needs the CUDA toolkit"
python=${TWINS_TORCH_PYTHON:-$(scripts/torch-venv.sh --pybind)}
# The torch package's own folder as the prefix, not torch.utils'
# share/cmake: find_library then searches torch/lib before the system's
# directories, where Debian's LibTorch 1.13 would otherwise be found.
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) ||
  die "$python has no torch"
torch_version=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)
[[ $torch_version != *"CUDA None" ]] || die "$python's torch ($torch_version) is a CPU build"

deps=${TWINS_DEPS:-deps}
dep_flags=()
if [[ -d $deps/usr ]]; then
  deps=$(realpath "$deps")
  # Each package's CMake config by its directory: find_package's own search
  # of a prefix depends on the host's library-architecture directory names.
  for pkg in CLI11:CLI11Config.cmake nlohmann_json:nlohmann_jsonConfig.cmake; do
    config=$(find "$deps/usr" -name "${pkg#*:}" -print -quit)
    [[ -n $config ]] || die "no ${pkg#*:} under $deps"
    dep_flags+=("-D${pkg%%:*}_DIR=$(dirname "$config")")
  done
  if [[ -f $deps/usr/src/googletest/CMakeLists.txt ]]; then
    dep_flags+=(-DTWINS_GTEST_FROM_SOURCE=ON "-DTWINS_GTEST_SOURCE_DIR=$deps/usr/src/googletest")
  fi
  echo "build-cuda: header dependencies from $deps ($(cut -d' ' -f1,2 "$deps/MANIFEST" 2>/dev/null | paste -sd, -))"
elif [[ -n ${TWINS_DEPS:-} ]]; then
  die "TWINS_DEPS=$TWINS_DEPS is not a dependency folder (no usr/)"
fi

generator=()
if [[ ! -f $dir/CMakeCache.txt ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
std=(-DTWINS_CXX_STANDARD=20)
[[ " $* " == *" -DTWINS_CXX_STANDARD="* ]] && std=()
# The Python bridge (bridge/, CMake option TWINS_PYTHON) is built against
# the wheel's libtorch_python with this venv's Python and pybind11
# (scripts/torch-venv.sh --pybind): the bridge's tests then run under torch
# 2.x, and this build is also the pip package's (scripts/ci-cuda.sh).
# -DTWINS_PYTHON=OFF leaves it out.
bridge=(-DTWINS_PYTHON=ON -DPython3_EXECUTABLE="$python")
[[ " $* " == *" -DTWINS_PYTHON="* ]] && bridge=(-DPython3_EXECUTABLE="$python")
# The configure log inside the build folder (git-ignored).
mkdir -p "$dir" && log=$dir/configure.log
cmake -S . -B "$dir" ${generator[@]+"${generator[@]}"} -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_dir" -DPython_EXECUTABLE="$python" \
  "${std[@]}" "${bridge[@]}" ${dep_flags[@]+"${dep_flags[@]}"} "$@" >"$log" 2>&1 ||
  { tail -30 "$log" >&2; die "cmake configure failed (log: $log)"; }
grep -E '^-- (Found Torch|fmt:|PyTorch: CUDA detected|Python optimizers)' "$log" | sed 's/^-- /build-cuda: /'
cmake --build "$dir" -j "${TWINS_JOBS:-$(nproc)}"

# The run path a non-Python executable needs for the wheel: torch/lib and
# every site-packages/nvidia/*/lib (the wheel's CUDA libraries).
libpath=$("$src/scripts/torch-libpath.sh" "$python")
bin=$dir/twin-run
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ')
[[ " $needed " == *" libtorch_cuda.so "* ]] ||
  { echo "build-cuda: $bin does not link libtorch_cuda.so (NEEDED: $needed)" >&2; exit 1; }
resolved=$(LD_LIBRARY_PATH=$libpath ldd "$bin")
if grep -q 'not found' <<<"$resolved"; then
  grep 'not found' <<<"$resolved" >&2
  echo "build-cuda: $bin has unresolved libraries" >&2
  exit 1
fi
cuda_lib=$(awk '$1 == "libtorch_cuda.so" { print $3 }' <<<"$resolved")
[[ $cuda_lib == "$torch_dir"/lib/* ]] ||
  { echo "build-cuda: libtorch_cuda.so resolves to '$cuda_lib', not the wheel's" >&2; exit 1; }
echo "build-cuda: $bin links libtorch_cuda.so ($cuda_lib) and libcudart" \
  "($(awk '$1 ~ /^libcudart/ { print $3 }' <<<"$resolved"))"
echo "build-cuda: built $bin (C++$(sed -n 's/^TWINS_CXX_STANDARD:STRING=//p' "$dir/CMakeCache.txt")) against torch $torch_version"
