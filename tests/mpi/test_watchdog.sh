#!/bin/sh
# test_watchdog.sh - the hang watchdog ([run] hang_timeout, watchdog.h):
# one rank is made to hang (GT_FAULT coll_sleep: it sleeps before an
# operation; coll_skip: it skips one; or SIGSTOP: it freezes) in each kind
# of group (tp, pp, dp, embed) and in a 3D layout. Each run must end with
# status 4 within hang_timeout + 10 s, with one diagnosis line that names
# that rank, the communicator and the operation; every rank that can answer
# dumps its flight records, and `gridtrain flight` merges them. A rank
# frozen in a checkpoint write (the others wait in H5Fcreate) is named with
# the file operation.
# docs/errors.md rows: E-HANG-01, E-HANG-02
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
timeout_s=3

# hang NAME NRANKS ARGS...: train until the watchdog ends the run (the
# fault comes from the environment); status in $hang_rc, seconds in $hang_s
hang() {
  h_name=$1
  h_n=$2
  shift 2
  h_t0=$(date +%s)
  run_mpi "$h_n" 90 "$GT_BIN" train "$deck" data.train="$data" run.steps=100000 \
    checkpoint.dir="$GT_TMP/$h_name" run.hang_timeout=$timeout_s "$@" \
    >"$GT_TMP/$h_name.out" 2>&1
  hang_rc=$?
  hang_s=$(($(date +%s) - h_t0))
}

# check NAME RANK PATTERN: the checks of one hung run whose culprit is RANK
# and whose diagnosis matches PATTERN (an extended regular expression)
check() {
  c_out="$GT_TMP/$1.out"
  [ "$hang_rc" -eq 4 ]
  ok $? "$1: exit status 4 (got $hang_rc)"
  # start-up takes a few seconds here: the hang itself starts after it
  [ "$hang_s" -le $((timeout_s + 10 + 8)) ]
  ok $? "$1: ended ${hang_s} s after start (hang_timeout $timeout_s s)"
  c_line=$(grep '^gridtrain: hang: ' "$c_out")
  [ "$(printf '%s\n' "$c_line" | grep -c .)" -eq 1 ] &&
    printf '%s\n' "$c_line" | grep -Eq "^gridtrain: hang: rank $2 \(host [^,]*, dp [0-9]+ pp [0-9]+ tp [0-9]+\) $3"
  c_ok=$?
  ok $c_ok "$1: one line names rank $2 and $3"
  [ $c_ok -eq 0 ] || sed 's/^/#   /' "$c_out" | grep -v '^#   *[a-z]*\.[a-z_]* ' | tail -20
  [ -s "$GT_TMP/$1/flight-rank0.txt" ] || [ -s "$GT_TMP/$1/flight-rank1.txt" ]
  ok $? "$1: flight records dumped in the run directory"
  grep -q "^gridtrain: hang: " "$GT_TMP/$1/flight-diagnosis.txt" 2>/dev/null
  ok $? "$1: the diagnosis is kept in flight-diagnosis.txt"
}

# ---- each kind of group ---------------------------------------------------------------

GT_FAULT=coll_sleep:rank=1:step=2:comm=tp hang tp-sleep 2 grid.tp=2
check tp-sleep 1 "never entered tp allreduce #[0-9]+ \(step 2"

GT_FAULT=coll_skip:rank=1:step=3:comm=tp hang tp-skip 2 grid.tp=2
check tp-skip 1 "(never entered|finished) tp allreduce #[0-9]+"

GT_FAULT=coll_skip:rank=0:step=2:comm=pp:op=send hang pp-skip 2 grid.pp=2 data.microbatches=2
check pp-skip 0 "never entered pp send #[0-9]+ to rank 1"

GT_FAULT=coll_sleep:rank=2:step=2:comm=dp hang dp-sleep 4 grid.dp=4
check dp-sleep 2 "never entered dp allreduce #[0-9]+ \(step 2"

GT_FAULT=coll_sleep:rank=1:step=2:comm=embed hang embed-sleep 4 grid.pp=2 grid.dp=2
check embed-sleep 1 "never entered embed allreduce #[0-9]+ \(step 2"

# busy waits: the main thread blocks inside MPI_Wait, the watchdog still runs
GT_FAULT=coll_sleep:rank=0:step=2:comm=pp:op=send hang pp-busy 2 grid.pp=2 parallel.wait=busy
check pp-busy 0 "never entered pp send #[0-9]+ to rank 1"

# a 3D layout: the stage's pipeline send of rank 5 (dp 0 pp 1 tp 1)
GT_FAULT=coll_sleep:rank=5:step=2:comm=pp:op=send hang 3d-sleep 8 grid.dp=2 grid.pp=2 grid.tp=2 \
  data.microbatches=2 parallel.wait=yield
check 3d-sleep 5 "never entered pp send #[0-9]+ to rank 1"

# ---- a frozen rank: its watchdog cannot answer either ------------------------------------

# freeze NAME NRANKS VICTIM ARGS...: SIGSTOP world rank VICTIM once training runs
freeze() {
  f_name=$1
  f_n=$2
  f_v=$3
  shift 3
  f_t0=$(date +%s)
  run_mpi "$f_n" 90 "$GT_BIN" train "$deck" data.train="$data" run.steps=100000 \
    checkpoint.dir="$GT_TMP/$f_name" run.hang_timeout=$timeout_s run.log_every=1 "$@" \
    >"$GT_TMP/$f_name.out" 2>&1 &
  f_job=$!
  f_i=0 # wait for the first steps (ranks.txt names the pids)
  while [ $f_i -lt 600 ] && ! grep -q '^step 3/' "$GT_TMP/$f_name.out" 2>/dev/null; do
    sleep 0.1
    f_i=$((f_i + 1))
  done
  f_pid=$(awk -v v="$f_v" '$1 == v { print $3 }' "$GT_TMP/$f_name/ranks.txt")
  [ -n "$f_pid" ] && kill -STOP "$f_pid"
  wait $f_job
  hang_rc=$?
  hang_s=$(($(date +%s) - f_t0))
  [ -n "$f_pid" ] && kill -CONT "$f_pid" 2>/dev/null
}

