/*
 * gridtrain/params.h - the parameters of a model (or of one pipeline stage):
 * one flat buffer of fp32 master values, one of fp32 gradients, the compute
 * copy in the training precision, and named views into all three.
 *
 * Usage: create (with the compute type), add every tensor (name, shape,
 * initialisation, whether weight decay applies), then finalize, which
 * allocates the buffers on the backend's device and sets every view. One
 * flat buffer makes the data-parallel all-reduce, clipping and
 * checkpointing slices of one array.
 *
 * Precisions: the optimizer, clipping and checkpoints see the fp32 master
 * values; layers compute with the compute copy, which is derived from the
 * master (rounded) by gt_params_refresh_compute and by every AdamW step. In
 * fp32 the compute copy is the master buffer itself.
 *
 * ZeRO (gt_params_shard, before finalize): the flat buffers are padded to
 * `size` equal pieces of shard_n elements and this rank owns piece `rank`:
 * the optimizer updates only that piece, whose gradients are the reduced
 * ones. In bf16/fp16 only the owned piece of the fp32 master is allocated
 * (values then holds [shard_lo, shard_lo + shard_n) and the value views are
 * NULL); in fp32 the master is the compute copy, which every rank holds
 * whole below stage 3. Below stage 3 the compute copy outside the owned
 * piece is what the trainer's data-parallel all-gather brings in after each
 * update. At stage 3 the compute copy too is only the owned piece (compute
 * views NULL, gt_params_compute_at): the model gathers each unit's weights
 * just before it uses them (param_gather.h).
 *
 * Initial values are generated element by element from (seed, name, index)
 * with counter-based random numbers (rng.h), so they do not depend on which
 * rank generates them or on the layout.
 */
#ifndef GRIDTRAIN_PARAMS_H
#define GRIDTRAIN_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/backend.h"
#include "gridtrain/tensor.h"

#define GT_PARAM_NAME_MAX 64

typedef enum { GT_INIT_NORMAL = 0, GT_INIT_ZEROS, GT_INIT_ONES } gt_init_kind;

#define GT_SHARD_MAX_BLOCKS 4

/* How a rank's tensor relates to the logical (full) tensor of the same
 * name. axis < 0: the rank holds the whole tensor (replicated). Otherwise
 * the logical extent along axis is `blocks` consecutive blocks (3 for q, k,
 * v), of equal size, or, when units[0] > 0, of sizes in the proportion of
 * units[0 .. blocks) (grouped-query attention's q, k, v: heads, kv_heads,
 * kv_heads); each block is split into `parts` pieces of ceil(block / parts)
 * entries and this rank holds piece `index` of every block, side by side.
 * Entries of a piece that fall past the end of its block are padding: zero,
 * never updated by a gradient, not part of the logical tensor. */
typedef struct gt_shard {
  int axis, blocks, parts, index;
  int units[GT_SHARD_MAX_BLOCKS];
} gt_shard;

/* A replicated tensor. */
#define GT_SHARD_NONE ((gt_shard){-1, 1, 1, 0, {0}})

/* Block b of a sharded axis of logical extent `full`: its first entry and
 * length in the logical tensor, and the first entry and length (padding
 * included) of this rank's piece of it in the local tensor. */
typedef struct gt_shard_block {
  long first, len;    /* logical */
  long lfirst, piece; /* local */
} gt_shard_block;
gt_shard_block gt_shard_block_of(const gt_shard *sh, long full, int b);

/* The local extent along the shard axis (every block's piece). */
long gt_shard_extent(const gt_shard *sh, long full);

typedef struct gt_param {
  char name[GT_PARAM_NAME_MAX]; /* "h.3.attn.qkv.weight" */
  int ndim;
  long full_shape[GT_TENSOR_MAX_DIMS]; /* logical shape */
  gt_shard shard;               /* this rank's part of it */
  bool counted;                 /* this copy counts for norms and output (one
                                   rank of those holding the same entries) */
  gt_tensor value;              /* view into the fp32 master values */
  gt_tensor grad;               /* view into the fp32 gradients */
  gt_tensor compute;            /* view into the compute copy (dtype) */
  size_t offset;                /* elements from the start of the buffers */
  size_t numel;
  bool decay;                   /* AdamW weight decay applies */
  gt_init_kind init;
  float init_std;               /* for GT_INIT_NORMAL */
} gt_param;

