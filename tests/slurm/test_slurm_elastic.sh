#!/bin/sh
# test_slurm_elastic.sh - jobscripts/train-elastic.sbatch loses a node and
# goes on. On the private 3-node cluster of network namespaces of
# test_slurm_multinode.sh (slurm_lib.sh builds it; that test's header says
# why namespaces), a dp=3 x pp=2 x tp=2 job (3 nodes x 4 tasks, 12 ranks,
# the tiny deck, fp32, a checkpoint every 2 steps) loses node gtn3 while it
# trains: kill -9 of the gridtrain ranks in gtn3's namespace, then its
# slurmd killed. srun -K1 ends the step; elastic.sh probes the nodes, finds
# gtn3 dead, and starts the step again on gtn1 and gtn2 with dp=2 x pp=2 x
# tp=2 (3 micro-batches of 2 sequences instead of 2: the same global batch
# of 12) from the newest checkpoint.
#
# Checks:
#   a. cluster: 3 nodes idle;
#   b. the job starts at dp=3 on 3 nodes, logs the failure, restarts once
#      at dp=2 on gtn1 and gtn2, resumes from a checkpoint and completes;
#   c. every step's loss and gradient norm (the rerun's where a step ran
#      twice) equal those of an uninterrupted run of the same 12-rank
#      layout (mpiexec, outside Slurm) within 1e-5 relative: the steps
#      after the restart run at dp=2;
#   d. the time from the kill to the first step after the restart is at
#      most 60 s, and the steps lost (done before the kill, done again after
#      it) at most lost_max (the checkpoint interval). Both are printed
#      (docs/reliability.md, "Elastic recovery", has the measured values).
# The state recovered from: the node-local tier ([checkpoint] local_dir,
# every 2 steps, partner = on). The "nodes" share the host's /dev/shm, so
# each takes its own directory (local_dir ends in %h, the host name): the
# survivors never see gtn3's own parts and must take the partner copies of
# them that gtn1 and gtn2 keep; the resume line must say so. No global
# checkpoint is written before the end of the run. The two lines marked
# "state:" below choose the tier (the global checkpoint: every = 2, and no
# local_dir).
# Skipped (exit 0) when Slurm, munge or iproute2 is missing, when not root,
# or when network namespaces cannot be made; a watchdog ends the test after
# 150 s. Takes 45-100 s on 2 cores (busy with other work: load 12-20).
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"
# shellcheck source=tests/slurm/slurm_lib.sh
. "$GT_SRCDIR/tests/slurm/slurm_lib.sh"

ns_test_begin 3 sinfo bash
up_title="a private 3-node Slurm cluster in network namespaces comes up"
t_start=$(now)

# ---- tear-down and watchdog --------------------------------------------------------
watchdog_pid=""
ref_pid=""
ckdir=""
# shellcheck disable=SC2317 # (called from the trap)
cleanup() {
  set +e
  # the watchdog first: its TERM would end the tear-down half way
  trap '' HUP INT TERM
  [ -n "$watchdog_pid" ] && kill "$watchdog_pid" 2>/dev/null
  [ -n "$ref_pid" ] && kill "$ref_pid" 2>/dev/null
  ns_cleanup
  case $ckdir in /dev/shm/gt-el.*) rm -rf "$ckdir" ;; esac
}
trap cleanup EXIT
trap '[ -f "$C/watchdog.fired" ] && echo "not ok - the test ran over 150 s and was stopped"; exit 1' \
  HUP INT TERM
(
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep 150 &
  s=$!
  wait "$s" && touch "$C/watchdog.fired" && kill -TERM $$
) </dev/null >/dev/null 2>&1 &
watchdog_pid=$!

if ! ns_network; then
  echo "1..0 # SKIP $ns_skip"
  exit 0
fi

# ---- the runs' settings, and the uninterrupted run ----------------------------------
# 8 steps of the tiny deck, 1F1B over 2 micro-batches of 2 sequences at
# dp=3; the node-local state every 2 steps (in /dev/shm when it can be
# written). The learning-rate schedule depends on [run] steps: the
# reference runs as many. Slurm's step start-up costs 3-10 s; the
# uninterrupted run (mpiexec, 12 ranks) runs while the cluster comes up.
steps=8
data="$tmp/genesis.h5"
make_dataset "$data" || bail "cannot make the dataset"
common="data.train=$data data.microbatches=2 run.steps=$steps run.log_every=1 parallel.wait=yield"
layout="grid.pp=2 grid.tp=2"
ckdir=$(mktemp -d /dev/shm/gt-el.XXXXXX 2>/dev/null) || { ckdir="$tmp/e/ck" && mkdir -p "$ckdir"; }
# state: the checkpoint keys of the job
ckpt="checkpoint.local_dir=$ckdir/local-%h checkpoint.local_every=2 checkpoint.partner=on"
# state: the steps a failure may cost at most (the interval of the newest state)
lost_max=2
# The job script picks OpenBLAS's kernels so (train-multinode.sbatch): the
# uninterrupted run takes the same.
core=${OPENBLAS_CORETYPE:-}
[ -z "${OPENBLAS_CORETYPE+set}" ] && grep -q avx512f /proc/cpuinfo && core=SkylakeX
# shellcheck disable=SC2086 # $common, $layout: several words
run_mpi 12 120 env ${core:+OPENBLAS_CORETYPE=$core} "$GT_BIN" train "$deck" $common $layout \
  run.metrics="$tmp/ref.jsonl" >"$tmp/ref.out" 2>&1 &
