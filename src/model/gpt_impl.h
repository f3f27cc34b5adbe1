/*
 * gpt_impl.h - the GPT's state, shared by its parts (internal to
 * src/model):
 *   gpt.c         parameters, activation slots, forward and backward
 *   gpt_decode.c  incremental decoding with a key/value cache
 */
#ifndef GT_GPT_IMPL_H
#define GT_GPT_IMPL_H

#include "gridtrain/gpt.h"
#include "gridtrain/layers.h"

/* The weight units one pass asks for, in order (ZeRO 3, gpt.h): parameter
 * ranges [first[k], first[k] + count[k]), k < n (at most layers + 3). */
typedef struct gt_gpt_pass {
  int n;
  int *first, *count;
} gt_gpt_pass;

/* One micro-batch in flight through one model chunk: what forward keeps for
 * backward. */
typedef struct gt_gpt_slot {
  int chunk, l0, nb;   /* the chunk, its first local block and its block count */
  bool head_here;      /* the chunk ends in the head (last chunk of a last stage) */
  void **resid;        /* nb+1 views (N,C): resid[0] chunk input, resid[nb] output */
  gt_block_acts *acts; /* nb */
  bool w_pending;      /* gt_gpt_backward_input ran, _weights not yet */
  gt_head_acts head;   /* head_here */
  void *dgrad;         /* (N,C) gradient travelling backward */
  int32_t *tokens, *targets;           /* device (N) */
  int32_t *host_tokens, *host_targets; /* pinned (N): what the uploads read */
  gt_device_event *uploaded;                  /* the uploads from them have run */
  bool upload_pending;
  int B, T;
  float dlogit_scale; /* its forward's (the router's losses scale with it) */
  bool grad_ready;
} gt_gpt_slot;

struct gt_gpt {
  gt_backend *be;
  gt_gpt_shape shape;
  gt_gpt_part part;
  gt_dtype dt;    /* compute type */
  int batch, seq; /* largest micro-batch */
  int local_blocks; /* blocks on this rank */
  /* model chunks (gpt.h): chunk c is local blocks
   * [chunk_first_block[c], chunk_first_block[c+1]) and activation slots
   * [chunk_first_slot[c], chunk_first_slot[c+1]) */
  int chunks;
  int chunk_first_block[GT_GPT_MAX_CHUNKS + 1], chunk_first_slot[GT_GPT_MAX_CHUNKS + 1];
  int H;            /* heads on this rank */
  int Hkv;          /* key/value heads on this rank */
  int F;            /* MLP units on this rank (a dense block's) */
  /* mixture of experts (layers.h): the units here of one expert and of an
   * MoE block's dense MLP (its shared experts, 0: none); whether any local
   * block has experts */
  int Fe, Fs;
  bool moe_here;
  gt_moe_scratch moe_scratch;
  int32_t *moe_host;   /* pinned: the counts' copies, 2E per (slot, local block),
                          then the recomputation's and the decoding cache's */
  int64_t *moe_load;   /* host (local blocks x experts): pairs per expert */
  int64_t moe_dropped; /* pairs dropped past capacity */
  bool llama, tied; /* the architecture; the head is wte */
  gt_block_kind kind; /* the block's choices (layers.h), rope tables bound */
  /* this rank's vocabulary rows: vocab_rows with padding (Vl in shape
   * notes), from row vocab_first of the whole vocabulary, of which
   * vocab_real are real (the rest padding) */
  int vocab_rows, vocab_first, vocab_real;
  gt_params *params;

