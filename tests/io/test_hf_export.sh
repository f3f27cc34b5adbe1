#!/bin/sh
# test_hf_export.sh - `gridtrain ckpt convert FILE --format hf OUT_DIR`: the
# Hugging Face GPT-2 directory checked by tests/io/check_hf.py (the safetensors
# package, h5py and PyTorch: names, shapes, config.json against the deck,
# tensors bit for bit the checkpoint's, logits of a GPT-2 forward against
# tests/ref/torch_gpt.py, the validation loss against gridtrain's), from
# checkpoints of tp=2 (a padded vocabulary cut to the data's) and pp=2; the
# tp=2 file resumed and rewritten by one rank exports the same bits; bf16
# and fp16; data without a tokenizer; a SentencePiece dataset; a byte-level
# BPE dataset (tokenizer.json, tokenizer_config.json, loaded by the
# tokenizers package); and the errors: a directory that is not empty
# (--force), an unknown --dtype, an
# output that cannot be a directory, a missing dataset, a vocabulary larger
# than the model's, a weight beyond fp16. Needs the safetensors package
# (pip install --break-system-packages safetensors); transformers, when it
# is installed, loads the directory too.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

"$PYTHON_REF" -c 'import safetensors' 2>/dev/null ||
  bail "needs the safetensors package for $PYTHON_REF: pip install --break-system-packages safetensors"
data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.1 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
common="data.train=$data data.val=$data run.eval_every=3 optim.warmup=0"
check="$GT_SRCDIR/tests/io/check_hf.py"
shape="layers=2 heads=4 dim=64 seq_len=32"
show() { sed 's/^/#   /' "$1"; }
# convert NAME ARGS...: gridtrain ckpt convert ARGS, output in $GT_TMP/NAME.out
convert() {
  c_name=$1
  shift
  "$GT_BIN" ckpt convert "$@" >"$GT_TMP/$c_name.out" 2>&1
}
# convert_fails NAME MESSAGE ARGS...: convert exits 2 and NAME.out has the
# line "gridtrain: error: MESSAGE..." (MESSAGE a grep pattern)
convert_fails() {
  f_name=$1 f_msg=$2
  shift 2
  convert "$f_name" "$@"
  [ $? -eq 2 ] && grep -q "^gridtrain: error: $f_msg" "$GT_TMP/$f_name.out"
}
# The checks of the directories run in one Python process at the end
# (torch takes seconds to start): job VAR ARGS... queues check_hf.py ARGS as
# job number $VAR; passed K is true when job K passed.
jobs=""
njobs=0
job() {
  j_var=$1
  shift
  njobs=$((njobs + 1))
  eval "$j_var=$njobs"
  jobs="$jobs -- $*"
}
passed() { grep -q "^job $1: ok$" "$GT_TMP/check.out"; }
# result STATUS K DESCRIPTION: one test point, passed when gridtrain's
# STATUS was 0 and job K passed; the job's report follows it
result() {
  r_job=$2
  [ "$1" -eq 0 ] && passed "$r_job"
  r_ok=$?
  shift 2
  ok $r_ok "$*"
  sed -n "/^# job $r_job: /,/^job $r_job: /p" "$GT_TMP/check.out" | sed 's/^/#   /'
}

# ---- checkpoints: tp=2 with a vocabulary of 259 (2 x 130 rows on the ranks,
# ---- 256 in the data), the same state rewritten by one rank, pp=2
train tp 2 3 grid.tp=2 model.vocab=259 || bail "the tp=2 run failed: $(tail -3 "$GT_TMP/tp.out")"
tp="$GT_TMP/ck-tp/step_00000003.h5"
# lr = 0: the step changes no weight, so step 4 holds the bits of step 3
train tp1 1 4 model.vocab=259 optim.lr=0 optim.min_lr=0 checkpoint.resume="$tp" ||
  bail "resuming the tp=2 file on one rank failed: $(tail -3 "$GT_TMP/tp1.out")"
train pp 2 3 grid.pp=2 || bail "the pp=2 run failed: $(tail -3 "$GT_TMP/pp.out")"
pp="$GT_TMP/ck-pp/step_00000003.h5"

