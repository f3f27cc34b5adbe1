#!/bin/sh
# run_comm_modes.sh - every [parallel] compress and sync mode against
# synchronous fp32 all-reduce, in the same run: bytes sent per step, the
# exposed data-parallel time, tokens/s and the loss over a fixed budget of
# tokens (the same steps for every mode), with a PNG of the loss curves.
#
#   sh benchmarks/run_comm_modes.sh [--out DIR] [--ranks N] [--steps S]
#                                   [--deck DECK] [--name NAME] [-- KEY=VALUE...]
#
# Defaults: 8 ranks at dp = 8 on inputs/default.in for 200 steps, evaluated
# at the end on the same validation batches. Writes DIR/NAME-MODE.jsonl,
# DIR/NAME-modes.csv and DIR/NAME-loss.png (python3 with matplotlib).
# Run from the build directory after 'make data'.
set -e
out=.
ranks=8
steps=200
deck=inputs/default.in
name=default
while [ $# -gt 0 ]; do
  case $1 in
  --out) out=$2; shift 2 ;;
  --ranks) ranks=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --deck) deck=$2; shift 2 ;;
  --name) name=$2; shift 2 ;;
  --) shift; break ;;
  *) echo "run_comm_modes.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
[ -f "$deck" ] || deck="$src/$deck"
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
modes=${MODES:-"sync compress=bf16 compress=fp16 compress=topk:0.01 compress=topk:0.1 \
compress=powersgd:2 compress=powersgd:8 sync=local:4 sync=local:16 sync=diloco:16 \
sync=easgd:4,0.1 sync=stale:1 sync=stale:4"}
for mode in $modes; do
  tag=$(echo "$mode" | tr ':=,' '___')
  extra=
  [ "$mode" = sync ] || extra="parallel.$mode"
  echo "== $name $mode"
  ${MPIEXEC:-mpiexec} -n "$ranks" ./gridtrain train "$deck" run.steps="$steps" \
    run.eval_every="$steps" run.log_every=50 checkpoint.dir= \
    run.metrics="$out/$name-$tag.jsonl" $extra "$@" >"$out/$name-$tag.log" 2>&1 ||
    { echo "run_comm_modes.sh: $mode failed; see $out/$name-$tag.log" >&2; exit 1; }
done
"$py" "$here/comm_modes_report.py" --name "$name" --out "$out" $modes
