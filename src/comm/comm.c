/*
 * comm.c - waits that yield when ranks outnumber cores, chunked all-reduce,
 * and error agreement across ranks.
 */
#include "gridtrain/comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/error.h"
#include "gridtrain/flight.h"
#include "gridtrain/watchdog.h"
#include "gridtrain/timer.h"

static gt_wait_mode gt_wait_current = GT_WAIT_BUSY;
static int gt_thread_level = MPI_THREAD_SINGLE;

void gt_comm_set_threads(int provided) { gt_thread_level = provided; }
int gt_comm_threads(void) { return gt_thread_level; }

void gt_comm_set_wait_mode(gt_wait_mode mode) { gt_wait_current = mode; }
gt_wait_mode gt_comm_get_wait_mode(void) { return gt_wait_current; }

// ---- waits ------------------------------------------------------------------

/* Sleep long enough to give the core away, short enough to react quickly.
 * (PLATFORM.md: MPI_Test + 1-20 us sleeps were 17-35x faster than MPICH's
 * busy polling at 4-8 ranks on 2 cores.) */
static void gt_short_sleep(void)
{
  struct timespec ts = {0, 10000};
  nanosleep(&ts, NULL);
}

static int (*gt_progress_fn)(void *ctx);
static void *gt_progress_ctx;

void gt_comm_set_progress(int (*fn)(void *ctx), void *ctx)
{
  gt_progress_fn = fn;
  gt_progress_ctx = ctx;
}

int gt_comm_progress(void)
{
  if (gt_progress_fn)
    GT_CALL(gt_progress_fn(gt_progress_ctx));
  return GT_SUCCESS;
}

void gt_comm_pause(void)
{
  if (gt_wait_current == GT_WAIT_YIELD)
    gt_short_sleep();
}

int gt_comm_wait(MPI_Request *req)
{
  if (gt_wait_current == GT_WAIT_BUSY && !gt_progress_fn) {
    GT_CALL_MPI(MPI_Wait(req, MPI_STATUS_IGNORE));
    return GT_SUCCESS;
  }
  for (;;) {
    int done = 0;
    GT_CALL_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done)
      return GT_SUCCESS;
    GT_CALL(gt_comm_progress());
    gt_comm_pause();
  }
}

int gt_comm_waitall(int n, MPI_Request reqs[])
{
  /* One at a time: completes the same set, and each wait honours the mode. */
  for (int i = 0; i < n; i++)
    GT_CALL(gt_comm_wait(&reqs[i]));
  return GT_SUCCESS;
}

// ---- collectives ------------------------------------------------------------

#define GT_ALLREDUCE_CHUNK ((size_t)4 << 20) /* floats: 16 MiB */

int gt_allreduce_f32(float *buf, size_t n, MPI_Op op, MPI_Comm comm)
{
  const long fl = gt_flight_begin(comm, GT_FL_ALLREDUCE, n * sizeof(float));
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  size_t nchunks = (n + GT_ALLREDUCE_CHUNK - 1) / GT_ALLREDUCE_CHUNK;
  for (size_t c = 0; c < nchunks; c++) {
    size_t off = c * GT_ALLREDUCE_CHUNK;
    size_t len = n - off < GT_ALLREDUCE_CHUNK ? n - off : GT_ALLREDUCE_CHUNK;
    MPI_Request *slot = &reqs[c % 2];
    if (*slot != MPI_REQUEST_NULL)
      GT_CALL(gt_comm_wait(slot));
    GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)len, MPI_FLOAT, op, comm, slot));
  }
  GT_CALL(gt_comm_waitall(2, reqs));
  gt_flight_end(fl);
  return GT_SUCCESS;
}

/* Reduce count items of type to root, in place there. */
static int gt_reduce(void *buf, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm)
{
  int rank, tsize;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL_MPI(MPI_Type_size(type, &tsize));
  const long fl = gt_flight_begin(comm, GT_FL_REDUCE, (size_t)count * (size_t)tsize);
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  MPI_Request req;
  GT_CALL_MPI(MPI_Ireduce(rank == root ? MPI_IN_PLACE : buf, buf, count, type, op, root, comm,
                          &req));
  GT_CALL(gt_comm_wait(&req));
  gt_flight_end(fl);
  return GT_SUCCESS;
}

