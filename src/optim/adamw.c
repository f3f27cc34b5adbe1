/*
 * adamw.c - AdamW, learning-rate schedule and clipping (see optim.h).
 */
#include "gridtrain/optim.h"

#include <math.h>
#include <stdlib.h>

#include "gridtrain/error.h"

struct gt_adamw {
  gt_params *params;
  gt_adamw_config cfg;
  float *m, *v;   /* device: the moments of flat elements [lo, hi) */
  size_t lo, hi;  /* the owned piece (ZeRO) or the whole buffer */
};

double gt_lr_at(const gt_adamw_config *c, long s)
{
  if (s < c->warmup)
    return c->lr * (double)(s + 1) / (double)c->warmup;
  long span = c->steps - c->warmup;
  if (span <= 0)
    return c->lr;
  double progress = (double)(s - c->warmup) / (double)span;
  if (progress > 1.0)
    progress = 1.0;
  return c->min_lr + (c->lr - c->min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}

double gt_clip_factor(const gt_adamw_config *c, double grad_norm)
{
  if (c->grad_clip <= 0.0)
    return 1.0;
  double s = c->grad_clip / (grad_norm + 1e-6);
  return s < 1.0 ? s : 1.0;
}

int gt_adamw_create(gt_params *params, const gt_adamw_config *cfg, gt_adamw **opt)
{
  gt_adamw *o = calloc(1, sizeof *o);
  GT_CHECK_ALLOC(o, sizeof *o);
  o->params = params;
  o->cfg = *cfg;
  gt_backend *be = params->be;
  o->lo = params->shard_size > 1 ? params->shard_lo : 0;
  o->hi = params->shard_size > 1 ? params->shard_lo + params->shard_n : params->numel;
  size_t bytes = (o->hi - o->lo) * sizeof(float);
  int status = be->ops->alloc(be, bytes, (void **)&o->m);
  if (status == GT_SUCCESS)
    status = be->ops->alloc(be, bytes, (void **)&o->v);
  if (status == GT_SUCCESS)
    status = be->ops->zero(be, o->m, bytes);
  if (status == GT_SUCCESS)
    status = be->ops->zero(be, o->v, bytes);
  if (status != GT_SUCCESS) {
    gt_adamw_destroy(&o);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *opt = o;
  return GT_SUCCESS;
}

int gt_adamw_destroy(gt_adamw **opt)
{
  gt_adamw *o = *opt;
  if (!o)
    return GT_SUCCESS;
  gt_backend *be = o->params->be;
  if (o->m)
    be->ops->free(be, o->m);
  if (o->v)
    be->ops->free(be, o->v);
  free(o);
  *opt = NULL;
  return GT_SUCCESS;
}

void gt_adamw_moments(gt_adamw *o, float **m, float **v)
{
  *m = o->m;
  *v = o->v;
}

void gt_adamw_range(const gt_adamw *o, size_t *lo, size_t *hi)
{
  *lo = o->lo;
  *hi = o->hi;
}

int gt_adamw_step(gt_adamw *o, long s, double lr, double grad_mult)
{
  const gt_adamw_config *c = &o->cfg;
  gt_params *p = o->params;
  gt_backend *be = p->be;
  const double t = (double)(s + 1);
  const float bc1 = (float)(1.0 - pow(c->beta1, t));
  const float bc2 = (float)(1.0 - pow(c->beta2, t));
  for (int i = 0; i < p->count; i++) {
    /* the part of the parameter in [lo, hi): a ZeRO piece may cut it */
    gt_param *t_ = &p->list[i];
    const size_t a = t_->offset > o->lo ? t_->offset : o->lo;
    const size_t b = t_->offset + t_->numel < o->hi ? t_->offset + t_->numel : o->hi;
    if (a >= b)
      continue;
    void *compute = p->dtype == GT_F32 ? NULL : gt_params_compute_at(p, a);
    GT_CALL(be->ops->adamw(be, gt_params_master(p, a), gt_params_grad(p, a), o->m + (a - o->lo),
                           o->v + (a - o->lo), compute, p->dtype, b - a, (float)lr,
                           (float)c->beta1, (float)c->beta2, (float)c->eps,
                           t_->decay ? (float)c->weight_decay : 0.0f, bc1, bc2,
                           (float)grad_mult));
  }
  return GT_SUCCESS;
}
