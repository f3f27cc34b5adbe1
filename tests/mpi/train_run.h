/*
 * tests/mpi/train_run.h - the start-up of every C test of tests/mpi (MPI,
 * the environment of make check, the rank count, its scratch dataset), and
 * training runs for those that compare runs (test_zero.c, test_recompute.c,
 * test_memory.c): its deck, a trainer created from a deck, some
 * steps, the losses, the full parameters before and after, the dp replicas'
 * agreement, an optional checkpoint; and the comparisons.
 */
#ifndef GT_TESTS_TRAIN_RUN_H
#define GT_TESTS_TRAIN_RUN_H

#include <stdarg.h>

#include "../test_util.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grid.h"
#include "gridtrain/trainer.h"

#define TU_MAX_STEPS 32

// ---- start-up and end ----

/* The scratch directory of a test and the genesis dataset in it. */
typedef struct tu_scratch {
  char dir[700];
  char dataset[800];
} tu_scratch;

/* Start-up of an MPI test that make check runs on `ranks` ranks:
 * tu_mpi_init (MPI, log, TAP on rank 0), the environment of make check
 * (GT_SRCDIR, GT_BUILDDIR), the rank count, then, collective on the world,
 * the fresh scratch directory of test `name` with its genesis dataset
 * (tu_genesis_dataset) in *scratch. Returns this rank; -1 after a bail-out
 * line and MPI_Finalize, on every rank alike (main then returns 1). */
static inline int tu_mpi_start(int *argc, char ***argv, const char *name, int ranks,
                               tu_scratch *scratch)
{
  int rank = tu_mpi_init(argc, argv), nranks;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const bool env = getenv("GT_SRCDIR") && getenv("GT_BUILDDIR");
  if (!env || nranks != ranks) {
    if (!env)
      tap_bail("run through make check (GT_SRCDIR, GT_BUILDDIR unset)");
    else
      tap_bail("run on %d ranks, not %d", ranks, nranks);
    MPI_Finalize();
    return -1;
  }
  tu_genesis_dataset(name, scratch->dir, sizeof scratch->dir, scratch->dataset,
                     sizeof scratch->dataset);
  return rank;
}

/* Whether a case of `ranks` ranks fits the world; when not (a quick-tier
 * run on fewer ranks than the source declares), rank 0 says so in a
 * diagnostic line naming `what`, and the caller leaves the case out. */
static inline bool tu_fits_world(int ranks, const char *what)
{
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (ranks <= nranks)
    return true;
  if (rank == 0)
    tap_diag("%s: left out, it needs %d ranks of the %d here (the full tier runs it)", what,
             ranks, nranks);
  return false;
}

/* Every rank: the default configuration overridden by the deck that fmt
 * makes (printf-style) into *cfg. A deck that does not fit or does not parse
 * is a bail-out line naming test `name`, and the job aborts (as
 * tu_genesis_dataset does). */
