/*
 * ckpt_read.c - reading a checkpoint file: its attributes, and every
 * rank's part of every tensor through its checksum blocks, exchanged
 * inside the tensor-parallel group where that reads less (checkpoint.h,
 * docs/checkpoints.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "ckpt_internal.h"
#include "h5util.h"

// ---- reading ---------------------------------------------------------------------------------

int gt_ckpt_read_meta_in(hid_t file, const char *path, gt_ckpt_meta *m)
{
  bool found;
  long long v;
  GT_CALL(gt_h5_read_attr_i64(file, "format_version", path, &found, &v));
  GT_CHECK(found, GT_ERR_INPUT,
           "%s is not a gridtrain checkpoint (no format_version attribute)", path);
  GT_CHECK(v >= 1 && v <= GT_CKPT_FORMAT, GT_ERR_INPUT,
           "%s has checkpoint format %lld; this gridtrain reads formats 1 to %d", path, v,
           GT_CKPT_FORMAT);
  m->format = (int)v;
  struct {
    const char *name;
    long long *dst;
  } ints[] = {{"step", &v}, {"tokens", &m->tokens}, {"data_samples", &m->samples},
              {"batch", &v}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    GT_CALL(gt_h5_read_attr_i64(file, ints[i].name, path, &found, ints[i].dst));
    GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no '%s' attribute", path, ints[i].name);
    if (i == 0)
      m->step = (long)v;
    if (i == 3)
      m->batch = (long)v;
  }
  GT_CALL(gt_h5_read_attr_i64(file, "seed", path, &found, &v));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'seed' attribute", path);
  m->seed = (unsigned long long)v;
  GT_CALL(gt_h5_read_attr_f64(file, "loss_scale", path, &found, &m->loss_scale));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'loss_scale' attribute", path);
  snprintf(m->precision, sizeof m->precision, "fp32");
  if (m->format >= 2) {
    const char *need[2] = {"loss_scale_good_steps", "skipped_steps"};
    long long *dst[2] = {&m->scale_good_steps, &m->skipped_steps};
    for (int i = 0; i < 2; i++) {
      GT_CALL(gt_h5_read_attr_i64(file, need[i], path, &found, dst[i]));
      GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no '%s' attribute", path, need[i]);
    }
    char *prec = NULL;
    GT_CALL(gt_h5_read_attr_str(file, "precision", path, &found, &prec));
    GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'precision' attribute", path);
    snprintf(m->precision, sizeof m->precision, "%s", prec);
    free(prec);
  }
  GT_CALL(gt_h5_read_attr_f64(file, "loss", path, &found, &m->loss));
  if (!found)
    m->loss = NAN;
  long long layout[3], model[5];
  GT_CALL(gt_h5_read_attr_i64s(file, "layout", path, 3, &found, layout));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'layout' attribute", path);
  GT_CALL(gt_h5_read_attr_i64s(file, "model_shape", path, 5, &found, model));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'model_shape' attribute", path);
  m->dp = (int)layout[0];
  m->pp = (int)layout[1];
  m->tp = (int)layout[2];
  m->layers = (int)model[0];
  m->heads = (int)model[1];
  m->dim = (int)model[2];
  m->seq_len = (int)model[3];
  m->vocab = (int)model[4];
  char *text = NULL;
  GT_CALL(gt_h5_read_attr_str(file, "code_version", path, &found, &text));
  snprintf(m->code_version, sizeof m->code_version, "%s", found ? text : "");
  free(text);
  GT_CALL(gt_h5_read_attr_str(file, "created", path, &found, &text));
  snprintf(m->created, sizeof m->created, "%s", found ? text : "");
  free(text);
  GT_CALL(gt_h5_read_attr_str(file, "deck", path, &found, &m->deck));
  /* every attribute in its range: a hand-edited step = -5 trained to NaN */
  const struct {
    const char *name;
    long long v, lo, hi;
  } range[] = {{"step", m->step, 0, 1000000000000LL},
               {"tokens", m->tokens, 0, LLONG_MAX},
               {"data_samples", m->samples, 0, LLONG_MAX},
               {"batch", m->batch, 1, 1 << 30},
               {"loss_scale_good_steps", m->scale_good_steps, 0, LLONG_MAX},
               {"skipped_steps", m->skipped_steps, 0, m->step},
               {"layout[dp]", m->dp, 1, 1 << 24},
               {"layout[pp]", m->pp, 1, 1 << 24},
               {"layout[tp]", m->tp, 1, 1 << 24},
               {"model_shape[layers]", model[0], 1, 1 << 20},
               {"model_shape[heads]", model[1], 1, 1 << 20},
               {"model_shape[dim]", model[2], 1, 1 << 24},
               {"model_shape[seq_len]", model[3], 1, 1 << 24},
               {"model_shape[vocab]", model[4], 1, 1 << 30}};
  for (size_t i = 0; i < sizeof range / sizeof range[0]; i++)
    GT_CHECK(range[i].v >= range[i].lo && range[i].v <= range[i].hi, GT_ERR_INPUT,
             "checkpoint %s: attribute %s = %lld is outside [%lld, %lld]; the file is damaged",
             path, range[i].name, range[i].v, range[i].lo, range[i].hi);
  GT_CHECK(model[2] % model[1] == 0, GT_ERR_INPUT,
           "checkpoint %s: model_shape dim = %lld is not a multiple of heads = %lld; the file "
           "is damaged", path, model[2], model[1]);
  GT_CHECK(isfinite(m->loss_scale) && m->loss_scale > 0, GT_ERR_INPUT,
           "checkpoint %s: attribute loss_scale = %g is not a positive number; the file is "
           "damaged", path, m->loss_scale);
  GT_CHECK(strcmp(m->precision, "fp32") == 0 || strcmp(m->precision, "bf16") == 0 ||
               strcmp(m->precision, "fp16") == 0,
           GT_ERR_INPUT, "checkpoint %s: attribute precision = '%s' is not fp32, bf16 or fp16",
           path, m->precision);
  return GT_SUCCESS;
}

