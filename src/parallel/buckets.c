/*
 * buckets.c - bucketed, overlapped data-parallel all-reduce (see buckets.h).
 */
#include "gridtrain/buckets.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"

typedef struct {
  int first, count;   /* parameters [first, first + count) */
  size_t offset, len; /* slice of the flat gradient buffer */
  int pending;        /* parameters not yet reported this step */
  bool started;
  bool held;          /* started by gt_buckets_wait_held only */
  size_t *counts;     /* ZeRO: elements of each dp rank's piece in the slice */
  gt_xfer *xfer;
  gt_compressor *comp; /* [parallel] compress */
  gt_xfer_reducer reducer; /* comp's reduction (gt_compressor_reducer) */
} gt_bucket;

struct gt_buckets {
  gt_params *params;
  gt_coll *coll;
  MPI_Comm dp;
  int n;
  gt_bucket *list;   /* in launch order: last parameters first */
  int *bucket_of;    /* parameter -> bucket */
  bool *reported;    /* parameter reported this step */
};

int gt_buckets_create(gt_params *params, gt_coll *coll, MPI_Comm dp, size_t bucket_bytes,
                      gt_buckets **buckets)
{
  gt_buckets *b = calloc(1, sizeof *b);
  GT_CHECK_ALLOC(b, sizeof *b);
  *buckets = b;
  b->params = params;
  b->coll = coll;
  b->dp = dp;
  const int np = params->count;
  b->list = calloc((size_t)(np > 0 ? np : 1), sizeof *b->list);
  b->bucket_of = calloc((size_t)(np > 0 ? np : 1), sizeof *b->bucket_of);
  b->reported = calloc((size_t)(np > 0 ? np : 1), sizeof *b->reported);
  if (!b->list || !b->bucket_of || !b->reported) {
    gt_buckets_destroy(buckets);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory for gradient buckets");
  }
  /* Walk the parameters from the last: a bucket closes as soon as it holds
   * bucket_bytes or more (so a bucket may exceed the size by its last
   * parameter). */
  int hi = np; /* current bucket: parameters [i, hi) */
  size_t bytes = 0;
  for (int i = np - 1; i >= 0; i--) {
    bytes += params->list[i].numel * sizeof(float);
    bool close = i == 0 || (bucket_bytes > 0 && bytes >= bucket_bytes);
    if (!close)
      continue;
    gt_bucket *k = &b->list[b->n];
    k->first = i;
    k->count = hi - i;
    k->offset = params->list[i].offset;
    k->len = (hi < np ? params->list[hi].offset : params->numel) - k->offset;
    for (int j = i; j < hi; j++)
      b->bucket_of[j] = b->n;
    b->n++;
    hi = i;
    bytes = 0;
  }
  int dp_size = 1;
  GT_CALL_MPI(MPI_Comm_size(dp, &dp_size));
  GT_CHECK(params->shard_size == 1 || params->shard_size == dp_size, GT_ERR_INTERNAL,
           "internal error: parameters in %d pieces for %d data-parallel ranks",
           params->shard_size, dp_size);
  for (int i = 0; i < b->n && dp_size > 1; i++) { /* dp = 1: nothing to reduce */
    gt_bucket *k = &b->list[i];
    int status = gt_xfer_create(coll, k->len * sizeof(float), &k->xfer);
    if (status == GT_SUCCESS && params->shard_size > 1) {
      k->counts = calloc((size_t)dp_size, sizeof *k->counts);
      status = k->counts ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory for buckets");
      for (int r = 0; r < dp_size && k->counts; r++) { /* the slice cut by the pieces */
        const size_t plo = (size_t)r * params->shard_n, phi = plo + params->shard_n;
        const size_t a = k->offset > plo ? k->offset : plo;
        const size_t e = k->offset + k->len < phi ? k->offset + k->len : phi;
        k->counts[r] = a < e ? e - a : 0;
      }
    }
    if (status != GT_SUCCESS) {
      gt_buckets_destroy(buckets);
      return gt_error_push(status, __FILE__, __LINE__, __func__);
    }
  }
  gt_buckets_reset(b);
  return GT_SUCCESS;
}

int gt_buckets_destroy(gt_buckets **buckets)
{
  gt_buckets *b = *buckets;
  if (!b)
    return GT_SUCCESS;
  for (int i = 0; b->list && i < b->n; i++) {
    gt_xfer_destroy(&b->list[i].xfer);
    gt_compressor_destroy(&b->list[i].comp);
    free(b->list[i].counts);
  }
  free(b->list);
  free(b->bucket_of);
  free(b->reported);
  free(b);
  *buckets = NULL;
  return GT_SUCCESS;
}

int gt_buckets_count(const gt_buckets *b) { return b->n; }

/* The matrices of bucket k: every parameter of two or more dimensions,
 * its local first dimension by the rest (a sharded axis holds blocks x
 * ceil(block / parts) entries, padding included). */
static int gt_bucket_matrices(const gt_buckets *b, const gt_bucket *k, gt_cmat *mats, int *n)
{
  *n = 0;
  for (int j = k->first; j < k->first + k->count; j++) {
    const gt_param *t = &b->params->list[j];
    if (t->ndim < 2)
      continue;
    long rows = t->full_shape[0];
    if (t->shard.axis == 0)
      rows = gt_shard_extent(&t->shard, rows);
    if (rows <= 0 || t->numel % (size_t)rows != 0)
      continue; /* not a plain matrix here: sent as a vector */
    mats[(*n)++] = (gt_cmat){t->offset - k->offset, (size_t)rows, t->numel / (size_t)rows};
  }
  return GT_SUCCESS;
}

