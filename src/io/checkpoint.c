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
 * the map from local to logical coordinates is increasing along every axis -
 * for the rank holding piece `index` of t's shards (its group members hold
 * the same local shape, each its own piece). */
static int gt_ckpt_runs_at(const gt_param *t, int index, size_t a, size_t b, gt_run_fn fn,
                           void *ctx)
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
  const size_t k0 = (size_t)index * piece;
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

static int gt_ckpt_runs(const gt_param *t, size_t a, size_t b, gt_run_fn fn, void *ctx)
{
  return gt_ckpt_runs_at(t, t->shard.index, a, b, fn, ctx);
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

/* The exchange inside the group (gt_ckpt_state.group) of a write or read:
 * which tensors take part, and the shard index of each member. */
typedef struct {
  int gsize, grank; /* the group (1, 0: none) */
  int *index;       /* ntensors x gsize: shard index of each member */
  bool *swap, any;  /* swap[i]: tensor i is exchanged; any: some tensor is */
} gt_swap_plan;

static void gt_swap_plan_free(gt_swap_plan *p)
{
  free(p->index);
  free(p->swap);
  p->index = NULL;
  p->swap = NULL;
}

/* One rank's state through a write. A failure that only this rank meets (a
 * download, a broken invariant, an open(2)) must not take it out of the
 * collective calls that the other ranks go on making (H5Dcreate2, the
 * exchange inside the group, MPI_Allreduce, H5Acreate2, H5Fclose): the
 * first one is kept in `local`, message and all, and the rank writes
 * nothing more. Failed writes are noted in the write scope (comm.h), from
 * MPI-IO and from the data's own pwrite alike. Errors of the collective
 * HDF5 calls are the same on every rank and end the write everywhere
 * alike. */
typedef struct {
  const gt_ckpt_state *st;
  const char *path;        /* the file, for the data's own descriptors */
  float *staging;          /* the local entries, as downloaded (at `pad`) */
  float *send, *recv, *rows; /* the exchange: packed for the group, from it,
                              and this rank's contiguous range */
  size_t cap;              /* floats each of them holds */
  hid_t *dsets;            /* ntensors x GT_NKINDS datasets */
  uint64_t *sums;          /* Fletcher-32 terms, 2 per block of every dataset */
  size_t *sum_base;        /* first block of each dataset in sums */
  size_t nsums;
  uint32_t *values;        /* nsums checksums */
  int fd, fd_direct;       /* the file through the page cache / O_DIRECT; -1 */
  gt_swap_plan plan;       /* the exchange inside the group */
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

// ---- the tensor data: each rank's entries at the dataset's file offset -----------------
/*
 * Why the data does not go through H5Dwrite. A column-split tensor is, in
 * the file, one short run per row and q/k/v block of each rank's piece:
 * ~110k runs of 768 B-3 KB per rank for GPT-2 124M at tp=4, which several
 * ranks write into the same pages. Whether HDF5 or our own pwrite makes
 * those writes, they cost the same (benchmarks/README.md). And through the
 * page cache every byte lands in a page the kernel has just allocated; on a
 * VM that hands freed memory back to its host (page reporting, as on this
 * project's machines) that first touch alone ran dd at 340-520 MB/s, while
 * O_DIRECT wrote the same disk at 1.7-3.2 GB/s from 1, 2 or 4 ranks.
 *
 * So: (1) the ranks of the group (tensor parallel) swap entries, so that
 * each holds one contiguous range of the group's part of every sharded
 * tensor, cut at 4 KiB file boundaries (two-phase I/O, as ROMIO's
 * collective buffering does, but through our own point-to-point calls,
 * which yield on oversubscribed cores); (2) each rank pwrite(2)s its ranges
 * at the dataset's offset (H5Dget_offset: datasets are contiguous,
 * allocated at creation and never filled, so HDF5 writes none of their
 * bytes), the whole 4 KiB blocks of a range with O_DIRECT, the ends through
 * the page cache. The file is the same HDF5 file as before.
 */

#define GT_DIO_ALIGN ((size_t)4096)
#define GT_DIO_FLOATS (GT_DIO_ALIGN / sizeof(float))
#define GT_PWRITE_MAX ((size_t)64 << 20) /* bytes per pwrite(2) */
#define GT_CKPT_SWAP_TAG 0x6753
#define GT_CKPT_GROUP_MAX 32 /* larger groups write without the exchange */

static size_t gt_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Write len bytes from src at file offset off, in pieces of GT_PWRITE_MAX,
 * through descriptor fd. A failure is noted in the write scope, except an
 * EINVAL when `refusable` (an O_DIRECT write the file system turned down,
 * which the caller makes again through the page cache): 0 or the errno. */
static int gt_ckpt_pwrite_fd(int fd, const char *src, size_t len, size_t off,
                             const char *what, bool refusable)
{
  const bool injected = gt_comm_io_failing();
  while (len > 0) {
    const size_t n = len < GT_PWRITE_MAX ? len : GT_PWRITE_MAX;
    const ssize_t got = injected ? -1 : pwrite(fd, src, n, (off_t)off);
    const int err = injected ? EIO : got < 0 ? errno : got == 0 ? EIO : 0;
    if (err == EINTR)
      continue;
    if (err == EINVAL && refusable)
      return err;
    if (err) {
      char text[512];
      snprintf(text, sizeof text, "pwrite failed: %s (%s%s, %zu bytes at offset %zu)",
               got == 0 && !injected ? "wrote nothing" : strerror(err),
               injected ? "injected by GT_FAULT=ckpt_write_fail; " : "", what, n, off);
      gt_comm_io_note(text);
      return err;
    }
    src += got;
    off += (size_t)got;
    len -= (size_t)got;
  }
  return 0;
}

/* Write the entries [logical, logical + len) of a dataset that starts at
 * byte `base` of the file from src: the whole 4 KiB blocks with O_DIRECT
 * when there is a descriptor for it and src lies in memory as the entries
 * lie in the file (same offset in a block), the rest through the page
 * cache. An O_DIRECT write refused with EINVAL (direct_io = auto) goes
 * through the page cache, and so does the rest of the file. */
static void gt_ckpt_pwrite(gt_ckpt_writer *w, size_t base, size_t logical, size_t len,
                           const float *src, const char *what)
{
  const char *p = (const char *)src;
  size_t off = base + logical * sizeof(float), end = off + len * sizeof(float);
  size_t d0 = gt_align_up(off, GT_DIO_ALIGN), d1 = end / GT_DIO_ALIGN * GT_DIO_ALIGN;
  if (w->fd_direct < 0 || d0 >= d1 || ((uintptr_t)p - off) % GT_DIO_ALIGN != 0)
    d0 = d1 = end;
  if (gt_ckpt_pwrite_fd(w->fd, p, d0 - off, off, what, false) != 0)
    return;
  const bool refusable = w->st->direct == GT_CKPT_DIRECT_AUTO;
  if (d1 > d0 && gt_ckpt_pwrite_fd(w->fd_direct, p + (d0 - off), d1 - d0, d0, what,
                                   refusable) == EINVAL && refusable) {
    close(w->fd_direct);
    w->fd_direct = -1;
    d1 = d0;
  }
  gt_ckpt_pwrite_fd(w->fd, p + (d1 - off), end - d1, d1, what, false);
}

/* Open the file's own descriptors (after H5Fcreate made it). */
static int gt_ckpt_open_data(gt_ckpt_writer *w)
{
  w->fd = open(w->path, O_WRONLY | O_CLOEXEC);
  GT_CHECK(w->fd >= 0, GT_ERR_SYSTEM, "cannot open %s to write its tensor data: %s", w->path,
           strerror(errno));
  if (w->st->direct == GT_CKPT_DIRECT_OFF)
    return GT_SUCCESS;
  w->fd_direct = open(w->path, O_WRONLY | O_DIRECT | O_CLOEXEC);
  GT_CHECK(w->fd_direct >= 0 || w->st->direct != GT_CKPT_DIRECT_ON, GT_ERR_INPUT,
           "checkpoint.direct_io = on, but the file system of %s does not take O_DIRECT "
           "(%s); set it to auto or off",
           w->path, strerror(errno));
  return GT_SUCCESS;
}

static void gt_ckpt_close_data(gt_ckpt_writer *w)
{
  int *fds[2] = {&w->fd, &w->fd_direct};
  for (int i = 0; i < 2; i++)
    if (*fds[i] >= 0) {
      if (close(*fds[i]) != 0) {
        char text[512];
        snprintf(text, sizeof text, "close failed: %s (%s)", strerror(errno), w->path);
        gt_comm_io_note(text);
      }
      *fds[i] = -1;
    }
}

/* Which tensors the group exchanges: those that every member holds sharded
 * over the group (one piece each, shard indices 0..gsize-1), when all
 * members write (or read) the same ranges of the same flat layout.
 * Collective on the group. */
static int gt_ckpt_plan_swap(const gt_ckpt_state *st, bool writing, gt_swap_plan *w)
{
  if (!st->group || *st->group == MPI_COMM_NULL)
    return GT_SUCCESS;
  GT_CALL_MPI(MPI_Comm_size(*st->group, &w->gsize));
  GT_CALL_MPI(MPI_Comm_rank(*st->group, &w->grank));
  if (w->gsize == 1 || w->gsize > GT_CKPT_GROUP_MAX)
    return GT_SUCCESS;
  const int nt = st->ntensors, g = w->gsize, nsig = 6, per = nsig + 2 * nt;
  long long *mine = malloc((size_t)per * sizeof *mine);
  long long *all = malloc((size_t)per * (size_t)g * sizeof *all);
  w->index = malloc(((size_t)nt * (size_t)g + 1) * sizeof *w->index);
  w->swap = calloc((size_t)nt + 1, sizeof *w->swap);
  int status = mine && all && w->index && w->swap ? GT_SUCCESS
                                                  : gt_error_set(GT_ERR_SYSTEM, __FILE__,
                                                                 __LINE__, __func__,
                                                                 "out of memory planning "
                                                                 "the checkpoint exchange");
  if (status == GT_SUCCESS) {
    gt_params *p = st->params;
    size_t r[4];
    gt_ckpt_range(st, GT_KIND_MODEL, &r[0], &r[1]);
    gt_ckpt_range(st, GT_KIND_M, &r[2], &r[3]);
    mine[0] = p && (st->writer || !writing);
    mine[1] = p ? (long long)p->numel : -1;
    for (int k = 0; k < 4; k++)
      mine[2 + k] = p ? (long long)r[k] : -1;
    for (int i = 0; i < nt; i++) {
      const gt_param *t = p ? gt_params_find(p, st->tensors[i].name) : NULL;
      const bool sharded = t && t->counted && t->shard.axis >= 0 && t->shard.parts == g;
      mine[nsig + 2 * i] = sharded ? t->shard.index : -1;
      mine[nsig + 2 * i + 1] = t ? (long long)t->offset : -1;
    }
    /* in the write's foreign scope: a yielding wait where ranks share cores */
    if (MPI_Allgather(mine, per, MPI_LONG_LONG, all, per, MPI_LONG_LONG, *st->group) !=
        MPI_SUCCESS)
      status = gt_error_set(GT_ERR_MPI, __FILE__, __LINE__, __func__,
                            "MPI_Allgather of the checkpoint exchange plan failed");
  }
  if (status == GT_SUCCESS) {
    bool same = mine[0] == 1;
    for (int j = 0; j < g && same; j++)
      for (int k = 0; k < nsig; k++)
        same = same && all[(size_t)j * per + k] == mine[k];
    for (int i = 0; i < nt && same; i++) {
      unsigned seen = 0;
      bool ok = true;
      for (int j = 0; j < g && ok; j++) {
        const long long idx = all[(size_t)j * per + nsig + 2 * i];
        const long long off = all[(size_t)j * per + nsig + 2 * i + 1];
        ok = idx >= 0 && idx < g && !(seen & (1u << idx)) && off == mine[nsig + 2 * i + 1];
        if (ok)
          seen |= 1u << idx;
        w->index[(size_t)i * g + j] = (int)idx;
      }
      w->swap[i] = ok;
      w->any = w->any || ok;
    }
  }
  free(mine);
  free(all);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The cut points of the group's contiguous range [lo, hi) of a dataset
 * starting at byte base: cut[0..gsize], rank i's range [cut[i], cut[i+1]),
 * on 4 KiB boundaries of the file where the range allows. */
static void gt_ckpt_cuts(size_t base, size_t lo, size_t hi, int g, size_t *cut)
{
  cut[0] = lo;
  cut[g] = hi;
  for (int i = 1; i < g; i++) {
    size_t c = lo + (size_t)((hi - lo) * (unsigned __int128)i / (unsigned)g);
    if (base % sizeof(float) == 0) {
      const size_t at = gt_align_up(base + c * sizeof(float), GT_DIO_ALIGN);
      c = (at - base) / sizeof(float);
    }
    c = c < cut[i - 1] ? cut[i - 1] : c > hi ? hi : c;
    cut[i] = c;
  }
}

/* A pointer into buf (4 KiB aligned, cap + GT_DIO_FLOATS floats) at which
 * entry `logical` of a dataset at byte base lies as it will in the file. */
static float *gt_ckpt_place(float *buf, size_t base, size_t logical)
{
  if (base % sizeof(float) != 0)
    return buf;
  return buf + (base / sizeof(float) + logical) % GT_DIO_FLOATS;
}

/* Cutting runs at the cut points, in logical order. */
typedef struct {
  const size_t *cut;
  int g, me, dest;     /* dest: the range the next entries fall in */
  const float *src;    /* sender: entries of local index a at src[0] */
  size_t a;
  float *send, *rows;  /* sender: packed for the others / this rank's range */
  size_t *count;       /* entries per destination (sender) */
  const float *recv;   /* receiver: what one member sent */
  size_t pos;          /* receiver: entries taken from recv */
} gt_cutter;

static int gt_cut_send(void *ctx, size_t local, size_t logical, size_t len)
{
  gt_cutter *c = ctx;
  while (len > 0) {
    while (logical >= c->cut[c->dest + 1])
      c->dest++;
    const size_t n = gt_min_size(len, c->cut[c->dest + 1] - logical);
    const float *from = c->src + (local - c->a);
    if (c->dest == c->me) {
      if (c->rows)
        memcpy(c->rows + (logical - c->cut[c->me]), from, n * sizeof(float));
    } else {
      if (c->send)
        memcpy(c->send + c->pos, from, n * sizeof(float));
      c->pos += n;
      c->count[c->dest] += n;
    }
    local += n;
    logical += n;
    len -= n;
  }
  return GT_SUCCESS;
}

/* Receiver: a member's entries in this rank's range, counted (rows NULL)
 * or put in place. */
static int gt_cut_recv(void *ctx, size_t local, size_t logical, size_t len)
{
  (void)local;
  gt_cutter *c = ctx;
  const size_t lo = c->cut[c->me], hi = c->cut[c->me + 1];
  const size_t s = logical > lo ? logical : lo, e = logical + len < hi ? logical + len : hi;
  if (s >= e)
    return GT_SUCCESS;
  if (c->rows)
    memcpy(c->rows + (s - lo), c->recv + c->pos, (e - s) * sizeof(float));
  c->pos += e - s;
  return GT_SUCCESS;
}

/* Checksum terms and writes of t's runs in [a, b), each where it belongs. */
typedef struct {
  gt_ckpt_writer *w;
  const float *src; /* local index a at src[0] */
  size_t a, base;
  uint64_t *sums;
  size_t total;
  const char *what;
} gt_run_writer;

static int gt_write_run(void *ctx, size_t local, size_t logical, size_t len)
{
  gt_run_writer *r = ctx;
  const float *src = r->src + (local - r->a);
  gt_fletcher_add(r->sums, r->total, src, logical, len);
  gt_ckpt_pwrite(r->w, r->base, logical, len, src, r->what);
  return GT_SUCCESS;
}

/* The exchange of one sharded tensor's whole slabs (local [x0, x1)) inside
 * the group; this rank then writes its range. ok: this rank's staging holds
 * its entries (else it takes part with whatever is there, and writes
 * nothing). Collective on the group. */
static int gt_ckpt_swap(gt_ckpt_writer *w, const gt_param *t, const int *index, size_t a,
                        size_t x0, size_t x1, size_t base, gt_run_writer *rw, bool ok)
{
  const int g = w->plan.gsize, me = w->plan.grank;
  const MPI_Comm comm = *w->st->group;
  const int ax = t->shard.axis;
  size_t inner = 1;
  for (int d = ax + 1; d < t->ndim; d++)
    inner *= (size_t)t->full_shape[d];
  const size_t ls = (size_t)t->value.shape[ax] * inner, fs = (size_t)t->full_shape[ax] * inner;
  size_t cut[GT_CKPT_GROUP_MAX + 1], scount[GT_CKPT_GROUP_MAX] = {0};
  size_t rcount[GT_CKPT_GROUP_MAX] = {0};
  gt_ckpt_cuts(base, x0 / ls * fs, x1 / ls * fs, g, cut);
  const size_t mine = cut[me + 1] - cut[me];
  GT_CHECK(mine <= w->cap, GT_ERR_INTERNAL,
           "internal error: checkpoint exchange range of %zu entries past %zu", mine, w->cap);
  float *rows = gt_ckpt_place(w->rows, base, cut[me]);
  gt_cutter send = {.cut = cut, .g = g, .me = me, .src = rw->src, .a = a, .send = w->send,
                    .rows = rows, .count = scount};
  GT_CALL(gt_ckpt_runs_at(t, index[me], x0, x1, gt_cut_send, &send));
  size_t rtotal = 0;
  for (int j = 0; j < g; j++) {
    if (j == me)
      continue;
    gt_cutter c = {.cut = cut, .g = g, .me = me};
    GT_CALL(gt_ckpt_runs_at(t, index[j], x0, x1, gt_cut_recv, &c));
    rcount[j] = c.pos;
    rtotal += c.pos;
  }
  GT_CHECK(send.pos <= w->cap && rtotal <= w->cap, GT_ERR_INTERNAL,
           "internal error: checkpoint exchange of %zu / %zu entries past %zu", send.pos,
           rtotal, w->cap);
  MPI_Request req[2 * GT_CKPT_GROUP_MAX];
  int nreq = 0;
  size_t soff = 0, roff = 0;
  for (int j = 0; j < g; j++) {
    GT_CHECK(scount[j] <= INT_MAX && rcount[j] <= INT_MAX, GT_ERR_INPUT,
             "a tensor piece of %zu entries is too large for the checkpoint exchange",
             scount[j] > rcount[j] ? scount[j] : rcount[j]);
    if (rcount[j])
      GT_CALL_MPI(MPI_Irecv(w->recv + roff, (int)rcount[j], MPI_FLOAT, j, GT_CKPT_SWAP_TAG,
                            comm, &req[nreq++]));
    roff += rcount[j];
  }
  for (int j = 0; j < g; j++) {
    if (scount[j])
      GT_CALL_MPI(MPI_Isend(w->send + soff, (int)scount[j], MPI_FLOAT, j, GT_CKPT_SWAP_TAG,
                            comm, &req[nreq++]));
    soff += scount[j];
  }
  GT_CALL(gt_comm_waitall(nreq, req));
  if (!ok)
    return GT_SUCCESS;
  roff = 0;
  for (int j = 0; j < g; j++) {
    if (j == me)
      continue;
    gt_cutter c = {.cut = cut, .g = g, .me = me, .recv = w->recv + roff, .rows = rows};
    GT_CALL(gt_ckpt_runs_at(t, index[j], x0, x1, gt_cut_recv, &c));
    roff += rcount[j];
  }
  gt_fletcher_add(rw->sums, rw->total, rows, cut[me], mine);
  gt_ckpt_pwrite(w, base, cut[me], mine, rows, rw->what);
  return GT_SUCCESS;
}

/* Write this rank's entries of tensor (kind) into dset, independently - but
 * an exchanged tensor is collective on the group, which every member takes
 * part in, failed or not. */
static int gt_ckpt_write_part_in(gt_ckpt_writer *w, hid_t dset, const gt_ckpt_tensor *tensor,
                                 int kind)
{
  const gt_ckpt_state *st = w->st;
  gt_param *t = st->params ? gt_params_find(st->params, tensor->name) : NULL;
  if (!t || !st->writer || !t->counted)
    return GT_SUCCESS;
  const size_t i = (size_t)(tensor - st->tensors);
  const bool swap = w->plan.swap && w->plan.swap[i];
  size_t lo, hi, a, b, count = 0;
  gt_ckpt_range(st, kind, &lo, &hi);
  gt_ckpt_clip(t, lo, hi, &a, &b);
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count));
  if (count == 0 && !swap) /* a member of the group may hold padding only */
    return GT_SUCCESS;
  for (int d = 0; d < tensor->ndim; d++)
    GT_CHECK(t->ndim == tensor->ndim && t->full_shape[d] == tensor->dims[d], GT_ERR_INTERNAL,
             "internal error: parameter %s does not have its logical shape", t->name);
  const haddr_t base = H5Dget_offset(dset);
  GT_CHECK(base != HADDR_UNDEF, GT_ERR_HDF5,
           "H5Dget_offset gave no file offset for %s/%s (not contiguous and allocated?)",
           gt_kind_group[kind], tensor->name);
  /* The local entries [a, b), downloaded where entry a lies as in the file. */
  size_t first = 0;
  if (t->shard.axis < 0)
    first = a;
  float *src = t->shard.axis < 0 ? gt_ckpt_place(w->staging, (size_t)base, first) : w->staging;
  bool ok = w->local == GT_SUCCESS;
  if (ok && gt_fault_hit("ckpt_local_fail", w->rank, w->step)) {
    gt_error_set(GT_ERR_DEVICE, __FILE__, __LINE__, __func__,
                 "copying %s/%s to the host failed (injected by GT_FAULT=ckpt_local_fail)",
                 gt_kind_group[kind], tensor->name);
    gt_ckpt_note_local(w, GT_ERR_DEVICE);
    ok = false;
  }
  gt_backend *be = st->params->be;
  if (ok) {
    int status = be->ops->download(be, src, gt_ckpt_part_data(st, kind, t->offset + a),
                                   (b - a) * sizeof(float), NULL);
    if (status == GT_SUCCESS)
      status = gt_ckpt_copy_done(be);
    if (status != GT_SUCCESS) {
      gt_ckpt_note_local(w, status);
      ok = false;
    }
  }
  char what[GT_PARAM_NAME_MAX + 16];
  snprintf(what, sizeof what, "%s/%s", gt_kind_group[kind], tensor->name);
  gt_run_writer rw = {.w = w, .src = src, .a = a, .base = (size_t)base,
                      .sums = w->sums + 2 * w->sum_base[i * GT_NKINDS + (size_t)kind],
                      .total = gt_ckpt_tensor_numel(tensor), .what = what};
  size_t x0 = a, x1 = a; /* the whole slabs, exchanged */
  if (swap) {
    size_t inner = 1;
    for (int d = t->shard.axis + 1; d < t->ndim; d++)
      inner *= (size_t)t->full_shape[d];
    const size_t ls = (size_t)t->value.shape[t->shard.axis] * inner;
    x0 = gt_align_up(a, ls);
    x1 = b / ls * ls;
    if (x0 >= x1)
      x0 = x1 = a;
  }
  if (x0 < x1)
    GT_CALL(gt_ckpt_swap(w, t, w->plan.index + i * (size_t)w->plan.gsize, a, x0, x1,
                         (size_t)base, &rw, ok));
  if (!ok)
    return GT_SUCCESS;
  GT_CALL(gt_ckpt_runs(t, a, x0, gt_write_run, &rw));
  GT_CALL(gt_ckpt_runs(t, x1 > x0 ? x1 : a, b, gt_write_run, &rw));
  return GT_SUCCESS;
}

static void gt_ckpt_write_part(gt_ckpt_writer *w, hid_t dset, const gt_ckpt_tensor *tensor,
                               int kind)
{
  int status = gt_ckpt_write_part_in(w, dset, tensor, kind);
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
  /* the data: our own writes (the exchanged tensors collective on the group
   * only), no collective call of HDF5's per tensor */
  if (st->writer && st->params) {
    const int opened = gt_ckpt_open_data(w);
    if (opened != GT_SUCCESS)
      gt_ckpt_note_local(w, opened);
  }
  for (int i = 0; i < st->ntensors; i++) {
    gt_ckpt_maybe_kill(w, i, st->ntensors);
    for (int k = 0; k < GT_NKINDS; k++)
      gt_ckpt_write_part(w, w->dsets[i * GT_NKINDS + k], &st->tensors[i], k);
  }
  gt_ckpt_close_data(w);
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
  w->cap = n + 2 * GT_DIO_FLOATS;
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
  GT_CHECK(w->sums && w->values, GT_ERR_SYSTEM, "out of memory allocating %zu bytes of checksums",
           w->nsums * (2 * sizeof(uint64_t) + sizeof(uint32_t)));
  /* staging and rows get room to start where their first entry lies in a
   * 4 KiB block of the file (gt_ckpt_place) */
  const size_t bytes = (w->cap + GT_DIO_FLOATS) * sizeof(float);
  float **bufs[4] = {&w->staging, &w->rows, &w->send, &w->recv};
  for (int b = 0; b < (w->plan.any ? 4 : 1); b++) {
    void *p = NULL;
    GT_CHECK(posix_memalign(&p, GT_DIO_ALIGN, bytes) == 0, GT_ERR_SYSTEM,
             "out of memory allocating %zu bytes of checkpoint staging buffers", bytes);
    *bufs[b] = p;
  }
  return GT_SUCCESS;
}

static void gt_ckpt_writer_free(gt_ckpt_writer *w)
{
  free(w->sum_base);
  free(w->dsets);
  free(w->sums);
  free(w->values);
  free(w->staging);
  free(w->rows);
  free(w->send);
  free(w->recv);
  gt_swap_plan_free(&w->plan);
}

/* gt_ckpt_write, naming the checkpoint `shown` in its error message. */
static int gt_ckpt_write_file(const char *path, const char *shown, const gt_ckpt_meta *meta,
                              const gt_ckpt_state *st, MPI_Comm comm)
{
  gt_ckpt_writer w = {.st = st, .path = path, .step = meta->step, .local = GT_SUCCESS,
                      .fd = -1, .fd_direct = -1, .plan = {.gsize = 1}};
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  int status = gt_comm_foreign_begin(comm);
  const bool in_scope = status == GT_SUCCESS;
  if (status == GT_SUCCESS)
    status = gt_ckpt_plan_swap(st, true, &w.plan);
  if (status == GT_SUCCESS)
    status = gt_ckpt_writer_alloc(&w);
  status = gt_error_agree(status, comm);
  hid_t ids[GT_WF_N] = {H5I_INVALID_HID, H5I_INVALID_HID};
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
    if (io != GT_SUCCESS) {
      status = io;
    } else if (w.local != GT_SUCCESS) {
      status = gt_error_set(w.local, __FILE__, __LINE__, __func__, "%s", w.local_message);
    }
  }
  if (in_scope)
    gt_comm_foreign_end();
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
  float *send, *recv; /* the exchange inside the group */
  size_t send_cap, recv_cap;
  gt_swap_plan plan;
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
  GT_CALL(gt_grow((void **)&r->rbuf, &r->rcap, f1 - *f0, sizeof(float)));
  const size_t nsums = gt_ckpt_nsums(total);
  GT_CALL(gt_grow((void **)&r->stored, &r->scap, nsums, sizeof(uint32_t)));
  bool found;
  GT_CALL(gt_h5_read_attr_u32s(ids[GT_R_DSET], "fletcher32", name, (int)nsums, &found,
                               r->stored));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s: %s has no fletcher32 checksums", r->path, name);
  gt_sel s = {.space = ids[GT_R_SPACE], .nd = t->ndim, .m = t->ndim, .first = true};
  for (int d = 0; d < t->ndim; d++)
    s.dims[d] = (hsize_t)t->full_shape[d];
  GT_CALL(gt_sel_flat(&s, 0, (hsize_t)*f0, (hsize_t)f1));
  const hsize_t n = (hsize_t)(f1 - *f0);
  GT_H5_ID(ids[GT_R_MSPACE], H5Screate_simple(1, &n, NULL));
  if (H5Dread(ids[GT_R_DSET], H5T_NATIVE_FLOAT, ids[GT_R_MSPACE], ids[GT_R_SPACE], H5P_DEFAULT,
              r->rbuf) < 0) {
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "checkpoint %s: %s cannot be read", r->path, name);
  }
  GT_CALL(gt_ckpt_check_sums(r->path, name, r->rbuf, total, blk0, blk1 - blk0, r->stored));
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
  const int ax = t->shard.axis;
  size_t inner = 1;
  for (int d = ax + 1; d < t->ndim; d++)
    inner *= (size_t)t->full_shape[d];
  const size_t ls = (size_t)t->value.shape[ax] * inner, fs = (size_t)t->full_shape[ax] * inner;
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
  GT_CALL(gt_grow((void **)&r->send, &r->send_cap, stotal + 1, sizeof(float)));
  GT_CALL(gt_grow((void **)&r->recv, &r->recv_cap, rtotal + 1, sizeof(float)));
  size_t off = 0;
  for (int j = 0; j < g && ok; j++) {
    if (j == me)
      continue;
    gt_clip c = {.mode = GT_CLIP_PACK, .lo = cut[me], .hi = cut[me + 1], .dst = r->send + off,
                 .src = r->rbuf, .f0 = f0};
    GT_CALL(gt_ckpt_runs_at(t, index[j], x0, x1, gt_clip_run, &c));
    off += scount[j];
  }
  MPI_Request req[2 * GT_CKPT_GROUP_MAX];
  int nreq = 0;
  size_t soff = 0, roff = 0;
  for (int j = 0; j < g; j++) {
    GT_CHECK(scount[j] <= INT_MAX && rcount[j] <= INT_MAX, GT_ERR_INPUT,
             "a tensor piece of %zu entries is too large for the checkpoint exchange",
             scount[j] > rcount[j] ? scount[j] : rcount[j]);
    if (rcount[j])
      GT_CALL_MPI(MPI_Irecv(r->recv + roff, (int)rcount[j], MPI_FLOAT, j, GT_CKPT_SWAP_TAG,
                            comm, &req[nreq++]));
    roff += rcount[j];
  }
  for (int j = 0; j < g; j++) {
    if (scount[j])
      GT_CALL_MPI(MPI_Isend(r->send + soff, (int)scount[j], MPI_FLOAT, j, GT_CKPT_SWAP_TAG,
                            comm, &req[nreq++]));
    soff += scount[j];
  }
  GT_CALL(gt_comm_waitall(nreq, req));
  if (!ok)
    return GT_SUCCESS;
  roff = 0;
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
  if (span.lo < span.hi && span.hi - span.lo > 2 * held) {
    size_t inner = 1;
    for (int d = t->shard.axis + 1; d < t->ndim; d++)
      inner *= (size_t)t->full_shape[d];
    const size_t ls = (size_t)t->value.shape[t->shard.axis] * inner;
    x0 = gt_align_up(a, ls);
    x1 = b / ls * ls;
  }
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
  if (status == GT_SUCCESS)
    status = gt_ckpt_plan_swap(st, false, &r.plan);
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
  free(r.send);
  free(r.recv);
  gt_swap_plan_free(&r.plan);
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
