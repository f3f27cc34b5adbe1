/*
 * gridtrain/signals.h - SIGUSR1 and SIGTERM as "checkpoint and stop".
 *
 * The handler only records the signal; the training loop asks at every step
 * boundary, all ranks agree on it (one small all-reduce), write a checkpoint
 * and exit with GT_ERR_REQUEUE (exit status 3). More signals while that
 * happens are recorded and change nothing.
 */
#ifndef GRIDTRAIN_SIGNALS_H
#define GRIDTRAIN_SIGNALS_H

/* Install the handlers for SIGUSR1 and SIGTERM (SA_RESTART). */
int gt_signals_install(void);

/* The first signal caught since start (SIGUSR1 or SIGTERM), or 0. Safe to
 * call at any time. */
int gt_signal_pending(void);

/* "SIGUSR1", "SIGTERM", or "signal N". */
const char *gt_signal_name(int signo);

#endif /* GRIDTRAIN_SIGNALS_H */