# ---- fp32 from tp=2: everything check_hf.py checks
convert hf-tp "$tp" --format hf "$GT_TMP/hf-tp"
ok $? "ckpt convert --format hf of the tp=2 checkpoint exits 0"
show "$GT_TMP/hf-tp.out"
grep -q "vocabulary 256 (the checkpoint's 259 rows cut), tokenizer bytes (no file)" "$GT_TMP/hf-tp.out"
ok $? "it says that the vocabulary is cut from 259 to the data's 256 and that bytes need no file"
job J_TP check "$GT_TMP/hf-tp" "$tp" $shape vocab=256
[ "$(cd "$GT_TMP/hf-tp" && echo *)" = "README.txt config.json model.safetensors" ]
ok $? "the directory holds config.json, model.safetensors, README.txt and nothing else ($(cd "$GT_TMP/hf-tp" && echo *))"
grep -q "^tokenizer   bytes: each byte" "$GT_TMP/hf-tp/README.txt" &&
  grep -q "^dataset     $data" "$GT_TMP/hf-tp/README.txt"
ok $? "README.txt says how byte-level text is tokenized and names the dataset"
convert hf-tp1 "$GT_TMP/ck-tp1/step_00000004.h5" --format hf "$GT_TMP/hf-tp1"
s_tp1=$?
job J_SAME same "$GT_TMP/hf-tp" "$GT_TMP/hf-tp1"

# ---- pp=2, nothing cut: the export's validation loss is gridtrain's
val=$(sed -n 's/.*"final_val_loss":\([0-9.eE+-]*\).*/\1/p' "$GT_TMP/pp.jsonl")
convert hf-pp "$pp" --format=hf "$GT_TMP/hf-pp"
s_pp=$?
job J_PP check "$GT_TMP/hf-pp" "$pp" $shape vocab=256 data="$data" val_loss="$val" batches=4 batch=12

# ---- bf16 and fp16: torch's rounding of the checkpoint, bit for bit
convert hf-bf16 "$tp" --format hf --dtype bf16 "$GT_TMP/hf-bf16"
s_bf16=$?
job J_BF16 check "$GT_TMP/hf-bf16" "$tp" $shape vocab=256 dtype=bf16
convert hf-fp16 "$tp" --format hf --dtype fp16 "$GT_TMP/hf-fp16"
s_fp16=$?
job J_FP16 check "$GT_TMP/hf-fp16" "$tp" $shape vocab=256 dtype=fp16

# ---- an OUT_DIR that is not empty: refused, unless --force
cp -r "$GT_TMP/hf-bf16" "$GT_TMP/hf-force"
sum=$(md5sum <"$GT_TMP/hf-force/model.safetensors")
convert_fails nonempty "the output directory $GT_TMP/hf-force is not empty; choose a new one or add --force" "$tp" --format hf "$GT_TMP/hf-force" &&
  [ "$(md5sum <"$GT_TMP/hf-force/model.safetensors")" = "$sum" ]
ok $? "a directory that is not empty: exit 2, one error line, the files untouched"
show "$GT_TMP/nonempty.out"
convert force "$tp" --format hf --force "$GT_TMP/hf-force"
s_force=$?
[ -z "$(find "$GT_TMP/hf-force" -name '*.tmp')" ] || s_force=1
job J_FORCE check "$GT_TMP/hf-force" "$tp" $shape vocab=256 dtype=fp32

# ---- bad options and outputs: exit 2, one line, nothing written
convert_fails dtype "ckpt convert: unknown --dtype 'fp8'; choose fp32, bf16 or fp16" "$tp" --format hf --dtype fp8 "$GT_TMP/hf-dtype" &&
  [ ! -e "$GT_TMP/hf-dtype" ]
