/*
 * block.c - forward and backward of a pre-LayerNorm transformer block, with
 * Megatron tensor parallelism when d.tp has more than one rank.
 */
#include "gridtrain/error.h"
#include "gridtrain/layers.h"
#include "moe.h"
#include "norm.h"
#include "seq_par.h"

/* Local sizes: P ranks, hs per head, Cl attention width, Kl key/value
 * width, QKV the q, k, v rows, F the MLP units and G the mlp.fc rows here. */
typedef struct {
  int64_t N, C, hs, Cl, Hkv, Kl, QKV, F, G;
  bool lead; /* adds the replicated biases and the residual once */
} gt_block_sizes;

static gt_block_sizes gt_block_sizes_of(gt_layer_dims d)
{
  const int64_t P = d.tp ? d.tp->size : 1;
  gt_block_sizes z;
  z.N = d.B * d.T;
  z.C = d.C;
  z.hs = d.C / (d.H * P);
  z.Cl = d.H * z.hs;
  z.Hkv = d.Hkv > 0 ? d.Hkv : d.H;
  z.Kl = z.Hkv * z.hs;
  z.QKV = z.Cl + 2 * z.Kl;
  z.F = d.F > 0 ? d.F : 4 * d.C / P;
  z.G = d.kind.swiglu ? 2 * z.F : z.F;
  z.lead = !d.tp || d.tp->rank == 0;
  return z;
}

/* The MLP's activation: a->gelu (N,F) "=" act(a->fc). */
static int gt_mlp_act_forward(gt_backend *be, const gt_block_acts *a, gt_block_sizes z,
                              gt_layer_dims d)
{
  if (d.kind.swiglu)
    GT_CALL(be->ops->swiglu_forward(be, d.dt, a->gelu, a->fc, z.N, z.F));
  else
    GT_CALL(be->ops->gelu_forward(be, d.dt, a->gelu, a->fc, (size_t)(z.N * z.F)));
  return GT_SUCCESS;
}

/* Its backward: s->dfc (N,G) "=" d(loss)/d(fc) from d(loss)/d(act), which
 * the projection's backward left in act_grad (s->dact with SwiGLU, else
 * s->dfc itself: GELU's backward runs in place). */
static int gt_mlp_act_backward(gt_backend *be, const gt_block_acts *a,
                               const gt_block_scratch *s, gt_block_sizes z, gt_layer_dims d)
{
  if (d.kind.swiglu)
    GT_CALL(be->ops->swiglu_backward(be, d.dt, s->dfc, s->dact, a->fc, z.N, z.F));
  else
    GT_CALL(be->ops->gelu_backward(be, d.dt, s->dfc, a->fc, s->dfc, (size_t)(z.N * z.F)));
  return GT_SUCCESS;
}

static void *gt_mlp_act_grad(const gt_block_scratch *s, gt_layer_dims d)
{
  return d.kind.swiglu ? s->dact : s->dfc;
}

/* Rotary positions on the q and k heads of qkv (N, QKV) for tokens at
 * positions pos0.. (a no-op without rope), and the transpose rotation on
 * their gradients. */
static int gt_block_rope(gt_backend *be, void *qkv, gt_block_sizes z, gt_layer_dims d,
                         int64_t pos0, bool backward)
{
  if (!d.kind.rope)
    return GT_SUCCESS;
  const int64_t S = d.H + 2 * z.Hkv, nrot = d.H + z.Hkv;
  if (backward)
    GT_CALL(be->ops->rope_backward(be, d.dt, qkv, d.kind.rope_cos, d.kind.rope_sin, d.B, d.T,
                                   S, nrot, z.hs, pos0));
  else
    GT_CALL(be->ops->rope_forward(be, d.dt, qkv, d.kind.rope_cos, d.kind.rope_sin, d.B, d.T, S,
                                  nrot, z.hs, pos0));
  return GT_SUCCESS;
}

/* The sum over tp of the row-parallel partial outputs (conjugate g), in the
 * compute type. */
