/*
 * test_cuda_train.c - training on "cuda" gives the numbers of "cpu": one
 * fp32 step in detail, then whole loss curves, for the GPT and for Llama.
 *
 * The model and data are those of tests/mpi/test_precision_curve.c: the
 * default deck's model (4 layers, width 128, 4 heads, context 128, bytes) on
 * Genesis, batch 8, one rank (dp = pp = tp = 1), one micro-batch, each run
 * through the public trainer API (gt_trainer_create / gt_trainer_step) with
 * only [backend] device and precision changed. The same again as Llama
 * ([model] type = llama, kv_heads = 2: RMSNorm, RoPE, SwiGLU, no biases, an
 * untied head, and grouped-query attention with 2 query heads per key/value
 * head, hs = 32, which cuDNN runs in bf16/fp16 on an H100/H200), the step of
 * part 1 and a bf16 curve of part 2: the ops the GPT does not reach, and
 * cuDNN's GQA graphs in training, for a quarter more time. And the step of
 * part 1 once more for that llama with experts in every block (4 SwiGLU
 * experts of 192 units, top 2, a shared expert): the router, the pairs in
 * expert order, the experts' products over their rows and the gated sum on
 * the GPU (cuda_moe.cu), whose routing must pick the cpu's experts.
 *
 * 1. One fp32 step on cuda and on cpu from the same weights and batch
 *    (bitwise the same initial parameters, checked). [optim] eps = 1e-4
 *    here, as in test_layouts.c: with eps = 1e-8 the first AdamW step moves
 *    every element by lr * sign(g), and elements whose exact gradient is 0
 *    (the attention key bias) move by a random +-lr set by rounding noise.
 *    - loss within 1e-5 relative, gradient norm within 1e-5 relative;
 *    - every parameter's gradient (read from gt_trainer_params after the
 *      step: the step zeroes the gradients at its start, AdamW leaves them)
 *      within GRAD_TOL = 1e-5, norm-wise per tensor and max|a - b| against
 *      max|b|. Two fp32 computations of the same sums in other orders: the
 *      cpu backend against cpu-ref (double accumulators) on this model and
 *      batch differs by at most 7.6e-7 norm-wise and 1.2e-6 of max|b| per
 *      tensor, so cuda and cpu, each about that far from exact, stay within
 *      ~2.5e-6; 1e-5 leaves a factor of 4. A TF32 product or a kernel that
 *      drops a term is off by 1e-4 and more.
 *    - the parameters after the step within 1e-5 of max|b| per tensor (the
 *      rule of test_layouts.c) and their update p1 - p0 within 1e-3
 *      norm-wise (the rule of test_torch_ref.c: the update is ~lr, and the
 *      fp32 rounding of p1 is 6e-8 of |p|).
 * 2. 200 steps of the same model in fp32 on cpu (eps 1e-8, the deck's) as
 *    the reference curve, and 200 steps on cuda in bf16, fp16 and fp32
 *    (Llama: bf16), each
 *    held to test_precision_curve.c's rule (reused, with its reasons):
 *    mean |loss - loss_fp32| over the last 50 steps <= 1% of the fp32
 *    loss, every step within 3%, every run learns (the last 50 steps
 *    average below 75% of the first step's loss), and fp16 skips no step
 *    after its first 20. On cpu those gaps were 0.0009 (bf16) and 0.0004
 *    (fp16) mean, 0.19% and 0.08% at worst; a GPU run rounds at the same
 *    points (the kernel contract) and should land in the same range.
 *
 * Skips (exit 77, one line "1..0 # SKIP ...") only when creating "cuda"
 * fails because the build has no CUDA or no GPU is visible; any other
 * failure fails. GT_GPU_TEST_BACKEND=cpu (or cpu-async, cpu-guard) runs the
 * GPU side on that backend instead, to check this test where there is no
 * GPU. Outside make check it runs from the source tree (GT_SRCDIR defaults
 * to the working directory when that holds inputs/default.in; scratch files
 * go to a fresh /tmp directory).
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>
#include <unistd.h>

#include "../test_util.h"
#include "gridtrain/cuda_info.h"
#include "gridtrain/gpt.h"
#include "gridtrain/trainer.h"

#define MAX_STEPS 200 /* the curves' default length (--steps N: shorter) */
#define BATCH 8
#define MEAN_TOL 0.01
#define STEP_TOL 0.03
#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-5
#define PARAM_TOL 1e-5
#define UPD_TOL 1e-3

