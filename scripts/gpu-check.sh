#!/usr/bin/env bash
# The CUDA float64 promises, checked in one command on a machine with one
# NVIDIA GPU, a Python whose torch is a CUDA 2.x wheel, nvcc and CMake, and
# no network (docs/cuda.md):
#
#   scripts/gpu-check.sh --make-deps   here, on Debian with apt: unpack fmt,
#                                      CLI11, nlohmann-json and the GoogleTest
#                                      sources into deps/ (git-ignored), which
#                                      travels with the checkout
#   scripts/gpu-check.sh               there: build against the wheel's LibTorch
#                                      (build-cuda/), run the test suite, run the
#                                      CUDA float64 sets and check them
#   scripts/gpu-check.sh --cpu         the CPU-checkable part: the same runs and
#                                      checks on --device cpu, float64, few steps,
#                                      with an existing build (TWIN_RUN, default
#                                      build/twin-run); what runs where no GPU is
#
# Every record, log and a summary go to one folder: $OUT if set, else
# runs/gpu-check-<date>-<time>. Exit 0 only when every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD

die() { echo "gpu-check: $*" >&2; exit 2; }

mode=auto
case ${1:-} in
  "") ;;
  --make-deps | --cpu | --gpu) mode=${1#--} ;;
  -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (known: --make-deps, --gpu, --cpu)" ;;
esac
(($# <= 1)) || die "one argument at most, got: $*"

# ---------------------------------------------------------------------------
# --make-deps: the header dependencies from this machine's Debian packages.
if [[ $mode == make-deps ]]; then
  deps=${TWINS_DEPS:-deps}
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    die "--make-deps needs apt-get and dpkg-deb (a Debian machine)"
  # libfmt9 holds the library that fmt's CMake config checks for, although
  # twins uses fmt header-only.
  packages=(libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev googletest)
  rm -rf "$deps" && mkdir -p "$deps/debs"
  # As root, apt's download sandbox user cannot write here; download as root.
  sandbox=()
  ((EUID == 0)) && sandbox=(-o APT::Sandbox::User=root)
  (cd "$deps/debs" && apt-get download ${sandbox[@]+"${sandbox[@]}"} \
    "${packages[@]}" >/dev/null) ||
    die "apt-get download ${packages[*]} failed"
  for deb in "$deps"/debs/*.deb; do
    dpkg-deb -x "$deb" "$deps"
    dpkg-deb -f "$deb" Package Version | paste -sd' ' >>"$deps/MANIFEST"
  done
  rm -rf "$deps/debs"
  echo "gpu-check: $(du -sh "$deps" | cut -f1) of header dependencies in $deps/:"
  sed 's/^/  /' "$deps/MANIFEST"
  exit 0
fi

if [[ $mode == auto ]]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    mode=gpu
  else
    mode=cpu
    echo "gpu-check: no NVIDIA GPU seen (nvidia-smi): running the CPU part"
  fi
fi

out=${OUT:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(realpath "$out")
summary=$out/summary.txt
: >"$summary"
failed=0
start_all=$EPOCHREALTIME

say() { echo "$*" | tee -a "$summary"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f s", b - a }'; }
# Runs a named phase; a failure is recorded and the later phases still run.
phase() {
  local name=$1 t0=$EPOCHREALTIME; shift
  echo "gpu-check: $name ..."
  local rc=0
  "$@" || rc=$?
  if ((rc == 0)); then
    say "ok   $name ($(since "$t0"))"
  else
    say "FAIL $name ($(since "$t0"), exit $rc)"
    failed=1
  fi
}
check() {  # FILE LABEL PAIRS: the record checks, into the summary
  python3 "$src/scripts/gpu-check-records.py" "$1" "$2" --device "$device" \
    --dtype float64 --pairs "$3" --tol "${TWINS_EQUIVARIANT_TOL:-1e-13}" \
    >"$out/$2.check" 2>&1
  local rc=$?
  grep -v '^PASS ' "$out/$2.check" | sed 's/^/     /' | tee -a "$summary"
  return $rc
}

if [[ $mode == gpu ]]; then
  device=cuda
  python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null ||
    die "python3's torch sees no CUDA device (a CUDA torch wheel is needed)"
  command -v cmake >/dev/null || die "cmake not found"
  [[ -d ${TWINS_DEPS:-deps}/usr || -f /usr/src/googletest/CMakeLists.txt ]] ||
    die "no dependency folder (run scripts/gpu-check.sh --make-deps on a Debian machine and copy deps/ along)"
  twin_run=$src/build-cuda/twin-run
  {
    echo "gpu-check on $(hostname), $(date -Is)"
    nvidia-smi -L
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
    nvcc --version | tail -1
  } 2>&1 | tee -a "$summary" || true
  steps_mod=1500 steps_charlm=100 steps_table9=() charlm_shape=() quick=()
  phase "build against the wheel's LibTorch (build-cuda/)" \
    bash -c "scripts/build-cuda.sh build-cuda >'$out/build.log' 2>&1"
  [[ -x $twin_run ]] || { say "FAIL no build-cuda/twin-run (see build.log)"; exit 1; }
  phase "test suite (ctest, CUDA build)" \
    bash -c "ctest --test-dir build-cuda -j '$(nproc)' --output-on-failure >'$out/ctest.log' 2>&1"
  tail -3 "$out/ctest.log" | sed 's/^/     /' | tee -a "$summary"
else
  device=cpu
  twin_run=${TWIN_RUN:-$src/build/twin-run}
  [[ -x $twin_run ]] || die "no twin-run at $twin_run (build first: ./setup.sh, or set TWIN_RUN)"
  twin_run=$(realpath "$twin_run")
  echo "gpu-check CPU part on $(hostname), $(date -Is): --device cpu, float64, few steps" |
    tee -a "$summary"
  # The same sets, shortened (and the char-LM shrunk) to run in seconds.
  # The bench part only checks that the rows run there: two mod47 rows.
  steps_mod=20 steps_charlm=3 steps_table9=(--steps 5)
  quick=(--quick --rows mod47-f32,mod47-f64)
  charlm_shape=(--depth 2 --d-model 64 --heads 4 --ctx 32 --batch 8)
fi

# ---------------------------------------------------------------------------
# The runs and their checks.
cd "$out"
run_and_check() {  # LABEL PAIRS twin-run arguments...
  local label=$1 pairs=$2; shift 2
  "$twin_run" "$@" >"$label.log" 2>&1 || { echo "twin-run failed (see $label.log)"; return 1; }
  check "$label.jsonl" "$label" "$pairs"
}
phase "Table-3 set, mod47, $device float64, $steps_mod steps" \
  run_and_check "table3-$device" 7 --task mod47 --device "$device" \
  --dtype float64 --steps "$steps_mod" --quiet --out "table3-$device.jsonl"
phase "Table-3 set, char-LM, $device float64, $steps_charlm steps" \
  run_and_check "charlm-$device" 7 --task charlm --device "$device" \
  --dtype float64 --steps "$steps_charlm" ${charlm_shape[@]+"${charlm_shape[@]}"} \
  --quiet --out "charlm-$device.jsonl"
phase "table table9-mod47, $device ${steps_table9[*]:-1500 steps}" \
  run_and_check "table9-mod47-$device" 18 table table9-mod47 --device "$device" \
  ${steps_table9[@]+"${steps_table9[@]}"} --jobs 2 --quiet \
  --out "table9-mod47-$device.jsonl"
if "$twin_run" bench --help 2>/dev/null | grep -q -- '--device'; then
  phase "bench rows on $device" bash -c "'$twin_run' bench --device '$device' \
    ${quick[*]:-} --out bench-$device.json >bench-$device.log 2>&1"
else
  say "skip bench: this twin-run's bench has no --device option (CPU rows only)"
fi

total=$(since "$start_all")
if ((failed)); then
  say "gpu-check: FAILED ($mode part, $total); records and logs in $out"
  exit 1
fi
say "gpu-check: PASSED ($mode part, $total); records and logs in $out"
