/*
 * cuda_entry.h - what src/backend/backend.c calls of the "cuda" backend
 * (internal to src/backend). Plain C without CUDA headers, so that the
 * dispatcher compiles in every build; cuda_core.c implements it, and
 * cuda_info_none.c where the build has no CUDA (each call then fails with the
 * error that says how to rebuild).
 */
#ifndef GT_CUDA_ENTRY_H
#define GT_CUDA_ENTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/backend.h"

/* Fill be for "cuda": pick the GPU of node-local rank local_rank (< 0: from
 * the launcher's environment, binding.h), create its streams, cuBLASLt and
 * (attention cudnn or cudnn-fast) cuDNN. attention: [backend] attention, or
 * GT_ATTENTION_DEFAULT for GT_CUDA_ATTENTION from the environment, else
 * cudnn. On failure be may hold
 * partial state: call gt_cuda_backend_fini. */
int gt_cuda_backend_init(gt_backend *be, int local_rank, gt_attention_kind attention);

/* Wait for the device and release everything (safe on partial state). */
int gt_cuda_backend_fini(gt_backend *be);

/* "GPU 0 of 1: NVIDIA H200 (sm_90, 139 GiB, PCI 0000:19:00.0)". */
const char *gt_cuda_backend_describe(gt_backend *be);

/* The GPU's name as the runtime gives it: "NVIDIA H200". */
const char *gt_cuda_backend_name(gt_backend *be);

/* Bytes of device memory allocated through be now, at most so far, and kept
 * in the allocator's cache. */
void gt_cuda_memory_stats(gt_backend *be, size_t *in_use, size_t *peak, size_t *cached);

/* Lower the high-water mark to peak, or to what is in use now where that is
 * more (gt_backend_device_memory_rewind). */
void gt_cuda_memory_rewind(gt_backend *be, size_t peak);

/* ---- NCCL (cuda_nccl.c; cuda_nccl_none.c in builds without it) ----------------
 * One NCCL communicator per MPI communicator, made by src/comm/collectives.c:
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
 * collective: collectives.c checks that every rank of a group loaded it. */
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

#endif /* GT_CUDA_ENTRY_H */
