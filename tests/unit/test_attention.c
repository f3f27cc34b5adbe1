/*
 * test_attention.c - causal attention under the flash-attention contract of
 * backend.h: the fast cpu backend against the cpu-ref backend in fp32, bf16
 * and fp16, forward (out and lse) and backward (dqkv), on shapes with T = 1,
 * T and hs not multiples of 16, hs past one 64-wide column block and T past
 * one 64-row query block of the fast kernel; lse of both against a double
 * computation written out here; the backward of both backends against
 * central finite differences; the fast backend's determinism over runs and
 * thread counts. Both backends get the same inputs, already representable in
 * the compute type; every "=" output is filled with NaN before the call.
 * Decoding (attention_decode: the last row of one sequence over its rows)
 * of every prefix of a sequence, both backends, against the reference
 * forward's rows, with the tolerances of out below. Grouped-query shapes
 * (fewer key/value heads than query heads, down to one) in each part.
 *
 * Tolerances:
 *   out, dqkv in fp32: norm-wise relative error ||fast - ref|| / ||ref||
 *   <= 2e-6: fp32 sums in another order (and a polynomial exp, 1 ulp)
 *   against double sums; measured <= 5.4e-7 here (the T = 1 forward is a
 *   copy of v and matches exactly).
 *   out, dqkv in bf16 / fp16: both backends compute the same value (fp32
 *   resp. double) from the same inputs and round it once to the type, so an
 *   element differs only where the two unrounded values straddle a rounding
 *   boundary, by one ulp of the type (the argument of test_kernels.c):
 *   - worst element |fast - ref| <= 1 ulp(ref) + 1e-5 max|ref| (the second
 *     term: the fp32 error before the rounding, for elements far below the
 *     largest, where an ulp is smaller than that error);
 *   - at most 2 + n/32 elements differ by more than that slack (a straddle
 *     needs a ~1e-7 relative error to cross a boundary 4e-3 resp. 5e-4
 *     wide; a rounding at another point, e.g. P or dS rounded to the type
 *     before a product, moves most elements);
 *   - norm-wise relative error <= u/8 for n >= 256 (u = 2^-8 bf16, 2^-11
 *     fp16: the unit roundoff), <= u below, where one legitimate one-ulp
 *     difference may carry the whole norm.
 *   lse (fp32 in every type): |lse - lse_double| <= 2e-6 max(1, |lse|),
 *   lse_double computed here in double from the decoded inputs. The fp32
 *   rounding of lse is 6e-8 of it; the fast backend's fp32 scores (dot
 *   products of up to 72 terms, each below 4 in size) and fp32 sum of the
 *   exponentials add a few 1e-7: measured <= 2.1e-7 (fast), 6e-8 (ref).
 *   A wrong lse (a term missing from the sum, the scale missing) is off by
 *   1e-3 or more.
 *   Finite differences (fp32, as test_gradcheck.c): L = sum(out * r) by the
 *   cpu-ref forward, entries of q, k and v perturbed by +-1e-2, the
 *   difference divided by the perturbation actually applied; per part
 *   ||fd - analytic|| / max(||fd||, 1e-4) over the samples <= 2e-3 (the
 *   h^2 truncation is ~1e-5, the fp32 rounding of out over 2h ~5e-5;
 *   measured <= 9e-5).
 *   Determinism: bitwise equality, no tolerance.
 *
 * Device memory is reached only through upload and download, each waited
 * for, so the test holds under GT_CPU_MODE=async and guard.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>

#include "../compare.h"
#include "../test_util.h"
#include "gridtrain/backend.h"

#define LSE_TOL 2e-6
#define FD_H 1e-2
#define FD_SAMPLES 16 /* per part (q, k, v) */
#define FD_TOL 2e-3

static gt_backend *fast, *ref;
static const gt_dtype all_dt[3] = {GT_F32, GT_BF16, GT_F16};

typedef tu_attn_shape shape; /* batch, tokens, heads, head size */

// ---- the 16-bit formats, independently of the backends ---------------------------------

static size_t dt_size(gt_dtype t) { return t == GT_F32 ? 4 : 2; }

