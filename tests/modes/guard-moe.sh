#!/bin/sh
# tests/modes/guard-moe.sh - the mixture-of-experts layouts and checkpoints (4 ranks) under cpu-guard (tests/modes/run-mode.sh): the counts each MoE block downloads and waits for, the permutations and the experts' products on an asynchronous device.
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/mpi/test_moe
