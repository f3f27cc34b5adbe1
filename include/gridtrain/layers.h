/*
 * gridtrain/layers.h - the layers of the GPT, each with an explicit forward
 * and backward over views of parameters, gradients and activations.
 *
 * Shapes: B sequences of T tokens, N = B*T rows, width C, H heads of size
 * C/H. All pointers are device pointers of the backend; "void *" tensors
 * (weights of the compute copy, activations and their gradients) are of the
 * compute type dt, "float *" ones (parameter gradients, statistics) fp32.
 * Everything is queued on the backend's compute stream; tensor-parallel
 * collectives go through collectives.h.
 */
#ifndef GRIDTRAIN_LAYERS_H
#define GRIDTRAIN_LAYERS_H

#include "gridtrain/backend.h"
#include "gridtrain/collectives.h"

/* Tensor parallelism (Megatron): with a group tp of P ranks, a block holds
 * H = heads / P heads (its q, k, v rows and the matching input columns of
 * the attention projection) and 4C / P units of the MLP (rows of fc, input
 * columns of mlp.proj). LayerNorms, the biases of the two row-parallel
 * projections and the residual stream are replicated. Each block runs the
 * conjugate pair twice: the row-parallel projections end in an all-reduce
 * of their partial sums (identity in backward), and the LayerNorm input
 * gradients in backward are all-reduced over the column-parallel branches
 * (identity in forward). tp == NULL or a group of size 1: no parallelism. */
/* Sequence parallelism (Megatron, arXiv 2205.05198), on when a layer gets
 * a gt_seq_par and tp has P > 1 ranks: the N = B*T token rows of a
 * micro-batch are cut into P contiguous pieces of N/P rows (rank r holds
 * rows [r N/P, (r+1) N/P)), and everything outside attention and the MLP -
 * the residual stream, the LayerNorms and their statistics, the embedding
 * output - keeps only the rank's piece. Each all-reduce of plain tensor
 * parallelism becomes a reduce-scatter into the piece (forward: after the
 * row-parallel projections; backward: of the LayerNorm input gradients),
 * and the pieces are all-gathered where a full tensor is needed (forward:
 * a LayerNorm's output before the column-parallel projection; backward:
 * the residual gradient before a row-parallel projection, and the kept
 * LayerNorm output again for the weight gradient, as Megatron does). The
 * LayerNorm weight gradients, each rank's over its rows only, are summed
 * over tp after every backward, so they stay replicated. The two buffers
 * are scratch shared by every layer of the model (compute type). */
typedef struct gt_seq_par {
  void *full;  /* (N,C): gathered tensors and partial sums */
  void *piece; /* (N/P,C): a reduce-scattered LayerNorm input gradient */
} gt_seq_par;

/* The normalisation of a block or head: LayerNorm with bias (gpt, eps
 * 1e-5) or RMSNorm without (llama, eps given). */
typedef struct gt_norm {
  bool rms;
  float eps; /* RMSNorm's */
} gt_norm;

/* The architecture's choices inside the one block (gpt.h): the norm, rotary
 * positions on q and k, SwiGLU or GELU, biases. */
typedef struct gt_block_kind {
  gt_norm norm;
  bool rope;   /* rope_forward on q, k after the qkv projection */
  bool swiglu; /* MLP: mlp.fc gives gate and up (2F), silu(gate) * up */
  const float *rope_cos, *rope_sin; /* (max_seq, hs/2) device tables (rope) */
} gt_block_kind;

/* ---- mixture of experts (src/layers/moe.c) ---------------------------------
 * An MoE block's MLP: a router (a linear map of the block's normalised
 * input to E logits, run in fp32) sends each of the N token rows to its k
 * experts (moe_route of backend.h: softmax, top k, gates renormalised to sum
 * to 1); the (token, expert) pairs are put in expert order (moe_assign; an
 * expert past its capacity drops its later pairs, whose tokens then pass on
 * the residual alone) and each expert, an MLP of F units (GELU in gpt,
 * SwiGLU in llama), runs one product per projection over its rows; the
 * outputs come back in token order, weighted by the gates (moe_combine). The
 * block's dense MLP, when it has one, is its shared experts, and adds to
 * the same output. Tensor parallelism splits each expert's units as it
 * splits the dense MLP's (the router and the experts' output biases are
 * replicated): the products give partial sums, which the block's all-reduce
 * completes, and the gates' gradients are summed over tp before the
 * router's backward, so every rank of tp routes and learns alike.
 *
 * Forward waits for the device once per MoE block: the host needs each
 * expert's row count to size its products (a download of 2E int32). */