static float dec(gt_dtype t, const void *p, size_t i)
{
  const uint16_t h = t == GT_F32 ? 0 : ((const uint16_t *)p)[i];
  switch (t) {
  case GT_BF16: {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
  }
  case GT_F16: {
    _Float16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
  }
  default: return ((const float *)p)[i];
  }
}

/* x rounded to nearest even (finite inputs only: the test's values). */
static void enc(gt_dtype t, void *p, size_t i, float x)
{
  switch (t) {
  case GT_BF16: {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    break;
  }
  case GT_F16: {
    const _Float16 v = (_Float16)x;
    memcpy((uint16_t *)p + i, &v, sizeof v);
    break;
  }
  default: ((float *)p)[i] = x; break;
  }
}

/* n random values of t in [lo, hi), and their decoded values in *x. */
static void *dt_random(gt_dtype t, size_t n, uint64_t seed, float lo, float hi, float **x)
{
  float *v = tu_alloc(n);
  tu_fill(v, n, seed, lo, hi);
  void *p = calloc(n ? n : 1, dt_size(t));
  if (!p)
    abort();
  for (size_t i = 0; i < n; i++) {
    enc(t, p, i, v[i]);
    v[i] = dec(t, p, i);
  }
  *x = v;
  return p;
}

static float *dt_read(gt_dtype t, const void *p, size_t n)
{
  float *x = tu_alloc(n);
  for (size_t i = 0; i < n; i++)
    x[i] = dec(t, p, i);
  return x;
}

// ---- device buffers and calls -----------------------------------------------------------

/* A device buffer of `bytes` holding host (NULL: all bytes 0xff, NaN in
 * every type, so that an element an "=" output leaves unwritten shows). */
static void *dev_put(gt_backend *be, const void *host, size_t bytes)
{
  void *d = NULL, *fill = NULL;
  if (!host) {
    fill = malloc(bytes ? bytes : 1);
    if (!fill)
      abort();
    memset(fill, 0xff, bytes);
    host = fill;
  }
  if (be->ops->alloc(be, bytes ? bytes : 1, &d) != GT_SUCCESS ||
      tu_upload(be, d, host, bytes) != GT_SUCCESS)
    abort();
  free(fill);
  return d;
}

static void dev_get(gt_backend *be, void *host, const void *dev, size_t bytes)
{
  if (tu_download(be, host, dev, bytes) != GT_SUCCESS)
    abort();
}

static void dev_free(gt_backend *be, void *d)
{
  if (be->ops->free(be, d) != GT_SUCCESS)
    abort();
}

/* out (dt) and lse (fp32) of be's forward for qkv (dt), host to host. */
static bool forward(gt_backend *be, gt_dtype dt, shape s, const void *qkv, void *out, float *lse)
{
  const size_t es = dt_size(dt);
  void *dq = dev_put(be, qkv, tu_attn_n_qkv(s) * es), *dout = dev_put(be, NULL, tu_attn_n_out(s) * es);
  float *dlse = dev_put(be, NULL, tu_attn_n_lse(s) * sizeof(float));
  bool ok = tu_call_ok(be,
                       be->ops->attention_forward(be, dt, dout, dlse, dq, s.B, s.T, s.H,
                                                  tu_attn_kv(s), s.hs),
                       "attention_forward");
  dev_get(be, out, dout, tu_attn_n_out(s) * es);
  dev_get(be, lse, dlse, tu_attn_n_lse(s) * sizeof(float));
  dev_free(be, dq), dev_free(be, dout), dev_free(be, dlse);
  return ok;
}

/* dqkv (dt) of be's backward, host to host. */
static bool backward(gt_backend *be, gt_dtype dt, shape s, const void *qkv, const void *out,
                     const float *lse, const void *dout, void *dqkv)
{
  const size_t es = dt_size(dt);
  void *dq = dev_put(be, qkv, tu_attn_n_qkv(s) * es), *dy = dev_put(be, dout, tu_attn_n_out(s) * es);
  void *dy_fwd = dev_put(be, out, tu_attn_n_out(s) * es);
  float *dlse = dev_put(be, lse, tu_attn_n_lse(s) * sizeof(float));
  void *dd = dev_put(be, NULL, tu_attn_n_qkv(s) * es);
  bool ok = tu_call_ok(be,
                    be->ops->attention_backward(be, dt, dd, dy, dq, dy_fwd, dlse, s.B, s.T, s.H,
                                                tu_attn_kv(s), s.hs),
                    "attention_backward");
  dev_get(be, dqkv, dd, tu_attn_n_qkv(s) * es);
  dev_free(be, dq), dev_free(be, dy), dev_free(be, dy_fwd), dev_free(be, dlse);
  dev_free(be, dd);
  return ok;
}

