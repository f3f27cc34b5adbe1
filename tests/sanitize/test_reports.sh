#!/bin/sh
# test_reports.sh - the last test of `make check-sanitize`: no process that
# the tests started (test programs, gridtrain, every rank) left an
# AddressSanitizer, LeakSanitizer or UndefinedBehaviorSanitizer report. The
# reports go to files (log_path), not to the processes' stderr, so that a
# report in a run whose output a test only greps, or whose failure it
# expects, is caught here; each is printed.
. "$GT_SRCDIR/tests/lib.sh"

dir=${GT_SANITIZER_LOGS:-}
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "1..0 # SKIP not run by make check-sanitize (GT_SANITIZER_LOGS is not a directory)"
  exit 0
fi
n=0
for f in "$dir"/*; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  echo "# ---- $f"
  head -n 80 "$f" | sed 's/^/# /'
done
[ $n -eq 0 ]
ok $? "no sanitizer report from any process of the tests ($n in $dir)"
done_testing
