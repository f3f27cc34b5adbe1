/*
 * params.c - flat parameter and gradient buffers with named views.
 */
#include "gridtrain/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/rng.h"

int gt_params_create(gt_backend *be, gt_dtype dtype, gt_params **params)
{
  GT_ASSERT(dtype == GT_F32 || dtype == GT_BF16 || dtype == GT_F16);
  gt_params *p = calloc(1, sizeof *p);
  GT_CHECK_ALLOC(p, sizeof *p);
  p->be = be;
  p->dtype = dtype;
  p->shard_size = 1;
  *params = p;
  return GT_SUCCESS;
}

gt_shard_block gt_shard_block_of(const gt_shard *sh, long full, int b)
{
  gt_shard_block r = {0, 0, 0, 0};
  long total = 0;
  if (sh->units[0] > 0)
    for (int i = 0; i < sh->blocks; i++)
      total += sh->units[i];
  for (int i = 0; i <= b; i++) {
    const long len = total > 0 ? full / total * sh->units[i] : full / sh->blocks;
    const long piece = (len + sh->parts - 1) / sh->parts;
    if (i == b) {
      r.len = len;
      r.piece = piece;
    } else {
      r.first += len;
      r.lfirst += piece;
    }
  }
  return r;
}

long gt_shard_extent(const gt_shard *sh, long full)
{
  const gt_shard_block last = gt_shard_block_of(sh, full, sh->blocks - 1);
  return last.lfirst + last.piece;
}

/* Whether full splits into the shard's blocks exactly. */
static bool gt_shard_fits(const gt_shard *sh, long full)
{
  if (sh->units[0] <= 0)
    return full % sh->blocks == 0;
  long total = 0;
  for (int i = 0; i < sh->blocks; i++) {
    if (sh->units[i] <= 0)
      return false;
    total += sh->units[i];
  }
  return full % total == 0;
}

