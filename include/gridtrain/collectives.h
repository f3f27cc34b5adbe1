/*
 * gridtrain/collectives.h - communication of device buffers: the tensor-
 * parallel group operations, pipeline point to point, and the overlapped
 * data-parallel bucket all-reduce, for a backend whose work is asynchronous.
 *
 * Layers, the pipeline schedule and the optimizer hand device buffers to
 * these calls; this module knows the backend, its streams and its events,
 * and keeps the rules of backend.h:
 *   - MPI touches a device buffer only after the work that wrote it is
 *     complete (an event of the compute stream, waited for or polled), and
 *     writes one only after the work queued before that reads it.
 *   - Either MPI takes device pointers ("direct": the backend's memory is
 *     host-visible, or MPI is CUDA-aware by MPIX_Query_cuda_support;
 *     [backend] mpi_device = auto | on | off overrides), or the module stages
 *     the data through pinned host buffers that it owns, with the copies on
 *     a stream of its own where that overlaps the compute stream.
 *   - Results reach the compute stream in order: work queued on it after an
 *     operation has completed (for the host) sees the result.
 * Reductions of bf16 and fp16 payloads sum in fp32 and round at every step
 * (an MPI user-defined operation, so they always stage unless the memory is
 * host-visible). Every operation chunks messages of any 64-bit length.
 *
 * Requests that wait for the device are moved along by a progress engine:
 * every wait in this module and in comm.h (gt_comm_wait and everything built
 * on it) polls every active request of the context, so a send whose data is
 * still being computed starts as soon as the device finishes it, whatever
 * the rank is waiting for meanwhile; no two ranks can wait on each other's
 * unstarted requests. gt_coll_progress does one pass by hand (backward calls
 * it between kernels through gt_progress).
 */
#ifndef GRIDTRAIN_COLLECTIVES_H
#define GRIDTRAIN_COLLECTIVES_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/backend.h"
#include "gridtrain/coll_algos.h"
#include "gridtrain/comm.h"
#include "gridtrain/tensor.h"

typedef struct gt_coll gt_coll;

/* Create the context for backend be. mpi_device is "auto", "on" or "off"
 * (see above); "on" for memory that MPI cannot touch (cpu-guard, a CUDA
 * backend without CUDA-aware MPI) is GT_ERR_INPUT. Registers the progress
 * engine with comm.h (one context per process at a time). Not collective. */
int gt_coll_create(gt_backend *be, const char *mpi_device, gt_coll **coll);

/* [parallel] collectives = nccl: the group operations and data-parallel
 * all-reduces on each of the n communicators (MPI_COMM_NULL and groups of
 * one are skipped) go through an NCCL communicator made here, queued on the
 * device's streams with no host wait; pipeline sends and receives stay MPI.
 * GT_ERR_INPUT when the build has no NCCL, the backend is not cuda, or two
 * ranks of a group share a GPU (NCCL needs one per rank). Collective on
 * each comms[i], in the order given (call it with the same list on every
 * rank). */
int gt_coll_use_nccl(gt_coll *coll, const MPI_Comm *comms, int n);

/* [parallel] allreduce: the operations on comm - the data-parallel
 * buckets' all-reduces, ZeRO's reduce-scatters and all-gathers (requests
 * below), and the blocking all-reduce, all-gather and reduce-scatter of a
 * gt_group on comm - run on algorithm a of coll_algos.h instead of MPI's
 * own; GT_ALGO_AUTO picks per operation and size from table (then
 * required; copied). seg_bytes, window: their segments (0: defaults). A
 * no-op for GT_ALGO_MPI, MPI_COMM_NULL and groups of one; NCCL, where it
 * carries comm, wins. Our algorithms sum on the host: GT_ERR_INPUT when MPI
 * takes device pointers that the host cannot touch (CUDA-aware MPI; use
 * mpi_device = off). Each request holds 3 x window x segment bytes of
 * working memory once used (gt_coll_algo_bytes). Collective on comm. */
int gt_coll_set_algorithm(gt_coll *coll, MPI_Comm comm, gt_algo a, const gt_algo_table *table,
                          size_t seg_bytes, int window);

/* Bytes of working memory our algorithms' requests hold now. */
size_t gt_coll_algo_bytes(const gt_coll *coll);

/* Complete everything in flight, free the staging buffers and streams. */
int gt_coll_destroy(gt_coll **coll);

/* Whether MPI takes this backend's device pointers; a description for the
 * start-up table ("direct (host-visible memory)", "staged through pinned
 * host buffers (cpu-guard)"). */
bool gt_coll_direct(const gt_coll *coll);
const char *gt_coll_describe(const gt_coll *coll);

/* The bytes this rank has sent through this context so far, counted as a
 * bandwidth-optimal (ring) algorithm sends them: 2(N-1)/N of an all-reduce's
 * buffer over N members, (N-1)/N of a reduce-scatter's buffer or of an
 * all-gather's output, all of a send (receives count at their senders). MPI's
 * own algorithms may move more; the measure is the same for every layout and
 * zero stage (zero 1's reduce-scatter and all-gather move what the all-reduce
 * moved). */
double gt_coll_bytes(const gt_coll *coll);

/* Bytes of pinned staging buffers this context holds now. */
size_t gt_coll_staging_bytes(const gt_coll *coll);

/* One pass of the progress engine over every active request. Not
 * collective. */
int gt_coll_progress(gt_coll *coll);

/* The sizes of a chunked message of n elements in pieces of at most max:
 * gt_chunk_count pieces, piece i at *offset with *length elements. All
 * 64-bit; exposed for tests. */
size_t gt_chunk_count(size_t n, size_t max);
void gt_chunk_at(size_t n, size_t max, size_t i, size_t *offset, size_t *length);

