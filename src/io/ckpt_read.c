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
#include "ckpt_pread.h"
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
  /* the stream (gt_preader_stream): segment s is tensor seg_tensor[s] of
   * kind seg_kind[s]; the next segment to take, and every segment's
   * checksums */
  gt_pread_seg *segs;
  int *seg_tensor, *seg_kind;
  size_t nsegs, seg_next;
  uint32_t *seg_sums;
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

/* The stream (below). */
typedef enum { GT_TAKE_DROP, GT_TAKE_UPLOAD, GT_TAKE_RUNS, GT_TAKE_COPY } gt_take;
static int gt_ckpt_read_streamed(gt_ckpt_reader *r, const char *name, size_t s, gt_take how,
                                 const gt_param *t, float *dst, size_t a, size_t b);
static size_t gt_ckpt_stream_seg(gt_ckpt_reader *r, size_t i, int kind);

/* The cuts of the exchanged whole slabs [x0, x1) of t (local entries)
 * among g members: member j reads and checks the logical entries
 * [cut[j], cut[j + 1]), on checksum-block boundaries, so that every block
 * is read and checked once. */
static void gt_ckpt_swap_cuts(const gt_param *t, size_t x0, size_t x1, int g, size_t *cut)
{
  size_t ls, fs;
  gt_ckpt_slab_sizes(t, &ls, &fs);
  const size_t lo = x0 / ls * fs, hi = x1 / ls * fs;
  cut[0] = lo;
  cut[g] = hi;
  for (int j = 1; j < g; j++) {
    size_t c = lo + (size_t)((hi - lo) * (unsigned __int128)j / (unsigned)g);
    c = gt_align_up(c, GT_CKPT_SUM_FLOATS);
    cut[j] = c < cut[j - 1] ? cut[j - 1] : c > hi ? hi : c;
  }
}

/* The read exchange of one sharded tensor's whole slabs (local [x0, x1)):
 * each member reads and checks its cut of the group's range once, and sends
 * every other member the entries of it that member holds. A member whose
 * read failed (ok false: its error is noted by the caller) still takes part;
 * the error, agreed on afterwards, makes the whole load fail. Collective on
 * the group. */