static int gt_tp_sum(const gt_layer_dims *d, void *buf, size_t n)
{
  if (d->tp)
    GT_CALL(gt_group_allreduce_sum(d->tp, buf, n, d->dt));
  return GT_SUCCESS;
}

/* out (N,OC) "=" in w^T, and on the rows [r0, r0 + n) + bias + residual
 * (n,OC): a row-parallel projection's partial sums before the reduce-
 * scatter, each rank adding the bias and residual to its own rows once. */
static int gt_linear_own_rows(gt_backend *be, gt_dtype dt, void *out, const void *in,
                              const void *w, const void *bias, const void *residual, int64_t N,
                              int64_t C, int64_t OC, int64_t r0, int64_t n)
{
  const gt_backend_ops *op = be->ops;
  const size_t E = gt_dtype_size(dt);
  char *o = out;
  const char *i = in;
  if (r0 > 0)
    GT_CALL(op->linear_forward(be, dt, o, i, w, NULL, NULL, r0, C, OC));
  GT_CALL(op->linear_forward(be, dt, o + (size_t)(r0 * OC) * E, i + (size_t)(r0 * C) * E, w,
                             bias, residual, n, C, OC));
  if (r0 + n < N)
    GT_CALL(op->linear_forward(be, dt, o + (size_t)((r0 + n) * OC) * E,
                               i + (size_t)((r0 + n) * C) * E, w, NULL, NULL, N - r0 - n, C,
                               OC));
  return GT_SUCCESS;
}

/* The block's forward from the attention core's output a->atty on (no
 * sequence parallelism): the attention projection with the residual x into
 * a->res2, summed over tp; the MLP with the residual a->res2 into out,
 * summed over tp. */
static int gt_block_after_attention(gt_backend *be, const gt_block_weights *w,
                                    const gt_block_acts *a, const void *x, void *out,
                                    gt_block_sizes z, gt_layer_dims d)
{
  const gt_backend_ops *op = be->ops;
  const size_t nc = (size_t)(z.N * z.C);
  const gt_dtype dt = d.dt;
  GT_CALL(op->linear_forward(be, dt, a->res2, a->atty, w->proj_w, z.lead ? w->proj_b : NULL,
                             z.lead ? x : NULL, z.N, z.Cl, z.C));
  GT_CALL(gt_tp_sum(&d, a->res2, nc));
  GT_CALL(gt_norm_forward(be, dt, d.kind.norm, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                          w->ln2_w, w->ln2_b, z.N, z.C));
  GT_CALL(gt_progress_poll(d.progress));
  if (w->fc_w) { /* the dense MLP (an MoE block's shared experts) */
    GT_CALL(op->linear_forward(be, dt, a->fc, a->ln2, w->fc_w, w->fc_b, NULL, z.N, z.C, z.G));
    GT_CALL(gt_progress_poll(d.progress));
    GT_CALL(gt_mlp_act_forward(be, a, z, d));
    GT_CALL(op->linear_forward(be, dt, out, a->gelu, w->fcproj_w, z.lead ? w->fcproj_b : NULL,
                               z.lead ? a->res2 : NULL, z.N, z.F, z.C));
  }
  if (d.moe) {
    const void *base = w->fc_w ? out : z.lead ? a->res2 : NULL;
    GT_CALL(gt_moe_forward(be, &w->moe, &a->moe, a->ln2, base, out, d, z.lead));
  }
  GT_CALL(gt_tp_sum(&d, out, nc));
  return GT_SUCCESS;
}

int gt_block_attention_forward(gt_backend *be, const gt_block_acts *a, gt_layer_dims d)
{
  const gt_block_sizes z = gt_block_sizes_of(d);
  GT_CALL(be->ops->attention_forward(be, d.dt, a->atty, a->lse, a->qkv, d.B, d.T, d.H, z.Hkv,
                                     z.hs));
  return GT_SUCCESS;
}

