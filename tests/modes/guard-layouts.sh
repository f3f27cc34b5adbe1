#!/bin/sh
# tests/modes/guard-layouts.sh - the layout parity test (8 ranks) under cpu-guard (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/mpi/test_layouts
