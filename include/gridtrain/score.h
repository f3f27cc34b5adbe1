/*
 * gridtrain/score.h - the loss of a model on given token sequences
 * (`gridtrain score`): mean cross-entropy and perplexity, at any layout.
 *
 * A scorer is the model of a checkpoint laid out as training would lay it
 * out on the job's ranks (gt_layout_resolve: dp replicas of pp stages of tp
 * ranks), run forward only through the pipeline executor (pipeline.h) as
 * the trainer's validation does. Each sequence (a file) is cut into windows
 * of at most T = [model] seq_len predictions that do not overlap: window w
 * feeds tokens [wT, wT + L) and predicts tokens [wT + 1, wT + L + 1), L = T
 * but for the last window, which is shorter when the sequence ends: every
 * token but the first of a sequence is predicted once; a sequence of fewer
 * than 2 tokens predicts nothing. The replicas share the windows; a pass of
 * the pipeline takes M = [data] microbatches micro-batches of the layout's
 * sequences per micro-batch, and the windows that do not fill one (the
 * last ones, the short ones, grouped by length) go through passes of one
 * window per micro-batch at their own length, filled up to M with
 * micro-batches that run and are not counted (gt_pipe_feed.counts).
 * Sequence parallelism and ZeRO do not apply (each replica holds the whole
 * weights of its stages; a forward pass keeps no optimizer state).
 * Losses are summed in double on the device, then over the ranks.
 */
#ifndef GRIDTRAIN_SCORE_H
#define GRIDTRAIN_SCORE_H

#include <mpi.h>
#include <stdint.h>

#include "gridtrain/config.h"

typedef struct gt_scorer gt_scorer;

/* Collective on world: the layout of cfg on the world's ranks, the grid,
 * the backend and this rank's part of the model, with the weights of the
 * checkpoint file ckpt (whose model must be cfg's: the caller checks the
 * shape). A layout that does not fit, a damaged or unreadable checkpoint
 * are errors every rank reports alike (collective). */
int gt_scorer_create(const gt_config *cfg, const char *ckpt, MPI_Comm world, gt_scorer **s);

/* Collective on world. NULL: nothing. */
int gt_scorer_destroy(gt_scorer **s);

/* Collective on world: the summed cross-entropy (nats) of every prediction
 * of nseq sequences, sequence i being len[i] token ids at ids + start[i]
 * (the same arrays on every rank; ids in [0, vocab): the caller checks),
 * into *loss_sum, and the number of predictions, sum of max(len - 1, 0),
 * into *predicted. The same values on every rank. */
int gt_scorer_run(gt_scorer *s, int nseq, const int32_t *ids, const long long *start,
                  const long long *len, double *loss_sum, long long *predicted);

#endif /* GRIDTRAIN_SCORE_H */