int gt_reduce_f32(float *buf, size_t n, MPI_Op op, int root, MPI_Comm comm)
{
  for (size_t off = 0; off < n; off += GT_ALLREDUCE_CHUNK) {
    const size_t len = n - off < GT_ALLREDUCE_CHUNK ? n - off : GT_ALLREDUCE_CHUNK;
    GT_CALL(gt_reduce(buf + off, (int)len, MPI_FLOAT, op, root, comm));
  }
  return GT_SUCCESS;
}

int gt_reduce_f64(double *buf, int n, MPI_Op op, int root, MPI_Comm comm)
{
  GT_CALL(gt_reduce(buf, n, MPI_DOUBLE, op, root, comm));
  return GT_SUCCESS;
}

/* In-place all-reduce of n items of type (size bytes each), recorded. */
static int gt_allreduce_start(void *buf, int n, MPI_Datatype type, size_t size, MPI_Op op,
                              MPI_Comm comm, gt_allreduce_req *r)
{
  r->req = MPI_REQUEST_NULL;
  r->flight = gt_flight_begin(comm, GT_FL_ALLREDUCE, (size_t)n * size);
  if (r->flight != GT_FLIGHT_SKIP)
    GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, n, type, op, comm, &r->req));
  return GT_SUCCESS;
}

int gt_allreduce_finish(gt_allreduce_req *r)
{
  if (r->flight == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  GT_CALL(gt_comm_wait(&r->req));
  gt_flight_end(r->flight);
  r->flight = GT_FLIGHT_SKIP; /* a second finish is a no-op */
  return GT_SUCCESS;
}

int gt_allreduce_f64_start(double *buf, int n, MPI_Op op, MPI_Comm comm, gt_allreduce_req *r)
{
  return gt_allreduce_start(buf, n, MPI_DOUBLE, sizeof *buf, op, comm, r);
}

static int gt_allreduce_small(void *buf, int n, MPI_Datatype type, size_t size, MPI_Op op,
                              MPI_Comm comm)
{
  gt_allreduce_req r;
  GT_CALL(gt_allreduce_start(buf, n, type, size, op, comm, &r));
  GT_CALL(gt_allreduce_finish(&r));
  return GT_SUCCESS;
}

int gt_allreduce_f64(double *buf, int n, MPI_Op op, MPI_Comm comm)
{
  return gt_allreduce_small(buf, n, MPI_DOUBLE, sizeof *buf, op, comm);
}

int gt_progress_poll(const gt_progress *p)
{
  if (p && p->poll)
    GT_CALL(p->poll(p->ctx));
  return GT_SUCCESS;
}

int gt_allreduce_int(int *buf, int n, MPI_Op op, MPI_Comm comm)
{
  return gt_allreduce_small(buf, n, MPI_INT, sizeof *buf, op, comm);
}

int gt_bcast_bytes(void *buf, size_t n, int root, MPI_Comm comm)
{
  const long fl = gt_flight_begin(comm, GT_FL_BCAST, n);
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  const size_t piece = (size_t)1 << 30; /* an int count each */
  for (size_t at = 0; at < n; at += piece) {
    MPI_Request req;
    GT_CALL_MPI(MPI_Ibcast((char *)buf + at, (int)(n - at < piece ? n - at : piece), MPI_BYTE,
                           root, comm, &req));
    GT_CALL(gt_comm_wait(&req));
  }
  gt_flight_end(fl);
  return GT_SUCCESS;
}

// ---- gathers of bytes, point to point ----------------------------------------------------

int gt_allgatherv_bytes(const void *send, size_t n, void **recv, size_t **counts,
                        MPI_Comm comm)
{
  *recv = NULL;
  *counts = NULL;
  int size;
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  unsigned long long mine = n, *all = calloc((size_t)size, sizeof *all);
  int *cnt = calloc((size_t)size, sizeof *cnt), *displ = calloc((size_t)size, sizeof *displ);
  int status = all && cnt && displ ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  long fl = status == GT_SUCCESS ? gt_flight_begin(comm, GT_FL_ALLGATHER, sizeof mine) : -1;
  MPI_Request req;
  if (status == GT_SUCCESS && fl != GT_FLIGHT_SKIP) {
    if (MPI_Iallgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, comm,
                       &req) != MPI_SUCCESS)
      status = GT_ERROR(GT_ERR_MPI, "MPI_Iallgather failed");
    else
      status = gt_comm_wait(&req);
    gt_flight_end(fl);
  }
  size_t total = 0;
  for (int i = 0; status == GT_SUCCESS && i < size; i++) {
    if (total + all[i] > INT_MAX)
      status = GT_ERROR(GT_ERR_INTERNAL, "internal error: an all-gather of more than 2 GiB");
    displ[i] = (int)total;
    cnt[i] = (int)all[i];
    total += all[i];
  }
  char *out = status == GT_SUCCESS ? malloc(total + 1) : NULL;
  size_t *sizes = status == GT_SUCCESS ? malloc((size_t)size * sizeof *sizes) : NULL;
  if (status == GT_SUCCESS && (!out || !sizes))
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory (%zu bytes)", total);
  fl = status == GT_SUCCESS ? gt_flight_begin(comm, GT_FL_ALLGATHER, total) : -1;
  if (status == GT_SUCCESS && fl != GT_FLIGHT_SKIP) {
    if (MPI_Iallgatherv(send, (int)n, MPI_BYTE, out, cnt, displ, MPI_BYTE, comm, &req) !=
        MPI_SUCCESS)
      status = GT_ERROR(GT_ERR_MPI, "MPI_Iallgatherv failed");
    else
      status = gt_comm_wait(&req);
    gt_flight_end(fl);
  }
  for (int i = 0; status == GT_SUCCESS && i < size; i++)
    sizes[i] = all[i];
  free(all);
  free(cnt);
  free(displ);
  if (status != GT_SUCCESS) {
    free(out);
    free(sizes);
    GT_CALL(status);
  }
  *recv = out;
  *counts = sizes;
  return GT_SUCCESS;
}

