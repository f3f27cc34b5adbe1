/*
 * scaler.c - dynamic loss scaling (see scaler.h).
 */
#include "gridtrain/scaler.h"

#include "gridtrain/error.h"

void gt_scaler_init(gt_scaler *s, bool dynamic, double init, double factor, double min,
                    long interval)
{
  *s = (gt_scaler){.dynamic = dynamic,
                   .scale = dynamic ? init : 1.0,
                   .factor = factor,
                   .min = min,
                   .interval = interval};
}

int gt_scaler_update(gt_scaler *s, bool finite, long step, bool *skip)
{
  *skip = false;
  if (!s->dynamic) {
    GT_CHECK(finite, GT_ERR_NUMERIC,
             "training diverged at step %ld: the gradients are not finite; lower [optim] lr "
             "or set [optim] grad_clip",
             step);
    return GT_SUCCESS;
  }
  if (finite) {
    if (++s->good >= s->interval) {
      s->scale *= s->factor;
      s->good = 0;
    }
    return GT_SUCCESS;
  }
  *skip = true;
  s->skipped++;
  s->good = 0;
  const double next = s->scale / s->factor;
  GT_CHECK(next >= s->min, GT_ERR_NUMERIC,
           "fp16 gradients overflow at step %ld even with loss scale %g: the scale would "
           "fall to %g, below [backend] loss_scale_min = %g; lower [optim] lr, use "
           "precision = bf16, or lower loss_scale_min",
           step, s->scale, next, s->min);
  s->scale = next;
  return GT_SUCCESS;
}