ref_pid=$!

# ---- the cluster ---------------------------------------------------------------------
start_munged || bail "$up_err"
# Short timers: slurmctld pings the nodes every SlurmdTimeout / 3 s and
# marks one DOWN that did not answer for SlurmdTimeout; the job (--no-kill)
# goes on and completes once gtn3 is DOWN (its epilog cannot run). When a
# rank dies, srun -K1 sends SIGTERM to the others (gridtrain's ranks then
# wait for the dead ones at the next step boundary) and SIGKILL KillWait
# seconds later (Slurm's default 30): that wait is part of the recovery.
export SLURM_CONF="$C/slurm.conf"
{
  ns_slurm_conf gtelastic "a private 3-node cluster in network namespaces: tests/slurm/test_slurm_elastic.sh"
  cat <<EOF
SlurmdTimeout=6
KillWait=2
JobRequeue=1
EOF
} >"$SLURM_CONF"
wait_munged || up_fail "$up_err"
t_up=$(now)
ns_start_daemons
wait_idle 3 ||
  up_fail "${up_err:-not 3 idle nodes after 30 s: $(in_ctl sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')}"
ok 0 "$up_title (idle after $(elapsed_since "$t_up") s)"

wait "$ref_pid"
ref_status=$?
ref_pid=""
diag "the uninterrupted run (mpiexec, 12 ranks): status $ref_status"
[ "$ref_status" -eq 0 ] || tail_log "$tmp/ref.out" 15

# ---- b. the job loses gtn3 ----------------------------------------------------------
mkdir -p "$tmp/e"
out="$tmp/e/el.out"
export GRIDTRAIN="$GT_BIN"
t_e=$(now)
# shellcheck disable=SC2086 # $common, $layout, $ckpt: several words
# Rank 8, the first of gtn3, dies (SIGKILL) in the forward of step 5
# whatever the speed of the machine; the test then kills gtn3's other
# ranks and its slurmd. The 8-rank rerun has no rank 8.
id=$(cd "$tmp/e" && in_ctl env GT_PROBE_TIMEOUT=5 GT_ELASTIC_TRIES=2 GT_CHECKPOINT_DIR="$ckdir" \
  GT_FAULT=kill:rank=8:step=5:op=forward sbatch --parsable \
  -J gt-el -N 3 --ntasks-per-node=4 --cpus-per-task=1 -o el.out \
  "$jobs/train-elastic.sbatch" "$deck" $common $layout $ckpt)
id=${id%%;*}
# when rank 8 is gone (gtn3 then runs 3 of its 4 ranks), waiting 90 s at most
n3_ranks() {
  n=0
  for p in $(ip netns pids "gt$$-n3" 2>/dev/null); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gridtrain ] && n=$((n + 1))
  done
  echo $n
}
i=0
seen=0
while [ $i -lt 900 ]; do
  n=$(n3_ranks)
  [ "$n" -eq 4 ] && seen=1
  [ "$seen" -eq 1 ] && [ "$n" -lt 4 ] && break
  sleep 0.1
  i=$((i + 1))
done
killed=""
for p in $(ip netns pids "gt$$-n3" 2>/dev/null); do
  if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gridtrain ]; then
    kill -9 "$p" 2>/dev/null && killed="$killed $p"
  fi
done
t_kill=$(now)
# slurmd of gtn3: the last of slurmd_pids
for p in $slurmd_pids; do gtn3_slurmd=$p; done
# (the shell's "Killed" notice of its child goes nowhere)
exec 3>&2 2>/dev/null
kill -9 "$gtn3_slurmd"
wait "$gtn3_slurmd"
exec 2>&3 3>&-
reached=$(sed -n "s|^step \([0-9]*\)/$steps .*|\1|p" "$out" | tail -n 1)
diag "b. job $id: killed the ranks of gtn3 (PIDs$killed) at step ${reached:-?}," \
  "$(elapsed_since "$t_e") s in; killed its slurmd"
# the first step line after the restart line, and when it came
i=0
first=""
while [ -z "$first" ] && [ $i -lt 900 ]; do
  first=$(awk '/^elastic: .* restart 1 of / { r = 1 } r && /^step [0-9]+\// { print $2; exit }' "$out" 2>/dev/null)
  [ -n "$first" ] && break
  case $(job_field "$id" JobState) in RUNNING | PENDING | CONFIGURING | "") ;; *) break ;; esac
  sleep 0.1
  i=$((i + 1))
