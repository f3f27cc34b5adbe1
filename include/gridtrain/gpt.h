/*
 * gridtrain/gpt.h - a GPT-2 style language model.
 *
 * Token + learned position embedding, `layers` pre-LayerNorm blocks (causal
 * multi-head self-attention, GELU MLP of width 4*dim), final LayerNorm, LM
 * head tied to the token embedding, mean cross-entropy. Forward and backward
 * are explicit; activations for one micro-batch live in one device buffer,
 * in the compute type (fp32, bf16 or fp16) but for the fp32 statistics
 * (LayerNorm, attention log-sum-exp, softmax) and losses. Everything is
 * queued on the backend's compute stream: no call waits for the device,
 * except where a host buffer is reused (a slot's token upload).
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/backend.h"
#include "gridtrain/collectives.h"
#include "gridtrain/config_enums.h"
#include "gridtrain/params.h"
#include "gridtrain/rope.h"

#define GT_GPT_MAX_CHUNKS 64 /* model chunks per rank (interleaved schedule) */

/* The model's architecture and sizes. A shape with only the first five
 * fields set (the others 0) is GPT-2's; the gt_gpt_shape_* accessors below
 * resolve the zeros. */
typedef struct gt_gpt_shape {
  int layers, heads, dim, max_seq, vocab;
  gt_model_type arch;    /* GT_MODEL_GPT or GT_MODEL_LLAMA (docs/models.md) */
  int kv_heads;          /* key/value heads (0: heads) */
  int ffn_dim;           /* MLP width (0: 4 dim for gpt, Llama's rule for llama) */
  gt_tristate tie;       /* head = wte (auto: gpt on, llama off) */
  float norm_eps;        /* llama's RMSNorm epsilon (0: 1e-5) */
  double rope_theta;     /* llama (0: 10000) */
  gt_rope_scaling rope;  /* llama */
  /* mixture of experts (moe.h, docs/models.md); experts 0: every block dense */
  int experts, top_k, moe_every; /* moe_every 0: 1 */
  int expert_ffn;        /* one expert's MLP width (0: ffn_dim) */
  int shared_experts;    /* the dense MLP of an MoE block has shared_experts *
                            expert_ffn units (0: none) */
  double capacity_factor; /* 0: dropless */
  double aux_loss, z_loss; /* coefficients of the router's losses */
} gt_gpt_shape;

struct gt_config;
/* The shape a configuration's [model] section describes. Not collective. */
gt_gpt_shape gt_gpt_shape_config(const struct gt_config *cfg);

/* Resolved fields of a shape: key/value heads, MLP width, whether the head
 * is tied to wte, the head size, the q/k/v rows of a block ((heads +
 * 2 kv_heads) head size) and whether the block has biases (gpt). */
int gt_gpt_shape_kv_heads(const gt_gpt_shape *s);
int gt_gpt_shape_ffn(const gt_gpt_shape *s);
bool gt_gpt_shape_tied(const gt_gpt_shape *s);
bool gt_gpt_shape_llama(const gt_gpt_shape *s);
int gt_gpt_shape_head_size(const gt_gpt_shape *s);
float gt_gpt_shape_norm_eps(const gt_gpt_shape *s);

/* Mixture of experts: whether block `layer` routes its tokens to experts
 * (experts > 0 and layer a multiple of moe_every), one expert's MLP width,
 * and the width of an MoE block's dense MLP (its shared experts; 0: none). */
bool gt_gpt_shape_moe_block(const gt_gpt_shape *s, int layer);
int gt_gpt_shape_expert_ffn(const gt_gpt_shape *s);
int gt_gpt_shape_shared_ffn(const gt_gpt_shape *s);

/* The first [model] key in which two shapes differ (resolved values), with
 * both values as text. weights_only: only what the weights' shapes depend
 * on (a llama's seq_len, norm_eps and rope keys may differ). */
typedef struct gt_gpt_shape_field {
  const char *key;
  char a[32], b[32];
} gt_gpt_shape_field;
bool gt_gpt_shape_differ(const gt_gpt_shape *a, const gt_gpt_shape *b, bool weights_only,
                         gt_gpt_shape_field *f);

typedef struct gt_gpt gt_gpt;

