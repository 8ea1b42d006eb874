#!/usr/bin/env bash
# The CUDA float64 promises, checked on a GPU machine in one command, with
# everything that needs no GPU done beforehand here (docs/cuda.md):
#
#   scripts/gpu-check.sh --pack       here: the folder to carry, gpu-pack/
#                                     (TWINS_PACK): the CUDA twin-run built
#                                     against PyPI's torch wheel, the header
#                                     dependencies of a rebuild, the CPU float64
#                                     reference records, a MANIFEST (<= 64 MiB)
#   scripts/gpu-check.sh --rehearse   here (alias --dry-run): every step of
#                                     the GPU part with the packed binary on
#                                     --device cpu, few steps,
#                                     the venv's python3 standing in for the GPU
#                                     machine's; the same checks
#   scripts/gpu-check.sh --gpu        there: the GPU part, from the pack: under
#                                     8 minutes, every phase under `timeout`
#   scripts/gpu-check.sh --make-refs  here, once (about 40 minutes on 2 cores):
#                                     the full-length CPU float64 records the
#                                     GPU part is compared with, cached in
#                                     $TWINS_CACHE/gpu-refs and packed from there
#
# The GPU part and the rehearsal write at most 8 files to $OUT (default
# runs/gpu-check-<date>-<time>): summary.txt (every phase and check, versions,
# times, the CUDA-against-CPU comparison and the bench rows), the four
# results files and logs.tar.gz. Exit 0 only when every phase and check
# passed; a failed phase does not stop the later ones.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
pack=$(realpath -m "${TWINS_PACK:-gpu-pack}")
cache=${TWINS_CACHE:-/var/cache/twins}
die() { echo "gpu-check: $*" >&2; exit 2; }

mode=
case ${1:-} in
  --pack | --rehearse | --gpu | --make-refs) mode=${1#--} ;;
  --dry-run) mode=rehearse ;;
  -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "one of --pack, --rehearse, --gpu, --make-refs (got '${1:-}')" ;;
