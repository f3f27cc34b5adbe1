#!/bin/sh
# test_checkpoint.sh - checkpoints through the command line: the directory
# (step files, latest, keep), resuming bit for bit, SIGUSR1/SIGTERM ->
# checkpoint -> exit 3, a crash in the middle of a write, damaged and
# truncated files (fallback to the previous one; a clear error when none is
# left), `gridtrain ckpt info|verify|convert`, and the exported weights
# evaluated by an independent PyTorch model.
# docs/errors.md rows: E-SIG-03
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.1 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
# A constant learning rate (no warm-up, min_lr = lr), so that runs of
# different lengths take the same steps: the signalled run is compared with
# a shorter uninterrupted one.
common="data.train=$data data.val=$data run.eval_every=12 optim.warmup=0 optim.min_lr=3e-3"

# final OUT: the final loss of a run's done line
final() { sed -n 's/.*final loss \([0-9.]*\).*/\1/p' "$1.out"; }
show() { sed 's/^/#   /' "$1"; }

# ---- uninterrupted reference: 2 ranks, pp = 2, 12 steps
run_train 2 ref grid.pp=2 run.steps=12 run.metrics="$GT_TMP/ref.jsonl"
ok $? "reference run (2 ranks, pp=2, 12 steps) exits 0"
ref=$(final "$GT_TMP/ref")

# ---- the directory: every 4 steps, keep 2
ck="$GT_TMP/ck"
run_train 2 a grid.pp=2 run.steps=12 checkpoint.dir="$ck" checkpoint.every=4 \
  checkpoint.keep=2 run.metrics="$GT_TMP/a.jsonl"
ok $? "run with [checkpoint] dir, every = 4, keep = 2 exits 0"
[ "$(final "$GT_TMP/a")" = "$ref" ]
ok $? "writing checkpoints does not change the run (final loss $(final "$GT_TMP/a") = $ref)"
[ "$(cd "$ck" && echo step_*)" = "step_00000008.h5 step_00000012.h5" ] &&
  [ "$(cat "$ck/latest")" = "step_00000012.h5" ]
ok $? "keep = 2 leaves steps 8 and 12; latest names step 12 ($(cd "$ck" && echo *))"
grep -q "gridtrain: checkpoint $ck/step_00000004.h5 written" "$GT_TMP/a.out"
ok $? "rank 0 reports each checkpoint it writes"

"$GT_BIN" ckpt info "$ck/step_00000012.h5" >"$GT_TMP/info.out" 2>&1
ok $? "gridtrain ckpt info exits 0"
grep -q "^step  *12 " "$GT_TMP/info.out" && grep -q "^layout  *dp=1 x pp=2 x tp=1" "$GT_TMP/info.out" &&
  grep -q "^model  *gpt: layers 2, heads 4, dim 64, seq_len 32, vocab 256" "$GT_TMP/info.out" &&
  grep -q "^sizes .* on disk" "$GT_TMP/info.out" && grep -q "^  \[checkpoint\]" "$GT_TMP/info.out" &&
  grep -q "^  every = 4" "$GT_TMP/info.out" && grep -q "^data position  *144 sequences" "$GT_TMP/info.out"
ok $? "ckpt info shows step, layout, model, sizes, data position and the deck"
[ $? -eq 0 ] || show "$GT_TMP/info.out"

"$GT_BIN" ckpt verify "$ck/step_00000008.h5" "$ck/step_00000012.h5" >"$GT_TMP/verify.out" 2>&1
ok $? "gridtrain ckpt verify of two good files exits 0"
[ "$(grep -c ': ok: 84 datasets' "$GT_TMP/verify.out")" -eq 2 ]
ok $? "verify reads all 84 datasets (28 tensors x model, m, v) of each"

# ---- resume in the same layout: bit for bit
cp -r "$ck" "$GT_TMP/ck-resume"
rm "$GT_TMP/ck-resume/step_00000012.h5"
printf 'step_00000008.h5\n' >"$GT_TMP/ck-resume/latest"
run_train 2 b grid.pp=2 run.steps=12 checkpoint.dir="$GT_TMP/ck-resume" \
  run.metrics="$GT_TMP/b.jsonl"
