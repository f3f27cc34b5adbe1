/*
 * test_gradcheck.c - every kernel's backward (but attention's, which its
 * own test checks) against central finite differences, in fp32, for both
 * host backends. The transformer block and the whole GPT are in
 * test_gradcheck_model.c.
 *
 * For an op y = f(x1, x2, ...) the scalar L = sum(y * r) (r random, fixed)
 * has dL/dy = r, so backward with dout = r gives dL/dx. Finite differences
 * take L from the cpu-ref forward (double accumulation inside), perturbing
 * sampled entries by +-h and dividing by the perturbation actually applied
 * after rounding to float. Error per tensor: ||fd - analytic|| / ||fd|| over
 * the sampled entries (the norm floored so an all-but-zero gradient cannot
 * pass by luck or fail on noise). Every op is followed by sync before the
 * host reads its results (so that GT_CPU_MODE=async holds too).
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>

#include "../fd_check.h"
#include "../test_util.h"
#include "gridtrain/backend.h"


static gt_backend *fast, *ref;
static int call_failures;

/* An op, then sync (results may be read afterwards); failures are counted. */
#define CALL(be, op, ...) \
  tu_call_counted(&call_failures, (be), (be)->ops->op((be), __VA_ARGS__), #op)


// ---- linear ------------------------------------------------------------------------

typedef struct {
  int64_t N, C, OC;
  float *y, *r;
} lin_ctx;

static double lin_loss(fd_case *c, gt_backend *be)
{
  lin_ctx *l = c->ctx;
  CALL(be, linear_forward, GT_F32, l->y, c->x[0], c->x[1], c->x[2], NULL, l->N, l->C, l->OC);
  return dot_r(l->y, l->r, (size_t)l->N * l->OC);
}

static void lin_grads(fd_case *c, gt_backend *be)
{
  lin_ctx *l = c->ctx;
  memset(c->grad[1], 0, c->n[1] * sizeof(float));
  memset(c->grad[2], 0, c->n[2] * sizeof(float));
  CALL(be, linear_backward, GT_F32, c->grad[0], c->grad[1], c->grad[2], l->r, c->x[0], c->x[1],
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
  fd_run(&c, be, ref);
  for (int k = 0; k < 3; k++)
    free(c.x[k]), free(c.grad[k]);
  free(l.y), free(l.r);
}

// ---- layernorm -----------------------------------------------------------------------

typedef struct {
  int64_t N, C;
  float *y, *mean, *rstd, *r;
} ln_ctx;

static double ln_loss(fd_case *c, gt_backend *be)
{
  ln_ctx *l = c->ctx;
  CALL(be, layernorm_forward, GT_F32, l->y, l->mean, l->rstd, c->x[0], c->x[1], c->x[2], l->N,
       l->C);
  return dot_r(l->y, l->r, (size_t)l->N * l->C);
}

static void ln_grads(fd_case *c, gt_backend *be)
{
  ln_ctx *l = c->ctx;
  ln_loss(c, be); /* mean and rstd of the unperturbed input */
  for (int k = 0; k < 3; k++)
    memset(c->grad[k], 0, c->n[k] * sizeof(float));
  CALL(be, layernorm_backward, GT_F32, c->grad[0], c->grad[1], c->grad[2], l->r, c->x[0],
       c->x[1], l->mean, l->rstd, l->N, l->C);
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
  fd_run(&c, be, ref);
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
  CALL(be, gelu_forward, GT_F32, g->y, c->x[0], g->n);
  return dot_r(g->y, g->r, g->n);
}

static void gelu_grads(fd_case *c, gt_backend *be)
{
  gelu_ctx *g = c->ctx;
  CALL(be, gelu_backward, GT_F32, c->grad[0], c->x[0], g->r, g->n);
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
  fd_run(&c, be, ref);
  free(c.x[0]), free(c.grad[0]), free(g.y), free(g.r);
}

// ---- rmsnorm ------------------------------------------------------------------------------

typedef struct {
  int64_t N, C;
  float eps;
  float *y, *rstd, *r;
} rms_ctx;

static double rms_loss(fd_case *c, gt_backend *be)
{
  rms_ctx *l = c->ctx;
  CALL(be, rmsnorm_forward, GT_F32, l->y, l->rstd, c->x[0], c->x[1], l->eps, l->N, l->C);
  return dot_r(l->y, l->r, (size_t)l->N * l->C);
}

static void rms_grads(fd_case *c, gt_backend *be)
{
  rms_ctx *l = c->ctx;
  rms_loss(c, be); /* rstd of the unperturbed input */
  for (int k = 0; k < 2; k++)
    memset(c->grad[k], 0, c->n[k] * sizeof(float));
  CALL(be, rmsnorm_backward, GT_F32, c->grad[0], c->grad[1], l->r, c->x[0], c->x[1], l->rstd,
       l->N, l->C);
}

static void test_rmsnorm(gt_backend *be)
{
  rms_ctx l = {6, 20, 1e-5f, NULL, NULL, NULL};
  fd_case c = {.name = "rmsnorm", .ninputs = 2, .loss = rms_loss, .grads = rms_grads, .ctx = &l};
  size_t sizes[2] = {(size_t)l.N * l.C, (size_t)l.C};
  const char *names[2] = {"in", "weight"};
  for (int k = 0; k < 2; k++) {
    c.n[k] = sizes[k];
    c.x[k] = tu_alloc(sizes[k]);
    c.grad[k] = tu_alloc(sizes[k]);
    c.xname[k] = names[k];
    tu_fill(c.x[k], sizes[k], 150 + (uint64_t)k, -1, 1);
  }
  l.y = tu_alloc(sizes[0]);
  l.r = tu_alloc(sizes[0]);
  l.rstd = tu_alloc(l.N);
  tu_fill(l.r, sizes[0], 159, -1, 1);
  fd_run(&c, be, ref);
  for (int k = 0; k < 2; k++)
    free(c.x[k]), free(c.grad[k]);
  free(l.y), free(l.r), free(l.rstd);
}

// ---- rope ---------------------------------------------------------------------------------

/* x (B,T,S,hs), heads [0, nrot) rotated from position pos0 (the others
 * pass through: their gradient is dout). In place, so the loss rotates a
 * copy. */
typedef struct {
  int64_t B, T, S, nrot, hs, pos0;
  float *cos, *sin, *y, *r;
} rope_ctx;

static double rope_loss(fd_case *c, gt_backend *be)
{
  rope_ctx *q = c->ctx;
  memcpy(q->y, c->x[0], c->n[0] * sizeof(float));
  CALL(be, rope_forward, GT_F32, q->y, q->cos, q->sin, q->B, q->T, q->S, q->nrot, q->hs,
       q->pos0);
  return dot_r(q->y, q->r, c->n[0]);
}

static void rope_grads(fd_case *c, gt_backend *be)
{
  rope_ctx *q = c->ctx;
  memcpy(c->grad[0], q->r, c->n[0] * sizeof(float));
  CALL(be, rope_backward, GT_F32, c->grad[0], q->cos, q->sin, q->B, q->T, q->S, q->nrot, q->hs,
       q->pos0);
}

static void test_rope(gt_backend *be)
{
  rope_ctx q = {2, 4, 3, 2, 6, 5, NULL, NULL, NULL, NULL};
  const size_t n = (size_t)(q.B * q.T * q.S * q.hs), nt = (size_t)((q.pos0 + q.T) * q.hs / 2);
  fd_case c = {.name = "rope", .ninputs = 1, .loss = rope_loss, .grads = rope_grads, .ctx = &q};
  c.n[0] = n;
  c.x[0] = tu_alloc(n);
  c.grad[0] = tu_alloc(n);
  c.xname[0] = "in";
  tu_fill(c.x[0], n, 160, -1, 1);
  float *ang = tu_alloc(nt);
  tu_fill(ang, nt, 161, -3, 3);
  q.cos = tu_alloc(nt);
  q.sin = tu_alloc(nt);
  for (size_t i = 0; i < nt; i++) {
    q.cos[i] = cosf(ang[i]);
    q.sin[i] = sinf(ang[i]);
  }
  q.y = tu_alloc(n);
  q.r = tu_alloc(n);
  tu_fill(q.r, n, 162, -1, 1);
  fd_run(&c, be, ref);
  free(c.x[0]), free(c.grad[0]), free(ang), free(q.cos), free(q.sin), free(q.y), free(q.r);
}

// ---- swiglu ------------------------------------------------------------------------------

typedef struct {
  int64_t N, F;
  float *y, *r;
} swiglu_ctx;

static double swiglu_loss(fd_case *c, gt_backend *be)
{
  swiglu_ctx *g = c->ctx;
  CALL(be, swiglu_forward, GT_F32, g->y, c->x[0], g->N, g->F);
  return dot_r(g->y, g->r, (size_t)(g->N * g->F));
}

static void swiglu_grads(fd_case *c, gt_backend *be)
{
  swiglu_ctx *g = c->ctx;
  CALL(be, swiglu_backward, GT_F32, c->grad[0], g->r, c->x[0], g->N, g->F);
}

static void test_swiglu(gt_backend *be)
{
  swiglu_ctx g = {5, 7, NULL, NULL};
  const size_t n = (size_t)(2 * g.N * g.F), ny = (size_t)(g.N * g.F);
  fd_case c = {.name = "swiglu", .ninputs = 1, .loss = swiglu_loss, .grads = swiglu_grads,
               .ctx = &g};
  c.n[0] = n;
  c.x[0] = tu_alloc(n);
  c.grad[0] = tu_alloc(n);
  c.xname[0] = "h (gate and up)";
  tu_fill(c.x[0], n, 170, -4, 4);
  g.y = tu_alloc(ny);
  g.r = tu_alloc(ny);
  tu_fill(g.r, ny, 171, -1, 1);
  fd_run(&c, be, ref);
  free(c.x[0]), free(c.grad[0]), free(g.y), free(g.r);
}

// ---- embedding ----------------------------------------------------------------------------

typedef struct {
  int64_t B, T, C, V;
  int32_t *tok;
  float *y, *r;
} emb_ctx;

static double emb_loss(fd_case *c, gt_backend *be)
{
  emb_ctx *e = c->ctx;
  CALL(be, embedding_forward, GT_F32, e->y, e->tok, c->x[0], c->x[1], e->B, e->T, e->C, 0,
       e->V);
  return dot_r(e->y, e->r, (size_t)e->B * e->T * e->C);
}

static void emb_grads(fd_case *c, gt_backend *be)
{
  emb_ctx *e = c->ctx;
  memset(c->grad[0], 0, c->n[0] * sizeof(float));
  memset(c->grad[1], 0, c->n[1] * sizeof(float));
  CALL(be, embedding_backward, GT_F32, c->grad[0], c->grad[1], e->r, e->tok, e->B, e->T, e->C,
       0, e->V);
}

static void test_embedding(gt_backend *be)
{
  emb_ctx e = {3, 5, 8, 6, NULL, NULL, NULL};
  const int64_t V = e.V;
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
  tu_fill_int(e.tok, (size_t)e.B * e.T, 82, (int32_t)V);
  e.y = tu_alloc((size_t)e.B * e.T * e.C);
  e.r = tu_alloc((size_t)e.B * e.T * e.C);
  tu_fill(e.r, (size_t)e.B * e.T * e.C, 83, -1, 1);
  fd_run(&c, be, ref);
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
    CALL(be, xent_partial, GT_F32, x->stats + 3 * (size_t)x->N * r, sh, x->y, x->N, nv, ld, v0);
  }
  double s = 0;
  for (int r = 0; r < x->P; r++) {
    const int v0 = r * w, nv = x->V - v0 < w ? x->V - v0 : w;
    float *sh = x->work + (size_t)r * x->N * ld;
    CALL(be, xent_finish, GT_F32, x->losses, sh, x->stats, x->P, x->y, x->N, nv, ld, v0,
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
  fd_run(&c, be, ref);
  free(c.x[0]), free(c.grad[0]), free(x.y), free(x.work), free(x.stats), free(x.losses);
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
    test_rmsnorm(backends[i]);
    test_rope(backends[i]);
    test_swiglu(backends[i]);
    test_embedding(backends[i]);
    test_crossentropy(backends[i], 1);
    test_crossentropy(backends[i], 2);
  }
  tap_ok(call_failures == 0, "every kernel call and sync returned GT_SUCCESS (%d did not)",
         call_failures);
  gt_backend_destroy(&fast);
  gt_backend_destroy(&ref);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
