#!/usr/bin/env bash
# End-to-end: a table spread over shards by a real scheduler gives exactly the
# records of one process running the whole table, and aggregates to the whole
# table.
#
#   cluster_shards.sh slurm    TWIN_RUN SOURCE_DIR
#   cluster_shards.sh parallel TWIN_RUN SOURCE_DIR
#   cluster_shards.sh requeue  TWIN_RUN SOURCE_DIR
#
# slurm: starts a one-node SLURM cluster (munged, slurmctld, slurmd) whose
# state, sockets, logs and ports belong to this run alone, submits
# SOURCE_DIR/scripts/slurm/table-array.sbatch as a 3-task job array over
# `table3 --steps 20`, then the aggregate as a job that depends on the array
# (afterok), and waits for it (sbatch --wait). Needs root (slurmd runs jobs
# as root) and Debian's slurm-wlm and munge.
# parallel: the same shards run by GNU parallel on this machine, the way the
# README runs them over ssh hosts, then aggregated.
# requeue: on the same kind of cluster, the sbatch script as one task with a
# one-minute time limit, shorter than its work (table3 --steps $REQUEUE_STEPS
# on one CPU), and its USR1 30 s before the limit: the task must checkpoint,
# requeue itself, resume, and end with the single-process records.
#
# Either way the union of the shard files must hold exactly the records of
# `twin-run table table3 --steps 20` in one process, every field but the
# timing ones bitwise (compare_records.py), and the aggregate must list all
# seven pairs. Exit 77 (CTest's skip) with one line when the tools are
# missing. Everything lives in one scratch directory, removed at the end
# (kept, with its path printed, when TWINS_KEEP_SCRATCH=1); every daemon
# started here is stopped by its PID on any exit.
set -euo pipefail

usage="usage: cluster_shards.sh slurm|parallel|requeue TWIN_RUN SOURCE_DIR"
(($# == 3)) || { echo "$usage" >&2; exit 2; }
mode=$1 twin_run=$2 src=$3
case $mode in slurm | parallel | requeue) ;; *) echo "cluster_shards: unknown mode '$mode'; $usage" >&2; exit 2 ;; esac
[[ -x $twin_run ]] || { echo "cluster_shards: no executable twin-run at '$twin_run'" >&2; exit 2; }
[[ -f $src/scripts/slurm/table-array.sbatch ]] ||
  { echo "cluster_shards: no scripts/slurm/table-array.sbatch under '$src'" >&2; exit 2; }
twin_run=$(realpath "$twin_run")
compare=$src/tests/compare_records.py

skip() { echo "cluster_shards: skipped: $*"; exit 77; }
command -v python3 >/dev/null || skip "python3 is not installed (it compares the records)"
if [[ $mode != parallel ]]; then
  ((EUID == 0)) || skip "needs root (slurmd runs the jobs as root)"
  for tool in munged slurmctld slurmd sbatch sinfo scancel scontrol setpriv; do
    command -v "$tool" >/dev/null ||
      skip "$tool not found (apt-get install slurm-wlm munge)"
  done
  id munge >/dev/null 2>&1 || skip "no munge user (apt-get install munge)"
else
  command -v parallel >/dev/null || skip "GNU parallel not found (apt-get install parallel)"
fi

table=table3 steps=20 shards=3
if [[ $mode == requeue ]]; then
  # About 85 s of work on one CPU here (7 pairs of 200 steps), so that the
  # signal 30 s into each one-minute attempt ends it at least twice.
  steps=${REQUEUE_STEPS:-200} shards=1
fi
stem=$table-steps$steps
scratch=$(mktemp -d "${TMPDIR:-/tmp}/twins-$mode.XXXXXX")
chmod 711 "$scratch"  # the munge user must reach its own directory inside
pids=()
status=1

