/*
 * dp.c - the data-parallel owner (see gridtrain/dp.h): the stage of its
 * table (dp_stages.c) with compression and the [parallel] sync modes layered
 * over it, the tied embedding's sum, the compute all-gather, and each rank's
 * checkpoint state of the path.
 */
#include "dp_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/timer.h"

// ---- set-up -----------------------------------------------------------------------------------

/* The combinations the path refuses; the same verdict on every rank. */
static int gt_dp_check(const gt_dp_setup *s)
{
  GT_CHECK(s->compress.kind == GT_COMPRESS_NONE || s->stage == 0, GT_ERR_INPUT,
           "[parallel] compress = %s works on the all-reduce of zero = 0; ZeRO stages "
           "reduce-scatter the gradients instead (set zero = 0 or compress = none)",
           s->compress_text);
  if (s->sync.kind == GT_SYNC_EVERY)
    return GT_SUCCESS;
  GT_CHECK(s->compress.kind == GT_COMPRESS_NONE, GT_ERR_INPUT,
           "[parallel] compress = %s needs sync = every_step (the compressed reduction is the "
           "every-step gradient all-reduce)",
           s->compress_text);
  GT_CHECK(s->stage == 0, GT_ERR_INPUT,
           "[parallel] sync = %s needs zero = 0: a replica that steps on its own needs its "
           "whole optimizer state",
           s->sync_text);
  return GT_SUCCESS;
}

/* [parallel] sync: the replica's communicator (pp x tp: the scalars that
 * must not wait for the other replicas) and the mode. Collective on world. */
static int gt_dp_sync_create(gt_dp *dp)
{
  const gt_grid *g = dp->setup.grid;
  GT_CALL_MPI(MPI_Comm_split(g->world, g->dp_rank, g->world_rank, &dp->replica));
  float *m, *v;
  gt_adamw_moments(dp->setup.opt, &m, &v);
  GT_CALL(gt_sync_create(&dp->setup.sync, dp->params, m, v, &dp->group, dp->setup.outer_lr,
                         dp->setup.outer_momentum, &dp->sync));
  return GT_SUCCESS;
}

/* MPI moves a message along only when its ranks call it: polled between
 * the kernels of every backward (PLATFORM.md), the tied sum's other member
 * does not wait for this one to come back to MPI. */
static int gt_dp_tied_progress(void *ctx) { return gt_coll_progress(((gt_dp *)ctx)->setup.coll); }

gt_params_split gt_dp_params_split(int stage, int dp_rank, int dp_size)
{
  if (stage < 1 || dp_size < 2)
    return (gt_params_split){0, 1, 0};
  return (gt_params_split){dp_rank, dp_size, stage};
}

int gt_dp_create(const gt_dp_setup *setup, gt_dp **out)
{
  *out = NULL;
  const gt_grid *g = setup->grid;
  GT_ASSERT(setup->stage >= 0 && setup->stage <= 3);
  int status = gt_dp_check(setup);
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true); /* the same deck everywhere */
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  gt_dp *dp = calloc(1, sizeof *dp);
  GT_CHECK_ALLOC(dp, sizeof *dp);
  *out = dp;
  dp->ops = gt_dp_stages[setup->stage];
  dp->setup = *setup;
  dp->params = gt_gpt_params(setup->model);
  dp->replica = MPI_COMM_NULL;
  dp->reduce = true;
  dp->group = (gt_group){g->dp, g->dp_rank, g->dp_size, setup->ev.gather, setup->coll};
  dp->embed = (gt_group){g->embed, 0, 1, setup->ev.tied, setup->coll};
  if (g->embed != MPI_COMM_NULL) {
    GT_CALL_MPI(MPI_Comm_rank(g->embed, &dp->embed.rank));
    GT_CALL_MPI(MPI_Comm_size(g->embed, &dp->embed.size));
  }
  dp->tied = gt_gpt_tied_param(setup->model); /* summed over the embedding group first */
  GT_ASSERT(!setup->defer_tied || setup->stage == 0);
  status = GT_SUCCESS;
  if (setup->defer_tied && dp->tied >= 0 && dp->embed.size > 1)
    status = gt_xfer_create(setup->coll, dp->params->list[dp->tied].numel * sizeof(float),
                            &dp->tied_x);
  GT_CALL(gt_error_agree(status, g->world));
  dp->tied_hook = (gt_grad_hook){NULL, dp, {gt_dp_tied_progress, dp}, NULL, false};
  GT_CALL(gt_error_agree(dp->ops->create(dp), g->world));
  if (setup->compress.kind != GT_COMPRESS_NONE)
    GT_CALL(gt_error_agree(gt_buckets_compress(dp->buckets, &setup->compress,
                                               setup->compress_algo, setup->seed),
                           g->world));
  if (setup->sync.kind != GT_SYNC_EVERY)
    GT_CALL(gt_error_agree(gt_dp_sync_create(dp), g->world));
  return GT_SUCCESS;
}

