/*
 * step_faults.c - the test-only faults of a training step (fault.h), in one
 * call so that the step's body holds none of them (see trainer_impl.h).
 */
#include "trainer_impl.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"

/* GT_FAULT=slow_step: a straggler, computing slowly for 0.3 s while it
 * polls MPI as backward does. */
static int gt_step_slow(gt_trainer *tr, long step)
{
  if (!gt_fault_hit("slow_step", tr->grid->world_rank, step))
    return GT_SUCCESS;
  for (int ms = 0; ms < 300; ms++) {
    nanosleep(&(struct timespec){0, 1000000L}, NULL);
    GT_CALL(gt_comm_progress());
  }
  return GT_SUCCESS;
}

/* GT_FAULT=nan_grad: a NaN in this rank's gradients (backward accumulates
 * onto it). */
static int gt_step_nan_grad(gt_trainer *tr, long step)
{
  if (!gt_fault_hit("nan_grad", tr->grid->world_rank, step))
    return GT_SUCCESS;
  gt_params *p = gt_gpt_params(tr->model);
  const size_t n = p->grads_sharded ? p->shard_n : p->numel;
  if (n == 0)
    return GT_SUCCESS;
  const float nan = NAN;
  fprintf(stderr, "gridtrain: GT_FAULT=nan_grad: a NaN in rank %d's gradients at step %ld\n",
          tr->grid->world_rank, step);
  GT_CALL(tr->be->ops->upload(tr->be, p->grads + n / 2, &nan, sizeof nan, NULL));
  return GT_SUCCESS;
}

int gt_trainer_step_faults(gt_trainer *tr, long step)
{
  GT_CALL(gt_step_slow(tr, step));
  GT_CALL(gt_step_nan_grad(tr, step));
  return GT_SUCCESS;
}
