/*
 * collectives.c - device buffers over MPI: direct or staged, with requests
 * that wait for device events and a progress engine (see collectives.h).
 *
 * A request moves through three phases:
 *   DEVICE  waiting for an event: the work that produced the data (or that
 *           still reads the buffer MPI will write) has not completed;
 *   MPI     MPI requests in flight (a collective in pieces, all posted at
 *           once: the next collective may start before this one is done, so
 *           every rank must have posted all of this one's pieces first to
 *           keep the same order of collectives everywhere);
 *   idle    complete.
 * Staged requests copy through their own pinned buffer on the context's copy
 * stream, which waits for the compute stream's events (and the compute
 * stream waits for the copy back), so copies overlap compute.
 */
#include "gridtrain/collectives.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/cuda/cuda_entry.h"
#include "gridtrain/coll_algos.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"
#include "gridtrain/timer.h"

#define GT_PIECE_ELEMS ((size_t)4 << 20) /* all-reduce pieces: 16 MiB of fp32 */
#define GT_COLL_NCCL_MAX 8                /* groups that may use NCCL */
#define GT_COLL_ALGO_MAX 8                /* groups with an algorithm of ours */

/* GT_X_REDUCE: a reduce-scatter as reductions to each block's member;
 * GT_X_BCAST: an all-gather as broadcasts from each block's member. */
typedef enum {
  GT_X_IDLE = 0,
  GT_X_SEND,
  GT_X_RECV,
  GT_X_ALLREDUCE,
  GT_X_REDUCE,
  GT_X_BCAST
} gt_xkind;

/* A piece of a reduce-scatter or an all-gather: elements [off, off + len)
 * of the buffer summed into, or broadcast from, member root. */
typedef struct {
  int root;
  size_t off, len;
} gt_xpiece;
typedef enum { GT_P_IDLE = 0, GT_P_DEVICE, GT_P_MPI } gt_xphase;

struct gt_xfer {
  gt_coll *coll;
  size_t cap;        /* staging room in bytes */
  void *stage;       /* pinned, staged contexts only */
  gt_device_event *ready;   /* the event the DEVICE phase waits for */
  gt_device_event *copied;  /* staged: the copy back has run (stage free again) */
  bool copied_pending;
  gt_xkind kind;
  gt_xphase phase;
  void *buf;
  size_t n;
  gt_dtype t;
  int peer, tag;
  MPI_Comm comm;
  MPI_Request *req;         /* one per piece (a p2p request: one) */
  size_t req_cap;
  size_t pieces, posted, finished;
  gt_xpiece *plist;         /* reduce-scatter: its pieces */
  size_t plist_cap;
  size_t own_off, own_len;  /* reduce-scatter, all-gather: this member's block */
  int me;                   /* reduce-scatter, all-gather: this member's rank */
  size_t *counts;           /* reduce-scatter, all-gather: the member blocks */
  size_t counts_cap;
  gt_algo_req *ar;          /* our algorithms: the request, made on first use */
  bool via_algo;            /* the operation in flight runs on ar ... */
  gt_algo algo;             /* ... with this algorithm */
  gt_algo_comm *ac;         /* ... over this communicator */
  const gt_xfer_reducer *red; /* a reduction of its own (gt_xfer_allreduce_custom) */
  unsigned long long order; /* collectives: issue order */
  long fl;                  /* its flight record (GT_FLIGHT_SKIP: skipped, a fault) */
  gt_xfer *next;            /* active list */
};

struct gt_coll {
  gt_backend *be;
  bool direct;
  char describe[160];
  gt_stream *copy;    /* staging copies of requests */
  MPI_Op sum16[2];    /* bf16, fp16 sums (fp32 arithmetic) */
  void *stage;        /* blocking group operations */
  size_t stage_cap;
  gt_device_event *ev;
  gt_xfer *active;    /* requests in flight */
  unsigned long long issued, started; /* collectives issued / MPI-started */
  size_t staging_bytes;
  double bytes;       /* payload of every operation so far (gt_coll_bytes) */
  /* [parallel] collectives = nccl: the NCCL communicator of each group */
  struct {
    MPI_Comm comm;
    gt_nccl *nc;
  } nccl[GT_COLL_NCCL_MAX];
  int n_nccl;
  /* [parallel] allreduce: the groups whose operations run on our algorithms */
  struct {
    MPI_Comm comm;
    gt_algo_comm *ac;
    gt_algo algo;
  } algo[GT_COLL_ALGO_MAX];
  int n_algo;
  gt_algo_table table; /* for auto */
  size_t seg_bytes;
  int window;
  gt_algo_req *group_req; /* the blocking group operations' */
  size_t algo_bytes;      /* working memory of every request so far */
};