done
recovery=$(elapsed_since "$t_kill")
state=$(wait_job "$id" 90)
diag "b. job $id: $state after $(elapsed_since "$t_e") s"
grep -q "^elastic: .* start: dp=3 x pp=2 x tp=2 on 3 node(s) (gtn1,gtn2,gtn3)" "$out" &&
  grep -q "^elastic: .* failure: the training step ended with status" "$out" &&
  grep -q "^elastic: .* node gtn3 is not healthy" "$out" &&
  grep -q "^elastic: .* restart 1 of 2, .* dp=2 x pp=2 x tp=2 on 2 node(s) (gtn1,gtn2) x 4 tasks, global batch 12 = dp 2 x 3 micro-batches of 2" "$out" &&
  grep -q "^  ranks  *8 (4 per node" "$out" &&
  [ "$(grep -c "^gridtrain: done: " "$out")" -eq 1 ] && [ "$state" = COMPLETED ]
ok $? "the job loses gtn3, restarts at dp=2 on gtn1 and gtn2 with the same global batch and completes ($state)"
resumed=$(sed -n -e 's/^gridtrain: resumed .* at step \([0-9]*\).*/\1/p' \
  -e 's/^gridtrain: resumed from the node-local state of step \([0-9]*\).*/\1/p' "$out" | tail -n 1)
[ -n "$resumed" ]
ok $? "the restarted step resumes from a checkpoint (at step ${resumed:-none})"
case $ckpt in
*partner=on*)
  grep -q "^gridtrain: resumed from the node-local state of step .* parts from partner copies" "$out"
  ok $? "the lost node's parts come from their partner copies on gtn1 and gtn2: $(grep "^gridtrain: resumed" "$out" | tail -n 1)"
  ;;
esac

# ---- c. the losses -------------------------------------------------------------------
# Steps of the metrics file: the last record of a step wins (the rerun's).
"$PYTHON_REF" - "$tmp/ref.jsonl" "$tmp/e/runs/job-$id.jsonl" "${resumed:-0}" <<'PY'
import json, sys
def load(path):
    got = {}
    for r in map(json.loads, open(path)):
        if not r.get("summary"):
            got[r["step"]] = (r["loss"], r["grad_norm"])
    return got
try:
    ref, got = load(sys.argv[1]), load(sys.argv[2])
except OSError as e:
    print("# %s" % e)
    sys.exit(1)
if not ref or sorted(ref) != sorted(got):
    print("# steps %s vs %s" % (sorted(ref), sorted(got)))
    sys.exit(1)
after = [s for s in ref if s >= int(sys.argv[3])]
worst = max(abs(a - b) / abs(a) for s in ref for a, b in zip(ref[s], got[s]))
late = max(abs(a - b) / abs(a) for s in after for a, b in zip(ref[s], got[s]))
print("# %d steps, worst relative difference %.2e; %d steps at dp=2, worst %.2e"
      % (len(ref), worst, len(after), late))
sys.exit(0 if worst <= 1e-5 and after else 1)
PY
ok $? "every step's loss and gradient norm, before the failure and after it at dp=2, equal the uninterrupted run's within 1e-5"

# ---- d. time and steps lost ------------------------------------------------------------
lost=$((${reached:-0} + 1 - ${resumed:-0}))
diag "d. from the kill to the first step after the restart (step ${first:-none}): $recovery s;" \
  "steps lost: $lost (done up to step ${reached:-?} before the kill, resumed at step ${resumed:-?})"
# the parts: kill to the failure seen (elastic.sh's epoch), the probes and
# the choice (its restart line), then the start-up and the checkpoint read
t_fail=$(sed -n 's/^elastic: .* failure: .*(at epoch \([0-9.]*\) s)$/\1/p' "$out" | head -n 1)
probes=$(sed -n 's/^elastic: .* restart 1 of [0-9]*, \([0-9.]*\) s after the failure.*/\1/p' "$out")
[ -n "$t_fail" ] && [ -n "$probes" ] &&
  diag "d. the parts: kill to failure seen $(awk -v a="$t_kill" -v b="$t_fail" 'BEGIN { printf "%.1f", b - a }') s," \
    "probes and layout $probes s, start-up, resume and first step" \
    "$(awk -v a="$t_kill" -v b="$t_fail" -v p="$probes" -v r="$recovery" 'BEGIN { printf "%.1f", r - (b - a) - p }') s"
[ -n "$first" ] && awk -v t="$recovery" 'BEGIN { exit !(t <= 60) }'
ok $? "the first step after the restart comes at most 60 s after the kill ($recovery s)"
[ -n "$resumed" ] && [ "$lost" -ge 0 ] && [ "$lost" -le "$lost_max" ]
ok $? "at most $lost_max steps lost ($lost)"
if [ "$state" != COMPLETED ] || [ -z "$resumed" ]; then
  job_diag "$id" "$out"
fi
diag "the whole test took $(elapsed_since "$t_start") s"

done_testing
