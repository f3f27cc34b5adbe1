/*
 * coll_nccl.c - the NCCL transport (coll_transport.h): [parallel]
 * collectives = nccl. The group operations and the data-parallel requests'
 * all-reduces and reduce-scatters of a group with an NCCL communicator are
 * queued on the device's streams (gridtrain/nccl.h) with no host wait;
 * requests' all-gathers and point to point stay with the others.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_transport.h"
#include "gridtrain/error.h"

/* The NCCL communicator of comm, or NULL. */
static gt_nccl *gt_coll_nccl_of(const gt_coll *c, MPI_Comm comm)
{
  for (int i = 0; i < c->n_nccl; i++)
    if (c->nccl[i].comm == comm)
      return c->nccl[i].nc;
  return NULL;
}

/* Collective on comm: every member loaded NCCL (loaded: this rank's
 * gt_nccl_load succeeded, else gt_error_message says why) and drives a GPU
 * of its own. The same error on every member otherwise. */
static int gt_coll_nccl_check_gpus(gt_coll *c, MPI_Comm comm, int rank, int size, bool loaded)
{
  enum { LEN = 384 };
  char mine[LEN] = "";
  int len = 0;
  if (!loaded) { /* a record that names no GPU: why NCCL is missing here */
    snprintf(mine, LEN, "!%s", gt_error_message()[0] ? gt_error_message() : "cannot load NCCL");
    gt_error_clear();
  } else {
    GT_CALL_MPI(MPI_Get_processor_name(mine, &len));
    snprintf(mine + strlen(mine), LEN - strlen(mine), " %s", gt_backend_describe(c->be));
  }
  char *all = malloc((size_t)LEN * (size_t)size);
  GT_CHECK_ALLOC(all, (size_t)LEN * (size_t)size);
  MPI_Request req;
  int status = MPI_Iallgather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, comm, &req) == MPI_SUCCESS
                   ? gt_comm_wait(&req)
                   : GT_ERROR(GT_ERR_MPI, "MPI_Iallgather of the GPU names failed");
  for (int a = 0; a < size && status == GT_SUCCESS; a++)
    if (all[(size_t)a * LEN] == '!')
      status = GT_ERROR(GT_ERR_INPUT, "%s%s", a == rank ? "" : "another rank of the group: ",
                        all + (size_t)a * LEN + 1);
  for (int a = 0; a < size && status == GT_SUCCESS; a++)
    for (int b = a + 1; b < size && status == GT_SUCCESS; b++)
      if (strcmp(all + (size_t)a * LEN, all + (size_t)b * LEN) == 0)
        status = GT_ERROR(GT_ERR_INPUT,
                          "[parallel] collectives = nccl: ranks %d and %d of a group share one "
                          "GPU (%s), and NCCL needs a GPU for every rank of a group; use "
                          "collectives = mpi, or as many GPUs as ranks on a node",
                          a, b, all + (size_t)a * LEN);
  free(all);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_coll_use_nccl(gt_coll *c, const MPI_Comm *comms, int n)
{
  GT_CHECK(c->be->device == GT_CUDA, GT_ERR_INPUT,
           "[parallel] collectives = nccl needs [backend] device = cuda (not %s); use "
           "collectives = mpi",
           c->be->name);
  GT_CHECK(gt_nccl_built(), GT_ERR_INPUT,
           "[parallel] collectives = nccl: this gridtrain was built without NCCL; reconfigure "
           "with --with-nccl=DIR, or use collectives = mpi");
  /* every rank loads NCCL; the first group's check shares who could not */
  const bool loaded = gt_nccl_load() == GT_SUCCESS;
  for (int i = 0; i < n; i++) {
    if (comms[i] == MPI_COMM_NULL || gt_coll_nccl_of(c, comms[i]))
      continue;
    int rank, size;
    GT_CALL_MPI(MPI_Comm_rank(comms[i], &rank));
    GT_CALL_MPI(MPI_Comm_size(comms[i], &size));
    if (size == 1)
      continue;
    GT_CHECK(c->n_nccl < GT_COLL_NCCL_MAX, GT_ERR_INTERNAL, "too many NCCL groups");
    GT_CALL(gt_coll_nccl_check_gpus(c, comms[i], rank, size, loaded));
    char id[GT_NCCL_ID_BYTES] = {0};
    if (rank == 0)
      GT_CALL(gt_nccl_unique_id(id));
    MPI_Request req;
    GT_CALL_MPI(MPI_Ibcast(id, GT_NCCL_ID_BYTES, MPI_BYTE, 0, comms[i], &req));
    GT_CALL(gt_comm_wait(&req));
    gt_nccl *nc = NULL;
    GT_CALL(gt_nccl_create(c->be, id, size, rank, &nc));
    c->nccl[c->n_nccl].comm = comms[i];
    c->nccl[c->n_nccl].nc = nc;
    c->n_nccl++;
  }
  if (!loaded) /* no group of two or more needed it */
    gt_error_clear();
  snprintf(c->describe + strlen(c->describe), sizeof c->describe - strlen(c->describe),
           "; TP and DP collectives through %s", gt_nccl_describe());
  return GT_SUCCESS;
}

