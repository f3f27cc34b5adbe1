#!/bin/sh
# test_sample.sh - text generation (gridtrain sample, docs/generation.md):
# greedy decoding with the key/value cache equals greedy decoding of the same
# weights by an independent PyTorch model that recomputes the whole sequence
# for every token (tests/ref/sample_ref.py), token for token, on tp = 1 and
# tp = 2, and the logits of every position of a sampled sequence (--logits)
# are PyTorch's; the context length stops generation; the same seed gives the same
# text (on both layouts), another seed other text; bad options, layouts and
# checkpoints give one error line and exit 2; [run] sample_every prints the
# greedy sample of `gridtrain sample` at the same step, on tp = 2 and under
# ZeRO 3 too, and says why it prints none with pp = 2.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

if ! "$PYTHON_REF" -c 'import torch, h5py, numpy' 2>/dev/null; then
  echo "1..0 # SKIP $PYTHON_REF lacks torch, h5py or numpy (python3-torch, python3-h5py)"
  exit 0
fi
"$GT_BIN" --help 2>&1 | grep -q "^  sample CKPT"
ok $? "gridtrain --help lists sample"
"$GT_BIN" sample --help >"$GT_TMP/help" 2>&1
st=$?
missing=""
for o in --prompt --tokens --temperature --top-k --seed --data --ids --logits grid.tp; do
  grep -q -- "$o" "$GT_TMP/help" || missing="$missing $o"
done
[ $st -eq 0 ] && [ -z "$missing" ] && [ "$(awk 'length($0) > 80' "$GT_TMP/help" | wc -l)" -eq 0 ]
ok $? "sample --help exits 0 and documents every option in 80 columns${missing:+ (missing:$missing)}"
"$GT_BIN" train --help 2>&1 | grep -q "^    run.sample_every "
ok $? "train --help documents run.sample_every"
data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
show() { sed 's/^/#   /' "$1"; }

# ---- a model that has learnt something: 150 steps at seq_len 64 (~2 s)
run_mpi 1 300 "$GT_BIN" train "$deck" data.train="$data" model.seq_len=64 run.steps=150 \
  run.log_every=150 checkpoint.dir="$GT_TMP/ck" >"$GT_TMP/train.out" 2>&1
ok $? "train 150 steps of the tiny deck at seq_len 64" || show "$GT_TMP/train.out"
ck="$GT_TMP/ck/step_00000150.h5"
"$GT_BIN" ckpt convert "$ck" "$GT_TMP/w.h5" >/dev/null 2>&1
ok $? "export its weights (ckpt convert)"

# ---- greedy: gridtrain (cache) against PyTorch (full recomputation)
p1="In the beginning God"
p2="And Joseph said"
"$PYTHON_REF" "$GT_SRCDIR/tests/ref/sample_ref.py" "$GT_TMP/w.h5" 256 40 "$p1" "$p2" \
  >"$GT_TMP/torch.txt" 2>"$GT_TMP/torch.err"
ok $? "PyTorch greedy decoding of the exported weights" || show "$GT_TMP/torch.err"
diag "PyTorch: $(cat "$GT_TMP/torch.err")"
# sample RANKS NAME ARGS...: gridtrain sample of the checkpoint, stdout in NAME.out
sample() {
  s_ranks=$1 s_name=$2
  shift 2
  run_mpi "$s_ranks" 120 "$GT_BIN" sample "$ck" "$@" >"$GT_TMP/$s_name.out" 2>"$GT_TMP/$s_name.err"
}
for tp in 1 2; do
  i=0
  for p in "$p1" "$p2"; do
    i=$((i + 1))
    sample $tp "greedy-$tp-$i" --prompt "$p" --tokens 40 --temperature 0 --ids grid.tp=$tp
    st=$?
    want=$(sed -n "${i}p" "$GT_TMP/torch.txt")
    got=$(cat "$GT_TMP/greedy-$tp-$i.out")
    [ $st -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ] && [ "$(echo "$got" | wc -w)" -eq 40 ]
    ok $? "tp=$tp: greedy 40 tokens after '$p' = PyTorch's, token for token"
    [ "$got" = "$want" ] || { diag "gridtrain: $got"; diag "PyTorch:   $want"; show "$GT_TMP/greedy-$tp-$i.err"; }
  done
