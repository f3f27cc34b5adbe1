#!/bin/sh
# tests/io/test_ingest_tokens.sh - `gridtrain ingest tokens`: nanoGPT's raw
# uint16, llm.c's .bin shards (GPT-2 uint16 and LLaMA-3 uint32), NumPy .npy
# (versions 1-3, every integer dtype), each file written here by numpy from
# tokens drawn by numpy, and the dataset checked against them with h5py.
# Then the errors: damaged headers, tokens outside the vocabulary, empty and
# truncated files, shapes and dtypes that are not tokens, missing --vocab.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

T=$GT_TMP
"$PYTHON_REF" -c 'import h5py, numpy' 2>/dev/null ||
  bail "$PYTHON_REF lacks h5py or numpy (apt-get install python3-h5py python3-numpy)"

# make.py DIR: the token files, and DIR/NAME.ref.npy with the tokens each holds
cat >"$T/make.py" <<'EOF'
import os, sys
import numpy as np

d = sys.argv[1]
rng = np.random.default_rng(20240520)
def toks(n, hi):
    return rng.integers(0, hi, size=n, dtype=np.int64)
def ref(name, t):
    np.save(os.path.join(d, name + '.ref.npy'), np.asarray(t, dtype=np.int64))
def llmc(name, t, magic, version, dtype, count=None):
    h = np.zeros(256, dtype='<i4')
    h[0], h[1], h[2] = magic, version, len(t) if count is None else count
    with open(os.path.join(d, name), 'wb') as f:
        f.write(h.tobytes())
        f.write(np.asarray(t, dtype=dtype).tobytes())

# nanoGPT: train.bin and val.bin, raw little-endian uint16
t = toks(70001, 50257); t[:3] = [0, 50256, 1]
np.asarray(t, dtype='<u2').tofile(os.path.join(d, 'train.bin')); ref('train.bin', t)
t = toks(3001, 50257)
np.asarray(t, dtype='<u2').tofile(os.path.join(d, 'val.bin')); ref('val.bin', t)
# llm.c shards
t = toks(150000, 50257); llmc('gpt2_000001.bin', t, 20240520, 1, '<u2'); ref('gpt2_000001.bin', t)
t = toks(5000, 128256); t[7] = 128255
llmc('llama3.bin', t, 20240801, 7, '<u4'); ref('llama3.bin', t)
# .npy, every integer dtype
for dt, hi in (('<u2', 1000), ('<i4', 1000), ('<u4', 1000), ('<i8', 1000), ('|u1', 200), ('|i1', 100),
               ('<i2', 1000), ('<u8', 1000)):
    t = toks(4321, hi)
    name = 'a_' + dt[1:] + '.npy'
    np.save(os.path.join(d, name), np.asarray(t, dtype=dt)); ref(name, t)
for v in ((2, 0), (3, 0)):
    t = toks(999, 1000)
    name = 'v%d.npy' % v[0]
    with open(os.path.join(d, name), 'wb') as f:
        np.lib.format.write_array(f, np.asarray(t, dtype='<u2'), version=v)
    ref(name, t)

# damaged and wrong files
t = toks(1000, 50257)
llmc('badmagic.bin', t, 20240521, 1, '<u2')
llmc('badversion.bin', t, 20240520, 2, '<u2')
llmc('badcount.bin', t, 20240520, 1, '<u2', count=1001)
llmc('short.bin', t[:10], 20240520, 1, '<u2')
with open(os.path.join(d, 'short.bin'), 'r+b') as f:
    f.truncate(1024 + 15)                   # 7 tokens and a half
t = np.arange(20); t[7] = 50257
np.asarray(t, dtype='<u2').tofile(os.path.join(d, 'beyond.bin'))
open(os.path.join(d, 'odd.bin'), 'wb').write(b'\x01\x00\x02')
np.save(os.path.join(d, 'twod.npy'), np.zeros((3, 4), dtype='<u2'))
np.save(os.path.join(d, 'float.npy'), np.zeros(10, dtype='<f4'))
np.save(os.path.join(d, 'big.npy'), np.zeros(10, dtype='>u2'))
np.save(os.path.join(d, 'scalar.npy'), np.uint16(5))
np.save(os.path.join(d, 'none.npy'), np.zeros(0, dtype='<u2'))
t = np.arange(10, dtype='<i4'); t[4] = -3
np.save(os.path.join(d, 'negative.npy'), t)
np.save(os.path.join(d, 'trunc.npy'), np.arange(100, dtype='<u2'))
with open(os.path.join(d, 'trunc.npy'), 'r+b') as f:
    f.truncate(os.path.getsize(os.path.join(d, 'trunc.npy')) - 6)