  /* views into params (compute copy and gradients) */
  const void *wte, *wpe, *lnf_w, *lnf_b, *head_w; /* head_w: lm_head (untied) */
  float *dwte, *dwpe, *dlnf_w, *dlnf_b, *dhead_w;
  gt_block_weights *w; /* per local block */
  gt_block_grads *g;
  int p_wte, p_emb_count;  /* parameter indices: embedding (wte[, wpe]) */
  int *p_block;            /* per local block: its first parameter, */
  int *p_block_n;          /* ... its number of parameters, */
  int *layer_of;           /* ... and its layer in the whole model */
  int p_head, p_head_count; /* ln_f, then lm_head (untied) or the wte copy
                               (tied, a last stage that is not first) */
  int p_lnf_count;          /* ln_f's parameters: 2 (LayerNorm), 1 (RMSNorm) */
  float ***gptr;            /* per parameter: the gradient pointer to rebind */
  const void ***wptr;       /* per parameter: the weight pointer to rebind */
  bool on_stash;            /* the weights are bound to the params' stash */

  /* ZeRO 3 (gpt.h): the weight units in the order each pass asks for them */
  gt_weight_hook whook;
  bool has_whook;
  gt_gpt_pass fwd[GT_GPT_MAX_CHUNKS], bwd[GT_GPT_MAX_CHUNKS]; /* per chunk */

  /* activations: one device buffer, `nslots` slots and shared scratch */
  void *act_buffer;
  /* part.split_sets sets of every local block's projection output
   * gradients (what B keeps for W): set k of block l is dout[k * local_blocks + l] */
  gt_block_dout *dout;
  int *dout_busy; /* split_sets: the slot whose W is pending in the set, -1 */
  size_t act_bytes, slot_bytes; /* slot_bytes: the mean over slots */
  int nslots;
  gt_gpt_slot *slots;
  gt_block_scratch scratch;
  gt_block_acts re; /* recompute: the shared acts (BLOCK) or atty/lse (ATTENTION) */
  void *re_out;     /* recompute BLOCK: the rerun block's output (N,C), unused */
  void *dlnf;       /* (N,C) */
  float *stats_all; /* (tp, N, 3) */
  float *rope_cos, *rope_sin; /* (max_seq, hs/2) fp32 tables (rope) */
  gt_seq_par sp;    /* sequence parallelism's shared buffers */
  bool sp_on;       /* part.seq_par with tp > 1 */
};

/* Lay out a device buffer (base == NULL: measure it): each piece 64-byte
 * aligned. */
typedef struct {
  char *base;
  size_t off;
} gt_carver;

static inline void *gt_carve(gt_carver *c, size_t bytes)
{
  void *p = c->base ? c->base + c->off : NULL;
  c->off += (bytes + 63) & ~(size_t)63;
  return p;
}

/* The dimensions of a block's pass over B x T tokens. */
gt_layer_dims gt_gpt_layer_dims(const gt_gpt *m, int64_t B, int64_t T,
                                const gt_progress *progress, const gt_seq_par *sp);

/* d for local block l: an MoE block's F and moe (md filled: its experts,
 * the router's loss scales for the loss dlogit_scale * sum(token losses)
 * over B*T tokens, and the statistics' counters when count: a backward's);
 * d itself for a dense block. */
gt_layer_dims gt_gpt_block_dims(gt_gpt *m, int l, gt_layer_dims d, gt_moe_dims *md,
                                float dlogit_scale, bool count);

/* Lay out an MoE block's activations for N token rows (host: NULL). */
void gt_gpt_layout_moe_acts(const gt_gpt *m, gt_moe_acts *a, gt_carver *c, size_t N);

/* The head's dimensions for N rows (sequence parallelism as the model). */
gt_head_dims gt_gpt_head_dims(const gt_gpt *m, int64_t N);

/* The head's weight and its gradient: wte (or its copy) when tied, else
 * lm_head (as bound now: ZeRO 3 rebinds them). */
const void *gt_gpt_head_weight(const gt_gpt *m);
float *gt_gpt_head_grad(const gt_gpt *m);

/* Sharded compute weights (ZeRO 3): unit k of the pass gathered and its
 * views bound (the next unit named for prefetch); a no-op otherwise. */
int gt_gpt_take(gt_gpt *m, const gt_gpt_pass *ps, int k);

/* The release of unit k of the pass; its views no longer point anywhere. */
int gt_gpt_drop(gt_gpt *m, const gt_gpt_pass *ps, int k);

#endif /* GT_GPT_IMPL_H */
