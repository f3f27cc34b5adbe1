/*
 * test_precision.c - bf16 and fp16 training in 3D layouts, the fp16 loss
 * scaler, and checkpoints across precisions.
 *
 * 1. Layouts: in bf16 and in fp16, (dp,pp,tp) = (2,2,2), (1,2,4), (4,1,2)
 *    and (2,4,1) (1F1B, 2 micro-batches) against one rank in the same
 *    precision: the loss of each of STEPS steps within LAYOUT_TOL relative,
 *    every final parameter tensor within PARAM_TOL of how far AdamW could
 *    have moved it (max|a - b| / max(max|b|, lr * STEPS)).
 *    Why a bound at all, and why this one: pipeline sends are exact and the
 *    DP sum is fp32 as in the fp32 test (1e-5), but tensor parallelism sums
 *    the partial outputs of the row-parallel projections over tp in the
 *    compute type, rounding each partial sum, where one rank rounds the full
 *    sum once. One such rounding is half an ulp: 2^-9 relative in bf16,
 *    2^-12 in fp16. The loss is a mean over 512 tokens of quantities that
 *    carry a few of these roundings each, and they do not all go the same
 *    way; the measured worst cases are 3e-5 (bf16) and 2.5e-6 (fp16) over 6
 *    steps, so 1e-3 leaves a margin of 30 while catching any real mistake
 *    (a wrong shard, a lost sum, a stale buffer each change the loss by
 *    1e-2 or more in this model). The weights: AdamW moves an element by about lr
 *    per step whatever the size of its gradient, so an element whose
 *    gradient is rounding noise (the biases start at zero) can end anywhere
 *    within lr * STEPS; the attention projection's bias in bf16 differs by
 *    ~2.5% of that range between layouts. PARAM_TOL = 5e-2 of the range (or
 *    of the tensor's size, when larger) passes that and fails any real
 *    error, which moves whole tensors by their own size.
 * 2. A planted overflow: fp16 with an initial loss scale of 2^40 overflows
 *    the fp16 logit gradients; the step is skipped, the scale halves, and the
 *    weights stay bitwise as they were; the scale keeps halving until a step
 *    fits, and then training goes on. A scale that would fall below
 *    [backend] loss_scale_min is an error naming the step.
 * 3. The scaler through a checkpoint: an fp16 run that skips and grows its
 *    scale, stopped and resumed, gives bitwise the losses, scales, skips and
 *    final weights of the uninterrupted run; so does a bf16 run.
 * 4. Across precisions: a bf16 checkpoint loads into an fp32 run and an fp32
 *    one into a bf16 run (other layouts too); the loaded master weights are
 *    bitwise those saved, and the next steps' losses follow the saving run's
 *    own continuation within CROSS_TOL (2e-2: the difference between bf16
 *    and fp32 arithmetic over a few steps, see test_precision_curve.c).
 *
 * gt-test: ranks=8 tier=full
 */
#include <stdio.h>
#include <time.h>

#include "train_run.h"
#include "gridtrain/gpt.h"
#include "gridtrain/trainer.h"

#define STEPS 6
#define LAYOUT_TOL 1e-3
#define PARAM_TOL 5e-2
#define LR 1e-3
#define CROSS_TOL 2e-2
#define MAXSTEPS 40

typedef struct layout {
  int dp, pp, tp;
} layout;

static const layout layouts[] = {{2, 2, 2}, {1, 2, 4}, {4, 1, 2}, {2, 4, 1}};

/* What one run hands back on rank 0 of its communicator. */
typedef struct outcome {
  long start;
  double loss[MAXSTEPS], scale[MAXSTEPS];
  bool skipped[MAXSTEPS];
  int status;         /* of the run */
  char message[512];  /* its error */
  float *loaded, *final;
  char saved[1024];
} outcome;

static size_t g_numel;
static gt_gpt_shape g_shape;

static gt_gpt_shape shape_of(const gt_config *cfg)
{
  gt_gpt_shape s = gt_gpt_shape_config(cfg);
  return s;
}

/* Collective on comm: create (resuming as cfg says), gather, run `steps`
 * steps (stopping at an error), gather, optionally save into save_dir. */
