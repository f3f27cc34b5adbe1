/*
 * gridtrain/timer.h - named timed events and the end-of-run table.
 *
 * An event is registered once by name with a kind; begin/end pairs around the
 * work accumulate both per step and over the run. The trainer reads the
 * per-step sums by kind (compute / communication / data) for its log line and
 * prints min/avg/max over ranks of the run totals at the end. Events are
 * per process and not thread-safe (call from the main thread).
 */
#ifndef GRIDTRAIN_TIMER_H
#define GRIDTRAIN_TIMER_H

#include <mpi.h>
#include <stdio.h>

typedef enum {
  GT_EV_COMPUTE = 0,
  GT_EV_COMM,
  GT_EV_DATA,
  GT_EV_IDLE,   /* waiting for work the schedule cannot give yet (bubble) */
  GT_EV_OTHER,
  GT_EV_NKINDS
} gt_event_kind;

/* Seconds since an arbitrary origin (monotonic clock). */
double gt_now(void);

/* Id of the event named name (registered on first use with kind). */
int gt_event(const char *name, gt_event_kind kind);

/* Events nest: time is charged to the innermost open event only (an inner
 * event pauses the one around it), so the per-step sums of all events add
 * up to the time they cover. */
void gt_event_begin(int id);
void gt_event_end(int id);

/* Seconds of the current step in one event. */
double gt_event_step_seconds(int id);

/* Seconds of the current step in events of a kind. */
double gt_events_step_seconds(gt_event_kind kind);

/* Start a new step: per-step sums go back to zero (run totals stay). */
void gt_events_step_reset(void);

/* Collective on comm: rank 0 prints, for every event, the run total in
 * seconds as min / avg / max over the ranks of comm, and its share of
 * wall_seconds. Every rank must have registered the same events in the same
 * order. */
int gt_events_report(MPI_Comm comm, double wall_seconds, FILE *out);

#endif /* GRIDTRAIN_TIMER_H */
