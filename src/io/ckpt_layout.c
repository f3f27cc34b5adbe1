/*
 * ckpt_layout.c - a rank's part of a logical tensor in a checkpoint file
 * (runs, selections), the block checksums, and the plan of the exchange
 * inside the tensor-parallel group (ckpt_internal.h).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "ckpt_internal.h"
#include "h5util.h"

const char *const gt_kind_group[GT_NKINDS] = {"/model", "/optim/m", "/optim/v"};

// ---- selections -------------------------------------------------------------------------

/* Select, in the file space of the logical tensor and in the memory space
 * of the rank's local tensor, the entries this rank holds (padding left
 * out). Both selections list the entries in the same (row-major) order. */
int gt_ckpt_select(const gt_param *t, hid_t fspace, hid_t mspace)
{
  if (t->shard.axis < 0) {
    GT_CALL_HDF5(H5Sselect_all(fspace));
    GT_CALL_HDF5(H5Sselect_all(mspace));
    return GT_SUCCESS;
  }
  const int ax = t->shard.axis;
  hsize_t fstart[GT_TENSOR_MAX_DIMS] = {0}, mstart[GT_TENSOR_MAX_DIMS] = {0};
  hsize_t count[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    count[d] = (hsize_t)t->full_shape[d];
  bool any = false;
  for (int b = 0; b < t->shard.blocks; b++) {
    const gt_shard_block bk = gt_shard_block_of(&t->shard, t->full_shape[ax], b);
    const long k0 = (long)t->shard.index * bk.piece;
    const long n = bk.len - k0 < bk.piece ? bk.len - k0 : bk.piece; /* real entries */
    if (n <= 0)
      continue;
    const H5S_seloper_t op = any ? H5S_SELECT_OR : H5S_SELECT_SET;
    count[ax] = (hsize_t)n;
    fstart[ax] = (hsize_t)(bk.first + k0);
    mstart[ax] = (hsize_t)bk.lfirst;
    GT_CALL_HDF5(H5Sselect_hyperslab(fspace, op, fstart, NULL, count, NULL));
    GT_CALL_HDF5(H5Sselect_hyperslab(mspace, op, mstart, NULL, count, NULL));
    any = true;
  }
  if (!any) {
    GT_CALL_HDF5(H5Sselect_none(fspace));
    GT_CALL_HDF5(H5Sselect_none(mspace));
  }
  return GT_SUCCESS;
}

int gt_ckpt_local_space(const gt_param *t, hid_t *space)
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


/* The flat range [*a, *b) of t's local entries (indices into the local
 * tensor) that fall in the flat range [lo, hi) of the buffers. */
void gt_ckpt_clip(const gt_param *t, size_t lo, size_t hi, size_t *a, size_t *b)
{
  const size_t t0 = t->offset, t1 = t->offset + t->numel;
  const size_t s = lo > t0 ? lo : t0, e = hi < t1 ? hi : t1;
  *a = s < e ? s - t0 : 0;
  *b = s < e ? e - t0 : 0;
}


/* Call fn on the runs of t's real (not padding) local entries with index in
 * [a, b), in local row-major order - which is also the logical order, as
 * the map from local to logical coordinates is increasing along every axis -
 * for the rank holding piece `index` of t's shards (its group members hold
 * the same local shape, each its own piece). */
int gt_ckpt_runs_at(const gt_param *t, int index, size_t a, size_t b, gt_run_fn fn,
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
  const int nblocks = t->shard.blocks;
  const size_t full_len = (size_t)t->full_shape[ax], local_len = (size_t)t->value.shape[ax];
  const size_t slab = local_len * inner;
  if (slab == 0)
    return GT_SUCCESS;
  for (size_t o = a / slab; o * slab < b; o++)
    for (int k = 0; k < nblocks; k++) {
      const gt_shard_block bk = gt_shard_block_of(&t->shard, (long)full_len, k);
      const size_t piece = (size_t)bk.piece, len = (size_t)bk.len;
      const size_t k0 = (size_t)index * piece;
      const size_t n = len > k0 ? gt_min_size(piece, len - k0) : 0;
      if (n == 0)
        continue;
      const size_t l0 = o * slab + (size_t)bk.lfirst * inner, l1 = l0 + n * inner;
      const size_t f0 = (o * full_len + (size_t)bk.first + k0) * inner;
      const size_t s0 = l0 > a ? l0 : a, s1 = l1 < b ? l1 : b;
      if (s0 < s1)
        GT_CALL(fn(ctx, s0, f0 + (s0 - l0), s1 - s0));
    }
  return GT_SUCCESS;
}

int gt_ckpt_runs(const gt_param *t, size_t a, size_t b, gt_run_fn fn, void *ctx)
{
  return gt_ckpt_runs_at(t, t->shard.index, a, b, fn, ctx);
}

int gt_run_count(void *ctx, size_t local, size_t logical, size_t len)
{
  (void)local;
  (void)logical;
  *(size_t *)ctx += len;
  return GT_SUCCESS;
}


static int gt_sel_emit(gt_sel *s)
{
  GT_CALL_HDF5(H5Sselect_hyperslab(s->space, s->first ? H5S_SELECT_SET : H5S_SELECT_OR,
                                   s->start, NULL, s->count, NULL));
  s->first = false;
  return GT_SUCCESS;
}

int gt_sel_flat(gt_sel *s, int d, hsize_t lo, hsize_t hi)
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
void gt_fletcher_add(uint64_t *sums, size_t total, const float *data, size_t logical,
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

uint32_t gt_fletcher_value(const uint64_t *sum)
{
  return (uint32_t)(sum[1] % GT_FLETCHER_MOD) << 16 | (uint32_t)(sum[0] % GT_FLETCHER_MOD);
}

/* Checksum blocks of a dataset of `total` floats. */
size_t gt_ckpt_nsums(size_t total)
{
  return (total + GT_CKPT_SUM_FLOATS - 1) / GT_CKPT_SUM_FLOATS;
}

/* Check the whole blocks [blk0, blk0 + n) held in data (from the first
 * one's start) against their stored checksums; the first that fails is
 * GT_ERR_HDF5 naming the dataset and its bytes. */
int gt_ckpt_check_sums(const char *path, const char *name, const float *data,
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

int gt_ckpt_check_finite(const char *path, const char *name, const float *data, size_t n,
                         size_t first)
{
  for (size_t i = 0; i < n; i++)
    GT_CHECK(isfinite(data[i]), GT_ERR_HDF5,
             "checkpoint %s: %s holds a non-finite value (%g at element %zu): the training "
             "that wrote it had diverged, or the file was changed; use an earlier checkpoint",
             path, name, (double)data[i], first + i);
  return GT_SUCCESS;
}

/* Device pointer of flat element `flat` of kind's buffer. */
float *gt_ckpt_part_data(const gt_ckpt_state *st, int kind, size_t flat)
{
  if (kind == GT_KIND_MODEL)
    return (st->values ? st->values : st->params->values) + (flat - st->values_lo);
  return (kind == GT_KIND_M ? st->m : st->v) + (flat - st->moments_lo);
}

/* The flat range of kind's buffer this rank writes or loads. */
void gt_ckpt_range(const gt_ckpt_state *st, int kind, size_t *lo, size_t *hi)
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
int gt_ckpt_copy_done(gt_backend *be)
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

size_t gt_ckpt_largest_local(const gt_ckpt_state *st)
{
  size_t n = 1;
  for (int i = 0; st->params && i < st->params->count; i++)
    n = st->params->list[i].numel > n ? st->params->list[i].numel : n;
  return n;
}

size_t gt_ckpt_tensor_numel(const gt_ckpt_tensor *tensor)
{
  size_t n = 1;
  for (int d = 0; d < tensor->ndim; d++)
    n *= (size_t)tensor->dims[d];
  return n;
}

int gt_ckpt_grow(void **buf, size_t *cap, size_t n, size_t size)
{
  if (n <= *cap)
    return GT_SUCCESS;
  void *bigger = realloc(*buf, n * size);
  GT_CHECK_ALLOC(bigger, n * size);
  *buf = bigger;
  *cap = n;
  return GT_SUCCESS;
}


// ---- the exchange inside the group: which tensors take part ------------------------

void gt_swap_plan_free(gt_swap_plan *p)
{
  free(p->index);
  free(p->swap);
  p->index = NULL;
  p->swap = NULL;
}

/* Which tensors the group exchanges: those that every member holds sharded
 * over the group (one piece each, shard indices 0..gsize-1), when all
 * members write (or read) the same ranges of the same flat layout.
 * Collective on the group. */
int gt_ckpt_plan_swap(const gt_ckpt_state *st, bool writing, gt_swap_plan *w)
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

void gt_ckpt_slab_sizes(const gt_param *t, size_t *ls, size_t *fs)
{
  size_t inner = 1;
  for (int d = t->shard.axis + 1; d < t->ndim; d++)
    inner *= (size_t)t->full_shape[d];
  *ls = (size_t)t->value.shape[t->shard.axis] * inner;
  *fs = (size_t)t->full_shape[t->shard.axis] * inner;
}

void gt_ckpt_whole_slabs(const gt_param *t, size_t a, size_t b, size_t *x0, size_t *x1)
{
  size_t ls, fs;
  gt_ckpt_slab_sizes(t, &ls, &fs);
  *x0 = gt_align_up(a, ls);
  *x1 = b / ls * ls;
  if (*x0 >= *x1)
    *x0 = *x1 = a;
}

int gt_ckpt_swap_post(MPI_Comm comm, int g, const float *send, const size_t *scount, float *recv,
                      const size_t *rcount)
{
  MPI_Request req[2 * GT_CKPT_GROUP_MAX];
  int nreq = 0;
  size_t soff = 0, roff = 0;
  for (int j = 0; j < g; j++)
    GT_CHECK(scount[j] <= INT_MAX && rcount[j] <= INT_MAX, GT_ERR_INPUT,
             "a tensor piece of %zu entries is too large for the checkpoint exchange",
             scount[j] > rcount[j] ? scount[j] : rcount[j]);
  for (int j = 0; j < g; j++) {
    if (rcount[j])
      GT_CALL_MPI(MPI_Irecv(recv + roff, (int)rcount[j], MPI_FLOAT, j, GT_CKPT_SWAP_TAG, comm,
                            &req[nreq++]));
    roff += rcount[j];
  }
  for (int j = 0; j < g; j++) {
    if (scount[j])
      GT_CALL_MPI(MPI_Isend(send + soff, (int)scount[j], MPI_FLOAT, j, GT_CKPT_SWAP_TAG, comm,
                            &req[nreq++]));
    soff += scount[j];
  }
  GT_CALL(gt_comm_waitall(nreq, req));
  return GT_SUCCESS;
}
