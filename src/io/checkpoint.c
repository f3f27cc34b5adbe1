/*
 * checkpoint.c - checkpoint files in parallel HDF5 and the directory that
 * holds them (see checkpoint.h and docs/checkpoints.md).
 */
#define _GNU_SOURCE /* strdup, fsync on older headers */
#include "gridtrain/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/log.h"
#include "h5util.h"

/* The three groups of tensors: values and the two AdamW moments. */
enum { GT_KIND_MODEL = 0, GT_KIND_M, GT_KIND_V, GT_NKINDS };
static const char *const gt_kind_group[GT_NKINDS] = {"/model", "/optim/m", "/optim/v"};

void gt_ckpt_meta_free(gt_ckpt_meta *meta)
{
  free(meta->deck);
  meta->deck = NULL;
}

// ---- selections -------------------------------------------------------------------------

/* Select, in the file space of the logical tensor and in the memory space
 * of the rank's local tensor, the entries this rank holds (padding left
 * out). Both selections list the entries in the same (row-major) order. */
static int gt_ckpt_select(const gt_param *t, hid_t fspace, hid_t mspace)
{
  if (t->shard.axis < 0) {
    GT_CALL_HDF5(H5Sselect_all(fspace));
    GT_CALL_HDF5(H5Sselect_all(mspace));
    return GT_SUCCESS;
  }
  const int ax = t->shard.axis;
  const long block = t->full_shape[ax] / t->shard.blocks;
  const long piece = t->value.shape[ax] / t->shard.blocks;
  const long k0 = (long)t->shard.index * piece;
  const long n = block - k0 < piece ? block - k0 : piece; /* real entries per block */
  if (n <= 0) {
    GT_CALL_HDF5(H5Sselect_none(fspace));
    GT_CALL_HDF5(H5Sselect_none(mspace));
    return GT_SUCCESS;
  }
  hsize_t fstart[GT_TENSOR_MAX_DIMS] = {0}, mstart[GT_TENSOR_MAX_DIMS] = {0};
  hsize_t count[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    count[d] = (hsize_t)t->full_shape[d];
  count[ax] = (hsize_t)n;
  for (int b = 0; b < t->shard.blocks; b++) {
    const H5S_seloper_t op = b == 0 ? H5S_SELECT_SET : H5S_SELECT_OR;
    fstart[ax] = (hsize_t)(b * block + k0);
    mstart[ax] = (hsize_t)(b * piece);
    GT_CALL_HDF5(H5Sselect_hyperslab(fspace, op, fstart, NULL, count, NULL));
    GT_CALL_HDF5(H5Sselect_hyperslab(mspace, op, mstart, NULL, count, NULL));
  }
  return GT_SUCCESS;
}

static int gt_ckpt_local_space(const gt_param *t, hid_t *space)
{
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    dims[d] = (hsize_t)t->value.shape[d];
  GT_H5_ID(*space, H5Screate_simple(t->ndim, dims, NULL));
  return GT_SUCCESS;
}

int gt_ckpt_selection_size(const gt_param *t, long long *file_points, long long *mem_points)
{
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    dims[d] = (hsize_t)t->full_shape[d];
  hid_t ids[2] = {H5I_INVALID_HID, H5I_INVALID_HID};
  int status = GT_SUCCESS;
  ids[0] = H5Screate_simple(t->ndim, dims, NULL);
  if (ids[0] < 0)
    status = gt_error_hdf5("H5Screate_simple", __FILE__, __LINE__, __func__);
  if (status == GT_SUCCESS)
    status = gt_ckpt_local_space(t, &ids[1]);
  if (status == GT_SUCCESS)
    status = gt_ckpt_select(t, ids[0], ids[1]);
  if (status == GT_SUCCESS) {
    *file_points = (long long)H5Sget_select_npoints(ids[0]);
    *mem_points = (long long)H5Sget_select_npoints(ids[1]);
  }
  GT_CALL(gt_h5_close_all(status, 2, ids));
  return GT_SUCCESS;
}

// ---- ranges, runs and checksums -------------------------------------------------------------

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint checksums are of the file's little-endian bytes, taken from memory"
#endif

#define GT_CKPT_SUM_FLOATS (GT_CKPT_SUM_BYTES / sizeof(float))
#define GT_FLETCHER_MOD 65535u

static size_t gt_min_size(size_t a, size_t b) { return a < b ? a : b; }

/* The flat range [*a, *b) of t's local entries (indices into the local
 * tensor) that fall in the flat range [lo, hi) of the buffers. */
static void gt_ckpt_clip(const gt_param *t, size_t lo, size_t hi, size_t *a, size_t *b)
{
  const size_t t0 = t->offset, t1 = t->offset + t->numel;
  const size_t s = lo > t0 ? lo : t0, e = hi < t1 ? hi : t1;
  *a = s < e ? s - t0 : 0;
  *b = s < e ? e - t0 : 0;
}

/* A run: len entries contiguous both in the local tensor (from index
 * `local`) and in the logical tensor (row-major, from index `logical`). */
typedef int (*gt_run_fn)(void *ctx, size_t local, size_t logical, size_t len);

/* Call fn on the runs of t's real (not padding) local entries with index in
 * [a, b), in local row-major order - which is also the logical order, as
 * the map from local to logical coordinates is increasing along every axis. */
static int gt_ckpt_runs(const gt_param *t, size_t a, size_t b, gt_run_fn fn, void *ctx)
{
  if (a >= b)
    return GT_SUCCESS;
  if (t->shard.axis < 0)
    return fn(ctx, a, a, b - a);
  const int ax = t->shard.axis;
  size_t inner = 1;
  for (int d = ax + 1; d < t->ndim; d++)
    inner *= (size_t)t->full_shape[d];
  const size_t nblocks = (size_t)t->shard.blocks;
  const size_t full_len = (size_t)t->full_shape[ax], local_len = (size_t)t->value.shape[ax];
  const size_t block = full_len / nblocks, piece = local_len / nblocks;
  const size_t k0 = (size_t)t->shard.index * piece;
  const size_t n = block > k0 ? gt_min_size(piece, block - k0) : 0;
  const size_t slab = local_len * inner;
  if (n == 0 || slab == 0)
    return GT_SUCCESS;
  for (size_t o = a / slab; o * slab < b; o++)
    for (size_t bk = 0; bk < nblocks; bk++) {
      const size_t l0 = o * slab + bk * piece * inner, l1 = l0 + n * inner;
      const size_t f0 = (o * full_len + bk * block + k0) * inner;
      const size_t s0 = l0 > a ? l0 : a, s1 = l1 < b ? l1 : b;
      if (s0 < s1)
        GT_CALL(fn(ctx, s0, f0 + (s0 - l0), s1 - s0));
    }
  return GT_SUCCESS;
}

static int gt_run_count(void *ctx, size_t local, size_t logical, size_t len)
{
  (void)local;
  (void)logical;
  *(size_t *)ctx += len;
  return GT_SUCCESS;
}

/* Hyperslab selections built from flat ranges: the boxes of the row-major
 * range [lo, hi) over dims[0..m) (at most 2m - 1 of them), each completed by
 * the fixed start/count of dims m..nd-1, ORed into space. */
typedef struct {
  hid_t space;
  int nd, m;
  hsize_t dims[GT_TENSOR_MAX_DIMS], start[GT_TENSOR_MAX_DIMS], count[GT_TENSOR_MAX_DIMS];
  bool first;
} gt_sel;

static int gt_sel_emit(gt_sel *s)
{
  GT_CALL_HDF5(H5Sselect_hyperslab(s->space, s->first ? H5S_SELECT_SET : H5S_SELECT_OR,
                                   s->start, NULL, s->count, NULL));
  s->first = false;
  return GT_SUCCESS;
}

static int gt_sel_flat(gt_sel *s, int d, hsize_t lo, hsize_t hi)
{
  if (lo >= hi)
    return GT_SUCCESS;
  if (d == s->m) /* no dims left: the range is [0, 1) */
    return gt_sel_emit(s);
  hsize_t inner = 1;
  for (int e = d + 1; e < s->m; e++)
    inner *= s->dims[e];
  hsize_t r0 = lo / inner;
  const hsize_t r1 = hi / inner;
  if (r0 == r1) { /* inside one row of dims[d] */
    s->start[d] = r0;
    s->count[d] = 1;
    return gt_sel_flat(s, d + 1, lo % inner, hi % inner);
  }
  if (lo % inner) {
    s->start[d] = r0;
    s->count[d] = 1;
    GT_CALL(gt_sel_flat(s, d + 1, lo % inner, inner));
    r0++;
  }
  if (r1 > r0) {
    s->start[d] = r0;
    s->count[d] = r1 - r0;
    for (int e = d + 1; e < s->m; e++) {
      s->start[e] = 0;
      s->count[e] = s->dims[e];
    }
    GT_CALL(gt_sel_emit(s));
  }
  if (hi % inner) {
    s->start[d] = r1;
    s->count[d] = 1;
    GT_CALL(gt_sel_flat(s, d + 1, 0, hi % inner));
  }
  return GT_SUCCESS;
}

static int gt_sel_run(void *ctx, size_t local, size_t logical, size_t len)
{
  (void)local;
  gt_sel *s = ctx;
  s->m = s->nd;
  GT_CALL(gt_sel_flat(s, 0, (hsize_t)logical, (hsize_t)(logical + len)));
  return GT_SUCCESS;
}

/* Select in fspace (the logical tensor's) the real entries of t's local
 * range [a, b) (a < b, at least one real entry). Whole slabs of the shard
 * axis go in as regular boxes (one per shard block and box of the axes
 * before it), the partial slabs at the ends run by run. */
static int gt_ckpt_select_range(const gt_param *t, size_t a, size_t b, hid_t fspace)
{
  gt_sel s = {.space = fspace, .nd = t->ndim, .first = true};
  for (int d = 0; d < t->ndim; d++)
    s.dims[d] = (hsize_t)t->full_shape[d];
  if (t->shard.axis < 0)
    return gt_sel_run(&s, a, a, b - a);
  const int ax = t->shard.axis;
  size_t inner = 1;
  for (int d = ax + 1; d < t->ndim; d++)
    inner *= (size_t)t->full_shape[d];
  const size_t slab = (size_t)t->value.shape[ax] * inner;
  const size_t o0 = (a + slab - 1) / slab, o1 = b / slab; /* whole slabs [o0, o1) */
  if (o0 >= o1)
    return gt_ckpt_runs(t, a, b, gt_sel_run, &s);
  if (a < o0 * slab)
    GT_CALL(gt_ckpt_runs(t, a, o0 * slab, gt_sel_run, &s));
  const long block = t->full_shape[ax] / t->shard.blocks;
  const long piece = t->value.shape[ax] / t->shard.blocks;
  const long k0 = (long)t->shard.index * piece;
  const long n = block - k0 < piece ? block - k0 : piece;
  for (int bk = 0; bk < t->shard.blocks && n > 0; bk++) {
    s.m = ax;
    s.start[ax] = (hsize_t)(bk * block + k0);
    s.count[ax] = (hsize_t)n;
    for (int d = ax + 1; d < t->ndim; d++) {
      s.start[d] = 0;
      s.count[d] = s.dims[d];
    }
    GT_CALL(gt_sel_flat(&s, 0, (hsize_t)o0, (hsize_t)o1));
  }
  if (o1 * slab < b)
    GT_CALL(gt_ckpt_runs(t, o1 * slab, b, gt_sel_run, &s));
  return GT_SUCCESS;
}

/* Fletcher-32 of 16-bit little-endian words, block by block: over the n
 * words w_0..w_{n-1} of a block, s1 = sum w_j and s2 = sum (n - j) w_j, both
 * mod 65535, checksum s2 << 16 | s1 (the classic running-sum definition,
 * written as sums that add up over any split of the block: each rank adds
 * the terms of the words it writes, and one all-reduce completes them). */
static void gt_fletcher_terms(const unsigned char *p, size_t nwords, uint64_t *S, uint64_t *T)
{
  uint64_t s = 0, t = 0;
  for (size_t base = 0; base < nwords; base += 256) {
    const uint32_t c = (uint32_t)gt_min_size(nwords - base, 256);
    const unsigned char *q = p + 2 * base;
    uint32_t cs = 0, ct = 0; /* < 2^32: 256 words of < 2^16, weights < 256 */
    for (uint32_t k = 0; k < c; k++) {
      const uint32_t w = (uint32_t)q[2 * k] | (uint32_t)q[2 * k + 1] << 8;
      cs += w;
      ct += k * w;
    }
    s += cs;
    t += ct + (uint64_t)base * cs;
  }
  *S = s;
  *T = t;
}

/* sums[2 b], sums[2 b + 1] += the terms of `len` floats at logical index
 * `logical` of a dataset of `total` floats (blocks of GT_CKPT_SUM_FLOATS). */
static void gt_fletcher_add(uint64_t *sums, size_t total, const float *data, size_t logical,
                            size_t len)
{
  while (len > 0) {
    const size_t blk = logical / GT_CKPT_SUM_FLOATS, off = logical % GT_CKPT_SUM_FLOATS;
    const size_t m = gt_min_size(len, GT_CKPT_SUM_FLOATS - off);
    const uint64_t nw = 2 * gt_min_size(GT_CKPT_SUM_FLOATS, total - blk * GT_CKPT_SUM_FLOATS);
    uint64_t S, T;
    gt_fletcher_terms((const unsigned char *)data, 2 * m, &S, &T);
    const uint64_t weight = (nw - 2 * off) % GT_FLETCHER_MOD;
    sums[2 * blk] = (sums[2 * blk] + S) % GT_FLETCHER_MOD;
    sums[2 * blk + 1] = (sums[2 * blk + 1] + weight * (S % GT_FLETCHER_MOD) +
                         GT_FLETCHER_MOD - T % GT_FLETCHER_MOD) % GT_FLETCHER_MOD;
    data += m;
    logical += m;
    len -= m;
  }
}

static uint32_t gt_fletcher_value(const uint64_t *sum)
{
  return (uint32_t)(sum[1] % GT_FLETCHER_MOD) << 16 | (uint32_t)(sum[0] % GT_FLETCHER_MOD);
}

/* Checksum blocks of a dataset of `total` floats. */
static size_t gt_ckpt_nsums(size_t total)
{
  return (total + GT_CKPT_SUM_FLOATS - 1) / GT_CKPT_SUM_FLOATS;
}

/* Check the whole blocks [blk0, blk0 + n) held in data (from the first
 * one's start) against their stored checksums; the first that fails is
 * GT_ERR_HDF5 naming the dataset and its bytes. */
static int gt_ckpt_check_sums(const char *path, const char *name, const float *data,
                              size_t total, size_t blk0, size_t n, const uint32_t *stored)
{
  for (size_t b = blk0; b < blk0 + n; b++) {
    const size_t lo = b * GT_CKPT_SUM_FLOATS;
    const size_t len = gt_min_size(GT_CKPT_SUM_FLOATS, total - lo);
    uint64_t sum[2] = {0, 0};
    gt_fletcher_add(sum, len, data + (lo - blk0 * GT_CKPT_SUM_FLOATS), 0, len);
    const uint32_t have = gt_fletcher_value(sum);
    GT_CHECK(have == stored[b], GT_ERR_HDF5,
             "checkpoint %s: %s is damaged: the checksum of its bytes %zu-%zu (block %zu of "
             "%zu) fails (Fletcher-32 %08x, stored %08x)",
             path, name, lo * sizeof(float), (lo + len) * sizeof(float) - 1, b + 1,
             gt_ckpt_nsums(total), (unsigned)have, (unsigned)stored[b]);
  }
  return GT_SUCCESS;
}

/* Device pointer of flat element `flat` of kind's buffer. */
static float *gt_ckpt_part_data(const gt_ckpt_state *st, int kind, size_t flat)
{
  if (kind == GT_KIND_MODEL)
    return (st->values ? st->values : st->params->values) + (flat - st->values_lo);
  return (kind == GT_KIND_M ? st->m : st->v) + (flat - st->moments_lo);
}

/* The flat range of kind's buffer this rank writes or loads. */
static void gt_ckpt_range(const gt_ckpt_state *st, int kind, size_t *lo, size_t *hi)
{
  if (kind == GT_KIND_MODEL) {
    *lo = st->hi ? st->lo : st->values_lo;
    *hi = st->hi ? st->hi : st->params->numel;
  } else {
    *lo = st->mhi ? st->mlo : st->moments_lo;
    *hi = st->mhi ? st->mhi : st->params->numel;
  }
}

/* The host waits for the copy just queued between the device and the
 * staging buffer (HDF5 reads the staging buffer next, or it is refilled). */
static int gt_ckpt_copy_done(gt_backend *be)
{
  gt_device_event *ev;
  GT_CALL(be->ops->event_create(be, &ev));
  int status = be->ops->event_record(be, ev, NULL);
  if (status == GT_SUCCESS)
    status = be->ops->event_wait(be, ev);
  be->ops->event_destroy(be, ev);
  GT_CALL(status);
  return GT_SUCCESS;
}

static size_t gt_ckpt_largest_local(const gt_ckpt_state *st)
{
  size_t n = 1;
  for (int i = 0; st->params && i < st->params->count; i++)
    n = st->params->list[i].numel > n ? st->params->list[i].numel : n;
  return n;
}

static size_t gt_ckpt_tensor_numel(const gt_ckpt_tensor *tensor)
{
  size_t n = 1;
  for (int d = 0; d < tensor->ndim; d++)
    n *= (size_t)tensor->dims[d];
  return n;
}

// ---- writing --------------------------------------------------------------------------------

static int gt_ckpt_write_meta(hid_t file, const gt_ckpt_meta *m)
{
  GT_CALL(gt_h5_write_attr_i64(file, "format_version", m->format));
  GT_CALL(gt_h5_write_attr_str(file, "format", "gridtrain checkpoint"));
  GT_CALL(gt_h5_write_attr_i64(file, "step", m->step));
  GT_CALL(gt_h5_write_attr_i64(file, "tokens", m->tokens));
  GT_CALL(gt_h5_write_attr_i64(file, "data_samples", m->samples));
  GT_CALL(gt_h5_write_attr_u64(file, "seed", m->seed));
  GT_CALL(gt_h5_write_attr_f64(file, "loss_scale", m->loss_scale));
  GT_CALL(gt_h5_write_attr_i64(file, "loss_scale_good_steps", m->scale_good_steps));
  GT_CALL(gt_h5_write_attr_i64(file, "skipped_steps", m->skipped_steps));
  GT_CALL(gt_h5_write_attr_str(file, "precision", m->precision[0] ? m->precision : "fp32"));
  GT_CALL(gt_h5_write_attr_f64(file, "loss", m->loss));
  const long long layout[3] = {m->dp, m->pp, m->tp};
  GT_CALL(gt_h5_write_attr_i64s(file, "layout", 3, layout));
  const long long model[5] = {m->layers, m->heads, m->dim, m->seq_len, m->vocab};
  GT_CALL(gt_h5_write_attr_i64s(file, "model_shape", 5, model));
  GT_CALL(gt_h5_write_attr_i64(file, "batch", m->batch));
  GT_CALL(gt_h5_write_attr_str(file, "code_version", m->code_version));
  GT_CALL(gt_h5_write_attr_str(file, "created", m->created));
  GT_CALL(gt_h5_write_attr_str(file, "deck", m->deck ? m->deck : ""));
  GT_CALL(gt_h5_write_attr_i64(file, "checksum_block_bytes", (long long)GT_CKPT_SUM_BYTES));
  GT_CALL(gt_h5_write_attr_str(file, "checksum",
                               "fletcher32: attribute of every dataset, one per block of "
                               "checksum_block_bytes of its little-endian row-major bytes "
                               "(docs/checkpoints.md)"));
  return GT_SUCCESS;
}

/* One rank's state through a write. A failure that only this rank meets (a
 * download, a broken invariant, an independent H5Dwrite) must not take it
 * out of the collective calls that the other ranks go on making
 * (H5Dcreate2, MPI_Allreduce, H5Acreate2, H5Fclose): the first one is kept
 * in `local`, message and all, and the rank writes nothing more. Errors of
 * the collective HDF5 calls are the same on every rank (their I/O errors
 * are held back by the write scope, comm.h) and end the write everywhere
 * alike. */
typedef struct {
  const gt_ckpt_state *st;
  float *staging, *packed; /* the local entries written, as downloaded / in file order */
  hid_t *dsets;            /* ntensors x GT_NKINDS datasets */
  uint64_t *sums;          /* Fletcher-32 terms, 2 per block of every dataset */
  size_t *sum_base;        /* first block of each dataset in sums */
  size_t nsums;
  uint32_t *values;        /* nsums checksums */
  int rank;  /* world rank, for the fault hooks */
  long step; /* the checkpoint's step, for the fault hooks */
  int local; /* first local failure, or GT_SUCCESS */
  char local_message[1024];
} gt_ckpt_writer;

static void gt_ckpt_note_local(gt_ckpt_writer *w, int code)
{
  if (w->local == GT_SUCCESS) {
    w->local = code;
    snprintf(w->local_message, sizeof w->local_message, "%s", gt_error_message());
  }
  gt_error_clear();
}

typedef struct {
  float *dst;
  const float *src;
  size_t a, pos;
  uint64_t *sums;
  size_t total;
} gt_pack;

/* Append a run to dst (file order) and add its checksum terms. */
static int gt_pack_run(void *ctx, size_t local, size_t logical, size_t len)
{
  gt_pack *p = ctx;
  const float *src = p->src + (local - p->a);
  if (p->dst)
    memcpy(p->dst + p->pos, src, len * sizeof(float));
  p->pos += len;
  gt_fletcher_add(p->sums, p->total, src, logical, len);
  return GT_SUCCESS;
}

enum { GT_P_SPACE, GT_P_MSPACE, GT_P_N };

/* Write this rank's entries of tensor (kind) into dset, independently. */
static int gt_ckpt_write_part_in(gt_ckpt_writer *w, hid_t dset, const gt_ckpt_tensor *tensor,
                                 int kind, hid_t ids[])
{
  const gt_ckpt_state *st = w->st;
  gt_param *t = st->params ? gt_params_find(st->params, tensor->name) : NULL;
  if (!t || !st->writer || !t->counted)
    return GT_SUCCESS;
  size_t lo, hi, a, b, count = 0;
  gt_ckpt_range(st, kind, &lo, &hi);
  gt_ckpt_clip(t, lo, hi, &a, &b);
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count));
  if (count == 0)
    return GT_SUCCESS;
  for (int d = 0; d < tensor->ndim; d++)
    GT_CHECK(t->ndim == tensor->ndim && t->full_shape[d] == tensor->dims[d], GT_ERR_INTERNAL,
             "internal error: parameter %s does not have its logical shape", t->name);
  GT_CHECK(!gt_fault_hit("ckpt_local_fail", w->rank, w->step), GT_ERR_DEVICE,
           "copying %s/%s to the host failed (injected by GT_FAULT=ckpt_local_fail)",
           gt_kind_group[kind], tensor->name);
  gt_backend *be = st->params->be;
  GT_CALL(be->ops->download(be, w->staging, gt_ckpt_part_data(st, kind, t->offset + a),
                            (b - a) * sizeof(float), NULL));
  GT_CALL(gt_ckpt_copy_done(be));
  const size_t i = (size_t)(tensor - st->tensors);
  gt_pack pack = {.dst = count == b - a ? NULL : w->packed, .src = w->staging, .a = a,
                  .sums = w->sums + 2 * w->sum_base[i * GT_NKINDS + (size_t)kind],
                  .total = gt_ckpt_tensor_numel(tensor)};
  GT_CALL(gt_ckpt_runs(t, a, b, gt_pack_run, &pack));
  GT_H5_ID(ids[GT_P_SPACE], H5Dget_space(dset));
  GT_CALL(gt_ckpt_select_range(t, a, b, ids[GT_P_SPACE]));
  hssize_t npoints;
  GT_CALL_HDF5(npoints = H5Sget_select_npoints(ids[GT_P_SPACE]));
  GT_CHECK((size_t)npoints == count, GT_ERR_INTERNAL,
           "internal error: %s/%s: %lld entries selected in the file for %zu held",
           gt_kind_group[kind], tensor->name, (long long)npoints, count);
  const hsize_t n = (hsize_t)count;
  GT_H5_ID(ids[GT_P_MSPACE], H5Screate_simple(1, &n, NULL));
  GT_CALL_HDF5(H5Dwrite(dset, H5T_NATIVE_FLOAT, ids[GT_P_MSPACE], ids[GT_P_SPACE], H5P_DEFAULT,
                        pack.dst ? pack.dst : w->staging));
  return GT_SUCCESS;
}

