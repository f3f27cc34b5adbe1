#!/bin/sh
# test_damaged.sh - hand-damaged checkpoints: attributes out of range
# (step = -5, data_samples = -1, batch = 0, a layout of 0) and a NaN weight
# whose checksum was recomputed (so only the value is wrong). ckpt verify
# and a resume from the file must both refuse each with one line that names
# the file and what is wrong, and never train. Then bytes flipped in the
# HDF5 metadata (a dataset's object header, a group's) and in the data (a
# checksum block) of a checkpoint, and in the metadata of a token dataset:
# a resume and `sample` exit 2 naming the file and saying what is damaged
# (not "another model", not "a link to nothing"); `ckpt verify` exits 1
# (its "damaged") naming the file.
# docs/errors.md rows: E-CKPT-03, E-CKPT-04, E-CKPT-06, E-DATA-07
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
"$GT_BIN" train "$deck" data.train="$data" run.steps=2 checkpoint.dir="$GT_TMP/ck" \
  >"$GT_TMP/make.out" 2>&1 || bail "cannot make a checkpoint"
good="$GT_TMP/ck/step_00000002.h5"

# damage NAME PYTHON: a copy of the good checkpoint changed by PYTHON (h5py file f)
damage() {
  cp "$good" "$GT_TMP/$1.h5"
  "$PYTHON_REF" - "$GT_TMP/$1.h5" <<PY || bail "cannot damage $1"
import sys, h5py, numpy as np
def fletcher32(b):
    w = np.frombuffer(b, dtype='<u2').astype(np.uint64)
    s1 = s2 = 0
    for x in w:
        s1 = (s1 + int(x)) % 65535
        s2 = (s2 + s1) % 65535
    return (s2 << 16) | s1
with h5py.File(sys.argv[1], 'r+') as f:
$2
PY
}

# verify_and_resume NAME: ckpt verify of NAME.h5 ($v_rc, NAME.verify) and a
# run that resumes from it ($r_rc, NAME.resume)
verify_and_resume() {
  "$GT_BIN" ckpt verify "$GT_TMP/$1.h5" >"$GT_TMP/$1.verify" 2>&1
  v_rc=$?
  run_mpi 1 60 "$GT_BIN" train "$deck" data.train="$data" run.steps=4 \
    checkpoint.resume="$GT_TMP/$1.h5" >"$GT_TMP/$1.resume" 2>&1
  r_rc=$?
}

# refused NAME PATTERN: verify and resume both fail, naming the file and PATTERN
refused() {
  verify_and_resume "$1"
  [ $v_rc -ne 0 ] && grep -q "$GT_TMP/$1.h5.*$2" "$GT_TMP/$1.verify"
  ok $? "$1: ckpt verify refuses it (status $v_rc): $2"
  [ $r_rc -ne 0 ] && [ $r_rc -lt 124 ] && grep -q "^gridtrain: error: .*$1.h5.*$2" "$GT_TMP/$1.resume" &&
    ! grep -q '^step ' "$GT_TMP/$1.resume"
  ok $? "$1: a resume from it stops before training (status $r_rc)"
}

damage step "    f.attrs['step'] = np.int64(-5)"
refused step "attribute step = -5 is outside"
damage samples "    f.attrs['data_samples'] = np.int64(-1)"
refused samples "attribute data_samples = -1 is outside"
damage batch "    f.attrs['batch'] = np.int64(0)"
refused batch "attribute batch = 0 is outside"
damage layout "    f.attrs['layout'] = np.array([0, 1, 1], dtype=np.int64)"
refused layout "attribute layout\[dp\] = 0 is outside"
damage nan "    d = f['model/h.0.attn.proj.bias']
    x = d[...].astype('<f4')
    x[3] = np.nan
    d[...] = x
    d.attrs['fletcher32'] = np.array([fletcher32(x.tobytes())], dtype=np.uint32)"
refused nan "h.0.attn.proj.bias holds a non-finite value (nan at element 3)"

# ---- flipped bytes in HDF5 metadata and in the data ----------------------------------------

