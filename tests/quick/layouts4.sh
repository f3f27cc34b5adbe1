#!/bin/sh
# tests/quick/layouts4.sh - the layout parity test (tests/mpi/test_layouts.c)
# at 4 ranks: every 4-rank layout, each schedule's code path once, against
# one rank. The full tier runs the 8- and 6-rank sets with every schedule.
# gt-test: ranks=4 tier=quick
: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
GT_TEST_RANKS=4 exec "${SHELL:-/bin/sh}" "$GT_SRCDIR/tests/run-test" "$GT_BUILDDIR/tests/mpi/test_layouts"
