#!/bin/sh
# test_slurm.sh - the job scripts under a real Slurm: a private single-node
# cluster (munged, slurmctld, slurmd, all on 127.0.0.1 with their own key,
# ports, state and logs under $GT_TMP; the node claims 8 CPUs) runs
#   a. jobscripts/train.sbatch: a 4-rank pp=2 x tp=2 run completes and
#      leaves a checkpoint;
#   d. jobscripts/train-multinode.sbatch (one node): tasks x CPUs per task
#      become ranks x threads; a cuda run without GPUs is refused;
#   c. jobscripts/chain.sh: two dependent jobs run one after the other, the
#      second resuming from the first one's checkpoint;
#   b. jobscripts/train-requeue.sbatch: Slurm's --signal=B:USR1@N reaches the
#      batch shell before the time limit, the script forwards it, gridtrain
#      checkpoints and exits 3, the job requeues itself, resumes and
#      completes with the same per-step losses as an uninterrupted run.
# Skipped (exit 0) when Slurm or munge is not installed, or when not root
# (slurmd must be root); a cluster that does not come up is a failure.
# The daemons are stopped by PID on exit, whatever happens.
# Takes 1.5-2 minutes, most of it the requeue test. The quick tier
# (tests/quick/slurm.sh) runs a. and d. only.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"
# shellcheck source=tests/slurm/slurm_lib.sh
. "$GT_SRCDIR/tests/slurm/slurm_lib.sh"

slurm_test_begin "the Slurm test runs slurmd, which needs root"
node=$(hostname -s)
up_title="a private Slurm cluster comes up"

# ---- the cluster ---------------------------------------------------------------
# On exit, whatever happens: the jobs left are cancelled, the daemons
# stopped by PID (slurm_lib.sh: stop_cluster).
trap 'set +e; stop_cluster' EXIT
trap 'exit 1' HUP INT TERM

# slurmctld and slurmd on two free ports, munge at its own socket.
ports=$(free_ports "$PYTHON_REF") || bail "cannot pick ports"
start_munged || bail "$up_err"
export SLURM_CONF="$cl_dir/slurm.conf"
{
  echo "# a private single-node cluster for tests/slurm/test_slurm.sh"
  slurm_conf gttest "$node(127.0.0.1)" "${ports% *}" "${ports#* }"
  echo "DependencyParameters=kill_invalid_depend"
  echo "JobRequeue=1"
  slurm_conf_node "$node" 8
} >"$SLURM_CONF"

wait_munged || up_fail "$up_err"
t_ctld=$(now)
start_daemons "$node"
wait_idle 1 || up_fail "${up_err:-node $node not idle after 30 s: $(sinfo -h -n "$node" -o %T 2>&1)}"
ok 0 "$up_title (node $node idle after $(elapsed_since "$t_ctld") s)"

data="$tmp/genesis.h5"
make_dataset "$data" || bail "cannot make the dataset"
layout="grid.dp=1 grid.pp=2 grid.tp=2"

# ---- a. train.sbatch: 4 ranks, pp=2 x tp=2 -------------------------------------
# Without checkpoints (GT_CHECKPOINT_DIR empty): c. covers them, and a
# checkpoint of 4 ranks on 2 cores is slow.
t_a=$(now)
mkdir -p "$tmp/a"
# shellcheck disable=SC2086 # $layout: three words
id_a=$(cd "$tmp/a" && GRIDTRAIN="$GT_BIN" GT_CHECKPOINT_DIR='' sbatch --parsable -J gt-a \
  --ntasks=4 -o a.out "$jobs/train.sbatch" "$deck" data.train="$data" $layout run.steps=20 \
  run.log_every=10)
id_a=${id_a%%;*}
state=$(wait_job "$id_a" 120)
[ "$state" = COMPLETED ] && [ "$(job_field "$id_a" ExitCode)" = 0:0 ]
ok $? "train.sbatch: the job completes with exit code 0 ($state)"
[ "$state" = COMPLETED ] || job_diag "$id_a" "$tmp/a/a.out"
grep -q "^  layout  *dp=1 x pp=2 x tp=2 " "$tmp/a/a.out" &&
  grep -q "^  ranks  *4 (4 per node" "$tmp/a/a.out"
ok $? "train.sbatch: srun --mpi=pmi2 makes one world of 4 ranks laid out dp=1 x pp=2 x tp=2"
grep -q "^gridtrain: done: 20 steps" "$tmp/a/a.out" && [ -s "$tmp/a/runs/job-$id_a.jsonl" ]
ok $? "train.sbatch: the done line, metrics in runs/job-$id_a.jsonl"
diag "a. took $(elapsed_since "$t_a") s"

