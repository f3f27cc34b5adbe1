/*
 * timer.c - named timed events (see timer.h).
 */
#include "gridtrain/timer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/error.h"

#define GT_MAX_EVENTS 64

typedef struct {
  char name[48];
  gt_event_kind kind;
  double started;
  double step;
  double total;
  long count;
} gt_event_rec;

static gt_event_rec gt_events[GT_MAX_EVENTS];
static int gt_nevents;

/* Open events, innermost last. An event that opens inside another pauses
 * it: every second is charged to the innermost open event only, so the
 * events of a step add up to the time they cover (tensor-parallel
 * communication inside a forward is not counted as forward compute too). */
#define GT_MAX_DEPTH 16
static int gt_open[GT_MAX_DEPTH];
static int gt_depth;

double gt_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int gt_event(const char *name, gt_event_kind kind)
{
  for (int i = 0; i < gt_nevents; i++)
    if (strcmp(gt_events[i].name, name) == 0)
      return i;
  if (gt_nevents == GT_MAX_EVENTS)
    return GT_MAX_EVENTS - 1; /* full: fold into the last one */
  gt_event_rec *e = &gt_events[gt_nevents];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->kind = kind;
  return gt_nevents++;
}

static void gt_add(int id, double dt)
{
  gt_events[id].step += dt;
  gt_events[id].total += dt;
}

// ---- the device clock -------------------------------------------------------------

static const gt_timer_clock *gt_clock;
static int gt_clock_error; /* a marker failed: host times from then on */

/* One stretch of time in which `id` was the innermost event. */
typedef struct {
  int id;
  double host0, host1;
  int mark0, mark1;
} gt_span;

#define GT_MAX_SPANS 65536
static gt_span *gt_spans;
static int gt_nspans;
static int gt_mark_open = -1; /* marker at the last switch */

void gt_events_set_clock(const gt_timer_clock *clock)
{
  gt_clock = clock;
  gt_clock_error = GT_SUCCESS;
  gt_nspans = 0;
  gt_mark_open = -1;
}

static bool gt_clock_on(void) { return gt_clock && gt_clock_error == GT_SUCCESS; }

/* A switch of the innermost event at host time now: id (or -1) was
 * innermost since `started`. */
static void gt_switch(int id, double started, double now)
{
  if (!gt_clock_on()) {
    if (id >= 0)
      gt_add(id, now - started);
    return;
  }
  if (!gt_spans) {
    gt_spans = malloc(sizeof *gt_spans * GT_MAX_SPANS);
    if (!gt_spans) {
      gt_clock_error = GT_ERR_SYSTEM;
      if (id >= 0)
        gt_add(id, now - started);
      return;
    }
  }
  if (gt_nspans == GT_MAX_SPANS && gt_events_collect() != GT_SUCCESS)
    gt_clock_error = GT_ERR_SYSTEM;
  int mark = -1;
  if (gt_clock_on() && gt_clock->mark(gt_clock->ctx, &mark) != GT_SUCCESS)
    gt_clock_error = GT_ERR_DEVICE;
  if (!gt_clock_on()) {
    if (id >= 0)
      gt_add(id, now - started);
    return;
  }
  if (id >= 0 && gt_mark_open >= 0)
    gt_spans[gt_nspans++] = (gt_span){id, started, now, gt_mark_open, mark};
  else if (id >= 0)
    gt_add(id, now - started);
  gt_mark_open = mark;
}