open(os.path.join(d, 'empty.bin'), 'wb').close()
EOF
"$PYTHON_REF" "$T/make.py" "$T" || bail "numpy could not write the token files"

# check.py OUT.h5 VOCAB DTYPE VAL_FRACTION FILE... [--val FILE...]: /train
# and /val hold each file's reference tokens (the last VAL_FRACTION of each
# FILE's in /val, all of the --val files'), in order.
cat >"$T/check.py" <<'EOF'
import math, os, sys
import h5py, numpy as np

path, vocab, dtype, vf = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
files, vals, into = [], [], None
for a in sys.argv[5:]:
    if a == '--val':
        into = vals
    else:
        (vals if into is vals else files).append(a)
train, val = [], []
for f in files:
    t = np.load(f + '.ref.npy')
    nv = math.floor(len(t) * vf)
    train.append(t[:len(t) - nv]); val.append(t[len(t) - nv:])
for f in vals:
    val.append(np.load(f + '.ref.npy'))
bad = []
with h5py.File(path, 'r') as h:
    for name, ref in (('train', train), ('val', val)):
        d = h[name + '/tokens']
        ref = np.concatenate(ref) if ref else np.zeros(0, dtype=np.int64)
        if d.dtype != np.dtype(dtype):
            bad.append(f'{name}: dtype {d.dtype}, want {dtype}')
        if not np.array_equal(d[...].astype(np.int64), ref):
            bad.append(f'{name}: {d.shape[0]} tokens differ from the {len(ref)} written')
        if int(d.attrs['vocab_size']) != vocab or 'tokenizer' in d.attrs:
            bad.append(f'{name}: attributes {dict(d.attrs)}')
    a = h.attrs
    if a['vocab_size'] != vocab or 'tokenizer' in a or 'tokenizer' in h:
        bad.append(f'root: vocab_size {a["vocab_size"]}; no tokenizer is known')
    got = [s.decode() if isinstance(s, bytes) else s for s in a['sources']]
    if got != files + vals:
        bad.append(f'sources {got}')
    if list(a['source_bytes']) != [os.path.getsize(s) for s in files + vals]:
        bad.append('source_bytes')
    if a['train_tokens'] != sum(map(len, train)) or a['val_tokens'] != sum(map(len, val)):
        bad.append('train_tokens / val_tokens')
for b in bad:
    print('#', b)
sys.exit(1 if bad else 0)
EOF

# ---- each format ------------------------------------------------------------------------------
"$GT_BIN" ingest tokens "$T/train.bin" --val "$T/val.bin" -o "$T/nano.h5" --vocab 50257 \
  >"$T/out" 2>"$T/err"
ok $? "nanoGPT train.bin --val val.bin --vocab 50257 (format found: nanogpt)"
[ "$(wc -l <"$T/out")" -eq 1 ] && grep -q "70001 train + 3001 val tokens (nanogpt, vocab 50257, uint16)" "$T/out" &&
  grep -q "tokens/s)$" "$T/out" && [ ! -s "$T/err" ] && [ ! -e "$T/nano.h5.tmp" ]
ok $? "one summary line: the counts, the format, vocab, dtype, tokens/s"
diag "$(cat "$T/out" "$T/err")"
"$PYTHON_REF" "$T/check.py" "$T/nano.h5" 50257 uint16 0 "$T/train.bin" --val "$T/val.bin" &&
  "$PYTHON_REF" -c "import h5py, sys; a = h5py.File(sys.argv[1]).attrs; sys.exit(not (list(a['source_formats']) in ([b'nanogpt'] * 2, ['nanogpt'] * 2) and a['val_fraction'] == 0))" "$T/nano.h5"
ok $? "nanoGPT: /train is train.bin, /val is val.bin (--val makes the fraction 0), uint16, no tokenizer"