cleanup() {
  set +e
  if [[ $mode != parallel && -n ${SLURM_CONF:-} ]]; then
    # Jobs still queued or running after a failure are cancelled while the
    # daemons still run (slurmd ends their steps), then the daemons stop.
    timeout 10 scancel --full --quiet --user=root 2>/dev/null
    for _ in $(seq 50); do
      [[ -z $(timeout 5 squeue -h 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  # Only a PID that is still a child of this script is signalled, so an
  # exited daemon's PID reused by another process is left alone.
  ours() { [[ $(ps -o ppid= -p "$1" 2>/dev/null | tr -d ' ') == "$$" ]]; }
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    ours "${pids[i]}" && kill "${pids[i]}"
  done
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    for _ in $(seq 50); do ours "${pids[i]}" || break; sleep 0.1; done
    ours "${pids[i]}" && kill -KILL "${pids[i]}"
    wait "${pids[i]}" 2>/dev/null
  done
  if ((status != 0)); then
    for log in "$scratch"/*/*.log "$scratch"/*/runs/*.log; do
      [[ -f $log ]] || continue
      echo "--- $log (last 15 lines)"; tail -15 "$log"
    done
  fi
  if [[ ${TWINS_KEEP_SCRATCH:-0} == 1 ]]; then
    echo "cluster_shards: scratch kept in $scratch"
  else
    rm -rf "$scratch"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { echo "cluster_shards: FAILED: $*" >&2; exit 1; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", b - a }'; }

# ---------------------------------------------------------------------------
# The reference: the whole table in one process. The requeued task holds
# one of the test's two CPUs and mostly waits on the scheduler, so there the
# reference runs beside it on the other (one thread: the records do not
# depend on the thread count) and is waited for before the comparison.
reference=$scratch/single/runs/$stem.jsonl
mkdir -p "$scratch/single"
single() {
  local t0=$EPOCHREALTIME
  (cd "$scratch/single" && "$twin_run" table "$table" --steps "$steps" "$@" --quiet >/dev/null) ||
    fail "the single-process run failed"
  echo "cluster_shards: single-process $table --steps $steps: $(wc -l <"$reference") records, $(elapsed "$t0")"
}
if [[ $mode == requeue ]]; then
  single --jobs 1 --threads 1 &
  single_pid=$!
  pids+=("$single_pid")
else
  single --jobs 2
fi

run=$scratch/shards
mkdir -p "$run/runs"
shard_files=()
for ((i = 1; i <= shards; i++)); do
  shard_files+=("runs/$stem-shard${i}of$shards.jsonl")
done

# Waits up to $1 seconds for the command "${@:2}" to succeed.
wait_for() {
  local limit=$1; shift
  local start=$SECONDS
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - start < limit)) || return 1
    sleep 0.2
  done
}

if [[ $mode != parallel ]]; then
  # -------------------------------------------------------------------------
  # A one-node cluster of this run's own: munged on a socket in the scratch
  # directory, slurmctld and slurmd on ports that were free a moment ago, so
  # two runs at once (or a real cluster on this machine) do not meet.
  t0=$EPOCHREALTIME
  m=$scratch/munge
  mkdir -m 711 "$m"  # clients need to reach the socket
  head -c 1024 /dev/urandom >"$m/munge.key"
  chmod 400 "$m/munge.key"
  chown -R munge:munge "$m"
  # The daemons run in sessions of their own so that a ctrl-c reaches this
  # script alone, whose cleanup then stops them in order; setsid does not
  # fork here (a background job is no group leader), so $! is the daemon.
  setsid setpriv --reuid=munge --regid=munge --init-groups \
    munged --foreground --socket="$m/munge.socket" --key-file="$m/munge.key" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" \
    --seed-file="$m/munged.seed" >"$m/munged.out" 2>&1 &
  pids+=($!)
  wait_for 10 munge --socket="$m/munge.socket" --no-input ||
    fail "munged did not start (log: $m/munged.log)"

  read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
  host=$(hostname -s)
  c=$scratch/cluster
  mkdir -p "$c/state" "$c/spool"
  export SLURM_CONF=$c/slurm.conf
  cat >"$SLURM_CONF" <<EOF
ClusterName=twins$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$m/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
DependencyParameters=kill_invalid_depend
StateSaveLocation=$c/state
SlurmdSpoolDir=$c/spool
SlurmctldPidFile=$c/slurmctld.pid
SlurmdPidFile=$c/slurmd.pid
SlurmctldLogFile=$c/slurmctld.log
SlurmdLogFile=$c/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=twins Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  setsid slurmctld -D -i -f "$SLURM_CONF" >"$c/slurmctld.out" 2>&1 &
  pids+=($!)
  setsid slurmd -D -f "$SLURM_CONF" -N "$host" >"$c/slurmd.out" 2>&1 &
  pids+=($!)
  node_idle() { [[ $(sinfo -h -N -o %t 2>/dev/null) == idle ]]; }
  wait_for 30 node_idle || fail "the node did not come up idle: $(sinfo -N 2>&1 | tail -1)"
  echo "cluster_shards: one-node cluster up (ports $ctld_port, $slurmd_port), $(elapsed "$t0")"
fi

if [[ $mode == requeue ]]; then
  # -------------------------------------------------------------------------
  # One task whose work outlasts its time limit. The script's own
  # --signal=B:USR1@300 is replaced by one that fits a one-minute limit.
  t0=$EPOCHREALTIME
  cd "$run"
  export TWIN_RUN=$twin_run
  job=$(sbatch --parsable --array=1-1 --cpus-per-task=1 --time=1 \
    --signal=B:USR1@30 "$src/scripts/slurm/table-array.sbatch" \
    "$table" --steps "$steps")
  job=${job%%;*}
  [[ $job =~ ^[0-9]+$ ]] || fail "sbatch did not return a job id: $job"
  state() { scontrol -o show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1; }
  restarts() { scontrol -o show job "$job" 2>/dev/null | grep -o 'Restarts=[0-9]*' | head -1; }
  reason() { scontrol -o show job "$job" 2>/dev/null | grep -o 'Reason=[A-Za-z_]*' | head -1; }
  # slurmctld makes a requeued job wait two minutes (its BeginTime: the old
  # attempt's credential lifetime) before it may start again. That wait
  # tests nothing of ours, so each one is cut short here (StartTime=now) —
  # but only 5 s after the requeue was seen, with the node idle again:
  # slurmd refuses a launch within the second its old credential was
  # revoked ("Job credential revoked"; seen here when released at once).
  # An attempt then costs its ~30 s of work and ~10 s, not 150 s.
  done_=0 released=0 seen=-1
  for _ in $(seq 400); do  # 10 minutes at most
    case $(state) in
      JobState=COMPLETED) done_=1; break ;;
      JobState=FAILED | JobState=CANCELLED | JobState=TIMEOUT | JobState=NODE_FAIL | JobState=OUT_OF_MEMORY)
        fail "job $job ended $(state) after $(restarts)" ;;
      JobState=PENDING)
        n=$(restarts); n=${n#Restarts=}
        if [[ $(reason) == Reason=BeginTime && ${n:-0} -gt $released ]]; then
          ((seen >= 0)) || seen=$SECONDS
          if ((SECONDS - seen >= 5)) && node_idle &&
            scontrol update JobId="$job" StartTime=now >/dev/null 2>&1; then
            released=$n seen=-1
          fi
        fi ;;
    esac
    sleep 1.5
  done
  ((done_)) || fail "job $job did not complete in 10 minutes ($(state), $(restarts))"
  n=$(restarts); n=${n#Restarts=}
  ((n >= 1)) || fail "job $job completed without a requeue: its work fit in the time limit"
  log=$(ls runs/slurm-*.log | head -1)
  # A group resumes from its checkpoint, unless every stop came just as a
  # group was built, before its first step (it says "nothing to save"; seen
  # once in CI when a group ended at the signal): the records are then
  # compared all the same.
  resumed="resumed"
  if ! grep -q "resumed at step" "$log"; then
    grep -q "stopped before its first step; nothing to save" "$log" ||
      fail "no group resumed from a checkpoint ($log: $(tail -3 "$log"))"
    resumed="restarted a group that had not stepped (nothing to resume)"
  fi
  [[ ! -e ${shard_files[0]}.ckpt ]] || fail "checkpoints left behind in ${shard_files[0]}.ckpt"
  echo "cluster_shards: job $job timed out into $n requeue(s), $resumed and completed, $(elapsed "$t0")"
  wait "$single_pid" || fail "the single-process run failed"
  python3 "$compare" "$reference" "${shard_files[@]}" ||
    fail "the requeued task's records are not the single-process records"
  status=0
  echo "cluster_shards: PASSED (requeue)"
  exit 0
elif [[ $mode == slurm ]]; then

  # -------------------------------------------------------------------------
  # The array and the dependent aggregate, submitted the way a person would,
  # from the directory that gets runs/; TWIN_RUN names the binary to run.
  t0=$EPOCHREALTIME
  cd "$run"
  export TWIN_RUN=$twin_run
  array=$(sbatch --parsable --array=1-$shards \
    "$src/scripts/slurm/table-array.sbatch" "$table" --steps "$steps")
  array=${array%%;*}
  [[ $array =~ ^[0-9]+$ ]] || fail "sbatch did not return a job id: $array"
  # If a shard fails, the dependency can never be met and kill_invalid_depend
  # cancels the aggregate, so the wait below ends with an error.
  # The wait runs in the background so that a signal reaches the trap at
  # once (bash runs traps only between foreground commands).
  aggregate_cmd="'$twin_run' table --aggregate ${shard_files[*]}"
  timeout 600 sbatch --parsable --wait --dependency="afterok:$array" \
    --job-name=twins-aggregate --output="runs/aggregate-%j.log" \
    --wrap "$aggregate_cmd" >/dev/null &
  waiter=$!
  pids+=("$waiter")
  rc=0
  wait "$waiter" || rc=$?
  unset 'pids[-1]'
  ((rc == 0)) || fail "the aggregate job (after array job $array) did not succeed"
  echo "cluster_shards: array job $array ($shards tasks) and its afterok aggregate done, $(elapsed "$t0")"
else
  # -------------------------------------------------------------------------
  # The README's GNU parallel line without --sshloginfile: the shards run as
  # local processes. HOME moves into the scratch directory because parallel
  # keeps files under ~/.parallel.
  t0=$EPOCHREALTIME
  cd "$run"
  HOME=$run parallel --will-cite --halt now,fail=1 \
    "$twin_run" table "$table" --steps "$steps" --shard "{}/$shards" --jobs 1 --quiet \
    ::: $(seq "$shards") || fail "a GNU parallel shard failed"
  "$twin_run" table --aggregate "${shard_files[@]}" >runs/aggregate.log 2>&1 ||
    fail "the aggregate of the shard files failed (runs/aggregate.log)"
  echo "cluster_shards: $shards shards under GNU parallel and their aggregate done, $(elapsed "$t0")"
fi

# ---------------------------------------------------------------------------
# What the shards wrote.
for f in "${shard_files[@]}"; do
  [[ -s $f ]] || fail "shard file $f is missing or empty"
done
python3 "$compare" "$reference" "${shard_files[@]}" ||
  fail "the shard records are not the single-process records"

# The aggregate of the shards is the table of one process: its CSV (every
# figure, one a line) is the same bytes as the one the single-process run
# wrote, and its Markdown lists every pair of the table. (Its name is
# whatever the binary gives a merge: the one .md here that is not a shard's.)
merged=()
for md in runs/*.md; do
  [[ $md == *-shard*of*.md ]] || merged+=("$md")
done
((${#merged[@]} == 1)) || fail "want one aggregate .md beside the shards, found: ${merged[*]:-none}"
merged_md=${merged[0]}
cmp -s "${merged_md%.md}.csv" "${reference%.jsonl}.csv" ||
  fail "the aggregate ${merged_md%.md}.csv differs from the single-process one: $(
    diff "${merged_md%.md}.csv" "${reference%.jsonl}.csv" | head -5)"
if grep -q "not recorded yet" "$merged_md"; then
  fail "the aggregate misses pairs: $(grep "not recorded yet" "$merged_md")"
fi
python3 - "$reference" "$merged_md" <<'EOF' || fail "the aggregate does not list all seven pairs"
import json, re, sys
pairs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
lines = open(sys.argv[2]).read().splitlines()
missing = []
for p in pairs:
    # A pair's row: optimizer, twin label (identity twins are "A=I"; noise
    # twins carry their scale), init seed, twin seed.
    label = {"identity": "A=I"}.get(p["twin"], p["twin"])
    row = re.compile(r"^\s*{}\s+{}\s+(\S+\s+)?{}\s+{}\s".format(
        re.escape(p["opt"]), re.escape(label), p["init_seed"],
        "-" if p["twin_seed"] is None else p["twin_seed"]))
    if not any(row.match(l) for l in lines):
        missing.append(p["key"])
if len(pairs) != 7 or missing:
    print(f"cluster_shards: {len(pairs)} pairs in the reference; "
          f"not listed in the aggregate: {missing}")
    sys.exit(1)
print(f"cluster_shards: the aggregate's figures equal the single-process "
      f"ones and it lists all {len(pairs)} pairs")
EOF
status=0
echo "cluster_shards: PASSED ($mode)"
