#!/bin/sh
# tests/modes/async-recompute.sh - the recomputation test under cpu-async (tests/modes/run-mode.sh).
. "$GT_SRCDIR/tests/modes/run-mode.sh" async tests/mpi/test_recompute