"$GT_BIN" ingest tokens "$T/gpt2_000001.bin" -o "$T/llmc.h5" --vocab 50257 --val-fraction 0.1 \
  >"$T/out" 2>"$T/err" && grep -q "(llmc, vocab 50257, uint16)" "$T/out" &&
  "$PYTHON_REF" "$T/check.py" "$T/llmc.h5" 50257 uint16 0.1 "$T/gpt2_000001.bin"
ok $? "llm.c GPT-2 shard (found by its magic), --val-fraction 0.1: head and tail"
"$GT_BIN" ingest tokens "$T/llama3.bin" -o "$T/llama.h5" --vocab 128256 --format llmc \
  --val-fraction 0 >"$T/out" 2>"$T/err" &&
  "$PYTHON_REF" "$T/check.py" "$T/llama.h5" 128256 uint32 0 "$T/llama3.bin"
ok $? "llm.c LLaMA-3 shard (uint32, vocab 128256): stored as uint32"

all=""
for dt in u2 i4 u4 i8 i2 u8; do all="$all $T/a_$dt.npy"; done
# shellcheck disable=SC2086
"$GT_BIN" ingest tokens $all "$T/v2.npy" "$T/v3.npy" -o "$T/npy.h5" --vocab 1000 \
  --format npy --val-fraction 0.25 >"$T/out" 2>"$T/err" &&
  "$PYTHON_REF" "$T/check.py" "$T/npy.h5" 1000 uint16 0.25 $all "$T/v2.npy" "$T/v3.npy"
ok $? ".npy u2 i4 u4 i8 i2 u8, format versions 1, 2, 3: all tokens, in order"
diag "$(cat "$T/err")"
"$GT_BIN" ingest tokens "$T/a_u1.npy" "$T/a_i1.npy" -o "$T/u8.h5" --vocab 200 \
  >"$T/out" 2>"$T/err" &&
  "$PYTHON_REF" "$T/check.py" "$T/u8.h5" 200 uint8 0.1 "$T/a_u1.npy" "$T/a_i1.npy"
ok $? ".npy u1 and i1 with vocab 200: stored as uint8"
"$GT_BIN" ingest tokens "$T/a_u2.npy" "$T/gpt2_000001.bin" "$T/train.bin" -o "$T/mixed.h5" \
  --vocab 50257 --val-fraction 0.05 >"$T/out" 2>"$T/err" && grep -q "(mixed, vocab 50257" "$T/out" &&
  "$PYTHON_REF" "$T/check.py" "$T/mixed.h5" 50257 uint16 0.05 "$T/a_u2.npy" \
    "$T/gpt2_000001.bin" "$T/train.bin"
ok $? "three formats in one dataset (auto): each file's head and tail, in order"

# training reads an imported dataset
run_mpi 1 120 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$T/npy.h5" \
  data.val="$T/npy.h5" model.vocab=1000 run.steps=2 checkpoint.dir="$T/ck" >"$T/out" 2>&1
ok $? "2 training steps on the imported .npy tokens (model.vocab 1000)"

# ---- errors: exit 2, one line on stderr, nothing on stdout, no file left -------------------
hint="; see 'gridtrain ingest --help'"
# E-ING-04 (docs/errors.md): damaged llm.c headers, .npy files that are not 1-D integers
expect_ingest_error "llm.c: a bad magic number" \
  "'$T/badmagic.bin' starts with 20240521, not an llm.c magic number" \
  tokens "$T/badmagic.bin" -o "$T/x.h5" --vocab 50257 --format llmc
expect_ingest_error "llm.c: a bad version" "'$T/badversion.bin': llm.c header version 2 with the GPT-2 magic" \
  tokens "$T/badversion.bin" -o "$T/x.h5" --vocab 50257
expect_ingest_error "llm.c: a count that does not match the size" \
  "'$T/badcount.bin': its llm.c header says 1001 tokens but the file holds 2000 bytes after the header (1000 tokens of 2 bytes)" \
  tokens "$T/badcount.bin" -o "$T/x.h5" --vocab 50257
expect_ingest_error "llm.c: a truncated shard" "holds 15 bytes after the header (7 tokens of 2 bytes and a part)" \
  tokens "$T/short.bin" -o "$T/x.h5" --vocab 50257
