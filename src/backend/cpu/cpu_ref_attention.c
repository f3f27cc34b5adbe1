/*
 * cpu_ref_attention.c - causal self-attention of the reference backend:
 * the contract of backend.h in plain loops, one query row at a time, with
 * grouped query heads (query head h reads key/value head h / (H / Hkv)).
 *
 * Inputs are read as dt and widened to double; every sum is a double; each
 * output is rounded to fp32 and then to dt once, at the end (lse stays
 * fp32). Backward uses the lse and out that forward gave, as the fast
 * backend does: P = exp(s - lse), D = rowsum(dout o out). Memory: one row
 * of T doubles per call in forward; in backward that row, a head's dk and
 * dv accumulators (T x hs doubles each) and one dq row. Single-threaded.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backends.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"

/* Element i of an array of dt, as double. */
static inline double gt_ref_in(gt_dtype dt, const void *p, int64_t i)
{
  return (double)gt_load1(dt, p, (size_t)i);
}

static int gt_ref_att_check(gt_dtype dt, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                            int64_t hs)
{
  GT_CHECK(dt == GT_F32 || dt == GT_BF16 || dt == GT_F16, GT_ERR_INPUT,
           "attention: compute type %s; expected fp32, bf16 or fp16", gt_dtype_name(dt));
  GT_CHECK(B >= 0 && T >= 0 && H >= 1 && hs >= 1 && Hkv >= 1 && H % Hkv == 0, GT_ERR_INPUT,
           "attention: shape B=%lld T=%lld H=%lld Hkv=%lld hs=%lld; expected B, T >= 0, H, "
           "hs >= 1 and H a multiple of Hkv >= 1",
           (long long)B, (long long)T, (long long)H, (long long)Hkv, (long long)hs);
  return GT_SUCCESS;
}

/* Where head h's q, k and v of row (b, t) start in qkv (elements). */
typedef struct {
  int64_t T, H, Hkv, hs, C3; /* C3 = (H + 2 Hkv) hs: a row of qkv */
} gt_ref_att;

static int64_t gt_ref_q(const gt_ref_att *a, int64_t b, int64_t t, int64_t h)
{
  return (b * a->T + t) * a->C3 + h * a->hs;
}

static int64_t gt_ref_k(const gt_ref_att *a, int64_t b, int64_t t, int64_t h)
{
  return (b * a->T + t) * a->C3 + (a->H + h / (a->H / a->Hkv)) * a->hs;
}

static int64_t gt_ref_v(const gt_ref_att *a, int64_t b, int64_t t, int64_t h)
{
  return gt_ref_k(a, b, t, h) + a->Hkv * a->hs;
}

/* s[u] = scale q_t . k_u for u <= t of query head h, batch b. */
static void gt_ref_scores(gt_dtype dt, double *s, const void *qkv, const gt_ref_att *a,
                          int64_t b, int64_t t, int64_t h, double scale)
{
  const int64_t q = gt_ref_q(a, b, t, h);
  for (int64_t u = 0; u <= t; u++) {
    const int64_t k = gt_ref_k(a, b, u, h);
    double d = 0;
    for (int64_t i = 0; i < a->hs; i++)
      d += gt_ref_in(dt, qkv, q + i) * gt_ref_in(dt, qkv, k + i);
    s[u] = d * scale;
  }
}

/* s[0..t] = the softmax of its scaled scores; returns m + log z. */
static double gt_ref_softmax(double *s, int64_t t)
{
  double m = -INFINITY, z = 0;
  for (int64_t u = 0; u <= t; u++)
    m = s[u] > m ? s[u] : m;
  for (int64_t u = 0; u <= t; u++) {
    s[u] = exp(s[u] - m);
    z += s[u];
  }
  for (int64_t u = 0; u <= t; u++)
    s[u] /= z;
  return m + log(z);
}

