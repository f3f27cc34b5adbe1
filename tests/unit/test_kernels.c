/*
 * test_kernels.c - the fast cpu backend against the cpu-ref backend, kernel
 * by kernel (attention has its own test), forward and backward, in fp32,
 * bf16 and fp16, on odd shapes (edges of column blocks, tails that are not
 * multiples of 16). Both backends get the same inputs, already representable
 * in the compute type. The vocabulary-parallel embedding and cross-entropy
 * are also run split over P shards, with the unsplit result as the expected
 * one; casts are checked bit for bit against conversions written out here.
 *
 * Tolerances (check()):
 *   fp32 outputs (every fp32 result, whatever the compute type: gradients of
 *   parameters, statistics, losses): norm-wise relative error
 *   ||fast - ref|| / ||ref|| <= 2e-6, fp32 sums in another order against
 *   double sums (as before the 16-bit types).
 *   bf16 / fp16 outputs: both backends compute the same value in fp32 resp.
 *   double and round it once to the type, so an element differs only where
 *   the two unrounded values straddle a rounding boundary: by one ulp of the
 *   type. Hence
 *   - worst element: |fast - ref| <= 1 ulp(ref) + s, s = 1e-5 ||ref||_inf
 *     being the fp32-vs-double error before the rounding (5x the fp32
 *     tolerance), which only matters for elements far below the largest
 *     (cancellation, GELU's tail), where an ulp is smaller than that error;
 *   - few elements differ (by more than s): at most 2 + n/32. A rounding bug
 *     that moves every element (truncation, a double rounding, the wrong
 *     type) makes about half of them differ; a straddle needs the fp32 error
 *     (~1e-7 relative) to cross a boundary an ulp (4e-3 bf16, 5e-4 fp16)
 *     wide, measured at most 0.2% of the elements here;
 *   - norm-wise: ||fast - ref|| / ||ref|| <= u/8 (u = 2^-8 bf16, 2^-11
 *     fp16, the unit roundoff; measured <= 2.4e-5 bf16 and fp16 on the
 *     GEMMs) for n >= 256, <= u for smaller tensors, where a single
 *     legitimate one-ulp difference may carry the whole norm.
 *
 * Every call goes through the op and then sync, so the test also holds with
 * GT_CPU_MODE=async (host malloc memory serves as device memory on the cpu
 * backends).
 *
 * gt-test: ranks=1 tier=quick
 */
#include <float.h>
#include <stdio.h>

#include "../compare.h"
#include "../test_util.h"
#include "gridtrain/backend.h"


static gt_backend *fast, *ref;
static const gt_dtype all_dt[3] = {GT_F32, GT_BF16, GT_F16};
static int call_failures;

