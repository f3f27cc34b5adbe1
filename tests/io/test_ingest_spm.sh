#!/bin/sh
# tests/io/test_ingest_spm.sh - `gridtrain ingest text --tokenizer` with
# SentencePiece: trained BPE and unigram models and a model given as a file.
# The files are checked with h5py and Python's own sentencepiece module (an
# independent encoder and decoder): the dtype, the attributes, the stored
# model, the line-aligned split, the tokens (as sentencepiece encodes the
# same text) and the text they decode to. Then its errors (exit 2, one line,
# nothing left behind), and training 2 steps on a BPE dataset.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

T=$GT_TMP
TEXT=$GT_SRCDIR/tests/data/genesis.txt
if ! "$GT_BIN" --version 2>/dev/null | grep -q "SentencePiece [0-9]"; then
  echo "1..0 # SKIP this gridtrain was built without SentencePiece"
  exit 0
fi
"$PYTHON_REF" -c 'import h5py, numpy, sentencepiece' 2>/dev/null ||
  bail "$PYTHON_REF lacks h5py, numpy or sentencepiece (apt-get install python3-h5py python3-numpy python3-sentencepiece)"

# check.py FILE VOCAB VAL_FRACTION [MODEL] -- SOURCE...: the file against
# sentencepiece's encoding of the same text with the stored model (or MODEL,
# a .model file given to ingest, which must then be stored byte for byte).
# Each source splits at the start of the line after its last VAL_FRACTION
# of bytes begins; the stored tokens of each part are the concatenated
# encodings of its lines (SentencePiece encodes line by line) and decode to
# the part's text.
cat >"$T/check.py" <<'EOF'
import math, sys
import h5py, numpy as np, sentencepiece as spm

args = sys.argv[1:]
cut = args.index('--')
path, vocab, vf = args[0], int(args[1]), float(args[2])
model_file = args[3] if cut > 3 else None
sources = args[cut + 1:]
bad = []
def want(cond, what):
    if not cond:
        bad.append(what)

with h5py.File(path, 'r') as f:
    a = f.attrs
    want(a['vocab_size'] == vocab, f'root vocab_size {a["vocab_size"]}, want {vocab}')
    want(a['tokenizer'] == 'sentencepiece', f'root tokenizer {a.get("tokenizer")!r}')
    model = f['tokenizer/model'][...].tobytes()
    if model_file:
        want(model == open(model_file, 'rb').read(), 'the stored model is not the file given')
    sp = spm.SentencePieceProcessor(model_proto=model)
    want(sp.get_piece_size() == vocab, f'the stored model has {sp.get_piece_size()} pieces')
    got = {}
    for name in ('train', 'val'):
        d = f[name + '/tokens']
        want(d.dtype == (np.uint16 if vocab <= 65536 else np.uint32), f'{name}: dtype {d.dtype}')
        want(d.fletcher32 and d.chunks is not None, f'{name}: chunks or Fletcher32')
        want(int(d.attrs['vocab_size']) == vocab and d.attrs['tokenizer'] == 'sentencepiece',
             f'{name}: dataset attributes')
        got[name] = d[...].astype(np.int64)
    want(a['train_tokens'] == len(got['train']) and a['val_tokens'] == len(got['val']),
         'train_tokens / val_tokens')

def segments(b):
    """The segments of bytes b by the rule of tokenizer.h (written here from
    its words): a line with its '\\n'; a line longer than 2048 bytes cut
    before its last space within 2048 bytes (not the first byte), or, with
    none, before the last character start at or below 2048."""
    i = 0
    while i < len(b):
        rest = b[i:]
        nl = rest.find(b'\n', 0, min(len(rest), 2048))
        if nl >= 0:
            n = nl + 1
        elif len(rest) <= 2048:
            n = len(rest)
        else:
            n = rest.rfind(b' ', 1, 2048)
            if n <= 0:
                n = 2048
                while rest[n] & 0xC0 == 0x80:
                    n -= 1
        yield b[i:i + n]
        i += n

def encode(b):
    return [t for seg in segments(b) for t in sp.encode(seg.decode('utf-8'))]

ref = {'train': [], 'val': []}
texts = {'train': b'', 'val': b''}
for s in sources:
    data = open(s, 'rb').read()
    at = len(data) - math.floor(len(data) * vf)
    if at < len(data):
        nl = data.find(b'\n', at)
        at = len(data) if nl < 0 else nl + 1
    for name, part in (('train', data[:at]), ('val', data[at:])):
        ref[name] += encode(part)
        texts[name] += part
for name in ('train', 'val'):
    want(got[name].tolist() == ref[name],
         f'{name}: {len(got[name])} tokens differ from sentencepiece\'s {len(ref[name])}')
    back = sp.decode(got[name].tolist()).encode('utf-8')
    want(back == texts[name], f'{name}: decoding the tokens does not give the text back')
