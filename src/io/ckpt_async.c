/*
 * ckpt_async.c - asynchronous checkpoints (checkpoint.h, docs/checkpoints.md
 * "Asynchronous checkpoints"): the main thread creates the file, its groups
 * and datasets and copies this rank's part of the state into pinned host
 * memory (the step waits for that much); a writer thread writes the copy at
 * the datasets' offsets with our own pwrite (no HDF5, no MPI: HDF5 is not
 * thread-safe here and the data reader uses it from its own thread); the
 * main thread finishes the file (checksums, attributes, close) at a later
 * step boundary, once every rank's writer is done; then every rank's
 * thread syncs the file and, once all have, rank 0's thread names it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gridtrain/bar.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/timer.h"
#include "ckpt_internal.h"
#include "ckpt_writer.h"
#include "h5util.h"
#include "write_scope.h"

/* The phases of a write in flight, each done on the writer thread and
 * agreed on at a later step boundary. */
enum {
  GT_AW_WRITE,   /* the data (gt_ckpt_write_jobs) */
  GT_AW_SYNC,    /* closed everywhere: every rank fsyncs the file */
  GT_AW_PUBLISH  /* synced everywhere: rank 0 names it (gt_ckpt_publish) */
};

struct gt_ckpt_async {
  gt_backend *be;          /* owns the arena (alloc_host) */
  void *arena_raw;         /* the pinned allocation; w.arena: its 4 KiB-aligned start */
  size_t arena_bytes;
  gt_ckpt_state st;        /* the state written (its pointers stay the caller's) */
  gt_ckpt_writer w;
  hid_t ids[GT_WF_N];
  MPI_Comm comm;
  pthread_t thread;
  bool busy;               /* a write begun and not finished */
  int phase;               /* what the thread does (GT_AW_*) */
  int th_status;           /* the sync's or rank 0's publishing's, with its message */
  char th_message[1024], th_origin[256];
  bool threaded;           /* the writer thread runs (else the jobs ran inline) */
  bool scope_fail;         /* GT_FAULT=ckpt_write_fail: the HDF5 part fails too */
  bool slow;               /* GT_FAULT=ckpt_async_slow: the writer waits 1 s first */
  atomic_bool done, cancel;
  pthread_mutex_t snap_mu; /* snapped, under it: the thread's copies made */
  pthread_cond_t snap_cv;
  bool snapped;
  char dir[GT_PATH_MAX], path[GT_PATH_MAX], tmp[GT_PATH_MAX + 16];
  int keep;
  long step;
  double t0, blocked, waited, finished;
};

/* The current error, kept across a cleanup that may set its own. */
typedef struct {
  int code;
  bool collective;
  char message[1024], origin[256];
} gt_saved_error;

static void gt_error_save(gt_saved_error *e, int code)
{
  e->code = code;
  e->collective = gt_error_is_collective();
  snprintf(e->message, sizeof e->message, "%s", gt_error_message());
  snprintf(e->origin, sizeof e->origin, "%s", gt_error_origin());
}

static int gt_error_restore(const gt_saved_error *e)
{
  gt_error_clear();
  gt_error_set(e->code, __FILE__, __LINE__, __func__, "%s", e->message);
  gt_error_set_origin(e->origin);
  gt_error_set_collective(e->collective);
  return e->code;
}

int gt_ckpt_async_create(gt_backend *be, gt_ckpt_async **out)
{
  *out = NULL;
  gt_ckpt_async *a = calloc(1, sizeof *a);
  GT_CHECK_ALLOC(a, sizeof *a);
  a->be = be;
  a->comm = MPI_COMM_NULL;
  for (int i = 0; i < GT_WF_N; i++)
    a->ids[i] = H5I_INVALID_HID;
  atomic_init(&a->done, false);
  atomic_init(&a->cancel, false);
  a->snapped = true;
  if (pthread_mutex_init(&a->snap_mu, NULL) != 0) {
    free(a);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot make a mutex");
  }
  if (pthread_cond_init(&a->snap_cv, NULL) != 0) {
    pthread_mutex_destroy(&a->snap_mu);
    free(a);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot make a condition variable");
  }
  *out = a;
  return GT_SUCCESS;
}

bool gt_ckpt_async_busy(const gt_ckpt_async *a) { return a && a->busy; }

