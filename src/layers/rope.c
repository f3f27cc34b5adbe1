/*
 * rope.c - the host tables of rotary position embeddings (gridtrain/rope.h):
 * transformers' inverse frequencies, step by step in fp32 as torch computes
 * them on fp32 tensors, and the cos / sin of each position's angles.
 */
#include <math.h>
#include <stdlib.h>

#include "gridtrain/error.h"
#include "gridtrain/rope.h"

// ---- fp32 operations ---------------------------------------------------------------------

/* One IEEE single operation each, as torch does it on fp32 tensors. The
 * result goes through a volatile float, so that the compiler can neither
 * keep it wider nor fuse a product with the next sum into one FMA (which
 * torch does not do here, and which moves the llama3 frequencies of the
 * middle band by an ulp). A Python scalar meeting an fp32 tensor in torch
 * is first rounded to fp32 (f32()). */
static float f32(double x) { return (float)x; }
static float f32_keep(float x)
{
  volatile float v = x;
  return v;
}
static float f32_mul(float a, float b) { return f32_keep(a * b); }
static float f32_div(float a, float b) { return f32_keep(a / b); }
static float f32_add(float a, float b) { return f32_keep(a + b); }
static float f32_sub(float a, float b) { return f32_keep(a - b); }

/* torch's fp32 x ** e, rounded once. */
static float f32_pow(float x, float e) { return f32_keep((float)pow((double)x, (double)e)); }

// ---- checks ----------------------------------------------------------------------------------

static int rope_check(int64_t hs, double theta, const gt_rope_scaling *sc)
{
  GT_CHECK(hs >= 2 && hs % 2 == 0, GT_ERR_INPUT,
           "rope: head size %lld: it must be even and at least 2 (dim / heads)", (long long)hs);
  GT_CHECK(isfinite(theta) && theta > 0, GT_ERR_INPUT,
           "rope: rope_theta = %g: it must be a positive number (10000 in Llama 2, 500000 in "
           "Llama 3)", theta);
  if (!sc || sc->type == GT_ROPE_DEFAULT)
    return GT_SUCCESS;
  GT_CHECK(sc->type == GT_ROPE_LINEAR || sc->type == GT_ROPE_LLAMA3, GT_ERR_INPUT,
           "rope: rope_scaling type %d: gridtrain knows default, linear and llama3",
           (int)sc->type);
  GT_CHECK(isfinite(sc->factor) && sc->factor > 0, GT_ERR_INPUT,
           "rope: rope_scaling.factor = %g: it must be a positive number (usually >= 1)",
           sc->factor);
  if (sc->type == GT_ROPE_LLAMA3) {
    GT_CHECK(isfinite(sc->low_freq_factor) && sc->low_freq_factor > 0 &&
                 isfinite(sc->high_freq_factor) && sc->high_freq_factor > sc->low_freq_factor,
             GT_ERR_INPUT,
             "rope: rope_scaling low_freq_factor = %g, high_freq_factor = %g: they must be "
             "positive with high_freq_factor > low_freq_factor (Llama 3.1: 1 and 4)",
             sc->low_freq_factor, sc->high_freq_factor);
    GT_CHECK(sc->original_max_position_embeddings > 0, GT_ERR_INPUT,
             "rope: rope_scaling.original_max_position_embeddings = %lld: it must be positive "
             "(8192 in Llama 3.1)",
             (long long)sc->original_max_position_embeddings);
  }
  return GT_SUCCESS;
}

// ---- inverse frequencies and tables -----------------------------------------------------------

int gt_rope_inv_freq(int64_t hs, double theta, const gt_rope_scaling *sc, float *inv_freq)
{
  GT_CALL(rope_check(hs, theta, sc));
  const int64_t h = hs / 2;
  const gt_rope_type type = sc ? sc->type : GT_ROPE_DEFAULT;
  /* _compute_default_rope_parameters: 1.0 / (base ** (arange(0, dim, 2).float() / dim)) */
  for (int64_t i = 0; i < h; i++) {
    const float e = f32_div((float)(2 * i), (float)hs);
    inv_freq[i] = f32_div(1.0f, f32_pow(f32(theta), e));
  }
  if (type == GT_ROPE_LINEAR) /* _compute_linear_scaling_rope_parameters: inv_freq /= factor */
    for (int64_t i = 0; i < h; i++)
      inv_freq[i] = f32_div(inv_freq[i], f32(sc->factor));
  if (type == GT_ROPE_LLAMA3) { /* _compute_llama3_parameters */
    const double old = (double)sc->original_max_position_embeddings;
    const float factor = f32(sc->factor), low = f32(sc->low_freq_factor);
    const float low_wl = f32(old / sc->low_freq_factor), high_wl = f32(old / sc->high_freq_factor);
    const float span = f32(sc->high_freq_factor - sc->low_freq_factor);
    const float two_pi = f32(2 * 3.14159265358979323846), old32 = f32(old); /* math.pi */
    for (int64_t i = 0; i < h; i++) {
      const float f = inv_freq[i];
      const float wl = f32_mul(f32_div(1.0f, f), two_pi); /* 2 pi / f: reciprocal, times 2 pi */
      const float kept = wl > low_wl ? f32_div(f, factor) : f;
      if (!(wl < high_wl) && !(wl > low_wl)) { /* the medium band */
        const float s = f32_div(f32_sub(f32_mul(f32_div(1.0f, wl), old32), low), span);
        inv_freq[i] = f32_add(f32_div(f32_mul(f32_sub(1.0f, s), kept), factor), f32_mul(s, kept));
      } else {
        inv_freq[i] = kept;
      }
    }
  }
  return GT_SUCCESS;
}

int gt_rope_tables(int64_t hs, int64_t max_pos, double theta, const gt_rope_scaling *sc,
                   float *cos_tab, float *sin_tab)
{
  GT_CHECK(max_pos >= 1 && max_pos <= ((int64_t)1 << 24), GT_ERR_INPUT,
           "rope: max_pos = %lld positions: it must be between 1 and 2^24 (the sequence length)",
           (long long)max_pos);
  GT_CALL(rope_check(hs, theta, sc));
  const int64_t h = hs / 2;
  float *inv = malloc(sizeof(float) * (size_t)h);
  GT_CHECK_ALLOC(inv, sizeof(float) * (size_t)h);
  const int status = gt_rope_inv_freq(hs, theta, sc, inv);
  if (status != GT_SUCCESS) {
    free(inv);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  /* LlamaRotaryEmbedding.forward: freqs = inv_freq @ position (fp32), cos, sin */
  for (int64_t p = 0; p < max_pos; p++)
    for (int64_t i = 0; i < h; i++) {
      const double a = f32_mul(inv[i], (float)p);
      cos_tab[p * h + i] = (float)cos(a);
      sin_tab[p * h + i] = (float)sin(a);
    }
  free(inv);
  return GT_SUCCESS;
}
