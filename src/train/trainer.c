/*
 * trainer.c - one training step, evaluation, the run loop and the end-of-run
 * reports (see trainer.h). Set-up is in setup.c, checkpoints in
 * checkpointing.c, the data feed in feed.c, the pipeline executor in
 * src/parallel/pipeline.c.
 */
#include "trainer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/flight.h"
#include "gridtrain/log.h"
#include "gridtrain/signals.h"

// ---- the step's scalars ----------------------------------------------------------------------

/* The device scalars [first, first + n) into out, on the host. */
static int gt_trainer_scalars_to_host(gt_trainer *tr, int first, int n, double *out)
{
  gt_backend *be = tr->be;
  GT_CALL(be->ops->download(be, tr->host_scalars + first, tr->scalars + first,
                            sizeof(double) * (size_t)n, NULL));
  GT_CALL(be->ops->event_record(be, tr->scalars_ready, NULL));
  GT_CALL(be->ops->event_wait(be, tr->scalars_ready));
  for (int i = 0; i < n; i++)
    out[i] = tr->host_scalars[first + i];
  return GT_SUCCESS;
}

int gt_trainer_reduce_scalars(gt_trainer *tr, int first, int n, double *out, MPI_Comm comm)
{
  GT_CALL(gt_trainer_scalars_to_host(tr, first, n, out));
  GT_CALL(gt_allreduce_f64(out, n, MPI_SUM, comm));
  return GT_SUCCESS;
}

/* Where the last stage's token losses go: one tp rank counts them (every
 * tp rank of the stage has the same ones). */
static double *gt_trainer_loss_acc(gt_trainer *tr, int which)
{
  const gt_grid *g = tr->grid;
  return g->pp_rank == g->pp_size - 1 && g->tp_rank == 0 ? &tr->scalars[which] : NULL;
}

// ---- one step ----------------------------------------------------------------------------

/* Whether an evaluation follows the step that ends at step index `step`
 * ([run] eval_every, and the end of the run). */
static bool gt_trainer_eval_due(const gt_trainer *tr, long step)
{
  const gt_config *cfg = &tr->cfg;
  return cfg->run.eval_every > 0 && (step % cfg->run.eval_every == 0 || step == cfg->run.steps);
}

/* A streaming schedule (pipedream-2bw): whether step s may run the next
 * batch's first forwards. Not before what needs the pipeline empty after
 * it: the end of the run, an evaluation or a sample (both also drain the
 * pipeline, should it be primed). */
static bool gt_trainer_streams_on(const gt_trainer *tr, long s)
{
  return gt_schedule_streams(&tr->layout.schedule) && s + 1 < tr->cfg.run.steps &&
         !gt_trainer_eval_due(tr, s + 1) && !gt_trainer_sample_due(tr, s + 1);
}

/* Whether step s's update completes in its own call: always but with a
 * deferred update, whose next step must run (primed) and be followed by
 * nothing that reads the state (a checkpoint; an evaluation, a sample and
 * the end stop the stream already). */
static bool gt_trainer_settles(const gt_trainer *tr, long s, bool flush)
{
  const long every = tr->cfg.checkpoint.every;
  return flush || !tr->defer || !gt_trainer_streams_on(tr, s) ||
         (every > 0 && (s + 1) % every == 0);
}

/* The pending step's update: its sums completed, the norm, the scaler's
 * verdict, the optimizer (on that step's gradient buffer: with a deferred
 * update the other one is the running step's). Collective on the world
 * (the sums were started by every rank). */
