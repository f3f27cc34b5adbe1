/*
 * gridtrain/half.h - fp32 <-> bf16 / fp16 conversions in host code (core,
 * header-only: inline so that the array forms vectorise where they are
 * used). Used by the CPU backends, the host sums of src/comm/coll_algos.c,
 * gradient compression (src/parallel/compress.c) and the Hugging Face
 * export (src/io/hf_export.c).
 *
 * Rounding is to nearest, ties to even, in both formats; NaN stays NaN (a
 * quiet NaN), infinities stay infinite, fp32 values past a format's range
 * become infinity (fp16: |x| >= 65520). The array forms are written so that
 * GCC vectorises them (no branches in the loop bodies).
 */
#ifndef GT_HALF_H
#define GT_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gridtrain/tensor.h"

static inline uint32_t gt_f32_bits(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float gt_bits_f32(uint32_t u)
{
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// ---- bfloat16 -------------------------------------------------------------------

static inline float gt_bf16_to_f32(uint16_t h) { return gt_bits_f32((uint32_t)h << 16); }

static inline uint16_t gt_f32_to_bf16(float x)
{
  const uint32_t u = gt_f32_bits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return (uint16_t)(is_nan ? (u >> 16) | 0x40u : rounded);
}

// ---- IEEE binary16 (GCC's _Float16: F16C instructions where the CPU has them) --

/* Exact, branch-free and in plain integer and float arithmetic (so that it
 * vectorises and GCC cannot fold it into a libgcc half-to-double call where
 * the result feeds a double): the exponent and mantissa bits moved into
 * place and rebiased by 2^112 (subnormals come out right the same way);
 * infinities and NaNs keep their bits. */
static inline float gt_f16_to_f32(uint16_t h)
{
  const uint32_t em = h & 0x7fffu, sign = (uint32_t)(h & 0x8000u) << 16;
  const float finite = gt_bits_f32(em << 13) * 0x1p112f;
  const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13);
  return gt_bits_f32((em >= 0x7c00u ? special : gt_f32_bits(finite)) | sign);
}

/* Round to nearest even in integer arithmetic, branch-free so that it
 * vectorises (GCC does not vectorise float-to-_Float16 casts without
 * AVX512-FP16): normal results add the rounding bias below the kept 10
 * mantissa bits; subnormal ones let an fp32 addition of 0.5 do the
 * rounding; past 65504 (from 65520 on) the carry makes infinity; NaN
 * becomes the quiet NaN 0x7e00. */
static inline uint16_t gt_f32_to_f16(float f)
{
  const uint32_t u = gt_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13; /* exponent -112 */
  const uint32_t sub = gt_f32_bits(gt_bits_f32(a) + 0.5f) - 0x3f000000u;
  const uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  const uint32_t h = a >= 0x47800000u ? big : a < 0x38800000u ? sub : normal;
  return (uint16_t)(h | sign);
}

// ---- one element of any compute type --------------------------------------------------

static inline float gt_load1(gt_dtype t, const void *p, size_t i)
{
  switch (t) {
  case GT_BF16: return gt_bf16_to_f32(((const uint16_t *)p)[i]);
  case GT_F16: return gt_f16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

static inline void gt_store1(gt_dtype t, void *p, size_t i, float x)
{
  switch (t) {
  case GT_BF16: ((uint16_t *)p)[i] = gt_f32_to_bf16(x); break;
  case GT_F16: ((uint16_t *)p)[i] = gt_f32_to_f16(x); break;
  default: ((float *)p)[i] = x; break;
  }
}

/* x rounded to t and back (what storing x as t keeps). */
static inline float gt_round_to(gt_dtype t, float x)
{
  switch (t) {
  case GT_BF16: return gt_bf16_to_f32(gt_f32_to_bf16(x));
  case GT_F16: return gt_f16_to_f32(gt_f32_to_f16(x));
  default: return x;
  }
}

// ---- arrays ---------------------------------------------------------------------------

/* dst (n fp32) = src (n of type t). */
static inline void gt_to_f32(gt_dtype t, float *restrict dst, const void *restrict src,
                             size_t n)
{
  if (t == GT_BF16) {
    const uint16_t *s = src;
#pragma omp simd
    for (size_t i = 0; i < n; i++)
      dst[i] = gt_bf16_to_f32(s[i]);
  } else if (t == GT_F16) {
#ifdef __FLT16_MANT_DIG__ /* _Float16 (GCC 12; clang 15 on x86): F16C where the CPU has it */
    const _Float16 *s = src;
#pragma omp simd
    for (size_t i = 0; i < n; i++)
      dst[i] = (float)s[i];
#else /* clang 14 (the fuzz builds): the integer conversion, the same values */
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++)
      dst[i] = gt_f16_to_f32(s[i]);
#endif
  } else if ((const void *)dst != src) {
    memcpy(dst, src, n * sizeof(float));
  }
}

/* dst (n of type t) = src (n fp32), rounded. */
static inline void gt_from_f32(gt_dtype t, void *restrict dst, const float *restrict src,
                               size_t n)
{
  if (t == GT_BF16) {
    uint16_t *d = dst;
#pragma omp simd
    for (size_t i = 0; i < n; i++)
      d[i] = gt_f32_to_bf16(src[i]);
  } else if (t == GT_F16) {
    uint16_t *d = dst;
#pragma omp simd
    for (size_t i = 0; i < n; i++)
      d[i] = gt_f32_to_f16(src[i]);
  } else if (dst != (const void *)src) {
    memcpy(dst, src, n * sizeof(float));
  }
}

#endif /* GT_HALF_H */
