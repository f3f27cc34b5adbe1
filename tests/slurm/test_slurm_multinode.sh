#!/bin/sh
# test_slurm_multinode.sh - jobscripts/train-multinode.sbatch on a private
# Slurm cluster of 3 nodes on this one machine, made of Linux network
# namespaces (ip netns): one namespace per node, each with its own slurmd, its
# own address on a private bridge and its own host name (a UTS namespace:
# MPI_Get_processor_name tells the nodes apart), and one more namespace that
# holds the bridge and slurmctld:
#
#   namespace gt$$-ctl   bridge gtbr0 10.77.0.1/24, slurmctld; veth gtn1..3
#   namespace gt$$-nI    veth gtnet0 10.77.0.1I/24, slurmd -N gtnI, host gtnI
#
# Nothing is added to the host's own network: the addresses exist only
# inside the namespaces, so parallel runs cannot clash (their namespace
# names carry the PID). munged runs in the host namespace; its socket is a
# file, which every namespace reaches. The Slurm clients (sbatch, scontrol,
# ...) run inside gt$$-ctl. (Debian's Slurm 22.05 also has multiple-slurmd
# support, `scontrol show config`: MULTIPLE_SLURMD = Yes: several slurmd on
# one address with a port each. Those "nodes" would share one host name and
# one network, so the placement table could not tell them apart and no
# byte would cross a network; the namespaces give each node its own.)
#
# MPICH between the nodes: under srun --mpi=pmi2, PMI's process mapping
# tells MPICH which ranks share a node (its own shared memory among them);
# ranks of different nodes talk through UCX. The namespaces share one kernel
# (same boot id, same IPC namespace), so UCX finds its shared-memory
# transports reachable between them and uses those: b. and d. run so, and
# only Slurm's and PMI's messages cross the bridge. t. makes UCX use TCP on
# the veth (UCX_TLS=tcp,self UCX_NET_DEVICES=gtnet0) and checks that the
# bytes go through the bridge; with Debian 12's MPICH 4.0.2 and UCX 1.13.1
# such a job may hang in MPI_Finalize after training (see t. below), which
# is why the other jobs do not use TCP.
#
# Checks:
#   a. cluster: 3 nodes idle;
#   b. a 3 nodes x 4 tasks job (12 ranks, dp=3 x pp=2 x tp=2) of
#      train-multinode.sbatch completes; its first 10 steps' losses and
#      gradient norms equal one rank's (mpiexec -n 1) within 1e-5 relative;
#   c. the start-up placement table ("# ranks: ...") shows 3 nodes, each
#      rank on the node that block distribution and the rank order give it,
#      every tp group on one node;
#   t. a 3 nodes x 2 tasks job (dp=3 x pp=2) with MPI over TCP between the
#      nodes follows one rank too, and MBs go through the bridge;
#   d. t.'s job over shared memory, requeued by `scontrol requeue` while it
#      trains (SIGTERM to every rank: gridtrain checkpoints and exits 3),
#      runs again, resumes from the checkpoint and ends with t.'s losses at
#      every step, bit for bit.
# Skipped (exit 0) when Slurm, munge or iproute2 is missing, when not root,
# or when network namespaces, veth pairs or bridges cannot be made; a
# cluster that does not come up is a failure. Daemons are stopped by PID,
# what is left in the namespaces is killed by PID, and the namespaces
# (with their links) are deleted on exit, whatever happens; a watchdog ends
# the test after 280 s. Takes 35-45 s on 2 cores, up to 90 s when they are
# busy with other work.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"
# shellcheck source=tests/slurm/slurm_lib.sh
. "$GT_SRCDIR/tests/slurm/slurm_lib.sh"

NODES="1 2 3"
# slurmd N runs as node gtnN, with files of its own (slurmd-gtnN.log, ...);
# ns_test_begin (slurm_lib.sh) names the namespaces and sets cl_in=in_ctl.
ns_test_begin 3
up_title="a private 3-node Slurm cluster in network namespaces comes up"

