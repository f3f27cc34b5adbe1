#!/bin/sh
# tests/install/test_spack.sh - contrib/spack/package.py without Spack:
# tests/install/check_spack.py parses the recipe, loads it against a
# stand-in for spack.package that records its directives, and checks the
# variants, dependencies and conflicts issue 16 asks for, and that
# configure_args() of stand-in specs gives the options those variants mean,
# each one that `configure --help` lists. Under a second.
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

"$GT_SRCDIR/configure" --help >"$GT_TMP/configure-help.txt" 2>&1 ||
  bail "configure --help failed"
/usr/bin/python3 "$GT_SRCDIR/tests/install/check_spack.py" "$GT_SRCDIR/contrib/spack/package.py" \
  "$GT_TMP/configure-help.txt" 0 >"$GT_TMP/check.out" 2>&1
rc=$?
grep -v '^next ' "$GT_TMP/check.out"
gt_tap_n=$(sed -n 's/^next //p' "$GT_TMP/check.out")
gt_tap_failed=$(grep -c '^not ok' "$GT_TMP/check.out")
[ -n "$gt_tap_n" ] || { gt_tap_n=0; gt_tap_failed=0; }
ok $rc "check_spack.py ran to the end (exit $rc)"
done_testing