static int gt_trainer_apply(gt_trainer *tr, gt_step_stats *st)
{
  gt_params *params = gt_gpt_params(tr->model);
  const long s = tr->pend.step;
  const gt_dp_plan plan = tr->pend.plan;
  const double loss_scale = tr->pend.loss_scale;
  const double *red = tr->pend.red;
  const double loss = red[0] / ((double)(plan.own_loss ? tr->B_rank : tr->B) * tr->T);
  const double norm = plan.grad_mult * sqrt(red[1]) / loss_scale; /* of the unscaled gradients */
  const bool finite = isfinite(loss) && isfinite(norm);
  if (!finite && !tr->scaler.dynamic) { /* every rank holds the same reduced values */
    if (!tr->in_pass)
      return gt_trainer_nonfinite(tr, s, loss, norm);
    tr->late_nonfinite.on = true; /* its diagnosis is collective: after the passes */
    tr->late_nonfinite.step = s;
    tr->late_nonfinite.loss = loss;
    tr->late_nonfinite.norm = norm;
    return GT_SUCCESS;
  }
  /* fp16: an overflow skips the step and backs the scale off */
  bool skip;
  const long skipped_before = tr->scaler.skipped;
  int status = gt_scaler_update(&tr->scaler, finite, s, &skip);
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true); /* the same verdict on every rank */
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  /* the update's schedule and count are those of the step its gradients
   * come from (stale:S: the first S steps apply nothing) */
  const double lr = gt_lr_at(&tr->opt_cfg, s >= plan.lag ? s - plan.lag : 0);
  GT_CALL(gt_dp_before_update(tr->dp, s));
  if (params->stash) /* pipedream-2bw: the next batch computes with this version */
    GT_CALL(gt_params_stash_save(params));
  const bool update = !skip && plan.update;
  if (update) {
    /* Bias correction counts the updates made: skipped steps made none. */
    const double grad_mult = plan.grad_mult * gt_clip_factor(&tr->opt_cfg, norm) / loss_scale;
    gt_event_begin(tr->ev.optimizer);
    status = gt_adamw_step(tr->opt, s - plan.lag - skipped_before, lr, grad_mult);
    gt_event_end(tr->ev.optimizer);
    GT_CALL(status);
  }
  bool synced;
  GT_CALL(gt_dp_after_update(tr->dp, s, update, &synced));
  st->step = s;
  st->loss = loss;
  st->val_loss = NAN;
  st->lr = lr;
  st->grad_norm = norm;
  st->loss_scale = loss_scale;
  st->dynamic_scale = tr->scaler.dynamic;
  st->skipped = skip;
  st->skipped_total = tr->scaler.skipped;
  st->synced = synced;
  st->mfu = st->eta_s = NAN; /* the run's (pace.h) */
  tr->last_loss = loss;
  return GT_SUCCESS;
}

/* Complete the pending step: its sums, the tied embedding's sum left in
 * flight (the last stage's), then its update. Collective on the world. */
static int gt_trainer_update(gt_trainer *tr)
{
  GT_ASSERT(tr->pend.on && tr->ndone < 2);
  gt_trainer_ckpt_snapshot(tr); /* the state changes from here on */
  gt_event_begin(tr->ev.reduce);
  int status = gt_allreduce_finish(&tr->pend.req[0]);
  if (status == GT_SUCCESS)
    status = gt_allreduce_finish(&tr->pend.req[1]);
  gt_event_end(tr->ev.reduce);
  if (status == GT_SUCCESS)
    status = gt_dp_tied_wait(tr->dp);
  GT_CALL(status);
  tr->pend.on = false;
  gt_params *params = gt_gpt_params(tr->model);
  const long s = tr->pend.step;
  if (tr->defer) /* the step's gradients (the model's pointers stay on the other buffer) */
    gt_params_grads_swap(params);
  status = gt_trainer_apply(tr, &tr->stats[s & 1]);
  if (tr->defer)
    gt_params_grads_swap(params);
  GT_CALL(status);
  tr->done[tr->ndone++] = s;
  return GT_SUCCESS;
}

/* The pipeline's callback (gt_pipe_feed.update). An error every rank
 * meets (the same reduced values) waits for the end of the passes, which
 * every stage reaches: the later stages' backwards need this one's. */
static int gt_trainer_update_cb(void *ctx)
{
  gt_trainer *tr = ctx;
  tr->in_pass = true;
  const int status = gt_trainer_update(tr);
  tr->in_pass = false;
  if (status != GT_SUCCESS && gt_error_is_collective()) {
    tr->late_status = status;
    return GT_SUCCESS;
  }
  return status;
}