done
# the logits of every new token, against one PyTorch forward pass over the
# prompt and the tokens gridtrain drew (at a temperature: a varied sequence
# that reaches the end of the context)
for tp in 1 2; do
  sample $tp "logits-$tp" --prompt "$p2" --tokens 64 --temperature 1 --seed 11 --ids \
    --logits "$GT_TMP/logits-$tp.npy" grid.tp=$tp
  err=$("$PYTHON_REF" "$GT_SRCDIR/tests/ref/sample_ref.py" --logits "$GT_TMP/logits-$tp.npy" \
    "$GT_TMP/w.h5" "$p2" "$(cat "$GT_TMP/logits-$tp.out")" 2>"$GT_TMP/logits-$tp.err")
  ok $? "tp=$tp: the logits of all $(wc -w <"$GT_TMP/logits-$tp.out") new tokens up to the context = PyTorch's (max rel diff $err <= 1e-4)"
  [ -n "$err" ] || show "$GT_TMP/logits-$tp.err"
done
sample 1 text --prompt "$p1" --tokens 40 --temperature 0
want=$("$PYTHON_REF" -c 'import sys; print(bytes(map(int, sys.argv[2].split())).decode("utf-8", "replace"))' \
  x "$(sed -n 1p "$GT_TMP/torch.txt")")
[ "$(cat "$GT_TMP/text.out")" = "$p1$want" ]
ok $? "the text printed is the prompt and the decoded tokens ($(head -c 60 "$GT_TMP/text.out"))"

