/*
 * test_kernels.c - the fast cpu backend against the cpu-ref backend, kernel
 * by kernel, forward and backward, on odd shapes (edges of column blocks,
 * heads, rows). Tolerance: norm-wise relative error <= 2e-6 (fp32 sums in a
 * different order against double sums). The vocabulary-parallel embedding and
 * cross-entropy are also run split over P shards, with the unsplit result as
 * the expected one.
 *
 * gt-test: ranks=1
 */
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/backend.h"

#define TOL 2e-6

static gt_backend *fast, *ref;

static void check(const char *what, const float *a, const float *b, size_t n)
{
  double e = tu_rel_err(a, b, n);
  if (!tap_ok(e <= TOL, "%s (rel err %.2e)", what, e))
    tap_diag("%s: relative error %.3e > %.1e", what, e, TOL);
}

static void test_matmul(int m, int n, int k)
{
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      float *a = tu_alloc((size_t)m * k), *b = tu_alloc((size_t)k * n);
      float *c1 = tu_alloc((size_t)m * n), *c2;
      tu_fill(a, (size_t)m * k, 1, -1, 1);
      tu_fill(b, (size_t)k * n, 2, -1, 1);
      tu_fill(c1, (size_t)m * n, 3, -1, 1);
      c2 = tu_copy(c1, (size_t)m * n);
      fast->ops->matmul(fast, ta, tb, m, n, k, 0.7f, a, ta ? m : k, b, tb ? k : n, 0.3f, c1, n);
      ref->ops->matmul(ref, ta, tb, m, n, k, 0.7f, a, ta ? m : k, b, tb ? k : n, 0.3f, c2, n);
      char what[64];
      snprintf(what, sizeof what, "matmul %dx%dx%d ta=%d tb=%d", m, n, k, ta, tb);
      check(what, c1, c2, (size_t)m * n);
      free(a), free(b), free(c1), free(c2);
    }
}

static void test_linear(int N, int C, int OC, bool bias)
{
  float *in = tu_alloc((size_t)N * C), *w = tu_alloc((size_t)OC * C), *b = tu_alloc(OC);
  float *dout = tu_alloc((size_t)N * OC);
  tu_fill(in, (size_t)N * C, 4, -1, 1);
  tu_fill(w, (size_t)OC * C, 5, -0.5, 0.5);
  tu_fill(b, OC, 6, -1, 1);
  tu_fill(dout, (size_t)N * OC, 7, -1, 1);
  float *o1 = tu_alloc((size_t)N * OC), *o2 = tu_alloc((size_t)N * OC);
  float *res = tu_alloc((size_t)N * OC);
  tu_fill(res, (size_t)N * OC, 3, -1, 1);
  char what[80];
  for (int with_res = 0; with_res < 2; with_res++) {
    fast->ops->linear_forward(fast, o1, in, w, bias ? b : NULL, with_res ? res : NULL, N, C, OC);
    ref->ops->linear_forward(ref, o2, in, w, bias ? b : NULL, with_res ? res : NULL, N, C, OC);
    snprintf(what, sizeof what, "linear forward N=%d C=%d OC=%d bias=%d residual=%d", N, C, OC,
             bias, with_res);
    check(what, o1, o2, (size_t)N * OC);
  }
  free(res);
  float *di1 = tu_alloc((size_t)N * C), *di2 = tu_alloc((size_t)N * C);
  float *dw1 = tu_alloc((size_t)OC * C), *dw2, *db1 = tu_alloc(OC), *db2;
  tu_fill(dw1, (size_t)OC * C, 8, -1, 1);
  tu_fill(db1, OC, 9, -1, 1);
  dw2 = tu_copy(dw1, (size_t)OC * C);
  db2 = tu_copy(db1, OC);
  fast->ops->linear_backward(fast, di1, dw1, bias ? db1 : NULL, dout, in, w, N, C, OC);
  ref->ops->linear_backward(ref, di2, dw2, bias ? db2 : NULL, dout, in, w, N, C, OC);
  snprintf(what, sizeof what, "linear backward din N=%d C=%d OC=%d", N, C, OC);
  check(what, di1, di2, (size_t)N * C);
  snprintf(what, sizeof what, "linear backward dw (+=) N=%d C=%d OC=%d", N, C, OC);
  check(what, dw1, dw2, (size_t)OC * C);
  if (bias) {
    snprintf(what, sizeof what, "linear backward dbias (+=) N=%d OC=%d", N, OC);
    check(what, db1, db2, OC);
  }
  free(in), free(w), free(b), free(dout), free(o1), free(o2);
  free(di1), free(di2), free(dw1), free(dw2), free(db1), free(db2);
}

