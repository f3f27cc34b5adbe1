/*
 * coll_request.c - requests on device buffers (gt_xfer, collectives.h):
 * the state machine and the progress engine.
 *
 * A request moves through three phases:
 *   DEVICE  waiting for an event: the work that produced the data (or that
 *           still reads the buffer MPI will write) has not completed;
 *   MPI     its transport's messages in flight (coll_transport.h's post and
 *           test; MPI's collective in pieces, all posted at once: the next
 *           collective may start before this one is done, so every rank
 *           must have posted all of this one's pieces first to keep the
 *           same order of collectives everywhere);
 *   idle    complete.
 * A transport that queues on the device's streams (NCCL) skips the phases.
 * Staged requests copy through their own pinned buffer on the context's copy
 * stream, which waits for the compute stream's events (and the compute
 * stream waits for the copy back), so copies overlap compute.
 */
#include <stdlib.h>
#include <string.h>

#include "coll_stage.h"
#include "coll_transport.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"

// ---- a reduction of its own (gt_xfer_allreduce_custom) ---------------------------------
/* Not in the transport table: a request asks for it by name. It counts
 * its own bytes once done. */

static int gt_xfer_reducer_post(gt_xfer *x, void *mbuf)
{
  x->pieces = x->posted = 1;
  x->req[0] = MPI_REQUEST_NULL;
  GT_CALL(x->red->start(x->red->ctx, mbuf, x->n));
  return GT_SUCCESS;
}

static int gt_xfer_reducer_test(gt_xfer *x, bool *complete)
{
  GT_CALL(x->red->test(x->red->ctx, complete));
  if (*complete) {
    x->coll->bytes += x->red->bytes(x->red->ctx);
    x->finished = x->pieces;
  }
  return GT_SUCCESS;
}

static const gt_coll_transport gt_xfer_reducer_transport = {
    .name = "reducer",
    .post = gt_xfer_reducer_post,
    .test = gt_xfer_reducer_test,
};

// ---- create, destroy ---------------------------------------------------------------------

