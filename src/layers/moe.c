/*
 * moe.c - the MLP of a mixture-of-experts block: the router in fp32, the
 * pairs in expert order, one product per expert and projection, the gated
 * sum back in token order; and the backward of each.
 */
#include "moe.h"

#include <math.h>

#include "gridtrain/error.h"

/* Sizes: N rows, R = N k the most pairs, G the rows of an expert's fc. */
typedef struct {
  int64_t N, C, E, k, F, G, R;
  size_t es; /* bytes of one element of the compute type */
} gt_moe_sizes;

static gt_moe_sizes gt_moe_sizes_of(const gt_layer_dims *d)
{
  gt_moe_sizes z;
  z.N = d->B * d->T;
  z.C = d->C;
  z.E = d->moe->E;
  z.k = d->moe->k;
  z.F = d->moe->F;
  z.G = d->kind.swiglu ? 2 * z.F : z.F;
  z.R = z.N * z.k;
  z.es = gt_dtype_size(d->dt);
  return z;
}

/* The pairs an expert keeps: ceil(factor N k / E), or -1 (all). */
static int64_t gt_moe_capacity(const gt_layer_dims *d, const gt_moe_sizes *z)
{
  const double f = d->moe->capacity_factor;
  if (f <= 0.0)
    return -1;
  return (int64_t)ceil(f * (double)z->N * (double)z->k / (double)z->E);
}

/* x and the router's weight in fp32 (the router runs in fp32 whatever the
 * compute type): the tensors themselves in fp32, else casts into s. */
static int gt_moe_router_inputs(gt_backend *be, const gt_moe_weights *w,
                                const gt_moe_scratch *s, const void *x, const gt_layer_dims *d,
                                const gt_moe_sizes *z, const float **x32, const float **w32)
{
  if (d->dt == GT_F32) {
    *x32 = x;
    *w32 = w->router_w;
    return GT_SUCCESS;
  }
  GT_CALL(be->ops->cast(be, GT_F32, s->x32, d->dt, x, (size_t)(z->N * z->C)));
  GT_CALL(be->ops->cast(be, GT_F32, s->w32, d->dt, w->router_w, (size_t)(z->E * z->C)));
  *x32 = s->x32;
  *w32 = s->w32;
  return GT_SUCCESS;
}

static char *gt_moe_at(const void *base, int64_t elems, size_t es)
{
  return (char *)base + (size_t)elems * es;
}

/* The experts' MLPs over their rows: h = xp fc_e^T + b, act, y = act
 * proj_e^T (+ proj_b on the lead rank). */
static int gt_moe_experts_forward(gt_backend *be, const gt_moe_weights *w,
                                  const gt_moe_acts *a, const gt_layer_dims *d,
                                  const gt_moe_sizes *z, bool lead, int64_t used)
{
  const gt_backend_ops *op = be->ops;
  const size_t es = z->es;
  /* expert e's kept rows follow the earlier experts' (the host's counts) */
  for (int64_t e = 0, r0 = 0, n; e < z->E; e++, r0 += n) {
    n = a->host[z->E + e];
    if (n == 0)
      continue;
    GT_CALL(op->linear_forward(be, d->dt, gt_moe_at(a->h, r0 * z->G, es),
                               gt_moe_at(a->xp, r0 * z->C, es),
                               gt_moe_at(w->fc_w, e * z->G * z->C, es),
                               w->fc_b ? gt_moe_at(w->fc_b, e * z->G, es) : NULL, NULL, n,
                               z->C, z->G));
    GT_CALL(gt_progress_poll(d->progress));
  }
  if (used > 0) {
    if (d->kind.swiglu)
      GT_CALL(op->swiglu_forward(be, d->dt, a->act, a->h, used, z->F));
    else
      GT_CALL(op->gelu_forward(be, d->dt, a->act, a->h, (size_t)(used * z->F)));
  }
  /* expert e's kept rows follow the earlier experts' (the host's counts) */
  for (int64_t e = 0, r0 = 0, n; e < z->E; e++, r0 += n) {
    n = a->host[z->E + e];
    if (n == 0)
      continue;
    const void *bias = lead && w->proj_b ? gt_moe_at(w->proj_b, e * z->C, es) : NULL;
    GT_CALL(op->linear_forward(be, d->dt, gt_moe_at(a->y, r0 * z->C, es),
                               gt_moe_at(a->act, r0 * z->F, es),
                               gt_moe_at(w->proj_w, e * z->C * z->F, es), bias, NULL, n, z->F,
                               z->C));
    GT_CALL(gt_progress_poll(d->progress));
  }
  return GT_SUCCESS;
}

