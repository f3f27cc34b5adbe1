#!/bin/sh
# test_score.sh - gridtrain score (docs/generation.md): the mean cross-entropy
# of text files equals an independent PyTorch computation over the same
# windows (tests/ref/score_ref.py reads the checkpoint's weights with h5py
# and evaluates in float64); tp = 2, pp = 2 (two schedules) and dp = 2 give
# the one-rank result; --json is one JSON object with perplexity = exp(loss);
# --tokens on a .npy of the same ids gives the same result; bad input is one
# error line and exit 2.
# Sizes: the tiny deck (seq_len 32) trained 30 steps (~1 s); three files of
# 3000 bytes (93 full windows and a short one of 23), 301 bytes (9 full
# windows and a short one of 12: another length) and 1 byte (nothing to
# predict), so that full, short and empty windows all occur, and with 2 data
# or pipeline ranks passes with filler micro-batches too. About 15 s.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

if ! "$PYTHON_REF" -c 'import torch, h5py, numpy' 2>/dev/null; then
  echo "1..0 # SKIP $PYTHON_REF lacks torch, h5py or numpy (python3-torch, python3-h5py)"
  exit 0
fi
show() { sed 's/^/#   /' "$1"; }

"$GT_BIN" --help 2>&1 | grep -q "^  score CKPT"
ok $? "gridtrain --help lists score"
"$GT_BIN" score --help >"$GT_TMP/help" 2>&1
st=$?
missing=""
for o in --tokens --json --data grid.tp grid.pp grid.dp; do
  grep -q -- "$o" "$GT_TMP/help" || missing="$missing $o"
done
[ $st -eq 0 ] && [ -z "$missing" ] && [ "$(awk 'length($0) > 80' "$GT_TMP/help" | wc -l)" -eq 0 ]
ok $? "score --help exits 0 and documents every option in 80 columns${missing:+ (missing:$missing)}"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
run_mpi 1 120 "$GT_BIN" train "$deck" data.train="$data" run.steps=30 run.log_every=30 \
  checkpoint.dir="$GT_TMP/ck" >"$GT_TMP/train.out" 2>&1
ok $? "train 30 steps of the tiny deck" || show "$GT_TMP/train.out"
ck="$GT_TMP/ck/step_00000030.h5"
txt="$GT_SRCDIR/tests/data/genesis.txt"
head -c 3000 "$txt" >"$GT_TMP/a.txt"
tail -c +5001 "$txt" | head -c 301 >"$GT_TMP/b.txt"
printf 'x' >"$GT_TMP/c.txt"
files="$GT_TMP/a.txt $GT_TMP/b.txt $GT_TMP/c.txt"

# score NAME RANKS ARGS...: gridtrain score, stdout in NAME.out, stderr in NAME.err
score() {
  s_name=$1 s_ranks=$2
  shift 2
  run_mpi "$s_ranks" 120 "$GT_BIN" score "$@" >"$GT_TMP/$s_name.out" 2>"$GT_TMP/$s_name.err"
}
# field NAME KEY: a key of NAME.out's JSON object
field() {
  "$PYTHON_REF" -c 'import json, sys; print(repr(json.load(open(sys.argv[1]))[sys.argv[2]]))' \
    "$GT_TMP/$1.out" "$2"
}
# close A B TOL: |A - B| <= TOL |B|
close() {
  "$PYTHON_REF" -c 'import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(abs(a - b) > t * abs(b))' \
    "$1" "$2" "$3"
}

# ---- (1) the loss against PyTorch
# shellcheck disable=SC2086 # $files: one file a word
"$PYTHON_REF" "$GT_SRCDIR/tests/ref/score_ref.py" "$ck" $files >"$GT_TMP/ref.txt" 2>"$GT_TMP/ref.err"
ok $? "PyTorch's loss of the same windows" || show "$GT_TMP/ref.err"
ref_n=$(cut -d' ' -f1 "$GT_TMP/ref.txt")
ref_loss=$(cut -d' ' -f2 "$GT_TMP/ref.txt")
# the checkpoint directory stands for its latest checkpoint
# shellcheck disable=SC2086
score one 1 "$GT_TMP/ck" $files --json
st=$?
ntok=$(field one tokens) loss=$(field one loss)
[ $st -eq 0 ] && [ "$ntok" = 3299 ] && [ "$ref_n" = 3299 ] && close "$loss" "$ref_loss" 1e-4
ok $? "1 rank: $ntok tokens, loss $loss = PyTorch's $ref_loss within 1e-4" || show "$GT_TMP/one.err"

