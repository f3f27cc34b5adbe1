/*
 * local_tier.h - what the two halves of the trainer's node-local tier share
 * (internal to src/train): local_state.c writes the parts (and sets up the
 * directory and the partners), local_resume.c chooses and loads a state at
 * start-up (docs/checkpoints.md, "Node-local and partner copies").
 */
#ifndef GT_TRAIN_LOCAL_TIER_H
#define GT_TRAIN_LOCAL_TIER_H

#include "trainer_impl.h"

#include "gridtrain/ckpt_local.h"

#define GT_LOCAL_TAG 0x4c53 /* the tier's messages on the world */

_Static_assert(sizeof(gt_gpt_shape) <= GT_LOCAL_SHAPE_BYTES, "raise GT_LOCAL_SHAPE_BYTES");

struct gt_local_state {
  char dir[GT_PATH_MAX];
  float *buf;       /* this rank's part (host) */
  size_t cap;       /* floats */
  int partner;      /* world rank that keeps a copy of this rank's part, -1: none */
  int *senders;     /* world ranks whose partner this rank is */
  int nsenders;
  bool mapped;      /* partner and senders are set */
  gt_local_param *table; /* this rank's parameter table (count entries) */
};

/* The parameter table of a flat buffer (malloc'ed). Not collective. */
int gt_local_table_of(const gt_params *p, gt_local_param **out);

/* The header of this rank's part at the current step; share: the ranges
 * of its share (what it writes), else all it holds (what a resume fills).
 * Not collective. */
void gt_local_header_fill(gt_trainer *tr, gt_local_header *h, bool share);

/* The expanded local_dir, made on every node (tr->local). Collective on
 * world. */
int gt_local_open(gt_trainer *tr);

#endif /* GT_TRAIN_LOCAL_TIER_H */
