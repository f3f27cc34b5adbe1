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

/* In-place all-reduce of n ints; broadcast of n bytes from root.
 * Collective on comm. */
int gt_allreduce_int(int *buf, int n, MPI_Op op, MPI_Comm comm);
int gt_bcast_bytes(void *buf, size_t n, int root, MPI_Comm comm);

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

/* A write scope: between begin and end, the MPI-IO calls that put data on
 * disk (MPI_File_write_at_all, MPI_File_write_at, MPI_File_set_size,
 * MPI_File_sync, MPI_File_close), whoever makes them, note the first error
 * on this rank - a failed call or a write of fewer bytes than asked - and
 * report success in full, so that a library such as parallel HDF5 makes the
 * same collective calls on every rank to the end instead of leaving them on
 * the rank that failed (src/comm/yield_pmpi.c says why). The data written
 * in the scope can then not be trusted on any rank until the error has been
 * agreed on. fail_writes makes every write of the scope on this rank fail
 * with an MPI_ERR_IO error (GT_FAULT=ckpt_write_fail, fault.h); a collective
 * write still takes part in the collective, with no data.
 * Not collective; scopes do not nest. Works in both wait modes. */
void gt_comm_io_begin(bool fail_writes);

/* End the write scope. GT_SUCCESS when no call failed; otherwise
 * GT_ERR_SYSTEM with the first error as the current one ("MPI_File_write_at_all
 * failed: No space left on device"). The error is this rank's alone: agree
 * on it (gt_error_agree) after the file is closed everywhere. */
int gt_comm_io_end(void);

/* Inside a write scope, for writes that do not go through MPI-IO (the
 * checkpoint writer's own pwrite of the tensor data, checkpoint.c): note a
 * failed one with its one-line description ("pwrite failed: No space left
 * on device (...)"); the first error noted in the scope, from MPI-IO or from
 * here, is the one gt_comm_io_end reports. Outside a scope, a no-op. Not
 * collective. */
void gt_comm_io_note(const char *what);

/* True inside a write scope whose writes are to fail (gt_comm_io_begin's
 * fail_writes): a writer outside MPI-IO then fails its writes too. */
bool gt_comm_io_failing(void);

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