/* The writer thread's copies are made (gt_ckpt_write_jobs). */
static void gt_ckpt_async_snapped(void *arg)
{
  gt_ckpt_async *a = arg;
  pthread_mutex_lock(&a->snap_mu);
  a->snapped = true;
  pthread_cond_broadcast(&a->snap_cv);
  pthread_mutex_unlock(&a->snap_mu);
}

void gt_ckpt_async_snapshot(gt_ckpt_async *a)
{
  if (!a)
    return;
  const double t0 = gt_now();
  pthread_mutex_lock(&a->snap_mu);
  const bool waited = !a->snapped;
  while (!a->snapped)
    pthread_cond_wait(&a->snap_cv, &a->snap_mu);
  pthread_mutex_unlock(&a->snap_mu);
  if (waited)
    a->blocked += gt_now() - t0;
}

static void *gt_ckpt_async_main(void *arg)
{
  gt_ckpt_async *a = arg;
  /* Linux: the writer does not preempt the step's compute where the cores
   * are all busy (best effort, as the data reader) */
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){0});
  for (int i = 0; a->slow && i < 100 && !atomic_load(&a->cancel); i++)
    nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
  gt_ckpt_write_jobs(&a->w, &a->cancel, gt_ckpt_async_snapped, a);
  atomic_store(&a->done, true);
  return NULL;
}

/* The thread's outcome, its error kept as text for the main thread
 * (errors are per thread). */
static void gt_ckpt_async_keep(gt_ckpt_async *a, int status)
{
  a->th_status = status;
  if (status != GT_SUCCESS) {
    snprintf(a->th_message, sizeof a->th_message, "%s", gt_error_message());
    snprintf(a->th_origin, sizeof a->th_origin, "%s", gt_error_origin());
    gt_error_clear();
  }
  atomic_store(&a->done, true);
}

/* Every rank, the file closed everywhere: what HDF5 wrote at the close
 * (metadata, on whichever rank it wrote it) durable, as H5Fflush's
 * MPI_File_sync would make it on the step. */
static void *gt_ckpt_async_sync_main(void *arg)
{
  gt_ckpt_async *a = arg;
  gt_ckpt_async_keep(a, gt_fsync_path(a->tmp, false));
  return NULL;
}

/* Rank 0's publishing (gt_ckpt_publish: fsync, latest.tmp, renames,
 * pruning) on the writer thread. */
static void *gt_ckpt_async_publish_main(void *arg)
{
  gt_ckpt_async *a = arg;
  gt_ckpt_async_keep(a, gt_ckpt_publish(a->dir, a->tmp, a->path, a->keep, a->step));
  return NULL;
}

/* Run fn(a) on the writer thread, with every signal blocked (the main
 * thread takes SIGUSR1/SIGTERM/SIGINT); without a thread, here. */
static void gt_ckpt_async_run(gt_ckpt_async *a, void *(*fn)(void *))
{
  atomic_store(&a->done, false);
  atomic_store(&a->cancel, false);
  sigset_t all, old;
  sigfillset(&all);
  const bool masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
  a->threaded = pthread_create(&a->thread, NULL, fn, a) == 0;
  if (masked)
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!a->threaded)
    fn(a);
}

static void gt_ckpt_async_join(gt_ckpt_async *a)
{
  if (a->threaded) {
    pthread_join(a->thread, NULL);
    a->threaded = false;
  }
}

/* Pinned host memory for the snapshot, kept from one checkpoint to the
 * next (a new allocation only when the state grew). */
static int gt_ckpt_async_arena(gt_ckpt_async *a)
{
  const size_t bytes = gt_ckpt_arena_floats(&a->w) * sizeof(float) + GT_DIO_ALIGN;
  if (bytes > a->arena_bytes) {
    if (a->arena_raw)
      GT_CALL(a->be->ops->free_host(a->be, a->arena_raw));
    a->arena_raw = NULL;
    a->arena_bytes = 0;
    GT_CALL(a->be->ops->alloc_host(a->be, bytes, &a->arena_raw));
    a->arena_bytes = bytes;
  }
  const uintptr_t p = (uintptr_t)a->arena_raw;
  a->w.arena = (float *)(void *)gt_align_up(p, GT_DIO_ALIGN);
  a->w.arena_cap = (a->arena_bytes - (size_t)((uintptr_t)a->w.arena - p)) / sizeof(float);
  return GT_SUCCESS;
}