/* ---- groups: what layers reduce over ------------------------------------------
 * The tensor-parallel group of a rank (and any other small group). Every
 * operation is a no-op when size == 1 (but for the copy of an all-gather,
 * which goes through the backend) and its time is recorded under the timer
 * event `event` (-1: not timed). coll may be NULL only when size == 1. */
typedef struct gt_group {
  MPI_Comm comm; /* MPI_COMM_NULL when size == 1 is fine */
  int rank, size;
  int event;
  gt_coll *coll;
} gt_group;

/* In-place sum of n elements of type t in the device buffer buf over the
 * group; every member gets the same bits. Blocks the host until MPI is done;
 * the result is in order on the compute stream. Collective on g. */
int gt_group_allreduce_sum(const gt_group *g, void *buf, size_t n, gt_dtype t);

/* recv (size, n) "=" every member's send (n) in rank order, device buffers
 * of type t; send may be the member's own block of recv (in place).
 * Collective on g. */
int gt_group_allgather(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t);

/* recv (n) "=" the sum over the members of their send (size, n) block
 * `rank` (the reduce-scatter half of an all-reduce; sequence parallelism's
 * conjugate of gt_group_allgather). send and recv must not overlap. With
 * size 1 a copy. Collective on g. */
int gt_group_reduce_scatter_sum(const gt_group *g, const void *send, void *recv, size_t n,
                                gt_dtype t);

/* As gt_group_allgather, but only member root receives (recv is not
 * touched elsewhere); always MPI (direct or staged), for the rare whole-
 * state moves of checkpoints. Collective on g. */
int gt_group_gather(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t,
                    int root);

/* ---- requests: point to point and overlapped all-reduce ------------------------
 * A gt_xfer is one reusable endpoint (a pipeline slot's activation send, a
 * DP bucket, ...) with staging room for max_bytes. Start one operation on
 * it, then test or wait; it is free again once complete. */
typedef struct gt_xfer gt_xfer;

int gt_xfer_create(gt_coll *coll, size_t max_bytes, gt_xfer **x);
int gt_xfer_destroy(gt_xfer **x); /* completes what is in flight first */

/* Send n elements of t from the device buffer buf (written by work queued
 * before the call) to rank peer of comm. Complete: buf may be overwritten. */
int gt_xfer_send(gt_xfer *x, const void *buf, size_t n, gt_dtype t, int peer, int tag,
                 MPI_Comm comm);

/* Receive n elements of t from peer into the device buffer buf (work queued
 * before the call that reads buf is respected). Complete: work queued after
 * sees the data. */
int gt_xfer_recv(gt_xfer *x, void *buf, size_t n, gt_dtype t, int peer, int tag,
                 MPI_Comm comm);

/* In-place sum over comm of n fp32 elements of the device buffer buf, whose
 * values are final once the work queued before the call has run (a DP
 * bucket at the moment backward reports it). Collective on comm (every rank
 * starts the same operations in the same order). Complete: work queued after
 * sees the sum. */
int gt_xfer_allreduce(gt_xfer *x, float *buf, size_t n, MPI_Comm comm);

/* A reduction of its own that a request runs in place of MPI's all-reduce
 * (compress.h's compressors): once the data is in host-addressable memory
 * (the device buffer when MPI takes it directly, else the request's
 * staging), start(ctx, buf, n) begins it and test(ctx, &done) moves it
 * along until done, when buf holds the result; bytes(ctx) is what this
 * member sent for it. It must use communicators of its own: requests start
 * in issue order, but its later phases may run while other requests start. */
typedef struct gt_xfer_reducer {
  int (*start)(void *ctx, float *buf, size_t n);
  int (*test)(void *ctx, bool *done);
  double (*bytes)(const void *ctx);
  void *ctx;
} gt_xfer_reducer;

/* As gt_xfer_allreduce, with red doing the reduction (it must stay valid
 * until complete). Needs memory the host can touch, or staging: the
 * context's rule of gt_coll_set_algorithm. Collective on comm. */
int gt_xfer_allreduce_custom(gt_xfer *x, float *buf, size_t n, MPI_Comm comm,
                             const gt_xfer_reducer *red);

/* Reduce-scatter in place over comm of n fp32 elements of the device buffer
 * buf, final once the work queued before the call has run: buf is cut into
 * member blocks of counts[r] elements (comm order, summing to n) and, once
 * complete, member r's block holds the sum over comm of that block; the rest
 * of buf is left as it was. Carried out as one reduction to each member with
 * a non-empty block (a ZeRO bucket usually falls in one or two members'
 * pieces), in block order, so every member issues the same operations.
 * Collective on comm. */
int gt_xfer_reduce_scatter(gt_xfer *x, float *buf, size_t n, const size_t *counts,
                           MPI_Comm comm);

/* All-gather in place over comm of n elements of type t in the device buffer
 * buf: buf is cut into member blocks of counts[r] elements (comm order,
 * summing to n); this member's block is final once the work queued before
 * the call has run, and once complete every block holds its member's data
 * (work queued after sees it). Carried out as one broadcast from each member
 * with a non-empty block, in block order (ZeRO 3 gathers a unit of the flat
 * parameter buffer, which usually falls in one or two members' pieces).
 * Collective on comm. */
int gt_xfer_allgather(gt_xfer *x, void *buf, size_t n, gt_dtype t, const size_t *counts,
                      MPI_Comm comm);

/* Move the request along; *done true once complete (and also when idle). */
int gt_xfer_test(gt_xfer *x, bool *done);

/* Complete the request (honours the wait mode; runs the progress engine). */
int gt_xfer_wait(gt_xfer *x);

/* An operation is in flight. */
bool gt_xfer_busy(const gt_xfer *x);

#endif /* GRIDTRAIN_COLLECTIVES_H */
