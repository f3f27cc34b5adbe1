/*
 * norm.c - LayerNorm or RMSNorm, forward and backward, with the weight
 * gradients' sum over tp under sequence parallelism.
 */
#include "norm.h"

#include "gridtrain/error.h"

int gt_norm_forward(gt_backend *be, gt_dtype dt, gt_norm k, void *out, float *mean, float *rstd,
                    const void *in, const void *w, const void *b, int64_t n, int64_t C)
{
  if (k.rms)
    GT_CALL(be->ops->rmsnorm_forward(be, dt, out, rstd, in, w, k.eps, n, C));
  else
    GT_CALL(be->ops->layernorm_forward(be, dt, out, mean, rstd, in, w, b, n, C));
  return GT_SUCCESS;
}

int gt_norm_backward(gt_backend *be, gt_dtype dt, gt_norm k, void *din, float *dw, float *db,
                     const void *dout, const void *in, const void *w, const float *mean,
                     const float *rstd, int64_t n, int64_t C)
{
  if (k.rms)
    GT_CALL(be->ops->rmsnorm_backward(be, dt, din, dw, dout, in, w, rstd, n, C));
  else
    GT_CALL(be->ops->layernorm_backward(be, dt, din, dw, db, dout, in, w, mean, rstd, n, C));
  return GT_SUCCESS;
}

/* The norm's weight gradients (fp32, C each) under sequence parallelism:
 * each rank's backward sees its rows only, so the members' contributions
 * are summed. Before the backward every member but 0 hands its copy of the
 * (replicated) accumulated gradient over by zeroing it; after it, the sum
 * over tp is the accumulated gradient plus every rank's part, on all. */
static int gt_norm_grads_begin(gt_backend *be, const gt_group *tp, float *dw, float *db,
                               int64_t C)
{
  if (tp->rank != 0) {
    GT_CALL(be->ops->zero(be, dw, (size_t)C * sizeof(float)));
    if (db)
      GT_CALL(be->ops->zero(be, db, (size_t)C * sizeof(float)));
  }
  return GT_SUCCESS;
}

static int gt_norm_grads_end(const gt_group *tp, float *dw, float *db, int64_t C)
{
  if (db == dw + C) { /* adjacent in the gradient buffer: one sum */
    GT_CALL(gt_group_allreduce_sum(tp, dw, 2 * (size_t)C, GT_F32));
    return GT_SUCCESS;
  }
  GT_CALL(gt_group_allreduce_sum(tp, dw, (size_t)C, GT_F32));
  if (db)
    GT_CALL(gt_group_allreduce_sum(tp, db, (size_t)C, GT_F32));
  return GT_SUCCESS;
}

int gt_norm_backward_rows(gt_backend *be, gt_dtype dt, gt_norm k, const gt_group *tp, void *din,
                          float *dw, float *db, const void *dout, const void *in, const void *w,
                          const float *mean, const float *rstd, int64_t ns, int64_t C)
{
  GT_CALL(gt_norm_grads_begin(be, tp, dw, db, C));
  GT_CALL(gt_norm_backward(be, dt, k, din, dw, db, dout, in, w, mean, rstd, ns, C));
  GT_CALL(gt_norm_grads_end(tp, dw, db, C));
  return GT_SUCCESS;
}