static void test_layernorm(int N, int C)
{
  size_t nc = (size_t)N * C;
  float *x = tu_alloc(nc), *w = tu_alloc(C), *b = tu_alloc(C), *dy = tu_alloc(nc);
  tu_fill(x, nc, 10, -2, 3);
  tu_fill(w, C, 11, 0.5, 1.5);
  tu_fill(b, C, 12, -1, 1);
  tu_fill(dy, nc, 13, -1, 1);
  float *y1 = tu_alloc(nc), *y2 = tu_alloc(nc), *m1 = tu_alloc(N), *m2 = tu_alloc(N);
  float *r1 = tu_alloc(N), *r2 = tu_alloc(N);
  fast->ops->layernorm_forward(fast, y1, m1, r1, x, w, b, N, C);
  ref->ops->layernorm_forward(ref, y2, m2, r2, x, w, b, N, C);
  char what[80];
  snprintf(what, sizeof what, "layernorm forward N=%d C=%d", N, C);
  check(what, y1, y2, nc);
  snprintf(what, sizeof what, "layernorm rstd N=%d C=%d", N, C);
  check(what, r1, r2, N);
  float *dx1 = tu_alloc(nc), *dw1 = tu_alloc(C), *db1 = tu_alloc(C);
  tu_fill(dx1, nc, 14, -1, 1);
  tu_fill(dw1, C, 15, -1, 1);
  tu_fill(db1, C, 16, -1, 1);
  float *dx2 = tu_copy(dx1, nc), *dw2 = tu_copy(dw1, C), *db2 = tu_copy(db1, C);
  fast->ops->layernorm_backward(fast, dx1, dw1, db1, dy, x, w, m2, r2, N, C);
  ref->ops->layernorm_backward(ref, dx2, dw2, db2, dy, x, w, m2, r2, N, C);
  snprintf(what, sizeof what, "layernorm backward din (+=) N=%d C=%d", N, C);
  check(what, dx1, dx2, nc);
  snprintf(what, sizeof what, "layernorm backward dw, db (+=) N=%d C=%d", N, C);
  double e = fmax(tu_rel_err(dw1, dw2, C), tu_rel_err(db1, db2, C));
  tap_ok(e <= TOL, "%s (rel err %.2e)", what, e);
  free(x), free(w), free(b), free(dy), free(y1), free(y2), free(m1), free(m2), free(r1);
  free(r2), free(dx1), free(dw1), free(db1), free(dx2), free(dw2), free(db2);
}

static void test_gelu(size_t n)
{
  float *x = tu_alloc(n), *dy = tu_alloc(n), *y1 = tu_alloc(n), *y2 = tu_alloc(n);
  tu_fill(x, n, 17, -12, 12); /* both saturated ends and the middle */
  tu_fill(dy, n, 18, -1, 1);
  fast->ops->gelu_forward(fast, y1, x, n);
  ref->ops->gelu_forward(ref, y2, x, n);
  check("gelu forward", y1, y2, n);
  fast->ops->gelu_backward(fast, y1, x, dy, n);
  ref->ops->gelu_backward(ref, y2, x, dy, n);
  check("gelu backward", y1, y2, n);
  free(x), free(dy), free(y1), free(y2);
}

static void test_attention(int B, int T, int H, int hs)
{
  const int C = H * hs;
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * H * T * T;
  float *qkv = tu_alloc(nqkv), *dy = tu_alloc(nout);
  tu_fill(qkv, nqkv, 19, -2, 2);
  tu_fill(dy, nout, 20, -1, 1);
  float *o1 = tu_alloc(nout), *o2 = tu_alloc(nout), *a1 = tu_alloc(natt), *a2 = tu_alloc(natt);
  fast->ops->attention_forward(fast, o1, a1, qkv, B, T, H, hs);
  ref->ops->attention_forward(ref, o2, a2, qkv, B, T, H, hs);
  char what[80];
  snprintf(what, sizeof what, "attention forward B=%d T=%d H=%d hs=%d", B, T, H, hs);
  check(what, o1, o2, nout);
  snprintf(what, sizeof what, "attention probabilities (causal zeros) B=%d T=%d", B, T);
  check(what, a1, a2, natt);
  float *d1 = tu_alloc(nqkv), *d2 = tu_alloc(nqkv), *scratch = tu_alloc(natt);
  tu_fill(d1, nqkv, 21, -1, 1); /* "=" output: old contents must not leak */
  fast->ops->attention_backward(fast, d1, scratch, dy, qkv, a2, B, T, H, hs);
  ref->ops->attention_backward(ref, d2, scratch, dy, qkv, a2, B, T, H, hs);
  snprintf(what, sizeof what, "attention backward B=%d T=%d H=%d hs=%d", B, T, H, hs);
  check(what, d1, d2, nqkv);
  free(qkv), free(dy), free(o1), free(o2), free(a1), free(a2), free(d1), free(d2);
  free(scratch);
}

