#!/bin/sh
# test_nonfinite.sh - bad hardware numbers: a NaN in one rank's gradients
# (GT_FAULT=nan_grad) stops fp32 training with one error that names the
# step, the rank and its place, and the parameter; with several dp replicas
# (the sum spreads it) the parameter and the ranks that hold it; under the
# fp16 loss scaler the step is skipped and training goes on; the same with
# pipedream-2bw, whose first stage meets the NaN inside the next step's
# passes (its update deferred there).
# docs/errors.md rows: E-NUM-01
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"

# nan NAME ARGS...: 2 ranks, a NaN in rank ${nan_rank:-1}'s gradients at step 3
nan() {
  n_name=$1
  shift
  GT_FAULT=nan_grad:rank=${nan_rank:-1}:step=3 run_mpi 2 90 "$GT_BIN" train "$deck" data.train="$data" \
    run.steps=6 run.metrics="$GT_TMP/$n_name.jsonl" "$@" >"$GT_TMP/$n_name.out" 2>&1
  nan_rc=$?
}
one_error() { [ "$(grep -c '^gridtrain: .*error' "$GT_TMP/$1.out")" -eq 1 ]; }

nan pp grid.pp=2
one_error pp && [ $nan_rc -eq 1 ] && grep -Eq '^gridtrain: error: non-finite numbers at step 3 in the gradient of h\.1\.[a-z_.]+ on rank 1 \(dp 0 pp 1 tp 0\)' "$GT_TMP/pp.out"
ok $? "pp=2: status 1, one error naming step 3, rank 1 (pp 1) and its parameter (status $nan_rc)"

nan tp grid.tp=2
one_error tp && [ $nan_rc -eq 1 ] && grep -Eq '^gridtrain: error: non-finite numbers at step 3 in the gradient of h\.[0-9]\.[a-z_.]+ on rank 1 \(dp 0 pp 0 tp 1\)' "$GT_TMP/tp.out"
ok $? "tp=2: status 1, one error naming step 3, rank 1 (tp 1) and its parameter (status $nan_rc)"

nan dp grid.dp=2
one_error dp && [ $nan_rc -eq 1 ] && grep -Eq '^gridtrain: error: non-finite numbers at step 3 in the gradient of h\.[0-9]\.[a-z_.]+ on rank 0 .* and 1 other rank\(s\) \(the data-parallel sum' "$GT_TMP/dp.out"
ok $? "dp=2: status 1, the parameter and both replicas named (status $nan_rc)"

nan fp16 grid.pp=2 backend.precision=fp16
[ $nan_rc -eq 0 ] && grep -q '"step":3,.*"skipped":true' "$GT_TMP/fp16.jsonl" &&
  grep -q '"step":5,' "$GT_TMP/fp16.jsonl"
ok $? "fp16: the loss scaler skips step 3 and training finishes (status $nan_rc)"

nan_rank=0 nan 2bw grid.pp=2 parallel.schedule=pipedream-2bw data.microbatches=2
one_error 2bw && [ $nan_rc -eq 1 ] && grep -Eq '^gridtrain: error: non-finite numbers at step 3 in the gradient of [a-z_.0-9]+ on rank 0 \(dp 0 pp 0 tp 0\)' "$GT_TMP/2bw.out"
ok $? "pipedream-2bw, NaN on the first stage: status 1, one error naming step 3, rank 0 and its parameter (status $nan_rc)"

nan_rank=0 nan 2bw16 grid.pp=2 parallel.schedule=pipedream-2bw data.microbatches=2 \
  backend.precision=fp16
[ $nan_rc -eq 0 ] && grep -q '"step":3,.*"skipped":true' "$GT_TMP/2bw16.jsonl" &&
  grep -q '"step":5,' "$GT_TMP/2bw16.jsonl"
ok $? "pipedream-2bw fp16: the loss scaler skips step 3 and training finishes (status $nan_rc)"

done_testing
