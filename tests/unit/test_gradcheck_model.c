/*
 * test_gradcheck_model.c - a transformer block's and the whole GPT's
 * gradients against central finite differences, for both host backends
 * (fp32; the kernels' own checks are in test_gradcheck.c and
 * test_attention.c).
 *
 * For an op y = f(x1, x2, ...) the scalar L = sum(y * r) (r random, fixed)
 * has dL/dy = r, so backward with dout = r gives dL/dx. Finite differences
 * take L from the cpu-ref forward (double accumulation inside), perturbing
 * sampled entries by +-h and dividing by the perturbation actually applied
 * after rounding to float. Error per tensor: ||fd - analytic|| / ||fd|| over
 * the sampled entries (the norm floored so an all-but-zero gradient cannot
 * pass by luck or fail on noise).
 *
 * The llama block (RMSNorm, rotary positions, grouped-query attention with 2
 * key/value heads for 4 query heads, SwiGLU, no biases) and the whole llama
 * (untied head, GQA, llama3 rope scaling) go through the same checks at the
 * same bounds. Head size 4, so that rope rotates two frequencies; its
 * llama3 scaling (original length 8, factors 1 and 4) puts one frequency
 * in the smoothed band and divides the other by the factor, two of its
 * three branches.
 *
 * The mixtures of experts (gpt and llama, with a capacity or dropless, a
 * shared expert or none) go through the whole-model check: the router, the
 * experts and the gates' renormalisation.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>

#include "../fd_check.h"
#include "../test_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/gpt.h"
#include "gridtrain/layers.h"
#include "gridtrain/rope.h"


static gt_backend *fast, *ref;


// ---- transformer block ----------------------------------------------------------------------

/* The block's 12 weights and its input as FD inputs, 4 at a time. */
typedef struct {
  gt_layer_dims d;
  gt_block_weights w;
  gt_block_grads g;
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
  be->ops->sync(be);
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
  be->ops->sync(be);
  memcpy(b->dx, b->dres, N * C * sizeof(float));
}

/* The split backward (zero-bubble schedules): B (gt_block_backward_input)
 * leaves the projections' weight gradients alone and W
 * (gt_block_backward_weights) adds them; B then W gives bit for bit the
 * input gradient and every weight gradient of gt_block_backward. gs[0..n)
 * are the block's gradient buffers (sizes[]), proj[] whether each is a
 * projection's (W's) or a norm's (B's); G and QKV the mlp.fc and q, k, v
 * rows. One test point. */
static void split_matches(blk_ctx *b, gt_backend *be, double (*loss)(fd_case *, gt_backend *),
                          void *ctx, float **gs, const size_t *sizes, const bool *proj, int n,
                          size_t G, size_t QKV, const char *what)
{
  const size_t N = (size_t)b->d.B * b->d.T, C = (size_t)b->d.C;
  fd_case c = {.ctx = ctx};
  float *want[12], *want_dx = tu_alloc(N * C);
  for (int i = 0; i < n; i++) {
    memset(gs[i], 0, sizes[i] * sizeof(float));
    want[i] = tu_alloc(sizes[i]);
  }
  loss(&c, be);
  memcpy(b->dres, b->r, N * C * sizeof(float));
  int st = gt_block_backward(be, &b->w, &b->g, &b->a, b->x, b->dres, &b->s, b->d);
  be->ops->sync(be);
  memcpy(want_dx, b->dres, N * C * sizeof(float));
  for (int i = 0; i < n; i++) {
    memcpy(want[i], gs[i], sizes[i] * sizeof(float));
    memset(gs[i], 0, sizes[i] * sizeof(float));
  }
  gt_block_dout keep = {tu_alloc(N * C), tu_alloc(N * G), tu_alloc(N * C), tu_alloc(N * QKV)};
  loss(&c, be);
  memcpy(b->dres, b->r, N * C * sizeof(float));
  if (st == GT_SUCCESS)
    st = gt_block_backward_input(be, &b->w, &b->g, &b->a, b->x, b->dres, &b->s, &keep, b->d);
  be->ops->sync(be);
  bool deferred = true, same = st == GT_SUCCESS;
  for (int i = 0; i < n; i++) /* B: the projections' gradients still zero, the norms' there */
    for (size_t k = 0; proj[i] && k < sizes[i]; k++)
      deferred = deferred && gs[i][k] == 0.0f;
  /* what B left in keep is all W reads besides the activations: scratch
   * overwritten in between (another block's backward) changes nothing */
  memset(b->s.dln, 0xff, N * C * sizeof(float));
  memset(b->s.dfc, 0xff, N * G * sizeof(float));
  memset(b->s.dqkv, 0xff, N * QKV * sizeof(float));
  memset(b->s.datty, 0xff, N * C * sizeof(float));
  if (st == GT_SUCCESS)
    st = gt_block_backward_weights(be, &b->g, &b->a, &keep, b->d);
  be->ops->sync(be);
  same = same && st == GT_SUCCESS && memcmp(want_dx, b->dres, N * C * sizeof(float)) == 0;
  int first_bad = -1;
  for (int i = 0; i < n; i++)
    if (memcmp(want[i], gs[i], sizes[i] * sizeof(float)) != 0 && first_bad < 0)
      first_bad = i;
  tap_ok(same && deferred && first_bad < 0,
         "%s [%s]: B then W equals the joint backward bit for bit (dx %s, first differing "
         "gradient %d of %d; projections' gradients untouched by B: %s)",
         what, be->name, same ? "same" : "differs", first_bad, n, deferred ? "yes" : "no");
  if (st != GT_SUCCESS)
    tap_diag("%s", gt_error_message());
  for (int i = 0; i < n; i++)
    free(want[i]);
  free(want_dx);
  free(keep.dfcproj), free(keep.dfc), free(keep.dproj), free(keep.dqkv);
}