static void test_embedding(int B, int T, int C, int V)
{
  size_t n = (size_t)B * T * C;
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * T);
  tu_fill_int(tok, (size_t)B * T, 22, V / 3); /* repeats on purpose */
  float *wte = tu_alloc((size_t)V * C), *wpe = tu_alloc((size_t)T * C), *dy = tu_alloc(n);
  tu_fill(wte, (size_t)V * C, 23, -1, 1);
  tu_fill(wpe, (size_t)T * C, 24, -1, 1);
  tu_fill(dy, n, 25, -1, 1);
  float *o1 = tu_alloc(n), *o2 = tu_alloc(n);
  fast->ops->embedding_forward(fast, o1, tok, wte, wpe, B, T, C, 0, V);
  ref->ops->embedding_forward(ref, o2, tok, wte, wpe, B, T, C, 0, V);
  check("embedding forward", o1, o2, n);
  float *e1 = tu_copy(wte, (size_t)V * C), *e2 = tu_copy(wte, (size_t)V * C);
  float *p1 = tu_copy(wpe, (size_t)T * C), *p2 = tu_copy(wpe, (size_t)T * C);
  fast->ops->embedding_backward(fast, e1, p1, dy, tok, B, T, C, 0, V);
  ref->ops->embedding_backward(ref, e2, p2, dy, tok, B, T, C, 0, V);
  check("embedding backward dwte (+=, repeated tokens)", e1, e2, (size_t)V * C);
  check("embedding backward dwpe (+=)", p1, p2, (size_t)T * C);
  free(tok), free(wte), free(wpe), free(dy), free(o1), free(o2), free(e1), free(e2);
  free(p1), free(p2);
}

/* Vocabulary split over P shards of w = ceil(V/P) rows (the last one
 * shorter), against loops in this test: the sum of the shards' forward
 * outputs (wpe on shard 0 only) is the whole embedding; each shard's backward
 * adds exactly its rows of the whole dwte and writes nowhere else (guard rows
 * around each shard's buffer). tok_upper < V leaves the last shards without
 * any token. */