// ---- comparisons ------------------------------------------------------------------------

/* a (fast) against b (reference), n decoded values of type t (compare.h). */
static bool check(gt_dtype t, const char *what, const float *a, const float *b, size_t n)
{
  return tu_check_close(t, what, a, b, n, false);
}

/* lse of row t, query head h, batch b in double from the decoded qkv (key
 * head h / (H / Hkv), after the H query heads of a row). */
static double lse_double(const float *qkv, shape s, int64_t b, int64_t h, int64_t t)
{
  const int64_t R = tu_attn_row(s), kh = s.H + h / (s.H / tu_attn_kv(s));
  const float *q = qkv + (b * s.T + t) * R + h * s.hs;
  double m = -INFINITY, *sc = malloc(sizeof(double) * (size_t)(t + 1)), z = 0;
  if (!sc)
    abort();
  for (int64_t u = 0; u <= t; u++) {
    const float *k = qkv + (b * s.T + u) * R + kh * s.hs;
    double d = 0;
    for (int64_t i = 0; i < s.hs; i++)
      d += (double)q[i] * k[i];
    sc[u] = d / sqrt((double)s.hs);
    m = fmax(m, sc[u]);
  }
  for (int64_t u = 0; u <= t; u++)
    z += exp(sc[u] - m);
  free(sc);
  return m + log(z);
}

static bool check_lse(const char *what, const float *lse, const float *qkv, shape s)
{
  double worst = 0;
  int64_t at = 0;
  bool finite = true;
  for (int64_t b = 0; b < s.B; b++)
    for (int64_t h = 0; h < s.H; h++)
      for (int64_t t = 0; t < s.T; t++) {
        const int64_t i = (b * s.H + h) * s.T + t;
        const double want = lse_double(qkv, s, b, h, t);
        const double e = fabs(lse[i] - want) / fmax(1.0, fabs(want));
        finite = finite && isfinite(lse[i]);
        if (e > worst || !isfinite(lse[i])) {
          worst = isfinite(lse[i]) ? e : INFINITY;
          at = i;
        }
      }
  const bool ok = finite && worst <= LSE_TOL;
  if (!tap_ok(ok, "%s (worst %.2e)", what, worst))
    tap_diag("%s: row %lld: error %.3e > %.0e", what, (long long)at, worst, LSE_TOL);
  return ok;
}

// ---- fast against reference --------------------------------------------------------------

static void test_against_ref(gt_dtype dt, shape s)
{
  const size_t nq = tu_attn_n_qkv(s), no = tu_attn_n_out(s), nl = tu_attn_n_lse(s), es = dt_size(dt);
  float *qkv_f, *dy_f;
  void *qkv = dt_random(dt, nq, 19 + (uint64_t)s.T, -2, 2, &qkv_f);
  void *dy = dt_random(dt, no, 20 + (uint64_t)s.T, -1, 1, &dy_f);
  void *o1 = malloc(no * es), *o2 = malloc(no * es);
  void *d1 = malloc(nq * es), *d2 = malloc(nq * es);
  float *l1 = tu_alloc(nl), *l2 = tu_alloc(nl);
  if (!o1 || !o2 || !d1 || !d2)
    abort();
  char what[128], tag[80];
  snprintf(tag, sizeof tag, "B=%lld T=%lld H=%lld Hkv=%lld hs=%lld [%s]", (long long)s.B,
           (long long)s.T, (long long)s.H, (long long)tu_attn_kv(s), (long long)s.hs,
           gt_dtype_name(dt));
  if (forward(fast, dt, s, qkv, o1, l1) && forward(ref, dt, s, qkv, o2, l2)) {
    float *a = dt_read(dt, o1, no), *b = dt_read(dt, o2, no);
    snprintf(what, sizeof what, "attention forward out %s", tag);
    check(dt, what, a, b, no);
    free(a), free(b);
    snprintf(what, sizeof what, "attention forward lse [%s] vs double %s", fast->name, tag);
    check_lse(what, l1, qkv_f, s);
    snprintf(what, sizeof what, "attention forward lse [%s] vs double %s", ref->name, tag);
    check_lse(what, l2, qkv_f, s);
    /* backward of each from the reference's forward, so that the two start
     * from the same out and lse */
    if (backward(fast, dt, s, qkv, o2, l2, dy, d1) && backward(ref, dt, s, qkv, o2, l2, dy, d2)) {
      a = dt_read(dt, d1, nq);
      b = dt_read(dt, d2, nq);
      snprintf(what, sizeof what, "attention backward dqkv %s", tag);
      check(dt, what, a, b, nq);
      free(a), free(b);
    }
  }
  free(qkv), free(qkv_f), free(dy), free(dy_f), free(o1), free(o2), free(d1), free(d2);
  free(l1), free(l2);
}

