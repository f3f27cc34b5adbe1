/*
 * test_layouts.c - every parallel layout trains the same model to the same
 * numbers as a single rank.
 *
 * World rank 0 first trains the reference alone (MPI_COMM_SELF, dp = pp =
 * tp = 1) while the other ranks sleep; then every layout (dp,pp,tp) of the
 * set for the world size runs on the first dp x pp x tp ranks (the whole
 * world but for the 3-rank layouts of the 6-rank set), with the GPipe and the
 * 1F1B schedule and with 1 and 4 micro-batches, and, where pp > 1, with the
 * interleaved schedule: 2 chunks per rank over 2 pp micro-batches, and (pp =
 * 2) 3 chunks, uneven over the 8 blocks, over pp, and ZB-H1 (the backward
 * split into B and W) with 4 micro-batches. Each layout's gathered
 * initial parameters are bitwise those of the reference; in each run the loss
 * of each of 10 steps is within 1e-5 relative of the reference's, and so is
 * every final parameter tensor (max|a - b| / max|b|, gathered as full
 * logical tensors).
 *
 * Under a test mode of the CPU backend (GT_CPU_MODE = async or guard,
 * tests/modes/) each layout runs GPipe and 1F1B with 4 micro-batches,
 * interleaved:2 and zb-h1 only, and a layout without pipeline stages (pp = 1) GPipe
 * only: those modes check the rules of an asynchronous device (every
 * schedule's code path once, 1F1B's on the layouts with stages), not the
 * numbers again; the full set took 6 minutes of the suite under cpu-guard,
 * this one about 2.5.
 *
 * The model: 12 heads (tp = 1, 2, 3, 4, 6 divide them), vocab 256, which
 * tp = 3 and 6 do not divide (vocabulary padding), 8 layers so that
 * (1,8,1) runs (about 80 s for the 8-rank set on 2 cores; with fewer
 * layers than 8 it is skipped with the reason). T = 16 and dim 96 rather
 * than smaller: with T = 8 a 1F1B race
 * this test caught (the last stage rewrote a gradient buffer whose send was
 * still in flight) showed in far fewer runs.
 *
 * [optim] eps = 1e-4, not 1e-8: with a tiny eps AdamW divides each update by
 * that element's own gradient size, so elements whose gradient is rounding
 * noise (the attention key bias, whose exact gradient is 0, and stray
 * weights at some step) move by amounts set by the noise; then even one rank
 * with 4 micro-batches instead of 1 ends 2e-4 away from itself. eps = 1e-4
 * caps that gain at lr/eps and leaves the final parameters within ~1e-6.
 *
 * The same program serves 8 ranks (this file), 6 ranks (test_layouts6.c
 * includes it) and 4 ranks (the quick tier's tests/quick/layouts4.sh); it
 * picks its layout set from the world size. The 4-rank set runs each
 * schedule's code path once, as the test modes do: every 4-rank layout with
 * 4 micro-batches, GPipe and 1F1B and (pp > 1) interleaved:2 and zb-h1,
 * about 35 s.
 *
 * Then a llama (4 layers, 4 heads over 2 key/value heads, dim 32, MLP 48,
 * untied head, llama3 rope) in a small set of layouts, one per mode: tp,
 * 1f1b, dp, interleaved:2, zero 1 with sequence parallelism, zero 3 with
 * recompute block (8 ranks only), multi-query (kv_heads 1 at tp 1), zb-h1
 * with zero 1, bf16 and fp16, each against one rank of the same model and
 * precision at the GPT bounds (fp32: TOL; bf16, fp16: test_precision.c's).
 * The 6-rank set skips
 * it (its cases would repeat); it adds about 5 s at 4 and 8 ranks.
 *
 * Last pipedream-2bw, whose update rule is not 1F1B's (each batch computes
 * with the weights one update behind): its reference is one rank with the
 * same schedule, whose first step must be 1F1B's and second must not; then
 * (2,2,1), (1,4,1), (1,2,2), bf16 with ZeRO 1 and (8 ranks) (2,2,2) with
 * ZeRO 1 and (1,8,1) against it, at the bounds above (test_stream).
 *
 * gt-test: ranks=8 tier=full
 */
#include <stdio.h>
#include <time.h>

#include "train_run.h"
#include "gridtrain/gpt.h"
#include "gridtrain/schedule.h"
#include "gridtrain/trainer.h"

