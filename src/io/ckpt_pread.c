/*
 * ckpt_pread.c - the data reads of a checkpoint (ckpt_pread.h): threads
 * that read a format-3 file's tensor data with pread at the datasets'
 * offsets and check each piece as it arrives.
 *
 * GT_PREAD_THREADS pieces are in flight (one synchronous O_DIRECT read at a
 * time left the disk idle between requests), while the main thread places
 * what has arrived, so that the disk, the checksum pass and the placing
 * overlap (before, H5Dread read a whole span and only then was it checked:
 * the two took turns). Pieces that are in the page cache are copied from
 * it; the others are read with O_DIRECT into 4 KiB-aligned buffers, as the
 * writer writes them: no page-cache pages to allocate and no copy out of
 * them (the copy was the largest cost of a read here). The stream keeps
 * the disk busy across datasets: with one request at a time it stood idle
 * while the main thread opened the next dataset and placed the last one.
 */
#define _GNU_SOURCE
#include "ckpt_pread.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gridtrain/error.h"
#include "ckpt_internal.h"

/* Whether the n bytes at off (page-aligned) are all in the page cache
 * (mincore of a mapping: it reads nothing; preadv2's RWF_NOWAIT starts a
 * read-ahead of what is missing). */
static bool gt_preader_cached(const gt_preader *p, size_t off, size_t n)
{
  const size_t page = GT_DIO_ALIGN, pages = (n + page - 1) / page;
  unsigned char vec[GT_PREAD_PIECE / GT_DIO_ALIGN];
  if (pages > sizeof vec)
    return false;
  void *map = mmap(NULL, n, PROT_READ, MAP_SHARED, p->fd, (off_t)off);
  if (map == MAP_FAILED)
    return false;
  bool all = mincore(map, n, vec) == 0;
  for (size_t i = 0; all && i < pages; i++)
    all = vec[i] & 1;
  munmap(map, n);
  return all;
}

/* Read n bytes at off into dst (the buffer has room to round n up to whole
 * 4 KiB blocks); *err as gt_piece's. */
static size_t gt_preader_piece(gt_preader *p, char *dst, size_t n, size_t off, int *err)
{
  size_t pos = 0;
  *err = 0;
  while (pos < n) {
    ssize_t got = -1;
    const int direct = p->fd_direct;
    errno = EAGAIN;
    if (direct >= 0 && (off + pos) % GT_DIO_ALIGN == 0 &&
        (uintptr_t)(dst + pos) % GT_DIO_ALIGN == 0 && !gt_preader_cached(p, off + pos, n - pos)) {
      got = pread(direct, dst + pos, gt_align_up(n - pos, GT_DIO_ALIGN), (off_t)(off + pos));
      if (got < 0 && errno == EINVAL) /* no O_DIRECT here after all: the page cache */
        p->fd_direct = -1;            /* (closed with the reader) */
      else if (got > (ssize_t)(n - pos))
        got = (ssize_t)(n - pos);
    }
    if (got < 0 && errno != EINTR)
      got = pread(p->fd, dst + pos, n - pos, (off_t)(off + pos));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      *err = got < 0 ? errno : -1;
      break;
    }
    pos += (size_t)got;
  }
  return pos;
}

/* Whether the whole checksum blocks of a piece (entries [first, first + n)
 * of a dataset of total, first on a block) match stored and hold finite
 * values; the main thread only repeats a failed check, for its message. */
static bool gt_preader_check(const float *data, size_t n, size_t first, size_t total,
                             const uint32_t *stored)
{
  for (size_t at = 0; at < n; at += GT_CKPT_SUM_FLOATS) {
    const size_t len = gt_min_size(GT_CKPT_SUM_FLOATS, n - at);
    uint64_t sum[2] = {0, 0};
    gt_fletcher_add(sum, gt_min_size(GT_CKPT_SUM_FLOATS, total - (first + at)), data + at, 0,
                    len);
    if (gt_fletcher_value(sum) != stored[(first + at) / GT_CKPT_SUM_FLOATS])
      return false;
  }
  bool finite = true;
  for (size_t i = 0; i < n; i++)
    finite &= isfinite(data[i]) != 0;
  return finite;
}

