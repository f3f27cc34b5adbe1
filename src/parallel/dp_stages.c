/*
 * dp_stages.c - the ZeRO stages of the data-parallel owner (dp_impl.h), one
 * table entry each:
 *   0  the gradients all-reduced in buckets, during the last micro-batch's
 *      backward when [parallel] dp_overlap is on;
 *   1  the same buckets reduce-scattered into the dp pieces, the bucket of
 *      the tied embedding held back until its two copies are summed, and the
 *      updated weights all-gathered;
 *   2  each gradient unit of every micro-batch reduce-scattered into the
 *      pieces as its backward ends (no whole gradient buffer), the tied
 *      embedding's unit kept whole for the step; the weights all-gathered;
 *   3  stage 2, and each unit's weights gathered just before the model uses
 *      them (the model's weight hook), none kept past the passes.
 */
#include "dp_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "gridtrain/error.h"
#include "gridtrain/timer.h"

// ---- hooks: the model and the pipeline call these with the gt_dp ------------------------------

static int gt_dp_bucket_ready(void *ctx, int first, int count)
{
  return gt_buckets_ready(((gt_dp *)ctx)->buckets, first, count);
}

static int gt_dp_bucket_progress(void *ctx) { return gt_buckets_progress(((gt_dp *)ctx)->buckets); }

static int gt_dp_gshard_ready(void *ctx, int first, int count)
{
  return gt_grad_shards_ready(((gt_dp *)ctx)->gshard, first, count);
}

static int gt_dp_gshard_progress(void *ctx) { return gt_grad_shards_progress(((gt_dp *)ctx)->gshard); }

static int gt_dp_gshard_acquire(void *ctx, int first, int count, float **base)
{
  return gt_grad_shards_acquire(((gt_dp *)ctx)->gshard, first, count, base);
}

static int gt_dp_weights_acquire(void *ctx, int first, int count, int next_first,
                                 int next_count, const void **base)
{
  return gt_param_gather_acquire(((gt_dp *)ctx)->pgather, first, count, next_first, next_count, base);
}

static int gt_dp_weights_release(void *ctx, int first, int count)
{
  return gt_param_gather_release(((gt_dp *)ctx)->pgather, first, count);
}

static int gt_dp_weights_progress(void *ctx) { return gt_param_gather_progress(((gt_dp *)ctx)->pgather); }

// ---- stages 0 and 1: buckets ------------------------------------------------------------------

static int gt_dp_buckets_create(gt_dp *dp)
{
  const size_t bucket_bytes = (size_t)(dp->setup.bucket_mb * 1024.0 * 1024.0);
  GT_CALL(gt_buckets_create(dp->params, dp->setup.coll, dp->group.comm, bucket_bytes,
                            &dp->buckets));
  if (dp->setup.stage >= 1 && dp->tied >= 0)
    gt_buckets_hold(dp->buckets, dp->tied);
  dp->hook = (gt_grad_hook){gt_dp_bucket_ready, dp, {gt_dp_bucket_progress, dp}, NULL, false};
  dp->poll_hook = (gt_grad_hook){NULL, dp, {gt_dp_bucket_progress, dp}, NULL, false};
  return GT_SUCCESS;
}

static int gt_dp_buckets_begin(gt_dp *dp)
{
  gt_buckets_reset(dp->buckets);
  return GT_SUCCESS;
}

/* Buckets start during backward only where it overlaps. */
static const gt_grad_hook *gt_dp_buckets_hook(gt_dp *dp)
{
  return dp->setup.overlap && dp->group.size > 1 && dp->reduce ? &dp->hook : NULL;
}

/* Waits, then the tied sum (its bucket is not in flight: stage 0 sums the
 * model's copy, already all-reduced over dp with the rest). */
static int gt_dp_buckets_wait(gt_dp *dp)
{
  if (dp->group.size > 1 && dp->reduce) {
    gt_event_begin(dp->setup.ev.exposed);
    const int status = gt_buckets_wait(dp->buckets);
    gt_event_end(dp->setup.ev.exposed);
    GT_CALL(status);
  }
  float *tied;
  size_t ntied;
  gt_gpt_tied_grad(dp->setup.model, &tied, &ntied);
  GT_CALL(gt_dp_sum_tied(dp, tied, ntied));
  return GT_SUCCESS;
}

static int gt_dp_zero1_finish(gt_dp *dp)
{
  GT_CALL(gt_dp_buckets_wait(dp));
  /* the held bucket, reduce-scattered after the tied sum */
  gt_event_begin(dp->setup.ev.exposed);
  const int status = gt_buckets_wait_held(dp->buckets);
  gt_event_end(dp->setup.ev.exposed);
  GT_CALL(status);
  return GT_SUCCESS;
}

static void gt_dp_buckets_describe(const gt_dp *dp, char *name, size_t name_size, char *value,
                                   size_t value_size)
{
  const int n = gt_buckets_count(dp->buckets);
  const bool zero1 = dp->setup.stage >= 1;
  snprintf(name, name_size, "%s", zero1 ? "dp reduce-scatter" : "dp all-reduce");
  snprintf(value, value_size, "%d bucket%s on rank 0, %s%s", n, n == 1 ? "" : "s",
           dp->setup.overlap ? "overlapping the last backward" : "after backward",
           zero1 ? "; then the weights all-gathered" : "");
}

