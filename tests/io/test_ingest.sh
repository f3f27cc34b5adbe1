#!/bin/sh
# tests/io/test_ingest.sh - `gridtrain ingest text`: the file it writes
# (checked byte for byte with h5py), its usage errors, the Fletcher32
# checksums, and a launch on 2 ranks.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

T=$GT_TMP
TEXT=$GT_SRCDIR/tests/data/genesis.txt
"$PYTHON_REF" -c 'import h5py, numpy' 2>/dev/null ||
  bail "$PYTHON_REF lacks h5py or numpy (apt-get install python3-h5py python3-numpy)"

# check.py FILE VAL_FRACTION SOURCE...: the layout and attributes ingest.h
# promises, and train/val are the heads/tails of the sources, in order.
cat >"$T/check.py" <<'EOF'
import math, sys
import h5py, numpy as np

path, vf, sources = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
bad = []
def want(cond, what):
    if not cond:
        bad.append(what)

heads, tails, sizes = [], [], []
for s in sources:
    data = open(s, 'rb').read()
    nval = math.floor(len(data) * vf)
    heads.append(data[:len(data) - nval])
    tails.append(data[len(data) - nval:])
    sizes.append(len(data))
train, val = b''.join(heads), b''.join(tails)

with h5py.File(path, 'r') as f:
    for name, ref in (('train', train), ('val', val)):
        d = f[name + '/tokens']
        want(d.dtype == np.uint8, f'{name}: dtype {d.dtype}, want uint8')
        want(d.ndim == 1 and d.shape[0] == len(ref), f'{name}: shape {d.shape}, want ({len(ref)},)')
        want(d.chunks is not None and 1 <= d.chunks[0] <= 65536, f'{name}: chunks {d.chunks}')
        want(d.fletcher32, f'{name}: no Fletcher32 filter')
        want(d[...].tobytes() == ref, f'{name}: bytes differ from the sources')
        want(int(d.attrs.get('vocab_size', -1)) == 256, f'{name}: vocab_size')
        want(d.attrs.get('tokenizer') == 'bytes', f'{name}: tokenizer')
    a = f.attrs
    want(a['vocab_size'] == 256 and a['vocab_size'].dtype == np.int64, 'root vocab_size')
    want(a['tokenizer'] == 'bytes', 'root tokenizer')
    got_sources = [s.decode() if isinstance(s, bytes) else s for s in a['sources']]
    want(got_sources == sources, f'sources {got_sources}, want {sources}')
    want(a['source_bytes'].dtype == np.uint64 and list(a['source_bytes']) == sizes,
         f'source_bytes {a["source_bytes"]}, want {sizes}')
    want(a['val_fraction'] == vf, f'val_fraction {a["val_fraction"]}')
    want(a['train_tokens'] == len(train) and a['train_tokens'].dtype == np.int64, 'train_tokens')
    want(a['val_tokens'] == len(val) and a['val_tokens'].dtype == np.int64, 'val_tokens')
    want(str(a['created_by']).startswith('gridtrain '), f'created_by {a["created_by"]!r}')
for b in bad:
    print('#', b)
sys.exit(1 if bad else 0)
EOF

# corrupt.py FILE: flip bytes inside the first chunk of /train/tokens, then
# reading that chunk must fail (the Fletcher32 checksum no longer matches).
cat >"$T/corrupt.py" <<'EOF'
import sys
import h5py

path = sys.argv[1]
with h5py.File(path, 'r') as f:
    info = f['train/tokens'].id.get_chunk_info(0)
at = info.byte_offset + info.size // 2
with open(path, 'r+b') as fh:
    fh.seek(at)
    old = fh.read(16)
    fh.seek(at)
    fh.write(bytes(b ^ 0x5a for b in old))
try:
    with h5py.File(path, 'r') as f:
        f['train/tokens'][:1000]
except OSError as e:
    print('# read failed as it should:', str(e).splitlines()[0])
    sys.exit(0)
print('# the corrupted chunk was read without an error')
sys.exit(1)
EOF

# ---- a real text ----------------------------------------------------------------
"$GT_BIN" ingest text "$TEXT" -o "$T/g.h5" --val-fraction 0.1 >"$T/out" 2>"$T/err"
ok $? "ingest text genesis.txt -o g.h5 --val-fraction 0.1"
[ "$(wc -l <"$T/out")" -eq 1 ] && grep -q "g.h5" "$T/out" && grep -q " train + " "$T/out" &&
  [ ! -s "$T/err" ]
ok $? "one summary line on stdout, nothing on stderr"
diag "$(cat "$T/out" "$T/err")"
"$PYTHON_REF" "$T/check.py" "$T/g.h5" 0.1 "$TEXT"
ok $? "h5py: train + val reconstruct genesis.txt; dtype, chunks, Fletcher32, attributes"
[ ! -e "$T/g.h5.tmp" ]
ok $? "no temporary file left"

"$GT_BIN" ingest text "$TEXT" -o "$T/g.h5" --val-fraction=0.02 >/dev/null 2>&1 &&
  "$PYTHON_REF" "$T/check.py" "$T/g.h5" 0.02 "$TEXT"
ok $? "an existing output is replaced (--val-fraction=0.02)"

