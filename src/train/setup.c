/*
 * setup.c - the trainer's set-up and tear-down (see trainer.h); the tables
 * it prints are report.c's.
 */
#include "trainer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/dir_lock.h"
#include "gridtrain/path.h"
#include "gridtrain/watchdog.h"
#include "gridtrain/log.h"

/* Every rank reaches each set-up phase; a failure on any rank becomes the
 * same collective error on all of them. */
#define GT_AGREE(comm, expr)                                                               \
  do {                                                                                     \
    int gt_agree_status_ = (expr);                                                         \
    GT_CALL(gt_error_agree(gt_agree_status_, comm));                                       \
  } while (0)

// ---- resolved values ---------------------------------------------------------------------

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

// ---- set-up ------------------------------------------------------------------------------

/* The stage split of the layout's schedule; errors are the same on every
 * rank. */
static int gt_trainer_plan(gt_trainer *tr)
{
  double block_cost, head_cost;
  gt_gpt_stage_costs(&tr->shape, tr->T, &block_cost, &head_cost);
  GT_CALL(gt_schedule_plan(&tr->layout.schedule, tr->cfg.parallel.stages, tr->shape.layers,
                           tr->layout.pp, block_cost, head_cost, &tr->stage_first));
  return GT_SUCCESS;
}

static void gt_trainer_events(gt_trainer *tr)
{
  tr->ev.data = gt_event("data", GT_EV_DATA);
  tr->ev.forward = gt_event("forward", GT_EV_COMPUTE);
  tr->ev.backward = gt_event("backward", GT_EV_COMPUTE);
  tr->ev.recompute = gt_event("recompute", GT_EV_COMPUTE);
  tr->ev.tp_comm = gt_event("tp.comm", GT_EV_COMM);
  tr->ev.pp_comm = gt_event("pp.comm", GT_EV_COMM);
  tr->ev.bubble = gt_event("pp.bubble", GT_EV_IDLE);
  tr->ev.dp_exposed = gt_event("dp.exposed", GT_EV_COMM);
  tr->ev.tied = gt_event("tied.allreduce", GT_EV_COMM);
  tr->ev.reduce = gt_event("loss_norm.allreduce", GT_EV_COMM);
  tr->ev.zero = gt_event("zero_grad", GT_EV_COMPUTE);
  tr->ev.norm = gt_event("grad_norm", GT_EV_COMPUTE);
  tr->ev.optimizer = gt_event("optimizer", GT_EV_COMPUTE);
  tr->ev.zero_gather = gt_event("zero.allgather", GT_EV_COMM);
  tr->ev.param_gather = gt_event("zero.gather", GT_EV_COMM);
  tr->ev.eval = gt_event("eval", GT_EV_OTHER);
  tr->ev.checkpoint = gt_event("checkpoint", GT_EV_OTHER);
}

/* [parallel] allreduce as the collectives' algorithm: the same choices in
 * the same order. */
static gt_algo gt_trainer_algo(const gt_config *cfg)
{
  _Static_assert(GT_ALGO_MPI == (int)GT_ALLREDUCE_MPI && GT_ALGO_RING == (int)GT_ALLREDUCE_RING &&
                     GT_ALGO_TREE == (int)GT_ALLREDUCE_TREE &&
                     GT_ALGO_HALVING == (int)GT_ALLREDUCE_HALVING &&
                     GT_ALGO_AUTO == (int)GT_ALLREDUCE_AUTO,
                 "gt_allreduce_algo follows gt_algo");
  return (gt_algo)cfg->parallel.allreduce;
}

/* [parallel] allreduce: our algorithms on the data-parallel group.
 * Collective on world (every rank reads the same table). */
static int gt_trainer_algorithms(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  const gt_algo a = gt_trainer_algo(cfg);
  gt_algo_table table;
  int status = GT_SUCCESS;
  if (a == GT_ALGO_AUTO)
    status = cfg->parallel.coll_table[0]
                 ? gt_algo_table_read(cfg->parallel.coll_table, &table)
                 : GT_ERROR(GT_ERR_INPUT, "[parallel] allreduce = auto needs coll_table = FILE, "
                            "the table benchmarks/run_coll.sh writes "
                            "(benchmarks/results/coll-table.txt)");
  GT_CALL(gt_error_agree(status, tr->grid->world));
  status = gt_coll_set_algorithm(tr->coll, tr->grid->dp, a, a == GT_ALGO_AUTO ? &table : NULL,
                                 (size_t)cfg->parallel.coll_segment_kb << 10,
                                 (int)cfg->parallel.coll_window);
  GT_CALL(gt_error_agree(status, tr->grid->world));
  return GT_SUCCESS;
}

