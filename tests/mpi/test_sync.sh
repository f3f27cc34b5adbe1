#!/bin/sh
# test_sync.sh - [parallel] sync, the local and asynchronous update modes:
#   - local:1 is synchronous training bit for bit (the same final checkpoint),
#     stale:0 within rounding (its gradients travel in one all-reduce, not in
#     buckets);
#   - every mode resumes bit for bit: 3 steps, a checkpoint (between two
#     synchronisations), 5 more give the final checkpoint of 8 steps straight
#     (every dataset, each replica's state in /rank/state too); also with tp
#     and pp inside the replicas (dp=2 x tp=2, dp=2 x pp=2), where local:1
#     is again synchronous training bit for bit;
#   - the modes learn: the loss falls;
#   - stale:2 with a straggler (rank 1 sleeps 300 ms in steps 2 and 3): rank 0
#     runs those steps at its own pace (with every_step it waits), and the
#     result is the same bits as without the straggler;
#   - a resume in another mode warns that the mode starts afresh;
#   - sync with ZeRO, and malformed modes, are refused with one clear line.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
common="data.train=$data parallel.bucket_mb=0.05 checkpoint.keep=0 run.eval_every=0"

train every 4 8 grid.dp=4
ok $? "every_step at dp=4" || sed 's/^/# /' "$GT_TMP/every.out"
train local1 4 8 grid.dp=4 parallel.sync=local:1
ok $? "local:1 at dp=4" || sed 's/^/# /' "$GT_TMP/local1.out"
same_ckpt "$GT_TMP/ck-every/step_00000008.h5" "$GT_TMP/ck-local1/step_00000008.h5"
ok $? "local:1 gives synchronous training's final checkpoint bit for bit"
train stale0 4 8 grid.dp=4 parallel.sync=stale:0
ok $? "stale:0 at dp=4" || sed 's/^/# /' "$GT_TMP/stale0.out"
same_ckpt "$GT_TMP/ck-every/step_00000008.h5" "$GT_TMP/ck-stale0/step_00000008.h5" 1e-5
ok $? "stale:0 gives synchronous training's weights and moments within 1e-5"

for mode in local:4 diloco:4 easgd:2,0.2 stale:2; do
  name=$(echo "$mode" | tr ':.,' '___')
  train "full_$name" 4 8 grid.dp=4 parallel.sync="$mode" checkpoint.every=3
  st1=$?
  train "half_$name" 4 3 grid.dp=4 parallel.sync="$mode"
  st2=$?
  mv "$GT_TMP/half_$name.out" "$GT_TMP/half_$name.first.out"
  train "half_$name" 4 8 grid.dp=4 parallel.sync="$mode"
  st3=$?
  ok $((st1 + st2 + st3)) "sync=$mode: 8 steps, and 3 + resume + 5" ||
    sed 's/^/# /' "$GT_TMP/half_$name.out"
  grep -q "resumed from" "$GT_TMP/half_$name.out" &&
    ! grep -q "holds no \[parallel\] sync state" "$GT_TMP/half_$name.out"
  ok $? "sync=$mode: the second run resumed with the mode's state"
  same_ckpt "$GT_TMP/ck-full_$name/step_00000008.h5" "$GT_TMP/ck-half_$name/step_00000008.h5"
  ok $? "sync=$mode: the resumed run's final checkpoint equals the straight run's bit for bit"
  "$PYTHON_REF" - "$GT_TMP/full_$name.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r and not r.get("summary")]
sys.exit(0 if len(rows) == 8 and rows[-1]["loss"] < rows[0]["loss"] - 0.3 else 1)
PY
  ok $? "sync=$mode: the loss falls over 8 steps"
done