static void run(const gt_config *cfg, MPI_Comm comm, int steps, const char *save_dir,
                outcome *out)
{
  int rank;
  MPI_Comm_rank(comm, &rank);
  memset(out, 0, sizeof *out);
  out->loaded = rank == 0 ? tu_alloc(g_numel) : NULL;
  out->final = rank == 0 ? tu_alloc(g_numel) : NULL;
  gt_trainer *tr = NULL;
  int st = gt_trainer_create(cfg, comm, true, &tr);
  if (st == GT_SUCCESS) {
    out->start = gt_trainer_step_index(tr);
    st = gt_trainer_gather_params(tr, out->loaded);
  }
  for (int s = 0; s < steps && st == GT_SUCCESS; s++) {
    gt_step_stats stats;
    st = gt_trainer_step(tr, &stats);
    if (st == GT_SUCCESS) {
      out->loss[s] = stats.loss;
      out->scale[s] = stats.loss_scale;
      out->skipped[s] = stats.skipped;
    }
  }
  out->status = st;
  if (st != GT_SUCCESS)
    snprintf(out->message, sizeof out->message, "%s", gt_error_message());
  gt_error_clear();
  if (tr && (st == GT_SUCCESS || st == GT_ERR_NUMERIC)) {
    int s2 = gt_trainer_gather_params(tr, out->final);
    if (s2 == GT_SUCCESS && save_dir && st == GT_SUCCESS)
      s2 = gt_trainer_save(tr, save_dir, out->saved, sizeof out->saved);
    if (out->status == GT_SUCCESS)
      out->status = s2;
  }
  gt_trainer_destroy(&tr);
}

static void drop(outcome *o)
{
  free(o->loaded);
  free(o->final);
  o->loaded = o->final = NULL;
}

/* Worst per-tensor max|a - b| / max(max|b|, floor). */
static double param_err(const float *a, const float *b, double floor,
                        char worst[GT_PARAM_NAME_MAX])
{
  double err = 0;
  size_t off = 0;
  worst[0] = '\0';
  for (int i = 0; i < gt_gpt_logical_count(&g_shape); i++) {
    char name[GT_PARAM_NAME_MAX];
    int ndim;
    long dims[GT_TENSOR_MAX_DIMS];
    const size_t ne = gt_gpt_logical_param(&g_shape, i, name, &ndim, dims);
    double diff = 0, scale = 0;
    for (size_t k = 0; k < ne; k++) {
      double d = fabs((double)a[off + k] - b[off + k]);
      diff = isnan(d) ? INFINITY : fmax(diff, d);
      scale = fmax(scale, fabs((double)b[off + k]));
    }
    double e = diff / fmax(scale, floor);
    if (e > err || !worst[0]) {
      err = fmax(e, err);
      snprintf(worst, GT_PARAM_NAME_MAX, "%s", name);
    }
    off += ne;
  }
  return err;
}

static double loss_err(const double *a, const double *b, int n, int *at)
{
  double worst = 0;
  *at = 0;
  for (int k = 0; k < n; k++) {
    double e = fabs(a[k] - b[k]) / fmax(fabs(b[k]), 1e-30);
    if (!(e <= worst)) {
      worst = isnan(e) ? INFINITY : e;
      *at = k;
    }
  }
  return worst;
}


static gt_config with(const gt_config *base, const char *precision, int dp, int pp, int tp)
{
  gt_config c = *base;
  tu_config_set(&c, "backend.precision=%s", precision);
  c.grid.dp = dp;
  c.grid.pp = pp;
  c.grid.tp = tp;
  return c;
}

/* Run cfg on the first dp x pp x tp ranks of the world; the others wait. */
static void run_on(const gt_config *cfg, int steps, const char *save_dir, outcome *out)
{
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int size = (int)(cfg->grid.dp * cfg->grid.pp * cfg->grid.tp);
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &comm);
  if (comm != MPI_COMM_NULL) {
    run(cfg, comm, steps, save_dir, out);
    MPI_Comm_free(&comm);
  } else {
    memset(out, 0, sizeof *out);
  }
  tu_sleepy_barrier(MPI_COMM_WORLD);
}

// ---- 1. layouts in bf16 and fp16 ------------------------------------------------------