// ---- chunks ------------------------------------------------------------------------

size_t gt_chunk_count(size_t n, size_t max) { return n == 0 ? 0 : (n - 1) / max + 1; }

void gt_chunk_at(size_t n, size_t max, size_t i, size_t *offset, size_t *length)
{
  *offset = i * max;
  *length = n - *offset < max ? n - *offset : max;
}

/* The bytes a member sends for an operation on `bytes` of payload over
 * `size` members under a bandwidth-optimal (ring) algorithm: an all-reduce
 * 2(N-1)/N, a reduce-scatter (GT_X_REDUCE; also an all-gather of `bytes`
 * of output) (N-1)/N, a send all of it, a receive nothing (its sender
 * counts it). See gt_coll_bytes. */
static double gt_ring_bytes(gt_xkind kind, double bytes, int size)
{
  const double share = size > 1 ? (double)(size - 1) / size : 0.0;
  switch (kind) {
  case GT_X_ALLREDUCE: return 2.0 * share * bytes;
  case GT_X_REDUCE:
  case GT_X_BCAST: return share * bytes;
  case GT_X_SEND: return bytes;
  default: return 0.0;
  }
}

// ---- element types ---------------------------------------------------------------------

static MPI_Datatype gt_mpi_type(gt_dtype t)
{
  return t == GT_F32 ? MPI_FLOAT : t == GT_I32 ? MPI_INT32_T : MPI_UINT16_T;
}

static MPI_Op gt_mpi_sum(const gt_coll *c, gt_dtype t)
{
  return t == GT_BF16 ? c->sum16[0] : t == GT_F16 ? c->sum16[1] : MPI_SUM;
}

/* MPI may work on the device buffer itself for this type: user-defined
 * reductions run on the host, so 16-bit sums need host-visible memory. */
static bool gt_direct_for(const gt_coll *c, gt_dtype t, bool reduce)
{
  return c->direct && (!reduce || t == GT_F32 || c->be->host_visible);
}

// ---- the context ------------------------------------------------------------------------

static int gt_coll_progress_hook(void *ctx) { return gt_coll_progress(ctx); }

