/*
 * memory.c - the memory account (see memory.h): arithmetic on a resolved
 * layout, without MPI or a device. It lives with the planner, below the
 * trainer: the cost model ranks layouts by it, `plan --memory` prints it,
 * and the trainer's start-up table uses its formulas and rows.
 */
#include "gridtrain/memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/dp.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grad_shards.h"
#include "gridtrain/log.h"
#include "gridtrain/param_gather.h"
#include "gridtrain/schedule.h"

void gt_mem_model_state(double psi, gt_dtype dt, int zero, int dp, gt_mem_account *a)
{
  const double n = dp > 1 ? (double)dp : 1.0;
  const double c = dt == GT_F32 ? 0.0 : (double)gt_dtype_size(dt);
  a->psi = psi;
  /* the compute copy is whole below stage 3 (the forward reads it all) */
  a->compute = zero >= 3 ? c * psi / n : c * psi;
  /* fp32: the master is the compute copy, whole below stage 3 */
  a->master = (dt == GT_F32 ? zero >= 3 : zero >= 1) ? 4.0 * psi / n : 4.0 * psi;
  a->grads = zero >= 2 ? 4.0 * psi / n : 4.0 * psi;
  a->moments = zero >= 1 ? 8.0 * psi / n : 8.0 * psi;
}

void gt_mem_add_stash(gt_mem_account *a, const gt_schedule *sched, gt_dtype dt, int zero)
{
  if (!gt_schedule_streams(sched))
    return;
  a->compute += (double)gt_dtype_size(dt) * a->psi;
  if (zero == 0) /* the deferred update's second gradient buffer */
    a->grads += 4.0 * a->psi;
}

double gt_mem_model_total(const gt_mem_account *a)
{
  return a->compute + a->master + a->grads + a->moments;
}

double gt_mem_act_total(const gt_mem_account *a)
{
  return a->act_slot * (double)a->in_flight + a->act_shared;
}

double gt_mem_total(const gt_mem_account *a)
{
  return gt_mem_model_total(a) + gt_mem_act_total(a) + a->comm + a->grad_bufs + a->gather_bufs;
}

/* The parameter terms of stage s: its parameter elements and ZeRO's
 * reduction and gather buffers. */
static int gt_mem_stage_params(const gt_gpt_shape *shape, const gt_gpt_part *part,
                               const gt_params_split *split, gt_dtype dt, int zero,
                               gt_mem_params *p)
{
  size_t psi = 0, largest = 0, second = 0, tied = 0;
  GT_CALL(gt_gpt_plan_params(shape, part, split, dt, &psi, &largest, &second, &tied));
  p->psi = (double)psi;
  p->grad_bufs = zero >= 2
                     ? (double)gt_grad_shards_plan_bytes(largest, second, tied, GT_GRAD_SHARDS_POOL)
                     : 0.0;
  p->gather_bufs = 0.0;
  if (zero >= 3) {
    size_t bufs[GT_GPT_GATHER_BUFS];
    GT_CALL(gt_gpt_plan_gather(shape, part, split, dt, bufs));
    p->gather_bufs = (double)gt_param_gather_plan_bytes(bufs, GT_GPT_GATHER_BUFS, dt);
  }
  return GT_SUCCESS;
}

