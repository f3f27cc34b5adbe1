#!/bin/sh
# benchmarks/plan/validate_cpu.sh - the planner against this machine: for each
# layout below, train the default deck (inputs/default.in: L4 C128 T128,
# batch 32) on the CPU backend with `gridtrain train`, take the median step
# time from its JSON-lines metrics (steps after the first WARMUP), ask
# `gridtrain plan --evaluate` for its prediction of that exact layout with
# inputs/clusters/this-machine.in, and print both and the error.
#
#   benchmarks/plan/validate_cpu.sh [OUT.txt]   (default benchmarks/results/plan-cpu.txt)
#
# Run from the build directory (it takes a few minutes; before each run it
# waits for the machine to be idle, GT_IDLE_WAIT seconds at most). Target: every layout within 15%. Environment: MPIEXEC (mpiexec),
# STEPS (14), WARMUP (4), REPEAT (2: each layout trains REPEAT times and the
# fastest median counts, since other work on the machine only slows a run
# down), CLUSTER (the cluster file).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${GT_BUILDDIR:-$(pwd)}
bin=${GT_BIN:-$build/gridtrain}
out=${1:-$src/benchmarks/results/plan-cpu.txt}
mpiexec=${MPIEXEC:-mpiexec}
steps=${STEPS:-14}
warmup=${WARMUP:-4}
repeat=${REPEAT:-2}
cluster=${CLUSTER:-$src/inputs/clusters/this-machine.in}
deck=$src/inputs/default.in
py=${PYTHON:-/usr/bin/python3}
[ -x "$bin" ] || { echo "validate_cpu.sh: $bin is missing; build first" >&2; exit 2; }
. "$src/benchmarks/wait_idle.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset OMP_NUM_THREADS # threads = auto: the cores divided by the ranks
"$bin" ingest text "$src/tests/data/genesis.txt" -o "$tmp/data.h5" --val-fraction 0.05 \
  >/dev/null || exit 1

# ranks and the deck keys of each layout (the rest is inputs/default.in)
layouts="1 grid.dp=1 grid.pp=1 grid.tp=1
1 grid.dp=1 grid.pp=1 grid.tp=1 model.recompute=block
2 grid.dp=2 grid.pp=1 grid.tp=1
2 grid.dp=1 grid.pp=1 grid.tp=2
2 grid.dp=1 grid.pp=2 grid.tp=1
2 grid.dp=1 grid.pp=2 grid.tp=1 parallel.schedule=gpipe data.microbatches=8
4 grid.dp=4 grid.pp=1 grid.tp=1
4 grid.dp=2 grid.pp=1 grid.tp=2
4 grid.dp=1 grid.pp=2 grid.tp=2
4 grid.dp=2 grid.pp=2 grid.tp=1 parallel.zero=1
4 grid.dp=2 grid.pp=1 grid.tp=2 parallel.sequence_parallel=on model.recompute=attention
8 grid.dp=2 grid.pp=2 grid.tp=2
8 grid.dp=8 grid.pp=1 grid.tp=1
8 grid.dp=2 grid.pp=4 grid.tp=1 data.microbatches=8"

{
  echo "# gridtrain plan vs gridtrain train on this machine ($(nproc) cores), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# deck inputs/default.in (L4 C128 T128 V256, batch 32), CPU backend fp32, threads auto;"
  echo "# measured: median step_ms of steps $warmup..$((steps - 1)), the fastest of $repeat runs; predicted: plan --evaluate with $(basename "$cluster")"
  printf '# %5s  %-72s %10s %10s %8s\n' ranks layout measured predicted error
} >"$tmp/table"
n=0
echo "$layouts" | while read -r ranks keys; do
  n=$((n + 1))
  measured=""
  r=0
  while [ "$r" -lt "$repeat" ]; do
    r=$((r + 1))
    wait_idle
    # shellcheck disable=SC2086
    "$mpiexec" -n "$ranks" "$bin" train "$deck" $keys data.train="$tmp/data.h5" data.val= \
      run.steps="$steps" run.log_every=100 run.eval_every=0 checkpoint.dir= \
      run.metrics="$tmp/m$n.jsonl" </dev/null >"$tmp/run$n.out" 2>&1 ||
      { echo "validate_cpu.sh: training failed: $ranks ranks $keys" >&2; tail -5 "$tmp/run$n.out" >&2; exit 1; }
    m=$("$py" - "$tmp/m$n.jsonl" "$warmup" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = [r["step_ms"] for r in rows if not r.get("summary") and r["step"] >= int(sys.argv[2])]
print(f"{statistics.median(ms) / 1e3:.6g}")
PY
)
    measured=$(awk -v a="$measured" -v b="$m" 'BEGIN { print (a == "" || b < a) ? b : a }')
  done
  # shellcheck disable=SC2086
  predicted=$("$bin" plan "$deck" --cluster "$cluster" --evaluate --ranks "$ranks" $keys </dev/null |
    sed -n 's/^predicted_step_s //p')
  [ -n "$predicted" ] || { echo "validate_cpu.sh: plan failed: $ranks ranks $keys" >&2; exit 1; }
  awk -v r="$ranks" -v k="$keys" -v m="$measured" -v p="$predicted" 'BEGIN {
    printf "  %5d  %-72s %8.1fms %8.1fms %+7.1f%%\n", r, k, 1e3 * m, 1e3 * p, 100 * (p - m) / m }' \
    >>"$tmp/table"
done || exit 1
awk '/^  / { e = $NF; sub("%", "", e); e = e + 0; if (e < 0) e = -e; s += e; n++; if (e > x) x = e;
  if (e <= 15) ok++ }
  END { printf "# %d layouts: mean absolute error %.1f%%, largest %.1f%%; %d of %d within 15%%: %s\n",
        n, s / n, x, ok, n, ok == n ? "VALID" : "INVALID" }' "$tmp/table" >>"$tmp/table"
cp "$tmp/table" "$out"
cat "$out"
grep -q ': VALID$' "$out"
