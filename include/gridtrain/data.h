/*
 * gridtrain/data.h - token datasets in HDF5 and the order of sequences.
 *
 * A dataset is a 1-D integer HDF5 dataset of tokens (uint8 or uint16 from
 * `gridtrain ingest`, any integer type accepted) with an integer attribute
 * vocab_size (on the dataset, else on the file's root group). A spec names it
 * as "FILE.h5" (the default dataset given by the caller, else /tokens) or
 * "FILE.h5:/path/to/dataset".
 *
 * Training reads sequences of T+1 tokens: sequence s covers tokens
 * [s*T, s*T + T], so there are nseq = (ntokens - 1) / T of them, and the
 * targets of a sequence are its inputs shifted by one. Sample number g of
 * the whole run (g = step * batch + position in the global batch) reads
 * sequence gt_order_sequence(seed, nseq, g): epoch g / nseq visits every
 * sequence once in an order that is a pure function of (seed, epoch), so a
 * restarted run continues the same stream, whatever the layout.
 */
#ifndef GRIDTRAIN_DATA_H
#define GRIDTRAIN_DATA_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gt_dataset gt_dataset;

/* Collective on comm: open the dataset named by spec on every rank (parallel
 * HDF5, MPI-IO driver). default_dset is tried when spec has no ":/path"
 * (for example "/train/tokens"), then "/tokens". Problems (missing file, not
 * HDF5, no such dataset, not 1-D integers, no vocab_size) are GT_ERR_INPUT,
 * reported identically on every rank. */
int gt_dataset_open(const char *spec, const char *default_dset, MPI_Comm comm,
                    gt_dataset **ds);

/* Not collective: a second handle on ds's dataset, opened alone through
 * HDF5's POSIX driver, so that its reads make no MPI call (a reader thread's
 * handle, reader.h). Close it with gt_dataset_close. */
int gt_dataset_open_posix(const gt_dataset *ds, gt_dataset **copy);

/* Collective on the communicator it was opened on (not collective for a
 * gt_dataset_open_posix handle): close and free, set *ds to NULL. */
int gt_dataset_close(gt_dataset **ds);

/* "data/kjv.h5:/train/tokens" */
const char *gt_dataset_name(const gt_dataset *ds);
long long gt_dataset_ntokens(const gt_dataset *ds);
long gt_dataset_vocab(const gt_dataset *ds);

/* Number of training sequences of T+1 tokens: (ntokens - 1) / T. */
long long gt_dataset_nseq(const gt_dataset *ds, int T);

/* Not collective (independent reads): read `count` sequences of T+1 tokens
 * for samples first, first+1, ..., first+count-1 into out (count x (T+1)).
 * With shuffle, sample g reads sequence gt_order_sequence(seed, nseq, g);
 * without, sequence g % nseq. The reads go through the file in order, and
 * sequences that lie next to each other in the file (all of them, without
 * shuffle, up to the end of the data) are one read of up to 2^20 tokens.
 * A token outside [0, vocab_limit) is GT_ERR_INPUT naming the first such
 * token in sample order. */
int gt_dataset_read_samples(gt_dataset *ds, int T, bool shuffle,
                            unsigned long long seed, long long first, int count,
                            long vocab_limit, int32_t *out);

/* The sequence that sample g reads: a permutation of [0, nseq) for each
 * epoch g / nseq, chosen by (seed, epoch). Pure function; nseq >= 1. */
long long gt_order_sequence(unsigned long long seed, long long nseq, long long g);

#endif /* GRIDTRAIN_DATA_H */