static void gt_ckpt_write_part(gt_ckpt_writer *w, hid_t dset, const gt_ckpt_tensor *tensor,
                               int kind)
{
  if (w->local != GT_SUCCESS)
    return;
  hid_t ids[GT_P_N] = {H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_ckpt_write_part_in(w, dset, tensor, kind, ids);
  status = gt_h5_close_all(status, GT_P_N, ids);
  if (status != GT_SUCCESS)
    gt_ckpt_note_local(w, status);
}

enum { GT_C_SPACE, GT_C_DCPL, GT_C_N };

/* Create dataset `group/name` of one logical tensor: contiguous, its space
 * allocated now (parallel HDF5 does so anyway), never filled (every entry
 * is written). Collective. */
static int gt_ckpt_create_in(hid_t file, const gt_ckpt_tensor *tensor, int kind, hid_t *dset,
                             hid_t ids[])
{
  char path[GT_PARAM_NAME_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", gt_kind_group[kind], tensor->name);
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < tensor->ndim; d++)
    dims[d] = (hsize_t)tensor->dims[d];
  GT_H5_ID(ids[GT_C_SPACE], H5Screate_simple(tensor->ndim, dims, NULL));
  GT_H5_ID(ids[GT_C_DCPL], H5Pcreate(H5P_DATASET_CREATE));
  GT_CALL_HDF5(H5Pset_layout(ids[GT_C_DCPL], H5D_CONTIGUOUS));
  GT_CALL_HDF5(H5Pset_fill_time(ids[GT_C_DCPL], H5D_FILL_TIME_NEVER));
  GT_CALL_HDF5(H5Pset_alloc_time(ids[GT_C_DCPL], H5D_ALLOC_TIME_EARLY));
  GT_H5_ID(*dset, H5Dcreate2(file, path, H5T_IEEE_F32LE, ids[GT_C_SPACE], H5P_DEFAULT,
                             ids[GT_C_DCPL], H5P_DEFAULT));
  return GT_SUCCESS;
}

static int gt_ckpt_create(hid_t file, const gt_ckpt_tensor *tensor, int kind, hid_t *dset)
{
  hid_t ids[GT_C_N] = {H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_ckpt_create_in(file, tensor, kind, dset, ids);
  GT_CALL(gt_h5_close_all(status, GT_C_N, ids));
  return GT_SUCCESS;
}

/* GT_FAULT=ckpt_kill[:step=S] (fault.h): rank 0 dies halfway through the
 * write, as a node failure would. */
static void gt_ckpt_maybe_kill(const gt_ckpt_writer *w, int done, int total)
{
  if (done == total / 2 && gt_fault_hit("ckpt_kill", w->rank, w->step)) {
    fprintf(stderr, "gridtrain: GT_FAULT=ckpt_kill: killing rank %d in the checkpoint write of "
            "step %ld\n", w->rank, w->step);
    fflush(stderr);
    raise(SIGKILL);
  }
}

enum { GT_WF_FILE, GT_WF_GROUP, GT_WF_N };

static int gt_ckpt_write_in(const char *path, const gt_ckpt_meta *meta, gt_ckpt_writer *w,
                            MPI_Comm comm, hid_t ids[])
{
  GT_CALL(gt_h5_create_mpio(path, comm, &ids[GT_WF_FILE]));
  const hid_t file = ids[GT_WF_FILE];
  GT_CALL(gt_ckpt_write_meta(file, meta));
  const char *groups[] = {"/model", "/optim", "/optim/m", "/optim/v"};
  for (int g = 0; g < 4; g++) {
    GT_H5_ID(ids[GT_WF_GROUP], H5Gcreate2(file, groups[g], H5P_DEFAULT, H5P_DEFAULT,
                                          H5P_DEFAULT));
    GT_CALL(gt_h5_close(&ids[GT_WF_GROUP]));
  }
  const gt_ckpt_state *st = w->st;
  for (int i = 0; i < st->ntensors; i++)
    for (int k = 0; k < GT_NKINDS; k++)
      GT_CALL(gt_ckpt_create(file, &st->tensors[i], k, &w->dsets[i * GT_NKINDS + k]));
  /* the data: independent writes, no collective call per tensor */
  for (int i = 0; i < st->ntensors; i++) {
    gt_ckpt_maybe_kill(w, i, st->ntensors);
    for (int k = 0; k < GT_NKINDS; k++)
      gt_ckpt_write_part(w, w->dsets[i * GT_NKINDS + k], &st->tensors[i], k);
  }
  /* Every entry was written by one rank: the sums of the terms are the
   * checksums. */
  GT_CALL_MPI(MPI_Allreduce(MPI_IN_PLACE, w->sums, (int)(2 * w->nsums), MPI_UINT64_T, MPI_SUM,
                            comm));
  for (size_t b = 0; b < w->nsums; b++) {
    uint64_t sum[2] = {w->sums[2 * b] % GT_FLETCHER_MOD, w->sums[2 * b + 1] % GT_FLETCHER_MOD};
    w->values[b] = gt_fletcher_value(sum);
  }
  for (int i = 0; i < st->ntensors; i++)
    for (int k = 0; k < GT_NKINDS; k++) {
      const size_t d = (size_t)(i * GT_NKINDS + k);
      const size_t n = gt_ckpt_nsums(gt_ckpt_tensor_numel(&st->tensors[i]));
      GT_CALL(gt_h5_write_attr_u32s(w->dsets[d], "fletcher32", (int)n,
                                    w->values + w->sum_base[d]));
    }
  GT_CALL_HDF5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  return GT_SUCCESS;
}

/* The writer's buffers (every rank: the checksum all-reduce has the same
 * size everywhere). */
static int gt_ckpt_writer_alloc(gt_ckpt_writer *w)
{
  const gt_ckpt_state *st = w->st;
  const size_t nd = (size_t)st->ntensors * GT_NKINDS;
  const size_t n = gt_ckpt_largest_local(st);
  w->sum_base = malloc((nd + 1) * sizeof(size_t));
  w->dsets = malloc((nd + 1) * sizeof(hid_t));
  GT_CHECK(w->sum_base && w->dsets, GT_ERR_SYSTEM, "out of memory for the dataset list");
  for (size_t d = 0; d < nd; d++) {
    w->dsets[d] = H5I_INVALID_HID;
    w->sum_base[d] = w->nsums;
    w->nsums += gt_ckpt_nsums(gt_ckpt_tensor_numel(&st->tensors[d / GT_NKINDS]));
  }
  GT_CHECK(2 * w->nsums <= (size_t)INT_MAX, GT_ERR_INPUT,
           "a checkpoint of %zu checksum blocks is too large", w->nsums);
  w->sums = calloc(2 * w->nsums + 1, sizeof(uint64_t));
  w->values = malloc((w->nsums + 1) * sizeof(uint32_t));
  w->staging = malloc(n * sizeof(float));
  w->packed = malloc(n * sizeof(float));
  GT_CHECK(w->sums && w->values && w->staging && w->packed, GT_ERR_SYSTEM,
           "out of memory allocating %zu bytes of staging buffers",
           2 * n * sizeof(float) + w->nsums * (2 * sizeof(uint64_t) + sizeof(uint32_t)));
  return GT_SUCCESS;
}

static void gt_ckpt_writer_free(gt_ckpt_writer *w)
{
  free(w->sum_base);
  free(w->dsets);
  free(w->sums);
  free(w->values);
  free(w->staging);
  free(w->packed);
}

/* gt_ckpt_write, naming the checkpoint `shown` in its error message. */
static int gt_ckpt_write_file(const char *path, const char *shown, const gt_ckpt_meta *meta,
                              const gt_ckpt_state *st, MPI_Comm comm)
{
  gt_ckpt_writer w = {.st = st, .step = meta->step, .local = GT_SUCCESS};
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  int status = gt_error_agree(gt_ckpt_writer_alloc(&w), comm);
  hid_t ids[GT_WF_N] = {H5I_INVALID_HID, H5I_INVALID_HID};
  if (status == GT_SUCCESS)
    status = gt_comm_foreign_begin(comm);
  if (status == GT_SUCCESS) {
    /* Every rank makes every collective call of the write, whatever failed
     * here (write scope, `local`), and closes the file; only then is the
     * outcome known. The first I/O error is the cause of whatever followed,
     * then a local failure, then HDF5's own error. */
    gt_comm_io_begin(gt_fault_hit("ckpt_write_fail", w.rank, w.step));
    status = gt_ckpt_write_in(path, meta, &w, comm, ids);
    status = gt_h5_close_all(status, st->ntensors * GT_NKINDS, w.dsets);
    status = gt_h5_close_all(status, GT_WF_N, ids);
    const int io = gt_comm_io_end();
    gt_comm_foreign_end();
    if (io != GT_SUCCESS) {
      status = io;
    } else if (w.local != GT_SUCCESS) {
      status = gt_error_set(w.local, __FILE__, __LINE__, __func__, "%s", w.local_message);
    }
  }
  gt_ckpt_writer_free(&w);
  if (status != GT_SUCCESS)
    return gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                         shown);
  return GT_SUCCESS;
}

int gt_ckpt_write(const char *path, const gt_ckpt_meta *meta, const gt_ckpt_state *st,
                  MPI_Comm comm)
{
  GT_CALL(gt_ckpt_write_file(path, path, meta, st, comm));
  return GT_SUCCESS;
}

// ---- reading ---------------------------------------------------------------------------------

static int gt_ckpt_read_meta_in(hid_t file, const char *path, gt_ckpt_meta *m)
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
  return GT_SUCCESS;
}