static void test_layouts(const gt_config *base, int rank)
{
  static const char *precisions[] = {"bf16", "fp16"};
  for (int p = 0; p < 2; p++) {
    outcome ref, got;
    gt_config one = with(base, precisions[p], 1, 1, 1);
    run_on(&one, STEPS, NULL, &ref);
    if (rank == 0 && !tap_ok(ref.status == GT_SUCCESS, "%s: the single-rank run trains",
                             precisions[p]))
      tap_diag("%s", ref.message);
    for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++) {
      const layout *ly = &layouts[l];
      gt_config c = with(base, precisions[p], ly->dp, ly->pp, ly->tp);
      run_on(&c, STEPS, NULL, &got);
      if (rank == 0) {
        int at;
        char tensor[GT_PARAM_NAME_MAX] = "";
        const double le = got.status == GT_SUCCESS ? loss_err(got.loss, ref.loss, STEPS, &at)
                                                   : INFINITY;
        const double pe = got.status == GT_SUCCESS ? param_err(got.final, ref.final, LR * STEPS, tensor)
                                                   : INFINITY;
        if (got.status != GT_SUCCESS)
          tap_diag("%s", got.message);
        tap_ok(le <= LAYOUT_TOL,
               "%s (dp,pp,tp)=(%d,%d,%d): loss of each of %d steps within %.0e of one %s rank "
               "(worst %.2e at step %d)",
               precisions[p], ly->dp, ly->pp, ly->tp, STEPS, LAYOUT_TOL, precisions[p], le, at);
        tap_ok(pe <= PARAM_TOL,
               "%s (dp,pp,tp)=(%d,%d,%d): final parameters within %.0e of their range (worst "
               "%.2e in %s)",
               precisions[p], ly->dp, ly->pp, ly->tp, PARAM_TOL, pe, tensor);
      }
      drop(&got);
    }
    drop(&ref);
  }
}

// ---- 2. a planted overflow ----------------------------------------------------------------

static void test_overflow(const gt_config *base, int rank)
{
  gt_config c = with(base, "fp16", 2, 2, 2);
  c.backend.loss_scale = 1099511627776.0; /* 2^40 */
  outcome one, more;
  run_on(&c, 1, NULL, &one);
  run_on(&c, MAXSTEPS, NULL, &more);
  if (rank == 0) {
    tap_ok(one.status == GT_SUCCESS && one.skipped[0] && one.scale[0] == 1099511627776.0 &&
               memcmp(one.loaded, one.final, g_numel * sizeof(float)) == 0,
           "fp16 with loss scale 2^40 on (2,2,2): step 0 overflows, is skipped, and leaves "
           "every weight bitwise as it was");
    int first_good = -1;
    bool halving = more.status == GT_SUCCESS;
    for (int s = 0; s < MAXSTEPS && first_good < 0 && halving; s++) {
      if (!more.skipped[s])
        first_good = s;
      else if (s > 0)
        halving = more.scale[s] == more.scale[s - 1] / 2;
    }
    tap_ok(halving && first_good > 0 && more.scale[first_good] == more.scale[first_good - 1] / 2,
           "every skipped step halves the scale; step %d is the first to fit, at scale %g",
           first_good, first_good >= 0 ? more.scale[first_good] : 0.0);
    tap_ok(first_good > 0 && first_good + 3 < MAXSTEPS && !more.skipped[MAXSTEPS - 1] &&
               more.loss[MAXSTEPS - 1] < more.loss[first_good] &&
               memcmp(more.loaded, more.final, g_numel * sizeof(float)) != 0,
           "then training goes on: loss %.4f -> %.4f", more.loss[first_good],
           more.loss[MAXSTEPS - 1]);
  }
  drop(&one);
  drop(&more);

  c.backend.loss_scale_min = 549755813888.0; /* 2^39: the second overflow falls below */
  outcome bad;
  run_on(&c, 4, NULL, &bad);
  if (rank == 0) {
    tap_ok(bad.status == GT_ERR_NUMERIC && strstr(bad.message, "at step 1") &&
               strstr(bad.message, "loss_scale_min"),
           "a scale that would fall below loss_scale_min is an error naming the step");
    tap_diag("%s", bad.message);
  }
  drop(&bad);
}

// ---- 3. the scaler through a checkpoint ---------------------------------------------------------

static void test_restart_in(const gt_config *base, int rank, const char *dir,
                            const char *precision)
{
  gt_config c = with(base, precision, 2, 2, 2);
  const bool fp16 = strcmp(precision, "fp16") == 0;
  c.backend.loss_scale = 268435456.0; /* fp16, 2^28: a few skips first */
  c.backend.loss_scale_interval = 2;  /* then growth every other good step */
  const int n = 12, half = 6;
  outcome full, a, b;
  run_on(&c, n, NULL, &full);
  run_on(&c, half, dir, &a);
  gt_config r = c;
  snprintf(r.checkpoint.resume, sizeof r.checkpoint.resume, "%s", a.saved);
  /* the saved path is known on rank 0 only */
  MPI_Bcast(r.checkpoint.resume, (int)sizeof r.checkpoint.resume, MPI_CHAR, 0, MPI_COMM_WORLD);
  run_on(&r, n - half, NULL, &b);
  if (rank == 0) {
    int skips = 0, grows = 0;
    for (int s = 0; s < n; s++) {
      skips += full.skipped[s];
      grows += s > 0 && full.scale[s] > full.scale[s - 1];
    }
    if (fp16)
      tap_ok(full.status == GT_SUCCESS && skips > 0 && grows > 0,
             "the fp16 run skips (%d) and grows its scale (%d times) in %d steps", skips, grows,
             n);
    bool same = b.status == GT_SUCCESS && b.start == half;
    for (int s = 0; s < n - half && same; s++)
      same = b.loss[s] == full.loss[half + s] && b.scale[s] == full.scale[half + s] &&
             b.skipped[s] == full.skipped[half + s];
    tap_ok(same,
           "%s resumed at step %ld: losses, scales and skips bitwise the uninterrupted run's",
           precision, b.start);
    tap_ok(b.status == GT_SUCCESS && memcmp(b.final, full.final, g_numel * sizeof(float)) == 0,
           "%s: and so are the final weights", precision);
  }
  drop(&full);
  drop(&a);
  drop(&b);
}

