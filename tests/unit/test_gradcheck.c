/*
 * test_gradcheck.c - every layer's backward against central finite
 * differences, for both host backends, and the whole GPT's gradients.
 *
 * For an op y = f(x1, x2, ...) the scalar L = sum(y * r) (r random, fixed)
 * has dL/dy = r, so backward with dout = r gives dL/dx. Finite differences
 * take L from the cpu-ref forward (double accumulation inside), perturbing
 * sampled entries by +-h and dividing by the perturbation actually applied
 * after rounding to float. Error per tensor: ||fd - analytic|| / ||fd|| over
 * the sampled entries (the norm floored so an all-but-zero gradient cannot
 * pass by luck or fail on noise).
 *
 * gt-test: ranks=1
 */
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/gpt.h"
#include "gridtrain/layers.h"

#define FD_H 1e-2
#define FD_SAMPLES 24
#define FD_TOL 2e-3

static gt_backend *fast, *ref;

/* An op under test: inputs it perturbs, its loss and its gradients. */
typedef struct fd_case fd_case;
struct fd_case {
  const char *name;
  int ninputs;
  float *x[4];       /* inputs (perturbed in place) */
  size_t n[4];
  const char *xname[4];
  float *grad[4];    /* analytical gradients, filled by grads() */
  double (*loss)(fd_case *c, gt_backend *be);
  void (*grads)(fd_case *c, gt_backend *be);
  void *ctx;
};

static double dot_r(const float *y, const float *r, size_t n)
{
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)y[i] * r[i];
  return s;
}

static void run_case(fd_case *c, gt_backend *be)
{
  c->grads(c, be);
  for (int k = 0; k < c->ninputs; k++) {
    double num = 0, den = 0;
    uint64_t s = 1234 + (uint64_t)k;
    for (int j = 0; j < FD_SAMPLES; j++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t i = (size_t)((s >> 33) % c->n[k]);
      float x0 = c->x[k][i];
      float xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
      c->x[k][i] = xp;
      double lp = c->loss(c, ref);
      c->x[k][i] = xm;
      double lm = c->loss(c, ref);
      c->x[k][i] = x0;
      double fd = (lp - lm) / ((double)xp - (double)xm);
      double an = c->grad[k][i];
      num += (fd - an) * (fd - an);
      den += fd * fd;
    }
    double err = sqrt(num) / fmax(sqrt(den), 1e-4);
    if (!tap_ok(err <= FD_TOL, "%s [%s] d/d%s vs finite differences (err %.2e)", c->name,
                be->name, c->xname[k], err))
      tap_diag("%s d/d%s: error %.3e > %.1e", c->name, c->xname[k], err, FD_TOL);
  }
}

// ---- linear ------------------------------------------------------------------------

typedef struct {
  int N, C, OC;
  float *y, *r;
} lin_ctx;

static double lin_loss(fd_case *c, gt_backend *be)
{
  lin_ctx *l = c->ctx;
  be->ops->linear_forward(be, l->y, c->x[0], c->x[1], c->x[2], NULL, l->N, l->C, l->OC);
  return dot_r(l->y, l->r, (size_t)l->N * l->OC);
}

static void lin_grads(fd_case *c, gt_backend *be)
{
  lin_ctx *l = c->ctx;
  memset(c->grad[1], 0, c->n[1] * sizeof(float));
  memset(c->grad[2], 0, c->n[2] * sizeof(float));
  be->ops->linear_backward(be, c->grad[0], c->grad[1], c->grad[2], l->r, c->x[0], c->x[1],
                           l->N, l->C, l->OC);
}

static void test_linear(gt_backend *be)
{
  lin_ctx l = {7, 12, 10, NULL, NULL};
  fd_case c = {.name = "linear", .ninputs = 3, .loss = lin_loss, .grads = lin_grads, .ctx = &l};
  size_t sizes[3] = {(size_t)l.N * l.C, (size_t)l.OC * l.C, (size_t)l.OC};
  const char *names[3] = {"in", "weight", "bias"};
  for (int k = 0; k < 3; k++) {
    c.n[k] = sizes[k];
    c.x[k] = tu_alloc(sizes[k]);
    c.grad[k] = tu_alloc(sizes[k]);
    c.xname[k] = names[k];
    tu_fill(c.x[k], sizes[k], 40 + (uint64_t)k, -1, 1);
  }
  l.y = tu_alloc((size_t)l.N * l.OC);
  l.r = tu_alloc((size_t)l.N * l.OC);
  tu_fill(l.r, (size_t)l.N * l.OC, 49, -1, 1);
  run_case(&c, be);
  for (int k = 0; k < 3; k++)
    free(c.x[k]), free(c.grad[k]);
  free(l.y), free(l.r);
}