/* A file that cannot be opened: say why in words a user can act on. */
static int gt_ckpt_open_error(const char *path)
{
  struct stat sb;
  if (stat(path, &sb) != 0)
    return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                        "cannot open checkpoint %s: %s", path, strerror(errno));
  return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                       "checkpoint %s is not a readable HDF5 file (truncated or damaged)", path);
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

static int gt_grow(void **buf, size_t *cap, size_t n, size_t size)
{
  if (n <= *cap)
    return GT_SUCCESS;
  void *bigger = realloc(*buf, n * size);
  GT_CHECK_ALLOC(bigger, n * size);
  *buf = bigger;
  *cap = n;
  return GT_SUCCESS;
}

enum { GT_R_DSET, GT_R_SPACE, GT_R_MSPACE, GT_R_N };

/* Format 3: read the checksum blocks of dataset `name` that hold this
 * rank's entries [a, b) of t, check them, and put the entries into
 * staging (from local index a). */
static int gt_ckpt_read_blocks(gt_ckpt_reader *r, const char *name, const gt_param *t,
                               size_t a, size_t b, size_t count, hid_t ids[])
{
  size_t total = gt_param_full_numel(t);
  gt_span span = {(size_t)-1, 0};
  GT_CALL(gt_ckpt_runs(t, a, b, gt_span_run, &span));
  const size_t blk0 = span.lo / GT_CKPT_SUM_FLOATS;
  const size_t blk1 = (span.hi + GT_CKPT_SUM_FLOATS - 1) / GT_CKPT_SUM_FLOATS;
  const size_t f0 = blk0 * GT_CKPT_SUM_FLOATS;
  const size_t f1 = gt_min_size(total, blk1 * GT_CKPT_SUM_FLOATS);
  GT_CALL(gt_grow((void **)&r->rbuf, &r->rcap, f1 - f0, sizeof(float)));
  const size_t nsums = gt_ckpt_nsums(total);
  GT_CALL(gt_grow((void **)&r->stored, &r->scap, nsums, sizeof(uint32_t)));
  bool found;
  GT_CALL(gt_h5_read_attr_u32s(ids[GT_R_DSET], "fletcher32", name, (int)nsums, &found,
                               r->stored));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s: %s has no fletcher32 checksums", r->path, name);
  gt_sel s = {.space = ids[GT_R_SPACE], .nd = t->ndim, .m = t->ndim, .first = true};
  for (int d = 0; d < t->ndim; d++)
    s.dims[d] = (hsize_t)t->full_shape[d];
  GT_CALL(gt_sel_flat(&s, 0, (hsize_t)f0, (hsize_t)f1));
  const hsize_t n = (hsize_t)(f1 - f0);
  GT_H5_ID(ids[GT_R_MSPACE], H5Screate_simple(1, &n, NULL));
  if (H5Dread(ids[GT_R_DSET], H5T_NATIVE_FLOAT, ids[GT_R_MSPACE], ids[GT_R_SPACE], H5P_DEFAULT,
              r->rbuf) < 0) {
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "checkpoint %s: %s cannot be read", r->path, name);
  }
  GT_CALL(gt_ckpt_check_sums(r->path, name, r->rbuf, total, blk0, blk1 - blk0, r->stored));
  if (count != b - a) /* padding stays zero */
    memset(r->staging, 0, (b - a) * sizeof(float));
  gt_unpack u = {r->staging, r->rbuf, a, f0};
  GT_CALL(gt_ckpt_runs(t, a, b, gt_unpack_run, &u));
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

