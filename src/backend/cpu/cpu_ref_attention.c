/*
 * cpu_ref_attention.c - causal self-attention of the reference backend:
 * the contract of backend.h in plain loops, one query row at a time.
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

static int gt_ref_att_check(gt_dtype dt, int64_t B, int64_t T, int64_t H, int64_t hs)
{
  GT_CHECK(dt == GT_F32 || dt == GT_BF16 || dt == GT_F16, GT_ERR_INPUT,
           "attention: compute type %s; expected fp32, bf16 or fp16", gt_dtype_name(dt));
  GT_CHECK(B >= 0 && T >= 0 && H >= 1 && hs >= 1, GT_ERR_INPUT,
           "attention: shape B=%lld T=%lld H=%lld hs=%lld; expected B, T >= 0 and H, hs >= 1",
           (long long)B, (long long)T, (long long)H, (long long)hs);
  return GT_SUCCESS;
}

/* s[u] = scale q_t . k_u for u <= t of head h, batch b (qkv offsets in
 * elements: q of row t at (b T + t) 3C + h hs, k at + C). */
static void gt_ref_scores(gt_dtype dt, double *s, const void *qkv, int64_t b, int64_t t,
                          int64_t h, int64_t T, int64_t C, int64_t hs, double scale)
{
  const int64_t q = (b * T + t) * 3 * C + h * hs;
  for (int64_t u = 0; u <= t; u++) {
    const int64_t k = (b * T + u) * 3 * C + C + h * hs;
    double d = 0;
    for (int64_t i = 0; i < hs; i++)
      d += gt_ref_in(dt, qkv, q + i) * gt_ref_in(dt, qkv, k + i);
    s[u] = d * scale;
  }
}

int gt_ref_attention_forward(gt_backend *be, gt_dtype dt, void *out, float *lse,
                             const void *qkv, int64_t B, int64_t T, int64_t H, int64_t hs)
{
  (void)be;
  GT_CALL(gt_ref_att_check(dt, B, T, H, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  const int64_t C = H * hs;
  const double scale = 1.0 / sqrt((double)hs);
  double *s = malloc(sizeof(double) * (size_t)T);
  GT_CHECK_ALLOC(s, sizeof(double) * (size_t)T);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++) {
        gt_ref_scores(dt, s, qkv, b, t, h, T, C, hs, scale);
        double m = -INFINITY;
        for (int64_t u = 0; u <= t; u++)
          m = s[u] > m ? s[u] : m;
        double z = 0;
        for (int64_t u = 0; u <= t; u++) {
          s[u] = exp(s[u] - m);
          z += s[u];
        }
        lse[(b * H + h) * T + t] = (float)(m + log(z));
        const int64_t o = (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; i++) {
          double acc = 0;
          for (int64_t u = 0; u <= t; u++)
            acc += s[u] / z * gt_ref_in(dt, qkv, (b * T + u) * 3 * C + 2 * C + h * hs + i);
          gt_store1(dt, out, (size_t)(o + i), (float)acc);
        }
      }
  free(s);
  return GT_SUCCESS;
}

int gt_ref_attention_backward(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse, int64_t B,
                              int64_t T, int64_t H, int64_t hs)
{
  (void)be;
  GT_CALL(gt_ref_att_check(dt, B, T, H, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  const int64_t C = H * hs, C3 = 3 * C;
  const double scale = 1.0 / sqrt((double)hs);
  const size_t nrow = (size_t)T, nkv = (size_t)(T * hs);
  double *s = malloc(sizeof(double) * (nrow + 2 * nkv + (size_t)hs));
  GT_CHECK_ALLOC(s, sizeof(double) * (nrow + 2 * nkv + (size_t)hs));
  double *dk = s + nrow, *dv = dk + nkv, *dq = dv + nkv;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      memset(dk, 0, sizeof(double) * 2 * nkv); /* dk and dv */
      for (int64_t t = 0; t < T; t++) {
        const int64_t q = (b * T + t) * C3 + h * hs, y = (b * T + t) * C + h * hs;
        const double L = lse[(b * H + h) * T + t];
        double D = 0;
        for (int64_t i = 0; i < hs; i++)
          D += gt_ref_in(dt, dout, y + i) * gt_ref_in(dt, out, y + i);
        gt_ref_scores(dt, s, qkv, b, t, h, T, C, hs, scale);
        memset(dq, 0, sizeof(double) * (size_t)hs);
        for (int64_t u = 0; u <= t; u++) {
          const int64_t k = (b * T + u) * C3 + C + h * hs, v = k + C;
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
        const int64_t k = (b * T + u) * C3 + C + h * hs;
        for (int64_t i = 0; i < hs; i++) {
          gt_store1(dt, dqkv, (size_t)(k + i), (float)dk[u * hs + i]);
          gt_store1(dt, dqkv, (size_t)(k + C + i), (float)dv[u * hs + i]);
        }
      }
    }
  free(s);
  return GT_SUCCESS;
}

int gt_ref_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv, int64_t T,
                            int64_t H, int64_t hs)
{
  (void)be;
  GT_CALL(gt_ref_att_check(dt, 1, T, H, hs));
  GT_CHECK(T >= 1, GT_ERR_INPUT, "attention decode: T = %lld; expected at least 1 position",
           (long long)T);
  const int64_t C = H * hs, t = T - 1;
  const double scale = 1.0 / sqrt((double)hs);
  double *s = malloc(sizeof(double) * (size_t)T);
  GT_CHECK_ALLOC(s, sizeof(double) * (size_t)T);
  for (int64_t h = 0; h < H; h++) {
    gt_ref_scores(dt, s, qkv, 0, t, h, T, C, hs, scale);
    double m = -INFINITY, z = 0;
    for (int64_t u = 0; u <= t; u++)
      m = s[u] > m ? s[u] : m;
    for (int64_t u = 0; u <= t; u++) {
      s[u] = exp(s[u] - m);
      z += s[u];
    }
    for (int64_t i = 0; i < hs; i++) {
      double acc = 0;
      for (int64_t u = 0; u <= t; u++)
        acc += s[u] / z * gt_ref_in(dt, qkv, u * 3 * C + 2 * C + h * hs + i);
      gt_store1(dt, out, (size_t)(h * hs + i), (float)acc);
    }
  }
  free(s);
  return GT_SUCCESS;
}
