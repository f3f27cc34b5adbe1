/*
 * report.c - the tables the trainer prints once it is set up: the
 * configuration and what was resolved from it, the memory account per rank
 * (expected, and measured at the end of a run), the devices and where the
 * ranks run (see trainer_impl.h).
 */
#include "trainer_impl.h"

#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"

// ---- the configuration and layout ----------------------------------------------------------

/* Rank 0: the configuration and what was resolved from it, as one table. */
static void gt_print_setup(const gt_trainer *tr, size_t params_max, size_t act_max,
                           FILE *out)
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
  gt_mem_model_state(1.0, tr->layout.dtype, tr->layout.zero, g->dp_size, &one);
  gt_format_bytes(gt_mem_model_total(&one) * (double)params_max, par, sizeof par);
  fprintf(out, "gridtrain %s: configuration (%s) and layout\n", PACKAGE_VERSION,
          cfg->deck_path[0] ? cfg->deck_path : "defaults");
  gt_config_print_table(cfg, out);
  snprintf(v, sizeof v, "dp=%d x pp=%d x tp=%d", g->dp_size, g->pp_size, g->tp_size);
  gt_config_print_row(out, "layout", v, "resolved");
  if (g->pp_size > 1) {
    /* interleaved: a stage's chunks joined by '+' ("0-1+4-5") */
    const int p = g->pp_size, V = tr->layout.schedule.chunks;
    int n = snprintf(v, sizeof v, "blocks");
    for (int s = 0; s < p && n < (int)sizeof v - 24; s++)
      for (int c = 0; c < V && n < (int)sizeof v - 24; c++)
        n += snprintf(v + n, sizeof v - (size_t)n, "%s%d-%d", c ? "+" : s ? ", " : " ",
                      tr->stage_first[c * p + s], tr->stage_first[c * p + s + 1] - 1);
    snprintf(v + n, sizeof v - (size_t)n, "; %s schedule", gt_schedule_name(&tr->layout.schedule));
    gt_config_print_row(out, "pipeline stages", v, "resolved");
  }
  snprintf(v, sizeof v, "%d (%d per node, %d cores per node)", g->world_size, g->node_size,
           g->node_cores);
  gt_config_print_row(out, "ranks", v, "resolved");
  snprintf(v, sizeof v, "%d", tr->threads);
  gt_config_print_row(out, "threads per rank", v, "resolved");
  gt_config_print_row(out, "mpi waits",
                      gt_comm_get_wait_mode() == GT_WAIT_YIELD ? "yield (oversubscribed)"
                                                               : "busy-poll",
                      "resolved");
  gt_config_print_row(out, "mpi and device memory", gt_coll_describe(tr->coll), "resolved");
  const gt_allreduce_algo algo = tr->cfg.parallel.allreduce;
  if (tr->grid->dp_size > 1 && algo != GT_ALLREDUCE_MPI) {
    if (algo == GT_ALLREDUCE_AUTO)
      snprintf(v, sizeof v, "gridtrain's, per size from %.120s; segments %ld KiB, %ld in flight",
               tr->cfg.parallel.coll_table, tr->cfg.parallel.coll_segment_kb,
               tr->cfg.parallel.coll_window);
    else
      snprintf(v, sizeof v, "gridtrain's %s; segments %ld KiB, %ld in flight",
               gt_allreduce_algo_names[algo],
               tr->cfg.parallel.coll_segment_kb, tr->cfg.parallel.coll_window);
    gt_config_print_row(out, "dp collectives", v, "resolved");
  }
  if (tr->layout.dtype == GT_F16)
    snprintf(v, sizeof v, "fp16 compute, fp32 master; dynamic loss scale from %g",
             tr->scaler.scale);
  else
    snprintf(v, sizeof v, "%s compute%s", gt_dtype_name(tr->layout.dtype),
             tr->layout.dtype == GT_F32 ? "" : ", fp32 master; loss scale 1");
  gt_config_print_row(out, "precision", v, "resolved");
  snprintf(v, sizeof v, "%.2fM; at most %.2fM on a rank (%s with grads and AdamW)",
           (double)gt_gpt_param_count(&tr->shape) / 1e6, (double)params_max / 1e6, par);
  gt_config_print_row(out, "parameters", v, "resolved");
  snprintf(v, sizeof v, "%s at most on a rank (micro-batch %d x %d)", act, tr->layout.mbs, tr->T);
  gt_config_print_row(out, "activations", v, "resolved");
  snprintf(v, sizeof v, "%d tokens = %d x %d; %d seq per dp rank in %d micro-batch%s",
           tr->B * tr->T, tr->B, tr->T, tr->B_rank, tr->layout.micro,
           tr->layout.micro == 1 ? "" : "es");
  gt_config_print_row(out, "step", v, "resolved");
  char dp_row[32];
  gt_dp_describe(tr->dp, dp_row, sizeof dp_row, v, sizeof v);
  if (dp_row[0])
    gt_config_print_row(out, dp_row, v, "resolved");
  snprintf(v, sizeof v, "%s (%lld tokens, vocab %ld)", gt_dataset_name(tr->train),
           gt_dataset_ntokens(tr->train), gt_dataset_vocab(tr->train));
  gt_config_print_row(out, "train data", v, "file");
  if (tr->val) {
    snprintf(v, sizeof v, "%s (%lld tokens)", gt_dataset_name(tr->val),
             gt_dataset_ntokens(tr->val));
    gt_config_print_row(out, "val data", v, "file");
  }
  snprintf(v, sizeof v, "%s; BLAS %s", tr->be->name, gt_backend_blas_info());
  gt_config_print_row(out, "backend", v, "resolved");
  fflush(out);
  if (gt_backend_blas_warning())
    gt_warn("%s", gt_backend_blas_warning());
}

