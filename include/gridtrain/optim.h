/*
 * gridtrain/optim.h - AdamW with decoupled weight decay, the learning-rate
 * schedule, and global gradient-norm clipping.
 *
 * Schedule (0-based step s of `steps`): linear warm-up lr * (s+1) / warmup
 * for s < warmup, then cosine decay from lr to min_lr:
 *     min_lr + (lr - min_lr) * (1 + cos(pi * (s - warmup) / (steps - warmup))) / 2
 * Clipping (as torch.nn.utils.clip_grad_norm_): gradients are multiplied by
 * min(1, grad_clip / (norm + 1e-6)); grad_clip = 0 turns it off.
 * The moments m and v are fp32 buffers parallel to the parameters; the
 * update reads the fp32 master values and gradients and writes the master
 * and, in bf16/fp16, the compute copy (rounded). Queued on the compute
 * stream.
 */
#ifndef GRIDTRAIN_OPTIM_H
#define GRIDTRAIN_OPTIM_H

#include "gridtrain/params.h"

typedef struct gt_adamw_config {
  double lr, min_lr;
  long warmup, steps;
  double weight_decay, beta1, beta2, eps, grad_clip;
} gt_adamw_config;

typedef struct gt_adamw gt_adamw;

/* Learning rate at 0-based step s. */
double gt_lr_at(const gt_adamw_config *cfg, long s);

/* The clip factor: the multiplier for the gradients given their global
 * norm (of the unscaled gradients). */
double gt_clip_factor(const gt_adamw_config *cfg, double grad_norm);

/* Create the optimizer for params (moments allocated and zeroed on the
 * params' backend): for the owned piece of the flat buffers when params are
 * sharded (ZeRO, params.h), else for all of them. Not collective. */
int gt_adamw_create(gt_params *params, const gt_adamw_config *cfg, gt_adamw **opt);
int gt_adamw_destroy(gt_adamw **opt);

/* The moment buffers m and v (device) of the flat elements [lo, hi) of the
 * parameters (gt_adamw_range): entry k is element lo + k. */
void gt_adamw_moments(gt_adamw *opt, float **m, float **v);
void gt_adamw_range(const gt_adamw *opt, size_t *lo, size_t *hi);

/* One update at 0-based step s with learning rate lr, the gradients first
 * multiplied by grad_mult (the clip factor divided by the loss scale), of
 * the elements in the optimizer's range (a parameter cut by it is updated
 * in part, with its own decay rule). Bias correction uses t = s + 1. */
int gt_adamw_step(gt_adamw *opt, long s, double lr, double grad_mult);

#endif /* GRIDTRAIN_OPTIM_H */
