/*
 * score.c - the loss of a checkpoint's model on token sequences, forward
 * only through the pipeline executor at any layout (score.h).
 */
#include "gridtrain/score.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/backend.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/collectives.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/hf_import.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grid.h"
#include "gridtrain/layout.h"
#include "gridtrain/pipeline.h"
#include "gridtrain/schedule.h"

struct gt_scorer {
  gt_layout layout;
  gt_grid *grid;
  gt_backend *be;
  gt_coll *coll;
  gt_gpt *model;
  int *stage_first;   /* pp V + 1: first block of every (virtual) stage */
  gt_ckpt_tensor *tensors;
  int T;              /* the model's context: the longest window */
  double *acc;        /* device: the loss sum of this rank's counted tokens */
  int32_t *tokens, *targets; /* host (mbs, T) each: a micro-batch */
};

/* A window: its first input token and its predictions (1 .. T). */
typedef struct {
  long long at;
  int len;
} gt_window;

// ---- set-up --------------------------------------------------------------------------

/* A failure to read the checkpoint is bad input (exit 2) whatever its
 * cause inside the file (a damaged block is an HDF5 error). */
static int gt_score_ckpt_error(int status, const char *path)
{
  if (status == GT_ERR_HDF5)
    return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                         "cannot read checkpoint %s", path);
  return status;
}

/* Backend and collectives on this rank's share of the node. Not collective. */
static int gt_score_device(gt_scorer *s, const gt_config *cfg)
{
  const gt_grid *g = s->grid;
  const int threads = gt_grid_threads(g, cfg->backend.threads);
  gt_grid_set_wait(g, threads, false, false);
  const gt_backend_options opt = {threads, g->node_rank, cfg->backend.attention};
  GT_CALL(gt_backend_create_device(cfg->backend.device, &opt, &s->be));
  GT_CALL(gt_coll_create(s->be, gt_tristate_names[cfg->backend.mpi_device], &s->coll));
  if (cfg->parallel.collectives == GT_COLLECTIVES_NCCL)
    GT_CALL(gt_coll_use_nccl(s->coll, &g->tp, 1));
  GT_CALL(s->be->ops->alloc(s->be, sizeof(double), (void **)&s->acc));
  return GT_SUCCESS;
}

/* This rank's stage of the model, one sequence per micro-batch slot up to
 * the layout's, whole weights (no ZeRO split), no sequence parallelism.
 * Not collective. */
static int gt_score_model(gt_scorer *s, const gt_config *cfg, const gt_gpt_shape *shape)
{
  const gt_grid *g = s->grid;
  const gt_layout *l = &s->layout;
  double block_cost, head_cost;
  gt_gpt_stage_costs(shape, s->T, &block_cost, &head_cost);
  GT_CALL(gt_schedule_plan(&l->schedule, cfg->parallel.stages, shape->layers, l->pp, block_cost,
                           head_cost, &s->stage_first));
  gt_gpt_part part = {.tp = {g->tp, g->tp_rank, g->tp_size, -1, s->coll},
                      .recompute = l->recompute,
                      .recompute_event = -1,
                      .seq_par = false};
  int cslots[GT_SCHEDULE_MAX_CHUNKS];
  const int slots = gt_schedule_chunk_slots(&l->schedule, g->pp_size, g->pp_rank, l->micro,
                                            cslots);
  gt_gpt_part_place(&part, s->stage_first, g->pp_size, g->pp_rank, l->schedule.chunks, cslots);
  GT_CALL(gt_gpt_create(s->be, shape, &part, NULL, l->dtype, l->mbs, s->T, slots, &s->model));
  const size_t n = (size_t)l->mbs * (size_t)s->T;
  s->tokens = malloc(sizeof(int32_t) * n);
  s->targets = malloc(sizeof(int32_t) * n);
  GT_CHECK(s->tokens && s->targets, GT_ERR_SYSTEM, "out of memory for token buffers");
  return GT_SUCCESS;
}

/* The checkpoint's weights into this rank's part (its stages' tensors, its
 * tp pieces), then the compute copy. Collective on the world. */