#define GT_P2P_PIECE ((size_t)256 << 20)

static int gt_p2p_start(void *buf, size_t n, int peer, int tag, MPI_Comm comm, bool send,
                        gt_p2p *op)
{
  op->nreqs = 0;
  op->reqs = NULL;
  op->fl = gt_flight_begin_p2p(comm, send ? GT_FL_SEND : GT_FL_RECV, n, peer, tag);
  if (op->fl == GT_FLIGHT_SKIP) {
    op->fl = -1;
    return GT_SUCCESS;
  }
  const int pieces = (int)(n / GT_P2P_PIECE) + 1;
  op->reqs = malloc((size_t)pieces * sizeof *op->reqs);
  GT_CHECK_ALLOC(op->reqs, (size_t)pieces * sizeof *op->reqs);
  for (int i = 0; i < pieces; i++) {
    const size_t off = (size_t)i * GT_P2P_PIECE;
    const int len = (int)(n - off < GT_P2P_PIECE ? n - off : GT_P2P_PIECE);
    if (send)
      GT_CALL_MPI(MPI_Isend((char *)buf + off, len, MPI_BYTE, peer, tag, comm, &op->reqs[i]));
    else
      GT_CALL_MPI(MPI_Irecv((char *)buf + off, len, MPI_BYTE, peer, tag, comm, &op->reqs[i]));
    op->nreqs = i + 1;
  }
  return GT_SUCCESS;
}

int gt_p2p_send(const void *buf, size_t n, int peer, int tag, MPI_Comm comm, gt_p2p *op)
{
  GT_CALL(gt_p2p_start((void *)buf, n, peer, tag, comm, true, op));
  return GT_SUCCESS;
}