int gt_ref_attention_forward(gt_backend *be, gt_dtype dt, void *out, float *lse,
                             const void *qkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                             int64_t hs)
{
  (void)be;
  GT_CALL(gt_ref_att_check(dt, B, T, H, Hkv, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  const gt_ref_att a = {T, H, Hkv, hs, (H + 2 * Hkv) * hs};
  const int64_t C = H * hs;
  const double scale = 1.0 / sqrt((double)hs);
  double *s = malloc(sizeof(double) * (size_t)T);
  GT_CHECK_ALLOC(s, sizeof(double) * (size_t)T);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++) {
        gt_ref_scores(dt, s, qkv, &a, b, t, h, scale);
        lse[(b * H + h) * T + t] = (float)gt_ref_softmax(s, t);
        const int64_t o = (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; i++) {
          double acc = 0;
          for (int64_t u = 0; u <= t; u++)
            acc += s[u] * gt_ref_in(dt, qkv, gt_ref_v(&a, b, u, h) + i);
          gt_store1(dt, out, (size_t)(o + i), (float)acc);
        }
      }
  free(s);
  return GT_SUCCESS;
}

int gt_ref_attention_backward(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse, int64_t B,
                              int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  (void)be;
  GT_CALL(gt_ref_att_check(dt, B, T, H, Hkv, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  const gt_ref_att a = {T, H, Hkv, hs, (H + 2 * Hkv) * hs};
  const int64_t C = H * hs, g = H / Hkv;
  const double scale = 1.0 / sqrt((double)hs);
  const size_t nrow = (size_t)T, nkv = (size_t)(T * hs);
  double *s = malloc(sizeof(double) * (nrow + 2 * nkv + (size_t)hs));
  GT_CHECK_ALLOC(s, sizeof(double) * (nrow + 2 * nkv + (size_t)hs));
  double *dk = s + nrow, *dv = dk + nkv, *dq = dv + nkv;
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < Hkv; j++) {
      memset(dk, 0, sizeof(double) * 2 * nkv); /* dk and dv of key/value head j */
      for (int64_t h = j * g; h < (j + 1) * g; h++) /* its query heads, ascending */
        for (int64_t t = 0; t < T; t++) {
          const int64_t q = gt_ref_q(&a, b, t, h), y = (b * T + t) * C + h * hs;
          const double L = lse[(b * H + h) * T + t];
          double D = 0;
          for (int64_t i = 0; i < hs; i++)
            D += gt_ref_in(dt, dout, y + i) * gt_ref_in(dt, out, y + i);
          gt_ref_scores(dt, s, qkv, &a, b, t, h, scale);
          memset(dq, 0, sizeof(double) * (size_t)hs);
          for (int64_t u = 0; u <= t; u++) {
            const int64_t k = gt_ref_k(&a, b, u, h), v = gt_ref_v(&a, b, u, h);
            const double p = exp(s[u] - L);
            double dp = 0;
            for (int64_t i = 0; i < hs; i++)
              dp += gt_ref_in(dt, dout, y + i) * gt_ref_in(dt, qkv, v + i);
            const double ds = p * (dp - D) * scale;
            for (int64_t i = 0; i < hs; i++) {
              dq[i] += ds * gt_ref_in(dt, qkv, k + i);
              dk[u * hs + i] += ds * gt_ref_in(dt, qkv, q + i);
              dv[u * hs + i] += p * gt_ref_in(dt, dout, y + i);
            }
          }
          for (int64_t i = 0; i < hs; i++)
            gt_store1(dt, dqkv, (size_t)(q + i), (float)dq[i]);
        }
      for (int64_t u = 0; u < T; u++) {
        const int64_t k = gt_ref_k(&a, b, u, j * g), v = gt_ref_v(&a, b, u, j * g);
        for (int64_t i = 0; i < hs; i++) {
          gt_store1(dt, dqkv, (size_t)(k + i), (float)dk[u * hs + i]);
          gt_store1(dt, dqkv, (size_t)(v + i), (float)dv[u * hs + i]);
        }
      }
    }
  free(s);
  return GT_SUCCESS;
}

int gt_ref_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv, int64_t T,
                            int64_t H, int64_t Hkv, int64_t hs)
{
  (void)be;
  GT_CALL(gt_ref_att_check(dt, 1, T, H, Hkv, hs));
  GT_CHECK(T >= 1, GT_ERR_INPUT, "attention decode: T = %lld; expected at least 1 position",
           (long long)T);
  const gt_ref_att a = {T, H, Hkv, hs, (H + 2 * Hkv) * hs};
  const int64_t t = T - 1;
  const double scale = 1.0 / sqrt((double)hs);
  double *s = malloc(sizeof(double) * (size_t)T);
  GT_CHECK_ALLOC(s, sizeof(double) * (size_t)T);
  for (int64_t h = 0; h < H; h++) {
    gt_ref_scores(dt, s, qkv, &a, 0, t, h, scale);
    gt_ref_softmax(s, t);
    for (int64_t i = 0; i < hs; i++) {
      double acc = 0;
      for (int64_t u = 0; u <= t; u++)
        acc += s[u] * gt_ref_in(dt, qkv, gt_ref_v(&a, 0, u, h) + i);
      gt_store1(dt, out, (size_t)(h * hs + i), (float)acc);
    }
  }
  free(s);
  return GT_SUCCESS;
}
