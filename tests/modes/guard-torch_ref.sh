#!/bin/sh
# tests/modes/guard-torch_ref.sh - the PyTorch reference test under cpu-guard (tests/modes/run-mode.sh).
# gt-test: tier=full
. "$GT_SRCDIR/tests/modes/run-mode.sh" guard tests/ref/test_torch_ref
