#!/bin/bash
# jobscripts/elastic.sh - run `gridtrain train` on a set of nodes and, when
# the run fails (a rank or a node died, the hang watchdog fired), start it
# again on the nodes that are still healthy, with data parallelism shrunk
# and the global batch unchanged, from the newest complete checkpoint.
# train-elastic.sbatch runs it inside a Slurm allocation; it works the same
# with any launcher (mpiexec with a host list, ...).
#
#   jobscripts/elastic.sh --nodes N1,N2,... --tasks-per-node T --launch CMD \
#     [--probe CMD] [--probe-timeout S] [--tries K] [--gridtrain BIN] \
#     -- DECK [section.key=value ...]
#
#   --nodes LIST        the nodes the run may use, comma-separated
#   --tasks-per-node T  MPI ranks a node holds
#   --launch CMD        how to start ranks: a shell command, evaluated with
#                       $nodes (the chosen nodes, comma-separated), $nnodes,
#                       $ntasks and $tpn set; the gridtrain command follows
#                       it. Examples:
#                         'srun --mpi=pmi2 -K1 -w $nodes -N $nnodes -n $ntasks --ntasks-per-node=$tpn'
#                         'mpiexec -hosts $nodes -ppn $tpn -n $ntasks'
#   --probe CMD         after a failure, is $node healthy? A bash command
#                       run with $node in its environment, once per node
#                       and all at once; exit 0: healthy. Default: every
#                       node is.
#                       Example: 'ssh -o ConnectTimeout=5 $node true'
#   --probe-timeout S   a probe that takes longer than S seconds (default
#                       10) counts as failed
#   --tries K           restarts after failures before giving up (default
#                       $GT_ELASTIC_TRIES, else 3)
#   --gridtrain BIN     the binary (default $GRIDTRAIN, else gridtrain)
#   DECK key=value ...  as for `gridtrain train`; every run gets them, then
#                       the layout (grid.dp, grid.pp, grid.tp,
#                       data.microbatches), which therefore wins
#
# The layout. pp and tp are what the deck and its overrides resolve to on
# all the nodes (`gridtrain plan --memory`, the trainer's own resolver);
# they never change. On n healthy nodes the run takes dp = n T / (pp tp)
# data-parallel replicas, the largest dp that the global batch
# ([data] batch, never changed) splits over, using the fewest nodes
# that hold it. The micro-batch size stays what it was on all the nodes (the
# memory of a rank does not grow): the micro-batch count grows as dp shrinks
# (gradient accumulation takes up the slack), e.g. batch 12 = dp 3 x 2
# micro-batches of 2 becomes dp 2 x 3 micro-batches of 2. Every layout
# computes the single-rank mathematics and the data order does not depend
# on dp, so the run goes on along the same loss curve (docs/reliability.md,
# "Elastic recovery").
#
# The deck must save its state every few steps - best the node-local tier
# with partner copies ([checkpoint] local_dir, local_every, partner = on:
# a lost node's parts survive on another node), besides the global
# checkpoint ([checkpoint] dir, every) - and resume from the newest
# complete state ([checkpoint] resume = auto, the default): each run after
# a failure resumes from it, and the steps since it are done again.
#
# What ends the loop (the exit status):
#   0      training finished
#   2      bad input (deck, layout): a rerun would fail the same way
#   3, 130 gridtrain was signalled and wrote a checkpoint (the caller
#          requeues; a requeued job starts on all its nodes: it grows back)
#   1      no layout fits the healthy nodes, or the tries are used up; one
#          line "elastic: giving up: ..." says which
# SIGUSR1 and SIGTERM to this script are passed on to the running step; a
# step that then fails is not restarted (the job is being ended).
#
# Log lines start "elastic: <date time.ms>": the failure (status, time),
# the probes, the chosen layout, and "restart k of K" with the time since
# the failure; gridtrain's "resumed from ... at step N" then names the
# step the run goes on from.

# shellcheck disable=SC2034 # node, nodes, nnodes, ntasks: read by --probe and --launch
set -euo pipefail