static void test_block(gt_backend *be)
{
  blk_ctx b;
  memset(&b, 0, sizeof b);
  b.d = (gt_layer_dims){.B = 2, .T = 6, .C = 8, .H = 2, .dt = GT_F32};
  const size_t N = 12, C = 8, B = 2, T = 6, H = 2;
  float *wbuf[12];
  float **ws[12];
  const void **wv[12] = {&b.w.ln1_w, &b.w.ln1_b, &b.w.qkv_w, &b.w.qkv_b, &b.w.proj_w,
                         &b.w.proj_b, &b.w.ln2_w, &b.w.ln2_b, &b.w.fc_w, &b.w.fc_b,
                         &b.w.fcproj_w, &b.w.fcproj_b};
  for (int i = 0; i < 12; i++)
    ws[i] = &wbuf[i];
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
    *wv[i] = *ws[i];
  }
  b.a = (gt_block_acts){blk_buf(N * C), blk_buf(N), blk_buf(N), blk_buf(3 * N * C),
                        blk_buf(B * H * T), blk_buf(N * C), blk_buf(N * C), blk_buf(N * C),
                        blk_buf(N), blk_buf(N), blk_buf(4 * N * C), blk_buf(4 * N * C), {0}};
  b.s = (gt_block_scratch){blk_buf(N * C), blk_buf(3 * N * C), blk_buf(N * C),
                           blk_buf(4 * N * C), NULL}; /* dact: SwiGLU only */
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
    fd_run(&c, be, ref);
  }
  float *gl[12];
  const bool proj[12] = {false, false, true, true, true, true, false, false, true, true, true, true};
  for (int i = 0; i < 12; i++)
    gl[i] = *gs[i];
  split_matches(&b, be, blk_loss, &b, gl, sizes, proj, 12, 4 * C, 3 * C, "block");
  for (int i = 0; i < 12; i++)
    free(*ws[i]), free(*gs[i]);
  void *acts[] = {b.a.ln1, b.a.ln1_mean, b.a.ln1_rstd, b.a.qkv, b.a.lse, b.a.atty, b.a.res2,
                  b.a.ln2, b.a.ln2_mean, b.a.ln2_rstd, b.a.fc, b.a.gelu, b.s.dln, b.s.dqkv,
                  b.s.datty, b.s.dfc, b.x, b.dx, b.y, b.r, b.dres};
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    free(acts[i]);
}

// ---- llama block: RMSNorm, rope, GQA, SwiGLU, no biases ----------------------------------------

/* The rope tables (T, hs/2) in a backend's memory, computed on the host. */
static float *rope_upload(gt_backend *be, const float *host, size_t n)
{
  float *dev = NULL;
  if (be->ops->alloc(be, n * sizeof(float), (void **)&dev) != GT_SUCCESS ||
      tu_upload(be, dev, host, n * sizeof(float)) != GT_SUCCESS)
    return NULL;
  return dev;
}

/* blk_ctx plus the tables of each backend (FD runs on ref, gradients on be). */
typedef struct {
  blk_ctx b;
  gt_backend *be;
  gt_block_kind kind_be, kind_ref;
} llama_ctx;

static double llama_blk_loss(fd_case *c, gt_backend *be)
{
  llama_ctx *l = c->ctx;
  blk_ctx *b = &l->b;
  b->d.kind = be == l->be ? l->kind_be : l->kind_ref;
  gt_block_forward(be, &b->w, &b->a, b->x, b->y, b->d);
  be->ops->sync(be);
  return dot_r(b->y, b->r, (size_t)b->d.B * b->d.T * b->d.C);
}

