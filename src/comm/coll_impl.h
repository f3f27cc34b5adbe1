/*
 * coll_impl.h - the collectives context and request as the modules behind
 * collectives.h share them (internal to src/comm):
 *   collectives.c    the context and the group operations, through one
 *                    accounting wrapper (bytes, flight record, timer);
 *   coll_stage.c     the staging policy: direct or through pinned buffers;
 *   coll_request.c   the request state machine and the progress engine;
 *   coll_transport.c the transport table and the choice of a transport;
 *   coll_mpi.c, coll_nccl.c, coll_ours.c  the transports.
 * Each struct part says which module owns (writes) it.
 */
#ifndef GT_COLL_IMPL_H
#define GT_COLL_IMPL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/backend.h"
#include "gridtrain/coll_algos.h"
#include "gridtrain/collectives.h"
#include "gridtrain/nccl.h"

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

/* The collective a request of kind k carries out (k a collective kind). */
static inline gt_coll_op gt_xkind_op(gt_xkind k)
{
  return k == GT_X_ALLREDUCE ? GT_COLL_ALLREDUCE
         : k == GT_X_REDUCE  ? GT_COLL_REDUCE_SCATTER
                             : GT_COLL_ALLGATHER;
}

/* A piece of a reduce-scatter or an all-gather: elements [off, off + len)
 * of the buffer summed into, or broadcast from, member root. */
typedef struct {
  int root;
  size_t off, len;
} gt_xpiece;
typedef enum { GT_P_IDLE = 0, GT_P_DEVICE, GT_P_MPI } gt_xphase;

struct gt_coll_transport;

/* Where an operation runs: a transport of the table and its state for the
 * group (coll_transport.h). */
typedef struct gt_coll_route {
  const struct gt_coll_transport *tr;
  gt_nccl *nc;      /* nccl: the group's communicator */
  gt_algo_comm *ac; /* ours: the group's communicator ... */
  gt_algo algo;     /* ... and the algorithm (auto resolved) */
} gt_coll_route;

struct gt_xfer {
  gt_coll *coll;
  /* staging (coll_stage.c decides, coll_request.c copies) */
  size_t cap;        /* staging room in bytes */
  void *stage;       /* pinned, staged contexts only */
  gt_device_event *ready;   /* the event the DEVICE phase waits for */
  gt_device_event *copied;  /* staged: the copy back has run (stage free again) */
  bool copied_pending;
  /* the state machine (coll_request.c) */
  gt_xkind kind;
  gt_xphase phase;
  void *buf;
  size_t n;
  gt_dtype t;
  int peer, tag;
  MPI_Comm comm;
  unsigned long long order; /* collectives: issue order */
  long fl;                  /* its flight record (GT_FLIGHT_SKIP: skipped, a fault) */
  gt_xfer *next;            /* active list */
  size_t own_off, own_len;  /* reduce-scatter, all-gather: this member's block */
  int me;                   /* reduce-scatter, all-gather: this member's rank */
  size_t *counts;           /* reduce-scatter, all-gather: the member blocks */
  size_t counts_cap;
  gt_coll_route route;      /* the transport that runs its MPI phase */
  const gt_xfer_reducer *red; /* a reduction of its own (gt_xfer_allreduce_custom) */
  /* the MPI transport */
  MPI_Request *req;         /* one per piece (a p2p request: one) */
  size_t req_cap;
  size_t pieces, posted, finished;
  gt_xpiece *plist;         /* reduce-scatter: its pieces */
  size_t plist_cap;
  /* our transport */
  gt_algo_req *ar;          /* the request, made on first use */
};

struct gt_coll {
  gt_backend *be;
  char describe[160];
  /* staging (coll_stage.c) */
  bool direct;
  gt_stream *copy;    /* staging copies of requests */
  void *stage;        /* blocking group operations */
  size_t stage_cap;
  gt_device_event *ev;
  size_t staging_bytes; /* the requests' staging */
  /* requests (coll_request.c) */
  gt_xfer *active;    /* requests in flight */
  unsigned long long issued, started; /* collectives issued / MPI-started */
  /* accounting (collectives.c's wrapper, and requests as they start) */
  double bytes;       /* payload of every operation so far (gt_coll_bytes) */
  /* the MPI transport (coll_mpi.c) */
  MPI_Op sum16[2];    /* bf16, fp16 sums (fp32 arithmetic) */
  /* the NCCL transport (coll_nccl.c): [parallel] collectives = nccl */
  struct {
    MPI_Comm comm;
    gt_nccl *nc;
  } nccl[GT_COLL_NCCL_MAX];
  int n_nccl;
  /* our transport (coll_ours.c): [parallel] allreduce, the groups it carries */
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

#endif /* GT_COLL_IMPL_H */
