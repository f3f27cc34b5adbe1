/*
 * coll_transport.c - the table of transports and the choice of one for an
 * operation (coll_transport.h).
 */
#include "coll_transport.h"

#include "gridtrain/error.h"

/* In the order they are asked: NCCL, where it carries a group, wins over
 * our algorithms, and MPI carries what the others do not. */
static const gt_coll_transport *const gt_coll_transports[] = {
    &gt_coll_nccl_transport,
    &gt_coll_ours_transport,
    &gt_coll_mpi_transport,
};
enum { GT_COLL_TRANSPORTS = sizeof gt_coll_transports / sizeof gt_coll_transports[0] };

/* Whether tr has the entry that op needs for use. */
static bool gt_coll_transport_has(const gt_coll_transport *tr, gt_coll_op op, gt_coll_use use)
{
  if (use == GT_COLL_USE_REQUEST)
    return tr->queue || tr->post;
  switch (op) {
  case GT_COLL_ALLREDUCE: return tr->allreduce;
  case GT_COLL_ALLGATHER: return tr->allgather;
  case GT_COLL_REDUCE_SCATTER: return tr->reduce_scatter;
  default: return false;
  }
}

gt_coll_route gt_coll_transport_route(const gt_coll *c, MPI_Comm comm, gt_coll_op op,
                                      gt_coll_use use, size_t bytes)
{
  gt_coll_route r = {.tr = &gt_coll_mpi_transport, .algo = GT_ALGO_MPI};
  for (int i = 0; i < GT_COLL_TRANSPORTS; i++) {
    const gt_coll_transport *tr = gt_coll_transports[i];
    gt_coll_route cand = {.tr = tr, .algo = GT_ALGO_MPI};
    if (gt_coll_transport_has(tr, op, use) &&
        (!tr->carries || tr->carries(c, comm, op, use, bytes, &cand)))
      return cand;
  }
  return r;
}

int gt_coll_transport_destroy(gt_coll *c)
{
  int status = GT_SUCCESS;
  for (int i = 0; i < GT_COLL_TRANSPORTS; i++) {
    const int s = gt_coll_transports[i]->destroy ? gt_coll_transports[i]->destroy(c) : GT_SUCCESS;
    status = status != GT_SUCCESS ? status : s;
  }
  return status;
}
