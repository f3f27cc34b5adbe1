/*
 * trainer.c - set-up and the training loop (see trainer.h).
 */
#include "gridtrain/trainer.h"

#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/backend.h"
#include "gridtrain/buckets.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/comm.h"
#include "gridtrain/data.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/log.h"
#include "gridtrain/optim.h"
#include "gridtrain/schedule.h"
#include "gridtrain/signals.h"
#include "gridtrain/timer.h"
#include "gridtrain/version.h"

struct gt_trainer {
  gt_config cfg;
  gt_grid *grid;
  gt_backend *be;
  gt_gpt *model;
  gt_adamw *opt;
  gt_adamw_config opt_cfg;
  gt_dataset *train, *val;
  gt_metrics *metrics;

  int T;          /* tokens per sequence */
  int B;          /* global batch, sequences */
  int B_rank;     /* sequences per DP rank and step */
  int B_micro;    /* sequences per micro-batch */
  int M;          /* micro-batches */
  int threads;
  long step;      /* next step to run */
  long long samples; /* data-stream position: sequences consumed before step */
  double last_loss;  /* loss of the last step run (NaN before any) */
  long start_step;   /* the step this run started at (after a resume) */
  gt_ckpt_tensor *tensors; /* every logical parameter, for checkpoints */
  MPI_Comm writers;        /* dp rank 0 of every (pp, tp) position; else NULL */
  int ntensors;
  int32_t *window, *tokens, *targets; /* host (B_micro, T+1), (B_micro, T) x 2 */

  /* pipeline */
  gt_gpt_shape shape;
  int *stage_first;       /* pp + 1: first block of every stage */
  gt_schedule_kind schedule;
  gt_pipe_op *ops;        /* 2 M operations of this stage */
  int nslots;             /* micro-batches in flight at most */
  MPI_Request *reqs;      /* 4 per slot: recv act, send act, recv grad, send grad */
  int live, peak_live;    /* micro-batches holding activations */

  /* data parallelism */
  gt_buckets *buckets;
  bool overlap;
  gt_grad_hook hook;

  struct {
    int data, forward, backward, zero, tp_comm, pp_comm, bubble, dp_exposed, tied, reduce,
        norm, optimizer, eval, checkpoint;
  } ev;
};

enum { GT_REQ_RECV_ACT = 0, GT_REQ_SEND_ACT, GT_REQ_RECV_GRAD, GT_REQ_SEND_GRAD };

/* Every rank reaches each set-up phase; a failure on any rank becomes the
 * same collective error on all of them. */
#define GT_AGREE(comm, expr)                                                               \
  do {                                                                                     \
    int gt_agree_status_ = (expr);                                                         \
    GT_CALL(gt_error_agree(gt_agree_status_, comm));                                       \
  } while (0)

static int gt_trainer_resume(gt_trainer *tr, bool quiet);

// ---- set-up ----------------------------------------------------------------------------

static int gt_resolve_threads(const gt_config *cfg, const gt_grid *g)
{
  if (cfg->backend.threads > 0)
    return (int)cfg->backend.threads;
  const char *env = getenv("OMP_NUM_THREADS");
  if (env && atoi(env) > 0)
    return atoi(env);
  int t = g->node_cores / g->node_size;
  return t >= 1 ? t : 1;
}

static int gt_check_data(const gt_trainer *tr, const gt_dataset *ds, long needed_seqs)
{
  const gt_config *cfg = &tr->cfg;
  GT_CHECK(gt_dataset_vocab(ds) <= cfg->model.vocab, GT_ERR_INPUT,
           "dataset %s has vocab_size %ld but [model] vocab = %ld; set [model] vocab to at "
           "least %ld",
           gt_dataset_name(ds), gt_dataset_vocab(ds), cfg->model.vocab, gt_dataset_vocab(ds));
  long long nseq = gt_dataset_nseq(ds, tr->T);
  GT_CHECK(nseq >= needed_seqs, GT_ERR_INPUT,
           "dataset %s has %lld tokens: %lld sequences of seq_len+1 = %d tokens, fewer than "
           "one batch of %ld; use more data or a smaller [data] batch or [model] seq_len",
           gt_dataset_name(ds), gt_dataset_ntokens(ds), nseq, tr->T + 1, needed_seqs);
  return GT_SUCCESS;
}