int gt_params_add(gt_params *p, const char *name, int ndim, const long *full_shape,
                  gt_shard shard, bool counted, gt_init_kind init, float init_std,
                  bool decay)
{
  GT_ASSERT(!p->finalized);
  GT_ASSERT(ndim >= 1 && ndim <= GT_TENSOR_MAX_DIMS);
  GT_ASSERT(strlen(name) < GT_PARAM_NAME_MAX);
  GT_ASSERT(gt_params_find(p, name) == NULL);
  GT_ASSERT(shard.axis < ndim && shard.blocks >= 1 && shard.parts >= 1);
  GT_ASSERT(shard.index >= 0 && shard.index < shard.parts);
  GT_ASSERT(shard.blocks <= GT_SHARD_MAX_BLOCKS);
  GT_ASSERT(shard.axis < 0 || gt_shard_fits(&shard, full_shape[shard.axis]));
  if (p->count == p->capacity) {
    int cap = p->capacity ? 2 * p->capacity : 32;
    gt_param *grown = realloc(p->list, sizeof *grown * (size_t)cap);
    GT_CHECK_ALLOC(grown, sizeof *grown * (size_t)cap);
    p->list = grown;
    p->capacity = cap;
  }
  gt_param *t = &p->list[p->count++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->shard = shard;
  t->counted = counted;
  t->value.ndim = ndim;
  t->numel = 1;
  for (int i = 0; i < ndim; i++) {
    GT_ASSERT(full_shape[i] >= 1);
    t->full_shape[i] = full_shape[i];
    t->value.shape[i] = i == shard.axis ? gt_shard_extent(&shard, full_shape[i])
                                        : full_shape[i];
    t->numel *= (size_t)t->value.shape[i];
  }
  t->value.dtype = GT_F32;
  t->value.device = p->be ? p->be->device : GT_HOST;
  t->grad = t->value;
  t->compute = t->value;
  t->compute.dtype = p->dtype;
  t->init = init;
  t->init_std = init_std;
  t->decay = decay;
  return GT_SUCCESS;
}

size_t gt_param_full_numel(const gt_param *t)
{
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= (size_t)t->full_shape[i];
  return n;
}

/* Walk the local tensor as (outer, axis, inner) and pair each local entry
 * along the axis with its logical index (or -1 for padding). */
static void gt_param_copy(const gt_param *t, float *local, float *full, bool to_full)
{
  if (t->shard.axis < 0) {
    if (to_full)
      memcpy(full, local, t->numel * sizeof(float));
    else
      memcpy(local, full, t->numel * sizeof(float));
    return;
  }
  const int ax = t->shard.axis;
  size_t outer = 1, inner = 1;
  for (int i = 0; i < ax; i++)
    outer *= (size_t)t->full_shape[i];
  for (int i = ax + 1; i < t->ndim; i++)
    inner *= (size_t)t->full_shape[i];
  const long full_len = t->full_shape[ax], local_len = t->value.shape[ax];
  for (size_t o = 0; o < outer; o++)
    for (int b = 0; b < t->shard.blocks; b++) {
      const gt_shard_block bk = gt_shard_block_of(&t->shard, full_len, b);
      for (long j = 0; j < bk.piece; j++) {
        const long k = t->shard.index * bk.piece + j;
        float *lp = local + (o * (size_t)local_len + (size_t)(bk.lfirst + j)) * inner;
        if (k >= bk.len) { /* padding */
          if (!to_full)
            memset(lp, 0, inner * sizeof(float));
          continue;
        }
        float *fp = full + (o * (size_t)full_len + (size_t)(bk.first + k)) * inner;
        if (to_full)
          memcpy(fp, lp, inner * sizeof(float));
        else
          memcpy(lp, fp, inner * sizeof(float));
      }
    }
}

void gt_param_extract(const gt_param *t, const float *full, float *local)
{
  gt_param_copy(t, local, (float *)full, false);
}

void gt_param_insert(const gt_param *t, const float *local, float *full)
{
  gt_param_copy(t, (float *)local, full, true);
}

int gt_params_shard(gt_params *p, int rank, int size, int stage)
{
  GT_ASSERT(!p->finalized);
  GT_ASSERT(size >= 1 && rank >= 0 && rank < size && stage >= 1 && stage <= 3);
  p->shard_rank = rank;
  p->shard_size = size;
  p->grads_sharded = stage >= 2 && size > 1;
  p->compute_sharded = stage >= 3 && size > 1;
  return GT_SUCCESS;
}

void *gt_params_compute_at(const gt_params *p, size_t offset)
{
  const size_t at = p->compute_sharded ? offset - p->shard_lo : offset;
  return (char *)p->compute + at * gt_dtype_size(p->dtype);
}

float *gt_params_grad(const gt_params *p, size_t offset)
{
  return p->grads + (p->grads_sharded ? offset - p->shard_lo : offset);
}

/* Elements of the gradient buffer. */
static size_t gt_params_grad_len(const gt_params *p)
{
  return p->grads_sharded ? p->shard_n : p->numel;
}

void gt_params_master_range(const gt_params *p, size_t *lo, size_t *hi)
{
  *lo = p->master_sharded ? p->shard_lo : 0;
  *hi = p->master_sharded ? p->shard_lo + p->shard_n : p->numel;
}

float *gt_params_master(const gt_params *p, size_t offset)
{
  return p->values + (p->master_sharded ? offset - p->shard_lo : offset);
}

int gt_params_layout(gt_params *p)
{
  GT_ASSERT(!p->finalized);
  /* Views start on 16-float (64-byte) boundaries. */
  size_t off = 0;
  for (int i = 0; i < p->count; i++) {
    p->list[i].offset = off;
    off += (p->list[i].numel + 15) & ~(size_t)15;
  }
  /* ZeRO pieces: equal, each a multiple of 16 elements (aligned). */
  const size_t size = (size_t)p->shard_size;
  p->shard_n = ((off + 16 * size - 1) / (16 * size)) * 16;
  p->shard_lo = p->shard_n * (size_t)p->shard_rank;
  if (size > 1)
    off = p->shard_n * size;
  p->numel = off;
  /* fp32: the master is the compute copy, in pieces only at stage 3 */
  p->master_sharded = size > 1 && (p->dtype != GT_F32 || p->compute_sharded);
  return GT_SUCCESS;
}

int gt_params_finalize(gt_params *p)
{
  GT_CALL(gt_params_layout(p));
  const size_t off = p->numel;
  const size_t nmaster = p->master_sharded ? p->shard_n : off;
  GT_CALL(p->be->ops->alloc(p->be, nmaster * sizeof(float), (void **)&p->values));
  GT_CALL(p->be->ops->alloc(p->be, gt_params_grad_len(p) * sizeof(float), (void **)&p->grads));
  GT_CALL(p->be->ops->zero(p->be, p->values, nmaster * sizeof(float)));
  GT_CALL(p->be->ops->zero(p->be, p->grads, gt_params_grad_len(p) * sizeof(float)));
  p->compute = p->values;
  if (p->dtype != GT_F32) {
    const size_t bytes = (p->compute_sharded ? p->shard_n : off) * gt_dtype_size(p->dtype);
    GT_CALL(p->be->ops->alloc(p->be, bytes, &p->compute));
    GT_CALL(p->be->ops->zero(p->be, p->compute, bytes));
  }
  for (int i = 0; i < p->count; i++) {
    p->list[i].value.data = p->master_sharded ? NULL : p->values + p->list[i].offset;
    p->list[i].grad.data = p->grads_sharded ? NULL : p->grads + p->list[i].offset;
    p->list[i].compute.data =
        p->compute_sharded ? NULL : gt_params_compute_at(p, p->list[i].offset);
  }
  p->finalized = true;
  return GT_SUCCESS;
}

int gt_params_fill(gt_params *p, gt_param_fill_fn fill, void *ctx)
{
  GT_ASSERT(p->finalized);
  size_t largest = 0;
  for (int i = 0; i < p->count; i++) {
    size_t n = gt_param_full_numel(&p->list[i]) + p->list[i].numel;
    largest = n > largest ? n : largest;
  }
  float *host = malloc(largest * sizeof(float));
  GT_CHECK_ALLOC(host, largest * sizeof(float));
  int status = GT_SUCCESS;
  for (int i = 0; i < p->count && status == GT_SUCCESS; i++) {
    gt_param *t = &p->list[i];
    float *full = host, *local = host + gt_param_full_numel(t);
    status = fill(ctx, t, full);
    if (status != GT_SUCCESS)
      break;
    gt_param_extract(t, full, local);
    size_t lo, hi;
    gt_params_master_range(p, &lo, &hi);
    lo = lo > t->offset ? lo : t->offset;
    hi = hi < t->offset + t->numel ? hi : t->offset + t->numel;
    if (lo < hi)
      status = p->be->ops->upload(p->be, gt_params_master(p, lo), local + (lo - t->offset),
                                  (hi - lo) * sizeof(float), NULL);
    if (status == GT_SUCCESS) /* the host buffer is refilled for the next tensor */
      status = p->be->ops->sync(p->be);
  }
  free(host);
  GT_CALL(status);
  GT_CALL(gt_params_refresh_compute(p));
  return GT_SUCCESS;
}

/* The initial values of t (its init kind; the normal draws from the stream
 * of its name, so every layout draws the same logical tensor). */
static int gt_param_fill_init(void *ctx, const gt_param *t, float *full)
{
  const uint64_t seed = *(const uint64_t *)ctx;
  const size_t full_n = gt_param_full_numel(t);
  switch (t->init) {
  case GT_INIT_NORMAL:
    gt_rng_normal_fill(full, full_n, gt_rng_stream(seed, t->name), 0, t->init_std);
    break;
  case GT_INIT_ZEROS: memset(full, 0, full_n * sizeof(float)); break;
  case GT_INIT_ONES:
    for (size_t j = 0; j < full_n; j++)
      full[j] = 1.0f;
    break;
  }
  return GT_SUCCESS;
}

int gt_params_init(gt_params *p, uint64_t seed)
{
  GT_CALL(gt_params_fill(p, gt_param_fill_init, &seed));
  return GT_SUCCESS;
}

int gt_params_refresh_compute(gt_params *p)
{
  GT_ASSERT(p->finalized);
  if (p->dtype == GT_F32)
    return GT_SUCCESS;
  size_t lo, hi;
  gt_params_master_range(p, &lo, &hi);
  GT_CALL(p->be->ops->cast(p->be, p->dtype, gt_params_compute_at(p, lo), GT_F32,
                           gt_params_master(p, lo), hi - lo));
  return GT_SUCCESS;
}

int gt_params_zero_grads(gt_params *p)
{
  GT_CALL(p->be->ops->zero(p->be, p->grads, gt_params_grad_len(p) * sizeof(float)));
  return GT_SUCCESS;
}

int gt_params_grad_sumsq(gt_params *p, double *acc)
{
  /* One sum per run of consecutive counted parameters (the alignment gaps
   * between them hold zeros): a single call when every parameter here is
   * counted. */
  for (int i = 0; i < p->count;) {
    if (!p->list[i].counted) {
      i++;
      continue;
    }
    int j = i;
    while (j < p->count && p->list[j].counted)
      j++;
    size_t begin = p->list[i].offset;
    size_t end = p->list[j - 1].offset + p->list[j - 1].numel;
    if (p->shard_size > 1) { /* the owned piece holds the reduced gradients */
      begin = begin > p->shard_lo ? begin : p->shard_lo;
      end = end < p->shard_lo + p->shard_n ? end : p->shard_lo + p->shard_n;
    }
    if (begin < end)
      GT_CALL(p->be->ops->sumsq_add(p->be, acc, gt_params_grad(p, begin), end - begin));
    i = j;
  }
  return GT_SUCCESS;
}

/* Bytes of the stash: the whole compute copy (in fp32 the master). */
static size_t gt_params_stash_bytes(const gt_params *p)
{
  return p->numel * gt_dtype_size(p->dtype);
}

size_t gt_params_master_bytes(const gt_params *p)
{
  return (p->master_sharded ? p->shard_n : p->numel) * sizeof(float);
}

size_t gt_params_compute_bytes(const gt_params *p)
{
  const size_t stash = p->stash ? gt_params_stash_bytes(p) : 0;
  if (p->dtype == GT_F32)
    return stash;
  return (p->compute_sharded ? p->shard_n : p->numel) * gt_dtype_size(p->dtype) + stash;
}

size_t gt_params_span(const gt_params *p, int first, int count)
{
  const size_t end = first + count < p->count ? p->list[first + count].offset : p->numel;
  return end - p->list[first].offset;
}

gt_param *gt_params_find(gt_params *p, const char *name)
{
  for (int i = 0; i < p->count; i++)
    if (strcmp(p->list[i].name, name) == 0)
      return &p->list[i];
  return NULL;
}

int gt_params_stash_create(gt_params *p)
{
  GT_ASSERT(p->finalized && !p->stash && !p->compute_sharded);
  GT_CALL(p->be->ops->alloc(p->be, gt_params_stash_bytes(p), &p->stash));
  GT_CALL(gt_params_stash_save(p));
  return GT_SUCCESS;
}

int gt_params_stash_save(gt_params *p)
{
  GT_ASSERT(p->stash);
  GT_CALL(p->be->ops->copy(p->be, p->stash, p->compute, gt_params_stash_bytes(p), NULL));
  return GT_SUCCESS;
}

void *gt_params_stash_at(const gt_params *p, size_t offset)
{
  return p->stash ? (char *)p->stash + offset * gt_dtype_size(p->dtype) : NULL;
}

int gt_params_grads_double(gt_params *p)
{
  GT_ASSERT(p->finalized && !p->grads_other && !p->grads_sharded);
  const size_t bytes = gt_params_grad_len(p) * sizeof(float);
  GT_CALL(p->be->ops->alloc(p->be, bytes, (void **)&p->grads_other));
  GT_CALL(p->be->ops->zero(p->be, p->grads_other, bytes));
  return GT_SUCCESS;
}

void gt_params_grads_swap(gt_params *p)
{
  float *t = p->grads;
  p->grads = p->grads_other;
  p->grads_other = t;
  for (int i = 0; i < p->count; i++)
    p->list[i].grad.data = p->grads + p->list[i].offset;
}

int gt_params_destroy(gt_params **params)
{
  gt_params *p = *params;
  if (!p)
    return GT_SUCCESS;
  if (p->values)
    p->be->ops->free(p->be, p->values);
  if (p->grads)
    p->be->ops->free(p->be, p->grads);
  if (p->compute && p->compute != p->values)
    p->be->ops->free(p->be, p->compute);
  if (p->stash)
    p->be->ops->free(p->be, p->stash);
  if (p->grads_other)
    p->be->ops->free(p->be, p->grads_other);
  free(p->list);
  free(p);
  *params = NULL;
  return GT_SUCCESS;
}
