/*
 * coll_mpi.c - the MPI transport (coll_transport.h): MPI's own collectives
 * and point to point on device buffers (direct) or the context's staging;
 * large-count calls for point to point and all-gather, pieces of
 * GT_PIECE_ELEMS for all-reduces. It carries every operation that no other
 * transport claims.
 */
#include <stdlib.h>

#include "coll_stage.h"
#include "coll_transport.h"
#include "gridtrain/error.h"

// ---- element types ---------------------------------------------------------------------

static MPI_Datatype gt_mpi_type(gt_dtype t)
{
  return t == GT_F32 ? MPI_FLOAT : t == GT_I32 ? MPI_INT32_T : MPI_UINT16_T;
}

static MPI_Op gt_mpi_sum(const gt_coll *c, gt_dtype t)
{
  return t == GT_BF16 ? c->sum16[0] : t == GT_F16 ? c->sum16[1] : MPI_SUM;
}

int gt_coll_mpi_create(gt_coll *c)
{
  c->sum16[0] = c->sum16[1] = MPI_OP_NULL;
  if (MPI_Op_create(gt_algo_sum_bf16, 1, &c->sum16[0]) != MPI_SUCCESS ||
      MPI_Op_create(gt_algo_sum_f16, 1, &c->sum16[1]) != MPI_SUCCESS)
    return GT_ERROR(GT_ERR_MPI, "MPI_Op_create of the 16-bit sums failed");
  return GT_SUCCESS;
}

static int gt_coll_mpi_destroy(gt_coll *c)
{
  for (int i = 0; i < 2; i++)
    if (c->sum16[i] != MPI_OP_NULL)
      MPI_Op_free(&c->sum16[i]);
  return GT_SUCCESS;
}

// ---- blocking group operations ------------------------------------------------------------

/* In-place all-reduce of host-addressable memory, in pieces, two in flight. */
static int gt_mpi_allreduce(gt_coll *c, void *buf, size_t n, gt_dtype t, MPI_Comm comm)
{
  const size_t esize = gt_dtype_size(t);
  const size_t count = gt_chunk_count(n, GT_PIECE_ELEMS);
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  for (size_t i = 0; i < count; i++) {
    size_t off, len;
    gt_chunk_at(n, GT_PIECE_ELEMS, i, &off, &len);
    MPI_Request *slot = &reqs[i % 2];
    if (*slot != MPI_REQUEST_NULL)
      GT_CALL(gt_comm_wait(slot));
    GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * esize, (int)len,
                               gt_mpi_type(t), gt_mpi_sum(c, t), comm, slot));
  }
  GT_CALL(gt_comm_waitall(2, reqs));
  return GT_SUCCESS;
}

static int gt_coll_mpi_group_allreduce(const gt_group *g, const gt_coll_route *r, void *buf,
                                       size_t n, gt_dtype t)
{
  (void)r;
  gt_coll *c = g->coll;
  const size_t bytes = n * gt_dtype_size(t);
  if (gt_coll_stage_direct(c, t, true)) {
    GT_CALL(gt_coll_stage_device_done(c));
    GT_CALL(gt_mpi_allreduce(c, buf, n, t, g->comm));
    return GT_SUCCESS;
  }
  void *stage;
  GT_CALL(gt_coll_stage_in(c, buf, bytes, bytes, 0, &stage));
  GT_CALL(gt_mpi_allreduce(c, stage, n, t, g->comm));
  /* In order on the compute stream; the next group operation's download
   * into the same staging buffer queues behind it. */
  GT_CALL(c->be->ops->upload(c->be, buf, stage, bytes, NULL));
  return GT_SUCCESS;
}

