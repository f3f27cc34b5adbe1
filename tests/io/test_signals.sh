#!/bin/sh
# test_signals.sh - signals in the worst places: SIGUSR1 / SIGTERM in the
# first milliseconds of a rank (start-up, MPI_Init, set-up, the first
# step), during checkpoint writes, twice in a row; SIGINT (Ctrl-C) once and
# twice. The result is always a complete checkpoint and exit status 3
# (SIGUSR1, SIGTERM) or 130 (SIGINT), and never a lost signal; a second
# SIGINT stops at once and loses no earlier checkpoint.
# docs/errors.md rows: E-SIG-01, E-SIG-02
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"

# start NAME ARGS...: train on 2 ranks in the background ($job); its ranks'
# pids in $ranks once they exist (descendants of the launcher named gridtrain)
start() {
  s_name=$1
  shift
  rm -rf "$GT_TMP/ck-$s_name"
  timeout -k 5 120 "$MPIEXEC" -n 2 "$GT_BIN" train "$deck" data.train="$data" \
    checkpoint.dir="$GT_TMP/ck-$s_name" run.steps=100000 run.log_every=1 "$@" \
    >"$GT_TMP/$s_name.out" 2>&1 &
  job=$!
  ranks=""
  s_i=0
  while [ $s_i -lt 3000 ]; do
    ranks=$(descendants $job)
    [ "$(echo $ranks | wc -w)" -eq 2 ] && break
    s_i=$((s_i + 1))
  done
}

# wait_line PATTERN FILE: until FILE holds a line matching PATTERN; at most
# 120 s, and not past the end of the job ($job): a job that died early
# fails its check instead of hanging the test
wait_line() {
  w_i=0
  while ! grep -q "$1" "$2" 2>/dev/null; do
    { kill -0 "$job" 2>/dev/null && [ $w_i -lt 6000 ]; } || return 1
    sleep 0.02
    w_i=$((w_i + 1))
  done
}

# descendants PID: the pids below PID whose command is gridtrain
descendants() {
  for d_p in $(pgrep -P "$1"); do
    [ "$(cat /proc/$d_p/comm 2>/dev/null)" = gridtrain ] && echo "$d_p"
    descendants "$d_p"
  done
}

# handled PID: its handler for SIGUSR1 is in place (SigCgt bit 10)
handled() {
  h_mask=$(sed -n 's/^SigCgt:\t*//p' "/proc/$1/status" 2>/dev/null)
  [ -n "$h_mask" ] && [ $((0x$h_mask & 0x200)) -ne 0 ]
}

# finish NAME: wait for the job; status in $rc
finish() {
  wait $job
  rc=$?
}

# complete NAME: latest names a checkpoint that ckpt verify accepts
complete() {
  c_dir="$GT_TMP/ck-$1"
  [ -e "$c_dir/latest" ] &&
    "$GT_BIN" ckpt verify "$c_dir/$(cat "$c_dir/latest")" >"$GT_TMP/$1.verify" 2>&1
}

# ---- early: from the moment a rank's handler exists -------------------------------------

i=1
while [ $i -le 12 ]; do
  sig=USR1
  [ $((i % 3)) -eq 0 ] && sig=TERM
  start early$i
  r=$(echo $ranks | cut -d' ' -f$((i % 2 + 1)))
  w=0
  while [ $w -lt 20000 ] && [ -n "$r" ] && ! handled "$r"; do w=$((w + 1)); done
  # 0-90 ms later: start-up, MPI_Init, the set-up, the first steps
  sleep "$(awk -v s="$i" 'BEGIN { srand(s * 104729); printf "%.3f", rand() * 0.09 }')"
  kill -$sig "$r" 2>/dev/null
  finish early$i
  grep -q "^gridtrain: requeue: caught SIG$sig: checkpoint .* written at step" \
    "$GT_TMP/early$i.out" && [ $rc -eq 3 ] && complete early$i
  ok $? "early SIG$sig $i: exit 3 with a complete checkpoint (status $rc)"
  [ $rc -eq 3 ] || tail -n 5 "$GT_TMP/early$i.out" | sed 's/^/#   /'
  i=$((i + 1))
done

# ---- during checkpoint writes (one every step), and twice in a row ------------------------