typedef struct gt_moe_dims {
  int64_t E, k;            /* experts; experts per token */
  int64_t F;               /* one expert's units on this rank */
  double capacity_factor;  /* an expert keeps ceil(factor N k / E) pairs; 0: all */
  float aux_scale;         /* d(loss)/d(L_aux) of this block and micro-batch */
  float z_scale;           /* d(loss)/d(L_z) (backend.h, moe_route_backward) */
  int64_t *load;           /* host (E): += pairs per expert before capacity,
                              at each backward (NULL: none) */
  int64_t *dropped;        /* host: += pairs dropped, at each backward (NULL: none) */
  const struct gt_moe_scratch *scratch; /* shared by the MoE blocks */
} gt_moe_dims;

/* The experts' tensors (compute copy; gradients fp32), G = 2F with SwiGLU,
 * else F. fc_b and proj_b are NULL in llama. */
typedef struct gt_moe_weights {
  const void *router_w;         /* (E, C) */
  const void *fc_w, *fc_b;      /* (E, G, C), (E, G): gate rows then up rows (SwiGLU) */
  const void *proj_w, *proj_b;  /* (E, C, F), (E, C) */
} gt_moe_weights;

typedef struct gt_moe_grads {
  float *router_w, *fc_w, *fc_b, *proj_w, *proj_b;
} gt_moe_grads;

/* What an MoE block's forward keeps for backward (one micro-batch): R =
 * N k rows at most in expert order. */
typedef struct gt_moe_acts {
  float *probs, *lse, *gate;    /* (N,E), (N), (N,k) */
  int32_t *sel, *pos;           /* (N,k) */
  int32_t *counts;              /* device (2E): load, then kept (moe_assign) */
  int32_t *host;                /* pinned host (2E): their copy, which sizes the products */
  void *xp, *h, *act, *y;       /* (R,C), (R,G), (R,F), (R,C) */
} gt_moe_acts;

/* Scratch of the MoE blocks, shared by all of them. */
struct gt_moe_scratch {
  float *logits;          /* (N,E): logits, then their gradient */
  float *x32, *dx32;      /* (N,C): the router's input in fp32 (bf16/fp16 only), its gradient */
  float *w32;             /* (E,C): the router's weight in fp32 (bf16/fp16 only) */
  float *dgate;           /* (N,k) */
  void *dy, *dh, *dact, *dxp; /* (R,C), (R,G), (R,F) (SwiGLU), (R,C) */
  gt_device_event *counted; /* the download of the counts has run */
};
typedef struct gt_moe_scratch gt_moe_scratch;

typedef struct gt_layer_dims {
  int64_t B, T, C; /* C: full width */
  int64_t H;       /* heads on this rank */
  gt_dtype dt;     /* compute type */
  const gt_group *tp;
  const gt_progress *progress; /* polled between kernels (may be NULL) */
  const gt_seq_par *sp;        /* sequence parallelism (NULL: off) */
  int64_t Hkv;                 /* key/value heads on this rank (0: H) */
  int64_t F;                   /* MLP units on this rank (0: 4C / P) */
  gt_block_kind kind;          /* zero: GPT-2's block */
  const gt_moe_dims *moe;      /* an MoE block (NULL: dense); F is then its
                                  dense MLP's (shared experts'), 0 for none */
} gt_layer_dims;

/* ---- pre-norm transformer block -----------------------------------------
 *   res2 = x + proj(attention(rope(qkv(norm_1(x)))))
 *   out  = res2 + mlp.proj(act(mlp.fc(norm_2(res2))))
 * GPT-2: LayerNorm, no rope, act = GELU; Llama: RMSNorm, rope on q and k,
 * act = SwiGLU (mlp.fc gives gate and up), no biases (the bias pointers
 * NULL). */

/* The block's tensors, as views into a gt_params set: weights in the
 * compute copy, gradients in the fp32 gradient buffer. Shapes with tp = P
 * ranks, Cl = C / P, Kl = Hkv hs (this rank's key/value width), F the MLP
 * units here, G = 2F with SwiGLU, else F (P = 1: the full ones). */
typedef struct gt_block_weights {
  const void *ln1_w, *ln1_b;       /* (C) */
  const void *qkv_w, *qkv_b;       /* (Cl+2Kl, C), (Cl+2Kl): this rank's q, k, v rows */
  const void *proj_w, *proj_b;     /* (C, Cl), (C) */
  const void *ln2_w, *ln2_b;       /* (C) */
  const void *fc_w, *fc_b;         /* (G, C), (G): gate rows then up rows with SwiGLU */
  const void *fcproj_w, *fcproj_b; /* (C, F), (C); the four NULL in an MoE block
                                      without shared experts (no dense MLP) */
  gt_moe_weights moe;              /* an MoE block's experts (else all NULL) */
} gt_block_weights;

typedef struct gt_block_grads {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  gt_moe_grads moe;
} gt_block_grads;

/* What forward keeps for backward (one micro-batch). With sequence
 * parallelism the tensors marked * hold the rank's N/P rows only. */