static void test_embedding_split(gt_backend *be, int B, int T, int C, int V, int P,
                                 int tok_upper)
{
  const int N = B * T, w = (V + P - 1) / P;
  const size_t n = (size_t)N * C, cs = (size_t)C;
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)N);
  tu_fill_int(tok, N, 32, tok_upper);
  float *wte = tu_alloc((size_t)V * C), *wpe = tu_alloc((size_t)T * C), *dy = tu_alloc(n);
  float *dwte0 = tu_alloc((size_t)V * C), *dwpe0 = tu_alloc((size_t)T * C);
  tu_fill(wte, (size_t)V * C, 33, -1, 1);
  tu_fill(wpe, (size_t)T * C, 34, -1, 1);
  tu_fill(dy, n, 35, -1, 1);
  tu_fill(dwte0, (size_t)V * C, 36, -1, 1);
  tu_fill(dwpe0, (size_t)T * C, 37, -1, 1);
  /* expected, by plain loops */
  float *want = tu_alloc(n), *want_dwte = tu_copy(dwte0, (size_t)V * C);
  float *want_dwpe = tu_copy(dwpe0, (size_t)T * C);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) {
      want[i * cs + c] = wte[tok[i] * cs + c] + wpe[(i % T) * cs + c];
      want_dwte[tok[i] * cs + c] += dy[i * cs + c];
      want_dwpe[(i % T) * cs + c] += dy[i * cs + c];
    }
  float *sum = tu_alloc(n), *out = tu_alloc(n), *dwpe = tu_copy(dwpe0, (size_t)T * C);
  float *got_dwte = tu_alloc((size_t)V * C);
  bool zeros_ok = true, guards_ok = true, untouched_ok = true;
  for (int r = 0; r < P; r++) {
    const int v0 = r * w, nv = V - v0 < w ? V - v0 : w;
    /* forward: "=" output, so start from garbage */
    float *shard = tu_copy(wte + v0 * cs, (size_t)nv * C);
    tu_fill(out, n, 38 + (uint64_t)r, 100, 200);
    be->ops->embedding_forward(be, out, tok, shard, r == 0 ? wpe : NULL, B, T, C, v0, nv);
    for (size_t k = 0; k < n; k++)
      sum[k] += out[k];
    if (r > 0)
      for (int i = 0; i < N; i++)
        if (tok[i] < v0 || tok[i] >= v0 + nv)
          for (int c = 0; c < C; c++)
            zeros_ok = zeros_ok && out[i * cs + c] == 0.0f;
    /* backward into nv rows between two guard rows */
    float *buf = tu_alloc((size_t)(nv + 2) * C);
    tu_fill(buf, (size_t)(nv + 2) * C, 39, -1, 1);
    float *before = tu_copy(buf, (size_t)(nv + 2) * C);
    memcpy(buf + cs, dwte0 + v0 * cs, (size_t)nv * C * sizeof(float));
    be->ops->embedding_backward(be, buf + cs, r == 0 ? dwpe : NULL, dy, tok, B, T, C, v0, nv);
    memcpy(got_dwte + v0 * cs, buf + cs, (size_t)nv * C * sizeof(float));
    for (size_t c = 0; c < cs; c++) {
      guards_ok = guards_ok && buf[c] == before[c];
      guards_ok = guards_ok && buf[(nv + 1) * cs + c] == before[(nv + 1) * cs + c];
    }
    for (int row = 0; row < nv; row++) {
      bool hit = false;
      for (int i = 0; i < N; i++)
        hit = hit || tok[i] == v0 + row;
      if (!hit)
        untouched_ok = untouched_ok && !memcmp(buf + (row + 1) * cs, dwte0 + (v0 + row) * cs,
                                               cs * sizeof(float));
    }
    free(shard), free(buf), free(before);
  }
  char what[120];
  snprintf(what, sizeof what, "embedding split [%s] V=%d P=%d tokens<%d: forward sum", be->name,
           V, P, tok_upper);
  check(what, sum, want, n);
  tap_ok(zeros_ok, "embedding split [%s] tokens outside a shard give exact zeros (no wpe)",
         be->name);
  snprintf(what, sizeof what, "embedding split [%s] V=%d P=%d: dwte rows (+=)", be->name, V, P);
  check(what, got_dwte, want_dwte, (size_t)V * C);
  snprintf(what, sizeof what, "embedding split [%s] V=%d P=%d: dwpe on shard 0 (+=)", be->name,
           V, P);
  check(what, dwpe, want_dwpe, (size_t)T * C);
  tap_ok(untouched_ok && guards_ok,
         "embedding split [%s] rows without tokens and memory around shards untouched",
         be->name);
  free(tok), free(wte), free(wpe), free(dy), free(dwte0), free(dwpe0), free(want);
  free(want_dwte), free(want_dwpe), free(sum), free(out), free(dwpe), free(got_dwte);
}

/* Fill the padding columns nv..ld-1 of (N,ld) with values that would show
 * if a kernel read them (they would dominate the max and the sum). */
static void pad_garbage(float *l, int N, int nv, int ld)
{
  for (int i = 0; i < N; i++)
    for (int j = nv; j < ld; j++)
      l[(size_t)i * ld + j] = (i + j) % 2 ? 60.0f : -60.0f;
}

static bool pad_zero(const float *l, int N, int nv, int ld)
{
  for (int i = 0; i < N; i++)
    for (int j = nv; j < ld; j++)
      if (l[(size_t)i * ld + j] != 0.0f)
        return false;
  return true;
}

/* One shard's loss: xent_partial then xent_finish with P = 1. */
static void xent_one(gt_backend *be, float *losses, float *logits, float *stats,
                     const int32_t *y, int N, int V, int ld, float grad_scale)
{
  be->ops->xent_partial(be, stats, logits, y, N, V, ld, 0);
  be->ops->xent_finish(be, losses, logits, stats, 1, y, N, V, ld, 0, grad_scale);
}

