/*
 * lm_head.c - final norm, the LM head (tied to the token embedding or its own), and
 * the vocabulary-parallel softmax cross-entropy.
 */
#include "gridtrain/error.h"
#include "gridtrain/layers.h"
#include "norm.h"
#include "seq_par.h"

int gt_lm_head_logits(gt_backend *be, const void *wte, const void *lnf_w, const void *lnf_b,
                      const gt_head_acts *a, const void *x, gt_head_dims d)
{
  const gt_backend_ops *op = be->ops;
  int64_t r0, ns;
  const bool sp = gt_sp_on(d.tp, d.sp, d.N, &r0, &ns);
  GT_CALL(gt_norm_forward(be, d.dt, d.norm, a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b,
                          ns, d.C));
  const void *lnf = a->lnf;
  if (sp) { /* the head sees every row */
    GT_CALL(gt_group_allgather(d.tp, a->lnf, d.sp->full, (size_t)(ns * d.C), d.dt));
    lnf = d.sp->full;
  }
  GT_CALL(op->linear_forward(be, d.dt, a->logits, lnf, wte, NULL, NULL, d.N, d.C, d.vocab_rows));
  return GT_SUCCESS;
}

int gt_lm_head_forward(gt_backend *be, const void *wte, const void *lnf_w, const void *lnf_b,
                       const gt_head_acts *a, const void *x, const int32_t *targets,
                       float *stats_all, gt_head_dims d, float dlogit_scale)
{
  const gt_backend_ops *op = be->ops;
  const int P = d.tp ? d.tp->size : 1;
  GT_CALL(gt_lm_head_logits(be, wte, lnf_w, lnf_b, a, x, d));
  GT_CALL(op->xent_partial(be, d.dt, a->stats, a->logits, targets, d.N, d.vocab_real, d.vocab_rows,
                           d.vocab_first));
  const float *stats = a->stats;
  if (P > 1) { /* the statistics are fp32 whatever the compute type */
    GT_CALL(gt_group_allgather(d.tp, a->stats, stats_all, 3 * (size_t)d.N, GT_F32));
    stats = stats_all;
  }
  GT_CALL(op->xent_finish(be, d.dt, a->losses, a->logits, stats, P, targets, d.N, d.vocab_real,
                          d.vocab_rows, d.vocab_first, dlogit_scale));
  return GT_SUCCESS;
}

int gt_lm_head_backward(gt_backend *be, const void *wte, float *dwte, const void *lnf_w,
                        float *dlnf_w, float *dlnf_b, const gt_head_acts *a, const void *x,
                        void *dx, void *dlnf, gt_head_dims d)
{
  const gt_backend_ops *op = be->ops;
  int64_t r0, ns;
  if (gt_sp_on(d.tp, d.sp, d.N, &r0, &ns)) {
    const size_t piece = (size_t)(ns * d.C);
    GT_CALL(gt_group_allgather(d.tp, a->lnf, d.sp->full, piece, d.dt));
    GT_CALL(op->linear_backward(be, d.dt, dlnf, dwte, NULL, a->logits, d.sp->full, wte, d.N, d.C,
                                d.vocab_rows));
    GT_CALL(gt_group_reduce_scatter_sum(d.tp, dlnf, d.sp->piece, piece, d.dt));
    GT_CALL(op->zero(be, dx, gt_dtype_size(d.dt) * piece));
    GT_CALL(gt_norm_backward_rows(be, d.dt, d.norm, d.tp, dx, dlnf_w, dlnf_b, d.sp->piece, x,
                                  lnf_w, a->lnf_mean, a->lnf_rstd, ns, d.C));
    return GT_SUCCESS;
  }
  GT_CALL(op->linear_backward(be, d.dt, dlnf, dwte, NULL, a->logits, a->lnf, wte, d.N, d.C,
                              d.vocab_rows));
  if (d.tp) /* each rank's dlnf covers its vocabulary rows only */
    GT_CALL(gt_group_allreduce_sum(d.tp, dlnf, (size_t)(d.N * d.C), d.dt));
  GT_CALL(op->zero(be, dx, gt_dtype_size(d.dt) * (size_t)(d.N * d.C)));
  GT_CALL(gt_norm_backward(be, d.dt, d.norm, dx, dlnf_w, dlnf_b, dlnf, x, lnf_w, a->lnf_mean,
                           a->lnf_rstd, d.N, d.C));
  return GT_SUCCESS;
}

int gt_lm_head_backward_weights(gt_backend *be, float *dwte, const gt_head_acts *a,
                                gt_head_dims d)
{
  GT_ASSERT(!d.sp);
  GT_CALL(be->ops->linear_backward(be, d.dt, NULL, dwte, NULL, a->logits, a->lnf, NULL, d.N, d.C,
                                   d.vocab_rows));
  return GT_SUCCESS;
}

int gt_embedding_forward(gt_backend *be, gt_dtype dt, void *out, const int32_t *tokens,
                         const void *wte, const void *wpe, int64_t B, int64_t T, int64_t C,
                         int64_t v0, int64_t nv, const gt_group *tp, const gt_seq_par *sp)
{
  const bool lead = !tp || tp->rank == 0;
  int64_t r0, ns;
  if (gt_sp_on(tp, sp, B * T, &r0, &ns)) {
    GT_CALL(be->ops->embedding_forward(be, dt, sp->full, tokens, wte, lead ? wpe : NULL, B, T,
                                       C, v0, nv));
    GT_CALL(gt_group_reduce_scatter_sum(tp, sp->full, out, (size_t)(ns * C), dt));
    return GT_SUCCESS;
  }
  GT_CALL(be->ops->embedding_forward(be, dt, out, tokens, wte, lead ? wpe : NULL, B, T, C, v0,
                                     nv));
  if (tp)
    GT_CALL(gt_group_allreduce_sum(tp, out, (size_t)(B * T * C), dt));
  return GT_SUCCESS;
}

int gt_embedding_backward(gt_backend *be, gt_dtype dt, float *dwte, float *dwpe,
                          const void *dout, const int32_t *tokens, int64_t B, int64_t T,
                          int64_t C, int64_t v0, int64_t nv, const gt_group *tp,
                          const gt_seq_par *sp)
{
  int64_t r0, ns;
  if (gt_sp_on(tp, sp, B * T, &r0, &ns)) {
    GT_CALL(gt_group_allgather(tp, dout, sp->full, (size_t)(ns * C), dt));
    dout = sp->full;
  }
  GT_CALL(be->ops->embedding_backward(be, dt, dwte, dwpe, dout, tokens, B, T, C, v0, nv));
  return GT_SUCCESS;
}