/* gt_block_forward with sequence parallelism: x, out and the norm tensors
 * are the rank's ns rows from r0; d.sp->full carries the gathered norm
 * outputs and the projections' partial sums in turn. */
static int gt_block_forward_sp(gt_backend *be, const gt_block_weights *w,
                               const gt_block_acts *a, const void *x, void *out,
                               gt_layer_dims d, int64_t r0, int64_t ns)
{
  const gt_backend_ops *op = be->ops;
  const gt_block_sizes z = gt_block_sizes_of(d);
  const gt_dtype dt = d.dt;
  void *full = d.sp->full;
  const size_t piece = (size_t)(ns * z.C);
  GT_CHECK(!d.moe, GT_ERR_INPUT,
           "sequence parallelism does not take mixture-of-experts blocks yet");
  GT_CALL(gt_norm_forward(be, dt, d.kind.norm, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w,
                          w->ln1_b, ns, z.C));
  GT_CALL(gt_group_allgather(d.tp, a->ln1, full, piece, dt));
  GT_CALL(op->linear_forward(be, dt, a->qkv, full, w->qkv_w, w->qkv_b, NULL, z.N, z.C, z.QKV));
  GT_CALL(gt_block_rope(be, a->qkv, z, d, 0, false));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_block_attention_forward(be, a, d));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_linear_own_rows(be, dt, full, a->atty, w->proj_w, w->proj_b, x, z.N, z.Cl, z.C,
                             r0, ns));
  GT_CALL(gt_group_reduce_scatter_sum(d.tp, full, a->res2, piece, dt));
  GT_CALL(gt_norm_forward(be, dt, d.kind.norm, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                          w->ln2_w, w->ln2_b, ns, z.C));
  GT_CALL(gt_group_allgather(d.tp, a->ln2, full, piece, dt));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(op->linear_forward(be, dt, a->fc, full, w->fc_w, w->fc_b, NULL, z.N, z.C, z.G));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_mlp_act_forward(be, a, z, d));
  GT_CALL(gt_linear_own_rows(be, dt, full, a->gelu, w->fcproj_w, w->fcproj_b, a->res2, z.N,
                             z.F, z.C, r0, ns));
  GT_CALL(gt_group_reduce_scatter_sum(d.tp, full, out, piece, dt));
  return GT_SUCCESS;
}

int gt_block_forward(gt_backend *be, const gt_block_weights *w, const gt_block_acts *a,
                     const void *x, void *out, gt_layer_dims d)
{
  int64_t r0, ns;
  if (gt_sp_on(d.tp, d.sp, d.B * d.T, &r0, &ns))
    return gt_block_forward_sp(be, w, a, x, out, d, r0, ns);
  const gt_backend_ops *op = be->ops;
  const gt_block_sizes z = gt_block_sizes_of(d);
  const gt_dtype dt = d.dt;
  GT_CALL(gt_norm_forward(be, dt, d.kind.norm, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w,
                          w->ln1_b, z.N, z.C));
  GT_CALL(op->linear_forward(be, dt, a->qkv, a->ln1, w->qkv_w, w->qkv_b, NULL, z.N, z.C, z.QKV));
  GT_CALL(gt_block_rope(be, a->qkv, z, d, 0, false));
  GT_CALL(gt_progress_poll(d.progress)); /* ZeRO 3: the next block's gather */
  GT_CALL(gt_block_attention_forward(be, a, d));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_block_after_attention(be, w, a, x, out, z, d));
  return GT_SUCCESS;
}