nodes_all=""
tpn=""
launch=""
probe=""
probe_timeout=10
tries=${GT_ELASTIC_TRIES:-3}
gridtrain=${GRIDTRAIN:-gridtrain}
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes_all=$2; shift 2 ;;
    --tasks-per-node) tpn=$2; shift 2 ;;
    --launch) launch=$2; shift 2 ;;
    --probe) probe=$2; shift 2 ;;
    --probe-timeout) probe_timeout=$2; shift 2 ;;
    --tries) tries=$2; shift 2 ;;
    --gridtrain) gridtrain=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "elastic.sh: unknown option '$1' (see elastic.sh --help)" >&2; exit 2 ;;
  esac
done
bad() { echo "elastic.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || bad "no deck: elastic.sh ... -- DECK [section.key=value ...]"
[ -n "$nodes_all" ] || bad "--nodes is missing"
[ -n "$launch" ] || bad "--launch is missing"
case $tpn in '' | *[!0-9]* | 0) bad "--tasks-per-node needs a positive number, not '$tpn'" ;; esac
case $tries in '' | *[!0-9]*) bad "--tries needs a number, not '$tries'" ;; esac
case $probe_timeout in '' | *[!0-9.]*) bad "--probe-timeout needs seconds, not '$probe_timeout'" ;; esac
deck=$1
shift
[ -f "$deck" ] || bad "no deck $deck"
overrides=("$@")
# The layout keys are this script's to set (a key given twice is an error):
# the runs get the overrides without them.
kept=()
for arg in "$@"; do
  case $arg in grid.dp=* | grid.pp=* | grid.tp=* | data.microbatches=*) ;; *) kept+=("$arg") ;; esac
done
IFS=, read -r -a all <<<"$nodes_all"