/* The arena's first touch, on the writer thread: on a VM that hands freed
 * memory back to its host each new page costs a fault that the copy at the
 * first checkpoint would otherwise wait for (pinned memory is resident
 * already, and costs one pass). */
static void *gt_ckpt_async_touch(void *arg)
{
  gt_ckpt_async *a = arg;
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){0});
  volatile char *p = a->arena_raw;
  for (size_t off = 0; off < a->arena_bytes && !atomic_load(&a->cancel); off += GT_DIO_ALIGN)
    p[off] = 0;
  atomic_store(&a->done, true);
  return NULL;
}

int gt_ckpt_async_reserve(gt_ckpt_async *a, const gt_ckpt_state *st, MPI_Comm comm)
{
  GT_CHECK(!a->busy && !a->threaded, GT_ERR_INTERNAL,
           "internal error: checkpoint memory reserved while a write is in flight");
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  gt_ckpt_state now = *st;
  a->w = (gt_ckpt_writer){.st = &now, .path = "", .rank = rank, .step = -1, .defer = true,
                          .local = GT_SUCCESS, .fd = -1, .fd_direct = -1,
                          .plan = {.gsize = 1}};
  const size_t had = a->arena_bytes;
  int status = gt_ckpt_writer_init(&a->w, comm);
  if (status == GT_SUCCESS)
    status = gt_ckpt_async_arena(a);
  gt_ckpt_writer_free(&a->w);
  GT_CALL(gt_error_agree(status, comm));
  if (a->arena_bytes > had) {
    atomic_store(&a->done, false);
    atomic_store(&a->cancel, false);
    sigset_t all, old;
    sigfillset(&all);
    const bool masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    a->threaded = pthread_create(&a->thread, NULL, gt_ckpt_async_touch, a) == 0;
    if (masked)
      pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  return GT_SUCCESS;
}

/* Close the file on every rank after a failure everyone agreed on (the
 * error kept), remove it, and forget the write. Collective on a->comm. */
static int gt_ckpt_async_drop(gt_ckpt_async *a, int status, bool in_scope)
{
  gt_saved_error e;
  gt_error_save(&e, status);
  gt_write_scope_begin(false, a->comm, a->path);
  gt_h5_close_all(GT_ERR_INTERNAL, a->st.ntensors * GT_NKINDS, a->w.dsets);
  gt_h5_close_all(GT_ERR_INTERNAL, GT_WF_N, a->ids);
  (void)gt_write_scope_end();
  if (in_scope)
    gt_comm_foreign_end();
  int rank = 0;
  MPI_Comm_rank(a->comm, &rank);
  if (rank == 0)
    unlink(a->tmp); /* never leave a half-written file under a checkpoint's name */
  gt_ckpt_writer_free(&a->w);
  a->busy = false;
  return gt_error_restore(&e);
}

int gt_ckpt_async_begin(gt_ckpt_async *a, const char *dir, int keep, const gt_ckpt_meta *meta,
                        const gt_ckpt_state *st, MPI_Comm comm, char *path, size_t size)
{
  GT_CHECK(!a->busy, GT_ERR_INTERNAL,
           "internal error: an asynchronous checkpoint begun while %s is in flight", a->path);
  const double t0 = gt_now();
  gt_ckpt_async_join(a); /* the first touch of the memory (gt_ckpt_async_reserve) */
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL(gt_ckpt_path(dir, meta->step, path, size));
  GT_CALL(gt_ckpt_dir_prepare(dir, comm));
  snprintf(a->dir, sizeof a->dir, "%s", dir);
  snprintf(a->path, sizeof a->path, "%s", path);
  snprintf(a->tmp, sizeof a->tmp, "%s.tmp", path);
  a->keep = keep;
  a->step = meta->step;
  a->comm = comm;
  a->t0 = t0;
  a->st = *st;
  a->st.rank_state = NULL; /* written by begin: not the thread's */
  a->st.rank_tag = NULL;
  a->st.rank_loaded = NULL;
  gt_ckpt_state now = *st; /* begin writes the rank state from the caller's */
  a->w = (gt_ckpt_writer){.st = &now, .path = a->tmp, .rank = rank, .step = meta->step,
                          .defer = true, .local = GT_SUCCESS, .fd = -1, .fd_direct = -1,
                          .plan = {.gsize = 1}};
  for (int i = 0; i < GT_WF_N; i++)
    a->ids[i] = H5I_INVALID_HID;
  int status = gt_comm_foreign_begin(comm);
  const bool in_scope = status == GT_SUCCESS;
  if (status == GT_SUCCESS)
    status = gt_ckpt_writer_init(&a->w, comm);
  if (status == GT_SUCCESS)
    status = gt_ckpt_async_arena(a);
  status = gt_error_agree(status, comm);
  if (status != GT_SUCCESS) {
    if (in_scope)
      gt_comm_foreign_end();
    gt_ckpt_writer_free(&a->w);
    return gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                         path);
  }
  a->scope_fail = a->w.fail_writes;
  a->slow = gt_fault_hit("ckpt_async_slow", rank, meta->step);
  if (gt_fault_hit("ckpt_async_fail", rank, meta->step)) {
    a->w.fail_writes = true;
    a->w.fault = "ckpt_async_fail";
  }
  /* Every rank makes every collective call (write_scope.h); the first I/O
   * error, then a local failure, then HDF5's own error is the cause. */
  gt_write_scope_begin(a->scope_fail, comm, path);
  const char *base = strrchr(path, '/');
  gt_bar_begin(base ? base + 1 : path, st->ntensors, GT_BAR_ITEMS);
  status = gt_ckpt_write_begin(&a->w, meta, comm, a->ids);
  gt_bar_end();
  const int io = gt_write_scope_end();
  if (io != GT_SUCCESS)
    status = io;
  else if (a->w.local != GT_SUCCESS)
    status = gt_error_set(a->w.local, __FILE__, __LINE__, __func__, "%s", a->w.local_message);
  if (status != GT_SUCCESS)
    status = gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                           path);
  a->w.st = &a->st;
  status = gt_error_agree(status, comm);
  if (status != GT_SUCCESS)
    return gt_ckpt_async_drop(a, status, in_scope);
  if (in_scope)
    gt_comm_foreign_end();
  /* what the thread copies is the state as the work queued so far leaves it */
  status = a->w.ncopies ? a->be->ops->sync(a->be) : GT_SUCCESS;
  status = gt_error_agree(status, comm);
  if (status != GT_SUCCESS) {
    status = gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                           path);
    return gt_ckpt_async_drop(a, status, false);
  }
  a->busy = true;
  a->phase = GT_AW_WRITE;
  a->waited = a->finished = 0;
  a->snapped = a->w.ncopies == 0;
  a->blocked = gt_now() - t0;
  gt_ckpt_async_run(a, gt_ckpt_async_main);
  return GT_SUCCESS;
}