ok $? "--dtype fp8: exit 2, one error line, no directory"
convert_fails dtype-h5 "ckpt convert: --dtype, --data and --force go with --format hf" "$tp" --dtype bf16 "$GT_TMP/x.h5"
ok $? "--dtype without --format hf: exit 2"
convert_fails format "ckpt convert: unknown --format 'onnx'; choose h5 or hf" "$tp" --format onnx "$GT_TMP/x"
ok $? "--format onnx: exit 2"
convert_fails noparent "cannot create the output directory $GT_TMP/nope/sub: No such file or directory" "$tp" --format hf "$GT_TMP/nope/sub"
ok $? "an OUT_DIR that cannot be created (its parent is missing): exit 2, one line"
: >"$GT_TMP/afile"
convert_fails notdir "cannot use the output directory $GT_TMP/afile/sub: Not a directory" "$tp" --format hf "$GT_TMP/afile/sub"
ok $? "an OUT_DIR under a file: exit 2, one line"
convert_fails isfile "the output $GT_TMP/afile exists and is not a directory" "$tp" --format hf "$GT_TMP/afile"
ok $? "an OUT_DIR that is a file: exit 2, one line"
convert h5 "$tp" --format h5 "$GT_TMP/w.h5" && has_dataset "$GT_TMP/w.h5" "h.0.attn.qkv.weight"
ok $? "--format h5 is the plain HDF5 export it was"

# ---- the dataset: --data, a missing one, one without a tokenizer, one too large
cp "$data" "$GT_TMP/copy.h5"
convert data "$tp" --format hf --data "$GT_TMP/copy.h5" "$GT_TMP/hf-data" &&
  grep -q "^dataset     $GT_TMP/copy.h5" "$GT_TMP/hf-data/README.txt"
ok $? "--data names the dataset that gives the vocabulary"
convert_fails nodata "the Hugging Face export takes the vocabulary and tokenizer from the training data (--data): cannot open dataset file '$GT_TMP/nope.h5'" "$tp" --format hf --data "$GT_TMP/nope.h5" "$GT_TMP/hf-nodata" &&
  [ ! -e "$GT_TMP/hf-nodata" ]
ok $? "a missing dataset: exit 2, one line naming it, no directory"
show "$GT_TMP/nodata.out"
"$PYTHON_REF" - "$GT_TMP" "$GT_SRCDIR/tests/data/spm_default.model" <<'PY' || bail "cannot make the datasets with h5py"
import sys, h5py, numpy as np
d = sys.argv[1]
for name, vocab in (("ids258", 258), ("ids300", 300)):  # token ids, no tokenizer
    with h5py.File(f"{d}/{name}.h5", "w") as f:
        f["train/tokens"] = (np.arange(5000) % vocab).astype(np.int32)
        f.attrs["vocab_size"] = vocab
with h5py.File(f"{d}/spm.h5", "w") as f:  # a SentencePiece dataset (80 pieces)
    f["train/tokens"] = (np.arange(5000) % 80).astype(np.uint16)
    f.attrs["vocab_size"] = 80
    f.attrs["tokenizer"] = "sentencepiece"
    f["tokenizer/model"] = np.frombuffer(open(sys.argv[2], "rb").read(), np.uint8)
