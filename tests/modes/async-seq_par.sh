#!/bin/sh
# tests/modes/async-seq_par.sh - the sequence-parallelism test under cpu-async (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" async tests/mpi/test_seq_par
