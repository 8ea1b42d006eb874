#!/bin/sh
# The twins module as `cmake --install BUILD --component python` installs
# it (without the build tree's RPATH), staged under a temporary DESTDIR and
# imported from there by PYTHON: it must load its libtorch_python and run a
# verdict. --prefix INSTALL_DIR: a build that `pip install -Cbuild-dir=BUILD`
# configured (scripts/package-check.sh) installs relative to the prefix, a
# plain one to INSTALL_DIR itself; both land in INSTALL_DIR/twins.
# Usage: installed_module.sh BUILD PYTHON INSTALL_DIR
set -eu
build=$1 python=$2 dir=$3
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
DESTDIR=$stage cmake --install "$build" --component python --prefix "$dir" >/dev/null
test -n "$(ls "$stage$dir"/twins/_core*.so)"
cd "$stage"
PYTHONPATH=$stage$dir "$python" -c '
import twins
assert twins.__file__.startswith("'"$stage"'"), twins.__file__
v = twins.verdict("torch:Adam", steps=5, task="mod11", depth=2, d_model=16, heads=4, mlp=64)
assert v["identity_max"] == 0.0, v["line"]
print(twins.__file__, v["line"])
'
