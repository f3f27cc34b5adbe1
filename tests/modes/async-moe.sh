#!/bin/sh
# tests/modes/async-moe.sh - the mixture-of-experts layouts and checkpoints (4 ranks) under cpu-async (tests/modes/run-mode.sh): the counts each MoE block downloads and waits for, the permutations and the experts' products on an asynchronous device.
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" async tests/mpi/test_moe