/* The account of stage s (gt_mem_plan). */
static int gt_mem_plan_stage(const gt_gpt_shape *shape, const gt_layout *l, const int *first,
                             int s, bool staged, gt_mem_params_find find, void *ctx,
                             gt_mem_account *a)
{
  const int dp = l->dp, pp = l->pp, tp = l->tp, T = shape->max_seq;
  const gt_dtype dt = l->dtype;
  gt_gpt_part part = {.tp = {MPI_COMM_NULL, 0, tp, -1, NULL},
                      .recompute = l->recompute,
                      .recompute_event = -1,
                      .seq_par = l->seq_par,
                      .split_sets = gt_schedule_w_backlog(&l->schedule, l->pp, s, l->micro)};
  const gt_params_split split = gt_dp_params_split(l->zero, 0, dp);
  memset(a, 0, sizeof *a);
  int cslots[GT_SCHEDULE_MAX_CHUNKS];
  const int slots = gt_schedule_chunk_slots(&l->schedule, pp, s, l->micro, cslots);
  gt_gpt_part_place(&part, first, pp, s, l->schedule.chunks, cslots);
  gt_mem_params own, *p = &own;
  bool found = false;
  if (find) {
    const int sizes[3] = {dp, pp, tp};
    p = find(ctx, sizes, l->schedule.chunks, l->zero, dt, s, &found);
    GT_CHECK_ALLOC(p, sizeof *p);
  }
  if (!found)
    GT_CALL(gt_mem_stage_params(shape, &part, &split, dt, l->zero, p));
  size_t act = 0, slot = 0;
  GT_CALL(gt_gpt_plan(shape, &part, dt, l->mbs, T, slots, &act, &slot));
  gt_mem_model_state(p->psi, dt, l->zero, dp, a);
  gt_mem_add_stash(a, &l->schedule, dt, l->zero);
  a->grad_bufs = p->grad_bufs, a->gather_bufs = p->gather_bufs;
  a->act_slot = (double)slot;
  a->in_flight = slots;
  a->act_shared = (double)act - (double)slot * slots;
  /* staged: one pinned buffer per gradient bucket (together the gradients)
   * when dp > 1, and the pipeline's activation and gradient slots */
  if (staged)
    a->comm = (dp > 1 ? a->grads : 0.0) +
              (pp > 1 ? 2.0 * slots * (double)l->mbs * T * shape->dim * gt_dtype_size(dt)
                      : 0.0) +
              a->gather_bufs; /* each gather buffer's staging room */
  return GT_SUCCESS;
}

bool gt_mem_staged(const gt_config *cfg)
{
  const bool device_memory =
      cfg->backend.device == GT_DEVICE_CUDA || cfg->backend.device == GT_DEVICE_CPU_GUARD;
  return cfg->backend.mpi_device == GT_TRI_OFF ||
         (cfg->backend.mpi_device == GT_TRI_AUTO && device_memory);
}

int gt_mem_plan_cached(const gt_config *cfg, const gt_layout *l, bool staged,
                       gt_mem_account *stages, int max_stages, gt_mem_params_find find,
                       void *ctx)
{
  const int pp = l->pp;
  GT_CHECK(pp <= max_stages, GT_ERR_INPUT, "pp = %d: more stages than %d", pp, max_stages);
  const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
  double block_cost, head_cost;
  gt_gpt_stage_costs(&shape, shape.max_seq, &block_cost, &head_cost);
  int *first = NULL;
  int status = gt_schedule_plan(&l->schedule, cfg->parallel.stages, shape.layers, pp,
                                block_cost, head_cost, &first);
  for (int s = 0; s < pp && status == GT_SUCCESS; s++)
    status = gt_mem_plan_stage(&shape, l, first, s, staged, find, ctx, &stages[s]);
  free(first);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_mem_plan(const gt_config *cfg, const gt_layout *l, bool staged, gt_mem_account *stages,
                int max_stages)
{
  return gt_mem_plan_cached(cfg, l, staged, stages, max_stages, NULL, NULL);
}

static const char *const gt_mem_heads[] = {"compute w", "master w", "gradients", "moments",
                                           "act/mb",    "in flight", "act total", "comm bufs",
                                           "gather",    "total"};

void gt_mem_print_header(FILE *out, const char *what, gt_dtype dt, const char *label)
{
  fprintf(out, "# memory per rank, expected (%s)\n", what);
  if (dt == GT_F32)
    fprintf(out, "#   fp32: the compute weights are the master weights (counted there)\n");
  fprintf(out, "# %-12s", label);
  for (size_t k = 0; k < sizeof gt_mem_heads / sizeof *gt_mem_heads; k++)
    fprintf(out, " %11s", gt_mem_heads[k]);
  fprintf(out, "\n");
}

void gt_mem_print_row(FILE *out, const char *label, const gt_mem_account *a)
{
  const double v[] = {a->compute,          a->master, a->grads + a->grad_bufs,
                      a->moments,          a->act_slot, -1,
                      gt_mem_act_total(a), a->comm,     a->gather_bufs,
                      gt_mem_total(a)};
  fprintf(out, "  %-12s", label);
  for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
    char b[32];
    if (v[k] < 0)
      snprintf(b, sizeof b, "%d", a->in_flight);
    else
      gt_format_bytes(v[k], b, sizeof b);
    fprintf(out, " %11s", b);
  }
  fprintf(out, "\n");
}

double gt_mem_rss_peak(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  double kib = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) {
      kib = strtod(line + 6, NULL);
      break;
    }
  fclose(f);
  return kib * 1024.0;
}
