/*
 * cpu_simd.h - scalar math in forms that GCC vectorises (no libm calls),
 * and the typed element access that lets one kernel body serve fp32, bf16
 * and fp16, shared by the fast CPU kernels (internal to src/backend/cpu).
 */
#ifndef GT_CPU_SIMD_H
#define GT_CPU_SIMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/error.h"
#include "gridtrain/tensor.h"

#define GT_INLINE static inline __attribute__((always_inline))

/* Run FN(DT, ...) with DT a compile-time constant, so that the typed loads
 * and stores in FN fold into plain fp32, bf16 or fp16 code. OpenMP outlines
 * a parallel region before inlining: the dispatch sits inside the region. */
#define GT_BY_DT(dt, fn, ...)                                                                \
  do {                                                                                       \
    switch (dt) {                                                                            \
    case GT_BF16: fn(GT_BF16, __VA_ARGS__); break;                                           \
    case GT_F16: fn(GT_F16, __VA_ARGS__); break;                                             \
    default: fn(GT_F32, __VA_ARGS__); break;                                                 \
    }                                                                                        \
  } while (0)

static inline bool gt_float_type(gt_dtype t)
{
  return t == GT_F32 || t == GT_BF16 || t == GT_F16;
}

#define GT_CHECK_DT(dt)                                                                      \
  GT_CHECK(gt_float_type(dt), GT_ERR_INTERNAL,                                               \
           "internal error: %s: element type %s is not fp32, bf16 or fp16", __func__,        \
           gt_dtype_name(dt))

/* Element i of an array of type t (byte address). */
static inline void *gt_at(gt_dtype t, void *p, size_t i)
{
  return (char *)p + i * gt_dtype_size(t);
}

static inline const void *gt_cat(gt_dtype t, const void *p, size_t i)
{
  return (const char *)p + i * gt_dtype_size(t);
}

static inline int64_t gt_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* exp(x) for float, accurate to about 1 ulp: x = n ln2 + r, |r| <= ln2/2,
 * e^r = 1 + r + r^2 P(r) with P of degree 5 (Cephes coefficients), 2^n by
 * building the exponent bits. */
#define GT_EXP_SHIFTER 12582912.0f /* 1.5 * 2^23: (x + s) - s rounds to nearest */
#define GT_EXP_LOG2E 1.44269504088896341f
#define GT_EXP_LN2_HI 0.693145751953125f
#define GT_EXP_LN2_LO 1.428606765330187045e-06f
static const float gt_exp_poly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                     4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

static inline float gt_expf(float x)
{
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float n = (x * GT_EXP_LOG2E + GT_EXP_SHIFTER) - GT_EXP_SHIFTER;
  float r = x - n * GT_EXP_LN2_HI - n * GT_EXP_LN2_LO;
  float p = gt_exp_poly[0];
  for (int k = 1; k < 6; k++)
    p = p * r + gt_exp_poly[k];
  p = p * r * r + r + 1.0f;
  union {
    int32_t i;
    float f;
  } scale = {.i = ((int32_t)n + 127) << 23};
  return p * scale.f;
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1), saturating cleanly at both ends. */
static inline float gt_tanhf(float u) { return 1.0f - 2.0f / (gt_expf(2.0f * u) + 1.0f); }

/* ---- 16-float vectors (one AVX-512 register; two AVX2, four SSE ones) ---- */

typedef float gt_v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t gt_i16 __attribute__((vector_size(64), aligned(4)));

static inline gt_v16 gt_v16_splat(float x) { return (gt_v16){0} + x; }

/* Lane-wise select: m ? a : b, m from a vector comparison (-1 or 0). */
static inline gt_v16 gt_v16_select(gt_i16 m, gt_v16 a, gt_v16 b)
{
  return (gt_v16)((m & (gt_i16)a) | (~m & (gt_i16)b));
}

/* gt_expf on 16 lanes, the same arithmetic as the scalar version. */
static inline gt_v16 gt_v16_exp(gt_v16 x)
{
  x = gt_v16_select(x < -87.0f, gt_v16_splat(-87.0f), x);
  x = gt_v16_select(x > 88.0f, gt_v16_splat(88.0f), x);
  gt_v16 n = (x * GT_EXP_LOG2E + GT_EXP_SHIFTER) - GT_EXP_SHIFTER;
  gt_v16 r = x - n * GT_EXP_LN2_HI - n * GT_EXP_LN2_LO;
  gt_v16 p = gt_v16_splat(gt_exp_poly[0]);
  for (int k = 1; k < 6; k++)
    p = p * r + gt_exp_poly[k];
  p = p * r * r + r + 1.0f;
  gt_i16 bits = (__builtin_convertvector(n, gt_i16) + 127) << 23;
  return p * (gt_v16)bits;
}

static inline float gt_v16_sum(gt_v16 v)
{
  float s = 0;
  for (int i = 0; i < 16; i++)
    s += v[i];
  return s;
}

static inline float gt_v16_max(gt_v16 v)
{
  float m = v[0];
  for (int i = 1; i < 16; i++)
    m = v[i] > m ? v[i] : m;
  return m;
}

#endif /* GT_CPU_SIMD_H */
