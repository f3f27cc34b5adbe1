/*
 * coll_ours.c - the transport of our own algorithms (coll_transport.h):
 * [parallel] allreduce = ring | tree | halving | auto runs a group's
 * all-reduces, reduce-scatters and all-gathers, blocking and requests, on
 * coll_algos.h, summing on the host (the device buffer where the host can
 * touch it, else the context's staging).
 */
#include <stdlib.h>
#include <string.h>

#include "coll_stage.h"
#include "coll_transport.h"
#include "gridtrain/error.h"

int gt_coll_set_algorithm(gt_coll *c, MPI_Comm comm, gt_algo a, const gt_algo_table *table,
                          size_t seg_bytes, int window)
{
  GT_CHECK(a != GT_ALGO_AUTO || table, GT_ERR_INTERNAL, "internal error: auto without a table");
  if (comm == MPI_COMM_NULL || a == GT_ALGO_MPI)
    return GT_SUCCESS;
  int size = 1;
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  if (size == 1)
    return GT_SUCCESS;
  GT_CHECK(!c->direct || c->be->host_visible, GT_ERR_INPUT,
           "[parallel] allreduce = %s sums on the host, and MPI takes this backend's device "
           "pointers directly (CUDA-aware MPI): set [backend] mpi_device = off to stage "
           "through host buffers, or use allreduce = mpi", gt_algo_name(a));
  GT_CHECK(c->n_algo < GT_COLL_ALGO_MAX, GT_ERR_INTERNAL, "too many groups with an algorithm");
  gt_algo_comm *ac = NULL;
  GT_CALL(gt_algo_comm_create(comm, &ac));
  c->algo[c->n_algo].comm = comm;
  c->algo[c->n_algo].ac = ac;
  c->algo[c->n_algo].algo = a;
  c->n_algo++;
  if (table)
    c->table = *table;
  c->seg_bytes = seg_bytes ? seg_bytes : GT_ALGO_SEG_BYTES;
  c->window = window > 0 ? window : GT_ALGO_WINDOW;
  return GT_SUCCESS;
}

size_t gt_coll_algo_bytes(const gt_coll *c) { return c->algo_bytes; }

static int gt_coll_ours_destroy(gt_coll *c)
{
  int status = gt_algo_req_destroy(&c->group_req);
  for (int i = 0; i < c->n_algo; i++) {
    const int s = gt_algo_comm_destroy(&c->algo[i].ac);
    status = status != GT_SUCCESS ? status : s;
  }
  return status;
}

/* The groups [parallel] allreduce names, where the algorithm for op on
 * bytes (auto: from the table) is one of ours. */
static bool gt_coll_ours_carries(const gt_coll *c, MPI_Comm comm, gt_coll_op op,
                                 gt_coll_use use, size_t bytes, gt_coll_route *route)
{
  (void)use;
  for (int i = 0; i < c->n_algo; i++)
    if (c->algo[i].comm == comm) {
      route->ac = c->algo[i].ac;
      route->algo = c->algo[i].algo;
      if (route->algo == GT_ALGO_AUTO)
        route->algo = gt_algo_pick(&c->table, op, gt_algo_comm_size(route->ac), (double)bytes,
                                   (double)c->seg_bytes);
      return route->algo != GT_ALGO_MPI;
    }
  return false;
}

/* Run op with r's algorithm on *req (made on first use), keeping count of
 * the working memory. Non-blocking. */
