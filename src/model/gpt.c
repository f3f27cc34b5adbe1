/*
 * gpt.c - the GPT model: parameter registry, activation layout, and the
 * forward / backward passes over the layers.
 */
#include "gridtrain/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/layers.h"

struct gt_gpt {
  gt_backend *be;
  gt_gpt_shape shape;
  int batch, seq; /* largest micro-batch */
  gt_params *params;

  /* views into params (values and gradients) */
  float *wte, *wpe, *lnf_w, *lnf_b;
  float *dwte, *dwpe, *dlnf_w, *dlnf_b;
  gt_block_weights *w, *g; /* per layer */

  /* activations and scratch: one device buffer */
  void *act_buffer;
  size_t act_bytes;
  float **resid;      /* layers+1 views (N,C): resid[0] embedding output */
  gt_block_acts *acts; /* per layer */
  gt_head_acts head;
  gt_block_scratch scratch;
  float *dres;         /* (N,C) */
  int32_t *tokens, *targets; /* device (N) */
  float *host_losses;  /* host (N) */

  int last_B, last_T;  /* of the last forward with gradients */
  bool grad_ready;
};

// ---- parameters ---------------------------------------------------------------------

static int gt_gpt_register(gt_gpt *m)
{
  const gt_gpt_shape *s = &m->shape;
  const long C = s->dim;
  const float std = 0.02f, std_res = 0.02f / sqrtf(2.0f * (float)s->layers);
  gt_params *p = m->params;
  char name[GT_PARAM_NAME_MAX];
#define GT_ADD(nm, init, sd, decay, ...)                                                  \
  do {                                                                                   \
    const long shp_[] = {__VA_ARGS__};                                                   \
    GT_CALL(gt_params_add(p, nm, (int)(sizeof shp_ / sizeof shp_[0]), shp_, init, sd,     \
                          decay));                                                       \
  } while (0)
  GT_ADD("wte", GT_INIT_NORMAL, std, true, s->vocab, C);
  GT_ADD("wpe", GT_INIT_NORMAL, std, true, s->max_seq, C);
  for (int l = 0; l < s->layers; l++) {
#define GT_ADD_L(suffix, init, sd, decay, ...)                                            \
  do {                                                                                   \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);                                   \
    GT_ADD(name, init, sd, decay, __VA_ARGS__);                                          \
  } while (0)
    GT_ADD_L("ln_1.weight", GT_INIT_ONES, 0, false, C);
    GT_ADD_L("ln_1.bias", GT_INIT_ZEROS, 0, false, C);
    GT_ADD_L("attn.qkv.weight", GT_INIT_NORMAL, std, true, 3 * C, C);
    GT_ADD_L("attn.qkv.bias", GT_INIT_ZEROS, 0, false, 3 * C);
    GT_ADD_L("attn.proj.weight", GT_INIT_NORMAL, std_res, true, C, C);
    GT_ADD_L("attn.proj.bias", GT_INIT_ZEROS, 0, false, C);
    GT_ADD_L("ln_2.weight", GT_INIT_ONES, 0, false, C);
    GT_ADD_L("ln_2.bias", GT_INIT_ZEROS, 0, false, C);
    GT_ADD_L("mlp.fc.weight", GT_INIT_NORMAL, std, true, 4 * C, C);
    GT_ADD_L("mlp.fc.bias", GT_INIT_ZEROS, 0, false, 4 * C);
    GT_ADD_L("mlp.proj.weight", GT_INIT_NORMAL, std_res, true, C, 4 * C);
    GT_ADD_L("mlp.proj.bias", GT_INIT_ZEROS, 0, false, C);
#undef GT_ADD_L
  }
  GT_ADD("ln_f.weight", GT_INIT_ONES, 0, false, C);
  GT_ADD("ln_f.bias", GT_INIT_ZEROS, 0, false, C);
#undef GT_ADD
  return GT_SUCCESS;
}

