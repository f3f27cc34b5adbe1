/*
 * gridtrain/signals.h - SIGUSR1, SIGTERM and SIGINT as "checkpoint and stop".
 *
 * The handler only records the signal; the training loop asks at every step
 * boundary, all ranks agree on it (one small all-reduce), write a checkpoint
 * and exit: with GT_ERR_REQUEUE (exit status 3) after SIGUSR1 or SIGTERM
 * (Slurm's time-limit warning and requeue), with GT_ERR_INTERRUPT (exit
 * status 130) after SIGINT (Ctrl-C: stop, and do not requeue). More signals
 * while that happens are recorded and change nothing, but for a second
 * SIGINT, which stops the process at once (exit status 130; the checkpoints
 * already written are complete, one being written stays a .tmp file).
 *
 * The handlers are installed first thing in main, before MPI_Init, so that no
 * signal is lost in start-up: one that arrives before the training loop is
 * acted on at its first step boundary. MPI or another library may install
 * handlers of its own in its initialisation; gt_signals_reclaim puts ours
 * back and keeps what was recorded meanwhile.
 */
#ifndef GRIDTRAIN_SIGNALS_H
#define GRIDTRAIN_SIGNALS_H

#include <stdbool.h>

/* Install the handlers for SIGUSR1, SIGTERM and SIGINT (SA_RESTART). Not
 * collective; async-signal-safe state only. */
int gt_signals_install(void);

/* Re-install any of our handlers that a library has replaced since
 * gt_signals_install (MPI_Init, CUDA, HDF5 may install their own); *replaced
 * (may be NULL) says whether one had been. Not collective. */
int gt_signals_reclaim(bool *replaced);

/* The first signal caught since start (SIGUSR1, SIGTERM or SIGINT), or 0.
 * Safe to call at any time. */
int gt_signal_pending(void);

/* How many of the three signals were caught since start. */
int gt_signal_count(void);

/* "SIGUSR1", "SIGTERM", "SIGINT", or "signal N". */
const char *gt_signal_name(int signo);

/* The status a run stopped by signo ends with: GT_ERR_INTERRUPT for SIGINT,
 * GT_ERR_REQUEUE otherwise. */
int gt_signal_status(int signo);

#endif /* GRIDTRAIN_SIGNALS_H */
