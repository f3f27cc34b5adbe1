#!/bin/sh
# tests/modes/guard-zero.sh - the ZeRO test under cpu-guard (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/mpi/test_zero
