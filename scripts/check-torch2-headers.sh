#!/usr/bin/env bash
# Compile-only check of the project against LibTorch 2.x headers, for machines
# without a CUDA toolchain: every source is parsed (-fsyntax-only) against the
# headers under $TORCH2_ROOT (default /opt/torch26, e.g. Debian trixie's
# libtorch-dev 2.6 unpacked with dpkg-deb -x). Nothing is linked or run.
# TWINS_CHECK_FILES="a.cpp b.cpp" checks only those files.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${TORCH2_ROOT:-/opt/torch26}
inc="$root/usr/include"
[[ -f "$inc/torch/csrc/api/include/torch/version.h" ]] ||
  { echo "check-torch2-headers: no LibTorch headers under $inc" >&2; exit 2; }
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
printf '#pragma once\n#define TWINS_SOURCE_DATA_DIR "%s/data"\n#define TWINS_SOURCE_DIR "%s"\n' \
  "$PWD" "$PWD" >"$gen/twins_paths.h"
printf '#define TWIN_RUN_PATH "twin-run"\n' >"$gen/twin_run_path.h"
status=0
for f in ${TWINS_CHECK_FILES:-model/*.cpp data/*.cpp optim/*.cpp twins/*.cpp app/*.cpp tests/*.cpp}; do
  if ! g++ -std=c++17 -fsyntax-only -D_GLIBCXX_USE_CXX11_ABI=1 -I. -I"$gen" \
      -I"$inc" -I"$inc/torch/csrc/api/include" "$f" 2>"$gen/err"; then
    echo "FAILED $f"; head -20 "$gen/err"; status=1
  fi
done
((status == 0)) && echo "check-torch2-headers: all sources compile against $(
  grep -o '"[0-9.]*"' "$inc/torch/csrc/api/include/torch/version.h")"
exit $status
