/*
 * checkpointing.c - the trainer's checkpoints: what a file records of the
 * run (step, data position, loss-scaler state, precision, the deck), saving
 * and loading it, and the start-up policy: resume, or else the initial
 * weights of [checkpoint] init (see trainer.h and docs/checkpoints.md).
 */
#include "trainer_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"
#include "gridtrain/hf_import.h"
#include "gridtrain/log.h"
#include "gridtrain/version.h"

/* The scaler state of a checkpoint written in the same precision carries
 * over bit for bit; another precision starts the deck's scaler afresh (a
 * bf16 checkpoint has scale 1, which means nothing to fp16). */
static void gt_trainer_restore_scaler(gt_trainer *tr, const char *path, const gt_ckpt_meta *m)
{
  if (strcmp(m->precision, gt_dtype_name(tr->layout.dtype)) == 0) {
    tr->scaler.scale = tr->scaler.dynamic ? m->loss_scale : 1.0;
    tr->scaler.good = (long)m->scale_good_steps;
    tr->scaler.skipped = (long)m->skipped_steps;
    return;
  }
  if (tr->grid->world_rank == 0)
    gt_info("gridtrain: checkpoint %s was written in %s; continuing in %s from its fp32 master "
            "weights%s\n",
            path, m->precision, gt_dtype_name(tr->layout.dtype),
            tr->scaler.dynamic ? " with the deck's initial loss scale" : "");
}

/* ---- each rank's state outside the tensors (compression residuals) ---------------------- */

/* Different for another compression, sync mode, layout or streaming
 * schedule (whose state would not fit). */
void gt_trainer_rank_tag(const gt_trainer *tr, char *tag, size_t size)
{
  char dp[160];
  gt_dp_state_tag(tr->dp, dp, sizeof dp);
  const gt_grid *g = tr->grid;
  snprintf(tag, size, "%s dp=%d pp=%d tp=%d%s", dp, g->dp_size, g->pp_size, g->tp_size,
           gt_schedule_streams(&tr->layout.schedule) ? " weights=2" : "");
}

/* The older weight version's share of the rank state (pipedream-2bw): the
 * whole stash as fp32, on dp rank 0 of each stage (the replicas hold the
 * same one); 0 elsewhere. */
static size_t gt_trainer_stash_len(const gt_trainer *tr)
{
  const gt_params *p = gt_gpt_params(tr->model);
  return p->stash && tr->grid->dp_rank == 0 ? p->numel : 0;
}

/* Every rank's state outside the tensors: the data-parallel path's
 * (dp.h), then the older weight version (gt_trainer_stash_len). */
static size_t gt_trainer_rank_len(const gt_trainer *tr)
{
  return gt_dp_state_len(tr->dp) + gt_trainer_stash_len(tr);
}