# ---- two sources, and val_fraction 0 ----------------------------------------------
head -c 12345 "$TEXT" | tr 'a-z' 'A-Z' >"$T/part two.txt"
"$GT_BIN" ingest text "$TEXT" "$T/part two.txt" --val-fraction 0.25 --output "$T/two.h5" \
  >/dev/null 2>"$T/err" && "$PYTHON_REF" "$T/check.py" "$T/two.h5" 0.25 "$TEXT" "$T/part two.txt"
ok $? "two sources: both splits see both, in order; sources lists both"

"$GT_BIN" ingest text "$TEXT" -o "$T/noval.h5" --val-fraction 0 >/dev/null 2>"$T/err" &&
  "$PYTHON_REF" "$T/check.py" "$T/noval.h5" 0 "$TEXT"
ok $? "--val-fraction 0: an empty /val/tokens that reads back"

# ---- help ------------------------------------------------------------------------------
for args in "--help" "text --help" "-h"; do
  # shellcheck disable=SC2086
  "$GT_BIN" ingest $args >"$T/out" 2>"$T/err" &&
    grep -q "^usage: gridtrain ingest text IN\.\.\. -o OUT\.h5" "$T/out" && [ ! -s "$T/err" ]
  ok $? "ingest $args prints the usage on stdout and exits 0"
done

# ---- usage and input errors: exit 2, one line on stderr, nothing on stdout ---------------
: >"$T/empty.txt"
hint="; see 'gridtrain ingest --help'"
expect_ingest_error "missing input" \
  "cannot read input '$T/missing.txt': No such file or directory" \
  text "$T/missing.txt" -o "$T/x.h5"
expect_ingest_error "empty input" "input '$T/empty.txt' is empty" \
  text "$TEXT" "$T/empty.txt" -o "$T/x.h5"
expect_ingest_error "input that is a directory" "input '$T' is not a regular file" \
  text "$T" -o "$T/x.h5"
expect_ingest_error "output in a missing directory" \
  "cannot create '$T/no/such/dir/x.h5': No such file or directory" \
  text "$TEXT" -o "$T/no/such/dir/x.h5"
expect_ingest_error "output under /proc" "cannot create '/proc/x.h5'" text "$TEXT" -o /proc/x.h5
expect_ingest_error "output that is a directory" "cannot create '$T'" text "$TEXT" -o "$T"
expect_ingest_error "--val-fraction not a number" "--val-fraction 'abc' is not a number$hint" \
  text "$TEXT" -o "$T/x.h5" --val-fraction abc
expect_ingest_error "--val-fraction above 0.5" "--val-fraction 0.7 is outside [0, 0.5]$hint" \
  text "$TEXT" -o "$T/x.h5" --val-fraction 0.7
expect_ingest_error "--val-fraction below 0" "--val-fraction -0.1 is outside [0, 0.5]$hint" \
  text "$TEXT" -o "$T/x.h5" --val-fraction -0.1
expect_ingest_error "--val-fraction without a value" "--val-fraction needs a value$hint" \
  text "$TEXT" -o "$T/x.h5" --val-fraction
expect_ingest_error "no -o" "no output file; add -o OUT.h5$hint" text "$TEXT"
expect_ingest_error "no inputs" "no input files; name at least one text file$hint" \
  text -o "$T/x.h5"
expect_ingest_error "unknown option" "unknown option '--bogus'$hint" \
  text "$TEXT" -o "$T/x.h5" --bogus
expect_ingest_error "unknown kind" "unknown input kind 'csv'; the kinds supported are 'text' and 'tokens'$hint" \
  csv "$TEXT" -o "$T/x.h5"
expect_ingest_error "no kind" "ingest needs the kind of input"

# ---- Fletcher32 catches corruption -----------------------------------------------------------
cp "$T/g.h5" "$T/corrupt.h5" && "$PYTHON_REF" "$T/corrupt.py" "$T/corrupt.h5"
ok $? "a flipped byte in a chunk makes the read fail (Fletcher32)"
# training on the damaged file stops with the checksum error (the rank that
# reads the chunk reports it and takes the job down: no hang, no silent data)
run_mpi 2 120 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$T/corrupt.h5" \
  run.steps=60 >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "Fletcher32 checksum" "$T/err" &&
  grep -q "make it again with 'gridtrain ingest'" "$T/err"
ok $? "training on a corrupted dataset stops with the checksum error (exit $rc)"

# ---- on 2 ranks: rank 0 writes, once ---------------------------------------------------------
run_mpi 2 60 "$GT_BIN" ingest text "$TEXT" -o "$T/mpi.h5" --val-fraction 0.1 \
  >"$T/out" 2>"$T/err"
ok $? "ingest on 2 ranks exits 0"
[ "$(grep -c "wrote" "$T/out")" -eq 1 ] && [ ! -s "$T/err" ] && [ ! -e "$T/mpi.h5.tmp" ] &&
  "$PYTHON_REF" "$T/check.py" "$T/mpi.h5" 0.1 "$TEXT"
ok $? "on 2 ranks: one summary line, a correct file, no temporary left"
diag "$(cat "$T/out" "$T/err")"
run_mpi 2 60 "$GT_BIN" ingest text "$T/missing.txt" -o "$T/x.h5" >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 2 ] && [ ! -s "$T/out" ] && [ "$(wc -l <"$T/err")" -eq 1 ] &&
  grep -qF "cannot read input" "$T/err"
ok $? "on 2 ranks an input error exits 2 on every rank with one message (exit $rc)"

done_testing
