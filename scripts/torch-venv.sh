#!/usr/bin/env bash
# Makes (once) a virtual environment with PyPI's torch wheel (and numpy,
# which torch imports when it is there, as on the GPU machine) and prints
# its python. The wheel is the CUDA build of LibTorch that scripts/build-cuda.sh
# compiles against and the GPU machine runs (torch 2.11.0: PyPI serves the
# CUDA 13.0 build, its libraries in site-packages/nvidia/*/lib).
#
#   scripts/torch-venv.sh            prints the venv's python (makes it first)
#   scripts/torch-venv.sh --pybind   the same, with pybind11 installed too
#   scripts/torch-venv.sh --ci       with everything the CUDA leg needs:
#                                    tests/python/requirements.txt (the
#                                    package's build tools, the optimizer
#                                    libraries, the notebook's packages)
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

pybind=0 ci=0
case ${1:-} in
  "") ;;
  --pybind) pybind=1 ;;
  --ci) ci=1 ;;
  *) die "unknown argument '$1' (known: --pybind, --ci)" ;;
esac
requirements=$(cd "$(dirname "$0")/.." && pwd)/tests/python/requirements.txt

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
sdists=()  # pins PyPI has no wheel of (marked "# sdist"): built into wheels
if ((ci)); then
  # The requirements' pins, one argument each (comments and blanks left out).
  mapfile -t extra < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$requirements")
  mapfile -t sdists < <(sed -n -e 's/[[:space:]]*#[[:space:]]*sdist[[:space:]]*$//p' "$requirements")
  packages+=("${extra[@]}")
fi
downloads=()
for p in "${packages[@]}"; do
  [[ " ${sdists[*]} " == *" ${p%% *} "* ]] || downloads+=("$p")
done

mkdir -p "$cache"
exec 9>"$home.lock"
flock 9  # one maker at a time; the others wait and then reuse it
# The markers list what is there, one package a line: a request they hold
# is done; one with more packages adds them (a plain request after --ci
# finds everything).
holds() {  # holds MARKER: every package requested is in it
  local p
  [[ -f $1 ]] || return 1
  for p in "${packages[@]}"; do grep -qxF -- "$p" "$1" || return 1; done
}
if ! holds "$venv/.twins-complete"; then
  start=$SECONDS
  if ! holds "$wheels/.twins-complete"; then
    echo "torch-venv: downloading torch==$version and its dependencies ($tag) into $wheels" >&2
    mkdir -p "$wheels"  # pip skips the files it already has
    "$base" -m pip download -q --only-binary=:all: --dest "$wheels" \
      "${downloads[@]}" >&2 || die "pip download ${downloads[*]} failed"
    if ((${#sdists[@]})); then
      "$base" -m pip wheel -q --no-deps --wheel-dir "$wheels" "${sdists[@]}" >&2 ||
        die "building wheels of ${sdists[*]} failed"
    fi
    { cat "$wheels/.twins-complete" 2>/dev/null || true; printf '%s\n' "${packages[@]}"; } |
      sort -u >"$wheels/.twins-complete.new" && mv "$wheels/.twins-complete.new" "$wheels/.twins-complete"
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
  { cat "$venv/.twins-complete" 2>/dev/null || true; printf '%s\n' "${packages[@]}"; } |
    sort -u >"$venv/.twins-complete.new" && mv "$venv/.twins-complete.new" "$venv/.twins-complete"
  echo "torch-venv: installed into $venv ($(du -sh "$venv" | cut -f1)) in $((SECONDS - t0)) s" >&2
fi
if ((pybind)) && ! "$venv/bin/python" -c 'import pybind11' 2>/dev/null; then
  # The build tools at the requirements' pins.
  tools=$(grep -E '^(pybind11|scikit-build-core)==' "$requirements" | paste -sd' ')
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q $tools >&2 || die "pip install $tools failed"
fi
flock -u 9
echo "$venv/bin/python"