enum { LL_B = 2, LL_T = 6, LL_C = 16, LL_H = 4, LL_HKV = 2, LL_F = 24, LL_HS = LL_C / LL_H };

static void llama_blk_grads(fd_case *c, gt_backend *be)
{
  llama_ctx *l = c->ctx;
  blk_ctx *b = &l->b;
  const size_t N = LL_B * LL_T, C = LL_C, QKV = (LL_H + 2 * LL_HKV) * LL_HS;
  float *gs[6] = {b->g.ln1_w, b->g.qkv_w, b->g.proj_w, b->g.ln2_w, b->g.fc_w, b->g.fcproj_w};
  size_t sizes[6] = {C, QKV * C, C * C, C, 2 * LL_F * C, C * LL_F};
  for (int i = 0; i < 6; i++)
    memset(gs[i], 0, sizes[i] * sizeof(float));
  llama_blk_loss(c, be);
  memcpy(b->dres, b->r, N * C * sizeof(float));
  gt_block_backward(be, &b->w, &b->g, &b->a, b->x, b->dres, &b->s, b->d);
  be->ops->sync(be);
  memcpy(b->dx, b->dres, N * C * sizeof(float));
}

static void test_llama_block(gt_backend *be)
{
  llama_ctx l;
  memset(&l, 0, sizeof l);
  blk_ctx *b = &l.b;
  l.be = be;
  const size_t N = LL_B * LL_T, C = LL_C, F = LL_F, QKV = (LL_H + 2 * LL_HKV) * LL_HS;
  b->d = (gt_layer_dims){.B = LL_B, .T = LL_T, .C = LL_C, .H = LL_H, .dt = GT_F32,
                         .Hkv = LL_HKV, .F = LL_F};
  /* theta 100: the second frequency turns by a visible angle over 6 positions */
  const size_t nt = (size_t)LL_T * LL_HS / 2;
  float *cs = tu_alloc(2 * nt);
  if (gt_rope_tables(LL_HS, LL_T, 100.0, NULL, cs, cs + nt) != GT_SUCCESS) {
    tap_ok(false, "llama block: rope tables: %s", gt_error_message());
    free(cs);
    return;
  }
  gt_block_kind k = {.norm = {.rms = true, .eps = 1e-5f}, .rope = true, .swiglu = true};
  l.kind_be = l.kind_ref = k;
  l.kind_be.rope_cos = rope_upload(be, cs, nt);
  l.kind_be.rope_sin = rope_upload(be, cs + nt, nt);
  l.kind_ref.rope_cos = rope_upload(ref, cs, nt);
  l.kind_ref.rope_sin = rope_upload(ref, cs + nt, nt);
  free(cs);
  float *ws[6], *gs[6];
  const char *names[6] = {"ln_1.weight", "attn.qkv.weight", "attn.proj.weight",
                          "ln_2.weight", "mlp.fc.weight",   "mlp.proj.weight"};
  size_t sizes[6] = {C, QKV * C, C * C, C, 2 * F * C, C * F};
  for (int i = 0; i < 6; i++) {
    ws[i] = blk_buf(sizes[i]);
    gs[i] = blk_buf(sizes[i]);
    bool ln_weight = i == 0 || i == 3;
    tu_fill(ws[i], sizes[i], 140 + (uint64_t)i, ln_weight ? 0.5f : -0.5f, ln_weight ? 1.5f : 0.5f);
  }
  b->w = (gt_block_weights){.ln1_w = ws[0], .qkv_w = ws[1], .proj_w = ws[2], .ln2_w = ws[3],
                            .fc_w = ws[4], .fcproj_w = ws[5]};
  b->g = (gt_block_grads){.ln1_w = gs[0], .qkv_w = gs[1], .proj_w = gs[2], .ln2_w = gs[3],
                          .fc_w = gs[4], .fcproj_w = gs[5]};
  b->a = (gt_block_acts){.ln1 = blk_buf(N * C), .ln1_mean = blk_buf(N), .ln1_rstd = blk_buf(N),
                         .qkv = blk_buf(N * QKV), .lse = blk_buf(N * LL_H),
                         .atty = blk_buf(N * C), .res2 = blk_buf(N * C), .ln2 = blk_buf(N * C),
                         .ln2_mean = blk_buf(N), .ln2_rstd = blk_buf(N),
                         .fc = blk_buf(2 * N * F), .gelu = blk_buf(N * F)};
  b->s = (gt_block_scratch){.dln = blk_buf(N * C), .dqkv = blk_buf(N * QKV),
                            .datty = blk_buf(N * C), .dfc = blk_buf(2 * N * F),
                            .dact = blk_buf(N * F)};
  b->x = blk_buf(N * C);
  b->dx = blk_buf(N * C);
  b->y = blk_buf(N * C);
  b->r = blk_buf(N * C);
  b->dres = blk_buf(N * C);
  tu_fill(b->x, N * C, 150, -1, 1);
  tu_fill(b->r, N * C, 151, -1, 1);
  float *xs[7] = {b->x}, *grads[7] = {b->dx};
  size_t ns[7] = {N * C};
  const char *xn[7] = {"x"};
  for (int i = 0; i < 6; i++) {
    xs[i + 1] = ws[i];
    grads[i + 1] = gs[i];
    ns[i + 1] = sizes[i];
    xn[i + 1] = names[i];
  }
  const bool tables = l.kind_be.rope_cos && l.kind_be.rope_sin && l.kind_ref.rope_cos &&
                      l.kind_ref.rope_sin;
  if (!tap_ok(tables, "llama block [%s]: rope tables uploaded", be->name))
    return;
  for (int g0 = 0; g0 < 7; g0 += 4) {
    fd_case c = {.name = "llama block", .loss = llama_blk_loss, .grads = llama_blk_grads,
                 .ctx = &l};
    for (int j = 0; j < 4 && g0 + j < 7; j++) {
      c.x[j] = xs[g0 + j];
      c.grad[j] = grads[g0 + j];
      c.n[j] = ns[g0 + j];
      c.xname[j] = xn[g0 + j];
      c.ninputs = j + 1;
    }
    fd_run(&c, be, ref);
  }
  const bool proj[6] = {false, true, true, false, true, true};
  b->d.kind = l.kind_be;
  split_matches(b, be, llama_blk_loss, &l, gs, sizes, proj, 6, 2 * F, QKV, "llama block");
  for (int i = 0; i < 6; i++)
    free(ws[i]), free(gs[i]);
  void *acts[] = {b->a.ln1, b->a.ln1_mean, b->a.ln1_rstd, b->a.qkv, b->a.lse, b->a.atty,
                  b->a.res2, b->a.ln2, b->a.ln2_mean, b->a.ln2_rstd, b->a.fc, b->a.gelu,
                  b->s.dln, b->s.dqkv, b->s.datty, b->s.dfc, b->s.dact, b->x, b->dx, b->y,
                  b->r, b->dres};
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    free(acts[i]);
  be->ops->free(be, (void *)l.kind_be.rope_cos);
  be->ops->free(be, (void *)l.kind_be.rope_sin);
  ref->ops->free(ref, (void *)l.kind_ref.rope_cos);
  ref->ops->free(ref, (void *)l.kind_ref.rope_sin);
}