static int gt_score_load(gt_scorer *s, const gt_gpt_shape *shape, const char *ckpt)
{
  MPI_Comm world = s->grid->world;
  const int n = gt_gpt_logical_count(shape);
  s->tensors = calloc((size_t)n, sizeof *s->tensors);
  GT_CALL(gt_error_agree(s->tensors ? GT_SUCCESS
                                    : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the tensor list"),
                         world));
  for (int i = 0; i < n; i++)
    gt_gpt_logical_param(shape, i, s->tensors[i].name, &s->tensors[i].ndim, s->tensors[i].dims);
  gt_params *params = gt_gpt_params(s->model);
  /* the weights only: an empty range of the moments */
  const gt_ckpt_state st = {.ntensors = n, .tensors = s->tensors, .params = params,
                            .mlo = params->numel, .mhi = params->numel};
  /* a Hugging Face model directory: each rank reads its tensors from it */
  const int status =
      gt_error_agree(gt_hf_is_model_dir(ckpt) ? gt_hf_load_params(ckpt, params)
                                              : gt_ckpt_read(ckpt, &st, world),
                     world);
  GT_CALL(gt_score_ckpt_error(status, ckpt));
  GT_CALL(gt_error_agree(gt_params_refresh_compute(params), world));
  return GT_SUCCESS;
}

int gt_scorer_create(const gt_config *cfg, const char *ckpt, MPI_Comm world, gt_scorer **out)
{
  gt_scorer *s = calloc(1, sizeof *s);
  GT_CHECK_ALLOC(s, sizeof *s);
  *out = s;
  int ranks;
  GT_CALL_MPI(MPI_Comm_size(world, &ranks));
  int status = gt_layout_resolve(cfg, ranks, &s->layout); /* the same on every rank */
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  const int sizes[3] = {s->layout.dp, s->layout.pp, s->layout.tp};
  GT_CALL(gt_grid_create(world, sizes, &s->grid));
  s->T = (int)cfg->model.seq_len;
  const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
  GT_CALL(gt_error_agree(gt_score_device(s, cfg), s->grid->world));
  GT_CALL(gt_error_agree(gt_score_model(s, cfg, &shape), s->grid->world));
  GT_CALL(gt_score_load(s, &shape, ckpt));
  return GT_SUCCESS;
}