t_start=$(now)

# ---- tear-down ----------------------------------------------------------------
watchdog_pid=""
# shellcheck disable=SC2317 # (called from the trap)
cleanup() {
  set +e
  # The watchdog first: its TERM would end the tear-down half way. Then the
  # jobs, daemons, processes and namespaces of the cluster (slurm_lib.sh).
  trap '' HUP INT TERM
  [ -n "$watchdog_pid" ] && kill "$watchdog_pid" 2>/dev/null
  ns_cleanup
}
trap cleanup EXIT
# The watchdog: whatever hangs, the test ends (and cleans up) after 280 s.
# Its output goes nowhere (a sleep holding our stdout would keep the TAP
# driver waiting); a file says that it fired.
trap '[ -f "$C/watchdog.fired" ] && echo "not ok - the test ran over 280 s and was stopped"; exit 1' \
  HUP INT TERM
(
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep 280 &
  s=$!
  wait "$s" && touch "$C/watchdog.fired" && kill -TERM $$
) </dev/null >/dev/null 2>&1 &
watchdog_pid=$!

# ---- the network: namespaces, bridge, veths (slurm_lib.sh) ------------------------
if ! ns_network; then
  echo "1..0 # SKIP $ns_skip"
  exit 0
fi

# ---- helpers -----------------------------------------------------------------
# bridge_bytes: bytes through the bridge ports gtn1..3, in and out (a byte
# from one node to another counts twice: in at one port, out at another).
bridge_bytes() {
  total=0
  for n in $NODES; do
    for d in rx tx; do
      b=$(ip netns exec "$ns_ctl" cat "/sys/class/net/gtn$n/statistics/${d}_bytes" 2>/dev/null)
      total=$((total + ${b:-0}))
    done
  done
  echo "$total"
}

# ---- the cluster ---------------------------------------------------------------
start_munged || bail "$up_err"

export SLURM_CONF="$C/slurm.conf"
{
  ns_slurm_conf gtmulti "a private 3-node cluster in network namespaces: tests/slurm/test_slurm_multinode.sh"
  cat <<EOF
# SIGTERM to SIGKILL (Slurm's default 30 s): time for a requeued job's
# ranks to checkpoint and exit even on a machine this busy
KillWait=120
JobRequeue=1
EOF
} >"$SLURM_CONF"

wait_munged || up_fail "$up_err"
# the daemons in their namespaces (slurm_lib.sh says how)
t_up=$(now)
ns_start_daemons
wait_idle 3 ||
  up_fail "${up_err:-not 3 idle nodes after 30 s: $(in_ctl sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')}"
ok 0 "$up_title (idle after $(elapsed_since "$t_up") s)"

data="$tmp/genesis.h5"
make_dataset "$data" || bail "cannot make the dataset"

# b.: 3 nodes x 4 tasks, dp=3 x pp=2 x tp=2 (a tp group is 2 consecutive
# ranks; 4 per node keeps each on one node). t. and d.: 3 nodes x 2 tasks,
# dp=3 x pp=2 (every dp group and every pipeline spans nodes; half the
# ranks: quicker to start and to checkpoint). The 3 "nodes" share this
# machine's 2 cores: with 2 ranks a node gridtrain would busy-poll (it sees
# 2 cores per node), and 6 busy ranks on 2 cores run 20x slower than
# yielding ones. Every run: 1F1B over 2 micro-batches, one thread a rank,
# 200 steps: 10-20 ms a step here, 2-4 s of training, so that d.'s requeue
# (up to a second from a step line to the ranks' SIGTERM) lands while the
# job trains (the start-up of a job costs more: 5-10 s).
steps=200
layout="grid.dp=3 grid.pp=2 grid.tp=2"
layout6="grid.dp=3 grid.pp=2 grid.tp=1 parallel.wait=yield"
common="data.train=$data data.microbatches=2 run.steps=$steps run.log_every=1"
export GRIDTRAIN="$GT_BIN"