static int gt_trainer_rank_save(gt_trainer *tr, float *out)
{
  GT_CALL(gt_dp_state_save(tr->dp, tr->step, out));
  const size_t n = gt_trainer_stash_len(tr);
  if (n == 0)
    return GT_SUCCESS;
  const gt_params *p = gt_gpt_params(tr->model);
  const size_t es = gt_dtype_size(p->dtype);
  void *host = malloc(n * es);
  GT_CHECK_ALLOC(host, n * es);
  int status = tr->be->ops->download(tr->be, host, p->stash, n * es, NULL);
  if (status == GT_SUCCESS)
    status = tr->be->ops->sync(tr->be);
  if (status == GT_SUCCESS)
    gt_to_f32(p->dtype, out + gt_dp_state_len(tr->dp), host, n);
  free(host);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* After the tensors: the data-parallel path's state, then the older
 * weight version from dp rank 0 to its replicas; without it (another
 * layout or schedule wrote the file) gt_trainer_read makes both versions
 * the checkpoint's weights (said here). Collective on the world. */
static int gt_trainer_rank_restore(gt_trainer *tr, long step, float *in, bool loaded)
{
  GT_CALL(gt_dp_state_restore(tr->dp, step, in, loaded));
  gt_params *p = gt_gpt_params(tr->model);
  if (!p->stash)
    return GT_SUCCESS;
  if (!loaded) {
    if (step > 0)
      gt_warn("the checkpoint holds no older weight version for this layout: "
              "pipedream-2bw starts again from the checkpoint's weights for both versions");
    return GT_SUCCESS;
  }
  const gt_grid *g = tr->grid;
  const size_t n = p->numel, es = gt_dtype_size(p->dtype);
  void *host = malloc(n * es);
  int status = host ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the weights");
  if (status == GT_SUCCESS && g->dp_rank == 0)
    gt_from_f32(p->dtype, host, in + gt_dp_state_len(tr->dp), n);
  status = gt_error_agree(status, g->world);
  if (status == GT_SUCCESS)
    status = gt_bcast_bytes(host, n * es, 0, g->dp);
  if (status == GT_SUCCESS)
    status = tr->be->ops->upload(tr->be, p->stash, host, n * es, NULL);
  if (status == GT_SUCCESS)
    status = tr->be->ops->sync(tr->be);
  free(host);
  GT_CALL(gt_error_agree(status, g->world));
  return GT_SUCCESS;
}

/* What this rank holds. Without ZeRO the data-parallel replicas hold the
 * same values; with it each holds its piece of the moments (and, below
 * fp32, of the master weights). */
static gt_ckpt_state gt_trainer_ckpt_state(gt_trainer *tr)
{
  gt_params *p = gt_gpt_params(tr->model);
  const bool sharded = p->shard_size > 1;
  gt_ckpt_state st = {.ntensors = tr->ntensors, .tensors = tr->tensors, .params = p,
                      .values = p->values, .values_lo = p->master_sharded ? p->shard_lo : 0,
                      .moments_lo = sharded ? p->shard_lo : 0};
  gt_adamw_moments(tr->opt, &st.m, &st.v);
  st.group = &tr->grid->tp;
  const gt_tristate dio = tr->cfg.checkpoint.direct_io;
  st.direct = dio == GT_TRI_ON    ? GT_CKPT_DIRECT_ON
              : dio == GT_TRI_OFF ? GT_CKPT_DIRECT_OFF
                                  : GT_CKPT_DIRECT_AUTO;
  return st;
}

void gt_trainer_share(const gt_trainer *tr, size_t *lo, size_t *hi)
{
  const gt_params *p = gt_gpt_params(tr->model);
  const gt_grid *g = tr->grid;
  if (p->shard_size > 1) {
    *lo = p->shard_lo;
    *hi = p->shard_lo + p->shard_n;
  } else {
    const size_t dp = (size_t)g->dp_size, r = (size_t)g->dp_rank;
    *lo = p->numel * r / dp;
    *hi = p->numel * (r + 1) / dp;
  }
}

/* The part each data-parallel rank writes: its share (gt_trainer_share),
 * so that every entry is written once and the replicas share the work. */
static void gt_trainer_write_range(gt_trainer *tr, gt_ckpt_state *st)
{
  const gt_params *p = st->params;
  const gt_grid *g = tr->grid;
  if (p->shard_size <= 1 && gt_dp_diverged(tr->dp, tr->step - 1)) {
    /* the replicas differ: the file's tensors are replica 0's (each
     * replica's own state is in /rank/state) */
    st->lo = st->mlo = 0;
    st->hi = st->mhi = g->dp_rank == 0 ? p->numel : 0;
  } else {
    gt_trainer_share(tr, &st->lo, &st->hi);
    st->mlo = st->lo;
    st->mhi = st->hi;
  }
  st->writer = st->hi > st->lo;
}

long gt_trainer_step_index(const gt_trainer *tr) { return tr->step; }

/* A checkpoint of the state now; background: written by gt_ckpt_async
 * (settled later), else complete on return. */
static int gt_trainer_save_as(gt_trainer *tr, const char *dir, char *path, size_t size,
                              bool background)
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
    .loss_scale = tr->scaler.scale,
    .scale_good_steps = tr->scaler.good,
    .skipped_steps = tr->scaler.skipped,
    .loss = tr->last_loss,
    .dp = g->dp_size, .pp = g->pp_size, .tp = g->tp_size,
    .layers = tr->shape.layers, .heads = tr->shape.heads, .dim = tr->shape.dim,
    .seq_len = tr->shape.max_seq, .vocab = tr->shape.vocab,
    .batch = tr->B,
  };
  snprintf(meta.code_version, sizeof meta.code_version, "%s", gt_version());
  snprintf(meta.precision, sizeof meta.precision, "%s", gt_dtype_name(tr->layout.dtype));
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
  gt_trainer_write_range(tr, &st);
  char tag[256];
  gt_trainer_rank_tag(tr, tag, sizeof tag);
  st.rank_n = gt_trainer_rank_len(tr);
  st.rank_tag = tag;
  st.rank_state = st.rank_n ? malloc(st.rank_n * sizeof(float)) : NULL;
  /* async: the values and moments change next in the next step's update,
   * which waits for the writer thread's copy (gt_trainer_ckpt_snapshot);
   * the sync modes' other replica states change them elsewhere */
  st.copy_later = background && !gt_dp_sync_spec(tr->dp);
  int status = st.rank_n && !st.rank_state
                   ? GT_ERROR(GT_ERR_SYSTEM, "out of memory for the rank state")
                   : GT_SUCCESS;
  if (status == GT_SUCCESS)
    status = gt_trainer_rank_save(tr, st.rank_state);
  GT_CALL(gt_error_agree(status, g->world));
  /* every rank writes its own part: no gather; async: in the background,
   * after the write in flight (at most one) is finished */
  if (background) {
    status = gt_trainer_ckpt_settle(tr, true, false);
    if (status == GT_SUCCESS && !tr->ckpt_async)
      status = gt_error_agree(gt_ckpt_async_create(tr->be, &tr->ckpt_async), g->world);
    if (status == GT_SUCCESS)
      status = gt_ckpt_async_begin(tr->ckpt_async, dir, (int)cfg->checkpoint.keep, &meta, &st,
                                   g->world, path, size);
  } else {
    status = gt_trainer_ckpt_settle(tr, true, false); /* at most one write at a time */
    if (status == GT_SUCCESS)
      status = gt_ckpt_save(dir, (int)cfg->checkpoint.keep, &meta, &st, g->world, g->world,
                            path, size);
  }
  free(st.rank_state);
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_trainer_ckpt_reserve(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  if (!cfg->checkpoint.async || !cfg->checkpoint.dir[0])
    return GT_SUCCESS;
  if (!tr->ckpt_async)
    GT_CALL(gt_error_agree(gt_ckpt_async_create(tr->be, &tr->ckpt_async), tr->grid->world));
  gt_ckpt_state st = gt_trainer_ckpt_state(tr);
  gt_trainer_write_range(tr, &st);
  GT_CALL(gt_ckpt_async_reserve(tr->ckpt_async, &st, tr->grid->world));
  return GT_SUCCESS;
}

