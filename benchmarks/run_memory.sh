#!/bin/sh
# benchmarks/run_memory.sh - memory per rank at every ZeRO stage, recompute
# mode and sequence-parallel setting, expected (the account) next to
# measured (the allocator's high-water mark, the process's peak RSS), with
# the step time and the bytes rank 0 sends per step, in the same run.
#
# usage: benchmarks/run_memory.sh [--ranks N] [--steps S] [--models LIST]
#                                 [--layouts LIST] [--zero LIST] [--csv FILE]
#   --ranks N     MPI ranks (default 8)
#   --steps S     steps per run (default 3; the time is the median of steps
#                 2..S, the first step's page faults aside)
#   --models      comma list of 124m, 350m (default 124m,350m): GPT-2 124M
#                 (inputs/gpt2-124m.in) and 350M (24 layers, dim 1024, 16
#                 heads) at the deck's seq_len and one sequence per dp rank;
#                 tiny (2 layers, dim 64) checks the script in a minute
#   --layouts     comma list of dp, dptp (default dp,dptp): dp = N, and
#                 dp = N/2 x tp = 2 (the latter also with sequence_parallel)
#   --zero LIST   comma list of ZeRO stages (default 0,1,2,3); on a small
#                 machine the large models fit only at the higher stages
#                 (350M on 8 ranks at zero 0 needs ~45 GB for the model state)
#   --csv FILE    also write the table as CSV
#
# Each point is one `gridtrain train` of S steps: zero 0..3 x recompute
# none, attention, block (x sequence_parallel off, on with tp = 2). The
# expected total is rank 0's row of the start-up account; "alloc/exp" is
# the measured allocator peak over it (the account is exact when it is
# 1.000); RSS adds MPI, HDF5, OpenBLAS and the program. With fp32 compute
# the model state is 16 bytes per parameter at zero 0 (weights 4, gradients
# 4, moments 8), 4 + 12/N at zero 1 (the fp32 master is the compute copy),
# 4 + 4/N + 8/N at zero 2 and 16/N at zero 3: the table's "state" column.
# Run from the build directory (./gridtrain must exist). On 2 cores the
# full sweep of both models takes hours; --models 124m --steps 2 about an
# hour.
set -eu
ranks=8 steps=3 models=124m,350m layouts=dp,dptp zeros=0,1,2,3 csv=
while [ $# -gt 0 ]; do
  case $1 in
  --ranks) ranks=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --models) models=$2; shift 2 ;;
  --layouts) layouts=$2; shift 2 ;;
  --zero) zeros=$2; shift 2 ;;
  --csv) csv=$2; shift 2 ;;
  *) echo "usage: $0 [--ranks N] [--steps S] [--models LIST] [--layouts LIST] [--zero LIST] [--csv FILE]" >&2
     exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
gt=./gridtrain
[ -x "$gt" ] || { echo "$0: run from the build directory (./gridtrain not found)" >&2; exit 2; }
work=$(mktemp -d /tmp/gt-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$gt" ingest text "$src/tests/data/genesis.txt" -o "$work/g.h5" >/dev/null
common="data.train=$work/g.h5 data.val= run.eval_every=0 run.log_every=1000
        checkpoint.dir= checkpoint.resume=never backend.threads=1 run.steps=$steps
        data.microbatches=1 data.batch=$ranks"
rows="$work/rows.txt"
: >"$rows"
for model in $(echo "$models" | tr , ' '); do
  case $model in
  124m) shape="" ;;
  350m) shape="model.layers=24 model.dim=1024 model.heads=16" ;;
  tiny) shape="model.layers=2 model.dim=64 model.heads=4" ;;
  *) echo "$0: unknown model '$model' (124m, 350m, tiny)" >&2; exit 2 ;;
  esac
  for layout in $(echo "$layouts" | tr , ' '); do
    case $layout in
    dp) grid="grid.dp=$ranks grid.pp=1 grid.tp=1" sps=off ;;
    dptp) grid="grid.dp=$((ranks / 2)) grid.pp=1 grid.tp=2" sps="off on" ;;
    *) echo "$0: unknown layout '$layout' (dp, dptp)" >&2; exit 2 ;;
    esac
    for sp in $sps; do
      for zero in $(echo "$zeros" | tr , ' '); do
        for rc in none attention block; do
          name="$model-$layout-sp$sp-z$zero-$rc"
          # shellcheck disable=SC2086
          OMP_NUM_THREADS=1 mpiexec -n "$ranks" "$gt" train "$src/inputs/gpt2-124m.in" \
            $common $shape $grid parallel.zero=$zero model.recompute=$rc \
            parallel.sequence_parallel=$sp run.metrics="$work/$name.jsonl" \
            >"$work/$name.out" 2>&1 ||
            { echo "$0: $name failed, see below" >&2; cat "$work/$name.out" >&2; exit 1; }
          echo "$model $layout $sp $zero $rc $work/$name.out $work/$name.jsonl" >>"$rows"
          echo "$name done" >&2
        done
      done
    done
  done