/* Load this rank's entries of t (kind) from the open dataset. */
static int gt_ckpt_read_part(gt_ckpt_reader *r, const char *name, const gt_param *t, int kind,
                             hid_t ids[])
{
  const gt_ckpt_state *st = r->st;
  size_t lo, hi, a, b, count = 0;
  gt_ckpt_range(st, kind, &lo, &hi);
  gt_ckpt_clip(t, lo, hi, &a, &b);
  if (a >= b)
    return GT_SUCCESS;
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count));
  const float *src;
  if (count == 0) { /* padding only */
    memset(r->staging, 0, (b - a) * sizeof(float));
    src = r->staging;
  } else if (r->format >= 3) {
    GT_CALL(gt_ckpt_read_blocks(r, name, t, a, b, count, ids));
    src = r->staging;
  } else {
    GT_CALL(gt_ckpt_read_filtered(r, name, t, ids));
    src = r->staging + a;
  }
  gt_backend *be = st->params->be;
  GT_CALL(be->ops->upload(be, gt_ckpt_part_data(st, kind, t->offset + a), src,
                          (b - a) * sizeof(float), NULL));
  GT_CALL(gt_ckpt_copy_done(be));
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
  GT_CHECK(exists > 0, GT_ERR_INPUT,
           "checkpoint %s has no dataset %s: it was written for another model", path, name);
  GT_H5_ID(ids[GT_R_DSET], H5Dopen2(file, name, H5P_DEFAULT));
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
  if (!t || *local != GT_SUCCESS)
    return GT_SUCCESS;
  *local = gt_ckpt_read_part(r, name, t, kind, ids);
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
static int gt_ckpt_read_format(hid_t file, const char *path, int *format)
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
  int local = GT_SUCCESS;
  for (int i = 0; i < st->ntensors && status == GT_SUCCESS; i++)
    for (int k = 0; k < GT_NKINDS && status == GT_SUCCESS; k++)
      status = gt_ckpt_read_tensor(file, &r, &st->tensors[i], k, &local);
  if (status == GT_SUCCESS)
    status = local; /* its error is still the current one */
  status = gt_h5_close_all(status, 1, &file);
  gt_comm_foreign_end();
  free(r.staging);
  free(r.rbuf);
  free(r.stored);
  GT_CALL(status);
  return GT_SUCCESS;
}