static const char *gpu_name = "cuda";
/* the model under test: "gpt" (the deck's) or "llama", and its overrides */
static const char *model = "gpt";
static char *const llama_kv[2] = {"model.type=llama", "model.kv_heads=2"};
/* "moe": the llama with experts in every block (4 of 192 units, top 2, one
 * shared expert beside them) */
static char *const moe_kv[4] = {"model.experts=4", "model.top_k=2", "model.expert_ffn_dim=192",
                                "model.shared_experts=1"};
static char data_kv[1300], threads_kv[64];
static int steps = MAX_STEPS, tail_steps = 50; /* the curves: length, tail averaged */

/* The deck of test_precision_curve.c on device dev in precision prec, with
 * extra overrides. */
static int load(gt_config *cfg, const char *dev, const char *prec, int nextra,
                char *const *extra)
{
  char deck[1200], kv[4][80];
  snprintf(deck, sizeof deck, "%s/inputs/default.in", getenv("GT_SRCDIR"));
  snprintf(kv[0], sizeof kv[0], "backend.precision=%s", prec);
  snprintf(kv[1], sizeof kv[1], "run.steps=%d", steps);
  snprintf(kv[2], sizeof kv[2], "data.batch=%d", BATCH);
  snprintf(kv[3], sizeof kv[3], "backend.device=%s", dev);
  char *over[24] = {kv[0], kv[1], kv[2], kv[3], data_kv, "data.val=", "run.eval_every=0",
                    "run.metrics=", "checkpoint.dir=", "checkpoint.resume=never", "grid.dp=1",
                    "grid.pp=1", "grid.tp=1", "data.microbatches=1", threads_kv,
                    "parallel.wait=yield"};
  int n = 16;
  if (strcmp(model, "llama") == 0 || strcmp(model, "moe") == 0)
    for (int i = 0; i < 2; i++)
      over[n++] = llama_kv[i];
  if (strcmp(model, "moe") == 0)
    for (int i = 0; i < 4; i++)
      over[n++] = moe_kv[i];
  for (int i = 0; i < nextra && n < 24; i++)
    over[n++] = extra[i];
  return gt_config_load(cfg, deck, n, over, MPI_COMM_SELF);
}

// ---- 1. one fp32 step ---------------------------------------------------------------------

typedef struct {
  double loss, norm;
  gt_gpt_shape shape;
  size_t numel;           /* logical parameters */
  float *p0, *p1, *grads; /* logical parameters before and after; this rank's gradients */
  gt_params *layout;      /* names and offsets of the gradients (owned by tr) */
  gt_trainer *tr;
} one_step;

static int step_once(const char *dev, one_step *o)
{
  memset(o, 0, sizeof *o);
  char *extra[1] = {"optim.eps=1e-4"};
  gt_config cfg;
  int st = load(&cfg, dev, "fp32", 1, extra);
  if (st == GT_SUCCESS)
    st = gt_trainer_create(&cfg, MPI_COMM_SELF, true, &o->tr);
  if (st != GT_SUCCESS)
    return st;
  o->shape = gt_gpt_shape_config(&cfg);
  o->numel = gt_gpt_param_count(&o->shape);
  o->p0 = tu_alloc(o->numel);
  o->p1 = tu_alloc(o->numel);
  st = gt_trainer_gather_params(o->tr, o->p0);
  gt_step_stats stats;
  if (st == GT_SUCCESS)
    st = gt_trainer_step(o->tr, &stats);
  if (st == GT_SUCCESS) {
    o->loss = stats.loss;
    o->norm = stats.grad_norm;
    o->layout = gt_trainer_params(o->tr);
    o->grads = tu_alloc(o->layout->numel);
    st = tu_download(o->layout->be, o->grads, o->layout->grads,
                     o->layout->numel * sizeof(float));
  }
  if (st == GT_SUCCESS)
    st = gt_trainer_gather_params(o->tr, o->p1);
  return st;
}

static void free_step(one_step *o)
{
  if (o->tr)
    gt_trainer_destroy(&o->tr);
  free(o->p0), free(o->p1), free(o->grads);
  o->p0 = o->p1 = o->grads = NULL;
}

