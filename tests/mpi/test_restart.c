/*
 * test_restart.c - a checkpoint continues the run it was taken from, in the
 * same layout bit for bit and in any other layout to fp32 rounding.
 *
 * 1. Uninterrupted: (dp,pp,tp) = (2,2,2) trains 2N steps (the reference).
 * 2. Interrupted: the same deck stops after N steps and writes a checkpoint
 *    (gt_trainer_save); a new trainer resumes from the directory
 *    ([checkpoint] resume = auto) and trains the other N steps. Its losses at
 *    every step and its final parameters must equal the reference's bit for
 *    bit (data order, learning-rate schedule and AdamW state included).
 * 3. Resharding: the same file loads into (1,1,1), (8,1,1), (1,4,2),
 *    (4,1,2), (1,2,4), (2,4,1) and (2,2,2) with the interleaved schedule
 *    (non-contiguous blocks per rank) ([checkpoint] resume = PATH). The loaded
 *    parameters, gathered as full tensors, must be bitwise the ones saved
 *    (loading only moves data), and N more steps must give the reference's
 *    losses within 1e-5 relative.
 * 4. A checkpoint written by (1,4,2) from that state holds the same tensors:
 *    loaded into (8,1,1) it gathers bitwise to the saved state.
 * 5. Loaded and written again by tp=4, tp=2 and ZeRO 1-3 layouts, with and
 *    without O_DIRECT, the file's datasets (values and both moments) are
 *    bitwise the (2,2,2) file's.
 *
 * 6. A llama (GQA, untied head, llama3 rope) at (2,2,2) with ZeRO 1 resumes
 *    bit for bit, and its file loads into one rank bitwise.
 *
 * [optim] eps = 1e-4 for the reason given in test_layouts.c (parameters whose
 * gradient is rounding noise); the same-layout checks are exact either way.
 *
 * gt-test: ranks=8 tier=full
 */
#include <hdf5.h>
#include <stdio.h>
#include <time.h>

#include "train_run.h"
#include "gridtrain/gpt.h"
#include "gridtrain/trainer.h"

#define N 4 /* steps before and after the restart */
#define TOL 1e-5

typedef struct layout {
  int dp, pp, tp;
  const char *schedule; /* NULL: the deck's (1f1b) */
} layout;

static const layout reshard[] = {{1, 1, 1, NULL}, {8, 1, 1, NULL},           {1, 4, 2, NULL},
                                 {4, 1, 2, NULL}, {1, 2, 4, NULL},           {2, 4, 1, NULL},
                                 {2, 2, 2, "interleaved:2"}};

static gt_gpt_shape shape_of(const gt_config *cfg)
{
  gt_gpt_shape s = gt_gpt_shape_config(cfg);
  return s;
}

/* What one run hands back on rank 0 of its communicator. */
typedef struct outcome {
  long start;           /* step index after create (resume) */
  double loss[2 * N];   /* losses of the steps run, from index 0 */
  float *loaded;        /* parameters right after create */
  float *final;         /* parameters at the end */
  char saved[1024];     /* checkpoint written at the end ("" for none) */
} outcome;

/* Collective on comm: create a trainer from cfg (resuming as it says), run
 * `steps` steps, optionally save into save_dir; gather parameters before and
 * after on rank 0. */
static int run(const gt_config *cfg, MPI_Comm comm, int steps, const char *save_dir,
               size_t numel, outcome *out)
{
  int rank;
  MPI_Comm_rank(comm, &rank);
  memset(out->loss, 0, sizeof out->loss);
  out->saved[0] = '\0';
  out->loaded = rank == 0 ? tu_alloc(numel) : NULL;
  out->final = rank == 0 ? tu_alloc(numel) : NULL;
  gt_trainer *tr = NULL;
  int st = gt_trainer_create(cfg, comm, true, &tr);
  if (st == GT_SUCCESS) {
    out->start = gt_trainer_step_index(tr);
    st = gt_trainer_gather_params(tr, out->loaded);
  }
  for (int s = 0; s < steps && st == GT_SUCCESS; s++) {
    gt_step_stats stats;
    st = gt_trainer_step(tr, &stats);
    out->loss[s] = stats.loss;
  }
  if (st == GT_SUCCESS)
    st = gt_trainer_gather_params(tr, out->final);
  if (st == GT_SUCCESS && save_dir)
    st = gt_trainer_save(tr, save_dir, out->saved, sizeof out->saved);
  if (tr)
    gt_trainer_destroy(&tr);
  return st;
}