/* A file that cannot be opened: say why in words a user can act on. */
int gt_ckpt_open_error(const char *path)
{
  struct stat sb;
  if (stat(path, &sb) != 0)
    return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                        "cannot open checkpoint %s: %s", path, strerror(errno));
  return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                       "checkpoint %s is not a readable HDF5 file (truncated or damaged)", path);
}

/* The current error (GT_ERR_HDF5, of reading path) as bad input naming the
 * file; its collective mark is kept. */
static int gt_ckpt_damaged(const char *path)
{
  const bool collective = gt_error_is_collective();
  char cause[1024];
  snprintf(cause, sizeof cause, "%s", gt_error_message());
  if (strstr(cause, path)) /* "checkpoint PATH: /model/x is damaged: ..." */
    gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__, "%s", cause);
  else
    gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__, "checkpoint %s cannot be read",
                  path);
  gt_error_set_collective(collective);
  return GT_ERR_INPUT;
}

int gt_ckpt_read_meta(const char *path, MPI_Comm comm, gt_ckpt_meta *meta)
{
  memset(meta, 0, sizeof *meta);
  hid_t file = H5I_INVALID_HID;
  GT_CALL(gt_comm_foreign_begin(comm));
  if (gt_h5_open_mpio(path, H5F_ACC_RDONLY, comm, &file) != GT_SUCCESS) {
    gt_comm_foreign_end();
    return gt_ckpt_open_error(path);
  }
  int status = gt_ckpt_read_meta_in(file, path, meta);
  status = gt_h5_close_all(status, 1, &file);
  gt_comm_foreign_end();
  if (status != GT_SUCCESS)
    gt_ckpt_meta_free(meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- the data reads: threads read ahead while the checksums are checked -----------------

/* The tensor data of a format-3 file is read past HDF5, with pread at the
 * dataset's offset in the file (as the writer writes it), by threads of
 * their own: they fill the buffer piece by piece, GT_PREAD_THREADS pieces
 * in flight (one synchronous O_DIRECT read at a time left the disk idle
 * between requests), while the main thread checks the checksum blocks that
 * have arrived, so that the disk and the checksum pass overlap (before,
 * H5Dread read a whole span and only then was it checked: the two took
 * turns). Pieces that are in the page cache are copied from it; the others
 * are read with O_DIRECT into the 4 KiB-aligned buffer, as the writer
 * writes them: no page-cache pages to allocate and no copy out of them (the
 * copy was the largest cost of a read here). One request at a time; not
 * collective. */
#define GT_PREAD_PIECE ((size_t)4 << 20) /* bytes per pread(2): 4 checksum blocks */
#define GT_PREAD_THREADS 3

typedef struct {
  size_t got; /* bytes read */
  int err;    /* 0, an errno, -1: the file ends */
  bool done;
  bool ok;    /* read in full, and its checksum blocks and values check */
} gt_piece;

typedef struct {
  int fd;
  int fd_direct; /* O_DIRECT (-1: none, or the file system refused it) */
  int fd_direct_open; /* ... as opened, to close */
  int nthreads;
  pthread_t thread[GT_PREAD_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* the request: len bytes at file offset off into dst, in npieces pieces,
   * the next one to claim, how many have finished; stop ends the threads */
  char *dst;
  size_t len, off, npieces, next, finished;
  gt_piece *pieces;
  size_t cap;
  bool stop;
  /* what the threads check of each piece they read: the dataset's
   * checksums (entry `first` of `total` at the request's start, on a block) */
  const uint32_t *stored;
  size_t total, first;
} gt_preader;

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

static void *gt_preader_main(void *arg)
{
  gt_preader *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->next >= p->npieces)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop)
      break;
    const size_t k = p->next++;
    char *dst = p->dst + k * GT_PREAD_PIECE;
    const size_t off = p->off + k * GT_PREAD_PIECE;
    const size_t n = p->len - k * GT_PREAD_PIECE < GT_PREAD_PIECE ? p->len - k * GT_PREAD_PIECE
                                                                  : GT_PREAD_PIECE;
    pthread_mutex_unlock(&p->mu);
    int err;
    const size_t got = gt_preader_piece(p, dst, n, off, &err);
    const size_t first = p->first + k * (GT_PREAD_PIECE / sizeof(float));
    const bool ok = got == n && p->stored &&
                    gt_preader_check((const float *)dst, n / sizeof(float), first, p->total,
                                     p->stored);
    pthread_mutex_lock(&p->mu);
    p->pieces[k] = (gt_piece){got, err, true, ok};
    p->finished++;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void gt_preader_close(gt_preader *p);

/* Open path for the reads (fd -1 and no threads when it cannot be: the
 * reads then go through HDF5). */
static void gt_preader_open(gt_preader *p, const char *path, bool direct)
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

static void gt_preader_close(gt_preader *p)
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
  p->pieces = NULL;
  p->fd = p->fd_direct = p->fd_direct_open = -1;
  p->nthreads = 0;
}

/* Start reading len bytes at file offset off into dst (the previous
 * request has finished: gt_preader_wait(SIZE_MAX)), entries [first, ...) of
 * a dataset of total floats whose checksums are stored (NULL: not checked
 * by the threads). */
static int gt_preader_start(gt_preader *p, void *dst, size_t len, size_t off,
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

/* Whether piece k of the request checked (the caller has waited for it). */
static bool gt_preader_ok(gt_preader *p, size_t k)
{
  pthread_mutex_lock(&p->mu);
  const bool ok = k < p->npieces && p->pieces[k].done && p->pieces[k].ok;
  pthread_mutex_unlock(&p->mu);
  return ok;
}

/* Wait until the first `want` bytes of the request are read, or no more can
 * be (want SIZE_MAX: until every piece has finished and the threads are done
 * with the buffer); the bytes read without a gap and *err (0, an errno, -1:
 * the file ends). */
static size_t gt_preader_wait(gt_preader *p, size_t want, int *err)
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

/* Grow *buf to hold n floats and one 4 KiB block more (an O_DIRECT read
 * of the last piece is rounded up to whole blocks), 4 KiB-aligned. */
static int gt_ckpt_grow_aligned(float **buf, size_t *cap, size_t n)
{
  if (n <= *cap)
    return GT_SUCCESS;
  void *p = NULL;
  const size_t bytes = (n + GT_DIO_FLOATS) * sizeof(float);
  GT_CHECK(posix_memalign(&p, GT_DIO_ALIGN, bytes) == 0, GT_ERR_SYSTEM,
           "out of memory allocating %zu bytes to read a checkpoint", bytes);
  free(*buf); /* nothing in it is kept from one span to the next */
  *buf = p;
  *cap = n;
  return GT_SUCCESS;
}

/* One rank's state through a read. */
typedef struct {
  const char *path;
  const gt_ckpt_state *st;
  int format;
  float *staging; /* the local entries loaded (largest local tensor) */
  float *rbuf;    /* format 3: the checksum blocks read */
  size_t rcap;
  uint32_t *stored; /* format 3: their checksums */
  size_t scap;
  float *send, *recv; /* the exchange inside the group */
  size_t send_cap, recv_cap;
  gt_swap_plan plan;
  gt_preader pread; /* the data reads (format 3) */
} gt_ckpt_reader;

typedef struct {
  size_t lo, hi;
} gt_span;

static int gt_span_run(void *ctx, size_t local, size_t logical, size_t len)
{
  (void)local;
  gt_span *s = ctx;
  s->lo = logical < s->lo ? logical : s->lo;
  s->hi = logical + len > s->hi ? logical + len : s->hi;
  return GT_SUCCESS;
}

typedef struct {
  float *dst;
  const float *src;
  size_t a, f0;
} gt_unpack;

static int gt_unpack_run(void *ctx, size_t local, size_t logical, size_t len)
{
  gt_unpack *u = ctx;
  memcpy(u->dst + (local - u->a), u->src + (logical - u->f0), len * sizeof(float));
  return GT_SUCCESS;
}

enum { GT_R_DSET, GT_R_SPACE, GT_R_MSPACE, GT_R_N };

/* The entries [f0, f1) (f0 on a checksum block; f1 the end of one or of
 * the dataset of `total` floats at byte `base` of the file) into r->rbuf,
 * through the reader thread; each checksum block is checked, and its values
 * for finiteness, as soon as it has arrived. */
static int gt_ckpt_pread_checked(gt_ckpt_reader *r, const char *name, size_t base,
                                 size_t total, size_t f0, size_t f1, size_t blk0)
{
  const size_t bytes = (f1 - f0) * sizeof(float);
  GT_CALL(gt_preader_start(&r->pread, r->rbuf, bytes, base + f0 * sizeof(float), r->stored,
                           total, f0));
  int status = GT_SUCCESS, err = 0;
  size_t checked = f0; /* entries checked so far */
  while (checked < f1) {
    const size_t next = gt_min_size(f1, checked + GT_CKPT_SUM_FLOATS);
    const size_t have = gt_preader_wait(&r->pread, (next - f0) * sizeof(float), &err);
    if (have < (next - f0) * sizeof(float)) {
      status = gt_error_set(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                            "checkpoint %s: %s cannot be read: %s at byte %zu of the file",
                            r->path, name, err > 0 ? strerror(err) : "the file ends",
                            base + f0 * sizeof(float) + have);
      break;
    }
    const float *block = r->rbuf + (checked - f0);
    /* the thread checked its piece; a piece that failed is checked again
     * here, block by block, for the message */
    if (!gt_preader_ok(&r->pread, (checked - f0) * sizeof(float) / GT_PREAD_PIECE)) {
      status = gt_ckpt_check_sums(r->path, name, block, total, checked / GT_CKPT_SUM_FLOATS, 1,
                                  r->stored);
      if (status == GT_SUCCESS)
        status = gt_ckpt_check_finite(r->path, name, block, next - checked, checked);
    }
    if (status != GT_SUCCESS)
      break;
    checked = next;
  }
  (void)blk0;
  gt_preader_wait(&r->pread, SIZE_MAX, &err); /* the thread is done with rbuf */
  GT_CALL(status);
  return GT_SUCCESS;
}

/* Format 3: read the checksum blocks of dataset `name` that hold its
 * logical entries [lo, hi) into r->rbuf (entry f0 first) and check them. */
static int gt_ckpt_read_span_in(gt_ckpt_reader *r, const char *name, const gt_param *t,
                                size_t lo, size_t hi, size_t *f0, hid_t ids[])
{
  const size_t total = gt_param_full_numel(t);
  const size_t blk0 = lo / GT_CKPT_SUM_FLOATS;
  const size_t blk1 = (hi + GT_CKPT_SUM_FLOATS - 1) / GT_CKPT_SUM_FLOATS;
  *f0 = blk0 * GT_CKPT_SUM_FLOATS;
  const size_t f1 = gt_min_size(total, blk1 * GT_CKPT_SUM_FLOATS);
  GT_CALL(gt_ckpt_grow_aligned(&r->rbuf, &r->rcap, f1 - *f0));
  const size_t nsums = gt_ckpt_nsums(total);
  GT_CALL(gt_ckpt_grow((void **)&r->stored, &r->scap, nsums, sizeof(uint32_t)));
  bool found;
  GT_CALL(gt_h5_read_attr_u32s(ids[GT_R_DSET], "fletcher32", name, (int)nsums, &found,
                               r->stored));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s: %s has no fletcher32 checksums", r->path, name);
  gt_sel s = {.space = ids[GT_R_SPACE], .nd = t->ndim, .m = t->ndim, .first = true};
  for (int d = 0; d < t->ndim; d++)
    s.dims[d] = (hsize_t)t->full_shape[d];
  GT_CALL(gt_sel_flat(&s, 0, (hsize_t)*f0, (hsize_t)f1));
  const hsize_t n = (hsize_t)(f1 - *f0);
  const haddr_t base = r->pread.fd >= 0 ? H5Dget_offset(ids[GT_R_DSET]) : HADDR_UNDEF;
  if (base != HADDR_UNDEF) /* contiguous: past HDF5, checked as it arrives */
    return gt_ckpt_pread_checked(r, name, (size_t)base, total, *f0, f1, blk0);
  H5Eclear2(H5E_DEFAULT);
  GT_H5_ID(ids[GT_R_MSPACE], H5Screate_simple(1, &n, NULL));
  if (H5Dread(ids[GT_R_DSET], H5T_NATIVE_FLOAT, ids[GT_R_MSPACE], ids[GT_R_SPACE], H5P_DEFAULT,
              r->rbuf) < 0) {
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "checkpoint %s: %s cannot be read", r->path, name);
  }
  GT_CALL(gt_ckpt_check_sums(r->path, name, r->rbuf, total, blk0, blk1 - blk0, r->stored));
  GT_CALL(gt_ckpt_check_finite(r->path, name, r->rbuf, (size_t)n, (size_t)*f0));
  return GT_SUCCESS;
}

static int gt_ckpt_read_span(gt_ckpt_reader *r, const char *name, const gt_param *t,
                             size_t lo, size_t hi, size_t *f0, hid_t ids[])
{
  int status = gt_ckpt_read_span_in(r, name, t, lo, hi, f0, ids);
  GT_CALL(gt_h5_close_all(status, 1, &ids[GT_R_MSPACE]));
  return GT_SUCCESS;
}

/* Format 3: this rank's entries [a, b) of t (local indices; none padding
 * only) from the checksum blocks that hold them, into staging from local
 * index `first` on. */
static int gt_ckpt_read_blocks(gt_ckpt_reader *r, const char *name, const gt_param *t,
                               size_t first, size_t a, size_t b, hid_t ids[])
{
  gt_span span = {(size_t)-1, 0};
  GT_CALL(gt_ckpt_runs(t, a, b, gt_span_run, &span));
  if (span.lo >= span.hi)
    return GT_SUCCESS;
  size_t f0;
  GT_CALL(gt_ckpt_read_span(r, name, t, span.lo, span.hi, &f0, ids));
  gt_unpack u = {r->staging, r->rbuf, first, f0};
  GT_CALL(gt_ckpt_runs(t, a, b, gt_unpack_run, &u));
  return GT_SUCCESS;
}

/* A member's runs in [x0, x1) cut to the logical range [lo, hi), each piece
 * counted or moved, in order: packed (src by logical index -> dst in
 * sequence), unpacked (src in sequence -> dst by local index) or placed
 * (src by logical index -> dst by local index). */
typedef enum { GT_CLIP_COUNT, GT_CLIP_PACK, GT_CLIP_UNPACK, GT_CLIP_PLACE } gt_clip_mode;

typedef struct {
  gt_clip_mode mode;
  size_t lo, hi;
  size_t pos;        /* entries counted or moved so far */
  float *dst;
  const float *src;
  size_t first, f0;  /* local index at dst[0] (unpack, place); logical
                        index at src[0] (pack, place) */
} gt_clip;

static int gt_clip_run(void *ctx, size_t local, size_t logical, size_t len)
{
  gt_clip *c = ctx;
  const size_t s = logical > c->lo ? logical : c->lo;
  const size_t e = logical + len < c->hi ? logical + len : c->hi;
  if (s >= e)
    return GT_SUCCESS;
  const size_t n = (e - s) * sizeof(float), at = local + (s - logical) - c->first;
  switch (c->mode) {
  case GT_CLIP_PACK: memcpy(c->dst + c->pos, c->src + (s - c->f0), n); break;
  case GT_CLIP_UNPACK: memcpy(c->dst + at, c->src + c->pos, n); break;
  case GT_CLIP_PLACE: memcpy(c->dst + at, c->src + (s - c->f0), n); break;
  case GT_CLIP_COUNT: break;
  }
  c->pos += e - s;
  return GT_SUCCESS;
}

/* The read exchange of one sharded tensor's whole slabs (local [x0, x1)):
 * each member reads and checks its cut of the group's range once, and sends
 * every other member the entries of it that member holds. A member whose
 * read failed (ok false: its error is noted by the caller) still takes part;
 * the error, agreed on afterwards, makes the whole load fail. Collective on
 * the group. */
static int gt_ckpt_swap_read(gt_ckpt_reader *r, const char *name, const gt_param *t,
                             const int *index, size_t a, size_t x0, size_t x1, hid_t ids[],
                             int *local)
{
  const int g = r->plan.gsize, me = r->plan.grank;
  const MPI_Comm comm = *r->st->group;
  size_t ls, fs;
  gt_ckpt_slab_sizes(t, &ls, &fs);
  const size_t lo = x0 / ls * fs, hi = x1 / ls * fs;
  size_t cut[GT_CKPT_GROUP_MAX + 1], scount[GT_CKPT_GROUP_MAX] = {0};
  size_t rcount[GT_CKPT_GROUP_MAX] = {0};
  /* cuts on checksum blocks: every block is read and checked once */
  cut[0] = lo;
  cut[g] = hi;
  for (int i = 1; i < g; i++) {
    size_t c = lo + (size_t)((hi - lo) * (unsigned __int128)i / (unsigned)g);
    c = gt_align_up(c, GT_CKPT_SUM_FLOATS);
    cut[i] = c < cut[i - 1] ? cut[i - 1] : c > hi ? hi : c;
  }
  size_t f0 = cut[me];
  if (*local == GT_SUCCESS && cut[me] < cut[me + 1])
    *local = gt_ckpt_read_span(r, name, t, cut[me], cut[me + 1], &f0, ids);
  const bool ok = *local == GT_SUCCESS;
  /* what goes to each member, and what comes from each */
  size_t stotal = 0, rtotal = 0;
  for (int j = 0; j < g; j++) {
    gt_clip c = {.lo = cut[me], .hi = cut[me + 1]};
    GT_CALL(gt_ckpt_runs_at(t, index[j], x0, x1, gt_clip_run, &c));
    scount[j] = j == me ? 0 : c.pos;
    stotal += scount[j];
    gt_clip d = {.lo = cut[j], .hi = cut[j + 1]};
    GT_CALL(gt_ckpt_runs_at(t, index[me], x0, x1, gt_clip_run, &d));
    rcount[j] = j == me ? 0 : d.pos;
    rtotal += rcount[j];
  }
  GT_CALL(gt_ckpt_grow((void **)&r->send, &r->send_cap, stotal + 1, sizeof(float)));
  GT_CALL(gt_ckpt_grow((void **)&r->recv, &r->recv_cap, rtotal + 1, sizeof(float)));
  size_t off = 0;
  for (int j = 0; j < g && ok; j++) {
    if (j == me)
      continue;
    gt_clip c = {.mode = GT_CLIP_PACK, .lo = cut[me], .hi = cut[me + 1], .dst = r->send + off,
                 .src = r->rbuf, .f0 = f0};
    GT_CALL(gt_ckpt_runs_at(t, index[j], x0, x1, gt_clip_run, &c));
    off += scount[j];
  }
  GT_CALL(gt_ckpt_swap_post(comm, g, r->send, scount, r->recv, rcount));
  if (!ok)
    return GT_SUCCESS;
  size_t roff = 0;
  for (int j = 0; j < g; j++) {
    gt_clip c = {.mode = GT_CLIP_UNPACK, .lo = cut[j], .hi = cut[j + 1], .dst = r->staging,
                 .src = r->recv + roff, .first = a};
    if (j == me) { /* this rank's own entries, straight from what it read */
      c.mode = GT_CLIP_PLACE;
      c.src = r->rbuf;
      c.f0 = f0;
    } else {
      roff += rcount[j];
    }
    GT_CALL(gt_ckpt_runs_at(t, index[me], x0, x1, gt_clip_run, &c));
  }
  return GT_SUCCESS;
}

/* Formats 1-2: read t's whole local part through the filter into staging
 * (from local index 0). */
static int gt_ckpt_read_filtered(gt_ckpt_reader *r, const char *name, const gt_param *t,
                                 hid_t ids[])
{
  GT_CALL(gt_ckpt_local_space(t, &ids[GT_R_MSPACE]));
  GT_CALL(gt_ckpt_select(t, ids[GT_R_SPACE], ids[GT_R_MSPACE]));
  memset(r->staging, 0, t->numel * sizeof(float)); /* padding stays zero */
  if (H5Dread(ids[GT_R_DSET], H5T_NATIVE_FLOAT, ids[GT_R_MSPACE], ids[GT_R_SPACE], H5P_DEFAULT,
              r->staging) < 0) {
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "checkpoint %s: %s is damaged", r->path, name);
  }
  return GT_SUCCESS;
}

