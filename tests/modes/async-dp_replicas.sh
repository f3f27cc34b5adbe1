#!/bin/sh
# tests/modes/async-dp_replicas.sh - the DP replica test under cpu-async (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" async tests/mpi/test_dp_replicas
