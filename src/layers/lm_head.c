/*
 * lm_head.c - final LayerNorm, the LM head tied to the token embedding, and
 * the softmax cross-entropy loss.
 */
#include "gridtrain/error.h"
#include "gridtrain/layers.h"

int gt_lm_head_forward(gt_backend *be, const float *wte, const float *lnf_w,
                       const float *lnf_b, const gt_head_acts *a, const float *x,
                       const int32_t *targets, int N, int C, int V, float grad_scale)
{
  const gt_backend_ops *op = be->ops;
  GT_CALL(op->layernorm_forward(be, a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, N, C));
  GT_CALL(op->linear_forward(be, a->logits, a->lnf, wte, NULL, NULL, N, C, V));
  GT_CALL(op->crossentropy(be, a->losses, a->logits, targets, N, V, V, grad_scale));
  return GT_SUCCESS;
}

int gt_lm_head_backward(gt_backend *be, const float *wte, float *dwte, const float *lnf_w,
                        float *dlnf_w, float *dlnf_b, const gt_head_acts *a, const float *x,
                        float *dx, float *dlnf, int N, int C, int V)
{
  const gt_backend_ops *op = be->ops;
  GT_CALL(op->linear_backward(be, dlnf, dwte, NULL, a->logits, a->lnf, wte, N, C, V));
  GT_CALL(op->zero(be, dx, sizeof(float) * (size_t)N * C));
  GT_CALL(op->layernorm_backward(be, dx, dlnf_w, dlnf_b, dlnf, x, lnf_w, a->lnf_mean,
                                 a->lnf_rstd, N, C));
  return GT_SUCCESS;
}