for b in bad:
    print('#', b)
print(f'# {len(got["train"])} + {len(got["val"])} tokens')
sys.exit(1 if bad else 0)
EOF

# ---- a trained BPE -----------------------------------------------------------------------
"$GT_BIN" ingest text "$TEXT" -o "$T/bpe.h5" --tokenizer train:bpe:500 --val-fraction 0.1 \
  >"$T/out" 2>"$T/err"
ok $? "ingest text genesis.txt --tokenizer train:bpe:500"
[ "$(wc -l <"$T/out")" -eq 1 ] && grep -q "(train:bpe:500, vocab 500, uint16)" "$T/out" &&
  grep -q "tokenizer trained in [0-9.]* s" "$T/out" && grep -q "tokens/s)$" "$T/out" &&
  [ ! -s "$T/err" ] && [ ! -e "$T/bpe.h5.tmp" ]
ok $? "one summary line with the tokenizer, the timings and tokens/s; nothing on stderr"
diag "$(cat "$T/out" "$T/err")"
"$PYTHON_REF" "$T/check.py" "$T/bpe.h5" 500 0.1 -- "$TEXT"
ok $? "h5py + sentencepiece: uint16, vocab_size 500, the model stored, the tokens are sentencepiece's and decode to the text"

# the stored model, given back as a file, gives the same tokens
"$PYTHON_REF" -c "import h5py, sys; open(sys.argv[2], 'wb').write(h5py.File(sys.argv[1])['tokenizer/model'][...].tobytes())" \
  "$T/bpe.h5" "$T/bpe.model"
"$GT_BIN" ingest text "$TEXT" -o "$T/given.h5" --tokenizer "sentencepiece:$T/bpe.model" \
  --val-fraction 0.1 >"$T/out" 2>"$T/err" &&
  "$PYTHON_REF" "$T/check.py" "$T/given.h5" 500 0.1 "$T/bpe.model" -- "$TEXT" &&
  "$PYTHON_REF" -c "import h5py, sys; a, b = (h5py.File(p) for p in sys.argv[1:]); sys.exit(not all((a[k][...] == b[k][...]).all() for k in ('train/tokens', 'val/tokens')))" \
    "$T/bpe.h5" "$T/given.h5"
ok $? "--tokenizer sentencepiece:MODEL with the stored model: the same tokens"

# ---- unigram, two sources with long lines and characters outside the training text --------
"$PYTHON_REF" - "$T/odd.txt" <<'EOF'
import sys
words = ['caf\u00e9', '\u4e2d\u6587', '\U0001f389', 'tab\there', '  two  spaces', 'end\r']
line = ' '.join(words[i % len(words)] for i in range(1200))  # about 11 KB, no newline inside
text = 'first line\n\n' + line + '\n' + 'x' * 5000 + '\nlast line without a newline'
open(sys.argv[1], 'w', encoding='utf-8', newline='').write(text)
EOF
"$GT_BIN" ingest text "$TEXT" "$T/odd.txt" -o "$T/uni.h5" --tokenizer train:unigram:600 \
  --val-fraction 0.2 >"$T/out" 2>"$T/err" &&
  "$PYTHON_REF" "$T/check.py" "$T/uni.h5" 600 0.2 -- "$TEXT" "$T/odd.txt"
ok $? "unigram 600 on two sources (11 KB lines, CJK, emoji, tabs, CR): sentencepiece's tokens, the text back"
diag "$(cat "$T/out" "$T/err")"

# the claim of tokenizer.h: for models gridtrain trains, cutting a long line
# before its spaces encodes as the whole line does (sentencepiece alone)
"$PYTHON_REF" - "$T/uni.h5" "$T/odd.txt" <<'EOF'
import sys, h5py, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_proto=h5py.File(sys.argv[1])['tokenizer/model'][...].tobytes())
line = open(sys.argv[2], encoding='utf-8', newline='').read().split('\n')[2].encode()
cut, i = [], 0
while i < len(line):
    n = len(line) - i if len(line) - i <= 2048 else line.rfind(b' ', i + 1, i + 2048) - i
    cut += sp.encode(line[i:i + n].decode())
    i += n
print(f'# a line of {len(line)} bytes: {len(cut)} tokens in pieces')
sys.exit(not (len(line) > 8192 and cut == sp.encode(line.decode())))
EOF
ok $? "the trained unigram encodes a 9 KB line cut before spaces as the whole line (sentencepiece)"

# ---- a model trained elsewhere (sentencepiece's defaults: nmt_nfkc, dummy prefix) ----------
"$PYTHON_REF" - "$TEXT" "$T/ext" <<'EOF'
import sys, sentencepiece as spm
spm.SentencePieceTrainer.train(input=sys.argv[1], model_prefix=sys.argv[2], vocab_size=400,
                               model_type='bpe', minloglevel=2)