#define STEPS 10
#define TOL 1e-5
#define LAYERS 8
#define HEADS 12
#define DIM 96
#define SEQ 16

typedef struct layout {
  int dp, pp, tp;
} layout;

static const layout set8[] = {{8, 1, 1}, {4, 2, 1}, {4, 1, 2}, {2, 2, 2}, {2, 4, 1},
                              {2, 1, 4}, {1, 8, 1}, {1, 2, 4}, {1, 4, 2}};
static const layout set6[] = {{3, 1, 1}, {1, 3, 1}, {1, 1, 3}, {1, 1, 6}, {2, 3, 1}};
static const layout set4[] = {{4, 1, 1}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2}, {1, 4, 1}, {1, 1, 4}};
/* The CPU test modes at 8 ranks (tests/modes/): a layout per kind of split
 * (dp alone, pp alone, tp 4 with pp, all three), each schedule's code path
 * once (below): the modes check the backend's rules along each code path,
 * not every size, which the plain run does (all of set8 took 200 s under
 * cpu-guard on 2 cores). */
static const layout set8_modes[] = {{8, 1, 1}, {1, 8, 1}, {1, 2, 4}, {2, 2, 2}};

/* One training run's results, on world rank 0. */
typedef struct outcome {
  double loss[STEPS];
  float *initial, *final; /* full logical tensors */
  size_t numel;
} outcome;

static gt_gpt_shape shape_of(const gt_config *cfg)
{
  gt_gpt_shape s = gt_gpt_shape_config(cfg);
  return s;
}

static double seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Collective on comm: train STEPS steps with cfg; rank 0 of comm gets the
 * losses, the final parameters and, with initial, the initial ones
 * (allocated here). */
static int train_as(const gt_config *cfg, MPI_Comm comm, bool initial, bool stepwise,
                    outcome *out)
{
  int rank;
  MPI_Comm_rank(comm, &rank);
  gt_trainer *tr = NULL;
  size_t numel = 0;
  int st = gt_trainer_create(cfg, comm, true, &tr);
  if (st == GT_SUCCESS && rank == 0) {
    const gt_gpt_shape shape = shape_of(cfg);
    numel = gt_gpt_param_count(&shape);
    out->initial = initial ? tu_alloc(numel) : NULL;
    out->final = tu_alloc(numel);
  }
  if (st == GT_SUCCESS && initial)
    st = gt_trainer_gather_params(tr, rank == 0 ? out->initial : NULL);
  /* gt_trainer_run's way: a step's update may complete in the next call
   * (pipedream-2bw's deferred update); the references step by step */
  for (int s = 0; s <= STEPS && st == GT_SUCCESS; s++) {
    gt_step_stats stats[2];
    int n = 0;
    st = s < STEPS ? gt_trainer_advance(tr, stepwise, stats, &n)
                   : gt_trainer_settle(tr, stats, &n);
    for (int i = 0; i < n && st == GT_SUCCESS; i++)
      if (stats[i].step >= 0 && stats[i].step < STEPS)
        out->loss[stats[i].step] = stats[i].loss;
  }
  if (st == GT_SUCCESS)
    st = gt_trainer_gather_params(tr, rank == 0 ? out->final : NULL);
  out->numel = numel;
  gt_trainer_destroy(&tr);
  return st;
}

static int train(const gt_config *cfg, MPI_Comm comm, bool initial, outcome *out)
{
  return train_as(cfg, comm, initial, false, out);
}

/* Worst per-tensor max|a - b| / max|b| over the model; its tensor's name. */
static double param_err(const gt_gpt_shape *shape, const float *a, const float *b,
                        char worst[GT_PARAM_NAME_MAX])
{
  double err = 0;
  size_t off = 0;
  worst[0] = '\0';
  for (int i = 0; i < gt_gpt_logical_count(shape); i++) {
    char name[GT_PARAM_NAME_MAX];
    int ndim;
    long dims[GT_TENSOR_MAX_DIMS];
    const size_t ne = gt_gpt_logical_param(shape, i, name, &ndim, dims);
    double diff = 0, scale = 0;
    for (size_t k = 0; k < ne; k++) {
      double d = fabs((double)a[off + k] - b[off + k]);
      diff = isnan(d) ? INFINITY : fmax(diff, d);
      scale = fmax(scale, fabs((double)b[off + k]));
    }
    double e = diff / fmax(scale, 1e-30);
    if (e > err || !worst[0]) {
      err = fmax(e, err);
      snprintf(worst, GT_PARAM_NAME_MAX, "%s", name);
    }
    off += ne;
  }
  return err;
}

