#!/usr/bin/env bash
# The CUDA leg of the test command (README, .ci/run): twins built against
# PyPI's torch 2.11.0 CUDA 13.0 wheel and tested here, where nothing CUDA
# runs, so that a GPU machine has only the GPU left to prove.
#
#   scripts/ci-cuda.sh [ctest arguments]
#
# Phases, each timed:
#   1. the wheel's venv (scripts/torch-venv.sh --ci; cached in
#      /var/cache/twins): torch 2.11.0 with the package's build tools, the
#      optimizer libraries and the notebook's packages
#      (tests/python/requirements.txt);
#   2. the header dependencies from Debian 13 (scripts/make-deps.sh: CLI11
#      2.4, nlohmann-json, GoogleTest sources) into deps/;
#   3. the build against the wheel's LibTorch, C++20, with the CUDA toolkit
#      and the Python bridge against the wheel's libtorch_python, and the
#      check that twin-run links libtorch_cuda (scripts/build-cuda.sh);
#   4. the whole test suite with that build (tests that need a GPU skip and
#      say why) but the three labelled `cluster` (tests/CMakeLists.txt: they
#      test the scheduler scripts around twin-run, the Debian suite runs
#      them): the bridge's tests, the libraries' rules and the notebook run
#      under torch 2.11 there;
#   5. the pip package from that same build (scripts/package-check.sh);
#   6. the GPU check's pack (scripts/gpu-check.sh --pack) and
#   7. its rehearsal on --device cpu (scripts/gpu-check.sh --rehearse).
# Needs nvcc on PATH and the native build (./setup.sh: build/twin-run, whose
# records the rehearsal compares against).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase() {
  local name=$1 t0=$SECONDS rc=0; shift
  echo "ci-cuda: $name ..."
  "$@" || rc=$?
  echo "ci-cuda: $name: $((SECONDS - t0)) s$( ((rc)) && echo ", FAILED (exit $rc)")"
  ((rc == 0)) || { echo "ci-cuda: failed after $((SECONDS - start)) s" >&2; exit "$rc"; }
}
command -v nvcc >/dev/null ||
  { echo "ci-cuda: nvcc not on PATH (the CUDA 13.0 toolkit is needed to build against the CUDA wheel)" >&2; exit 2; }

phase "torch wheel venv (with tests/python/requirements.txt)" scripts/torch-venv.sh --ci
phase "header dependencies (Debian 13) into deps/" scripts/make-deps.sh deps
phase "build against the wheel's LibTorch (build-cuda/, C++20) and link check" \
  scripts/build-cuda.sh build-cuda
phase "test suite, CUDA build" ctest --test-dir build-cuda -j "$(nproc)" --output-on-failure -LE cluster "$@"
phase "pip package from build-cuda/ (install, import, twin-run, wheel)" \
  scripts/package-check.sh build-cuda
phase "GPU check: pack (gpu-pack/)" scripts/gpu-check.sh --pack
phase "GPU check: rehearsal on --device cpu" \
  env OUT=runs/gpu-check-rehearsal scripts/gpu-check.sh --rehearse
echo "ci-cuda: the CUDA leg passed in $((SECONDS - start)) s"