/* send may be the member's own block of recv (in place). */
static int gt_mpi_allgather(const void *send, void *recv, size_t n, gt_dtype t, int rank,
                            MPI_Comm comm)
{
  MPI_Request req;
  const bool in_place = send == (char *)recv + (size_t)rank * n * gt_dtype_size(t);
  GT_CALL_MPI(MPI_Iallgather_c(in_place ? MPI_IN_PLACE : send, (MPI_Count)n, gt_mpi_type(t),
                               recv, (MPI_Count)n, gt_mpi_type(t), comm, &req));
  GT_CALL(gt_comm_wait(&req));
  return GT_SUCCESS;
}

static int gt_coll_mpi_group_allgather(const gt_group *g, const gt_coll_route *r,
                                       const void *send, void *recv, size_t n, gt_dtype t)
{
  (void)r;
  gt_coll *c = g->coll;
  const size_t bytes = n * gt_dtype_size(t), whole = bytes * (size_t)g->size;
  if (gt_coll_stage_direct(c, t, false)) {
    GT_CALL(gt_coll_stage_device_done(c));
    GT_CALL(gt_mpi_allgather(send, recv, n, t, g->rank, g->comm));
    return GT_SUCCESS;
  }
  void *stage; /* this member's block goes in after the whole result */
  GT_CALL(gt_coll_stage_in(c, send, bytes, whole + bytes, whole, &stage));
  GT_CALL(gt_mpi_allgather((char *)stage + whole, stage, n, t, g->rank, g->comm));
  GT_CALL(c->be->ops->upload(c->be, recv, stage, whole, NULL));
  return GT_SUCCESS;
}

static int gt_coll_mpi_group_reduce_scatter(const gt_group *g, const gt_coll_route *r,
                                            const void *send, void *recv, size_t n, gt_dtype t)
{
  (void)r;
  gt_coll *c = g->coll;
  const size_t bytes = n * gt_dtype_size(t), whole = bytes * (size_t)g->size;
  MPI_Request req;
  if (gt_coll_stage_direct(c, t, true)) {
    GT_CALL(gt_coll_stage_device_done(c));
    GT_CALL_MPI(MPI_Ireduce_scatter_block_c(send, recv, (MPI_Count)n, gt_mpi_type(t),
                                            gt_mpi_sum(c, t), g->comm, &req));
    GT_CALL(gt_comm_wait(&req));
    return GT_SUCCESS;
  }
  void *stage;
  GT_CALL(gt_coll_stage_in(c, send, whole, whole, 0, &stage));
  /* in place: the sum of block `rank` lands at the start of the stage */
  GT_CALL_MPI(MPI_Ireduce_scatter_block_c(MPI_IN_PLACE, stage, (MPI_Count)n, gt_mpi_type(t),
                                          gt_mpi_sum(c, t), g->comm, &req));
  GT_CALL(gt_comm_wait(&req));
  GT_CALL(c->be->ops->upload(c->be, recv, stage, bytes, NULL));
  return GT_SUCCESS;
}

static int gt_mpi_gather(const void *send, void *recv, size_t n, gt_dtype t, int rank,
                         int root, MPI_Comm comm)
{
  MPI_Request req;
  const bool in_place =
      rank == root && send == (char *)recv + (size_t)rank * n * gt_dtype_size(t);
  GT_CALL_MPI(MPI_Igather_c(in_place ? MPI_IN_PLACE : send, (MPI_Count)n, gt_mpi_type(t), recv,
                            (MPI_Count)n, gt_mpi_type(t), root, comm, &req));
  GT_CALL(gt_comm_wait(&req));
  return GT_SUCCESS;
}

