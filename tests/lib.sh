# tests/lib.sh - shared helpers for the shell tests (TAP output).
#
# Source it with:  . "$GT_SRCDIR/tests/lib.sh"
# Environment (set by make check): GT_BIN, GT_SRCDIR, GT_BUILDDIR, MPIEXEC,
# PYTHON_REF. Each test gets a fresh scratch directory in $GT_TMP.

: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
: "${GT_BIN:?run through make check (GT_BIN unset)}"
: "${MPIEXEC:=mpiexec}"
: "${PYTHON_REF:=/usr/bin/python3}"

gt_tap_n=0
gt_tap_failed=0
gt_tap_failed_list=""

# ok COND-STATUS DESCRIPTION: record a result ("ok 0 'x'" passes).
ok() {
  gt_tap_n=$((gt_tap_n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $gt_tap_n - $2"
  else
    echo "not ok $gt_tap_n - $2"
    gt_tap_failed=$((gt_tap_failed + 1))
    gt_tap_failed_list="$gt_tap_failed_list
#   not ok $gt_tap_n - $2"
  fi
}

# skip N REASON: record N points that cannot run here (TAP "# SKIP").
skip() {
  gt_skip_i=0
  while [ "$gt_skip_i" -lt "$1" ]; do
    gt_tap_n=$((gt_tap_n + 1))
    echo "ok $gt_tap_n # SKIP $2"
    gt_skip_i=$((gt_skip_i + 1))
  done
}

# diag TEXT...: a TAP comment (each line prefixed with '# ').
diag() { printf '%s\n' "$*" | sed 's/^/# /'; }

# done_testing: print the plan and exit with the suite status.
done_testing() {
  # the failed points again, at the end where a log's tail shows them
  [ "$gt_tap_failed" -eq 0 ] || printf '# failed %d of %d checks:%s\n' "$gt_tap_failed" \
    "$gt_tap_n" "$gt_tap_failed_list"
  echo "1..$gt_tap_n"
  [ "$gt_tap_failed" -eq 0 ]
  exit $?
}

# bail REASON: stop the test file.
bail() { echo "Bail out! $*"; exit 1; }

# quick_tier: true when the quick tier (make check) runs this script through
# a wrapper of tests/quick/, which sets GT_TEST_TIER=quick: the script then
# leaves its long parts to the full tier (make check-full), saying so.
quick_tier() { [ "${GT_TEST_TIER:-}" = quick ]; }

# A scratch directory per test script, under the build tree (a wrapper of
# tests/quick/ names its own with GT_TEST_NAME).
gt_test_name=${GT_TEST_NAME:-$(basename "$0" .sh)}
GT_TMP="${GT_BUILDDIR:-.}/tests/tmp/$gt_test_name"
rm -rf "$GT_TMP"
mkdir -p "$GT_TMP" || bail "cannot create $GT_TMP"

# run_mpi NRANKS LIMIT_S CMD...: run under mpiexec with a time limit; the exit
# status is the program's (124 when it had to be killed: a hang).
run_mpi() {
  n=$1
  limit=$2
  shift 2
  timeout -k 5 "$limit" "$MPIEXEC" -n "$n" "$@"
}

# no_gpu_named ARGS...: `gridtrain ARGS... backend.device=cuda` on one rank
# where this gridtrain sees no GPU (else a skip): exit 2, one error line
# that names the command line as where the key was set (a check after
# parsing), nothing on stdout (the CUDA library line is information, on
# stderr). One test point.
no_gpu_named() {
  case $("$GT_BIN" --version | sed -n 's/^  CUDA  : //p') in
  *" 0 devices"*) ;;
  *) skip 1 "device = cuda may work on this machine"; return 0 ;;
  esac
  run_mpi 1 60 "$GT_BIN" "$@" backend.device=cuda >"$GT_TMP/no-gpu.out" 2>"$GT_TMP/no-gpu.err"
  ng_st=$?
  [ $ng_st -eq 2 ] && [ "$(grep -c "^gridtrain: error: " "$GT_TMP/no-gpu.err")" -eq 1 ] &&
    grep -q "^gridtrain: error: command line: \[backend\] device = cuda: no GPU" \
      "$GT_TMP/no-gpu.err" && [ ! -s "$GT_TMP/no-gpu.out" ]
  ok $? "$1 with device = cuda and no GPU: exit 2 (got $ng_st), the error names the command line, nothing on stdout"
}

