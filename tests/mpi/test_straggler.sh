#!/bin/sh
# test_straggler.sh - the log names a straggler: a rank whose own time a
# step (the step less its waits for other ranks) stays above the median of
# the other ranks of its pipeline stage by more than [run]
# straggler_margin of the step time for [run] straggler_reports reports in
# a row.
# GT_FAULT=slow_step makes one rank sleep 300 ms a step (the others wait
# for it in their collectives). 4 ranks, pp=2 x dp=2: each stage has two
# ranks, and the stages' different work (the last one runs the LM head) must
# not count. Three short runs, 5-8 s in all.
# The run without a slow rank uses steps of ~100 ms where the last stage
# works about twice as long as the first (a 2048-token vocabulary), so a
# comparison across stages would name its ranks; on the tiny deck's 7 ms
# steps the oversubscribed ranks' scheduling alone moved a rank's own time
# by 20-40% of the step in single reports (a clean-clone CI named one).
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"

# run NAME STEPS EVERY [ENV=VALUE] -- ARGS...: 4 ranks, pp=2 x dp=2, a
# report every EVERY steps
run() {
  r_name=$1 r_steps=$2 r_every=$3
  shift 3
  r_env=""
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    r_env="$r_env $1"
    shift
  done
  [ $# -gt 0 ] && shift
  # shellcheck disable=SC2086 # $r_env: one assignment a word
  run_mpi 4 60 env $r_env "$GT_BIN" train "$deck" data.train="$data" run.steps="$r_steps" \
    run.log_every="$r_every" grid.pp=2 grid.dp=2 parallel.wait=yield "$@" >"$GT_TMP/$r_name.out" 2>&1
  r_rc=$?
}
stragglers() { grep -c '^gridtrain: straggler: ' "$GT_TMP/$1.out"; }

run slow 4 1 GT_FAULT=slow_step:rank=2 -- run.straggler_reports=3
[ $r_rc -eq 0 ] && [ "$(stragglers slow)" -eq 1 ] &&
  grep -Eq '^gridtrain: straggler: rank 2 \(dp 0 pp 1 tp 0\) works [0-9.]+ ms a step .*, [0-9.]+ ms more than the median of the other ranks of pipeline stage 1, [0-9]+% of the [0-9.]+ ms step, in each of the last 3 reports \(steps 0-2;' "$GT_TMP/slow.out"
ok $? "a rank slowed by 300 ms a step is named once, with its place, after 3 reports (steps 0-2)"
[ $r_rc -eq 0 ] || tail -n 5 "$GT_TMP/slow.out" | sed 's/^/# /'

run off 3 1 GT_FAULT=slow_step:rank=2 -- run.straggler_reports=1 run.straggler_margin=0
[ $r_rc -eq 0 ] && [ "$(stragglers off)" -eq 0 ]
ok $? "straggler_margin = 0 turns the watch off"

run none 14 2 -- model.dim=128 model.seq_len=128 model.vocab=2048
[ $r_rc -eq 0 ] && [ "$(stragglers none)" -eq 0 ]
ok $? "without a slow rank nobody is named (the stages' different work does not count)"
grep '^gridtrain: straggler' "$GT_TMP/none.out" | sed 's/^/# /'

done_testing