/* After the passes: an update that failed inside them. Collective on the
 * world (the diagnosis of non-finite numbers looks at that step's
 * gradients, in the other buffer). */
static int gt_trainer_late_failure(gt_trainer *tr)
{
  if (tr->late_status != GT_SUCCESS)
    return tr->late_status;
  if (!tr->late_nonfinite.on)
    return GT_SUCCESS;
  gt_params *params = gt_gpt_params(tr->model);
  gt_params_grads_swap(params);
  const int status = gt_trainer_nonfinite(tr, tr->late_nonfinite.step, tr->late_nonfinite.loss,
                                          tr->late_nonfinite.norm);
  gt_params_grads_swap(params);
  return status;
}

/* After step s's passes: its gradients reduced (the tied sum left in
 * flight where deferred), the norm's squares, and the sums of the loss and
 * the squares started. */
static int gt_trainer_finish_passes(gt_trainer *tr, long s, double loss_scale)
{
  gt_params *params = gt_gpt_params(tr->model);
  /* the last step's update, where no forward of this step needed it (its
   * tied sum first: this step's starts below) */
  if (tr->pend.on)
    GT_CALL(gt_trainer_update(tr));
  gt_dp_plan plan;
  GT_CALL(gt_dp_finish(tr->dp, s, &plan));
  if (plan.norm_here) {
    gt_event_begin(tr->ev.norm);
    const int status = gt_params_grad_sumsq(params, &tr->scalars[GT_SC_SUMSQ]);
    gt_event_end(tr->ev.norm);
    GT_CALL(status);
  }
  double *red = tr->pend.red; /* the loss, then the squares (GT_SC_LOSS, GT_SC_SUMSQ) */
  GT_CALL(gt_trainer_scalars_to_host(tr, GT_SC_LOSS, 2, red));
  gt_allreduce_req *req = tr->pend.req;
  req[1].flight = GT_FLIGHT_SKIP; /* (finished) */
  gt_event_begin(tr->ev.reduce);
  int status;
  if (plan.together) {
    status = gt_allreduce_f64_start(red, 2, MPI_SUM, plan.loss_comm, &req[0]);
  } else {
    status = gt_allreduce_f64_start(red, 1, MPI_SUM, plan.loss_comm, &req[0]);
    if (status == GT_SUCCESS)
      status = gt_allreduce_f64_start(red + 1, 1, MPI_SUM, plan.norm_comm, &req[1]);
  }
  gt_event_end(tr->ev.reduce);
  GT_CALL(status);
  tr->pend.on = true;
  tr->pend.step = s;
  tr->pend.loss_scale = loss_scale;
  tr->pend.plan = plan;
  return GT_SUCCESS;
}

/* The times of the call that ran step s's passes (its stats). */
static void gt_trainer_step_times(gt_trainer *tr, long s, double t0, double bytes0)
{
  gt_step_stats *st = &tr->stats[s & 1];
  const double dt = gt_now() - t0;
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
  st->recompute_ms = 1e3 * gt_event_step_seconds(tr->ev.recompute);
  st->comm_bytes = gt_coll_bytes(tr->coll) - bytes0;
}

/* Mixture of experts: step s's routing over the whole model (each block's
 * counts from tp rank 0, where every rank of tp routes alike), summed over
 * the world into its stats. Collective on the world; nothing without
 * experts. */
