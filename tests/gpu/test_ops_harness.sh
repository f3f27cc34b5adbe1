#!/bin/sh
# tests/gpu/test_ops_harness.sh - the GPU op test's own checks, proven where
# no GPU is: tests/gpu/test_cuda_ops run against the cpu-async backend
# (GT_GPU_TEST_BACKEND) instead of cuda. cpu-async runs every op later on a
# worker thread, so a wait missing in the test itself (which on a GPU would
# read stale results at random) fails here; and a correct backend must meet
# every bound the test sets for cuda against cpu-ref.
# gt-test: tier=quick
: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
: "${GT_BUILDDIR:?run through make check (GT_BUILDDIR unset)}"
GT_GPU_TEST_BACKEND=cpu-async
GT_CPU_ASYNC_DELAY_US=20
export GT_GPU_TEST_BACKEND GT_CPU_ASYNC_DELAY_US
exec "${SHELL:-/bin/sh}" "$GT_SRCDIR/tests/run-test" "$GT_BUILDDIR/tests/gpu/test_cuda_ops"