// ---- stages 2 and 3: pieces per gradient unit -------------------------------------------------

static int gt_dp_gshard_create(gt_dp *dp)
{
  gt_params *params = dp->params;
  int *first = malloc(sizeof(int) * (size_t)params->count);
  int *count = malloc(sizeof(int) * (size_t)params->count);
  int status =
      first && count ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory for gradient units");
  if (status == GT_SUCCESS) {
    const int n = gt_gpt_grad_units(dp->setup.model, first, count, params->count);
    status = gt_grad_shards_create(params, dp->setup.coll, dp->group.comm, first, count, n, dp->tied,
                              GT_GRAD_SHARDS_POOL, &dp->gshard);
  }
  free(first);
  free(count);
  GT_CALL(status);
  dp->hook = (gt_grad_hook){gt_dp_gshard_ready, dp, {gt_dp_gshard_progress, dp},
                            gt_dp_gshard_acquire, true};
  return GT_SUCCESS;
}

static int gt_dp_zero3_create(gt_dp *dp)
{
  GT_CALL(gt_dp_gshard_create(dp));
  size_t sizes[GT_GPT_GATHER_BUFS];
  gt_gpt_gather_sizes(dp->setup.model, sizes);
  GT_CALL(gt_param_gather_create(dp->params, dp->setup.coll, dp->group.comm, sizes,
                            GT_GPT_GATHER_BUFS, dp->setup.ev.param_gather, &dp->pgather));
  const gt_weight_hook wh = {gt_dp_weights_acquire, gt_dp_weights_release, dp,
                             {gt_dp_weights_progress, dp}};
  gt_gpt_set_weight_hook(dp->setup.model, &wh);
  return GT_SUCCESS;
}

static int gt_dp_gshard_begin(gt_dp *dp)
{
  GT_CALL(gt_grad_shards_reset(dp->gshard));
  return GT_SUCCESS;
}

/* Every micro-batch's backward takes its gradient buffers from the pieces. */
static const gt_grad_hook *gt_dp_gshard_hook(gt_dp *dp) { return &dp->hook; }

/* The units' reductions, then the tied unit's whole buffer of the step:
 * its copies summed, then reduce-scattered into the pieces. */
static int gt_dp_zero2_finish(gt_dp *dp)
{
  gt_event_begin(dp->setup.ev.exposed);
  int status = gt_grad_shards_wait(dp->gshard);
  gt_event_end(dp->setup.ev.exposed);
  GT_CALL(status);
  float *tied;
  size_t ntied;
  gt_gpt_tied_grad(dp->setup.model, &tied, &ntied);
  gt_grad_shards_persistent(dp->gshard, &tied, &ntied);
  GT_CALL(gt_dp_sum_tied(dp, tied, ntied));
  gt_event_begin(dp->setup.ev.exposed);
  status = gt_grad_shards_finish_persistent(dp->gshard);
  gt_event_end(dp->setup.ev.exposed);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* No gathered weights outlive the passes. */
static int gt_dp_zero3_finish(gt_dp *dp)
{
  GT_CALL(gt_param_gather_drop(dp->pgather));
  GT_CALL(gt_dp_zero2_finish(dp));
  return GT_SUCCESS;
}

static void gt_dp_gshard_describe(const gt_dp *dp, char *name, size_t name_size, char *value,
                                  size_t value_size)
{
  snprintf(name, name_size, "dp reduce-scatter");
  snprintf(value, value_size,
           "each gradient unit (block, head, embedding) of every micro-batch as its backward "
           "ends; %s",
           dp->pgather ? "each unit's weights all-gathered before its forward and its backward, "
                         "the next one prefetched"
                       : "then the weights all-gathered");
}

// ---- the table --------------------------------------------------------------------------------

static const gt_dp_ops gt_dp_zero0 = {gt_dp_buckets_create, gt_dp_buckets_begin,
                                      gt_dp_buckets_hook,   gt_dp_buckets_wait,
                                      NULL,                 gt_dp_buckets_describe};
static const gt_dp_ops gt_dp_zero1 = {gt_dp_buckets_create, gt_dp_buckets_begin,
                                      gt_dp_buckets_hook,   gt_dp_zero1_finish,
                                      gt_dp_gather_compute, gt_dp_buckets_describe};
static const gt_dp_ops gt_dp_zero2 = {gt_dp_gshard_create, gt_dp_gshard_begin,
                                      gt_dp_gshard_hook,   gt_dp_zero2_finish,
                                      gt_dp_gather_compute, gt_dp_gshard_describe};
static const gt_dp_ops gt_dp_zero3 = {gt_dp_zero3_create, gt_dp_gshard_begin,
                                      gt_dp_gshard_hook,  gt_dp_zero3_finish,
                                      NULL,               gt_dp_gshard_describe};

const gt_dp_ops *const gt_dp_stages[4] = {&gt_dp_zero0, &gt_dp_zero1, &gt_dp_zero2,
                                          &gt_dp_zero3};