# ---- d. train-multinode.sbatch (on our one node) ---------------------------------
t_d=$(now)
mkdir -p "$tmp/d"
# 4 tasks x 2 CPUs: 2 threads per rank; no checkpoints.
# shellcheck disable=SC2086
id_d=$(cd "$tmp/d" && GRIDTRAIN="$GT_BIN" GT_CHECKPOINT_DIR='' sbatch --parsable -J gt-mn -N 1 \
  --ntasks-per-node=4 --cpus-per-task=2 -o mn.out "$jobs/train-multinode.sbatch" "$deck" \
  data.train="$data" $layout run.steps=10 run.log_every=5)
id_d=${id_d%%;*}
# The CUDA backend wants one GPU per task: without GPUs in the job the
# script stops (status 2) with a message instead of starting the ranks.
id_d2=$(cd "$tmp/d" && GRIDTRAIN="$GT_BIN" GT_DEVICE=cuda sbatch --parsable -J gt-mn-cuda -N 1 \
  --ntasks-per-node=4 -o mn-cuda.out "$jobs/train-multinode.sbatch" "$deck" data.train="$data")
id_d2=${id_d2%%;*}
state=$(wait_job "$id_d" 120)
[ "$state" = COMPLETED ] && grep -q "^  ranks  *4 (4 per node" "$tmp/d/mn.out" &&
  grep -q "^  threads per rank  *2 " "$tmp/d/mn.out" && grep -q "^gridtrain: done: 10 steps" "$tmp/d/mn.out"
ok $? "train-multinode.sbatch: 1 node x 4 tasks x 2 CPUs runs 4 ranks of 2 threads ($state)"
[ "$state" = COMPLETED ] || job_diag "$id_d" "$tmp/d/mn.out"
state=$(wait_job "$id_d2" 60)
[ "$state" = FAILED ] && [ "$(job_field "$id_d2" ExitCode)" = 2:0 ] &&
  grep -q "backend.device=cuda but the job has no GPUs; submit with --gpus-per-task=1" "$tmp/d/mn-cuda.out"
ok $? "train-multinode.sbatch: GT_DEVICE=cuda without GPUs in the job stops with a message ($state)"
[ "$state" = FAILED ] || job_diag "$id_d2" "$tmp/d/mn-cuda.out"
diag "d. took $(elapsed_since "$t_d") s"
if quick_tier; then
  diag "quick tier: c. (chain.sh) and b. (requeue) run in the full tier"
  done_testing
fi

# ---- c. chain.sh: two dependent jobs of train.sbatch ------------------------------
# 2 ranks, tp=2 (the layout of b.): quick, and its step time sizes b.
layout2="grid.dp=1 grid.pp=1 grid.tp=2"
t_c=$(now)
mkdir -p "$tmp/c"
# shellcheck disable=SC2086
(cd "$tmp/c" && GRIDTRAIN="$GT_BIN" "$jobs/chain.sh" -n 2 -J gt-chain --ntasks=2 \
  -o 'chain-%j.out' -- "$deck" data.train="$data" $layout2 run.steps=40 run.log_every=20) \
  >"$tmp/c/chain.log" 2>&1
status=$?
id_c1=$(sed -n 's/^chain: job 1\/2: \([0-9]*\)$/\1/p' "$tmp/c/chain.log")
id_c2=$(sed -n "s/^chain: job 2\\/2: \\([0-9]*\\) after $id_c1\$/\\1/p" "$tmp/c/chain.log")
[ $status -eq 0 ] && [ -n "$id_c1" ] && [ -n "$id_c2" ]
ok $? "chain.sh submits 2 jobs, the second after the first"
[ -n "$id_c2" ] || sed 's/^/# /' "$tmp/c/chain.log"
dep_c2=$(job_field "$id_c2" Dependency)
state1=$(wait_job "$id_c1" 120)
state2=$(wait_job "$id_c2" 120)
end1=$(date -d "$(job_field "$id_c1" EndTime)" +%s 2>/dev/null)
start2=$(date -d "$(job_field "$id_c2" StartTime)" +%s 2>/dev/null)
[ "$state1" = COMPLETED ] && [ "$state2" = COMPLETED ] && [ -n "$end1" ] && [ -n "$start2" ] &&
  [ "$start2" -ge "$end1" ]