EOF
"$GT_BIN" ingest text "$TEXT" -o "$T/ext.h5" --tokenizer "sentencepiece:$T/ext.model" \
  --val-fraction 0 >"$T/out" 2>"$T/err" &&
  "$PYTHON_REF" - "$T/ext.h5" "$T/ext.model" "$TEXT" <<'EOF'
import sys, h5py, sentencepiece as spm
f = h5py.File(sys.argv[1])
sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
text = open(sys.argv[3], encoding='utf-8', newline='').read()
want, i = [], 0
while i < len(text):  # line by line, each with its '\n'
    j = text.find('\n', i)
    j = len(text) if j < 0 else j + 1
    want += sp.encode(text[i:j])
    i = j
got = f['train/tokens'][...].tolist()
print(f'# {len(got)} tokens, sentencepiece line by line: {len(want)}')
sys.exit(not (got == want and f.attrs['vocab_size'] == 400 and len(f['val/tokens']) == 0))
EOF
ok $? "a model trained by sentencepiece itself: its tokens line by line, as documented"

# ---- errors: exit 2, one line on stderr, nothing on stdout, no file left -------------------
# E-ING-05 (docs/errors.md): junk models, text that is not UTF-8
printf 'this is not a SentencePiece model at all, only words in a file\n' >"$T/junk.model"
expect_ingest_error "a .model file of junk" "are not a SentencePiece model" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "sentencepiece:$T/junk.model"
expect_ingest_error "a .model file that is missing" "cannot read the SentencePiece model '$T/no.model'" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "sentencepiece:$T/no.model"
: >"$T/empty.model"
expect_ingest_error "an empty .model file" "'$T/empty.model' is empty" \
  text "$TEXT" -o "$T/x.h5" --tokenizer "sentencepiece:$T/empty.model"
expect_ingest_error "sentencepiece: without a file" "names no model file" \
  text "$TEXT" -o "$T/x.h5" --tokenizer sentencepiece:
expect_ingest_error "an unknown tokenizer" "unknown tokenizer 'gpt2'; give bytes, sentencepiece:MODEL" \
  text "$TEXT" -o "$T/x.h5" --tokenizer gpt2
expect_ingest_error "train: an unknown model type" "unknown model type 'wordpiece'" \
  text "$TEXT" -o "$T/x.h5" --tokenizer train:wordpiece:500
expect_ingest_error "train: no vocabulary size" "has no vocabulary size" \
  text "$TEXT" -o "$T/x.h5" --tokenizer train:bpe
expect_ingest_error "train: a vocabulary size that is not a number" "'5k' is not a vocabulary size" \
  text "$TEXT" -o "$T/x.h5" --tokenizer train:bpe:5k
expect_ingest_error "train: 100 pieces, fewer than the bytes" "outside [260, 16777216]" \
  text "$TEXT" -o "$T/x.h5" --tokenizer train:bpe:100
expect_ingest_error "train: more pieces than Genesis supports" "Vocabulary size too high (200000)" \
  text "$TEXT" -o "$T/x.h5" --tokenizer train:bpe:200000
head -c 5000 "$TEXT" >"$T/latin1.txt"
printf 'caf\351\n' >>"$T/latin1.txt"   # ISO 8859-1 e-acute: byte 5003 is not UTF-8
expect_ingest_error "text that is not UTF-8, when training" \
  "input '$T/latin1.txt' is not UTF-8 text at byte 5003 (0xe9)" \
  text "$T/latin1.txt" -o "$T/x.h5" --tokenizer train:bpe:300 --val-fraction 0
head -c 3000 "$TEXT" >"$T/latin1-tail.txt"
printf 'caf\351\n' >>"$T/latin1-tail.txt"   # in the validation tail only
expect_ingest_error "text that is not UTF-8, when encoding with a model" \
  "input '$T/latin1-tail.txt' is not UTF-8 text at byte 3003" \
  text "$T/latin1-tail.txt" -o "$T/x.h5" --tokenizer "sentencepiece:$T/bpe.model" --val-fraction 0.1
expect_ingest_error "ingest tokens --tokenizer train: (E-ING-06)" \
  "--tokenizer train:bpe:300: token files are tokenized already; name the tokenizer that wrote them" \
  tokens "$T/bpe.model" -o "$T/x.h5" --tokenizer train:bpe:300
"$GT_BIN" ingest text "$T/latin1.txt" -o "$T/x.h5" >/dev/null 2>&1 && rm -f "$T/x.h5"
ok $? "the bytes tokenizer takes the same text that is not UTF-8"