# a byte-level BPE dataset: 256 byte characters, <|endoftext|> and 2 merges
# (259 ids, the checkpoint's vocabulary), trained by the tokenizers package
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
t = Tokenizer(models.BPE())
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
t.decoder = decoders.ByteLevel()
t.train_from_iterator(["the cat and the hat"] * 20, trainers.BpeTrainer(
    vocab_size=259, special_tokens=["<|endoftext|>"], show_progress=False,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
assert t.get_vocab_size() == 259
t.save(f"{d}/bpe.json")
with h5py.File(f"{d}/bpe.h5", "w") as f:
    f["train/tokens"] = (np.arange(5000) % 259).astype(np.uint16)
    f.attrs["vocab_size"] = 259
    f.attrs["tokenizer"] = "bpe"
    f["tokenizer/model"] = np.frombuffer(open(f"{d}/bpe.json", "rb").read(), np.uint8)
PY
convert ids258 "$tp" --format hf --data "$GT_TMP/ids258.h5" "$GT_TMP/hf-ids" &&
  grep -q "^tokenizer   none: the dataset names no tokenizer" "$GT_TMP/hf-ids/README.txt"
s_ids=$?
job J_IDS check "$GT_TMP/hf-ids" "$tp" $shape vocab=258 tokenizer=none
convert_fails ids300 "the dataset $GT_TMP/ids300.h5 has a vocabulary of 300 but the model of checkpoint $tp has 259" "$tp" --format hf --data "$GT_TMP/ids300.h5" "$GT_TMP/hf-ids300"
ok $? "a dataset with a larger vocabulary than the model's: exit 2, one line"
convert spm "$tp" --format hf --data "$GT_TMP/spm.h5" "$GT_TMP/hf-spm"
spm_status=$?
if [ $spm_status -eq 2 ] && grep -q "built without SentencePiece" "$GT_TMP/spm.out"; then
  [ ! -e "$GT_TMP/hf-spm/config.json" ]
  ok $? "a SentencePiece dataset in a build without SentencePiece: exit 2, says so, no config.json"
else
  [ $spm_status -eq 0 ] && cmp -s "$GT_TMP/hf-spm/tokenizer.model" "$GT_SRCDIR/tests/data/spm_default.model" &&
    grep -q '"bos_token_id": 1,' "$GT_TMP/hf-spm/config.json" &&
    grep -q '"eos_token_id": 2,' "$GT_TMP/hf-spm/config.json"
  ok $? "a SentencePiece dataset: tokenizer.model is its model, bos 1, eos 2 in config.json"
  job J_SPM check "$GT_TMP/hf-spm" "$tp" $shape vocab=80 tokenizer=sentencepiece
fi
show "$GT_TMP/spm.out"
# a byte-level BPE dataset, over a copy of the SentencePiece export with
# --force: its tokenizer.json as stored, tokenizer_config.json, bos = eos =
# <|endoftext|>, and no tokenizer.model left
bpe_out="$GT_TMP/hf-bpe"
[ ! -e "$GT_TMP/hf-spm" ] || cp -r "$GT_TMP/hf-spm" "$bpe_out"
convert bpe "$tp" --format hf --data "$GT_TMP/bpe.h5" --force "$bpe_out" &&
  cmp -s "$bpe_out/tokenizer.json" "$GT_TMP/bpe.json" && [ ! -e "$bpe_out/tokenizer.model" ] &&
  grep -q '"bos_token_id": 0,' "$bpe_out/config.json" &&
  grep -q '"eos_token_id": 0,' "$bpe_out/config.json" &&
  grep -q '"eos_token": "<|endoftext|>"' "$bpe_out/tokenizer_config.json" &&
  grep -q "tokenizer.json, tokenizer_config.json; vocabulary 259, tokenizer bpe$" "$GT_TMP/bpe.out" &&
  grep -q "^tokenizer   bpe: tokenizer.json" "$bpe_out/README.txt"
s_bpe=$?
ok $s_bpe "a byte-level BPE dataset: tokenizer.json is its model, tokenizer_config.json, bos = eos = <|endoftext|> (0), no tokenizer.model left (--force)"
show "$GT_TMP/bpe.out"
job J_BPE check "$bpe_out" "$tp" $shape vocab=259 tokenizer=bpe

# ---- a weight beyond fp16 (65504): refused in fp16, nothing left behind
cp "$tp" "$GT_TMP/big.h5"
"$PYTHON_REF" - "$GT_TMP/big.h5" <<'PY' || bail "cannot edit the checkpoint with h5py"
import sys, h5py, numpy as np
def fletcher32(b):  # docs/checkpoints.md
    w = np.frombuffer(b, "<u2").astype(np.uint64); n = len(w)
    s1 = int(w.sum()) % 65535; s2 = int(((n - np.arange(n, dtype=np.uint64)) * w).sum()) % 65535
    return s2 << 16 | s1
with h5py.File(sys.argv[1], "r+") as f:
    d = f["model/wpe"]; x = d[()]; x[0, 0] = 1e5; d[...] = x
    raw = x.astype("<f4").tobytes(); blk = int(f.attrs["checksum_block_bytes"])
    d.attrs["fletcher32"] = np.array([fletcher32(raw[i:i + blk]) for i in range(0, len(raw), blk)], np.uint32)
PY
convert_fails big "wpe (transformer.wpe.weight) holds 100000, which is beyond fp16's range; export with --dtype fp32 or bf16" "$GT_TMP/big.h5" --format hf --dtype fp16 "$GT_TMP/hf-big" &&
  [ -z "$(ls "$GT_TMP/hf-big")" ]
ok $? "a weight of 1e5 in fp16: exit 2, one line naming it, nothing left in the directory"
show "$GT_TMP/big.out"
convert big32 "$GT_TMP/big.h5" --format hf --dtype bf16 "$GT_TMP/hf-big"
ok $? "the same checkpoint exports in bf16"

# ---- the checks of the directories, in one Python process
# shellcheck disable=SC2086
"$PYTHON_REF" "$check" ${jobs# -- } >"$GT_TMP/check.out" 2>&1
diag "check_hf.py exited with status $?"
result 0 "$J_TP" "tp=2: names, shapes, config.json, bit-for-bit tensors, logits within 1e-5 of torch_gpt"
result "$s_tp1" "$J_SAME" "the tp=2 file resumed and rewritten by one rank (lr = 0) exports the same bits"
result "$s_pp" "$J_PP" "pp=2: the checks, and the export's validation loss is gridtrain's ($val)"
result "$s_bf16" "$J_BF16" "--dtype bf16: every tensor is torch's bf16 rounding of the checkpoint's"
result "$s_fp16" "$J_FP16" "--dtype fp16: every tensor is torch's fp16 rounding of the checkpoint's"
result "$s_force" "$J_FORCE" "--force writes over it: an fp32 export that passes the checks, no .tmp left"
result "$s_ids" "$J_IDS" "token ids without a tokenizer (vocab_size 258): wte cut to 258 rows, README says so"
[ -z "${J_SPM:-}" ] || result 0 "$J_SPM" "the SentencePiece export passes the checks (vocabulary 80)"
result "$s_bpe" "$J_BPE" "the BPE export passes the checks; the tokenizers package loads its tokenizer.json (259 ids)"
grep -q "^# FAILED" "$GT_TMP/check.out" && show "$GT_TMP/check.out"

# ---- optional: transformers itself loads the pp=2 directory, and the BPE
# ---- export's tokenizer (AutoTokenizer: tokenizer_config.json, tokenizer.json)
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PYTHON_REF" - "$GT_TMP/hf-pp" "$check" "$bpe_out" \
  >"$GT_TMP/tf.out" 2>&1 <<'PY'
import importlib.util, json, sys, torch
try:
    from transformers import AutoTokenizer, GPT2LMHeadModel
except ImportError:
    sys.exit(77)
from tokenizers import Tokenizer
at = AutoTokenizer.from_pretrained(sys.argv[3])
text = "the cat<|endoftext|> and the hat  \u00e9"
ids = Tokenizer.from_file(sys.argv[3] + "/tokenizer.json").encode(text, add_special_tokens=False).ids
same_tok = at(text)["input_ids"] == ids and at.decode(ids) == text and at.eos_token_id == 0
print(f"# AutoTokenizer: {type(at).__name__}, the same ids and text: {same_tok}")
from safetensors.torch import load_file
spec = importlib.util.spec_from_file_location("check_hf", sys.argv[2])
check_hf = importlib.util.module_from_spec(spec); spec.loader.exec_module(check_hf)
d = sys.argv[1]
m = GPT2LMHeadModel.from_pretrained(d).eval()
tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(3))
with torch.no_grad():
    got = m(tokens).logits.double()
want = check_hf.hf_forward(load_file(d + "/model.safetensors"), json.load(open(d + "/config.json")), tokens)
diff = float((got - want).abs().max())
tied = m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr()
print(f"# transformers: max |logit diff| {diff:.3g}, lm_head tied: {tied}")
sys.exit(0 if diff < 1e-4 and tied and same_tok else 1)
PY
tf=$?
if [ $tf -eq 77 ]; then
  skip 1 "transformers is not installed (an optional check)"
else
  [ $tf -eq 0 ]
  ok $? "transformers' GPT2LMHeadModel.from_pretrained loads it, tied, with the same logits; AutoTokenizer loads the BPE export and encodes and decodes as the tokenizers package"
  show "$GT_TMP/tf.out"
fi

done_testing
