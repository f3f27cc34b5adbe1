/*
 * grad_shards.c - ZeRO stage 2 gradient reduction (see grad_shards.h).
 */
#include "gridtrain/grad_shards.h"

#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"

typedef struct {
  int first, count;
  size_t off, len;         /* flat range of the unit */
  size_t own_off, own_len; /* this rank's block of it (unit-relative) */
  size_t *counts;          /* each dp rank's block */
  int slot;                /* pool slot holding it, -1: none */
  bool persistent;
} gt_gunit;

typedef struct {
  float *buf;
  size_t cap; /* elements */
  gt_xfer *x;
  int unit;      /* -1: free */
  bool reducing; /* its reduce-scatter is in flight */
  unsigned long long started;
} gt_gslot;

struct gt_grad_shards {
  gt_params *params;
  gt_coll *coll;
  MPI_Comm dp;
  int dp_rank, dp_size;
  int n;
  gt_gunit *units;
  int *unit_of; /* parameter -> unit, -1: none */
  int nslots;
  gt_gslot *slots;
  size_t largest, second; /* the largest pooled unit, the largest of the rest */
  unsigned long long issued;
  float *pbuf; /* the persistent unit's whole buffer */
  gt_xfer *px;
  int persistent; /* its unit, -1: none */
};

size_t gt_grad_shards_plan_bytes(size_t largest, size_t second, size_t persistent, int pool)
{
  pool = pool < 3 ? 3 : pool;
  return (largest + (size_t)(pool - 1) * second + persistent) * sizeof(float);
}

size_t gt_grad_shards_buffer_bytes(const gt_grad_shards *gs)
{
  const size_t plen = gs->persistent >= 0 ? gs->units[gs->persistent].len : 0;
  return gt_grad_shards_plan_bytes(gs->largest, gs->second, plen, gs->nslots);
}

/* Is slot s the one kept for the largest unit (which alone does not fit
 * the others)? */
static bool gt_grad_shards_reserved(const gt_grad_shards *gs, int s)
{
  return s == 0 && gs->largest > gs->second;
}

/* The kept piece's address of flat element off. */
static float *gt_grad_shards_piece(const gt_grad_shards *gs, size_t off)
{
  return gt_params_grad(gs->params, off);
}