done
/usr/bin/python3 - "$rows" "$csv" <<'PY'
import json, re, statistics, sys
UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
def sizes(line):
    """The 'value unit' pairs of a table row, in bytes, and the bare numbers."""
    toks = line.split()[1:]
    out, i = [], 0
    while i < len(toks):
        if i + 1 < len(toks) and toks[i + 1] in UNIT:
            out.append(float(toks[i]) * UNIT[toks[i + 1]]); i += 2
        else:
            out.append(float(toks[i])); i += 1
    return out
def row0(lines, header):
    for k, l in enumerate(lines):
        if l.startswith(header):
            # notes and the column header, then rank 0's row
            return sizes(next(r for r in lines[k + 1:] if not r.startswith("#")))
    raise SystemExit("no table '%s'" % header)
mib = lambda b: b / 2**20
recs = []
for line in open(sys.argv[1]):
    model, layout, sp, zero, rc, out, jl = line.split()
    lines = open(out).read().splitlines()
    exp = row0(lines, "# memory per rank, expected")
    # compute w, master w, gradients, moments, act/mb, in flight, act total, comm, gather, total
    state = exp[0] + exp[1] + exp[2] + exp[3]
    meas = row0(lines, "# memory per rank, measured")  # expected, allocator, ratio, RSS
    steps = [json.loads(l) for l in open(jl) if '"summary"' not in l]
    ms = statistics.median([s["step_ms"] for s in steps[1:]] or [steps[0]["step_ms"]])
    sent = statistics.median([s["comm_bytes"] for s in steps[1:]] or [steps[0]["comm_bytes"]])
    recs.append(dict(model=model, layout=layout, sp=sp, zero=int(zero), recompute=rc,
                     state_mib=mib(state), act_mib=mib(exp[6]), gather_mib=mib(exp[8]),
                     expected_mib=mib(exp[9]), allocator_mib=mib(meas[1]),
                     ratio=meas[1] / exp[9], rss_mib=mib(meas[3]), step_ms=ms,
                     sent_mib=mib(sent)))
cols = ["model", "layout", "sp", "zero", "recompute", "state_mib", "act_mib", "gather_mib",
        "expected_mib", "allocator_mib", "ratio", "rss_mib", "step_ms", "sent_mib"]
print("%-5s %-5s %-3s %4s %-9s %10s %9s %9s %10s %10s %9s %9s %9s %10s" % tuple(
    ["model", "grid", "sp", "zero", "recompute", "state MiB", "act MiB", "gath MiB",
     "exp MiB", "alloc MiB", "alloc/exp", "RSS MiB", "step ms", "sent MiB"]))
for r in recs:
    print("%-5s %-5s %-3s %4d %-9s %10.1f %9.1f %9.1f %10.1f %10.1f %9.4f %9.1f %9.0f %10.1f" % tuple(
        r[c] for c in cols))
worst = max(abs(r["ratio"] - 1) for r in recs)
print("allocator peak vs the account: worst |ratio - 1| = %.2e over %d runs" % (worst, len(recs)))
if sys.argv[2]:
    with open(sys.argv[2], "w") as f:
        f.write(",".join(cols) + "\n")
        for r in recs:
            f.write(",".join(str(r[c]) for c in cols) + "\n")
PY
