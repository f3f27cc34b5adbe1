/*
 * clock.c - the timers' device clock on a backend's compute stream (see
 * timer.h): a pool of events recorded as markers, timed against a reference
 * event recorded while the device is idle.
 */
#include <stdlib.h>

#include "gridtrain/backend.h"
#include "gridtrain/error.h"
#include "gridtrain/timer.h"

typedef struct {
  gt_timer_clock clock; /* first: the clock's ctx is this struct */
  gt_backend *be;
  gt_device_event **pool;
  int used, cap;
  gt_device_event *ref;
  double t_ref; /* gt_now() when the device passed ref */
} gt_device_clock;

static int gt_clock_mark(void *ctx, int *handle)
{
  gt_device_clock *c = ctx;
  gt_backend *be = c->be;
  if (c->used == c->cap) {
    int cap = c->cap ? 2 * c->cap : 256;
    gt_device_event **bigger = realloc(c->pool, sizeof *bigger * (size_t)cap);
    GT_CHECK_ALLOC(bigger, sizeof *bigger * (size_t)cap);
    for (int i = c->cap; i < cap; i++)
      bigger[i] = NULL;
    c->pool = bigger;
    c->cap = cap;
  }
  if (!c->pool[c->used])
    GT_CALL(be->ops->event_create(be, &c->pool[c->used]));
  GT_CALL(be->ops->event_record(be, c->pool[c->used], NULL));
  *handle = c->used++;
  return GT_SUCCESS;
}

static int gt_clock_when(void *ctx, int handle, double *t)
{
  gt_device_clock *c = ctx;
  gt_backend *be = c->be;
  GT_ASSERT(handle >= 0 && handle < c->used);
  GT_CALL(be->ops->event_wait(be, c->pool[handle]));
  double s;
  GT_CALL(be->ops->event_elapsed(be, c->ref, c->pool[handle], &s));
  *t = c->t_ref + s;
  return GT_SUCCESS;
}

/* The device is idle once ref has run: its time is now. */
static int gt_clock_reset(void *ctx)
{
  gt_device_clock *c = ctx;
  gt_backend *be = c->be;
  c->used = 0;
  GT_CALL(be->ops->event_record(be, c->ref, NULL));
  GT_CALL(be->ops->event_wait(be, c->ref));
  c->t_ref = gt_now();
  return GT_SUCCESS;
}

int gt_backend_clock_create(gt_backend *be, gt_timer_clock **clock)
{
  gt_device_clock *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  c->be = be;
  c->clock = (gt_timer_clock){c, gt_clock_mark, gt_clock_when, gt_clock_reset};
  int status = be->ops->event_create(be, &c->ref);
  if (status == GT_SUCCESS)
    status = gt_clock_reset(c);
  if (status != GT_SUCCESS) {
    gt_timer_clock *tc = &c->clock;
    gt_backend_clock_destroy(&tc);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *clock = &c->clock;
  return GT_SUCCESS;
}

int gt_backend_clock_destroy(gt_timer_clock **clock)
{
  if (!*clock)
    return GT_SUCCESS;
  gt_device_clock *c = (gt_device_clock *)(*clock)->ctx;
  for (int i = 0; i < c->cap; i++)
    if (c->pool[i])
      c->be->ops->event_destroy(c->be, c->pool[i]);
  if (c->ref)
    c->be->ops->event_destroy(c->be, c->ref);
  free(c->pool);
  free(c);
  *clock = NULL;
  return GT_SUCCESS;
}