static int gt_trainer_moe_stats(gt_trainer *tr, long s)
{
  const gt_gpt_shape *sh = &tr->shape;
  if (sh->experts == 0)
    return GT_SUCCESS;
  const size_t E = (size_t)sh->experts, n = (size_t)sh->layers * E;
  double *v = tr->moe_red;
  memset(v, 0, (n + 1) * sizeof *v);
  gt_gpt_moe_take(tr->model, v, &v[n]); /* (the counters restart on every rank) */
  if (tr->grid->tp_rank != 0)
    memset(v, 0, (n + 1) * sizeof *v);
  gt_allreduce_req req;
  GT_CALL(gt_allreduce_f64_start(v, (int)(n + 1), MPI_SUM, tr->grid->world, &req));
  GT_CALL(gt_allreduce_finish(&req));
  gt_step_stats *st = &tr->stats[s & 1];
  st->moe.on = true;
  st->moe.tokens_min = INT64_MAX;
  st->moe.tokens_max = 0;
  st->moe.imbalance = 1.0;
  st->moe.pairs = 0;
  for (int l = 0; l < sh->layers; l++) {
    if (!gt_gpt_shape_moe_block(sh, l))
      continue;
    double sum = 0.0, most = 0.0;
    for (size_t e = 0; e < E; e++) {
      const double c = v[(size_t)l * E + e];
      sum += c;
      most = c > most ? c : most;
      st->moe.tokens_min = (int64_t)c < st->moe.tokens_min ? (int64_t)c : st->moe.tokens_min;
      st->moe.tokens_max = (int64_t)c > st->moe.tokens_max ? (int64_t)c : st->moe.tokens_max;
    }
    st->moe.pairs += (int64_t)sum;
    if (sum > 0 && most * (double)E / sum > st->moe.imbalance)
      st->moe.imbalance = most * (double)E / sum;
  }
  st->moe.dropped = (int64_t)v[n];
  return GT_SUCCESS;
}

/* The stats of the steps the call completed, into out. */
static void gt_trainer_done(gt_trainer *tr, gt_step_stats *out, int *n)
{
  for (int i = 0; i < tr->ndone; i++)
    out[i] = tr->stats[tr->done[i] & 1];
  *n = tr->ndone;
  tr->ndone = 0;
}

int gt_trainer_advance(gt_trainer *tr, bool flush, gt_step_stats out[2], int *n)
{
  *n = 0;
  tr->ndone = 0;
  gt_backend *be = tr->be;
  gt_params *params = gt_gpt_params(tr->model);
  const long s = tr->step;
  const double t0 = gt_now();
  const double bytes0 = gt_coll_bytes(tr->coll);
  gt_events_step_reset();
  gt_event_begin(tr->ev.zero);
  int status = gt_params_zero_grads(params); /* (the pending step's are in the other buffer) */
  if (status == GT_SUCCESS)
    status = be->ops->zero(be, tr->scalars, sizeof(double) * GT_NSCALARS);
  gt_event_end(tr->ev.zero);
  GT_CALL(status);
  GT_CALL(gt_trainer_step_faults(tr, s)); /* test-only (fault.h); a no-op without GT_FAULT */
  gt_flight_step(s);
  gt_fault_set_step(s);
  GT_CALL(gt_dp_begin(tr->dp, s));

  /* Each rank's loss is loss_scale / (global tokens) * the sum of its token
   * losses, so the dp sum of the gradients is loss_scale times the gradient
   * of the global mean loss. With a deferred update the scale is the one
   * before the last step's verdict. */
  const double loss_scale = tr->scaler.scale;
  const float dlogit_scale = (float)(loss_scale / ((double)tr->B * tr->T));
  gt_pipe_feed feed =
      gt_trainer_feed(tr, tr->train_reader, tr->samples, s + 1 < tr->cfg.run.steps);
  feed.stream_next = gt_trainer_streams_on(tr, s);
  if (tr->pend.on) /* before the next batch's first forward */
    feed.update = gt_trainer_update_cb;
  status = gt_pipe_train(tr->pipe, &feed, dlogit_scale, gt_trainer_loss_acc(tr, GT_SC_LOSS),
                         gt_dp_grad_hook(tr->dp));
  GT_CALL(gt_trainer_feed_settle(tr, status)); /* no HDF5 call from the reader from here */
  GT_CALL(gt_trainer_late_failure(tr));
  GT_CALL(gt_trainer_finish_passes(tr, s, loss_scale));
  GT_CALL(gt_trainer_moe_stats(tr, s));
  tr->step++;
  tr->samples += tr->B;
  if (tr->defer) { /* the next step's gradients go to the other buffer */
    gt_params_grads_swap(params);
    gt_gpt_rebind_grads(tr->model);
  }
  if (gt_trainer_settles(tr, s, flush))
    GT_CALL(gt_trainer_update(tr));
  GT_CALL(gt_events_collect()); /* what the device did in the step */
  gt_trainer_step_times(tr, s, t0, bytes0);
  gt_trainer_done(tr, out, n);
  return GT_SUCCESS;
}

