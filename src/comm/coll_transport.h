/*
 * coll_transport.h - the transports of the collectives behind one table
 * (internal to src/comm): NCCL (coll_nccl.c), our own algorithms
 * (coll_ours.c, on coll_algos.h) and MPI (coll_mpi.c). An operation runs on
 * the first transport of the table, in that order, that carries it on its
 * group; MPI carries everything. A new transport is one entry of the table
 * (gt_coll_transports in coll_transport.c) and one file.
 *
 * Every entry keeps the contract of the collectives.h operation it serves,
 * without the accounting (bytes, flight record, timer: the caller's). The
 * group operations (Collective on g) take device buffers and stage them as
 * coll_stage.h says; requests are either queued on the device's streams at
 * once (queue) or run by the state machine of coll_request.c, which calls
 * post once the device is ready and test until complete.
 */
#ifndef GT_COLL_TRANSPORT_H
#define GT_COLL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "coll_impl.h"

/* What an operation is: a blocking group operation or a request. */
typedef enum { GT_COLL_USE_GROUP = 0, GT_COLL_USE_REQUEST } gt_coll_use;

typedef struct gt_coll_transport {
  const char *name;
  /* Whether it carries op on `bytes` of payload over comm for use; fills
   * its part of *route. The same answer on every member of comm. NULL:
   * carries everything. */
  bool (*carries)(const gt_coll *c, MPI_Comm comm, gt_coll_op op, gt_coll_use use,
                  size_t bytes, gt_coll_route *route);
  /* Release the context's state of this transport (the context owns it).
   * Not collective. NULL: none. */
  int (*destroy)(gt_coll *c);
  /* ---- blocking group operations (gt_group_*, device buffers; the
   * context owns any staging). Collective on g. NULL: not carried. */
  int (*allreduce)(const gt_group *g, const gt_coll_route *r, void *buf, size_t n, gt_dtype t);
  int (*allgather)(const gt_group *g, const gt_coll_route *r, const void *send, void *recv,
                   size_t n, gt_dtype t);
  int (*reduce_scatter)(const gt_group *g, const gt_coll_route *r, const void *send,
                        void *recv, size_t n, gt_dtype t);
  int (*gather)(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t,
                int root);
  /* ---- requests
   * queue: an fp32 all-reduce or reduce-scatter (counts: the member blocks)
   * of n elements of buf on the device's streams after the compute
   * stream's work so far, complete for the host at once; the compute stream
   * waits for it. NULL: requests go through the state machine. */
  int (*queue)(gt_xfer *x, const gt_coll_route *r, gt_coll_op op, float *buf, size_t n,
               const size_t *counts, int size);
  /* post: start x's MPI phase on mbuf (x->buf, or its staging copy;
   * untouched by anyone else until complete). Collective on x->comm for a
   * collective kind (every member posts in the same issue order).
   * test: move it along, *complete once done. Not collective. */
  int (*post)(gt_xfer *x, void *mbuf);
  int (*test)(gt_xfer *x, bool *complete);
} gt_coll_transport;

extern const gt_coll_transport gt_coll_nccl_transport;
extern const gt_coll_transport gt_coll_ours_transport;
extern const gt_coll_transport gt_coll_mpi_transport;

/* The route of op on bytes over comm for use: the first transport of the
 * table that carries it and has the entry use needs (group: op's entry;
 * request: queue or post). The same on every member. */
gt_coll_route gt_coll_transport_route(const gt_coll *c, MPI_Comm comm, gt_coll_op op,
                                      gt_coll_use use, size_t bytes);

/* Every transport's destroy, in table order; the first error is returned
 * (after all ran). */
int gt_coll_transport_destroy(gt_coll *c);

/* ---- the MPI transport's pieces that others use (coll_mpi.c) */

/* Create the context's 16-bit MPI sums (the MPI transport's destroy frees
 * them). Not collective. */
int gt_coll_mpi_create(gt_coll *c);

#endif /* GT_COLL_TRANSPORT_H */