# E-ING-03: tokens outside the vocabulary
expect_ingest_error "a token beyond the vocabulary, named with its file and position" \
  "'$T/beyond.bin': token 50257 at position 7 is outside the vocabulary [0, 50257)" \
  tokens "$T/beyond.bin" -o "$T/x.h5" --vocab 50257
expect_ingest_error "a token beyond the vocabulary in the last file (nothing written)" \
  "token 50257 at position 7" \
  tokens "$T/train.bin" "$T/beyond.bin" -o "$T/x.h5" --vocab 50257
expect_ingest_error "a negative token (.npy i4)" "'$T/negative.npy': token -3 at position 4" \
  tokens "$T/negative.npy" -o "$T/x.h5" --vocab 50257
expect_ingest_error "a vocabulary too small for the data" "token 999" \
  tokens "$T/v2.npy" -o "$T/x.h5" --vocab 999 --val-fraction 0
expect_ingest_error "an empty file" "input '$T/empty.bin' is empty" \
  tokens "$T/empty.bin" -o "$T/x.h5" --vocab 50257
expect_ingest_error "nanoGPT: an odd number of bytes" "'$T/odd.bin' has 3 bytes, not a whole number of uint16 tokens" \
  tokens "$T/odd.bin" -o "$T/x.h5" --vocab 50257
expect_ingest_error ".npy of shape (3, 4)" "'$T/twod.npy' holds an array of shape (3, 4); give a 1-D array" \
  tokens "$T/twod.npy" -o "$T/x.h5" --vocab 50257
expect_ingest_error ".npy of a scalar (shape ())" "holds an array of shape ()" \
  tokens "$T/scalar.npy" -o "$T/x.h5" --vocab 50257
expect_ingest_error ".npy of float32" "'$T/float.npy' holds dtype '<f4'; tokens must be integers" \
  tokens "$T/float.npy" -o "$T/x.h5" --vocab 50257
expect_ingest_error ".npy big-endian" "'$T/big.npy' holds big-endian integers ('>u2')" \
  tokens "$T/big.npy" -o "$T/x.h5" --vocab 50257
expect_ingest_error ".npy with no tokens" "'$T/none.npy' holds an empty array" \
  tokens "$T/none.npy" -o "$T/x.h5" --vocab 50257
expect_ingest_error ".npy truncated" "says 100 tokens of 2 bytes but 194 bytes follow it" \
  tokens "$T/trunc.npy" -o "$T/x.h5" --vocab 50257
expect_ingest_error "--format npy on a file that is not one" "does not start with the .npy magic" \
  tokens "$T/train.bin" -o "$T/x.h5" --vocab 50257 --format npy
expect_ingest_error "missing --vocab" \
  "ingest tokens needs --vocab N or --tokenizer T: token files do not say their vocabulary (50257 for GPT-2's tokenizer)$hint" \
  tokens "$T/train.bin" -o "$T/x.h5"
expect_ingest_error "--vocab 0" "--vocab '0' is not a vocabulary size in [1, 2147483647]$hint" \
  tokens "$T/train.bin" -o "$T/x.h5" --vocab 0
expect_ingest_error "--vocab abc" "--vocab 'abc' is not a vocabulary size" \
  tokens "$T/train.bin" -o "$T/x.h5" --vocab abc
expect_ingest_error "an unknown --format" "unknown token file format 'parquet'; choose auto, nanogpt, llmc or npy" \
  tokens "$T/train.bin" -o "$T/x.h5" --vocab 50257 --format parquet
expect_ingest_error "a missing --val file" "cannot read input '$T/nope.bin'" \
  tokens "$T/train.bin" --val "$T/nope.bin" -o "$T/x.h5" --vocab 50257
expect_ingest_error "--vocab is not an option of ingest text" \
  "--vocab is an option of 'ingest tokens', not of 'ingest text'$hint" \
  text "$T/odd.bin" -o "$T/x.h5" --vocab 300
expect_ingest_error "no token files" "no input files; name at least one token file$hint" \
  tokens -o "$T/x.h5" --vocab 300
expect_ingest_error "-o naming an input" "the output (-o)" \
  tokens "$T/train.bin" --val "$T/val.bin" -o "$T/val.bin" --vocab 50257

done_testing