# submit NAME DIR TASKS LAYOUT [SBATCH-OPTION...] -- [ENV...]:
# train-multinode.sbatch on 3 nodes x TASKS tasks (1 CPU each) from DIR with
# the common overrides and LAYOUT, output DIR/NAME.out; prints the job id.
submit() {
  s_name=$1 s_dir=$2 s_tasks=$3 s_layout=$4
  shift 4
  s_opts=""
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    s_opts="$s_opts $1"
    shift
  done
  [ $# -gt 0 ] && shift
  # shellcheck disable=SC2086 # $s_opts, $common, $s_layout: several words
  s_id=$(cd "$s_dir" && in_ctl env "$@" sbatch --parsable -J "gt-$s_name" -N 3 \
    --ntasks-per-node="$s_tasks" --cpus-per-task=1 -o "$s_name.out" $s_opts \
    "$jobs/train-multinode.sbatch" "$deck" $common $s_layout)
  echo "${s_id%%;*}"
}

# same_steps REF GOT TOL [FIRST]: every step's loss and gradient norm (the
# first FIRST steps only, when given) of metrics file GOT equal REF's within
# TOL relative (0: bit for bit). A step logged twice (by a run and by its
# resumed rerun) must agree with itself.
same_steps() {
  "$PYTHON_REF" - "$@" <<'PY'
import json, sys
def load(path):
    got = {}
    for r in map(json.loads, open(path)):
        if r.get("summary"):
            continue
        v = (r["loss"], r["grad_norm"])
        assert got.get(r["step"], v) == v, "step %d twice, different" % r["step"]
        got[r["step"]] = v
    return got
ref, got, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
if len(sys.argv) > 4:
    ref = {s: v for s, v in ref.items() if s < int(sys.argv[4])}
    got = {s: v for s, v in got.items() if s < int(sys.argv[4])}
assert ref and sorted(ref) == sorted(got), "steps %s vs %s" % (sorted(ref), sorted(got))
worst = max(abs(a - b) / abs(a) for s in ref for a, b in zip(ref[s], got[s]))
print("# %d steps, worst relative difference %.2e" % (len(ref), worst))
sys.exit(0 if worst <= tol else 1)
PY
}

# ---- b. 12 ranks on 3 nodes against one rank -----------------------------------
mkdir -p "$tmp/b"
t_b=$(now)
id_b=$(submit mn "$tmp/b" 4 "$layout" -- GT_CHECKPOINT_DIR=)
state=$(wait_job "$id_b" 120)
mn="$tmp/b/mn.out"
diag "b. job $id_b: $state after $(elapsed_since "$t_b") s"
[ "$state" = COMPLETED ] && grep -q "^  layout  *dp=3 x pp=2 x tp=2 " "$mn" &&
  grep -q "^  ranks  *12 (4 per node" "$mn" && grep -q "^gridtrain: done: $steps steps" "$mn"
ok $? "train-multinode.sbatch: 3 nodes x 4 tasks make one world of 12 ranks, dp=3 x pp=2 x tp=2 ($state)"
[ "$state" = COMPLETED ] || job_diag "$id_b" "$mn"
# One rank, outside Slurm, with the OpenBLAS kernels the job reported (the
# job script may pick others: see test_slurm.sh). The layouts agree with one
# rank within 1e-5 over 10 steps, as in the layout tests; later steps drift
# further apart (fp32 sums in other orders, then a loss spike at step 16).
t_one=$(now)
core=$(sed -n 's/.*BLAS OpenBLAS [^ ]* (core \([A-Za-z0-9]*\),.*/\1/p' "$mn" | head -n 1)
# shellcheck disable=SC2086
run_mpi 1 120 env ${core:+OPENBLAS_CORETYPE=$core} "$GT_BIN" train "$deck" $common \
  run.metrics="$tmp/b/one.jsonl" >"$tmp/b/one.out" 2>&1
one_status=$?
diag "b. one rank: status $one_status, $(elapsed_since "$t_one") s"
[ "$one_status" -eq 0 ] || tail_log "$tmp/b/one.out" 10
same_steps "$tmp/b/one.jsonl" "$tmp/b/runs/job-$id_b.jsonl" 1e-5 10
ok $? "multi-node: loss and gradient norm at each of the first 10 steps equal one rank's within 1e-5"

# ---- c. the placement table -----------------------------------------------------
# "# ranks: 12 on 3 nodes; ...", then "  rank R NODE dp D pp P tp T" rows;
# placement.txt gets "R NODE D P T".
awk '
  /^# ranks: / { on = 1; next }
  on && /^  rank [0-9]+ / { print $2, $3, $5, $7, $9; next }
  on { exit }' "$mn" >"$tmp/b/placement.txt"
grep -q "^# ranks: 12 on 3 nodes; every tp group on one node$" "$mn"
ok $? "placement: the start-up table reports 12 ranks on 3 nodes, every tp group on one node"
# Block distribution: ranks 4k..4k+3 on gtn(k+1); coordinates by the rank
# order (pp * DP + dp) * TP + tp; the two ranks of each tp group on one node.
awk '
  { want = "gtn" (int($1 / 4) + 1)
    if ($2 != want) { print "# rank " $1 " on " $2 ", expected " want; bad = 1 }
    if ($1 != ($4 * 3 + $3) * 2 + $5) { print "# rank " $1 ": coordinates " $3, $4, $5; bad = 1 }
    g = $3 " " $4
    if (g in node && node[g] != $2) { print "# tp group dp,pp=" g " on " node[g] " and " $2; bad = 1 }
    node[g] = $2; n++ }
  END { exit (bad || n != 12) }' "$tmp/b/placement.txt"
ok $? "placement: rank r runs on node gtn(r/4+1) with its grid coordinates; each tp group shares a node"
[ -s "$tmp/b/placement.txt" ] &&
  diag "placement (rank@node): $(awk '{ printf "%s%s@%s", (NR > 1 ? " " : ""), $1, $2 }' "$tmp/b/placement.txt")"

# ---- t. MPI over TCP between the nodes -----------------------------------------
# UCX_TLS=tcp,self (no shared memory in UCX) on the nodes' veth: the ranks of
# a node still share memory through MPICH's own shm, those of different nodes
# now talk over the bridge. 6 ranks: UCX connects every pair of ranks over
# TCP at start-up, which took 10-25 s for 12 ranks on 2 busy cores and a few
# for 6. MPI_Finalize may then never return (MPICH 4.0.2's UCX close flushes
# every endpoint, and UCX 1.13's TCP flush waits for an acknowledgement
# from a peer that may already block in the PMI barrier after its own
# flushes): so the training is checked, and a job step still there 6 s
# after its metrics are complete is killed (SIGKILL to the step: a cancel
# would send SIGTERM first and wait KillWait, 120 s here).
mkdir -p "$tmp/t"
t_t=$(now)
bytes0=$(bridge_bytes)
id_t=$(submit tcp "$tmp/t" 2 "$layout6" -- GT_CHECKPOINT_DIR= UCX_TLS=tcp,self \
  UCX_NET_DEVICES=gtnet0)
i=0
until grep -q '"summary":true' "$tmp/t/runs/job-$id_t.jsonl" 2>/dev/null || [ $i -ge 400 ]; do
  sleep 0.25
  i=$((i + 1))
done
i=0
state=""
while [ $i -lt 12 ]; do
  state=$(job_field "$id_t" JobState)
  [ "$state" = RUNNING ] || [ "$state" = PENDING ] || break
  sleep 0.5
  i=$((i + 1))
done
if [ "$state" = RUNNING ]; then
  diag "t. job $id_t: still running 6 s after training ended (MPI_Finalize over UCX's TCP); killed"
  in_ctl scancel --signal=KILL "$id_t.0"
fi
state_t=$(wait_job "$id_t" 60)
bytes=$(($(bridge_bytes) - bytes0))
diag "t. job $id_t: $state_t after $(elapsed_since "$t_t") s; $bytes bytes through the bridge"
grep -q "^  ranks  *6 (2 per node" "$tmp/t/tcp.out" &&
  grep -q "^gridtrain: done: $steps steps" "$tmp/t/tcp.out" &&
  same_steps "$tmp/b/one.jsonl" "$tmp/t/runs/job-$id_t.jsonl" 1e-5 10
ok $? "MPI over TCP between the nodes: 3 x 2 ranks train; the first 10 steps equal one rank's within 1e-5"
[ "$bytes" -gt 1000000 ]
ok $? "MPI over TCP between the nodes: the traffic goes through the test bridge ($bytes bytes)"
grep -q "^gridtrain: done:" "$tmp/t/tcp.out" || job_diag "$id_t" "$tmp/t/tcp.out"

# ---- d. a requeued multi-node job resumes ------------------------------------------
# t.'s job (over shared memory) with checkpoints (runs/ckpt-gt-mnrq) and
# --requeue. Once it trains, `scontrol requeue` ends it as a preemption
# would: SIGTERM to every rank, gridtrain finishes its step, writes a
# checkpoint and exits 3; the job goes back to PENDING, runs again (same id,
# output appended) and resumes. The metrics file (same name) gets the
# rerun's steps appended.
mkdir -p "$tmp/d"
rq="$tmp/d/mnrq.out"
t_d=$(now)
id_d=$(submit mnrq "$tmp/d" 2 "$layout6" --requeue --open-mode=append --)
# Requeue at the second step line (waiting at most 60 s).
i=0
while [ "$(awk -F'[ /]' '$1 == "step" && $2 >= 1' "$rq" 2>/dev/null)" = "" ] && [ $i -lt 600 ]; do
  sleep 0.1
  i=$((i + 1))
done
in_ctl scontrol requeue "$id_d" >"$tmp/d/requeue.log" 2>&1
rq_status=$?
at=$(grep -c "^step [0-9]*/$steps " "$rq" 2>/dev/null)
diag "d. job $id_d requeued $(elapsed_since "$t_d") s in, at step line $at (scontrol status $rq_status)"
state=$(wait_job "$id_d" 150)
restarts=$(job_field "$id_d" Restarts)
diag "d. job $id_d: $state after $(elapsed_since "$t_d") s, restarts ${restarts:-?}"
grep -q "caught SIGTERM: checkpoint .*step_[0-9]*\.h5 written at step [1-9]" "$rq"
ok $? "requeue: every rank gets SIGTERM; gridtrain writes a checkpoint and exits 3"
grep -q "^gridtrain: resumed from runs/ckpt-gt-mnrq/step_[0-9]*\.h5 at step [1-9]" "$rq" &&
  [ "${restarts:-0}" -ge 1 ]
ok $? "requeue: the job runs again (Restarts=${restarts:-?}) and resumes from the checkpoint"
[ "$state" = COMPLETED ] && [ "$(grep -c "^gridtrain: done: " "$rq")" -eq 1 ]
ok $? "requeue: the rerun completes ($state)"
same_steps "$tmp/t/runs/job-$id_t.jsonl" "$tmp/d/runs/job-$id_d.jsonl" 0
ok $? "requeue: every step's loss and gradient norm over both runs equal the uninterrupted job's (t.)"
if [ "$state" != COMPLETED ] || ! grep -q "resumed from" "$rq"; then
  sed 's/^/# /' "$tmp/d/requeue.log"
  job_diag "$id_d" "$rq"
fi
diag "the whole test took $(elapsed_since "$t_start") s"

done_testing
