/*
 * collectives.c - device buffers over MPI (collectives.h): the context, and
 * the blocking group operations through one accounting wrapper (bytes sent,
 * flight record, timer event) around the transport that carries them.
 *
 * The rest is split by job: the staging policy in coll_stage.c, requests
 * (the state machine and the progress engine) in coll_request.c, and the
 * transports behind the table of coll_transport.c: MPI (coll_mpi.c), NCCL
 * (coll_nccl.c) and our own algorithms (coll_ours.c).
 */
#include "gridtrain/collectives.h"

#include <stdlib.h>

#include "coll_stage.h"
#include "coll_transport.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"
#include "gridtrain/timer.h"

// ---- chunks ------------------------------------------------------------------------

size_t gt_chunk_count(size_t n, size_t max) { return n == 0 ? 0 : (n - 1) / max + 1; }

void gt_chunk_at(size_t n, size_t max, size_t i, size_t *offset, size_t *length)
{
  *offset = i * max;
  *length = n - *offset < max ? n - *offset : max;
}

// ---- the context ------------------------------------------------------------------------

static int gt_coll_progress_hook(void *ctx) { return gt_coll_progress(ctx); }

int gt_coll_create(gt_backend *be, const char *mpi_device, gt_coll **coll)
{
  gt_coll *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  int status = gt_coll_stage_policy(be, mpi_device, &c->direct, c->describe, sizeof c->describe);
  if (status != GT_SUCCESS) {
    free(c);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  c->be = be;
  c->sum16[0] = c->sum16[1] = MPI_OP_NULL;
  status = gt_coll_stage_create(c);
  if (status == GT_SUCCESS)
    status = gt_coll_mpi_create(c);
  if (status != GT_SUCCESS) {
    gt_coll_destroy(&c);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  gt_comm_set_progress(gt_coll_progress_hook, c);
  *coll = c;
  return GT_SUCCESS;
}

int gt_coll_destroy(gt_coll **coll)
{
  gt_coll *c = *coll;
  if (!c)
    return GT_SUCCESS;
  gt_backend *be = c->be;
  gt_comm_set_progress(NULL, NULL);
  int status = GT_SUCCESS;
  if (c->active)
    status = GT_ERROR(GT_ERR_INTERNAL, "internal error: destroying the collectives context "
                      "with requests in flight");
  int s2 = be->ops->sync(be);
  status = status != GT_SUCCESS ? status : s2;
  int s3 = gt_coll_transport_destroy(c);
  status = status != GT_SUCCESS ? status : s3;
  gt_coll_stage_destroy(c);
  free(c);
  *coll = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

bool gt_coll_direct(const gt_coll *c) { return c->direct; }
double gt_coll_bytes(const gt_coll *c) { return c->bytes; }
const char *gt_coll_describe(const gt_coll *c) { return c->describe; }
size_t gt_coll_staging_bytes(const gt_coll *c) { return c->staging_bytes + c->stage_cap; }

// ---- blocking group operations ------------------------------------------------------------

/* One group operation: op, or the gather to root; send and recv device
 * buffers of n elements of t per member. */
typedef struct {
  gt_coll_op op;
  bool gather;
  const void *send;
  void *recv;
  size_t n;
  gt_dtype t;
  int root;
} gt_group_call;

/* The payload of the call in bytes: a member's buffer (all-reduce, the
 * gather's send), else the whole buffer of the group. */
static size_t gt_group_payload(const gt_group *g, const gt_group_call *k)
{
  const size_t bytes = k->n * gt_dtype_size(k->t);
  return k->gather || k->op == GT_COLL_ALLREDUCE ? bytes : bytes * (size_t)g->size;
}

/* The transport's entry for the call: the first of the table that carries
 * it (the gather: always MPI's). */
static int gt_group_dispatch(const gt_group *g, const gt_group_call *k)
{
  if (k->gather)
    return gt_coll_mpi_transport.gather(g, k->send, k->recv, k->n, k->t, k->root);
  const gt_coll_route r = gt_coll_transport_route(g->coll, g->comm, k->op, GT_COLL_USE_GROUP,
                                                  gt_group_payload(g, k));
  switch (k->op) {
  case GT_COLL_ALLREDUCE: return r.tr->allreduce(g, &r, k->recv, k->n, k->t);
  case GT_COLL_ALLGATHER: return r.tr->allgather(g, &r, k->send, k->recv, k->n, k->t);
  default: return r.tr->reduce_scatter(g, &r, k->send, k->recv, k->n, k->t);
  }
}

/* Every group operation of two or more members: the accounting around
 * its transport. The bytes this member sends (as the ring sends them; a
 * gather's members their block, its root nothing), the flight record
 * (skipped: nothing runs), the timer event of the group. */
static int gt_group_run(const gt_group *g, const gt_group_call *k)
{
  GT_ASSERT(g->coll != NULL);
  const size_t payload = gt_group_payload(g, k);
  const gt_flight_op fop = k->gather                         ? GT_FL_GATHER
                           : k->op == GT_COLL_ALLREDUCE      ? GT_FL_ALLREDUCE
                           : k->op == GT_COLL_REDUCE_SCATTER ? GT_FL_REDUCE_SCATTER
                                                             : GT_FL_ALLGATHER;
  if (k->gather)
    g->coll->bytes += g->rank == k->root ? 0.0 : (double)payload;
  else
    g->coll->bytes += gt_algo_ring_bytes(k->op, g->size, (double)payload);
  const long fl = gt_flight_begin(g->comm, fop, payload);
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  if (g->event >= 0)
    gt_event_begin(g->event);
  int status = gt_group_dispatch(g, k);
  if (g->event >= 0)
    gt_event_end(g->event);
  GT_CALL(status);
  gt_flight_end(fl);
  return GT_SUCCESS;
}

/* A group of one: recv "=" send through the backend. */
static int gt_group_copy(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t)
{
  GT_ASSERT(g->coll != NULL);
  if (recv != send)
    GT_CALL(g->coll->be->ops->copy(g->coll->be, recv, send, n * gt_dtype_size(t), NULL));
  return GT_SUCCESS;
}

int gt_group_allreduce_sum(const gt_group *g, void *buf, size_t n, gt_dtype t)
{
  if (g->size == 1)
    return GT_SUCCESS;
  const gt_group_call k = {.op = GT_COLL_ALLREDUCE, .send = buf, .recv = buf, .n = n, .t = t};
  GT_CALL(gt_group_run(g, &k));
  return GT_SUCCESS;
}

int gt_group_allgather(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t)
{
  if (g->size == 1) {
    GT_CALL(gt_group_copy(g, send, recv, n, t));
    return GT_SUCCESS;
  }
  const gt_group_call k = {.op = GT_COLL_ALLGATHER, .send = send, .recv = recv, .n = n, .t = t};
  GT_CALL(gt_group_run(g, &k));
  return GT_SUCCESS;
}

int gt_group_reduce_scatter_sum(const gt_group *g, const void *send, void *recv, size_t n,
                                gt_dtype t)
{
  GT_ASSERT(g->coll != NULL);
  if (g->size == 1) {
    GT_CALL(gt_group_copy(g, send, recv, n, t));
    return GT_SUCCESS;
  }
  const gt_group_call k = {
      .op = GT_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .n = n, .t = t};
  GT_CALL(gt_group_run(g, &k));
  return GT_SUCCESS;
}

int gt_group_gather(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t,
                    int root)
{
  GT_ASSERT(g->coll != NULL);
  if (g->size == 1) {
    GT_CALL(gt_group_copy(g, send, recv, n, t));
    return GT_SUCCESS;
  }
  const gt_group_call k = {
      .gather = true, .send = send, .recv = recv, .n = n, .t = t, .root = root};
  GT_CALL(gt_group_run(g, &k));
  return GT_SUCCESS;
}
