#!/bin/sh
# test_errors_doc.sh - docs/errors.md says what gridtrain does with every
# bad input and fault the tests try; this checks that it still does. A row
# with a command is run (one rank) and must end with the row's status and
# one error line that starts with the row's message; a row without one must
# be mentioned by its ID in the test it names. E-CKPT-05 (two jobs in one
# checkpoint directory) is checked here.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

doc="$GT_SRCDIR/docs/errors.md"
[ -r "$doc" ] || bail "no $doc"
data="$GT_TMP/data.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
{ cat "$deck"; printf '[checkpoint] dir = x\n'; } >"$GT_TMP/header.in"
head -c 50000 "$data" >"$GT_TMP/trunc.h5"
cp "$deck" "$GT_TMP/text.txt"
"$PYTHON_REF" -c '
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("tokens", data=np.full(5000, 2**40, dtype=np.int64)).attrs["vocab_size"] = 256
with h5py.File(sys.argv[2], "w") as f:
    f["tokens"] = h5py.SoftLink("/nowhere")
' "$GT_TMP/wide.h5" "$GT_TMP/dangling.h5" || bail "cannot make wide.h5 with $PYTHON_REF (h5py)"
"$GT_BIN" train "$deck" data.train="$data" run.steps=2 checkpoint.dir="$GT_TMP/ck" \
  >"$GT_TMP/ck.out" 2>&1 || bail "cannot make a checkpoint"
ckpt="$GT_TMP/ck/step_00000002.h5"
sum_before=$(md5sum "$ckpt" "$data" "$GT_TMP/text.txt" | awk '{print $1}')

# subst TEXT: the placeholders of errors.md replaced
subst() {
  printf '%s\n' "$1" | sed -e "s|\$DECK|$deck|g" -e "s|\$DATA|$data|g" -e "s|\$TMP|$GT_TMP|g" \
    -e "s|\$CKPT|$ckpt|g"
}

rows=0
grep '^| E-' "$doc" >"$GT_TMP/rows.txt"
while IFS='|' read -r _ id kind what cmd status msg kept _; do
  id=$(echo $id)
  status=$(echo $status)
  rows=$((rows + 1))
  cmd=$(printf '%s' "$cmd" | sed 's/^ *`*//; s/`* *$//')
  kind=$(echo $kind)
  what=$(printf '%s' "$what" | sed 's/^ *//; s/ *$//')
  msg=$(subst "$(printf '%s' "$msg" | sed 's/^ *`//; s/` *$//')")
  if [ "$cmd" = "-" ] || [ -z "$cmd" ]; then
    # the test named at the bottom of errors.md for this ID mentions it
    t=$(grep -o "$id[^.]*tests/[a-z]*/test_[a-z_]*\.sh" "$doc" | sed 's/.*\(tests\/.*\)/\1/' |
      head -n 1)
    [ -n "$t" ] && [ -r "$GT_SRCDIR/$t" ] && grep -q "$id" "$GT_SRCDIR/$t"
    ok $? "$id: covered by ${t:-(no test named)}, which mentions it"
    continue
  fi
  # shellcheck disable=SC2046
  (cd "$GT_TMP" && run_mpi 1 60 "$GT_BIN" $(subst "$cmd")) >"$GT_TMP/$id.out" 2>&1 </dev/null
  rc=$?
  lines=$(grep -cE '^gridtrain: (rank [0-9]+: )?error:' "$GT_TMP/$id.out")
  grep -E '^gridtrain: (rank [0-9]+: )?error:' "$GT_TMP/$id.out" | grep -qF -- "$msg"
  m=$?
  [ $rc -eq "$status" ] && [ "$lines" -eq 1 ] && [ $m -eq 0 ]
  ok $? "$id ($kind: $what): status $rc (documented $status), message as documented"
  [ $rc -eq "$status" ] && [ $m -eq 0 ] || { diag "wanted: $msg"; head -n 3 "$GT_TMP/$id.out" |
    sed 's/^/#   /'; }
done <"$GT_TMP/rows.txt"
[ $rows -ge 30 ]
ok $? "errors.md has $rows rows"
[ "$(md5sum "$ckpt" "$data" "$GT_TMP/text.txt" | awk '{print $1}')" = "$sum_before" ]
ok $? "the checkpoint, the dataset and the text named as outputs are unchanged"

# ---- E-CKPT-05: two jobs, one checkpoint directory -----------------------------------------
dir="$GT_TMP/shared"
run_mpi 2 120 "$GT_BIN" train "$deck" data.train="$data" run.steps=100000 run.log_every=1 \
  checkpoint.dir="$dir" >"$GT_TMP/first.out" 2>&1 &
first=$!
i=0
while [ $i -lt 600 ] && ! grep -q '^step 2/' "$GT_TMP/first.out" 2>/dev/null; do
  sleep 0.05
  i=$((i + 1))
done
run_mpi 2 60 "$GT_BIN" train "$deck" data.train="$data" run.steps=4 checkpoint.dir="$dir" \
  >"$GT_TMP/second.out" 2>&1
rc=$?
kill -TERM $(awk '!/^#/ { print $3 }' "$dir/ranks.txt") 2>/dev/null # the ranks: requeue
wait $first
first_rc=$?
[ $rc -eq 2 ] && [ "$(grep -c '^gridtrain: error:' "$GT_TMP/second.out")" -eq 1 ] &&
  grep -q "^gridtrain: error: checkpoint directory $dir is in use by another job (host=[^ ]* pid=[0-9]* slurm_job=" "$GT_TMP/second.out"
ok $? "E-CKPT-05: a second job in the directory: status 2, the holder named (status $rc)"
[ $first_rc -eq 3 ] && "$GT_BIN" ckpt verify "$dir/$(cat "$dir/latest")" >/dev/null 2>&1
ok $? "E-CKPT-05: the first job goes on and ends with its checkpoint (status $first_rc)"
run_mpi 2 60 "$GT_BIN" train "$deck" data.train="$data" run.steps=4 checkpoint.dir="$dir" \
  >"$GT_TMP/third.out" 2>&1
ok $? "E-CKPT-05: once it has ended, the directory is free again"

done_testing
