#!/bin/sh
# test_ckpt_async_full.sh - asynchronous checkpoints, the full tier's part
# (test_ckpt_async.sh has the quick one: a 1-rank resume bit for bit from a
# file written while training went on, and a background write that fails).
# SIGTERM while a write is in flight (GT_FAULT=ckpt_async_slow holds the
# writer thread 1 s, slow_step makes steps 300 ms, so the signal comes a step
# or two after the write began) completes that write, writes the signal's
# checkpoint and exits 3, and the run resumes from it with the losses of an
# uninterrupted run; at dp=2 x tp=2 with ZeRO 1 (the tensor-parallel
# exchange goes through the host copy) a resume from a file written while
# steps ran is bit for bit; async = off writes the same file bit for bit.
# A constant learning rate (no warm-up, min_lr = lr) lets a signalled run of
# [run] steps = 1000000 be compared with a 12-step one.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"
. "$GT_SRCDIR/tests/io/ckpt_async_lib.sh"

# ---- the uninterrupted reference: 1 rank, 12 steps, no checkpoints
run_train 1 ref1 run.steps=12 run.metrics="$GT_TMP/ref1.jsonl"
ok $? "reference: 1 rank, 12 steps"

# ---- SIGTERM while the step-4 write is in flight (held 1 s; steps slowed to
# 300 ms so that the signal comes a step or two later)
sg="$GT_TMP/ck-sig"
GT_FAULT=ckpt_async_slow:step=4,slow_step:rank=0 run_train 1 sig run.steps=1000000 \
  checkpoint.dir="$sg" checkpoint.every=4 &
job=$!
i=0
while [ $i -lt 1200 ] && [ ! -e "$(stepfile "$sg" 4).tmp" ]; do
  sleep 0.05
  i=$((i + 1))
done
inflight=no
[ -e "$(stepfile "$sg" 4).tmp" ] && inflight=yes
for p in $(pgrep -f "checkpoint.dir=$sg"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gridtrain ] && kill -TERM "$p"
done
wait $job
st=$?
k=$(sed -n 's/.*caught SIGTERM: checkpoint .* written at step \([0-9]*\) of.*/\1/p' "$GT_TMP/sig.err")
[ $inflight = yes ] && [ $st -eq 3 ] && [ -n "$k" ] && [ "$k" -gt 4 ] && [ "$k" -lt 10 ]
ok $? "SIGTERM while the step-4 write is in flight: exit 3 at step $k (status $st)"
[ $? -eq 0 ] || show "$GT_TMP/sig.err"
[ -n "$k" ] && "$GT_BIN" ckpt verify "$(stepfile "$sg" 4)" >/dev/null 2>&1 &&
  [ "$(cat "$sg/latest")" = "$(printf 'step_%08d.h5' "$k")" ] && [ -z "$(find "$sg" -name '*.tmp')" ]
ok $? "the step-4 write was completed, the signal's step-$k file is latest, no .tmp"
run_train 1 sig2 run.steps=12 checkpoint.dir="$sg" run.metrics="$GT_TMP/sig2.jsonl"
st=$?
[ $st -eq 0 ] && grep -q "resumed from $(stepfile "$sg" "${k:-0}") at step $k" "$GT_TMP/sig2.out" &&
  [ "$(losses "$GT_TMP/sig2.jsonl" "$k" 11)" = "$(losses "$GT_TMP/ref1.jsonl" "$k" 11)" ]
ok $? "the run resumes from step $k with the uninterrupted run's losses to step 12"

# ---- 4 ranks, dp=2 x tp=2, ZeRO 1: the exchange inside the tp group
r4="$GT_TMP/ck-ref4"
lay4="grid.dp=2 grid.tp=2 parallel.zero=1 run.steps=8 checkpoint.every=4"
# shellcheck disable=SC2086
GT_FAULT=ckpt_async_slow:step=4 run_train 4 ref4 $lay4 checkpoint.dir="$r4" \
  run.metrics="$GT_TMP/ref4.jsonl"
ok $? "4 ranks, dp=2 x tp=2, zero=1, async every 4 of 8 steps: exit 0"
rs4="$GT_TMP/ck-res4"
resume_dir "$r4" "$rs4" 4
# shellcheck disable=SC2086
run_train 4 res4 $lay4 checkpoint.dir="$rs4" run.metrics="$GT_TMP/res4.jsonl"
st=$?
[ $st -eq 0 ] && grep -q "resumed from $rs4/step_00000004.h5 at step 4" "$GT_TMP/res4.out" &&
  [ "$(losses "$GT_TMP/res4.jsonl" 4 7)" = "$(losses "$GT_TMP/ref4.jsonl" 4 7)" ] &&
  same_ckpt "$rs4/step_00000008.h5" "$r4/step_00000008.h5"
ok $? "resumed from its step-4 file: steps 4-7 have its losses and step 8 its state, bit for bit"

# ---- async = off: the synchronous writer, the same file
off="$GT_TMP/ck-off"
# shellcheck disable=SC2086
run_train 4 off $lay4 checkpoint.dir="$off" checkpoint.async=off
st=$?
[ $st -eq 0 ] && grep -q "checkpoint $off/step_00000004.h5 written in [0-9.]* s$" "$GT_TMP/off.out" &&
  same_ckpt "$off/step_00000008.h5" "$r4/step_00000008.h5"
ok $? "async = off: the step writes the file itself, the same one bit for bit"

done_testing