// ---- verification and export (serial) ------------------------------------------------------

typedef struct {
  const char *path;
  const char *group;
  long datasets;
  double bytes;
  float *buf;
  size_t cap;
  hid_t out; /* export target, or H5I_INVALID_HID */
  int status;
  int format;
  uint32_t *stored; /* format 3: checksums of the dataset */
  size_t scap;
} gt_visit;

enum { GT_V_DSET, GT_V_SPACE, GT_V_DCPL, GT_V_OSPACE, GT_V_ODSET, GT_V_N };

static int gt_ckpt_visit_dataset_in(hid_t group, const char *name, gt_visit *v, hid_t ids[])
{
  GT_H5_ID(ids[GT_V_DSET], H5Dopen2(group, name, H5P_DEFAULT));
  GT_H5_ID(ids[GT_V_SPACE], H5Dget_space(ids[GT_V_DSET]));
  hssize_t npoints;
  GT_CALL_HDF5(npoints = H5Sget_simple_extent_npoints(ids[GT_V_SPACE]));
  char full[GT_PARAM_NAME_MAX + 16];
  snprintf(full, sizeof full, "%s/%s", v->group, name);
  if (v->format < 3) {
    GT_H5_ID(ids[GT_V_DCPL], H5Dget_create_plist(ids[GT_V_DSET]));
    unsigned flags, config;
    size_t nelem = 0;
    GT_CHECK(H5Pget_filter_by_id2(ids[GT_V_DCPL], H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL,
                                  0, NULL, &config) >= 0,
             GT_ERR_HDF5, "checkpoint %s: %s has no Fletcher32 checksum", v->path, full);
    H5Eclear2(H5E_DEFAULT);
  }
  GT_CALL(gt_grow((void **)&v->buf, &v->cap, (size_t)npoints, sizeof(float)));
  if (H5Dread(ids[GT_V_DSET], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->buf) < 0) {
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "checkpoint %s: %s is damaged", v->path, full);
  }
  if (v->format >= 3) {
    const size_t nsums = gt_ckpt_nsums((size_t)npoints);
    bool found;
    GT_CALL(gt_grow((void **)&v->stored, &v->scap, nsums, sizeof(uint32_t)));
    GT_CALL(gt_h5_read_attr_u32s(ids[GT_V_DSET], "fletcher32", full, (int)nsums, &found,
                                 v->stored));
    GT_CHECK(found, GT_ERR_HDF5, "checkpoint %s: %s has no fletcher32 checksums", v->path,
             full);
    GT_CALL(gt_ckpt_check_sums(v->path, full, v->buf, (size_t)npoints, 0, nsums, v->stored));
  }
  v->datasets++;
  v->bytes += (double)npoints * sizeof(float);
  if (v->out >= 0) {
    GT_H5_ID(ids[GT_V_ODSET], H5Dcreate2(v->out, name, H5T_IEEE_F32LE, ids[GT_V_SPACE],
                                         H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    GT_CALL_HDF5(H5Dwrite(ids[GT_V_ODSET], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                          v->buf));
  }
  return GT_SUCCESS;
}

static herr_t gt_ckpt_visit_link(hid_t group, const char *name, const H5L_info_t *info,
                                 void *data)
{
  (void)info;
  gt_visit *v = data;
  hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) {
    v->status = gt_error_hdf5("H5Oopen", __FILE__, __LINE__, __func__);
    return -1;
  }
  const H5I_type_t type = H5Iget_type(obj);
  H5Oclose(obj);
  if (type != H5I_DATASET)
    return 0;
  hid_t ids[GT_V_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID,
                       H5I_INVALID_HID};
  int status = gt_ckpt_visit_dataset_in(group, name, v, ids);
  v->status = gt_h5_close_all(status, GT_V_N, ids);
  return v->status == GT_SUCCESS ? 0 : -1;
}