int gt_block_decode(gt_backend *be, const gt_block_weights *w, const gt_block_acts *a,
                    int64_t t, const void *x, void *out, gt_layer_dims d)
{
  GT_ASSERT(d.B == 1 && d.T == 1 && t >= 0);
  d.sp = NULL;
  const gt_backend_ops *op = be->ops;
  const gt_block_sizes z = gt_block_sizes_of(d);
  const gt_dtype dt = d.dt;
  void *row = (char *)a->qkv + (size_t)(t * z.QKV) * gt_dtype_size(dt);
  GT_CALL(gt_norm_forward(be, dt, d.kind.norm, a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w,
                          w->ln1_b, 1, z.C));
  GT_CALL(op->linear_forward(be, dt, row, a->ln1, w->qkv_w, w->qkv_b, NULL, 1, z.C, z.QKV));
  GT_CALL(gt_block_rope(be, row, z, d, t, false));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(op->attention_decode(be, dt, a->atty, a->qkv, t + 1, d.H, z.Hkv, z.hs));
  GT_CALL(gt_block_after_attention(be, w, a, x, out, z, d));
  return GT_SUCCESS;
}

/* gt_block_backward with sequence parallelism (see gt_block_forward_sp);
 * dres is the rank's ns rows. */
static int gt_block_backward_sp(gt_backend *be, const gt_block_weights *w,
                                const gt_block_grads *g, const gt_block_acts *a, const void *x,
                                void *dres, const gt_block_scratch *s, gt_layer_dims d,
                                int64_t ns)
{
  const gt_backend_ops *op = be->ops;
  const gt_block_sizes z = gt_block_sizes_of(d);
  const gt_dtype dt = d.dt;
  const gt_norm nk = d.kind.norm;
  void *full = d.sp->full, *dpiece = d.sp->piece;
  const size_t piece = (size_t)(ns * z.C);
  GT_CHECK(!d.moe, GT_ERR_INPUT,
           "sequence parallelism does not take mixture-of-experts blocks yet");
  /* MLP: the gathered residual gradient into the row-parallel projection */
  GT_CALL(gt_group_allgather(d.tp, dres, full, piece, dt));
  GT_CALL(op->linear_backward(be, dt, gt_mlp_act_grad(s, d), g->fcproj_w, g->fcproj_b, full,
                              a->gelu, w->fcproj_w, z.N, z.F, z.C));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_mlp_act_backward(be, a, s, z, d));
  GT_CALL(gt_group_allgather(d.tp, a->ln2, full, piece, dt));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(op->linear_backward(be, dt, s->dln, g->fc_w, g->fc_b, s->dfc, full, w->fc_w, z.N,
                              z.C, z.G));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_group_reduce_scatter_sum(d.tp, s->dln, dpiece, piece, dt));
  GT_CALL(gt_norm_backward_rows(be, dt, nk, d.tp, dres, g->ln2_w, g->ln2_b, dpiece, a->res2,
                                w->ln2_w, a->ln2_mean, a->ln2_rstd, ns, z.C));
  GT_CALL(gt_progress_poll(d.progress));
  /* attention */
  GT_CALL(gt_group_allgather(d.tp, dres, full, piece, dt));
  GT_CALL(op->linear_backward(be, dt, s->datty, g->proj_w, g->proj_b, full, a->atty,
                              w->proj_w, z.N, z.Cl, z.C));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(op->attention_backward(be, dt, s->dqkv, s->datty, a->qkv, a->atty, a->lse, d.B, d.T,
                                 d.H, z.Hkv, z.hs));
  GT_CALL(gt_block_rope(be, s->dqkv, z, d, 0, true));
  GT_CALL(gt_group_allgather(d.tp, a->ln1, full, piece, dt));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(op->linear_backward(be, dt, s->dln, g->qkv_w, g->qkv_b, s->dqkv, full, w->qkv_w,
                              z.N, z.C, z.QKV));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_group_reduce_scatter_sum(d.tp, s->dln, dpiece, piece, dt));
  GT_CALL(gt_norm_backward_rows(be, dt, nk, d.tp, dres, g->ln1_w, g->ln1_b, dpiece, x,
                                w->ln1_w, a->ln1_mean, a->ln1_rstd, ns, z.C));
  GT_CALL(gt_progress_poll(d.progress));
  return GT_SUCCESS;
}

