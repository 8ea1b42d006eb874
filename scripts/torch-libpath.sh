#!/usr/bin/env bash
# Prints the library path (colon-separated) a non-Python executable needs to
# run against the torch wheel of a Python:
#
#   scripts/torch-libpath.sh [PYTHON]        default: python3 on PATH
#
# the wheel's torch/lib and every site-packages/nvidia/*/lib (the CUDA
# libraries the wheel depends on; torch 2.11's cu130 build has nvidia/cu13,
# cudnn, cusparselt, nccl and nvshmem there). Found from where that Python
# imports torch, at run time, so no machine's layout is written down.
set -euo pipefail
python=${1:-python3}
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) ||
  { echo "torch-libpath: $python cannot import torch" >&2; exit 2; }
path=$torch_dir/lib
for d in "$(dirname "$torch_dir")"/nvidia/*/lib; do
  [[ -d $d ]] && path+=:$d
done
echo "$path"