int gt_coll_create(gt_backend *be, const char *mpi_device, gt_coll **coll)
{
  bool capable = be->host_visible;
  const char *why = be->host_visible ? "host-visible device memory" : "";
#ifdef MPIX_GPU_SUPPORT_CUDA
  if (be->device == GT_CUDA && MPIX_Query_cuda_support()) {
    capable = true;
    why = "CUDA-aware MPI";
  }
#endif
  bool direct = capable;
  if (strcmp(mpi_device, "on") == 0) {
    GT_CHECK(capable, GT_ERR_INPUT,
             "[backend] mpi_device = on: MPI cannot take the device pointers of backend %s "
             "(its memory is not host-visible and MPI is not CUDA-aware); use auto or off",
             be->name);
  } else if (strcmp(mpi_device, "off") == 0) {
    direct = false;
    why = "[backend] mpi_device = off";
  } else {
    GT_CHECK(strcmp(mpi_device, "auto") == 0, GT_ERR_INPUT,
             "[backend] mpi_device = '%s': expected auto, on or off", mpi_device);
    if (!capable)
      why = be->device == GT_HOST ? "device memory is not host-visible"
                                  : "MPI is not CUDA-aware";
  }
  gt_coll *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  c->be = be;
  c->direct = direct;
  snprintf(c->describe, sizeof c->describe, "%s (%s)",
           direct ? "MPI on device buffers" : "staged through pinned host buffers", why);
  c->sum16[0] = c->sum16[1] = MPI_OP_NULL;
  int status = be->ops->stream_create(be, &c->copy);
  if (status == GT_SUCCESS)
    status = be->ops->event_create(be, &c->ev);
  if (status == GT_SUCCESS &&
      (MPI_Op_create(gt_algo_sum_bf16, 1, &c->sum16[0]) != MPI_SUCCESS ||
       MPI_Op_create(gt_algo_sum_f16, 1, &c->sum16[1]) != MPI_SUCCESS))
    status = GT_ERROR(GT_ERR_MPI, "MPI_Op_create of the 16-bit sums failed");
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
  for (int i = 0; i < c->n_nccl; i++) {
    int s3 = gt_nccl_destroy(&c->nccl[i].nc);
    status = status != GT_SUCCESS ? status : s3;
  }
  int s4 = gt_algo_req_destroy(&c->group_req);
  status = status != GT_SUCCESS ? status : s4;
  for (int i = 0; i < c->n_algo; i++) {
    int s5 = gt_algo_comm_destroy(&c->algo[i].ac);
    status = status != GT_SUCCESS ? status : s5;
  }
  for (int i = 0; i < 2; i++)
    if (c->sum16[i] != MPI_OP_NULL)
      MPI_Op_free(&c->sum16[i]);
  if (c->stage)
    be->ops->free_host(be, c->stage);
  if (c->ev)
    be->ops->event_destroy(be, c->ev);
  if (c->copy)
    be->ops->stream_destroy(be, c->copy);
  free(c);
  *coll = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

bool gt_coll_direct(const gt_coll *c) { return c->direct; }
double gt_coll_bytes(const gt_coll *c) { return c->bytes; }
const char *gt_coll_describe(const gt_coll *c) { return c->describe; }
size_t gt_coll_staging_bytes(const gt_coll *c) { return c->staging_bytes + c->stage_cap; }
size_t gt_coll_algo_bytes(const gt_coll *c) { return c->algo_bytes; }

/* The group staging buffer, at least bytes. */
static int gt_coll_stage(gt_coll *c, size_t bytes, void **stage)
{
  if (bytes > c->stage_cap) {
    gt_backend *be = c->be;
    if (c->stage)
      GT_CALL(be->ops->free_host(be, c->stage)); /* waits for queued copies */
    c->stage = NULL;
    c->stage_cap = 0;
    GT_CALL(be->ops->alloc_host(be, bytes, &c->stage));
    c->stage_cap = bytes;
  }
  *stage = c->stage;
  return GT_SUCCESS;
}

/* The host waits until the compute stream has run everything queued. */
static int gt_coll_device_done(gt_coll *c)
{
  GT_CALL(c->be->ops->event_record(c->be, c->ev, NULL));
  GT_CALL(c->be->ops->event_wait(c->be, c->ev));
  return GT_SUCCESS;
}

// ---- NCCL ------------------------------------------------------------------------------------

/* The NCCL communicator of comm, or NULL (MPI then carries it). */
static gt_nccl *gt_coll_nccl(const gt_coll *c, MPI_Comm comm)
{
  for (int i = 0; i < c->n_nccl; i++)
    if (c->nccl[i].comm == comm)
      return c->nccl[i].nc;
  return NULL;
}

/* Collective on comm: every member loaded NCCL (loaded: this rank's
 * gt_nccl_load succeeded, else gt_error_message says why) and drives a GPU
 * of its own. The same error on every member otherwise. */
static int gt_nccl_check_gpus(gt_coll *c, MPI_Comm comm, int rank, int size, bool loaded)
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
    if (comms[i] == MPI_COMM_NULL || gt_coll_nccl(c, comms[i]))
      continue;
    int rank, size;
    GT_CALL_MPI(MPI_Comm_rank(comms[i], &rank));
    GT_CALL_MPI(MPI_Comm_size(comms[i], &size));
    if (size == 1)
      continue;
    GT_CHECK(c->n_nccl < GT_COLL_NCCL_MAX, GT_ERR_INTERNAL, "too many NCCL groups");
    GT_CALL(gt_nccl_check_gpus(c, comms[i], rank, size, loaded));
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

// ---- our algorithms ---------------------------------------------------------------------

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

/* The algorithm of ours that carries op on n bytes over comm (*ac its
 * communicator), or GT_ALGO_MPI. The same on every member. */
static gt_algo gt_coll_algo(const gt_coll *c, MPI_Comm comm, gt_coll_op op, size_t bytes,
                            gt_algo_comm **ac)
{
  for (int i = 0; i < c->n_algo; i++)
    if (c->algo[i].comm == comm) {
      *ac = c->algo[i].ac;
      gt_algo a = c->algo[i].algo;
      if (a == GT_ALGO_AUTO)
        a = gt_algo_pick(&c->table, op, gt_algo_comm_size(*ac), (double)bytes,
                         (double)c->seg_bytes);
      return a;
    }
  return GT_ALGO_MPI;
}

/* Run op with algorithm a on *req (made on first use), keeping count of the
 * working memory. Non-blocking. */
static int gt_coll_algo_start(gt_coll *c, gt_algo_req **req, gt_algo_comm *ac, gt_algo a,
                              gt_coll_op op, void *buf, size_t n, gt_dtype t,
                              const size_t *counts)
{
  if (!*req)
    GT_CALL(gt_algo_req_create(c->seg_bytes, c->window, req));
  const size_t before = gt_algo_req_memory(*req);
  int status = gt_algo_start(*req, ac, a, op, buf, n, t, counts, 0);
  c->algo_bytes += gt_algo_req_memory(*req) - before;
  GT_CALL(status);
  return GT_SUCCESS;
}

/* A blocking group operation on host-addressable buf through our
 * algorithm a (equal member blocks for reduce-scatter and all-gather). */
static int gt_coll_algo_group(gt_coll *c, gt_algo_comm *ac, gt_algo a, gt_coll_op op, void *buf,
                              size_t n, gt_dtype t)
{
  const int p = gt_algo_comm_size(ac);
  size_t *counts = NULL;
  if (op == GT_COLL_REDUCE_SCATTER || op == GT_COLL_ALLGATHER) {
    counts = malloc(sizeof *counts * (size_t)p);
    GT_CHECK_ALLOC(counts, sizeof *counts * (size_t)p);
    for (int r = 0; r < p; r++)
      counts[r] = n / (size_t)p;
  }
  int status = gt_coll_algo_start(c, &c->group_req, ac, a, op, buf, n, t, counts);
  if (status == GT_SUCCESS)
    status = gt_algo_wait(c->group_req);
  free(counts);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- blocking group operations ------------------------------------------------------------

/* In-place all-reduce of host-addressable memory, in pieces. */
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

static int gt_group_allreduce_in(const gt_group *g, void *buf, size_t n, gt_dtype t)
{
  gt_coll *c = g->coll;
  gt_backend *be = c->be;
  const size_t bytes = n * gt_dtype_size(t);
  gt_nccl *nc = gt_coll_nccl(c, g->comm);
  if (nc) { /* in order on the compute stream: no host wait */
    GT_CALL(gt_nccl_allreduce(be, nc, buf, n, t, NULL));
    return GT_SUCCESS;
  }
  gt_algo_comm *ac = NULL;
  const gt_algo a = gt_coll_algo(c, g->comm, GT_COLL_ALLREDUCE, bytes, &ac);
  if (gt_direct_for(c, t, true)) {
    GT_CALL(gt_coll_device_done(c));
    if (a != GT_ALGO_MPI)
      GT_CALL(gt_coll_algo_group(c, ac, a, GT_COLL_ALLREDUCE, buf, n, t));
    else
      GT_CALL(gt_mpi_allreduce(c, buf, n, t, g->comm));
    return GT_SUCCESS;
  }
  void *stage;
  GT_CALL(gt_coll_stage(c, bytes, &stage));
  GT_CALL(be->ops->download(be, stage, buf, bytes, NULL));
  GT_CALL(gt_coll_device_done(c));
  if (a != GT_ALGO_MPI)
    GT_CALL(gt_coll_algo_group(c, ac, a, GT_COLL_ALLREDUCE, stage, n, t));
  else
    GT_CALL(gt_mpi_allreduce(c, stage, n, t, g->comm));
  /* In order on the compute stream; the next group operation's download
   * into the same staging buffer queues behind it. */
  GT_CALL(be->ops->upload(be, buf, stage, bytes, NULL));
  return GT_SUCCESS;
}

int gt_group_allreduce_sum(const gt_group *g, void *buf, size_t n, gt_dtype t)
{
  if (g->size == 1)
    return GT_SUCCESS;
  GT_ASSERT(g->coll != NULL);
  g->coll->bytes += gt_ring_bytes(GT_X_ALLREDUCE, (double)n * gt_dtype_size(t), g->size);
  const long fl = gt_flight_begin(g->comm, GT_FL_ALLREDUCE, n * gt_dtype_size(t));
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  if (g->event >= 0)
    gt_event_begin(g->event);
  int status = gt_group_allreduce_in(g, buf, n, t);
  if (g->event >= 0)
    gt_event_end(g->event);
  GT_CALL(status);
  gt_flight_end(fl);
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

static int gt_group_allgather_in(const gt_group *g, const void *send, void *recv, size_t n,
                                 gt_dtype t)
{
  gt_coll *c = g->coll;
  gt_backend *be = c->be;
  const size_t bytes = n * gt_dtype_size(t);
  gt_nccl *nc = gt_coll_nccl(c, g->comm);
  if (nc) {
    GT_CALL(gt_nccl_allgather(be, nc, send, recv, n, t, NULL));
    return GT_SUCCESS;
  }
  gt_algo_comm *ac = NULL;
  const size_t whole = bytes * (size_t)g->size;
  const gt_algo a = gt_coll_algo(c, g->comm, GT_COLL_ALLGATHER, whole, &ac);
  char *own = (char *)recv + bytes * (size_t)g->rank;
  if (gt_direct_for(c, t, false)) {
    GT_CALL(gt_coll_device_done(c));
    if (a == GT_ALGO_MPI) {
      GT_CALL(gt_mpi_allgather(send, recv, n, t, g->rank, g->comm));
    } else { /* in place: host-visible memory (gt_coll_set_algorithm) */
      if (send != own)
        memmove(own, send, bytes);
      GT_CALL(gt_coll_algo_group(c, ac, a, GT_COLL_ALLGATHER, recv, n * (size_t)g->size, t));
    }
    return GT_SUCCESS;
  }
  void *stage;
  GT_CALL(gt_coll_stage(c, bytes * (size_t)(g->size + 1), &stage));
  char *mine = a == GT_ALGO_MPI ? (char *)stage + whole : (char *)stage + bytes * (size_t)g->rank;
  GT_CALL(be->ops->download(be, mine, send, bytes, NULL));
  GT_CALL(gt_coll_device_done(c));
  if (a == GT_ALGO_MPI)
    GT_CALL(gt_mpi_allgather(mine, stage, n, t, g->rank, g->comm));
  else
    GT_CALL(gt_coll_algo_group(c, ac, a, GT_COLL_ALLGATHER, stage, n * (size_t)g->size, t));
  GT_CALL(be->ops->upload(be, recv, stage, whole, NULL));
  return GT_SUCCESS;
}

int gt_group_gather(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t,
                    int root)
{
  GT_ASSERT(g->coll != NULL);
  gt_coll *c = g->coll;
  gt_backend *be = c->be;
  const size_t bytes = n * gt_dtype_size(t);
  if (g->size == 1) {
    if (recv != send)
      GT_CALL(be->ops->copy(be, recv, send, bytes, NULL));
    return GT_SUCCESS;
  }
  c->bytes += g->rank == root ? 0.0 : (double)bytes; /* what it sends */
  const long fl = gt_flight_begin(g->comm, GT_FL_GATHER, bytes);
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  if (g->event >= 0)
    gt_event_begin(g->event);
  int status = GT_SUCCESS;
  if (gt_direct_for(c, t, false)) {
    status = gt_coll_device_done(c);
    if (status == GT_SUCCESS)
      status = gt_mpi_gather(send, recv, n, t, g->rank, root, g->comm);
  } else { /* the whole gathered buffer is staged on the root only */
    void *stage = NULL;
    const size_t need = g->rank == root ? bytes * (size_t)(g->size + 1) : bytes;
    status = gt_coll_stage(c, need, &stage);
    char *mine = g->rank == root ? (char *)stage + bytes * (size_t)g->size : stage;
    if (status == GT_SUCCESS)
      status = be->ops->download(be, mine, send, bytes, NULL);
    if (status == GT_SUCCESS)
      status = gt_coll_device_done(c);
    if (status == GT_SUCCESS)
      status = gt_mpi_gather(mine, stage, n, t, g->rank, root, g->comm);
    if (status == GT_SUCCESS && g->rank == root)
      status = be->ops->upload(be, recv, stage, bytes * (size_t)g->size, NULL);
  }
  if (g->event >= 0)
    gt_event_end(g->event);
  GT_CALL(status);
  gt_flight_end(fl);
  return GT_SUCCESS;
}

int gt_group_allgather(const gt_group *g, const void *send, void *recv, size_t n, gt_dtype t)
{
  if (g->size == 1) {
    GT_ASSERT(g->coll != NULL);
    if (recv != send)
      GT_CALL(g->coll->be->ops->copy(g->coll->be, recv, send, n * gt_dtype_size(t), NULL));
    return GT_SUCCESS;
  }
  GT_ASSERT(g->coll != NULL);
  g->coll->bytes += gt_ring_bytes(GT_X_REDUCE, (double)n * gt_dtype_size(t) * g->size, g->size);
  const size_t all = n * gt_dtype_size(t) * (size_t)g->size;
  const long fl = gt_flight_begin(g->comm, GT_FL_ALLGATHER, all);
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  if (g->event >= 0)
    gt_event_begin(g->event);
  int status = gt_group_allgather_in(g, send, recv, n, t);
  if (g->event >= 0)
    gt_event_end(g->event);
  GT_CALL(status);
  gt_flight_end(fl);
  return GT_SUCCESS;
}

static int gt_group_reduce_scatter_in(const gt_group *g, const void *send, void *recv,
                                      size_t n, gt_dtype t)
{
  gt_coll *c = g->coll;
  gt_backend *be = c->be;
  const size_t bytes = n * gt_dtype_size(t);
  gt_nccl *nc = gt_coll_nccl(c, g->comm);
  if (nc) {
    GT_CALL(gt_nccl_reduce_scatter(be, nc, send, recv, n, t, NULL));
    return GT_SUCCESS;
  }
  MPI_Request req;
  gt_algo_comm *ac = NULL;
  const size_t whole = bytes * (size_t)g->size;
  const gt_algo a = gt_coll_algo(c, g->comm, GT_COLL_REDUCE_SCATTER, whole, &ac);
  if (a != GT_ALGO_MPI) { /* on a copy (send stays as it is), in place there */
    void *stage;
    GT_CALL(gt_coll_stage(c, whole, &stage));
    GT_CALL(be->ops->download(be, stage, send, whole, NULL));
    GT_CALL(gt_coll_device_done(c));
    GT_CALL(gt_coll_algo_group(c, ac, a, GT_COLL_REDUCE_SCATTER, stage, n * (size_t)g->size, t));
    GT_CALL(be->ops->upload(be, recv, (char *)stage + bytes * (size_t)g->rank, bytes, NULL));
    return GT_SUCCESS;
  }
  if (gt_direct_for(c, t, true)) {
    GT_CALL(gt_coll_device_done(c));
    GT_CALL_MPI(MPI_Ireduce_scatter_block_c(send, recv, (MPI_Count)n, gt_mpi_type(t),
                                            gt_mpi_sum(c, t), g->comm, &req));
    GT_CALL(gt_comm_wait(&req));
    return GT_SUCCESS;
  }
  void *stage;
  GT_CALL(gt_coll_stage(c, whole, &stage));
  GT_CALL(be->ops->download(be, stage, send, whole, NULL));
  GT_CALL(gt_coll_device_done(c));
  /* in place: the sum of block `rank` lands at the start of the stage */
  GT_CALL_MPI(MPI_Ireduce_scatter_block_c(MPI_IN_PLACE, stage, (MPI_Count)n, gt_mpi_type(t),
                                          gt_mpi_sum(c, t), g->comm, &req));
  GT_CALL(gt_comm_wait(&req));
  GT_CALL(be->ops->upload(be, recv, stage, bytes, NULL));
  return GT_SUCCESS;
}

int gt_group_reduce_scatter_sum(const gt_group *g, const void *send, void *recv, size_t n,
                                gt_dtype t)
{
  GT_ASSERT(g->coll != NULL);
  if (g->size == 1) {
    GT_CALL(g->coll->be->ops->copy(g->coll->be, recv, send, n * gt_dtype_size(t), NULL));
    return GT_SUCCESS;
  }
  g->coll->bytes += gt_ring_bytes(GT_X_REDUCE, (double)n * gt_dtype_size(t) * g->size, g->size);
  const size_t all = n * gt_dtype_size(t) * (size_t)g->size;
  const long fl = gt_flight_begin(g->comm, GT_FL_REDUCE_SCATTER, all);
  if (fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  if (g->event >= 0)
    gt_event_begin(g->event);
  int status = gt_group_reduce_scatter_in(g, send, recv, n, t);
  if (g->event >= 0)
    gt_event_end(g->event);
  GT_CALL(status);
  gt_flight_end(fl);
  return GT_SUCCESS;
}

// ---- requests ---------------------------------------------------------------------------

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
  if (status == GT_SUCCESS && !c->direct && max_bytes > 0) {
    status = be->ops->alloc_host(be, max_bytes, &x->stage);
    if (status == GT_SUCCESS)
      c->staging_bytes += max_bytes;
  }
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
  if (x->stage) {
    be->ops->free_host(be, x->stage);
    x->coll->staging_bytes -= x->cap;
  }
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

static int gt_xfer_begin(gt_xfer *x, gt_xkind kind, void *buf, size_t n, gt_dtype t, int peer,
                         int tag, MPI_Comm comm)
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
  if (kind != GT_X_SEND && kind != GT_X_RECV)
    GT_CALL_MPI(MPI_Comm_size(comm, &size));
  x->coll->bytes += gt_ring_bytes(kind, (double)bytes, size);
  x->via_algo = false;
  x->red = NULL;
  if (kind == GT_X_ALLREDUCE || kind == GT_X_REDUCE || kind == GT_X_BCAST) {
    const gt_coll_op op = kind == GT_X_ALLREDUCE ? GT_COLL_ALLREDUCE
                          : kind == GT_X_REDUCE  ? GT_COLL_REDUCE_SCATTER
                                                 : GT_COLL_ALLGATHER;
    x->algo = gt_coll_algo(x->coll, comm, op, bytes, &x->ac);
    x->via_algo = x->algo != GT_ALGO_MPI;
  }
  x->posted = x->finished = 0;
  x->phase = GT_P_DEVICE;
  x->next = x->coll->active;
  x->coll->active = x;
  return GT_SUCCESS;
}

int gt_xfer_send(gt_xfer *x, const void *buf, size_t n, gt_dtype t, int peer, int tag,
                 MPI_Comm comm)
{
  gt_backend *be = x->coll->be;
  GT_CALL(gt_xfer_begin(x, GT_X_SEND, (void *)buf, n, t, peer, tag, comm));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  GT_CALL(be->ops->event_record(be, x->ready, NULL));
  if (!gt_direct_for(x->coll, t, false)) { /* copy out on the copy stream */
    GT_CALL(be->ops->stream_wait(be, x->coll->copy, x->ready));
    GT_CALL(be->ops->download(be, x->stage, buf, n * gt_dtype_size(t), x->coll->copy));
    GT_CALL(be->ops->event_record(be, x->ready, x->coll->copy));
  }
  GT_CALL(gt_xfer_test(x, &(bool){false}));
  return GT_SUCCESS;
}

int gt_xfer_recv(gt_xfer *x, void *buf, size_t n, gt_dtype t, int peer, int tag, MPI_Comm comm)
{
  gt_backend *be = x->coll->be;
  GT_CALL(gt_xfer_begin(x, GT_X_RECV, buf, n, t, peer, tag, comm));
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
  gt_backend *be = c->be;
  GT_CALL(be->ops->event_record(be, x->ready, NULL));
  if (!gt_direct_for(c, GT_F32, true)) {
    GT_CALL(be->ops->stream_wait(be, c->copy, x->ready));
    GT_CALL(be->ops->download(be, x->stage, buf, n * sizeof(float), c->copy));
    GT_CALL(be->ops->event_record(be, x->ready, c->copy));
  }
  GT_CALL(gt_xfer_test(x, &(bool){false}));
  return GT_SUCCESS;
}

/* NCCL on the copy stream, after the compute stream's work so far; the
 * compute stream waits for it; the request is complete for the host at once
 * (NCCL calls are issued in the same order on every rank, as the buckets'). */
static int gt_xfer_allreduce_nccl(gt_xfer *x, gt_nccl *nc, float *buf, size_t n, int size)
{
  gt_coll *c = x->coll;
  gt_backend *be = c->be;
  GT_CHECK(x->phase == GT_P_IDLE, GT_ERR_INTERNAL,
           "internal error: a request was started while the previous one is in flight");
  c->issued++;
  c->started++;
  c->bytes += gt_ring_bytes(GT_X_ALLREDUCE, (double)n * sizeof(float), size);
  GT_CALL(be->ops->event_record(be, x->ready, NULL));
  GT_CALL(be->ops->stream_wait(be, c->copy, x->ready));
  GT_CALL(gt_nccl_allreduce(be, nc, buf, n, GT_F32, c->copy));
  GT_CALL(be->ops->event_record(be, x->copied, c->copy));
  GT_CALL(be->ops->stream_wait(be, be->compute, x->copied));
  return GT_SUCCESS;
}

int gt_xfer_allreduce(gt_xfer *x, float *buf, size_t n, MPI_Comm comm)
{
  gt_nccl *nc = gt_coll_nccl(x->coll, comm);
  if (nc) {
    int size = 1;
    GT_CALL_MPI(MPI_Comm_size(comm, &size));
    GT_CALL(gt_xfer_allreduce_nccl(x, nc, buf, n, size));
    return GT_SUCCESS;
  }
  GT_CALL(gt_xfer_begin(x, GT_X_ALLREDUCE, buf, n, GT_F32, -1, 0, comm));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  x->order = x->coll->issued++;
  return gt_xfer_launch_f32(x, buf, n);
}

int gt_xfer_allreduce_custom(gt_xfer *x, float *buf, size_t n, MPI_Comm comm,
                             const gt_xfer_reducer *red)
{
  gt_coll *c = x->coll;
  gt_backend *be = c->be;
  GT_CHECK(!c->direct || be->host_visible, GT_ERR_INPUT,
           "a reduction on the host (compression) needs host-visible memory or staging: set "
           "[backend] mpi_device = off");
  GT_CALL(gt_xfer_begin(x, GT_X_ALLREDUCE, buf, n, GT_F32, -1, 0, comm));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  x->via_algo = false;
  x->red = red;
  int size = 1;
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  /* the reducer's own bytes are counted when it is done */
  c->bytes -= gt_ring_bytes(GT_X_ALLREDUCE, (double)n * sizeof(float), size);
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
                                const size_t *counts, int me, int size, MPI_Comm comm)
{
  GT_CALL(gt_xfer_begin(x, kind, buf, n, t, -1, 0, comm));
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
  gt_coll *c = x->coll;
  gt_backend *be = c->be;
  int me = 0, size = 1;
  GT_CALL_MPI(MPI_Comm_rank(comm, &me));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  gt_nccl *nc = gt_coll_nccl(c, comm);
  if (nc) { /* as gt_xfer_allreduce_nccl: on the copy stream, in issue order */
    GT_CHECK(x->phase == GT_P_IDLE, GT_ERR_INTERNAL,
             "internal error: a request was started while the previous one is in flight");
    c->issued++;
    c->started++;
    c->bytes += gt_ring_bytes(GT_X_REDUCE, (double)n * sizeof(float), size);
    GT_CALL(be->ops->event_record(be, x->ready, NULL));
    GT_CALL(be->ops->stream_wait(be, c->copy, x->ready));
    size_t off = 0;
    for (int r = 0; r < size; r++) {
      GT_CALL(gt_nccl_reduce(be, nc, buf + off, counts[r], GT_F32, r, c->copy));
      off += counts[r];
    }
    GT_CALL(be->ops->event_record(be, x->copied, c->copy));
    GT_CALL(be->ops->stream_wait(be, be->compute, x->copied));
    return GT_SUCCESS;
  }
  GT_CALL(gt_xfer_begin_blocks(x, GT_X_REDUCE, buf, n, GT_F32, counts, me, size, comm));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  return gt_xfer_launch_f32(x, buf, n);
}

int gt_xfer_allgather(gt_xfer *x, void *buf, size_t n, gt_dtype t, const size_t *counts,
                      MPI_Comm comm)
{
  gt_coll *c = x->coll;
  gt_backend *be = c->be;
  int me = 0, size = 1;
  GT_CALL_MPI(MPI_Comm_rank(comm, &me));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  GT_CALL(gt_xfer_begin_blocks(x, GT_X_BCAST, buf, n, t, counts, me, size, comm));
  if (x->fl == GT_FLIGHT_SKIP)
    return GT_SUCCESS;
  GT_CALL(be->ops->event_record(be, x->ready, NULL));
  if (!gt_direct_for(c, t, false) && x->own_len > 0) { /* only this member's block goes out */
    const size_t es = gt_dtype_size(t);
    GT_CALL(be->ops->stream_wait(be, c->copy, x->ready));
    GT_CALL(be->ops->download(be, (char *)x->stage + x->own_off * es,
                              (char *)buf + x->own_off * es, x->own_len * es, c->copy));
    GT_CALL(be->ops->event_record(be, x->ready, c->copy));
  }
  GT_CALL(gt_xfer_test(x, &(bool){false}));
  return GT_SUCCESS;
}

/* Collectives start MPI in issue order; reductions sum on the host. */
static bool gt_xkind_collective(gt_xkind k)
{
  return k == GT_X_ALLREDUCE || k == GT_X_REDUCE || k == GT_X_BCAST;
}
static bool gt_xkind_reduce(gt_xkind k) { return k == GT_X_ALLREDUCE || k == GT_X_REDUCE; }

/* The buffer MPI works on: the device buffer itself or the staging copy. */
static void *gt_xfer_mpi_buf(const gt_xfer *x)
{
  return gt_direct_for(x->coll, x->t, gt_xkind_reduce(x->kind)) ? x->buf : x->stage;
}

/* Post MPI requests: the p2p one, or every piece of a collective. */
static int gt_xfer_post(gt_xfer *x)
{
  void *mbuf = gt_xfer_mpi_buf(x);
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
  if (x->red) { /* a reduction of its own */
    x->pieces = x->posted = 1;
    x->req[0] = MPI_REQUEST_NULL;
    GT_CALL(x->red->start(x->red->ctx, mbuf, x->n));
    return GT_SUCCESS;
  }
  if (x->via_algo) { /* one request of ours in place of the pieces */
    const gt_coll_op op = x->kind == GT_X_ALLREDUCE ? GT_COLL_ALLREDUCE
                          : x->kind == GT_X_REDUCE  ? GT_COLL_REDUCE_SCATTER
                                                    : GT_COLL_ALLGATHER;
    x->pieces = x->posted = 1;
    x->req[0] = MPI_REQUEST_NULL;
    GT_CALL(gt_coll_algo_start(x->coll, &x->ar, x->ac, x->algo, op, mbuf, x->n, x->t,
                               op == GT_COLL_ALLREDUCE ? NULL : x->counts));
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
      GT_CALL(gt_xfer_post(x));
    }
  }
  if (x->phase == GT_P_MPI && (x->via_algo || x->red)) {
    bool complete = false;
    if (x->red)
      GT_CALL(x->red->test(x->red->ctx, &complete));
    else
      GT_CALL(gt_algo_test(x->ar, &complete));
    if (complete && x->red)
      c->bytes += x->red->bytes(x->red->ctx);
    if (complete) {
      x->finished = x->pieces;
      GT_CALL(gt_xfer_finish(x));
    }
  } else if (x->phase == GT_P_MPI) {
    for (size_t k = 0; k < x->posted; k++) {
      if (x->req[k] == MPI_REQUEST_NULL)
        continue;
      int flag = 0;
      GT_CALL_MPI(MPI_Test(&x->req[k], &flag, MPI_STATUS_IGNORE));
      if (flag)
        x->finished++;
    }
    if (x->finished == x->pieces)
      GT_CALL(gt_xfer_finish(x));
  }
  *done = x->phase == GT_P_IDLE;
  return GT_SUCCESS;
}

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