// ---- layernorm -----------------------------------------------------------------------

typedef struct {
  int N, C;
  float *y, *mean, *rstd, *r;
} ln_ctx;

static double ln_loss(fd_case *c, gt_backend *be)
{
  ln_ctx *l = c->ctx;
  be->ops->layernorm_forward(be, l->y, l->mean, l->rstd, c->x[0], c->x[1], c->x[2], l->N, l->C);
  return dot_r(l->y, l->r, (size_t)l->N * l->C);
}

static void ln_grads(fd_case *c, gt_backend *be)
{
  ln_ctx *l = c->ctx;
  ln_loss(c, be); /* mean and rstd of the unperturbed input */
  for (int k = 0; k < 3; k++)
    memset(c->grad[k], 0, c->n[k] * sizeof(float));
  be->ops->layernorm_backward(be, c->grad[0], c->grad[1], c->grad[2], l->r, c->x[0], c->x[1],
                              l->mean, l->rstd, l->N, l->C);
}

static void test_layernorm(gt_backend *be)
{
  ln_ctx l = {6, 20, NULL, NULL, NULL, NULL};
  fd_case c = {.name = "layernorm", .ninputs = 3, .loss = ln_loss, .grads = ln_grads, .ctx = &l};
  size_t sizes[3] = {(size_t)l.N * l.C, (size_t)l.C, (size_t)l.C};
  const char *names[3] = {"in", "weight", "bias"};
  for (int k = 0; k < 3; k++) {
    c.n[k] = sizes[k];
    c.x[k] = tu_alloc(sizes[k]);
    c.grad[k] = tu_alloc(sizes[k]);
    c.xname[k] = names[k];
    tu_fill(c.x[k], sizes[k], 50 + (uint64_t)k, -1, 1);
  }
  l.y = tu_alloc(sizes[0]);
  l.r = tu_alloc(sizes[0]);
  l.mean = tu_alloc(l.N);
  l.rstd = tu_alloc(l.N);
  tu_fill(l.r, sizes[0], 59, -1, 1);
  run_case(&c, be);
  for (int k = 0; k < 3; k++)
    free(c.x[k]), free(c.grad[k]);
  free(l.y), free(l.r), free(l.mean), free(l.rstd);
}

// ---- gelu ------------------------------------------------------------------------------

typedef struct {
  size_t n;
  float *y, *r;
} gelu_ctx;

static double gelu_loss(fd_case *c, gt_backend *be)
{
  gelu_ctx *g = c->ctx;
  be->ops->gelu_forward(be, g->y, c->x[0], g->n);
  return dot_r(g->y, g->r, g->n);
}

static void gelu_grads(fd_case *c, gt_backend *be)
{
  gelu_ctx *g = c->ctx;
  be->ops->gelu_backward(be, c->grad[0], c->x[0], g->r, g->n);
}

static void test_gelu(gt_backend *be)
{
  gelu_ctx g = {64, NULL, NULL};
  fd_case c = {.name = "gelu", .ninputs = 1, .loss = gelu_loss, .grads = gelu_grads, .ctx = &g};
  c.n[0] = g.n;
  c.x[0] = tu_alloc(g.n);
  c.grad[0] = tu_alloc(g.n);
  c.xname[0] = "in";
  tu_fill(c.x[0], g.n, 60, -4, 4);
  g.y = tu_alloc(g.n);
  g.r = tu_alloc(g.n);
  tu_fill(g.r, g.n, 61, -1, 1);
  run_case(&c, be);
  free(c.x[0]), free(c.grad[0]), free(g.y), free(g.r);
}

// ---- attention ---------------------------------------------------------------------------

typedef struct {
  int B, T, H, hs;
  float *y, *att, *datt, *r;
} att_ctx;

static double att_loss(fd_case *c, gt_backend *be)
{
  att_ctx *a = c->ctx;
  be->ops->attention_forward(be, a->y, a->att, c->x[0], a->B, a->T, a->H, a->hs);
  return dot_r(a->y, a->r, (size_t)a->B * a->T * a->H * a->hs);
}