/* The data-parallel path (dp.h): its stage, [parallel] compress and sync;
 * with stale:S or a deferred update, the slots of the pipelined signal
 * agreement. Collective on world. */
static int gt_trainer_data_parallel(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  gt_dp_setup ds = {.model = tr->model,
                    .opt = tr->opt,
                    .coll = tr->coll,
                    .grid = g,
                    .stage = tr->layout.zero,
                    .overlap = tr->layout.dp_overlap,
                    .bucket_mb = cfg->parallel.bucket_mb,
                    .compress_text = cfg->parallel.compress,
                    .compress_algo = GT_ALGO_MPI,
                    .seed = cfg->run.seed,
                    .sync_text = cfg->parallel.sync,
                    .outer_lr = cfg->parallel.outer_lr,
                    .outer_momentum = cfg->parallel.outer_momentum,
                    .ev = {tr->ev.dp_exposed, tr->ev.tied, tr->ev.zero_gather,
                           tr->ev.param_gather}};
  int status = gt_compress_parse(cfg->parallel.compress, &ds.compress);
  const gt_algo a = gt_trainer_algo(cfg); /* 16-bit payloads: [parallel] allreduce's */
  ds.compress_algo = a == GT_ALGO_AUTO ? GT_ALGO_MPI : a;
  if (status == GT_SUCCESS)
    status = gt_sync_parse(cfg->parallel.sync, &ds.sync);
  /* pipedream-2bw at stage 0: the update runs in the next step (trainer.c),
   * the tied sum completes there too */
  tr->defer = gt_schedule_streams(&tr->layout.schedule) && tr->layout.zero == 0;
  ds.defer_tied = tr->defer;
  GT_CALL(gt_error_agree(status, g->world));
  GT_AGREE(g->world, gt_dp_create(&ds, &tr->dp));
  const gt_sync_spec *sync = gt_dp_sync_spec(tr->dp);
  tr->sig_lag = sync && sync->kind == GT_SYNC_STALE ? sync->s : tr->defer ? 1 : 0;
  if (tr->sig_lag > 0) {
    tr->sig_req = malloc(sizeof *tr->sig_req * (size_t)(tr->sig_lag + 1));
    tr->sig_val = calloc(2 * (size_t)(tr->sig_lag + 1), sizeof *tr->sig_val);
    status = tr->sig_req && tr->sig_val
                 ? GT_SUCCESS
                 : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the signal agreements");
    for (long i = 0; tr->sig_req && i <= tr->sig_lag; i++)
      tr->sig_req[i] = MPI_REQUEST_NULL;
    GT_AGREE(g->world, status);
  }
  return GT_SUCCESS;
}

/* Backend, collectives context and device clock. */
static int gt_trainer_device(gt_trainer *tr)
{
  const gt_backend_options opt = {tr->threads, tr->grid->node_rank, tr->cfg.backend.attention};
  GT_CALL(gt_backend_create_device(tr->cfg.backend.device, &opt, &tr->be));
  GT_CALL(gt_coll_create(tr->be, gt_tristate_names[tr->cfg.backend.mpi_device], &tr->coll));
  if (tr->cfg.parallel.collectives == GT_COLLECTIVES_NCCL) {
    const gt_grid *g = tr->grid;
    const MPI_Comm groups[] = {g->tp, g->dp, g->embed};
    GT_CALL(gt_coll_use_nccl(tr->coll, groups, 3));
  }
  GT_CALL(gt_trainer_algorithms(tr));
  GT_CALL(gt_backend_clock_create(tr->be, &tr->clock));
  gt_events_set_clock(tr->clock);
  gt_backend *be = tr->be;
  GT_CALL(be->ops->alloc(be, sizeof(double) * GT_NSCALARS, (void **)&tr->scalars));
  GT_CALL(be->ops->alloc_host(be, sizeof(double) * GT_NSCALARS, (void **)&tr->host_scalars));
  GT_CALL(be->ops->event_create(be, &tr->scalars_ready));
  return GT_SUCCESS;
}