/* Collective on the world: train c on the first `size` ranks and compare
 * with ref on rank 0 (fp32: TOL for the loss of each step and every final
 * tensor; bf16 and fp16: test_precision.c's bounds, losses 1e-3, tensors
 * 5e-2 of max(max|b|, lr * steps)); `run` names the case. */
static void check_against(const gt_config *c, int size, int rank, const outcome *ref,
                          const char *run)
{
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &comm);
  outcome got = {0};
  int rs = GT_SUCCESS;
  const double t0 = seconds();
  if (comm != MPI_COMM_NULL) {
    rs = train(c, comm, false, &got);
    MPI_Comm_free(&comm);
  }
  tu_sleepy_barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const bool fp32 = c->backend.precision == GT_F32;
    const double ltol = fp32 ? TOL : 1e-3, ptol = fp32 ? TOL : 5e-2;
    const double floor = fp32 ? 0.0 : 1e-3 * STEPS; /* lr * steps */
    if (rs != GT_SUCCESS)
      tap_diag("%s: %s", run, gt_error_message());
    const gt_gpt_shape shape = gt_gpt_shape_config(c);
    const double le = rs == GT_SUCCESS ? tu_loss_err(got.loss, ref->loss, STEPS) : INFINITY;
    const double pe = rs == GT_SUCCESS && got.numel == ref->numel
                          ? tu_param_err_at(&shape, got.final, ref->final, floor, ptol)
                          : INFINITY;
    tap_ok(le <= ltol, "%s: loss of each of %d steps within %.0e (worst %.2e; %.1f s)", run,
           STEPS, ltol, le, seconds() - t0);
    tap_ok(pe <= ptol, "%s: final parameters within %.0e (worst %.2e)", run, ptol, pe);
  }
  free(got.initial);
  free(got.final);
}

// ---- llama: a small set of layouts against one llama rank ----

/* One llama case: a layout and what it switches on. kv: key/value heads
 * (tp must divide them); prec: the compute type (its one-rank reference
 * runs in the same type). */
typedef struct llama_case {
  int dp, pp, tp;
  const char *schedule;
  int m;
  int zero;
  bool seq_par;
  const char *recompute;
  int kv;
  const char *prec;
} llama_case;

/* The llama cases (test header): each mode's code path once on the llama
 * block, on at most 8 ranks; the 8-rank one is left out at 4 ranks. */
static const llama_case llama_cases[] = {
    {1, 1, 2, "gpipe", 1, 0, false, "none", 2, "fp32"},
    {1, 2, 1, "1f1b", 4, 0, false, "none", 2, "fp32"},
    {2, 1, 1, "gpipe", 1, 0, false, "none", 2, "fp32"},
    {1, 2, 2, "interleaved:2", 4, 0, false, "none", 2, "fp32"},
    {2, 1, 2, "1f1b", 2, 1, true, "none", 2, "fp32"},
    {2, 2, 2, "1f1b", 2, 3, false, "block", 2, "fp32"},
    {2, 2, 1, "1f1b", 2, 0, false, "none", 1, "fp32"},
    {2, 1, 2, "gpipe", 2, 0, false, "none", 2, "bf16"},
    {1, 2, 2, "1f1b", 2, 0, false, "none", 2, "fp16"},
    {2, 2, 1, "zb-h1", 4, 1, false, "none", 2, "fp32"},
};

static gt_config llama_config(const gt_config *base, int kv, const char *prec)
{
  gt_config c = *base;
  tu_config_set(&c, "model.type=llama");
  tu_config_set(&c, "model.layers=4");
  tu_config_set(&c, "model.heads=4");
  tu_config_set(&c, "model.dim=32");
  tu_config_set(&c, "model.kv_heads=%d", kv);
  tu_config_set(&c, "model.ffn_dim=48");
  tu_config_set(&c, "model.rope_scaling=llama3");
  tu_config_set(&c, "model.rope_original_seq_len=8");
  tu_config_set(&c, "backend.precision=%s", prec);
  c.grid.dp = c.grid.pp = c.grid.tp = 1;
  return c;
}