/* The part of the model one rank holds: blocks [layer_begin, layer_end) of a
 * pipeline stage, the token embedding on the first stage, final LayerNorm,
 * head and loss on the last, each split over the tensor-parallel group tp
 * (heads, MLP units and vocabulary rows; vocab padded to a multiple of the
 * group size). With pp > 1 the last stage keeps its own copy of wte for the
 * tied head (registered last, counted = false); the two copies' gradients
 * are summed over the embedding group (gt_gpt_tied_grad). */
/* Activation recomputation ([model] recompute, gt_recompute in config.h):
 * what a micro-batch in flight keeps of each block between its forward and
 * its backward.
 *   NONE       everything backward reads;
 *   ATTENTION  all but the attention core's output and softmax statistics,
 *              which backward recomputes from the kept q, k, v (selective
 *              recomputation: the cheapest FLOPs per byte kept);
 *   BLOCK      only the block's input: backward reruns the block's forward
 *              into buffers shared by all blocks and micro-batches.
 * The same kernels on the same inputs give the same bits, so every mode
 * trains bit for bit like NONE; the extra forwards are timed under
 * recompute_event. */

/* The name ("none", "attention", "block") and the mode of a name (-1 if
 * not one). */
const char *gt_recompute_name(gt_recompute r);
int gt_recompute_parse(const char *name);

typedef struct gt_gpt_part {
  int layer_begin, layer_end;
  bool first, last;
  gt_group tp;
  gt_recompute recompute;   /* what a slot keeps (above) */
  int recompute_event;      /* timer event of the recomputation (-1: none) */
  bool seq_par;             /* sequence parallelism over tp (layers.h): the
                               residual stream in N/tp-row pieces; needs
                               B*T a multiple of the tp size */
  int split_sets;           /* a split schedule (zb-h1): sets of the blocks'
                               projection output gradients kept from
                               gt_gpt_backward_input to _weights, one per
                               micro-batch whose W is pending (schedule.h,
                               gt_schedule_w_backlog); 0: none. Not with
                               seq_par or recomputation */
  /* Model chunks (the interleaved schedule, schedule.h): chunks > 1 splits
   * the part into chunks non-contiguous block ranges [chunk_begin[c],
   * chunk_end[c]), ascending, with layer_begin / layer_end their span; the
   * token embedding sits in chunk 0 of a first stage, the head in the last
   * chunk of a last stage. chunk_slots[c] activation slots belong to chunk
   * c (together the `slots` of gt_gpt_create) and hold only its blocks.
   * chunks 0 or 1: one chunk [layer_begin, layer_end) with every slot. */
  int chunks;
  int chunk_begin[GT_GPT_MAX_CHUNKS], chunk_end[GT_GPT_MAX_CHUNKS];
  int chunk_slots[GT_GPT_MAX_CHUNKS];
} gt_gpt_part;

/* Place part on pipeline stage s of p: with `chunks` model chunks per stage
 * (1: none), chunk c of stage s is virtual stage c p + s of the split
 * vfirst[0 .. p chunks] (schedule.h's gt_pipeline_split over p chunks
 * stages) and gets chunk_slots[c] activation slots (ignored for one chunk).
 * Sets layer_begin, layer_end, first, last and the chunk fields. */
void gt_gpt_part_place(gt_gpt_part *part, const int *vfirst, int p, int s, int chunks,
                       const int *chunk_slots);

/* The activation slot of chunk c's micro-batch mb (slots of a chunk are
 * reused in micro-batch order: mb mod chunk_slots[c]), and the chunk a slot
 * belongs to. */
int gt_gpt_chunk_slot(const gt_gpt *m, int chunk, int mb);
int gt_gpt_chunks(const gt_gpt *m);

/* The whole model on one rank (single stage, no tensor parallelism). */
gt_gpt_part gt_gpt_whole(const gt_gpt_shape *shape);

/* ready is called during backward when the parameters [first,
 * first + count) of gt_gpt_params(m)->list have their final gradient for
 * this micro-batch; progress is polled between the kernels of backward. */
typedef struct gt_grad_hook {
  int (*ready)(void *ctx, int first, int count);
  void *ctx;
  gt_progress progress;
  /* Optional (ZeRO stage 2: the gradients have no flat buffer): before the
   * backward of a gradient unit [first, first + count) (gt_gpt_grad_units)
   * the model asks where its gradients go this micro-batch; *base is the
   * gradient of parameter first, the others at their flat offsets from it.
   * The model holds the pointers only until that unit's ready. */
  int (*grads)(void *ctx, int first, int count, float **base);
  bool every_microbatch; /* the pipeline passes the hook to every
                            micro-batch's backward, not only the last */
} gt_grad_hook;

