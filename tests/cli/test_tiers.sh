#!/bin/sh
# test_tiers.sh - the test tiers of Makefile.am agree with what each test
# declares ("gt-test: ranks=N tier=quick|full" in a C test's source, "#
# gt-test: tier=..." in a shell test): every test of check_PROGRAMS and
# GT_SHELL_TESTS is in exactly one of GT_QUICK_TESTS (make check) and
# GT_FULL_TESTS (make check-full), the one its declaration names, and a quick
# test asks for at most 8 ranks (tests/README.md).
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

tiers=$(make -s -C "$GT_BUILDDIR" gt-print-tiers 2>&1) || bail "make gt-print-tiers: $tiers"
list() { printf '%s\n' "$tiers" | sed -n "s/^$1: //p" | tr ' ' '\n' | sed '/^$/d'; }
quick=$(list quick)
full=$(list full)
all=$(list all | sort -u)

# The source that declares a test's tier: the C file of a program, the
# script itself of a shell test.
source_of() {
  case $1 in
    *.sh) echo "$GT_SRCDIR/$1" ;;
    tests/fuzz/replay_*) echo "$GT_SRCDIR/tests/fuzz/replay.c" ;;
    tests/gpu/test_cuda_emu) echo "$GT_SRCDIR/tests/gpu/test_cuda_ops.c" ;;
    *) echo "$GT_SRCDIR/$1.c" ;;
  esac
}

bad=""
for t in $all; do
  in_quick=$(printf '%s\n' "$quick" | grep -cx "$t")
  in_full=$(printf '%s\n' "$full" | grep -cx "$t")
  src=$(source_of "$t")
  declared=$(sed -n 's/.*gt-test:.*tier=\([a-z]*\).*/\1/p' "$src" 2>/dev/null | head -n 1)
  listed=""
  [ "$in_quick" -eq 1 ] && listed=quick
  [ "$in_full" -eq 1 ] && listed="$listed${listed:+ and }full"
  if [ "$((in_quick + in_full))" -ne 1 ]; then
    bad="$bad
$t: in ${listed:-no tier list} of Makefile.am (one is wanted)"
  elif [ -z "$declared" ]; then
    bad="$bad
$t: $src declares no tier (gt-test: ... tier=quick|full)"
  elif [ "$declared" != "$listed" ]; then
    bad="$bad
$t: declares tier=$declared but is listed in the $listed tier"
  fi
done
[ -z "$bad" ]
ok $? "each of the $(printf '%s\n' "$all" | wc -l) tests is in the one tier it declares"
[ -z "$bad" ] || diag "$bad"

# nothing in a tier that is not a test of the build
stray=""
for t in $quick $full; do
  printf '%s\n' "$all" | grep -qx "$t" || stray="$stray $t"
done
[ -z "$stray" ]
ok $? "the tier lists name only tests of check_PROGRAMS and GT_SHELL_TESTS"
[ -z "$stray" ] || diag "not tests:$stray"

# the quick tier's wrappers run programs that exist, at the ranks they declare
wrappers_ok=0
for w in "$GT_SRCDIR"/tests/quick/*.sh; do
  prog=$(sed -n 's|.*"\$GT_BUILDDIR/\(tests/[a-z/_0-9]*\)".*|\1|p' "$w")
  script=$(sed -n 's|.*"\$GT_SRCDIR/\(tests/[a-z/_0-9]*\.sh\)".*|\1|p' "$w" | grep -v run-test)
  if [ -n "$prog" ]; then
    printf '%s\n' "$all" | grep -qx "$prog" || { diag "$w runs $prog, no test program"; wrappers_ok=1; }
    r=$(sed -n 's/.*GT_TEST_RANKS=\([0-9]*\).*/\1/p' "$w" | head -n 1)
    d=$(sed -n 's/.*gt-test: ranks=\([0-9]*\).*/\1/p' "$w" | head -n 1)
    [ -n "$r" ] && [ "$r" = "$d" ] || { diag "$w: GT_TEST_RANKS=$r, declares ranks=$d"; wrappers_ok=1; }
  elif [ -n "$script" ]; then
    [ -f "$GT_SRCDIR/$script" ] || { diag "$w runs $script, which does not exist"; wrappers_ok=1; }
  else
    diag "$w runs neither a test program nor a test script"
    wrappers_ok=1
  fi
done
ok $wrappers_ok "the wrappers of tests/quick/ run existing tests at the ranks they declare"

done_testing