int gt_xfer_create(gt_coll *c, size_t max_bytes, gt_xfer **xp)
{
  gt_xfer *x = calloc(1, sizeof *x);
  GT_CHECK_ALLOC(x, sizeof *x);
  x->coll = c;
  x->cap = max_bytes;
  x->req = malloc(sizeof *x->req);
  if (!x->req) {
    free(x);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory for a request");
  }
  x->req[0] = MPI_REQUEST_NULL;
  x->req_cap = 1;
  gt_backend *be = c->be;
  int status = be->ops->event_create(be, &x->ready);
  if (status == GT_SUCCESS)
    status = be->ops->event_create(be, &x->copied);
  if (status == GT_SUCCESS)
    status = gt_coll_stage_request(c, max_bytes, &x->stage);
  if (status != GT_SUCCESS) {
    gt_xfer_destroy(&x);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *xp = x;
  return GT_SUCCESS;
}

static void gt_xfer_unlink(gt_xfer *x)
{
  for (gt_xfer **p = &x->coll->active; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      x->next = NULL;
      return;
    }
}

int gt_xfer_destroy(gt_xfer **xp)
{
  gt_xfer *x = *xp;
  if (!x)
    return GT_SUCCESS;
  int status = x->phase != GT_P_IDLE ? gt_xfer_wait(x) : GT_SUCCESS;
  gt_xfer_unlink(x);
  gt_backend *be = x->coll->be;
  gt_coll_stage_request_free(x->coll, x->stage, x->cap);
  if (x->ready)
    be->ops->event_destroy(be, x->ready);
  if (x->copied)
    be->ops->event_destroy(be, x->copied);
  int s2 = gt_algo_req_destroy(&x->ar);
  status = status != GT_SUCCESS ? status : s2;
  free(x->counts);
  free(x->plist);
  free(x->req);
  free(x);
  *xp = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

bool gt_xfer_busy(const gt_xfer *x) { return x->phase != GT_P_IDLE; }

// ---- starting an operation ---------------------------------------------------------------

/* Collectives start MPI in issue order; reductions sum on the host. */
static bool gt_xkind_collective(gt_xkind k)
{
  return k == GT_X_ALLREDUCE || k == GT_X_REDUCE || k == GT_X_BCAST;
}
static bool gt_xkind_reduce(gt_xkind k) { return k == GT_X_ALLREDUCE || k == GT_X_REDUCE; }

/* The bytes this member sends for a request of kind on bytes over size
 * members (gt_coll_bytes): a collective as the ring, a send all of it, a
 * receive nothing (its sender counts it). */
static double gt_xfer_sent(gt_xkind kind, double bytes, int size)
{
  if (gt_xkind_collective(kind))
    return gt_algo_ring_bytes(gt_xkind_op(kind), size, bytes);
  return kind == GT_X_SEND ? bytes : 0.0;
}

/* Begin an operation on route (red: a reduction of its own, which counts
 * its bytes itself): its flight record, then (unless a fault skips it)
 * the active list in the DEVICE phase. */
static int gt_xfer_begin(gt_xfer *x, gt_xkind kind, void *buf, size_t n, gt_dtype t, int peer,
                         int tag, MPI_Comm comm, gt_coll_route route,
                         const gt_xfer_reducer *red)
{
  GT_CHECK(x->phase == GT_P_IDLE, GT_ERR_INTERNAL,
           "internal error: a request was started while the previous one is in flight");
  const size_t bytes = n * gt_dtype_size(t);
  const gt_flight_op fop = kind == GT_X_SEND     ? GT_FL_SEND
                           : kind == GT_X_RECV   ? GT_FL_RECV
                           : kind == GT_X_REDUCE ? GT_FL_REDUCE_SCATTER
                           : kind == GT_X_BCAST  ? GT_FL_ALLGATHER
                                                 : GT_FL_ALLREDUCE;
  x->fl = gt_flight_begin_p2p(comm, fop, bytes, peer, tag);
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS; /* the caller returns: nothing starts */
  GT_CHECK(x->coll->direct || bytes <= x->cap, GT_ERR_INTERNAL,
           "internal error: %zu bytes for a request with %zu bytes of staging", bytes, x->cap);
  x->kind = kind;
  x->buf = buf;
  x->n = n;
  x->t = t;
  x->peer = peer;
  x->tag = tag;
  x->comm = comm;
  x->pieces = kind == GT_X_ALLREDUCE ? gt_chunk_count(n, GT_PIECE_ELEMS) : 1;
  int size = 1;
  if (gt_xkind_collective(kind))
    GT_CALL_MPI(MPI_Comm_size(comm, &size));
  if (!red)
    x->coll->bytes += gt_xfer_sent(kind, (double)bytes, size);
  x->route = route;
  x->red = red;
  x->posted = x->finished = 0;
  x->phase = GT_P_DEVICE;
  x->next = x->coll->active;
  x->coll->active = x;
  return GT_SUCCESS;
}

/* The MPI transport's route (point to point, and what it carries). */
static gt_coll_route gt_xfer_mpi_route(void)
{
  return (gt_coll_route){.tr = &gt_coll_mpi_transport, .algo = GT_ALGO_MPI};
}

/* A request that route queues on the device's streams (it has no phases):
 * it takes its place in the issue order and is complete for the host. */
static int gt_xfer_queue(gt_xfer *x, const gt_coll_route *route, gt_coll_op op, float *buf,
                         size_t n, const size_t *counts, int size)
{
  gt_coll *c = x->coll;
  GT_CHECK(x->phase == GT_P_IDLE, GT_ERR_INTERNAL,
           "internal error: a request was started while the previous one is in flight");
  c->issued++;
  c->started++;
  c->bytes += gt_algo_ring_bytes(op, size, (double)n * sizeof(float));
  GT_CALL(route->tr->queue(x, route, op, buf, n, counts, size));
  return GT_SUCCESS;
}

int gt_xfer_send(gt_xfer *x, const void *buf, size_t n, gt_dtype t, int peer, int tag,
                 MPI_Comm comm)
{
  gt_coll *c = x->coll;
  GT_CALL(gt_xfer_begin(x, GT_X_SEND, (void *)buf, n, t, peer, tag, comm, gt_xfer_mpi_route(),
                        NULL));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  GT_CALL(c->be->ops->event_record(c->be, x->ready, NULL));
  if (!gt_coll_stage_direct(c, t, false)) /* copy out on the copy stream */
    GT_CALL(gt_coll_stage_out(c, x->ready, x->stage, buf, n * gt_dtype_size(t)));
  GT_CALL(gt_xfer_test(x, &(bool){false}));
  return GT_SUCCESS;
}

int gt_xfer_recv(gt_xfer *x, void *buf, size_t n, gt_dtype t, int peer, int tag, MPI_Comm comm)
{
  gt_backend *be = x->coll->be;
  GT_CALL(gt_xfer_begin(x, GT_X_RECV, buf, n, t, peer, tag, comm, gt_xfer_mpi_route(), NULL));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  /* direct: MPI writes buf once its readers queued so far have run; staged:
   * the readers are respected by the copy back, which waits for `ready`. */
  GT_CALL(be->ops->event_record(be, x->ready, NULL));
  GT_CALL(gt_xfer_test(x, &(bool){false}));
  return GT_SUCCESS;
}

/* A reduction of n fp32 elements of buf just begun: it waits for the work
 * queued so far (staged: the copy out on the copy stream), then a first
 * test. */
static int gt_xfer_launch_f32(gt_xfer *x, float *buf, size_t n)
{
  gt_coll *c = x->coll;
  GT_CALL(c->be->ops->event_record(c->be, x->ready, NULL));
  if (!gt_coll_stage_direct(c, GT_F32, true))
    GT_CALL(gt_coll_stage_out(c, x->ready, x->stage, buf, n * sizeof(float)));
  GT_CALL(gt_xfer_test(x, &(bool){false}));
  return GT_SUCCESS;
}

int gt_xfer_allreduce(gt_xfer *x, float *buf, size_t n, MPI_Comm comm)
{
  const gt_coll_route route = gt_coll_transport_route(x->coll, comm, GT_COLL_ALLREDUCE,
                                                      GT_COLL_USE_REQUEST, n * sizeof(float));
  if (route.tr->queue) {
    int size = 1;
    GT_CALL_MPI(MPI_Comm_size(comm, &size));
    GT_CALL(gt_xfer_queue(x, &route, GT_COLL_ALLREDUCE, buf, n, NULL, size));
    return GT_SUCCESS;
  }
  GT_CALL(gt_xfer_begin(x, GT_X_ALLREDUCE, buf, n, GT_F32, -1, 0, comm, route, NULL));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  x->order = x->coll->issued++;
  return gt_xfer_launch_f32(x, buf, n);
}

int gt_xfer_allreduce_custom(gt_xfer *x, float *buf, size_t n, MPI_Comm comm,
                             const gt_xfer_reducer *red)
{
  gt_coll *c = x->coll;
  GT_CHECK(!c->direct || c->be->host_visible, GT_ERR_INPUT,
           "a reduction on the host (compression) needs host-visible memory or staging: set "
           "[backend] mpi_device = off");
  const gt_coll_route route = {.tr = &gt_xfer_reducer_transport, .algo = GT_ALGO_MPI};
  GT_CALL(gt_xfer_begin(x, GT_X_ALLREDUCE, buf, n, GT_F32, -1, 0, comm, route, red));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  x->order = c->issued++;
  return gt_xfer_launch_f32(x, buf, n);
}

/* The pieces of a reduce-scatter (all-gather) of n elements in member
 * blocks of counts (comm order): one reduction to (broadcast from) each
 * block's member, chunked. */
static int gt_xfer_plan_pieces(gt_xfer *x, size_t n, const size_t *counts, int size)
{
  size_t need = (size_t)size + gt_chunk_count(n, GT_PIECE_ELEMS), count = 0, off = 0;
  if (need > x->plist_cap) {
    gt_xpiece *pl = realloc(x->plist, need * sizeof *pl);
    GT_CHECK_ALLOC(pl, need * sizeof *pl);
    x->plist = pl;
    x->plist_cap = need;
  }
  for (int r = 0; r < size; r++) {
    if (r == x->me) {
      x->own_off = off;
      x->own_len = counts[r];
    }
    for (size_t i = 0; i < gt_chunk_count(counts[r], GT_PIECE_ELEMS); i++) {
      size_t o, len;
      gt_chunk_at(counts[r], GT_PIECE_ELEMS, i, &o, &len);
      GT_ASSERT(count < x->plist_cap);
      x->plist[count++] = (gt_xpiece){r, off + o, len};
    }
    off += counts[r];
  }
  GT_CHECK(off == n, GT_ERR_INTERNAL,
           "internal error: reduce-scatter blocks of %zu elements for a buffer of %zu", off, n);
  x->pieces = count;
  return GT_SUCCESS;
}

/* Start a reduce-scatter or all-gather request: its pieces planned from the
 * member blocks, its place in the issue order taken (undone on failure). */
static int gt_xfer_begin_blocks(gt_xfer *x, gt_xkind kind, void *buf, size_t n, gt_dtype t,
                                const size_t *counts, int me, int size, MPI_Comm comm,
                                gt_coll_route route)
{
  GT_CALL(gt_xfer_begin(x, kind, buf, n, t, -1, 0, comm, route, NULL));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  x->me = me;
  int status = GT_SUCCESS;
  if ((size_t)size > x->counts_cap) {
    size_t *cs = realloc(x->counts, sizeof *cs * (size_t)size);
    status = cs ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory for member counts");
    if (cs) {
      x->counts = cs;
      x->counts_cap = (size_t)size;
    }
  }
  if (status == GT_SUCCESS) {
    memcpy(x->counts, counts, sizeof *counts * (size_t)size);
    status = gt_xfer_plan_pieces(x, n, counts, size);
  }
  if (status != GT_SUCCESS) {
    x->phase = GT_P_IDLE;
    x->kind = GT_X_IDLE;
    gt_xfer_unlink(x);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  x->order = x->coll->issued++;
  return GT_SUCCESS;
}

int gt_xfer_reduce_scatter(gt_xfer *x, float *buf, size_t n, const size_t *counts,
                           MPI_Comm comm)
{
  int me = 0, size = 1;
  GT_CALL_MPI(MPI_Comm_rank(comm, &me));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  const gt_coll_route route = gt_coll_transport_route(
      x->coll, comm, GT_COLL_REDUCE_SCATTER, GT_COLL_USE_REQUEST, n * sizeof(float));
  if (route.tr->queue) {
    GT_CALL(gt_xfer_queue(x, &route, GT_COLL_REDUCE_SCATTER, buf, n, counts, size));
    return GT_SUCCESS;
  }
  GT_CALL(gt_xfer_begin_blocks(x, GT_X_REDUCE, buf, n, GT_F32, counts, me, size, comm, route));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  return gt_xfer_launch_f32(x, buf, n);
}

int gt_xfer_allgather(gt_xfer *x, void *buf, size_t n, gt_dtype t, const size_t *counts,
                      MPI_Comm comm)
{
  gt_coll *c = x->coll;
  int me = 0, size = 1;
  GT_CALL_MPI(MPI_Comm_rank(comm, &me));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  const gt_coll_route route = gt_coll_transport_route(c, comm, GT_COLL_ALLGATHER,
                                                      GT_COLL_USE_REQUEST, n * gt_dtype_size(t));
  GT_CALL(gt_xfer_begin_blocks(x, GT_X_BCAST, buf, n, t, counts, me, size, comm, route));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  GT_CALL(c->be->ops->event_record(c->be, x->ready, NULL));
  /* staged: only this member's block goes out */
  if (!gt_coll_stage_direct(c, t, false) && x->own_len > 0) {
    const size_t es = gt_dtype_size(t);
    GT_CALL(gt_coll_stage_out(c, x->ready, (char *)x->stage + x->own_off * es,
                              (char *)buf + x->own_off * es, x->own_len * es));
  }
  GT_CALL(gt_xfer_test(x, &(bool){false}));
  return GT_SUCCESS;
}

// ---- the state machine -----------------------------------------------------------------

/* The buffer MPI works on: the device buffer itself or the staging copy. */
static void *gt_xfer_mpi_buf(const gt_xfer *x)
{
  return gt_coll_stage_direct(x->coll, x->t, gt_xkind_reduce(x->kind)) ? x->buf : x->stage;
}

/* MPI is done: staged receives and all-reduces copy back; the compute
 * stream waits for the copy. */
static int gt_xfer_finish(gt_xfer *x)
{
  gt_backend *be = x->coll->be;
  const bool staged = gt_xfer_mpi_buf(x) == x->stage && x->kind != GT_X_SEND;
  if (staged) {
    gt_stream *cs = x->coll->copy;
    if (x->kind == GT_X_RECV) /* after the readers of buf queued before the receive */
      GT_CALL(be->ops->stream_wait(be, cs, x->ready));
    /* a reduce-scatter brings back only this member's block, an all-gather
     * the others' (the blocks before and after its own) */
    const size_t es = gt_dtype_size(x->t);
    size_t off[2] = {0, 0}, len[2] = {x->n, 0};
    if (x->kind == GT_X_REDUCE) {
      off[0] = x->own_off;
      len[0] = x->own_len;
    } else if (x->kind == GT_X_BCAST) {
      len[0] = x->own_off;
      off[1] = x->own_off + x->own_len;
      len[1] = x->n - off[1];
    }
    for (int k = 0; k < 2; k++)
      if (len[k])
        GT_CALL(be->ops->upload(be, (char *)x->buf + off[k] * es,
                                (char *)x->stage + off[k] * es, len[k] * es, cs));
    GT_CALL(be->ops->event_record(be, x->copied, cs));
    GT_CALL(be->ops->stream_wait(be, be->compute, x->copied));
    x->copied_pending = true;
  }
  x->phase = GT_P_IDLE;
  x->kind = GT_X_IDLE;
  gt_xfer_unlink(x);
  gt_flight_end(x->fl);
  return GT_SUCCESS;
}

int gt_xfer_test(gt_xfer *x, bool *done)
{
  gt_backend *be = x->coll->be;
  gt_coll *c = x->coll;
  if (x->phase == GT_P_DEVICE) {
    bool ready = true;
    if (x->kind == GT_X_RECV && gt_xfer_mpi_buf(x) == x->stage) {
      /* the staging buffer must be free: the last copy back has run */
      if (x->copied_pending)
        GT_CALL(be->ops->event_query(be, x->copied, &ready));
      if (ready)
        x->copied_pending = false;
    } else {
      GT_CALL(be->ops->event_query(be, x->ready, &ready));
    }
    /* collectives start MPI in issue order on every rank */
    if (ready && gt_xkind_collective(x->kind) && x->order != c->started)
      ready = false;
    if (ready) {
      x->phase = GT_P_MPI;
      if (gt_xkind_collective(x->kind))
        c->started++;
      GT_CALL(x->route.tr->post(x, gt_xfer_mpi_buf(x)));
    }
  }
  if (x->phase == GT_P_MPI) {
    bool complete = false;
    GT_CALL(x->route.tr->test(x, &complete));
    if (complete)
      GT_CALL(gt_xfer_finish(x));
  }
  *done = x->phase == GT_P_IDLE;
  return GT_SUCCESS;
}

// ---- progress and waiting ----------------------------------------------------------------

int gt_coll_progress(gt_coll *c)
{
  /* Several passes: an all-reduce that starts may let the next one start. */
  for (int pass = 0; pass < 2; pass++) {
    gt_xfer *x = c->active;
    while (x) {
      gt_xfer *next = x->next; /* x may leave the list */
      bool done;
      GT_CALL(gt_xfer_test(x, &done));
      x = next;
    }
  }
  return GT_SUCCESS;
}

static int gt_xfer_wait_in(gt_xfer *x)
{
  for (;;) {
    bool done;
    GT_CALL(gt_xfer_test(x, &done));
    if (done)
      return GT_SUCCESS;
    GT_CALL(gt_coll_progress(x->coll));
    GT_CALL(gt_xfer_test(x, &done));
    if (done)
      return GT_SUCCESS;
    gt_comm_pause();
  }
}

int gt_xfer_wait(gt_xfer *x)
{
  if (x->phase == GT_P_IDLE)
    return GT_SUCCESS;
  const long before = gt_flight_wait_on(x->fl); /* for the watchdog */
  const int status = gt_xfer_wait_in(x);
  gt_flight_wait_on(before);
  GT_CALL(status);
  return GT_SUCCESS;
}