static void att_grads(fd_case *c, gt_backend *be)
{
  att_ctx *a = c->ctx;
  att_loss(c, be);
  be->ops->attention_backward(be, c->grad[0], a->datt, a->r, c->x[0], a->att, a->B, a->T, a->H,
                              a->hs);
}

static void test_attention(gt_backend *be)
{
  att_ctx a = {2, 7, 2, 4, NULL, NULL, NULL, NULL};
  fd_case c = {.name = "attention", .ninputs = 1, .loss = att_loss, .grads = att_grads, .ctx = &a};
  size_t nqkv = (size_t)a.B * a.T * 3 * a.H * a.hs, ny = nqkv / 3;
  size_t natt = (size_t)a.B * a.H * a.T * a.T;
  c.n[0] = nqkv;
  c.x[0] = tu_alloc(nqkv);
  c.grad[0] = tu_alloc(nqkv);
  c.xname[0] = "qkv";
  tu_fill(c.x[0], nqkv, 70, -1.5, 1.5);
  a.y = tu_alloc(ny);
  a.r = tu_alloc(ny);
  a.att = tu_alloc(natt);
  a.datt = tu_alloc(natt);
  tu_fill(a.r, ny, 71, -1, 1);
  run_case(&c, be);
  free(c.x[0]), free(c.grad[0]), free(a.y), free(a.r), free(a.att), free(a.datt);
}

// ---- embedding ----------------------------------------------------------------------------

typedef struct {
  int B, T, C, V;
  int32_t *tok;
  float *y, *r;
} emb_ctx;

static double emb_loss(fd_case *c, gt_backend *be)
{
  emb_ctx *e = c->ctx;
  be->ops->embedding_forward(be, e->y, e->tok, c->x[0], c->x[1], e->B, e->T, e->C, 0, e->V);
  return dot_r(e->y, e->r, (size_t)e->B * e->T * e->C);
}

static void emb_grads(fd_case *c, gt_backend *be)
{
  emb_ctx *e = c->ctx;
  memset(c->grad[0], 0, c->n[0] * sizeof(float));
  memset(c->grad[1], 0, c->n[1] * sizeof(float));
  be->ops->embedding_backward(be, c->grad[0], c->grad[1], e->r, e->tok, e->B, e->T, e->C, 0,
                              e->V);
}

static void test_embedding(gt_backend *be)
{
  emb_ctx e = {3, 5, 8, 6, NULL, NULL, NULL};
  const int V = e.V;
  fd_case c = {.name = "embedding", .ninputs = 2, .loss = emb_loss, .grads = emb_grads, .ctx = &e};
  c.n[0] = (size_t)V * e.C;
  c.n[1] = (size_t)e.T * e.C;
  c.xname[0] = "wte";
  c.xname[1] = "wpe";
  for (int k = 0; k < 2; k++) {
    c.x[k] = tu_alloc(c.n[k]);
    c.grad[k] = tu_alloc(c.n[k]);
    tu_fill(c.x[k], c.n[k], 80 + (uint64_t)k, -1, 1);
  }
  e.tok = malloc(sizeof(int32_t) * (size_t)e.B * e.T);
  tu_fill_int(e.tok, (size_t)e.B * e.T, 82, V);
  e.y = tu_alloc((size_t)e.B * e.T * e.C);
  e.r = tu_alloc((size_t)e.B * e.T * e.C);
  tu_fill(e.r, (size_t)e.B * e.T * e.C, 83, -1, 1);
  run_case(&c, be);
  for (int k = 0; k < 2; k++)
    free(c.x[k]), free(c.grad[k]);
  free(e.tok), free(e.y), free(e.r);
}

// ---- cross-entropy --------------------------------------------------------------------------

/* L = 0.5 * sum of the losses over the vocabulary split in P shards of
 * w = ceil(V/P) columns, row stride ld = w + 1 (one padding column):
 * xent_partial on every shard, then xent_finish on every shard. P = 1 is
 * the unsplit loss. */
typedef struct {
  int N, V, P;
  int32_t *y;
  float *work, *stats, *losses;
} xent_ctx;