/* Read every dataset of the given groups; export copies /model's into out. */
static int gt_ckpt_visit_in(hid_t file, gt_visit *v, int ngroups, hid_t *group)
{
  for (int k = 0; k < ngroups; k++) {
    v->group = gt_kind_group[k];
    GT_H5_ID(*group, H5Gopen2(file, gt_kind_group[k], H5P_DEFAULT));
    hsize_t idx = 0;
    herr_t r = H5Literate(*group, H5_INDEX_NAME, H5_ITER_INC, &idx, gt_ckpt_visit_link, v);
    if (v->status != GT_SUCCESS)
      return v->status;
    GT_CALL_HDF5(r);
    GT_CALL(gt_h5_close(group));
  }
  return GT_SUCCESS;
}

static int gt_ckpt_visit(const char *path, gt_visit *v, int ngroups)
{
  hid_t file = H5I_INVALID_HID, group = H5I_INVALID_HID;
  if (gt_h5_open_mpio(path, H5F_ACC_RDONLY, MPI_COMM_SELF, &file) != GT_SUCCESS)
    return gt_ckpt_open_error(path);
  gt_ckpt_meta meta = {0};
  int status = gt_ckpt_read_meta_in(file, path, &meta);
  v->format = meta.format;
  gt_ckpt_meta_free(&meta);
  if (status == GT_SUCCESS)
    status = gt_ckpt_read_format(file, path, &v->format);
  if (status == GT_SUCCESS)
    status = gt_ckpt_visit_in(file, v, ngroups, &group);
  hid_t ids[2] = {file, group};
  status = gt_h5_close_all(status, 2, ids);
  free(v->buf);
  v->buf = NULL;
  free(v->stored);
  v->stored = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_ckpt_verify_file(const char *path, long *datasets, double *bytes)
{
  gt_visit v = {.path = path, .out = H5I_INVALID_HID};
  int status = gt_ckpt_visit(path, &v, GT_NKINDS);
  *datasets = v.datasets;
  *bytes = v.bytes;
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_ckpt_export_in(const char *path, const char *out, hid_t *file)
{
  GT_H5_ID(*file, H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  gt_ckpt_meta meta;
  GT_CALL(gt_ckpt_read_meta(path, MPI_COMM_SELF, &meta));
  const long long model[5] = {meta.layers, meta.heads, meta.dim, meta.seq_len, meta.vocab};
  const char *names[5] = {"layers", "heads", "dim", "seq_len", "vocab"};
  int status = GT_SUCCESS;
  for (int i = 0; i < 5 && status == GT_SUCCESS; i++)
    status = gt_h5_write_attr_i64(*file, names[i], model[i]);
  if (status == GT_SUCCESS)
    status = gt_h5_write_attr_i64(*file, "step", meta.step);
  if (status == GT_SUCCESS)
    status = gt_h5_write_attr_str(*file, "format", "gridtrain weights");
  if (status == GT_SUCCESS)
    status = gt_h5_write_attr_str(*file, "code_version", meta.code_version);
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  gt_visit v = {.path = path, .out = *file};
  GT_CALL(gt_ckpt_visit(path, &v, 1));
  return GT_SUCCESS;
}

int gt_ckpt_export_weights(const char *path, const char *out)
{
  hid_t file = H5I_INVALID_HID;
  int status = gt_ckpt_export_in(path, out, &file);
  GT_CALL(gt_h5_close_all(status, 1, &file));
  return GT_SUCCESS;
}

// ---- the directory ----------------------------------------------------------------------------

int gt_ckpt_path(const char *dir, long step, char *path, size_t size)
{
  int n = snprintf(path, size, "%s/step_%08ld.h5", dir, step);
  GT_CHECK(n > 0 && (size_t)n + 4 < size, GT_ERR_INPUT,
           "[checkpoint] dir '%s' is too long", dir);
  return GT_SUCCESS;
}

/* mkdir -p */
static int gt_mkdirs(const char *dir)
{
  char buf[GT_PATH_MAX];
  GT_CHECK(strlen(dir) < sizeof buf, GT_ERR_INPUT, "[checkpoint] dir '%s' is too long", dir);
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    const char saved = *p;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                          "cannot create checkpoint directory %s ([checkpoint] dir): %s", buf,
                          strerror(errno));
    *p = saved;
    if (saved == '\0')
      break;
  }
  struct stat sb;
  GT_CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), GT_ERR_INPUT,
           "[checkpoint] dir %s is not a directory", dir);
  GT_CHECK(access(dir, W_OK) == 0, GT_ERR_INPUT,
           "cannot write to checkpoint directory %s ([checkpoint] dir): %s", dir,
           strerror(errno));
  return GT_SUCCESS;
}