ok $? "a run resumes from latest (step 8) and exits 0"
grep -q "gridtrain: resumed from $GT_TMP/ck-resume/step_00000008.h5 at step 8" "$GT_TMP/b.out"
ok $? "rank 0 says where it resumed from"
# steploss FILE.jsonl: "step loss" for every step record
steploss() { sed -n 's/.*"step":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$1"; }
[ "$(final "$GT_TMP/b")" = "$ref" ] &&
  [ "$(steploss "$GT_TMP/b.jsonl")" = "$(steploss "$GT_TMP/ref.jsonl" | sed -n '9,12p')" ]
ok $? "resumed run: steps 8-11 have the reference's losses ($(final "$GT_TMP/b") = $ref)"

# ---- resume in another layout: 4 ranks, tp = 2 x dp = 2
run_train 4 c grid.tp=2 grid.dp=2 run.steps=12 checkpoint.resume="$ck/step_00000008.h5"
ok $? "the pp=2 checkpoint resumes on 4 ranks as dp=2 x tp=2"
[ "$(final "$GT_TMP/c")" = "$ref" ]
ok $? "and ends with the reference's loss to the printed digits ($(final "$GT_TMP/c") = $ref)"

# ---- ZeRO: every dp rank writes its own piece; files load at any stage and dp size
zk="$GT_TMP/zero"
run_train 4 z grid.tp=2 grid.dp=2 parallel.zero=1 run.steps=12 checkpoint.dir="$zk" \
  checkpoint.every=4 checkpoint.keep=0
ok $? "dp=2 x tp=2 at zero=1 writes checkpoints every 4 steps"
[ "$(final "$GT_TMP/z")" = "$ref" ]
ok $? "and ends with the reference's loss ($(final "$GT_TMP/z") = $ref)"
"$GT_BIN" ckpt verify "$zk/step_00000004.h5" >"$GT_TMP/zv.out" 2>&1 &&
  grep -q ': ok: 84 datasets' "$GT_TMP/zv.out"
ok $? "the zero=1 file written in 4 pieces verifies: every block's checksum holds"
run_train 4 z2 grid.dp=4 parallel.zero=2 run.steps=12 checkpoint.resume="$zk/step_00000004.h5"
ok $? "the zero=1 dp=2 x tp=2 step-4 file resumes as zero=2 dp=4"
[ "$(final "$GT_TMP/z2")" = "$ref" ]
ok $? "and ends with the reference's loss ($(final "$GT_TMP/z2") = $ref)"
run_train 1 z0 run.steps=12 checkpoint.resume="$zk/step_00000004.h5"
ok $? "the same file resumes on 1 rank without ZeRO"
[ "$(final "$GT_TMP/z0")" = "$ref" ]
ok $? "and ends with the reference's loss ($(final "$GT_TMP/z0") = $ref)"
# dp=2 without ZeRO: the replicas split the write; a zero=2 dp=4 reader loads it
run_train 2 zd grid.dp=2 run.steps=8 checkpoint.dir="$GT_TMP/zd-ck" checkpoint.every=4
ok $? "dp=2 without ZeRO writes checkpoints (each replica half of the buffer)"
run_train 4 zd2 grid.dp=4 parallel.zero=2 run.steps=12 \
  checkpoint.resume="$GT_TMP/zd-ck/step_00000008.h5"
[ $? -eq 0 ] && [ "$(final "$GT_TMP/zd2")" = "$ref" ]
ok $? "its step-8 file resumes as zero=2 dp=4 with the reference's loss ($(final "$GT_TMP/zd2") = $ref)"

# ---- a format-2 file (chunked, HDF5's Fletcher32 filter) still loads.
# tests/data/ckpt_format2_tiny.h5 was written by gridtrain f35c76c (format 2)
# at step 4 of: 2 ranks, tp=2, this deck and $common, model.layers=1
# model.dim=32. Resumed in another layout it must end like a run without
# checkpoints.
f2="$GT_SRCDIR/tests/data/ckpt_format2_tiny.h5"
small="model.layers=1 model.dim=32"
run_train 1 f2ref $small run.steps=8
run_train 4 f2 $small grid.dp=2 grid.tp=2 parallel.zero=1 run.steps=8 checkpoint.resume="$f2"
[ $? -eq 0 ] && [ -n "$(final "$GT_TMP/f2ref")" ] && [ "$(final "$GT_TMP/f2")" = "$(final "$GT_TMP/f2ref")" ]
ok $? "a format-2 file resumes at zero=1 dp=2 x tp=2 with the loss of a run without checkpoints ($(final "$GT_TMP/f2") = $(final "$GT_TMP/f2ref"))"
"$GT_BIN" ckpt verify "$f2" >"$GT_TMP/f2v.out" 2>&1
ok $? "ckpt verify reads the format-2 file through HDF5's checksums"

# ---- SIGUSR1 / SIGTERM: checkpoint at the next step boundary, exit 3
sig="$GT_TMP/sig"
run_train 4 s grid.pp=2 grid.tp=2 run.steps=1000000 checkpoint.dir="$sig" \
  run.metrics="$GT_TMP/s.jsonl" &
job=$!
ranks=""
for _ in $(seq 600); do
  [ -f "$GT_TMP/s.jsonl" ] && [ "$(grep -c '"step"' "$GT_TMP/s.jsonl")" -ge 5 ] && break
  sleep 0.1
done
for p in $(pgrep -f "checkpoint.dir=$sig"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gridtrain ] && ranks="$ranks $p"
done
set -- $ranks
diag "signalling ranks: $ranks"
# One rank gets SIGUSR1, then SIGTERM, a moment later another rank SIGUSR1
# too: the second and third arrive while the checkpoint is being agreed on or
# written, and must change nothing.
kill -USR1 "$3" 2>/dev/null
kill -TERM "$3" 2>/dev/null
sleep 0.2
kill -USR1 "$2" 2>/dev/null
wait $job
status=$?
[ $status -eq 3 ]
ok $? "SIGUSR1 to one of 4 ranks: exit status 3 (got $status)"
[ $status -eq 3 ] || show "$GT_TMP/s.err"
# (which of the signals it names depends on which arrived first where)
grep -Eq "^gridtrain: requeue: caught SIG(USR1|TERM): checkpoint $sig/step_[0-9]*.h5 written at step [0-9]* of 1000000" "$GT_TMP/s.err"
ok $? "rank 0 reports the signal, the checkpoint and the step in one line"
k=$(sed -n 's/.*written at step \([0-9]*\) of.*/\1/p' "$GT_TMP/s.err")
[ -n "$k" ] && [ "$(cat "$sig/latest")" = "$(printf 'step_%08d.h5' "$k")" ] &&
  "$GT_BIN" ckpt verify "$sig/$(cat "$sig/latest")" >/dev/null 2>&1
ok $? "latest names the step-$k checkpoint and it verifies"
[ -z "$(find "$sig" -name '*.tmp')" ]
ok $? "no temporary file is left behind"
# resume to step k + 3 and compare with an uninterrupted run of k + 3 steps
end=$((k + 3))
run_train 4 s2 grid.pp=2 grid.tp=2 run.steps=$end checkpoint.dir="$sig"
ok $? "the signalled run resumes and finishes step $end"
run_train 4 s3 grid.pp=2 grid.tp=2 run.steps=$end
[ -n "$(final "$GT_TMP/s2")" ] && [ "$(final "$GT_TMP/s2")" = "$(final "$GT_TMP/s3")" ]
ok $? "with the loss of an uninterrupted $end-step run ($(final "$GT_TMP/s2") = $(final "$GT_TMP/s3"))"

# ---- a signal without a checkpoint directory: stop cleanly, status 1
run_train 2 n grid.pp=2 run.steps=1000000 run.metrics="$GT_TMP/n.jsonl" &
job=$!
for _ in $(seq 600); do
  [ -f "$GT_TMP/n.jsonl" ] && [ "$(grep -c '"step"' "$GT_TMP/n.jsonl")" -ge 2 ] && break
  sleep 0.1
done
for p in $(pgrep -f "run.metrics=$GT_TMP/n.jsonl"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gridtrain ] && kill -TERM "$p" && break
done
wait $job
status=$?
[ $status -eq 1 ] && grep -q "^gridtrain: error: stopped by SIGTERM at step [0-9]* of 1000000; nothing was saved because \[checkpoint\] dir is not set" "$GT_TMP/n.err"
ok $? "SIGTERM without [checkpoint] dir: stops at a step boundary, exit 1, says nothing was saved (got $status)"

# ---- a run that is already complete has nothing to do
run_train 2 done grid.pp=2 run.steps=12 checkpoint.dir="$ck"
[ $? -eq 0 ] && grep -q "^gridtrain: done: nothing to do, the run is at step 12 and \[run\] steps = 12" "$GT_TMP/done.out"
ok $? "resuming a finished run: exit 0, nothing to do"

# ---- a crash in the middle of a write leaves latest on the previous file
cx="$GT_TMP/crash"
GT_FAULT=ckpt_kill:step=8 run_train 2 x grid.pp=2 run.steps=12 checkpoint.dir="$cx" \
  checkpoint.every=4
status=$?
[ $status -ne 0 ] && [ "$(cat "$cx/latest")" = "step_00000004.h5" ] &&
  [ -f "$cx/step_00000008.h5.tmp" ] && [ ! -f "$cx/step_00000008.h5" ]
ok $? "rank 0 killed while writing step 8: latest still names step 4, the step-8 file stays .tmp"
run_train 2 x2 grid.pp=2 run.steps=12 checkpoint.dir="$cx" checkpoint.every=4
ok $? "the next run exits 0"
grep -q "resumed from $cx/step_00000004.h5 at step 4" "$GT_TMP/x2.out" &&
  [ "$(final "$GT_TMP/x2")" = "$ref" ] && [ -z "$(find "$cx" -name '*.tmp')" ]
ok $? "it resumes from step 4, ends with the reference's loss and clears the .tmp"

# ---- damaged and truncated files
bad="$GT_TMP/bad"
cp -r "$ck" "$bad"
"$PYTHON_REF" - "$bad/step_00000012.h5" <<'EOF'
import os, sys
path = sys.argv[1]
size = os.path.getsize(path)
with open(path, "r+b") as f:      # flip 64 bytes in the middle of the data
    f.seek(size // 2)
    b = f.read(64)
    f.seek(size // 2)
    f.write(bytes(x ^ 0xFF for x in b))
EOF
"$GT_BIN" ckpt verify "$bad/step_00000012.h5" >"$GT_TMP/vbad.out" 2>&1
status=$?
[ $status -eq 1 ] && grep -q "damaged" "$GT_TMP/vbad.out"
ok $? "ckpt verify of a file with flipped bytes: exit 1, 'damaged' (got $status)"
[ $status -eq 1 ] || show "$GT_TMP/vbad.out"
cp -r "$bad" "$bad-tp"
run_train 2 d grid.pp=2 run.steps=12 checkpoint.dir="$bad"
ok $? "resume = auto with a damaged newest checkpoint exits 0"
# the same at tp = 2: the members read their cuts of split tensors and swap
# them (src/io/ckpt_read.c), so one rank may meet the damage for both
run_train 4 d-tp grid.dp=2 grid.tp=2 run.steps=12 checkpoint.dir="$bad-tp"
status=$?
[ $status -eq 0 ] && grep -q "warning: cannot resume from $bad-tp/step_00000012.h5: .*damaged" "$GT_TMP/d-tp.err" &&
  grep -q "resumed from $bad-tp/step_00000008.h5 at step 8" "$GT_TMP/d-tp.out"
ok $? "dp=2 x tp=2 with the damaged newest checkpoint: warns, falls back to step 8 (got $status)"
[ $? -eq 0 ] || show "$GT_TMP/d-tp.err"
grep -q "warning: cannot resume from $bad/step_00000012.h5" "$GT_TMP/d.err" &&
  grep -q "resumed from $bad/step_00000008.h5 at step 8" "$GT_TMP/d.out" &&
  [ "$(final "$GT_TMP/d")" = "$ref" ]
ok $? "it warns, falls back to step 8 and ends with the reference's loss"
[ $? -eq 0 ] || show "$GT_TMP/d.err"
truncate -s 100000 "$bad/step_00000012.h5"
"$GT_BIN" ckpt verify "$bad/step_00000012.h5" >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "ckpt verify of a truncated file: exit 2 (a file that is not a checkpoint is bad input)"
truncate -s 5000 "$bad/step_00000008.h5"
run_train 2 e grid.pp=2 run.steps=12 checkpoint.dir="$bad"
status=$?
[ $status -eq 2 ] && grep -q "^gridtrain: error: none of the 2 checkpoints in $bad can be resumed from" "$GT_TMP/e.err" &&
  ! grep -q "^step 0/" "$GT_TMP/e.out"
ok $? "every checkpoint damaged: exit 2 with one clear error, no training from scratch (got $status)"
[ "$(grep -c 'error' "$GT_TMP/e.err")" -eq 1 ]
ok $? "exactly one error line"
run_train 2 f grid.pp=2 run.steps=2 checkpoint.dir="$bad" checkpoint.resume=never
ok $? "resume = never starts fresh despite the damaged directory"
run_train 2 g grid.pp=2 run.steps=2 checkpoint.resume="$GT_TMP/nothing.h5"
[ $? -eq 2 ] && grep -q "cannot open checkpoint $GT_TMP/nothing.h5" "$GT_TMP/g.err"
ok $? "resume = a missing PATH: exit 2 naming the file"
run_train 2 h grid.pp=2 run.steps=2 model.dim=32 checkpoint.resume="$ck/step_00000012.h5"
[ $? -eq 2 ] && grep -q "holds a model with dim = 64 but the deck has \[model\] dim = 32" "$GT_TMP/h.err"
ok $? "a checkpoint of another model shape: exit 2 with both shapes named"

# ---- convert: plain full tensors that PyTorch can use
"$GT_BIN" ckpt convert "$ck/step_00000012.h5" "$GT_TMP/weights.h5" >"$GT_TMP/conv.out" 2>&1
ok $? "gridtrain ckpt convert exits 0"
want=$(sed -n 's/.*"final_val_loss":\([0-9.eE+-]*\).*/\1/p' "$GT_TMP/a.jsonl")
got=$("$PYTHON_REF" "$GT_SRCDIR/tests/io/check_weights.py" "$GT_TMP/weights.h5" "$data" 4 12 2>"$GT_TMP/py.err")
[ -n "$got" ] && [ -n "$want" ] &&
  "$PYTHON_REF" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(b))" "$got" "$want"
ok $? "PyTorch on the exported weights gives gridtrain's validation loss ($got vs $want)"
[ -n "$got" ] || show "$GT_TMP/py.err"

done_testing