int gt_scorer_destroy(gt_scorer **sp)
{
  gt_scorer *s = *sp;
  if (!s)
    return GT_SUCCESS;
  int status = s->be ? s->be->ops->sync(s->be) : GT_SUCCESS;
  if (s->acc)
    s->be->ops->free(s->be, s->acc);
  gt_gpt_destroy(&s->model);
  gt_coll_destroy(&s->coll);
  gt_backend_destroy(&s->be);
  gt_grid_destroy(&s->grid);
  free(s->stage_first);
  free(s->tensors);
  free(s->tokens);
  free(s->targets);
  free(s);
  *sp = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- passes --------------------------------------------------------------------------

/* One pass of the pipeline: n windows of length L (n <= M B), B a
 * micro-batch; micro-batches past the windows repeat the first window and
 * do not count. */
typedef struct {
  gt_scorer *s;
  const int32_t *ids;
  const gt_window *w;
  int n, B, L;
} gt_score_pass;

static int gt_score_read(void *ctx, int mb, const int32_t **tokens, const int32_t **targets)
{
  const gt_score_pass *p = ctx;
  for (int b = 0; b < p->B; b++) {
    const int i = mb * p->B + b;
    const int32_t *x = p->ids + p->w[i < p->n ? i : 0].at;
    memcpy(p->s->tokens + (size_t)b * p->L, x, sizeof(int32_t) * (size_t)p->L);
    memcpy(p->s->targets + (size_t)b * p->L, x + 1, sizeof(int32_t) * (size_t)p->L);
  }
  *tokens = p->s->tokens;
  *targets = p->s->targets;
  return GT_SUCCESS;
}

static bool gt_score_counts(void *ctx, int mb)
{
  const gt_score_pass *p = ctx;
  return (mb + 1) * p->B <= p->n;
}

/* The windows w[0 .. n) (all of length L) through passes of M micro-batches
 * of B windows each, with a pipeline made for them; B > 1 only when n is a
 * multiple of M B. Collective on the replica's pp and tp groups. */
static int gt_score_windows(gt_scorer *s, const int32_t *ids, const gt_window *w, long long n,
                            int B, int L)
{
  const int M = s->layout.micro;
  const gt_grid *g = s->grid;
  double *acc = g->pp_rank == g->pp_size - 1 && g->tp_rank == 0 ? s->acc : NULL;
  gt_pipe *pipe = NULL;
  const gt_pipe_events none = {-1, -1, -1, -1}; /* evaluation is untimed */
  GT_CALL(gt_pipe_create(s->model, s->coll, g, &s->layout.schedule, M, B, L, none, &pipe));
  int status = GT_SUCCESS;
  for (long long first = 0; first < n && status == GT_SUCCESS; first += (long long)M * B) {
    const long long left = n - first;
    gt_score_pass p = {s, ids, w + first, left < (long long)M * B ? (int)left : M * B, B, L};
    const gt_pipe_feed feed = {.read = gt_score_read, .ctx = &p, .counts = gt_score_counts};
    status = gt_pipe_eval(pipe, &feed, acc);
  }
  gt_pipe_destroy(&pipe);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_window_cmp(const void *a, const void *b)
{
  const gt_window *x = a, *y = b;
  if (x->len != y->len)
    return x->len > y->len ? -1 : 1;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* This replica's windows: of the sequences' full windows and of their short
 * last windows (by length, longest first), every dp-th from its dp rank.
 * *nfull full ones first, then *nshort short ones, in *out (malloc'd).
 * *predicted: the predictions of every window of every replica. */
static int gt_score_plan(const gt_scorer *s, int nseq, const long long *start,
                         const long long *len, gt_window **out, long long *nfull,
                         long long *nshort, long long *predicted)
{
  const int T = s->T, dp = s->grid->dp_size, r = s->grid->dp_rank;
  long long full = 0, shorts = 0;
  *predicted = 0;
  for (int i = 0; i < nseq; i++) {
    const long long P = len[i] > 1 ? len[i] - 1 : 0;
    *predicted += P;
    full += P / T;
    shorts += P % T != 0;
  }
  gt_window *all = malloc(sizeof *all * (size_t)(full + shorts + 1));
  GT_CHECK_ALLOC(all, sizeof *all * (size_t)(full + shorts + 1));
  long long nf = 0, ns = 0;
  for (int i = 0; i < nseq; i++) {
    const long long P = len[i] > 1 ? len[i] - 1 : 0;
    for (long long t = 0; t < P; t += T) {
      const gt_window win = {start[i] + t, P - t < T ? (int)(P - t) : T};
      if (win.len == T)
        all[nf++] = win;
      else
        all[full + ns++] = win;
    }
  }
  qsort(all + full, (size_t)shorts, sizeof *all, gt_window_cmp);
  /* keep every dp-th of each kind, in place */
  long long k = 0;
  *nfull = *nshort = 0;
  for (long long i = r; i < full; i += dp, (*nfull)++)
    all[k++] = all[i];
  for (long long i = r; i < shorts; i += dp, (*nshort)++)
    all[k++] = all[full + i];
  *out = all;
  return GT_SUCCESS;
}

/* This replica's windows through the pipeline: the full ones in passes of
 * the layout's micro-batches while they fill one, the rest one window per
 * micro-batch, the short ones grouped by length. Collective on the
 * replica's pp and tp groups. */
static int gt_score_replica(gt_scorer *s, const int32_t *ids, const gt_window *w,
                            long long nfull, long long nshort)
{
  const long long per = (long long)s->layout.micro * s->layout.mbs;
  const long long big = s->layout.mbs > 1 ? nfull / per * per : 0;
  if (big > 0)
    GT_CALL(gt_score_windows(s, ids, w, big, s->layout.mbs, s->T));
  if (nfull > big)
    GT_CALL(gt_score_windows(s, ids, w + big, nfull - big, 1, s->T));
  for (long long i = nfull, j; i < nfull + nshort; i = j) {
    for (j = i + 1; j < nfull + nshort && w[j].len == w[i].len;)
      j++;
    GT_CALL(gt_score_windows(s, ids, w + i, j - i, 1, w[i].len));
  }
  return GT_SUCCESS;
}

int gt_scorer_run(gt_scorer *s, int nseq, const int32_t *ids, const long long *start,
                  const long long *len, double *loss_sum, long long *predicted)
{
  MPI_Comm world = s->grid->world;
  gt_backend *be = s->be;
  gt_window *w = NULL;
  long long nfull = 0, nshort = 0;
  int status = gt_score_plan(s, nseq, start, len, &w, &nfull, &nshort, predicted);
  if (status == GT_SUCCESS)
    status = be->ops->zero(be, s->acc, sizeof(double));
  if (status == GT_SUCCESS)
    status = gt_score_replica(s, ids, w, nfull, nshort);
  free(w);
  double sum = 0;
  if (status == GT_SUCCESS)
    status = be->ops->download(be, &sum, s->acc, sizeof sum, NULL);
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  GT_CALL(gt_error_agree(status, world));
  const gt_grid *g = s->grid;
  if (!(g->pp_rank == g->pp_size - 1 && g->tp_rank == 0))
    sum = 0; /* one rank of each replica's last stage counts */
  GT_CALL(gt_allreduce_f64(&sum, 1, MPI_SUM, world));
  *loss_sum = sum;
  return GT_SUCCESS;
}
