/*
 * gridtrain/comm.h - collectives and waits: the one place where gridtrain's
 * layers, optimizer and trainer talk to MPI during training.
 *
 * (Device buffers go through collectives.h, which builds on this.)
 *
 * Waiting: MPICH busy-polls inside blocking calls, so a rank waiting in an
 * all-reduce steals a core from ranks that compute whenever ranks outnumber
 * cores. Every wait on a request goes through gt_comm_wait, which in
 * GT_WAIT_YIELD mode loops MPI_Test + a short sleep instead of spinning.
 * The trainer picks the mode once ([parallel] wait).
 */
#ifndef GRIDTRAIN_COMM_H
#define GRIDTRAIN_COMM_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum { GT_WAIT_BUSY = 0, GT_WAIT_YIELD = 1 } gt_wait_mode;

/* The thread level MPI_Init_thread provided (main sets it; the watchdog's
 * thread of watchdog.h needs MPI_THREAD_MULTIPLE, and runs without MPI
 * otherwise). */
void gt_comm_set_threads(int provided);
int gt_comm_threads(void);

/* Set / get how this process waits for MPI requests (process-wide). */
void gt_comm_set_wait_mode(gt_wait_mode mode);
gt_wait_mode gt_comm_get_wait_mode(void);

/* Complete one request / n requests according to the wait mode.
 * Not collective by itself (completes what the caller started). */
int gt_comm_wait(MPI_Request *req);
int gt_comm_waitall(int n, MPI_Request reqs[]);

/* A small in-place all-reduce of doubles left in flight: started by
 * gt_allreduce_f64_start, completed by gt_allreduce_finish (which the
 * flight recorder shows it in flight until). Collective on comm like
 * gt_allreduce_f64: every rank starts it in the same order. A request
 * with flight == GT_FLIGHT_SKIP (flight.h) has nothing in flight. */
typedef struct gt_allreduce_req {
  MPI_Request req;
  long flight;
} gt_allreduce_req;
int gt_allreduce_f64_start(double *buf, int n, MPI_Op op, MPI_Comm comm, gt_allreduce_req *r);
int gt_allreduce_finish(gt_allreduce_req *r);

/* In-place all-reduce of n floats in host memory (any 64-bit n; split into
 * pieces of at most 16 MiB, at most two in flight). Collective on comm. */
int gt_allreduce_f32(float *buf, size_t n, MPI_Op op, MPI_Comm comm);

/* Reduce n floats / doubles to root (in place there; buf is only read on
 * other ranks). Collective on comm. For reports and gathers outside the
 * training step (floats: any 64-bit n, in pieces). */
int gt_reduce_f32(float *buf, size_t n, MPI_Op op, int root, MPI_Comm comm);
int gt_reduce_f64(double *buf, int n, MPI_Op op, int root, MPI_Comm comm);

/* In-place all-reduce of n doubles (small payloads). Collective on comm. */
int gt_allreduce_f64(double *buf, int n, MPI_Op op, MPI_Comm comm);

/* In-place all-reduce of n ints; broadcast of n bytes from root (any n:
 * in pieces of 1 GiB). Collective on comm. */
int gt_allreduce_int(int *buf, int n, MPI_Op op, MPI_Comm comm);
int gt_bcast_bytes(void *buf, size_t n, int root, MPI_Comm comm);

/* recv (the concatenation, in rank order, of every member's n_i bytes)
 * "=" every member's send (n bytes; *counts gets every n_i, world size
 * entries, malloc'ed by the caller). Two all-gathers, recorded.
 * Collective on comm. */
int gt_allgatherv_bytes(const void *send, size_t n, void **recv, size_t **counts,
                        MPI_Comm comm);

/* Point to point in host memory, recorded by the flight recorder (peer is
 * the rank in comm): start a send or receive of n bytes (any 64-bit n: in
 * pieces of at most 256 MiB, matched in order), then complete every one
 * with gt_p2p_waitall, which frees them. Not collective. */