int gt_grad_shards_create(gt_params *p, gt_coll *coll, MPI_Comm dp, const int *first,
                          const int *count, int n, int persistent, int pool, gt_grad_shards **out)
{
  GT_CHECK(p->grads_sharded, GT_ERR_INTERNAL,
           "internal error: ZeRO 2 gradients for parameters that are not sharded");
  gt_grad_shards *gs = calloc(1, sizeof *gs);
  GT_CHECK_ALLOC(gs, sizeof *gs);
  *out = gs;
  gs->params = p;
  gs->coll = coll;
  gs->dp = dp;
  gs->n = n;
  gs->persistent = -1;
  gs->nslots = pool < 3 ? 3 : pool;
  GT_CALL_MPI(MPI_Comm_rank(dp, &gs->dp_rank));
  GT_CALL_MPI(MPI_Comm_size(dp, &gs->dp_size));
  gs->units = calloc((size_t)(n > 0 ? n : 1), sizeof *gs->units);
  gs->unit_of = malloc(sizeof(int) * (size_t)(p->count > 0 ? p->count : 1));
  gs->slots = calloc((size_t)gs->nslots, sizeof *gs->slots);
  int status = gs->units && gs->unit_of && gs->slots
                   ? GT_SUCCESS
                   : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the ZeRO 2 gradient units");
  for (int j = 0; status == GT_SUCCESS && j < p->count; j++)
    gs->unit_of[j] = -1;
  const size_t lo = p->shard_lo, hi = p->shard_lo + p->shard_n;
  for (int i = 0; status == GT_SUCCESS && i < n; i++) {
    gt_gunit *u = &gs->units[i];
    u->first = first[i];
    u->count = count[i];
    u->off = p->list[first[i]].offset;
    u->len = gt_params_span(p, first[i], count[i]);
    u->slot = -1;
    u->persistent = first[i] == persistent;
    const size_t a = u->off > lo ? u->off : lo, e = u->off + u->len < hi ? u->off + u->len : hi;
    u->own_off = a < e ? a - u->off : 0;
    u->own_len = a < e ? e - a : 0;
    u->counts = calloc((size_t)gs->dp_size, sizeof *u->counts);
    if (!u->counts) {
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory for the ZeRO 2 gradient units");
      break;
    }
    for (int r = 0; r < gs->dp_size; r++) {
      const size_t plo = (size_t)r * p->shard_n, phi = plo + p->shard_n;
      const size_t ra = u->off > plo ? u->off : plo;
      const size_t re = u->off + u->len < phi ? u->off + u->len : phi;
      u->counts[r] = ra < re ? re - ra : 0;
    }
    for (int j = first[i]; j < first[i] + count[i]; j++)
      gs->unit_of[j] = i;
    if (u->persistent) {
      gs->persistent = i;
    } else if (u->len > gs->largest) {
      gs->second = gs->largest;
      gs->largest = u->len;
    } else if (u->len > gs->second) {
      gs->second = u->len;
    }
  }
  gt_backend *be = p->be;
  for (int s = 0; status == GT_SUCCESS && s < gs->nslots; s++) {
    gt_gslot *sl = &gs->slots[s];
    sl->unit = -1;
    sl->cap = s == 0 ? gs->largest : gs->second;
    status = be->ops->alloc(be, sl->cap * sizeof(float), (void **)&sl->buf);
    if (status == GT_SUCCESS)
      status = gt_xfer_create(coll, sl->cap * sizeof(float), &sl->x);
  }
  if (status == GT_SUCCESS && gs->persistent >= 0) {
    const size_t len = gs->units[gs->persistent].len;
    status = be->ops->alloc(be, len * sizeof(float), (void **)&gs->pbuf);
    if (status == GT_SUCCESS)
      status = gt_xfer_create(coll, len * sizeof(float), &gs->px);
  }
  if (status != GT_SUCCESS) {
    gt_grad_shards_destroy(out);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

int gt_grad_shards_destroy(gt_grad_shards **out)
{
  gt_grad_shards *gs = *out;
  if (!gs)
    return GT_SUCCESS;
  gt_backend *be = gs->params->be;
  for (int s = 0; gs->slots && s < gs->nslots; s++) {
    gt_xfer_destroy(&gs->slots[s].x);
    if (gs->slots[s].buf)
      be->ops->free(be, gs->slots[s].buf);
  }
  gt_xfer_destroy(&gs->px);
  if (gs->pbuf)
    be->ops->free(be, gs->pbuf);
  for (int i = 0; gs->units && i < gs->n; i++)
    free(gs->units[i].counts);
  free(gs->units);
  free(gs->unit_of);
  free(gs->slots);
  free(gs);
  *out = NULL;
  return GT_SUCCESS;
}

int gt_grad_shards_reset(gt_grad_shards *gs)
{
  if (gs->pbuf)
    GT_CALL(gs->params->be->ops->zero(gs->params->be, gs->pbuf,
                                      gs->units[gs->persistent].len * sizeof(float)));
  return GT_SUCCESS;
}

/* The reduction of slot s is complete: its sums of this rank's block go
 * back into the piece (queued after the result, on the compute stream). */
static int gt_grad_shards_retire(gt_grad_shards *gs, gt_gslot *sl)
{
  gt_backend *be = gs->params->be;
  gt_gunit *u = &gs->units[sl->unit];
  if (u->own_len)
    GT_CALL(be->ops->copy(be, gt_grad_shards_piece(gs, u->off + u->own_off), sl->buf + u->own_off,
                          u->own_len * sizeof(float), NULL));
  u->slot = -1;
  sl->unit = -1;
  sl->reducing = false;
  return GT_SUCCESS;
}

int gt_grad_shards_progress(gt_grad_shards *gs)
{
  GT_CALL(gt_coll_progress(gs->coll));
  for (int s = 0; s < gs->nslots; s++) {
    gt_gslot *sl = &gs->slots[s];
    if (sl->reducing && !gt_xfer_busy(sl->x))
      GT_CALL(gt_grad_shards_retire(gs, sl));
  }
  return GT_SUCCESS;
}

/* A free slot for a unit of len elements, waiting for the oldest reduction
 * among the slots it may use if they are all taken. The largest unit uses
 * slot 0 only; the others never use slot 0 when it is larger than the rest
 * (kept for the largest unit, so that the one-stage wte held through
 * backward always finds it). */
static int gt_grad_shards_free_slot(gt_grad_shards *gs, size_t len, int *slot)
{
  const bool big = len > gs->second;
  for (;;) {
    for (int s = 0; s < gs->nslots; s++)
      if (gs->slots[s].unit < 0 && big == gt_grad_shards_reserved(gs, s)) {
        *slot = s;
        return GT_SUCCESS;
      }
    int oldest = -1;
    for (int s = 0; s < gs->nslots; s++)
      if (gs->slots[s].reducing && big == gt_grad_shards_reserved(gs, s) &&
          (oldest < 0 || gs->slots[s].started < gs->slots[oldest].started))
        oldest = s;
    GT_CHECK(oldest >= 0, GT_ERR_INTERNAL,
             "internal error: every ZeRO 2 gradient buffer is held by a unit being computed");
    GT_CALL(gt_xfer_wait(gs->slots[oldest].x));
    GT_CALL(gt_grad_shards_retire(gs, &gs->slots[oldest]));
  }
}

int gt_grad_shards_acquire(gt_grad_shards *gs, int first, int count, float **base)
{
  GT_ASSERT(first >= 0 && first < gs->params->count);
  const int i = gs->unit_of[first];
  GT_CHECK(i >= 0 && gs->units[i].first == first && gs->units[i].count == count,
           GT_ERR_INTERNAL, "internal error: parameters %d..%d are not a gradient unit", first,
           first + count - 1);
  gt_gunit *u = &gs->units[i];
  if (u->persistent) {
    *base = gs->pbuf;
    return GT_SUCCESS;
  }
  if (u->slot >= 0 && gs->slots[u->slot].reducing) {
    /* the previous micro-batch's reduction of this unit: its sums must be in
     * the piece before this one's buffer starts from them */
    GT_CALL(gt_xfer_wait(gs->slots[u->slot].x));
    GT_CALL(gt_grad_shards_retire(gs, &gs->slots[u->slot]));
  }
  if (u->slot >= 0) { /* held since an earlier part of this backward */
    *base = gs->slots[u->slot].buf;
    return GT_SUCCESS;
  }
  int s = -1;
  GT_CALL(gt_grad_shards_free_slot(gs, u->len, &s));
  GT_ASSERT(gs->slots[s].cap >= u->len);
  gt_gslot *sl = &gs->slots[s];
  gt_backend *be = gs->params->be;
  /* zero, but for this rank's block: the piece's sums so far */
  GT_CALL(be->ops->zero(be, sl->buf, u->len * sizeof(float)));
  if (u->own_len)
    GT_CALL(be->ops->copy(be, sl->buf + u->own_off, gt_grad_shards_piece(gs, u->off + u->own_off),
                          u->own_len * sizeof(float), NULL));
  sl->unit = i;
  u->slot = s;
  *base = sl->buf;
  return GT_SUCCESS;
}

int gt_grad_shards_ready(gt_grad_shards *gs, int first, int count)
{
  for (int j = first; j < first + count; j++) {
    const int i = gs->unit_of[j];
    if (i < 0 || gs->units[i].first != j)
      continue;
    gt_gunit *u = &gs->units[i];
    if (u->persistent || u->slot < 0 || u->first + u->count > first + count)
      continue;
    gt_gslot *sl = &gs->slots[u->slot];
    if (sl->reducing)
      continue;
    GT_CALL(gt_xfer_reduce_scatter(sl->x, sl->buf, u->len, u->counts, gs->dp));
    sl->reducing = true;
    sl->started = gs->issued++;
  }
  GT_CALL(gt_grad_shards_progress(gs));
  return GT_SUCCESS;
}

int gt_grad_shards_wait(gt_grad_shards *gs)
{
  for (int s = 0; s < gs->nslots; s++) {
    gt_gslot *sl = &gs->slots[s];
    GT_CHECK(sl->unit < 0 || sl->reducing, GT_ERR_INTERNAL,
             "internal error: gradient unit %d was acquired but never reported ready",
             sl->unit);
  }
  for (int s = 0; s < gs->nslots; s++) {
    gt_gslot *sl = &gs->slots[s];
    if (!sl->reducing)
      continue;
    GT_CALL(gt_xfer_wait(sl->x));
    GT_CALL(gt_grad_shards_retire(gs, sl));
  }
  return GT_SUCCESS;
}

void gt_grad_shards_persistent(gt_grad_shards *gs, float **buf, size_t *n)
{
  *buf = gs->pbuf;
  *n = gs->pbuf ? gs->units[gs->persistent].len : 0;
}

int gt_grad_shards_finish_persistent(gt_grad_shards *gs)
{
  if (!gs->pbuf)
    return GT_SUCCESS;
  gt_gunit *u = &gs->units[gs->persistent];
  GT_CALL(gt_xfer_reduce_scatter(gs->px, gs->pbuf, u->len, u->counts, gs->dp));
  GT_CALL(gt_xfer_wait(gs->px));
  /* only this unit writes its part of the piece, which is still zero */
  if (u->own_len)
    GT_CALL(gs->params->be->ops->copy(gs->params->be, gt_grad_shards_piece(gs, u->off + u->own_off),
                                      gs->pbuf + u->own_off, u->own_len * sizeof(float), NULL));
  return GT_SUCCESS;
}
