/*
 * signals.c - record SIGUSR1 / SIGTERM / SIGINT for the training loop
 * (signals.h).
 */
#include "gridtrain/signals.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gridtrain/error.h"

static volatile sig_atomic_t gt_caught = 0;
static volatile sig_atomic_t gt_ncaught = 0;

static const int gt_signals[] = {SIGUSR1, SIGTERM, SIGINT};
#define GT_NSIGNALS ((int)(sizeof gt_signals / sizeof gt_signals[0]))

static void gt_on_signal(int signo)
{
  if (signo == SIGINT && gt_caught == SIGINT) {
    /* A second Ctrl-C: stop now (async-signal-safe calls only). */
    static const char msg[] = "gridtrain: second SIGINT: stopping at once\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(130);
  }
  if (gt_caught == 0)
    gt_caught = signo; /* the first one names the reason; later ones change nothing */
  if (gt_ncaught < 1000)
    gt_ncaught = gt_ncaught + 1;
}

static int gt_install_one(int signo)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = gt_on_signal;
  sa.sa_flags = SA_RESTART; /* MPI and file I/O carry on where they were */
  sigemptyset(&sa.sa_mask);
  GT_CHECK(sigaction(signo, &sa, NULL) == 0, GT_ERR_SYSTEM, "sigaction(%s) failed: %s",
           gt_signal_name(signo), strerror(errno));
  return GT_SUCCESS;
}

int gt_signals_install(void)
{
  for (int i = 0; i < GT_NSIGNALS; i++)
    GT_CALL(gt_install_one(gt_signals[i]));
  /* A parent (a job script's trap, nohup) may have blocked them. */
  sigset_t set;
  sigemptyset(&set);
  for (int i = 0; i < GT_NSIGNALS; i++)
    sigaddset(&set, gt_signals[i]);
  GT_CHECK(sigprocmask(SIG_UNBLOCK, &set, NULL) == 0, GT_ERR_SYSTEM,
           "sigprocmask failed: %s", strerror(errno));
  return GT_SUCCESS;
}

int gt_signals_reclaim(bool *replaced)
{
  bool any = false;
  for (int i = 0; i < GT_NSIGNALS; i++) {
    struct sigaction now;
    GT_CHECK(sigaction(gt_signals[i], NULL, &now) == 0, GT_ERR_SYSTEM,
             "sigaction(%s) failed: %s", gt_signal_name(gt_signals[i]), strerror(errno));
    if ((now.sa_flags & SA_SIGINFO) || now.sa_handler != gt_on_signal) {
      any = true;
      GT_CALL(gt_install_one(gt_signals[i]));
    }
  }
  if (replaced)
    *replaced = any;
  return GT_SUCCESS;
}

int gt_signal_pending(void) { return (int)gt_caught; }

int gt_signal_count(void) { return (int)gt_ncaught; }

int gt_signal_status(int signo) { return signo == SIGINT ? GT_ERR_INTERRUPT : GT_ERR_REQUEUE; }

const char *gt_signal_name(int signo)
{
  static char other[32];
  switch (signo) {
  case SIGUSR1: return "SIGUSR1";
  case SIGTERM: return "SIGTERM";
  case SIGINT: return "SIGINT";
  default: snprintf(other, sizeof other, "signal %d", signo); return other;
  }
}