int gt_moe_forward(gt_backend *be, const gt_moe_weights *w, const gt_moe_acts *a,
                   const void *x, const void *base, void *out, gt_layer_dims d, bool lead)
{
  const gt_moe_scratch *s = d.moe->scratch;
  GT_ASSERT(d.moe && d.moe->E >= 1 && d.moe->k >= 1 && d.moe->k <= d.moe->E);
  const gt_backend_ops *op = be->ops;
  const gt_moe_sizes z = gt_moe_sizes_of(&d);
  const float *x32, *w32;
  GT_CALL(gt_moe_router_inputs(be, w, s, x, &d, &z, &x32, &w32));
  GT_CALL(op->linear_forward(be, GT_F32, s->logits, x32, w32, NULL, NULL, z.N, z.C, z.E));
  GT_CALL(op->moe_route(be, a->probs, a->lse, a->sel, a->gate, s->logits, z.N, z.E, z.k));
  GT_CALL(op->moe_assign(be, a->pos, a->counts, a->counts + z.E, a->sel, z.N, z.k, z.E,
                         gt_moe_capacity(&d, &z)));
  /* the host sizes each expert's products: the one wait of the block */
  GT_CALL(op->download(be, a->host, a->counts, 2 * (size_t)z.E * sizeof(int32_t), NULL));
  GT_CALL(op->event_record(be, s->counted, NULL));
  GT_CALL(op->moe_permute(be, d.dt, a->xp, x, a->pos, z.N, z.k, z.C));
  GT_CALL(op->event_wait(be, s->counted));
  int64_t used = 0;
  for (int64_t e = 0; e < z.E; e++) {
    GT_CHECK(a->host[z.E + e] >= 0 && a->host[z.E + e] <= a->host[e] && a->host[e] <= z.R,
             GT_ERR_INTERNAL, "moe_assign gave expert %lld %d of %d pairs (of %lld)",
             (long long)e, a->host[z.E + e], a->host[e], (long long)z.R);
    used += a->host[z.E + e];
  }
  GT_CALL(gt_moe_experts_forward(be, w, a, &d, &z, lead, used));
  GT_CALL(op->moe_combine(be, d.dt, out, base, a->y, a->gate, a->pos, z.N, z.k, z.C));
  return GT_SUCCESS;
}

int gt_moe_backward(gt_backend *be, const gt_moe_weights *w, const gt_moe_grads *g,
                    const gt_moe_acts *a, const void *x, const void *dout, void *dx,
                    gt_layer_dims d, bool lead)
{
  const gt_moe_scratch *s = d.moe->scratch;
  const gt_backend_ops *op = be->ops;
  const gt_moe_sizes z = gt_moe_sizes_of(&d);
  const size_t es = z.es;
  int64_t used = 0;
  for (int64_t e = 0; e < z.E; e++)
    used += a->host[z.E + e];
  /* the statistics count each training micro-batch once, here: its one
   * backward (forwards may run again, or without a backward) */
  if (d.moe->load)
    for (int64_t e = 0; e < z.E; e++)
      d.moe->load[e] += a->host[e];
  if (d.moe->dropped)
    *d.moe->dropped += z.R - used;
  /* the gates: each expert row's output gradient, and the gates' own */
  GT_CALL(op->moe_combine_backward(be, d.dt, s->dy, s->dgate, dout, a->y, a->gate, a->pos,
                                   z.N, z.k, z.C));
  /* with tp each rank's y is a partial sum: the gates' gradients are the
   * sums of the partial dot products */
  if (d.tp && d.tp->size > 1)
    GT_CALL(gt_group_allreduce_sum(d.tp, s->dgate, (size_t)(z.N * z.k), GT_F32));
  void *dact = d.kind.swiglu ? s->dact : s->dh; /* GELU's backward runs in place */
  /* expert e's kept rows follow the earlier experts' (the host's counts) */
  for (int64_t e = 0, r0 = 0, n; e < z.E; e++, r0 += n) {
    n = a->host[z.E + e];
    if (n == 0)
      continue;
    GT_CALL(op->linear_backward(be, d.dt, gt_moe_at(dact, r0 * z.F, es),
                                g->proj_w + (size_t)(e * z.C * z.F),
                                g->proj_b ? g->proj_b + (size_t)(e * z.C) : NULL,
                                gt_moe_at(s->dy, r0 * z.C, es), gt_moe_at(a->act, r0 * z.F, es),
                                gt_moe_at(w->proj_w, e * z.C * z.F, es), n, z.F, z.C));
    GT_CALL(gt_progress_poll(d.progress));
  }
  if (used > 0) {
    if (d.kind.swiglu)
      GT_CALL(op->swiglu_backward(be, d.dt, s->dh, s->dact, a->h, used, z.F));
    else
      GT_CALL(op->gelu_backward(be, d.dt, s->dh, a->h, s->dh, (size_t)(used * z.F)));
  }
  /* expert e's kept rows follow the earlier experts' (the host's counts) */
  for (int64_t e = 0, r0 = 0, n; e < z.E; e++, r0 += n) {
    n = a->host[z.E + e];
    if (n == 0)
      continue;
    GT_CALL(op->linear_backward(be, d.dt, gt_moe_at(s->dxp, r0 * z.C, es),
                                g->fc_w + (size_t)(e * z.G * z.C),
                                g->fc_b ? g->fc_b + (size_t)(e * z.G) : NULL,
                                gt_moe_at(s->dh, r0 * z.G, es), gt_moe_at(a->xp, r0 * z.C, es),
                                gt_moe_at(w->fc_w, e * z.G * z.C, es), n, z.C, z.G));
    GT_CALL(gt_progress_poll(d.progress));
  }
  /* the router: the same on every rank of tp, so its input gradient joins
   * dx on the lead rank only */
  GT_CALL(op->moe_route_backward(be, s->logits, s->dgate, a->probs, a->lse, a->sel, a->gate,
                                 a->counts, z.N, z.E, z.k, d.moe->aux_scale,
                                 d.moe->z_scale));
  const float *x32, *w32;
  GT_CALL(gt_moe_router_inputs(be, w, s, x, &d, &z, &x32, &w32));
  GT_CALL(op->linear_backward(be, GT_F32, lead ? s->dx32 : NULL, g->router_w, NULL, s->logits,
                              x32, lead ? w32 : NULL, z.N, z.C, z.E));
  GT_CALL(op->moe_permute_backward(be, d.dt, dx, s->dxp, lead ? s->dx32 : NULL, a->pos, z.N,
                                   z.k, z.C));
  return GT_SUCCESS;
}
