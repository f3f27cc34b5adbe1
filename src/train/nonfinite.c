/*
 * nonfinite.c - a step whose loss or gradient norm is not finite: which
 * rank, which parameter (trainer_impl.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "trainer_impl.h"

/* The first non-finite gradient this rank holds: the parameter's name into
 * name ("" when all are finite). */
static int gt_first_bad_grad(gt_trainer *tr, char *name, size_t size)
{
  gt_params *p = gt_gpt_params(tr->model);
  gt_backend *be = tr->be;
  name[0] = '\0';
  const size_t n = p->grads_sharded ? p->shard_n : p->numel;
  const size_t base = p->grads_sharded ? p->shard_lo : 0;
  if (n == 0)
    return GT_SUCCESS;
  float *host = malloc(n * sizeof *host);
  GT_CHECK_ALLOC(host, n * sizeof *host);
  int status = be->ops->download(be, host, p->grads, n * sizeof *host, NULL);
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  size_t bad = n;
  for (size_t i = 0; status == GT_SUCCESS && i < n && bad == n; i++)
    if (!isfinite(host[i]))
      bad = i;
  free(host);
  GT_CALL(status);
  if (bad == n)
    return GT_SUCCESS;
  const size_t at = base + bad;
  for (int k = 0; k < p->count; k++)
    if (at >= p->list[k].offset && at < p->list[k].offset + p->list[k].numel) {
      snprintf(name, size, "%s", p->list[k].name);
      return GT_SUCCESS;
    }
  snprintf(name, size, "(padding at element %zu)", at);
  return GT_SUCCESS;
}

int gt_trainer_nonfinite(gt_trainer *tr, long step, double loss, double norm)
{
  const gt_grid *g = tr->grid;
  char name[GT_PARAM_NAME_MAX + 32];
  GT_CALL(gt_first_bad_grad(tr, name, sizeof name));
  const double my_loss = tr->host_scalars[GT_SC_LOSS];
  /* the lowest rank whose own loss is not finite (the forward pass made
   * it), else the lowest whose gradients are not */
  int who[2] = {isfinite(my_loss) ? g->world_size : g->world_rank,
                name[0] ? g->world_rank : g->world_size};
  GT_CALL(gt_allreduce_int(who, 2, MPI_MIN, g->world));
  int bad_grads = name[0] != '\0';
  GT_CALL(gt_allreduce_int(&bad_grads, 1, MPI_SUM, g->world));
  const bool in_loss = who[0] < g->world_size;
  const int origin = in_loss ? who[0] : who[1];
  char where[200] = "";
  if (origin < g->world_size) {
    struct {
      char name[GT_PARAM_NAME_MAX + 32];
      int dp, pp, tp;
    } msg = {{0}, g->dp_rank, g->pp_rank, g->tp_rank};
    snprintf(msg.name, sizeof msg.name, "%s", name);
    GT_CALL(gt_bcast_bytes(&msg, sizeof msg, origin, g->world));
    if (in_loss)
      snprintf(where, sizeof where, "the loss on rank %d (dp %d pp %d tp %d)", origin, msg.dp,
               msg.pp, msg.tp);
    else
      snprintf(where, sizeof where, "the gradient of %.48s on rank %d (dp %d pp %d tp %d)",
               msg.name, origin, msg.dp, msg.pp, msg.tp);
  }
  if (origin < g->world_size && !in_loss && bad_grads > 1)
    snprintf(where + strlen(where), sizeof where - strlen(where), " and %d other rank(s)%s",
             bad_grads - 1,
             g->dp_size > 1 ? " (the data-parallel sum spreads it to every replica)" : "");
  if (origin < g->world_size)
    gt_error_set(GT_ERR_NUMERIC, __FILE__, __LINE__, __func__,
                 "non-finite numbers at step %ld in %s (loss %g, gradient norm %g): bad "
                 "hardware numbers, or training diverged (lower [optim] lr or set grad_clip)",
                 step, where, loss, norm);
  else
    gt_error_set(GT_ERR_NUMERIC, __FILE__, __LINE__, __func__,
                 "training diverged at step %ld: loss %g, gradient norm %g; lower [optim] "
                 "lr or set [optim] grad_clip",
                 step, loss, norm);
  gt_error_set_collective(true); /* every rank took part in the same verdict */
  return GT_ERR_NUMERIC;
}
