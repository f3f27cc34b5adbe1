#!/bin/sh
# tests/modes/guard-dp_replicas.sh - the DP replica test under cpu-guard (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/mpi/test_dp_replicas