int gt_events_collect(void)
{
  if (!gt_clock)
    return GT_SUCCESS;
  int status = gt_clock_error;
  for (int i = 0; i < gt_nspans && status == GT_SUCCESS; i++) {
    const gt_span *sp = &gt_spans[i];
    double t0, t1;
    status = gt_clock->when(gt_clock->ctx, sp->mark0, &t0);
    if (status == GT_SUCCESS && gt_events[sp->id].kind == GT_EV_COMPUTE) {
      status = gt_clock->when(gt_clock->ctx, sp->mark1, &t1);
      if (status == GT_SUCCESS)
        gt_add(sp->id, t1 > t0 ? t1 - t0 : 0.0);
    } else if (status == GT_SUCCESS) {
      const double from = t0 > sp->host0 ? t0 : sp->host0;
      gt_add(sp->id, sp->host1 > from ? sp->host1 - from : 0.0);
    }
  }
  gt_nspans = 0;
  if (status == GT_SUCCESS) /* markers are released; the open one too */
    status = gt_clock->reset(gt_clock->ctx);
  gt_mark_open = -1;
  if (status != GT_SUCCESS)
    gt_clock_error = status;
  GT_CALL(status);
  return GT_SUCCESS;
}

void gt_event_begin(int id)
{
  double now = gt_now();
  gt_switch(gt_depth > 0 ? gt_open[gt_depth - 1] : -1,
            gt_depth > 0 ? gt_events[gt_open[gt_depth - 1]].started : now, now);
  if (gt_depth < GT_MAX_DEPTH)
    gt_open[gt_depth++] = id;
  gt_events[id].started = now;
}

void gt_event_end(int id)
{
  double now = gt_now();
  gt_switch(id, gt_events[id].started, now);
  gt_events[id].count++;
  /* Close id (normally the innermost) and resume the event around it. */
  for (int i = gt_depth - 1; i >= 0; i--)
    if (gt_open[i] == id) {
      for (int j = i; j + 1 < gt_depth; j++)
        gt_open[j] = gt_open[j + 1];
      gt_depth--;
      break;
    }
  if (gt_depth > 0)
    gt_events[gt_open[gt_depth - 1]].started = now;
}

double gt_event_step_seconds(int id) { return gt_events[id].step; }

double gt_events_step_seconds(gt_event_kind kind)
{
  double s = 0;
  for (int i = 0; i < gt_nevents; i++)
    if (gt_events[i].kind == kind)
      s += gt_events[i].step;
  return s;
}

void gt_events_step_reset(void)
{
  /* What ran between steps (evaluation, checkpoints) is charged before the
   * step sums restart: to the run totals, not to the next step. A failing
   * clock falls back to host times by itself. */
  if (gt_clock && gt_nspans > 0)
    (void)gt_events_collect();
  for (int i = 0; i < gt_nevents; i++)
    gt_events[i].step = 0;
}

int gt_events_report(MPI_Comm comm, double wall_seconds, FILE *out)
{
  static const char *kind_name[GT_EV_NKINDS] = {"compute", "comm", "data", "idle", "other"};
  int rank, size;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  double tot[GT_MAX_EVENTS], mn[GT_MAX_EVENTS], mx[GT_MAX_EVENTS], sum[GT_MAX_EVENTS];
  for (int i = 0; i < gt_nevents; i++)
    tot[i] = gt_events[i].total;
  int n = gt_nevents;
  if (n == 0)
    return GT_SUCCESS;
  GT_CALL_MPI(MPI_Reduce(tot, mn, n, MPI_DOUBLE, MPI_MIN, 0, comm));
  GT_CALL_MPI(MPI_Reduce(tot, mx, n, MPI_DOUBLE, MPI_MAX, 0, comm));
  GT_CALL_MPI(MPI_Reduce(tot, sum, n, MPI_DOUBLE, MPI_SUM, 0, comm));
  if (rank != 0)
    return GT_SUCCESS;
  fprintf(out, "# time by event over %d ranks (seconds; share of %.2f s wall)\n", size,
          wall_seconds);
  fprintf(out, "# %-20s %-8s %10s %10s %10s %7s\n", "event", "kind", "min", "avg", "max",
          "avg%");
  for (int i = 0; i < n; i++) {
    double avg = sum[i] / size;
    fprintf(out, "  %-20s %-8s %10.3f %10.3f %10.3f %6.1f%%\n", gt_events[i].name,
            kind_name[gt_events[i].kind], mn[i], avg, mx[i],
            wall_seconds > 0 ? 100.0 * avg / wall_seconds : 0.0);
  }
  fflush(out);
  return GT_SUCCESS;
}