static int gt_ckpt_swap_read(gt_ckpt_reader *r, const char *name, const gt_param *t, int kind,
                             size_t i, size_t a, size_t x0, size_t x1, hid_t ids[],
                             int *local)
{
  const int g = r->plan.gsize, me = r->plan.grank;
  const int *index = r->plan.index + i * (size_t)g;
  const MPI_Comm comm = *r->st->group;
  size_t cut[GT_CKPT_GROUP_MAX + 1], scount[GT_CKPT_GROUP_MAX] = {0};
  size_t rcount[GT_CKPT_GROUP_MAX] = {0};
  gt_ckpt_swap_cuts(t, x0, x1, g, cut);
  size_t f0 = cut[me];
  const size_t s = gt_ckpt_stream_seg(r, i, kind); /* read ahead by the stream? */
  if (*local == GT_SUCCESS && s != SIZE_MAX) {
    f0 = r->segs[s].first;
    *local = gt_ckpt_grow_aligned(&r->rbuf, &r->rcap, r->segs[s].len / sizeof(float));
    if (*local == GT_SUCCESS)
      *local = gt_ckpt_read_streamed(r, name, s, GT_TAKE_COPY, NULL, r->rbuf, 0, 0);
  } else if (*local == GT_SUCCESS && cut[me] < cut[me + 1]) {
    *local = gt_ckpt_read_span(r, name, t, cut[me], cut[me + 1], &f0, ids);
  }
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

/* Take stream segment s (every piece waited for and given back), its
 * entries [first, ...) (logical indices) going, as they arrive, each piece
 * checked first (a piece the threads found bad is checked again here,
 * block by block, for the message):
 *   GT_TAKE_DROP    nowhere (a segment the load passed by);
 *   GT_TAKE_UPLOAD  those of [a, b) uploaded to dst (entry a at dst[0]):
 *                   an unsplit tensor, straight into its place;
 *   GT_TAKE_RUNS    this rank's runs of [a, b) of split tensor t (local
 *                   indices) into host memory, local entry a at dst[0];
 *   GT_TAKE_COPY    all of them into host memory, entry first at dst[0]. */
static int gt_ckpt_read_streamed(gt_ckpt_reader *r, const char *name, size_t s, gt_take how,
                                 const gt_param *t, float *dst, size_t a, size_t b)
{
  const gt_pread_seg *seg = &r->segs[s];
  gt_backend *be = r->st->params->be;
  const bool place = how != GT_TAKE_DROP;
  size_t k0, n;
  gt_preader_stream_pieces(&r->pread, s, &k0, &n);
  int status = GT_SUCCESS;
  for (size_t j = 0; j < n; j++) {
    gt_piece pc;
    const float *data = gt_preader_stream_get(&r->pread, k0 + j, &pc);
    const size_t want = gt_min_size(seg->len - j * GT_PREAD_PIECE, GT_PREAD_PIECE);
    const size_t e0 = seg->first + j * (GT_PREAD_PIECE / sizeof(float)), ne = want / sizeof(float);
    if (place && status == GT_SUCCESS && pc.got < want)
      status = gt_error_set(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                            "checkpoint %s: %s cannot be read: %s at byte %zu of the file",
                            r->path, name, pc.err > 0 ? strerror(pc.err) : "the file ends",
                            seg->off + j * GT_PREAD_PIECE + pc.got);
    if (place && status == GT_SUCCESS && !pc.ok) {
      status = gt_ckpt_check_sums(r->path, name, data, seg->total, e0 / GT_CKPT_SUM_FLOATS,
                                  (ne + GT_CKPT_SUM_FLOATS - 1) / GT_CKPT_SUM_FLOATS,
                                  seg->stored);
      if (status == GT_SUCCESS)
        status = gt_ckpt_check_finite(r->path, name, data, ne, e0);
    }
    const size_t x0 = e0 > a ? e0 : a, x1 = e0 + ne < b ? e0 + ne : b;
    if (status != GT_SUCCESS || !place) {
    } else if (how == GT_TAKE_COPY) {
      memcpy(dst + (e0 - seg->first), data, want);
    } else if (how == GT_TAKE_RUNS) {
      gt_clip c = {.mode = GT_CLIP_PLACE, .lo = e0, .hi = e0 + ne, .dst = dst, .src = data,
                   .first = a, .f0 = e0};
      status = gt_ckpt_runs(t, a, b, gt_clip_run, &c);
    } else if (x0 < x1) {
      status = be->ops->upload(be, dst + (x0 - a), data + (x0 - e0), (x1 - x0) * sizeof(float),
                               NULL);
      if (status == GT_SUCCESS) /* the slot is read into again once given back */
        status = gt_ckpt_copy_done(be);
    }
    gt_preader_stream_release(&r->pread, k0 + j);
  }
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The stream's segment of tensor i (kind), SIZE_MAX when it has none; the
 * segments before it (tensors the loop did not read itself) are taken and
 * dropped. */
static size_t gt_ckpt_stream_seg(gt_ckpt_reader *r, size_t i, int kind)
{
  while (r->seg_next < r->nsegs) {
    const size_t s = r->seg_next;
    const size_t si = (size_t)r->seg_tensor[s];
    if (si > i || (si == i && r->seg_kind[s] > kind))
      return SIZE_MAX;
    r->seg_next++;
    if (si == i && r->seg_kind[s] == kind)
      return s;
    (void)gt_ckpt_read_streamed(r, "", s, GT_TAKE_DROP, NULL, NULL, 0, 0);
  }
  return SIZE_MAX;
}

/* Load this rank's entries [a, b) of t (kind, tensor i) from the open
 * dataset, by itself. */
static int gt_ckpt_read_own(gt_ckpt_reader *r, const char *name, const gt_param *t, int kind,
                            size_t i, size_t a, size_t b, hid_t ids[])
{
  const gt_ckpt_state *st = r->st;
  /* read ahead by the stream? */
  const size_t s = r->format >= 3 ? gt_ckpt_stream_seg(r, i, kind) : SIZE_MAX;
  if (s != SIZE_MAX && t->shard.axis < 0)
    return gt_ckpt_read_streamed(r, name, s, GT_TAKE_UPLOAD, t,
                                 gt_ckpt_part_data(st, kind, t->offset + a), a, b);
  size_t count = 0;
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count));
  const float *src = r->staging;
  if (count != b - a) /* padding stays zero */
    memset(r->staging, 0, (b - a) * sizeof(float));
  if (s != SIZE_MAX) { /* a split tensor: its runs out of the stream's pieces */
    GT_CALL(gt_ckpt_read_streamed(r, name, s, GT_TAKE_RUNS, t, r->staging, a, b));
  } else if (r->format >= 3 && t->shard.axis < 0) { /* one run: straight from the blocks */
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

/* The whole slabs [x0, x1) of this rank's entries [a, b) of t (tensor i)
 * that the group exchanges (x0 == x1: none): when this rank's own entries
 * are spread over 1.5 times the part of the file they fill or more (column
 * splits, q/k/v blocks), read alone, the members would read and check much
 * of the tensor several times (at tp = 2, column splits twice and q/k/v
 * blocks 1.7 times); exchanged, the file is read once and the rest goes
 * through memory. Every member decides alike: the spans of equal pieces
 * are equal. */
static int gt_ckpt_swapped(const gt_ckpt_reader *r, const gt_param *t, size_t i, size_t a,
                           size_t b, size_t *x0, size_t *x1)
{
  *x0 = *x1 = a;
  if (r->format < 3 || !r->plan.swap || !r->plan.swap[i])
    return GT_SUCCESS;
  gt_span span = {(size_t)-1, 0};
  size_t held = 0;
  const int first = r->plan.index[i * (size_t)r->plan.gsize];
  GT_CALL(gt_ckpt_runs_at(t, first, a, b, gt_span_run, &span));
  GT_CALL(gt_ckpt_runs_at(t, first, a, b, gt_run_count, &held));
  if (span.lo < span.hi && 2 * (span.hi - span.lo) > 3 * held)
    gt_ckpt_whole_slabs(t, a, b, x0, x1);
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
  size_t x0, x1;
  GT_CALL(gt_ckpt_swapped(r, t, i, a, b, &x0, &x1));
  if (x0 >= x1) {
    if (*local == GT_SUCCESS)
      *local = gt_ckpt_read_own(r, name, t, kind, i, a, b, ids);
    return GT_SUCCESS;
  }
  size_t count = 0;
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count));
  if (count != b - a) /* padding stays zero */
    memset(r->staging, 0, (b - a) * sizeof(float));
  GT_CALL(gt_ckpt_swap_read(r, name, t, kind, i, a, x0, x1, ids, local));
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

/* Plan the stream (format 3, threads reading): every unsplit tensor this
 * rank reads by itself, in the loop's order, its checksum blocks that hold
 * this rank's entries, at the dataset's offset; then start it. Best effort:
 * the planning stops at the first dataset that does not open, has another
 * shape or is not contiguous (the loop then reads it, and says what is
 * wrong), and a failure leaves no stream. Its HDF5 errors are cleared. */
static void gt_ckpt_plan_stream(hid_t file, gt_ckpt_reader *r)
{
  const gt_ckpt_state *st = r->st;
  const size_t most = (size_t)st->ntensors * GT_NKINDS;
  r->segs = calloc(most + 1, sizeof *r->segs);
  r->seg_tensor = calloc(most + 1, sizeof *r->seg_tensor);
  r->seg_kind = calloc(most + 1, sizeof *r->seg_kind);
  size_t *sum_at = calloc(most + 1, sizeof *sum_at), nsums_all = 0, cap = 0;
  bool stop = !r->segs || !r->seg_tensor || !r->seg_kind || !sum_at;
  for (int i = 0; i < st->ntensors && !stop; i++) {
    const gt_ckpt_tensor *tensor = &st->tensors[i];
    gt_param *t = gt_params_find(st->params, tensor->name);
    if (!t)
      continue;
    for (int k = 0; k < GT_NKINDS && !stop; k++) {
      size_t lo, hi, a, b, x0, x1;
      gt_ckpt_range(st, k, &lo, &hi);
      gt_ckpt_clip(t, lo, hi, &a, &b);
      if (a >= b)
        continue;
      /* the logical entries this rank reads alone (none: exchanged) */
      gt_span span = {a, b};
      if (t->shard.axis >= 0) {
        span = (gt_span){(size_t)-1, 0};
        stop = gt_ckpt_swapped(r, t, (size_t)i, a, b, &x0, &x1) != GT_SUCCESS ||
               gt_ckpt_runs(t, a, b, gt_span_run, &span) != GT_SUCCESS;
        if (stop)
          break;
        if (x0 < x1) { /* this member's cut of the exchanged slabs */
          size_t cut[GT_CKPT_GROUP_MAX + 1];
          gt_ckpt_swap_cuts(t, x0, x1, r->plan.gsize, cut);
          span = (gt_span){cut[r->plan.grank], cut[r->plan.grank + 1]};
        }
        if (span.lo >= span.hi)
          continue;
      }
      char name[GT_PARAM_NAME_MAX + 16];
      snprintf(name, sizeof name, "%s/%s", gt_kind_group[k], tensor->name);
      const hid_t dset = H5Lexists(file, name, H5P_DEFAULT) > 0
                             ? H5Dopen2(file, name, H5P_DEFAULT)
                             : H5I_INVALID_HID;
      const hid_t space = dset >= 0 ? H5Dget_space(dset) : H5I_INVALID_HID;
      const size_t total = gt_param_full_numel(t);
      stop = space < 0 || H5Sget_simple_extent_npoints(space) != (hssize_t)total;
      const haddr_t base = stop ? HADDR_UNDEF : H5Dget_offset(dset);
      stop = stop || base == HADDR_UNDEF;
      const size_t nsums = gt_ckpt_nsums(total);
      if (!stop && nsums_all + nsums > cap) {
        cap = 2 * (nsums_all + nsums);
        uint32_t *more = realloc(r->seg_sums, cap * sizeof *more);
        stop = !more;
        if (more)
          r->seg_sums = more;
      }
      bool found = false;
      stop = stop || gt_h5_read_attr_u32s(dset, "fletcher32", name, (int)nsums, &found,
                                          r->seg_sums + nsums_all) != GT_SUCCESS ||
             !found;
      if (space >= 0)
        H5Sclose(space);
      if (dset >= 0)
        H5Dclose(dset);
      if (stop)
        break;
      const size_t f0 = span.lo / GT_CKPT_SUM_FLOATS * GT_CKPT_SUM_FLOATS;
      const size_t f1 = gt_min_size(total, gt_align_up(span.hi, GT_CKPT_SUM_FLOATS));
      const size_t s = r->nsegs++;
      r->segs[s] = (gt_pread_seg){.off = (size_t)base + f0 * sizeof(float),
                                  .len = (f1 - f0) * sizeof(float), .total = total, .first = f0};
      r->seg_tensor[s] = i;
      r->seg_kind[s] = k;
      sum_at[s] = nsums_all;
      nsums_all += nsums;
    }
  }
  H5Eclear2(H5E_DEFAULT);
  gt_error_clear();
  for (size_t s = 0; s < r->nsegs; s++)
    r->segs[s].stored = r->seg_sums + sum_at[s];
  free(sum_at);
  if (r->nsegs && gt_preader_stream(&r->pread, r->segs, r->nsegs) != GT_SUCCESS) {
    gt_error_clear();
    r->nsegs = 0;
  }
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
 * row for this state: no dataset, another tag, ranks or length (an empty
 * row matches an empty one of a dataset with that tag). */
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
  if (!same_tag || !same_len)
    return GT_SUCCESS;
  if (st->rank_n == 0) { /* an empty row of the same state (others hold it) */
    *match = true;
    return GT_SUCCESS;
  }
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
    /* O_DIRECT for the pieces the page cache does not hold, unless off:
     * in A/B runs of one hour on this project's VM (124M, run_ckpt.sh) it
     * read 0.77-0.84x dd at 1 rank, 0.56-0.59x at tp = 2 and 0.69x at
     * dp = 2, against 0.48-0.84x, 0.36-0.40x and 0.47-0.57x through the
     * page cache, whose copy out of the cache costs the CPU that 2 ranks
     * on 2 cores do not have (an earlier hour measured the opposite at 1
     * rank: this disk sits on a caching host) */
    gt_preader_open(&r.pread, path, st->direct != GT_CKPT_DIRECT_OFF);
  else
    r.pread.fd = r.pread.fd_direct = r.pread.fd_direct_open = -1;
  if (status == GT_SUCCESS)
    status = gt_ckpt_plan_swap(st, false, &r.plan);
  if (status == GT_SUCCESS && r.format >= 3 && r.pread.fd >= 0 && st->params)
    gt_ckpt_plan_stream(file, &r);
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
  free(r.segs);
  free(r.seg_tensor);
  free(r.seg_kind);
  free(r.seg_sums);
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