/* Every llama case against one rank of the same model and precision: fp32
 * within TOL (loss of each step, every final tensor) as the GPT layouts;
 * bf16 and fp16 within test_precision.c's bounds (losses 1e-3, tensors 5e-2
 * of max(max|b|, lr * steps)). */
static void test_llama(const gt_config *base, int nranks, int rank)
{
  const int kvs[] = {2, 1};
  const char *precs[] = {"fp32", "bf16", "fp16"};
  outcome refs[2][3];
  memset(refs, 0, sizeof refs);
  int st = GT_SUCCESS;
  for (int k = 0; k < 2; k++)
    for (int p = 0; p < 3; p++) {
      bool used = false;
      for (size_t i = 0; i < sizeof llama_cases / sizeof *llama_cases; i++)
        used |= llama_cases[i].kv == kvs[k] && strcmp(llama_cases[i].prec, precs[p]) == 0;
      if (!used || rank != 0 || st != GT_SUCCESS)
        continue;
      const gt_config one = llama_config(base, kvs[k], precs[p]);
      st = train(&one, MPI_COMM_SELF, false, &refs[k][p]);
      if (st != GT_SUCCESS)
        tap_diag("llama reference kv_heads %d %s: %s", kvs[k], precs[p], gt_error_message());
    }
  tu_sleepy_barrier(MPI_COMM_WORLD);
  MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0)
    tap_ok(st == GT_SUCCESS && refs[0][0].loss[STEPS - 1] < refs[0][0].loss[0] - 0.1,
           "llama: the single-rank references train (fp32 loss %.4f -> %.4f)",
           refs[0][0].loss[0], refs[0][0].loss[STEPS - 1]);
  for (size_t i = 0; i < sizeof llama_cases / sizeof *llama_cases && st == GT_SUCCESS; i++) {
    const llama_case *lc = &llama_cases[i];
    const int size = lc->dp * lc->pp * lc->tp;
    char run[200];
    snprintf(run, sizeof run,
             "llama kv_heads %d %s (dp,pp,tp)=(%d,%d,%d) %s mb=%d zero %d%s recompute %s",
             lc->kv, lc->prec, lc->dp, lc->pp, lc->tp, lc->schedule, lc->m, lc->zero,
             lc->seq_par ? " sequence parallel" : "", lc->recompute);
    if (!tu_fits_world(size, run) || size > nranks)
      continue;
    gt_config c = llama_config(base, lc->kv, lc->prec);
    c.grid.dp = lc->dp, c.grid.pp = lc->pp, c.grid.tp = lc->tp;
    snprintf(c.parallel.schedule, sizeof c.parallel.schedule, "%s", lc->schedule);
    c.data.microbatches = lc->m;
    c.parallel.zero = lc->zero;
    c.parallel.sequence_parallel = lc->seq_par;
    tu_config_set(&c, "model.recompute=%s", lc->recompute);
    const int k = lc->kv == 2 ? 0 : 1;
    const int p = strcmp(lc->prec, "fp32") == 0 ? 0 : strcmp(lc->prec, "bf16") == 0 ? 1 : 2;
    check_against(&c, size, rank, &refs[k][p], run);
  }
  for (int k = 0; k < 2; k++)
    for (int p = 0; p < 3; p++)
      free(refs[k][p].final);
}

// ---- pipedream-2bw: its own semantics, against one rank of it ----

/* The streaming schedule computes each batch with the weights one update
 * behind (W(t+1) = W(t) - lr grad f(W(t-1))), so its single-rank reference
 * is one rank with pipedream-2bw too (no pipeline there, the same two
 * weight versions). Its first step's loss is 1F1B's (the same initial
 * weights), its second is not (batch 1 still sees them); then layouts with
 * stages, data and tensor parallelism, ZeRO 1 and bf16 against it. */
typedef struct stream_case {
  int dp, pp, tp, m, zero;
  const char *prec;
} stream_case;

static const stream_case stream_cases[] = {
    {2, 2, 1, 4, 0, "fp32"}, {1, 4, 1, 4, 0, "fp32"}, {1, 2, 2, 2, 0, "fp32"},
    {2, 2, 1, 4, 1, "bf16"}, {2, 2, 2, 4, 1, "fp32"}, {1, 8, 1, 8, 0, "fp32"},
};

