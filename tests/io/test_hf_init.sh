#!/bin/sh
# test_hf_init.sh - a Hugging Face model directory as the start of a run
# ([checkpoint] init = HF_DIR: fine-tuning) and as the model `gridtrain
# score` evaluates. The tiny random LlamaForCausalLM of tests/io/make_hf.py
# (grouped-query attention 4/2, untied head, llama3 rope scaling, an MLP of
# 48 units) is read by each rank straight from its safetensors file; that
# must be the same start as importing it first (`ckpt import`, a separate
# path through a checkpoint): the same losses bit for bit at one rank, and
# within the layouts' bound at dp=2, pp=2, tp=2 and tp=2 with sequence
# parallelism. A deck whose [model] differs from config.json is one line
# naming the key, exit 2.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

py=/usr/bin/python3
"$py" -c 'import transformers, h5py, numpy' 2>/dev/null ||
  bail "needs transformers and h5py for $py: pip install --break-system-packages -r .ci/pypi.txt"
show() { sed 's/^/#   /' "$1"; }
hf="$GT_TMP/llama"
"$py" "$GT_SRCDIR/tests/io/make_hf.py" llama-even "$hf" >"$GT_TMP/make.out" 2>&1 ||
  { show "$GT_TMP/make.out"; bail "cannot make the model"; }
# 6000 random ids below the model's vocabulary of 103
"$py" -c 'import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(5).integers(0, 103, 6000).astype(np.uint16))' \
  "$GT_TMP/ids.npy" || bail "cannot make the token file"
"$GT_BIN" ingest tokens "$GT_TMP/ids.npy" -o "$GT_TMP/ids.h5" --vocab 103 >"$GT_TMP/ingest.out" 2>&1 ||
  { show "$GT_TMP/ingest.out"; bail "cannot ingest the tokens"; }

deck="$GT_SRCDIR/tests/decks/tiny.in"
model="model.type=llama model.layers=2 model.heads=4 model.kv_heads=2 model.dim=32
  model.ffn_dim=48 model.vocab=103 model.seq_len=32 model.norm_eps=1e-5 model.rope_theta=500000
  model.rope_scaling=llama3 model.rope_factor=8 model.rope_low_freq_factor=1
  model.rope_high_freq_factor=4 model.rope_original_seq_len=16 model.tie_embeddings=off"