ok $? "chain: both jobs complete, the second starts after the first ended ($state1, $state2; dependency ${dep_c2:-?})"
out1="$tmp/c/chain-$id_c1.out"
out2="$tmp/c/chain-$id_c2.out"
grep -q "^gridtrain: done: 40 steps" "$out1" && ! grep -q "resumed from" "$out1" &&
  grep -q "resumed from runs/ckpt-gt-chain/step_00000040.h5" "$out2" && grep -q "^gridtrain: done:" "$out2"
ok $? "chain: job 1 trains 40 steps, job 2 resumes from its checkpoint (same name: runs/ckpt-gt-chain)"
if [ "$state2" != COMPLETED ] || ! grep -q "resumed from" "$out2"; then
  job_diag "$id_c1" "$out1"
  job_diag "$id_c2" "$out2"
fi
diag "c. took $(elapsed_since "$t_c") s"

# ---- b. train-requeue.sbatch: signal, checkpoint, requeue, resume ---------------
# 2 ranks, tp=2, against an uninterrupted run of the same deck and layout.
# When Slurm signals (measured with 22.05): slurmctld checks time limits
# and --signal every 30 s, counted from its start, and sends the signal at
# the first check that finds the job with at most N + 30 s left (early
# rather than late). With --time=1 and --signal=B:USR1@25 that is the first
# check at least 5 s into the job (gridtrain is running by then). The job
# is submitted 9-14 s before a check, so the signal comes ~10 s in, and the
# run must still be training then. After a requeue the next check may
# signal the rerun as well: a second requeue, which is fine. The run is
# sized from a short calibration run of the same deck and layout, alone
# like the job, just before it: c.'s step time (once used) came from a job
# that may have shared the cores with other work, and was seen both 2.2x
# longer than b.'s (280 steps sized for 30 s took 13 s) and, under a load
# that went away, 5x longer (2690 steps sized for 60 s took 12 s): both
# ended before the signal. ~60 s by the calibration's rate: the signal comes
# in time even at twice the speed, and a run twice slower just requeues once
# more.
mkdir -p "$tmp/b"
# shellcheck disable=SC2086
run_mpi 2 120 "$GT_BIN" train "$deck" data.train="$data" $layout2 run.steps=300 \
  run.log_every=1 run.metrics="$tmp/b/cal.jsonl" >"$tmp/b/cal.out" 2>&1
sec_per_step=$("$PYTHON_REF" -c '
import json, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if not r.get("summary")][20:]
print("%.4f" % (sum(ms) / len(ms) / 1000))' "$tmp/b/cal.jsonl" 2>/dev/null)
[ -n "$sec_per_step" ] || sec_per_step=0.05
steps_b=$(awk -v s="$sec_per_step" 'BEGIN { n = int(60 / s); if (n < 200) n = 200; if (n > 50000) n = 50000; print n }')
log_b=$((steps_b / 4))
diag "b. requeue run: $steps_b steps (${sec_per_step} s per step in a 300-step calibration run)"

# The uninterrupted reference first, with mpiexec outside Slurm, alone
# (sharing the two cores with the Slurm job would slow both).
# Bitwise equality needs the same OpenBLAS kernels in both runs: the job
# scripts may pin OPENBLAS_CORETYPE where OpenBLAS alone picks another core
# whose sums round differently, so the reference run takes the core that
# c.'s Slurm job reported.
t_ref=$(now)
core=$(sed -n 's/.*BLAS OpenBLAS [^ ]* (core \([A-Za-z0-9]*\),.*/\1/p' "$out1" | head -n 1)
# shellcheck disable=SC2086
run_mpi 2 300 env ${core:+OPENBLAS_CORETYPE=$core} "$GT_BIN" train "$deck" data.train="$data" $layout2 run.steps="$steps_b" \
  run.log_every="$log_b" run.metrics="$tmp/b/ref.jsonl" >"$tmp/b/ref.out" 2>&1
ref_status=$?
diag "b. reference run: status $ref_status, $(elapsed_since "$t_ref") s"

# Wait (at most 30 s) until the next 30-s check of slurmctld is 9-14 s away.
i=0
while :; do
  to_check=$(awk -v t0="$t_ctld" -v t="$(now)" 'BEGIN { x = (t - t0) % 30; print int(30 - x) }')
  [ "$to_check" -ge 9 ] && [ "$to_check" -le 14 ] && break
  [ $i -ge 70 ] && break
  sleep 0.5
  i=$((i + 1))