static void test_xent(int N, int V, int ld)
{
  size_t n = (size_t)N * ld;
  float *l1 = tu_alloc(n), *l2, *s1 = tu_alloc(N), *s2 = tu_alloc(N);
  float *st1 = tu_alloc(3 * (size_t)N), *st2 = tu_alloc(3 * (size_t)N);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)N);
  tu_fill(l1, n, 26, -8, 8);
  pad_garbage(l1, N, V, ld);
  tu_fill_int(y, N, 27, V);
  l2 = tu_copy(l1, n);
  char what[96];
  fast->ops->xent_partial(fast, st1, l1, y, N, V, ld, 0);
  ref->ops->xent_partial(ref, st2, l2, y, N, V, ld, 0);
  snprintf(what, sizeof what, "xent_partial stats N=%d V=%d ld=%d", N, V, ld);
  check(what, st1, st2, 3 * (size_t)N);
  xent_one(fast, s1, l1, st1, y, N, V, ld, 0.0f);
  xent_one(ref, s2, l2, st2, y, N, V, ld, 0.0f);
  snprintf(what, sizeof what, "xent losses P=1 N=%d V=%d ld=%d (no gradient)", N, V, ld);
  check(what, s1, s2, N);
  tap_ok(!memcmp(l1, l2, n * sizeof(float)), "xent without gradient leaves the logits alone");
  xent_one(fast, s1, l1, st1, y, N, V, ld, 0.25f);
  xent_one(ref, s2, l2, st2, y, N, V, ld, 0.25f);
  snprintf(what, sizeof what, "xent losses P=1 N=%d V=%d ld=%d (with gradient)", N, V, ld);
  check(what, s1, s2, N);
  snprintf(what, sizeof what, "xent dlogits P=1 N=%d V=%d ld=%d", N, V, ld);
  check(what, l1, l2, n);
  tap_ok(pad_zero(l1, N, V, ld), "xent dlogits padding exactly 0 (ld - V = %d)", ld - V);
  free(l1), free(l2), free(s1), free(s2), free(st1), free(st2), free(y);
}

/* The vocabulary split over P shards of w = ceil(V/P) columns with row
 * stride ld >= w (the last shard has fewer real columns): every shard's
 * losses and the concatenated gradient equal the unsplit cpu-ref result. */
static void test_xent_split(gt_backend *be, int N, int V, int P, int ld)
{
  const int w = (V + P - 1) / P;
  const float gs = 0.5f;
  float *full = tu_alloc((size_t)N * V), *want_loss = tu_alloc(N);
  float *st = tu_alloc(3 * (size_t)N * P), *loss = tu_alloc(N);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)N);
  tu_fill(full, (size_t)N * V, 40, -6, 6);
  tu_fill_int(y, N, 41, V);
  /* targets on the first and last column of every shard, the rest random */
  for (int r = 0; r < P && r * w < V && 2 * r + 1 < N; r++) {
    y[2 * r] = r * w;
    y[2 * r + 1] = (r + 1) * w < V ? (r + 1) * w - 1 : V - 1;
  }
  float *want_grad = tu_copy(full, (size_t)N * V);
  xent_one(ref, want_loss, want_grad, st, y, N, V, V, gs);
  float **shard = malloc(sizeof(float *) * (size_t)P);
  for (int r = 0; r < P; r++) {
    const int v0 = r * w, nv = V - v0 < w ? V - v0 : w;
    if (nv < 0 || ld < nv)
      abort();
    shard[r] = tu_alloc((size_t)N * ld);
    for (int i = 0; i < N; i++)
      memcpy(shard[r] + (size_t)i * ld, full + (size_t)i * V + v0, sizeof(float) * (size_t)nv);
    pad_garbage(shard[r], N, nv, ld);
    be->ops->xent_partial(be, st + 3 * (size_t)N * r, shard[r], y, N, nv, ld, v0);
  }
  float *grad = tu_alloc((size_t)N * V), *loss0 = tu_alloc(N);
  double worst = 0;
  bool same = true, pad_ok = true;
  for (int r = 0; r < P; r++) {
    const int v0 = r * w, nv = V - v0 < w ? V - v0 : w;
    be->ops->xent_finish(be, loss, shard[r], st, P, y, N, nv, ld, v0, gs);
    for (int i = 0; i < N; i++) {
      worst = fmax(worst, fabs((double)loss[i] - want_loss[i]) / fabs(want_loss[i]));
      memcpy(grad + (size_t)i * V + v0, shard[r] + (size_t)i * ld, sizeof(float) * (size_t)nv);
    }
    if (r == 0)
      memcpy(loss0, loss, sizeof(float) * (size_t)N);
    same = same && !memcmp(loss0, loss, sizeof(float) * (size_t)N);
    pad_ok = pad_ok && pad_zero(shard[r], N, nv, ld);
  }
  tap_ok(worst <= 1e-6, "xent split [%s] N=%d V=%d P=%d ld=%d: losses (max rel err %.2e)",
         be->name, N, V, P, ld, worst);
  tap_ok(same, "xent split [%s]: identical losses on every shard", be->name);
  char what[96];
  snprintf(what, sizeof what, "xent split [%s] N=%d V=%d P=%d ld=%d: dlogits", be->name, N, V, P,
           ld);
  check(what, grad, want_grad, (size_t)N * V);
  tap_ok(pad_ok, "xent split [%s]: padding columns exactly 0", be->name);
  for (int r = 0; r < P; r++)
    free(shard[r]);
  free(shard), free(full), free(want_loss), free(st), free(loss), free(y), free(want_grad);
  free(grad), free(loss0);
}