common="data.train=$GT_TMP/ids.h5 optim.warmup=0 data.batch=4 $model"
# losses NAME: every step's loss in NAME.jsonl, one a line, as written
losses() { sed -n 's/.*"step":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$GT_TMP/$1.jsonl"; }

train hf 1 4 checkpoint.init="$hf"
ok $? "a run with [checkpoint] init = a Hugging Face directory exits 0" || show "$GT_TMP/hf.out"
grep -q "initial weights from the Hugging Face model $hf" "$GT_TMP/hf.out"
ok $? "rank 0 says where the weights come from"
"$GT_BIN" ckpt import "$hf" -o "$GT_TMP/imported.h5" >"$GT_TMP/import.out" 2>&1
ok $? "ckpt import of the same directory" || show "$GT_TMP/import.out"
train ck 1 4 checkpoint.init="$GT_TMP/imported.h5"
[ -n "$(losses hf)" ] && [ "$(losses hf)" = "$(losses ck)" ]
ok $? "straight from safetensors and through an imported checkpoint: the same 4 losses, bit for bit"
train fresh 1 4
[ "$(losses hf | head -n 1)" != "$(losses fresh | head -n 1)" ]
ok $? "and not the seed's random weights"

for layout in "grid.dp=2" "grid.pp=2" "grid.tp=2" "grid.tp=2 parallel.sequence_parallel=on"; do
  name=$(echo "$layout" | tr ' =.' '___')
  # shellcheck disable=SC2086 # the layout's keys, a word each
  train "$name" 2 4 checkpoint.init="$hf" $layout
  "$py" - "$GT_TMP/hf.jsonl" "$GT_TMP/$name.jsonl" <<'PY'
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"step"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else 1
print(f"# {len(a)} losses, worst difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
  ok $? "init from the Hugging Face directory at $layout: the 1-rank losses within 1e-5" ||
    show "$GT_TMP/$name.out"
done

# score: the directory and its import give the same loss
"$GT_BIN" score "$hf" "$GT_TMP/ids.npy" --tokens --json >"$GT_TMP/s1.out" 2>&1
ok $? "score takes the Hugging Face directory" || show "$GT_TMP/s1.out"
"$GT_BIN" score "$GT_TMP/imported.h5" "$GT_TMP/ids.npy" --tokens --json >"$GT_TMP/s2.out" 2>&1
[ -s "$GT_TMP/s1.out" ] && cmp -s "$GT_TMP/s1.out" "$GT_TMP/s2.out"
ok $? "and gives its import's result, to the last digit ($(cat "$GT_TMP/s1.out"))" || show "$GT_TMP/s2.out"

# the directory's tokenizer: a byte-level BPE of 300 ids trained here by the
# tokenizers package next to a llama of that vocabulary. score encodes text
# with it (the directory) or with its copy in the import (the checkpoint);
# sample decodes with the copy.
tk="$GT_TMP/llama-tok"
text="$GT_SRCDIR/tests/data/genesis.txt"
"$py" "$GT_SRCDIR/tests/io/make_hf.py" llama-tok "$tk" >"$GT_TMP/make.out" 2>&1 &&
  "$py" - "$text" "$tk" >"$GT_TMP/tok.out" 2>&1 <<'PY' || { show "$GT_TMP/tok.out"; bail "cannot make the tokenizer"; }
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([sys.argv[1]], trainers.BpeTrainer(vocab_size=300, show_progress=False,
          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.save(sys.argv[2] + "/tokenizer.json")
print(len(tok.encode(open(sys.argv[1], encoding="utf-8").read()).ids) - 1,
      file=open(sys.argv[2] + "/predicted", "w"))
PY
"$GT_BIN" ckpt import "$tk" -o "$GT_TMP/tok.h5" >"$GT_TMP/tokimport.out" 2>&1
ok $? "ckpt import of a directory with a tokenizer.json" || show "$GT_TMP/tokimport.out"
"$GT_BIN" score "$tk" "$text" --json >"$GT_TMP/t1.out" 2>&1 &&
  "$GT_BIN" score "$GT_TMP/tok.h5" "$text" --json >"$GT_TMP/t2.out" 2>&1
ok $? "score encodes text with the directory's tokenizer and with the import's" || show "$GT_TMP/t1.out"
grep -q "\"tokens\": $(cat "$tk/predicted")," "$GT_TMP/t1.out" && cmp -s "$GT_TMP/t1.out" "$GT_TMP/t2.out"
ok $? "both predict the tokens the tokenizers package makes of Genesis ($(cat "$tk/predicted")), with the same loss" ||
  show "$GT_TMP/t2.out"
"$GT_BIN" sample "$GT_TMP/tok.h5" --prompt "In the beginning" --tokens 8 >"$GT_TMP/sample.out" 2>&1 &&
  grep -q "^In the beginning" "$GT_TMP/sample.out"
ok $? "sample decodes with the tokenizer the import stored" || show "$GT_TMP/sample.out"

# Llama 2's kind: a SentencePiece tokenizer.model next to the weights (the
# test's 80-piece model); score encodes with it as the sentencepiece
# package does, line by line (a line with its newline: tokenizer.h)
sp="$GT_TMP/llama-spm"
rm -rf "$sp" && cp -r "$tk" "$sp" && rm "$sp/tokenizer.json" &&
  cp "$GT_SRCDIR/tests/data/spm_default.model" "$sp/tokenizer.model" &&
  "$py" -c 'import sentencepiece as s, sys
m = s.SentencePieceProcessor(model_file=sys.argv[1])
lines = open(sys.argv[2], encoding="utf-8", newline="").read().splitlines(keepends=True)
print(sum(len(m.encode(l)) for l in lines) - 1)' "$sp/tokenizer.model" "$text" >"$sp/predicted" 2>"$GT_TMP/spm.err" ||
  { show "$GT_TMP/spm.err"; bail "cannot make the SentencePiece directory"; }
"$GT_BIN" score "$sp" "$text" --json >"$GT_TMP/sp.out" 2>&1 &&
  grep -q "\"tokens\": $(cat "$sp/predicted")," "$GT_TMP/sp.out"
ok $? "a directory with a SentencePiece tokenizer.model: score predicts the $(cat "$sp/predicted") tokens the sentencepiece package makes" ||
  show "$GT_TMP/sp.out"

# a deck that is not the directory's model
common=$(echo "$common" | sed 's/model.kv_heads=2/model.kv_heads=4/')
train bad 1 1 checkpoint.init="$hf"
rc=$?
[ $rc -eq 2 ] && grep -q "kv_heads = 4 but $hf/config.json has num_key_value_heads = 2" "$GT_TMP/bad.out" &&
  [ "$(grep -c '^gridtrain: error' "$GT_TMP/bad.out")" -eq 1 ]
ok $? "a deck with another kv_heads: exit 2, one line naming the key" || { echo "# rc=$rc"; show "$GT_TMP/bad.out"; }
done_testing
