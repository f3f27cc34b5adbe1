#!/bin/sh
# tests/modes/guard-seq_par.sh - the sequence-parallelism test under cpu-guard (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/mpi/test_seq_par
