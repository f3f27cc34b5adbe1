/*
 * param_gather.c - ZeRO stage 3 weight gathers (see param_gather.h).
 */
#include "gridtrain/param_gather.h"

#include <stdlib.h>

#include "gridtrain/error.h"
#include "gridtrain/timer.h"

typedef enum { GT_PG_FREE = 0, GT_PG_FLIGHT, GT_PG_HELD } gt_pgstate;

typedef struct {
  void *buf;
  size_t cap; /* elements */
  gt_xfer *x;
  gt_pgstate state;
  int first, count; /* the unit it holds or gathers (FLIGHT: gathered or
                       in flight, not handed out) */
} gt_pgbuf;

struct gt_param_gather {
  gt_params *params;
  gt_coll *coll;
  MPI_Comm dp;
  int dp_size;
  int event;
  int nbuf;
  gt_pgbuf *bufs;
  size_t *counts; /* dp_size: each rank's block of the unit being started */
};

size_t gt_param_gather_plan_bytes(const size_t *sizes, int nbuf, gt_dtype dt)
{
  size_t total = 0;
  for (int i = 0; i < nbuf; i++)
    total += sizes[i];
  return total * gt_dtype_size(dt);
}

size_t gt_param_gather_buffer_bytes(const gt_param_gather *pg)
{
  size_t total = 0;
  for (int i = 0; i < pg->nbuf; i++)
    total += pg->bufs[i].cap;
  return total * gt_dtype_size(pg->params->dtype);
}

