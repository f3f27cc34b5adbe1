/*
 * test_kernels.c - the fast cpu backend against the cpu-ref backend, kernel
 * by kernel, forward and backward, on odd shapes (edges of column blocks,
 * heads, rows). Tolerance: norm-wise relative error <= 2e-6 (fp32 sums in a
 * different order against double sums).
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
  fast->ops->embedding_forward(fast, o1, tok, wte, wpe, B, T, C);
  ref->ops->embedding_forward(ref, o2, tok, wte, wpe, B, T, C);
  check("embedding forward", o1, o2, n);
  float *e1 = tu_copy(wte, (size_t)V * C), *e2 = tu_copy(wte, (size_t)V * C);
  float *p1 = tu_copy(wpe, (size_t)T * C), *p2 = tu_copy(wpe, (size_t)T * C);
  fast->ops->embedding_backward(fast, e1, p1, dy, tok, B, T, C);
  ref->ops->embedding_backward(ref, e2, p2, dy, tok, B, T, C);
  check("embedding backward dwte (+=, repeated tokens)", e1, e2, (size_t)V * C);
  check("embedding backward dwpe (+=)", p1, p2, (size_t)T * C);
  free(tok), free(wte), free(wpe), free(dy), free(o1), free(o2), free(e1), free(e2);
  free(p1), free(p2);
}

static void test_crossentropy(int N, int V, int Vp)
{
  size_t n = (size_t)N * Vp;
  float *l1 = tu_alloc(n), *l2, *s1 = tu_alloc(N), *s2 = tu_alloc(N);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)N);
  tu_fill(l1, n, 26, -8, 8);
  tu_fill_int(y, N, 27, V);
  l2 = tu_copy(l1, n);
  fast->ops->crossentropy(fast, s1, l1, y, N, V, Vp, 0.0f);
  ref->ops->crossentropy(ref, s2, l2, y, N, V, Vp, 0.0f);
  check("crossentropy losses (no gradient)", s1, s2, N);
  fast->ops->crossentropy(fast, s1, l1, y, N, V, Vp, 0.25f);
  ref->ops->crossentropy(ref, s2, l2, y, N, V, Vp, 0.25f);
  check("crossentropy losses (with gradient)", s1, s2, N);
  check("crossentropy dlogits (padding zeroed)", l1, l2, n);
  free(l1), free(l2), free(s1), free(s2), free(y);
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
  test_crossentropy(19, 67, 67);
  test_crossentropy(7, 61, 64);
  test_adamw_sumsq(100003);
  gt_backend_destroy(&fast);
  gt_backend_destroy(&ref);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