/* [run] metrics must not be one of the run's inputs (compared by device
 * and inode: a link or another spelling of the same file counts). */
static int gt_check_outputs(const gt_config *cfg)
{
  char train[GT_PATH_MAX], val[GT_PATH_MAX];
  const char *src[2] = {cfg->data.train, cfg->data.val};
  char *dst[2] = {train, val};
  for (int i = 0; i < 2; i++) { /* FILE.h5:/dataset names the file FILE.h5 */
    snprintf(dst[i], GT_PATH_MAX, "%s", src[i]);
    char *colon = strstr(dst[i], ":/");
    if (colon)
      *colon = '\0';
  }
  const char *in[] = {train, val, cfg->deck_path, cfg->checkpoint.resume, cfg->checkpoint.init};
  const char *what[] = {"[data] train", "[data] val", "the input deck", "[checkpoint] resume",
                        "[checkpoint] init"};
  GT_CALL(gt_path_refuse_clobber(cfg->run.metrics, "[run] metrics", 5, in, what));
  /* nor a checkpoint that resume = auto may load (appending JSON to it
   * damages it) */
  if (!cfg->run.metrics[0] || !cfg->checkpoint.dir[0] || strcmp(cfg->checkpoint.resume, "auto"))
    return GT_SUCCESS;
  char (*list)[GT_PATH_MAX] = NULL, problem[512];
  int n = 0;
  if (gt_ckpt_candidates(cfg->checkpoint.dir, &list, &n, problem, sizeof problem) != GT_SUCCESS)
    gt_error_clear(); /* the resume says what is wrong with the directory */
  int status = GT_SUCCESS;
  for (int i = 0; i < n && status == GT_SUCCESS; i++)
    status = gt_path_refuse_clobber(cfg->run.metrics, "[run] metrics", 1,
                                    (const char *const[]){list[i]},
                                    (const char *const[]){"a checkpoint that [checkpoint] "
                                                          "resume = auto may load"});
  free(list);
  GT_CALL(status);
  char latest[GT_PATH_MAX + 8]; /* the file that names the checkpoint to load */
  snprintf(latest, sizeof latest, "%s/latest", cfg->checkpoint.dir);
  GT_CALL(gt_path_refuse_clobber(cfg->run.metrics, "[run] metrics", 1,
                                 (const char *const[]){latest},
                                 (const char *const[]){"the checkpoint directory's"}));
  return GT_SUCCESS;
}

void gt_run_dir(const gt_config *cfg, char *dir, size_t size)
{
  if (cfg->checkpoint.dir[0]) {
    snprintf(dir, size, "%s", cfg->checkpoint.dir);
  } else if (cfg->run.metrics[0] && strrchr(cfg->run.metrics, '/')) {
    snprintf(dir, size, "%s", cfg->run.metrics);
    *strrchr(dir, '/') = '\0';
    if (!dir[0])
      snprintf(dir, size, "/");
  } else {
    snprintf(dir, size, ".");
  }
}

