/*
 * sharding.c - the whole (unsharded) model state that parameter gathers
 * see (see trainer_impl.h); the compute weights' all-gather is the data-
 * parallel path's (gt_dp_gather_compute, dp.h).
 *
 * Checkpoints need no whole state: every data-parallel rank writes and
 * loads its own piece (checkpointing.c). The gather here serves the
 * parameter gathers of trainer.c.
 */
#include "trainer_impl.h"

#include <string.h>

#include "gridtrain/error.h"

/* A whole buffer of numel floats (device), zeroed. */
static int gt_full_alloc(gt_backend *be, size_t numel, float **buf)
{
  GT_CALL(be->ops->alloc(be, numel * sizeof(float), (void **)buf));
  GT_CALL(be->ops->zero(be, *buf, numel * sizeof(float)));
  return GT_SUCCESS;
}

int gt_full_state_gather(gt_trainer *tr, bool moments, gt_full_state *fs)
{
  gt_params *p = gt_gpt_params(tr->model);
  gt_backend *be = tr->be;
  memset(fs, 0, sizeof *fs);
  fs->values = p->values;
  if (moments)
    gt_adamw_moments(tr->opt, &fs->m, &fs->v);
  if (p->shard_size == 1)
    return GT_SUCCESS;
  const gt_group *dp = gt_dp_group(tr->dp);
  const bool root = dp->rank == 0;
  /* fp32: the master is the compute copy, whole and current on every rank */
  fs->owned = true;
  float *mine[3] = {p->master_sharded ? p->values : NULL, moments ? fs->m : NULL,
                    moments ? fs->v : NULL};
  float **full[3] = {&fs->values, &fs->m, &fs->v};
  int status = GT_SUCCESS;
  for (int k = 0; k < 3; k++) {
    fs->own[k] = mine[k] != NULL;
    if (!mine[k])
      continue;
    *full[k] = NULL;
    if (root)
      status = gt_full_alloc(be, p->numel, full[k]);
    status = gt_error_agree(status, dp->comm);
    if (status != GT_SUCCESS)
      break;
    status = gt_group_gather(dp, mine[k], *full[k], p->shard_n, GT_F32, 0);
    if (status != GT_SUCCESS)
      break;
  }
  if (status != GT_SUCCESS) {
    gt_full_state_free(tr, fs);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

void gt_full_state_free(gt_trainer *tr, gt_full_state *fs)
{
  if (!fs->owned)
    return;
  float *full[3] = {fs->values, fs->m, fs->v};
  /* the copies and downloads that read them are complete first */
  tr->be->ops->sync(tr->be);
  for (int k = 0; k < 3; k++)
    if (fs->own[k] && full[k])
      tr->be->ops->free(tr->be, full[k]);
  memset(fs, 0, sizeof *fs);
}