freeze frozen-dp 4 2 grid.dp=4
# the others wait in the step's dp all-reduce or in the world reduce of the
# step times (the straggler watch, every logged step), whichever the stop
# came before
check frozen-dp 2 "did not answer \(dead or frozen\) in (dp|world) (allreduce|reduce) #[0-9]+"
# rank 0, the diagnoser, frozen: rank 1 takes over
freeze frozen-r0 4 0 grid.dp=2 grid.tp=2
check frozen-r0 0 "did not answer \(dead or frozen\) in (tp|dp|world) [a-z_]+ #[0-9]+"

# ---- a rank frozen in a checkpoint write ---------------------------------------------------

# The others wait in MPI_File_open inside H5Fcreate, outside gridtrain's
# collectives: the file operations are flight records too (channel "file").
# Rank 1 stops before the create (GT_FAULT=coll_sleep comm=file op=create),
# then is frozen (SIGSTOP): its watchdog cannot answer either.
f_t0=$(date +%s)
GT_FAULT=coll_sleep:rank=1:comm=file:op=create run_mpi 2 90 "$GT_BIN" train "$deck" \
  data.train="$data" run.steps=100000 checkpoint.dir="$GT_TMP/ckpt-frozen" checkpoint.every=2 \
  run.hang_timeout=$timeout_s parallel.wait=yield >"$GT_TMP/ckpt-frozen.out" 2>&1 &
f_job=$!
f_i=0
while [ $f_i -lt 600 ] && ! grep -q 'sleeps before file create' "$GT_TMP/ckpt-frozen.out"; do
  sleep 0.1
  f_i=$((f_i + 1))
done
f_pid=$(awk '$1 == 1 { print $3 }' "$GT_TMP/ckpt-frozen/ranks.txt")
[ -n "$f_pid" ] && kill -STOP "$f_pid"
wait $f_job
hang_rc=$?
hang_s=$(($(date +%s) - f_t0))
[ -n "$f_pid" ] && kill -CONT "$f_pid" 2>/dev/null
check ckpt-frozen 1 "did not answer \(dead or frozen\) in file create step_00000002\.h5\.tmp #[0-9]+"

# ---- gridtrain flight ---------------------------------------------------------------------

"$GT_BIN" flight "$GT_TMP"/dp-sleep/flight-rank*.txt >"$GT_TMP/merged.txt" 2>&1
m_rc=$?
n_in=$(cat "$GT_TMP"/dp-sleep/flight-rank*.txt | grep -c '^[0-9]')
n_out=$(sed -n '/never ended/q;p' "$GT_TMP/merged.txt" | grep -c '^ *[0-9]')
[ $m_rc -eq 0 ] && [ "$n_in" -gt 0 ] && [ "$n_in" -eq "$n_out" ]
ok $? "flight: merges the $n_in records of 3 ranks into one timeline (status $m_rc, $n_out)"
# the three waiting ranks' dp all-reduce is open, rank 2 has none of it
open=$(sed -n '/never ended/,$p' "$GT_TMP/merged.txt" | awk '$3 == "dp" && $4 == "allreduce"' |
  awk '{print $2}' | sort -u | tr '\n' ' ')
[ "$open" = "0 1 3 " ]
ok $? "flight: the open dp all-reduce is on ranks 0 1 3 (got '$open')"
sed -n '/^# *t /,/never ended/p' "$GT_TMP/merged.txt" | grep '^ *[0-9]' | awk '{print $1}' \
  >"$GT_TMP/times.txt"
sort -n -c "$GT_TMP/times.txt"
ok $? "flight: the timeline is in time order"
"$GT_BIN" flight "$GT_SRCDIR/tests/decks/tiny.in" >"$GT_TMP/bad.txt" 2>&1
b_rc=$?
[ $b_rc -eq 2 ] && grep -q "not a flight record dump" "$GT_TMP/bad.txt"
ok $? "flight: a file that is not a dump is bad input (status $b_rc)"

# ---- off, and no false alarm --------------------------------------------------------------

run_mpi 2 90 "$GT_BIN" train "$deck" data.train="$data" run.steps=6 grid.dp=2 \
  run.hang_timeout=0 >"$GT_TMP/off.out" 2>&1
o_rc=$?
[ $o_rc -eq 0 ] && ! grep -q '^gridtrain: .*hang' "$GT_TMP/off.out"
ok $? "hang_timeout = 0: no watchdog, the run finishes (status $o_rc)"
# a straggler slower than nothing but far below the timeout is no hang
GT_FAULT=slow_step:rank=1 run_mpi 2 90 "$GT_BIN" train "$deck" data.train="$data" \
  run.steps=12 grid.dp=2 run.hang_timeout=2 >"$GT_TMP/slow.out" 2>&1
s_rc=$?
[ $s_rc -eq 0 ] && ! grep -q '^gridtrain: .*hang' "$GT_TMP/slow.out"
ok $? "a 300 ms straggler under hang_timeout = 2 is no hang (status $s_rc)"

done_testing