static void test_stream(const gt_config *base, int nranks, int rank, const outcome *fb)
{
  outcome refs[2];
  memset(refs, 0, sizeof refs);
  int st = GT_SUCCESS;
  const char *precs[] = {"fp32", "bf16"};
  for (int p = 0; p < 2 && rank == 0 && st == GT_SUCCESS; p++) {
    gt_config one = *base;
    one.grid.dp = one.grid.pp = one.grid.tp = 1;
    one.data.microbatches = 4;
    snprintf(one.parallel.schedule, sizeof one.parallel.schedule, "pipedream-2bw");
    tu_config_set(&one, "backend.precision=%s", precs[p]);
    st = train_as(&one, MPI_COMM_SELF, false, true, &refs[p]); /* each update in its step */
    if (st != GT_SUCCESS)
      tap_diag("pipedream-2bw reference (%s): %s", precs[p], gt_error_message());
  }
  tu_sleepy_barrier(MPI_COMM_WORLD);
  MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const outcome *r = &refs[0];
    tap_ok(st == GT_SUCCESS && r->loss[0] == fb->loss[0] &&
               fabs(r->loss[1] - fb->loss[1]) > 1e-4 && r->loss[STEPS - 1] < r->loss[0] - 0.5,
           "pipedream-2bw, one rank: step 0 as 1F1B's (%.6f, %.6f), step 1 one update behind "
           "(%.6f against %.6f), and it learns (%.4f -> %.4f)",
           r->loss[0], fb->loss[0], r->loss[1], fb->loss[1], r->loss[0], r->loss[STEPS - 1]);
  }
  for (size_t i = 0; i < sizeof stream_cases / sizeof *stream_cases && st == GT_SUCCESS; i++) {
    const stream_case *sc = &stream_cases[i];
    const int size = sc->dp * sc->pp * sc->tp;
    char run[160];
    snprintf(run, sizeof run, "pipedream-2bw (dp,pp,tp)=(%d,%d,%d) mb=%d zero %d %s", sc->dp,
             sc->pp, sc->tp, sc->m, sc->zero, sc->prec);
    if (size > nranks || base->data.batch % ((long)sc->dp * sc->m) != 0)
      continue;
    gt_config c = *base;
    c.grid.dp = sc->dp, c.grid.pp = sc->pp, c.grid.tp = sc->tp;
    c.data.microbatches = sc->m;
    c.parallel.zero = sc->zero;
    snprintf(c.parallel.schedule, sizeof c.parallel.schedule, "pipedream-2bw");
    tu_config_set(&c, "backend.precision=%s", sc->prec);
    /* the reference ran 4 micro-batches: other counts sum in another order */
    check_against(&c, size, rank, &refs[strcmp(sc->prec, "fp32") == 0 ? 0 : 1], run);
  }
  for (int p = 0; p < 2; p++)
    free(refs[p].final);
}