# flip NAME SRC WHAT: a copy of SRC with 4 bytes flipped at WHAT (h5py file f):
# "hdr:PATH" the object header of PATH, "data:PATH" the first bytes of its data
flip() {
  "$PYTHON_REF" - "$2" "$GT_TMP/$1.h5" "$3" <<'PY' || bail "cannot damage $1"
import sys, shutil, h5py
src, out, what = sys.argv[1:4]
kind, path = what.split(':', 1)
with h5py.File(src, 'r') as f:
    at = h5py.h5o.get_info(f[path].id).addr + 8 if kind == 'hdr' else f[path].id.get_offset() + 16
shutil.copy(src, out)
with open(out, 'r+b') as fh:
    fh.seek(at)
    b = fh.read(4)
    fh.seek(at)
    fh.write(bytes(x ^ 0xff for x in b))
PY
}

# damaged NAME PATTERN: resume and sample exit 2 naming the file and PATTERN;
# ckpt verify exits 1 naming it
damaged() {
  verify_and_resume "$1"
  "$GT_BIN" sample "$GT_TMP/$1.h5" </dev/null >"$GT_TMP/$1.sample" 2>&1
  s_rc=$?
  [ $v_rc -eq 1 ] && grep -q "^gridtrain: error: .*$1.h5.*$2" "$GT_TMP/$1.verify"
  ok $? "$1: ckpt verify: status 1 (got $v_rc), the file and '$2' named"
  [ $r_rc -eq 2 ] && grep -q "^gridtrain: error: .*$1.h5.*$2" "$GT_TMP/$1.resume" &&
    ! grep -q '^step ' "$GT_TMP/$1.resume"
  ok $? "$1: resume = FILE: status 2 (got $r_rc), the file and '$2' named"
  [ $s_rc -eq 2 ] && grep -q "^gridtrain: error: .*$1.h5.*$2" "$GT_TMP/$1.sample"
  ok $? "$1: sample: status 2 (got $s_rc), the same"
}

flip dset_header "$good" hdr:/model/h.0.attn.proj.bias
damaged dset_header "is damaged: the object header of /model/h.0.attn.proj.bias does not read"
flip group_header "$good" hdr:/model
damaged group_header "is damaged: the HDF5 metadata of /model (a group) does not read"
flip block "$good" data:/model/h.0.attn.proj.bias
damaged block "/model/h.0.attn.proj.bias is damaged: the checksum of its bytes"

# the same in a split tensor at tp = 2: the attention's output projection
# splits its columns, so the pair exchanges it and only one of them reads
# the damaged block; both stop
flip split_block "$good" data:/model/h.0.attn.proj.weight
run_mpi 2 60 "$GT_BIN" train "$deck" data.train="$data" run.steps=4 grid.tp=2 \
  checkpoint.resume="$GT_TMP/split_block.h5" >"$GT_TMP/split_block.resume" 2>&1
r_rc=$?
[ $r_rc -eq 2 ] && grep -q "^gridtrain: error: .*split_block.h5.*/model/h.0.attn.proj.weight is damaged: the checksum of its bytes" "$GT_TMP/split_block.resume" &&
  ! grep -q '^step ' "$GT_TMP/split_block.resume"
ok $? "split_block: resume at tp = 2 (the exchanged read): status 2 (got $r_rc), the file and the tensor named"

# the token dataset: its object header, its group's
for w in hdr:/train/tokens hdr:/train; do
  flip tokens "$data" "$w"
  run_mpi 1 60 "$GT_BIN" train "$deck" data.train="$GT_TMP/tokens.h5" run.steps=2 \
    >"$GT_TMP/tokens.out" 2>&1
  t_rc=$?
  [ $t_rc -eq 2 ] && grep -q "^gridtrain: error: '$GT_TMP/tokens.h5:/train/tokens' cannot be read: the file's HDF5 metadata on that path (an object header or a group) is damaged" "$GT_TMP/tokens.out"
  ok $? "dataset with flipped bytes at $w: status 2 (got $t_rc), the file and the damage named"
done

done_testing