typedef struct gt_p2p {
  MPI_Request *reqs;
  int nreqs;
  long fl; /* flight record */
} gt_p2p;
int gt_p2p_send(const void *buf, size_t n, int peer, int tag, MPI_Comm comm, gt_p2p *op);
int gt_p2p_recv(void *buf, size_t n, int peer, int tag, MPI_Comm comm, gt_p2p *op);
int gt_p2p_waitall(int n, gt_p2p ops[]);

/* Every wait of this module (gt_comm_wait and what is built on it) calls
 * fn(ctx) between tests of its request, so that requests that wait for the
 * device (collectives.h) move along whatever the rank waits for. NULL
 * removes it. Process-wide. */
void gt_comm_set_progress(int (*fn)(void *ctx), void *ctx);

/* Run the registered progress function once (nothing when none). */
int gt_comm_progress(void);

/* Between two tests of something that is not complete: a short sleep in
 * yield mode, nothing in busy mode. */
void gt_comm_pause(void);

/* ---- progress -------------------------------------------------------------
 * MPICH moves a non-blocking collective along only while the rank is inside
 * MPI. Code that computes for a long time with communication in flight
 * (backward with data-parallel buckets) calls gt_progress_poll between its
 * kernels; whoever started the communication supplies poll. */
typedef struct gt_progress {
  int (*poll)(void *ctx);
  void *ctx;
} gt_progress;

/* Call p->poll (nothing when p or p->poll is NULL). */
int gt_progress_poll(const gt_progress *p);

/* Barrier that honours the wait mode. Collective on comm. */
int gt_barrier(MPI_Comm comm);

/* A scope for calls into libraries that call MPI themselves (parallel
 * HDF5). Between begin and end, the blocking MPI calls such a library makes
 * wait like gt_comm_wait (src/comm/yield_pmpi.c, through MPI's profiling
 * interface) when any rank of comm is in yield mode; outside, they are
 * MPICH's own. Collective on comm: every rank of every communicator the
 * library uses inside the scope must be inside it too (a non-blocking
 * collective cannot match a blocking one). Scopes do not nest. */
int gt_comm_foreign_begin(MPI_Comm comm);
void gt_comm_foreign_end(void);

/* A watch on the MPI-IO calls that change data on disk
 * (MPI_File_write_at_all, MPI_File_write_at, MPI_File_set_size,
 * MPI_File_sync, MPI_File_close), whoever makes them (parallel HDF5): the
 * definitions of src/comm/yield_pmpi.c pass them through it. It is for a
 * layer that must see those calls' errors itself (the checkpoint's write
 * scope, src/io/write_scope.c). */
typedef struct gt_file_watch {
  /* true: this rank's writes are to fail (fault injection). A collective
   * write then takes part in the collective with no data, an independent
   * one is not made; either returns injected(call) as what MPI returned. */
  bool (*failing)(void);
  int (*injected)(const char *call);
  /* What a call returns to its caller, given what MPI returned (rc) and,
   * for writes, the status st of count items of type (else st NULL). */
  int (*done)(int rc, const char *call, int count, MPI_Datatype type, MPI_Status *st);
} gt_file_watch;

/* Install watch (it must outlive its use), or remove it (NULL): the calls
 * then return what MPI returns. A close that fails while a watch is
 * installed sets the handle to MPI_FILE_NULL. Not collective; one watch at
 * a time. */
void gt_comm_watch_files(const gt_file_watch *watch);

/* Agree on an error. Collective on comm: every rank passes its local status;
 * if any rank failed, the lowest failing rank's code and message become
 * every rank's current error, marked collective (so rank 0 alone prints it
 * and every rank exits cleanly), and that code is returned everywhere.
 * Returns GT_SUCCESS when every rank passed GT_SUCCESS. Blocking; for
 * set-up phases, not for the training loop. */
int gt_error_agree(int status, MPI_Comm comm);

/* The end of a program's main: with status GT_SUCCESS finalize MPI and
 * return 0. Otherwise report the current error once from rank 0 when it is
 * collective (every rank knows it) and finalize; when only this rank knows
 * it, print it here and abort the job so that no rank hangs. Returns the
 * exit status (gt_error_exit_code). */
int gt_comm_finish(int status);

#endif /* GRIDTRAIN_COMM_H */