# inside each replica: tp and pp (a replica is the pp x tp ranks of a dp rank)
train every_pp 4 6 grid.dp=2 grid.pp=2
st1=$?
train local1_pp 4 6 grid.dp=2 grid.pp=2 parallel.sync=local:1
st2=$?
ok $((st1 + st2)) "every_step and local:1 at dp=2 x pp=2"
same_ckpt "$GT_TMP/ck-every_pp/step_00000006.h5" "$GT_TMP/ck-local1_pp/step_00000006.h5"
ok $? "local:1 at dp=2 x pp=2 is synchronous training bit for bit"
for layout in "grid.dp=2 grid.tp=2:diloco:2" "grid.dp=2 grid.pp=2:stale:1" "grid.dp=2 grid.tp=2:easgd:2,0.3"; do
  grid=${layout%%:*}
  mode=${layout#*:}
  name=$(echo "$grid $mode" | tr ' :.,=' '_____')
  train "full_$name" 4 6 $grid parallel.sync="$mode" checkpoint.every=3
  st1=$?
  train "half_$name" 4 3 $grid parallel.sync="$mode"
  st2=$?
  mv "$GT_TMP/half_$name.out" "$GT_TMP/half_$name.first.out"
  train "half_$name" 4 6 $grid parallel.sync="$mode"
  st3=$?
  ok $((st1 + st2 + st3)) "sync=$mode at $grid: 6 steps, and 3 + resume + 3" ||
    sed 's/^/# /' "$GT_TMP/half_$name.out"
  same_ckpt "$GT_TMP/ck-full_$name/step_00000006.h5" "$GT_TMP/ck-half_$name/step_00000006.h5"
  ok $? "sync=$mode at $grid: resume is bit for bit"
done

# the straggler: rank 1 sleeps in steps 2 and 3
slow="slow_step:rank=1:step=2,slow_step:rank=1:step=3"
GT_FAULT=$slow train strag_every 2 8 grid.dp=2
st1=$?
GT_FAULT=$slow train strag_stale 2 8 grid.dp=2 parallel.sync=stale:2
st2=$?
train calm_stale 2 8 grid.dp=2 parallel.sync=stale:2
st3=$?
ok $((st1 + st2 + st3)) "dp=2 with a straggler: every_step and stale:2, and stale:2 without one"
"$PYTHON_REF" - "$GT_TMP/strag_every.jsonl" "$GT_TMP/strag_stale.jsonl" <<'PY'
import json, sys
def ms(p):
    return {r["step"]: r["step_ms"] for r in map(json.loads, open(p))
            if "step_ms" in r and not r.get("summary")}
every, stale = ms(sys.argv[1]), ms(sys.argv[2])
print("# rank 0 step_ms, every_step: " + " ".join(f"{every[s]:.0f}" for s in sorted(every)))
print("# rank 0 step_ms, stale:2:    " + " ".join(f"{stale[s]:.0f}" for s in sorted(stale)))
waits_every = every[2] >= 250 and every[3] >= 250
free_stale = stale[2] < 200 and stale[3] < 200
sys.exit(0 if waits_every and free_stale else 1)
PY
ok $? "stale:2: rank 0 does not wait for the straggler in its slow steps (every_step does)"
same_ckpt "$GT_TMP/ck-strag_stale/step_00000008.h5" "$GT_TMP/ck-calm_stale/step_00000008.h5"
ok $? "stale:2 is deterministic: the same bits with and without the straggler"

# another mode on resume: the replicas start from the file's weights
mkdir -p "$GT_TMP/ck-switch" && cp "$GT_TMP/ck-half_local_4/step_00000003.h5" \
  "$GT_TMP/ck-switch/" && echo step_00000003.h5 >"$GT_TMP/ck-switch/latest"
train switch 4 6 grid.dp=4 parallel.sync=diloco:2
st=$?
grep -q "holds no \[parallel\] sync state for this run" "$GT_TMP/switch.out"
ok $((st + $?)) "a resume in another sync mode warns that the mode starts afresh, and trains" ||
  sed 's/^/# /' "$GT_TMP/switch.out"

train zero 4 2 grid.dp=4 parallel.sync=local:2 parallel.zero=1
st=$?
[ $st -ne 0 ] && grep -q "sync = local:2 needs zero = 0" "$GT_TMP/zero.out"
ok $? "sync with zero = 1 is refused with a clear error (exit $st)"
for bad in local:0 easgd:2 easgd:2,1.5 stale:-1 sometimes; do
  train bad 2 2 grid.dp=2 parallel.sync="$bad"
  st=$?
  [ $st -ne 0 ] && grep -q "sync = '$bad': expected every_step" "$GT_TMP/bad.out"
  ok $? "sync = $bad is refused with the forms expected (exit $st)"
done
train alpha 4 2 grid.dp=4 parallel.sync=easgd:2,0.5
st=$?
[ $st -ne 0 ] && grep -q "choose ALPHA <= 0.25" "$GT_TMP/alpha.out"
ok $? "easgd with ALPHA x dp > 1 is refused (exit $st)"

done_testing