/* Point the per-layer weight structs at the parameter (or gradient) views. */
static int gt_gpt_bind(gt_gpt *m)
{
  gt_params *p = m->params;
  /* Every tensor after wte, wpe comes in registration order: 12 per layer. */
  GT_ASSERT(p->count == 2 + 12 * m->shape.layers + 2);
  m->wte = p->list[0].value.data;
  m->dwte = p->list[0].grad.data;
  m->wpe = p->list[1].value.data;
  m->dwpe = p->list[1].grad.data;
  for (int l = 0; l < m->shape.layers; l++) {
    gt_param *t = &p->list[2 + 12 * l];
    float **wv[12] = {&m->w[l].ln1_w,  &m->w[l].ln1_b,    &m->w[l].qkv_w, &m->w[l].qkv_b,
                      &m->w[l].proj_w, &m->w[l].proj_b,   &m->w[l].ln2_w, &m->w[l].ln2_b,
                      &m->w[l].fc_w,   &m->w[l].fc_b,     &m->w[l].fcproj_w,
                      &m->w[l].fcproj_b};
    float **gv[12] = {&m->g[l].ln1_w,  &m->g[l].ln1_b,    &m->g[l].qkv_w, &m->g[l].qkv_b,
                      &m->g[l].proj_w, &m->g[l].proj_b,   &m->g[l].ln2_w, &m->g[l].ln2_b,
                      &m->g[l].fc_w,   &m->g[l].fc_b,     &m->g[l].fcproj_w,
                      &m->g[l].fcproj_b};
    for (int i = 0; i < 12; i++) {
      *wv[i] = t[i].value.data;
      *gv[i] = t[i].grad.data;
    }
  }
  gt_param *lnf = &p->list[2 + 12 * m->shape.layers];
  m->lnf_w = lnf[0].value.data;
  m->dlnf_w = lnf[0].grad.data;
  m->lnf_b = lnf[1].value.data;
  m->dlnf_b = lnf[1].grad.data;
  return GT_SUCCESS;
}

// ---- activations ---------------------------------------------------------------------

/* Lay out (count == NULL: measure) the activation buffer. */
typedef struct {
  char *base;
  size_t off;
} gt_carver;

static void *gt_carve(gt_carver *c, size_t bytes)
{
  void *p = c->base ? c->base + c->off : NULL;
  c->off += (bytes + 63) & ~(size_t)63;
  return p;
}

static void gt_gpt_layout(gt_gpt *m, gt_carver *c)
{
  const size_t B = (size_t)m->batch, T = (size_t)m->seq, N = B * T;
  const size_t C = (size_t)m->shape.dim, H = (size_t)m->shape.heads;
  const size_t V = (size_t)m->shape.vocab, F = sizeof(float);
  for (int l = 0; l <= m->shape.layers; l++)
    m->resid[l] = gt_carve(c, N * C * F);
  for (int l = 0; l < m->shape.layers; l++) {
    gt_block_acts *a = &m->acts[l];
    a->ln1 = gt_carve(c, N * C * F);
    a->ln1_mean = gt_carve(c, N * F);
    a->ln1_rstd = gt_carve(c, N * F);
    a->qkv = gt_carve(c, 3 * N * C * F);
    a->att = gt_carve(c, B * H * T * T * F);
    a->atty = gt_carve(c, N * C * F);
    a->res2 = gt_carve(c, N * C * F);
    a->ln2 = gt_carve(c, N * C * F);
    a->ln2_mean = gt_carve(c, N * F);
    a->ln2_rstd = gt_carve(c, N * F);
    a->fc = gt_carve(c, 4 * N * C * F);
    a->gelu = gt_carve(c, 4 * N * C * F);
  }
  m->head.lnf = gt_carve(c, N * C * F);
  m->head.lnf_mean = gt_carve(c, N * F);
  m->head.lnf_rstd = gt_carve(c, N * F);
  m->head.logits = gt_carve(c, N * V * F);
  m->head.losses = gt_carve(c, N * F);
  m->scratch.dln = gt_carve(c, N * C * F);
  m->scratch.dqkv = gt_carve(c, 3 * N * C * F);
  m->scratch.datt = gt_carve(c, B * H * T * T * F);
  m->scratch.datty = gt_carve(c, N * C * F);
  m->scratch.dfc = gt_carve(c, 4 * N * C * F);
  m->dres = gt_carve(c, N * C * F);
  m->tokens = gt_carve(c, N * sizeof(int32_t));
  m->targets = gt_carve(c, N * sizeof(int32_t));
}

// ---- life cycle ----------------------------------------------------------------------------

