#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root), then configures and builds
# twins in Release under build/. Idempotent: a second run only rebuilds what
# changed. Usage: ./setup.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")"

# python3-dev and pybind11-dev build the Python bridge (bridge/); ccache
# keeps every compile in /var/cache/twins/ccache, so that a clean build or
# CI's next run of a clone at the same path compiles only what changed
# (CMakeLists.txt, docs/performance.md "Build time"). Of the others, five
# serve the tests only: a one-node SLURM cluster and GNU
# parallel for the sharding tests (their services are not started here);
# ninja-build and python3-venv for the CUDA leg (scripts/ci-cuda.sh, which
# also needs the CUDA toolkit's nvcc, not a Debian package here).
packages=(build-essential cmake libtorch-dev libfmt-dev libcli11-dev
          libgtest-dev nlohmann-json3-dev libopenblas0-pthread gnuplot-nox
          python3-torch python3-dev pybind11-dev slurm-wlm munge parallel
          ninja-build python3-venv ccache)
start=$SECONDS
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Without OpenBLAS LibTorch falls back to the reference BLAS (~40x slower).
if ! update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null |
    grep -q '^Value: .*openblas'; then
  echo "setup: warning: libblas.so.3 does not point to OpenBLAS" >&2
fi

if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
elif (($#)); then
  cmake -S . -B build "$@"
fi
cmake --build build -j "$(nproc)"
# `import twins` for the Python that has its torch: the module goes where pip
# installs for it (docs/extending.md); nothing to do without Python support.
if grep -q '^TWINS_PYTHON:BOOL=ON' build/CMakeCache.txt; then
  cmake --install build --component python
fi
echo "setup: done in $((SECONDS - start)) s"