/* max|a - b| / max|b| over n (NaN: infinite). */
static double max_rel(const float *a, const float *b, size_t n)
{
  double d = 0, s = 0;
  for (size_t i = 0; i < n; i++) {
    const double e = fabs((double)a[i] - b[i]);
    d = isnan(e) ? INFINITY : fmax(d, e);
    s = fmax(s, fabs((double)b[i]));
  }
  return d / fmax(s, 1e-30);
}

static void test_one_step(void)
{
  one_step g, c;
  const int sg = step_once(gpu_name, &g);
  char what[64];
  snprintf(what, sizeof what, "%s: one fp32 step on the GPU backend", model);
  if (!tu_ok_status(sg, what)) {
    free_step(&g);
    return;
  }
  const int sc = step_once("cpu", &c);
  snprintf(what, sizeof what, "%s: one fp32 step on cpu", model);
  if (!tu_ok_status(sc, what)) {
    free_step(&g), free_step(&c);
    return;
  }
  tap_ok(c.layout->count == g.layout->count && c.numel == g.numel,
         "%s: both trainers hold the same %d parameter tensors (%zu values)", model,
         g.layout->count, g.numel);
  tap_ok(!memcmp(g.p0, c.p0, g.numel * sizeof(float)),
         "%s: the initial parameters are the same bits on both", model);
  const double el = fabs(g.loss - c.loss) / fabs(c.loss);
  tap_ok(el <= LOSS_TOL, "%s fp32 step 0: loss %.9f vs cpu %.9f (rel %.2e <= %.0e)", model,
         g.loss, c.loss, el, LOSS_TOL);
  const double en = fabs(g.norm - c.norm) / fabs(c.norm);
  tap_ok(en <= LOSS_TOL, "%s fp32 step 0: gradient norm %.9f vs cpu %.9f (rel %.2e <= %.0e)",
         model, g.norm, c.norm, en, LOSS_TOL);

  /* every gradient, by name */
  int bad = 0;
  double worst = -1;
  const char *worst_name = "";
  for (int i = 0; i < g.layout->count; i++) {
    const gt_param *t = &g.layout->list[i], *u = gt_params_find(c.layout, t->name);
    if (!u || u->numel != t->numel) {
      bad++;
      tap_diag("gradient of %s: not in the cpu trainer's parameters", t->name);
      continue;
    }
    const float *a = g.grads + t->offset, *b = c.grads + u->offset;
    const double nw = tu_rel_err(a, b, t->numel), mx = max_rel(a, b, t->numel);
    const double e = isfinite(nw) ? fmax(nw, mx) : INFINITY;
    if (!(e <= GRAD_TOL)) {
      bad++;
      tap_diag("gradient of %s: norm-wise %.2e, max %.2e of max|cpu| (bound %.0e)", t->name, nw,
               mx, GRAD_TOL);
    }
    if (!(e <= worst)) {
      worst = e;
      worst_name = t->name;
    }
  }
  tap_ok(bad == 0,
         "%s fp32 step 0: all %d parameter gradients within %.0e of cpu (worst %.2e, %s)", model,
         g.layout->count, GRAD_TOL, worst, worst_name);

  /* the parameters after one AdamW step, logical tensor by tensor */
  int bad_w = 0, bad_u = 0;
  double worst_w = 0, worst_u = 0;
  size_t off = 0;
  for (int i = 0; i < gt_gpt_logical_count(&g.shape); i++) {
    char name[GT_PARAM_NAME_MAX];
    int ndim;
    long dims[GT_TENSOR_MAX_DIMS];
    const size_t ne = gt_gpt_logical_param(&g.shape, i, name, &ndim, dims);
    const double ew = max_rel(g.p1 + off, c.p1 + off, ne);
    float *ug = tu_alloc(ne), *uc = tu_alloc(ne);
    for (size_t k = 0; k < ne; k++) {
      ug[k] = g.p1[off + k] - g.p0[off + k];
      uc[k] = c.p1[off + k] - c.p0[off + k];
    }
    double eu = tu_rel_err(ug, uc, ne);
    eu = isfinite(eu) ? eu : INFINITY;
    if (!(ew <= PARAM_TOL)) {
      bad_w++;
      tap_diag("%s after the step: max %.2e of max|cpu| (bound %.0e)", name, ew, PARAM_TOL);
    }
    if (!(eu <= UPD_TOL)) {
      bad_u++;
      tap_diag("%s: update p1 - p0 off by %.2e norm-wise (bound %.0e)", name, eu, UPD_TOL);
    }
    worst_w = fmax(worst_w, ew);
    worst_u = fmax(worst_u, eu);
    free(ug), free(uc);
    off += ne;
  }
  tap_ok(bad_w == 0,
         "%s fp32 step 0: every parameter after AdamW within %.0e of cpu (worst %.2e)", model,
         PARAM_TOL, worst_w);
  tap_ok(bad_u == 0, "%s fp32 step 0: every update p1 - p0 within %.0e of cpu's (worst %.2e)",
         model, UPD_TOL, worst_u);
  free_step(&g), free_step(&c);
}

