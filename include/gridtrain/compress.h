/*
 * gridtrain/compress.h - gradient compression for the data-parallel
 * reduction of a bucket ([parallel] compress, docs/communication.md):
 *   bf16, fp16   the bucket travels as 16-bit values; every reduction step
 *                sums in fp32 and rounds (MPI's user-defined operation, or
 *                gridtrain's algorithms when [parallel] allreduce picks one).
 *   topk:R       each member sends the k = ceil(R n) entries of largest
 *                magnitude of (gradient + residual) as (index, value) pairs,
 *                all-gathered; every member sums the p sparse vectors in
 *                member order (so all get the same bits); what a member did
 *                not send stays in its residual for the next step (error
 *                feedback, Stich et al. 2018).
 *   powersgd:K   every matrix-shaped parameter M (rows x cols, gradient +
 *                residual) is sent as P = M Q (rows x r, r = min(K, rows,
 *                cols)) and Q' = M^T orth(P) (cols x r), each all-reduced;
 *                the result is orth(P) Q'^T, Q' is the next step's warm
 *                start, and M - result / p stays in the residual (Vogels et
 *                al. 2019, one power iteration a step). Vectors and biases
 *                are all-reduced as they are, in the same message as P.
 * The result is the sum over the members, as for an uncompressed bucket;
 * topk with R = 1 and powersgd with a full rank give it within rounding.
 *
 * A compressor is one bucket's: it keeps the bucket's state (residual,
 * warm starts; gt_compressor_state) and runs on a duplicate of the dp
 * communicator of its own, so that its collectives, issued in phases, never
 * interleave with another bucket's. It works on host memory (the CPU
 * backend's, or collectives.h's staging) through the gt_xfer_reducer that
 * gt_compressor_reducer returns.
 */
#ifndef GRIDTRAIN_COMPRESS_H
#define GRIDTRAIN_COMPRESS_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/coll_algos.h"
#include "gridtrain/collectives.h"

typedef enum {
  GT_COMPRESS_NONE = 0,
  GT_COMPRESS_BF16,
  GT_COMPRESS_FP16,
  GT_COMPRESS_TOPK,
  GT_COMPRESS_POWERSGD
} gt_compress_kind;

typedef struct gt_compress_spec {
  gt_compress_kind kind;
  double ratio; /* topk: the fraction of entries sent, in (0, 1] */
  int rank;     /* powersgd: the rank of the approximation, >= 1 */
} gt_compress_spec;

/* "none", "bf16", "fp16", "topk:R", "powersgd:K" into *spec; GT_ERR_INPUT
 * with the expected forms otherwise. */
int gt_compress_parse(const char *text, gt_compress_spec *spec);

/* The spec as the deck spells it ("topk:0.01"). */
void gt_compress_format(const gt_compress_spec *spec, char *out, size_t size);

/* A matrix-shaped piece of a bucket: rows x cols entries, row-major, from
 * element `offset` of the bucket. */
typedef struct gt_cmat {
  size_t offset, rows, cols;
} gt_cmat;

typedef struct gt_compressor gt_compressor;

/* For a bucket of n fp32 entries with the matrices mats (powersgd; NULL
 * otherwise) reduced over dp, 16-bit payloads through algorithm algo of
 * coll_algos.h (GT_ALGO_MPI: MPI's own; never auto). seed makes powersgd's
 * first warm start (the same on every member). Collective on dp (the
 * duplicate communicator). */
int gt_compressor_create(const gt_compress_spec *spec, MPI_Comm dp, size_t n,
                         const gt_cmat *mats, int nmats, gt_algo algo, uint64_t seed,
                         gt_compressor **c);
int gt_compressor_destroy(gt_compressor **c);

/* The reduction for gt_xfer_allreduce_custom. */
gt_xfer_reducer gt_compressor_reducer(gt_compressor *c);

/* Start / test the reduction of host buffer buf (n entries) directly
 * (what the reducer does). Collective on dp, non-blocking. */
int gt_compressor_start(gt_compressor *c, float *buf);
int gt_compressor_test(gt_compressor *c, bool *done);

/* Bytes this member sent for the last reduction, and for all of them. */
double gt_compressor_last_bytes(const gt_compressor *c);

/* The state a checkpoint keeps (error-feedback residual, then powersgd's
 * warm starts): gt_compressor_state_len floats at gt_compressor_state,
 * which may be written to restore it (between reductions). */
size_t gt_compressor_state_len(const gt_compressor *c);
float *gt_compressor_state(gt_compressor *c);

/* ---- the kernels, exposed for tests ---------------------------------------------- */

/* The k entries of largest magnitude of a (n entries), ties broken by the
 * lower index: their indices, ascending, into idx. scratch: n floats. */
void gt_topk_select(const float *a, size_t n, size_t k, float *scratch, uint32_t *idx);

/* Orthonormalise the r columns of the row-major rows x r matrix P in place
 * (modified Gram-Schmidt, column by column in order, each projected out
 * twice); a column left with less than 1e-5 of its norm (it lies in the
 * span of the earlier ones: a rank-deficient gradient) becomes zero. */
void gt_orthonormalize(float *P, size_t rows, size_t r);

#endif /* GRIDTRAIN_COMPRESS_H */
