/*
 * gridtrain/trainer.h - the training loop: process grid, backend, model,
 * optimizer and data put together, one optimizer step at a time.
 *
 * A step on every rank: zero the gradients; for each of `microbatches`
 * micro-batches read this DP rank's sequences, forward, backward
 * (gradients accumulate, no communication); all-reduce the gradients over
 * dp (each rank's loss is scaled by 1/(global tokens), so the sum is the
 * gradient of the global mean loss); global norm, clipping, AdamW. Every DP
 * rank ends the step with bitwise-identical parameters.
 */
#ifndef GRIDTRAIN_TRAINER_H
#define GRIDTRAIN_TRAINER_H

#include <mpi.h>

#include "gridtrain/config.h"
#include "gridtrain/grid.h"
#include "gridtrain/metrics.h"
#include "gridtrain/params.h"

typedef struct gt_trainer gt_trainer;

/* Collective on world: everything from the resolved configuration. Input
 * problems (layout, data, backend) are GT_ERR_INPUT errors that every rank
 * reports identically (collective). Prints the configuration table and the
 * layout on rank 0 unless quiet. */
int gt_trainer_create(const gt_config *cfg, MPI_Comm world, bool quiet, gt_trainer **tr);

/* Collective on world. */
int gt_trainer_destroy(gt_trainer **tr);

/* Collective: run one optimizer step (the next one) and fill stats (same
 * values on every rank, except the per-rank time split). */
int gt_trainer_step(gt_trainer *tr, gt_step_stats *stats);

/* Collective: mean validation loss over [run] eval_batches global batches. */
int gt_trainer_evaluate(gt_trainer *tr, double *val_loss);

/* Collective: every remaining step with logging, metrics file, evaluation,
 * the final summary line and the timing table. */
int gt_trainer_run(gt_trainer *tr);

/* The model's parameters (not collective). */
gt_params *gt_trainer_params(gt_trainer *tr);

#endif /* GRIDTRAIN_TRAINER_H */