/* Rank 0: the configuration and what was resolved from it, as one table. */
static void gt_print_setup(const gt_trainer *tr, size_t params_max, size_t act_max)
{
  const gt_grid *g = tr->grid;
  const gt_config *cfg = &tr->cfg;
  if (g->world_rank != 0)
    return;
  char act[32], par[32], v[GT_PATH_MAX + 64];
  gt_format_bytes((double)act_max, act, sizeof act);
  gt_format_bytes(4.0 * 4.0 * (double)params_max, par, sizeof par);
  printf("gridtrain %s: configuration (%s) and layout\n", PACKAGE_VERSION,
         cfg->deck_path[0] ? cfg->deck_path : "defaults");
  gt_config_print_table(cfg, stdout);
  snprintf(v, sizeof v, "dp=%d x pp=%d x tp=%d", g->dp_size, g->pp_size, g->tp_size);
  gt_config_print_row(stdout, "layout", v, "resolved");
  if (g->pp_size > 1) {
    int n = snprintf(v, sizeof v, "blocks");
    for (int s = 0; s < g->pp_size && n < (int)sizeof v - 16; s++)
      n += snprintf(v + n, sizeof v - (size_t)n, "%s%d-%d", s ? ", " : " ", tr->stage_first[s],
                    tr->stage_first[s + 1] - 1);
    snprintf(v + n, sizeof v - (size_t)n, "; %s schedule",
             gt_schedule_name(tr->schedule));
    gt_config_print_row(stdout, "pipeline stages", v, "resolved");
  }
  snprintf(v, sizeof v, "%d (%d per node, %d cores per node)", g->world_size, g->node_size,
           g->node_cores);
  gt_config_print_row(stdout, "ranks", v, "resolved");
  snprintf(v, sizeof v, "%d", tr->threads);
  gt_config_print_row(stdout, "threads per rank", v, "resolved");
  gt_config_print_row(stdout, "mpi waits",
                      gt_comm_get_wait_mode() == GT_WAIT_YIELD ? "yield (oversubscribed)"
                                                               : "busy-poll",
                      "resolved");
  snprintf(v, sizeof v, "%.2fM; at most %.2fM on a rank (%s with grads and AdamW)",
           (double)gt_gpt_param_count(&tr->shape) / 1e6, (double)params_max / 1e6, par);
  gt_config_print_row(stdout, "parameters", v, "resolved");
  snprintf(v, sizeof v, "%s at most on a rank (micro-batch %d x %d)", act, tr->B_micro,
           tr->T);
  gt_config_print_row(stdout, "activations", v, "resolved");
  snprintf(v, sizeof v, "%d tokens = %d x %d; %d seq per dp rank in %d micro-batch%s",
           tr->B * tr->T, tr->B, tr->T, tr->B_rank, tr->M, tr->M == 1 ? "" : "es");
  gt_config_print_row(stdout, "step", v, "resolved");
  if (g->dp_size > 1) {
    snprintf(v, sizeof v, "%d bucket%s on rank 0, %s", gt_buckets_count(tr->buckets),
             gt_buckets_count(tr->buckets) == 1 ? "" : "s",
             tr->overlap ? "overlapping the last backward" : "after backward");
    gt_config_print_row(stdout, "dp all-reduce", v, "resolved");
  }
  snprintf(v, sizeof v, "%s (%lld tokens, vocab %ld)", gt_dataset_name(tr->train),
           gt_dataset_ntokens(tr->train), gt_dataset_vocab(tr->train));
  gt_config_print_row(stdout, "train data", v, "file");
  if (tr->val) {
    snprintf(v, sizeof v, "%s (%lld tokens)", gt_dataset_name(tr->val),
             gt_dataset_ntokens(tr->val));
    gt_config_print_row(stdout, "val data", v, "file");
  }
  snprintf(v, sizeof v, "%s; BLAS %s", tr->be->name, gt_backend_blas_info());
  gt_config_print_row(stdout, "backend", v, "resolved");
  fflush(stdout);
  if (gt_backend_blas_warning())
    gt_warn("%s", gt_backend_blas_warning());
}

static int gt_trainer_bucket_ready(void *ctx, int first, int count)
{
  return gt_buckets_ready(((gt_trainer *)ctx)->buckets, first, count);
}

static int gt_trainer_bucket_progress(void *ctx)
{
  return gt_buckets_progress(((gt_trainer *)ctx)->buckets);
}

/* The stage split and schedule; errors are the same on every rank. */
static int gt_trainer_plan(gt_trainer *tr)
{
  const gt_grid *g = tr->grid;
  const int p = g->pp_size;
  tr->stage_first = malloc(sizeof(int) * (size_t)(p + 1));
  tr->ops = malloc(sizeof(gt_pipe_op) * 2 * (size_t)tr->M);
  GT_CHECK(tr->stage_first && tr->ops, GT_ERR_SYSTEM, "out of memory for the schedule");
  double block_cost, head_cost;
  gt_gpt_stage_costs(&tr->shape, tr->T, &block_cost, &head_cost);
  GT_CALL(gt_pipeline_split(tr->shape.layers, p, block_cost, head_cost, tr->cfg.parallel.stages,
                            tr->stage_first));
  GT_CALL(gt_schedule_parse(tr->cfg.parallel.schedule, &tr->schedule));
  GT_CALL(gt_schedule_build(tr->schedule, p, g->pp_rank, tr->M, tr->ops));
  tr->nslots = gt_schedule_in_flight(tr->schedule, p, g->pp_rank, tr->M);
  tr->reqs = malloc(sizeof(MPI_Request) * 4 * (size_t)tr->nslots);
  GT_CHECK_ALLOC(tr->reqs, sizeof(MPI_Request) * 4 * (size_t)tr->nslots);
  for (int i = 0; i < 4 * tr->nslots; i++)
    tr->reqs[i] = MPI_REQUEST_NULL;
  return GT_SUCCESS;
}