# ---- training reads the uint16 dataset ------------------------------------------------------
run_mpi 1 120 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$T/bpe.h5" \
  data.val="$T/bpe.h5" model.vocab=500 run.steps=2 run.eval_every=2 run.eval_batches=1 \
  run.metrics="$T/m.jsonl" checkpoint.dir="$T/ck" >"$T/out" 2>&1
st=$?
[ $st -eq 0 ] && "$PYTHON_REF" -c "
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = rows[0]['loss']
print('# step 0 loss', first, 'val', rows[1].get('val_loss'))
sys.exit(not (abs(first - math.log(500)) < 0.5 and 'val_loss' in rows[1]))" "$T/m.jsonl"
ok $? "2 training steps on the BPE dataset (model.vocab 500): loss near ln 500, a validation loss"
[ $st -eq 0 ] || diag "$(tail -5 "$T/out")"
run_mpi 1 120 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$T/bpe.h5" \
  run.steps=1 checkpoint.dir="$T/ck2" >"$T/out" 2>&1
[ $? -eq 2 ] && grep -qF "has vocab_size 500 but [model] vocab = 256" "$T/out"
ok $? "the same dataset with the byte model (vocab 256) stops with the vocabulary error"

# ---- token files a SentencePiece model wrote: ingest tokens --tokenizer --------------------
# sentencepiece (Python) encodes Genesis with the model it trained above
# into nanoGPT's raw uint16; the import stores that model with the tokens
"$PYTHON_REF" - "$T/ext.model" "$TEXT" "$T/gen.bin" <<'EOF'
import sys, numpy as np, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
ids = sp.encode(open(sys.argv[2], encoding='utf-8', newline='').read())
np.asarray(ids, dtype='<u2').tofile(sys.argv[3])
EOF
"$GT_BIN" ingest tokens "$T/gen.bin" -o "$T/gen.h5" --tokenizer "sentencepiece:$T/ext.model" \
  --val-fraction 0.1 >"$T/out" 2>"$T/err" &&
  grep -qF "(nanogpt, sentencepiece:$T/ext.model, vocab 400, uint16)" "$T/out" && [ ! -s "$T/err" ] &&
  "$PYTHON_REF" - "$T/gen.h5" "$T/ext.model" "$T/gen.bin" <<'EOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1])
ids = np.fromfile(sys.argv[3], dtype='<u2')
got = np.concatenate([f['train/tokens'][...], f['val/tokens'][...]])
checks = {
    'root vocab_size 400': f.attrs['vocab_size'] == 400,
    'tokenizer sentencepiece on the root and each split': all(
        o.attrs.get('tokenizer') == 'sentencepiece' for o in (f, f['train/tokens'], f['val/tokens'])),
    'the model stored byte for byte': f['tokenizer/model'][...].tobytes() == open(sys.argv[2], 'rb').read(),
    'tokenizer_spec names it': f.attrs['tokenizer_spec'] == 'sentencepiece:' + sys.argv[2],
    'the tokens, in order, uint16': got.dtype == np.uint16 and np.array_equal(got, ids),
}
for k, v in checks.items():
    print('#', k, bool(v))
sys.exit(not all(checks.values()))
EOF
ok $? "ingest tokens --tokenizer sentencepiece:MODEL: vocab 400 from the model, the model and its name stored, the tokens as written"
diag "$(cat "$T/out" "$T/err")"
expect_ingest_error "ingest tokens --tokenizer with another --vocab (E-ING-06)" \
  "--vocab 500 does not match the 400 pieces of the tokenizer sentencepiece:$T/ext.model" \
  tokens "$T/gen.bin" -o "$T/x.h5" --tokenizer "sentencepiece:$T/ext.model" --vocab 500
expect_ingest_error "ingest tokens --tokenizer bytes on tokens above 255" \
  "is outside the vocabulary [0, 256)" tokens "$T/gen.bin" -o "$T/x.h5" --tokenizer bytes

# the imported dataset decodes: 2 steps, then gridtrain sample prints text
# with that tokenizer (the prompt encoded and echoed, then the new text)
run_mpi 1 120 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$T/gen.h5" \
  model.vocab=400 run.steps=2 checkpoint.dir="$T/ck3" >"$T/out" 2>&1 &&
  run_mpi 1 120 "$GT_BIN" sample "$T/ck3" --prompt "In the beginning" --tokens 12 \
    >"$T/sample.out" 2>"$T/sample.err" &&
  grep -q "^In the beginning" "$T/sample.out" &&
  [ "$(wc -c <"$T/sample.out")" -gt 17 ] && grep -q "12 new tokens" "$T/sample.err"
ok $? "gridtrain sample on a model trained on the imported tokens decodes with the stored model"
diag "$(cat "$T/sample.out" "$T/sample.err")"

done_testing
