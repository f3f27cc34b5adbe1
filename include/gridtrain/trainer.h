/*
 * gridtrain/trainer.h - the training loop: process grid, backend, model,
 * optimizer and data put together, one optimizer step at a time.
 *
 * A step on every rank: zero the gradients; run this pipeline stage's
 * schedule (GPipe or 1F1B) over `microbatches` micro-batches of this DP
 * rank's sequences: forwards and backwards with activations and their
 * gradients sent between stages, tensor-parallel collectives inside the
 * layers, gradients accumulating without communication until the last
 * micro-batch, whose backward starts the bucketed DP all-reduce (each rank's
 * loss is scaled by 1/(global tokens), so the sum is the gradient of the
 * global mean loss); sum the tied embedding's two copies (pp > 1); global
 * norm over every parameter counted once, clipping, AdamW. Every DP rank
 * ends the step with bitwise-identical parameters.
 */
#ifndef GRIDTRAIN_TRAINER_H
#define GRIDTRAIN_TRAINER_H

#include <mpi.h>
#include <stdio.h>

#include "gridtrain/config.h"
#include "gridtrain/memory.h"
#include "gridtrain/grid.h"
#include "gridtrain/metrics.h"
#include "gridtrain/params.h"

typedef struct gt_trainer gt_trainer;

/* Collective on world: everything from the resolved configuration. Input
 * problems (layout, data, backend) are GT_ERR_INPUT errors that every rank
 * reports identically (collective). Prints the configuration table and the
 * layout on rank 0 unless quiet. Then resumes as [checkpoint] resume says:
 * auto loads the newest valid checkpoint of [checkpoint] dir when there is
 * one (warning about and skipping damaged ones; an error when every one is
 * damaged), PATH loads that file, never starts fresh. */
int gt_trainer_create(const gt_config *cfg, MPI_Comm world, bool quiet, gt_trainer **tr);

/* Collective on world. */
int gt_trainer_destroy(gt_trainer **tr);

/* Collective: run one optimizer step (the next one) and fill stats (same
 * values on every rank, except the per-rank time split). */
int gt_trainer_step(gt_trainer *tr, gt_step_stats *stats);

/* Collective: run the next step's passes. With pipedream-2bw at ZeRO stage
 * 0 a step's update is deferred into the next call, run before the first
 * forward that needs it, so that no stage waits for the others at a step's
 * end; the numbers are those of the update at the step's end. A step
 * completes in its own call when flush is true, before a checkpoint, an
 * evaluation, a sample and the run's end ([checkpoint] every, [run]), and
 * always with the other schedules. The stats of the steps whose updates
 * completed in the call go to out[0..*n), oldest first (*n from 0 to 2);
 * a step's times are those of the call that ran its passes. */
int gt_trainer_advance(gt_trainer *tr, bool flush, gt_step_stats out[2], int *n);

/* Collective: complete the update that gt_trainer_advance left in flight,
 * if any (*n: 0 or 1 stats into out). gt_trainer_save, _evaluate and
 * _gather_params do it first (dropping the stats). */
int gt_trainer_settle(gt_trainer *tr, gt_step_stats *out, int *n);

/* Collective: mean validation loss over [run] eval_batches global batches. */
int gt_trainer_evaluate(gt_trainer *tr, double *val_loss);

/* Collective: every remaining step with logging, metrics file, evaluation,
 * the final summary line and the timing table. */
int gt_trainer_run(gt_trainer *tr);

/* Collective on world: write a checkpoint of the state after the steps done
 * so far into dir (NULL: [checkpoint] dir), keeping [checkpoint] keep files.
 * The file's name is returned in path (size bytes). The file is complete
 * when this returns, whatever [checkpoint] async says (gt_trainer_run's own
 * checkpoints are the ones written in the background). */
int gt_trainer_save(gt_trainer *tr, const char *dir, char *path, size_t size);

/* Collective on world: load parameters, AdamW moments, step and data
 * position from the checkpoint file path, whatever layout wrote it. A model
 * shape that differs from the deck's is GT_ERR_INPUT; errors are collective.
 * On failure the state is unspecified (load another checkpoint). */
int gt_trainer_load(gt_trainer *tr, const char *path);

/* Optimizer steps done so far (the next step to run). Not collective. */
long gt_trainer_step_index(const gt_trainer *tr);

/* This rank's parameters (not collective). */
gt_params *gt_trainer_params(gt_trainer *tr);

/* The process grid (not collective). */
const gt_grid *gt_trainer_grid(const gt_trainer *tr);

/* This rank's memory account (memory.h) from what the trainer holds: the
 * model state by the ZeRO formulas for its parameter elements, its
 * activation slots and its staging buffers. Not collective. */
void gt_trainer_memory(const gt_trainer *tr, gt_mem_account *a);

/* Collective on world: rank 0 prints the measured peaks of every rank next
 * to the expected total: the backend allocator's high-water mark and the
 * process's peak resident set. */
int gt_trainer_report_memory_peaks(gt_trainer *tr, FILE *out);

/* The most micro-batches this rank held activations for at once in a step
 * so far, and their bytes (not collective). */
int gt_trainer_peak_activations(const gt_trainer *tr, int *microbatches, size_t *bytes);

/* Collective on world: rank 0 prints every pipeline stage's peak
 * activations. */
int gt_trainer_report_activations(gt_trainer *tr, FILE *out);

/* Collective on world: the whole model's parameters as full (unsharded)
 * tensors, one after the other in the order of gt_gpt_logical_param
 * (gt_gpt_param_count floats in all), into full on world rank 0 (other
 * ranks may pass NULL). */
int gt_trainer_gather_params(gt_trainer *tr, float *full);

#endif /* GRIDTRAIN_TRAINER_H */