// ---- finite differences (fp32) -------------------------------------------------------------

/* L = sum(out * r) of the reference forward. */
static double fd_loss(shape s, const float *qkv, const float *r, float *out, float *lse)
{
  if (!forward(ref, GT_F32, s, qkv, out, lse))
    abort();
  double L = 0;
  for (size_t i = 0; i < tu_attn_n_out(s); i++)
    L += (double)out[i] * r[i];
  return L;
}

static void test_gradcheck(gt_backend *be, shape s)
{
  const size_t nq = tu_attn_n_qkv(s), no = tu_attn_n_out(s);
  float *qkv = tu_alloc(nq), *r = tu_alloc(no), *out = tu_alloc(no), *grad = tu_alloc(nq);
  float *lse = tu_alloc(tu_attn_n_lse(s)), *lse2 = tu_alloc(tu_attn_n_lse(s)), *out2 = tu_alloc(no);
  tu_fill(qkv, nq, 70, -1.5f, 1.5f);
  tu_fill(r, no, 71, -1, 1);
  /* analytic: be's forward, then its backward with dout = r */
  if (!forward(be, GT_F32, s, qkv, out, lse) || !backward(be, GT_F32, s, qkv, out, lse, r, grad))
    goto done;
  /* the columns of a row of qkv that hold q, k and v */
  const int64_t kv = tu_attn_kv(s), R = tu_attn_row(s);
  const int64_t first[3] = {0, s.H * s.hs, (s.H + kv) * s.hs};
  const int64_t width[3] = {s.H * s.hs, kv * s.hs, kv * s.hs};
  const char *part[3] = {"q", "k", "v"};
  for (int p = 0; p < 3; p++) {
    double num = 0, den = 0;
    uint64_t seed = 1234 + (uint64_t)p;
    for (int j = 0; j < FD_SAMPLES; j++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      const int64_t row = (int64_t)((seed >> 33) % (uint64_t)(s.B * s.T));
      const int64_t col = (int64_t)((seed >> 13) % (uint64_t)width[p]);
      const size_t i = (size_t)(row * R + first[p] + col);
      const float x0 = qkv[i], xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
      qkv[i] = xp;
      const double lp = fd_loss(s, qkv, r, out2, lse2);
      qkv[i] = xm;
      const double lm = fd_loss(s, qkv, r, out2, lse2);
      qkv[i] = x0;
      const double fd = (lp - lm) / ((double)xp - (double)xm), an = grad[i];
      num += (fd - an) * (fd - an);
      den += fd * fd;
    }
    const double err = sqrt(num) / fmax(sqrt(den), 1e-4);
    if (!tap_ok(err <= FD_TOL,
                "attention backward [%s] d/d%s vs finite differences B=%lld T=%lld H=%lld "
                "Hkv=%lld hs=%lld (err %.2e)",
                be->name, part[p], (long long)s.B, (long long)s.T, (long long)s.H,
                (long long)kv, (long long)s.hs, err))
      tap_diag("d/d%s: error %.3e > %.1e", part[p], err, FD_TOL);
  }
done:
  free(qkv), free(r), free(out), free(grad), free(lse), free(lse2), free(out2);
}

