#!/bin/sh
# benchmarks/run_modes.sh - what the CPU backend's test modes cost: the same
# training run under device = cpu, cpu-async and cpu-guard, in the same run.
#
# usage: benchmarks/run_modes.sh [--steps N] [--delay-us D] [--csv FILE]
#
# Two cases: the default model (4 blocks, dim 128, batch 32) on 1 rank, and
# a small model (4 blocks, dim 64, batch 8, 4 micro-batches) on 4 ranks as
# pp 2 x tp 2, so that pipeline sends, TP all-reduces and the staging of
# every MPI buffer are in the step. Each is timed in all three modes with
# OMP_NUM_THREADS=1 per rank; the time is the wall clock of the whole
# process (start-up included), because guard mode's cost is spread over
# every op, and the cpu-async worker's delay (GT_CPU_ASYNC_DELAY_US, default
# 100 us per op here, 0 allowed) is part of what it costs. The modes must
# give bitwise the same losses; the script says INVALID and exits 1 if not.
# OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs unless set (as `make run` does):
# the slower the GEMMs, the smaller the modes' share of the step.
# Run from the build directory (./gridtrain must exist).
set -eu
steps=20
delay=100
csv=
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --delay-us) delay=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  *) echo "usage: $0 [--steps N] [--delay-us D] [--csv FILE]" >&2; exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
gt=./gridtrain
[ -x "$gt" ] || { echo "$0: run from the build directory (./gridtrain not found)" >&2; exit 2; }
work=$(mktemp -d /tmp/gt-modes.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -z "${OPENBLAS_CORETYPE+set}" ] && grep -q avx512f /proc/cpuinfo 2>/dev/null; then
  OPENBLAS_CORETYPE=SkylakeX; export OPENBLAS_CORETYPE
fi
"$gt" ingest text "$src/tests/data/genesis.txt" -o "$work/g.h5" >/dev/null

common="data.train=$work/g.h5 data.val= run.eval_every=0 run.log_every=1000
        checkpoint.dir= checkpoint.resume=never backend.threads=1 run.steps=$steps"
one="grid.dp=1 grid.pp=1 grid.tp=1 data.microbatches=1"
four="grid.dp=1 grid.pp=2 grid.tp=2 model.dim=64 data.batch=8 data.microbatches=4"

# run NAME RANKS MODE OVERRIDES...: prints the wall seconds; losses to NAME.loss
run() {
  name=$1 n=$2 mode=$3
  shift 3
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  GT_CPU_ASYNC_DELAY_US=$delay OMP_NUM_THREADS=1 mpiexec -n "$n" "$gt" train \
    "$src/inputs/default.in" $common "$@" backend.device="$mode" \
    run.metrics="$work/$name.jsonl" >"$work/$name.out" 2>&1 ||
    { echo "$0: $name failed, see below" >&2; cat "$work/$name.out" >&2; exit 1; }
  t1=$(date +%s.%N)
  /usr/bin/python3 - "$work/$name.jsonl" >"$work/$name.loss" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "step" in r and "loss" in r:
        print(r["step"], repr(r["loss"]))
PY
  /usr/bin/python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1"
}

status=0
printf '# cost of the CPU backend test modes: %s steps, 1 thread per rank, cpu-async delay %s us per op\n' "$steps" "$delay"
printf '# OPENBLAS_CORETYPE=%s\n' "${OPENBLAS_CORETYPE:-unset}"
printf '# wall seconds of the whole run (start-up included); x = against device = cpu; losses must be bitwise equal\n'
printf '# %-34s %8s %8s %6s %8s %6s  %s\n' case cpu_s async_s x guard_s x check
if [ -n "$csv" ]; then echo "case,ranks,steps,cpu_s,async_s,guard_s,check" >"$csv"; fi
for c in "default-1rank 1" "pp2xtp2-4ranks 4"; do
  # shellcheck disable=SC2086
  set -- $c
  name=$1 n=$2
  if [ "$n" = 1 ]; then over=$one; else over=$four; fi
  # shellcheck disable=SC2086
  tc=$(run "$name-cpu" "$n" cpu $over)
  # shellcheck disable=SC2086
  ta=$(run "$name-async" "$n" cpu-async $over)
  # shellcheck disable=SC2086
  tg=$(run "$name-guard" "$n" cpu-guard $over)
  check=VALID
  if ! cmp -s "$work/$name-cpu.loss" "$work/$name-async.loss" ||
     ! cmp -s "$work/$name-cpu.loss" "$work/$name-guard.loss" ||
     [ ! -s "$work/$name-cpu.loss" ]; then
    check=INVALID status=1
  fi
  ratios=$(/usr/bin/python3 -c "import sys; c=float(sys.argv[1]); print('%.1f %.1f' % (float(sys.argv[2])/c, float(sys.argv[3])/c))" "$tc" "$ta" "$tg")
  printf '  %-34s %8s %8s %6s %8s %6s  %s\n' "$name ($n rank(s))" "$tc" "$ta" "${ratios% *}" "$tg" "${ratios#* }" "$check"
  if [ -n "$csv" ]; then echo "$name,$n,$steps,$tc,$ta,$tg,$check" >>"$csv"; fi
done
exit $status