/* Load this rank's entries [a, b) of t (kind) from the open dataset, by
 * itself. */
static int gt_ckpt_read_own(gt_ckpt_reader *r, const char *name, const gt_param *t, int kind,
                            size_t a, size_t b, hid_t ids[])
{
  const gt_ckpt_state *st = r->st;
  size_t count = 0;
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count));
  const float *src = r->staging;
  if (count != b - a) /* padding stays zero */
    memset(r->staging, 0, (b - a) * sizeof(float));
  if (r->format >= 3 && t->shard.axis < 0) { /* one run: straight from the blocks read */
    size_t f0;
    GT_CALL(gt_ckpt_read_span(r, name, t, a, b, &f0, ids));
    src = r->rbuf + (a - f0);
  } else if (count > 0 && r->format >= 3) {
    GT_CALL(gt_ckpt_read_blocks(r, name, t, a, a, b, ids));
  } else if (count > 0) {
    GT_CALL(gt_ckpt_read_filtered(r, name, t, ids));
    src = r->staging + a;
  }
  gt_backend *be = st->params->be;
  GT_CALL(be->ops->upload(be, gt_ckpt_part_data(st, kind, t->offset + a), src,
                          (b - a) * sizeof(float), NULL));
  GT_CALL(gt_ckpt_copy_done(be));
  return GT_SUCCESS;
}

