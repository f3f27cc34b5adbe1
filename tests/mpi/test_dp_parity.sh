#!/bin/sh
# test_dp_parity.sh - the same global batch gives the same training at any
# data-parallel size: dp = 1, 2, 3, 4 (and with gradient accumulation over
# micro-batches) produce the loss trajectory of dp = 1 over 10 steps within
# 1e-5 relative, gradient norms too; also with [parallel] allreduce = ring,
# tree and halving (and ZeRO 1-3 on them).
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"

# run NAME NRANKS DP MICROBATCHES [KEY=VALUE...]
run() {
  name=$1 nranks=$2 dp=$3 mb=$4
  shift 4
  run_mpi "$nranks" 300 "$GT_BIN" train "$deck" data.train="$data" grid.dp="$dp" \
    data.microbatches="$mb" run.metrics="$GT_TMP/$name.jsonl" "$@" >"$GT_TMP/$name.out" 2>&1
  status=$?
  ok $status "train at dp=$dp with $mb micro-batch(es) on $nranks ranks $*"
  [ $status -eq 0 ] || sed 's/^/# /' "$GT_TMP/$name.out"
}

run dp1 1 1 1
run dp2 2 2 1
run dp3 3 3 1
run dp4 4 4 1
run dp1m4 1 1 4
run dp2m2 2 2 2
run dp4m3 4 4 3
# gridtrain's own algorithms for the data-parallel reductions (small
# segments and buckets: many of both), with ZeRO's reduce-scatters and
# all-gathers on them too
seg="parallel.coll_segment_kb=4 parallel.bucket_mb=0.1"
run ring4 4 4 1 parallel.allreduce=ring $seg
run tree3 3 3 1 parallel.allreduce=tree $seg
run halving3 3 3 2 parallel.allreduce=halving $seg
run ring3z1 3 3 1 parallel.allreduce=ring parallel.zero=1 $seg
run tree4z2 4 4 3 parallel.allreduce=tree parallel.zero=2 $seg
run halving4z3 4 4 1 parallel.allreduce=halving parallel.zero=3 $seg

# compare NAME: every step's loss and gradient norm against dp1
compare() {
  "$PYTHON_REF" - "$GT_TMP/dp1.jsonl" "$GT_TMP/$1.jsonl" <<'PY'
import json, sys
def load(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if not r.get("summary")]
ref, got = load(sys.argv[1]), load(sys.argv[2])
if len(ref) != 10 or len(got) != 10:
    sys.exit(f"expected 10 steps, got {len(ref)} and {len(got)}")
worst = 0.0
for a, b in zip(ref, got):
    for key in ("loss", "grad_norm"):
        worst = max(worst, abs(a[key] - b[key]) / abs(a[key]))
print(f"# worst relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}

for name in dp2 dp3 dp4 dp1m4 dp2m2 dp4m3 ring4 tree3 halving3 ring3z1 tree4z2 halving4z3; do
  compare "$name"
  ok $? "$name: loss and gradient norm at each of 10 steps match dp=1 within 1e-5"
done

# the loss falls: step 9 is below step 0
"$PYTHON_REF" - "$GT_TMP/dp1.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.exit(0 if rows[9]["loss"] < rows[0]["loss"] - 0.5 else 1)
PY
ok $? "training lowers the loss by more than 0.5 in 10 steps"

done_testing