// ---- 2. loss curves ---------------------------------------------------------------------------

typedef struct {
  const char *model, *dev, *prec;
  double loss[MAX_STEPS];
  int skipped_late, status;
  double seconds;
} curve;

static void train_curve(curve *cv)
{
  gt_config cfg;
  gt_trainer *tr = NULL;
  memset(cv->loss, 0, sizeof cv->loss);
  cv->skipped_late = 0;
  model = cv->model;
  const double t0 = MPI_Wtime();
  int st = load(&cfg, cv->dev, cv->prec, 0, NULL);
  if (st == GT_SUCCESS)
    st = gt_trainer_create(&cfg, MPI_COMM_SELF, true, &tr);
  for (int s = 0; s < steps && st == GT_SUCCESS; s++) {
    gt_step_stats stats;
    st = gt_trainer_step(tr, &stats);
    cv->loss[s] = stats.loss;
    cv->skipped_late += s >= 20 && stats.skipped;
  }
  if (st != GT_SUCCESS)
    tap_diag("%s %s %s: %s", cv->model, cv->dev, cv->prec, gt_error_message());
  if (tr)
    gt_trainer_destroy(&tr);
  gt_error_clear();
  cv->status = st;
  cv->seconds = MPI_Wtime() - t0;
}

static void check_curve(const curve *cv, const curve *ref)
{
  double tail = 0, mean = 0, worst = 0, rtail = 0;
  int at = 0;
  const int tail_n = tail_steps;
  for (int s = 0; s < steps; s++) {
    const double d = fabs(cv->loss[s] - ref->loss[s]) / ref->loss[s];
    if (!(d <= worst)) {
      worst = isnan(d) ? INFINITY : d;
      at = s;
    }
    if (s >= steps - tail_n) {
      tail += cv->loss[s] / tail_n;
      rtail += ref->loss[s] / tail_n;
      mean += fabs(cv->loss[s] - ref->loss[s]) / tail_n;
    }
  }
  tap_ok(cv->status == GT_SUCCESS && tail < 0.75 * cv->loss[0],
         "%s %s %s trains %d steps: loss %.4f -> %.4f (mean of the last %d; %.1f s)", cv->model,
         cv->dev, cv->prec, steps, cv->loss[0], tail, tail_n, cv->seconds);
  if (cv == ref)
    return;
  tap_ok(cv->status == GT_SUCCESS && mean <= MEAN_TOL * rtail,
         "%s %s %s tracks cpu fp32 over the last %d steps: mean |gap| %.4f <= %.0f%% of %.3f",
         cv->model, cv->dev, cv->prec, tail_n, mean, 100 * MEAN_TOL, rtail);
  tap_ok(cv->status == GT_SUCCESS && worst <= STEP_TOL,
         "%s %s %s within %.0f%% of cpu fp32 at every step (worst %.2f%% at step %d)",
         cv->model, cv->dev, cv->prec, 100 * STEP_TOL, 100 * worst, at);
  if (strcmp(cv->prec, "fp16") == 0)
    tap_ok(cv->skipped_late == 0, "%s %s fp16 skips no step after the first 20 (%d)", cv->model,
           cv->dev, cv->skipped_late);
}

// ---- set-up -----------------------------------------------------------------------------------

/* Skip (exit 77) when "cuda" cannot be created for want of CUDA or a GPU. */
static void probe_gpu(void)
{
  gt_backend *be = NULL;
  if (gt_backend_create(gpu_name, 1, &be) == GT_SUCCESS) {
    gt_backend_destroy(&be);
    return;
  }
  if (strcmp(gpu_name, "cuda") == 0 && (!gt_cuda_built() || gt_cuda_device_count() == 0)) {
    char desc[256];
    gt_cuda_describe(desc, sizeof desc);
    printf("1..0 # SKIP no CUDA device: %s\n", desc);
    fflush(stdout);
    MPI_Finalize();
    exit(77);
  }
  tap_bail("cannot create the %s backend: %s", gpu_name, gt_error_message());
  exit(1);
}

