/*
 * setup.c - the trainer's set-up and tear-down, the configuration table,
 * the per-rank memory table and where the ranks run (see trainer.h).
 */
#include "trainer_impl.h"

#include "build_config.h"

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

// ---- the tables ----------------------------------------------------------------------------

/* Rank 0: the configuration and what was resolved from it, as one table. */
static void gt_print_setup(const gt_trainer *tr, size_t params_max, size_t act_max)
{
  const gt_grid *g = tr->grid;
  const gt_config *cfg = &tr->cfg;
  if (g->world_rank != 0)
    return;
  char act[32], par[32], v[GT_PATH_MAX + 64];
  gt_format_bytes((double)act_max, act, sizeof act);
  /* compute copy, gradients, master and two moments by the ZeRO formulas
   * (memory.h) */
  gt_mem_account one;
  gt_mem_model_state(1.0, tr->dtype, tr->zero, g->dp_size, &one);
  gt_format_bytes(gt_mem_model_total(&one) * (double)params_max, par, sizeof par);
  printf("gridtrain %s: configuration (%s) and layout\n", PACKAGE_VERSION,
         cfg->deck_path[0] ? cfg->deck_path : "defaults");
  gt_config_print_table(cfg, stdout);
  snprintf(v, sizeof v, "dp=%d x pp=%d x tp=%d", g->dp_size, g->pp_size, g->tp_size);
  gt_config_print_row(stdout, "layout", v, "resolved");
  if (g->pp_size > 1) {
    /* interleaved: a stage's chunks joined by '+' ("0-1+4-5") */
    const int p = g->pp_size, V = tr->schedule.chunks;
    int n = snprintf(v, sizeof v, "blocks");
    for (int s = 0; s < p && n < (int)sizeof v - 24; s++)
      for (int c = 0; c < V && n < (int)sizeof v - 24; c++)
        n += snprintf(v + n, sizeof v - (size_t)n, "%s%d-%d", c ? "+" : s ? ", " : " ",
                      tr->stage_first[c * p + s], tr->stage_first[c * p + s + 1] - 1);
    snprintf(v + n, sizeof v - (size_t)n, "; %s schedule", gt_schedule_name(&tr->schedule));
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
  gt_config_print_row(stdout, "mpi and device memory", gt_coll_describe(tr->coll), "resolved");
  const char *algo = tr->cfg.parallel.allreduce;
  if (tr->grid->dp_size > 1 && strcmp(algo, "mpi") != 0) {
    if (strcmp(algo, "auto") == 0)
      snprintf(v, sizeof v, "gridtrain's, per size from %.120s; segments %ld KiB, %ld in flight",
               tr->cfg.parallel.coll_table, tr->cfg.parallel.coll_segment_kb,
               tr->cfg.parallel.coll_window);
    else
      snprintf(v, sizeof v, "gridtrain's %s; segments %ld KiB, %ld in flight", algo,
               tr->cfg.parallel.coll_segment_kb, tr->cfg.parallel.coll_window);
    gt_config_print_row(stdout, "dp collectives", v, "resolved");
  }
  if (tr->dtype == GT_F16)
    snprintf(v, sizeof v, "fp16 compute, fp32 master; dynamic loss scale from %g",
             tr->scaler.scale);
  else
    snprintf(v, sizeof v, "%s compute%s", gt_dtype_name(tr->dtype),
             tr->dtype == GT_F32 ? "" : ", fp32 master; loss scale 1");
  gt_config_print_row(stdout, "precision", v, "resolved");
  snprintf(v, sizeof v, "%.2fM; at most %.2fM on a rank (%s with grads and AdamW)",
           (double)gt_gpt_param_count(&tr->shape) / 1e6, (double)params_max / 1e6, par);
  gt_config_print_row(stdout, "parameters", v, "resolved");
  snprintf(v, sizeof v, "%s at most on a rank (micro-batch %d x %d)", act, tr->B_micro, tr->T);
  gt_config_print_row(stdout, "activations", v, "resolved");
  snprintf(v, sizeof v, "%d tokens = %d x %d; %d seq per dp rank in %d micro-batch%s",
           tr->B * tr->T, tr->B, tr->T, tr->B_rank, tr->M, tr->M == 1 ? "" : "es");
  gt_config_print_row(stdout, "step", v, "resolved");
  if (g->dp_size > 1 && tr->pgather) {
    gt_config_print_row(stdout, "dp reduce-scatter",
                        "each gradient unit (block, head, embedding) of every micro-batch as its "
                        "backward ends; each unit's weights all-gathered before its forward and "
                        "its backward, the next one prefetched",
                        "resolved");
  } else if (g->dp_size > 1 && tr->gshard) {
    gt_config_print_row(stdout, "dp reduce-scatter",
                        "each gradient unit (block, head, embedding) of every micro-batch as its "
                        "backward ends; then the weights all-gathered",
                        "resolved");
  } else if (g->dp_size > 1) {
    snprintf(v, sizeof v, "%d bucket%s on rank 0, %s%s", gt_buckets_count(tr->buckets),
             gt_buckets_count(tr->buckets) == 1 ? "" : "s",
             tr->overlap ? "overlapping the last backward" : "after backward",
             tr->zero >= 1 ? "; then the weights all-gathered" : "");
    gt_config_print_row(stdout, tr->zero >= 1 ? "dp reduce-scatter" : "dp all-reduce", v,
                        "resolved");
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

void gt_trainer_memory(const gt_trainer *tr, gt_mem_account *a)
{
  const gt_params *p = gt_gpt_params(tr->model);
  memset(a, 0, sizeof *a);
  gt_mem_model_state((double)p->numel, tr->dtype, tr->zero, tr->grid->dp_size, a);
  a->act_slot = (double)gt_gpt_slot_bytes(tr->model);
  a->in_flight = gt_schedule_in_flight(&tr->schedule, tr->grid->pp_size, tr->grid->pp_rank,
                                       tr->M);
  a->act_shared = (double)gt_gpt_activation_bytes(tr->model) - a->act_slot * a->in_flight;
  a->comm = (double)gt_coll_staging_bytes(tr->coll);
  a->grad_bufs = tr->gshard ? (double)gt_grad_shards_buffer_bytes(tr->gshard) : 0.0;
  a->gather_bufs = tr->pgather ? (double)gt_param_gather_buffer_bytes(tr->pgather) : 0.0;
}

/* The fields of an account, flat, for gathers. */
enum { GT_MEM_FIELDS = 11 };

static void gt_mem_pack(const gt_mem_account *a, double *v)
{
  const double f[GT_MEM_FIELDS] = {a->psi,      a->compute,  a->master,
                                   a->grads,    a->moments,  a->act_slot,
                                   a->in_flight, a->act_shared, a->comm,
                                   a->grad_bufs, a->gather_bufs};
  memcpy(v, f, sizeof f);
}

static void gt_mem_unpack(const double *v, gt_mem_account *a)
{
  *a = (gt_mem_account){v[0], v[1], v[2], v[3], v[4], v[5], (int)v[6], v[7], v[8], v[9], v[10]};
}

/* Collective on world: rank 0 gets every rank's account (n doubles a rank
 * from pack) in *all (freed by the caller; NULL elsewhere). */
static int gt_gather_ranks(const gt_trainer *tr, const double *mine, int n, double **all)
{
  const gt_grid *g = tr->grid;
  *all = g->world_rank == 0 ? malloc(sizeof(double) * (size_t)n * (size_t)g->world_size) : NULL;
  int status = g->world_rank == 0 && !*all ? GT_ERROR(GT_ERR_SYSTEM, "out of memory")
                                           : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, g->world));
  MPI_Request req;
  GT_CALL_MPI(MPI_Igather(mine, n, MPI_DOUBLE, *all, n, MPI_DOUBLE, 0, g->world, &req));
  GT_CALL(gt_comm_wait(&req));
  return GT_SUCCESS;
}

/* Rows of the per-rank tables: every rank, or with more than 32 ranks the
 * largest of each pipeline stage (field by field). */
static int gt_mem_rows(const gt_grid *g) { return g->world_size > 32 ? g->pp_size : g->world_size; }

static void gt_mem_row_of(const gt_grid *g, const double *all, int n, int r, double *row)
{
  for (int k = 0; k < n; k++)
    row[k] = 0;
  for (int w = 0; w < g->world_size; w++) {
    const int stage = w / (g->dp_size * g->tp_size);
    if (g->world_size > 32 ? stage != r : w != r)
      continue;
    for (int k = 0; k < n; k++)
      row[k] = fmax(row[k], all[(size_t)w * (size_t)n + (size_t)k]);
  }
}

/* Collective on world: rank 0 prints every rank's expected bytes by kind. */
static int gt_report_memory(const gt_trainer *tr, FILE *out)
{
  const gt_grid *g = tr->grid;
  gt_mem_account a;
  gt_trainer_memory(tr, &a);
  double mine[GT_MEM_FIELDS], *all;
  gt_mem_pack(&a, mine);
  GT_CALL(gt_gather_ranks(tr, mine, GT_MEM_FIELDS, &all));
  if (g->world_rank != 0)
    return GT_SUCCESS;
  char what[256];
  snprintf(what, sizeof what, "%s compute, zero %d over dp=%d, recompute %s, %s schedule%s",
           gt_dtype_name(tr->dtype), tr->zero, g->dp_size, tr->cfg.model.recompute,
           gt_schedule_name(&tr->schedule),
           g->tp_size > 1 && strcmp(tr->cfg.parallel.sequence_parallel, "on") == 0
               ? ", sequence parallel over tp"
               : "");
  gt_mem_print_header(out, what, tr->dtype, g->world_size > 32 ? "stage (max)" : "rank");
  for (int r = 0; r < gt_mem_rows(g); r++) {
    double row[GT_MEM_FIELDS];
    gt_mem_row_of(g, all, GT_MEM_FIELDS, r, row);
    gt_mem_account ra;
    gt_mem_unpack(row, &ra);
    char label[32];
    snprintf(label, sizeof label, "%d", r);
    gt_mem_print_row(out, label, &ra);
  }
  fflush(out);
  free(all);
  return GT_SUCCESS;
}

int gt_trainer_report_memory_peaks(gt_trainer *tr, FILE *out)
{
  const gt_grid *g = tr->grid;
  gt_mem_account a;
  gt_trainer_memory(tr, &a);
  size_t in_use, peak;
  gt_backend_device_memory(tr->be, &in_use, &peak);
  double mine[3] = {gt_mem_total(&a), (double)peak, gt_mem_rss_peak()}, *all;
  GT_CALL(gt_gather_ranks(tr, mine, 3, &all));
  if (g->world_rank != 0)
    return GT_SUCCESS;
  fprintf(out, "# memory per rank, measured: the %s allocator's high-water mark and the "
          "process's peak resident set\n# %-12s %11s %11s %8s %11s\n",
          tr->be->name, g->world_size > 32 ? "stage (max)" : "rank", "expected", "allocator",
          "ratio", "peak RSS");
  for (int r = 0; r < gt_mem_rows(g); r++) {
    double row[3];
    gt_mem_row_of(g, all, 3, r, row);
    char e[32], p[32], rss[32], label[32];
    gt_format_bytes(row[0], e, sizeof e);
    gt_format_bytes(row[1], p, sizeof p);
    gt_format_bytes(row[2], rss, sizeof rss);
    snprintf(label, sizeof label, "%d", r);
    fprintf(out, "  %-12s %11s %11s %8.3f %11s\n", label, e, p, row[0] > 0 ? row[1] / row[0] : 0,
            rss);
  }
  fflush(out);
  free(all);
  return GT_SUCCESS;
}

/* Collective on world: for a device backend, rank 0 prints which rank drives
 * which GPU (the first 64 ranks; the rest follow the same rule). */
static int gt_report_devices(const gt_trainer *tr, FILE *out)
{
  if (tr->be->device == GT_HOST)
    return GT_SUCCESS;
  const gt_grid *g = tr->grid;
  enum { LEN = 160, MAX_ROWS = 64 };
  char mine[LEN];
  snprintf(mine, sizeof mine, "%s", gt_backend_describe(tr->be));
  const int rows = g->world_size < MAX_ROWS ? g->world_size : MAX_ROWS;
  char *all = g->world_rank == 0 ? malloc((size_t)LEN * (size_t)g->world_size) : NULL;
  int status = g->world_rank == 0 && !all ? GT_ERROR(GT_ERR_SYSTEM, "out of memory") : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, g->world));
  MPI_Request req;
  GT_CALL_MPI(MPI_Igather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, 0, g->world, &req));
  GT_CALL(gt_comm_wait(&req));
  if (g->world_rank != 0)
    return GT_SUCCESS;
  fprintf(out, "# devices (%s; node-local rank mod the GPUs a rank sees; %d rank%s on rank 0's "
          "node)\n", tr->be->name, g->node_size, g->node_size == 1 ? "" : "s");
  for (int r = 0; r < rows; r++)
    fprintf(out, "  rank %-6d %s\n", r, all + (size_t)r * LEN);
  if (rows < g->world_size)
    fprintf(out, "  ... %d more ranks\n", g->world_size - rows);
  fflush(out);
  free(all);
  return GT_SUCCESS;
}

