/*
 * gridtrain/pace.h - how fast a training run goes and when it will end:
 * the model FLOP utilisation (MFU) and the estimated time to the last step
 * (ETA) of rank 0's log line and JSON records (metrics.h).
 *
 * MFU = the model FLOPs of a step (gt_gpt_flops_per_token x the global
 * batch's tokens) / the step's time / the run's peak FLOP/s. The run's peak
 * is the sum of its ranks' peaks; a rank's peak is
 *   - [run] peak_tflops when it is > 0 (every rank's, as given);
 *   - else, on a GPU, its dense peak for the run's precision from the table
 *     of peak.h, looked up by the GPU's name;
 *   - else, on the CPU, the sgemm calibration of peak.h with the rank's
 *     threads, made by one rank per node (the others sleep meanwhile) and
 *     shared with the node's ranks. Where a node's ranks have more threads
 *     than it has cores (node_cores), only node_cores / threads of them can
 *     compute at once: the node counts that many ranks' peaks.
 * When a rank has no peak (a GPU that the table does not know, or a failed
 * calibration) the run's MFU is unknown: null in the JSON records, left out
 * of the log line, and rank 0 says so once at the start.
 *
 * ETA = steps left x the mean step time: a mean of this run's step times
 * (step_ms: the step alone, without the evaluation and checkpoint pauses
 * between steps) that weighs recent steps more (each step back 0.9 times
 * the one after it). The run's first step is warm-up (first touch of
 * memory, start-up of the BLAS and the allocator) and is left out once a
 * later step has been timed.
 */
#ifndef GRIDTRAIN_PACE_H
#define GRIDTRAIN_PACE_H

#include <stdbool.h>

#include "gridtrain/backend.h"
#include "gridtrain/config.h"
#include "gridtrain/grid.h"
#include "gridtrain/metrics.h"

typedef struct gt_pace gt_pace;

/* Collective on grid->world and (the calibration's broadcast) grid->node:
 * find the run's peak as above for a step of flops_per_step model FLOPs and
 * the run's [run] steps. Rank 0 prints one line about the peak (or why
 * there is none) unless quiet. A failed calibration is no error (MFU is
 * then unknown, and the line says why). */
int gt_pace_create(const gt_config *cfg, const gt_grid *grid, gt_backend *be,
                   double flops_per_step, bool quiet, gt_pace **pace);

/* Fill st->mfu and st->eta_s from st->step and st->step_ms, and count the
 * step into the mean step time. Not collective. */
void gt_pace_step(gt_pace *pace, gt_step_stats *st);

/* The run's peak FLOP/s, all ranks; 0 when unknown. */
double gt_pace_peak(const gt_pace *pace);

void gt_pace_destroy(gt_pace **pace);

#endif /* GRIDTRAIN_PACE_H */