static int usage(void)
{
  return tap_bail("usage: test_cuda_train [--one-step | --curves] [--model gpt|llama|moe] "
                  "[--steps N (40..%d)]", MAX_STEPS);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  /* --one-step: part 1 only; --curves: part 2 only; --model M: that model
   * only (default both); --steps N: curves of N steps (the tail averaged is
   * the last quarter, at most 50) */
  bool one = true, curves = true, gpt = true, llama = true, moe = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--one-step") == 0)
      curves = false;
    else if (strcmp(argv[i], "--curves") == 0)
      one = false;
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc &&
             (!strcmp(argv[i + 1], "gpt") || !strcmp(argv[i + 1], "llama") ||
              !strcmp(argv[i + 1], "moe"))) {
      i++;
      gpt = !strcmp(argv[i], "gpt");
      llama = !strcmp(argv[i], "llama");
      moe = !strcmp(argv[i], "moe");
    }
    else
      return usage();
  }
  if (!one && !curves)
    return usage();
  if (steps < 40 || steps > MAX_STEPS)
    return usage();
  tail_steps = steps / 4 < 50 ? steps / 4 : 50;
  const char *env = getenv("GT_GPU_TEST_BACKEND");
  if (env && env[0])
    gpu_name = env;
  probe_gpu();
  /* outside make check (tests/gpu/run.sh runs the program directly): the
   * source tree is the working directory when it holds the default deck,
   * and scratch files go to a fresh directory under /tmp */
  char cwd[900], scratch[64] = "/tmp/gt-cuda-train.XXXXXX";
  if (!getenv("GT_SRCDIR") && getcwd(cwd, sizeof cwd) && access("inputs/default.in", R_OK) == 0)
    setenv("GT_SRCDIR", cwd, 1);
  if (!getenv("GT_BUILDDIR") && mkdtemp(scratch))
    setenv("GT_BUILDDIR", scratch, 1);
  if (!getenv("GT_SRCDIR") || !getenv("GT_BUILDDIR"))
    return tap_bail("run through make check or from the source tree (GT_SRCDIR unset and no "
                    "inputs/default.in here)");
  char desc[256];
  gt_cuda_describe(desc, sizeof desc);
  tap_diag("GPU side: %s; %s", gpu_name, desc);
  char dir[1024], data[1200];
  tu_genesis_dataset("test_cuda_train", dir, sizeof dir, data, sizeof data);
  snprintf(data_kv, sizeof data_kv, "data.train=%s", data);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(threads_kv, sizeof threads_kv, "backend.threads=%ld",
           cores < 1 ? 1 : cores > 8 ? 8 : cores);

  if (one && gpt) {
    model = "gpt";
    test_one_step();
  }
  if (one && llama) {
    model = "llama";
    test_one_step();
  }
  if (one && moe) { /* one step only: its curve would repeat the llama's */
    model = "moe";
    test_one_step();
  }
  if (!curves) {
    const int rc = tap_done();
    MPI_Finalize();
    return rc;
  }

  /* per model: the cpu fp32 reference, then the GPU runs */
  static curve ref[2] = {{.model = "gpt", .dev = "cpu", .prec = "fp32"},
                         {.model = "llama", .dev = "cpu", .prec = "fp32"}},
               runs[4] = {{.model = "gpt", .prec = "bf16"},
                          {.model = "gpt", .prec = "fp16"},
                          {.model = "gpt", .prec = "fp32"},
                          {.model = "llama", .prec = "bf16"}};
  for (int m = 0; m < 2; m++) {
    if (!(m == 0 ? gpt : llama))
      continue;
    train_curve(&ref[m]);
    check_curve(&ref[m], &ref[m]);
    for (int k = 0; k < 4 && ref[m].status == GT_SUCCESS; k++) {
      if (strcmp(runs[k].model, ref[m].model) != 0)
        continue;
      runs[k].dev = gpu_name;
      train_curve(&runs[k]);
      check_curve(&runs[k], &ref[m]);
    }
  }
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