void gt_trainer_ckpt_snapshot(gt_trainer *tr) { gt_ckpt_async_snapshot(tr->ckpt_async); }

int gt_trainer_ckpt_settle(gt_trainer *tr, bool wait, bool quiet)
{
  if (!gt_ckpt_async_busy(tr->ckpt_async))
    return GT_SUCCESS;
  gt_ckpt_async_report r;
  GT_CALL(gt_ckpt_async_settle(tr->ckpt_async, wait, &r));
  if (r.finished && !quiet)
    gt_info("gridtrain: checkpoint %s written in %.1f s (the step waited %.2f s: %.2f to copy "
            "and create, %.2f for the writer, %.2f to finish; the rest in the background)\n",
            r.path, r.total_s, r.blocked_s + r.wait_s + r.finish_s, r.blocked_s, r.wait_s,
            r.finish_s);
  return GT_SUCCESS;
}

int gt_trainer_ckpt_drain(gt_trainer *tr, int status)
{
  if (!gt_ckpt_async_busy(tr->ckpt_async))
    return status;
  char message[1024], origin[256];
  const bool collective = gt_error_is_collective();
  snprintf(message, sizeof message, "%s", gt_error_message());
  snprintf(origin, sizeof origin, "%s", gt_error_origin());
  if (gt_trainer_ckpt_settle(tr, true, false) != GT_SUCCESS)
    gt_warn("%s", gt_error_message());
  gt_error_clear(); /* the run's own error stays the one reported */
  gt_error_set(status, __FILE__, __LINE__, __func__, "%s", message);
  gt_error_set_origin(origin);
  gt_error_set_collective(collective);
  return status;
}

int gt_trainer_save(gt_trainer *tr, const char *dir, char *path, size_t size)
{
  GT_CALL(gt_trainer_settled(tr)); /* a deferred update first */
  GT_CALL(gt_trainer_save_as(tr, dir, path, size, false));
  return GT_SUCCESS;
}

