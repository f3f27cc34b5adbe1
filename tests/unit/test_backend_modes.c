/*
 * test_backend_modes.c - the asynchrony contract of backend.h and the two
 * test modes of the CPU backend that prove it.
 *
 * cpu-async: an op runs later, on a worker thread, no earlier than the delay
 * (here 20 ms) after it was queued (a latency: ops queued together run
 * together once it has passed). So a download read before its event
 * completes still holds the old bytes (the missing wait is visible); after
 * event_wait it holds the new ones. Events complete in stream order,
 * stream_wait orders a second stream after the first, event_elapsed sees
 * the delay, and an error in a queued op reaches the host at the next call.
 * cpu-guard: a host read of device memory outside an op dies of SIGSEGV
 * with one message that names the address and says what happened (checked
 * in a child process); copies through the backend's ops work.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_util.h"
#include "gridtrain/timer.h"

#define DELAY_US 20000.0

static void test_async(void)
{
  setenv("GT_CPU_ASYNC_DELAY_US", "20000", 1);
  gt_backend *be;
  if (gt_backend_create("cpu-async", 1, &be) != GT_SUCCESS) {
    tap_ok(false, "cpu-async: create: %s", gt_error_message());
    return;
  }
  float *dev;
  gt_device_event *a, *b;
  be->ops->alloc(be, 64 * sizeof(float), (void **)&dev);
  be->ops->event_create(be, &a);
  be->ops->event_create(be, &b);
  float host[64], back[64];
  for (int i = 0; i < 64; i++)
    host[i] = (float)i + 1;
  for (int i = 0; i < 64; i++)
    back[i] = -1;
  const double t0 = gt_now();
  be->ops->event_record(be, a, NULL);
  be->ops->upload(be, dev, host, sizeof host, NULL);
  be->ops->download(be, back, dev, sizeof back, NULL);
  be->ops->event_record(be, b, NULL);
  bool done_a = true, done_b = true;
  be->ops->event_query(be, a, &done_a);
  be->ops->event_query(be, b, &done_b);
  const bool stale = back[0] == -1 && back[63] == -1; /* read without waiting */
  tap_ok(!done_a && !done_b && stale,
         "cpu-async: right after queuing, the events are pending and the download's buffer "
         "still holds the old bytes (a missing wait is visible)");
  be->ops->event_wait(be, b);
  bool same = true;
  for (int i = 0; i < 64; i++)
    same &= back[i] == host[i];
  be->ops->event_query(be, a, &done_a);
  double dt = 0;
  be->ops->event_elapsed(be, a, b, &dt);
  tap_ok(same && done_a && gt_now() - t0 >= DELAY_US * 1e-6 * 0.99,
         "cpu-async: after event_wait the data is there, earlier events are complete, and "
         "it took at least the delay (%.1f ms)", 1e3 * (gt_now() - t0));
  tap_ok(dt >= 0 && dt < 10.0, "cpu-async: event_elapsed %.1f ms between the two markers",
         1e3 * dt);

  /* a second stream waits for the compute stream's event */
  gt_stream *s2;
  be->ops->stream_create(be, &s2);
  float v = 42, out = 0;
  be->ops->upload(be, dev, &v, sizeof v, NULL);
  be->ops->event_record(be, a, NULL);
  be->ops->stream_wait(be, s2, a);
  be->ops->download(be, &out, dev, sizeof out, s2);
  be->ops->event_record(be, b, s2);
  be->ops->event_wait(be, b);
  tap_ok(out == 42, "cpu-async: a stream that waits for another's event sees its work (%g)", out);

  /* an op that fails on the worker: the error reaches the host later */
  int queued = be->ops->cast(be, GT_I32, dev, GT_F32, dev, 4);
  int later = be->ops->sync(be);
  tap_ok(queued == GT_SUCCESS && later == GT_ERR_INTERNAL &&
             strstr(gt_error_message(), "cast from") != NULL,
         "cpu-async: a failing queued op returns at once and its error comes with the next "
         "wait (%s)", gt_error_message());
  gt_error_clear();
  be->ops->stream_destroy(be, s2);
  be->ops->event_destroy(be, a);
  be->ops->event_destroy(be, b);
  be->ops->free(be, dev);
  gt_backend_destroy(&be);
}

static void test_guard(void)
{
  gt_backend *be;
  if (gt_backend_create("cpu-guard", 1, &be) != GT_SUCCESS) {
    tap_ok(false, "cpu-guard: create: %s", gt_error_message());
    return;
  }
  float *dev;
  be->ops->alloc(be, 1000 * sizeof(float), (void **)&dev);
  float host[1000], back[1000];
  for (int i = 0; i < 1000; i++)
    host[i] = (float)i * 0.5f;
  int st = tu_upload(be, dev, host, sizeof host);
  if (st == GT_SUCCESS)
    st = tu_download(be, back, dev, sizeof back);
  tap_ok(st == GT_SUCCESS && memcmp(host, back, sizeof host) == 0 && !be->host_visible,
         "cpu-guard: uploads and downloads through the backend work; memory is not "
         "host-visible");
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    tap_ok(false, "pipe");
    return;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) { /* the child touches device memory from the host */
    dup2(pipefd[1], STDERR_FILENO);
    close(pipefd[0]);
    volatile float x = dev[3];
    (void)x;
    _exit(0); /* not reached */
  }
  close(pipefd[1]);
  char err[8192] = "";
  size_t len = 0;
  ssize_t r;
  while (len + 1 < sizeof err && (r = read(pipefd[0], err + len, sizeof err - 1 - len)) > 0)
    len += (size_t)r;
  err[len] = '\0';
  close(pipefd[0]);
  int wst = 0;
  waitpid(pid, &wst, 0);
  tap_ok(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGSEGV &&
             strstr(err, "device memory was touched from the host") &&
             strstr(err, "byte 12 of a 4000-byte device allocation"),
         "cpu-guard: a host read of device memory faults and says so, naming the address and "
         "the allocation");
  if (!strstr(err, "device memory was touched"))
    tap_diag("child stderr: %s", err);
  be->ops->free(be, dev);
  gt_backend_destroy(&be);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  test_async();
  test_guard();
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
