/*
 * gridtrain/layers.h - the layers of the GPT, each with an explicit forward
 * and backward over views of parameters, gradients and activations.
 *
 * Shapes: B sequences of T tokens, N = B*T rows, width C, H heads of size
 * C/H. All pointers are device pointers of the backend. Not collective.
 */
#ifndef GRIDTRAIN_LAYERS_H
#define GRIDTRAIN_LAYERS_H

#include "gridtrain/backend.h"

typedef struct gt_layer_dims {
  int B, T, C, H;
} gt_layer_dims;

/* ---- pre-LayerNorm transformer block ------------------------------------
 *   res2 = x + proj(attention(qkv(ln_1(x))))
 *   out  = res2 + mlp.proj(gelu(mlp.fc(ln_2(res2))))                     */

/* The block's tensors, as views into a gt_params buffer (values or grads). */
typedef struct gt_block_weights {
  float *ln1_w, *ln1_b;     /* (C) */
  float *qkv_w, *qkv_b;     /* (3C, C), (3C) */
  float *proj_w, *proj_b;   /* (C, C), (C) */
  float *ln2_w, *ln2_b;     /* (C) */
  float *fc_w, *fc_b;       /* (4C, C), (4C) */
  float *fcproj_w, *fcproj_b; /* (C, 4C), (C) */
} gt_block_weights;

/* What forward keeps for backward (one micro-batch). */
typedef struct gt_block_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
  float *qkv;                       /* (N,3C) */
  float *att;                       /* (B,H,T,T) softmax probabilities */
  float *atty;                      /* (N,C) attention output */
  float *res2;                      /* (N,C) */
  float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
  float *fc;                        /* (N,4C) before GELU */
  float *gelu;                      /* (N,4C) */
} gt_block_acts;

/* Scratch for backward, shared by all blocks. */
typedef struct gt_block_scratch {
  float *dln;   /* (N,C) */
  float *dqkv;  /* (N,3C) */
  float *datt;  /* (B,H,T,T) */
  float *datty; /* (N,C) */
  float *dfc;   /* (N,4C) */
} gt_block_scratch;

/* out (N,C) "=" from x (N,C); fills a. */
int gt_block_forward(gt_backend *be, const gt_block_weights *w, const gt_block_acts *a,
                     const float *x, float *out, gt_layer_dims d);

/* dres: on entry d(loss)/d(out), on return d(loss)/d(x) (in place).
 * Gradients of the weights accumulate ("+=") into g. */
int gt_block_backward(gt_backend *be, const gt_block_weights *w, const gt_block_weights *g,
                      const gt_block_acts *a, const float *x, float *dres,
                      const gt_block_scratch *s, gt_layer_dims d);

/* ---- language-model head: final LayerNorm, tied projection, loss --------
 *   logits = ln_f(x) wte^T;  loss_i = cross-entropy(logits_i, target_i)   */

typedef struct gt_head_acts {
  float *lnf, *lnf_mean, *lnf_rstd; /* (N,C), (N), (N) */
  float *logits;                    /* (N,V): dlogits after a forward with grad_scale */
  float *losses;                    /* (N) */
} gt_head_acts;

/* Per-token losses into a->losses. grad_scale != 0 turns the logits into
 * dloss/dlogits scaled by grad_scale, ready for gt_lm_head_backward. */
int gt_lm_head_forward(gt_backend *be, const float *wte, const float *lnf_w,
                       const float *lnf_b, const gt_head_acts *a, const float *x,
                       const int32_t *targets, int N, int C, int V, float grad_scale);

/* dx (N,C) "=" d(loss)/d(x); dwte, dlnf_w, dlnf_b "+=". dlnf (N,C) scratch. */
int gt_lm_head_backward(gt_backend *be, const float *wte, float *dwte, const float *lnf_w,
                        float *dlnf_w, float *dlnf_b, const gt_head_acts *a, const float *x,
                        float *dx, float *dlnf, int N, int C, int V);

#endif /* GRIDTRAIN_LAYERS_H */
