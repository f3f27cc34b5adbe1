#!/bin/sh
# tests/modes/async-layouts6.sh - the layout parity test (6 ranks) under cpu-async (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" async tests/mpi/test_layouts6