# ---- the context: prompt + new tokens stop at seq_len = 64
sample 1 ctx --prompt "$p1" --tokens 100 --temperature 0 --ids
[ $? -eq 0 ] && [ "$(wc -w <"$GT_TMP/ctx.out")" -eq $((64 - ${#p1})) ] &&
  grep -q "stopped at the context length" "$GT_TMP/ctx.err"
ok $? "--tokens 100 after a 20-token prompt stops at the context: 44 new tokens, and says so"

# ---- seeds: the same seed, the same text (on both layouts); another, other text
sample 1 s7a --prompt "$p2" --tokens 40 --temperature 0.9 --top-k 20 --seed 7 --ids
sample 1 s7b --prompt "$p2" --tokens 40 --temperature 0.9 --top-k 20 --seed 7 --ids
sample 2 s7tp --prompt "$p2" --tokens 40 --temperature 0.9 --top-k 20 --seed 7 --ids grid.tp=2
sample 1 s8 --prompt "$p2" --tokens 40 --temperature 0.9 --top-k 20 --seed 8 --ids
[ -s "$GT_TMP/s7a.out" ] && cmp -s "$GT_TMP/s7a.out" "$GT_TMP/s7b.out"
ok $? "the same seed twice: the same tokens"
cmp -s "$GT_TMP/s7a.out" "$GT_TMP/s7tp.out"
ok $? "the same seed on tp = 2: the same tokens"
[ -s "$GT_TMP/s8.out" ] && ! cmp -s "$GT_TMP/s7a.out" "$GT_TMP/s8.out"
ok $? "another seed: other tokens"
sample 1 k1 --prompt "$p1" --tokens 40 --temperature 5 --top-k 1 --seed 3 --ids
[ "$(cat "$GT_TMP/k1.out")" = "$(cat "$GT_TMP/greedy-1-1.out")" ]
ok $? "--top-k 1 at any temperature is greedy"

# ---- bad input: one error line, exit 2
# bad NAME RANKS PATTERN ARGS...: the run exits 2 with one error line holding PATTERN
bad() {
  b_name=$1 b_ranks=$2 b_pat=$3
  shift 3
  run_mpi "$b_ranks" 60 "$GT_BIN" sample "$@" >"$GT_TMP/$b_name.out" 2>"$GT_TMP/$b_name.err"
  b_st=$?
  [ $b_st -eq 2 ] && [ "$(wc -l <"$GT_TMP/$b_name.err")" -eq 1 ] &&
    grep -q "^gridtrain: error: .*$b_pat" "$GT_TMP/$b_name.err" && [ ! -s "$GT_TMP/$b_name.out" ]
  ok $? "$b_name: exit 2 (got $b_st), one line: $(cat "$GT_TMP/$b_name.err")"
}
bad temperature 1 "--temperature '-1': expected a number >= 0" "$ck" --temperature -1
bad temperature-nan 1 "--temperature 'nan'" "$ck" --temperature nan
bad top-k 1 "--top-k '-3': expected an integer" "$ck" --top-k -3
bad tokens 1 "--tokens '0': expected an integer in \[1, 1000000\]" "$ck" --tokens 0
bad option 1 "unknown option '--temp'" "$ck" --temp 1
no_gpu_named sample "$ck" --tokens 2
bad missing 2 "cannot open checkpoint $GT_TMP/nope.h5" "$GT_TMP/nope.h5"
head -c 20000 "$ck" >"$GT_TMP/trunc.h5"
bad truncated 1 "checkpoint $GT_TMP/trunc.h5 is not a readable HDF5 file" "$GT_TMP/trunc.h5"
cp "$ck" "$GT_TMP/flipped.h5"
"$PYTHON_REF" - "$GT_TMP/flipped.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:   # a byte of wte's data, in the file
    off = f["/model/wte"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 1000)
    b = f.read(1)
    f.seek(off + 1000)
    f.write(bytes([b[0] ^ 0xFF]))
EOF
# E-SAMPLE-05 (docs/errors.md): a damaged weight block is bad input too
bad damaged 1 "checkpoint $GT_TMP/flipped.h5: /model/[a-z0-9_.]* is damaged: the checksum" "$GT_TMP/flipped.h5"
bad pp 1 "grid.pp=2: sample runs the whole model on one pipeline stage" "$ck" grid.pp=2
bad tp-ranks 1 "grid.tp=2, but the job has 1 rank" "$ck" grid.tp=2
bad empty-prompt 1 "the prompt encodes to no token" "$ck" --prompt "" --data "$data"
bad shape 1 "model.dim=32: the model shape comes from the checkpoint" "$ck" model.dim=32
bad long-prompt 1 "the prompt is 64 tokens and the model's context 64" "$ck" \
  --prompt "$(printf '%064d' 0)"

# ---- [run] sample_every: the greedy sample of `gridtrain sample` at that step
# strip NAME: the sample after step 10 in NAME.out, between its two marks
strip() { sed -n '/^--- sample after step 10:/,/^---$/p' "$GT_TMP/$1.out" | sed '1d;$d'; }
run_every() {
  e_name=$1 e_ranks=$2
  shift 2
  run_mpi "$e_ranks" 300 "$GT_BIN" train "$deck" data.train="$data" run.steps=10 \
    run.log_every=10 run.sample_every=5 checkpoint.dir="$GT_TMP/ck-$e_name" "$@" \
    >"$GT_TMP/$e_name.out" 2>"$GT_TMP/$e_name.err"
}
run_every every 1
ok $? "train 10 steps with sample_every = 5"
[ "$(grep -c '^--- sample after step' "$GT_TMP/every.out")" -eq 2 ]
ok $? "two samples in the log (after steps 5 and 10)"
run_mpi 1 60 "$GT_BIN" sample "$GT_TMP/ck-every" --prompt "
" --tokens 64 --temperature 0 >"$GT_TMP/every-cli.out" 2>/dev/null
# the CLI prints the prompt (a newline) first and a newline at the end
want=$(sed '1d' "$GT_TMP/every-cli.out")
[ -n "$want" ] && [ "$(strip every)" = "$want" ]
ok $? "the sample after step 10 is gridtrain sample's greedy text of the step-10 checkpoint"
run_every every-tp 2 grid.tp=2
[ $? -eq 0 ] && [ "$(strip every-tp)" = "$(strip every)" ]
ok $? "tp = 2: the same sample"
run_every every-zero3 2 grid.dp=2 parallel.zero=3
[ $? -eq 0 ] && [ "$(strip every-zero3)" = "$(strip every)" ]
ok $? "dp = 2 with ZeRO 3 (weights gathered per unit): the same sample"
run_every every-pp 2 grid.pp=2
[ $? -eq 0 ] && ! grep -q "^--- sample" "$GT_TMP/every-pp.out" &&
  grep -q "warning: \[run\] sample_every = 5 needs pp = 1" "$GT_TMP/every-pp.err"
ok $? "pp = 2: no samples, and a warning that says why"

done_testing
