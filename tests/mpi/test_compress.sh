#!/bin/sh
# test_compress.sh - [parallel] compress in training at dp = 4 (small buckets:
# several compressors):
#   - topk:1 and powersgd at full rank train as the uncompressed run does
#     (loss and gradient norm within 1e-5 at each of 8 steps); bf16 and fp16
#     within 1e-2;
#   - the bytes each step sends: bf16 half of fp32, topk:0.01 and powersgd:2
#     under a tenth;
#   - resume is bit for bit: 4 steps, a checkpoint, 4 more give the same
#     final checkpoint (every dataset, the residuals in /rank/state too) as
#     8 steps straight, for every method;
#   - a resume at another layout warns that the compression state starts
#     afresh, and trains on;
#   - compress with ZeRO is refused with one clear line.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
common="data.train=$data parallel.bucket_mb=0.05 checkpoint.keep=0"

# compare A B TOL: loss and gradient norm of every step
compare() {
  "$PYTHON_REF" - "$GT_TMP/$1.jsonl" "$GT_TMP/$2.jsonl" "$3" <<'PY'
import json, sys
def load(p):
    return [r for r in map(json.loads, open(p)) if "loss" in r and not r.get("summary")]
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
if len(a) != len(b) or not a:
    sys.exit(f"{len(a)} and {len(b)} steps")
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("loss", "grad_norm"))
print(f"# worst relative difference {worst:.2e}")
sys.exit(0 if worst <= tol else 1)
PY
}

train none 4 8 grid.dp=4
ok $? "uncompressed training at dp=4" || sed 's/^/# /' "$GT_TMP/none.out"

for mode in topk:1 powersgd:64 bf16 fp16; do
  name=$(echo "$mode" | tr ':' '_')
  tol=1e-5
  case $mode in bf16|fp16) tol=1e-2 ;; esac
  train "$name" 4 8 grid.dp=4 parallel.compress="$mode"
  ok $? "dp=4 compress=$mode trains" || sed 's/^/# /' "$GT_TMP/$name.out"
  compare none "$name" "$tol"
  ok $? "compress=$mode: loss and gradient norm within $tol of uncompressed at every step"
done

# bytes_of NAME: the bytes rank 0 sent in the last step of run NAME
bytes_of() {
  "$PYTHON_REF" -c '
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "comm_bytes" in r and not r.get("summary")]
print(int(rows[-1]["comm_bytes"]))' "$GT_TMP/$1.jsonl"
}
full=$(bytes_of none)
half=$(bytes_of bf16)
diag "bytes per step: fp32 $full, bf16 $half"
[ -n "$full" ] && [ $((half * 2)) -eq "$full" ]
ok $? "compress=bf16 sends half the bytes of fp32"

for mode in topk:0.05 powersgd:2 bf16 fp16 topk:0.01; do
  name=$(echo "$mode" | tr ':.' '__')
  train "full_$name" 4 8 grid.dp=4 parallel.compress="$mode" checkpoint.every=4
  st1=$?
  train "half_$name" 4 4 grid.dp=4 parallel.compress="$mode"
  st2=$?
  mv "$GT_TMP/half_$name.out" "$GT_TMP/half_$name.first.out"
  train "half_$name" 4 8 grid.dp=4 parallel.compress="$mode"
  st3=$?
  ok $((st1 + st2 + st3)) "compress=$mode: 8 steps, and 4 + resume + 4" ||
    sed 's/^/# /' "$GT_TMP/half_$name.out"
  grep -q "resumed from" "$GT_TMP/half_$name.out"
  ok $? "compress=$mode: the second run resumed"
  same_ckpt "$GT_TMP/ck-full_$name/step_00000008.h5" "$GT_TMP/ck-half_$name/step_00000008.h5" &&
    case $mode in
    topk* | powersgd*) has_dataset "$GT_TMP/ck-half_$name/step_00000008.h5" rank/state ;;
    *) ! has_dataset "$GT_TMP/ck-half_$name/step_00000008.h5" rank/state ;;
    esac
  ok $? "compress=$mode: the resumed run's final checkpoint equals the straight run's bit for bit"
done

# bytes of the sparse and low-rank methods
sparse=$(bytes_of full_topk_0_01)
lowrank=$(bytes_of full_powersgd_2)
diag "bytes per step: fp32 $full, topk:0.01 $sparse, powersgd:2 $lowrank"
[ $((sparse * 10)) -lt "$full" ] && [ $((lowrank * 10)) -lt "$full" ]
ok $? "topk:0.01 and powersgd:2 send under a tenth of the fp32 bytes"

# another layout: the residuals cannot follow
mkdir -p "$GT_TMP/ck-reshard" && cp "$GT_TMP/ck-half_topk_0_05/step_00000004.h5" \
  "$GT_TMP/ck-reshard/" && echo step_00000004.h5 >"$GT_TMP/ck-reshard/latest"
train reshard 2 6 grid.dp=2 parallel.compress=topk:0.05
st=$?
grep -q "holds no compression state for this run" "$GT_TMP/reshard.out"
ok $((st + $?)) "a resume at dp=2 from a dp=4 checkpoint warns that the residuals start at zero, and trains" ||
  sed 's/^/# /' "$GT_TMP/reshard.out"

train zero 4 2 grid.dp=4 parallel.compress=topk:0.1 parallel.zero=1
st=$?
[ $st -ne 0 ] && grep -q "compress = topk:0.1 works on the all-reduce of zero = 0" "$GT_TMP/zero.out"
ok $? "compress with zero = 1 is refused with a clear error (exit $st)"

done_testing
