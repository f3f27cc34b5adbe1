#!/bin/sh
# tests/quick/slurm.sh - the job scripts under a real, private Slurm cluster
# (tests/slurm/test_slurm.sh), parts a. and d.: a 4-rank train.sbatch job and
# train-multinode.sbatch. The full tier adds the chained jobs and the
# signal-checkpoint-requeue cycle.
# gt-test: tier=quick
: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
GT_TEST_TIER=quick GT_TEST_NAME=quick-slurm exec "${SHELL:-/bin/sh}" "$GT_SRCDIR/tests/slurm/test_slurm.sh"