/* A block's four projections, in the order backward reaches them. */
typedef enum { GT_PROJ_FCPROJ, GT_PROJ_FC, GT_PROJ_ATTN, GT_PROJ_QKV } gt_block_proj;

/* Projection k's weight and bias gradients "+=" of one micro-batch, from
 * its output gradient dout (kept by gt_block_backward_in, or where it is
 * running now) and its input in a. The replicated biases' gradients are the
 * same on every tp rank. */
static int gt_block_projection_grad(gt_backend *be, const gt_block_grads *g,
                                    const gt_block_acts *a, gt_block_proj k, const void *dout,
                                    gt_block_sizes z, gt_layer_dims d)
{
  const gt_backend_ops *op = be->ops;
  switch (k) {
  case GT_PROJ_FCPROJ:
    return op->linear_backward(be, d.dt, NULL, g->fcproj_w, g->fcproj_b, dout, a->gelu, NULL,
                               z.N, z.F, z.C);
  case GT_PROJ_FC:
    return op->linear_backward(be, d.dt, NULL, g->fc_w, g->fc_b, dout, a->ln2, NULL, z.N, z.C,
                               z.G);
  case GT_PROJ_ATTN:
    return op->linear_backward(be, d.dt, NULL, g->proj_w, g->proj_b, dout, a->atty, NULL, z.N,
                               z.Cl, z.C);
  case GT_PROJ_QKV:
    return op->linear_backward(be, d.dt, NULL, g->qkv_w, g->qkv_b, dout, a->ln1, NULL, z.N,
                               z.C, z.QKV);
  }
  return GT_ERROR(GT_ERR_INTERNAL, "no projection %d", (int)k);
}

/* B, and W too where keep is NULL: each projection's input gradient, then
 * (keep NULL) at once its weight gradients, in the order the joint
 * backward always ran them; with keep, the projections' output gradients
 * are left in keep for gt_block_backward_weights. */
static int gt_block_backward_in(gt_backend *be, const gt_block_weights *w,
                                const gt_block_grads *g, const gt_block_acts *a,
                                const void *x, void *dres, const gt_block_scratch *s0,
                                const gt_block_dout *keep, gt_layer_dims d)
{
  const gt_backend_ops *op = be->ops;
  const gt_block_sizes z = gt_block_sizes_of(d);
  const size_t nc = (size_t)(z.N * z.C), E = gt_dtype_size(d.dt);
  const gt_dtype dt = d.dt;
  const gt_norm nk = d.kind.norm;
  gt_block_scratch sk = *s0; /* with keep, fc's and qkv's gradients go straight there */
  if (keep) {
    sk.dfc = keep->dfc;
    sk.dqkv = keep->dqkv;
  }
  const gt_block_scratch *s = &sk;
  /* MLP: dres flows unchanged to res2 and through the MLP branch */
  if (w->fc_w) { /* the dense MLP (an MoE block's shared experts) */
    if (keep)
      GT_CALL(op->copy(be, keep->dfcproj, dres, nc * E, NULL));
    GT_CALL(op->linear_backward(be, dt, gt_mlp_act_grad(s, d), NULL, NULL, dres, NULL,
                                w->fcproj_w, z.N, z.F, z.C));
    if (!keep)
      GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_FCPROJ, dres, z, d));
    GT_CALL(gt_progress_poll(d.progress));
    GT_CALL(gt_mlp_act_backward(be, a, s, z, d));
    GT_CALL(gt_progress_poll(d.progress));
    GT_CALL(op->linear_backward(be, dt, s->dln, NULL, NULL, s->dfc, NULL, w->fc_w, z.N, z.C,
                                z.G));
    if (!keep)
      GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_FC, s->dfc, z, d));
    GT_CALL(gt_progress_poll(d.progress));
  } else {
    GT_CALL(op->zero(be, s->dln, nc * E));
  }
  if (d.moe)
    GT_CALL(gt_moe_backward(be, &w->moe, &g->moe, &a->moe, a->ln2, dres, s->dln, d, z.lead));
  GT_CALL(gt_tp_sum(&d, s->dln, nc)); /* conjugate f: each rank saw its units only */
  GT_CALL(gt_norm_backward(be, dt, nk, dres, g->ln2_w, g->ln2_b, s->dln, a->res2, w->ln2_w,
                           a->ln2_mean, a->ln2_rstd, z.N, z.C));
  GT_CALL(gt_progress_poll(d.progress));
  /* attention: dres (now d res2) flows unchanged to x and through attention */
  if (keep)
    GT_CALL(op->copy(be, keep->dproj, dres, nc * E, NULL));
  GT_CALL(op->linear_backward(be, dt, s->datty, NULL, NULL, dres, NULL, w->proj_w, z.N, z.Cl,
                              z.C));
  if (!keep)
    GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_ATTN, dres, z, d));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(op->attention_backward(be, dt, s->dqkv, s->datty, a->qkv, a->atty, a->lse, d.B, d.T,
                                 d.H, z.Hkv, z.hs));
  GT_CALL(gt_block_rope(be, s->dqkv, z, d, 0, true));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(op->linear_backward(be, dt, s->dln, NULL, NULL, s->dqkv, NULL, w->qkv_w, z.N, z.C,
                              z.QKV));
  if (!keep)
    GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_QKV, s->dqkv, z, d));
  GT_CALL(gt_progress_poll(d.progress));
  GT_CALL(gt_tp_sum(&d, s->dln, nc));
  GT_CALL(gt_norm_backward(be, dt, nk, dres, g->ln1_w, g->ln1_b, s->dln, x, w->ln1_w,
                           a->ln1_mean, a->ln1_rstd, z.N, z.C));
  GT_CALL(gt_progress_poll(d.progress));
  return GT_SUCCESS;
}

