/*
 * ckpt_pread.h - the data reads of a checkpoint (internal to src/io):
 * threads read a format-3 file's tensor data past HDF5, with pread at the
 * datasets' offsets (O_DIRECT where the bytes are not in the page cache),
 * and check each piece's checksum blocks and values as it arrives, while
 * the main thread places what has arrived (ckpt_read.c).
 *
 * Two kinds of work, which the same threads serve:
 *   - a request: len bytes at one file offset into the caller's buffer,
 *     waited for piece by piece (gt_preader_start, gt_preader_wait); one at
 *     a time;
 *   - a stream: every segment the load will read in the order it reads
 *     them (the unsplit tensors of a rank, planned before the loop), read
 *     ahead into a ring of pieces that the main thread takes in order
 *     (gt_preader_stream_get) and gives back (gt_preader_stream_release),
 *     so that the disk is kept busy across datasets: the next dataset's
 *     reads are in flight while the main thread opens it with HDF5 and
 *     places the one before.
 * A request goes before the stream. Nothing here is collective or calls
 * HDF5 or MPI.
 */
#ifndef GT_IO_CKPT_PREAD_H
#define GT_IO_CKPT_PREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GT_PREAD_PIECE ((size_t)4 << 20) /* bytes per pread(2): 4 checksum blocks */
#define GT_PREAD_THREADS 3
#define GT_PREAD_RING 16 /* stream pieces read ahead: 64 MiB */

/* How one piece went. */
typedef struct {
  size_t got; /* bytes read */
  int err;    /* 0, an errno, -1: the file ends */
  bool done;
  bool ok;    /* read in full, and its checksum blocks and values check */
} gt_piece;

/* A stream segment: len bytes at file offset off, entries [first, ...) of
 * a dataset of total floats whose checksums are stored (first on a block).
 * (Reading straight into the parameters instead of the ring, without the
 * copy, measured no faster on this project's VM: 0.69-1.33 s against
 * 0.71-1.21 s for 124M at 1 rank.) */
typedef struct {
  size_t off, len;
  const uint32_t *stored;
  size_t total, first;
} gt_pread_seg;

typedef struct {
  int fd;
  int fd_direct;      /* O_DIRECT (-1: none, or the file system refused it) */
  int fd_direct_open; /* ... as opened, to close */
  int nthreads;
  pthread_t thread[GT_PREAD_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  /* the request: len bytes at file offset off into dst, in npieces pieces,
   * the next one to claim, how many have finished */
  char *dst;
  size_t len, off, npieces, next, finished;
  gt_piece *pieces;
  size_t cap;
  /* what the threads check of each piece of the request: the dataset's
   * checksums (entry `first` of `total` at the request's start) */
  const uint32_t *stored;
  size_t total, first;
  /* the stream: its segments, the first piece of each (seg_first[nsegs]:
   * all of them), the ring (GT_PREAD_RING slots), the state of every
   * piece, the next one to claim and how many the main thread gave back */
  const gt_pread_seg *segs;
  size_t nsegs, *seg_first;
  char *ring;
  gt_piece *s_state;
  size_t s_next, s_released;
} gt_preader;

/* Open path for the reads (p->fd -1 and no threads when it cannot be: the
 * caller reads through HDF5 instead). */
void gt_preader_open(gt_preader *p, const char *path, bool direct);

/* Stop the threads, close the file, free everything. */
void gt_preader_close(gt_preader *p);

/* Start reading len bytes at file offset off into dst (4 KiB-aligned, with
 * room to round len up to whole 4 KiB blocks; the previous request has
 * finished: gt_preader_wait(SIZE_MAX)), entries [first, ...) of a dataset
 * of total floats whose checksums are stored (NULL: not checked). */
int gt_preader_start(gt_preader *p, void *dst, size_t len, size_t off, const uint32_t *stored,
                     size_t total, size_t first);

/* Wait until the first `want` bytes of the request are read, or no more can
 * be (want SIZE_MAX: until every piece has finished and the threads are
 * done with the buffer); the bytes read without a gap, and *err (0, an
 * errno, -1: the file ends). */
size_t gt_preader_wait(gt_preader *p, size_t want, int *err);

/* Whether piece k of the request checked (the caller has waited for it). */
bool gt_preader_ok(gt_preader *p, size_t k);

/* Start the stream over segs[0..nsegs) (kept by the caller until
 * gt_preader_close). Once per reader. */
int gt_preader_stream(gt_preader *p, const gt_pread_seg *segs, size_t nsegs);

/* The pieces of stream segment s: [first, first + n). */
void gt_preader_stream_pieces(const gt_preader *p, size_t s, size_t *first, size_t *n);

/* Wait for stream piece k (every piece before k given back) and return its
 * bytes (GT_PREAD_PIECE at most, in the ring; *state: how it went). */
const float *gt_preader_stream_get(gt_preader *p, size_t k, gt_piece *state);

/* Give piece k back (its slot is read into again). */
void gt_preader_stream_release(gt_preader *p, size_t k);

#endif /* GT_IO_CKPT_PREAD_H */