/* ZeRO stage 3: the compute weights are in dp pieces, and the model asks
 * for each unit's weights just before it uses them:
 *   forward   [wte, wpe] (first stage), each block, the head's [ln_f] or
 *             [ln_f, wte copy] (pp > 1), and wte (one stage);
 *   backward  the head's units, each block from the last (recomputation
 *             included); the embedding's backward reads no weights.
 * acquire gives the unit [first, first + count)'s weights: *base is
 * parameter first's compute copy, the others at their flat offsets from it;
 * valid until the unit's release, after which the model holds no pointer
 * into it (the views are reset to NULL). next_first / next_count name the
 * unit the model will ask for next in this pass (next_count 0: none): the
 * hook may start gathering it now (prefetch). progress is polled between the
 * kernels of forward and backward. At most three units are held or
 * prefetched at once (gt_gpt_gather_sizes). */
typedef struct gt_weight_hook {
  int (*acquire)(void *ctx, int first, int count, int next_first, int next_count,
                 const void **base);
  int (*release)(void *ctx, int first, int count);
  void *ctx;
  gt_progress progress;
} gt_weight_hook;

/* Install (hook != NULL) or remove the weight hook; required (GT_ERR_INTERNAL
 * at the first forward otherwise) when the compute copy is sharded. */
void gt_gpt_set_weight_hook(gt_gpt *m, const gt_weight_hook *hook);

/* The buffers (flat elements each) the weight hook needs to serve this part:
 * sizes[0] for the largest unit (an embedding or head), sizes[1] and
 * sizes[2] for the largest other (a block): what is held and prefetched at
 * once. Not collective. */
#define GT_GPT_GATHER_BUFS 3
void gt_gpt_gather_sizes(const gt_gpt *m, size_t sizes[GT_GPT_GATHER_BUFS]);

/* The gradient units of this rank's part, in the order backward finishes
 * them: the head's LayerNorm, the last stage's copy of wte (pp > 1), each
 * block from the last, wpe and wte (first stage; with one stage wte is used
 * from the head's backward to the embedding's). Parameter ranges
 * [first[i], first[i] + count[i]); returns the number of units (at most
 * max). Not collective. */
int gt_gpt_grad_units(const gt_gpt *m, int *first, int *count, int max);

/* Create this rank's part with weights and activations in the compute type
 * dtype and activations for `slots` micro-batches in flight, each of up to
 * batch sequences of up to seq tokens (seq <= max_seq). split: how the
 * parameters are split over the data-parallel ranks (ZeRO; params.h, the
 * data-parallel path's choice: gt_dp_params_split), NULL for whole. Not
 * collective. */
int gt_gpt_create(gt_backend *be, const gt_gpt_shape *shape, const gt_gpt_part *part,
                  const gt_params_split *split, gt_dtype dtype, int batch, int seq, int slots,
                  gt_gpt **model);

int gt_gpt_destroy(gt_gpt **model);

/* The parameter set (values, gradients, named views). */
gt_params *gt_gpt_params(gt_gpt *m);

/* Initialise the weights from seed (GPT-2 scheme above), as slices of the
 * logical tensors: the same model whatever the layout. */
int gt_gpt_init(gt_gpt *m, uint64_t seed);

/* Forward one micro-batch in activation slot `slot`, through the blocks of
 * the slot's chunk (gt_gpt_chunk_slot). tokens (first stage, chunk 0) and
 * targets (last stage, last chunk) are host arrays (B,T) int32, copied before the
 * call returns; other stages read their input from gt_gpt_input(m, slot)
 * and leave their output in gt_gpt_output(m, slot). On the last stage the
 * sum of the B*T token losses is added to *loss_acc (one double on the
 * device; may be NULL elsewhere). With dlogit_scale != 0 the forward also
 * prepares backward, for the loss dlogit_scale * sum(token losses).
 * Collective on the tensor-parallel group. */
int gt_gpt_forward(gt_gpt *m, int slot, const int32_t *tokens, const int32_t *targets, int B,
                   int T, float dlogit_scale, double *loss_acc);