int gt_block_backward(gt_backend *be, const gt_block_weights *w, const gt_block_grads *g,
                      const gt_block_acts *a, const void *x, void *dres,
                      const gt_block_scratch *s, gt_layer_dims d)
{
  int64_t r0, ns;
  if (gt_sp_on(d.tp, d.sp, d.B * d.T, &r0, &ns))
    return gt_block_backward_sp(be, w, g, a, x, dres, s, d, ns);
  GT_CALL(gt_block_backward_in(be, w, g, a, x, dres, s, NULL, d));
  return GT_SUCCESS;
}

int gt_block_backward_input(gt_backend *be, const gt_block_weights *w, const gt_block_grads *g,
                            const gt_block_acts *a, const void *x, void *dres,
                            const gt_block_scratch *s, const gt_block_dout *keep,
                            gt_layer_dims d)
{
  int64_t r0, ns;
  GT_CHECK(!gt_sp_on(d.tp, d.sp, d.B * d.T, &r0, &ns), GT_ERR_INPUT,
           "the split backward of a block (zero-bubble schedules) does not take sequence "
           "parallelism yet");
  GT_CHECK(!d.moe, GT_ERR_INPUT,
           "the split backward of a block (zero-bubble schedules) does not take "
           "mixture-of-experts blocks yet");
  GT_ASSERT(keep && keep->dfcproj && keep->dfc && keep->dproj && keep->dqkv);
  GT_CALL(gt_block_backward_in(be, w, g, a, x, dres, s, keep, d));
  return GT_SUCCESS;
}

int gt_block_backward_weights(gt_backend *be, const gt_block_grads *g, const gt_block_acts *a,
                              const gt_block_dout *keep, gt_layer_dims d)
{
  const gt_block_sizes z = gt_block_sizes_of(d);
  GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_FCPROJ, keep->dfcproj, z, d));
  GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_FC, keep->dfc, z, d));
  GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_ATTN, keep->dproj, z, d));
  GT_CALL(gt_block_projection_grad(be, g, a, GT_PROJ_QKV, keep->dqkv, z, d));
  return GT_SUCCESS;
}