static int gt_coll_mpi_group_gather(const gt_group *g, const void *send, void *recv, size_t n,
                                    gt_dtype t, int root)
{
  gt_coll *c = g->coll;
  const size_t bytes = n * gt_dtype_size(t);
  if (gt_coll_stage_direct(c, t, false)) {
    GT_CALL(gt_coll_stage_device_done(c));
    GT_CALL(gt_mpi_gather(send, recv, n, t, g->rank, root, g->comm));
    return GT_SUCCESS;
  }
  /* the whole gathered buffer is staged on the root only, its own block
   * after it */
  const bool is_root = g->rank == root;
  const size_t whole = bytes * (size_t)g->size;
  void *stage = NULL;
  GT_CALL(gt_coll_stage_in(c, send, bytes, is_root ? whole + bytes : bytes, is_root ? whole : 0,
                           &stage));
  char *mine = is_root ? (char *)stage + whole : stage;
  GT_CALL(gt_mpi_gather(mine, stage, n, t, g->rank, root, g->comm));
  if (is_root)
    GT_CALL(c->be->ops->upload(c->be, recv, stage, whole, NULL));
  return GT_SUCCESS;
}

// ---- requests -----------------------------------------------------------------------------

/* Post the p2p request, or every piece of a collective. */
static int gt_coll_mpi_post(gt_xfer *x, void *mbuf)
{
  const MPI_Datatype type = gt_mpi_type(x->t);
  if (x->pieces > x->req_cap) {
    MPI_Request *r = realloc(x->req, x->pieces * sizeof *r);
    GT_CHECK_ALLOC(r, x->pieces * sizeof *r);
    x->req = r;
    x->req_cap = x->pieces;
  }
  if (x->kind == GT_X_SEND) {
    GT_CALL_MPI(MPI_Isend_c(mbuf, (MPI_Count)x->n, type, x->peer, x->tag, x->comm, &x->req[0]));
    x->posted = 1;
    return GT_SUCCESS;
  }
  if (x->kind == GT_X_RECV) {
    GT_CALL_MPI(MPI_Irecv_c(mbuf, (MPI_Count)x->n, type, x->peer, x->tag, x->comm, &x->req[0]));
    x->posted = 1;
    return GT_SUCCESS;
  }
  while (x->posted < x->pieces) {
    MPI_Request *slot = &x->req[x->posted];
    if (x->kind == GT_X_REDUCE) { /* in place at the block's member */
      const gt_xpiece *pc = &x->plist[x->posted];
      float *at = (float *)mbuf + pc->off;
      GT_CALL_MPI(MPI_Ireduce(pc->root == x->me ? MPI_IN_PLACE : at, at, (int)pc->len,
                              MPI_FLOAT, MPI_SUM, pc->root, x->comm, slot));
    } else if (x->kind == GT_X_BCAST) { /* from the block's member */
      const gt_xpiece *pc = &x->plist[x->posted];
      char *at = (char *)mbuf + pc->off * gt_dtype_size(x->t);
      GT_CALL_MPI(MPI_Ibcast(at, (int)pc->len, type, pc->root, x->comm, slot));
    } else {
      size_t off, len;
      gt_chunk_at(x->n, GT_PIECE_ELEMS, x->posted, &off, &len);
      GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, (float *)mbuf + off, (int)len, MPI_FLOAT,
                                 MPI_SUM, x->comm, slot));
    }
    x->posted++;
  }
  return GT_SUCCESS;
}

static int gt_coll_mpi_test(gt_xfer *x, bool *complete)
{
  for (size_t k = 0; k < x->posted; k++) {
    if (x->req[k] == MPI_REQUEST_NULL)
      continue;
    int flag = 0;
    GT_CALL_MPI(MPI_Test(&x->req[k], &flag, MPI_STATUS_IGNORE));
    if (flag)
      x->finished++;
  }
  *complete = x->finished == x->pieces;
  return GT_SUCCESS;
}

const gt_coll_transport gt_coll_mpi_transport = {
    .name = "mpi",
    .carries = NULL, /* everything */
    .destroy = gt_coll_mpi_destroy,
    .allreduce = gt_coll_mpi_group_allreduce,
    .allgather = gt_coll_mpi_group_allgather,
    .reduce_scatter = gt_coll_mpi_group_reduce_scatter,
    .gather = gt_coll_mpi_group_gather,
    .post = gt_coll_mpi_post,
    .test = gt_coll_mpi_test,
};
