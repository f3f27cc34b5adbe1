#!/bin/sh
# test_init.sh - [checkpoint] init: a run that does not resume starts from a
# checkpoint's weights (fine-tuning), at step 0 with a fresh optimizer, in
# any layout and precision; a run that resumes its own checkpoint ignores
# it; a bad init is one line and exit 2.
#
# With a learning rate of 0 a step leaves the fp32 master weights alone, so
# the checkpoint a one-step run writes must hold the init file's weights bit
# for bit, whatever the layout and the compute precision.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
common="data.train=$data optim.warmup=0"
frozen="optim.lr=0 optim.min_lr=0"
show() { sed 's/^/#   /' "$1"; }

# same_model A B: the /model datasets of checkpoints A and B are equal, bit
# for bit, and there are 28 of them (the tiny deck's tensors).
same_model() {
  "$PYTHON_REF" - "$1" "$2" <<'PY'
import sys
import h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in names if not np.array_equal(a["model"][n][()], b["model"][n][()])]
print(f"# {len(names)} tensors, {len(bad)} differ {bad[:3]}")
sys.exit(0 if names and len(names) == 28 and not bad else 1)
PY
}
# first_loss NAME: the loss of step 0 in NAME.jsonl
first_loss() { sed -n 's/.*"step":0,.*"loss":\([^,]*\),.*/\1/p' "$GT_TMP/$1.jsonl" | head -n 1; }

# ---- the weights to start from: 3 steps on one rank
train a 1 3
ok $? "a 3-step run writes its checkpoint"
init="$GT_TMP/ck-a/step_00000003.h5"
[ -r "$init" ] || bail "no $init"

# ---- init at dp = 2 (fp32) and at pp = 2 in bf16: the weights arrive whole
train b 2 1 grid.dp=2 checkpoint.init="$init" $frozen
ok $? "a run with [checkpoint] init at dp=2 exits 0"
[ $? -eq 0 ] || show "$GT_TMP/b.out"
grep -q "gridtrain: initial weights from $init (step 3 of the run that wrote it, fp32); training starts at step 0 with a fresh optimizer" "$GT_TMP/b.out"
ok $? "rank 0 says where the weights come from and that the run starts at step 0"
[ -r "$GT_TMP/ck-b/step_00000001.h5" ] && [ ! -e "$GT_TMP/ck-b/step_00000004.h5" ]
ok $? "the run counts its own steps from 0 (its checkpoint is step 1)"
same_model "$init" "$GT_TMP/ck-b/step_00000001.h5"
ok $? "with lr = 0 its checkpoint holds the init weights bit for bit (dp=2, fp32)"
train e 2 1 grid.pp=2 backend.precision=bf16 checkpoint.init="$init" $frozen
ok $? "a bf16 run at pp=2 with [checkpoint] init exits 0"
same_model "$init" "$GT_TMP/ck-e/step_00000001.h5"
ok $? "its checkpoint holds the init weights bit for bit (pp=2, bf16: the fp32 master)"

# ---- the same start at every layout; not the seed's random weights
train c 1 1 checkpoint.init="$init" $frozen
train d 1 1 $frozen
lb=$(first_loss b) lc=$(first_loss c) ld=$(first_loss d)
awk -v b="$lb" -v c="$lc" 'BEGIN { d = b - c; if (d < 0) d = -d; exit !(b != "" && d <= 1e-5 * c) }'
ok $? "the first loss from init is the same at dp=2 and on one rank ($lb vs $lc)"
[ -n "$ld" ] && [ "$lc" != "$ld" ]
ok $? "and differs from a run from the seed's weights ($lc vs $ld)"

# ---- resuming wins: a requeued fine-tuning run continues its own checkpoint
train b 2 2 grid.dp=2 checkpoint.init="$init" $frozen
ok $? "the init run, run again for 2 steps, exits 0"
grep -q "gridtrain: resumed from $GT_TMP/ck-b/step_00000001.h5 at step 1" "$GT_TMP/b.out" &&
  grep -q "\[checkpoint\] init = $init not used: the run continues from its own checkpoint" "$GT_TMP/b.out" &&
  ! grep -q "initial weights from" "$GT_TMP/b.out"
ok $? "it resumes from its own step 1 and says that init is not used"
[ $? -eq 0 ] || show "$GT_TMP/b.out"

# ---- bad init: one line, exit 2
# init_error NAME MESSAGE KEY=VALUE...: a run exits 2 with MESSAGE on stderr
init_error() {
  e_name=$1 e_msg=$2
  shift 2
  run_train 2 "$e_name" run.steps=1 checkpoint.resume=never "$@"
  e_rc=$?
  [ "$e_rc" -eq 2 ] && [ "$(wc -l <"$GT_TMP/$e_name.err")" -eq 1 ] &&
    grep -qF -- "$e_msg" "$GT_TMP/$e_name.err"
  e_st=$?
  [ $e_st -eq 0 ] || diag "exit $e_rc; stderr: $(cat "$GT_TMP/$e_name.err")"
  ok $e_st "$e_name: exit 2 and one line holding '$e_msg'"
}
init_error missing "$GT_TMP/none.h5" checkpoint.init="$GT_TMP/none.h5"
init_error directory "[checkpoint] init = $GT_TMP/ck-a is a directory" \
  checkpoint.init="$GT_TMP/ck-a"
init_error shape "holds a model with layers = 2 but the deck has [model] layers = 3" \
  checkpoint.init="$init" model.layers=3

done_testing