int gt_trainer_settle(gt_trainer *tr, gt_step_stats *out, int *n)
{
  *n = 0;
  tr->ndone = 0;
  if (tr->pend.on)
    GT_CALL(gt_trainer_update(tr));
  gt_trainer_done(tr, out, n);
  return GT_SUCCESS;
}

int gt_trainer_settled(gt_trainer *tr)
{
  gt_step_stats dropped;
  int n;
  GT_CALL(gt_trainer_settle(tr, &dropped, &n));
  return GT_SUCCESS;
}

int gt_trainer_step(gt_trainer *tr, gt_step_stats *st)
{
  gt_step_stats out[2];
  int n;
  GT_CALL(gt_trainer_advance(tr, true, out, &n));
  GT_ASSERT(n >= 1);
  *st = out[n - 1];
  return GT_SUCCESS;
}

int gt_trainer_evaluate(gt_trainer *tr, double *val_loss)
{
  GT_ASSERT(tr->val != NULL);
  gt_backend *be = tr->be;
  GT_CALL(gt_trainer_settled(tr));
  gt_fault_set_step(tr->step); /* the step the evaluation follows */
  gt_fault_kill_at("eval");
  GT_CALL(gt_pipe_drain(tr->pipe)); /* streaming: the slots are the evaluation's */
  gt_event_begin(tr->ev.eval);
  int status = be->ops->zero(be, &tr->scalars[GT_SC_EVAL], sizeof(double));
  for (long e = 0; e < tr->cfg.run.eval_batches && status == GT_SUCCESS; e++) {
    const gt_pipe_feed feed = gt_trainer_feed(tr, tr->val_reader, (long long)e * tr->B,
                                              e + 1 < tr->cfg.run.eval_batches);
    status = gt_pipe_eval(tr->pipe, &feed, gt_trainer_loss_acc(tr, GT_SC_EVAL));
    status = gt_trainer_feed_settle(tr, status);
  }
  double sum = 0;
  if (status == GT_SUCCESS)
    status = gt_trainer_reduce_scalars(tr, GT_SC_EVAL, 1, &sum, tr->grid->world);
  gt_event_end(tr->ev.eval);
  GT_CALL(status);
  *val_loss = sum / ((double)tr->cfg.run.eval_batches * tr->B * tr->T);
  return GT_SUCCESS;
}

// ---- reports ---------------------------------------------------------------------------------

int gt_trainer_peak_activations(const gt_trainer *tr, int *microbatches, size_t *bytes)
{
  *microbatches = gt_pipe_peak_live(tr->pipe);
  *bytes = (size_t)*microbatches * gt_gpt_slot_bytes(tr->model);
  return GT_SUCCESS;
}