/* Backward of the slot's forward (which had dlogit_scale != 0): gradients
 * accumulate ("+=") into gt_gpt_params(m)->grads. On stages other than the
 * last, gt_gpt_grad(m, slot) holds d(loss)/d(output) on entry; on every
 * stage but the first it holds d(loss)/d(input) on return. hook may be
 * NULL. Collective on the tensor-parallel group. */
int gt_gpt_backward(gt_gpt *m, int slot, const gt_grad_hook *hook);

/* gt_gpt_backward in two halves (part.split_sets > 0; zero-bubble
 * schedules, schedule.h), the projection output gradients kept in set
 * `set` (< split_sets) in between: _input is everything but the blocks' projection
 * weight gradients (the head, the blocks' input and norm gradients, the
 * embedding: gt_gpt_grad holds d(loss)/d(input) on return, as above), and
 * hook->ready for the head and the embedding; _weights adds the blocks'
 * projection gradients of that slot (layers.h, gt_block_backward_weights)
 * and calls hook->ready for the blocks. Between the two the slot keeps its
 * activations: its next forward comes after _weights. Together they add
 * bit for bit what gt_gpt_backward adds. Not with a weight hook (ZeRO 3) or
 * a hook's per-micro-batch gradient buffers (ZeRO 2): GT_ERR_INPUT.
 * _input is collective on the tensor-parallel group, _weights is not. */
int gt_gpt_backward_input(gt_gpt *m, int slot, int set, const gt_grad_hook *hook);
int gt_gpt_backward_weights(gt_gpt *m, int slot, int set, const gt_grad_hook *hook);

/* Mixture of experts: add the pairs that each expert of each of this
 * rank's MoE blocks got in the micro-batches whose backward ran since the
 * last call (each training micro-batch once, whichever step's call ran its
 * forward: pipedream-2bw runs the next batch's first ones early) into
 * load[layer * experts + e] (layer: the block's index in the whole model),
 * and the pairs dropped past capacity into *dropped; the counters restart.
 * Nothing without experts. Not collective. */
void gt_gpt_moe_take(gt_gpt *m, double *load, double *dropped);

/* Which weight version the passes from here on compute with: the compute
 * copy (false, the default) or the params' stash, the older version
 * (true; gt_params_stash_create first). pipedream-2bw runs a step's
 * micro-batches with the older version and the next step's first forwards
 * with the newer one. Not with ZeRO 3 (whose gathers bind the weights).
 * Not collective. */
int gt_gpt_use_stash(gt_gpt *m, bool stash);

/* Point the passes' gradient pointers at the params' gradient views again
 * (after gt_params_grads_swap). Not with ZeRO 2-3 (whose backward writes
 * into buffers of its own). Not collective. */
void gt_gpt_rebind_grads(gt_gpt *m);

/* ---- incremental decoding: a key/value cache ----------------------------
 * Generation runs the model one position at a time: each call takes the
 * token at the next position, runs every block on that one row, each
 * attending over the q, k, v rows of the earlier positions that the cache
 * keeps per block (attention_decode of backend.h), and returns the logits
 * of the token after it. The kernels are the forward's, on one row. A cache
 * needs a part that holds the whole model (one pipeline stage: first and
 * last, one chunk), split over its tensor-parallel group or not; sequence
 * parallelism does not apply to one row; under ZeRO 3 the weight hook
 * gathers each unit as in a forward. The cache does not touch the
 * activation slots. */
typedef struct gt_gpt_cache gt_gpt_cache;

/* A cache for up to len positions (1 <= len <= max_seq) of one sequence:
 * per block the (len, 3 dim / tp) q, k, v rows in the compute type, and one
 * row of scratch. GT_ERR_INPUT when the part is not the whole model. Not
 * collective. */
int gt_gpt_cache_create(gt_gpt *m, int len, gt_gpt_cache **cache);
int gt_gpt_cache_destroy(gt_gpt_cache **cache);

/* The positions the cache holds (the next token's position), the most it
 * can, and forgetting them all. */
int gt_gpt_cache_length(const gt_gpt_cache *c);
int gt_gpt_cache_capacity(const gt_gpt_cache *c);
void gt_gpt_cache_reset(gt_gpt_cache *c);

/* Run token (in [0, vocab)) at position gt_gpt_cache_length(c) and append
 * it; logits (vocab floats, host) "=" the logits of the token after it over
 * the whole vocabulary (the tp pieces gathered: the same bits on every rank
 * of the group). GT_ERR_INPUT when the cache is full or the token out of
 * range. Waits for the device. Collective on the tensor-parallel group
 * (and on dp through the weight hook under ZeRO 3). */
