/*
 * gridtrain/param_gather.h - ZeRO stage 3: the compute weights live in dp
 * pieces of the flat parameter buffer (params.h), and each unit the model
 * asks for (a block, the embedding, the head; gpt.h's weight hook) is
 * all-gathered over dp into a buffer of a small pool just before its forward
 * or backward, and the buffer is handed back after. The next unit's gather
 * is started as soon as the current one is handed out (prefetch), so it
 * overlaps the current unit's compute: the progress engine moves it along
 * between kernels.
 *
 * A unit's flat range usually falls in one or two dp ranks' pieces; the
 * gather is one broadcast from each rank whose piece it touches
 * (gt_xfer_allgather), in the compute type.
 *
 * The buffers hold a gathered unit only while it is held or in flight:
 * nothing is cached across an optimizer step (gt_param_gather_drop). Every
 * decision (which buffer, whether to prefetch) depends only on the sequence
 * of acquire / release calls, which is the same on every dp rank, so every
 * rank issues the same gathers in the same order.
 *
 * The tied embedding of pp > 1 is two parameters on two stages (the first
 * stage's wte, the last stage's copy): each stage gathers its own over its
 * own dp group; the copies stay equal because their gradients are summed
 * over the embedding group before the update (trainer).
 */
#ifndef GRIDTRAIN_PARAM_GATHER_H
#define GRIDTRAIN_PARAM_GATHER_H

#include <mpi.h>
#include <stddef.h>

#include "gridtrain/collectives.h"
#include "gridtrain/params.h"

typedef struct gt_param_gather gt_param_gather;

/* For params whose compute copy is sharded over dp (gt_params_shard stage
 * 3), with nbuf gather buffers of sizes[i] flat elements each (the model's
 * gt_gpt_gather_sizes). Allocates the buffers (compute type). The time
 * acquire waits for a gather is recorded under timer event `event` (-1:
 * not timed). Not collective. */
int gt_param_gather_create(gt_params *params, gt_coll *coll, MPI_Comm dp, const size_t *sizes,
                           int nbuf, int event, gt_param_gather **pg);

/* Completes what is in flight, frees the buffers. */
int gt_param_gather_destroy(gt_param_gather **pg);

/* The weights of parameters [first, first + count): gathered (or waited for,
 * when prefetched) into a free buffer; *base is parameter first's compute
 * weights, the others at their flat offsets. Then, when next_count > 0 and
 * a buffer is free, the gather of [next_first, next_first + next_count)
 * starts. Collective on dp (every rank makes the same calls in the same
 * order). The result is in order on the compute stream. */
int gt_param_gather_acquire(gt_param_gather *pg, int first, int count, int next_first,
                            int next_count, const void **base);

/* The unit is no longer read by work queued from now on: its buffer is free
 * (a later gather into it waits for the work queued before). Not
 * collective. */
int gt_param_gather_release(gt_param_gather *pg, int first, int count);

/* One pass of the progress engine (not collective). */
int gt_param_gather_progress(gt_param_gather *pg);

/* Complete any gather in flight and forget every prefetched unit (before the
 * weights change: an optimizer step, a load). Units still held are an
 * internal error. Not collective (every rank's in-flight set is the same). */
int gt_param_gather_drop(gt_param_gather *pg);

/* Device bytes of the buffers; the bytes gt_param_gather_create allocates for
 * these sizes in type dt. */
size_t gt_param_gather_buffer_bytes(const gt_param_gather *pg);
size_t gt_param_gather_plan_bytes(const size_t *sizes, int nbuf, gt_dtype dt);

#endif /* GRIDTRAIN_PARAM_GATHER_H */
