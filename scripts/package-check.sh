#!/usr/bin/env bash
# The pip package end to end (docs/extending.md), as a researcher installs
# it into an environment that has torch: `pip install --no-build-isolation`
# of this checkout into the CUDA leg's venv (scripts/torch-venv.sh --ci:
# PyPI's torch 2.11.0 and the optimizer libraries), then, from outside the
# checkout and with no LD_LIBRARY_PATH:
#   - `import twins` and a verdict (the installed package, not python/);
#   - the installed `twin-run` finds its torch by its run path and gives a
#     verdict of a library's rule (py:pytorch_optimizer:AdaBelief);
#   - `pip wheel` makes the wheel a user copies to cluster nodes: it holds
#     the package, the extension, twin-run and the corpus.
#
#   scripts/package-check.sh [BUILD_DIR]     default: build-cuda
#
# BUILD_DIR is the CMake build the package reuses (-Cbuild-dir), so that one
# build serves the link check, the bridge's tests and the package: CMake
# configures it again with the package's settings (install rules, run
# paths) and rebuilds only what they change. Each step is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
die() { echo "package-check: $*" >&2; exit 1; }

build=$(realpath "${1:-build-cuda}")
[[ -f $build/CMakeCache.txt ]] || die "no CMake build in $build (scripts/build-cuda.sh makes it)"
python=${TWINS_TORCH_PYTHON:-$(scripts/torch-venv.sh --ci)}
venv=$(dirname "$(dirname "$python")")
step() {
  local name=$1 t0=$SECONDS; shift
  "$@" || die "$name failed"
  echo "package-check: $name: $((SECONDS - t0)) s"
}

# The settings the build was made with, so that the package's configure
# changes nothing else: its generator and its tests (pyproject.toml turns
# them off for a plain `pip install`).
generator=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt")
testing=$(sed -n 's/^BUILD_TESTING:BOOL=//p' "$build/CMakeCache.txt")
pip_args=(--no-build-isolation "-Cbuild-dir=$build"
          "-Ccmake.define.BUILD_TESTING=${testing:-OFF}")
export CMAKE_GENERATOR=$generator

install_package() {
  "$python" -m pip uninstall -q -y twins >/dev/null 2>&1 || true
  "$python" -m pip install -q "${pip_args[@]}" "$src"
}
step "pip install --no-build-isolation -Cbuild-dir=$build ." install_package

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # away from python/: the installed package is imported

import_check() {
  env -u LD_LIBRARY_PATH -u PYTHONPATH "$python" -c '
import twins, torch
assert "site-packages" in twins.__file__, twins.__file__
assert twins.torch_version == torch.__version__, (twins.torch_version, torch.__version__)
v = twins.verdict("torch:Adam", steps=20, progress=False)
print("package-check:", twins.__file__, v["line"])
assert v["verdict"] == "basis-dependent", v["verdict"]
'
}
step "import twins; twins.verdict('torch:Adam', steps=20)" import_check

twin_run=$venv/bin/twin-run
binary_check() {
  [[ -x $twin_run ]] || die "pip installed no $twin_run"
  local runpath
  runpath=$(readelf -d "$twin_run" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [[ $runpath == *'$ORIGIN/'* ]] || die "$twin_run has no \$ORIGIN run path ($runpath)"
  if env -u LD_LIBRARY_PATH ldd "$twin_run" | grep 'not found'; then
    die "$twin_run has unresolved libraries without LD_LIBRARY_PATH"
  fi
  env -u LD_LIBRARY_PATH -u PYTHONPATH "$twin_run" verdict \
    --opt py:pytorch_optimizer:AdaBelief --steps 20 --out v.jsonl --quiet | tee out.txt
  grep -q 'py:pytorch_optimizer\[pytorch.optimizer==4.1.0\]:AdaBelief .*basis-dependent' out.txt ||
    die "no basis-dependent verdict of AdaBelief"
}
step "installed twin-run verdict --opt py:pytorch_optimizer:AdaBelief --steps 20" binary_check

wheel_check() {
  "$python" -m pip wheel -q --no-deps "${pip_args[@]}" -w "$work/dist" "$src"
  local wheel
  wheel=$(ls "$work"/dist/twins-*.whl)
  "$python" - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["twins/__init__.py", "twins/_engine.py", "twins/plot.py",
        ".data/scripts/twin-run", ".data/data/share/twins/tinyshakespeare.txt"]
missing = [n for n in need if not any(h.endswith(n) for h in names)]
core = [n for n in names if n.startswith("twins/_core") and n.endswith(".so")]
assert core and not missing, (core, missing)
print("package-check:", sys.argv[1].rsplit("/", 1)[-1], len(names), "files, extension", core[0])
EOF
}
step "pip wheel" wheel_check
echo "package-check: passed ($(du -sh "$venv/lib/python3"*/site-packages/twins | cut -f1) installed package," \
  "$(du -h "$twin_run" | cut -f1) twin-run)"