int gt_trainer_checkpoint(gt_trainer *tr, char *path, size_t size)
{
  GT_CALL(gt_trainer_save_as(tr, NULL, path, size, tr->cfg.checkpoint.async));
  return GT_SUCCESS;
}

/* The checkpoint's model must be the deck's (weights_only: its weights'
 * shapes, for init). */
static int gt_check_ckpt_model(const gt_trainer *tr, const char *path, const gt_ckpt_meta *m,
                               bool weights_only)
{
  gt_gpt_shape have;
  GT_CALL(gt_ckpt_meta_shape(m, path, &have));
  gt_gpt_shape_field f;
  GT_CHECK(!gt_gpt_shape_differ(&have, &tr->shape, weights_only, &f), GT_ERR_INPUT,
           "checkpoint %s holds a model with %s = %s but the deck has [model] %s = %s; "
           "use the deck that wrote it (gridtrain ckpt info %s)",
           path, f.key, f.a, f.key, f.b, path);
  return GT_SUCCESS;
}

/* After every rank read its weights (status): agreed, then with ZeRO the
 * other pieces of the compute copy. Collective on the world. */
static int gt_trainer_weights_read(gt_trainer *tr, int status)
{
  const gt_grid *g = tr->grid;
  status = gt_error_agree(status, g->world);
  if (status == GT_SUCCESS) /* zero: the other pieces of the compute copy */
    status = gt_error_agree(gt_dp_gather_compute(tr->dp), g->world);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* Without ZeRO the data-parallel replicas load the same entries: each has
 * read its share (gt_trainer_share) of the flat buffers bufs[0..n) (host
 * memory, numel floats each); the members of its dp group send each other
 * theirs, point to point, so that a layout coordinate reads the file once
 * instead of dp times. Collective on dp. */
static int gt_trainer_share_exchange(gt_trainer *tr, float *const bufs[], int n)
{
  const gt_grid *g = tr->grid;
  const size_t numel = gt_gpt_params(tr->model)->numel, dp = (size_t)g->dp_size;
  const size_t me = (size_t)g->dp_rank;
  gt_p2p *ops = calloc(2 * dp * (size_t)n + 1, sizeof *ops);
  GT_CHECK_ALLOC(ops, sizeof *ops * (2 * dp * (size_t)n + 1));
  int nops = 0, status = GT_SUCCESS;
  enum { GT_SHARE_TAG = 0x5348 };
  for (int b = 0; b < n && status == GT_SUCCESS; b++)
    for (size_t q = 0; q < dp && status == GT_SUCCESS; q++) {
      if (q == me)
        continue;
      const size_t mlo = numel * me / dp, mhi = numel * (me + 1) / dp;
      const size_t qlo = numel * q / dp, qhi = numel * (q + 1) / dp;
      status = gt_p2p_send(bufs[b] + mlo, (mhi - mlo) * sizeof(float), (int)q, GT_SHARE_TAG + b,
                           g->dp, &ops[nops]);
      if (status == GT_SUCCESS)
        nops++;
      if (status == GT_SUCCESS)
        status = gt_p2p_recv(bufs[b] + qlo, (qhi - qlo) * sizeof(float), (int)q,
                             GT_SHARE_TAG + b, g->dp, &ops[nops]);
      if (status == GT_SUCCESS)
        nops++;
    }
  const int waited = gt_p2p_waitall(nops, ops);
  free(ops);
  GT_CALL(status);
  GT_CALL(waited);
  return GT_SUCCESS;
}

/* Read the checkpoint path into this rank's parameters: the fp32 master
 * weights it holds (its piece under ZeRO) and, with_state, its optimizer
 * moments and the data-parallel path's rank state (*rank_loaded says
 * whether the file had a fitting one); then the compute copy. *meta is the
 * file's (free it with gt_ckpt_meta_free, also after an error). Collective
 * on the world. */
static int gt_trainer_read(gt_trainer *tr, const char *path, bool with_state,
                           gt_ckpt_meta *meta, bool *rank_loaded)
{
  const gt_grid *g = tr->grid;
  memset(meta, 0, sizeof *meta);
  *rank_loaded = false;
  GT_CALL(gt_error_agree(gt_ckpt_read_meta(path, g->world, meta), g->world));
  int status = gt_check_ckpt_model(tr, path, meta, !with_state);
  if (status == GT_SUCCESS) {
    gt_ckpt_state st = gt_trainer_ckpt_state(tr);
    /* each rank loads what it holds: with ZeRO its piece of the master
     * (below fp32) and of the moments */
    if (st.params->shard_size > 1) {
      gt_params_master_range(st.params, &st.lo, &st.hi);
      st.mlo = st.params->shard_lo;
      st.mhi = st.params->shard_lo + st.params->shard_n;
    }
    /* without ZeRO, in host memory: each replica its share, then the
     * exchange (gt_trainer_share_exchange) */
    const bool share = st.params->shard_size <= 1 && g->dp_size > 1 && tr->be->host_visible;
    if (share) {
      gt_trainer_share(tr, &st.lo, &st.hi);
      st.mlo = st.lo;
      st.mhi = st.hi;
    }
    char tag[256];
    if (with_state) {
      gt_trainer_rank_tag(tr, tag, sizeof tag);
      st.rank_n = gt_trainer_rank_len(tr);
      st.rank_tag = tag;
      st.rank_state = malloc((st.rank_n + 1) * sizeof(float));
      st.rank_loaded = rank_loaded;
    } else {
      st.mlo = st.mhi = st.params->numel; /* no moments: an empty range */
    }
    status = !with_state || st.rank_state
                 ? gt_ckpt_read(path, &st, g->world)
                 : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the rank state");
    if (share) { /* every rank read its share, or none exchanges */
      status = gt_error_agree(status, g->world);
      float *bufs[3] = {st.values, st.m, st.v};
      if (status == GT_SUCCESS)
        status = gt_error_agree(gt_trainer_share_exchange(tr, bufs, with_state ? 3 : 1),
                                g->world);
    }
    if (status == GT_SUCCESS && with_state) /* after the tensors: the mode's state on top */
      status = gt_trainer_rank_restore(tr, meta->step, st.rank_state, *rank_loaded);
    free(st.rank_state);
  }
  gt_params *p = gt_gpt_params(tr->model);
  if (status == GT_SUCCESS) /* the compute copy follows the master just read */
    status = gt_params_refresh_compute(p);
  if (status == GT_SUCCESS && p->stash && !*rank_loaded) /* both versions: the weights read */
    status = gt_params_stash_save(p);
  GT_CALL(gt_trainer_weights_read(tr, status));
  return GT_SUCCESS;
}

int gt_trainer_load(gt_trainer *tr, const char *path)
{
  const gt_grid *g = tr->grid;
  gt_ckpt_meta meta;
  bool rank_loaded = false;
  const int status = gt_trainer_read(tr, path, true, &meta, &rank_loaded);
  if (status == GT_SUCCESS) {
    tr->step = meta.step;
    tr->samples = meta.samples;
    tr->last_loss = meta.loss;
    gt_trainer_restore_scaler(tr, path, &meta);
    if (gt_dp_compress_state_len(tr->dp) && !rank_loaded && g->world_rank == 0)
      gt_warn("checkpoint %s holds no compression state for this run (it was written with "
              "another [parallel] compress, bucket size or layout): the error-feedback "
              "residuals start at zero and PowerSGD's warm starts afresh",
              path);
    if (gt_dp_sync_spec(tr->dp) && !rank_loaded && g->world_rank == 0)
      gt_warn("checkpoint %s holds no [parallel] sync state for this run (another sync "
              "mode or layout): every replica starts from the file's weights (replica 0's) "
              "and the mode afresh",
              path);
    if (meta.seed != tr->cfg.run.seed)
      gt_warn("checkpoint %s was written with [run] seed = %llu, the deck "
              "has %llu: the data order from here on follows the deck",
              path, meta.seed, tr->cfg.run.seed);
  }
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* [checkpoint] init = a Hugging Face model directory: its config.json must
 * describe the deck's model; each rank reads the tensors of its part
 * straight from the safetensors files. */
static int gt_trainer_init_hf(gt_trainer *tr, const char *path, bool quiet)
{
  const gt_grid *g = tr->grid;
  int status = gt_hf_check_model(path, &tr->cfg);
  if (status != GT_SUCCESS) {
    status = gt_error_wrap(status, __FILE__, __LINE__, __func__, "[checkpoint] init");
    gt_error_set_collective(true); /* the same files and deck everywhere */
    return status;
  }
  status = gt_hf_load_params(path, gt_gpt_params(tr->model));
  if (status == GT_ERR_INPUT)
    status = gt_error_wrap(status, __FILE__, __LINE__, __func__, "[checkpoint] init");
  GT_CALL(gt_trainer_weights_read(tr, status));
  if (!quiet && g->world_rank == 0)
    gt_info("gridtrain: initial weights from the Hugging Face model %s; training starts at "
            "step 0 with a fresh optimizer\n",
            path);
  return GT_SUCCESS;
}

/* [checkpoint] init: the weights of a checkpoint, nothing else of its run
 * (step 0, the deck's data order, fresh moments and loss scale). */
static int gt_trainer_init_weights(gt_trainer *tr, const char *path, bool quiet)
{
  const gt_grid *g = tr->grid;
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    if (!gt_hf_is_model_dir(path)) {
      const int status = GT_ERROR(GT_ERR_INPUT,
                                  "[checkpoint] init = %s is a directory without config.json; "
                                  "it takes a gridtrain checkpoint file (step_NNNNNNNN.h5) or a "
                                  "Hugging Face model directory",
                                  path);
      gt_error_set_collective(true); /* every rank sees the same file system entry */
      return status;
    }
    return gt_trainer_init_hf(tr, path, quiet);
  }
  gt_ckpt_meta meta;
  bool rank_loaded = false;
  int status = gt_trainer_read(tr, path, false, &meta, &rank_loaded);
  if (status == GT_ERR_INPUT) { /* the file's fault: name the key (agreed: the same everywhere) */
    const bool collective = gt_error_is_collective();
    status = gt_error_wrap(status, __FILE__, __LINE__, __func__, "[checkpoint] init");
    gt_error_set_collective(collective);
  }
  if (status == GT_SUCCESS && !quiet && g->world_rank == 0)
    gt_info("gridtrain: initial weights from %s (step %ld of the run that wrote it, %s); "
            "training starts at step 0 with a fresh optimizer\n",
            path, meta.step, meta.precision);
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* [checkpoint] resume at start-up (see gt_trainer_create). */
static int gt_trainer_resume_from(gt_trainer *tr, bool quiet, bool *resumed);

int gt_trainer_resume(gt_trainer *tr, bool quiet)
{
  bool resumed = false;
  GT_CALL(gt_trainer_resume_from(tr, quiet, &resumed));
  const char *init = tr->cfg.checkpoint.init;
  if (!resumed && init[0])
    GT_CALL(gt_trainer_init_weights(tr, init, quiet));
  else if (resumed && init[0] && !quiet && tr->grid->world_rank == 0)
    gt_info("gridtrain: [checkpoint] init = %s not used: the run continues from its own "
            "checkpoint\n",
            init);
  GT_CALL(gt_local_state_settle(tr)); /* node-local states past the start (local_state.c) */
  return GT_SUCCESS;
}

/* [checkpoint] resume: *resumed says whether a checkpoint was loaded. */
static int gt_trainer_resume_from(gt_trainer *tr, bool quiet, bool *resumed)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  const char *resume = cfg->checkpoint.resume;
  *resumed = false;
  if (strcmp(resume, "never") == 0)
    return GT_SUCCESS;
  if (strcmp(resume, "auto") != 0) { /* an explicit file: it must load */
    GT_CALL(gt_trainer_load(tr, resume));
    *resumed = true;
    if (!quiet)
      gt_info("gridtrain: resumed from %s at step %ld\n", resume, tr->step);
    return GT_SUCCESS;
  }
  if (!cfg->checkpoint.dir[0]) /* the node-local tier alone */
    return gt_local_state_resume(tr, NULL, quiet, resumed);
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
  /* the node-local tier when its newest complete state is as new (local_state.c) */
  status = gt_local_state_resume(tr, n > 0 ? list[0] : NULL, quiet, resumed);
  if (status != GT_SUCCESS || *resumed) {
    free(list);
    GT_CALL(status);
    return GT_SUCCESS;
  }
  if (problem[0])
    gt_warn("%s; looking for other checkpoints", problem);
  char first_error[512] = "";
  for (int i = 0; i < n; i++) {
    status = gt_trainer_load(tr, list[i]);
    if (status == GT_SUCCESS) {
      *resumed = true;
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

