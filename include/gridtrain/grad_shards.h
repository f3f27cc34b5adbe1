/*
 * gridtrain/grad_shards.h - ZeRO stage 2: every micro-batch's gradients of
 * each gradient unit (a block, the head's LayerNorm, wpe, wte; gpt.h) go into
 * a buffer from a small pool, are reduce-scattered over dp as soon as the
 * unit's backward is done, and each rank adds the part in its own piece to
 * the gradient piece it keeps (params.h: the sharded gradient buffer). Only
 * that piece outlives the reduction; the full gradients never exist at once.
 *
 * Choice for several micro-batches: a reduce-scatter per micro-batch (not
 * one after accumulating), so that memory stays at the piece plus the pool;
 * the price is m reduce-scatters of the gradients per step instead of one.
 *
 * The sum into the kept piece costs no extra kernel: when a pool buffer is
 * handed out, this rank's block of it starts as the piece's current sums
 * (the other blocks at zero), backward adds its gradients, and the in-place
 * reduction to this rank then holds the piece plus every rank's gradients;
 * it is copied back into the piece. (The sums therefore round in a
 * different order than with one all-reduce: equal to zero 0 within fp32
 * rounding, not bitwise.)
 *
 * A persistent unit (the tied wte of pp > 1, whose two stages' gradients
 * must be summed over the embedding group before dp reduces them, and whose
 * pieces the two stages cut differently) keeps a whole buffer for the step;
 * gt_grad_shards_persistent gives it for that sum, gt_grad_shards_finish_persistent
 * then reduce-scatters it into the piece.
 *
 * Requests are moved along by the collectives' progress engine; every rank
 * of dp issues the same reductions in the same order (the backward order).
 */
#ifndef GRIDTRAIN_GRAD_SHARDS_H
#define GRIDTRAIN_GRAD_SHARDS_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/collectives.h"
#include "gridtrain/params.h"

typedef struct gt_grad_shards gt_grad_shards;

/* Pool buffers the trainer uses: the one-stage wte held through backward,
 * the unit being computed, and two reductions in flight. The first buffer
 * holds the largest unit, the others the largest of the rest: when one
 * unit (the one-stage wte) is larger than all others, the first buffer is
 * kept for it and the rest are smaller (pool - 1 buffers of a block instead
 * of pool buffers of the embedding). */
#define GT_GRAD_SHARDS_POOL 4

/* For params sharded with their gradients (gt_params_shard(..., true)) over
 * dp, and the gradient units of the model (first[i], count[i], n of them).
 * persistent: the parameter index of the tied wte copy to keep whole, or
 * -1. pool: buffers (at least 3: the one-stage wte is held from the head's
 * backward to the embedding's), sized as GT_GRAD_SHARDS_POOL says. Not
 * collective. */
int gt_grad_shards_create(gt_params *params, gt_coll *coll, MPI_Comm dp, const int *first,
                          const int *count, int n, int persistent, int pool, gt_grad_shards **gs);
int gt_grad_shards_destroy(gt_grad_shards **gs);

/* Start of a step: the persistent buffer is zeroed (the piece is zeroed by
 * gt_params_zero_grads). */
int gt_grad_shards_reset(gt_grad_shards *gs);

/* The buffer for unit [first, first + count)'s gradients of this
 * micro-batch (gpt.h's grads hook); the same one until the unit is
 * reported ready. May wait for a reduction in flight to free a buffer. */
int gt_grad_shards_acquire(gt_grad_shards *gs, int first, int count, float **base);

/* Parameters [first, first + count) are final for this micro-batch: every
 * acquired unit inside the range starts its reduce-scatter. Collective on
 * dp in the sense of buckets.h (the same order everywhere). */
int gt_grad_shards_ready(gt_grad_shards *gs, int first, int count);

/* Move the reductions along (not collective); wait for all of them (the
 * piece then holds every micro-batch's sums but the persistent unit's). */
int gt_grad_shards_progress(gt_grad_shards *gs);
int gt_grad_shards_wait(gt_grad_shards *gs);

/* The persistent unit's whole gradient buffer (NULL, 0 if none), and its
 * reduce-scatter into the piece (after the embedding group's sum).
 * Collective on dp. */
void gt_grad_shards_persistent(gt_grad_shards *gs, float **buf, size_t *n);
int gt_grad_shards_finish_persistent(gt_grad_shards *gs);

/* Device bytes of the pool and the persistent buffer. */
size_t gt_grad_shards_buffer_bytes(const gt_grad_shards *gs);

/* The bytes gt_grad_shards_create will allocate for units of these sizes
 * (elements of the largest pooled unit, of the largest of the others, of
 * the persistent one), for the memory account. */
size_t gt_grad_shards_plan_bytes(size_t largest, size_t second, size_t persistent, int pool);

#endif /* GRIDTRAIN_GRAD_SHARDS_H */
