/*
 * gridtrain/rope.h - the angle tables of rotary position embeddings (RoPE),
 * computed on the host exactly as Hugging Face transformers 4.44 computes
 * them for Llama (modeling_rope_utils.py and LlamaRotaryEmbedding), so that
 * imported weights see the positions they were trained with. The backend's
 * rope_forward / rope_backward (backend.h) apply them; the caller uploads
 * the tables to device memory once.
 *
 * For a head of size hs (even; the whole head rotates, transformers'
 * partial_rotary_factor = 1) and h = hs/2, entry i < h of the inverse
 * frequencies is, with every step an fp32 operation as torch does it on
 * fp32 tensors:
 *   default  inv_freq[i] = 1 / theta^(fp32(2i) / fp32(hs))
 *   linear   inv_freq[i] / factor
 *   llama3   (rope_type "llama3", Llama 3.1): with old = the original
 *            context length, the wavelength wl = 2 pi / inv_freq[i],
 *            low_wl = old / low_freq_factor, high_wl = old / high_freq_factor:
 *              wl < high_wl             inv_freq[i]             (kept)
 *              wl > low_wl              inv_freq[i] / factor
 *              otherwise (in between)   (1 - s) inv_freq[i] / factor + s inv_freq[i],
 *                                       s = (old / wl - low_freq_factor) /
 *                                           (high_freq_factor - low_freq_factor)
 * (theta^e is the fp32 power, rounded once; the attention factor of these
 * three types is 1.) Position p's angles are a = fp32(inv_freq[i] * p),
 * and the tables hold cos(a) and sin(a) rounded once to fp32: the first
 * half of transformers' cos/sin rows (its second half repeats the first).
 *
 * Pure host functions: no backend, not collective; host memory in and out.
 */
#ifndef GRIDTRAIN_ROPE_H
#define GRIDTRAIN_ROPE_H

#include <stdint.h>

/* transformers' rope_scaling.rope_type (absent: default). */
typedef enum {
  GT_ROPE_DEFAULT = 0, /* no scaling */
  GT_ROPE_LINEAR,      /* positions interpolated by factor */
  GT_ROPE_LLAMA3       /* Llama 3.1's frequency-dependent scaling */
} gt_rope_type;

/* transformers' config.rope_scaling; the fields a type does not use are
 * ignored. */
typedef struct gt_rope_scaling {
  gt_rope_type type;
  double factor;                            /* linear, llama3: > 0 (8 in Llama 3.1) */
  double low_freq_factor;                   /* llama3: > 0 (1 in Llama 3.1) */
  double high_freq_factor;                  /* llama3: > low_freq_factor (4) */
  int64_t original_max_position_embeddings; /* llama3: > 0 (8192) */
} gt_rope_scaling;

/* inv_freq (hs/2 floats, host) "=" the inverse frequencies above. hs: the
 * head size (even, >= 2); theta: rope_theta (> 0); scaling NULL: default.
 * GT_ERR_INPUT for an odd head size or a parameter out of range (the
 * message names it and says what it must be). */
int gt_rope_inv_freq(int64_t hs, double theta, const gt_rope_scaling *scaling, float *inv_freq);

/* cos, sin (max_pos, hs/2) fp32 host tables "=": row p holds cos and sin of
 * the angles of position p, 0 <= p < max_pos (1 <= max_pos <= 2^24, so
 * that every position is exact in fp32). Arguments and errors as
 * gt_rope_inv_freq, plus GT_ERR_INPUT for max_pos out of range. */
int gt_rope_tables(int64_t hs, int64_t max_pos, double theta, const gt_rope_scaling *scaling,
                   float *cos, float *sin);

#endif /* GRIDTRAIN_ROPE_H */
