#!/bin/sh
# tests/quick/ckpt_async.sh - asynchronous checkpoints
# (tests/io/test_ckpt_async.sh), its first parts: the 1-rank resume bit for
# bit from a file written while training went on, and a background write
# that fails on one rank. The full tier adds SIGTERM during a write, 4 ranks
# with ZeRO and async = off.
# gt-test: tier=quick
: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
GT_TEST_TIER=quick GT_TEST_NAME=quick-ckpt-async exec "${SHELL:-/bin/sh}" "$GT_SRCDIR/tests/io/test_ckpt_async.sh"