int main(int argc, char **argv)
{
#ifndef LAYOUTS_RANKS
#define LAYOUTS_RANKS 8 /* test_layouts6.c: 6 */
#endif
  const int nranks = tu_test_ranks(LAYOUTS_RANKS);
  char name[32];
  snprintf(name, sizeof name, "test_layouts%d", nranks);
  tu_scratch scratch;
  const int rank = tu_mpi_start(&argc, &argv, name, nranks, &scratch);
  if (rank < 0)
    return 1;
  const char *mode = getenv("GT_CPU_MODE");
  const bool modes8 = nranks == 8 && mode && mode[0];
  const layout *set = modes8        ? set8_modes
                      : nranks == 8 ? set8
                      : nranks == 6 ? set6
                      : nranks == 4 ? set4
                                    : NULL;
  const int nlayouts = modes8        ? (int)(sizeof set8_modes / sizeof *set8_modes)
                       : nranks == 8 ? (int)(sizeof set8 / sizeof *set8)
                       : nranks == 6 ? (int)(sizeof set6 / sizeof *set6)
                       : nranks == 4 ? (int)(sizeof set4 / sizeof *set4)
                                     : 0;
  if (!set) {
    tap_bail("run on 8, 6 or 4 ranks (layout sets), not %d", nranks);
    MPI_Finalize();
    return 1;
  }
  const char *dataset = scratch.dataset;

  /* batch: divisible by dp x microbatches of every layout in the set */
  char deck[1800];
  snprintf(deck, sizeof deck,
           "[run]\nsteps = %d\nseed = 7\n"
           "[model]\nlayers = %d\nheads = %d\ndim = %d\nseq_len = %d\nvocab = 256\n"
           "[data]\ntrain = %s\nbatch = %d\nmicrobatches = 1\n"
           "[optim]\nlr = 1e-3\nmin_lr = 1e-4\nwarmup = 3\neps = 1e-4\n"
           "[backend]\nthreads = 1\n"
           "[parallel]\nwait = yield\n",
           STEPS, LAYERS, HEADS, DIM, SEQ, dataset, nranks == 8 ? 32 : nranks == 6 ? 24 : 16);
  gt_config cfg;
  gt_config_defaults(&cfg);
  if (gt_config_parse(&cfg, deck, "test_layouts", 0, NULL) != GT_SUCCESS)
    return tap_bail("deck: %s", gt_error_message());
  const gt_gpt_shape shape = shape_of(&cfg);
  tap_diag("%d ranks; model layers %ld heads %ld dim %ld vocab %ld, T %ld, batch %ld, %d steps",
           nranks, cfg.model.layers, cfg.model.heads, cfg.model.dim, cfg.model.vocab,
           cfg.model.seq_len, cfg.data.batch, STEPS);

  // ---- the reference: one rank ----
  outcome ref = {0};
  int st = GT_SUCCESS;
  if (rank == 0) {
    gt_config one = cfg;
    one.grid.dp = one.grid.pp = one.grid.tp = 1;
    double t0 = seconds();
    st = train(&one, MPI_COMM_SELF, true, &ref);
    if (st != GT_SUCCESS)
      tap_diag("reference: %s", gt_error_message());
    else
      tap_diag("single-rank reference: loss %.6f -> %.6f (%.1f s)", ref.loss[0],
               ref.loss[STEPS - 1], seconds() - t0);
  }
  tu_sleepy_barrier(MPI_COMM_WORLD);
  MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (st != GT_SUCCESS) {
    tap_bail("the single-rank reference failed");
    MPI_Finalize();
    return 1;
  }
  if (rank == 0)
    tap_ok(ref.loss[STEPS - 1] < ref.loss[0] - 0.5, "the reference learns: loss %.4f -> %.4f",
           ref.loss[0], ref.loss[STEPS - 1]);

  // ---- every layout, on the first dp x pp x tp ranks of the world ----
  /* every layout: gpipe and 1f1b with 1 and 4 micro-batches; pp > 1 also
   * the interleaved schedule (m a multiple of pp, pp V <= layers) and zb-h1 */
  static const struct {
    const char *schedule;
    int m; /* micro-batches; < 0: -m times pp */
  } runs[] = {{"gpipe", 1},          {"gpipe", 4},          {"1f1b", 1},
              {"1f1b", 4},           {"interleaved:2", -2}, {"interleaved:3", -1},
              {"zb-h1", 4}};
  /* the test modes and the 4-rank set: each schedule's code path once */
  const bool mode_run = (mode && mode[0]) || nranks == 4;
  double worst_loss = 0, worst_param = 0;
  char worst_loss_run[128] = "", worst_param_run[200] = "";
  for (int l = 0; l < nlayouts; l++) {
    const layout *ly = &set[l];
    if (ly->pp > cfg.model.layers) {
      if (rank == 0)
        tap_ok(true,
               "(dp,pp,tp)=(%d,%d,%d) # SKIP pp=%d needs at least %d layers; the model has %ld",
               ly->dp, ly->pp, ly->tp, ly->pp, ly->pp, cfg.model.layers);
      continue;
    }
    /* a layout smaller than the world runs on its first ranks; the rest wait */
    const int size = ly->dp * ly->pp * ly->tp;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &comm);
    if (size < nranks)
      tap_diag("(dp,pp,tp)=(%d,%d,%d) runs on ranks 0..%d", ly->dp, ly->pp, ly->tp, size - 1);
    int init_differ = 0, init_runs = 0;
    bool want_initial = true; /* the first run of the layout gathers them */
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
      gt_config c = cfg;
      c.grid.dp = ly->dp;
      c.grid.pp = ly->pp;
      c.grid.tp = ly->tp;
      snprintf(c.parallel.schedule, sizeof c.parallel.schedule, "%s", runs[r].schedule);
      const int m = runs[r].m > 0 ? runs[r].m : -runs[r].m * ly->pp;
      c.data.microbatches = m;
      if (mode_run && (runs[r].m == 1 || strcmp(runs[r].schedule, "interleaved:3") == 0 ||
                       (ly->pp == 1 && strcmp(runs[r].schedule, "1f1b") == 0)))
        continue; /* the test modes: each schedule's code path once (above) */
      gt_schedule sc;
      gt_schedule_parse(runs[r].schedule, &sc);
      if (gt_schedule_check(&sc, ly->pp, m, LAYERS) != GT_SUCCESS ||
          c.data.batch % ((long)ly->dp * m) != 0 ||
          (sc.kind == GT_SCHEDULE_INTERLEAVED && sc.chunks == 3 && ly->pp != 2) ||
          (gt_schedule_splits(&sc) && (ly->pp == 1 || c.parallel.zero >= 2 ||
                                       c.parallel.sequence_parallel))) {
        gt_error_clear();
        continue; /* not a layout this schedule fits (or one more of the same) */
      }
      char run[128];
      snprintf(run, sizeof run, "(dp,pp,tp)=(%d,%d,%d) %s mb=%d", ly->dp, ly->pp, ly->tp,
               runs[r].schedule, m);
      outcome got = {0};
      double t0 = seconds();
      if (comm != MPI_COMM_NULL)
        st = train(&c, comm, want_initial, &got);
      want_initial = false;
      tu_sleepy_barrier(MPI_COMM_WORLD);
      double t = seconds() - t0;
      if (rank == 0) {
        if (st != GT_SUCCESS) {
          tap_diag("%s: %s", run, gt_error_message());
          tap_ok(false, "%s: trains", run);
          free(got.initial);
          free(got.final);
          continue;
        }
        if (got.initial) {
          init_runs++;
          init_differ += got.numel != ref.numel ||
                         memcmp(got.initial, ref.initial, ref.numel * sizeof(float)) != 0;
        }

        double le = 0;
        int lstep = 0;
        for (int k = 0; k < STEPS; k++) {
          double e = fabs(got.loss[k] - ref.loss[k]) / fmax(fabs(ref.loss[k]), 1e-30);
          if (!(e <= le)) { /* NaN counts as worst */
            le = isnan(e) ? INFINITY : e;
            lstep = k;
          }
        }
        tap_ok(le <= TOL,
               "%s: loss of each of %d steps within %.0e (worst %.2e at step %d; "
               "%.1f s)",
               run, STEPS, TOL, le, lstep, t);
        if (le > TOL)
          for (int k = 0; k < STEPS; k++)
            tap_diag("  step %d: loss %.9f, reference %.9f", k, got.loss[k], ref.loss[k]);

        char tensor[GT_PARAM_NAME_MAX] = "(sizes differ)";
        double pe =
            got.numel == ref.numel ? param_err(&shape, got.final, ref.final, tensor) : INFINITY;
        tap_ok(pe <= TOL, "%s: final parameters within %.0e (worst %.2e in %s)", run, TOL, pe,
               tensor);
        if (!(le <= worst_loss)) {
          worst_loss = le;
          snprintf(worst_loss_run, sizeof worst_loss_run, "%s", run);
        }
        if (!(pe <= worst_param)) {
          worst_param = pe;
          snprintf(worst_param_run, sizeof worst_param_run, "%s %s", run, tensor);
        }
      }
      free(got.initial);
      free(got.final);
    }
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
    if (rank == 0)
      tap_ok(init_runs == 1 && init_differ == 0,
             "(dp,pp,tp)=(%d,%d,%d): initial parameters bitwise those of one rank", ly->dp, ly->pp,
             ly->tp);
  }
  tap_diag("worst loss error %.2e (%s); worst parameter error %.2e (%s)", worst_loss,
           worst_loss_run, worst_param, worst_param_run);
  if (nranks != 6) { /* the 6-rank set would repeat the cases of up to 6 ranks */
    test_llama(&cfg, nranks, rank);
    test_stream(&cfg, nranks, rank, &ref);
  }
  free(ref.initial);
  free(ref.final);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