# ---- (2) layouts
for lay in "tp grid.tp=2" "pp grid.pp=2" "pp-gpipe grid.pp=2 parallel.schedule=gpipe data.microbatches=3" \
  "dp grid.dp=2" "dp-micro grid.dp=2 data.microbatches=4"; do
  name=${lay%% *}
  # shellcheck disable=SC2086 # $files, ${lay#* }: one argument a word
  score "$name" 2 "$ck" $files --json ${lay#* }
  st=$?
  l2=$(field "$name" loss 2>/dev/null)
  [ $st -eq 0 ] && [ "$(field "$name" tokens)" = "$ntok" ] && close "$l2" "$loss" 1e-5
  ok $? "2 ranks, ${lay#* }: loss $l2 = the 1-rank loss within 1e-5" || show "$GT_TMP/$name.err"
done

# ---- (3) the output
"$PYTHON_REF" - "$GT_TMP/one.out" <<'PY'
import json, math, sys
lines = open(sys.argv[1]).read().splitlines()
o = json.loads(lines[0])
assert len(lines) == 1 and set(o) == {"tokens", "loss", "perplexity"}, lines
assert isinstance(o["tokens"], int)
assert abs(o["perplexity"] - math.exp(o["loss"])) <= 1e-12 * o["perplexity"], o
PY
ok $? "--json: one JSON object with tokens, loss and perplexity = exp(loss)"
# shellcheck disable=SC2086
score human 1 "$ck" $files
want=$("$PYTHON_REF" -c 'import math, sys; l = float(sys.argv[2]); print("score: %s tokens, loss %.4f nats/token, perplexity %.2f" % (sys.argv[1], l, math.exp(l)))' "$ntok" "$loss")
[ "$(cat "$GT_TMP/human.out")" = "$want" ] && [ ! -s "$GT_TMP/human.err" ]
ok $? "without --json: '$want'" || { show "$GT_TMP/human.out"; show "$GT_TMP/human.err"; }

# ---- (4) --tokens: .npy files of the same ids
"$PYTHON_REF" - "$GT_TMP" <<'PY' || bail "cannot write the .npy files"
import sys
import numpy as np
d = sys.argv[1]
for name, dtype in (("a", np.uint16), ("b", np.int32), ("c", np.uint8)):
    np.save(f"{d}/{name}.npy", np.frombuffer(open(f"{d}/{name}.txt", "rb").read(), np.uint8).astype(dtype))
np.save(f"{d}/big.npy", np.array([1, 2, 300, 4], np.uint16))
PY
score npy 1 "$ck" "$GT_TMP/a.npy" "$GT_TMP/b.npy" "$GT_TMP/c.npy" --tokens --json
st=$?
[ $st -eq 0 ] && [ "$(field npy tokens)" = "$ntok" ] && close "$(field npy loss)" "$loss" 1e-12
ok $? "--tokens on .npy files of the same ids: the same loss ($(field npy loss 2>/dev/null))" || show "$GT_TMP/npy.err"

# ---- (5) bad input: one error line, exit 2, nothing on stdout
# bad NAME RANKS PATTERN ARGS...
bad() {
  b_name=$1 b_ranks=$2 b_pat=$3
  shift 3
  score "$b_name" "$b_ranks" "$@"
  b_st=$?
  [ $b_st -eq 2 ] && [ "$(wc -l <"$GT_TMP/$b_name.err")" -eq 1 ] &&
    grep -q "^gridtrain: error: .*$b_pat" "$GT_TMP/$b_name.err" && [ ! -s "$GT_TMP/$b_name.out" ]
  ok $? "$b_name: exit 2 (got $b_st), one line: $(cat "$GT_TMP/$b_name.err")"
}
bad missing-file 2 "nope.txt" "$ck" "$GT_TMP/a.txt" "$GT_TMP/nope.txt"
bad empty-file 1 "empty" "$ck" /dev/null
mkdir -p "$GT_TMP/notck"
bad not-ckpt-dir 2 "is not a checkpoint" "$GT_TMP/notck" "$GT_TMP/a.txt"
bad not-ckpt-file 1 "a.txt" "$GT_TMP/a.txt" "$GT_TMP/b.txt"
# E-SCORE-05 (docs/errors.md)
bad beyond-vocab 2 "token 300 at position 2 is outside the vocabulary \[0, 256)" \
  "$ck" "$GT_TMP/big.npy" --tokens
bad nothing 1 "fewer than 2 tokens" "$ck" "$GT_TMP/c.txt"
bad override 1 "tp=3" "$ck" "$GT_TMP/a.txt" grid.tp=3
bad option 1 "unknown option '--bogus'" "$ck" "$GT_TMP/a.txt" --bogus
bad no-files 1 "no file to score" "$ck"
no_gpu_named score "$ck" "$GT_TMP/a.txt"

done_testing