int gt_ckpt_dir_prepare(const char *dir, MPI_Comm comm)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  int status = rank == 0 ? gt_mkdirs(dir) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, comm));
  return GT_SUCCESS;
}

/* fsync a file or directory by name. */
static int gt_fsync_path(const char *path, bool directory)
{
  int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  GT_CHECK(fd >= 0, GT_ERR_SYSTEM, "cannot open %s to sync it: %s", path, strerror(errno));
  int r = fsync(fd);
  int err = errno;
  close(fd);
  GT_CHECK(r == 0, GT_ERR_SYSTEM, "fsync of %s failed: %s", path, strerror(err));
  return GT_SUCCESS;
}

/* Step number of a "step_NNNNNNNN.h5" name (suffix: ".h5" or ".h5.tmp"), or
 * -1. */
static long gt_ckpt_step_of(const char *name, const char *suffix)
{
  if (strncmp(name, "step_", 5) != 0)
    return -1;
  char *end;
  errno = 0;
  long step = strtol(name + 5, &end, 10);
  if (errno || end == name + 5 || step < 0 || strcmp(end, suffix) != 0)
    return -1;
  return step;
}

static int gt_cmp_long_desc(const void *a, const void *b)
{
  long x = *(const long *)a, y = *(const long *)b;
  return (x < y) - (x > y);
}

/* The step numbers of dir's complete checkpoints, newest first. */
static int gt_ckpt_list_steps(const char *dir, long **steps, int *n)
{
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return GT_SUCCESS;
  int cap = 0, status = GT_SUCCESS;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long s = gt_ckpt_step_of(e->d_name, ".h5");
    if (s < 0)
      continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      long *bigger = realloc(*steps, sizeof(long) * (size_t)cap);
      if (!bigger) {
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory listing %s", dir);
        break;
      }
      *steps = bigger;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  GT_CALL(status);
  if (*n > 1)
    qsort(*steps, (size_t)*n, sizeof(long), gt_cmp_long_desc);
  return GT_SUCCESS;
}

/* Remove step files beyond the newest `keep` up to `newest` (the one just
 * written) and leftover .tmp files of writes that never finished. Files of
 * later steps (left by a run that was rolled back to an older checkpoint)
 * are not counted and not touched; they are replaced as the run reaches
 * their steps. */
