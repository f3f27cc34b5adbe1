/*
 * block.c - forward and backward of a pre-LayerNorm transformer block.
 */
#include "gridtrain/error.h"
#include "gridtrain/layers.h"

int gt_block_forward(gt_backend *be, const gt_block_weights *w, const gt_block_acts *a,
                     const float *x, float *out, gt_layer_dims d)
{
  const gt_backend_ops *op = be->ops;
  const int N = d.B * d.T, C = d.C, hs = d.C / d.H;
  const size_t nc = (size_t)N * C;
  GT_CALL(op->layernorm_forward(be, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b,
                                N, C));
  GT_CALL(op->linear_forward(be, a->qkv, a->ln1, w->qkv_w, w->qkv_b, NULL, N, C, 3 * C));
  GT_CALL(op->attention_forward(be, a->atty, a->att, a->qkv, d.B, d.T, d.H, hs));
  GT_CALL(op->linear_forward(be, a->res2, a->atty, w->proj_w, w->proj_b, x, N, C, C));
  GT_CALL(op->layernorm_forward(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2_w,
                                w->ln2_b, N, C));
  GT_CALL(op->linear_forward(be, a->fc, a->ln2, w->fc_w, w->fc_b, NULL, N, C, 4 * C));
  GT_CALL(op->gelu_forward(be, a->gelu, a->fc, 4 * nc));
  GT_CALL(op->linear_forward(be, out, a->gelu, w->fcproj_w, w->fcproj_b, a->res2, N, 4 * C, C));
  return GT_SUCCESS;
}

int gt_block_backward(gt_backend *be, const gt_block_weights *w, const gt_block_weights *g,
                      const gt_block_acts *a, const float *x, float *dres,
                      const gt_block_scratch *s, gt_layer_dims d)
{
  const gt_backend_ops *op = be->ops;
  const int N = d.B * d.T, C = d.C, hs = d.C / d.H;
  /* MLP: dres flows unchanged to res2 and through the MLP branch */
  GT_CALL(op->linear_backward(be, s->dfc, g->fcproj_w, g->fcproj_b, dres, a->gelu,
                              w->fcproj_w, N, 4 * C, C));
  GT_CALL(op->gelu_backward(be, s->dfc, a->fc, s->dfc, (size_t)N * 4 * C));
  GT_CALL(op->linear_backward(be, s->dln, g->fc_w, g->fc_b, s->dfc, a->ln2, w->fc_w, N, C,
                              4 * C));
  GT_CALL(op->layernorm_backward(be, dres, g->ln2_w, g->ln2_b, s->dln, a->res2, w->ln2_w,
                                 a->ln2_mean, a->ln2_rstd, N, C));
  /* attention: dres (now d res2) flows unchanged to x and through attention */
  GT_CALL(op->linear_backward(be, s->datty, g->proj_w, g->proj_b, dres, a->atty, w->proj_w,
                              N, C, C));
  GT_CALL(op->attention_backward(be, s->dqkv, s->datt, s->datty, a->qkv, a->att, d.B, d.T,
                                 d.H, hs));
  GT_CALL(op->linear_backward(be, s->dln, g->qkv_w, g->qkv_b, s->dqkv, a->ln1, w->qkv_w, N, C,
                              3 * C));
  GT_CALL(op->layernorm_backward(be, dres, g->ln1_w, g->ln1_b, s->dln, x, w->ln1_w,
                                 a->ln1_mean, a->ln1_rstd, N, C));
  return GT_SUCCESS;
}