static void free_outcome(outcome *o)
{
  free(o->loaded);
  free(o->final);
  o->loaded = o->final = NULL;
}

static bool same_bits(const float *a, const float *b, size_t n)
{
  return a && b && memcmp(a, b, n * sizeof(float)) == 0;
}

/* Every dataset of the groups /model, /optim/m and /optim/v of file a is in
 * file b with the same shape and bytes (serial HDF5; rank 0). The number of
 * datasets compared goes to *n, the first that differs to bad. */
typedef struct {
  hid_t other;
  const char *group;
  int n;
  char bad[512];
} file_cmp;

static herr_t cmp_dataset(hid_t group, const char *name, const H5L_info_t *info, void *ctx)
{
  (void)info;
  file_cmp *c = ctx;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", c->group, name);
  hid_t da = H5Dopen2(group, name, H5P_DEFAULT), db = H5Dopen2(c->other, path, H5P_DEFAULT);
  bool same = da >= 0 && db >= 0;
  hssize_t na = -1, nb = -2;
  if (same) {
    hid_t sa = H5Dget_space(da), sb = H5Dget_space(db);
    na = H5Sget_simple_extent_npoints(sa);
    nb = H5Sget_simple_extent_npoints(sb);
    H5Sclose(sa);
    H5Sclose(sb);
    same = na == nb && na > 0;
  }
  if (same) {
    float *x = tu_alloc((size_t)na), *y = tu_alloc((size_t)na);
    same = H5Dread(da, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0 &&
           H5Dread(db, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0 &&
           same_bits(x, y, (size_t)na);
    free(x);
    free(y);
  }
  if (da >= 0)
    H5Dclose(da);
  if (db >= 0)
    H5Dclose(db);
  c->n++;
  if (!same && !c->bad[0])
    snprintf(c->bad, sizeof c->bad, "%s", path);
  return 0;
}

static bool same_datasets(const char *a, const char *b, int *n, char *bad, size_t bad_size)
{
  static const char *const groups[] = {"/model", "/optim/m", "/optim/v"};
  hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
  file_cmp c = {.other = fb};
  bool ok = fa >= 0 && fb >= 0;
  for (int g = 0; g < 3 && ok; g++) {
    c.group = groups[g];
    hid_t ga = H5Gopen2(fa, groups[g], H5P_DEFAULT);
    ok = ga >= 0 && H5Literate(ga, H5_INDEX_NAME, H5_ITER_INC, NULL, cmp_dataset, &c) >= 0;
    if (ga >= 0)
      H5Gclose(ga);
  }
  if (fa >= 0)
    H5Fclose(fa);
  if (fb >= 0)
    H5Fclose(fb);
  *n = c.n;
  snprintf(bad, bad_size, "%s", c.bad[0] ? c.bad : ok ? "" : "(files not readable)");
  return ok && !c.bad[0] && c.n > 0;
}


// ---- 6. a llama resumes bit for bit ----

/* A llama (GQA 4/2, untied head on the last stage, llama3 rope) at (2,2,2)
 * with ZeRO 1: N steps, a checkpoint, N more after resume = auto are bitwise
 * the uninterrupted 2N; the file loads into one rank bitwise, and N steps
 * there follow within TOL. */
/* Collective on the world: cfg uninterrupted for 2N steps (*ref), then N
 * steps and a checkpoint into ckdir (*first; its path first->saved on every
 * rank), then resume = auto for the other N; the resumed run must be the
 * uninterrupted one bit for bit (losses, loaded and final parameters).
 * `what` names the case. */
static void check_resume(const gt_config *cfg, const char *ckdir, const char *what, int rank,
                         size_t numel, outcome *ref, outcome *first)
{
  outcome second = {0};
  char msg[256];
  snprintf(msg, sizeof msg, "%s: the uninterrupted run", what);
  tu_ok_status(run(cfg, MPI_COMM_WORLD, 2 * N, NULL, numel, ref), msg);
  snprintf(msg, sizeof msg, "%s: N steps and a checkpoint", what);
  tu_ok_status(run(cfg, MPI_COMM_WORLD, N, ckdir, numel, first), msg);
  MPI_Bcast(first->saved, sizeof first->saved, MPI_CHAR, 0, MPI_COMM_WORLD);
  gt_config resumed = *cfg;
  snprintf(resumed.checkpoint.dir, sizeof resumed.checkpoint.dir, "%s", ckdir);
  snprintf(resumed.checkpoint.resume, sizeof resumed.checkpoint.resume, "auto");
  snprintf(msg, sizeof msg, "%s: resume = auto", what);
  tu_ok_status(run(&resumed, MPI_COMM_WORLD, N, NULL, numel, &second), msg);
  if (rank == 0) {
    const bool same = second.start == N && same_bits(second.loaded, first->final, numel) &&
                      memcmp(second.loss, ref->loss + N, N * sizeof(double)) == 0 &&
                      same_bits(second.final, ref->final, numel);
    tap_ok(same,
           "%s: resumed at step %ld, steps %d..%d and the final parameters bit for bit the "
           "uninterrupted run's",
           what, second.start, N, 2 * N - 1);
    if (!same)
      for (int k = 0; k < N; k++)
        tap_diag("  step %d: %.17g vs %.17g", N + k, second.loss[k], ref->loss[N + k]);
  }
  free_outcome(&second);
}

static void test_llama_restart(const gt_config *base, const char *dir, int rank)
{
  gt_config cfg = *base;
  tu_config_set(&cfg, "model.type=llama");
  tu_config_set(&cfg, "model.kv_heads=2");
  tu_config_set(&cfg, "model.ffn_dim=48");
  tu_config_set(&cfg, "model.rope_scaling=llama3");
  tu_config_set(&cfg, "model.rope_original_seq_len=8");
  cfg.grid.dp = cfg.grid.pp = cfg.grid.tp = 2;
  cfg.parallel.zero = 1;
  const gt_gpt_shape shape = shape_of(&cfg);
  const size_t numel = gt_gpt_param_count(&shape);
  char ckdir[900];
  snprintf(ckdir, sizeof ckdir, "%s/ck_llama", dir);
  outcome ref = {0}, first = {0}, one = {0};
  check_resume(&cfg, ckdir, "llama (2,2,2) zero 1", rank, numel, &ref, &first);
  gt_config c = cfg;
  c.grid.dp = c.grid.pp = c.grid.tp = 1;
  c.parallel.zero = 0;
  snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", first.saved);
  if (rank == 0) {
    const int st = run(&c, MPI_COMM_SELF, N, NULL, numel, &one);
    if (tu_ok_status(st, "llama (1,1,1) loads the (2,2,2) zero 1 checkpoint")) {
      double worst = 0;
      for (int k = 0; k < N; k++)
        worst = fmax(worst, fabs(one.loss[k] - ref.loss[N + k]) / fabs(ref.loss[N + k]));
      tap_ok(one.start == N && same_bits(one.loaded, first.final, numel) && worst <= TOL,
             "llama (1,1,1): bitwise the saved parameters at step %ld; %d steps follow within "
             "%.0e (worst %.2e)",
             one.start, N, TOL, worst);
    }
  }
  tu_sleepy_barrier(MPI_COMM_WORLD);
  free_outcome(&ref);
  free_outcome(&first);
  free_outcome(&one);
}

/* 7. pipedream-2bw at (2,2,2) with ZeRO 1: a checkpoint taken while the
 * next batch's first forwards are in flight holds the older weight version
 * too, and the run resumes bit for bit; another layout loads the newest
 * weights bitwise and trains on (without the older version: said once). */
static void test_stream_restart(const gt_config *base, const char *dir, int rank)
{
  gt_config cfg = *base;
  cfg.grid.dp = cfg.grid.pp = cfg.grid.tp = 2;
  cfg.parallel.zero = 1;
  snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "pipedream-2bw");
  const gt_gpt_shape shape = shape_of(&cfg);
  const size_t numel = gt_gpt_param_count(&shape);
  char ckdir[900];
  snprintf(ckdir, sizeof ckdir, "%s/ck_2bw", dir);
  outcome ref = {0}, first = {0}, other = {0};
  check_resume(&cfg, ckdir, "pipedream-2bw (2,2,2) zero 1", rank, numel, &ref, &first);
  { /* ZeRO 0 defers each update into the next step: the checkpoint completes it */
    gt_config d = cfg;
    d.grid.dp = 1, d.grid.pp = 4, d.grid.tp = 2;
    d.parallel.zero = 0;
    d.data.microbatches = 4;
    outcome dref = {0}, dfirst = {0};
    snprintf(ckdir, sizeof ckdir, "%s/ck_2bw_deferred", dir);
    check_resume(&d, ckdir, "pipedream-2bw (1,4,2) zero 0, deferred updates", rank, numel, &dref,
                 &dfirst);
    free_outcome(&dref);
    free_outcome(&dfirst);
  }
  gt_config c = cfg;
  c.grid.dp = 1, c.grid.pp = 4, c.grid.tp = 2;
  c.parallel.zero = 0;
  c.data.microbatches = 4;
  snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", first.saved);
  const int st = run(&c, MPI_COMM_WORLD, N, NULL, numel, &other);
  if (tu_ok_status(st, "pipedream-2bw (1,4,2) loads the (2,2,2) checkpoint") && rank == 0) {
    bool finite = true;
    for (int k = 0; k < N; k++)
      finite &= isfinite(other.loss[k]) && other.loss[k] < ref.loss[0];
    tap_ok(other.start == N && same_bits(other.loaded, first.final, numel) && finite,
           "pipedream-2bw (1,4,2): bitwise the saved weights at step %ld, %d steps train on "
           "(loss %.4f -> %.4f)",
           other.start, N, other.loss[0], other.loss[N - 1]);
  }
  tu_sleepy_barrier(MPI_COMM_WORLD);
  free_outcome(&ref);
  free_outcome(&first);
  free_outcome(&other);
}

int main(int argc, char **argv)
{
  tu_scratch scratch;
  const int rank = tu_mpi_start(&argc, &argv, "test_restart", 8, &scratch);
  if (rank < 0)
    return 1;
  const char *dataset = scratch.dataset, *dir = scratch.dir;
  char deck[2000];
  snprintf(deck, sizeof deck,
           "[run]\nsteps = %d\nseed = 11\n"
           "[model]\nlayers = 4\nheads = 4\ndim = 32\nseq_len = 16\nvocab = 256\n"
           "[data]\ntrain = %s\nbatch = 16\nmicrobatches = 2\n"
           "[optim]\nlr = 3e-3\nmin_lr = 3e-4\nwarmup = 2\neps = 1e-4\n"
           "[backend]\nthreads = 1\n"
           "[parallel]\nwait = yield\n"
           "[checkpoint]\nresume = never\nkeep = 2\n",
           2 * N, dataset);
  gt_config cfg;
  gt_config_defaults(&cfg);
  if (gt_config_parse(&cfg, deck, "test_restart", 0, NULL) != GT_SUCCESS)
    return tap_bail("deck: %s", gt_error_message());
  cfg.grid.dp = cfg.grid.pp = cfg.grid.tp = 2;
  const gt_gpt_shape shape = shape_of(&cfg);
  const size_t numel = gt_gpt_param_count(&shape);
  char ckdir[900], ckdir2[900];
  snprintf(ckdir, sizeof ckdir, "%s/ck", dir);
  snprintf(ckdir2, sizeof ckdir2, "%s/ck142", dir);

  // ---- 1. uninterrupted reference ----
  outcome ref = {0};
  int st = run(&cfg, MPI_COMM_WORLD, 2 * N, NULL, numel, &ref);
  if (st != GT_SUCCESS) {
    tap_bail("reference run: %s", gt_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  tap_diag("reference (2,2,2), %d steps: loss %.6f -> %.6f", 2 * N, ref.loss[0],
           ref.loss[2 * N - 1]);

  // ---- 2. stop after N, save, resume in the same layout ----
  outcome first = {0}, second = {0};
  st = run(&cfg, MPI_COMM_WORLD, N, ckdir, numel, &first);
  tu_ok_status(st, "(2,2,2): N steps and a checkpoint");
  if (rank == 0) {
    bool same = memcmp(first.loss, ref.loss, N * sizeof(double)) == 0;
    tap_ok(same, "the first %d steps match the reference bit for bit", N);
    tap_diag("checkpoint %s", first.saved);
  }
  gt_config resumed = cfg;
  snprintf(resumed.checkpoint.dir, sizeof resumed.checkpoint.dir, "%s", ckdir);
  snprintf(resumed.checkpoint.resume, sizeof resumed.checkpoint.resume, "auto");
  st = run(&resumed, MPI_COMM_WORLD, N, NULL, numel, &second);
  tu_ok_status(st, "(2,2,2): resume = auto from the directory");
  if (rank == 0) {
    tap_ok(second.start == N, "resumed at step %ld (expected %d)", second.start, N);
    tap_ok(same_bits(second.loaded, first.final, numel),
           "the loaded parameters are bitwise the saved ones");
    bool same = memcmp(second.loss, ref.loss + N, N * sizeof(double)) == 0;
    tap_ok(same, "steps %d..%d after the restart match the uninterrupted run bit for bit", N,
           2 * N - 1);
    if (!same)
      for (int k = 0; k < N; k++)
        tap_diag("  step %d: %.17g vs %.17g", N + k, second.loss[k], ref.loss[N + k]);
    tap_ok(same_bits(second.final, ref.final, numel),
           "final parameters are bitwise those of the uninterrupted run");
  }
  free_outcome(&second);

  // ---- 3. the same file in other layouts ----
  char path[1024];
  snprintf(path, sizeof path, "%s", first.saved);
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (size_t l = 0; l < sizeof reshard / sizeof *reshard; l++) {
    const layout *ly = &reshard[l];
    const int size = ly->dp * ly->pp * ly->tp;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &comm);
    gt_config c = cfg;
    c.grid.dp = ly->dp;
    c.grid.pp = ly->pp;
    c.grid.tp = ly->tp;
    if (ly->schedule)
      snprintf(c.parallel.schedule, sizeof c.parallel.schedule, "%s", ly->schedule);
    snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", path);
    /* (1,4,2) also writes what it loaded, for part 4 */
    const bool writes = ly->dp == 1 && ly->pp == 4 && ly->tp == 2;
    outcome got = {0};
    if (comm != MPI_COMM_NULL) {
      st = run(&c, comm, writes ? 0 : N, writes ? ckdir2 : NULL, numel, &got);
      MPI_Comm_free(&comm);
    }
    tu_sleepy_barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      char what[96];
      snprintf(what, sizeof what, "(dp,pp,tp)=(%d,%d,%d)%s%s", ly->dp, ly->pp, ly->tp,
               ly->schedule ? " " : "", ly->schedule ? ly->schedule : "");
      if (!tu_ok_status(st, what)) {
        free_outcome(&got);
        continue;
      }
      tap_ok(got.start == N && same_bits(got.loaded, first.final, numel),
             "%s: loads the (2,2,2) checkpoint at step %ld, bitwise the saved parameters",
             what, got.start);
      if (writes) {
        tap_diag("%s wrote %s", what, got.saved);
      } else {
        double worst = 0;
        for (int k = 0; k < N; k++)
          worst = fmax(worst, fabs(got.loss[k] - ref.loss[N + k]) / fabs(ref.loss[N + k]));
        tap_ok(worst <= TOL,
               "%s: %d steps after loading follow the uninterrupted run (worst relative loss "
               "error %.2e <= %.0e)",
               what, N, worst, TOL);
      }
    }
    free_outcome(&got);
  }

  // ---- 4. a checkpoint written by another layout holds the same tensors ----
  char path2[1000];
  snprintf(path2, sizeof path2, "%s/step_%08d.h5", ckdir2, N);
  gt_config c = cfg;
  c.grid.dp = 8;
  c.grid.pp = c.grid.tp = 1;
  snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", path2);
  outcome back = {0};
  st = run(&c, MPI_COMM_WORLD, 0, NULL, numel, &back);
  if (rank == 0) {
    tu_ok_status(st, "(8,1,1) loads the checkpoint written by (1,4,2)");
    tap_ok(st == GT_SUCCESS && same_bits(back.loaded, first.final, numel),
           "the (1,4,2) checkpoint holds bitwise the (2,2,2) checkpoint's parameters");
  }
  free_outcome(&back);

  // ---- 5. rewritten by other layouts and ZeRO stages: the same datasets ----
  /* Loading and writing only move data: the files that these layouts write
   * of the state they loaded hold the (2,2,2) file's values and moments bit
   * for bit. tp > 1 exchanges entries inside the tensor-parallel group
   * before writing (checkpoint.c); ZeRO pieces cut tensors mid-row; the
   * data goes with and without O_DIRECT. */
  static const struct {
    int dp, pp, tp, zero;
    const char *direct;
  } rewrite[] = {{1, 2, 4, 0, "auto"}, {2, 1, 4, 3, "auto"}, {4, 1, 2, 1, "off"},
                 {2, 2, 2, 2, "off"},  {8, 1, 1, 3, "auto"}};
  for (size_t l = 0; l < sizeof rewrite / sizeof *rewrite; l++) {
    gt_config w = cfg;
    w.grid.dp = rewrite[l].dp;
    w.grid.pp = rewrite[l].pp;
    w.grid.tp = rewrite[l].tp;
    w.parallel.zero = rewrite[l].zero;
    tu_config_set(&w, "checkpoint.direct_io=%s", rewrite[l].direct);
    snprintf(w.checkpoint.resume, sizeof w.checkpoint.resume, "%s", path);
    char wdir[1000];
    snprintf(wdir, sizeof wdir, "%s/rewrite%zu", dir, l);
    outcome o = {0};
    st = run(&w, MPI_COMM_WORLD, 0, wdir, numel, &o);
    if (rank == 0) {
      char what[128], bad[512] = "";
      snprintf(what, sizeof what, "(dp,pp,tp)=(%d,%d,%d) zero=%d direct_io=%s",
               rewrite[l].dp, rewrite[l].pp, rewrite[l].tp, rewrite[l].zero,
               rewrite[l].direct);
      int n = 0;
      if (tu_ok_status(st, what)) {
        const bool same = same_datasets(path, o.saved, &n, bad, sizeof bad);
        tap_ok(same,
               "%s rewrites the (2,2,2) checkpoint: %d datasets bitwise the same%s%s", what,
               n, bad[0] ? "; differs: " : "", bad);
      }
    }
    free_outcome(&o);
  }
  free_outcome(&first);
  free_outcome(&ref);
  test_llama_restart(&cfg, dir, rank);
  test_stream_restart(&cfg, dir, rank);
  int status = tap_done();
  MPI_Finalize();
  return status;
}
