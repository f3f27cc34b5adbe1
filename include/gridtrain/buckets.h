/*
 * gridtrain/buckets.h - data-parallel gradient all-reduce in buckets that
 * overlap the backward pass.
 *
 * The parameters of a rank are grouped, from the last registered to the
 * first (the order backward finishes them), into buckets of about
 * bucket_bytes: contiguous slices of the flat gradient buffer. During the
 * backward of the step's last micro-batch the model reports parameters
 * whose gradients are final (gt_buckets_ready): their kernels are queued.
 * A bucket's all-reduce (sum over dp, fp32, through collectives.h) is
 * issued as soon as all its parameters are reported; it starts in MPI once
 * the device has run those kernels, and every report and wait moves the
 * buckets in flight along, so that MPI works while backward computes.
 * gt_buckets_wait before the optimizer completes every bucket (the
 * optimizer's kernels then see the sums). Earlier micro-batches report
 * nothing, so gradient accumulation costs no communication.
 *
 * ZeRO (parameters sharded over dp, params.h): each bucket is reduce-
 * scattered instead, so that every dp rank receives the sums of the part of
 * the bucket that falls in its own piece (gt_xfer_reduce_scatter); the
 * gradients outside the piece stay unreduced. A held bucket (the tied
 * embedding's, whose two copies must be summed over the embedding group
 * before dp reduces them piece by piece) is started by gt_buckets_wait_held
 * only.
 */
#ifndef GRIDTRAIN_BUCKETS_H
#define GRIDTRAIN_BUCKETS_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/collectives.h"
#include "gridtrain/compress.h"
#include "gridtrain/params.h"

typedef struct gt_buckets gt_buckets;

/* Not collective (every rank of dp must use the same parameters and size).
 * bucket_bytes 0: one bucket with everything. Staging room (when coll
 * stages) is allocated here, one buffer per bucket. coll may be NULL when
 * dp has one rank (nothing is reduced; the layout is still counted). */
int gt_buckets_create(gt_params *params, gt_coll *coll, MPI_Comm dp, size_t bucket_bytes,
                      gt_buckets **buckets);
int gt_buckets_destroy(gt_buckets **buckets);

/* [parallel] compress: every bucket's all-reduce goes through a
 * compressor (compress.h) of its own; powersgd treats every parameter of
 * two or more dimensions as a matrix (its first local dimension by the
 * rest). algo carries the 16-bit payloads (GT_ALGO_MPI: MPI's own). Not
 * for ZeRO (GT_ERR_INPUT: its buckets are reduce-scattered). Collective on
 * dp (each compressor duplicates it), before the first step; a no-op when
 * dp has one rank. */
int gt_buckets_compress(gt_buckets *b, const gt_compress_spec *spec, gt_algo algo,
                        uint64_t seed);

/* The compressors' state for checkpoints: gt_buckets_state_len floats,
 * copied out to (save) or in from (restore) buf, bucket by bucket. */
size_t gt_buckets_state_len(const gt_buckets *b);
void gt_buckets_state_copy(gt_buckets *b, float *buf, bool save);

/* Number of buckets. */
int gt_buckets_count(const gt_buckets *b);

/* The bucket of parameter `param` is held (see above). Before the first
 * step, the same on every rank of dp. */
void gt_buckets_hold(gt_buckets *b, int param);

/* Start of a step: no parameter is ready. */
void gt_buckets_reset(gt_buckets *b);

/* Parameters [first, first + count) have their final gradients: start
 * every bucket that became complete and test the ones in flight.
 * Collective on dp in the sense that every rank starts the same buckets in
 * the same order. */
int gt_buckets_ready(gt_buckets *b, int first, int count);

/* Test the buckets in flight (let MPI move them along). Not collective. */
int gt_buckets_progress(gt_buckets *b);

/* Start whatever was not started and wait for every bucket, but for the
 * held ones; gt_buckets_wait_held then starts and waits for those too. */
int gt_buckets_wait(gt_buckets *b);
int gt_buckets_wait_held(gt_buckets *b);

#endif /* GRIDTRAIN_BUCKETS_H */
