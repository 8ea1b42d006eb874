#!/usr/bin/env bash
# Makes (once) a virtual environment with PyPI's torch wheel (and numpy,
# which torch imports when it is there, as on the GPU machine) and prints
# its python. The wheel is the CUDA build of LibTorch that scripts/build-cuda.sh
# compiles against and the GPU machine runs (torch 2.11.0: PyPI serves the
# CUDA 13.0 build, its libraries in site-packages/nvidia/*/lib).
#
#   scripts/torch-venv.sh            prints the venv's python (makes it first)
#   scripts/torch-venv.sh --pybind   the same, with pybind11 installed too
#
# Everything lives outside the checkout, keyed on the torch version and the
# Python tag: the wheels in $TWINS_CACHE/wheels/torch-V-cpXY (2.6 GB for
# 2.11.0) and the venv in $TWINS_CACHE/torch-V-cpXY/venv (4.6 GB). A second
# run finds the venv and downloads nothing; with the venv deleted, it
# installs again from the cached wheels without the network.
#
# TWINS_TORCH_VERSION (default 2.11.0), TWINS_CACHE (default /var/cache/twins)
# and TWINS_VENV_PYTHON (default: python3.12, the GPU machine's Python, when
# there is one, else Debian's /usr/bin/python3) override the defaults.
# Progress goes to stderr, the python's path alone to stdout.
set -euo pipefail

version=${TWINS_TORCH_VERSION:-2.11.0}
cache=${TWINS_CACHE:-/var/cache/twins}
die() { echo "torch-venv: $*" >&2; exit 2; }

pybind=0
case ${1:-} in
  "") ;;
  --pybind) pybind=1 ;;
  *) die "unknown argument '$1' (known: --pybind)" ;;
esac

base=${TWINS_VENV_PYTHON:-}
if [[ -z $base ]]; then
  base=$(command -v python3.12 2>/dev/null || true)
  # A pyenv shim exists for every installed version but runs only the
  # selected ones; take the interpreter it would run, or none.
  [[ -n $base ]] && ! "$base" -c '' 2>/dev/null && base=$(
    ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.12*/bin/python3.12 \
      2>/dev/null | tail -1)
  [[ -n $base ]] || base=/usr/bin/python3
fi
"$base" -m venv --help >/dev/null 2>&1 ||
  die "$base cannot make a venv (Debian: apt-get install python3-venv)"
tag=$("$base" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
wheels=$cache/wheels/torch-$version-$tag
home=$cache/torch-$version-$tag
venv=$home/venv
packages=("torch==$version" numpy)

mkdir -p "$cache"
exec 9>"$home.lock"
flock 9  # one maker at a time; the others wait and then reuse it
# The markers hold the package list: another list makes them anew.
if [[ "$(cat "$venv/.twins-complete" 2>/dev/null)" != "${packages[*]}" ]]; then
  start=$SECONDS
  if [[ "$(cat "$wheels/.twins-complete" 2>/dev/null)" != "${packages[*]}" ]]; then
    echo "torch-venv: downloading torch==$version and its dependencies ($tag) into $wheels" >&2
    mkdir -p "$wheels"  # pip skips the files it already has
    "$base" -m pip download -q --only-binary=:all: --dest "$wheels" \
      "${packages[@]}" >&2 || die "pip download ${packages[*]} failed"
    echo "${packages[*]}" >"$wheels/.twins-complete"
    echo "torch-venv: downloaded $(du -sh "$wheels" | cut -f1) in $((SECONDS - start)) s" >&2
  fi
  t0=$SECONDS
  # A venv of an older package list keeps what it has and gains the rest.
  if [[ ! -x $venv/bin/python ]]; then
    rm -rf "$home" && mkdir -p "$home"
    "$base" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --no-index --find-links "$wheels" \
    "${packages[@]}" >&2 || die "installing ${packages[*]} from $wheels failed"
  echo "${packages[*]}" >"$venv/.twins-complete"
  echo "torch-venv: installed into $venv ($(du -sh "$venv" | cut -f1)) in $((SECONDS - t0)) s" >&2
fi
if ((pybind)) && ! "$venv/bin/python" -c 'import pybind11' 2>/dev/null; then
  "$venv/bin/python" -m pip install -q pybind11 >&2 || die "pip install pybind11 failed"
fi
flock -u 9
echo "$venv/bin/python"
