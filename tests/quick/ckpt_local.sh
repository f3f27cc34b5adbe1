#!/bin/sh
# tests/quick/ckpt_local.sh - the node-local tier (tests/io/test_ckpt_local.sh),
# its first part: a rank killed in step 9 of a 2-rank run, and the rerun's
# resume = auto taking the node-local state of step 8 over the global
# checkpoint of step 6, bit for bit; an unset $VAR in local_dir. The full tier
# adds damaged parts, partner copies, another pp and another dp with ZeRO.
# gt-test: tier=quick
: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
GT_TEST_TIER=quick GT_TEST_NAME=quick-ckpt-local exec "${SHELL:-/bin/sh}" "$GT_SRCDIR/tests/io/test_ckpt_local.sh"