int gt_trainer_report_activations(gt_trainer *tr, FILE *out)
{
  const gt_grid *g = tr->grid;
  const int p = g->pp_size;
  double *most = calloc(2 * (size_t)p, sizeof(double));
  int status = most ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  if (status == GT_SUCCESS) {
    const int peak = gt_pipe_peak_live(tr->pipe);
    most[2 * g->pp_rank] = peak;
    most[2 * g->pp_rank + 1] = (double)peak * (double)gt_gpt_slot_bytes(tr->model);
    status = gt_reduce_f64(most, 2 * p, MPI_MAX, 0, g->world);
  }
  if (status == GT_SUCCESS && g->world_rank == 0) {
    fprintf(out, "# peak activations per pipeline stage (%s, %d micro-batches)\n",
            gt_schedule_name(&tr->layout.schedule), tr->layout.micro);
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
  GT_CALL(gt_trainer_settled(tr));
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
  gt_full_state fs; /* zero: the master in pieces, whole on dp rank 0 */
  GT_CALL(gt_error_agree(gt_full_state_gather(tr, false, &fs), g->world));
  float *buf = calloc(largest, sizeof(float)), *local = malloc(sizeof(float) * (local_max + 1));
  int status = gt_error_agree(buf && local ? GT_SUCCESS
                                           : GT_ERROR(GT_ERR_SYSTEM,
                                                      "out of memory gathering parameters"),
                              g->world);
  size_t off = 0;
  for (int i = 0; i < count && status == GT_SUCCESS; i++) {
    const size_t ne = gt_gpt_logical_param(&tr->shape, i, name, &ndim, dims);
    memset(buf, 0, ne * sizeof(float));
    /* Exactly one rank owns each entry (dp rank 0, the owning copy), so a
     * sum over the world puts every entry in place unchanged. */
    gt_param *t = gt_params_find(params, name);
    if (t && t->counted && g->dp_rank == 0) {
      /* a device-to-host copy; a failure here is fatal for this rank */
      status = tr->be->ops->download(tr->be, local, fs.values + t->offset,
                                     t->numel * sizeof(float), NULL);
      if (status == GT_SUCCESS) /* the host reads what the download wrote */
        status = tr->be->ops->sync(tr->be);
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
  gt_full_state_free(tr, &fs);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- the loop ----------------------------------------------------------------------------

/* Every rank learns whether any rank was signalled. With sync = stale:S
 * (and a deferred update: S = 1) the agreement is a non-blocking
 * all-reduce completed S steps later (a blocking one would hold every
 * replica, or every stage, to the slowest each step): every
 * rank acts on the flags of the same step, S steps after it; `flush`
 * completes those in flight (the end of the run). */
static int gt_agree_signal(gt_trainer *tr, bool flush, int *signo)
{
  const gt_grid *g = tr->grid;
  *signo = 0;
  if (!tr->sig_req) {
    double sig = (double)gt_signal_pending();
    GT_CALL(gt_allreduce_f64(&sig, 1, MPI_MAX, g->world));
    *signo = (int)sig;
    return GT_SUCCESS;
  }
  const long S = tr->sig_lag, slots = S + 1;
  if (flush) {
    for (long i = 0; i < slots; i++)
      if (tr->sig_req[i] != MPI_REQUEST_NULL)
        GT_CALL(gt_comm_wait(&tr->sig_req[i]));
    return GT_SUCCESS;
  }
  const long t = tr->sig_count++, slot = t % slots;
  tr->sig_val[2 * slot] = (double)gt_signal_pending();
  GT_CALL_MPI(MPI_Iallreduce(&tr->sig_val[2 * slot], &tr->sig_val[2 * slot + 1], 1, MPI_DOUBLE,
                             MPI_MAX, g->world, &tr->sig_req[slot]));
  if (t < S)
    return GT_SUCCESS;
  const long old = (t - S) % slots;
  GT_CALL(gt_comm_wait(&tr->sig_req[old]));
  *signo = (int)tr->sig_val[2 * old + 1];
  return GT_SUCCESS;
}

static int gt_trainer_run_steps(gt_trainer *tr);

/* The completed steps' stats: the run's pace, the metrics file, the log
 * line (every [run] log_every, the last step, an evaluation), the
 * straggler watch; *last gets the newest. Collective on world. */
static int gt_trainer_log_steps(gt_trainer *tr, gt_step_stats *done, int n, gt_step_stats *last)
{
  const gt_config *cfg = &tr->cfg;
  const long steps = cfg->run.steps;
  char line[512];
  for (int i = 0; i < n; i++) {
    gt_step_stats *st = &done[i];
    const bool end = st->step + 1 == steps;
    gt_pace_step(tr->pace, st);
    if (tr->grid->world_rank == 0) {
      GT_CALL(gt_metrics_write_step(tr->metrics, st));
      if (st->step % cfg->run.log_every == 0 || end || !isnan(st->val_loss)) {
        gt_metrics_format_step(st, steps, line, sizeof line);
        gt_info("%s\n", line);
      }
    }
    GT_CALL(gt_trainer_watch_stragglers(tr, st, st->step % cfg->run.log_every == 0 || end));
    *last = *st;
  }
  return GT_SUCCESS;
}

/* [checkpoint] on_error = warn: a periodic write that every rank saw fail
 * (none of the earlier ones is lost) does not end the run: false after the
 * warning; true: the error (status) ends it. */
static bool gt_trainer_ckpt_failed(const gt_config *cfg, int status, bool final)
{
  (void)status;
  if (final || !gt_error_is_collective() || cfg->checkpoint.on_error != GT_ON_ERROR_WARN)
    return true;
  gt_warn("%s; training goes on ([checkpoint] on_error = warn)", gt_error_message());
  gt_error_clear();
  return false;
}

int gt_trainer_run(gt_trainer *tr)
{
  const int status = gt_trainer_run_steps(tr);
  /* an error every rank knows: a checkpoint in flight is finished first */
  if (status != GT_SUCCESS && gt_error_is_collective())
    return gt_trainer_ckpt_drain(tr, status);
  return status;
}

static int gt_trainer_run_steps(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  const long steps = cfg->run.steps;
  const bool saving = cfg->checkpoint.dir[0] != '\0';
  const double flops_per_token = gt_gpt_flops_per_token(&tr->shape, tr->T);
  char path[GT_PATH_MAX + 32];
  if (tr->step >= steps) {
    gt_info("gridtrain: done: nothing to do, the run is at step %ld and [run] steps = %ld\n",
            tr->step, steps);
    return GT_SUCCESS;
  }
  if (!tr->pace)
    GT_CALL(gt_pace_create(cfg, g, tr->be, flops_per_token * tr->B * tr->T, false, &tr->pace));
  GT_CALL(gt_trainer_ckpt_reserve(tr)); /* [checkpoint] async: its host memory */
  GT_CALL(gt_barrier(g->world));
  const double t_start = gt_now();
  gt_step_stats st = {0};
  st.loss = NAN;
  double last_val = NAN;
  long saved = -1; /* step of the last checkpoint written by this run */
  while (tr->step < steps) {
    gt_step_stats done[2];
    int ndone;
    GT_CALL(gt_trainer_advance(tr, false, done, &ndone));
    const bool last = tr->step == steps;
    if (ndone > 0 && gt_trainer_eval_due(tr, tr->step)) { /* (then the step is complete) */
      GT_CALL(gt_trainer_evaluate(tr, &done[ndone - 1].val_loss));
      last_val = done[ndone - 1].val_loss;
    }
    GT_CALL(gt_trainer_log_steps(tr, done, ndone, &st));
    GT_CALL(gt_trainer_sample(tr)); /* [run] sample_every */
    /* Step boundary: every rank learns whether any rank was signalled. */
    int signo = 0;
    GT_CALL(gt_agree_signal(tr, false, &signo));
    if (signo) { /* a deferred update completes before the checkpoint */
      GT_CALL(gt_trainer_settle(tr, done, &ndone));
      GT_CALL(gt_trainer_log_steps(tr, done, ndone, &st));
    }
    GT_CALL(gt_local_state_save(tr)); /* [checkpoint] local_every (local_state.c) */
    const bool due = cfg->checkpoint.every > 0 && tr->step % cfg->checkpoint.every == 0;
    /* [checkpoint] async: a write in flight is finished once every rank's
     * is done; the next checkpoint, a signal and the end wait for it */
    if (saving && !(due || signo || last) && gt_ckpt_async_busy(tr->ckpt_async)) {
      gt_event_begin(tr->ev.checkpoint);
      const int status = gt_trainer_ckpt_settle(tr, false, false);
      gt_event_end(tr->ev.checkpoint);
      if (status != GT_SUCCESS && gt_trainer_ckpt_failed(cfg, status, false))
        return status;
    }
    if (saving && (due || signo || last)) {
      const double t0 = gt_now();
      gt_event_begin(tr->ev.checkpoint);
      int status = gt_trainer_checkpoint(tr, path, sizeof path);
      if (status == GT_SUCCESS && (signo || last))
        status = gt_trainer_ckpt_settle(tr, true, signo != 0);
      gt_event_end(tr->ev.checkpoint);
      /* [checkpoint] on_error = warn: a periodic write that every rank saw
       * fail (none of the earlier ones is lost) does not end the run */
      if (status != GT_SUCCESS && !gt_trainer_ckpt_failed(cfg, status, signo || last))
        continue;
      GT_CALL(status);
      saved = tr->step;
      if (!signo && !cfg->checkpoint.async)
        gt_info("gridtrain: checkpoint %s written in %.1f s\n", path, gt_now() - t0);
    }
    if (signo) {
      GT_CALL(gt_agree_signal(tr, true, &(int){0})); /* nothing left in flight */
      const int code = gt_signal_status(signo);
      if (saved == tr->step && code == GT_ERR_REQUEUE)
        gt_error_set(GT_ERR_REQUEUE, __FILE__, __LINE__, __func__,
                     "caught %s: checkpoint %s written at step %ld of %ld; exiting with status "
                     "3 so that the job script requeues the job",
                     gt_signal_name(signo), path, tr->step, steps);
      else if (saved == tr->step)
        gt_error_set(GT_ERR_INTERRUPT, __FILE__, __LINE__, __func__,
                     "caught %s: checkpoint %s written at step %ld of %ld; exiting with status "
                     "130 (run it again to resume from it)",
                     gt_signal_name(signo), path, tr->step, steps);
      else
        gt_error_set(GT_ERR_SYSTEM, __FILE__, __LINE__, __func__,
                     "stopped by %s at step %ld of %ld; nothing was saved because [checkpoint] "
                     "dir is not set",
                     gt_signal_name(signo), tr->step, steps);
      gt_error_set_collective(true);
      return saved == tr->step ? code : GT_ERR_SYSTEM;
    }
  }
  GT_CALL(gt_agree_signal(tr, true, &(int){0}));
  GT_CALL(gt_barrier(g->world));
  const double wall = gt_now() - t_start;
  const long ran = steps - tr->start_step;
  size_t dev_in_use, dev_peak;
  gt_backend_device_memory(tr->be, &dev_in_use, &dev_peak);
  double device_peak = (double)dev_peak;
  GT_CALL(gt_allreduce_f64(&device_peak, 1, MPI_MAX, g->world));
  const double peak = gt_pace_peak(tr->pace), flops = flops_per_token * ran * tr->B * tr->T;
  gt_run_summary sum = {
    .steps = ran,
    .tokens = (double)ran * tr->B * tr->T,
    .seconds = wall,
    .tokens_per_s = wall > 0 ? (double)ran * tr->B * tr->T / wall : 0,
    .model_tflops = wall > 0 ? flops / wall / 1e12 : 0,
    .peak_tflops = peak / 1e12,
    .mfu = wall > 0 && peak > 0 ? flops / wall / peak : NAN,
    .final_loss = st.loss,
    .final_val_loss = last_val,
    .device_peak_bytes = device_peak,
  };
  if (g->world_rank == 0) {
    GT_CALL(gt_metrics_write_summary(tr->metrics, &sum));
    char val[48] = "", mem[96] = "", mfu[32] = "";
    if (isfinite(sum.mfu))
      snprintf(mfu, sizeof mfu, ", MFU %.1f%%", 100 * sum.mfu);
    if (!isnan(last_val))
      snprintf(val, sizeof val, ", val loss %.4f", last_val);
    if (device_peak > 0) {
      char b[32];
      gt_format_bytes(device_peak, b, sizeof b);
      snprintf(mem, sizeof mem, "; device memory at most %s on a rank", b);
    }
    gt_info("gridtrain: done: %ld steps, %.3gM tokens in %.1f s (%.0f tok/s, %.1f GFLOP/s "
            "model, %.2f per rank%s); final loss %.4f%s%s\n",
            ran, sum.tokens / 1e6, wall, sum.tokens_per_s, 1e3 * sum.model_tflops,
            1e3 * sum.model_tflops / g->world_size, mfu, st.loss, val, mem);
  }
  GT_CALL(gt_events_report(g->world, wall, stdout));
  GT_CALL(gt_trainer_report_activations(tr, stdout));
  GT_CALL(gt_trainer_report_memory_peaks(tr, stdout));
  return GT_SUCCESS;
}