done
t_b=$(now)
# shellcheck disable=SC2086
id_b=$(cd "$tmp/b" && GRIDTRAIN="$GT_BIN" sbatch --parsable -J gt-rq --ntasks=2 --time=1 \
  --signal=B:USR1@25 -o rq.out "$jobs/train-requeue.sbatch" "$deck" data.train="$data" \
  $layout2 run.steps="$steps_b" run.log_every="$log_b")
id_b=${id_b%%;*}
state=$(wait_job "$id_b" 600)
rq="$tmp/b/rq.out"
restarts=$(job_field "$id_b" Restarts)
diag "b. requeue job $id_b: $state after $(elapsed_since "$t_b") s, restarts ${restarts:-?}"
grep -E "^train-requeue: .* (start|caught|ended)" "$rq" | sed 's/^/#   /'

grep -q "^train-requeue: .* caught SIGUSR1; forwarding SIGUSR1" "$rq"
ok $? "requeue: the batch shell gets SIGUSR1 from --signal=B:USR1@25 before the time limit and forwards it"
grep -q "^gridtrain: requeue: caught SIGUSR1: checkpoint .*step_[0-9]*\.h5 written at step" "$rq" &&
  grep -q "^train-requeue: .* training step ended with status 3$" "$rq"
ok $? "requeue: every rank stops, gridtrain writes a checkpoint and exits with status 3"
grep -q "^train-requeue: .* checkpointed; requeued" "$rq" &&
  grep -q "^train-requeue: .* start (SLURM_RESTART_COUNT=1)" "$rq" && [ "${restarts:-0}" -ge 1 ]
ok $? "requeue: the script requeues the job; it runs again with SLURM_RESTART_COUNT=1 (Restarts=${restarts:-?})"
grep -q "^gridtrain: resumed from .*step_[0-9]*\.h5 at step [1-9]" "$rq"
ok $? "requeue: the rerun resumes from the checkpoint"
[ "$state" = COMPLETED ] && grep -q "^train-requeue: .* training finished$" "$rq" &&
  grep -q "^gridtrain: done:" "$rq"
ok $? "requeue: the job completes ($state)"
loss_b=$(sed -n 's/^gridtrain: done: .*final loss \([0-9.]*\).*/\1/p' "$rq" | tail -n 1)
loss_ref=$(sed -n 's/^gridtrain: done: .*final loss \([0-9.]*\).*/\1/p' "$tmp/b/ref.out")
[ $ref_status -eq 0 ] && [ -n "$loss_b" ] && [ "$loss_b" = "$loss_ref" ]
ok $? "requeue: final loss equals the uninterrupted run's ($loss_b vs $loss_ref)"
# Per step: the metrics of all (re)starts together against the reference.
"$PYTHON_REF" - "$tmp/b/ref.jsonl" "$steps_b" "$tmp/b/runs/job-$id_b-"*.jsonl <<'PY'
import json, sys
def steps(path):
    return [r for r in map(json.loads, open(path)) if not r.get("summary")]
ref = {r["step"]: r for r in steps(sys.argv[1])}
n = int(sys.argv[2])
got = {}
for path in sys.argv[3:]:
    for r in steps(path):
        assert r["step"] not in got, "step %d twice" % r["step"]
        got[r["step"]] = r
assert len(sys.argv) > 4, "one metrics file: no restart"
assert sorted(ref) == list(range(n)), "reference steps"
assert sorted(got) == list(range(n)), "missing steps: %s" % sorted(set(range(n)) - set(got))[:10]
bad = [s for s in range(n) if (got[s]["loss"], got[s]["grad_norm"]) != (ref[s]["loss"], ref[s]["grad_norm"])]
assert not bad, "steps %s differ, first: %s vs %s" % (bad[:5], got[bad[0]], ref[bad[0]])
PY
ok $? "requeue: every step's loss and gradient norm over the restarts equal the uninterrupted run's"
if [ "$state" != COMPLETED ] || [ "$loss_b" != "$loss_ref" ] || ! grep -q "resumed from" "$rq"; then
  job_diag "$id_b" "$rq"
  tail_log "$tmp/b/ref.out" 5
  diag "BLAS of the reference run: $(sed -n 's/^ *backend  *//p' "$tmp/b/ref.out")"
  diag "BLAS of the Slurm job:     $(sed -n 's/^ *backend  *//p' "$rq" | sort -u | tr '\n' ' ')"
fi
diag "the whole test took $(elapsed_since "$t_ctld") s from the cluster start"

done_testing