/* Load this rank's entries of t (kind, tensor i) from the open dataset:
 * the whole slabs of an exchanged tensor through the group (collective on
 * it, whatever failed on this rank before), the rest by itself. A failure
 * of this rank's reads goes to *local; the returned status is for errors
 * that are the same on every member. */
static int gt_ckpt_read_part(gt_ckpt_reader *r, const char *name, const gt_param *t, int kind,
                             size_t i, hid_t ids[], int *local)
{
  const gt_ckpt_state *st = r->st;
  size_t lo, hi, a, b;
  gt_ckpt_range(st, kind, &lo, &hi);
  gt_ckpt_clip(t, lo, hi, &a, &b);
  if (a >= b)
    return GT_SUCCESS;
  size_t x0 = a, x1 = a;
  /* The exchange when this rank's own entries are spread over much more of
   * the file than they fill (column splits, q/k/v blocks): read alone, each
   * member would read and check the whole tensor. Every member decides
   * alike: the spans of equal pieces are equal. */
  gt_span span = {(size_t)-1, 0};
  size_t held = 0;
  if (r->format >= 3 && r->plan.swap && r->plan.swap[i]) {
    GT_CALL(gt_ckpt_runs_at(t, r->plan.index[i * (size_t)r->plan.gsize], a, b, gt_span_run,
                            &span));
    GT_CALL(gt_ckpt_runs_at(t, r->plan.index[i * (size_t)r->plan.gsize], a, b, gt_run_count,
                            &held));
  }
  if (span.lo < span.hi && span.hi - span.lo > 2 * held)
    gt_ckpt_whole_slabs(t, a, b, &x0, &x1);
  if (x0 >= x1) {
    if (*local == GT_SUCCESS)
      *local = gt_ckpt_read_own(r, name, t, kind, a, b, ids);
    return GT_SUCCESS;
  }
  size_t count = 0;
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count));
  if (count != b - a) /* padding stays zero */
    memset(r->staging, 0, (b - a) * sizeof(float));
  GT_CALL(gt_ckpt_swap_read(r, name, t, r->plan.index + i * (size_t)r->plan.gsize, a, x0, x1,
                            ids, local));
  if (*local == GT_SUCCESS)
    *local = gt_ckpt_read_blocks(r, name, t, a, a, x0, ids);
  if (*local == GT_SUCCESS)
    *local = gt_ckpt_read_blocks(r, name, t, a, x1, b, ids);
  if (*local == GT_SUCCESS) {
    gt_backend *be = st->params->be;
    *local = be->ops->upload(be, gt_ckpt_part_data(st, kind, t->offset + a), r->staging,
                             (b - a) * sizeof(float), NULL);
    if (*local == GT_SUCCESS)
      *local = gt_ckpt_copy_done(be);
  }
  return GT_SUCCESS;
}

