/*
 * gridtrain/layout.h - the resolved layout: what a configuration means on a
 * number of ranks, worked out once.
 *
 * A deck says what the user asked for: sizes that may be auto, a ZeRO
 * stage that does nothing with one data-parallel rank, sequence parallelism
 * that does nothing without tensor parallelism, a schedule as text. Every
 * part that needs the layout (the trainer, `gridtrain sample` and
 * `score`, the memory account, the planner's search and cost model, `plan
 * --memory`) gets it from gt_layout_resolve, so that they cannot disagree
 * about what runs:
 *
 *   dp, pp, tp     the grid sizes, auto sizes resolved (grid.h's rule)
 *   mbs, micro     sequences per micro-batch, micro-batches per step and
 *                  dp rank ([data] batch = dp x mbs x micro)
 *   schedule       [parallel] schedule, parsed and checked against pp,
 *                  micro and the layers (schedule.h)
 *   zero           the ZeRO stage as it applies: 0 when dp = 1
 *   seq_par        sequence parallelism as it applies: only when tp > 1
 *   recompute, dtype, dp_overlap   as the deck says
 *
 * The configuration keeps the model's shape and everything else; a layout
 * holds only the choices a planner varies. Nothing here is collective:
 * every rank resolves the same configuration alike, so a refusal is the
 * same error everywhere.
 */
#ifndef GRIDTRAIN_LAYOUT_H
#define GRIDTRAIN_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/config.h"
#include "gridtrain/schedule.h"
#include "gridtrain/tensor.h"

typedef struct gt_layout {
  int dp, pp, tp;
  int mbs;              /* sequences per micro-batch */
  int micro;            /* micro-batches per step and dp rank (m) */
  gt_schedule schedule; /* kind, chunks (V of interleaved:V, else 1), name */
  int zero;             /* 0..3; 0 when dp = 1 */
  gt_recompute recompute;
  bool seq_par;         /* sequence parallelism; only when tp > 1 */
  gt_dtype dtype;
  bool dp_overlap;      /* the gradient reduction overlaps the last backward */
} gt_layout;

/* The layout of cfg on `ranks` ranks: the sizes ([grid], 0 = auto: the
 * product of the fixed sizes must divide ranks, the rest goes to the first
 * auto size in the order dp, pp, tp, other auto sizes are 1), checked
 * against the model and the batch (heads divide dim, tp divides heads and
 * leaves every rank vocabulary rows, pp <= layers, batch a multiple of dp x
 * microbatches, a micro-batch's tokens a multiple of tp with sequence
 * parallelism) and the schedule against pp, micro and the layers.
 * GT_ERR_INPUT with what to change in the deck otherwise. Not collective. */
int gt_layout_resolve(const gt_config *cfg, int ranks, gt_layout *l);

/* Write the keys of l into cfg ([grid] dp, pp, tp; [data] batch,
 * microbatches; [parallel] schedule, zero, sequence_parallel, dp_overlap;
 * [model] recompute; [backend] precision): resolving cfg on dp x pp x tp
 * ranks gives l back when l is a resolved layout. */
void gt_layout_to_config(const gt_layout *l, gt_config *cfg);

/* Whether two layouts are the same choices. */
bool gt_layout_equal(const gt_layout *a, const gt_layout *b);

/* One line for tables: "bf16 compute, zero 1 over dp=2, recompute none,
 * 1f1b schedule, sequence parallel over tp" (the last part only with
 * sequence parallelism). */
void gt_layout_describe(const gt_layout *l, char *buf, size_t size);

#endif /* GRIDTRAIN_LAYOUT_H */