// ---- memory per rank -----------------------------------------------------------------------

void gt_trainer_memory(const gt_trainer *tr, gt_mem_account *a)
{
  const gt_params *p = gt_gpt_params(tr->model);
  memset(a, 0, sizeof *a);
  gt_mem_model_state((double)p->numel, tr->layout.dtype, tr->layout.zero, tr->grid->dp_size, a);
  gt_mem_add_stash(a, &tr->layout.schedule, tr->layout.dtype, tr->layout.zero);
  a->act_slot = (double)gt_gpt_slot_bytes(tr->model);
  a->in_flight = gt_schedule_in_flight(&tr->layout.schedule, tr->grid->pp_size, tr->grid->pp_rank,
                                       tr->layout.micro);
  a->act_shared = (double)gt_gpt_activation_bytes(tr->model) - a->act_slot * a->in_flight;
  a->comm = (double)gt_coll_staging_bytes(tr->coll);
  gt_dp_buffer_bytes(tr->dp, &a->grad_bufs, &a->gather_bufs);
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
  gt_layout_describe(&tr->layout, what, sizeof what);
  gt_mem_print_header(out, what, tr->layout.dtype, g->world_size > 32 ? "stage (max)" : "rank");
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

// ---- devices and placement -----------------------------------------------------------------

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

// ---- at set-up -----------------------------------------------------------------------------

int gt_trainer_report_setup(gt_trainer *tr, FILE *out)
{
  /* The largest rank decides what fits: report it. */
  double most[2] = {(double)gt_gpt_params(tr->model)->numel,
                    (double)gt_gpt_activation_bytes(tr->model)};
  GT_CALL(gt_allreduce_f64(most, 2, MPI_MAX, tr->grid->world));
  gt_print_setup(tr, (size_t)most[0], (size_t)most[1], out);
  GT_CALL(gt_report_memory(tr, out));
  GT_CALL(gt_report_devices(tr, out));
  GT_CALL(gt_report_placement(tr, out));
  return GT_SUCCESS;
}

// ---- stragglers ----------------------------------------------------------------------------

struct gt_straggler {
  bool off;       /* margin 0, no stage with two ranks, or sync = stale:S */
  double own_ms;  /* this rank's own time since the last report */
  double step_ms; /* the steps' time since the last report */
  long steps;     /* steps since the last report */
  long first;     /* the first of them */
  double *mean;   /* world size: each rank's mean own time of the interval (reduced to rank 0) */
  double *sorted; /* rank 0: one stage's means, sorted */
  long *slow;     /* rank 0: reports in a row each rank was slow */
  long *since;    /* rank 0: the first step of each rank's slow reports */
};

void gt_straggler_destroy(gt_straggler **s)
{
  if (!*s)
    return;
  free((*s)->mean);
  free((*s)->sorted);
  free((*s)->slow);
  free((*s)->since);
  free(*s);
  *s = NULL;
}

/* Collective on world (an agreement on the allocations). */
static int gt_straggler_create(const gt_trainer *tr, gt_straggler **out)
{
  const gt_grid *g = tr->grid;
  const size_t n = (size_t)g->world_size, per = (size_t)g->dp_size * (size_t)g->tp_size;
  gt_straggler *s = calloc(1, sizeof *s);
  bool ok = s != NULL;
  if (ok) {
    /* stale:S keeps its replicas out of step on purpose, a deferred update
     * (pipedream-2bw) its stages (their signal agreements do not block
     * either): a blocking reduction would undo it */
    s->off = tr->cfg.run.straggler_margin <= 0 || per < 2 || tr->sig_req != NULL;
    if (!s->off) {
      s->mean = calloc(n, sizeof *s->mean);
      ok = s->mean != NULL;
      if (g->world_rank == 0) {
        s->sorted = malloc(per * sizeof *s->sorted);
        s->slow = calloc(n, sizeof *s->slow);
        s->since = calloc(n, sizeof *s->since);
        ok = ok && s->sorted && s->slow && s->since;
      }
    }
  }
  int status = gt_error_agree(ok ? GT_SUCCESS
                                 : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the straggler watch"),
                              g->world);
  if (status != GT_SUCCESS) {
    gt_straggler_destroy(&s);
    GT_CALL(status);
  }
  *out = s;
  return GT_SUCCESS;
}

static int gt_cmp_double(const void *a, const void *b)
{
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of sorted[0..n) without the entry at k. */
static double gt_median_without(const double *sorted, int n, int k)
{
  const int m = n - 1;
#define GT_AT(j) ((j) < k ? sorted[(j)] : sorted[(j) + 1])
  const double med = m % 2 ? GT_AT(m / 2) : 0.5 * (GT_AT(m / 2 - 1) + GT_AT(m / 2));
#undef GT_AT
  return med;
}

int gt_trainer_watch_stragglers(gt_trainer *tr, const gt_step_stats *st, bool report)
{
  if (!tr->straggler)
    GT_CALL(gt_straggler_create(tr, &tr->straggler));
  gt_straggler *s = tr->straggler;
  if (s->off)
    return GT_SUCCESS;
  const gt_grid *g = tr->grid;
  if (s->steps == 0)
    s->first = st->step;
  s->own_ms += fmax(0.0, st->step_ms - st->comm_ms - st->bubble_ms);
  s->step_ms += st->step_ms;
  s->steps++;
  if (!report)
    return GT_SUCCESS;
  memset(s->mean, 0, sizeof(double) * (size_t)g->world_size);
  s->mean[g->world_rank] = s->own_ms / (double)s->steps;
  const long first = s->first;
  const double step_ms = s->step_ms / (double)s->steps; /* rank 0's is the one used */
  s->step_ms = 0;
  s->own_ms = 0;
  s->steps = 0;
  GT_CALL(gt_reduce_f64(s->mean, g->world_size, MPI_SUM, 0, g->world));
  if (g->world_rank != 0)
    return GT_SUCCESS;
  /* rank = (pp DP + dp) TP + tp: a stage's ranks are consecutive */
  const int per = g->dp_size * g->tp_size;
  const double margin = tr->cfg.run.straggler_margin;
  for (int stage = 0; stage < g->pp_size; stage++) {
    const double *v = s->mean + (size_t)stage * (size_t)per;
    memcpy(s->sorted, v, sizeof(double) * (size_t)per);
    qsort(s->sorted, (size_t)per, sizeof(double), gt_cmp_double);
    for (int i = 0; i < per; i++) {
      const int r = stage * per + i;
      int k = 0;
      while (k < per - 1 && s->sorted[k] < v[i])
        k++;
      const double others = gt_median_without(s->sorted, per, k);
      if (!(v[i] - others > margin * step_ms)) {
        s->slow[r] = 0;
        continue;
      }
      if (s->slow[r]++ == 0)
        s->since[r] = first;
      if (s->slow[r] != tr->cfg.run.straggler_reports)
        continue;
      gt_info("gridtrain: straggler: rank %d (dp %d pp %d tp %d) works %.1f ms a step (the "
              "step less its waits for other ranks), %.1f ms more than the median of the other "
              "ranks of pipeline stage %d, %.0f%% of the %.1f ms step, in each of the last %ld "
              "reports (steps %ld-%ld; [run] straggler_margin = %g); its node is in the "
              "'# ranks' table\n",
              r, (r / g->tp_size) % g->dp_size, stage, r % g->tp_size, v[i], v[i] - others,
              stage, 100 * (v[i] - others) / step_ms, step_ms, s->slow[r], s->since[r],
              st->step, margin);
    }
  }
  return GT_SUCCESS;
}