int gt_buckets_compress(gt_buckets *b, const gt_compress_spec *spec, gt_algo algo,
                        uint64_t seed)
{
  if (spec->kind == GT_COMPRESS_NONE)
    return GT_SUCCESS;
  int dp_size = 1;
  GT_CALL_MPI(MPI_Comm_size(b->dp, &dp_size));
  if (dp_size == 1)
    return GT_SUCCESS;
  GT_CHECK(b->params->shard_size == 1, GT_ERR_INPUT,
           "[parallel] compress works on the all-reduce of zero = 0; ZeRO stages "
           "reduce-scatter the gradients instead (set zero = 0 or compress = none)");
  gt_cmat *mats = malloc(sizeof *mats * (size_t)(b->params->count + 1));
  GT_CHECK_ALLOC(mats, sizeof *mats * (size_t)(b->params->count + 1));
  int status = GT_SUCCESS;
  for (int i = 0; i < b->n && status == GT_SUCCESS; i++) {
    gt_bucket *k = &b->list[i];
    int nm = 0;
    status = gt_bucket_matrices(b, k, mats, &nm);
    if (status == GT_SUCCESS)
      status = gt_compressor_create(spec, b->dp, k->len, mats, nm, algo,
                                    seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1)), &k->comp);
    if (status == GT_SUCCESS)
      k->reducer = gt_compressor_reducer(k->comp);
  }
  free(mats);
  GT_CALL(status);
  return GT_SUCCESS;
}

size_t gt_buckets_state_len(const gt_buckets *b)
{
  size_t n = 0;
  for (int i = 0; i < b->n; i++)
    if (b->list[i].comp)
      n += gt_compressor_state_len(b->list[i].comp);
  return n;
}

void gt_buckets_state_copy(gt_buckets *b, float *buf, bool save)
{
  size_t at = 0;
  for (int i = 0; i < b->n; i++) {
    gt_compressor *c = b->list[i].comp;
    if (!c)
      continue;
    const size_t n = gt_compressor_state_len(c);
    if (save)
      memcpy(buf + at, gt_compressor_state(c), n * sizeof(float));
    else
      memcpy(gt_compressor_state(c), buf + at, n * sizeof(float));
    at += n;
  }
}

void gt_buckets_reset(gt_buckets *b)
{
  for (int i = 0; i < b->n; i++) {
    b->list[i].pending = b->list[i].count;
    b->list[i].started = false;
  }
  for (int i = 0; i < b->params->count; i++)
    b->reported[i] = false;
}

void gt_buckets_hold(gt_buckets *b, int param)
{
  if (param >= 0 && param < b->params->count)
    b->list[b->bucket_of[param]].held = true;
}

static int gt_bucket_start(gt_buckets *b, gt_bucket *k)
{
  float *slice = b->params->grads + k->offset;
  if (k->xfer && k->counts)
    GT_CALL(gt_xfer_reduce_scatter(k->xfer, slice, k->len, k->counts, b->dp));
  else if (k->xfer && k->comp)
    GT_CALL(gt_xfer_allreduce_custom(k->xfer, slice, k->len, b->dp, &k->reducer));
  else if (k->xfer)
    GT_CALL(gt_xfer_allreduce(k->xfer, slice, k->len, b->dp));
  k->started = true;
  return GT_SUCCESS;
}

/* Let MPI move the buckets in flight along (and start those whose
 * gradients the device has finished). */
int gt_buckets_progress(gt_buckets *b)
{
  if (b->coll)
    GT_CALL(gt_coll_progress(b->coll));
  return GT_SUCCESS;
}

int gt_buckets_ready(gt_buckets *b, int first, int count)
{
  for (int j = first; j < first + count; j++) {
    GT_ASSERT(j >= 0 && j < b->params->count);
    if (b->reported[j])
      continue;
    b->reported[j] = true;
    b->list[b->bucket_of[j]].pending--;
  }
  /* Start complete buckets in launch order only, so that every rank issues
   * the same collectives in the same order. */
  for (int i = 0; i < b->n; i++) {
    gt_bucket *k = &b->list[i];
    if (k->started || k->held)
      continue;
    if (k->pending > 0)
      break;
    GT_CALL(gt_bucket_start(b, k));
  }
  GT_CALL(gt_buckets_progress(b));
  return GT_SUCCESS;
}

/* Start what was not started (the held buckets too, or not) and wait. */
static int gt_buckets_complete(gt_buckets *b, bool held)
{
  for (int i = 0; i < b->n; i++)
    if (!b->list[i].started && (held || !b->list[i].held))
      GT_CALL(gt_bucket_start(b, &b->list[i]));
  for (int i = 0; i < b->n; i++)
    if (b->list[i].xfer && (held || !b->list[i].held))
      GT_CALL(gt_xfer_wait(b->list[i].xfer));
  return GT_SUCCESS;
}

int gt_buckets_wait(gt_buckets *b) { return gt_buckets_complete(b, false); }
int gt_buckets_wait_held(gt_buckets *b) { return gt_buckets_complete(b, true); }