static void test_adamw_sumsq(size_t n)
{
  float *p1 = tu_alloc(n), *g = tu_alloc(n), *m1 = tu_alloc(n), *v1 = tu_alloc(n);
  tu_fill(p1, n, 28, -1, 1);
  tu_fill(g, n, 29, -0.1f, 0.1f);
  tu_fill(m1, n, 30, -0.01f, 0.01f);
  tu_fill(v1, n, 31, 0, 0.001f);
  float *p2 = tu_copy(p1, n), *m2 = tu_copy(m1, n), *v2 = tu_copy(v1, n);
  fast->ops->adamw(fast, p1, g, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.1426f,
                   0.8f);
  ref->ops->adamw(ref, p2, g, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.1426f,
                  0.8f);
  check("adamw parameters", p1, p2, n);
  check("adamw first moment", m1, m2, n);
  check("adamw second moment", v1, v2, n);
  double s1, s2;
  fast->ops->sumsq(fast, g, n, &s1);
  ref->ops->sumsq(ref, g, n, &s2);
  tap_ok(fabs(s1 - s2) <= 1e-12 * s2, "sumsq (%.15g vs %.15g)", s1, s2);
  double s3;
  fast->ops->sumsq(fast, g, n, &s3);
  tap_ok(s3 == s1, "sumsq repeats bit for bit");
  free(p1), free(g), free(m1), free(v1), free(p2), free(m2), free(v2);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  if (gt_backend_create("cpu", 2, &fast) || gt_backend_create("cpu-ref", 1, &ref))
    return tap_bail("cannot create the backends: %s", gt_error_message());
  test_matmul(17, 23, 31);
  test_linear(37, 40, 56, true);
  test_linear(29, 300, 520, true); /* several column blocks */
  test_linear(8, 16, 24, false);
  test_layernorm(33, 40);
  test_layernorm(9, 600);
  test_gelu(1001);
  test_attention(2, 13, 3, 8);
  test_attention(3, 32, 4, 16);
  test_attention(1, 70, 2, 72); /* head size past one 64-wide block, ragged T */
  test_attention(2, 64, 3, 64);
  test_embedding(3, 11, 300, 37);
  test_xent(19, 67, 67);
  test_xent(7, 61, 64);
  test_xent(33, 1000, 1024);
  gt_backend *both[2] = {ref, fast};
  for (int k = 0; k < 2; k++) {
    test_embedding_split(both[k], 3, 11, 300, 37, 3, 37);
    test_embedding_split(both[k], 2, 7, 24, 10, 4, 3); /* tokens in shard 0 only */
    test_xent_split(both[k], 19, 67, 3, 23);  /* padding on the last shard only */
    test_xent_split(both[k], 13, 61, 2, 32);  /* padding on every shard */
    test_xent_split(both[k], 9, 10, 4, 3);    /* last shard: 1 real column */
    test_xent_split(both[k], 8, 9, 4, 4);     /* last shard: no real column */
    test_xent_split(both[k], 6, 1000, 3, 336);
  }
  test_adamw_sumsq(100003);
  gt_backend_destroy(&fast);
  gt_backend_destroy(&ref);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
