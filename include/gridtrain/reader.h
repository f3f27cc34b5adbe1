/*
 * gridtrain/reader.h - read-ahead of training data: a rank's share of the
 * next batch is read on a reader thread while the current batch computes,
 * so that the step finds its tokens in memory.
 *
 * A reader serves one stream of batches of one dataset: batch reads
 * `count` samples from `first` (gt_dataset_read_samples with the reader's
 * T, shuffle and seed). gt_reader_get hands out a batch: the one read ahead
 * when it is that batch, else one read there and then on the calling
 * thread. gt_reader_ahead starts reading the next one in the background;
 * gt_reader_settle waits until that read is done. The tokens are those
 * gt_dataset_read_samples gives, whether read ahead or not.
 *
 * Threads, HDF5 and MPI. The reader thread has its own handle on the
 * dataset, opened through HDF5's POSIX driver (gt_dataset_open_posix), so
 * it makes no MPI call at any MPI thread level. HDF5 itself is not
 * thread-safe: between gt_reader_ahead and the gt_reader_settle that
 * follows it, the process makes no other HDF5 call on any thread (the
 * trainer reads ahead only inside a step's pipeline, which touches no file,
 * and settles before the step returns). A failed read ahead is dropped and
 * the batch is read again by gt_reader_get, which reports the error in the
 * usual way. The thread blocks every signal (signals.h's handlers run on
 * the other threads) and runs as SCHED_BATCH, so that where every core is
 * busy its wake-up does not preempt the step that woke it.
 */
#ifndef GRIDTRAIN_READER_H
#define GRIDTRAIN_READER_H

#include <stdbool.h>
#include <stdint.h>

#include "gridtrain/data.h"

typedef struct gt_reader gt_reader;

/* A reader of batches of `count` samples of T+1 tokens of ds (which must
 * outlive it; the reader reads through it on the calling thread), tokens
 * checked against vocab_limit. With ahead, a reader thread and a second
 * handle on the dataset; without, gt_reader_ahead does nothing. Not
 * collective. */
int gt_reader_create(gt_dataset *ds, int T, bool shuffle, unsigned long long seed,
                     long vocab_limit, int count, bool ahead, gt_reader **reader);

/* The batch whose first sample is `first`: *rows points at count x (T+1)
 * tokens, valid until the next gt_reader_get or gt_reader_ahead. Waits for
 * a read in flight. Errors as gt_dataset_read_samples. */
int gt_reader_get(gt_reader *r, long long first, const int32_t **rows);

/* Start reading the batch whose first sample is `first` on the reader
 * thread (nothing without one, or when it is already read or being read).
 * The HDF5 rule above holds until gt_reader_settle. */
int gt_reader_ahead(gt_reader *r, long long first);

/* Wait until the reader thread is idle. */
int gt_reader_settle(gt_reader *r);

/* Whether this reader has a thread. */
bool gt_reader_threaded(const gt_reader *r);

/* Stop the thread, close its handle, free; *reader becomes NULL. */
int gt_reader_destroy(gt_reader **reader);

#endif /* GRIDTRAIN_READER_H */