// ---- determinism --------------------------------------------------------------------------

/* Forward and backward of be; out, lse and dqkv concatenated as bytes. */
static unsigned char *fwd_bwd_bytes(gt_backend *be, gt_dtype dt, shape s, const void *qkv,
                                    const void *dy, size_t *bytes)
{
  const size_t es = dt_size(dt), no = tu_attn_n_out(s) * es, nl = tu_attn_n_lse(s) * sizeof(float);
  const size_t nq = tu_attn_n_qkv(s) * es;
  *bytes = no + nl + nq;
  unsigned char *all = malloc(*bytes);
  if (!all)
    abort();
  if (!forward(be, dt, s, qkv, all, (float *)(all + no)) ||
      !backward(be, dt, s, qkv, all, (const float *)(all + no), dy, all + no + nl))
    memset(all, 0, *bytes); /* already reported */
  return all;
}

static void test_determinism(gt_dtype dt, shape s)
{
  gt_backend *one = NULL;
  if (gt_backend_create("cpu", 1, &one) != GT_SUCCESS) {
    tap_ok(false, "create a 1-thread cpu backend: %s", gt_error_message());
    gt_error_clear();
    return;
  }
  float *xq, *xd;
  void *qkv = dt_random(dt, tu_attn_n_qkv(s), 31, -2, 2, &xq);
  void *dy = dt_random(dt, tu_attn_n_out(s), 32, -1, 1, &xd);
  size_t n;
  unsigned char *r1 = fwd_bwd_bytes(fast, dt, s, qkv, dy, &n);
  unsigned char *r2 = fwd_bwd_bytes(fast, dt, s, qkv, dy, &n);
  unsigned char *r3 = fwd_bwd_bytes(one, dt, s, qkv, dy, &n);
  tap_ok(!memcmp(r1, r2, n),
         "attention forward + backward [%s, %d threads] twice: the same bits B=%lld T=%lld "
         "H=%lld hs=%lld [%s]",
         fast->name, fast->threads, (long long)s.B, (long long)s.T, (long long)s.H,
         (long long)s.hs, gt_dtype_name(dt));
  tap_ok(!memcmp(r1, r3, n),
         "attention forward + backward [%s]: 1 thread and %d threads give the same bits "
         "[%s]",
         fast->name, fast->threads, gt_dtype_name(dt));
  free(r1), free(r2), free(r3), free(qkv), free(dy), free(xq), free(xd);
  gt_backend_destroy(&one);
}

// ---- errors --------------------------------------------------------------------------------

/* An int32 compute type is refused, with a message naming it (on a backend
 * of its own: under cpu-async a queued op's error stays with its stream). */
// ---- decoding: one row over a key/value cache ------------------------------------------

/* be's attention_decode for the first n rows of qkv (one sequence), host
 * to host: out (H*hs of dt). */
static bool decode(gt_backend *be, gt_dtype dt, shape s, const void *qkv, int64_t n, void *out)
{
  const size_t es = dt_size(dt), C = (size_t)(s.H * s.hs);
  void *dq = dev_put(be, qkv, (size_t)(n * tu_attn_row(s)) * es), *dout = dev_put(be, NULL, C * es);
  bool ok = tu_call_ok(be, be->ops->attention_decode(be, dt, dout, dq, n, s.H, tu_attn_kv(s), s.hs),
                       "attention_decode");
  dev_get(be, out, dout, C * es);
  dev_free(be, dq), dev_free(be, dout);
  return ok;
}

/* Decoding row t from rows 0..t is row t of the causal forward: every
 * prefix of a sequence, both backends against the reference's forward. */
