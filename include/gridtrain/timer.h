/*
 * gridtrain/timer.h - named timed events and the end-of-run table.
 *
 * An event is registered once by name with a kind; begin/end pairs around the
 * work accumulate both per step and over the run. The trainer reads the
 * per-step sums by kind (compute / communication / data) for its log line and
 * prints min/avg/max over ranks of the run totals at the end. Events are
 * per process and not thread-safe (call from the main thread).
 *
 * With an asynchronous device the host's clock says when work was queued,
 * not when it ran. A device clock (gt_events_set_clock) fixes that: at every
 * switch of the innermost event a marker goes into the compute stream, and
 * gt_events_collect charges
 *   - a compute event with the device time between the markers that bracket
 *     it (what the device did in it),
 *   - any other event with the part of its host time after the device had
 *     finished the work queued before it (a wait while the device still
 *     computes is compute, not communication or bubble).
 * With a synchronous device both rules give the host times.
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

/* A device clock: mark() queues a marker on the compute stream and returns
 * its handle; when() gives the gt_now() time at which the device passed it
 * (waiting for it); reset() releases every marker (the device is idle). */
typedef struct gt_timer_clock {
  void *ctx;
  int (*mark)(void *ctx, int *handle);
  int (*when)(void *ctx, int handle, double *t);
  int (*reset)(void *ctx);
} gt_timer_clock;

/* Attach a device clock (NULL: host times only). The clock must outlive its
 * use; detach it before destroying it. */
void gt_events_set_clock(const gt_timer_clock *clock);

/* Charge the intervals recorded since the last collect (blocks until the
 * device has passed their markers). Call before reading a step's sums. */
int gt_events_collect(void);

/* Seconds since an arbitrary origin (monotonic clock). */
double gt_now(void);

/* Id of the event named name (registered on first use with kind). */
int gt_event(const char *name, gt_event_kind kind);

/* Events nest: time is charged to the innermost open event only (an inner
 * event pauses the one around it), so the per-step sums of all events add
 * up to the time they cover. */
void gt_event_begin(int id);
void gt_event_end(int id);

/* Seconds of the current step in one event (after gt_events_collect). */
double gt_event_step_seconds(int id);

/* Seconds of the current step in events of a kind. */
double gt_events_step_seconds(gt_event_kind kind);

/* Start a new step: intervals not yet collected are charged (to the run
 * totals), then the per-step sums go back to zero. */
void gt_events_step_reset(void);

/* Collective on comm: rank 0 prints, for every event, the run total in
 * seconds as min / avg / max over the ranks of comm, and its share of
 * wall_seconds. Every rank must have registered the same events in the same
 * order. */
int gt_events_report(MPI_Comm comm, double wall_seconds, FILE *out);

#endif /* GRIDTRAIN_TIMER_H */
