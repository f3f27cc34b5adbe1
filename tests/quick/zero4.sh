#!/bin/sh
# tests/quick/zero4.sh - ZeRO 1-3 against ZeRO 0, and their checkpoints
# across layouts and stages (tests/mpi/test_zero.c), with the cases that fit
# 4 ranks. The full tier runs all of them at 8.
# gt-test: ranks=4 tier=quick
: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
GT_TEST_RANKS=4 exec "${SHELL:-/bin/sh}" "$GT_SRCDIR/tests/run-test" "$GT_BUILDDIR/tests/mpi/test_zero"
