/*
 * gridtrain/flight.h - the flight recorder: the last communication
 * operations of this rank, for the hang watchdog (watchdog.h) and
 * `gridtrain flight`.
 *
 * Every collective and point-to-point operation that goes through comm.h
 * and collectives.h is one record in a per-rank ring buffer: the
 * communicator's name (world, dp, pp, tp, embed, node, as registered by the
 * grid), a sequence number, the operation, its bytes and peer, its start
 * and end times, and the training step and pipeline slot at its start.
 * Sequence numbers count per communicator for collectives, and per
 * (communicator, peer, direction, tag) for point to point: every member of
 * a communicator issues its collectives in the same order, so the same
 * number names the same operation on every member, and the k-th send from
 * A to B with tag t is the k-th receive at B from A with tag t. Comparing
 * them across ranks says who never entered an operation that the others
 * wait in.
 *
 * Recording costs a few stores per operation (no system call); the ring
 * holds the last GT_FLIGHT_RECORDS operations. The recorder is per process
 * and meant for the main thread; the watchdog thread only reads it, when
 * the main thread is stuck (a torn record in a dump is possible, and
 * harmless).
 *
 * The test-only faults coll_skip and coll_sleep (fault.h) strike here: a
 * site that begins an operation skips it when gt_flight_begin returns
 * GT_FLIGHT_SKIP.
 */
#ifndef GRIDTRAIN_FLIGHT_H
#define GRIDTRAIN_FLIGHT_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define GT_FLIGHT_RECORDS 4096 /* records kept per rank */
#define GT_FLIGHT_SKIP (-2L)   /* gt_flight_begin: skip this operation (a fault) */
#define GT_FLIGHT_MEMBERS 32   /* members named per channel in a summary */

typedef enum {
  GT_FL_ALLREDUCE = 0,
  GT_FL_REDUCE_SCATTER,
  GT_FL_ALLGATHER,
  GT_FL_GATHER,
  GT_FL_BCAST,
  GT_FL_REDUCE,
  GT_FL_BARRIER,
  GT_FL_SEND,
  GT_FL_RECV,
  GT_FL_CREATE,    /* collective file operations (gt_flight_begin_file): H5Fcreate, */
  GT_FL_OPEN,      /* H5Fopen, */
  GT_FL_CLOSE,     /* H5Fclose, */
  GT_FL_WRITE,     /* a checkpoint's write scope (write_scope.h), */
  GT_FL_CHECKSUMS, /* and the checksum agreement of a checkpoint */
  GT_FL_NOPS
} gt_flight_op;

/* "allreduce", "send", ..., "create", "checksums" (the names GT_FAULT's op=
 * field takes). */
const char *gt_flight_op_name(gt_flight_op op);

/* Name communicator comm for the records ("dp", "tp", ...; at most 15
 * characters); its members' world ranks are looked up once here. A
 * communicator that is named again keeps its counters. MPI_COMM_NULL is
 * ignored. Not collective. */
int gt_flight_name(MPI_Comm comm, const char *name);

/* Forget comm (before MPI_Comm_free: a new communicator may get the same
 * handle). Not collective. */
void gt_flight_forget(MPI_Comm comm);

/* Begin a collective of bytes on comm (gt_flight_begin), or a send or
 * receive with the comm rank peer and tag (gt_flight_begin_p2p; sequence
 * numbers count per peer, direction and tag, as MPI matches them). Returns
 * the record's id
 * for gt_flight_end, -1 when comm is not named (not recorded), or
 * GT_FLIGHT_SKIP when the fault coll_skip says this rank skips it (the
 * caller then returns as if the operation had completed). The fault
 * coll_sleep sleeps here, before the operation begins. Not collective. */
long gt_flight_begin(MPI_Comm comm, gt_flight_op op, size_t bytes);
long gt_flight_begin_p2p(MPI_Comm comm, gt_flight_op op, size_t bytes, int peer, int tag);