__attribute__((format(printf, 3, 4))) static inline void tu_deck(gt_config *cfg,
                                                                   const char *name,
                                                                   const char *fmt, ...)
{
  char deck[2000];
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(deck, sizeof deck, fmt, ap);
  va_end(ap);
  gt_config_defaults(cfg);
  if (n < 0 || (size_t)n >= sizeof deck) {
    tap_bail("%s: the deck needs %d bytes, more than %zu", name, n, sizeof deck);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (gt_config_parse(cfg, deck, name, 0, NULL) != GT_SUCCESS) {
    tap_bail("deck: %s", gt_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* The end of the test: the TAP plan, MPI_Finalize; main returns this status. */
static inline int tu_mpi_finish(void)
{
  const int status = tap_done();
  MPI_Finalize();
  return status;
}

static inline gt_gpt_shape tu_shape_of(const gt_config *cfg)
{
  return gt_gpt_shape_config(cfg);
}

/* What one run hands back on rank 0 of its communicator. */
typedef struct tu_outcome {
  long start;                /* step index after create (resume) */
  double loss[TU_MAX_STEPS];
  float *loaded, *final;     /* full logical tensors after create and at the end */
  int replica_mismatch;      /* ranks whose compute weights differ from dp rank 0's
                                (-1: sharded, zero 3) */
  char saved[1024];
} tu_outcome;

/* Collective on dp: how many dp ranks hold compute weights other than dp
 * rank 0's (bit for bit); -1 at ZeRO stage 3, where no rank holds them
 * whole (each holds its own piece: nothing to compare). */
static inline int tu_replica_mismatches(gt_trainer *tr)
{
  const gt_grid *g = gt_trainer_grid(tr);
  gt_params *p = gt_trainer_params(tr);
  if (p->compute_sharded)
    return -1;
  const size_t bytes = p->numel * gt_dtype_size(p->dtype);
  char *mine = malloc(bytes), *root = malloc(bytes);
  if (!mine || !root || tu_download(p->be, mine, p->compute, bytes) != GT_SUCCESS)
    abort();
  memcpy(root, mine, bytes);
  MPI_Bcast(root, (int)bytes, MPI_BYTE, 0, g->dp);
  int differ = memcmp(root, mine, bytes) != 0, total = 0;
  MPI_Allreduce(&differ, &total, 1, MPI_INT, MPI_SUM, g->world);
  free(mine);
  free(root);
  return total;
}

/* Collective on comm: create (resuming as cfg says), run `steps` steps,
 * optionally save into save_dir; rank 0 of comm gets the results. */
static inline int tu_train(const gt_config *cfg, MPI_Comm comm, int steps, const char *save_dir,
               size_t numel, tu_outcome *out)
{
  int rank;
  MPI_Comm_rank(comm, &rank);
  memset(out, 0, sizeof *out);
  out->loaded = rank == 0 ? tu_alloc(numel) : NULL;
  out->final = rank == 0 ? tu_alloc(numel) : NULL;
  gt_trainer *tr = NULL;
  int st = gt_trainer_create(cfg, comm, true, &tr);
  if (st == GT_SUCCESS) {
    out->start = gt_trainer_step_index(tr);
    st = gt_trainer_gather_params(tr, out->loaded);
  }
  /* as gt_trainer_run steps (a deferred update completes in the next call) */
  const int n = steps < TU_MAX_STEPS ? steps : TU_MAX_STEPS;
  for (int s = 0; s <= n && st == GT_SUCCESS; s++) {
    gt_step_stats stats[2];
    int done = 0;
    st = s < n ? gt_trainer_advance(tr, false, stats, &done) : gt_trainer_settle(tr, stats, &done);
    for (int i = 0; i < done; i++)
      if (stats[i].step - out->start >= 0 && stats[i].step - out->start < n)
        out->loss[stats[i].step - out->start] = stats[i].loss;
  }
  if (st == GT_SUCCESS)
    st = gt_trainer_gather_params(tr, out->final);
  if (st == GT_SUCCESS)
    out->replica_mismatch = tu_replica_mismatches(tr);
  if (st == GT_SUCCESS && save_dir)
    st = gt_trainer_save(tr, save_dir, out->saved, sizeof out->saved);
  if (tr)
    gt_trainer_destroy(&tr);
  return st;
}

static inline void tu_free_outcome(tu_outcome *o)
{
  free(o->loaded);
  free(o->final);
  o->loaded = o->final = NULL;
}

/* Worst per-tensor max|a - b| / max(max|b|, floor) over the model; with
 * tol >= 0, the tensors past tol as diagnostics. */
static inline double tu_param_err_at(const gt_gpt_shape *shape, const float *a, const float *b,
                                     double floor, double tol)
{
  double err = 0;
  size_t off = 0;
  for (int i = 0; i < gt_gpt_logical_count(shape); i++) {
    char name[GT_PARAM_NAME_MAX];
    int ndim;
    long dims[GT_TENSOR_MAX_DIMS];
    const size_t ne = gt_gpt_logical_param(shape, i, name, &ndim, dims);
    double diff = 0, scale = floor;
    for (size_t k = 0; k < ne; k++) {
      double d = fabs((double)a[off + k] - b[off + k]);
      diff = isnan(d) ? INFINITY : fmax(diff, d);
      scale = fmax(scale, fabs((double)b[off + k]));
    }
    const double e = diff / fmax(scale, 1e-30);
    err = fmax(err, e);
    if (tol >= 0 && !(e <= tol))
      tap_diag("  %s: max|a - b| %.3g, scale %.3g", name, diff, scale);
    off += ne;
  }
  return err;
}

/* Worst per-tensor max|a - b| / max|b| over the model. */
static inline double tu_param_err(const gt_gpt_shape *shape, const float *a, const float *b)
{
  return tu_param_err_at(shape, a, b, 0.0, -1.0);
}

static inline double tu_loss_err(const double *a, const double *b, int n)
{
  double worst = 0;
  for (int k = 0; k < n; k++) {
    double e = fabs(a[k] - b[k]) / fmax(fabs(b[k]), 1e-30);
    worst = isnan(e) ? INFINITY : fmax(worst, e);
  }
  return worst;
}

static inline bool tu_same_bits(const float *a, const float *b, size_t n)
{
  return a && b && memcmp(a, b, n * sizeof(float)) == 0;
}

/* The first `size` ranks of the world, or MPI_COMM_NULL. */
static inline MPI_Comm tu_first_ranks(int size)
{
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &comm);
  return comm;
}

#endif /* GT_TESTS_TRAIN_RUN_H */