/* Collective on world: rank 0 prints where the ranks run: each rank's node
 * (MPI_Get_processor_name) and grid coordinates (the first 64 ranks), the
 * number of nodes (shared-memory domains) and the TP groups that span more
 * than one node, counted over all ranks (docs/parallelism.md). */
static int gt_report_placement(const gt_trainer *tr, FILE *out)
{
  const gt_grid *g = tr->grid;
  enum { LEN = MPI_MAX_PROCESSOR_NAME, NI = 4, MAX_ROWS = 64 };
  char name[LEN];
  int len = 0;
  memset(name, 0, sizeof name);
  GT_CALL_MPI(MPI_Get_processor_name(name, &len));
  int mine[NI] = {g->dp_rank, g->pp_rank, g->tp_rank, g->node_rank};
  const size_t n = (size_t)g->world_size;
  char *names = g->world_rank == 0 ? malloc((size_t)LEN * n) : NULL;
  int *coords = g->world_rank == 0 ? malloc(sizeof(int) * NI * n) : NULL;
  int status = g->world_rank == 0 && (!names || !coords)
                   ? GT_ERROR(GT_ERR_SYSTEM, "out of memory for the placement table")
                   : GT_SUCCESS;
  if (status != GT_SUCCESS) {
    free(names);
    free(coords);
  }
  GT_CALL(gt_error_agree(status, g->world));
  MPI_Request req[2];
  GT_CALL_MPI(MPI_Igather(name, LEN, MPI_CHAR, names, LEN, MPI_CHAR, 0, g->world, &req[0]));
  GT_CALL_MPI(MPI_Igather(mine, NI, MPI_INT, coords, NI, MPI_INT, 0, g->world, &req[1]));
  GT_CALL(gt_comm_waitall(2, req));
  if (g->world_rank != 0)
    return GT_SUCCESS;
  /* TP is fastest in the rank order: a group is a tp_rank 0 and the next
   * tp_size - 1 ranks. */
  int nodes = 0, groups = 0, split = 0;
  for (size_t r = 0; r < n; r++) {
    const int *c = coords + r * NI;
    nodes += c[3] == 0;
    if (c[2] != 0)
      continue;
    groups++;
    for (size_t t = 1; t < (size_t)g->tp_size && r + t < n; t++)
      if (strcmp(names + r * LEN, names + (r + t) * LEN) != 0) {
        split++;
        break;
      }
  }
  fprintf(out, "# ranks: %d on %d node%s; ", g->world_size, nodes, nodes == 1 ? "" : "s");
  if (split == 0)
    fprintf(out, "every tp group on one node\n");
  else
    fprintf(out, "%d of %d tp groups span nodes (keep tp a divisor of the ranks per node)\n",
            split, groups);
  /* rows start "  rank" (as the device table's): parsers of the memory
   * table above take "  <digit>" lines for theirs */
  const size_t rows = n < MAX_ROWS ? n : MAX_ROWS;
  for (size_t r = 0; r < rows; r++) {
    const int *c = coords + r * NI;
    fprintf(out, "  rank %-6zu %-24s dp %-4d pp %-4d tp %d\n", r, names + r * LEN, c[0], c[1],
            c[2]);
  }
  if (rows < n)
    fprintf(out, "  ... %zu more ranks\n", n - rows);
  fflush(out);
  free(names);
  free(coords);
  return GT_SUCCESS;
}