static double xent_run(xent_ctx *x, gt_backend *be, const float *logits, float *grad,
                       float grad_scale)
{
  const int w = (x->V + x->P - 1) / x->P, ld = w + 1;
  for (int r = 0; r < x->P; r++) {
    const int v0 = r * w, nv = x->V - v0 < w ? x->V - v0 : w;
    float *sh = x->work + (size_t)r * x->N * ld;
    for (int i = 0; i < x->N; i++) {
      memcpy(sh + (size_t)i * ld, logits + (size_t)i * x->V + v0, sizeof(float) * (size_t)nv);
      for (int j = nv; j < ld; j++)
        sh[(size_t)i * ld + j] = 50.0f; /* padding: ignored */
    }
    be->ops->xent_partial(be, x->stats + 3 * (size_t)x->N * r, sh, x->y, x->N, nv, ld, v0);
  }
  double s = 0;
  for (int r = 0; r < x->P; r++) {
    const int v0 = r * w, nv = x->V - v0 < w ? x->V - v0 : w;
    float *sh = x->work + (size_t)r * x->N * ld;
    be->ops->xent_finish(be, x->losses, sh, x->stats, x->P, x->y, x->N, nv, ld, v0,
                         grad_scale);
    if (r == 0)
      for (int i = 0; i < x->N; i++)
        s += 0.5 * x->losses[i];
    if (grad)
      for (int i = 0; i < x->N; i++)
        memcpy(grad + (size_t)i * x->V + v0, sh + (size_t)i * ld, sizeof(float) * (size_t)nv);
  }
  return s;
}

static double xent_loss(fd_case *c, gt_backend *be)
{
  return xent_run(c->ctx, be, c->x[0], NULL, 0.0f);
}

static void xent_grads(fd_case *c, gt_backend *be)
{
  xent_run(c->ctx, be, c->x[0], c->grad[0], 0.5f);
}

static void test_crossentropy(gt_backend *be, int P)
{
  xent_ctx x = {5, 11, P, NULL, NULL, NULL, NULL};
  const int w = (x.V + P - 1) / P;
  char name[40];
  snprintf(name, sizeof name, "crossentropy P=%d", P);
  fd_case c = {.name = name, .ninputs = 1, .loss = xent_loss, .grads = xent_grads, .ctx = &x};
  c.n[0] = (size_t)x.N * x.V;
  c.x[0] = tu_alloc(c.n[0]);
  c.grad[0] = tu_alloc(c.n[0]);
  c.xname[0] = "logits";
  tu_fill(c.x[0], c.n[0], 90, -3, 3);
  x.y = malloc(sizeof(int32_t) * (size_t)x.N);
  tu_fill_int(x.y, x.N, 91, x.V);
  x.work = tu_alloc((size_t)P * x.N * (w + 1));
  x.stats = tu_alloc(3 * (size_t)P * x.N);
  x.losses = tu_alloc(x.N);
  run_case(&c, be);
  free(c.x[0]), free(c.grad[0]), free(x.y), free(x.work), free(x.stats), free(x.losses);
}

// ---- transformer block ----------------------------------------------------------------------

/* The block's 12 weights and its input as FD inputs, 4 at a time. */
typedef struct {
  gt_layer_dims d;
  gt_block_weights w, g;
  gt_block_acts a;
  gt_block_scratch s;
  float *x, *dx, *y, *r, *dres;
} blk_ctx;

static float *blk_buf(size_t n)
{
  float *p = tu_alloc(n);
  return p;
}

static double blk_loss(fd_case *c, gt_backend *be)
{
  blk_ctx *b = c->ctx;
  gt_block_forward(be, &b->w, &b->a, b->x, b->y, b->d);
  return dot_r(b->y, b->r, (size_t)b->d.B * b->d.T * b->d.C);
}