int gt_dp_destroy(gt_dp **dpp)
{
  gt_dp *dp = *dpp;
  if (!dp)
    return GT_SUCCESS;
  if (dp->pgather)
    gt_gpt_set_weight_hook(dp->setup.model, NULL);
  gt_buckets_destroy(&dp->buckets);
  gt_xfer_destroy(&dp->tied_x);
  gt_sync_destroy(&dp->sync);
  if (dp->replica != MPI_COMM_NULL)
    MPI_Comm_free(&dp->replica);
  gt_grad_shards_destroy(&dp->gshard);
  gt_param_gather_destroy(&dp->pgather);
  free(dp);
  *dpp = NULL;
  return GT_SUCCESS;
}

// ---- the step ---------------------------------------------------------------------------------

int gt_dp_begin(gt_dp *dp, long step)
{
  /* [parallel] sync: whether this step's gradients are all-reduced over dp */
  dp->reduce = !dp->sync || gt_sync_reduces_grads(dp->sync, step);
  if (dp->ops->begin)
    GT_CALL(dp->ops->begin(dp));
  return GT_SUCCESS;
}

static bool gt_dp_stale(const gt_dp *dp)
{
  return dp->sync && gt_sync_get_spec(dp->sync)->kind == GT_SYNC_STALE;
}

const gt_grad_hook *gt_dp_grad_hook(gt_dp *dp)
{
  const gt_grad_hook *hook = dp->ops->grad_hook ? dp->ops->grad_hook(dp) : NULL;
  if (!hook && gt_dp_stale(dp) && dp->group.size > 1)
    hook = &dp->poll_hook; /* the sums in flight move along */
  if (!hook && dp->tied_x && gt_xfer_busy(dp->tied_x))
    hook = &dp->tied_hook; /* the last step's tied sum moves along */
  return hook;
}

int gt_dp_sum_tied(gt_dp *dp, float *grad, size_t n)
{
  if (!grad) /* the tied embedding: both copies get the sum */
    return GT_SUCCESS;
  if (!dp->tied_x) {
    GT_CALL(gt_group_allreduce_sum(&dp->embed, grad, n, GT_F32));
    return GT_SUCCESS;
  }
  /* deferred: started here (after the last step's, should that one still
   * be in flight); the copy that counts in the norm is needed at once, the
   * other one at the update (gt_dp_tied_wait) */
  GT_CALL(gt_dp_tied_wait(dp));
  GT_CALL(gt_xfer_allreduce(dp->tied_x, grad, n, dp->embed.comm));
  bool done; /* into MPI now, once the data is ready (the step goes on without waits) */
  GT_CALL(gt_xfer_test(dp->tied_x, &done));
  if (dp->params->list[dp->tied].counted)
    GT_CALL(gt_dp_tied_wait(dp));
  return GT_SUCCESS;
}