int gt_trainer_create(const gt_config *cfg, MPI_Comm world, bool quiet, gt_trainer **trainer)
{
  gt_trainer *tr = calloc(1, sizeof *tr);
  GT_CHECK_ALLOC(tr, sizeof *tr);
  *trainer = tr;
  tr->writers = MPI_COMM_NULL;
  tr->cfg = *cfg;
  GT_CALL(gt_grid_create(cfg, world, &tr->grid));
  const gt_grid *g = tr->grid;
  MPI_Comm comm = g->world;

  tr->T = (int)cfg->model.seq_len;
  tr->B = (int)cfg->data.batch;
  tr->M = (int)cfg->data.microbatches;
  tr->B_rank = tr->B / g->dp_size;
  tr->B_micro = tr->B_rank / tr->M;
  tr->shape = (gt_gpt_shape){(int)cfg->model.layers, (int)cfg->model.heads,
                             (int)cfg->model.dim, (int)cfg->model.seq_len,
                             (int)cfg->model.vocab};
  tr->threads = gt_resolve_threads(cfg, g);
  const bool oversubscribed = (long)g->node_size * tr->threads > g->node_cores;
  if (strcmp(cfg->parallel.wait, "yield") == 0 ||
      (strcmp(cfg->parallel.wait, "auto") == 0 && oversubscribed))
    gt_comm_set_wait_mode(GT_WAIT_YIELD);
  else
    gt_comm_set_wait_mode(GT_WAIT_BUSY);

  int status = gt_trainer_plan(tr);
  if (status != GT_SUCCESS && status != GT_ERR_SYSTEM)
    gt_error_set_collective(true); /* same configuration, same error everywhere */
  GT_AGREE(comm, status);
  GT_AGREE(comm, gt_backend_create(cfg->backend.device, tr->threads, &tr->be));
  GT_AGREE(comm, cfg->run.eval_every > 0 && !cfg->data.val[0]
                     ? GT_ERROR(GT_ERR_INPUT,
                                "[run] eval_every = %ld needs a validation set: set [data] "
                                "val (or eval_every = 0)",
                                cfg->run.eval_every)
                     : GT_SUCCESS);

  GT_CALL(gt_dataset_open(cfg->data.train, "/train/tokens", comm, &tr->train));
  GT_AGREE(comm, gt_check_data(tr, tr->train, tr->B));
  if (cfg->data.val[0]) {
    GT_CALL(gt_dataset_open(cfg->data.val, "/val/tokens", comm, &tr->val));
    GT_AGREE(comm, gt_check_data(tr, tr->val, tr->B_micro));
  }

  tr->ev.data = gt_event("data", GT_EV_DATA);
  tr->ev.forward = gt_event("forward", GT_EV_COMPUTE);
  tr->ev.backward = gt_event("backward", GT_EV_COMPUTE);
  tr->ev.tp_comm = gt_event("tp.comm", GT_EV_COMM);
  tr->ev.pp_comm = gt_event("pp.comm", GT_EV_COMM);
  tr->ev.bubble = gt_event("pp.bubble", GT_EV_IDLE);
  tr->ev.dp_exposed = gt_event("dp.exposed", GT_EV_COMM);
  tr->ev.tied = gt_event("tied.allreduce", GT_EV_COMM);
  tr->ev.reduce = gt_event("loss_norm.allreduce", GT_EV_COMM);
  tr->ev.zero = gt_event("zero_grad", GT_EV_COMPUTE);
  tr->ev.norm = gt_event("grad_norm", GT_EV_COMPUTE);
  tr->ev.optimizer = gt_event("optimizer", GT_EV_COMPUTE);
  tr->ev.eval = gt_event("eval", GT_EV_OTHER);
  tr->ev.checkpoint = gt_event("checkpoint", GT_EV_OTHER);

  const int s = g->pp_rank;
  gt_gpt_part part = {tr->stage_first[s], tr->stage_first[s + 1], s == 0,
                      s == g->pp_size - 1,
                      {g->tp, g->tp_rank, g->tp_size, tr->ev.tp_comm}};
  GT_AGREE(comm, gt_gpt_create(tr->be, &tr->shape, &part, tr->B_micro, tr->T, tr->nslots,
                               &tr->model));
  GT_AGREE(comm, gt_gpt_init(tr->model, cfg->run.seed));
  gt_params *params = gt_gpt_params(tr->model);
  tr->opt_cfg = (gt_adamw_config){cfg->optim.lr,        cfg->optim.min_lr,
                                  cfg->optim.warmup,    cfg->run.steps,
                                  cfg->optim.weight_decay, cfg->optim.beta1,
                                  cfg->optim.beta2,     cfg->optim.eps,
                                  cfg->optim.grad_clip};
  GT_AGREE(comm, gt_adamw_create(params, &tr->opt_cfg, &tr->opt));
  GT_AGREE(comm, gt_buckets_create(params, g->dp,
                                   (size_t)(cfg->parallel.bucket_mb * 1024.0 * 1024.0),
                                   &tr->buckets));
  tr->overlap = strcmp(cfg->parallel.dp_overlap, "on") == 0;
  tr->hook = (gt_grad_hook){gt_trainer_bucket_ready, tr, {gt_trainer_bucket_progress, tr}};

  size_t n = (size_t)tr->B_micro * (size_t)(tr->T + 1);
  tr->window = malloc(sizeof(int32_t) * n);
  tr->tokens = malloc(sizeof(int32_t) * n);
  tr->targets = malloc(sizeof(int32_t) * n);
  GT_AGREE(comm, tr->window && tr->tokens && tr->targets
                     ? GT_SUCCESS
                     : GT_ERROR(GT_ERR_SYSTEM, "out of memory for token buffers"));
  tr->ntensors = gt_gpt_logical_count(&tr->shape);
  tr->tensors = calloc((size_t)tr->ntensors, sizeof *tr->tensors);
  GT_AGREE(comm, tr->tensors ? GT_SUCCESS
                             : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the tensor list"));
  for (int i = 0; i < tr->ntensors; i++)
    gt_gpt_logical_param(&tr->shape, i, tr->tensors[i].name, &tr->tensors[i].ndim,
                         tr->tensors[i].dims);
  tr->last_loss = NAN;
  GT_CALL_MPI(MPI_Comm_split(comm, g->dp_rank == 0 ? 0 : MPI_UNDEFINED, g->world_rank,
                             &tr->writers));
  if (tr->writers != MPI_COMM_NULL)
    GT_CALL_MPI(MPI_Comm_set_errhandler(tr->writers, MPI_ERRORS_RETURN));
  if (cfg->checkpoint.dir[0])
    GT_CALL(gt_ckpt_dir_prepare(cfg->checkpoint.dir, comm));

  /* The largest rank decides what fits: report it. */
  double most[2] = {(double)params->numel, (double)gt_gpt_activation_bytes(tr->model)};
  GT_CALL(gt_allreduce_f64(most, 2, MPI_MAX, comm));
  if (!quiet)
    gt_print_setup(tr, (size_t)most[0], (size_t)most[1]);
  GT_CALL(gt_trainer_resume(tr, quiet));
  tr->start_step = tr->step;
  /* A resumed run adds to the metrics of the run it continues. */
  GT_AGREE(comm, g->world_rank == 0
                     ? gt_metrics_open(cfg->run.metrics, tr->step > 0, &tr->metrics)
                     : GT_SUCCESS);
  return GT_SUCCESS;
}

int gt_trainer_destroy(gt_trainer **trainer)
{
  gt_trainer *tr = *trainer;
  if (!tr)
    return GT_SUCCESS;
  gt_metrics_close(&tr->metrics);
  if (tr->val)
    gt_dataset_close(&tr->val);
  if (tr->train)
    gt_dataset_close(&tr->train);
  gt_buckets_destroy(&tr->buckets);
  gt_adamw_destroy(&tr->opt);
  gt_gpt_destroy(&tr->model);
  gt_backend_destroy(&tr->be);
  free(tr->window);
  free(tr->tokens);
  free(tr->targets);
  free(tr->stage_first);
  free(tr->ops);
  free(tr->reqs);
  free(tr->tensors);
  if (tr->writers != MPI_COMM_NULL)
    MPI_Comm_free(&tr->writers);
  gt_grid_destroy(&tr->grid);
  free(tr);
  *trainer = NULL;
  return GT_SUCCESS;
}

gt_params *gt_trainer_params(gt_trainer *tr) { return gt_gpt_params(tr->model); }

const gt_grid *gt_trainer_grid(const gt_trainer *tr) { return tr->grid; }

// ---- data ----------------------------------------------------------------------------------

/* Read the B_micro sequences of micro-batch mb of the global batch that
 * starts at sample `base` into tokens and targets. Only the first and last
 * stages need them. */
static int gt_read_microbatch(gt_trainer *tr, gt_dataset *ds, bool shuffle, long long base,
                              int mb)
{
  const gt_grid *g = tr->grid;
  long long first = base + (long long)g->dp_rank * tr->B_rank + (long long)mb * tr->B_micro;
  gt_event_begin(tr->ev.data);
  int status = gt_dataset_read_samples(ds, tr->T, shuffle, tr->cfg.run.seed, first,
                                       tr->B_micro, tr->cfg.model.vocab, tr->window);
  if (status == GT_SUCCESS)
    for (int b = 0; b < tr->B_micro; b++) {
      const int32_t *w = tr->window + (size_t)b * (tr->T + 1);
      memcpy(tr->tokens + (size_t)b * tr->T, w, sizeof(int32_t) * (size_t)tr->T);
      memcpy(tr->targets + (size_t)b * tr->T, w + 1, sizeof(int32_t) * (size_t)tr->T);
    }
  gt_event_end(tr->ev.data);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- the pipeline ---------------------------------------------------------------------------

#define GT_TAG_ACT(mb) (2 * (mb))
#define GT_TAG_GRAD(mb) (2 * (mb) + 1)

/* Complete a request, timed under event ev (nothing when already complete). */
static int gt_wait_timed(MPI_Request *req, int ev)
{
  if (*req == MPI_REQUEST_NULL)
    return GT_SUCCESS;
  gt_event_begin(ev);
  int status = gt_comm_wait(req);
  gt_event_end(ev);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* One forward of micro-batch mb in its slot: receive the input (stages
 * after the first), compute, send the output and pre-post the receive of
 * its gradient (stages before the last). */
static int gt_pipe_forward(gt_trainer *tr, int mb, float grad_scale, double *loss_sum)
{
  const gt_grid *g = tr->grid;
  const bool first = g->pp_rank == 0, last = g->pp_rank == g->pp_size - 1;
  const int slot = mb % tr->nslots;
  const size_t n = (size_t)tr->B_micro * tr->T * tr->shape.dim;
  MPI_Request *rq = &tr->reqs[4 * slot];
  if (first || last)
    GT_CALL(gt_read_microbatch(tr, tr->train, true, tr->samples, mb));
  if (!first)
    GT_CALL(gt_wait_timed(&rq[GT_REQ_RECV_ACT], tr->ev.bubble));
  /* The slot takes a new micro-batch: the sends of its previous one (output
   * and input gradient) must be out before its buffers are written again. */
  GT_CALL(gt_wait_timed(&rq[GT_REQ_SEND_ACT], tr->ev.pp_comm));
  GT_CALL(gt_wait_timed(&rq[GT_REQ_SEND_GRAD], tr->ev.pp_comm));
  double l;
  gt_event_begin(tr->ev.forward);
  int status = gt_gpt_forward(tr->model, slot, tr->tokens, tr->targets, tr->B_micro, tr->T,
                              grad_scale, &l);
  gt_event_end(tr->ev.forward);
  GT_CALL(status);
  *loss_sum += l;
  if (++tr->live > tr->peak_live)
    tr->peak_live = tr->live;
  if (!last) {
    gt_event_begin(tr->ev.pp_comm);
    status = gt_p2p_isend(gt_gpt_output(tr->model, slot), n, g->pp_rank + 1, GT_TAG_ACT(mb),
                          g->pp, &rq[GT_REQ_SEND_ACT]);
    if (status == GT_SUCCESS)
      status = gt_p2p_irecv(gt_gpt_grad(tr->model, slot), n, g->pp_rank + 1, GT_TAG_GRAD(mb),
                            g->pp, &rq[GT_REQ_RECV_GRAD]);
    gt_event_end(tr->ev.pp_comm);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

/* One backward of micro-batch mb: wait for the gradient of the output
 * (stages before the last), compute (the last micro-batch feeds the DP
 * buckets), send the input gradient back and pre-post the receive of the
 * input of the micro-batch that takes over the slot. */
static int gt_pipe_backward(gt_trainer *tr, int mb)
{
  const gt_grid *g = tr->grid;
  const bool first = g->pp_rank == 0, last = g->pp_rank == g->pp_size - 1;
  const int slot = mb % tr->nslots;
  const size_t n = (size_t)tr->B_micro * tr->T * tr->shape.dim;
  MPI_Request *rq = &tr->reqs[4 * slot];
  if (!last)
    GT_CALL(gt_wait_timed(&rq[GT_REQ_RECV_GRAD], tr->ev.bubble));
  const bool feed = mb == tr->M - 1 && tr->overlap && g->dp_size > 1;
  gt_event_begin(tr->ev.backward);
  int status = gt_gpt_backward(tr->model, slot, feed ? &tr->hook : NULL);
  gt_event_end(tr->ev.backward);
  GT_CALL(status);
  tr->live--;
  if (!first) {
    gt_event_begin(tr->ev.pp_comm);
    status = gt_p2p_isend(gt_gpt_grad(tr->model, slot), n, g->pp_rank - 1, GT_TAG_GRAD(mb),
                          g->pp, &rq[GT_REQ_SEND_GRAD]);
    if (status == GT_SUCCESS && mb + tr->nslots < tr->M)
      status = gt_p2p_irecv(gt_gpt_input(tr->model, slot), n, g->pp_rank - 1,
                            GT_TAG_ACT(mb + tr->nslots), g->pp, &rq[GT_REQ_RECV_ACT]);
    gt_event_end(tr->ev.pp_comm);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

/* This stage's schedule for one step. *loss_sum gets the stage's sum of
 * token losses (non-zero on the last stage only). */
static int gt_run_pipeline(gt_trainer *tr, float grad_scale, double *loss_sum)
{
  const gt_grid *g = tr->grid;
  const size_t n = (size_t)tr->B_micro * tr->T * tr->shape.dim;
  *loss_sum = 0;
  tr->live = 0;
  if (g->pp_rank > 0) { /* pre-post the first inputs */
    gt_event_begin(tr->ev.pp_comm);
    int status = GT_SUCCESS;
    for (int k = 0; k < tr->nslots && k < tr->M && status == GT_SUCCESS; k++)
      status = gt_p2p_irecv(gt_gpt_input(tr->model, k), n, g->pp_rank - 1, GT_TAG_ACT(k), g->pp,
                            &tr->reqs[4 * k + GT_REQ_RECV_ACT]);
    gt_event_end(tr->ev.pp_comm);
    GT_CALL(status);
  }
  for (int i = 0; i < 2 * tr->M; i++) {
    if (tr->ops[i].backward)
      GT_CALL(gt_pipe_backward(tr, tr->ops[i].mb));
    else
      GT_CALL(gt_pipe_forward(tr, tr->ops[i].mb, grad_scale, loss_sum));
  }
  /* The schedule is done: what remains is waiting for the other stages
   * (a send completes only once its receiver takes it, and stages finish
   * at different times), the bubble at the end of the step. */
  for (int i = 0; i < 4 * tr->nslots; i++)
    GT_CALL(gt_wait_timed(&tr->reqs[i], tr->ev.bubble));
  if (g->pp_size > 1) {
    gt_event_begin(tr->ev.bubble);
    int status = gt_barrier(g->pp);
    gt_event_end(tr->ev.bubble);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

// ---- one step ----------------------------------------------------------------------------

/* Sum over the world of (the last stage's loss sums, the squared gradient
 * norm of every parameter counted once). Every rank gets the same values. */
static int gt_reduce_loss_and_norm(gt_trainer *tr, double loss_sum, bool with_norm,
                                   double out[2])
{
  const gt_grid *g = tr->grid;
  gt_params *params = gt_gpt_params(tr->model);
  const bool last = g->pp_rank == g->pp_size - 1;
  double mine[2] = {last && g->tp_rank == 0 ? loss_sum : 0.0, 0.0};
  if (with_norm && g->dp_rank == 0) { /* dp replicas hold the same gradients */
    gt_event_begin(tr->ev.norm);
    /* One sumsq per run of consecutive owned parameters (the alignment
     * gaps between them hold zeros): a single call when every parameter
     * here is owned. */
    int status = GT_SUCCESS;
    for (int i = 0; i < params->count && status == GT_SUCCESS;) {
      if (!params->list[i].owner) {
        i++;
        continue;
      }
      int j = i;
      while (j < params->count && params->list[j].owner)
        j++;
      const size_t begin = params->list[i].offset;
      const size_t end = params->list[j - 1].offset + params->list[j - 1].numel;
      double ss = 0;
      status = tr->be->ops->sumsq(tr->be, params->grads + begin, end - begin, &ss);
      mine[1] += ss;
      i = j;
    }
    gt_event_end(tr->ev.norm);
    GT_CALL(status);
  }
  gt_event_begin(tr->ev.reduce);
  out[0] = mine[0];
  out[1] = mine[1];
  int status = gt_allreduce_f64(out, 2, MPI_SUM, g->world);
  gt_event_end(tr->ev.reduce);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_trainer_step(gt_trainer *tr, gt_step_stats *st)
{
  const gt_grid *g = tr->grid;
  gt_params *params = gt_gpt_params(tr->model);
  const long s = tr->step;
  const double t0 = gt_now();
  gt_events_step_reset();

  gt_event_begin(tr->ev.zero);
  int status = gt_params_zero_grads(params);
  gt_event_end(tr->ev.zero);
  GT_CALL(status);
  gt_buckets_reset(tr->buckets);

  /* Each rank's loss is grad_scale * sum of its token losses; with grad_scale
   * = 1 / (global tokens) the dp sum of the gradients is the gradient of the
   * global mean. */
  const float grad_scale = 1.0f / ((float)tr->B * (float)tr->T);
  double loss_sum;
  GT_CALL(gt_run_pipeline(tr, grad_scale, &loss_sum));

  if (g->dp_size > 1) { /* what backward did not hide */
    gt_event_begin(tr->ev.dp_exposed);
    status = gt_buckets_wait(tr->buckets);
    gt_event_end(tr->ev.dp_exposed);
    GT_CALL(status);
  }
  if (g->embed != MPI_COMM_NULL) { /* the tied embedding: both copies get the sum */
    gt_param *wte = gt_params_find(params, "wte");
    gt_event_begin(tr->ev.tied);
    status = gt_allreduce_f32(wte->grad.data, wte->numel, MPI_SUM, g->embed);
    gt_event_end(tr->ev.tied);
    GT_CALL(status);
  }
  double red[2];
  GT_CALL(gt_reduce_loss_and_norm(tr, loss_sum, true, red));
  const double loss = red[0] / ((double)tr->B * tr->T);
  const double norm = sqrt(red[1]);
  if (!isfinite(loss) || !isfinite(norm)) {
    gt_error_set(GT_ERR_NUMERIC, __FILE__, __LINE__, __func__,
                 "training diverged at step %ld: loss %g, gradient norm %g; lower [optim] "
                 "lr or set [optim] grad_clip",
                 s, loss, norm);
    gt_error_set_collective(true); /* every rank holds the same reduced values */
    return GT_ERR_NUMERIC;
  }
  const double lr = gt_lr_at(&tr->opt_cfg, s);
  gt_event_begin(tr->ev.optimizer);
  status = gt_adamw_step(tr->opt, s, lr, gt_clip_scale(&tr->opt_cfg, norm));
  gt_event_end(tr->ev.optimizer);
  GT_CALL(status);

  const double dt = gt_now() - t0;
  memset(st, 0, sizeof *st);
  st->step = s;
  st->loss = loss;
  st->val_loss = NAN;
  st->lr = lr;
  st->grad_norm = norm;
  st->step_ms = 1e3 * dt;
  st->tokens_per_s = (double)tr->B * tr->T / dt;
  st->compute_ms = 1e3 * gt_events_step_seconds(GT_EV_COMPUTE);
  st->comm_ms = 1e3 * gt_events_step_seconds(GT_EV_COMM);
  st->data_ms = 1e3 * gt_events_step_seconds(GT_EV_DATA);
  st->bubble_ms = 1e3 * gt_events_step_seconds(GT_EV_IDLE);
  st->forward_ms = 1e3 * gt_event_step_seconds(tr->ev.forward);
  st->backward_ms = 1e3 * gt_event_step_seconds(tr->ev.backward);
  st->tp_comm_ms = 1e3 * gt_event_step_seconds(tr->ev.tp_comm);
  st->pp_comm_ms = 1e3 * gt_event_step_seconds(tr->ev.pp_comm);
  st->dp_exposed_ms = 1e3 * gt_event_step_seconds(tr->ev.dp_exposed);
  st->optimizer_ms = 1e3 * gt_event_step_seconds(tr->ev.optimizer);
  tr->step++;
  tr->samples += tr->B;
  tr->last_loss = loss;
  return GT_SUCCESS;
}

int gt_trainer_evaluate(gt_trainer *tr, double *val_loss)
{
  GT_ASSERT(tr->val != NULL);
  const gt_grid *g = tr->grid;
  const bool first = g->pp_rank == 0, last = g->pp_rank == g->pp_size - 1;
  const size_t n = (size_t)tr->B_micro * tr->T * tr->shape.dim;
  gt_event_begin(tr->ev.eval);
  double sum = 0;
  int status = GT_SUCCESS;
  for (long e = 0; e < tr->cfg.run.eval_batches && status == GT_SUCCESS; e++)
    for (int mb = 0; mb < tr->M && status == GT_SUCCESS; mb++) {
      MPI_Request req;
      double l = 0;
      if (first || last)
        status = gt_read_microbatch(tr, tr->val, false, (long long)e * tr->B, mb);
      if (status == GT_SUCCESS && !first) {
        status = gt_p2p_irecv(gt_gpt_input(tr->model, 0), n, g->pp_rank - 1, GT_TAG_ACT(mb),
                              g->pp, &req);
        if (status == GT_SUCCESS)
          status = gt_comm_wait(&req);
      }
      if (status == GT_SUCCESS)
        status = gt_gpt_forward(tr->model, 0, tr->tokens, tr->targets, tr->B_micro, tr->T, 0.0f,
                                &l);
      if (status == GT_SUCCESS && !last) {
        status = gt_p2p_isend(gt_gpt_output(tr->model, 0), n, g->pp_rank + 1, GT_TAG_ACT(mb),
                              g->pp, &req);
        if (status == GT_SUCCESS)
          status = gt_comm_wait(&req);
      }
      sum += l;
    }
  gt_event_end(tr->ev.eval);
  GT_CALL(status);
  double red[2];
  GT_CALL(gt_reduce_loss_and_norm(tr, sum, false, red));
  *val_loss = red[0] / ((double)tr->cfg.run.eval_batches * tr->B * tr->T);
  return GT_SUCCESS;
}

int gt_trainer_peak_activations(const gt_trainer *tr, int *microbatches, size_t *bytes)
{
  *microbatches = tr->peak_live;
  *bytes = (size_t)tr->peak_live * gt_gpt_slot_bytes(tr->model);
  return GT_SUCCESS;
}

int gt_trainer_report_activations(gt_trainer *tr, FILE *out)
{
  const gt_grid *g = tr->grid;
  const int p = g->pp_size;
  double *most = calloc(2 * (size_t)p, sizeof(double));
  int status = most ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  if (status == GT_SUCCESS) {
    most[2 * g->pp_rank] = tr->peak_live;
    most[2 * g->pp_rank + 1] = (double)tr->peak_live * (double)gt_gpt_slot_bytes(tr->model);
    status = gt_reduce_f64(most, 2 * p, MPI_MAX, 0, g->world);
  }
  if (status == GT_SUCCESS && g->world_rank == 0) {
    fprintf(out, "# peak activations per pipeline stage (%s, %d micro-batches)\n",
            gt_schedule_name(tr->schedule), tr->M);
    for (int s = 0; s < p; s++) {
      char b[32];
      gt_format_bytes(most[2 * s + 1], b, sizeof b);
      fprintf(out, "  stage %-3d %3.0f micro-batches  %s\n", s, most[2 * s], b);
    }
    fflush(out);
  }
  free(most);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- full tensors ---------------------------------------------------------------------------

int gt_trainer_gather_params(gt_trainer *tr, float *full)
{
  const gt_grid *g = tr->grid;
  gt_params *params = gt_gpt_params(tr->model);
  const int count = gt_gpt_logical_count(&tr->shape);
  char name[GT_PARAM_NAME_MAX];
  int ndim;
  long dims[GT_TENSOR_MAX_DIMS];
  size_t largest = 0, local_max = 0;
  for (int i = 0; i < count; i++) {
    size_t ne = gt_gpt_logical_param(&tr->shape, i, name, &ndim, dims);
    largest = ne > largest ? ne : largest;
  }
  for (int i = 0; i < params->count; i++)
    local_max = params->list[i].numel > local_max ? params->list[i].numel : local_max;
  float *buf = calloc(largest, sizeof(float)), *local = malloc(sizeof(float) * (local_max + 1));
  GT_CALL(gt_error_agree(buf && local ? GT_SUCCESS
                                      : GT_ERROR(GT_ERR_SYSTEM,
                                                 "out of memory gathering parameters"),
                         g->world));
  int status = GT_SUCCESS;
  size_t off = 0;
  for (int i = 0; i < count && status == GT_SUCCESS; i++) {
    const size_t ne = gt_gpt_logical_param(&tr->shape, i, name, &ndim, dims);
    memset(buf, 0, ne * sizeof(float));
    /* Exactly one rank owns each entry (dp rank 0, the owning copy), so a
     * sum over the world puts every entry in place unchanged. */
    gt_param *t = gt_params_find(params, name);
    if (t && t->owner && g->dp_rank == 0) {
      /* a device-to-host copy; a failure here is fatal for this rank */
      status = tr->be->ops->download(tr->be, local, t->value.data, t->numel * sizeof(float));
      if (status == GT_SUCCESS)
        gt_param_insert(t, local, buf);
    }
    if (status == GT_SUCCESS)
      status = gt_reduce_f32(buf, ne, MPI_SUM, 0, g->world);
    if (status == GT_SUCCESS && g->world_rank == 0)
      memcpy(full + off, buf, ne * sizeof(float));
    off += ne;
  }
  free(buf);
  free(local);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- checkpoints ----------------------------------------------------------------------------

static gt_ckpt_state gt_trainer_ckpt_state(gt_trainer *tr)
{
  gt_ckpt_state st = {tr->ntensors, tr->tensors, gt_gpt_params(tr->model), NULL, NULL,
                      tr->grid->dp_rank == 0};
  gt_adamw_moments(tr->opt, &st.m, &st.v);
  return st;
}

long gt_trainer_step_index(const gt_trainer *tr) { return tr->step; }

int gt_trainer_save(gt_trainer *tr, const char *dir, char *path, size_t size)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  if (!dir)
    dir = cfg->checkpoint.dir;
  GT_CHECK(dir[0], GT_ERR_INPUT, "no checkpoint directory: set [checkpoint] dir");
  gt_ckpt_meta meta = {
    .format = GT_CKPT_FORMAT,
    .step = tr->step,
    .tokens = tr->samples * tr->T,
    .samples = tr->samples,
    .seed = cfg->run.seed,
    .loss_scale = 1.0,
    .loss = tr->last_loss,
    .dp = g->dp_size, .pp = g->pp_size, .tp = g->tp_size,
    .layers = tr->shape.layers, .heads = tr->shape.heads, .dim = tr->shape.dim,
    .seq_len = tr->shape.max_seq, .vocab = tr->shape.vocab,
    .batch = tr->B,
  };
  snprintf(meta.code_version, sizeof meta.code_version, "%s", gt_version());
  /* Rank 0's clock names the time, so every rank writes the same attribute. */
  double now = (double)time(NULL);
  GT_CALL(gt_allreduce_f64(&now, 1, MPI_MAX, g->world));
  time_t t = (time_t)now;
  struct tm utc;
  gmtime_r(&t, &utc);
  strftime(meta.created, sizeof meta.created, "%Y-%m-%dT%H:%M:%SZ", &utc);
  int n = gt_config_to_ini(cfg, NULL, 0);
  meta.deck = malloc((size_t)n + 1);
  GT_CALL(gt_error_agree(meta.deck ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory"),
                         g->world));
  gt_config_to_ini(cfg, meta.deck, (size_t)n + 1);
  gt_ckpt_state st = gt_trainer_ckpt_state(tr);
  int status = gt_ckpt_save(dir, (int)cfg->checkpoint.keep, &meta, &st, tr->writers, g->world,
                            path, size);
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The checkpoint's model must be the deck's. */
static int gt_check_ckpt_model(const gt_trainer *tr, const char *path, const gt_ckpt_meta *m)
{
  const gt_gpt_shape *s = &tr->shape;
  const long have[5] = {m->layers, m->heads, m->dim, m->seq_len, m->vocab};
  const long want[5] = {s->layers, s->heads, s->dim, s->max_seq, s->vocab};
  const char *key[5] = {"layers", "heads", "dim", "seq_len", "vocab"};
  for (int i = 0; i < 5; i++)
    GT_CHECK(have[i] == want[i], GT_ERR_INPUT,
             "checkpoint %s holds a model with %s = %ld but the deck has [model] %s = %ld; "
             "use the deck that wrote it (gridtrain ckpt info %s)",
             path, key[i], have[i], key[i], want[i], path);
  return GT_SUCCESS;
}

int gt_trainer_load(gt_trainer *tr, const char *path)
{
  const gt_grid *g = tr->grid;
  gt_ckpt_meta meta;
  GT_CALL(gt_error_agree(gt_ckpt_read_meta(path, g->world, &meta), g->world));
  int status = gt_check_ckpt_model(tr, path, &meta);
  if (status == GT_SUCCESS) {
    gt_ckpt_state st = gt_trainer_ckpt_state(tr);
    status = gt_ckpt_read(path, &st, g->world);
  }
  status = gt_error_agree(status, g->world);
  if (status == GT_SUCCESS) {
    tr->step = meta.step;
    tr->samples = meta.samples;
    tr->last_loss = meta.loss;
    if (meta.seed != tr->cfg.run.seed)
      gt_warn("checkpoint %s was written with [run] seed = %llu, the deck "
              "has %llu: the data order from here on follows the deck",
              path, meta.seed, tr->cfg.run.seed);
  }
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* [checkpoint] resume at start-up (see gt_trainer_create). */
static int gt_trainer_resume(gt_trainer *tr, bool quiet)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  const char *resume = cfg->checkpoint.resume;
  if (strcmp(resume, "never") == 0)
    return GT_SUCCESS;
  if (strcmp(resume, "auto") != 0) { /* an explicit file: it must load */
    GT_CALL(gt_trainer_load(tr, resume));
    if (!quiet)
      gt_info("gridtrain: resumed from %s at step %ld\n", resume, tr->step);
    return GT_SUCCESS;
  }
  if (!cfg->checkpoint.dir[0])
    return GT_SUCCESS;
  /* Rank 0 lists the directory; every rank tries the same files in turn. */
  char (*list)[GT_PATH_MAX] = NULL, problem[GT_PATH_MAX + 128] = "";
  int n = 0;
  int status = g->world_rank == 0 ? gt_ckpt_candidates(cfg->checkpoint.dir, &list, &n, problem,
                                                       sizeof problem)
                                  : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, g->world));
  GT_CALL_MPI(MPI_Bcast(&n, 1, MPI_INT, 0, g->world));
  if (g->world_rank != 0 && n > 0) {
    list = calloc((size_t)n, sizeof *list);
    status = list ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  }
  status = gt_error_agree(status, g->world);
  if (status == GT_SUCCESS && n > 0)
    status = MPI_Bcast(list, (int)(sizeof *list * (size_t)n), MPI_BYTE, 0, g->world) ==
                     MPI_SUCCESS
                 ? GT_SUCCESS
                 : GT_ERROR(GT_ERR_MPI, "MPI_Bcast of the checkpoint list failed");
  if (status != GT_SUCCESS) {
    free(list);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  if (problem[0])
    gt_warn("%s; looking for other checkpoints", problem);
  char first_error[512] = "";
  for (int i = 0; i < n; i++) {
    status = gt_trainer_load(tr, list[i]);
    if (status == GT_SUCCESS) {
      if (!quiet)
        gt_info("gridtrain: resumed from %s at step %ld\n", list[i], tr->step);
      free(list);
      return GT_SUCCESS;
    }
    if (status == GT_ERR_SYSTEM || status == GT_ERR_MPI) /* not the file's fault */
      break;
    if (!first_error[0])
      snprintf(first_error, sizeof first_error, "%s", gt_error_message());
    gt_warn("cannot resume from %s: %s; %s", list[i],
            gt_error_message(),
            i + 1 < n ? "trying the previous checkpoint" : "no older checkpoint left");
    gt_error_clear();
  }
  if (n > 0 && status != GT_SUCCESS && status != GT_ERR_SYSTEM && status != GT_ERR_MPI) {
    gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                 "none of the %d checkpoint%s in %s can be resumed from (newest: %s); to start "
                 "from scratch set [checkpoint] resume = never or use another dir",
                 n, n == 1 ? "" : "s", cfg->checkpoint.dir, first_error);
    gt_error_set_collective(true);
    status = GT_ERR_INPUT;
  }
  free(list);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- the loop ----------------------------------------------------------------------------

/* Collective: the signal any rank has caught (the largest number), or 0. */
static int gt_agree_signal(const gt_grid *g, int *signo)
{
  double sig = (double)gt_signal_pending();
  GT_CALL(gt_allreduce_f64(&sig, 1, MPI_MAX, g->world));
  *signo = (int)sig;
  return GT_SUCCESS;
}

int gt_trainer_run(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  const long steps = cfg->run.steps;
  const bool saving = cfg->checkpoint.dir[0] != '\0';
  const double flops_per_token = gt_gpt_flops_per_token(&tr->shape, tr->T);
  char path[GT_PATH_MAX + 32], line[512];
  if (tr->step >= steps) {
    gt_info("gridtrain: done: nothing to do, the run is at step %ld and [run] steps = %ld\n",
            tr->step, steps);
    return GT_SUCCESS;
  }
  GT_CALL(gt_barrier(g->world));
  const double t_start = gt_now();
  gt_step_stats st = {0};
  st.loss = NAN;
  double last_val = NAN;
  long saved = -1; /* step of the last checkpoint written by this run */
  while (tr->step < steps) {
    GT_CALL(gt_trainer_step(tr, &st));
    const bool last = tr->step == steps;
    if (cfg->run.eval_every > 0 && (tr->step % cfg->run.eval_every == 0 || last)) {
      GT_CALL(gt_trainer_evaluate(tr, &st.val_loss));
      last_val = st.val_loss;
    }
    if (g->world_rank == 0) {
      GT_CALL(gt_metrics_write_step(tr->metrics, &st));
      if (st.step % cfg->run.log_every == 0 || last || !isnan(st.val_loss)) {
        gt_metrics_format_step(&st, steps, line, sizeof line);
        gt_info("%s\n", line);
      }
    }
    /* Step boundary: every rank learns whether any rank was signalled. */
    int signo = 0;
    GT_CALL(gt_agree_signal(g, &signo));
    const bool due = cfg->checkpoint.every > 0 && tr->step % cfg->checkpoint.every == 0;
    if (saving && (due || signo || last)) {
      const double t0 = gt_now();
      gt_event_begin(tr->ev.checkpoint);
      int status = gt_trainer_save(tr, NULL, path, sizeof path);
      gt_event_end(tr->ev.checkpoint);
      GT_CALL(status);
      saved = tr->step;
      if (!signo)
        gt_info("gridtrain: checkpoint %s written in %.1f s\n", path, gt_now() - t0);
    }
    if (signo) {
      if (saved == tr->step)
        gt_error_set(GT_ERR_REQUEUE, __FILE__, __LINE__, __func__,
                     "caught %s: checkpoint %s written at step %ld of %ld; exiting with status "
                     "3 so that the job script requeues the job",
                     gt_signal_name(signo), path, tr->step, steps);
      else
        gt_error_set(GT_ERR_SYSTEM, __FILE__, __LINE__, __func__,
                     "stopped by %s at step %ld of %ld; nothing was saved because [checkpoint] "
                     "dir is not set",
                     gt_signal_name(signo), tr->step, steps);
      gt_error_set_collective(true);
      return saved == tr->step ? GT_ERR_REQUEUE : GT_ERR_SYSTEM;
    }
  }
  GT_CALL(gt_barrier(g->world));
  const double wall = gt_now() - t_start;
  const long ran = steps - tr->start_step;
  gt_run_summary sum = {
    .steps = ran,
    .tokens = (double)ran * tr->B * tr->T,
    .seconds = wall,
    .tokens_per_s = wall > 0 ? (double)ran * tr->B * tr->T / wall : 0,
    .model_tflops = wall > 0 ? flops_per_token * ran * tr->B * tr->T / wall / 1e12 : 0,
    .final_loss = st.loss,
    .final_val_loss = last_val,
  };
  if (g->world_rank == 0) {
    GT_CALL(gt_metrics_write_summary(tr->metrics, &sum));
    char val[48] = "";
    if (!isnan(last_val))
      snprintf(val, sizeof val, ", val loss %.4f", last_val);
    gt_info("gridtrain: done: %ld steps, %.3gM tokens in %.1f s (%.0f tok/s, %.1f GFLOP/s "
            "model, %.2f per rank); final loss %.4f%s\n",
            ran, sum.tokens / 1e6, wall, sum.tokens_per_s, 1e3 * sum.model_tflops,
            1e3 * sum.model_tflops / g->world_size, st.loss, val);
  }
  GT_CALL(gt_events_report(g->world, wall, stdout));
  GT_CALL(gt_trainer_report_activations(tr, stdout));
  return GT_SUCCESS;
}