static int gt_ckpt_prune(const char *dir, int keep, long newest)
{
  long *steps;
  int n;
  GT_CALL(gt_ckpt_list_steps(dir, &steps, &n));
  char path[GT_PATH_MAX];
  int status = GT_SUCCESS, kept = 0;
  for (int i = 0; i < n && status == GT_SUCCESS; i++) {
    if (steps[i] > newest || keep <= 0 || ++kept <= keep)
      continue;
    status = gt_ckpt_path(dir, steps[i], path, sizeof path);
    if (status == GT_SUCCESS && unlink(path) != 0 && errno != ENOENT)
      status = GT_ERROR(GT_ERR_SYSTEM, "cannot remove old checkpoint %s: %s", path,
                        strerror(errno));
  }
  free(steps);
  GT_CALL(status);
  DIR *d = opendir(dir);
  GT_CHECK(d != NULL, GT_ERR_SYSTEM, "cannot list %s: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long s = gt_ckpt_step_of(e->d_name, ".h5.tmp");
    if (s >= 0 && s < newest) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path); /* best effort: a leftover costs only space */
    }
  }
  closedir(d);
  return GT_SUCCESS;
}

/* Write `text` to the new file `path` and fsync it; on failure remove it. */
static int gt_write_synced(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  GT_CHECK(f != NULL, GT_ERR_SYSTEM, "cannot create %s: %s", path, strerror(errno));
  int ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  if (!ok)
    unlink(path);
  GT_CHECK(ok, GT_ERR_SYSTEM, "cannot write %s: %s", path, strerror(err));
  return GT_SUCCESS;
}

/* How far gt_ckpt_publish_in got: what a failure has to undo. */
enum { GT_PUB_NONE, GT_PUB_RENAMED, GT_PUB_LATEST };

static int gt_ckpt_publish_in(const char *dir, const char *tmp, const char *path,
                              const char *latest, const char *latest_tmp, int *stage)
{
  GT_CALL(gt_fsync_path(tmp, false));
  /* latest.tmp first: on a full disk this is what fails, while nothing has a
   * new name yet. */
  char line[GT_PATH_MAX];
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  snprintf(line, sizeof line, "%s\n", base);
  GT_CALL(gt_write_synced(latest_tmp, line));
  GT_CHECK(rename(tmp, path) == 0, GT_ERR_SYSTEM, "cannot rename %s to %s: %s", tmp, path,
           strerror(errno));
  *stage = GT_PUB_RENAMED;
  GT_CALL(gt_fsync_path(dir, true));
  GT_CHECK(rename(latest_tmp, latest) == 0, GT_ERR_SYSTEM, "cannot rename %s to %s: %s",
           latest_tmp, latest, strerror(errno));
  *stage = GT_PUB_LATEST;
  GT_CALL(gt_fsync_path(dir, true));
  return GT_SUCCESS;
}

/* Rank 0, after every rank has closed the .tmp file: make it durable, give
 * it its name, point `latest` at it, then prune. A failure on the way
 * undoes what was done (best effort; the first error is the one reported),
 * so that the directory is as before the write: the earlier step files and
 * `latest` as they were, neither the new file nor a .tmp left. */
static int gt_ckpt_publish(const char *dir, const char *tmp, const char *path, int keep,
                           long step)
{
  char latest[GT_PATH_MAX + 16], latest_tmp[GT_PATH_MAX + 16], before[GT_PATH_MAX] = "";
  snprintf(latest, sizeof latest, "%s/latest", dir);
  snprintf(latest_tmp, sizeof latest_tmp, "%s/latest.tmp", dir);
  FILE *f = fopen(latest, "r");
  const bool had_latest = f != NULL;
  if (f) {
    if (!fgets(before, sizeof before, f))
      before[0] = '\0';
    fclose(f);
  }
  int stage = GT_PUB_NONE;
  int status = gt_ckpt_publish_in(dir, tmp, path, latest, latest_tmp, &stage);
  if (status != GT_SUCCESS) {
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", gt_error_message());
    if (stage == GT_PUB_LATEST) {
      /* `latest` names the new file, whose name may not be durable: put the
       * old text back (the new one's space is free again) or remove it. */
      if (!had_latest)
        unlink(latest);
      else if (gt_write_synced(latest_tmp, before) != GT_SUCCESS ||
               rename(latest_tmp, latest) != 0)
        unlink(latest_tmp);
    }
    if (stage >= GT_PUB_RENAMED)
      unlink(path);
    unlink(tmp);
    unlink(latest_tmp);
    if (stage >= GT_PUB_RENAMED)
      gt_fsync_path(dir, true);
    status = gt_error_set(status, __FILE__, __LINE__, __func__, "%s", cause);
    return gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                         path);
  }
  /* The checkpoint is complete and named: old files that cannot be removed
   * cost space, not data. */
  if (gt_ckpt_prune(dir, keep, step) != GT_SUCCESS) {
    gt_warn("checkpoint %s is written, but pruning %s failed: %s", path, dir,
            gt_error_message());
    gt_error_clear();
  }
  return GT_SUCCESS;
}

int gt_ckpt_save(const char *dir, int keep, const gt_ckpt_meta *meta, const gt_ckpt_state *st,
                 MPI_Comm writers, MPI_Comm comm, char *path, size_t size)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL(gt_ckpt_path(dir, meta->step, path, size));
  GT_CALL(gt_ckpt_dir_prepare(dir, comm));
  char tmp[GT_PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int status = writers != MPI_COMM_NULL ? gt_ckpt_write_file(tmp, path, meta, st, writers)
                                        : GT_SUCCESS;
  /* Every writer has closed the file: agree, then publish or clean up. */
  status = gt_error_agree(status, comm);
  if (status != GT_SUCCESS) {
    if (rank == 0)
      unlink(tmp); /* never leave a half-written file under a checkpoint's name */
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  status = rank == 0 ? gt_ckpt_publish(dir, tmp, path, keep, meta->step) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, comm));
  return GT_SUCCESS;
}

int gt_ckpt_candidates(const char *dir, char (**list)[GT_PATH_MAX], int *n,
                       char *latest_problem, size_t problem_size)
{
  *list = NULL;
  *n = 0;
  latest_problem[0] = '\0';
  long *steps;
  int nsteps;
  GT_CALL(gt_ckpt_list_steps(dir, &steps, &nsteps));
  char (*out)[GT_PATH_MAX] = calloc((size_t)nsteps + 1, sizeof *out);
  if (!out) {
    free(steps);
    GT_CHECK_ALLOC(out, sizeof *out);
  }
  int count = 0;
  /* `latest` first */
  char latest[GT_PATH_MAX + 16], name[GT_PATH_MAX] = "";
  snprintf(latest, sizeof latest, "%s/latest", dir);
  FILE *f = fopen(latest, "r");
  long latest_step = -1;
  if (f) {
    if (fgets(name, sizeof name, f))
      name[strcspn(name, "\r\n")] = '\0';
    fclose(f);
    latest_step = gt_ckpt_step_of(name, ".h5");
    struct stat sb;
    char full[GT_PATH_MAX];
    if (latest_step >= 0 && gt_ckpt_path(dir, latest_step, full, sizeof full) == GT_SUCCESS &&
        stat(full, &sb) == 0) {
      snprintf(out[count++], GT_PATH_MAX, "%s", full);
    } else {
      snprintf(latest_problem, problem_size, "%s names '%s', which is not a checkpoint here",
               latest, name);
      latest_step = -1;
      gt_error_clear();
    }
  }
  for (int i = 0; i < nsteps; i++)
    if (steps[i] != latest_step && gt_ckpt_path(dir, steps[i], out[count], GT_PATH_MAX) ==
                                       GT_SUCCESS)
      count++;
  free(steps);
  *list = out;
  *n = count;
  return GT_SUCCESS;
}
