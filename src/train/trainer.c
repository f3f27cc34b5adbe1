/*
 * trainer.c - set-up and the training loop (see trainer.h).
 */
#include "gridtrain/trainer.h"

#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/backend.h"
#include "gridtrain/comm.h"
#include "gridtrain/data.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/log.h"
#include "gridtrain/optim.h"
#include "gridtrain/timer.h"

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
  int32_t *window, *tokens, *targets; /* host (B_micro, T+1), (B_micro, T) x 2 */

  struct {
    int data, forward, backward, zero, dp_allreduce, loss_allreduce, norm, optimizer, eval;
  } ev;
};

/* Every rank reaches each set-up phase; a failure on any rank becomes the
 * same collective error on all of them. */
#define GT_AGREE(comm, expr)                                                               \
  do {                                                                                     \
    int gt_agree_status_ = (expr);                                                         \
    GT_CALL(gt_error_agree(gt_agree_status_, comm));                                       \
  } while (0)

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

static void gt_format_bytes(double bytes, char *buf, size_t size)
{
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    u++;
  }
  snprintf(buf, size, "%.1f %s", bytes, unit[u]);
}

/* Rank 0: the configuration and what was resolved from it, as one table. */
static void gt_print_setup(const gt_trainer *tr)
{
  const gt_grid *g = tr->grid;
  const gt_config *cfg = &tr->cfg;
  if (g->world_rank != 0)
    return;
  gt_gpt_shape shape = {(int)cfg->model.layers, (int)cfg->model.heads, (int)cfg->model.dim,
                        (int)cfg->model.seq_len, (int)cfg->model.vocab};
  char act[32], par[32], v[GT_PATH_MAX + 64];
  gt_format_bytes((double)gt_gpt_activation_bytes(tr->model), act, sizeof act);
  gt_format_bytes(4.0 * 4.0 * (double)gt_trainer_params((gt_trainer *)tr)->numel, par,
                  sizeof par);
  printf("gridtrain %s: configuration (%s) and layout\n", PACKAGE_VERSION,
         cfg->deck_path[0] ? cfg->deck_path : "defaults");
  gt_config_print_table(cfg, stdout);
  snprintf(v, sizeof v, "dp=%d x pp=%d x tp=%d", g->dp_size, g->pp_size, g->tp_size);
  gt_config_print_row(stdout, "layout", v, "resolved");
  snprintf(v, sizeof v, "%d (%d per node, %d cores per node)", g->world_size, g->node_size,
           g->node_cores);
  gt_config_print_row(stdout, "ranks", v, "resolved");
  snprintf(v, sizeof v, "%d", tr->threads);
  gt_config_print_row(stdout, "threads per rank", v, "resolved");
  gt_config_print_row(stdout, "mpi waits",
                      gt_comm_get_wait_mode() == GT_WAIT_YIELD ? "yield (oversubscribed)"
                                                               : "busy-poll",
                      "resolved");
  snprintf(v, sizeof v, "%.2fM (%s with grads and AdamW)",
           (double)gt_gpt_param_count(&shape) / 1e6, par);
  gt_config_print_row(stdout, "parameters", v, "per rank");
  snprintf(v, sizeof v, "%s (micro-batch %d x %d)", act, tr->B_micro, tr->T);
  gt_config_print_row(stdout, "activations", v, "per rank");
  snprintf(v, sizeof v, "%d tokens = %d x %d; %d seq per dp rank in %d micro-batch%s",
           tr->B * tr->T, tr->B, tr->T, tr->B_rank, tr->M, tr->M == 1 ? "" : "es");
  gt_config_print_row(stdout, "step", v, "resolved");
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

int gt_trainer_create(const gt_config *cfg, MPI_Comm world, bool quiet, gt_trainer **trainer)
{
  gt_trainer *tr = calloc(1, sizeof *tr);
  GT_CHECK_ALLOC(tr, sizeof *tr);
  *trainer = tr;
  tr->cfg = *cfg;
  GT_CALL(gt_grid_create(cfg, world, &tr->grid));
  const gt_grid *g = tr->grid;
  MPI_Comm comm = g->world;

  tr->T = (int)cfg->model.seq_len;
  tr->B = (int)cfg->data.batch;
  tr->M = (int)cfg->data.microbatches;
  tr->B_rank = tr->B / g->dp_size;
  tr->B_micro = tr->B_rank / tr->M;
  tr->threads = gt_resolve_threads(cfg, g);
  const bool oversubscribed = (long)g->node_size * tr->threads > g->node_cores;
  if (strcmp(cfg->parallel.wait, "yield") == 0 ||
      (strcmp(cfg->parallel.wait, "auto") == 0 && oversubscribed))
    gt_comm_set_wait_mode(GT_WAIT_YIELD);
  else
    gt_comm_set_wait_mode(GT_WAIT_BUSY);

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

  gt_gpt_shape shape = {(int)cfg->model.layers, (int)cfg->model.heads, (int)cfg->model.dim,
                        (int)cfg->model.seq_len, (int)cfg->model.vocab};
  GT_AGREE(comm, gt_gpt_create(tr->be, &shape, tr->B_micro, tr->T, &tr->model));
  GT_AGREE(comm, gt_gpt_init(tr->model, cfg->run.seed));
  tr->opt_cfg = (gt_adamw_config){cfg->optim.lr,        cfg->optim.min_lr,
                                  cfg->optim.warmup,    cfg->run.steps,
                                  cfg->optim.weight_decay, cfg->optim.beta1,
                                  cfg->optim.beta2,     cfg->optim.eps,
                                  cfg->optim.grad_clip};
  GT_AGREE(comm, gt_adamw_create(gt_gpt_params(tr->model), &tr->opt_cfg, &tr->opt));

  size_t n = (size_t)tr->B_micro * (size_t)(tr->T + 1);
  tr->window = malloc(sizeof(int32_t) * n);
  tr->tokens = malloc(sizeof(int32_t) * n);
  tr->targets = malloc(sizeof(int32_t) * n);
  GT_AGREE(comm, tr->window && tr->tokens && tr->targets
                     ? GT_SUCCESS
                     : GT_ERROR(GT_ERR_SYSTEM, "out of memory for token buffers"));
  GT_AGREE(comm, g->world_rank == 0 ? gt_metrics_open(cfg->run.metrics, &tr->metrics)
                                    : GT_SUCCESS);

  tr->ev.data = gt_event("data", GT_EV_DATA);
  tr->ev.forward = gt_event("forward", GT_EV_COMPUTE);
  tr->ev.backward = gt_event("backward", GT_EV_COMPUTE);
  tr->ev.zero = gt_event("zero_grad", GT_EV_COMPUTE);
  tr->ev.dp_allreduce = gt_event("dp.allreduce", GT_EV_COMM);
  tr->ev.loss_allreduce = gt_event("loss.allreduce", GT_EV_COMM);
  tr->ev.norm = gt_event("grad_norm", GT_EV_COMPUTE);
  tr->ev.optimizer = gt_event("optimizer", GT_EV_COMPUTE);
  tr->ev.eval = gt_event("eval", GT_EV_OTHER);
  if (!quiet)
    gt_print_setup(tr);
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
  gt_adamw_destroy(&tr->opt);
  gt_gpt_destroy(&tr->model);
  gt_backend_destroy(&tr->be);
  free(tr->window);
  free(tr->tokens);
  free(tr->targets);
  gt_grid_destroy(&tr->grid);
  free(tr);
  *trainer = NULL;
  return GT_SUCCESS;
}

gt_params *gt_trainer_params(gt_trainer *tr) { return gt_gpt_params(tr->model); }

// ---- one step ----------------------------------------------------------------------------

/* Split windows of T+1 tokens into inputs and next-token targets. */
static void gt_split_windows(const int32_t *window, int count, int T, int32_t *tokens,
                             int32_t *targets)
{
  for (int b = 0; b < count; b++) {
    memcpy(tokens + (size_t)b * T, window + (size_t)b * (T + 1), sizeof(int32_t) * (size_t)T);
    memcpy(targets + (size_t)b * T, window + (size_t)b * (T + 1) + 1,
           sizeof(int32_t) * (size_t)T);
  }
}

int gt_trainer_step(gt_trainer *tr, gt_step_stats *st)
{
  const gt_grid *g = tr->grid;
  gt_params *params = gt_gpt_params(tr->model);
  const long s = tr->step;
  const double t0 = gt_now();
  gt_events_step_reset();

  gt_event_begin(tr->ev.zero);
  GT_CALL(gt_params_zero_grads(params));
  gt_event_end(tr->ev.zero);

  /* Each rank's loss is grad_scale * sum of its token losses; with grad_scale
   * = 1 / (global tokens) the dp sum of the gradients is the gradient of the
   * global mean. */
  const float grad_scale = 1.0f / ((float)tr->B * (float)tr->T);
  double loss_sum = 0;
  for (int mb = 0; mb < tr->M; mb++) {
    long long first = (long long)s * tr->B + (long long)g->dp_rank * tr->B_rank +
                      (long long)mb * tr->B_micro;
    gt_event_begin(tr->ev.data);
    GT_CALL(gt_dataset_read_samples(tr->train, tr->T, true, tr->cfg.run.seed, first,
                                    tr->B_micro, tr->cfg.model.vocab, tr->window));
    gt_split_windows(tr->window, tr->B_micro, tr->T, tr->tokens, tr->targets);
    gt_event_end(tr->ev.data);

    double mb_loss;
    gt_event_begin(tr->ev.forward);
    GT_CALL(gt_gpt_forward(tr->model, tr->tokens, tr->targets, tr->B_micro, tr->T, grad_scale,
                           &mb_loss));
    gt_event_end(tr->ev.forward);
    gt_event_begin(tr->ev.backward);
    GT_CALL(gt_gpt_backward(tr->model));
    gt_event_end(tr->ev.backward);
    loss_sum += mb_loss;
  }

  if (g->dp_size > 1) {
    gt_event_begin(tr->ev.dp_allreduce);
    GT_CALL(gt_allreduce_f32(params->grads, params->numel, MPI_SUM, g->dp));
    gt_event_end(tr->ev.dp_allreduce);
  }
  gt_event_begin(tr->ev.loss_allreduce);
  GT_CALL(gt_allreduce_f64(&loss_sum, 1, MPI_SUM, g->dp));
  gt_event_end(tr->ev.loss_allreduce);
  const double loss = loss_sum / ((double)tr->B * tr->T);

  /* After the all-reduce every DP rank holds the same full gradient. */
  double sumsq;
  gt_event_begin(tr->ev.norm);
  GT_CALL(tr->be->ops->sumsq(tr->be, params->grads, params->numel, &sumsq));
  gt_event_end(tr->ev.norm);
  const double norm = sqrt(sumsq);
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
  GT_CALL(gt_adamw_step(tr->opt, s, lr, gt_clip_scale(&tr->opt_cfg, norm)));
  gt_event_end(tr->ev.optimizer);

  const double dt = gt_now() - t0;
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
  tr->step++;
  return GT_SUCCESS;
}

int gt_trainer_evaluate(gt_trainer *tr, double *val_loss)
{
  GT_ASSERT(tr->val != NULL);
  const gt_grid *g = tr->grid;
  gt_event_begin(tr->ev.eval);
  double sum = 0;
  for (long e = 0; e < tr->cfg.run.eval_batches; e++)
    for (int mb = 0; mb < tr->M; mb++) {
      long long first = (long long)e * tr->B + (long long)g->dp_rank * tr->B_rank +
                        (long long)mb * tr->B_micro;
      GT_CALL(gt_dataset_read_samples(tr->val, tr->T, false, 0, first, tr->B_micro,
                                      tr->cfg.model.vocab, tr->window));
      gt_split_windows(tr->window, tr->B_micro, tr->T, tr->tokens, tr->targets);
      double l;
      GT_CALL(gt_gpt_forward(tr->model, tr->tokens, tr->targets, tr->B_micro, tr->T, 0.0f, &l));
      sum += l;
    }
  GT_CALL(gt_allreduce_f64(&sum, 1, MPI_SUM, g->dp));
  *val_loss = sum / ((double)tr->cfg.run.eval_batches * tr->B * tr->T);
  gt_event_end(tr->ev.eval);
  return GT_SUCCESS;
}

// ---- the loop ----------------------------------------------------------------------------

int gt_trainer_run(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  const long steps = cfg->run.steps;
  gt_gpt_shape shape = {(int)cfg->model.layers, (int)cfg->model.heads, (int)cfg->model.dim,
                        (int)cfg->model.seq_len, (int)cfg->model.vocab};
  const double flops_per_token = gt_gpt_flops_per_token(&shape, tr->T);
  GT_CALL(gt_barrier(g->world));
  const double t_start = gt_now();
  gt_step_stats st = {0};
  st.loss = NAN;
  double last_val = NAN;
  char line[512];
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
  }
  GT_CALL(gt_barrier(g->world));
  const double wall = gt_now() - t_start;
  gt_run_summary sum = {
    .steps = steps,
    .tokens = (double)steps * tr->B * tr->T,
    .seconds = wall,
    .tokens_per_s = wall > 0 ? (double)steps * tr->B * tr->T / wall : 0,
    .model_tflops = wall > 0 ? flops_per_token * steps * tr->B * tr->T / wall / 1e12 : 0,
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
            steps, sum.tokens / 1e6, wall, sum.tokens_per_s, 1e3 * sum.model_tflops,
            1e3 * sum.model_tflops / g->world_size, st.loss, val);
  }
  GT_CALL(gt_events_report(g->world, wall, stdout));
  return GT_SUCCESS;
}