int gt_p2p_recv(void *buf, size_t n, int peer, int tag, MPI_Comm comm, gt_p2p *op)
{
  GT_CALL(gt_p2p_start(buf, n, peer, tag, comm, false, op));
  return GT_SUCCESS;
}

int gt_p2p_waitall(int n, gt_p2p ops[])
{
  int status = GT_SUCCESS;
  for (int i = 0; i < n; i++) {
    if (status == GT_SUCCESS && ops[i].nreqs) {
      const long before = gt_flight_wait_on(ops[i].fl);
      status = gt_comm_waitall(ops[i].nreqs, ops[i].reqs);
      gt_flight_wait_on(before);
    }
    if (status == GT_SUCCESS)
      gt_flight_end(ops[i].fl);
    free(ops[i].reqs);
    ops[i].reqs = NULL;
    ops[i].nreqs = 0;
  }
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- barrier --------------------------------------------------------------------

int gt_barrier(MPI_Comm comm)
{
  const long fl = gt_flight_begin(comm, GT_FL_BARRIER, 0);
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  MPI_Request req;
  GT_CALL_MPI(MPI_Ibarrier(comm, &req));
  GT_CALL(gt_comm_wait(&req));
  gt_flight_end(fl);
  return GT_SUCCESS;
}

// ---- error agreement ----------------------------------------------------------

int gt_error_agree(int status, MPI_Comm comm)
{
  int rank, size;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  /* Non-blocking forms waited for in the wait mode: ranks that arrive early
   * (those with nothing to do in the phase) must not spin on the cores of
   * those still working. */
  int mine = status != GT_SUCCESS ? rank : size, first;
  const long fl = gt_flight_begin(comm, GT_FL_ALLREDUCE, sizeof mine);
  MPI_Request req;
  GT_CALL_MPI(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &req));
  GT_CALL(gt_comm_wait(&req));
  gt_flight_end(fl);
  if (first == size)
    return GT_SUCCESS;
  struct {
    int code;
    char message[1024];
    char origin[256];
  } msg;
  memset(&msg, 0, sizeof msg);
  if (rank == first) {
    msg.code = status;
    snprintf(msg.message, sizeof msg.message, "%s", gt_error_message());
    snprintf(msg.origin, sizeof msg.origin, "%s", gt_error_origin());
  }
  GT_CALL_MPI(MPI_Ibcast(&msg, (int)sizeof msg, MPI_BYTE, first, comm, &req));
  GT_CALL(gt_comm_wait(&req));
  if (rank != first) {
    char origin[300];
    gt_error_set(msg.code, __FILE__, __LINE__, __func__, "%s", msg.message);
    snprintf(origin, sizeof origin, "rank %d, %s", first, msg.origin);
    gt_error_set_origin(origin);
  }
  gt_error_set_collective(true);
  return msg.code;
}

// ---- the end of a program -------------------------------------------------------

int gt_comm_finish(int status)
{
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  gt_watchdog_stop(); /* its thread makes MPI calls: before MPI_Finalize */
  if (status == GT_SUCCESS) {
    if (MPI_Finalize() != MPI_SUCCESS) {
      fprintf(stderr, "gridtrain: rank %d: error: MPI_Finalize failed\n", rank);
      return 1;
    }
    return 0;
  }
  int code = gt_error_exit_code(status);
  if (gt_error_is_collective()) {
    /* Every rank knows this error: rank 0 reports it, all exit cleanly. */
    if (rank == 0)
      gt_error_print(-1);
    MPI_Finalize();
    return code;
  }
  /* Only this rank knows. Alone in the world, it is the job: report and
   * finish cleanly, with the error's status (MPI_Abort's exit races the
   * launcher's clean-up, and a run now and then ended with status 1). */
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  gt_error_print(rank);
  if (size == 1) {
    MPI_Finalize();
    return code;
  }
  /* Else take the job down, so no rank hangs. The launcher forwards our
   * stderr through a pipe and stops reading once the abort arrives, so give
   * the message a moment to get through first (without it about 1 run in 30
   * lost the line). */
  struct timespec pause = {0, 300 * 1000 * 1000};
  nanosleep(&pause, NULL);
  MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}
