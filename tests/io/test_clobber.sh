#!/bin/sh
# test_clobber.sh - outputs that are inputs are refused before anything is
# written (compared by device and inode), and a checkpoint directory held
# by another job is refused naming the holder.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/d.h5"
make_dataset "$data" 0.1 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
size_before=$(wc -c <"$data")
ln -s d.h5 "$GT_TMP/link.h5"

# refused NAME NEEDLE CMD...: status 2 and NEEDLE on stderr
refused() {
  r_name=$1 r_needle=$2
  shift 2
  run_mpi 1 120 "$@" >"$GT_TMP/out" 2>"$GT_TMP/err"
  r_status=$?
  grep -qF -- "$r_needle" "$GT_TMP/err"
  r_found=$?
  ok $(( r_status != 2 || r_found != 0 )) "$r_name (status $r_status)"
  [ $r_found -eq 0 ] || sed 's/^/# stderr: /' "$GT_TMP/err" | head -n 4
}

refused "metrics through a symlink to the dataset" "is the same file as [data] train" \
  "$GT_BIN" train "$deck" data.train="$data" run.metrics="$GT_TMP/./link.h5" run.steps=1
ok $(( $(wc -c <"$data") != size_before )) "the dataset keeps its $size_before bytes"

printf 'hello world\n' >"$GT_TMP/B.txt"
refused "ingest -o one of its inputs" "is the same file as the input" \
  "$GT_BIN" ingest text "$GT_SRCDIR/tests/data/genesis.txt" "$GT_TMP/B.txt" -o "$GT_TMP/./B.txt"
[ "$(cat "$GT_TMP/B.txt")" = "hello world" ]
ok $? "the text input is unchanged"

cp "$GT_SRCDIR/tests/data/ckpt_format2_tiny.h5" "$GT_TMP/c.h5"
ck_before=$(cksum <"$GT_TMP/c.h5")
refused "ckpt convert X X" "is the same file as the checkpoint" \
  "$GT_BIN" ckpt convert "$GT_TMP/c.h5" "$GT_TMP/../$gt_test_name/c.h5"
[ "$(cksum <"$GT_TMP/c.h5")" = "$ck_before" ]
ok $? "the checkpoint is unchanged"

# a lock held by another process (flock(1) stands in for a live job)
mkdir -p "$GT_TMP/ck"
printf 'host=otherhost pid=4242 slurm_job=77 started=x\n' >"$GT_TMP/ck/.lock"
if command -v flock >/dev/null 2>&1; then
  # the holder is the sleep itself (exec), so killing it frees the lock
  ( exec 9<>"$GT_TMP/ck/.lock" && flock -n 9 && exec sleep 60 ) &
  holder=$!
  sleep 1
  refused "checkpoint directory held by another job" "in use by another job (host=otherhost pid=4242" \
    "$GT_BIN" train "$deck" data.train="$data" checkpoint.dir="$GT_TMP/ck" run.steps=1
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
else
  skip 1 "no flock(1) here"
fi
# once the holder is gone (as after kill -9), the lock is free again
run_mpi 1 120 "$GT_BIN" train "$deck" data.train="$data" checkpoint.dir="$GT_TMP/ck" \
  run.steps=1 >"$GT_TMP/out" 2>&1
st=$?
grep -q "pid=" "$GT_TMP/ck/.lock" && ! grep -q "pid=4242" "$GT_TMP/ck/.lock"
ok $(( st != 0 || $? != 0 )) "a free lock is taken and signed by the new run (status $st)"

done_testing