int gt_param_gather_create(gt_params *p, gt_coll *coll, MPI_Comm dp, const size_t *sizes, int nbuf,
                           int event, gt_param_gather **out)
{
  GT_CHECK(p->compute_sharded, GT_ERR_INTERNAL,
           "internal error: ZeRO 3 gathers for a compute copy that is not sharded");
  gt_param_gather *pg = calloc(1, sizeof *pg);
  GT_CHECK_ALLOC(pg, sizeof *pg);
  *out = pg;
  pg->params = p;
  pg->coll = coll;
  pg->dp = dp;
  pg->event = event;
  GT_CALL_MPI(MPI_Comm_size(dp, &pg->dp_size));
  pg->bufs = calloc((size_t)nbuf, sizeof *pg->bufs);
  pg->counts = calloc((size_t)pg->dp_size, sizeof *pg->counts);
  if (!pg->bufs || !pg->counts) {
    gt_param_gather_destroy(out);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory for the ZeRO 3 gather pool");
  }
  pg->nbuf = nbuf;
  gt_backend *be = p->be;
  const size_t es = gt_dtype_size(p->dtype);
  int status = GT_SUCCESS;
  for (int i = 0; i < nbuf && status == GT_SUCCESS; i++) {
    gt_pgbuf *b = &pg->bufs[i];
    b->cap = sizes[i];
    status = be->ops->alloc(be, (b->cap > 0 ? b->cap : 1) * es, &b->buf);
    if (status == GT_SUCCESS)
      status = gt_xfer_create(coll, b->cap * es, &b->x);
  }
  if (status != GT_SUCCESS) {
    gt_param_gather_destroy(out);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

int gt_param_gather_destroy(gt_param_gather **out)
{
  gt_param_gather *pg = *out;
  if (!pg)
    return GT_SUCCESS;
  int status = GT_SUCCESS;
  gt_backend *be = pg->params->be;
  for (int i = 0; i < pg->nbuf; i++) {
    gt_pgbuf *b = &pg->bufs[i];
    if (b->x) {
      const int s = gt_xfer_destroy(&b->x);
      status = status == GT_SUCCESS ? s : status;
    }
  }
  be->ops->sync(be); /* no queued work reads the buffers any more */
  for (int i = 0; i < pg->nbuf; i++)
    if (pg->bufs[i].buf)
      be->ops->free(be, pg->bufs[i].buf);
  free(pg->bufs);
  free(pg->counts);
  free(pg);
  *out = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The buffer holding or gathering unit (first, count) in state st, or NULL. */
static gt_pgbuf *gt_param_gather_find(gt_param_gather *pg, int first, int count, gt_pgstate st)
{
  for (int i = 0; i < pg->nbuf; i++) {
    gt_pgbuf *b = &pg->bufs[i];
    if (b->state == st && b->first == first && b->count == count)
      return b;
  }
  return NULL;
}

/* The smallest buffer in state st with room for n elements, or NULL. */
static gt_pgbuf *gt_param_gather_fit(gt_param_gather *pg, size_t n, gt_pgstate st)
{
  gt_pgbuf *best = NULL;
  for (int i = 0; i < pg->nbuf; i++) {
    gt_pgbuf *b = &pg->bufs[i];
    if (b->state == st && b->cap >= n && (!best || b->cap < best->cap))
      best = b;
  }
  return best;
}

/* Start gathering unit (first, count) into buffer b: this rank's block is
 * copied from its piece, the others are broadcast by their owners. */
static int gt_param_gather_start(gt_param_gather *pg, gt_pgbuf *b, int first, int count)
{
  const gt_params *p = pg->params;
  const size_t a = p->list[first].offset, n = gt_params_span(p, first, count);
  const size_t es = gt_dtype_size(p->dtype);
  GT_ASSERT(n <= b->cap);
  for (int r = 0; r < pg->dp_size; r++) {
    const size_t lo = p->shard_n * (size_t)r, hi = lo + p->shard_n;
    const size_t from = lo > a ? lo : a, to = hi < a + n ? hi : a + n;
    pg->counts[r] = from < to ? to - from : 0;
  }
  const size_t from = p->shard_lo > a ? p->shard_lo : a;
  const size_t own = pg->counts[p->shard_rank];
  gt_backend *be = p->be;
  if (own > 0) /* after the work that read this buffer's last unit */
    GT_CALL(be->ops->copy(be, (char *)b->buf + (from - a) * es, gt_params_compute_at(p, from),
                          own * es, NULL));
  GT_CALL(gt_xfer_allgather(b->x, b->buf, n, p->dtype, pg->counts, pg->dp));
  b->state = GT_PG_FLIGHT;
  b->first = first;
  b->count = count;
  return GT_SUCCESS;
}

int gt_param_gather_acquire(gt_param_gather *pg, int first, int count, int next_first,
                            int next_count, const void **base)
{
  const gt_params *p = pg->params;
  gt_pgbuf *b = gt_param_gather_find(pg, first, count, GT_PG_FLIGHT);
  if (!b) {
    const size_t n = gt_params_span(p, first, count);
    b = gt_param_gather_fit(pg, n, GT_PG_FREE);
    if (!b) { /* a prefetch nobody asked for: complete it and take its buffer */
      b = gt_param_gather_fit(pg, n, GT_PG_FLIGHT);
      GT_CHECK(b != NULL, GT_ERR_INTERNAL,
               "internal error: no ZeRO 3 gather buffer for %zu elements (parameter %d)", n,
               first);
      GT_CALL(gt_xfer_wait(b->x));
      b->state = GT_PG_FREE;
    }
    GT_CALL(gt_param_gather_start(pg, b, first, count));
  }
  if (pg->event >= 0)
    gt_event_begin(pg->event);
  const int status = gt_xfer_wait(b->x);
  if (pg->event >= 0)
    gt_event_end(pg->event);
  GT_CALL(status);
  b->state = GT_PG_HELD;
  *base = b->buf;
  if (next_count > 0 && !gt_param_gather_find(pg, next_first, next_count, GT_PG_FLIGHT) &&
      !gt_param_gather_find(pg, next_first, next_count, GT_PG_HELD)) {
    gt_pgbuf *nb = gt_param_gather_fit(pg, gt_params_span(p, next_first, next_count), GT_PG_FREE);
    if (nb)
      GT_CALL(gt_param_gather_start(pg, nb, next_first, next_count));
  }
  return GT_SUCCESS;
}

int gt_param_gather_release(gt_param_gather *pg, int first, int count)
{
  gt_pgbuf *b = gt_param_gather_find(pg, first, count, GT_PG_HELD);
  GT_CHECK(b != NULL, GT_ERR_INTERNAL,
           "internal error: release of ZeRO 3 parameters %d..%d that are not held", first,
           first + count - 1);
  b->state = GT_PG_FREE;
  return GT_SUCCESS;
}

int gt_param_gather_progress(gt_param_gather *pg)
{
  GT_CALL(gt_coll_progress(pg->coll));
  return GT_SUCCESS;
}

int gt_param_gather_drop(gt_param_gather *pg)
{
  for (int i = 0; i < pg->nbuf; i++) {
    gt_pgbuf *b = &pg->bufs[i];
    GT_CHECK(b->state != GT_PG_HELD, GT_ERR_INTERNAL,
             "internal error: ZeRO 3 parameters %d..%d still held at an update", b->first,
             b->first + b->count - 1);
    if (b->state == GT_PG_FLIGHT) {
      GT_CALL(gt_xfer_wait(b->x));
      b->state = GT_PG_FREE;
    }
  }
  return GT_SUCCESS;
}