// ---- set-up ------------------------------------------------------------------------------

static int gt_trainer_bucket_ready(void *ctx, int first, int count)
{
  return gt_buckets_ready(((gt_trainer *)ctx)->buckets, first, count);
}

static int gt_trainer_bucket_progress(void *ctx)
{
  return gt_buckets_progress(((gt_trainer *)ctx)->buckets);
}

static int gt_trainer_gshard_ready(void *ctx, int first, int count)
{
  return gt_grad_shards_ready(((gt_trainer *)ctx)->gshard, first, count);
}

static int gt_trainer_gshard_progress(void *ctx)
{
  return gt_grad_shards_progress(((gt_trainer *)ctx)->gshard);
}

static int gt_trainer_gshard_acquire(void *ctx, int first, int count, float **base)
{
  return gt_grad_shards_acquire(((gt_trainer *)ctx)->gshard, first, count, base);
}

static int gt_trainer_weights_acquire(void *ctx, int first, int count, int next_first,
                                      int next_count, const void **base)
{
  return gt_param_gather_acquire(((gt_trainer *)ctx)->pgather, first, count, next_first, next_count,
                                 base);
}

static int gt_trainer_weights_release(void *ctx, int first, int count)
{
  return gt_param_gather_release(((gt_trainer *)ctx)->pgather, first, count);
}