static void test_scaler_restart(const gt_config *base, int rank, const char *dir)
{
  test_restart_in(base, rank, dir, "fp16");
  test_restart_in(base, rank, dir, "bf16");
}

// ---- 4. checkpoints across precisions ---------------------------------------------------------

static void test_cross(const gt_config *base, int rank, const char *dir)
{
  static const char *from[2] = {"bf16", "fp32"}, *to[2] = {"fp32", "bf16"};
  for (int k = 0; k < 2; k++) {
    gt_config w = with(base, from[k], 2, 2, 2), l = with(base, to[k], 1, 2, 4);
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/cross-%s", dir, from[k]);
    outcome saver, cont, loader;
    run_on(&w, 3, sub, &saver);
    gt_config wc = w;
    snprintf(wc.checkpoint.resume, sizeof wc.checkpoint.resume, "%s", saver.saved);
    MPI_Bcast(wc.checkpoint.resume, (int)sizeof wc.checkpoint.resume, MPI_CHAR, 0,
              MPI_COMM_WORLD);
    snprintf(l.checkpoint.resume, sizeof l.checkpoint.resume, "%s", wc.checkpoint.resume);
    run_on(&wc, 3, NULL, &cont);   /* the saving run's own continuation */
    run_on(&l, 3, NULL, &loader);  /* the other precision, another layout */
    if (rank == 0) {
      tap_ok(loader.status == GT_SUCCESS && loader.start == 3 &&
                 memcmp(loader.loaded, saver.final, g_numel * sizeof(float)) == 0,
             "a %s checkpoint loads into %s on (1,2,4): the master weights are bitwise those "
             "saved", from[k], to[k]);
      int at;
      const double e = loader.status == GT_SUCCESS ? loss_err(loader.loss, cont.loss, 3, &at)
                                                   : INFINITY;
      tap_ok(e <= CROSS_TOL, "its next 3 losses follow the %s continuation within %.0e "
             "(worst %.2e)", from[k], CROSS_TOL, e);
      if (loader.status != GT_SUCCESS)
        tap_diag("%s", loader.message);
    }
    drop(&saver);
    drop(&cont);
    drop(&loader);
  }
}

int main(int argc, char **argv)
{
  tu_scratch scratch;
  const int rank = tu_mpi_start(&argc, &argv, "test_precision", 8, &scratch);
  if (rank < 0)
    return 1;
  const char *dataset = scratch.dataset, *dir = scratch.dir;
  char deck[1600];
  snprintf(deck, sizeof deck,
           "[run]\nsteps = %d\nseed = 11\n"
           "[model]\nlayers = 4\nheads = 8\ndim = 64\nseq_len = 16\nvocab = 256\n"
           "[data]\ntrain = %s\nbatch = 32\nmicrobatches = 2\n"
           "[optim]\nlr = %g\nmin_lr = 1e-4\nwarmup = 2\neps = 1e-4\n"
           "[backend]\nthreads = 1\n"
           "[parallel]\nwait = yield\n",
           MAXSTEPS, dataset, LR);
  gt_config cfg;
  gt_config_defaults(&cfg);
  if (gt_config_parse(&cfg, deck, "test_precision", 0, NULL) != GT_SUCCESS)
    return tap_bail("deck: %s", gt_error_message());
  g_shape = shape_of(&cfg);
  g_numel = gt_gpt_param_count(&g_shape);

  test_layouts(&cfg, rank);
  test_overflow(&cfg, rank);
  test_scaler_restart(&cfg, rank, dir);
  test_cross(&cfg, rank, dir);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