/* An op, then sync (results may be read afterwards); failures are counted. */
#define CALL(be, op, ...) \
  tu_call_counted(&call_failures, (be), (be)->ops->op((be), __VA_ARGS__), #op)

// ---- the 16-bit formats, written out independently of the backends -------------------

static uint32_t f32_bits(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float bits_f32(uint32_t u)
{
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static float bf16_value(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static double f16_value(uint16_t h)
{
  const int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return h & 0x8000 ? -v : v;
}

/* Of two neighbours lo < hi (magnitudes) around a, the nearest; ties to the
 * even pattern. */
static uint16_t nearest(double a, uint16_t lo, double vlo, double vhi)
{
  const double dlo = a - vlo, dhi = vhi - a;
  return dlo < dhi ? lo : dhi < dlo ? (uint16_t)(lo + 1) : (lo & 1 ? (uint16_t)(lo + 1) : lo);
}

static uint16_t enc_bf16(float x)
{
  const uint32_t u = f32_bits(x);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(x))
    return sign | 0x7fc0;
  const double a = fabs((double)x);
  const uint16_t lo = (uint16_t)((u >> 16) & 0x7fff);
  if (lo >= 0x7f80)
    return sign | 0x7f80;
  const double vhi = lo + 1 == 0x7f80 ? ldexp(1, 128) : bf16_value((uint16_t)(lo + 1));
  return sign | nearest(a, lo, bf16_value(lo), vhi);
}

static uint16_t enc_f16(float x)
{
  const uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (isnan(x))
    return sign | 0x7e00;
  const double a = fabs((double)x);
  if (a >= 65536.0)
    return sign | 0x7c00;
  unsigned lo = 0, hi = 0x7bff; /* largest finite pattern with value <= a */
  while (lo < hi) {
    unsigned mid = (lo + hi + 1) / 2;
    if (f16_value((uint16_t)mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  const double vhi = lo == 0x7bff ? 65536.0 : f16_value((uint16_t)(lo + 1));
  return sign | nearest(a, (uint16_t)lo, f16_value((uint16_t)lo), vhi);
}

static size_t dt_size(gt_dtype t) { return t == GT_F32 ? 4 : 2; }

static float dec(gt_dtype t, const void *p, size_t i)
{
  switch (t) {
  case GT_BF16: return bf16_value(((const uint16_t *)p)[i]);
  case GT_F16: return (float)f16_value(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

static void enc(gt_dtype t, void *p, size_t i, float x)
{
  switch (t) {
  case GT_BF16: ((uint16_t *)p)[i] = enc_bf16(x); break;
  case GT_F16: ((uint16_t *)p)[i] = enc_f16(x); break;
  default: ((float *)p)[i] = x; break;
  }
}

static void *dt_alloc(gt_dtype t, size_t n)
{
  void *p = calloc(n ? n : 1, dt_size(t));
  if (!p)
    abort();
  return p;
}

static void *dt_copy(gt_dtype t, const void *p, size_t n)
{
  void *q = dt_alloc(t, n);
  memcpy(q, p, n * dt_size(t));
  return q;
}

/* x (fp32) rounded to t in place, and the array of t holding it. */
static void *dt_make(gt_dtype t, float *x, size_t n)
{
  void *p = dt_alloc(t, n);
  for (size_t i = 0; i < n; i++) {
    enc(t, p, i, x[i]);
    x[i] = dec(t, p, i);
  }
  return p;
}

/* n random values of t in [lo, hi) (fp32 copy in *x when x is not NULL). */
static void *dt_random(gt_dtype t, size_t n, uint64_t seed, float lo, float hi, float **x)
{
  float *v = tu_alloc(n);
  tu_fill(v, n, seed, lo, hi);
  void *p = dt_make(t, v, n);
  if (x)
    *x = v;
  else
    free(v);
  return p;
}

static float *dt_read(gt_dtype t, const void *p, size_t n)
{
  float *x = tu_alloc(n);
  for (size_t i = 0; i < n; i++)
    x[i] = dec(t, p, i);
  return x;
}

// ---- comparisons -----------------------------------------------------------------------

/* a (fast) against b (reference), n decoded values of type t (compare.h). */
static bool check(gt_dtype t, const char *what, const float *a, const float *b, size_t n)
{
  return tu_check_close(t, what, a, b, n, true);
}

/* Two arrays of type t, decoded. */
static bool check_dt(gt_dtype t, const char *what, const void *a, const void *b, size_t n)
{
  float *x = dt_read(t, a, n), *y = dt_read(t, b, n);
  bool ok = check(t, what, x, y, n);
  free(x), free(y);
  return ok;
}

// ---- dense algebra ---------------------------------------------------------------------

static void test_linear(gt_dtype dt, int64_t N, int64_t C, int64_t OC, bool bias)
{
  const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
  void *in = dt_random(dt, nin, 4, -1, 1, NULL), *w = dt_random(dt, nw, 5, -0.5f, 0.5f, NULL);
  void *b = dt_random(dt, (size_t)OC, 6, -1, 1, NULL);
  void *dout = dt_random(dt, nout, 7, -1, 1, NULL), *res = dt_random(dt, nout, 3, -1, 1, NULL);
  void *o1 = dt_random(dt, nout, 1, 100, 200, NULL), *o2 = dt_alloc(dt, nout);
  char what[112];
  for (int with_res = 0; with_res < 2; with_res++) {
    CALL(fast, linear_forward, dt, o1, in, w, bias ? b : NULL, with_res ? res : NULL, N, C, OC);
    CALL(ref, linear_forward, dt, o2, in, w, bias ? b : NULL, with_res ? res : NULL, N, C, OC);
    snprintf(what, sizeof what, "linear forward N=%lld C=%lld OC=%lld bias=%d residual=%d [%s]",
             (long long)N, (long long)C, (long long)OC, bias, with_res, gt_dtype_name(dt));
    check_dt(dt, what, o1, o2, nout);
  }
  void *di1 = dt_random(dt, nin, 2, 100, 200, NULL), *di2 = dt_alloc(dt, nin); /* "=" */
  float *dw1 = tu_alloc(nw), *db1 = tu_alloc((size_t)OC);
  tu_fill(dw1, nw, 8, -1, 1);
  tu_fill(db1, (size_t)OC, 9, -1, 1);
  float *dw2 = tu_copy(dw1, nw), *db2 = tu_copy(db1, (size_t)OC), *dw3 = tu_copy(dw1, nw);
  CALL(fast, linear_backward, dt, di1, dw1, bias ? db1 : NULL, dout, in, w, N, C, OC);
  CALL(ref, linear_backward, dt, di2, dw2, bias ? db2 : NULL, dout, in, w, N, C, OC);
  snprintf(what, sizeof what, "linear backward din N=%lld C=%lld OC=%lld [%s]", (long long)N,
           (long long)C, (long long)OC, gt_dtype_name(dt));
  check_dt(dt, what, di1, di2, nin);
  snprintf(what, sizeof what, "linear backward dw (+=, fp32) N=%lld C=%lld OC=%lld [%s]",
           (long long)N, (long long)C, (long long)OC, gt_dtype_name(dt));
  check(GT_F32, what, dw1, dw2, nw);
  if (bias) {
    snprintf(what, sizeof what, "linear backward dbias (+=, fp32) N=%lld OC=%lld [%s]",
             (long long)N, (long long)OC, gt_dtype_name(dt));
    check(GT_F32, what, db1, db2, (size_t)OC);
  }
  CALL(fast, linear_backward, dt, NULL, dw3, NULL, dout, in, w, N, C, OC);
  snprintf(what, sizeof what, "linear backward without din: dw (+=) N=%lld [%s]", (long long)N,
           gt_dtype_name(dt));
  check(GT_F32, what, dw3, dw2, nw);
  free(in), free(w), free(b), free(dout), free(res), free(o1), free(o2), free(di1), free(di2);
  free(dw1), free(db1), free(dw2), free(db2), free(dw3);
}

// ---- normalisation and activations ----------------------------------------------------

static void test_layernorm(gt_dtype dt, int64_t N, int64_t C)
{
  const size_t nc = (size_t)N * C, cs = (size_t)C;
  void *x = dt_random(dt, nc, 10, -2, 3, NULL), *w = dt_random(dt, cs, 11, 0.5f, 1.5f, NULL);
  void *b = dt_random(dt, cs, 12, -1, 1, NULL), *dy = dt_random(dt, nc, 13, -1, 1, NULL);
  void *y1 = dt_alloc(dt, nc), *y2 = dt_alloc(dt, nc);
  float *m1 = tu_alloc((size_t)N), *m2 = tu_alloc((size_t)N);
  float *r1 = tu_alloc((size_t)N), *r2 = tu_alloc((size_t)N);
  CALL(fast, layernorm_forward, dt, y1, m1, r1, x, w, b, N, C);
  CALL(ref, layernorm_forward, dt, y2, m2, r2, x, w, b, N, C);
  char what[96];
  snprintf(what, sizeof what, "layernorm forward N=%lld C=%lld [%s]", (long long)N, (long long)C,
           gt_dtype_name(dt));
  check_dt(dt, what, y1, y2, nc);
  snprintf(what, sizeof what, "layernorm mean, rstd (fp32) N=%lld C=%lld [%s]", (long long)N,
           (long long)C, gt_dtype_name(dt));
  float mr1[2] = {(float)tu_rel_err(m1, m2, (size_t)N), (float)tu_rel_err(r1, r2, (size_t)N)};
  tap_ok(mr1[0] <= TU_TOL32 && mr1[1] <= TU_TOL32, "%s (rel err %.2e, %.2e)", what, mr1[0], mr1[1]);
  /* backward, with the reference's statistics for both */
  void *dx1 = dt_random(dt, nc, 14, -1, 1, NULL), *dx2 = dt_copy(dt, dx1, nc);
  float *dw1 = tu_alloc(cs), *db1 = tu_alloc(cs);
  tu_fill(dw1, cs, 15, -1, 1);
  tu_fill(db1, cs, 16, -1, 1);
  float *dw2 = tu_copy(dw1, cs), *db2 = tu_copy(db1, cs);
  CALL(fast, layernorm_backward, dt, dx1, dw1, db1, dy, x, w, m2, r2, N, C);
  CALL(ref, layernorm_backward, dt, dx2, dw2, db2, dy, x, w, m2, r2, N, C);
  snprintf(what, sizeof what, "layernorm backward din (+=) N=%lld C=%lld [%s]", (long long)N,
           (long long)C, gt_dtype_name(dt));
  check_dt(dt, what, dx1, dx2, nc);
  snprintf(what, sizeof what, "layernorm backward dw (+=, fp32) N=%lld C=%lld [%s]",
           (long long)N, (long long)C, gt_dtype_name(dt));
  check(GT_F32, what, dw1, dw2, cs);
  snprintf(what, sizeof what, "layernorm backward db (+=, fp32) N=%lld C=%lld [%s]",
           (long long)N, (long long)C, gt_dtype_name(dt));
  check(GT_F32, what, db1, db2, cs);
  /* din aliasing dout (the residual gradient): the same as din = a copy of
   * dout, bit for bit on the fast backend, and against the reference */
  void *a1 = dt_copy(dt, dy, nc), *a2 = dt_copy(dt, dy, nc), *c1 = dt_copy(dt, dy, nc);
  float *aw1 = tu_alloc(cs), *ab1 = tu_alloc(cs), *aw2 = tu_alloc(cs), *ab2 = tu_alloc(cs);
  float *cw1 = tu_alloc(cs), *cb1 = tu_alloc(cs);
  CALL(fast, layernorm_backward, dt, a1, aw1, ab1, a1, x, w, m2, r2, N, C);
  CALL(ref, layernorm_backward, dt, a2, aw2, ab2, a2, x, w, m2, r2, N, C);
  CALL(fast, layernorm_backward, dt, c1, cw1, cb1, dy, x, w, m2, r2, N, C);
  tap_ok(!memcmp(a1, c1, nc * dt_size(dt)) && !memcmp(aw1, cw1, cs * 4) &&
             !memcmp(ab1, cb1, cs * 4),
         "layernorm backward with din aliasing dout N=%lld C=%lld [%s]: same bits as "
         "unaliased",
         (long long)N, (long long)C, gt_dtype_name(dt));
  snprintf(what, sizeof what, "layernorm backward din aliasing dout N=%lld C=%lld [%s]",
           (long long)N, (long long)C, gt_dtype_name(dt));
  check_dt(dt, what, a1, a2, nc);
  snprintf(what, sizeof what, "layernorm backward aliased dw (+=, fp32) N=%lld C=%lld [%s]",
           (long long)N, (long long)C, gt_dtype_name(dt));
  check(GT_F32, what, aw1, aw2, cs);
  free(x), free(w), free(b), free(dy), free(y1), free(y2), free(m1), free(m2), free(r1);
  free(r2), free(dx1), free(dx2), free(dw1), free(db1), free(dw2), free(db2), free(a1);
  free(a2), free(c1), free(aw1), free(ab1), free(aw2), free(ab2), free(cw1), free(cb1);
}

static void test_gelu(gt_dtype dt, size_t n)
{
  void *x = dt_random(dt, n, 17, -12, 12, NULL); /* both saturated ends and the middle */
  void *dy = dt_random(dt, n, 18, -1, 1, NULL);
  void *y1 = dt_alloc(dt, n), *y2 = dt_alloc(dt, n);
  char what[64];
  CALL(fast, gelu_forward, dt, y1, x, n);
  CALL(ref, gelu_forward, dt, y2, x, n);
  snprintf(what, sizeof what, "gelu forward n=%zu [%s]", n, gt_dtype_name(dt));
  check_dt(dt, what, y1, y2, n);
  CALL(fast, gelu_backward, dt, y1, x, dy, n);
  CALL(ref, gelu_backward, dt, y2, x, dy, n);
  snprintf(what, sizeof what, "gelu backward n=%zu [%s]", n, gt_dtype_name(dt));
  check_dt(dt, what, y1, y2, n);
  void *a = dt_copy(dt, dy, n);
  CALL(fast, gelu_backward, dt, a, x, a, n);
  tap_ok(!memcmp(a, y1, n * dt_size(dt)), "gelu backward with din aliasing dout [%s]",
         gt_dtype_name(dt));
  free(x), free(dy), free(y1), free(y2), free(a);
}

// ---- the Llama block: RMSNorm, rotary positions, SwiGLU ------------------------------

/* scale: of the inputs; a small one (1e-3) puts mean(x^2) near eps, so that
 * an eps left out or added twice moves every output. */
static void test_rmsnorm(gt_dtype dt, int64_t N, int64_t C, float scale, float eps)
{
  const size_t nc = (size_t)N * C, cs = (size_t)C;
  void *x = dt_random(dt, nc, 110, -2 * scale, 3 * scale, NULL);
  void *w = dt_random(dt, cs, 111, 0.5f, 1.5f, NULL), *dy = dt_random(dt, nc, 112, -1, 1, NULL);
  void *y1 = dt_random(dt, nc, 113, 100, 200, NULL), *y2 = dt_alloc(dt, nc);
  float *r1 = tu_alloc((size_t)N), *r2 = tu_alloc((size_t)N);
  char tag[80], what[160];
  snprintf(tag, sizeof tag, "N=%lld C=%lld scale=%g eps=%g [%s]", (long long)N, (long long)C,
           scale, eps, gt_dtype_name(dt));
  CALL(fast, rmsnorm_forward, dt, y1, r1, x, w, eps, N, C);
  CALL(ref, rmsnorm_forward, dt, y2, r2, x, w, eps, N, C);
  snprintf(what, sizeof what, "rmsnorm forward %s", tag);
  check_dt(dt, what, y1, y2, nc);
  snprintf(what, sizeof what, "rmsnorm rstd (fp32) %s", tag);
  check(GT_F32, what, r1, r2, (size_t)N);
  /* backward, with the reference's rstd for both; din, dw "+=" onto random */
  void *dx1 = dt_random(dt, nc, 114, -1, 1, NULL), *dx2 = dt_copy(dt, dx1, nc);
  float *dw1 = tu_alloc(cs);
  tu_fill(dw1, cs, 115, -1, 1);
  float *dw2 = tu_copy(dw1, cs);
  CALL(fast, rmsnorm_backward, dt, dx1, dw1, dy, x, w, r2, N, C);
  CALL(ref, rmsnorm_backward, dt, dx2, dw2, dy, x, w, r2, N, C);
  snprintf(what, sizeof what, "rmsnorm backward din (+=) %s", tag);
  check_dt(dt, what, dx1, dx2, nc);
  snprintf(what, sizeof what, "rmsnorm backward dw (+=, fp32) %s", tag);
  check(GT_F32, what, dw1, dw2, cs);
  /* din aliasing dout (the residual gradient of a pre-norm block): the same
   * bits as din = a copy of dout on the fast backend, and against the
   * reference aliased */
  void *a1 = dt_copy(dt, dy, nc), *a2 = dt_copy(dt, dy, nc), *c1 = dt_copy(dt, dy, nc);
  float *aw1 = tu_alloc(cs), *aw2 = tu_alloc(cs), *cw1 = tu_alloc(cs);
  CALL(fast, rmsnorm_backward, dt, a1, aw1, a1, x, w, r2, N, C);
  CALL(ref, rmsnorm_backward, dt, a2, aw2, a2, x, w, r2, N, C);
  CALL(fast, rmsnorm_backward, dt, c1, cw1, dy, x, w, r2, N, C);
  tap_ok(!memcmp(a1, c1, nc * dt_size(dt)) && !memcmp(aw1, cw1, cs * 4),
         "rmsnorm backward with din aliasing dout %s: same bits as unaliased", tag);
  snprintf(what, sizeof what, "rmsnorm backward din aliasing dout %s", tag);
  check_dt(dt, what, a1, a2, nc);
  snprintf(what, sizeof what, "rmsnorm backward aliased dw (+=, fp32) %s", tag);
  check(GT_F32, what, aw1, aw2, cs);
  free(x), free(w), free(dy), free(y1), free(y2), free(r1), free(r2), free(dx1), free(dx2);
  free(dw1), free(dw2), free(a1), free(a2), free(c1), free(aw1), free(aw2), free(cw1);
}

/* cos, sin (max_pos, hs/2) of random angles (a rotation per entry; any
 * table will do for the ops, which take the caller's). */
static void rope_tables(int64_t max_pos, int64_t hs, uint64_t seed, float **cs, float **sn)
{
  const size_t n = (size_t)max_pos * (size_t)(hs / 2);
  float *a = tu_alloc(n);
  tu_fill(a, n, seed, -4, 4);
  *cs = tu_alloc(n);
  *sn = tu_alloc(n);
  for (size_t i = 0; i < n; i++) {
    (*cs)[i] = cosf(a[i]);
    (*sn)[i] = sinf(a[i]);
  }
  free(a);
}

/* Heads [nrot, S) of every token of (B*T, S, hs): the same bits in a and b. */
static bool rope_rest_same(gt_dtype dt, const void *a, const void *b, int64_t NT, int64_t S,
                           int64_t nrot, int64_t hs)
{
  const size_t es = dt_size(dt), row = (size_t)S * hs * es, skip = (size_t)nrot * hs * es;
  for (int64_t r = 0; r < NT; r++)
    if (memcmp((const char *)a + r * row + skip, (const char *)b + r * row + skip, row - skip))
      return false;
  return true;
}

static void test_rope(gt_dtype dt, int64_t B, int64_t T, int64_t S, int64_t nrot, int64_t hs,
                      int64_t pos0)
{
  const int64_t max_pos = pos0 + T + 3, h = hs / 2;
  const size_t n = (size_t)(B * T * S * hs);
  float *cs, *sn;
  rope_tables(max_pos, hs, 120 + (uint64_t)hs, &cs, &sn);
  void *x = dt_random(dt, n, 121, -2, 2, NULL), *dy = dt_random(dt, n, 122, -1, 1, NULL);
  void *y1 = dt_copy(dt, x, n), *y2 = dt_copy(dt, x, n);
  char tag[112], what[192];
  snprintf(tag, sizeof tag, "B=%lld T=%lld S=%lld nrot=%lld hs=%lld pos0=%lld [%s]",
           (long long)B, (long long)T, (long long)S, (long long)nrot, (long long)hs,
           (long long)pos0, gt_dtype_name(dt));
  CALL(fast, rope_forward, dt, y1, cs, sn, B, T, S, nrot, hs, pos0);
  CALL(ref, rope_forward, dt, y2, cs, sn, B, T, S, nrot, hs, pos0);
  snprintf(what, sizeof what, "rope forward (in place) %s", tag);
  check_dt(dt, what, y1, y2, n);
  tap_ok(rope_rest_same(dt, y1, x, B * T, S, nrot, hs) &&
             rope_rest_same(dt, y2, x, B * T, S, nrot, hs),
         "rope forward leaves heads [%lld, %lld) alone, bit for bit %s", (long long)nrot,
         (long long)S, tag);
  void *d1 = dt_copy(dt, dy, n), *d2 = dt_copy(dt, dy, n);
  CALL(fast, rope_backward, dt, d1, cs, sn, B, T, S, nrot, hs, pos0);
  CALL(ref, rope_backward, dt, d2, cs, sn, B, T, S, nrot, hs, pos0);
  snprintf(what, sizeof what, "rope backward (in place) %s", tag);
  check_dt(dt, what, d1, d2, n);
  tap_ok(rope_rest_same(dt, d1, dy, B * T, S, nrot, hs) &&
             rope_rest_same(dt, d2, dy, B * T, S, nrot, hs),
         "rope backward leaves heads [%lld, %lld) alone, bit for bit %s", (long long)nrot,
         (long long)S, tag);
  /* token t takes row pos0 + t: the same bits as pos0 = 0 on tables that
   * start at row pos0 */
  void *z = dt_copy(dt, x, n);
  CALL(fast, rope_forward, dt, z, cs + pos0 * h, sn + pos0 * h, B, T, S, nrot, hs, 0);
  tap_ok(!memcmp(z, y1, n * dt_size(dt)),
         "rope forward: token t takes the tables' row pos0 + t (same bits as shifted tables) %s",
         tag);
  /* the transpose undoes the rotation (fp32: to rounding) */
  if (dt == GT_F32) {
    CALL(fast, rope_backward, dt, z, cs + pos0 * h, sn + pos0 * h, B, T, S, nrot, hs, 0);
    const double e = tu_rel_err(z, x, n);
    tap_ok(e <= TU_TOL32, "rope backward after forward gives the input back %s (rel err %.2e)",
           tag, e);
  }
  free(cs), free(sn), free(x), free(dy), free(y1), free(y2), free(d1), free(d2), free(z);
}

static void test_swiglu(gt_dtype dt, int64_t N, int64_t F)
{
  const size_t nf = (size_t)N * F, nh = 2 * nf;
  void *h = dt_random(dt, nh, 130, -8, 8, NULL), *dy = dt_random(dt, nf, 131, -1, 1, NULL);
  void *o1 = dt_random(dt, nf, 132, 100, 200, NULL), *o2 = dt_alloc(dt, nf);
  char tag[64], what[128];
  snprintf(tag, sizeof tag, "N=%lld F=%lld [%s]", (long long)N, (long long)F, gt_dtype_name(dt));
  CALL(fast, swiglu_forward, dt, o1, h, N, F);
  CALL(ref, swiglu_forward, dt, o2, h, N, F);
  snprintf(what, sizeof what, "swiglu forward %s", tag);
  check_dt(dt, what, o1, o2, nf);
  void *g1 = dt_random(dt, nh, 133, 100, 200, NULL), *g2 = dt_alloc(dt, nh); /* "=" */
  CALL(fast, swiglu_backward, dt, g1, dy, h, N, F);
  CALL(ref, swiglu_backward, dt, g2, dy, h, N, F);
  snprintf(what, sizeof what, "swiglu backward dh (=) %s", tag);
  check_dt(dt, what, g1, g2, nh);
  /* dh aliasing h: the same bits as unaliased */
  void *a = dt_copy(dt, h, nh);
  CALL(fast, swiglu_backward, dt, a, dy, a, N, F);
  tap_ok(!memcmp(a, g1, nh * dt_size(dt)), "swiglu backward with dh aliasing h %s: same bits",
         tag);
  free(h), free(dy), free(o1), free(o2), free(g1), free(g2), free(a);
}

// ---- embeddings and loss ---------------------------------------------------------------

static void test_embedding(gt_dtype dt, int64_t B, int64_t T, int64_t C, int64_t V)
{
  const size_t N = (size_t)(B * T), n = N * (size_t)C, cs = (size_t)C;
  int32_t *tok = malloc(sizeof(int32_t) * N);
  tu_fill_int(tok, N, 22, (int32_t)(V / 3)); /* repeats on purpose */
  tok[N - 1] = (int32_t)(V - 1);
  void *wte = dt_random(dt, (size_t)V * cs, 23, -1, 1, NULL);
  void *wpe = dt_random(dt, (size_t)T * cs, 24, -1, 1, NULL);
  void *dy = dt_random(dt, n, 25, -1, 1, NULL);
  void *o1 = dt_random(dt, n, 26, 100, 200, NULL), *o2 = dt_alloc(dt, n);
  char what[96];
  CALL(fast, embedding_forward, dt, o1, tok, wte, wpe, B, T, C, 0, V);
  CALL(ref, embedding_forward, dt, o2, tok, wte, wpe, B, T, C, 0, V);
  snprintf(what, sizeof what, "embedding forward B=%lld T=%lld C=%lld [%s]", (long long)B,
           (long long)T, (long long)C, gt_dtype_name(dt));
  check_dt(dt, what, o1, o2, n);
  /* a shard [v0, v0 + nv) without wpe: its rows exactly, exact zeros elsewhere */
  const int64_t v0 = 2, nv = V / 3 - 3;
  CALL(fast, embedding_forward, dt, o1, tok, (const char *)wte + (size_t)v0 * cs * dt_size(dt),
       NULL, B, T, C, v0, nv);
  bool exact = true;
  for (size_t i = 0; i < N; i++) {
    const bool in = tok[i] >= v0 && tok[i] < v0 + nv;
    const char *want = (const char *)wte + (size_t)tok[i] * cs * dt_size(dt);
    for (size_t c = 0; c < cs; c++)
      exact = exact && (in ? !memcmp((char *)o1 + (i * cs + c) * dt_size(dt),
                                     want + c * dt_size(dt), dt_size(dt))
                           : dec(dt, o1, i * cs + c) == 0.0f);
  }
  tap_ok(exact, "embedding forward of a shard [%s]: its rows bit for bit, zeros elsewhere",
         gt_dtype_name(dt));
  float *e1 = tu_alloc((size_t)V * cs), *p1 = tu_alloc((size_t)T * cs);
  tu_fill(e1, (size_t)V * cs, 27, -1, 1);
  tu_fill(p1, (size_t)T * cs, 28, -1, 1);
  float *e2 = tu_copy(e1, (size_t)V * cs), *p2 = tu_copy(p1, (size_t)T * cs);
  CALL(fast, embedding_backward, dt, e1, p1, dy, tok, B, T, C, 0, V);
  CALL(ref, embedding_backward, dt, e2, p2, dy, tok, B, T, C, 0, V);
  snprintf(what, sizeof what, "embedding backward dwte (+=, fp32, repeated tokens) [%s]",
           gt_dtype_name(dt));
  check(GT_F32, what, e1, e2, (size_t)V * cs);
  snprintf(what, sizeof what, "embedding backward dwpe (+=, fp32) [%s]", gt_dtype_name(dt));
  check(GT_F32, what, p1, p2, (size_t)T * cs);
  free(tok), free(wte), free(wpe), free(dy), free(o1), free(o2), free(e1), free(e2);
  free(p1), free(p2);
}

/* Vocabulary split over P shards of w = ceil(V/P) rows (the last one
 * shorter), fp32, against loops in this test: the sum of the shards' forward
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
  tu_fill_int(tok, (size_t)N, 32, tok_upper);
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
    CALL(be, embedding_forward, GT_F32, out, tok, shard, r == 0 ? wpe : NULL, B, T, C, v0, nv);
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
    CALL(be, embedding_backward, GT_F32, buf + cs, r == 0 ? dwpe : NULL, dy, tok, B, T, C, v0,
         nv);
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
  snprintf(what, sizeof what, "embedding split [%s] V=%d P=%d tokens<%d [fp32]: forward sum",
           be->name, V, P, tok_upper);
  check(GT_F32, what, sum, want, n);
  tap_ok(zeros_ok, "embedding split [%s] tokens outside a shard give exact zeros (no wpe)",
         be->name);
  snprintf(what, sizeof what, "embedding split [%s] V=%d P=%d [fp32]: dwte rows (+=)", be->name,
           V, P);
  check(GT_F32, what, got_dwte, want_dwte, (size_t)V * C);
  snprintf(what, sizeof what, "embedding split [%s] V=%d P=%d [fp32]: dwpe on shard 0 (+=)",
           be->name, V, P);
  check(GT_F32, what, dwpe, want_dwpe, (size_t)T * C);
  tap_ok(untouched_ok && guards_ok,
         "embedding split [%s] rows without tokens and memory around shards untouched",
         be->name);
  free(tok), free(wte), free(wpe), free(dy), free(dwte0), free(dwpe0), free(want);
  free(want_dwte), free(want_dwpe), free(sum), free(out), free(dwpe), free(got_dwte);
}

/* Fill the padding columns nv..ld-1 of (N,ld) with values that would show
 * if a kernel read them (they would dominate the max and the sum). */
static void pad_garbage(gt_dtype dt, void *l, int64_t N, int64_t nv, int64_t ld)
{
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = nv; j < ld; j++)
      enc(dt, l, (size_t)(i * ld + j), (i + j) % 2 ? 60.0f : -60.0f);
}

static bool pad_zero(gt_dtype dt, const void *l, int64_t N, int64_t nv, int64_t ld)
{
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = nv; j < ld; j++)
      if (dec(dt, l, (size_t)(i * ld + j)) != 0.0f)
        return false;
  return true;
}

/* One shard's loss: xent_partial then xent_finish with P = 1. */
static void xent_one(gt_backend *be, gt_dtype dt, float *losses, void *logits, float *stats,
                     const int32_t *y, int64_t N, int64_t V, int64_t ld, float scale)
{
  CALL(be, xent_partial, dt, stats, logits, y, N, V, ld, 0);
  CALL(be, xent_finish, dt, losses, logits, stats, 1, y, N, V, ld, 0, scale);
}

static void test_xent(gt_dtype dt, int64_t N, int64_t V, int64_t ld)
{
  const size_t n = (size_t)(N * ld), es = dt_size(dt);
  void *l1 = dt_random(dt, n, 26, -8, 8, NULL);
  pad_garbage(dt, l1, N, V, ld);
  void *l2 = dt_copy(dt, l1, n), *l0 = dt_copy(dt, l1, n);
  float *s1 = tu_alloc((size_t)N), *s2 = tu_alloc((size_t)N);
  float *st1 = tu_alloc(3 * (size_t)N), *st2 = tu_alloc(3 * (size_t)N);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)N);
  tu_fill_int(y, (size_t)N, 27, (int32_t)V);
  y[0] = 0;
  y[N - 1] = (int32_t)(V - 1);
  char what[112];
  CALL(fast, xent_partial, dt, st1, l1, y, N, V, ld, 0);
  CALL(ref, xent_partial, dt, st2, l2, y, N, V, ld, 0);
  snprintf(what, sizeof what, "xent_partial stats (fp32) N=%lld V=%lld ld=%lld [%s]",
           (long long)N, (long long)V, (long long)ld, gt_dtype_name(dt));
  check(GT_F32, what, st1, st2, 3 * (size_t)N);
  xent_one(fast, dt, s1, l1, st1, y, N, V, ld, 0.0f);
  xent_one(ref, dt, s2, l2, st2, y, N, V, ld, 0.0f);
  snprintf(what, sizeof what, "xent losses P=1 N=%lld V=%lld ld=%lld (no gradient) [%s]",
           (long long)N, (long long)V, (long long)ld, gt_dtype_name(dt));
  check(GT_F32, what, s1, s2, (size_t)N);
  tap_ok(!memcmp(l1, l0, n * es), "xent without gradient leaves the logits alone [%s]",
         gt_dtype_name(dt));
  xent_one(fast, dt, s1, l1, st1, y, N, V, ld, 0.25f);
  xent_one(ref, dt, s2, l2, st2, y, N, V, ld, 0.25f);
  snprintf(what, sizeof what, "xent losses P=1 N=%lld V=%lld ld=%lld (with gradient) [%s]",
           (long long)N, (long long)V, (long long)ld, gt_dtype_name(dt));
  check(GT_F32, what, s1, s2, (size_t)N);
  snprintf(what, sizeof what, "xent dlogits P=1 N=%lld V=%lld ld=%lld [%s]", (long long)N,
           (long long)V, (long long)ld, gt_dtype_name(dt));
  check_dt(dt, what, l1, l2, n);
  tap_ok(pad_zero(dt, l1, N, V, ld) && pad_zero(dt, l2, N, V, ld),
         "xent dlogits padding exactly 0 (ld - V = %lld) [%s]", (long long)(ld - V),
         gt_dtype_name(dt));
  free(l1), free(l2), free(l0), free(s1), free(s2), free(st1), free(st2), free(y);
}

/* The vocabulary split over P shards of w = ceil(V/P) columns with row
 * stride ld >= w (the last shard has fewer real columns): every shard's
 * losses and the concatenated gradient equal the unsplit cpu-ref result. */
static void test_xent_split(gt_backend *be, gt_dtype dt, int N, int V, int P, int ld)
{
  const int w = (V + P - 1) / P;
  const float gs = 0.5f;
  const size_t es = dt_size(dt);
  float *want_loss = tu_alloc((size_t)N), *loss = tu_alloc((size_t)N);
  float *st = tu_alloc(3 * (size_t)N * P);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)N);
  void *full = dt_random(dt, (size_t)N * V, 40, -6, 6, NULL);
  tu_fill_int(y, (size_t)N, 41, V);
  /* targets on the first and last column of every shard, the rest random */
  for (int r = 0; r < P && r * w < V && 2 * r + 1 < N; r++) {
    y[2 * r] = r * w;
    y[2 * r + 1] = (r + 1) * w < V ? (r + 1) * w - 1 : V - 1;
  }
  void *want_grad = dt_copy(dt, full, (size_t)N * V);
  xent_one(ref, dt, want_loss, want_grad, st, y, N, V, V, gs);
  void **shard = malloc(sizeof(void *) * (size_t)P);
  for (int r = 0; r < P; r++) {
    const int v0 = r * w, nv = V - v0 < w ? V - v0 : w;
    if (nv < 0 || ld < nv)
      abort();
    shard[r] = dt_alloc(dt, (size_t)N * ld);
    for (int i = 0; i < N; i++)
      memcpy((char *)shard[r] + (size_t)i * ld * es, (char *)full + ((size_t)i * V + v0) * es,
             es * (size_t)nv);
    pad_garbage(dt, shard[r], N, nv, ld);
    CALL(be, xent_partial, dt, st + 3 * (size_t)N * r, shard[r], y, N, nv, ld, v0);
  }
  void *grad = dt_alloc(dt, (size_t)N * V);
  float *loss0 = tu_alloc((size_t)N);
  double worst = 0;
  bool same = true, pad_ok = true;
  for (int r = 0; r < P; r++) {
    const int v0 = r * w, nv = V - v0 < w ? V - v0 : w;
    CALL(be, xent_finish, dt, loss, shard[r], st, P, y, N, nv, ld, v0, gs);
    for (int i = 0; i < N; i++) {
      worst = fmax(worst, fabs((double)loss[i] - want_loss[i]) / fabs(want_loss[i]));
      memcpy((char *)grad + ((size_t)i * V + v0) * es, (char *)shard[r] + (size_t)i * ld * es,
             es * (size_t)nv);
    }
    if (r == 0)
      memcpy(loss0, loss, sizeof(float) * (size_t)N);
    same = same && !memcmp(loss0, loss, sizeof(float) * (size_t)N);
    pad_ok = pad_ok && pad_zero(dt, shard[r], N, nv, ld);
  }
  tap_ok(worst <= 1e-6, "xent split [%s] N=%d V=%d P=%d ld=%d [%s]: losses (max rel err %.2e)",
         be->name, N, V, P, ld, gt_dtype_name(dt), worst);
  tap_ok(same, "xent split [%s] [%s]: identical losses on every shard", be->name,
         gt_dtype_name(dt));
  char what[112];
  snprintf(what, sizeof what, "xent split [%s] N=%d V=%d P=%d ld=%d [%s]: dlogits", be->name, N,
           V, P, ld, gt_dtype_name(dt));
  check_dt(dt, what, grad, want_grad, (size_t)N * V);
  tap_ok(pad_ok, "xent split [%s] [%s]: padding columns exactly 0", be->name,
         gt_dtype_name(dt));
  for (int r = 0; r < P; r++)
    free(shard[r]);
  free(shard), free(full), free(want_loss), free(st), free(loss), free(y), free(want_grad);
  free(grad), free(loss0);
}

// ---- optimizer and reductions -----------------------------------------------------------

/* compute_t < 0: no compute copy. */
static void test_adamw(size_t n, int compute_t)
{
  const char *cname = compute_t < 0 ? "none" : gt_dtype_name((gt_dtype)compute_t);
  const gt_dtype ct = compute_t < 0 ? GT_F32 : (gt_dtype)compute_t;
  float *p1 = tu_alloc(n), *g = tu_alloc(n), *m1 = tu_alloc(n), *v1 = tu_alloc(n);
  tu_fill(p1, n, 28, -1, 1);
  tu_fill(g, n, 29, -0.1f, 0.1f);
  tu_fill(m1, n, 30, -0.01f, 0.01f);
  tu_fill(v1, n, 31, 0, 0.001f);
  float *p2 = tu_copy(p1, n), *m2 = tu_copy(m1, n), *v2 = tu_copy(v1, n);
  void *c1 = compute_t < 0 ? NULL : dt_alloc(ct, n), *c2 = compute_t < 0 ? NULL : dt_alloc(ct, n);
  CALL(fast, adamw, p1, g, m1, v1, c1, ct, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.1426f,
       0.8f);
  CALL(ref, adamw, p2, g, m2, v2, c2, ct, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.1426f,
       0.8f);
  char what[80];
  snprintf(what, sizeof what, "adamw parameters (compute copy %s)", cname);
  check(GT_F32, what, p1, p2, n);
  snprintf(what, sizeof what, "adamw first moment (compute copy %s)", cname);
  check(GT_F32, what, m1, m2, n);
  snprintf(what, sizeof what, "adamw second moment (compute copy %s)", cname);
  check(GT_F32, what, v1, v2, n);
  if (compute_t >= 0) {
    bool ok1 = true, ok2 = true;
    void *want = dt_alloc(ct, n);
    for (size_t i = 0; i < n; i++)
      enc(ct, want, i, p1[i]);
    ok1 = !memcmp(c1, want, n * dt_size(ct));
    for (size_t i = 0; i < n; i++)
      enc(ct, want, i, p2[i]);
    ok2 = !memcmp(c2, want, n * dt_size(ct));
    tap_ok(ok1 && ok2, "adamw compute copy (%s) is the new master rounded, bit for bit (%s, %s)",
           cname, ok1 ? "cpu ok" : "cpu WRONG", ok2 ? "cpu-ref ok" : "cpu-ref WRONG");
    free(want);
  }
  free(p1), free(g), free(m1), free(v1), free(p2), free(m2), free(v2), free(c1), free(c2);
}

static void test_sums(size_t n)
{
  float *x = tu_alloc(n + 1);
  tu_fill(x, n, 42, -0.5f, 1.0f);
  float *shifted = tu_alloc(n + 1);
  memcpy(shifted + 1, x, n * sizeof(float)); /* the same values at another address */
  const double acc0 = 0.375;
  for (int sq = 0; sq < 2; sq++) {
    const char *name = sq ? "sumsq_add" : "sum_add";
    double a1 = acc0, a2 = acc0, a3 = acc0, a4 = acc0;
    if (sq) {
      CALL(fast, sumsq_add, &a1, x, n);
      CALL(ref, sumsq_add, &a2, x, n);
      CALL(fast, sumsq_add, &a3, x, n);
      CALL(fast, sumsq_add, &a4, shifted + 1, n);
    } else {
      CALL(fast, sum_add, &a1, x, n);
      CALL(ref, sum_add, &a2, x, n);
      CALL(fast, sum_add, &a3, x, n);
      CALL(fast, sum_add, &a4, shifted + 1, n);
    }
    double want = acc0;
    for (size_t i = 0; i < n; i++)
      want += sq ? (double)x[i] * x[i] : (double)x[i];
    tap_ok(fabs(a1 - a2) <= 1e-12 * fabs(a2) && fabs(a2 - want) <= 1e-12 * fabs(want),
           "%s n=%zu accumulates onto *acc (%.15g vs %.15g)", name, n, a1, a2);
    tap_ok(!memcmp(&a1, &a3, sizeof a1) && !memcmp(&a1, &a4, sizeof a1),
           "%s n=%zu repeats bit for bit (also on a copy at another address)", name, n);
    double b = acc0;
    if (sq)
      CALL(fast, sumsq_add, &b, x, 0);
    else
      CALL(fast, sum_add, &b, x, 0);
    tap_ok(b == acc0, "%s of nothing leaves *acc alone", name);
  }
  free(x), free(shifted);
}

static void test_axpby(size_t n)
{
  float *x = tu_alloc(n + 1), *y1 = tu_alloc(n + 1), *y2 = tu_alloc(n + 1);
  tu_fill(x, n, 7, -1.0f, 1.0f);
  tu_fill(y1, n, 8, -1.0f, 1.0f);
  memcpy(y2, y1, n * sizeof(float));
  float *want = tu_alloc(n + 1);
  for (size_t i = 0; i < n; i++)
    want[i] = 0.25f * x[i] + -1.5f * y1[i];
  CALL(fast, axpby, y1, 0.25f, x, -1.5f, n);
  CALL(ref, axpby, y2, 0.25f, x, -1.5f, n);
  tap_ok(!memcmp(y1, want, n * sizeof(float)) && !memcmp(y2, want, n * sizeof(float)),
         "axpby n=%zu: y = a x + b y in fp32, cpu and cpu-ref bit for bit", n);
  memcpy(want, x, n * sizeof(float));
  CALL(fast, axpby, x, 2.0f, x, 1.0f, n); /* in place: 2x + x, rounded once */
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += x[i] != 3.0f * want[i];
  tap_ok(bad == 0, "axpby n=%zu with x = y (%d wrong)", n, bad);
  free(x), free(y1), free(y2), free(want);
}

// ---- casts ---------------------------------------------------------------------------------

static bool is_nan16(gt_dtype t, uint16_t h)
{
  return (h & 0x7fff) > (t == GT_BF16 ? 0x7f80 : 0x7c00);
}

/* Cast src (n of st) to dt on both backends; true when both give `want`
 * bit for bit (NaN: any NaN). */
static bool cast_both(gt_dtype dt, gt_dtype st, const void *src, const void *want, size_t n,
                      size_t *bad)
{
  bool ok = true;
  gt_backend *bes[2] = {fast, ref};
  for (int k = 0; k < 2; k++) {
    void *out = dt_alloc(dt, n);
    CALL(bes[k], cast, dt, out, st, src, n);
    for (size_t i = 0; i < n; i++) {
      bool same;
      if (dt == GT_F32) {
        const float a = ((float *)out)[i], b = ((const float *)want)[i];
        same = isnan(b) ? isnan(a) : !memcmp(&a, &b, 4);
      } else {
        const uint16_t a = ((uint16_t *)out)[i], b = ((const uint16_t *)want)[i];
        same = is_nan16(dt, b) ? is_nan16(dt, a) : a == b;
      }
      if (!same && ok && bad)
        *bad = i;
      ok = ok && same;
    }
    free(out);
  }
  return ok;
}

static void test_cast(void)
{
  /* special values, overflow and ties, with hand-written expected patterns (tu_cast_cases) */
  const tu_cast_case *sp;
  const size_t ns = tu_cast_cases(&sp);
  float *x = tu_alloc(ns);
  uint16_t *wb = malloc(ns * 2), *wh = malloc(ns * 2);
  bool enc_ok = true;
  for (size_t i = 0; i < ns; i++) {
    x[i] = sp[i].x;
    wb[i] = sp[i].bf16;
    wh[i] = sp[i].f16;
    enc_ok = enc_ok &&
             (isnan(sp[i].x) || (enc_bf16(sp[i].x) == wb[i] && enc_f16(sp[i].x) == wh[i]));
  }
  if (!tap_ok(enc_ok, "cast: this test's own conversions agree with the table"))
    for (size_t i = 0; i < ns; i++)
      tap_diag("%a: bf16 %04x (table %04x), fp16 %04x (table %04x)", sp[i].x, enc_bf16(x[i]),
               wb[i], enc_f16(x[i]), wh[i]);
  size_t bad = 0;
  if (!tap_ok(cast_both(GT_BF16, GT_F32, x, wb, ns, &bad),
              "cast fp32 -> bf16: zeros, NaN stays NaN, inf, overflow to inf, ties to even"))
    tap_diag("first wrong: %a", x[bad]);
  if (!tap_ok(cast_both(GT_F16, GT_F32, x, wh, ns, &bad),
              "cast fp32 -> fp16: zeros, NaN stays NaN, inf, 65520 overflows, ties to even, "
              "subnormals"))
    tap_diag("first wrong: %a", x[bad]);
  free(x), free(wb), free(wh);

  /* every 16-bit pattern: to fp32 exactly, back unchanged, and across */
  const size_t np = 65536;
  uint16_t *pat = malloc(np * 2), *want16 = malloc(np * 2);
  float *want32 = tu_alloc(np);
  for (size_t i = 0; i < np; i++)
    pat[i] = (uint16_t)i;
  const gt_dtype h[2] = {GT_BF16, GT_F16};
  for (int k = 0; k < 2; k++) {
    const gt_dtype t = h[k], o = h[1 - k];
    for (size_t i = 0; i < np; i++)
      want32[i] = dec(t, pat, i);
    tap_ok(cast_both(GT_F32, t, pat, want32, np, NULL),
           "cast %s -> fp32: all 65536 patterns exact (NaN stays NaN)", gt_dtype_name(t));
    tap_ok(cast_both(t, GT_F32, want32, pat, np, NULL),
           "cast fp32 -> %s: all 65536 values come back unchanged (round trip)",
           gt_dtype_name(t));
    for (size_t i = 0; i < np; i++)
      want16[i] = o == GT_BF16 ? enc_bf16(want32[i]) : enc_f16(want32[i]);
    tap_ok(cast_both(o, t, pat, want16, np, NULL),
           "cast %s -> %s: all 65536 patterns, rounded once", gt_dtype_name(t),
           gt_dtype_name(o));
    tap_ok(cast_both(t, t, pat, pat, np, NULL), "cast %s -> %s: the identity",
           gt_dtype_name(t), gt_dtype_name(t));
  }
  /* random fp32 over a wide range of exponents (both formats' subnormals,
   * fp16 overflow), in parallel blocks */
  const size_t nr = 100003;
  float *r = tu_alloc(nr), *u = tu_alloc(nr);
  tu_fill(u, nr, 43, -1, 1);
  tu_fill(r, nr, 44, -40, 20);
  for (size_t i = 0; i < nr; i++)
    r[i] = (u[i] < 0 ? -1.0f : 1.0f) * (1.0f + fabsf(u[i])) * exp2f(roundf(r[i]));
  uint16_t *rb = malloc(nr * 2), *rh = malloc(nr * 2);
  for (size_t i = 0; i < nr; i++) {
    rb[i] = enc_bf16(r[i]);
    rh[i] = enc_f16(r[i]);
  }
  if (!tap_ok(cast_both(GT_BF16, GT_F32, r, rb, nr, &bad),
              "cast fp32 -> bf16: %zu random values of exponents -40..20", nr))
    tap_diag("first wrong: %a", r[bad]);
  if (!tap_ok(cast_both(GT_F16, GT_F32, r, rh, nr, &bad),
              "cast fp32 -> fp16: %zu random values of exponents -40..20", nr))
    tap_diag("first wrong: %a", r[bad]);
  tap_ok(cast_both(GT_F32, GT_F32, r, r, nr, NULL), "cast fp32 -> fp32: the identity");
  free(pat), free(want16), free(want32), free(r), free(u), free(rb), free(rh);
}

/* A compute type that is not a float type is an error (here or at sync);
 * on a backend of its own, since a queued op's error stays with it. */
static void test_bad_type(void)
{
  gt_backend *be = NULL;
  if (gt_backend_create("cpu", 1, &be) != GT_SUCCESS) {
    tap_ok(false, "bad compute type: cannot create a backend: %s", gt_error_message());
    return;
  }
  float x[4] = {1, 2, 3, 4}, y[4];
  int status = be->ops->gelu_forward(be, GT_I32, y, x, 4);
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  tap_ok(status == GT_ERR_INTERNAL, "gelu on int32 is an internal error (%s)",
         gt_error_message());
  gt_error_clear();
  gt_backend_destroy(&be);
  gt_error_clear();
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  if (gt_backend_create("cpu", 2, &fast) || gt_backend_create("cpu-ref", 1, &ref))
    return tap_bail("cannot create the backends: %s", gt_error_message());
  tap_diag("fast backend: %s", fast->name);
  for (int k = 0; k < 3; k++) {
    const gt_dtype dt = all_dt[k];
    test_linear(dt, 37, 24, 40, true);
    test_linear(dt, 29, 300, 520, true); /* several column blocks */
    test_linear(dt, 8, 16, 24, false);
    test_linear(dt, 1, 7, 3, true);
    test_linear(dt, 3, 0, 5, true); /* C = 0: out = bias, dw unchanged */
    test_layernorm(dt, 33, 40);
    test_layernorm(dt, 9, 600);
    test_layernorm(dt, 5, 13);
    test_gelu(dt, 1001);
    test_gelu(dt, 20011); /* several parallel spans */
    test_rmsnorm(dt, 33, 40, 1.0f, 1e-5f);
    test_rmsnorm(dt, 9, 600, 1.0f, 1e-6f); /* several column blocks */
    test_rmsnorm(dt, 5, 13, 1e-3f, 1e-5f); /* mean(x^2) near eps */
    test_rope(dt, 2, 5, 6, 4, 2, 3);       /* hs = 2: one pair */
    test_rope(dt, 2, 7, 3, 2, 64, 0);      /* the layout of (B,T,3,H,hs), H = 1 */
    test_rope(dt, 1, 3, 5, 3, 18, 11);     /* hs/2 odd, GQA-like S = 1 + 2*2 */
    test_rope(dt, 3, 17, 10, 6, 128, 1);
    test_swiglu(dt, 7, 13);                /* F odd */
    test_swiglu(dt, 33, 1000);
    test_swiglu(dt, 2, 9001);              /* rows of more than one span */
    test_embedding(dt, 3, 11, 300, 37);
    test_embedding(dt, 2, 5, 24, 40);
    test_xent(dt, 19, 67, 67);
    test_xent(dt, 7, 61, 64);
    test_xent(dt, 33, 1000, 1024);
  }
  gt_backend *both[2] = {ref, fast};
  for (int k = 0; k < 2; k++) {
    test_embedding_split(both[k], 3, 11, 300, 37, 3, 37);
    test_embedding_split(both[k], 2, 7, 24, 10, 4, 3); /* tokens in shard 0 only */
    for (int d = 0; d < 3; d++) {
      test_xent_split(both[k], all_dt[d], 19, 67, 3, 23); /* padding on the last shard only */
      test_xent_split(both[k], all_dt[d], 13, 61, 2, 32); /* padding on every shard */
      test_xent_split(both[k], all_dt[d], 9, 10, 4, 3);   /* last shard: 1 real column */
      test_xent_split(both[k], all_dt[d], 8, 9, 4, 4);    /* last shard: no real column */
      test_xent_split(both[k], all_dt[d], 6, 1000, 3, 336);
    }
  }
  test_adamw(100003, -1);
  test_adamw(100003, GT_F32);
  test_adamw(100003, GT_BF16);
  test_adamw(20011, GT_F16);
  test_sums(100003);
  test_sums(37);
  test_axpby(100003);
  test_axpby(5);
  test_cast();
  test_bad_type();
  tap_ok(call_failures == 0, "every kernel call and sync returned GT_SUCCESS (%d did not)",
         call_failures);
  gt_backend_destroy(&fast);
  gt_backend_destroy(&ref);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
