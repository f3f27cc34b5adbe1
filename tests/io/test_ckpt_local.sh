#!/bin/sh
# test_ckpt_local.sh - the node-local tier ([checkpoint] local_dir,
# local_every, partner) and resume = auto choosing among the tiers.
# A 2-rank run (dp = 2) with local_every = 2 and a global checkpoint every 6
# steps loses rank 1 (GT_FAULT kill) in step 9: the rerun must take the
# node-local state of step 8 over the global checkpoint of step 6, say so,
# and reproduce the uninterrupted run's losses bit for bit. Then (full tier
# only; tests/quick/ckpt_local.sh runs the first part): both copies of a
# part with one byte flipped -> step 8 refused naming the part, step 6 used,
# bit for bit; rank 1's own parts deleted -> its partner copies serve, bit
# for bit; a state written at dp=2 x tp=2 with ZeRO 1 resumed at dp=1 x
# tp=2 follows the uninterrupted run within 1e-5 (the layout bound), and so
# does one resumed at pp=2 (parts matched tensor by tensor); local_dir with
# an unset $VAR is exit 2 naming the key.
# Sizes: the tiny deck, 12 steps, 2 and 4 ranks (about a second a run).
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
common="data.train=$data data.val=$data run.eval_every=100 run.steps=12 parallel.wait=yield"
# async = off: the global checkpoint of step 6 is complete when step 7
# begins (an asynchronous one is named a step boundary or two later,
# however busy the machine: the test needs it named before the kill)
local="checkpoint.local_every=2 checkpoint.every=6 checkpoint.partner=on checkpoint.async=off"
train_limit=120

# same_losses REF RUN TOL: every step of RUN's metrics is in REF's with the
# same loss (TOL 0: the same bits; else within TOL relative)
same_losses() {
  awk -v tol="$3" '
    { if (match($0, /"step":[0-9]+/)) s = substr($0, RSTART + 7, RLENGTH - 7); else next
      if (!match($0, /"loss":[-0-9.e+]+/)) next
      l = substr($0, RSTART + 7, RLENGTH - 7) }
    FNR == NR { ref[s] = l; next }
    { n++; d = l - ref[s]; if (d < 0) d = -d; r = ref[s] < 0 ? -ref[s] : ref[s]
      if (!(s in ref) || (tol == 0 ? l != ref[s] : d > tol * r)) bad++ }
    END { printf "# %d steps compared, %d differ\n", n, bad; exit !(n > 0 && bad == 0) }' "$1" "$2"
}
show() { sed 's/^/#   /' "$1"; }

# ---- reference, and the run that loses a rank in step 9 ---------------------------------------
run_train 2 ref grid.dp=2 run.metrics="$GT_TMP/ref.jsonl"
ok $? "reference run (dp=2, 12 steps) exits 0"
GT_FAULT=kill:rank=1:step=9:op=forward run_train 2 killed grid.dp=2 $local \
  checkpoint.dir="$GT_TMP/ck" checkpoint.local_dir="$GT_TMP/local"
rc=$?
[ $rc -ne 0 ] && [ -f "$GT_TMP/local/step_00000008/done_00000" ] &&
  [ -f "$GT_TMP/local/step_00000008/own_00001.gtl" ] &&
  [ -f "$GT_TMP/local/step_00000008/partner_00001.gtl" ] && [ -f "$GT_TMP/ck/step_00000006.h5" ]
ok $? "rank 1 killed in step 9 (status $rc): node-local state of step 8 with partner copies, global checkpoint of step 6"
cp -r "$GT_TMP/local" "$GT_TMP/local.saved"
cp -r "$GT_TMP/ck" "$GT_TMP/ck.saved"
# restore DIR: the killed run's directories again, as DIR and DIR-ck
restore() {
  rm -rf "$GT_TMP/$1" "$GT_TMP/$1-ck"
  cp -r "$GT_TMP/local.saved" "$GT_TMP/$1" && cp -r "$GT_TMP/ck.saved" "$GT_TMP/$1-ck"
}

# rerun NAME: the dp=2 run again from the restored directories NAME, NAME-ck
rerun() {
  run_train 2 "$1" grid.dp=2 $local checkpoint.dir="$GT_TMP/$1-ck" \
    checkpoint.local_dir="$GT_TMP/$1" run.metrics="$GT_TMP/$1.jsonl"
}

restore auto
rerun auto
ok $? "rerun with resume = auto exits 0"
grep -q "^gridtrain: resumed from the node-local state of step 8 (global checkpoint: step 6)" \
  "$GT_TMP/auto.out"
ok $? "it takes the node-local state of step 8 over the global checkpoint of step 6, and says so"
[ $? -eq 0 ] || show "$GT_TMP/auto.out"
same_losses "$GT_TMP/ref.jsonl" "$GT_TMP/auto.jsonl" 0
ok $? "its losses are the uninterrupted run's, bit for bit"

unset GT_NOT_SET_ANYWHERE
run_train 1 unset 'checkpoint.local_dir=/dev/shm/gt-$GT_NOT_SET_ANYWHERE' \
  checkpoint.local_every=2