log() { echo "elastic: $(date '+%F %T.%3N') $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# deck_value SECTION KEY DEFAULT: the last section.key=V among the
# overrides, else KEY in the deck's [SECTION], else DEFAULT.
deck_value() {
  local v="" arg
  for arg in "${overrides[@]}"; do
    case $arg in "$1.$2="*) v=${arg#"$1.$2="} ;; esac
  done
  if [ -z "$v" ]; then
    v=$(awk -F= -v want="$1" -v key="$2" '
      /^[ \t]*\[/ { s = $0; sub(/^[ \t]*\[[ \t]*/, "", s); sub(/[ \t]*\].*$/, "", s); next }
      s == want && $1 ~ "^[ \t]*" key "[ \t]*$" { v = $2; sub(/^[ \t]+/, "", v); sub(/[ \t;#].*$/, "", v); d = v }
      END { print d }' "$deck")
  fi
  echo "${v:-$3}"
}

# plan_check RANKS [KEY=VALUE...]: does the trainer's resolver take the
# deck with the overrides (without them, the kept ones and these settings)
# on RANKS ranks? Its layout ("dp=D x pp=P x tp=T") goes to plan_line, its
# error to plan_err.
plan_line=""
plan_err=""
plan_check() {
  local ranks=$1 out
  shift
  local with=("${overrides[@]}")
  [ $# -gt 0 ] && with=("${kept[@]}" "$@")
  if out=$("$gridtrain" plan --memory "$deck" --ranks "$ranks" "${with[@]}" 2>&1); then
    plan_line=$(printf '%s\n' "$out" | sed -n 's/.*layout \(dp=[0-9]* x pp=[0-9]* x tp=[0-9]*\) on .*/\1/p' | head -n 1)
    return 0
  fi
  plan_err=$(printf '%s\n' "$out" | tail -n 1)
  return 1
}

# ---- the layout on all nodes: pp, tp and the micro-batch size to keep ---------------------
n_all=${#all[@]}
if ! plan_check $((n_all * tpn)); then
  echo "elastic.sh: the deck does not run on $n_all nodes x $tpn tasks: $plan_err" >&2
  exit 2
fi
read -r dp0 pp tp < <(echo "$plan_line" | tr -c '0-9\n' ' ')
[ -n "$tp" ] || bad "cannot read the layout from 'gridtrain plan --memory': '$plan_line'"
batch=$(deck_value data batch 16)
micro0=$(deck_value data microbatches 1)
mbs=$((batch / (dp0 * micro0)))

# choose NODE...: the largest layout the nodes hold: sets use (the nodes
# taken), dp and micro; 1 when none fits (why in choose_err).
use=() dp="" micro="" choose_err=""
choose() {
  local have=("$@") n ranks d per m
  choose_err="no layout of pp=$pp x tp=$tp fits ${#have[@]} node(s) of $tpn tasks"
  for ((n = ${#have[@]}; n >= 1; n--)); do
    ranks=$((n * tpn))
    ((ranks % (pp * tp) == 0)) || continue
    d=$((ranks / (pp * tp)))
    ((batch % d == 0)) || continue
    per=$((batch / d))
    # the fewest micro-batches that keep them at most mbs sequences
    for ((m = (per + mbs - 1) / mbs; m <= per; m++)); do
      ((per % m == 0)) || continue
      if plan_check "$ranks" "grid.dp=$d" "grid.pp=$pp" "grid.tp=$tp" "data.microbatches=$m"; then
        use=("${have[@]:0:n}") dp=$d micro=$m
        return 0
      fi
      choose_err="dp=$d on $n node(s): $plan_err"
    done
  done
  return 1
}

# probe NODE...: the nodes that pass --probe within --probe-timeout, in
# their order, into healthy.
healthy=()
probe_nodes() {
  healthy=()
  if [ -z "$probe" ]; then
    healthy=("$@")
    return 0
  fi
  local pids=() list=("$@") i node
  for node in "${list[@]}"; do
    node=$node timeout -k 2 "$probe_timeout" bash -c "$probe" >/dev/null 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      healthy+=("${list[$i]}")
    else
      log "node ${list[$i]} is not healthy (its probe failed or took over ${probe_timeout} s)"
    fi
  done
}

# ---- the loop ------------------------------------------------------------------------------
step_pid=""
signalled=""
# shellcheck disable=SC2317 # (called from the traps)
forward() {
  signalled=$1
  if [ -n "$step_pid" ]; then
    log "caught SIG$1; forwarding it to the training step"
    kill "-$1" "$step_pid" 2>/dev/null || true
  fi
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

nodes_now=("${all[@]}")
restart=0
t_fail=""
while :; do
  if ! choose "${nodes_now[@]}"; then
    log "giving up: $choose_err (healthy: ${nodes_now[*]:-none})"
    exit 1
  fi
  nodes=$(IFS=,; echo "${use[*]}")
  nnodes=${#use[@]}
  ntasks=$((nnodes * tpn))
  what="dp=$dp x pp=$pp x tp=$tp on $nnodes node(s) ($nodes) x $tpn tasks, global batch $batch = dp $dp x $micro micro-batches of $((batch / (dp * micro)))"
  if [ "$restart" -eq 0 ]; then
    log "start: $what"
  else
    log "restart $restart of $tries, $(since "$t_fail") s after the failure: $what"
  fi
  # nodes, nnodes, ntasks, tpn: read by the launch command
  # (errexit off in the background shell: under it a failed eval exits 1,
  # not with the launcher's status)
  {
    set +e
    eval "$launch"' "$gridtrain" train "$deck" "${kept[@]}" grid.dp=$dp grid.pp=$pp grid.tp=$tp data.microbatches=$micro'
  } &
  step_pid=$!
  # A trapped signal makes wait return early while the step runs on.
  while kill -0 "$step_pid" 2>/dev/null; do
    wait "$step_pid" || true
  done
  status=0
  wait "$step_pid" || status=$?
  step_pid=""
  case $status in
    0) log "training finished"; exit 0 ;;
    2) log "the training step ended with status 2 (bad input): not restarting"; exit 2 ;;
    3 | 130) log "the training step checkpointed on a signal (status $status)"; exit "$status" ;;
  esac
  if [ -n "$signalled" ]; then
    log "the training step ended with status $status after SIG$signalled: not restarting"
    exit "$status"
  fi
  t_fail=$(now)
  log "failure: the training step ended with status $status (at epoch $(printf '%.3f' "$t_fail") s)"
  if [ "$restart" -ge "$tries" ]; then
    log "giving up: $tries restart(s) already (--tries, GT_ELASTIC_TRIES); the last step ended with status $status"
    exit 1
  fi
  restart=$((restart + 1))
  probe_nodes "${nodes_now[@]}"
  log "healthy nodes: ${healthy[*]:-none} (of ${nodes_now[*]})"
  nodes_now=("${healthy[@]}")
done
