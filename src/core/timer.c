/*
 * timer.c - named timed events (see timer.h).
 */
#include "gridtrain/timer.h"

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

static void gt_charge(int id, double now)
{
  double dt = now - gt_events[id].started;
  gt_events[id].step += dt;
  gt_events[id].total += dt;
}

void gt_event_begin(int id)
{
  double now = gt_now();
  if (gt_depth > 0)
    gt_charge(gt_open[gt_depth - 1], now);
  if (gt_depth < GT_MAX_DEPTH)
    gt_open[gt_depth++] = id;
  gt_events[id].started = now;
}

void gt_event_end(int id)
{
  double now = gt_now();
  gt_charge(id, now);
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