esac
(($# == 1)) || die "one argument, got: $*"

# ---------------------------------------------------------------------------
# The Table-3 set's checks need float64 gauge draws, exact to rounding, on
# both devices: a twin-run with --protocol is asked for the twins protocol
# (float64 draws; the table9-* layouts choose their own), one without draws
# in float64 anyway. The pack records which, and the GPU part follows it.
protocol_of() {  # BIN: the flag its Table-3 set needs, or nothing
  local help; help=$("$1" --help 2>/dev/null) || true
  if [[ $help == *--protocol* ]]; then echo "--protocol twins"; fi
}
# The sets, as the GPU part runs them (full) and as the rehearsal does (few
# steps, the char-LM shrunk), for the protocol flag $1. Each: label, pairs,
# timeout in s, arguments. The full-length CPU references are named by a
# hash of their arguments, so changing a set asks for new references.
define_sets() {
  local p=${1:+ $1}
  full_sets=(
    "table3|7|100|--task mod47 --dtype float64 --steps 1500$p"
    "charlm|7|90|--task charlm --dtype float64 --steps 100"
    "table9-mod47|18|150|table table9-mod47 --jobs 2"
  )
  short_sets=(
    "table3|7|120|--task mod47 --dtype float64 --steps 20$p"
    "charlm|7|120|--task charlm --dtype float64 --steps 3 --depth 2 --d-model 64 --heads 4 --ctx 32 --batch 8"
    "table9-mod47|18|180|table table9-mod47 --steps 5 --jobs 2"
  )
  full_refs=$cache/gpu-refs/$(printf '%s\n' "${full_sets[@]}" | cut -d'|' -f1,4 |
    sha256sum | cut -c1-12)
}

# Runs each set of the list named $1 on --device cpu with $2 into folder $3.
make_refs() {
  local -n sets=$1
  local bin=$2 dir=$3 s label args
  mkdir -p "$dir"
  for s in "${sets[@]}"; do
    IFS='|' read -r label _ _ args <<<"$s"
    # shellcheck disable=SC2086 # the arguments are words
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$bin" $args --device cpu --quiet \
      --out "$dir/$label.jsonl" >"$dir/$label.log" 2>&1 ||
      { tail -5 "$dir/$label.log" >&2; die "reference run $label failed (log: $dir/$label.log)"; }
  done
}

if [[ $mode == make-refs ]]; then
  bin=$(realpath "${TWIN_RUN:-build/twin-run}")
  [[ -x $bin ]] || die "no $bin (./setup.sh builds it, or set TWIN_RUN)"
  define_sets "$(protocol_of "$bin")"
  echo "gpu-check: full-length CPU float64 references with $bin into $full_refs"
  start=$SECONDS
  rm -rf "$full_refs.partial"
  make_refs full_sets "$bin" "$full_refs.partial"
  { echo "made $(date -Is) by $bin ($("$bin" --version 2>/dev/null || echo twin-run)) in $((SECONDS - start)) s"
    printf '%s\n' "${full_sets[@]}"; } >"$full_refs.partial/MANIFEST"
  rm -rf "$full_refs" && mv "$full_refs.partial" "$full_refs"
  echo "gpu-check: references made in $((SECONDS - start)) s"
  exit 0
fi

# ---------------------------------------------------------------------------
# --pack: the binary, a rebuild's header dependencies, the references.
if [[ $mode == pack ]]; then
  build=${TWINS_CUDA_BUILD:-build-cuda}
  [[ -x $build/twin-run ]] || die "no $build/twin-run (scripts/build-cuda.sh builds it)"
  native=$(realpath "${TWIN_RUN:-build/twin-run}")
  [[ -x $native ]] || die "no $native: the rehearsal's references are made with the native build (./setup.sh)"
  deps=${TWINS_DEPS:-deps}
  [[ -d $deps/usr/include/CLI ]] || die "no dependency folder $deps (scripts/make-deps.sh)"
  python=$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
  protocol=$(protocol_of "$native")
  [[ $protocol == "$(LD_LIBRARY_PATH=$("$src/scripts/torch-libpath.sh" "$python") protocol_of "$build/twin-run")" ]] ||
    die "$native and $build/twin-run differ in --protocol: build both from one checkout"
  define_sets "$protocol"
  rm -rf "$pack" && mkdir -p "$pack/lib" "$pack/refs"
  # Next to the checkout's bench/ and data/: twin-run finds the eager
  # script and the corpus from its own path.
  strip --strip-unneeded -o "$pack/twin-run" "$build/twin-run"
  # The C++ runtime it was linked with, used there only if the machine's
  # is older (a newer libstdc++ runs older programs, so it is safe first).
  cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$pack/lib/"
  # With the Python bridge, the libpython it was linked with (stripped),
  # used there only where the machine has none of that name: the GPU check
  # runs built-in rules and never starts the interpreter.
  read -r soname libpython < <(LD_LIBRARY_PATH=$("$src/scripts/torch-libpath.sh" "$python") \
    ldd "$build/twin-run" | awk '$1 ~ /^libpython/ { print $1, $3 }') || true
  [[ -n ${libpython:-} ]] && strip --strip-unneeded -o "$pack/lib/$soname" "$libpython"
  # A rebuild there (BUILD_TESTING=OFF) needs only these headers; fmt is
  # the wheel's own.
  mkdir -p "$pack/deps/usr/share"
  cp -r "$deps/usr/include" "$pack/deps/usr/"
  cp -r "$deps/usr/share/cmake" "$pack/deps/usr/share/"
  cp "$deps/MANIFEST" "$pack/deps/"
  echo "gpu-check: the rehearsal's references (native build, $native)"
  make_refs short_sets "$native" "$pack/refs/rehearse"
  rm -f "$pack"/refs/rehearse/*.log "$pack"/refs/rehearse/*.md "$pack"/refs/rehearse/*.csv
  if [[ -f $full_refs/MANIFEST ]]; then
    mkdir -p "$pack/refs/gpu"
    cp "$full_refs"/*.jsonl "$full_refs/MANIFEST" "$pack/refs/gpu/"
    refs_note="full-length CPU references from $full_refs"
  else
    refs_note="no full-length CPU references ($full_refs: run --make-refs): the GPU part will report CUDA values only"
    echo "gpu-check: warning: $refs_note" >&2
  fi
  glibc=$(objdump -T "$pack/twin-run" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  glibcxx=$(objdump -T "$pack/twin-run" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
  {
    echo "torch=$("$python" -c 'import torch; print(torch.__version__)')"
    echo "cuda=$("$python" -c 'import torch; print(torch.version.cuda)')"
    echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo +changes)"
    echo "cxx_standard=$(sed -n 's/^TWINS_CXX_STANDARD:STRING=//p' "$build/CMakeCache.txt")"
    echo "compiler=$(g++ --version | head -1)"
    echo "needs=$glibc $glibcxx"
    echo "made=$(date -Is) on $(hostname)"
    echo "refs=$refs_note"
    echo "protocol=$protocol"
  } >"$pack/MANIFEST"
  size=$(du -sb "$pack" | cut -f1)
  ((size <= 64 * 1024 * 1024)) || die "the pack is $((size >> 20)) MiB, over the 64 MiB that can be carried"
  echo "gpu-check: packed $pack ($(du -sh "$pack" | cut -f1)):"
  sed 's/^/  /' "$pack/MANIFEST"
  exit 0
fi

# ---------------------------------------------------------------------------
# The GPU part (--gpu) and its rehearsal (--rehearse): the same steps.
[[ -f $pack/MANIFEST ]] || die "no pack at $pack (scripts/gpu-check.sh --pack, then carry gpu-pack/)"
manifest() { sed -n "s/^$1=//p" "$pack/MANIFEST"; }
define_sets "$(manifest protocol)"
if [[ $mode == gpu ]]; then
  device=cuda budget=${TWINS_GPU_BUDGET:-450} refs=$pack/refs/gpu
  sets=("${full_sets[@]}")
  bench_args=() bench_secs=150
else
  device=cpu budget=${TWINS_GPU_BUDGET:-1500} refs=$pack/refs/rehearse
  sets=("${short_sets[@]}")
  # Each eager process here pays torch's import on a shared CPU.
  bench_args=(--quick --rows mod47-f32,mod47-f64) bench_secs=400
  # The venv's python3 stands in for the GPU machine's python3.
  venv_python=$("$src/scripts/torch-venv.sh")
  export PATH=$(dirname "$venv_python"):$PATH
fi

out=${OUT:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(realpath "$out")
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
summary=$out/summary.txt
: >"$summary"
failed=0
start_all=$SECONDS
deadline=$((SECONDS + budget))

say() { echo "$*" | tee -a "$summary"; }
# Seconds a phase may take: its own limit, cut to what the budget has left.
limit() { local left=$((deadline - SECONDS)); echo $(($1 < left ? $1 : (left > 5 ? left : 5))); }
# Runs a named phase under `timeout`; a failure is recorded and the later
# phases still run.
phase() {
  local name=$1 secs; secs=$(limit "$2"); shift 2
  local t0=$SECONDS rc=0
  echo "gpu-check: $name (at most $secs s) ..."
  timeout --kill-after=10 "$secs" "$@" || rc=$?
  if ((rc == 0)); then
    say "ok   $name ($((SECONDS - t0)) s)"
  elif ((rc == 124 || rc == 137)); then
    say "FAIL $name (timed out after $secs s)"; failed=1
  else
    say "FAIL $name ($((SECONDS - t0)) s, exit $rc)"; failed=1
  fi
  return 0
}

say "gpu-check ($mode part) on $(hostname), $(date -Is); pack: torch $(manifest torch), $(manifest commit), C++$(manifest cxx_standard)"
# The wheel's libraries, from where this machine's python3 imports torch.
python=$(command -v python3) || die "no python3 on PATH"
torch_version=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
  die "python3 ($python) has no torch"
libpath=$("$src/scripts/torch-libpath.sh" python3)
export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export TWINS_DATA_DIR=$src/data
say "     python3 $python: torch $torch_version, CUDA $(python3 -c 'import torch; print(torch.version.cuda)' 2>/dev/null)"
say "     library path: ${libpath//:/ }"
if [[ $mode == gpu ]]; then
  { nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not found"; } | sed 's/^/     /' | tee -a "$summary"
  python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null ||
    { say "FAIL python3's torch sees no CUDA device"; exit 1; }
fi

# The packed binary if it starts here against this torch; else a rebuild.
bin=$pack/twin-run
starts() { "$bin" --help >/dev/null 2>"$work/start.err"; }
why=
if [[ $torch_version != "$(manifest torch)" ]]; then
  why="built against torch $(manifest torch), this is $torch_version"
elif ! starts; then
  if grep -q 'GLIBCXX\|CXXABI\|libpython' "$work/start.err"; then
    export LD_LIBRARY_PATH=$pack/lib:$LD_LIBRARY_PATH
    starts || why=$(head -1 "$work/start.err")
    [[ -z $why ]] && say "     the machine's libstdc++ or libpython is not the binary's: the packed one is used"
  else
    why=$(head -1 "$work/start.err")
  fi
fi
if [[ -n $why ]]; then
  say "     the packed twin-run does not run here ($why): rebuilding with Ninja"
  rebuild=(cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release
    -DBUILD_TESTING=OFF -DTWINS_CXX_STANDARD="$(manifest cxx_standard)"
    -DCMAKE_PREFIX_PATH="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
    -DCLI11_DIR="$(dirname "$(find "$pack/deps" -name CLI11Config.cmake -print -quit)")"
    -Dnlohmann_json_DIR="$(dirname "$(find "$pack/deps" -name nlohmann_jsonConfig.cmake -print -quit)")")
  phase "rebuild of twin-run here (Ninja, BUILD_TESTING=OFF)" 300 bash -c \
    "$(printf '%q ' "${rebuild[@]}") >'$work/rebuild.log' 2>&1 &&
     cmake --build '$work/build' --target twin-run -j $(nproc) >>'$work/rebuild.log' 2>&1"
  bin=$work/build/twin-run
  [[ -x $bin ]] || { say "FAIL no twin-run (see rebuild.log in logs.tar.gz)"; failed=1; }
fi
cuda_lib=$(ldd "$bin" 2>/dev/null | awk '$1 == "libtorch_cuda.so" { print $3 }')
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
if [[ $cuda_lib == "$torch_dir"/lib/* ]]; then
  say "ok   twin-run starts, libtorch_cuda.so from $cuda_lib"
else
  say "FAIL twin-run: libtorch_cuda.so resolves to '${cuda_lib:-nothing}', not $torch_dir/lib"
  failed=1
fi

# ---------------------------------------------------------------------------
# The sets and their checks.
cd "$work"
checker=$src/scripts/gpu-check-records.py
run_set() {  # LABEL PAIRS ARGS: run, check, compare with the CPU reference
  local label=$1 pairs=$2 args=$3 file=$1-$device.jsonl
  local ref=() ; [[ -f $refs/$label.jsonl ]] && ref=(--ref "$refs/$label.jsonl")
  # shellcheck disable=SC2086 # the arguments are words
  "$bin" $args --device "$device" --quiet --out "$file" >"$label-$device.log" 2>&1 ||
    { echo "twin-run failed:"; tail -3 "$label-$device.log"; return 1; }
  python3 "$checker" "$file" "$label-$device" --device "$device" --dtype float64 \
    --pairs "$pairs" --tol "${TWINS_EQUIVARIANT_TOL:-1e-13}" ${ref[@]+"${ref[@]}"} \
    >"$label-$device.check" 2>&1
}
for s in "${sets[@]}"; do
  IFS='|' read -r label pairs secs args <<<"$s"
  phase "$label: $args on $device" "$secs" bash -c \
    "$(declare -f run_set); bin='$bin' device='$device' refs='$refs' checker='$checker'
     run_set '$label' '$pairs' '$args'"
  # The checks' verdicts and the comparison with the CPU records.
  [[ -f $label-$device.check ]] && grep -v '^PASS ' "$label-$device.check" | sed 's/^/     /' | tee -a "$summary"
  [[ -f $refs/$label.jsonl ]] || say "     (no CPU reference of $label in the pack: CUDA values only)"
done

# The bench rows on the device, with eager PyTorch (this python3's torch)
# on the same device side by side.
phase "bench rows on $device, eager PyTorch $torch_version beside them" "$bench_secs" \
  bash -c "'$bin' bench --device '$device' ${bench_args[*]:-} --vs-pytorch \
    --python '$python' --out 'bench-$device.json' >'bench-$device.log' 2>&1"
if [[ -f bench-$device.json ]]; then
  python3 - "bench-$device.json" <<'EOF' | tee -a "$summary"
import json, sys
j = json.load(open(sys.argv[1]))
print(f"     bench: LibTorch {j['torch_version']}, {j['cpu']}" + (" (--quick: figures not meaningful)" if j["quick"] else ""))
print(f"     {'row':<15} {'s/pair-step':>11} {'GFLOP/pair-step':>15} {'GFLOP/s':>8} {'roof':>8} {'eager':>8} {'speedup':>7}")
for r in j["rows"]:
    e = min(r.get("eager_s_per_pair_step", {}).values(), default=None)
    print(f"     {r['row']:<15} {r['s_per_pair_step']:>11.4f} {r['flops_per_pair_step'] / 1e9:>15.3f} "
          f"{r['model_gflops']:>8.1f} {r['roof_gflops']:>8.1f} "
          + (f"{e:>8.4f} {r['speedup_vs_best_eager']:>6.2f}x" if e else f"{'-':>8} {'-':>7}"))
EOF
fi

# At most 8 files back: the summary, the four results files, the logs.
for f in table3 charlm table9-mod47; do
  [[ -f $f-$device.jsonl ]] && cp "$f-$device.jsonl" "$out/"
done
[[ -f bench-$device.json ]] && cp "bench-$device.json" "$out/"
tar -czf "$out/logs.tar.gz" --ignore-failed-read -- *.log *.check *.md *.csv 2>/dev/null || true
total=$((SECONDS - start_all))
if ((failed)); then
  say "gpu-check: FAILED ($mode part, $total s); results in $out"
  exit 1
fi
say "gpu-check: PASSED ($mode part, $total s); results in $out"
