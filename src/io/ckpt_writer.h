/*
 * ckpt_writer.h - one rank's writer of a checkpoint file, in phases
 * (internal to src/io): shared by the synchronous write (ckpt_write.c) and
 * the asynchronous one (ckpt_async.c), which makes the HDF5 calls of
 * begin and end on the main thread and the raw writes of the data on a
 * writer thread (docs/checkpoints.md, "Asynchronous checkpoints").
 */
#ifndef GT_IO_CKPT_WRITER_H
#define GT_IO_CKPT_WRITER_H

#include <hdf5.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt_internal.h"

/* A deferred write (async): len entries of a dataset of `total` entries at
 * file byte `base`, from entry `logical` on, held at src (host memory, 4 KiB
 * aligned as in the file where it can be), with its checksum terms added
 * into sums; tensor and kind name it in an error. */
typedef struct {
  const float *src;
  size_t base, logical, len, total;
  uint64_t *sums;
  int tensor, kind;
} gt_ckpt_job;

/* A copy the writer thread makes before its jobs (gt_ckpt_state.copy_later
 * with host-visible memory): n floats from the caller's state to the arena. */
typedef struct {
  float *dst;
  const float *src;
  size_t n;
} gt_ckpt_copy;

/* One rank's state through a write. A failure that only this rank meets (a
 * download, a broken invariant, an open(2)) must not take it out of the
 * collective calls that the other ranks go on making (H5Dcreate2, the
 * exchange inside the group, MPI_Allreduce, H5Acreate2, H5Fclose): the
 * first one is kept in `local`, message and all, and the rank writes
 * nothing more. Failed writes of the data are noted in the write scope
 * (write_scope.h) in a synchronous write, in `io` in a deferred one (the
 * writer thread's, read by the main thread once the thread is done).
 * Errors of the collective HDF5 calls are the same on every rank and end
 * the write everywhere alike. */
typedef struct gt_ckpt_writer {
  const gt_ckpt_state *st;
  const char *path;        /* the file, for the data's own descriptors */
  float *staging;          /* the local entries, as downloaded (an unsplit
                              tensor's where they lie in a file block:
                              gt_ckpt_place) */
  float *send, *recv, *rows; /* the exchange: packed for the group, from it,
                              and this rank's contiguous range */
  size_t cap;              /* floats each of them holds */
  size_t rows_cap;         /* floats rows holds */
  hid_t *dsets;            /* ntensors x GT_NKINDS datasets */
  uint64_t *sums;          /* Fletcher-32 terms, 2 per block of every dataset */
  size_t *sum_base;        /* first block of each dataset in sums */
  size_t nsums;
  uint32_t *values;        /* nsums checksums */
  int fd, fd_direct;       /* the file through the page cache / O_DIRECT; -1 */
  gt_swap_plan plan;       /* the exchange inside the group */
  int rank;  /* the caller's rank in the job, for the fault hooks */
  long step; /* the checkpoint's step, for the fault hooks */
  int local; /* first local failure, or GT_SUCCESS */
  char local_message[1024];
  bool fail_writes;        /* GT_FAULT: this rank's data writes fail */
  const char *fault;       /* the fault's name, for the message */
  bool kill;               /* GT_FAULT=ckpt_kill: die halfway through */
  /* deferred (async): the snapshot and the writes to make from it */
  bool defer;
  float *arena;            /* pinned host memory for every downloaded entry */
  size_t arena_cap, arena_used; /* floats */
  gt_ckpt_job *jobs;
  size_t njobs, jobs_cap;
  gt_ckpt_copy *copies;    /* made by the thread first (st->copy_later) */
  size_t ncopies, copies_cap;
  int io;                  /* the first failed data write: 1, else 0 */
  char io_message[512];
} gt_ckpt_writer;

/* Keep the first local failure (the current error) in w and clear it. */
void gt_ckpt_note_local(gt_ckpt_writer *w, int code);

/* Set w up for writing st (w->path, rank, step, defer already set): the
 * exchange plan and the buffers. Collective on comm (the plan's
 * all-gather on the group); the status is local: agree on it. */
int gt_ckpt_writer_init(gt_ckpt_writer *w, MPI_Comm comm);
void gt_ckpt_writer_free(gt_ckpt_writer *w);

/* Floats of host memory a deferred write of w's state needs
 * (gt_ckpt_writer.arena). */
size_t gt_ckpt_arena_floats(const gt_ckpt_writer *w);

/* Create the file (ids[0]) with meta's attributes, its groups and every
 * dataset (w->dsets), then this rank's data: written now, or with w->defer
 * downloaded into w->arena and listed in w->jobs; then /rank/state.
 * Collective on comm; the exchange collective on the group. */
int gt_ckpt_write_begin(gt_ckpt_writer *w, const gt_ckpt_meta *meta, MPI_Comm comm,
                        hid_t ids[]);

/* The writer thread's part of a deferred write: the copies (then
 * snapped(ctx), whatever happened), every job (checksum terms and the raw
 * writes), fdatasync, close the descriptors; stop early when *cancel
 * becomes true. Failures are noted in w->io. Not collective; no HDF5 or
 * MPI call. */
void gt_ckpt_write_jobs(gt_ckpt_writer *w, atomic_bool *cancel, void (*snapped)(void *),
                        void *ctx);

/* The checksums (one MPI_Allreduce of the terms) as attributes of every
 * dataset; with sync, H5Fflush (MPI_File_sync on every rank: 0.1 s on this
 * project's VM even with the data already synced, so a deferred write
 * leaves it out and has every rank fsync the file on its writer thread
 * after the close). Collective on comm. */
int gt_ckpt_write_end(gt_ckpt_writer *w, hid_t file, MPI_Comm comm, bool sync);

/* The file's handles in ids (gt_ckpt_write_begin). */
enum { GT_WF_FILE, GT_WF_GROUP, GT_WF_N };

#endif /* GT_IO_CKPT_WRITER_H */
