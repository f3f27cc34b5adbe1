/*
 * dp_impl.h - the data-parallel owner's state and its table of stages
 * (internal to src/parallel: dp.c, dp_stages.c; see gridtrain/dp.h).
 */
#ifndef GT_DP_IMPL_H
#define GT_DP_IMPL_H

#include "gridtrain/buckets.h"
#include "gridtrain/dp.h"
#include "gridtrain/grad_shards.h"
#include "gridtrain/param_gather.h"

/* One ZeRO stage's reduction: an entry of gt_dp_stages. Each returns a
 * gridtrain status; NULL entries do nothing. */
typedef struct gt_dp_ops {
  /* its buffers and hooks, from dp->setup (not collective) */
  int (*create)(gt_dp *dp);
  /* before backward: nothing reduced or in flight yet */
  int (*begin)(gt_dp *dp);
  /* the hook backward calls while the gradients are reduced (NULL: none) */
  const gt_grad_hook *(*grad_hook)(gt_dp *dp);
  /* after the passes: the waits and the tied embedding's sum, in order */
  int (*finish)(gt_dp *dp);
  /* after an update: the compute copy outside this rank's piece */
  int (*after_update)(gt_dp *dp);
  /* the report row (dp.h, gt_dp_describe) */
  void (*describe)(const gt_dp *dp, char *name, size_t name_size, char *value,
                   size_t value_size);
} gt_dp_ops;

/* Stages 0 to 3. */
extern const gt_dp_ops *const gt_dp_stages[4];

struct gt_dp {
  const gt_dp_ops *ops;
  gt_dp_setup setup;
  gt_params *params;
  gt_group group;         /* dp; its event is zero.allgather */
  gt_group embed;         /* the tied embedding's copies (first and last stage) */
  int tied;               /* the tied parameter's index on this rank, else -1 */
  gt_xfer *tied_x;        /* setup.defer_tied: the tied sum left in flight */
  gt_grad_hook tied_hook; /* backward moves it along (poll only) */
  bool reduce;            /* this step's gradients are summed over dp */
  gt_buckets *buckets;    /* stages 0, 1 */
  gt_grad_shards *gshard;      /* stages 2, 3 */
  gt_param_gather *pgather;    /* stage 3 */
  gt_grad_hook hook;      /* the stage's hook */
  gt_grad_hook poll_hook; /* stale: backward only moves the sums in flight along */
  gt_sync *sync;          /* [parallel] sync other than every_step; else NULL */
  MPI_Comm replica;       /* with sync: the ranks of this dp replica (pp x tp) */
};

/* The tied embedding's copies summed over the embedding group (a no-op on
 * a rank without one); grad and n from the model, or the stage's buffer. */
int gt_dp_sum_tied(gt_dp *dp, float *grad, size_t n);

#endif /* GT_DP_IMPL_H */
