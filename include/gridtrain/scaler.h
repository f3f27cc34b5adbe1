/*
 * gridtrain/scaler.h - dynamic loss scaling for fp16 training.
 *
 * fp16 has 5 exponent bits: gradients of small losses underflow to zero.
 * The loss (and so every gradient) is multiplied by a scale S; the
 * optimizer divides it out again. When a step's gradients hold inf or NaN
 * the step is skipped (the weights stay as they are) and S is divided by
 * `factor`; after `interval` good steps in a row S is multiplied by it. A
 * scale below `min` is an error that names the step. bf16 and fp32 train
 * with S = 1 and no skipping (their range is fp32's): there a non-finite
 * gradient is an error, as before.
 */
#ifndef GRIDTRAIN_SCALER_H
#define GRIDTRAIN_SCALER_H

#include <stdbool.h>

typedef struct gt_scaler {
  bool dynamic;   /* fp16 */
  double scale;   /* S */
  double factor;  /* growth and back-off */
  double min;     /* smallest allowed S */
  long interval;  /* good steps before S grows */
  long good;      /* good steps since S last changed */
  long skipped;   /* steps skipped over the run (a checkpoint keeps it) */
} gt_scaler;

/* dynamic: scale starts at init; otherwise S = 1 for good. */
void gt_scaler_init(gt_scaler *s, bool dynamic, double init, double factor, double min,
                    long interval);

/* Account for step `step` whose gradients were finite (or not): *skip says
 * whether the optimizer must skip it. A non-finite step without dynamic
 * scaling, or one that takes S below min, is a GT_ERR_NUMERIC error (set,
 * not collective: every rank has the same inputs and gets the same
 * verdict). */
int gt_scaler_update(gt_scaler *s, bool finite, long step, bool *skip);

#endif /* GRIDTRAIN_SCALER_H */