// ---- the whole GPT -----------------------------------------------------------------------------

/* The loss sum of one forward of m (device accumulator acc). */
static double gpt_loss_sum(gt_gpt *m, double *acc, const int32_t *tok, const int32_t *tgt,
                           int B, int T, float dlogit_scale)
{
  gt_backend *be = gt_gpt_params(m)->be;
  double sum = NAN;
  be->ops->zero(be, acc, sizeof(double));
  gt_gpt_forward(m, 0, tok, tgt, B, T, dlogit_scale, acc);
  tu_download(be, &sum, acc, sizeof sum);
  return sum;
}

static void test_gpt(gt_backend *be, const gt_gpt_shape shape, const char *what)
{
  const int B = 2, T = 6, N = B * T;
  const gt_gpt_part whole = gt_gpt_whole(&shape);
  gt_gpt *fwd = NULL, *model = NULL; /* cpu-ref model perturbed for FD; the one under test */
  double *acc_f = NULL, *acc_m = NULL;
  if (gt_gpt_create(ref, &shape, &whole, NULL, GT_F32, B, T, 1, &fwd) ||
      gt_gpt_create(be, &shape, &whole, NULL, GT_F32, B, T, 1, &model) ||
      ref->ops->alloc(ref, sizeof(double), (void **)&acc_f) ||
      be->ops->alloc(be, sizeof(double), (void **)&acc_m)) {
    tap_ok(false, "%s create: %s", what, gt_error_message());
    return;
  }
  gt_params *pf = gt_gpt_params(fwd), *pm = gt_gpt_params(model);
  /* Larger weights than GPT-2's init so that every path carries signal. */
  float *w = tu_alloc(pf->numel);
  tu_fill(w, pf->numel, 130, -0.4f, 0.4f);
  for (int i = 0; i < pf->count; i++)
    if (strstr(pf->list[i].name, "ln_") && strstr(pf->list[i].name, "weight"))
      tu_fill(w + pf->list[i].offset, pf->list[i].numel, 131 + (uint64_t)i, 0.7f, 1.3f);
  tu_upload(ref, pf->values, w, pf->numel * sizeof(float));
  tu_upload(be, pm->values, w, pm->numel * sizeof(float));
  int32_t tok[12], tgt[12];
  tu_fill_int(tok, 12, 132, shape.vocab);
  tu_fill_int(tgt, 12, 133, shape.vocab);
  gt_params_zero_grads(pm);
  gpt_loss_sum(model, acc_m, tok, tgt, B, T, 1.0f / N);
  gt_gpt_backward(model, 0, NULL);
  float *grads = tu_fetch(be, pm->grads, pm->numel);
  double worst = 0;
  const char *worst_name = "";
  for (int p = 0; p < pf->count; p++) {
    const size_t off = pf->list[p].offset, n = pf->list[p].numel;
    const float *an = grads + pm->list[p].offset;
    double num = 0, den = 0;
    uint64_t s = 777 + (uint64_t)p;
    for (int j = 0; j < 8; j++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t i = (size_t)((s >> 33) % n);
      float x0 = w[off + i], xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
      float *dev = (float *)pf->values + off + i;
      tu_upload(ref, dev, &xp, sizeof xp);
      double lp = gpt_loss_sum(fwd, acc_f, tok, tgt, B, T, 0.0f);
      tu_upload(ref, dev, &xm, sizeof xm);
      double lm = gpt_loss_sum(fwd, acc_f, tok, tgt, B, T, 0.0f);
      tu_upload(ref, dev, &x0, sizeof x0);
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
      tap_diag("%s [%s] %s: error %.3e", what, be->name, pf->list[p].name, err);
  }
  tap_ok(worst <= FD_TOL, "%s [%s] all %d parameter gradients vs finite differences (worst %.2e, %s)",
         what, be->name, pf->count, worst, worst_name);
  free(w);
  free(grads);
  ref->ops->free(ref, acc_f);
  be->ops->free(be, acc_m);
  gt_gpt_destroy(&fwd);
  gt_gpt_destroy(&model);
}

/* A llama: untied head, 4 heads over 2 key/value heads (head size 4), an
 * MLP of 24 (not 4 dim), llama3 rope scaling (see the top). */
static const gt_gpt_shape llama_shape = {
    2, 4, 16, 8, 11, .arch = GT_MODEL_LLAMA, .kv_heads = 2, .ffn_dim = 24, .tie = GT_TRI_OFF,
    .norm_eps = 1e-5f, .rope_theta = 10000.0,
    .rope = {.type = GT_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
             .original_max_position_embeddings = 8}};

/* Mixtures of experts (no router losses: the finite differences see the
 * model's cross-entropy only; tests/ref/test_moe_ops checks the router's
 * losses against their formulas): a gpt whose block 0 has 4 experts of 12
 * units, top 2, and whose block 1 is dense; and the llama above with
 * experts in every block, 3 of them with top 2 and one shared expert of
 * 8 units beside them. Top 2, so that the renormalised gates carry the
 * router's gradient. */
static const gt_gpt_shape gpt_moe_shape = {2, 2, 8, 8, 11, .arch = GT_MODEL_GPT, .experts = 4,
                                           .top_k = 2, .moe_every = 2, .expert_ffn = 12,
                                           .capacity_factor = 1.0};

static gt_gpt_shape llama_moe_shape(void)
{
  gt_gpt_shape s = llama_shape;
  s.experts = 3;
  s.top_k = 2;
  s.moe_every = 1;
  s.expert_ffn = 8;
  s.shared_experts = 1;
  return s;
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  if (gt_backend_create("cpu", 2, &fast) || gt_backend_create("cpu-ref", 1, &ref))
    return tap_bail("cannot create the backends: %s", gt_error_message());
  gt_backend *backends[2] = {ref, fast};
  for (int i = 0; i < 2; i++) {
    test_block(backends[i]);
    test_gpt(backends[i], (gt_gpt_shape){2, 2, 8, 8, 11, .arch = GT_MODEL_GPT}, "gpt");
    test_llama_block(backends[i]);
    test_gpt(backends[i], llama_shape, "llama");
    test_gpt(backends[i], gpt_moe_shape, "gpt-moe");
    test_gpt(backends[i], llama_moe_shape(), "llama-moe");
  }
  gt_backend_destroy(&fast);
  gt_backend_destroy(&ref);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
