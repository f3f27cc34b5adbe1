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
#include "gridtrain/comm.h"

/* Tensor parallelism (Megatron): with a group tp of P ranks, a block holds
 * H = heads / P heads (its q, k, v rows and the matching input columns of
 * the attention projection) and 4C / P units of the MLP (rows of fc, input
 * columns of mlp.proj). LayerNorms, the biases of the two row-parallel
 * projections and the residual stream are replicated. Each block runs the
 * conjugate pair twice: the row-parallel projections end in an all-reduce
 * of their partial sums (identity in backward), and the LayerNorm input
 * gradients in backward are all-reduced over the column-parallel branches
 * (identity in forward). tp == NULL or a group of size 1: no parallelism. */
typedef struct gt_layer_dims {
  int B, T, C; /* C: full width */
  int H;       /* heads on this rank */
  const gt_group *tp;
  const gt_progress *progress; /* polled between backward kernels (may be NULL) */
} gt_layer_dims;

/* ---- pre-LayerNorm transformer block ------------------------------------
 *   res2 = x + proj(attention(qkv(ln_1(x))))
 *   out  = res2 + mlp.proj(gelu(mlp.fc(ln_2(res2))))                     */

/* The block's tensors, as views into a gt_params buffer (values or grads).
 * Shapes with tp = P ranks, Cl = C / P, F = 4C / P (P = 1: the full ones). */
typedef struct gt_block_weights {
  float *ln1_w, *ln1_b;     /* (C) */
  float *qkv_w, *qkv_b;     /* (3Cl, C), (3Cl): this rank's q, k, v rows */
  float *proj_w, *proj_b;   /* (C, Cl), (C) */
  float *ln2_w, *ln2_b;     /* (C) */
  float *fc_w, *fc_b;       /* (F, C), (F) */
  float *fcproj_w, *fcproj_b; /* (C, F), (C) */
} gt_block_weights;

/* What forward keeps for backward (one micro-batch). */
typedef struct gt_block_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
  float *qkv;                       /* (N,3Cl) */
  float *att;                       /* (B,H,T,T) softmax probabilities */
  float *atty;                      /* (N,Cl) attention output */
  float *res2;                      /* (N,C) */
  float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
  float *fc;                        /* (N,F) before GELU */
  float *gelu;                      /* (N,F) */
} gt_block_acts;

/* Scratch for backward, shared by all blocks. */
typedef struct gt_block_scratch {
  float *dln;   /* (N,C) */
  float *dqkv;  /* (N,3Cl) */
  float *datt;  /* (B,H,T,T) */
  float *datty; /* (N,Cl) */
  float *dfc;   /* (N,F) */
} gt_block_scratch;

/* out (N,C) "=" from x (N,C); fills a. */
int gt_block_forward(gt_backend *be, const gt_block_weights *w, const gt_block_acts *a,
                     const float *x, float *out, gt_layer_dims d);

/* dres: on entry d(loss)/d(out), on return d(loss)/d(x) (in place).
 * Gradients of the weights accumulate ("+=") into g. */
int gt_block_backward(gt_backend *be, const gt_block_weights *w, const gt_block_weights *g,
                      const gt_block_acts *a, const float *x, float *dres,
                      const gt_block_scratch *s, gt_layer_dims d);

/* ---- token + position embedding (vocabulary-parallel) ------------------
 * The rank holds rows [v0, v0 + nv) of wte; the partial embeddings are
 * summed over tp (wpe is added by tp rank 0 only). */
int gt_embedding_forward(gt_backend *be, float *out, const int32_t *tokens, const float *wte,
                         const float *wpe, int B, int T, int C, int v0, int nv,
                         const gt_group *tp);

/* dwte (this rank's rows) and dwpe "+=" from dout (N,C), replicated over tp. */
int gt_embedding_backward(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                          const int32_t *tokens, int B, int T, int C, int v0, int nv);

/* ---- language-model head: final LayerNorm, tied projection, loss --------
 *   logits = ln_f(x) wte^T;  loss_i = cross-entropy(logits_i, target_i)
 * Vocabulary-parallel: this rank's wte rows [v0, v0 + nv) (Vl rows with
 * padding) give logits (N, Vl); the softmax statistics of every rank are
 * all-gathered over tp (3 floats per row and rank), so no rank ever holds
 * the full logits, and padding rows never enter the loss. */
typedef struct gt_head_dims {
  int N, C;
  int Vl, v0, nv; /* local rows (with padding), first row, real rows */
  const gt_group *tp;
} gt_head_dims;

typedef struct gt_head_acts {
  float *lnf, *lnf_mean, *lnf_rstd; /* (N,C), (N), (N) */
  float *logits;                    /* (N,Vl): dlogits after a forward with grad_scale */
  float *losses;                    /* (N) */
  float *stats;                     /* (N,3) this rank's softmax statistics */
} gt_head_acts;

/* Per-token losses into a->losses (identical on every tp rank). grad_scale
 * != 0 turns the logits into dloss/dlogits scaled by grad_scale, ready for
 * gt_lm_head_backward. stats_all: scratch (tp size, N, 3). */
int gt_lm_head_forward(gt_backend *be, const float *wte, const float *lnf_w,
                       const float *lnf_b, const gt_head_acts *a, const float *x,
                       const int32_t *targets, float *stats_all, gt_head_dims d,
                       float grad_scale);

/* dx (N,C) "=" d(loss)/d(x); dwte, dlnf_w, dlnf_b "+=". dlnf (N,C) scratch. */
int gt_lm_head_backward(gt_backend *be, const float *wte, float *dwte, const float *lnf_w,
                        float *dlnf_w, float *dlnf_b, const gt_head_acts *a, const float *x,
                        float *dx, float *dlnf, gt_head_dims d);

#endif /* GRIDTRAIN_LAYERS_H */