rc=$?
[ $rc -eq 2 ] && grep -q "\[checkpoint\] local_dir = .*GT_NOT_SET_ANYWHERE is not set" "$GT_TMP/unset.err"
ok $? "local_dir with an unset \$VAR: exit 2 naming the key (status $rc)"

if quick_tier; then
  done_testing
  exit
fi

# ---- one byte flipped in both copies of rank 1's part of step 8 -------------------------------
restore flip
for f in "$GT_TMP/flip/step_00000008/own_00001.gtl" "$GT_TMP/flip/step_00000008/partner_00001.gtl"; do
  size=$(wc -c <"$f")
  at=$((size / 2))
  byte=$(od -An -tu1 -j $at -N 1 "$f" | tr -d ' ')
  printf "$(printf '\\%03o' $(((byte + 1) % 256)))" |
    dd of="$f" bs=1 seek=$at count=1 conv=notrunc 2>/dev/null
done
rerun flip
ok $? "rerun with a damaged part exits 0"
grep -q "node-local part .*step_00000008/[a-z]*_00001.gtl is damaged: the checksum of its bytes" \
  "$GT_TMP/flip.err" &&
  grep -q "node-local state of step 8 is not used: no copy of rank 1's part verifies" \
    "$GT_TMP/flip.out" &&
  grep -q "^gridtrain: resumed from the node-local state of step 6 " "$GT_TMP/flip.out"
ok $? "step 8 is refused naming the damaged part; the state of step 6 is used"
[ $? -eq 0 ] || { show "$GT_TMP/flip.out"; show "$GT_TMP/flip.err"; }
same_losses "$GT_TMP/ref.jsonl" "$GT_TMP/flip.jsonl" 0
ok $? "from step 6: the uninterrupted run's losses, bit for bit"

# ---- rank 1's own parts deleted: the partner copies serve ---------------------------------------
restore lost
rm -f "$GT_TMP"/lost/step_*/own_00001.gtl
rerun lost
ok $? "rerun without rank 1's own parts exits 0"
grep -q "^gridtrain: resumed from the node-local state of step 8 (global checkpoint: step 6); 1 of its 2 parts from partner copies" \
  "$GT_TMP/lost.out"
ok $? "rank 1's part of step 8 comes from its partner copy"
same_losses "$GT_TMP/ref.jsonl" "$GT_TMP/lost.jsonl" 0
ok $? "its losses are the uninterrupted run's, bit for bit"

# ---- another pipeline split: tensor by tensor ------------------------------------------------
restore pp
run_train 2 pp grid.pp=2 $local checkpoint.dir="$GT_TMP/pp-ck" checkpoint.local_dir="$GT_TMP/pp" \
  run.metrics="$GT_TMP/pp.jsonl"
ok $? "rerun at pp=2 exits 0"
grep -q "^gridtrain: resumed from the node-local state of step 8 (global checkpoint: step 6); written at dp=2 x pp=1 x tp=1, redistributed to dp=1 x pp=2 x tp=1 tensor by tensor" \
  "$GT_TMP/pp.out"
ok $? "at another pp the parts are matched tensor by tensor"
[ $? -eq 0 ] || show "$GT_TMP/pp.out"
same_losses "$GT_TMP/ref.jsonl" "$GT_TMP/pp.jsonl" 1e-5
ok $? "its losses follow the uninterrupted run within 1e-5"

# ---- written at dp=2 x tp=2 with ZeRO 1, resumed at dp=1 x tp=2 ---------------------------------
run_train 4 ref4 grid.dp=2 grid.tp=2 parallel.zero=1 run.metrics="$GT_TMP/ref4.jsonl"
ok $? "reference run (dp=2 x tp=2, ZeRO 1) exits 0"
GT_FAULT=kill:rank=1:step=9:op=forward run_train 4 killed4 grid.dp=2 grid.tp=2 parallel.zero=1 \
  $local checkpoint.dir="$GT_TMP/z-ck" checkpoint.local_dir="$GT_TMP/z"
[ $? -ne 0 ] && [ -f "$GT_TMP/z/step_00000008/done_00000" ]
ok $? "the dp=2 x tp=2 run loses rank 1 in step 9 after the node-local state of step 8"
run_train 2 shrink grid.dp=1 grid.tp=2 parallel.zero=1 $local checkpoint.dir="$GT_TMP/z-ck" \
  checkpoint.local_dir="$GT_TMP/z" run.metrics="$GT_TMP/shrink.jsonl"
ok $? "rerun at dp=1 x tp=2 exits 0"
grep -q "^gridtrain: resumed from the node-local state of step 8 (global checkpoint: step 6); written at dp=2 x pp=1 x tp=2, redistributed to dp=1" \
  "$GT_TMP/shrink.out"
ok $? "it redistributes the dp=2 parts of step 8 to dp=1"
[ $? -eq 0 ] || show "$GT_TMP/shrink.out"
same_losses "$GT_TMP/ref4.jsonl" "$GT_TMP/shrink.jsonl" 1e-5
ok $? "its losses follow the uninterrupted run within 1e-5"

done_testing