/* Collective file operations (parallel HDF5's H5Fcreate, H5Fopen and
 * H5Fclose, a checkpoint's write scope and checksum agreement) are recorded
 * on a channel named "file" per set of member ranks: the communicator's
 * handle may be freed (and reused) before the file is closed, and files on
 * different communicators with the same members are matched in program
 * order like any collective of one communicator. gt_flight_file_channel
 * returns the channel of comm's members (>= 0; -1 when comm is
 * MPI_COMM_NULL, has one member, or the table is full: not recorded); it
 * asks MPI for comm's group (not collective). gt_flight_begin_file begins
 * operation op (GT_FL_CREATE..GT_FL_CHECKSUMS) on that channel, what being
 * the file's base name (at most 39 characters kept), waited for at once as
 * gt_flight_begin's; it returns the record's id for gt_flight_end, -1 for
 * channel -1. The faults coll_sleep, kill (comm=file op=create ...) strike
 * here; coll_skip does not (a file operation cannot be skipped). */
int gt_flight_file_channel(MPI_Comm comm);
long gt_flight_begin_file(int channel, gt_flight_op op, const char *what);

/* This rank made progress inside an open operation that it does not wait
 * in alone (its own data writes inside a checkpoint's write scope): the
 * watchdog counts it as activity, as a begin or an end. Any thread. */
void gt_flight_progress(void);

/* The operation of id (from gt_flight_begin; negative ids are ignored) has
 * completed. */
void gt_flight_end(long id);

/* The main thread now waits for the operation id (a gt_flight_begin
 * operation is waited for from its begin); returns the id it waited for
 * before, to restore when this wait is over. */
long gt_flight_wait_on(long id);

/* The training step and pipeline slot that the records begun from now on
 * belong to: slot 'F' (forward), 'B' (backward) or 'W' (the weight
 * gradients of a split backward) of micro-batch mb, or 0
 * (outside the pipeline schedule). */
void gt_flight_step(long step);
void gt_flight_slot(char slot, int mb);

// ---- for the watchdog ---------------------------------------------------------------------

/* Operations begun and not yet ended, and the time (gt_wall seconds) of the
 * last begin or end. Safe to call from another thread. */
int gt_flight_open(void);
double gt_flight_last_activity(void);

/* Wall-clock seconds (CLOCK_REALTIME): comparable across ranks of a node,
 * and across nodes as far as their clocks agree. */
double gt_flight_wall(void);

/* The state of one channel, for the diagnosis: a communicator's collectives
 * (peer_world -1) or its sends to / receives from one peer. entered counts
 * the operations begun; oldest is the sequence number of the oldest that is
 * still open (-1: none), with its operation, bytes, step and start time. */
typedef struct gt_flight_channel {
  char comm[16];
  int instance;   /* lowest world rank among the communicator's members */
  int peer_world; /* world rank of the peer, -1 for collectives */
  int dir;        /* 0 collective, 1 send, 2 receive */
  int tag;        /* of a send or receive; of a "file" channel, a hash of its members */
  long entered;
  long oldest;
  int op;
  long step;
  double bytes, t0;
  char what[40];                   /* a file operation's file ("" for others) */
  long waited;                     /* the operation the main thread waits for, -1: */
  int wop;                         /* not in this channel; its operation, */
  long wstep;                      /* step, bytes, and when the wait began */
  double wbytes, wt0;
  char wwhat[40];
  int size;                        /* the communicator's members */
  int members[GT_FLIGHT_MEMBERS];  /* world ranks of the first of them */
} gt_flight_channel;

/* Fill up to max channels of this rank (every named communicator's
 * collectives, and every peer it has sent to or received from); *n the
 * count. Not collective; thread-safe enough for a stuck main thread. */
void gt_flight_channels(gt_flight_channel *out, int max, int *n);

/* Write the records, oldest first, as text with a header line naming the
 * rank, host and layout `where`; a file operation's record ends with the
 * file's name (a twelfth field). */
int gt_flight_dump(FILE *f, int world_rank, const char *where);

/* Parse one record line of a dump (what gt_flight_dump writes) into the
 * fields `gridtrain flight` merges: true when line is a record. */
typedef struct gt_flight_line {
  int rank;
  double t0, t1; /* t1 0: never ended */
  char comm[16], op[16];
  long seq, step;
  int peer, tag;
  double bytes;
  char slot[16];
  char what[40]; /* a file operation's file, "" for others */
} gt_flight_line;
bool gt_flight_parse(const char *line, gt_flight_line *rec);

#endif /* GRIDTRAIN_FLIGHT_H */
