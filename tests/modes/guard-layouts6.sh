#!/bin/sh
# tests/modes/guard-layouts6.sh - the layout parity test (6 ranks) under cpu-guard (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/mpi/test_layouts6