int gt_gpt_decode(gt_gpt *m, gt_gpt_cache *c, int32_t token, float *logits);

/* Device buffers (gt_gpt_stream_rows(m, B, T), dim) of a slot in the
 * compute type: stage input, stage output, and the gradient travelling
 * backward. */
void *gt_gpt_input(gt_gpt *m, int slot);
void *gt_gpt_output(gt_gpt *m, int slot);
void *gt_gpt_grad(gt_gpt *m, int slot);

/* The rows of a micro-batch of B sequences of T tokens that this rank holds
 * of the residual stream: B*T, or B*T / tp with sequence parallelism (its
 * rows [tp_rank B*T/tp, (tp_rank+1) B*T/tp)). */
int64_t gt_gpt_stream_rows(const gt_gpt *m, int B, int T);

/* The compute type and the shape. */
gt_dtype gt_gpt_dtype(const gt_gpt *m);
const gt_gpt_shape *gt_gpt_shape_of(const gt_gpt *m);

/* The gradient of this rank's copy of the tied token embedding when the
 * embedding and the head sit on different stages (first or last stage of
 * pp > 1): the copies' gradients must be summed over the embedding group
 * before the optimizer. *grad = NULL, *n = 0 where there is nothing to sum. */
void gt_gpt_tied_grad(gt_gpt *m, float **grad, size_t *n);

/* What gt_gpt_create would allocate for activations, without allocating:
 * the whole buffer and one slot (64-bit sizes; for planning and tests).
 * Not collective. */
int gt_gpt_plan(const gt_gpt_shape *shape, const gt_gpt_part *part, gt_dtype dtype, int batch,
                int seq, int slots, size_t *act_bytes, size_t *slot_bytes);

/* The flat parameter elements gt_gpt_create would give this part (padding
 * and ZeRO pieces included; params.h), without allocating; and the flat
 * elements of its largest gradient unit but the tied wte of pp > 1, of the
 * largest of the other units (the second largest, equal to the largest on
 * a tie), and of that tied unit (0 if none) (ZeRO 2's buffers,
 * grad_shards.h). Not collective. */
int gt_gpt_plan_params(const gt_gpt_shape *shape, const gt_gpt_part *part,
                       const gt_params_split *split, gt_dtype dtype, size_t *numel,
                       size_t *largest_unit, size_t *second_unit, size_t *tied_unit);

/* gt_gpt_gather_sizes of the part gt_gpt_create would make, without
 * allocating. Not collective. */
int gt_gpt_plan_gather(const gt_gpt_shape *shape, const gt_gpt_part *part,
                       const gt_params_split *split, gt_dtype dtype,
                       size_t sizes[GT_GPT_GATHER_BUFS]);

/* The parameter index of the wte copy whose gradient the embedding group
 * sums (a first or last stage of pp > 1), or -1. */
int gt_gpt_tied_param(const gt_gpt *m);

/* Bytes of activations one slot keeps between forward and backward, and of
 * the whole activation buffer (all slots and shared scratch). */
size_t gt_gpt_slot_bytes(const gt_gpt *m);
size_t gt_gpt_activation_bytes(const gt_gpt *m);

/* Names and logical shapes of every parameter of the whole model, in
 * registration order of a single-rank model: i in [0, count). Returns the
 * tensor's element count; the counts add up to gt_gpt_param_count. */
int gt_gpt_logical_count(const gt_gpt_shape *shape);
size_t gt_gpt_logical_param(const gt_gpt_shape *shape, int i, char name[GT_PARAM_NAME_MAX],
                            int *ndim, long dims[GT_TENSOR_MAX_DIMS]);

/* Forward FLOPs per token of one block and of the head (for balancing
 * pipeline stages). */
void gt_gpt_stage_costs(const gt_gpt_shape *shape, int T, double *block, double *head);

/* Training FLOPs per token (forward + backward) of this shape at sequence
 * length T: 6 * (matrix parameters incl. the tied head) + 12 * layers * dim * T
 * for attention scores and mixing. */
double gt_gpt_flops_per_token(const gt_gpt_shape *shape, int T);

/* Parameter count (with the tied embedding counted once). */
size_t gt_gpt_param_count(const gt_gpt_shape *shape);

#endif /* GRIDTRAIN_GPT_H */
