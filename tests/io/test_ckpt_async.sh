#!/bin/sh
# test_ckpt_async.sh - asynchronous checkpoints ([checkpoint] async = on, the
# default): the step waits for the file's creation, a writer thread copies
# the state (the CPU backend: the next update waits for that copy) and
# writes the file while training goes on, the main thread finishes it at a
# later step boundary. Checks that the write really overlaps steps
# (GT_FAULT=ckpt_async_slow holds the writer thread 1 s before its copy, so
# that training changing the state under a copy that is not a snapshot, or
# an update that does not wait for the copy, would show), that a
# resume from such a checkpoint is bit for bit at 1 rank (losses and the
# final checkpoint), and that a background write failing on one rank of two
# (ckpt_async_fail) leaves latest and the earlier files as they were and ends
# the run with one error line and exit 1 on every rank. The full tier's part
# (SIGTERM during a write, 4 ranks with ZeRO, async = off) is
# test_ckpt_async_full.sh. A constant learning rate (no warm-up, min_lr = lr),
# as there.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"
. "$GT_SRCDIR/tests/io/ckpt_async_lib.sh"

# ---- 1 rank: every 4 steps, the step-4 write held 1 s (steps 5.. overlap it)
ref="$GT_TMP/ck-ref1"
GT_FAULT=ckpt_async_slow:step=4 run_train 1 ref1 run.steps=12 checkpoint.dir="$ref" \
  checkpoint.every=4 run.metrics="$GT_TMP/ref1.jsonl"
ok $? "1 rank, async, every 4 of 12 steps, the step-4 write held 1 s: exit 0"
[ "$(cd "$ref" && echo step_*)" = "step_00000004.h5 step_00000008.h5 step_00000012.h5" ] &&
  [ "$(cat "$ref/latest")" = step_00000012.h5 ] && [ -z "$(find "$ref" -name '*.tmp')" ]
ok $? "the step files 4, 8, 12; latest names 12; no .tmp"
# the step-4 file was named after step 6 ran: the write overlapped steps
w4=$(grep -n "checkpoint $ref/step_00000004.h5 written in .* (the step waited" "$GT_TMP/ref1.out" |
  cut -d: -f1)
s6=$(grep -n "^step *6[ /]" "$GT_TMP/ref1.out" | head -n 1 | cut -d: -f1)
[ -n "$w4" ] && [ -n "$s6" ] && [ "$w4" -gt "$s6" ]
ok $? "the step-4 file is finished after step 6 ran (line $w4 > $s6): training went on"
[ $? -eq 0 ] || show "$GT_TMP/ref1.out"
"$GT_BIN" ckpt verify "$ref/step_00000004.h5" >/dev/null 2>&1
ok $? "the step-4 file verifies (checksums made by the writer thread)"

# resume from step 4: the losses of steps 4-11 and the final state, bit for bit
res="$GT_TMP/ck-res1"
resume_dir "$ref" "$res" 4
run_train 1 res1 run.steps=12 checkpoint.dir="$res" checkpoint.every=4 \
  run.metrics="$GT_TMP/res1.jsonl"
st=$?
[ $st -eq 0 ] && grep -q "resumed from $res/step_00000004.h5 at step 4" "$GT_TMP/res1.out" &&
  [ "$(losses "$GT_TMP/res1.jsonl" 4 11)" = "$(losses "$GT_TMP/ref1.jsonl" 4 11)" ] &&
  [ -n "$(losses "$GT_TMP/res1.jsonl" 11 11)" ]
ok $? "resumed from the async step-4 file: steps 4-11 have the uninterrupted run's losses"
same_ckpt "$res/step_00000012.h5" "$ref/step_00000012.h5"
ok $? "and the same step-12 checkpoint, bit for bit"

# ---- a background write that fails on rank 1 of 2: the run stops, nothing lost
fl="$GT_TMP/ck-fail"
GT_FAULT=ckpt_async_fail:rank=1:step=4 run_train 2 fail grid.pp=2 run.steps=12 \
  checkpoint.dir="$fl" checkpoint.every=2
st=$?
line=$(grep -F "gridtrain: error: cannot write checkpoint $(stepfile "$fl" 4): pwrite failed: Input/output error (injected by GT_FAULT=ckpt_async_fail" "$GT_TMP/fail.err")
[ $st -eq 1 ] && [ "$(grep -c 'error' "$GT_TMP/fail.err")" -eq 1 ] &&
  printf '%s\n' "$line" | grep -q '\[at rank 1,'
ok $? "ckpt_async_fail on rank 1 at step 4: exit 1, one error line naming the file and the cause (status $st)"
[ $? -eq 0 ] || show "$GT_TMP/fail.err"
! grep -Eqi 'signal|segmentation|abort' "$GT_TMP/fail.err"
ok $? "no signal, no abort: every rank ends with the agreed error"
[ "$(cat "$fl/latest")" = step_00000002.h5 ] && [ "$(cd "$fl" && echo step_*)" = step_00000002.h5 ] &&
  [ -z "$(find "$fl" -name '*.tmp')" ] && "$GT_BIN" ckpt verify "$fl/step_00000002.h5" >/dev/null 2>&1
ok $? "latest still names step 2, which verifies; no step 4 or later, no .tmp"

done_testing
