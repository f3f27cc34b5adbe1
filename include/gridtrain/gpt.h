/*
 * gridtrain/gpt.h - a GPT-2 style language model.
 *
 * Token + learned position embedding, `layers` pre-LayerNorm blocks (causal
 * multi-head self-attention, GELU MLP of width 4*dim), final LayerNorm, LM
 * head tied to the token embedding, mean cross-entropy. Forward and backward
 * are explicit; activations for one micro-batch live in one device buffer.
 *
 * Parameters (gt_params, in this order; weights are (out, in)):
 *   wte (vocab, dim)   wpe (max_seq, dim)
 *   h.L.ln_1.weight, h.L.ln_1.bias             (dim)
 *   h.L.attn.qkv.weight (3 dim, dim)  h.L.attn.qkv.bias (3 dim)
 *       rows [0,dim) q, [dim,2 dim) k, [2 dim,3 dim) v; head j of each is
 *       rows [j*hs, (j+1)*hs), hs = dim/heads
 *   h.L.attn.proj.weight (dim, dim)   h.L.attn.proj.bias (dim)
 *   h.L.ln_2.weight, h.L.ln_2.bias             (dim)
 *   h.L.mlp.fc.weight (4 dim, dim)    h.L.mlp.fc.bias (4 dim)
 *   h.L.mlp.proj.weight (dim, 4 dim)  h.L.mlp.proj.bias (dim)
 *   ln_f.weight, ln_f.bias                     (dim)
 * Initialisation (GPT-2): weights and embeddings N(0, 0.02), the two
 * residual projections N(0, 0.02/sqrt(2 layers)), biases 0, LayerNorm
 * weights 1. Weight decay applies to matrices and embeddings only.
 */
#ifndef GRIDTRAIN_GPT_H
#define GRIDTRAIN_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "gridtrain/backend.h"
#include "gridtrain/params.h"

typedef struct gt_gpt_shape {
  int layers, heads, dim, max_seq, vocab;
} gt_gpt_shape;

typedef struct gt_gpt gt_gpt;

/* Create the model with activations for micro-batches of up to batch
 * sequences of up to seq tokens (seq <= max_seq). Not collective. */
int gt_gpt_create(gt_backend *be, const gt_gpt_shape *shape, int batch, int seq,
                  gt_gpt **model);

int gt_gpt_destroy(gt_gpt **model);

/* The parameter set (values, gradients, named views). */
gt_params *gt_gpt_params(gt_gpt *m);

/* Initialise the weights from seed (GPT-2 scheme above). */
int gt_gpt_init(gt_gpt *m, uint64_t seed);

/* Forward one micro-batch: tokens and targets are host arrays (B,T) int32.
 * *loss_sum (host) gets the sum of the B*T token losses. With grad_scale
 * != 0 the forward also prepares backward, for the loss
 * grad_scale * sum(token losses). */
int gt_gpt_forward(gt_gpt *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                   float grad_scale, double *loss_sum);

/* Backward of the last forward (which had grad_scale != 0): gradients
 * accumulate ("+=") into gt_gpt_params(m)->grads. */
int gt_gpt_backward(gt_gpt *m);

/* Bytes of the activation and scratch buffer. */
size_t gt_gpt_activation_bytes(const gt_gpt *m);

/* Training FLOPs per token (forward + backward) of this shape at sequence
 * length T: 6 * (matrix parameters incl. the tied head) + 12 * layers * dim * T
 * for attention scores and mixing. */
double gt_gpt_flops_per_token(const gt_gpt_shape *shape, int T);

/* Parameter count (with the tied embedding counted once). */
size_t gt_gpt_param_count(const gt_gpt_shape *shape);

#endif /* GRIDTRAIN_GPT_H */