/* Open dataset `group/name` (every rank), check its shape, and when this
 * rank holds the tensor and no read has failed here yet (*local), read its
 * part. Shape problems are the same on every rank; read problems are not,
 * so they go to *local and the loop goes on, keeping every rank in step. */
static int gt_ckpt_read_tensor_in(hid_t file, gt_ckpt_reader *r, const gt_ckpt_tensor *tensor,
                                  int kind, int *local, hid_t ids[])
{
  const gt_ckpt_state *st = r->st;
  const char *path = r->path;
  char name[GT_PARAM_NAME_MAX + 16];
  snprintf(name, sizeof name, "%s/%s", gt_kind_group[kind], tensor->name);
  htri_t exists = H5Lexists(file, gt_kind_group[kind], H5P_DEFAULT);
  if (exists > 0)
    exists = H5Lexists(file, name, H5P_DEFAULT);
  if (exists < 0) { /* the group is there but does not read */
    gt_error_hdf5("H5Lexists", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                         "checkpoint %s is damaged: the HDF5 metadata of %s (a group) does not "
                         "read", path, gt_kind_group[kind]);
  }
  GT_CHECK(exists > 0, GT_ERR_INPUT,
           "checkpoint %s has no dataset %s: it was written for another model", path, name);
  ids[GT_R_DSET] = H5Dopen2(file, name, H5P_DEFAULT);
  if (ids[GT_R_DSET] < 0) {
    gt_error_hdf5("H5Dopen2", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                         "checkpoint %s is damaged: the object header of %s does not read",
                         path, name);
  }
  GT_H5_ID(ids[GT_R_SPACE], H5Dget_space(ids[GT_R_DSET]));
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  int nd;
  GT_CALL_HDF5(nd = H5Sget_simple_extent_ndims(ids[GT_R_SPACE]));
  bool same = nd == tensor->ndim;
  if (same) {
    GT_CALL_HDF5(H5Sget_simple_extent_dims(ids[GT_R_SPACE], dims, NULL));
    for (int d = 0; d < nd; d++)
      same = same && dims[d] == (hsize_t)tensor->dims[d];
  }
  if (!same) {
    char want[96] = "", have[96] = "";
    for (int d = 0; d < tensor->ndim; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%ld", d ? ", " : "",
               tensor->dims[d]);
    for (int d = 0; d < nd && d < GT_TENSOR_MAX_DIMS; d++)
      snprintf(have + strlen(have), sizeof have - strlen(have), "%s%llu", d ? ", " : "",
               (unsigned long long)dims[d]);
    return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                        "checkpoint %s: %s has shape (%s) but the model needs (%s)", path, name,
                        have, want);
  }
  gt_param *t = st->params ? gt_params_find(st->params, tensor->name) : NULL;
  if (!t)
    return GT_SUCCESS;
  GT_CALL(gt_ckpt_read_part(r, name, t, kind, (size_t)(tensor - st->tensors), ids, local));
  return GT_SUCCESS;
}

