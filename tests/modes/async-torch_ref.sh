#!/bin/sh
# tests/modes/async-torch_ref.sh - the PyTorch reference test under cpu-async (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" async tests/ref/test_torch_ref
