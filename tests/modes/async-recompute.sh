#!/bin/sh
# tests/modes/async-recompute.sh - the recomputation test under cpu-async (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" async tests/mpi/test_recompute