/* Every rank's writer is done (failed: on some rank it failed): the
 * checksums and the close, the agreement; then every rank's thread syncs
 * the file (GT_AW_SYNC), whose outcome a later settle agrees on.
 * Collective on a->comm. */
static int gt_ckpt_async_finish(gt_ckpt_async *a, bool failed)
{
  int status = gt_comm_foreign_begin(a->comm);
  const bool in_scope = status == GT_SUCCESS;
  gt_write_scope_begin(a->scope_fail, a->comm, a->path);
  if (status == GT_SUCCESS && !failed)
    status = gt_ckpt_write_end(&a->w, a->ids[GT_WF_FILE], a->comm, false);
  status = gt_h5_close_all(status, a->st.ntensors * GT_NKINDS, a->w.dsets);
  status = gt_h5_close_all(status, GT_WF_N, a->ids);
  const int io = gt_write_scope_end();
  if (a->w.io) /* the writer thread's failure came first */
    status = gt_error_set(GT_ERR_SYSTEM, __FILE__, __LINE__, __func__, "%s", a->w.io_message);
  else if (io != GT_SUCCESS)
    status = io;
  if (in_scope)
    gt_comm_foreign_end();
  if (status != GT_SUCCESS)
    status = gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                           a->path);
  status = gt_error_agree(status, a->comm);
  int rank = 0;
  MPI_Comm_rank(a->comm, &rank);
  gt_ckpt_writer_free(&a->w);
  if (status != GT_SUCCESS) {
    if (rank == 0)
      unlink(a->tmp);
    a->busy = false;
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  a->phase = GT_AW_SYNC;
  a->th_status = GT_SUCCESS;
  gt_ckpt_async_run(a, gt_ckpt_async_sync_main);
  return GT_SUCCESS;
}