int gt_trainer_create(const gt_config *cfg, MPI_Comm world, bool quiet, gt_trainer **trainer)
{
  gt_trainer *tr = calloc(1, sizeof *tr);
  GT_CHECK_ALLOC(tr, sizeof *tr);
  *trainer = tr;
  tr->writers = MPI_COMM_NULL;
  tr->cfg = *cfg;
  { /* every rank resolves the same deck alike: the same error everywhere */
    int ranks;
    GT_CALL_MPI(MPI_Comm_size(world, &ranks));
    const int status = gt_layout_resolve(cfg, ranks, &tr->layout);
    if (status != GT_SUCCESS) {
      gt_error_set_collective(true);
      return gt_error_push(status, __FILE__, __LINE__, __func__);
    }
  }
  const int sizes[3] = {tr->layout.dp, tr->layout.pp, tr->layout.tp};
  GT_CALL(gt_grid_create(world, sizes, &tr->grid));
  const gt_grid *g = tr->grid;
  MPI_Comm comm = g->world;
  /* Before anything is written: no output may be an input, and one job
   * per checkpoint directory (dir_lock.h). */
  GT_AGREE(comm, g->world_rank == 0 ? gt_check_outputs(cfg) : GT_SUCCESS);
  if (cfg->checkpoint.dir[0]) {
    GT_CALL(gt_ckpt_dir_prepare(cfg->checkpoint.dir, comm));
    GT_CALL(gt_dir_lock_take(cfg->checkpoint.dir, comm, &tr->lock));
  }
  { /* the hang watchdog (watchdog.h), from here to gt_trainer_destroy */
    char where[64], dir[GT_PATH_MAX];
    snprintf(where, sizeof where, "dp %d pp %d tp %d", g->dp_rank, g->pp_rank, g->tp_rank);
    gt_run_dir(cfg, dir, sizeof dir);
    GT_CALL(gt_watchdog_start(comm, cfg->run.hang_timeout, dir, where));
  }

  tr->T = (int)cfg->model.seq_len;
  tr->B = (int)cfg->data.batch;
  tr->B_rank = tr->layout.mbs * tr->layout.micro;
  tr->shape = gt_gpt_shape_config(cfg);
  if (tr->shape.experts > 0) {
    const size_t n = (size_t)tr->shape.layers * (size_t)tr->shape.experts + 1;
    tr->moe_red = calloc(n, sizeof *tr->moe_red);
    GT_CHECK_ALLOC(tr->moe_red, n * sizeof *tr->moe_red);
  }
  gt_scaler_init(&tr->scaler, tr->layout.dtype == GT_F16, cfg->backend.loss_scale,
                 cfg->backend.loss_scale_factor, cfg->backend.loss_scale_min,
                 cfg->backend.loss_scale_interval);
  tr->threads = gt_grid_threads(g, cfg->backend.threads);
  gt_grid_set_wait(g, tr->threads, cfg->parallel.wait == GT_WAIT_SETTING_YIELD,
                   cfg->parallel.wait == GT_WAIT_SETTING_BUSY);

  int status = gt_trainer_plan(tr);
  if (status != GT_SUCCESS && status != GT_ERR_SYSTEM)
    gt_error_set_collective(true); /* same configuration, same error everywhere */
  GT_AGREE(comm, status);
  GT_AGREE(comm, gt_trainer_device(tr));
  GT_AGREE(comm, cfg->run.eval_every > 0 && !cfg->data.val[0]
                     ? GT_ERROR(GT_ERR_INPUT,
                                "[run] eval_every = %ld needs a validation set: set [data] "
                                "val (or eval_every = 0)",
                                cfg->run.eval_every)
                     : GT_SUCCESS);

  GT_CALL(gt_trainer_sample_setup(tr, quiet)); /* reads the tokenizer: before the data opens */
  GT_CALL(gt_dataset_open(cfg->data.train, "/train/tokens", comm, &tr->train));
  GT_AGREE(comm, gt_check_data(tr, tr->train, tr->B));
  if (cfg->data.val[0]) {
    GT_CALL(gt_dataset_open(cfg->data.val, "/val/tokens", comm, &tr->val));
    GT_AGREE(comm, gt_check_data(tr, tr->val, tr->layout.mbs));
  }

  gt_trainer_events(tr);
  const int s = g->pp_rank;
  gt_gpt_part part = {.tp = {g->tp, g->tp_rank, g->tp_size, tr->ev.tp_comm, tr->coll},
                      .recompute = tr->layout.recompute,
                      .recompute_event = tr->ev.recompute,
                      .seq_par = tr->layout.seq_par,
                      .split_sets = gt_schedule_w_backlog(&tr->layout.schedule, g->pp_size,
                                                          g->pp_rank, tr->layout.micro)};
  /* the parameters split as the data-parallel path of the stage needs them */
  const gt_params_split split = gt_dp_params_split(tr->layout.zero, g->dp_rank, g->dp_size);
  if (g->world_rank == 0 && cfg->parallel.zero >= 1 && g->dp_size == 1 && !quiet)
    gt_info("gridtrain: [parallel] zero = %ld does nothing with dp = 1: the one data-parallel "
            "rank holds all of the optimizer state\n",
            cfg->parallel.zero);
  int cslots[GT_SCHEDULE_MAX_CHUNKS];
  const int slots =
      gt_schedule_chunk_slots(&tr->layout.schedule, g->pp_size, s, tr->layout.micro, cslots);
  gt_gpt_part_place(&part, tr->stage_first, g->pp_size, s, tr->layout.schedule.chunks, cslots);
  GT_AGREE(comm, gt_gpt_create(tr->be, &tr->shape, &part, &split, tr->layout.dtype,
                               tr->layout.mbs, tr->T, slots, &tr->model));
  GT_AGREE(comm, gt_gpt_init(tr->model, cfg->run.seed));
  const gt_pipe_events pev = {tr->ev.forward, tr->ev.backward, tr->ev.pp_comm, tr->ev.bubble};
  GT_AGREE(comm, gt_pipe_create(tr->model, tr->coll, g, &tr->layout.schedule, tr->layout.micro,
                                tr->layout.mbs, tr->T, pev, &tr->pipe));
  gt_params *params = gt_gpt_params(tr->model);
  tr->opt_cfg = (gt_adamw_config){cfg->optim.lr,        cfg->optim.min_lr,
                                  cfg->optim.warmup,    cfg->run.steps,
                                  cfg->optim.weight_decay, cfg->optim.beta1,
                                  cfg->optim.beta2,     cfg->optim.eps,
                                  cfg->optim.grad_clip};
  GT_AGREE(comm, gt_adamw_create(params, &tr->opt_cfg, &tr->opt));
  GT_CALL(gt_trainer_data_parallel(tr));
  GT_CALL(gt_dp_gather_compute(tr->dp)); /* bf16/fp16: the rest of the compute copy */

  size_t n = (size_t)tr->layout.mbs * (size_t)tr->T;
  tr->tokens = malloc(sizeof(int32_t) * n);
  tr->targets = malloc(sizeof(int32_t) * n);
  GT_AGREE(comm, tr->tokens && tr->targets
                     ? GT_SUCCESS
                     : GT_ERROR(GT_ERR_SYSTEM, "out of memory for token buffers"));
  GT_AGREE(comm, gt_trainer_readers_create(tr));
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
  if (!quiet)
    GT_CALL(gt_trainer_report_setup(tr, stdout));
  if (gt_schedule_streams(&tr->layout.schedule)) /* pipedream-2bw: the older version */
    GT_AGREE(comm, gt_params_stash_create(params));
  if (tr->defer) /* and the gradients of the step whose update is deferred */
    GT_AGREE(comm, gt_params_grads_double(params));
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
  gt_watchdog_stop();
  gt_ckpt_async_destroy(&tr->ckpt_async); /* settled by gt_trainer_run */
  gt_dir_lock_release(&tr->lock);
  /* Queued work first: nothing may still run on what is freed below. */
  int status = tr->be ? tr->be->ops->sync(tr->be) : GT_SUCCESS;
  gt_metrics_close(&tr->metrics);
  gt_local_state_free(tr);
  gt_pace_destroy(&tr->pace);
  gt_straggler_destroy(&tr->straggler);
  gt_reader_destroy(&tr->val_reader); /* before the datasets they read */
  gt_reader_destroy(&tr->train_reader);
  if (tr->val)
    gt_dataset_close(&tr->val);
  if (tr->train)
    gt_dataset_close(&tr->train);
  gt_pipe_destroy(&tr->pipe);
  gt_dp_destroy(&tr->dp);
  free(tr->sig_req);
  free(tr->sig_val);
  free(tr->moe_red);
  gt_adamw_destroy(&tr->opt);
  gt_trainer_sample_free(tr);
  gt_gpt_destroy(&tr->model);
  if (tr->clock) {
    gt_events_set_clock(NULL);
    gt_backend_clock_destroy(&tr->clock);
  }
  if (tr->be) {
    if (tr->scalars)
      tr->be->ops->free(tr->be, tr->scalars);
    if (tr->host_scalars)
      tr->be->ops->free_host(tr->be, tr->host_scalars);
    if (tr->scalars_ready)
      tr->be->ops->event_destroy(tr->be, tr->scalars_ready);
  }
  gt_coll_destroy(&tr->coll);
  gt_backend_destroy(&tr->be);
  free(tr->tokens);
  free(tr->targets);
  free(tr->stage_first);
  free(tr->tensors);
  if (tr->writers != MPI_COMM_NULL)
    MPI_Comm_free(&tr->writers);
  gt_grid_destroy(&tr->grid);
  free(tr);
  *trainer = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

gt_params *gt_trainer_params(gt_trainer *tr) { return gt_gpt_params(tr->model); }

const gt_grid *gt_trainer_grid(const gt_trainer *tr) { return tr->grid; }
