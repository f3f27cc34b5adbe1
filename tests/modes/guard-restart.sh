#!/bin/sh
# tests/modes/guard-restart.sh - the restart and reshard test under cpu-guard (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/mpi/test_restart
