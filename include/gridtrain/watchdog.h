/*
 * gridtrain/watchdog.h - the hang watchdog: which rank hangs, in which
 * operation.
 *
 * A thread of its own on every rank watches the flight recorder
 * (flight.h). When this rank has had an operation open and no operation
 * begun or ended for `timeout` seconds, it is stuck: it says so on stderr
 * ("gridtrain: rank R: hang: ...") and alerts world ranks 0 and 1. The
 * diagnoser (rank 0; rank 1 when rank 0 does not act within 2 s: a frozen
 * or dead rank 0) asks every rank to dump its records to
 * DIR/flight-rank<R>.txt and to send it a summary of its channels; after
 * at most 4 s it prints one line that names the rank(s) that never entered,
 * never finished, or did not answer for (dead or frozen) the oldest
 * operation the stuck ranks wait in - communicator, sequence number,
 * operation, step - writes the same line to DIR/flight-diagnosis.txt, and
 * ends the job with MPI_Abort (exit status 4, GT_ERR_HANG). A rank that has
 * dumped and is not ended within 15 s ends itself.
 *
 * All the watchdog's messages travel on a duplicate of world of its own,
 * from its own thread (MPI_THREAD_MULTIPLE), with non-blocking calls and
 * deadlines: a stuck communicator, a rank that spins in compute or sleeps,
 * or a rank that does not answer cannot hold it up. Without
 * MPI_THREAD_MULTIPLE it works alone: a stuck rank dumps its own records,
 * prints its line and exits with status 4.
 */
#ifndef GRIDTRAIN_WATCHDOG_H
#define GRIDTRAIN_WATCHDOG_H

#include <mpi.h>

/* Start the watchdog: timeout in seconds (0: none, and nothing starts), the
 * directory of the dumps, and where this rank sits in the layout ("dp 1
 * pp 0 tp 1") for the messages. The host, pid and place of every rank are
 * gathered here, and rank 0 writes them to DIR/ranks.txt (which rank a
 * launcher's "PID n" was) unless DIR is ".". Collective on world. One watchdog per process:
 * a second start replaces the first (stopping it). */
int gt_watchdog_start(MPI_Comm world, double timeout, const char *dir, const char *where);

/* Stop the thread and free its communicator; a no-op when none runs. Call
 * it on every rank of the world of gt_watchdog_start (it frees a
 * communicator); it waits for no other rank. */
void gt_watchdog_stop(void);

#endif /* GRIDTRAIN_WATCHDOG_H */
