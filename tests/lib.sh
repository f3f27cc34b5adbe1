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

# ok COND-STATUS DESCRIPTION: record a result ("ok 0 'x'" passes).
ok() {
  gt_tap_n=$((gt_tap_n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $gt_tap_n - $2"
  else
    echo "not ok $gt_tap_n - $2"
    gt_tap_failed=$((gt_tap_failed + 1))
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
  echo "1..$gt_tap_n"
  [ "$gt_tap_failed" -eq 0 ]
  exit $?
}

# bail REASON: stop the test file.
bail() { echo "Bail out! $*"; exit 1; }

# A scratch directory per test script, under the build tree.
gt_test_name=$(basename "$0" .sh)
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

# make_dataset OUT.h5 [VAL_FRACTION]: ingest the test text (Genesis, KJV).
make_dataset() {
  "$GT_BIN" ingest text "$GT_SRCDIR/tests/data/genesis.txt" -o "$1" \
    --val-fraction "${2:-0.05}" >/dev/null
}