static void test_decode(gt_dtype dt, shape s)
{
  const size_t nq = tu_attn_n_qkv(s), no = tu_attn_n_out(s), es = dt_size(dt);
  const size_t C = (size_t)(s.H * s.hs);
  float *qkv_f;
  void *qkv = dt_random(dt, nq, 31 + (uint64_t)s.T, -2, 2, &qkv_f);
  void *full = malloc(no * es), *row = malloc(C * es);
  float *lse = tu_alloc(tu_attn_n_lse(s));
  if (!full || !row)
    abort();
  gt_backend *both[2] = {fast, ref};
  if (forward(ref, dt, s, qkv, full, lse)) {
    float *want = dt_read(dt, full, no);
    for (int k = 0; k < 2; k++) {
      float *got = tu_alloc(no);
      bool ok = true;
      for (int64_t t = 0; t < s.T && ok; t++) {
        ok = decode(both[k], dt, s, qkv, t + 1, row);
        float *r = dt_read(dt, row, C);
        memcpy(got + (size_t)t * C, r, C * sizeof(float));
        free(r);
      }
      char what[160];
      snprintf(what, sizeof what,
               "attention decode [%s] of every prefix = the forward's rows T=%lld H=%lld "
               "hs=%lld [%s]",
               both[k]->name, (long long)s.T, (long long)s.H, (long long)s.hs,
               gt_dtype_name(dt));
      if (ok)
        check(dt, what, got, want, no);
      else
        tap_ok(false, "%s", what);
      free(got);
    }
    free(want);
  }
  free(qkv), free(qkv_f), free(full), free(row), free(lse);
}

static void test_bad_type(void)
{
  gt_backend *be = NULL;
  if (gt_backend_create("cpu", 1, &be) != GT_SUCCESS) {
    tap_ok(false, "create a cpu backend: %s", gt_error_message());
    gt_error_clear();
    return;
  }
  void *q = dev_put(be, NULL, 3 * 16 * sizeof(float)), *o = dev_put(be, NULL, 16 * sizeof(float));
  float *l = dev_put(be, NULL, sizeof(float));
  int status = be->ops->attention_forward(be, GT_I32, o, l, q, 1, 1, 1, 1, 16);
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  tap_ok(status == GT_ERR_INPUT && strstr(gt_error_message(), "int32"),
         "attention forward with an int32 compute type: input error (%s)", gt_error_message());
  gt_error_clear();
  be->ops->free(be, q), be->ops->free(be, o), be->ops->free(be, l); /* may repeat the error */
  gt_backend_destroy(&be);
  gt_error_clear();
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  if (gt_backend_create("cpu", 2, &fast) || gt_backend_create("cpu-ref", 1, &ref))
    return tap_bail("cannot create the backends: %s", gt_error_message());
  tap_diag("fast backend: %s", fast->name);
  const shape shapes[] = {
    {2, 1, 3, 16, 3},   /* T = 1: out is v */
    {2, 13, 3, 20, 3},  /* T and hs not multiples of 16 */
    {3, 17, 4, 16, 4},  /* one key past a panel; 12 heads over 2 threads */
    {2, 64, 2, 64, 2},  /* exactly one query block */
    {1, 150, 2, 72, 2}, /* three query blocks, the last ragged; hs past a 64-wide block */
    {1, 200, 1, 33, 1}, /* four blocks, hs = 33 */
    /* grouped-query attention: 2 and 3 query heads per key/value head, and
     * multi-query (one key/value head for all) past a query block */
    {2, 13, 4, 20, 2},
    {1, 70, 6, 24, 2},
    {2, 90, 3, 16, 1},
  };
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      test_against_ref(all_dt[k], shapes[i]);
  gt_backend *both[2] = {ref, fast};
  for (int k = 0; k < 2; k++) {
    test_gradcheck(both[k], (shape){2, 21, 2, 20, 2});
    test_gradcheck(both[k], (shape){1, 70, 1, 24, 1}); /* two query blocks */
    /* key/value gradients summed over the query heads of a group */
    test_gradcheck(both[k], (shape){2, 21, 4, 20, 2});
    test_gradcheck(both[k], (shape){1, 70, 3, 24, 1});
  }
  test_determinism(GT_F32, (shape){2, 300, 3, 40, 3});
  test_determinism(GT_BF16, (shape){2, 300, 3, 40, 3});
  test_determinism(GT_F32, (shape){2, 150, 4, 40, 2});
  for (int k = 0; k < 3; k++) {
    test_decode(all_dt[k], (shape){1, 37, 3, 20, 3});
    test_decode(all_dt[k], (shape){1, 5, 2, 72, 2});
    test_decode(all_dt[k], (shape){1, 19, 4, 20, 2});
  }
  test_bad_type();
  gt_backend_destroy(&fast);
  gt_backend_destroy(&ref);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