static int gt_ckpt_read_tensor(hid_t file, gt_ckpt_reader *r, const gt_ckpt_tensor *tensor,
                               int kind, int *local)
{
  hid_t ids[GT_R_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_ckpt_read_tensor_in(file, r, tensor, kind, local, ids);
  GT_CALL(gt_h5_close_all(status, GT_R_N, ids));
  return GT_SUCCESS;
}

/* The format of an open checkpoint, and for format 3 its checksum block. */
int gt_ckpt_read_format(hid_t file, const char *path, int *format)
{
  bool found;
  long long v;
  GT_CALL(gt_h5_read_attr_i64(file, "format_version", path, &found, &v));
  GT_CHECK(found && v >= 1 && v <= GT_CKPT_FORMAT, GT_ERR_INPUT,
           "%s is not a gridtrain checkpoint of formats 1 to %d", path, GT_CKPT_FORMAT);
  *format = (int)v;
  if (v >= 3) {
    GT_CALL(gt_h5_read_attr_i64(file, "checksum_block_bytes", path, &found, &v));
    GT_CHECK(found && v == (long long)GT_CKPT_SUM_BYTES, GT_ERR_INPUT,
             "checkpoint %s has checksum blocks of %lld bytes; this gridtrain reads %zu", path,
             found ? v : 0, GT_CKPT_SUM_BYTES);
  }
  return GT_SUCCESS;
}

enum { GT_RR_DSET, GT_RR_SPACE, GT_RR_MEM, GT_RR_N };

/* This rank's row of /rank/state into row (rank_n floats), checked against
 * its checksum blocks; *match false (GT_SUCCESS) when the file has no such
 * row for this state: no dataset, another tag, ranks or length. */
static int gt_ckpt_read_rank_in(hid_t file, const char *path, const gt_ckpt_state *st,
                                MPI_Comm comm, float *row, bool *match, hid_t ids[])
{
  *match = false;
  if (H5Lexists(file, "/rank", H5P_DEFAULT) <= 0 ||
      H5Lexists(file, "/rank/state", H5P_DEFAULT) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return GT_SUCCESS;
  }
  int rank = 0, size = 1;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  GT_H5_ID(ids[GT_RR_DSET], H5Dopen2(file, "/rank/state", H5P_DEFAULT));
  GT_H5_ID(ids[GT_RR_SPACE], H5Dget_space(ids[GT_RR_DSET]));
  hssize_t npoints;
  GT_CALL_HDF5(npoints = H5Sget_simple_extent_npoints(ids[GT_RR_SPACE]));
  const size_t total = (size_t)npoints;
  if (total % (size_t)size != 0)
    return GT_SUCCESS; /* written by another number of ranks */
  const size_t L = total / (size_t)size;
  char *tag = NULL;
  bool found = false;
  GT_CALL(gt_h5_read_attr_str(ids[GT_RR_DSET], "tag", "/rank/state", &found, &tag));
  const bool same_tag = found && tag && strcmp(tag, st->rank_tag ? st->rank_tag : "") == 0;
  free(tag);
  uint32_t *lengths = malloc(sizeof *lengths * (size_t)size);
  GT_CHECK_ALLOC(lengths, sizeof *lengths * (size_t)size);
  int status = gt_h5_read_attr_u32s(ids[GT_RR_DSET], "lengths", "/rank/state", size, &found,
                                    lengths);
  const bool same_len = status == GT_SUCCESS && found && lengths[rank] == st->rank_n;
  free(lengths);
  if (status != GT_SUCCESS) { /* another number of ranks: not this run's state */
    gt_error_clear();
    H5Eclear2(H5E_DEFAULT);
    return GT_SUCCESS;
  }
  if (!same_tag || !same_len || st->rank_n == 0)
    return GT_SUCCESS;
  /* the checksum blocks that hold the row, read and checked */
  const size_t nsums = gt_ckpt_nsums(total), lo = (size_t)rank * L;
  const size_t b0 = lo / GT_CKPT_SUM_FLOATS, b1 = (lo + st->rank_n - 1) / GT_CKPT_SUM_FLOATS;
  const size_t first = b0 * GT_CKPT_SUM_FLOATS;
  const size_t last = (b1 + 1) * GT_CKPT_SUM_FLOATS < total ? (b1 + 1) * GT_CKPT_SUM_FLOATS : total;
  uint32_t *stored = malloc(sizeof *stored * nsums);
  float *data = malloc(sizeof *data * (last - first));
  status = stored && data ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  if (status == GT_SUCCESS)
    status = gt_h5_read_attr_u32s(ids[GT_RR_DSET], "fletcher32", "/rank/state", (int)nsums,
                                  &found, stored);
  if (status == GT_SUCCESS && !found)
    status = GT_ERROR(GT_ERR_HDF5, "checkpoint %s: /rank/state has no fletcher32 checksums",
                      path);
  if (status == GT_SUCCESS) {
    const hsize_t start = first, count = last - first;
    ids[GT_RR_MEM] = H5Screate_simple(1, &count, NULL);
    if (ids[GT_RR_MEM] < 0 ||
        H5Sselect_hyperslab(ids[GT_RR_SPACE], H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
        H5Dread(ids[GT_RR_DSET], H5T_NATIVE_FLOAT, ids[GT_RR_MEM], ids[GT_RR_SPACE], H5P_DEFAULT,
                data) < 0)
      status = gt_error_hdf5("H5Dread(/rank/state)", __FILE__, __LINE__, __func__);
  }
  if (status == GT_SUCCESS)
    status = gt_ckpt_check_sums(path, "/rank/state", data, total, b0, b1 - b0 + 1, stored);
  if (status == GT_SUCCESS) {
    memcpy(row, data + (lo - first), st->rank_n * sizeof *row);
    *match = true;
  }
  free(stored);
  free(data);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The rank state, all or none (collective on comm). */
static int gt_ckpt_read_rank(hid_t file, const char *path, const gt_ckpt_state *st,
                             MPI_Comm comm)
{
  if (!st->rank_loaded)
    return GT_SUCCESS;
  *st->rank_loaded = false;
  float *row = malloc(sizeof *row * (st->rank_n + 1));
  GT_CHECK_ALLOC(row, sizeof *row * (st->rank_n + 1));
  hid_t ids[GT_RR_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  bool match = false;
  int status = gt_ckpt_read_rank_in(file, path, st, comm, row, &match, ids);
  status = gt_h5_close_all(status, GT_RR_N, ids);
  int mine = status == GT_SUCCESS && match, all = 0;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm) != MPI_SUCCESS && status == GT_SUCCESS)
    status = GT_ERROR(GT_ERR_MPI, "MPI_Allreduce of the rank state match failed");
  if (status == GT_SUCCESS && all) {
    memcpy(st->rank_state, row, st->rank_n * sizeof *row);
    *st->rank_loaded = true;
  }
  free(row);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_ckpt_read(const char *path, const gt_ckpt_state *st, MPI_Comm comm)
{
  const size_t n = gt_ckpt_largest_local(st);
  gt_ckpt_reader r = {.path = path, .st = st, .staging = malloc(n * sizeof(float))};
  GT_CHECK_ALLOC(r.staging, n * sizeof(float));
  hid_t file = H5I_INVALID_HID;
  int status = gt_comm_foreign_begin(comm);
  if (status != GT_SUCCESS) {
    free(r.staging);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  if (gt_h5_open_mpio(path, H5F_ACC_RDONLY, comm, &file) != GT_SUCCESS) {
    gt_comm_foreign_end();
    free(r.staging);
    return gt_ckpt_open_error(path);
  }
  status = gt_ckpt_read_format(file, path, &r.format);
  if (status == GT_SUCCESS && r.format >= 3)
    gt_preader_open(&r.pread, path, st->direct != GT_CKPT_DIRECT_OFF);
  else
    r.pread.fd = r.pread.fd_direct = r.pread.fd_direct_open = -1;
  if (status == GT_SUCCESS)
    status = gt_ckpt_plan_swap(st, false, &r.plan);
  int local = GT_SUCCESS;
  for (int i = 0; i < st->ntensors && status == GT_SUCCESS; i++)
    for (int k = 0; k < GT_NKINDS && status == GT_SUCCESS; k++)
      status = gt_ckpt_read_tensor(file, &r, &st->tensors[i], k, &local);
  if (status == GT_SUCCESS)
    status = local; /* its error is still the current one */
  /* every rank takes part (an error above is agreed on by the caller) */
  const int rank_status = gt_ckpt_read_rank(file, path, st, comm);
  if (status == GT_SUCCESS)
    status = rank_status;
  status = gt_h5_close_all(status, 1, &file);
  gt_comm_foreign_end();
  gt_preader_close(&r.pread);
  free(r.staging);
  free(r.rbuf);
  free(r.stored);
  free(r.send);
  free(r.recv);
  gt_swap_plan_free(&r.plan);
  if (status == GT_ERR_HDF5) /* a damaged block, a read that failed: the file, bad input */
    return gt_ckpt_damaged(path);
  GT_CALL(status);
  return GT_SUCCESS;
}