# expect_ingest_error DESCRIPTION MESSAGE ARGS...: `gridtrain ingest ARGS`
# exits 2 with one line on stderr holding MESSAGE (a fixed string), nothing
# on stdout, and leaves neither $GT_TMP/x.h5 nor x.h5.tmp (the name the
# ingest tests give as the output of a command that must fail).
expect_ingest_error() {
  e_desc=$1
  e_msg=$2
  shift 2
  "$GT_BIN" ingest "$@" >"$GT_TMP/out" 2>"$GT_TMP/err"
  e_rc=$?
  [ "$e_rc" -eq 2 ] && [ ! -s "$GT_TMP/out" ] && [ "$(wc -l <"$GT_TMP/err")" -eq 1 ] &&
    grep -qF -- "$e_msg" "$GT_TMP/err" && [ ! -e "$GT_TMP/x.h5" ] && [ ! -e "$GT_TMP/x.h5.tmp" ]
  e_st=$?
  [ $e_st -eq 0 ] || diag "exit $e_rc; stdout: $(cat "$GT_TMP/out"); stderr: $(cat "$GT_TMP/err")"
  ok $e_st "$e_desc"
}

# make_dataset OUT.h5 [VAL_FRACTION]: ingest the test text (Genesis, KJV).
make_dataset() {
  "$GT_BIN" ingest text "$GT_SRCDIR/tests/data/genesis.txt" -o "$1" \
    --val-fraction "${2:-0.05}" >/dev/null
}

# run_train NRANKS NAME ARGS...: gridtrain train "$deck" $common ARGS (deck
# and common set by the test) on NRANKS ranks, at most $train_limit seconds
# (300 unless the test sets it); standard output in $GT_TMP/NAME.out,
# standard error in $GT_TMP/NAME.err; returns gridtrain's status. With
# train() below, the one launcher of the shell tests' training runs.
run_train() { gt_train_launch 0 "$@"; }

# train NAME NRANKS STEPS KEY=VALUE...: run_train for STEPS steps, metrics in
# $GT_TMP/NAME.jsonl, checkpoints in $GT_TMP/ck-NAME, both outputs in
# $GT_TMP/NAME.out; returns gridtrain's status.
train() {
  t_name=$1 t_ranks=$2 t_steps=$3
  shift 3
  gt_train_launch 1 "$t_ranks" "$t_name" run.steps="$t_steps" \
    run.metrics="$GT_TMP/$t_name.jsonl" checkpoint.dir="$GT_TMP/ck-$t_name" "$@"
}

# gt_train_launch MERGE NRANKS NAME ARGS...: both of the above; MERGE 1
# sends standard error to NAME.out too.
gt_train_launch() {
  t_merge=$1 t_ranks=$2 t_name=$3
  shift 3
  if [ "$t_merge" = 1 ]; then
    # shellcheck disable=SC2086 # $common: one key=value a word
    run_mpi "$t_ranks" "${train_limit:-300}" "$GT_BIN" train "$deck" $common "$@" \
      >"$GT_TMP/$t_name.out" 2>&1
  else
    # shellcheck disable=SC2086
    run_mpi "$t_ranks" "${train_limit:-300}" "$GT_BIN" train "$deck" $common "$@" \
      >"$GT_TMP/$t_name.out" 2>"$GT_TMP/$t_name.err"
  fi
}

# same_ckpt A B [TOL]: every dataset of checkpoint A is in B and equal, bit
# for bit (TOL 0, the default) or within TOL relative (norm-wise; datasets
# missing from B are then skipped). Needs $PYTHON_REF with h5py.
same_ckpt() {
  "$PYTHON_REF" - "$1" "$2" "${3:-0}" <<'PY'
import sys
import h5py, numpy as np
a, b, tol = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), float(sys.argv[3])
names, bad = [], []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
for n in names:
    if n not in b:
        if tol == 0:
            bad.append(n)
        continue
    x, y = a[n][()], b[n][()]
    ok = np.array_equal(x, y) if tol == 0 else \
        np.linalg.norm(x - y) <= tol * max(np.linalg.norm(y), 1e-30)
    if not ok:
        bad.append(n)
print(f"# {len(names)} datasets, {len(bad)} differ {bad[:3]}")
sys.exit(0 if not bad else 1)
PY
}

# has_dataset FILE NAME: the checkpoint FILE has dataset NAME.
has_dataset() {
  "$PYTHON_REF" -c 'import sys, h5py; sys.exit(0 if sys.argv[2] in h5py.File(sys.argv[1], "r") else 1)' "$1" "$2"
}