typedef struct gt_block_acts {
  void *ln1;                  /* (N,C) * */
  float *ln1_mean, *ln1_rstd; /* (N), (N) * (mean: LayerNorm only) */
  void *qkv;                  /* (N,Cl+2Kl), q and k rotated with rope */
  float *lse;                 /* (B,H,T) attention softmax log-sum-exp */
  void *atty;                 /* (N,Cl) attention output */
  void *res2;                 /* (N,C) * */
  void *ln2;                  /* (N,C) * */
  float *ln2_mean, *ln2_rstd; /* (N), (N) * (mean: LayerNorm only) */
  void *fc;                   /* (N,G) before the activation */
  void *gelu;                 /* (N,F) the activation's output */
  gt_moe_acts moe;            /* an MoE block's */
} gt_block_acts;

/* Scratch for backward, shared by all blocks (compute type). */
typedef struct gt_block_scratch {
  void *dln;   /* (N,C) */
  void *dqkv;  /* (N,Cl+2Kl) */
  void *datty; /* (N,Cl) */
  void *dfc;   /* (N,G) */
  void *dact;  /* (N,F) the activation's output gradient (SwiGLU only) */
} gt_block_scratch;

/* out (N,C) "=" from x (N,C); fills a. With sequence parallelism x, out
 * (and dres in backward) are the rank's (N/P,C) rows. */
int gt_block_forward(gt_backend *be, const gt_block_weights *w, const gt_block_acts *a,
                     const void *x, void *out, gt_layer_dims d);

/* The attention core of a block's forward alone: a->atty and a->lse from
 * a->qkv (what gt_block_forward computes there; recomputation reruns it). */
int gt_block_attention_forward(gt_backend *be, const gt_block_acts *a, gt_layer_dims d);

/* One position of incremental decoding (a key/value cache): token t of one
 * sequence through the block, x and out (1,C). a->qkv (t+1, 3Cl) holds the
 * q, k, v rows of positions 0..t-1 from earlier calls; this call writes row
 * t and attends over rows 0..t (attention_decode). The other tensors of a
 * are scratch for one row (a->lse is not used). d: B = T = 1, no sequence
 * parallelism (d.sp is ignored). The same kernels as gt_block_forward on one
 * row, so its output is what gt_block_forward gives for row t up to the
 * attention core's summation order. Collective on d.tp. */
int gt_block_decode(gt_backend *be, const gt_block_weights *w, const gt_block_acts *a,
                    int64_t t, const void *x, void *out, gt_layer_dims d);

/* dres: on entry d(loss)/d(out), on return d(loss)/d(x) (in place).
 * Gradients of the weights accumulate ("+=") into g. */
int gt_block_backward(gt_backend *be, const gt_block_weights *w, const gt_block_grads *g,
                      const gt_block_acts *a, const void *x, void *dres,
                      const gt_block_scratch *s, gt_layer_dims d);

/* ---- the backward in two halves (zero-bubble pipeline schedules) ------
 * B, gt_block_backward_input: d(loss)/d(x) (dres, in place, as above) and
 * the norms' weight gradients, the pipeline's critical path; W,
 * gt_block_backward_weights: the four projections' weight and bias
 * gradients, which a schedule may run later to fill its bubbles (Qi et al.,
 * "Zero Bubble Pipeline Parallelism", ICLR 2024). B leaves what W needs of
 * the micro-batch in keep (the caller's buffers, one set per block and
 * micro-batch whose W is pending: (2 C + G + QKV) N elements of the compute
 * type, G the local mlp.fc rows (2 F with SwiGLU) and QKV the local q, k, v
 * rows), and W also reads the
 * activations a and keeps none of them alive itself: the caller keeps a
 * until W has run. B then W accumulates into g bit for bit what
 * gt_block_backward accumulates (every backend computes a projection's
 * input and weight gradients by separate products). With tensor
 * parallelism B is collective on d.tp as gt_block_backward is, W is not.
 * Not with sequence parallelism yet (GT_ERR_INPUT). */
typedef struct gt_block_dout {
  void *dfcproj; /* (N,C) the MLP projection's output gradient */
  void *dfc;     /* (N,G) mlp.fc's output gradient */
  void *dproj;   /* (N,C) the attention projection's output gradient */
  void *dqkv;    /* (N,QKV) the q, k, v projection's output gradient */
} gt_block_dout;

int gt_block_backward_input(gt_backend *be, const gt_block_weights *w, const gt_block_grads *g,
                            const gt_block_acts *a, const void *x, void *dres,
                            const gt_block_scratch *s, const gt_block_dout *keep,
                            gt_layer_dims d);

int gt_block_backward_weights(gt_backend *be, const gt_block_grads *g, const gt_block_acts *a,
                              const gt_block_dout *keep, gt_layer_dims d);