typedef struct gt_params {
  gt_backend *be;
  gt_dtype dtype; /* of the compute copy */
  int count, capacity;
  gt_param *list;
  size_t numel;  /* total elements (views are 16-element aligned; a multiple
                    of shard_size pieces) */
  float *values; /* device: fp32 master (the owned piece when master_sharded) */
  float *grads;  /* device: fp32 */
  void *compute; /* device: compute copy (== values in fp32) */
  void *stash;   /* device: an older version of the compute copy, the same
                    size (pipedream-2bw: gt_params_stash_create); NULL */
  float *grads_other; /* device: a second gradient buffer, the size of grads
                         (gt_params_grads_double); NULL */
  int shard_rank, shard_size; /* ZeRO pieces; size 1: none */
  size_t shard_lo, shard_n;    /* the owned piece of the flat buffers */
  bool master_sharded;         /* values holds only the owned piece */
  bool grads_sharded;          /* ZeRO 2, 3: grads holds only the owned piece */
  bool compute_sharded;        /* ZeRO 3: compute holds only the owned piece */
  bool finalized;
} gt_params;

/* Create an empty set on backend be whose compute copy is of type dtype
 * (GT_F32, GT_BF16 or GT_F16). Not collective. be may be NULL for a set
 * that is only described, never finalized (sizes and shards). */
int gt_params_create(gt_backend *be, gt_dtype dtype, gt_params **params);

/* Add a tensor before finalize. ndim in 1..4. Names must be unique.
 * full_shape is the logical shape; the rank holds the part named by shard
 * (GT_SHARD_NONE: all of it) and counted says whether this copy is the one
 * counted (see gt_param). */
int gt_params_add(gt_params *p, const char *name, int ndim, const long *full_shape,
                  gt_shard shard, bool counted, gt_init_kind init, float init_std,
                  bool decay);

/* Copy between a logical (full) host tensor and this rank's part of it:
 * gt_param_extract fills local (numel entries, padding zero) from full;
 * gt_param_insert writes local's real entries into their places in full
 * and leaves the rest of full alone. Not collective. */
void gt_param_extract(const gt_param *t, const float *full, float *local);
void gt_param_insert(const gt_param *t, const float *local, float *full);

/* Elements of the logical tensor. */
size_t gt_param_full_numel(const gt_param *t);

/* How the flat buffers are split over the data-parallel ranks: `size`
 * pieces, this rank owning piece `rank`, of what ZeRO stage `stage` (1..3)
 * splits; size 1 is no split. The data-parallel path decides it
 * (gt_dp_params_split, dp.h); the model applies it when it lays out its
 * parameters (gt_gpt_create). */
typedef struct gt_params_split {
  int rank, size, stage;
} gt_params_split;

/* ZeRO stage `stage` (1..3): split the flat buffers into `size` equal
 * pieces over the data-parallel ranks, this rank owning piece `rank` (see
 * above). Stage 1: the optimizer state (and a bf16/fp16 master); stage 2:
 * the gradient buffer too holds only the owned piece (the grad views are
 * then NULL: backward writes into buffers of its own and reduce-scatters
 * them into it); stage 3: the compute copy (and the fp32 master) too.
 * Before finalize; size 1 is no split. Not collective. */
int gt_params_shard(gt_params *p, int rank, int size, int stage);

/* The compute copy of flat element `offset` (in the owned piece when the
 * compute copy is sharded). */
void *gt_params_compute_at(const gt_params *p, size_t offset);

/* The gradient of flat element `offset` (in the owned piece when the
 * gradients are sharded). */