int gt_gpt_create(gt_backend *be, const gt_gpt_shape *shape, int batch, int seq,
                  gt_gpt **model)
{
  GT_ASSERT(shape->dim % shape->heads == 0);
  GT_ASSERT(seq >= 1 && seq <= shape->max_seq && batch >= 1);
  gt_gpt *m = calloc(1, sizeof *m);
  GT_CHECK_ALLOC(m, sizeof *m);
  *model = m;
  m->be = be;
  m->shape = *shape;
  m->batch = batch;
  m->seq = seq;
  const int L = shape->layers;
  m->w = calloc((size_t)L, sizeof *m->w);
  m->g = calloc((size_t)L, sizeof *m->g);
  m->acts = calloc((size_t)L, sizeof *m->acts);
  m->resid = calloc((size_t)L + 1, sizeof *m->resid);
  m->host_losses = malloc(sizeof(float) * (size_t)batch * seq);
  if (!m->w || !m->g || !m->acts || !m->resid || !m->host_losses) {
    gt_gpt_destroy(model);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory creating the GPT");
  }
  int status = gt_params_create(be, &m->params);
  if (status == GT_SUCCESS)
    status = gt_gpt_register(m);
  if (status == GT_SUCCESS)
    status = gt_params_finalize(m->params);
  if (status == GT_SUCCESS)
    status = gt_gpt_bind(m);
  if (status == GT_SUCCESS) {
    gt_carver measure = {NULL, 0};
    gt_gpt_layout(m, &measure);
    m->act_bytes = measure.off;
    status = be->ops->alloc(be, m->act_bytes, &m->act_buffer);
  }
  if (status == GT_SUCCESS) {
    gt_carver carve = {m->act_buffer, 0};
    gt_gpt_layout(m, &carve);
    /* Touch the whole buffer once, so first-use page faults stay out of steps. */
    status = be->ops->zero(be, m->act_buffer, m->act_bytes);
  }
  if (status != GT_SUCCESS) {
    gt_gpt_destroy(model);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

int gt_gpt_destroy(gt_gpt **model)
{
  gt_gpt *m = *model;
  if (!m)
    return GT_SUCCESS;
  if (m->act_buffer)
    m->be->ops->free(m->be, m->act_buffer);
  gt_params_destroy(&m->params);
  free(m->w);
  free(m->g);
  free(m->acts);
  free(m->resid);
  free(m->host_losses);
  free(m);
  *model = NULL;
  return GT_SUCCESS;
}

gt_params *gt_gpt_params(gt_gpt *m) { return m->params; }

int gt_gpt_init(gt_gpt *m, uint64_t seed)
{
  GT_CALL(gt_params_init(m->params, seed));
  return GT_SUCCESS;
}

size_t gt_gpt_activation_bytes(const gt_gpt *m) { return m->act_bytes; }

// ---- forward and backward -----------------------------------------------------------------------

int gt_gpt_forward(gt_gpt *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                   float grad_scale, double *loss_sum)
{
  GT_ASSERT(B >= 1 && B <= m->batch && T >= 1 && T <= m->seq);
  gt_backend *be = m->be;
  const int N = B * T, C = m->shape.dim, V = m->shape.vocab;
  const gt_layer_dims d = {B, T, C, m->shape.heads};
  GT_CALL(be->ops->upload(be, m->tokens, tokens, sizeof(int32_t) * (size_t)N));
  GT_CALL(be->ops->upload(be, m->targets, targets, sizeof(int32_t) * (size_t)N));
  GT_CALL(be->ops->embedding_forward(be, m->resid[0], m->tokens, m->wte, m->wpe, B, T, C));
  for (int l = 0; l < m->shape.layers; l++)
    GT_CALL(gt_block_forward(be, &m->w[l], &m->acts[l], m->resid[l], m->resid[l + 1], d));
  GT_CALL(gt_lm_head_forward(be, m->wte, m->lnf_w, m->lnf_b, &m->head,
                             m->resid[m->shape.layers], m->targets, N, C, V, grad_scale));
  GT_CALL(be->ops->download(be, m->host_losses, m->head.losses, sizeof(float) * (size_t)N));
  double s = 0;
  for (int i = 0; i < N; i++)
    s += m->host_losses[i];
  *loss_sum = s;
  m->grad_ready = grad_scale != 0.0f;
  m->last_B = B;
  m->last_T = T;
  return GT_SUCCESS;
}

int gt_gpt_backward(gt_gpt *m)
{
  GT_CHECK(m->grad_ready, GT_ERR_INTERNAL,
           "gt_gpt_backward needs a forward with grad_scale != 0 first");
  gt_backend *be = m->be;
  const int B = m->last_B, T = m->last_T, N = B * T, C = m->shape.dim, L = m->shape.layers;
  const gt_layer_dims d = {B, T, C, m->shape.heads};
  GT_CALL(gt_lm_head_backward(be, m->wte, m->dwte, m->lnf_w, m->dlnf_w, m->dlnf_b, &m->head,
                              m->resid[L], m->dres, m->scratch.dln, N, C, m->shape.vocab));
  for (int l = L - 1; l >= 0; l--)
    GT_CALL(gt_block_backward(be, &m->w[l], &m->g[l], &m->acts[l], m->resid[l], m->dres,
                              &m->scratch, d));
  GT_CALL(be->ops->embedding_backward(be, m->dwte, m->dwpe, m->dres, m->tokens, B, T, C));
  m->grad_ready = false;
  return GT_SUCCESS;
}

// ---- sizes --------------------------------------------------------------------------------------

size_t gt_gpt_param_count(const gt_gpt_shape *s)
{
  const size_t C = (size_t)s->dim;
  return (size_t)s->vocab * C + (size_t)s->max_seq * C +
         (size_t)s->layers * (12 * C * C + 13 * C) + 2 * C;
}

double gt_gpt_flops_per_token(const gt_gpt_shape *s, int T)
{
  const double C = s->dim, L = s->layers;
  const double matrix_params = L * 12.0 * C * C + (double)s->vocab * C;
  return 6.0 * matrix_params + 12.0 * L * C * T;
}