static void blk_grads(fd_case *c, gt_backend *be)
{
  blk_ctx *b = c->ctx;
  const size_t N = (size_t)b->d.B * b->d.T, C = (size_t)b->d.C;
  float **gs[12] = {&b->g.ln1_w, &b->g.ln1_b, &b->g.qkv_w, &b->g.qkv_b, &b->g.proj_w,
                    &b->g.proj_b, &b->g.ln2_w, &b->g.ln2_b, &b->g.fc_w, &b->g.fc_b,
                    &b->g.fcproj_w, &b->g.fcproj_b};
  size_t sizes[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  for (int i = 0; i < 12; i++)
    memset(*gs[i], 0, sizes[i] * sizeof(float));
  blk_loss(c, be);
  memcpy(b->dres, b->r, N * C * sizeof(float));
  gt_block_backward(be, &b->w, &b->g, &b->a, b->x, b->dres, &b->s, b->d);
  memcpy(b->dx, b->dres, N * C * sizeof(float));
}

static void test_block(gt_backend *be)
{
  blk_ctx b;
  memset(&b, 0, sizeof b);
  b.d = (gt_layer_dims){.B = 2, .T = 6, .C = 8, .H = 2};
  const size_t N = 12, C = 8, B = 2, T = 6, H = 2;
  float **ws[12] = {&b.w.ln1_w, &b.w.ln1_b, &b.w.qkv_w, &b.w.qkv_b, &b.w.proj_w, &b.w.proj_b,
                    &b.w.ln2_w, &b.w.ln2_b, &b.w.fc_w, &b.w.fc_b, &b.w.fcproj_w,
                    &b.w.fcproj_b};
  float **gs[12] = {&b.g.ln1_w, &b.g.ln1_b, &b.g.qkv_w, &b.g.qkv_b, &b.g.proj_w, &b.g.proj_b,
                    &b.g.ln2_w, &b.g.ln2_b, &b.g.fc_w, &b.g.fc_b, &b.g.fcproj_w,
                    &b.g.fcproj_b};
  const char *names[12] = {"ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias",
                           "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias",
                           "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"};
  size_t sizes[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  for (int i = 0; i < 12; i++) {
    *ws[i] = blk_buf(sizes[i]);
    *gs[i] = blk_buf(sizes[i]);
    bool ln_weight = i == 0 || i == 6;
    tu_fill(*ws[i], sizes[i], 100 + (uint64_t)i, ln_weight ? 0.5f : -0.5f, ln_weight ? 1.5f : 0.5f);
  }
  b.a = (gt_block_acts){blk_buf(N * C), blk_buf(N), blk_buf(N), blk_buf(3 * N * C),
                        blk_buf(B * H * T * T), blk_buf(N * C), blk_buf(N * C), blk_buf(N * C),
                        blk_buf(N), blk_buf(N), blk_buf(4 * N * C), blk_buf(4 * N * C)};
  b.s = (gt_block_scratch){blk_buf(N * C), blk_buf(3 * N * C), blk_buf(B * H * T * T),
                           blk_buf(N * C), blk_buf(4 * N * C)};
  b.x = blk_buf(N * C);
  b.dx = blk_buf(N * C);
  b.y = blk_buf(N * C);
  b.r = blk_buf(N * C);
  b.dres = blk_buf(N * C);
  tu_fill(b.x, N * C, 120, -1, 1);
  tu_fill(b.r, N * C, 121, -1, 1);
  /* inputs: x and the 12 weights, in groups of up to 4 */
  float *xs[13] = {b.x};
  float *grads[13] = {b.dx};
  size_t ns[13] = {N * C};
  const char *xn[13] = {"x"};
  for (int i = 0; i < 12; i++) {
    xs[i + 1] = *ws[i];
    grads[i + 1] = *gs[i];
    ns[i + 1] = sizes[i];
    xn[i + 1] = names[i];
  }
  for (int g0 = 0; g0 < 13; g0 += 4) {
    fd_case c = {.name = "block", .loss = blk_loss, .grads = blk_grads, .ctx = &b};
    for (int k = 0; k < 4 && g0 + k < 13; k++) {
      c.x[k] = xs[g0 + k];
      c.grad[k] = grads[g0 + k];
      c.n[k] = ns[g0 + k];
      c.xname[k] = xn[g0 + k];
      c.ninputs = k + 1;
    }
    run_case(&c, be);
  }
  for (int i = 0; i < 12; i++)
    free(*ws[i]), free(*gs[i]);
  float *acts[] = {b.a.ln1, b.a.ln1_mean, b.a.ln1_rstd, b.a.qkv, b.a.att, b.a.atty, b.a.res2,
                   b.a.ln2, b.a.ln2_mean, b.a.ln2_rstd, b.a.fc, b.a.gelu, b.s.dln, b.s.dqkv,
                   b.s.datt, b.s.datty, b.s.dfc, b.x, b.dx, b.y, b.r, b.dres};
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    free(acts[i]);
}

// ---- the whole GPT -----------------------------------------------------------------------------

typedef struct {
  gt_gpt *fwd;     /* cpu-ref model whose weights are perturbed for FD */
  gt_gpt *model;   /* model under test (same weights) */
  int32_t *tok, *tgt;
  int B, T;
} gpt_ctx;

static void test_gpt(gt_backend *be)
{
  gt_gpt_shape shape = {2, 2, 8, 8, 11};
  gpt_ctx g = {NULL, NULL, NULL, NULL, 2, 6};
  const gt_gpt_part whole = gt_gpt_whole(&shape);
  if (gt_gpt_create(ref, &shape, &whole, g.B, g.T, 1, &g.fwd) ||
      gt_gpt_create(be, &shape, &whole, g.B, g.T, 1, &g.model)) {
    tap_ok(false, "gpt create: %s", gt_error_message());
    return;
  }
  gt_gpt_init(g.fwd, 7);
  gt_params *pf = gt_gpt_params(g.fwd), *pm = gt_gpt_params(g.model);
  /* Larger weights than GPT-2's init so that every path carries signal. */
  tu_fill(pf->values, pf->numel, 130, -0.4f, 0.4f);
  for (int i = 0; i < pf->count; i++)
    if (strstr(pf->list[i].name, "ln_") && strstr(pf->list[i].name, "weight"))
      tu_fill(pf->list[i].value.data, pf->list[i].numel, 131 + (uint64_t)i, 0.7f, 1.3f);
  memcpy(pm->values, pf->values, pf->numel * sizeof(float));
  g.tok = malloc(sizeof(int32_t) * 12);
  g.tgt = malloc(sizeof(int32_t) * 12);
  tu_fill_int(g.tok, 12, 132, shape.vocab);
  tu_fill_int(g.tgt, 12, 133, shape.vocab);
  const int N = g.B * g.T;
  double loss;
  gt_params_zero_grads(pm);
  gt_gpt_forward(g.model, 0, g.tok, g.tgt, g.B, g.T, 1.0f / N, &loss);
  gt_gpt_backward(g.model, 0, NULL);
  double worst = 0;
  const char *worst_name = "";
  for (int p = 0; p < pf->count; p++) {
    float *x = pf->list[p].value.data;
    const float *an = (const float *)pm->list[p].grad.data;
    size_t n = pf->list[p].numel;
    double num = 0, den = 0;
    uint64_t s = 777 + (uint64_t)p;
    for (int j = 0; j < 8; j++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t i = (size_t)((s >> 33) % n);
      float x0 = x[i], xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
      double lp, lm;
      x[i] = xp;
      gt_gpt_forward(g.fwd, 0, g.tok, g.tgt, g.B, g.T, 0.0f, &lp);
      x[i] = xm;
      gt_gpt_forward(g.fwd, 0, g.tok, g.tgt, g.B, g.T, 0.0f, &lm);
      x[i] = x0;
      double fd = (lp - lm) / N / ((double)xp - (double)xm);
      num += (fd - an[i]) * (fd - an[i]);
      den += fd * fd;
    }
    double err = sqrt(num) / fmax(sqrt(den), 1e-3);
    if (err > worst) {
      worst = err;
      worst_name = pf->list[p].name;
    }
    if (err > FD_TOL)
      tap_diag("gpt [%s] %s: error %.3e", be->name, pf->list[p].name, err);
  }
  tap_ok(worst <= FD_TOL, "gpt [%s] all %d parameter gradients vs finite differences (worst %.2e, %s)",
         be->name, pf->count, worst, worst_name);
  gt_gpt_destroy(&g.fwd);
  gt_gpt_destroy(&g.model);
  free(g.tok), free(g.tgt);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  if (gt_backend_create("cpu", 2, &fast) || gt_backend_create("cpu-ref", 1, &ref))
    return tap_bail("cannot create the backends: %s", gt_error_message());
  gt_backend *backends[2] = {ref, fast};
  for (int i = 0; i < 2; i++) {
    test_linear(backends[i]);
    test_layernorm(backends[i]);
    test_gelu(backends[i]);
    test_attention(backends[i]);
    test_embedding(backends[i]);
    test_crossentropy(backends[i], 1);
    test_crossentropy(backends[i], 2);
    test_block(backends[i]);
    test_gpt(backends[i]);
  }
  gt_backend_destroy(&fast);
  gt_backend_destroy(&ref);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