float *gt_params_grad(const gt_params *p, size_t offset);

/* The fp32 master value of flat element `offset` (in the owned piece when
 * the master is sharded). */
float *gt_params_master(const gt_params *p, size_t offset);

/* The flat range [*lo, *hi) of master values this rank holds: the owned
 * piece when the master is sharded, else everything. */
void gt_params_master_range(const gt_params *p, size_t *lo, size_t *hi);

/* The flat layout without allocating: offsets, numel and the ZeRO piece
 * (what finalize will allocate; for sets that are only described). */
int gt_params_layout(gt_params *p);

/* Allocate the buffers (64-byte aligned views) and zero the gradients. */
int gt_params_finalize(gt_params *p);

/* Fill t's logical (full, unsharded) tensor into full (fp32 host memory of
 * gt_param_full_numel(t) floats). GT_SUCCESS or an error (pushed). */
typedef int (*gt_param_fill_fn)(void *ctx, const gt_param *t, float *full);

/* Not collective: set every parameter's fp32 master values (this rank's
 * part of them) from the logical tensors fill gives, one tensor in host
 * memory at a time, then the compute copy. */
int gt_params_fill(gt_params *p, gt_param_fill_fn fill, void *ctx);

/* Fill every value from the seed (see above): each rank generates the
 * logical tensor and keeps its part (of the master range), so every layout
 * starts from the same weights. Refreshes the compute copy (see
 * gt_params_refresh_compute). */
int gt_params_init(gt_params *p, uint64_t seed);

/* compute copy = master values rounded to the compute type (after the
 * master was loaded from a checkpoint), over the master range: with a
 * sharded master the rest comes from the all-gather of zero.h. A no-op in
 * fp32. Queued on the compute stream. */
int gt_params_refresh_compute(gt_params *p);

/* Two weight versions (pipeline schedules that stream across steps): a
 * second buffer the size of the (whole) compute copy, holding a copy of
 * it. After finalize; not collective. */
int gt_params_stash_create(gt_params *p);

/* stash = compute, all of it (queued on the compute stream): the version
 * the update is about to replace is kept. */
int gt_params_stash_save(gt_params *p);

/* The stash's copy of flat element `offset` (NULL without a stash). */
void *gt_params_stash_at(const gt_params *p, size_t offset);

/* Two gradient buffers (a streaming schedule whose update of one batch
 * runs while the next batch's backwards accumulate): allocate the second,
 * zeroed. After finalize, not with ZeRO 2-3 (sharded gradients). Not
 * collective. */
int gt_params_grads_double(gt_params *p);

/* Swap grads and grads_other and point every gradient view at the new
 * grads (the model rebinds its pointers: gt_gpt_rebind_grads). Not
 * collective; nothing queued. */
void gt_params_grads_swap(gt_params *p);

/* Set every gradient to zero (queued on the compute stream). */
int gt_params_zero_grads(gt_params *p);

/* *acc (a double on the device) += the sum of squares of the gradients of
 * every counted parameter (each logical entry held by exactly one counted
 * copy), in a fixed order; when sharded, of the owned piece only (whose
 * gradients are the reduced ones). Queued on the compute stream. */
int gt_params_grad_sumsq(gt_params *p, double *acc);

/* Bytes of each buffer on this rank: master values (the owned piece when
 * sharded), and the compute copy (the owned piece at stage 3; 0 in fp32,
 * where it is the master) with the stash where there is one. */
size_t gt_params_master_bytes(const gt_params *p);
size_t gt_params_compute_bytes(const gt_params *p);

/* Flat elements from parameter first's offset to the next one's after
 * [first, first + count) (or the end: padding included). After layout. */
size_t gt_params_span(const gt_params *p, int first, int count);

/* The parameter with this name, or NULL. */
gt_param *gt_params_find(gt_params *p, const char *name);

/* Free buffers and set, set *params to NULL. */
int gt_params_destroy(gt_params **params);

#endif /* GRIDTRAIN_PARAMS_H */