static int gt_coll_nccl_destroy(gt_coll *c)
{
  int status = GT_SUCCESS;
  for (int i = 0; i < c->n_nccl; i++) {
    const int s = gt_nccl_destroy(&c->nccl[i].nc);
    status = status != GT_SUCCESS ? status : s;
  }
  return status;
}

/* Groups with a communicator; of the requests, all-reduces and
 * reduce-scatters only. */
static bool gt_coll_nccl_carries(const gt_coll *c, MPI_Comm comm, gt_coll_op op,
                                 gt_coll_use use, size_t bytes, gt_coll_route *route)
{
  (void)bytes;
  if (use == GT_COLL_USE_REQUEST && op != GT_COLL_ALLREDUCE && op != GT_COLL_REDUCE_SCATTER)
    return false;
  route->nc = gt_coll_nccl_of(c, comm);
  return route->nc != NULL;
}

// ---- group operations: in order on the compute stream, no host wait ----------------------

static int gt_coll_nccl_allreduce(const gt_group *g, const gt_coll_route *r, void *buf,
                                  size_t n, gt_dtype t)
{
  GT_CALL(gt_nccl_allreduce(g->coll->be, r->nc, buf, n, t, NULL));
  return GT_SUCCESS;
}

static int gt_coll_nccl_allgather(const gt_group *g, const gt_coll_route *r, const void *send,
                                  void *recv, size_t n, gt_dtype t)
{
  GT_CALL(gt_nccl_allgather(g->coll->be, r->nc, send, recv, n, t, NULL));
  return GT_SUCCESS;
}

static int gt_coll_nccl_reduce_scatter(const gt_group *g, const gt_coll_route *r,
                                       const void *send, void *recv, size_t n, gt_dtype t)
{
  GT_CALL(gt_nccl_reduce_scatter(g->coll->be, r->nc, send, recv, n, t, NULL));
  return GT_SUCCESS;
}

// ---- requests ---------------------------------------------------------------------------

/* On the copy stream, after the compute stream's work so far; the compute
 * stream waits for it (NCCL calls are issued in the same order on every
 * rank, as the buckets'). A reduce-scatter is one reduction to each
 * member's block. */
static int gt_coll_nccl_queue(gt_xfer *x, const gt_coll_route *r, gt_coll_op op, float *buf,
                              size_t n, const size_t *counts, int size)
{
  gt_coll *c = x->coll;
  gt_backend *be = c->be;
  GT_CALL(be->ops->event_record(be, x->ready, NULL));
  GT_CALL(be->ops->stream_wait(be, c->copy, x->ready));
  if (op == GT_COLL_ALLREDUCE) {
    GT_CALL(gt_nccl_allreduce(be, r->nc, buf, n, GT_F32, c->copy));
  } else {
    size_t off = 0;
    for (int m = 0; m < size; m++) {
      GT_CALL(gt_nccl_reduce(be, r->nc, buf + off, counts[m], GT_F32, m, c->copy));
      off += counts[m];
    }
  }
  GT_CALL(be->ops->event_record(be, x->copied, c->copy));
  GT_CALL(be->ops->stream_wait(be, be->compute, x->copied));
  return GT_SUCCESS;
}

const gt_coll_transport gt_coll_nccl_transport = {
    .name = "nccl",
    .carries = gt_coll_nccl_carries,
    .destroy = gt_coll_nccl_destroy,
    .allreduce = gt_coll_nccl_allreduce,
    .allgather = gt_coll_nccl_allgather,
    .reduce_scatter = gt_coll_nccl_reduce_scatter,
    .queue = gt_coll_nccl_queue,
};
