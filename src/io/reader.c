/*
 * reader.c - read-ahead of batches on a reader thread (reader.h): two
 * buffers, the one handed out and the one the thread fills.
 */
#define _GNU_SOURCE /* SCHED_BATCH */
#include "gridtrain/reader.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>

#include "gridtrain/error.h"

/* A batch buffer: count x (T+1) tokens of the batch at `first`. */
typedef struct {
  int32_t *rows;
  long long first;
  bool valid;
} gt_batch;

struct gt_reader {
  gt_dataset *ds;  /* the caller's handle: reads on the calling thread */
  gt_dataset *own; /* the thread's (POSIX driver); NULL without a thread */
  int T, count;
  bool shuffle;
  unsigned long long seed;
  long vocab;
  gt_batch buf[2];
  int cur;         /* the buffer handed out; the thread fills the other */

  bool threaded;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool busy, quit; /* under mu: a read is asked for or running; stop */
  long long job;   /* under mu: its first sample */
};

static int gt_reader_read(gt_reader *r, gt_dataset *ds, gt_batch *b, long long first)
{
  b->valid = false;
  GT_CALL(gt_dataset_read_samples(ds, r->T, r->shuffle, r->seed, first, r->count, r->vocab,
                                  b->rows));
  b->first = first;
  b->valid = true;
  return GT_SUCCESS;
}

static void *gt_reader_main(void *arg)
{
  gt_reader *r = arg;
  /* Linux: a woken batch thread does not preempt the thread that woke it
   * (the step's compute) where the cores are all busy; best effort */
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){0});
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->busy && !r->quit)
      pthread_cond_wait(&r->cv, &r->mu);
    if (r->quit)
      break;
    const long long first = r->job;
    gt_batch *b = &r->buf[1 - r->cur]; /* cur does not change while busy */
    pthread_mutex_unlock(&r->mu);
    /* a failure leaves the buffer invalid: gt_reader_get reads it again on
     * the caller's thread and reports the error there (this thread's error
     * stack is its own, error.h) */
    if (gt_reader_read(r, r->own, b, first) != GT_SUCCESS)
      gt_error_clear();
    pthread_mutex_lock(&r->mu);
    r->busy = false;
    pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

int gt_reader_create(gt_dataset *ds, int T, bool shuffle, unsigned long long seed,
                     long vocab_limit, int count, bool ahead, gt_reader **reader)
{
  GT_ASSERT(ds != NULL && T >= 1 && count >= 1);
  *reader = NULL;
  gt_reader *r = calloc(1, sizeof *r);
  GT_CHECK_ALLOC(r, sizeof *r);
  *reader = r;
  *r = (gt_reader){.ds = ds, .T = T, .count = count, .shuffle = shuffle, .seed = seed,
                   .vocab = vocab_limit};
  const size_t n = (size_t)count * (size_t)(T + 1);
  for (int i = 0; i < (ahead ? 2 : 1); i++) {
    r->buf[i].rows = malloc(n * sizeof(int32_t));
    GT_CHECK_ALLOC(r->buf[i].rows, n * sizeof(int32_t));
  }
  if (!ahead)
    return GT_SUCCESS;
  GT_CALL(gt_dataset_open_posix(ds, &r->own));
  GT_CHECK(pthread_mutex_init(&r->mu, NULL) == 0, GT_ERR_SYSTEM, "cannot make a mutex");
  if (pthread_cond_init(&r->cv, NULL) != 0) {
    pthread_mutex_destroy(&r->mu);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot make a condition variable");
  }
  /* the thread starts with every signal blocked: they go to the others */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int rc = pthread_create(&r->thread, NULL, gt_reader_main, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot start the data reader thread (error %d)", rc);
  }
  r->threaded = true;
  return GT_SUCCESS;
}

bool gt_reader_threaded(const gt_reader *r) { return r->threaded; }

int gt_reader_settle(gt_reader *r)
{
  if (!r->threaded)
    return GT_SUCCESS;
  pthread_mutex_lock(&r->mu);
  while (r->busy)
    pthread_cond_wait(&r->cv, &r->mu);
  pthread_mutex_unlock(&r->mu);
  return GT_SUCCESS;
}

int gt_reader_get(gt_reader *r, long long first, const int32_t **rows)
{
  gt_batch *cur = &r->buf[r->cur];
  if (!(cur->valid && cur->first == first) && r->threaded) {
    GT_CALL(gt_reader_settle(r)); /* the thread is idle from here on */
    gt_batch *next = &r->buf[1 - r->cur];
    if (next->valid && next->first == first) {
      r->cur = 1 - r->cur;
      cur = next;
    }
  }
  if (!(cur->valid && cur->first == first))
    GT_CALL(gt_reader_read(r, r->ds, cur, first));
  *rows = cur->rows;
  return GT_SUCCESS;
}

int gt_reader_ahead(gt_reader *r, long long first)
{
  if (!r->threaded)
    return GT_SUCCESS;
  pthread_mutex_lock(&r->mu);
  const gt_batch *next = &r->buf[1 - r->cur];
  if (!r->busy && !(next->valid && next->first == first)) {
    r->job = first;
    r->busy = true;
    pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return GT_SUCCESS;
}

int gt_reader_destroy(gt_reader **reader)
{
  gt_reader *r = *reader;
  if (!r)
    return GT_SUCCESS;
  *reader = NULL;
  if (r->threaded) {
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
  }
  int status = gt_dataset_close(&r->own);
  free(r->buf[0].rows);
  free(r->buf[1].rows);
  free(r);
  GT_CALL(status);
  return GT_SUCCESS;
}