static int gt_coll_ours_start(gt_coll *c, gt_algo_req **req, const gt_coll_route *r,
                              gt_coll_op op, void *buf, size_t n, gt_dtype t,
                              const size_t *counts)
{
  if (!*req)
    GT_CALL(gt_algo_req_create(c->seg_bytes, c->window, req));
  const size_t before = gt_algo_req_memory(*req);
  int status = gt_algo_start(*req, r->ac, r->algo, op, buf, n, t, counts, 0);
  c->algo_bytes += gt_algo_req_memory(*req) - before;
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- blocking group operations ------------------------------------------------------------

/* op on host-addressable buf, blocking (equal member blocks for
 * reduce-scatter and all-gather). */
static int gt_coll_ours_run(gt_coll *c, const gt_coll_route *r, gt_coll_op op, void *buf,
                            size_t n, gt_dtype t)
{
  const int p = gt_algo_comm_size(r->ac);
  size_t *counts = NULL;
  if (op == GT_COLL_REDUCE_SCATTER || op == GT_COLL_ALLGATHER) {
    counts = malloc(sizeof *counts * (size_t)p);
    GT_CHECK_ALLOC(counts, sizeof *counts * (size_t)p);
    for (int m = 0; m < p; m++)
      counts[m] = n / (size_t)p;
  }
  int status = gt_coll_ours_start(c, &c->group_req, r, op, buf, n, t, counts);
  if (status == GT_SUCCESS)
    status = gt_algo_wait(c->group_req);
  free(counts);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_coll_ours_allreduce(const gt_group *g, const gt_coll_route *r, void *buf,
                                  size_t n, gt_dtype t)
{
  gt_coll *c = g->coll;
  const size_t bytes = n * gt_dtype_size(t);
  if (gt_coll_stage_direct(c, t, true)) {
    GT_CALL(gt_coll_stage_device_done(c));
    GT_CALL(gt_coll_ours_run(c, r, GT_COLL_ALLREDUCE, buf, n, t));
    return GT_SUCCESS;
  }
  void *stage;
  GT_CALL(gt_coll_stage_in(c, buf, bytes, bytes, 0, &stage));
  GT_CALL(gt_coll_ours_run(c, r, GT_COLL_ALLREDUCE, stage, n, t));
  GT_CALL(c->be->ops->upload(c->be, buf, stage, bytes, NULL)); /* in order, as MPI's */
  return GT_SUCCESS;
}

/* In place in recv (or its staging copy), this member's block put there
 * first. */
static int gt_coll_ours_allgather(const gt_group *g, const gt_coll_route *r, const void *send,
                                  void *recv, size_t n, gt_dtype t)
{
  gt_coll *c = g->coll;
  const size_t bytes = n * gt_dtype_size(t), whole = bytes * (size_t)g->size;
  const size_t own = bytes * (size_t)g->rank;
  if (gt_coll_stage_direct(c, t, false)) { /* host-visible memory (gt_coll_set_algorithm) */
    GT_CALL(gt_coll_stage_device_done(c));
    if (send != (char *)recv + own)
      memmove((char *)recv + own, send, bytes);
    GT_CALL(gt_coll_ours_run(c, r, GT_COLL_ALLGATHER, recv, n * (size_t)g->size, t));
    return GT_SUCCESS;
  }
  void *stage;
  GT_CALL(gt_coll_stage_in(c, send, bytes, whole + bytes, own, &stage));
  GT_CALL(gt_coll_ours_run(c, r, GT_COLL_ALLGATHER, stage, n * (size_t)g->size, t));
  GT_CALL(c->be->ops->upload(c->be, recv, stage, whole, NULL));
  return GT_SUCCESS;
}

/* On a staged copy of send (which stays as it is), in place there. */
static int gt_coll_ours_reduce_scatter(const gt_group *g, const gt_coll_route *r,
                                       const void *send, void *recv, size_t n, gt_dtype t)
{
  gt_coll *c = g->coll;
  const size_t bytes = n * gt_dtype_size(t), whole = bytes * (size_t)g->size;
  void *stage;
  GT_CALL(gt_coll_stage_in(c, send, whole, whole, 0, &stage));
  GT_CALL(gt_coll_ours_run(c, r, GT_COLL_REDUCE_SCATTER, stage, n * (size_t)g->size, t));
  GT_CALL(c->be->ops->upload(c->be, recv, (char *)stage + bytes * (size_t)g->rank, bytes, NULL));
  return GT_SUCCESS;
}

// ---- requests -----------------------------------------------------------------------------

/* One request of ours in place of MPI's pieces. */
static int gt_coll_ours_post(gt_xfer *x, void *mbuf)
{
  const gt_coll_op op = gt_xkind_op(x->kind);
  x->pieces = x->posted = 1;
  x->req[0] = MPI_REQUEST_NULL;
  GT_CALL(gt_coll_ours_start(x->coll, &x->ar, &x->route, op, mbuf, x->n, x->t,
                             op == GT_COLL_ALLREDUCE ? NULL : x->counts));
  return GT_SUCCESS;
}

static int gt_coll_ours_test(gt_xfer *x, bool *complete)
{
  GT_CALL(gt_algo_test(x->ar, complete));
  if (*complete)
    x->finished = x->pieces;
  return GT_SUCCESS;
}

const gt_coll_transport gt_coll_ours_transport = {
    .name = "ours",
    .carries = gt_coll_ours_carries,
    .destroy = gt_coll_ours_destroy,
    .allreduce = gt_coll_ours_allreduce,
    .allgather = gt_coll_ours_allgather,
    .reduce_scatter = gt_coll_ours_reduce_scatter,
    .post = gt_coll_ours_post,
    .test = gt_coll_ours_test,
};