/* One piece: n bytes at file offset off into dst, then its checks (entry
 * `first` of a dataset of total floats whose checksums are stored). */
static gt_piece gt_preader_one(gt_preader *p, char *dst, size_t n, size_t off,
                               const uint32_t *stored, size_t total, size_t first)
{
  int err;
  const size_t got = gt_preader_piece(p, dst, n, off, &err);
  const bool ok = got == n && stored &&
                  gt_preader_check((const float *)dst, n / sizeof(float), first, total, stored);
  return (gt_piece){got, err, true, ok};
}

/* The ring slot of stream piece k. */
static char *gt_preader_slot(const gt_preader *p, size_t k)
{
  return p->ring + (k % GT_PREAD_RING) * (GT_PREAD_PIECE + GT_DIO_ALIGN);
}

/* The segment of stream piece k (binary search of seg_first). */
static size_t gt_preader_seg_of(const gt_preader *p, size_t k)
{
  size_t lo = 0, hi = p->nsegs; /* seg_first[lo] <= k < seg_first[hi] */
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (p->seg_first[mid] <= k)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* A piece of the request to claim; else one of the stream whose slot is
 * free. Under the lock. */
static bool gt_preader_has_work(const gt_preader *p)
{
  return p->next < p->npieces ||
         (p->s_next < (p->seg_first ? p->seg_first[p->nsegs] : 0) &&
          p->s_next < p->s_released + GT_PREAD_RING);
}

static void *gt_preader_main(void *arg)
{
  gt_preader *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && !gt_preader_has_work(p))
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop)
      break;
    if (p->next < p->npieces) { /* the request first: the main thread waits for it */
      const size_t k = p->next++;
      const size_t n = gt_min_size(p->len - k * GT_PREAD_PIECE, GT_PREAD_PIECE);
      char *dst = p->dst + k * GT_PREAD_PIECE;
      const size_t off = p->off + k * GT_PREAD_PIECE;
      const size_t first = p->first + k * (GT_PREAD_PIECE / sizeof(float));
      pthread_mutex_unlock(&p->mu);
      const gt_piece done = gt_preader_one(p, dst, n, off, p->stored, p->total, first);
      pthread_mutex_lock(&p->mu);
      p->pieces[k] = done;
      p->finished++;
    } else {
      const size_t k = p->s_next++;
      const size_t si = gt_preader_seg_of(p, k);
      const gt_pread_seg *s = &p->segs[si];
      const size_t at = (k - p->seg_first[si]) * GT_PREAD_PIECE;
      const size_t n = gt_min_size(s->len - at, GT_PREAD_PIECE);
      pthread_mutex_unlock(&p->mu);
      const gt_piece done = gt_preader_one(p, gt_preader_slot(p, k), n, s->off + at,
                                           s->stored, s->total, s->first + at / sizeof(float));
      pthread_mutex_lock(&p->mu);
      p->s_state[k] = done;
    }
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void gt_preader_open(gt_preader *p, const char *path, bool direct)
{
  memset(p, 0, sizeof *p);
  p->fd_direct = p->fd_direct_open = -1;
  p->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (p->fd < 0)
    return;
  if (direct)
    p->fd_direct = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
  p->fd_direct_open = p->fd_direct;
  posix_fadvise(p->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  for (int t = 0; t < GT_PREAD_THREADS; t++)
    if (pthread_create(&p->thread[p->nthreads], NULL, gt_preader_main, p) == 0)
      p->nthreads++;
  if (p->nthreads == 0)
    gt_preader_close(p);
}

void gt_preader_close(gt_preader *p)
{
  if (p->fd >= 0) {
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->nthreads; t++)
      pthread_join(p->thread[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    close(p->fd);
    if (p->fd_direct_open >= 0)
      close(p->fd_direct_open);
  }
  free(p->pieces);
  free(p->seg_first);
  free(p->ring);
  free(p->s_state);
  p->pieces = NULL;
  p->seg_first = NULL;
  p->ring = NULL;
  p->s_state = NULL;
  p->segs = NULL;
  p->nsegs = 0;
  p->fd = p->fd_direct = p->fd_direct_open = -1;
  p->nthreads = 0;
}

int gt_preader_stream(gt_preader *p, const gt_pread_seg *segs, size_t nsegs)
{
  GT_ASSERT(p->fd >= 0 && !p->seg_first);
  size_t *first = malloc((nsegs + 1) * sizeof *first);
  GT_CHECK_ALLOC(first, (nsegs + 1) * sizeof *first);
  first[0] = 0;
  for (size_t s = 0; s < nsegs; s++)
    first[s + 1] = first[s] + (segs[s].len + GT_PREAD_PIECE - 1) / GT_PREAD_PIECE;
  void *ring = NULL;
  gt_piece *state = calloc(first[nsegs] + 1, sizeof *state);
  if (!state || posix_memalign(&ring, GT_DIO_ALIGN,
                               GT_PREAD_RING * (GT_PREAD_PIECE + GT_DIO_ALIGN)) != 0) {
    free(first);
    free(state);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory for the checkpoint's read-ahead");
  }
  pthread_mutex_lock(&p->mu);
  p->segs = segs;
  p->nsegs = nsegs;
  p->seg_first = first;
  p->ring = ring;
  p->s_state = state;
  p->s_next = p->s_released = 0;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return GT_SUCCESS;
}

void gt_preader_stream_pieces(const gt_preader *p, size_t s, size_t *first, size_t *n)
{
  *first = p->seg_first[s];
  *n = p->seg_first[s + 1] - p->seg_first[s];
}

const float *gt_preader_stream_get(gt_preader *p, size_t k, gt_piece *state)
{
  pthread_mutex_lock(&p->mu);
  while (!p->s_state[k].done)
    pthread_cond_wait(&p->cv, &p->mu);
  *state = p->s_state[k];
  pthread_mutex_unlock(&p->mu);
  return (const float *)(void *)gt_preader_slot(p, k);
}

void gt_preader_stream_release(gt_preader *p, size_t k)
{
  pthread_mutex_lock(&p->mu);
  if (k + 1 > p->s_released)
    p->s_released = k + 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

int gt_preader_start(gt_preader *p, void *dst, size_t len, size_t off,
                            const uint32_t *stored, size_t total, size_t first)
{
  const size_t n = (len + GT_PREAD_PIECE - 1) / GT_PREAD_PIECE;
  if (n > p->cap) {
    gt_piece *more = realloc(p->pieces, sizeof *more * n);
    GT_CHECK_ALLOC(more, sizeof *more * n);
    p->pieces = more;
    p->cap = n;
  }
  memset(p->pieces, 0, sizeof *p->pieces * n);
  pthread_mutex_lock(&p->mu);
  p->dst = dst;
  p->len = len;
  p->off = off;
  p->npieces = n;
  p->next = p->finished = 0;
  p->stored = stored;
  p->total = total;
  p->first = first;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return GT_SUCCESS;
}

/* The bytes read from the start of the request without a gap, and *err
 * (0, or the error of the piece that ends them); *end true when no more
 * can come. Under the lock. */
static size_t gt_preader_prefix(const gt_preader *p, int *err, bool *end)
{
  size_t bytes = 0;
  *err = 0;
  *end = false;
  for (size_t k = 0; k < p->npieces && p->pieces[k].done; k++) {
    bytes += p->pieces[k].got;
    const size_t n = p->len - k * GT_PREAD_PIECE < GT_PREAD_PIECE ? p->len - k * GT_PREAD_PIECE
                                                                  : GT_PREAD_PIECE;
    if (p->pieces[k].got < n) {
      *err = p->pieces[k].err;
      *end = true;
      break;
    }
  }
  if (bytes >= p->len)
    *end = true;
  return bytes;
}

bool gt_preader_ok(gt_preader *p, size_t k)
{
  pthread_mutex_lock(&p->mu);
  const bool ok = k < p->npieces && p->pieces[k].done && p->pieces[k].ok;
  pthread_mutex_unlock(&p->mu);
  return ok;
}

size_t gt_preader_wait(gt_preader *p, size_t want, int *err)
{
  pthread_mutex_lock(&p->mu);
  size_t bytes;
  bool end;
  for (;;) {
    bytes = gt_preader_prefix(p, err, &end);
    if (want == SIZE_MAX ? p->finished == p->npieces : bytes >= want || end)
      break;
    pthread_cond_wait(&p->cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return bytes;
}