/* ---- token + position embedding (vocabulary-parallel) ------------------
 * The rank holds rows [v0, v0 + nv) of wte; the partial embeddings are
 * summed over tp (wpe is added by tp rank 0 only); with sp (sequence
 * parallelism, may be NULL) reduce-scattered, so out is the rank's (N/P,C)
 * rows. */
int gt_embedding_forward(gt_backend *be, gt_dtype dt, void *out, const int32_t *tokens,
                         const void *wte, const void *wpe, int64_t B, int64_t T, int64_t C,
                         int64_t v0, int64_t nv, const gt_group *tp, const gt_seq_par *sp);

/* dwte (this rank's rows) and dwpe "+=" from dout (N,C), replicated over tp;
 * with sp, dout is the rank's (N/P,C) rows, all-gathered first. */
int gt_embedding_backward(gt_backend *be, gt_dtype dt, float *dwte, float *dwpe,
                          const void *dout, const int32_t *tokens, int64_t B, int64_t T,
                          int64_t C, int64_t v0, int64_t nv, const gt_group *tp,
                          const gt_seq_par *sp);

/* ---- language-model head: final LayerNorm, tied projection, loss --------
 *   logits = ln_f(x) wte^T;  loss_i = cross-entropy(logits_i, target_i)
 * Vocabulary-parallel: this rank's wte rows [vocab_first, vocab_first +
 * vocab_real) (Vl = vocab_rows rows with padding) give logits (N, Vl);
 * the softmax statistics of every rank are all-gathered over tp (3 floats
 * per row and rank), so no rank ever holds the full logits, and padding
 * rows never enter the loss. */
typedef struct gt_head_dims {
  int64_t N, C;
  gt_norm norm; /* ln_f's kind (zero: LayerNorm) */
  int64_t vocab_rows;  /* local rows (Vl), with padding */
  int64_t vocab_first; /* the first one's row in the whole vocabulary */
  int64_t vocab_real;  /* real rows (the rest is padding) */
  gt_dtype dt;
  const gt_group *tp;
  const gt_seq_par *sp; /* sequence parallelism: x, dx, lnf are (N/P,C) rows */
} gt_head_dims;

typedef struct gt_head_acts {
  void *lnf;                  /* (N,C) (sp: N/P rows) */
  float *lnf_mean, *lnf_rstd; /* (N), (N) (sp: N/P) */
  void *logits;               /* (N,Vl): dlogits after a forward with dlogit_scale */
  float *losses;              /* (N) fp32 */
  float *stats;               /* (N,3) this rank's softmax statistics */
} gt_head_acts;

/* wte below is the head's weight: the token embedding when tied, else
 * lm_head (the same rows, vocabulary-parallel); lnf_b is NULL for RMSNorm.
 * Per-token losses into a->losses (identical on every tp rank). dlogit_scale
 * != 0 turns the logits into dloss/dlogits scaled by dlogit_scale, ready for
 * gt_lm_head_backward. stats_all: scratch (tp size, N, 3). */
int gt_lm_head_forward(gt_backend *be, const void *wte, const void *lnf_w, const void *lnf_b,
                       const gt_head_acts *a, const void *x, const int32_t *targets,
                       float *stats_all, gt_head_dims d, float dlogit_scale);

/* The first half of gt_lm_head_forward alone: a->lnf (and its statistics)
 * "=" ln_f(x), a->logits (N, Vl) "=" this rank's vocabulary rows' logits
 * (padding rows give 0); no loss (decoding). Collective on d.tp with
 * sequence parallelism, else not. */
int gt_lm_head_logits(gt_backend *be, const void *wte, const void *lnf_w, const void *lnf_b,
                      const gt_head_acts *a, const void *x, gt_head_dims d);

/* dx (N,C) "=" d(loss)/d(x); dwte, dlnf_w, dlnf_b "+=". dlnf (N,C) scratch.
 * dwte NULL: the head weight's gradient is left to
 * gt_lm_head_backward_weights (zero-bubble schedules run it later, as W). */
int gt_lm_head_backward(gt_backend *be, const void *wte, float *dwte, const void *lnf_w,
                        float *dlnf_w, float *dlnf_b, const gt_head_acts *a, const void *x,
                        void *dx, void *dlnf, gt_head_dims d);

/* The head weight's gradient alone: dwte "+=" dlogits^T ln_f(x), from the
 * activations a gt_lm_head_backward with dwte NULL left (a->logits holds
 * the dlogits, a->lnf the normalized input). Without sequence parallelism
 * (which the split backward refuses); not collective. */
int gt_lm_head_backward_weights(gt_backend *be, float *dwte, const gt_head_acts *a,
                                gt_head_dims d);

#endif /* GRIDTRAIN_LAYERS_H */
