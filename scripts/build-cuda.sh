#!/usr/bin/env bash
# Builds twins against a CUDA LibTorch 2.x, by default the one inside the pip
# torch wheel of `python3` (found through torch.utils.cmake_prefix_path).
#   scripts/build-cuda.sh [BUILD_DIR]        default BUILD_DIR: build-cuda
#   TORCH_PREFIX=/path/to/libtorch scripts/build-cuda.sh   another LibTorch
# Needs nvcc (the CUDA toolkit LibTorch's CMake config looks for), cmake, g++
# and the header packages setup.sh installs (fmt, CLI11, nlohmann-json,
# libgtest-dev, whose sources are rebuilt here with LibTorch's C++ ABI).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-cuda}
prefix=${TORCH_PREFIX:-$(python3 -c \
  'import torch.utils; print(torch.utils.cmake_prefix_path)')}
command -v nvcc >/dev/null ||
  echo "build-cuda: warning: nvcc not on PATH; LibTorch's CMake config may fail" >&2
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DTWINS_GTEST_FROM_SOURCE=ON
cmake --build "$dir" -j "$(nproc)"
echo "build-cuda: built $dir/twin-run against $(python3 -c \
  'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' \
  2>/dev/null || echo "$prefix")"
