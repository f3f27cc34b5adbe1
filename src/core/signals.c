/*
 * signals.c - record SIGUSR1 / SIGTERM for the training loop (signals.h).
 */
#include "gridtrain/signals.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "gridtrain/error.h"

static volatile sig_atomic_t gt_caught = 0;

static void gt_on_signal(int signo)
{
  if (gt_caught == 0)
    gt_caught = signo; /* the first one names the reason; later ones change nothing */
}

int gt_signals_install(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = gt_on_signal;
  sa.sa_flags = SA_RESTART; /* MPI and file I/O carry on where they were */
  sigemptyset(&sa.sa_mask);
  const int signals[] = {SIGUSR1, SIGTERM};
  for (int i = 0; i < 2; i++)
    GT_CHECK(sigaction(signals[i], &sa, NULL) == 0, GT_ERR_SYSTEM,
             "sigaction(%s) failed: %s", gt_signal_name(signals[i]), strerror(errno));
  return GT_SUCCESS;
}

int gt_signal_pending(void) { return (int)gt_caught; }

const char *gt_signal_name(int signo)
{
  static char other[32];
  switch (signo) {
  case SIGUSR1: return "SIGUSR1";
  case SIGTERM: return "SIGTERM";
  default: snprintf(other, sizeof other, "signal %d", signo); return other;
  }
}
