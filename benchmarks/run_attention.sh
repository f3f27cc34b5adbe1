#!/bin/sh
# benchmarks/run_attention.sh - activation memory and step time against the
# context length T, with attention that keeps the (B,H,T,T) probabilities
# (gridtrain before the flash-style kernels, built here from git) and with
# the flash-style kernels (this build), in the same run.
#
# usage: benchmarks/run_attention.sh [--before REV] [--lengths "256 512 1024 2048"]
#            [--steps N] [--threads T] [--csv FILE]
#
# The model: GPT width 768, 12 heads (the GPT-2 small block), 2 layers,
# vocabulary 256 (bytes of tests/data/genesis.txt), one sequence per step,
# fp32, one rank. Memory is what the start-up table reports for the
# activations (the whole activation buffer: every tensor forward keeps for
# backward, and backward's scratch); time is the median step of the last N
# steps. REV defaults to 36e1b58, the last commit with the old kernels.
# Run from the build directory (./gridtrain must exist).
set -eu
before=36e1b58
lengths="256 512 1024 2048"
steps=4
threads=${OMP_NUM_THREADS:-2}
csv=
while [ $# -gt 0 ]; do
  case $1 in
  --before) before=$2; shift 2 ;;
  --lengths) lengths=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  *) echo "usage: $0 [--before REV] [--lengths LIST] [--steps N] [--threads T] [--csv FILE]" >&2; exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
now=./gridtrain
[ -x "$now" ] || { echo "$0: run from the build directory (./gridtrain not found)" >&2; exit 2; }
work=$(mktemp -d /tmp/gt-attention.XXXXXX)
trap 'git -C "$src" worktree remove --force "$work/old" >/dev/null 2>&1; rm -rf "$work"' EXIT

# ---- the old gridtrain, built from git
git -C "$src" worktree add --detach "$work/old" "$before" >/dev/null 2>&1
(cd "$work/old" && autoreconf -fi && ./configure && make -j"$(nproc)" gridtrain) \
  >"$work/old-build.log" 2>&1 || { echo "$0: cannot build $before (see $work/old-build.log)" >&2; exit 1; }
old="$work/old/gridtrain"
"$now" ingest text "$src/tests/data/genesis.txt" -o "$work/g.h5" >/dev/null

# run BINARY T TAG: activation bytes (from the table) and median step ms
run() {
  OMP_NUM_THREADS=$threads mpiexec -n 1 "$1" train "$src/inputs/default.in" \
    data.train="$work/g.h5" data.val= run.eval_every=0 checkpoint.dir= checkpoint.resume=never \
    grid.dp=1 grid.pp=1 grid.tp=1 model.layers=2 model.dim=768 model.heads=12 model.vocab=256 \
    model.seq_len="$2" data.batch=1 data.microbatches=1 run.steps=$((steps + 1)) \
    run.log_every=1000 backend.threads="$threads" run.metrics="$work/$3.jsonl" >"$work/$3.out" 2>&1 ||
    { echo "$0: run failed, see $work/$3.out" >&2; cat "$work/$3.out" >&2; exit 1; }
  act=$(sed -n 's/^  activations  *\([0-9.]* [KMGT]*i*B\) at most.*/\1/p' "$work/$3.out")
  ms=$(/usr/bin/python3 - "$work/$3.jsonl" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' not in l]
print("%.1f" % statistics.median(x["step_ms"] for x in r[1:]))
PY
)
  echo "$act|$ms"
}

printf '# activation memory and step time against T: GPT width 768, 12 heads, 2 layers, B = 1, fp32, 1 rank, %s threads\n' "$threads"
printf '# before = %s (attention keeps the (B,H,T,T) probabilities), after = this build (flash-style)\n' "$before"
printf '# %-6s %14s %14s %8s %12s %12s %8s\n' T act_before act_after ratio ms_before ms_after speedup
if [ -n "$csv" ]; then echo "T,act_before,act_after,ms_before,ms_after" >"$csv"; fi
for T in $lengths; do
  b=$(run "$old" "$T" "old-$T")
  a=$(run "$now" "$T" "new-$T")
  ab=${b%|*} mb=${b#*|} aa=${a%|*} ma=${a#*|}
  ratio=$(/usr/bin/python3 -c "
import sys
u={'B':1,'KiB':2**10,'MiB':2**20,'GiB':2**30,'TiB':2**40}
f=lambda s:float(s.split()[0])*u[s.split()[1]]
print('%.2f' % (f(sys.argv[2]) / f(sys.argv[1])))" "$ab" "$aa")
  speed=$(/usr/bin/python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$mb" "$ma")
  printf '  %-6s %14s %14s %8s %12s %12s %8s\n' "$T" "$ab" "$aa" "$ratio" "$mb" "$ma" "$speed"
  if [ -n "$csv" ]; then echo "$T,$ab,$aa,$mb,$ma" >>"$csv"; fi
done
