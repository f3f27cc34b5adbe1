/*
 * gridtrain/nccl.h - NCCL communicators of the "cuda" backend, for the
 * collectives module (src/comm/coll_nccl.c). Implemented by
 * src/backend/cuda/cuda_nccl.c, and by cuda_nccl_none.c in builds without
 * NCCL (gt_nccl_built is false there and every other entry fails with the
 * error that says how to rebuild). Plain C without CUDA or NCCL headers.
 */
#ifndef GRIDTRAIN_NCCL_H
#define GRIDTRAIN_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/backend.h"

/* One NCCL communicator per MPI communicator, made by src/comm/coll_nccl.c:
 * rank 0 of the group makes the unique id, MPI broadcasts it, and every
 * member calls gt_nccl_create. Operations are queued on a stream of be
 * (NULL: the compute stream) and complete in stream order; the host does
 * not wait. */
typedef struct gt_nccl gt_nccl;
#define GT_NCCL_ID_BYTES 128

/* True when this build includes NCCL. */
bool gt_nccl_built(void);

/* Load NCCL (cuda_dl.h): GT_ERR_INPUT naming the library and the fix when
 * it cannot be loaded. Every other entry needs it loaded first. Not
 * collective: coll_nccl.c checks that every rank of a group loaded it. */
int gt_nccl_load(void);

/* "NCCL 2.28.3" or why it is not there. */
const char *gt_nccl_describe(void);

/* A fresh unique id (GT_NCCL_ID_BYTES bytes) for a new communicator. */
int gt_nccl_unique_id(void *id);

/* Collective over the nranks members that call it with the same id: the
 * communicator of rank `rank` on be's GPU. */
int gt_nccl_create(gt_backend *be, const void *id, int nranks, int rank, gt_nccl **comm);

/* Free the communicator (after its work on the device has run). */
int gt_nccl_destroy(gt_nccl **comm);

/* In-place sum of n elements of t (fp32, bf16, fp16) over the communicator;
 * recv (n * nranks) "=" every member's send (n) in rank order. */
int gt_nccl_allreduce(gt_backend *be, gt_nccl *comm, void *buf, size_t n, gt_dtype t,
                      gt_stream *s);
int gt_nccl_allgather(gt_backend *be, gt_nccl *comm, const void *send, void *recv, size_t n,
                      gt_dtype t, gt_stream *s);

/* The sum of n elements of t over the communicator into buf of member root
 * (in place there; the other members' buf is only read). */
int gt_nccl_reduce(gt_backend *be, gt_nccl *comm, void *buf, size_t n, gt_dtype t, int root,
                   gt_stream *s);

/* recv (n) "=" the sum over the members of block `rank` (n elements) of
 * their send (n * nranks). */
int gt_nccl_reduce_scatter(gt_backend *be, gt_nccl *comm, const void *send, void *recv,
                           size_t n, gt_dtype t, gt_stream *s);

#endif /* GRIDTRAIN_NCCL_H */