i=1
while [ $i -le 4 ]; do
  start write$i checkpoint.every=1 checkpoint.keep=2
  wait_line '^step 4/' "$GT_TMP/write$i.out"
  sleep "0.0$((i * 2))"
  r=$(echo $ranks | cut -d' ' -f$((i % 2 + 1)))
  kill -USR1 "$r"
  [ $i -ge 3 ] && kill -TERM "$r" # twice in a row
  finish write$i
  [ $rc -eq 3 ] && complete write$i && [ -z "$(find "$GT_TMP/ck-write$i" -name '*.tmp')" ]
  ok $? "write $i: SIGUSR1$([ $i -ge 3 ] && echo ' + SIGTERM') during checkpoint writes: exit 3, complete, no .tmp (status $rc)"
  i=$((i + 1))
done

# ---- SIGINT ---------------------------------------------------------------------------------

# gridtrain's own status, without a launcher between: one rank, started
# directly (MPICH's singleton start)
rm -rf "$GT_TMP/ck-int1"
timeout -k 5 120 "$GT_BIN" train "$deck" data.train="$data" checkpoint.dir="$GT_TMP/ck-int1" \
  run.steps=100000 run.log_every=1 >"$GT_TMP/int1.out" 2>&1 &
job=$!
wait_line '^step 3/' "$GT_TMP/int1.out"
kill -INT $(descendants $job)
finish int1
grep -q "^gridtrain: interrupted: caught SIGINT: checkpoint .* written at step" "$GT_TMP/int1.out" &&
  [ $rc -eq 130 ] && complete int1
ok $? "SIGINT to a rank: a checkpoint, exit 130 (status $rc)"

# Ctrl-C reaches the launcher, which passes it on. Hydra (MPICH 4.0.2) itself
# exits 0 instead of its ranks' 130 now and then when they take a while to
# exit after its SIGINT (measured with a Python rank that sleeps 0.2 s in its
# handler and exits 130: 2 of 5 runs gave 0); the ranks' status is the test
# above, their message and checkpoint this one.
start int
wait_line '^step 3/' "$GT_TMP/int.out"
kill -INT $(pgrep -P $job)
finish int
grep -q "^gridtrain: interrupted: caught SIGINT: checkpoint .* written at step .*exiting with status 130" \
  "$GT_TMP/int.out" && { [ $rc -eq 130 ] || [ $rc -eq 0 ]; } && complete int
ok $? "SIGINT to mpiexec: a checkpoint, and the ranks exit 130 (mpiexec's own status $rc)"
run_mpi 2 60 "$GT_BIN" train "$deck" data.train="$data" checkpoint.dir="$GT_TMP/ck-int" \
  run.steps=8 >"$GT_TMP/int.rerun" 2>&1
grep -q "^gridtrain: resumed from" "$GT_TMP/int.rerun"
ok $? "SIGINT: the next run resumes from its checkpoint"

# Twice on one rank started directly: its own status, 130. Then on the two
# ranks of a job: the job stops at once and latest stays complete, but
# mpiexec's own status is not checked: Hydra (MPICH 4.0.2) reported 1
# instead of the ranks' 130 in 2 of about 30 runs of this file here, while
# 70 runs of this case alone all gave 130. Nor is every rank's message: the
# first rank to stop makes Hydra kill the others, and on a loaded machine
# (two busy loops on both cores) the second rank was killed before its
# handler ran in 1 of 3 runs of the quick tier; one message, a non-zero
# status and a complete latest are what the user sees either way.
rm -rf "$GT_TMP/ck-int3"
timeout -k 5 120 "$GT_BIN" train "$deck" data.train="$data" checkpoint.dir="$GT_TMP/ck-int3" \
  checkpoint.every=2 run.steps=100000 run.log_every=1 >"$GT_TMP/int3.out" 2>&1 &
job=$!
wait_line '^step 5/' "$GT_TMP/int3.out"
before=$(cat "$GT_TMP/ck-int3/latest")
r=$(descendants $job)
kill -INT $r
sleep 0.01
kill -INT $r
finish int3
[ $rc -eq 130 ] && grep -q "second SIGINT: stopping at once" "$GT_TMP/int3.out" && complete int3
ok $? "SIGINT twice to a rank: stops at once, exit 130, latest still complete (status $rc; was $before)"

start int2 checkpoint.every=2
wait_line '^step 5/' "$GT_TMP/int2.out"
before=$(cat "$GT_TMP/ck-int2/latest")
kill -INT $ranks
sleep 0.01
kill -INT $ranks
finish int2
# (not 124 or 137: the 120 s limit of start, a job that went on)
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] &&
  [ "$(grep -c "second SIGINT: stopping at once" "$GT_TMP/int2.out")" -ge 1 ] && complete int2
ok $? "SIGINT twice to both ranks of a job: the job stops at once, latest still complete (mpiexec's status $rc; was $before)"

done_testing