static int gt_trainer_weights_progress(void *ctx)
{
  return gt_param_gather_progress(((gt_trainer *)ctx)->pgather);
}

/* ZeRO 3: the gather pool and the model's weight hook. Not collective. */
static int gt_trainer_weight_gathers(gt_trainer *tr)
{
  size_t sizes[GT_GPT_GATHER_BUFS];
  gt_gpt_gather_sizes(tr->model, sizes);
  GT_CALL(gt_param_gather_create(gt_gpt_params(tr->model), tr->coll, tr->grid->dp, sizes,
                                 GT_GPT_GATHER_BUFS, tr->ev.param_gather, &tr->pgather));
  const gt_weight_hook wh = {gt_trainer_weights_acquire, gt_trainer_weights_release, tr,
                             {gt_trainer_weights_progress, tr}};
  gt_gpt_set_weight_hook(tr->model, &wh);
  return GT_SUCCESS;
}

/* The stage split and schedule; errors are the same on every rank. */
static int gt_trainer_plan(gt_trainer *tr)
{
  double block_cost, head_cost;
  gt_gpt_stage_costs(&tr->shape, tr->T, &block_cost, &head_cost);
  GT_CALL(gt_schedule_plan(tr->cfg.parallel.schedule, tr->cfg.parallel.stages,
                           tr->shape.layers, tr->grid->pp_size, tr->M, block_cost, head_cost,
                           &tr->schedule, &tr->stage_first));
  tr->zero = tr->grid->dp_size > 1 ? (int)tr->cfg.parallel.zero : 0;
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

/* [parallel] allreduce: our algorithms on the data-parallel group.
 * Collective on world (every rank reads the same table). */
static int gt_trainer_algorithms(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  gt_algo a = GT_ALGO_MPI;
  GT_CALL(gt_algo_parse(cfg->parallel.allreduce, &a));
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

/* [parallel] compress on the data-parallel buckets; 16-bit payloads go
 * through the [parallel] allreduce algorithm (MPI's own for auto). */
static int gt_trainer_compression(gt_trainer *tr)
{
  gt_compress_spec spec;
  GT_CALL(gt_compress_parse(tr->cfg.parallel.compress, &spec));
  tr->compress = spec;
  if (spec.kind == GT_COMPRESS_NONE)
    return GT_SUCCESS;
  GT_CHECK(tr->zero == 0, GT_ERR_INPUT,
           "[parallel] compress = %s works on the all-reduce of zero = 0; ZeRO stages "
           "reduce-scatter the gradients instead (set zero = 0 or compress = none)",
           tr->cfg.parallel.compress);
  gt_algo a = GT_ALGO_MPI;
  GT_CALL(gt_algo_parse(tr->cfg.parallel.allreduce, &a));
  GT_CALL(gt_buckets_compress(tr->buckets, &spec, a == GT_ALGO_AUTO ? GT_ALGO_MPI : a,
                              tr->cfg.run.seed));
  return GT_SUCCESS;
}

/* [parallel] sync: the mode, the replica's communicator (pp x tp: the
 * scalars that must not wait for the other replicas) and, for stale, the
 * pipelined signal agreement. Collective on world. */
static int gt_trainer_sync(gt_trainer *tr)
{
  const gt_grid *g = tr->grid;
  gt_sync_spec spec;
  int status = gt_sync_parse(tr->cfg.parallel.sync, &spec);
  GT_CALL(gt_error_agree(status, g->world));
  if (spec.kind == GT_SYNC_EVERY)
    return GT_SUCCESS;
  GT_CALL_MPI(MPI_Comm_split(g->world, g->dp_rank, g->world_rank, &tr->replica));
  if (tr->compress.kind != GT_COMPRESS_NONE)
    status = GT_ERROR(GT_ERR_INPUT, "[parallel] compress = %s needs sync = every_step (the "
                      "compressed reduction is the every-step gradient all-reduce)",
                      tr->cfg.parallel.compress);
  else if (tr->zero > 0)
    status = GT_ERROR(GT_ERR_INPUT, "[parallel] sync = %s needs zero = 0: a replica that "
                      "steps on its own needs its whole optimizer state",
                      tr->cfg.parallel.sync);
  if (status == GT_SUCCESS) {
    float *m, *v;
    gt_adamw_moments(tr->opt, &m, &v);
    status = gt_sync_create(&spec, gt_gpt_params(tr->model), m, v, &tr->dp_group,
                            tr->cfg.parallel.outer_lr, tr->cfg.parallel.outer_momentum,
                            &tr->sync);
  }
  if (status == GT_SUCCESS && spec.kind == GT_SYNC_STALE) {
    tr->poll_hook = (gt_grad_hook){NULL, tr, {gt_trainer_bucket_progress, tr}, NULL, false};
    tr->sig_req = malloc(sizeof *tr->sig_req * (size_t)(spec.s + 1));
    tr->sig_val = calloc(2 * (size_t)(spec.s + 1), sizeof *tr->sig_val);
    if (!tr->sig_req || !tr->sig_val)
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory for the signal agreements");
    for (long i = 0; tr->sig_req && i <= spec.s; i++)
      tr->sig_req[i] = MPI_REQUEST_NULL;
  }
  GT_CALL(gt_error_agree(status, g->world));
  return GT_SUCCESS;
}

/* Backend, collectives context and device clock. */
static int gt_trainer_device(gt_trainer *tr)
{
  const gt_backend_options opt = {tr->threads, tr->grid->node_rank, tr->cfg.backend.attention};
  GT_CALL(gt_backend_create_with(tr->cfg.backend.device, &opt, &tr->be));
  GT_CALL(gt_coll_create(tr->be, tr->cfg.backend.mpi_device, &tr->coll));
  if (strcmp(tr->cfg.parallel.collectives, "nccl") == 0) {
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
  const char *in[] = {train, val, cfg->deck_path, cfg->checkpoint.resume};
  const char *what[] = {"[data] train", "[data] val", "the input deck", "[checkpoint] resume"};
  GT_CALL(gt_path_refuse_clobber(cfg->run.metrics, "[run] metrics", 4, in, what));
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
  tr->replica = MPI_COMM_NULL;
  tr->cfg = *cfg;
  GT_CALL(gt_grid_create(cfg, world, &tr->grid));
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
  tr->M = (int)cfg->data.microbatches;
  tr->B_rank = tr->B / g->dp_size;
  tr->B_micro = tr->B_rank / tr->M;
  tr->shape = (gt_gpt_shape){(int)cfg->model.layers, (int)cfg->model.heads,
                             (int)cfg->model.dim, (int)cfg->model.seq_len,
                             (int)cfg->model.vocab};
  tr->dtype = gt_precision_dtype(cfg->backend.precision);
  gt_scaler_init(&tr->scaler, tr->dtype == GT_F16, cfg->backend.loss_scale,
                 cfg->backend.loss_scale_factor, cfg->backend.loss_scale_min,
                 cfg->backend.loss_scale_interval);
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
    GT_AGREE(comm, gt_check_data(tr, tr->val, tr->B_micro));
  }

  gt_trainer_events(tr);
  const int s = g->pp_rank;
  gt_gpt_part part = {
    .tp = {g->tp, g->tp_rank, g->tp_size, tr->ev.tp_comm, tr->coll},
    .zero_rank = g->dp_rank,
    .zero_size = tr->zero >= 1 ? g->dp_size : 1,
    .recompute = (gt_recompute)gt_recompute_parse(cfg->model.recompute),
    .recompute_event = tr->ev.recompute,
    .zero_stage = tr->zero,
    .seq_par = strcmp(cfg->parallel.sequence_parallel, "on") == 0};
  tr->dp_group = (gt_group){g->dp, g->dp_rank, g->dp_size, tr->ev.zero_gather, tr->coll};
  if (g->world_rank == 0 && cfg->parallel.zero >= 1 && g->dp_size == 1 && !quiet)
    gt_info("gridtrain: [parallel] zero = %ld does nothing with dp = 1: the one data-parallel "
            "rank holds all of the optimizer state\n",
            cfg->parallel.zero);
  int cslots[GT_SCHEDULE_MAX_CHUNKS];
  const int slots = gt_schedule_chunk_slots(&tr->schedule, g->pp_size, s, tr->M, cslots);
  gt_gpt_part_place(&part, tr->stage_first, g->pp_size, s, tr->schedule.chunks, cslots);
  GT_AGREE(comm, gt_gpt_create(tr->be, &tr->shape, &part, tr->dtype, tr->B_micro, tr->T, slots,
                               &tr->model));
  GT_AGREE(comm, gt_gpt_init(tr->model, cfg->run.seed));
  GT_CALL(gt_trainer_gather_compute(tr)); /* bf16/fp16: the rest of the compute copy */
  if (tr->zero >= 3)
    GT_AGREE(comm, gt_trainer_weight_gathers(tr));
  const gt_pipe_events pev = {tr->ev.forward, tr->ev.backward, tr->ev.pp_comm, tr->ev.bubble};
  GT_AGREE(comm, gt_pipe_create(tr->model, tr->coll, g, &tr->schedule, tr->M, tr->B_micro,
                                tr->T, pev, &tr->pipe));
  gt_params *params = gt_gpt_params(tr->model);
  tr->opt_cfg = (gt_adamw_config){cfg->optim.lr,        cfg->optim.min_lr,
                                  cfg->optim.warmup,    cfg->run.steps,
                                  cfg->optim.weight_decay, cfg->optim.beta1,
                                  cfg->optim.beta2,     cfg->optim.eps,
                                  cfg->optim.grad_clip};
  GT_AGREE(comm, gt_adamw_create(params, &tr->opt_cfg, &tr->opt));
  const int tied = gt_gpt_tied_param(tr->model); /* summed over the embedding group first */
  tr->overlap = strcmp(cfg->parallel.dp_overlap, "on") == 0;
  if (tr->zero >= 2) { /* each unit's gradients reduce-scattered per micro-batch */
    int *first = malloc(sizeof(int) * (size_t)params->count);
    int *count = malloc(sizeof(int) * (size_t)params->count);
    int made = first && count ? GT_SUCCESS
                              : GT_ERROR(GT_ERR_SYSTEM, "out of memory for gradient units");
    if (made == GT_SUCCESS) {
      const int n = gt_gpt_grad_units(tr->model, first, count, params->count);
      made = gt_grad_shards_create(params, tr->coll, g->dp, first, count, n, tied,
                                   GT_GRAD_SHARDS_POOL, &tr->gshard);
    }
    free(first);
    free(count);
    GT_AGREE(comm, made);
    tr->hook = (gt_grad_hook){gt_trainer_gshard_ready, tr, {gt_trainer_gshard_progress, tr},
                              gt_trainer_gshard_acquire, true};
  } else {
    GT_AGREE(comm, gt_buckets_create(params, tr->coll, g->dp,
                                     (size_t)(cfg->parallel.bucket_mb * 1024.0 * 1024.0),
                                     &tr->buckets));
    if (tr->zero >= 1 && tied >= 0)
      gt_buckets_hold(tr->buckets, tied);
    tr->hook = (gt_grad_hook){gt_trainer_bucket_ready, tr, {gt_trainer_bucket_progress, tr},
                              NULL, false};
  }
  GT_AGREE(comm, gt_trainer_compression(tr));
  GT_CALL(gt_trainer_sync(tr));
  tr->embed = (gt_group){g->embed, 0, 1, tr->ev.tied, tr->coll};
  if (g->embed != MPI_COMM_NULL) {
    GT_CALL_MPI(MPI_Comm_rank(g->embed, &tr->embed.rank));
    GT_CALL_MPI(MPI_Comm_size(g->embed, &tr->embed.size));
  }

  size_t n = (size_t)tr->B_micro * (size_t)tr->T;
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
  /* The largest rank decides what fits: report it. */
  double most[2] = {(double)params->numel, (double)gt_gpt_activation_bytes(tr->model)};
  GT_CALL(gt_allreduce_f64(most, 2, MPI_MAX, comm));
  if (!quiet) {
    gt_print_setup(tr, (size_t)most[0], (size_t)most[1]);
    GT_CALL(gt_report_memory(tr, stdout));
    GT_CALL(gt_report_devices(tr, stdout));
    GT_CALL(gt_report_placement(tr, stdout));
  }
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
  gt_dir_lock_release(&tr->lock);
  /* Queued work first: nothing may still run on what is freed below. */
  int status = tr->be ? tr->be->ops->sync(tr->be) : GT_SUCCESS;
  gt_metrics_close(&tr->metrics);
  gt_pace_destroy(&tr->pace);
  gt_reader_destroy(&tr->val_reader); /* before the datasets they read */
  gt_reader_destroy(&tr->train_reader);
  if (tr->val)
    gt_dataset_close(&tr->val);
  if (tr->train)
    gt_dataset_close(&tr->train);
  gt_pipe_destroy(&tr->pipe);
  gt_buckets_destroy(&tr->buckets);
  gt_sync_destroy(&tr->sync);
  if (tr->replica != MPI_COMM_NULL)
    MPI_Comm_free(&tr->replica);
  free(tr->sig_req);
  free(tr->sig_val);
  gt_grad_shards_destroy(&tr->gshard);
  gt_param_gather_destroy(&tr->pgather);
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