/* The outcome of the thread's phase on every rank, agreed (a failure
 * names the rank's cause). Collective on a->comm. */
static int gt_ckpt_async_agree_thread(gt_ckpt_async *a)
{
  int status = GT_SUCCESS;
  if (a->th_status != GT_SUCCESS) {
    status = gt_error_set(a->th_status, __FILE__, __LINE__, __func__, "%s", a->th_message);
    gt_error_set_origin(a->th_origin);
  }
  return gt_error_agree(status, a->comm);
}

int gt_ckpt_async_settle(gt_ckpt_async *a, bool wait, gt_ckpt_async_report *report)
{
  if (report)
    memset(report, 0, sizeof *report);
  if (!a || !a->busy)
    return GT_SUCCESS;
  for (;;) {
    const double t_join = gt_now();
    if (wait)
      gt_ckpt_async_join(a);
    a->waited += gt_now() - t_join;
    /* one small agreement: is any rank's thread still at work, has any
     * failed (its writes, its sync, or rank 0's publishing) */
    const bool done = atomic_load(&a->done);
    const bool bad =
        done && (a->phase == GT_AW_WRITE ? a->w.io != 0 : a->th_status != GT_SUCCESS);
    int flags[2] = {done ? 0 : 1, bad ? 1 : 0};
    GT_CALL(gt_allreduce_int(flags, 2, MPI_MAX, a->comm));
    if (flags[0] && !flags[1])
      return GT_SUCCESS;
    if (flags[1]) /* no use writing more: the file is lost */
      atomic_store(&a->cancel, true);
    gt_ckpt_async_join(a);
    const double t_finish = gt_now();
    if (a->phase == GT_AW_WRITE) { /* written everywhere: finish, then sync */
      const int status = gt_ckpt_async_finish(a, flags[1] != 0);
      a->finished += gt_now() - t_finish;
      GT_CALL(status);
      if (!wait)
        return GT_SUCCESS;
      continue;
    }
    if (a->phase == GT_AW_SYNC) { /* synced everywhere: rank 0 publishes */
      int status = gt_ckpt_async_agree_thread(a);
      int rank = 0;
      MPI_Comm_rank(a->comm, &rank);
      a->finished += gt_now() - t_finish;
      if (status != GT_SUCCESS) {
        if (rank == 0)
          unlink(a->tmp);
        a->busy = false;
        return gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                             a->path);
      }
      a->phase = GT_AW_PUBLISH;
      a->th_status = GT_SUCCESS;
      if (rank == 0)
        gt_ckpt_async_run(a, gt_ckpt_async_publish_main);
      else
        atomic_store(&a->done, true);
      if (!wait)
        return GT_SUCCESS;
      continue;
    }
    /* published (or not: rank 0's publishing undid itself) */
    const int status = gt_ckpt_async_agree_thread(a);
    a->finished += gt_now() - t_finish;
    a->busy = false;
    if (report) {
      report->finished = status == GT_SUCCESS;
      snprintf(report->path, sizeof report->path, "%s", a->path);
      report->step = a->step;
      report->blocked_s = a->blocked;
      report->wait_s = a->waited;
      report->finish_s = a->finished;
      report->total_s = gt_now() - a->t0;
    }
    GT_CALL(status);
    return GT_SUCCESS;
  }
}

int gt_ckpt_async_destroy(gt_ckpt_async **ap)
{
  gt_ckpt_async *a = *ap;
  if (!a)
    return GT_SUCCESS;
  int status = GT_SUCCESS;
  if (!a->busy && a->threaded) { /* the first touch (gt_ckpt_async_reserve) */
    atomic_store(&a->cancel, true);
    gt_ckpt_async_join(a);
  }
  if (a->busy) { /* not finished (an error of this rank alone): the file stays a .tmp */
    atomic_store(&a->cancel, true);
    gt_ckpt_async_join(a);
    for (int d = 0; a->w.dsets && d < a->st.ntensors * GT_NKINDS; d++)
      a->w.dsets[d] = H5I_INVALID_HID; /* HDF5's to close, not ours: no collective here */
    gt_ckpt_writer_free(&a->w);
  }
  if (a->arena_raw)
    status = a->be->ops->free_host(a->be, a->arena_raw);
  pthread_cond_destroy(&a->snap_cv);
  pthread_mutex_destroy(&a->snap_mu);
  free(a);
  *ap = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}