int gt_dp_tied_wait(gt_dp *dp)
{
  if (!dp->tied_x || !gt_xfer_busy(dp->tied_x))
    return GT_SUCCESS;
  gt_event_begin(dp->embed.event);
  const int status = gt_xfer_wait(dp->tied_x);
  gt_event_end(dp->embed.event);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_dp_finish(gt_dp *dp, long step, gt_dp_plan *plan)
{
  const gt_grid *g = dp->setup.grid;
  GT_CALL(dp->ops->finish(dp));
  const bool stale = gt_dp_stale(dp);
  bool have = true; /* stale: a sum S steps old to apply */
  if (stale) {
    gt_event_begin(dp->setup.ev.exposed);
    const int status = gt_sync_stale_exchange(dp->sync, step, &have);
    gt_event_end(dp->setup.ev.exposed);
    GT_CALL(status);
  }
  /* dp replicas hold the same gradients; with ZeRO each dp rank holds the
   * reduced ones of its own piece; with a sync mode every replica counts
   * its own (replica 0's norm is the one logged) */
  const bool own_grads = dp->setup.stage >= 1 || dp->sync;
  *plan = (gt_dp_plan){
      .update = have,
      .norm_here = have && (g->dp_rank == 0 || own_grads),
      .together = !dp->sync,
      .loss_comm = stale ? dp->replica : g->world,
      .norm_comm = dp->sync ? dp->replica : g->world,
      .own_loss = stale,
      /* replicas that keep their own gradients hold 1/dp of their batch's
       * mean: the update takes dp times it */
      .grad_mult = !dp->reduce && !stale ? (double)g->dp_size : 1.0,
      /* stale:S applies step s - S's gradients */
      .lag = stale ? gt_sync_get_spec(dp->sync)->s : 0};
  return GT_SUCCESS;
}

int gt_dp_before_update(gt_dp *dp, long step)
{
  if (dp->sync)
    GT_CALL(gt_sync_before_update(dp->sync, step)); /* local:K: the replicas averaged */
  return GT_SUCCESS;
}

int gt_dp_after_update(gt_dp *dp, long step, bool updated, bool *synced)
{
  *synced = true;
  if (updated && dp->ops->after_update)
    GT_CALL(dp->ops->after_update(dp)); /* the other pieces' updates */
  if (dp->sync) {
    gt_event_begin(dp->setup.ev.exposed);
    const int status = gt_sync_after_update(dp->sync, step, synced);
    gt_event_end(dp->setup.ev.exposed);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

// ---- outside the step -------------------------------------------------------------------------

int gt_dp_gather_compute(gt_dp *dp)
{
  gt_params *p = dp->params;
  if (p->shard_size == 1 || p->compute_sharded) /* stage 3 gathers per unit */
    return GT_SUCCESS;
  const size_t es = gt_dtype_size(p->dtype);
  GT_CALL(gt_group_allgather(&dp->group, (char *)p->compute + p->shard_lo * es, p->compute,
                             p->shard_n, p->dtype));
  return GT_SUCCESS;
}

const gt_group *gt_dp_group(const gt_dp *dp) { return &dp->group; }

void gt_dp_describe(const gt_dp *dp, char *name, size_t name_size, char *value,
                    size_t value_size)
{
  name[0] = value[0] = '\0';
  if (dp->group.size > 1)
    dp->ops->describe(dp, name, name_size, value, value_size);
}

void gt_dp_buffer_bytes(const gt_dp *dp, double *grad_bufs, double *gather_bufs)
{
  *grad_bufs = dp->gshard ? (double)gt_grad_shards_buffer_bytes(dp->gshard) : 0.0;
  *gather_bufs = dp->pgather ? (double)gt_param_gather_buffer_bytes(dp->pgather) : 0.0;
}

// ---- each rank's state in checkpoints ---------------------------------------------------------

void gt_dp_state_tag(const gt_dp *dp, char *tag, size_t size)
{
  char spec[64], sync[64] = "every_step";
  gt_compress_format(&dp->setup.compress, spec, sizeof spec);
  if (dp->sync)
    gt_sync_format(gt_sync_get_spec(dp->sync), sync, sizeof sync);
  snprintf(tag, size, "compress=%s bucket_mb=%g sync=%s", spec, dp->setup.bucket_mb, sync);
}

size_t gt_dp_compress_state_len(const gt_dp *dp)
{
  return dp->buckets ? gt_buckets_state_len(dp->buckets) : 0;
}

size_t gt_dp_state_len(const gt_dp *dp)
{
  return gt_dp_compress_state_len(dp) + (dp->sync ? gt_sync_state_len(dp->sync) : 0);
}

const gt_sync_spec *gt_dp_sync_spec(const gt_dp *dp)
{
  return dp->sync ? gt_sync_get_spec(dp->sync) : NULL;
}

bool gt_dp_diverged(const gt_dp *dp, long step)
{
  return dp->sync && gt_sync_diverged(dp->sync, step);
}

int gt_dp_state_save(gt_dp *dp, long step, float *buf)
{
  const size_t nc = gt_dp_compress_state_len(dp);
  if (nc)
    gt_buckets_state_copy(dp->buckets, buf, true);
  if (dp->sync)
    GT_CALL(gt_sync_state_save(dp->sync, step, buf + nc));
  return GT_SUCCESS;
}

int gt_dp_state_restore(gt_dp *dp, long step, const float *buf, bool loaded)
{
  const size_t nc = gt_dp_compress_state_len(dp);
  if (loaded && nc) /* the copy only reads buf when restoring */
    gt_buckets_state_copy(dp->buckets, (float *)buf, false);
  if (!dp->sync)
    return GT_SUCCESS;
  if (!loaded)
    return gt_sync_reset(dp->sync, step);
  GT_CALL(gt_sync_state_load(dp->sync, step, buf + nc));
  return gt_params_refresh_compute(dp->params);
}
