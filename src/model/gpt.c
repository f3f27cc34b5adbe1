/*
 * gpt.c - the GPT model (or the part of it one rank holds): parameter
 * registry, activation slots, and the forward / backward passes.
 */
#include "gpt_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/timer.h"

// ---- the logical parameters ----------------------------------------------------------

typedef enum { GT_AT_EMBED, GT_AT_BLOCK, GT_AT_HEAD } gt_gpt_at;

/* One logical parameter and how tensor parallelism splits it. */
typedef struct {
  char name[GT_PARAM_NAME_MAX];
  int ndim;
  long dims[3];
  int axis, blocks; /* split over tp along axis (-1: replicated) */
  int units[GT_SHARD_MAX_BLOCKS]; /* the blocks' proportions (0: equal) */
  gt_init_kind init;
  float std;
  bool decay;
  gt_gpt_at at;
  int layer;
  int kind; /* a block's tensor: its GT_BP_* */
} gt_gpt_pdesc;

/* The tensors a block may have: GPT-2's twelve (weights and biases
 * interleaved), then an MoE block's router and experts. */
enum {
  GT_BP_LN1_W, GT_BP_LN1_B, GT_BP_QKV_W, GT_BP_QKV_B, GT_BP_PROJ_W, GT_BP_PROJ_B,
  GT_BP_LN2_W, GT_BP_LN2_B, GT_BP_FC_W, GT_BP_FC_B, GT_BP_FCPROJ_W, GT_BP_FCPROJ_B,
  GT_BP_ROUTER_W, GT_BP_EFC_W, GT_BP_EFC_B, GT_BP_EPROJ_W, GT_BP_EPROJ_B,
  GT_BLOCK_PARAMS_MAX
};

/* Parameters of the embedding (wte[, wpe]), of the head
 * (ln_f.weight[, ln_f.bias][, lm_head.weight]). */
static int gt_gpt_embed_params(const gt_gpt_shape *s) { return gt_gpt_shape_llama(s) ? 1 : 2; }
static int gt_gpt_lnf_params(const gt_gpt_shape *s) { return gt_gpt_shape_llama(s) ? 1 : 2; }
static int gt_gpt_head_params(const gt_gpt_shape *s)
{
  return gt_gpt_lnf_params(s) + (gt_gpt_shape_tied(s) ? 0 : 1);
}

/* The tensors of block `layer` in registration order (GT_BP_*; llama has
 * no biases; an MoE block's dense MLP only with shared experts); returns
 * their number. */
static int gt_gpt_block_list(const gt_gpt_shape *s, int layer, int kinds[GT_BLOCK_PARAMS_MAX])
{
  const bool bias = !gt_gpt_shape_llama(s), moe = gt_gpt_shape_moe_block(s, layer);
  const bool dense_mlp = !moe || gt_gpt_shape_shared_ffn(s) > 0;
  int n = 0;
  for (int k = 0; k < GT_BLOCK_PARAMS_MAX; k++) {
    const bool is_bias = k < GT_BP_ROUTER_W ? k % 2 == 1 : k == GT_BP_EFC_B || k == GT_BP_EPROJ_B;
    if (is_bias && !bias)
      continue;
    if (k >= GT_BP_FC_W && k <= GT_BP_FCPROJ_B && !dense_mlp)
      continue;
    if (k >= GT_BP_ROUTER_W && !moe)
      continue;
    kinds[n++] = k;
  }
  return n;
}

static int gt_gpt_block_count(const gt_gpt_shape *s, int layer)
{
  int kinds[GT_BLOCK_PARAMS_MAX];
  return gt_gpt_block_list(s, layer, kinds);
}

/* The block parameters before block l: dense blocks and MoE blocks each
 * have their own count, and the MoE ones are the multiples of moe_every. */
static int gt_gpt_block_offset(const gt_gpt_shape *s, int l)
{
  const int every = s->moe_every > 0 ? s->moe_every : 1;
  const int moe = s->experts > 0 ? (l + every - 1) / every : 0;
  int dense_n = 0, moe_n = 0;
  for (int j = 0; j < every + 1 && j < s->layers; j++) { /* one of each kind, if any */
    if (gt_gpt_shape_moe_block(s, j))
      moe_n = gt_gpt_block_count(s, j);
    else
      dense_n = gt_gpt_block_count(s, j);
  }
  return (l - moe) * dense_n + moe * moe_n;
}

int gt_gpt_logical_count(const gt_gpt_shape *s)
{
  return gt_gpt_embed_params(s) + gt_gpt_block_offset(s, s->layers) + gt_gpt_head_params(s);
}

/* Block tensor k of layer l. */
static gt_gpt_pdesc gt_gpt_describe_block(const gt_gpt_shape *s, int l, int k)
{
  const long C = s->dim;
  const float std = 0.02f, std_res = 0.02f / sqrtf(2.0f * (float)s->layers);
  const long hs = C / s->heads, K = gt_gpt_shape_kv_heads(s);
  const bool moe = gt_gpt_shape_moe_block(s, l), glu = gt_gpt_shape_llama(s);
  const long F = moe ? gt_gpt_shape_shared_ffn(s) : gt_gpt_shape_ffn(s);
  const long Fe = gt_gpt_shape_expert_ffn(s), E = s->experts;
  const long qkv = (s->heads + 2 * K) * hs;
  static const char *const suffix[GT_BLOCK_PARAMS_MAX] = {
    "ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias",
    "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias",
    "moe.router.weight", "moe.experts.fc.weight", "moe.experts.fc.bias",
    "moe.experts.proj.weight", "moe.experts.proj.bias"};
  gt_gpt_pdesc d = {.ndim = 1, .axis = -1, .blocks = 1, .init = GT_INIT_ZEROS,
                    .at = GT_AT_BLOCK, .layer = l, .kind = k};
  snprintf(d.name, sizeof d.name, "h.%d.%s", l, suffix[k]);
  const bool weight = k < GT_BP_ROUTER_W ? k % 2 == 0 : k != GT_BP_EFC_B && k != GT_BP_EPROJ_B;
  const bool norm = k == GT_BP_LN1_W || k == GT_BP_LN2_W || k == GT_BP_LN1_B ||
                    k == GT_BP_LN2_B;
  const bool residual = k == GT_BP_PROJ_W || k == GT_BP_FCPROJ_W || k == GT_BP_EPROJ_W;
  d.dims[0] = C;
  switch (k) {
  case GT_BP_QKV_W: /* q, k, v rows: column-parallel by heads */
  case GT_BP_QKV_B:
    d.dims[0] = qkv;
    d.dims[1] = C;
    d.axis = 0;
    d.blocks = 3;
    if (K != s->heads)
      memcpy(d.units, (int[3]){s->heads, (int)K, (int)K}, sizeof(int[3]));
    break;
  case GT_BP_PROJ_W: /* row-parallel: the input columns; the bias replicated */
    d.dims[1] = s->heads * hs;
    d.axis = 1;
    break;
  case GT_BP_FC_W: /* column-parallel: gate and up rows (SwiGLU) or the units */
  case GT_BP_FC_B:
    d.dims[0] = glu ? 2 * F : F;
    d.dims[1] = C;
    d.axis = 0;
    d.blocks = glu ? 2 : 1;
    break;
  case GT_BP_FCPROJ_W:
    d.dims[1] = F;
    d.axis = 1;
    break;
  case GT_BP_ROUTER_W: /* replicated: every rank of tp routes alike */
    d.dims[0] = E;
    d.dims[1] = C;
    break;
  case GT_BP_EFC_W: /* each expert column-parallel as mlp.fc */
  case GT_BP_EFC_B:
    d.dims[0] = E;
    d.dims[1] = glu ? 2 * Fe : Fe;
    d.dims[2] = C;
    d.axis = 1;
    d.blocks = glu ? 2 : 1;
    break;
  case GT_BP_EPROJ_W: /* each expert row-parallel as mlp.proj */
    d.dims[0] = E;
    d.dims[1] = C;
    d.dims[2] = Fe;
    d.axis = 2;
    break;
  case GT_BP_EPROJ_B: /* replicated, added by tp rank 0 */
    d.dims[0] = E;
    d.dims[1] = C;
    break;
  default:
    break;
  }
  /* a bias is its weight's rows: one dimension fewer */
  d.ndim = k >= GT_BP_ROUTER_W ? (k == GT_BP_EFC_W || k == GT_BP_EPROJ_W ? 3 : 2)
           : weight && !norm   ? 2
                               : 1;
  for (int i = d.ndim; i < 3; i++)
    d.dims[i] = 0;
  if (d.axis >= d.ndim || (k == GT_BP_PROJ_B || k == GT_BP_FCPROJ_B))
    d.axis = -1;
  d.init = norm ? (weight ? GT_INIT_ONES : GT_INIT_ZEROS)
                : (weight ? GT_INIT_NORMAL : GT_INIT_ZEROS);
  d.std = d.init == GT_INIT_NORMAL ? (residual ? std_res : std) : 0.0f;
  d.decay = weight && !norm;
  return d;
}

static gt_gpt_pdesc gt_gpt_describe(const gt_gpt_shape *s, int i)
{
  const long C = s->dim;
  const float std = 0.02f;
  const int E = gt_gpt_embed_params(s);
  gt_gpt_pdesc d = {.ndim = 1, .axis = -1, .blocks = 1, .init = GT_INIT_ZEROS, .layer = -1};
  if (i < E) {
    d = (gt_gpt_pdesc){.ndim = 2, .axis = i == 0 ? 0 : -1, .blocks = 1,
                       .init = GT_INIT_NORMAL, .std = std, .decay = true,
                       .at = GT_AT_EMBED, .layer = -1};
    snprintf(d.name, sizeof d.name, "%s", i == 0 ? "wte" : "wpe");
    d.dims[0] = i == 0 ? s->vocab : s->max_seq;
    d.dims[1] = C;
    return d;
  }
  i -= E;
  if (i < gt_gpt_block_offset(s, s->layers)) { /* the last block starting at or before i */
    int lo = 0, hi = s->layers - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (gt_gpt_block_offset(s, mid) <= i)
        lo = mid;
      else
        hi = mid - 1;
    }
    int kinds[GT_BLOCK_PARAMS_MAX];
    gt_gpt_block_list(s, lo, kinds);
    return gt_gpt_describe_block(s, lo, kinds[i - gt_gpt_block_offset(s, lo)]);
  }
  const int j = i - gt_gpt_block_offset(s, s->layers);
  d.at = GT_AT_HEAD;
  d.dims[0] = C;
  if (j == gt_gpt_lnf_params(s)) { /* the untied head: vocabulary-parallel as wte */
    d.ndim = 2;
    d.dims[0] = s->vocab;
    d.dims[1] = C;
    d.axis = 0;
    d.init = GT_INIT_NORMAL;
    d.std = std;
    d.decay = true;
    snprintf(d.name, sizeof d.name, "lm_head.weight");
    return d;
  }
  d.init = j == 0 ? GT_INIT_ONES : GT_INIT_ZEROS;
  snprintf(d.name, sizeof d.name, "%s", j == 0 ? "ln_f.weight" : "ln_f.bias");
  return d;
}

static size_t gt_gpt_pdesc_numel(const gt_gpt_pdesc *d)
{
  size_t n = 1;
  for (int i = 0; i < d->ndim; i++)
    n *= (size_t)d->dims[i];
  return n;
}

size_t gt_gpt_logical_param(const gt_gpt_shape *shape, int i, char name[GT_PARAM_NAME_MAX],
                            int *ndim, long dims[GT_TENSOR_MAX_DIMS])
{
  gt_gpt_pdesc d = gt_gpt_describe(shape, i);
  snprintf(name, GT_PARAM_NAME_MAX, "%s", d.name);
  *ndim = d.ndim;
  for (int k = 0; k < 3; k++)
    dims[k] = d.dims[k];
  return gt_gpt_pdesc_numel(&d);
}

static int gt_gpt_add(gt_gpt *m, const gt_gpt_pdesc *d, bool counted_if_replicated,
                      bool counted_if_split)
{
  const gt_group *tp = &m->part.tp;
  gt_shard sh = GT_SHARD_NONE;
  if (d->axis >= 0 && tp->size > 1) {
    sh = (gt_shard){d->axis, d->blocks, tp->size, tp->rank, {0}};
    memcpy(sh.units, d->units, sizeof sh.units);
  }
  bool counted = sh.axis < 0 ? counted_if_replicated : counted_if_split;
  GT_CALL(gt_params_add(m->params, d->name, d->ndim, d->dims, sh, counted, d->init, d->std,
                        d->decay));
  return GT_SUCCESS;
}

/* Whether a block (global layer index) is one of the part's. */
static bool gt_gpt_holds_layer(const gt_gpt_part *pt, int layer)
{
  if (pt->chunks <= 1)
    return layer >= pt->layer_begin && layer < pt->layer_end;
  for (int c = 0; c < pt->chunks; c++)
    if (layer >= pt->chunk_begin[c] && layer < pt->chunk_end[c])
      return true;
  return false;
}

void gt_gpt_part_place(gt_gpt_part *part, const int *vfirst, int p, int s, int chunks,
                       const int *chunk_slots)
{
  part->first = s == 0;
  part->last = s == p - 1;
  part->chunks = chunks > 1 ? chunks : 1;
  for (int c = 0; c < part->chunks; c++) {
    part->chunk_begin[c] = vfirst[c * p + s];
    part->chunk_end[c] = vfirst[c * p + s + 1];
    part->chunk_slots[c] = chunks > 1 ? chunk_slots[c] : 0;
  }
  part->layer_begin = part->chunk_begin[0];
  part->layer_end = part->chunk_end[part->chunks - 1];
}

int gt_gpt_chunks(const gt_gpt *m) { return m->chunks; }

int gt_gpt_chunk_slot(const gt_gpt *m, int chunk, int mb)
{
  const int n = m->chunk_first_slot[chunk + 1] - m->chunk_first_slot[chunk];
  return m->chunk_first_slot[chunk] + mb % n;
}

/* This rank's parameters, in the order backward finishes them last-first:
 * the embedding (first stage: wte[, wpe]), each block's (gt_gpt_block_list), the
 * head (ln_f.weight[, ln_f.bias][, lm_head.weight]) and, on a last stage
 * that is not also the first with a tied head, its copy of wte. */
static int gt_gpt_register(gt_gpt *m)
{
  const gt_gpt_part *pt = &m->part;
  const bool lead = pt->tp.rank == 0;
  const int n = gt_gpt_logical_count(&m->shape);
  gt_params *p = m->params;
  int local = 0, last_layer = -1; /* blocks come in ascending order, the chunks too */
  for (int i = 0; i < n; i++) {
    gt_gpt_pdesc d = gt_gpt_describe(&m->shape, i);
    bool here = (d.at == GT_AT_EMBED && pt->first) || (d.at == GT_AT_HEAD && pt->last) ||
                (d.at == GT_AT_BLOCK && gt_gpt_holds_layer(pt, d.layer));
    if (!here)
      continue;
    if (i == 0)
      m->p_wte = p->count;
    if (d.at == GT_AT_BLOCK && d.layer != last_layer) {
      m->p_block[local] = p->count;
      m->p_block_n[local] = gt_gpt_block_count(&m->shape, d.layer);
      GT_ASSERT(m->layer_of[local] == d.layer);
      local++;
      last_layer = d.layer;
    }
    if (d.at == GT_AT_HEAD && d.init == GT_INIT_ONES)
      m->p_head = p->count;
    GT_CALL(gt_gpt_add(m, &d, lead, true));
  }
  m->p_emb_count = pt->first ? gt_gpt_embed_params(&m->shape) : 0;
  m->p_lnf_count = gt_gpt_lnf_params(&m->shape);
  m->p_head_count = pt->last ? gt_gpt_head_params(&m->shape) : 0;
  if (pt->last && !pt->first && m->tied) {
    gt_gpt_pdesc d = gt_gpt_describe(&m->shape, 0);
    GT_CALL(gt_gpt_add(m, &d, false, false));
    m->p_head_count++;
  }
  return GT_SUCCESS;
}

/* Point the per-block weight structs and the other views at the parameters. */
static int gt_gpt_bind(gt_gpt *m)
{
  gt_params *p = m->params;
  free(m->gptr);
  free(m->wptr);
  m->gptr = calloc((size_t)(p->count > 0 ? p->count : 1), sizeof *m->gptr);
  m->wptr = calloc((size_t)(p->count > 0 ? p->count : 1), sizeof *m->wptr);
  GT_CHECK_ALLOC(m->gptr, sizeof *m->gptr * (size_t)p->count);
  GT_CHECK_ALLOC(m->wptr, sizeof *m->wptr * (size_t)p->count);
#define GT_BIND(index, wv, gv)                                                                \
  do {                                                                                        \
    const gt_param *t_ = &p->list[(index)];                                                   \
    (wv) = t_->compute.data;                                                                  \
    (gv) = t_->grad.data;                                                                     \
    m->wptr[(index)] = (const void **)&(wv);                                                  \
    m->gptr[(index)] = &(gv);                                                                 \
  } while (0)
  if (m->part.first) {
    GT_BIND(m->p_wte, m->wte, m->dwte);
    if (!m->llama)
      GT_BIND(m->p_wte + 1, m->wpe, m->dwpe);
  }
  for (int l = 0; l < m->local_blocks; l++) {
    gt_block_weights *w = &m->w[l];
    gt_block_grads *g = &m->g[l];
    const void **wv[GT_BLOCK_PARAMS_MAX] = {
      &w->ln1_w, &w->ln1_b, &w->qkv_w, &w->qkv_b, &w->proj_w, &w->proj_b,
      &w->ln2_w, &w->ln2_b, &w->fc_w, &w->fc_b, &w->fcproj_w, &w->fcproj_b,
      &w->moe.router_w, &w->moe.fc_w, &w->moe.fc_b, &w->moe.proj_w, &w->moe.proj_b};
    float **gv[GT_BLOCK_PARAMS_MAX] = {
      &g->ln1_w, &g->ln1_b, &g->qkv_w, &g->qkv_b, &g->proj_w, &g->proj_b,
      &g->ln2_w, &g->ln2_b, &g->fc_w, &g->fc_b, &g->fcproj_w, &g->fcproj_b,
      &g->moe.router_w, &g->moe.fc_w, &g->moe.fc_b, &g->moe.proj_w, &g->moe.proj_b};
    int kinds[GT_BLOCK_PARAMS_MAX];
    const int n = gt_gpt_block_list(&m->shape, m->layer_of[l], kinds);
    GT_ASSERT(n == m->p_block_n[l]);
    for (int i = 0; i < n; i++)
      GT_BIND(m->p_block[l] + i, *wv[kinds[i]], *gv[kinds[i]]);
  }
  if (m->part.last) {
    GT_BIND(m->p_head, m->lnf_w, m->dlnf_w);
    if (!m->llama)
      GT_BIND(m->p_head + 1, m->lnf_b, m->dlnf_b);
    if (!m->tied)
      GT_BIND(m->p_head + m->p_lnf_count, m->head_w, m->dhead_w);
    else if (!m->part.first) /* the copy */
      GT_BIND(m->p_head + m->p_lnf_count, m->wte, m->dwte);
  }
#undef GT_BIND
  return GT_SUCCESS;
}

void gt_gpt_moe_take(gt_gpt *m, double *load, double *dropped)
{
  if (!m->moe_here)
    return;
  const size_t E = (size_t)m->shape.experts;
  for (int l = 0; l < m->local_blocks; l++)
    for (size_t e = 0; e < E; e++) {
      load[(size_t)m->layer_of[l] * E + e] += (double)m->moe_load[(size_t)l * E + e];
      m->moe_load[(size_t)l * E + e] = 0;
    }
  *dropped += (double)m->moe_dropped;
  m->moe_dropped = 0;
}

int gt_gpt_use_stash(gt_gpt *m, bool stash)
{
  if (m->on_stash == stash)
    return GT_SUCCESS;
  const gt_params *p = m->params;
  GT_ASSERT(p->stash || !stash);
  for (int i = 0; i < p->count; i++)
    *m->wptr[i] = stash ? gt_params_stash_at(p, p->list[i].offset) : p->list[i].compute.data;
  m->on_stash = stash;
  return GT_SUCCESS;
}

void gt_gpt_rebind_grads(gt_gpt *m)
{
  const gt_params *p = m->params;
  for (int i = 0; i < p->count; i++)
    *m->gptr[i] = p->list[i].grad.data;
}

const void *gt_gpt_head_weight(const gt_gpt *m) { return m->tied ? m->wte : m->head_w; }
float *gt_gpt_head_grad(const gt_gpt *m) { return m->tied ? m->dwte : m->dhead_w; }

/* The weight units of each chunk's passes (gpt.h): forward the embedding
 * (first chunk), the chunk's blocks, the head (last chunk; and wte with one
 * stage); backward the head's units, then the blocks from the last. */
static int gt_gpt_chunk_passes(gt_gpt *m, int c)
{
  const int l0 = m->chunk_first_block[c], l1 = m->chunk_first_block[c + 1];
  const bool embed = m->part.first && c == 0, head = m->part.last && c == m->chunks - 1;
  const size_t most = (size_t)(l1 - l0) + 4;
  gt_gpt_pass *ps[2] = {&m->fwd[c], &m->bwd[c]};
  for (int k = 0; k < 2; k++) {
    free(ps[k]->first);
    ps[k]->first = malloc(2 * most * sizeof(int));
    GT_CHECK_ALLOC(ps[k]->first, 2 * most * sizeof(int));
    ps[k]->count = ps[k]->first + most;
    ps[k]->n = 0;
  }
#define GT_PASS(ps, f, c)                                                                     \
  do {                                                                                        \
    (ps)->first[(ps)->n] = (f);                                                               \
    (ps)->count[(ps)->n++] = (c);                                                             \
  } while (0)
  const bool one_stage = m->part.first && m->part.last;
  if (embed)
    GT_PASS(ps[0], m->p_wte, m->p_emb_count);
  for (int l = l0; l < l1; l++)
    GT_PASS(ps[0], m->p_block[l], m->p_block_n[l]);
  if (head) {
    GT_PASS(ps[0], m->p_head, m->p_head_count);
    GT_PASS(ps[1], m->p_head, m->p_head_count);
    if (one_stage && m->tied) {
      GT_PASS(ps[0], m->p_wte, 1);
      GT_PASS(ps[1], m->p_wte, 1);
    }
  }
  for (int l = l1 - 1; l >= l0; l--)
    GT_PASS(ps[1], m->p_block[l], m->p_block_n[l]);
#undef GT_PASS
  return GT_SUCCESS;
}

static int gt_gpt_passes(gt_gpt *m)
{
  for (int c = 0; c < m->chunks; c++)
    GT_CALL(gt_gpt_chunk_passes(m, c));
  return GT_SUCCESS;
}

void gt_gpt_set_weight_hook(gt_gpt *m, const gt_weight_hook *hook)
{
  m->has_whook = hook != NULL;
  if (hook)
    m->whook = *hook;
}

int gt_gpt_take(gt_gpt *m, const gt_gpt_pass *ps, int k)
{
  const gt_params *p = m->params;
  if (!p->compute_sharded)
    return GT_SUCCESS;
  GT_CHECK(m->has_whook, GT_ERR_INTERNAL,
           "internal error: the compute weights are in ZeRO pieces and no weight hook is set");
  const int first = ps->first[k], count = ps->count[k];
  const int nf = k + 1 < ps->n ? ps->first[k + 1] : 0;
  const int nc = k + 1 < ps->n ? ps->count[k + 1] : 0;
  const void *base = NULL;
  GT_CALL(m->whook.acquire(m->whook.ctx, first, count, nf, nc, &base));
  const size_t es = gt_dtype_size(m->dt);
  for (int j = first; j < first + count; j++)
    *m->wptr[j] = (const char *)base + (p->list[j].offset - p->list[first].offset) * es;
  return GT_SUCCESS;
}

int gt_gpt_drop(gt_gpt *m, const gt_gpt_pass *ps, int k)
{
  if (!m->params->compute_sharded)
    return GT_SUCCESS;
  const int first = ps->first[k], count = ps->count[k];
  for (int j = first; j < first + count; j++)
    *m->wptr[j] = NULL;
  GT_CALL(m->whook.release(m->whook.ctx, first, count));
  return GT_SUCCESS;
}

void gt_gpt_gather_sizes(const gt_gpt *m, size_t sizes[GT_GPT_GATHER_BUFS])
{
  size_t largest = 0, block = 0;
  for (int c = 0; c < m->chunks; c++)
    for (int k = 0; k < m->fwd[c].n; k++) {
      const gt_gpt_pass *ps = &m->fwd[c];
      const size_t len = gt_params_span(m->params, ps->first[k], ps->count[k]);
      largest = len > largest ? len : largest;
    }
  for (int l = 0; l < m->local_blocks; l++) {
    const size_t len = gt_params_span(m->params, m->p_block[l], m->p_block_n[l]);
    block = len > block ? len : block;
  }
  /* one embedding or head at a time; the one-stage head's ln_f is smaller
   * than a block */
  sizes[0] = largest;
  if (block == 0 && m->part.last)
    block = gt_params_span(m->params, m->p_head, m->p_lnf_count);
  sizes[1] = sizes[2] = block;
}

// ---- activations ---------------------------------------------------------------------

/* A block's local widths (layers.h): Cl attention, QKV the q, k, v rows, F
 * the MLP units, G mlp.fc's rows. */
typedef struct {
  size_t Cl, QKV, F, G;
} gt_gpt_widths;

/* mlp: the dense MLP's units F of a dense block (GT_MLP_DENSE), of an MoE
 * block (its shared experts, GT_MLP_MOE), or the larger (GT_MLP_ANY: the
 * buffers every block shares). */
enum { GT_MLP_DENSE, GT_MLP_MOE, GT_MLP_ANY };

static gt_gpt_widths gt_gpt_widths_of(const gt_gpt *m, int mlp)
{
  const size_t hs = (size_t)gt_gpt_shape_head_size(&m->shape);
  gt_gpt_widths w;
  w.Cl = (size_t)m->H * hs;
  w.QKV = w.Cl + 2 * (size_t)m->Hkv * hs;
  const size_t dense = (size_t)m->F, shared = m->moe_here ? (size_t)m->Fs : 0;
  w.F = mlp == GT_MLP_DENSE ? dense : mlp == GT_MLP_MOE ? shared : dense > shared ? dense : shared;
  w.G = m->kind.swiglu ? 2 * w.F : w.F;
  return w;
}

/* Whether local block l has experts. */
static bool gt_gpt_local_moe(const gt_gpt *m, int l)
{
  return gt_gpt_shape_moe_block(&m->shape, m->layer_of[l]);
}

void gt_gpt_layout_moe_acts(const gt_gpt *m, gt_moe_acts *a, gt_carver *c, size_t N)
{
  const size_t E = (size_t)m->shape.experts, k = (size_t)m->shape.top_k, R = N * k;
  const size_t C = (size_t)m->shape.dim, F = sizeof(float), I = sizeof(int32_t);
  const size_t es = gt_dtype_size(m->dt), Fe = (size_t)m->Fe;
  const size_t Ge = m->kind.swiglu ? 2 * Fe : Fe;
  int32_t *host = a->host;
  memset(a, 0, sizeof *a);
  a->host = host;
  a->probs = gt_carve(c, N * E * F);
  a->lse = gt_carve(c, N * F);
  a->gate = gt_carve(c, N * k * F);
  a->sel = gt_carve(c, N * k * I);
  a->pos = gt_carve(c, N * k * I);
  a->counts = gt_carve(c, 2 * E * I);
  a->xp = gt_carve(c, R * C * es);
  a->h = gt_carve(c, R * Ge * es);
  a->act = gt_carve(c, R * Fe * es);
  a->y = gt_carve(c, R * C * es);
}

/* Which of a block's activations to lay out: the attention core's output
 * and statistics (what ATTENTION recomputes), the rest, or both. */
enum { GT_ACTS_CORE = 1, GT_ACTS_REST = 2, GT_ACTS_ALL = 3 };

/* mlp as gt_gpt_widths_of; the experts' activations with GT_MLP_MOE, and
 * with GT_MLP_ANY when the part has MoE blocks. */
static void gt_gpt_layout_acts(gt_gpt *m, gt_block_acts *a, gt_carver *c, int which, int mlp)
{
  const size_t B = (size_t)m->batch, T = (size_t)m->seq, N = B * T;
  const size_t Ns = (size_t)gt_gpt_stream_rows(m, m->batch, m->seq); /* LayerNorm side */
  const size_t C = (size_t)m->shape.dim, H = (size_t)m->H;
  const size_t F = sizeof(float), E = gt_dtype_size(m->dt);
  gt_gpt_widths wd = gt_gpt_widths_of(m, mlp);
  memset(a, 0, sizeof *a);
  if (which & GT_ACTS_CORE) {
    a->lse = gt_carve(c, B * H * T * F);
    a->atty = gt_carve(c, N * wd.Cl * E);
  }
  if (!(which & GT_ACTS_REST))
    return;
  const bool mean = !m->kind.norm.rms; /* RMSNorm keeps rstd only */
  a->ln1 = gt_carve(c, Ns * C * E);
  a->ln1_mean = mean ? gt_carve(c, Ns * F) : NULL;
  a->ln1_rstd = gt_carve(c, Ns * F);
  a->qkv = gt_carve(c, N * wd.QKV * E);
  a->res2 = gt_carve(c, Ns * C * E);
  a->ln2 = gt_carve(c, Ns * C * E);
  a->ln2_mean = mean ? gt_carve(c, Ns * F) : NULL;
  a->ln2_rstd = gt_carve(c, Ns * F);
  a->fc = wd.F ? gt_carve(c, N * wd.G * E) : NULL;
  a->gelu = wd.F ? gt_carve(c, N * wd.F * E) : NULL;
  if (mlp == GT_MLP_MOE || (mlp == GT_MLP_ANY && m->moe_here))
    gt_gpt_layout_moe_acts(m, &a->moe, c, N);
}

static void gt_gpt_layout_slot(gt_gpt *m, gt_gpt_slot *sl, gt_carver *c)
{
  const size_t B = (size_t)m->batch, T = (size_t)m->seq, N = B * T;
  const size_t Ns = (size_t)gt_gpt_stream_rows(m, m->batch, m->seq);
  const size_t C = (size_t)m->shape.dim, F = sizeof(float), E = gt_dtype_size(m->dt);
  for (int l = 0; l <= sl->nb; l++)
    sl->resid[l] = gt_carve(c, Ns * C * E);
  /* BLOCK keeps the block's input resid[l] only */
  const int keep = m->part.recompute == GT_RECOMPUTE_NONE        ? GT_ACTS_ALL
                   : m->part.recompute == GT_RECOMPUTE_ATTENTION ? GT_ACTS_REST
                                                                 : 0;
  for (int l = 0; l < sl->nb; l++)
    gt_gpt_layout_acts(m, &sl->acts[l], c, keep,
                       gt_gpt_local_moe(m, sl->l0 + l) ? GT_MLP_MOE : GT_MLP_DENSE);
  if (sl->head_here) {
    sl->head.lnf = gt_carve(c, Ns * C * E);
    sl->head.lnf_mean = gt_carve(c, Ns * F);
    sl->head.lnf_rstd = gt_carve(c, Ns * F);
    sl->head.logits = gt_carve(c, N * (size_t)m->vocab_rows * E);
    sl->head.losses = gt_carve(c, N * F);
    sl->head.stats = gt_carve(c, 3 * N * F);
  }
  sl->dgrad = gt_carve(c, Ns * C * E);
  sl->tokens = gt_carve(c, N * sizeof(int32_t));
  sl->targets = gt_carve(c, N * sizeof(int32_t));
}

static void gt_gpt_layout(gt_gpt *m, gt_carver *c)
{
  const size_t B = (size_t)m->batch, T = (size_t)m->seq, N = B * T;
  const size_t C = (size_t)m->shape.dim, P = (size_t)m->part.tp.size;
  const size_t F = sizeof(float), E = gt_dtype_size(m->dt);
  const gt_gpt_widths wd = gt_gpt_widths_of(m, GT_MLP_ANY);
  const size_t before = c->off;
  for (int s = 0; s < m->nslots; s++)
    gt_gpt_layout_slot(m, &m->slots[s], c);
  m->slot_bytes = (c->off - before) / (size_t)m->nslots;
  for (int k = 0; k < m->part.split_sets * m->local_blocks; k++) {
    gt_block_dout *o = &m->dout[k];
    o->dfcproj = gt_carve(c, N * C * E);
    o->dfc = gt_carve(c, N * wd.G * E);
    o->dproj = gt_carve(c, N * C * E);
    o->dqkv = gt_carve(c, N * wd.QKV * E);
  }
  m->scratch.dln = gt_carve(c, N * C * E);
  m->scratch.dqkv = gt_carve(c, N * wd.QKV * E);
  m->scratch.datty = gt_carve(c, N * wd.Cl * E);
  m->scratch.dfc = gt_carve(c, N * wd.G * E);
  m->scratch.dact = m->kind.swiglu ? gt_carve(c, N * wd.F * E) : NULL;
  memset(&m->moe_scratch, 0, sizeof m->moe_scratch);
  if (m->moe_here) {
    gt_moe_scratch *ms = &m->moe_scratch;
    const size_t Ex = (size_t)m->shape.experts, k = (size_t)m->shape.top_k, R = N * k;
    const size_t Fe = (size_t)m->Fe, Ge = m->kind.swiglu ? 2 * Fe : Fe;
    ms->logits = gt_carve(c, N * Ex * F);
    const bool cast = m->dt != GT_F32; /* fp32 runs the router on the tensors themselves */
    ms->x32 = cast ? gt_carve(c, N * C * F) : NULL;
    ms->dx32 = gt_carve(c, N * C * F);
    ms->w32 = cast ? gt_carve(c, Ex * C * F) : NULL;
    ms->dgate = gt_carve(c, N * k * F);
    ms->dy = gt_carve(c, R * C * E);
    ms->dh = gt_carve(c, R * Ge * E);
    ms->dact = m->kind.swiglu ? gt_carve(c, R * Fe * E) : NULL;
    ms->dxp = gt_carve(c, R * C * E);
  }
  m->rope_cos = m->rope_sin = NULL;
  if (m->kind.rope) { /* the tables for every position the model takes */
    const size_t n = (size_t)m->shape.max_seq * (size_t)gt_gpt_shape_head_size(&m->shape) / 2;
    m->rope_cos = gt_carve(c, n * F);
    m->rope_sin = gt_carve(c, n * F);
  }
  m->kind.rope_cos = m->rope_cos;
  m->kind.rope_sin = m->rope_sin;
  memset(&m->re, 0, sizeof m->re);
  m->re_out = NULL;
  if (m->part.recompute != GT_RECOMPUTE_NONE && m->local_blocks > 0)
    gt_gpt_layout_acts(m, &m->re, c,
                       m->part.recompute == GT_RECOMPUTE_ATTENTION ? GT_ACTS_CORE : GT_ACTS_ALL,
                       GT_MLP_ANY);
  if (m->part.recompute == GT_RECOMPUTE_BLOCK && m->local_blocks > 0)
    m->re_out = gt_carve(c, (size_t)gt_gpt_stream_rows(m, m->batch, m->seq) * C * E);
  m->dlnf = gt_carve(c, N * C * E);
  m->stats_all = gt_carve(c, 3 * N * P * F);
  memset(&m->sp, 0, sizeof m->sp);
  if (m->sp_on) {
    m->sp.full = gt_carve(c, N * C * E);
    m->sp.piece = gt_carve(c, N / P * C * E);
  }
}

// ---- life cycle ----------------------------------------------------------------------------

const char *gt_recompute_name(gt_recompute r)
{
  return r >= GT_RECOMPUTE_NONE && r <= GT_RECOMPUTE_BLOCK ? gt_recompute_names[r] : "?";
}

int gt_recompute_parse(const char *name)
{
  for (int r = GT_RECOMPUTE_NONE; r <= GT_RECOMPUTE_BLOCK; r++)
    if (strcmp(name, gt_recompute_names[r]) == 0)
      return r;
  return -1;
}

gt_gpt_part gt_gpt_whole(const gt_gpt_shape *shape)
{
  gt_gpt_part p = {.layer_end = shape->layers,
                   .first = true,
                   .last = true,
                   .tp = {MPI_COMM_NULL, 0, 1, -1, NULL},
                   .recompute = GT_RECOMPUTE_NONE,
                   .recompute_event = -1,
                   .chunks = 1};
  p.chunk_end[0] = shape->layers;
  return p;
}

/* The model's sizes and its host-side bookkeeping (views, slots), no device
 * memory: what gt_gpt_create builds on, and all gt_gpt_plan needs. */
static int gt_gpt_shell(gt_backend *be, const gt_gpt_shape *shape, const gt_gpt_part *part,
                        gt_dtype dtype, int batch, int seq, int slots, gt_gpt **model)
{
  const int P = part->tp.size;
  GT_ASSERT(shape->dim % shape->heads == 0 && shape->heads % P == 0);
  GT_ASSERT(seq >= 1 && seq <= shape->max_seq && batch >= 1 && slots >= 1);
  GT_ASSERT(part->layer_begin >= 0 && part->layer_end <= shape->layers &&
            part->layer_begin <= part->layer_end);
  GT_ASSERT(part->chunks <= GT_GPT_MAX_CHUNKS);
  gt_gpt *m = calloc(1, sizeof *m);
  GT_CHECK_ALLOC(m, sizeof *m);
  *model = m;
  m->be = be;
  m->shape = *shape;
  m->part = *part;
  m->dt = dtype;
  m->batch = batch;
  m->seq = seq;
  m->chunks = part->chunks > 1 ? part->chunks : 1;
  m->chunk_first_block[0] = m->chunk_first_slot[0] = 0;
  for (int c = 0; c < m->chunks; c++) {
    const int b = m->chunks > 1 ? part->chunk_begin[c] : part->layer_begin;
    const int e = m->chunks > 1 ? part->chunk_end[c] : part->layer_end;
    GT_ASSERT(b >= 0 && e >= b && e <= shape->layers && (c == 0 || b >= part->chunk_end[c - 1]));
    m->chunk_first_block[c + 1] = m->chunk_first_block[c] + (e - b);
    m->chunk_first_slot[c + 1] =
        m->chunk_first_slot[c] + (m->chunks > 1 ? part->chunk_slots[c] : slots);
    GT_ASSERT(m->chunk_first_slot[c + 1] > m->chunk_first_slot[c]);
  }
  GT_ASSERT(m->chunk_first_slot[m->chunks] == slots);
  m->local_blocks = m->chunk_first_block[m->chunks];
  m->sp_on = part->seq_par && P > 1;
  GT_ASSERT(!m->sp_on || ((int64_t)batch * seq) % P == 0);
  m->H = shape->heads / P;
  m->llama = gt_gpt_shape_llama(shape);
  m->tied = gt_gpt_shape_tied(shape);
  m->Hkv = gt_gpt_shape_kv_heads(shape) / P;
  m->F = gt_gpt_shape_ffn(shape) / P;
  m->Fe = gt_gpt_shape_expert_ffn(shape) / P;
  m->Fs = gt_gpt_shape_shared_ffn(shape) / P;
  GT_ASSERT(shape->experts == 0 || (shape->top_k >= 1 && shape->top_k <= shape->experts &&
                                    gt_gpt_shape_expert_ffn(shape) % P == 0 &&
                                    gt_gpt_shape_shared_ffn(shape) % P == 0));
  GT_ASSERT(gt_gpt_shape_kv_heads(shape) % P == 0 && gt_gpt_shape_ffn(shape) % P == 0);
  GT_ASSERT(shape->heads % gt_gpt_shape_kv_heads(shape) == 0);
  if (m->llama)
    m->kind = (gt_block_kind){.norm = {true, gt_gpt_shape_norm_eps(shape)},
                              .rope = true,
                              .swiglu = true};
  m->vocab_rows = (shape->vocab + P - 1) / P;
  m->vocab_first = part->tp.rank * m->vocab_rows;
  const int vocab_left = shape->vocab - m->vocab_first;
  m->vocab_real = vocab_left < m->vocab_rows ? vocab_left : m->vocab_rows;
  GT_ASSERT(m->vocab_real >= 1);
  m->nslots = slots;
  const int nl = m->local_blocks > 0 ? m->local_blocks : 1;
  m->w = calloc((size_t)nl, sizeof *m->w);
  m->g = calloc((size_t)nl, sizeof *m->g);
  m->p_block = calloc((size_t)nl, sizeof *m->p_block);
  m->p_block_n = calloc((size_t)nl, sizeof *m->p_block_n);
  m->layer_of = calloc((size_t)nl, sizeof *m->layer_of);
  m->slots = calloc((size_t)slots, sizeof *m->slots);
  const int sets = part->split_sets > 0 ? part->split_sets : 0;
  m->dout = calloc((size_t)(sets * nl) + 1, sizeof *m->dout);
  m->dout_busy = malloc(((size_t)sets + 1) * sizeof *m->dout_busy);
  for (int k = 0; m->dout_busy && k < sets; k++)
    m->dout_busy[k] = -1;
  bool ok = m->w && m->g && m->p_block && m->p_block_n && m->layer_of && m->slots && m->dout &&
            m->dout_busy;
  for (int c = 0, l = 0; ok && c < m->chunks; c++) {
    const int b = m->chunks > 1 ? part->chunk_begin[c] : part->layer_begin;
    for (int j = 0; j < m->chunk_first_block[c + 1] - m->chunk_first_block[c]; j++)
      m->layer_of[l++] = b + j;
  }
  for (int l = 0; ok && l < m->local_blocks; l++)
    m->moe_here = m->moe_here || gt_gpt_local_moe(m, l);
  if (ok && m->moe_here) {
    m->moe_load = calloc((size_t)nl * (size_t)shape->experts, sizeof *m->moe_load);
    ok = m->moe_load != NULL;
  }
  for (int c = 0; c < m->chunks; c++)
    for (int s = m->chunk_first_slot[c]; ok && s < m->chunk_first_slot[c + 1]; s++) {
      gt_gpt_slot *sl = &m->slots[s];
      sl->chunk = c;
      sl->l0 = m->chunk_first_block[c];
      sl->nb = m->chunk_first_block[c + 1] - m->chunk_first_block[c];
      sl->head_here = part->last && c == m->chunks - 1;
      sl->acts = calloc((size_t)(sl->nb > 0 ? sl->nb : 1), sizeof *sl->acts);
      sl->resid = calloc((size_t)sl->nb + 1, sizeof *sl->resid);
      ok = sl->acts && sl->resid;
    }
  if (!ok) {
    gt_gpt_destroy(model);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory creating the GPT");
  }
  gt_carver measure = {NULL, 0};
  gt_gpt_layout(m, &measure);
  m->act_bytes = measure.off;
  return GT_SUCCESS;
}

int gt_gpt_plan(const gt_gpt_shape *shape, const gt_gpt_part *part, gt_dtype dtype, int batch,
                int seq, int slots, size_t *act_bytes, size_t *slot_bytes)
{
  gt_gpt *m = NULL;
  GT_CALL(gt_gpt_shell(NULL, shape, part, dtype, batch, seq, slots, &m));
  *act_bytes = m->act_bytes;
  *slot_bytes = m->slot_bytes;
  gt_gpt_destroy(&m);
  return GT_SUCCESS;
}

int gt_gpt_tied_param(const gt_gpt *m)
{
  if (m->part.first == m->part.last || !m->tied)
    return -1;
  return m->part.first ? m->p_wte : m->p_head + m->p_lnf_count;
}

/* A part with its parameters laid out but nothing allocated (for the
 * plans); destroy it with gt_gpt_destroy (also after a failure). */
static int gt_gpt_described(const gt_gpt_shape *shape, const gt_gpt_part *part,
                            const gt_params_split *split, gt_dtype dtype, gt_gpt **model)
{
  gt_gpt_part params_only = *part; /* no activations: their split does not matter */
  params_only.seq_par = false;
  int slots = 1;
  if (part->chunks > 1) {
    slots = part->chunks;
    for (int c = 0; c < part->chunks; c++)
      params_only.chunk_slots[c] = 1;
  }
  GT_CALL(gt_gpt_shell(NULL, shape, &params_only, dtype, 1, 1, slots, model));
  gt_gpt *m = *model;
  GT_CALL(gt_params_create(NULL, dtype, &m->params));
  GT_CALL(gt_gpt_register(m));
  if (split && split->size > 1)
    GT_CALL(gt_params_shard(m->params, split->rank, split->size, split->stage));
  GT_CALL(gt_params_layout(m->params));
  return GT_SUCCESS;
}

int gt_gpt_plan_params(const gt_gpt_shape *shape, const gt_gpt_part *part,
                       const gt_params_split *split, gt_dtype dtype, size_t *numel,
                       size_t *largest_unit, size_t *second_unit, size_t *tied_unit)
{
  gt_gpt *m = NULL;
  int status = gt_gpt_described(shape, part, split, dtype, &m);
  if (status == GT_SUCCESS) {
    *numel = m->params->numel;
    *largest_unit = *second_unit = *tied_unit = 0;
    enum { MAX_UNITS = 4096 };
    int first[MAX_UNITS], count[MAX_UNITS];
    const int n = gt_gpt_grad_units(m, first, count, MAX_UNITS);
    const int tied = gt_gpt_tied_param(m);
    for (int i = 0; i < n && i < MAX_UNITS; i++) {
      const size_t len = gt_params_span(m->params, first[i], count[i]);
      if (first[i] == tied) {
        *tied_unit = len;
      } else if (len > *largest_unit) {
        *second_unit = *largest_unit;
        *largest_unit = len;
      } else if (len > *second_unit) {
        *second_unit = len;
      }
    }
  }
  gt_gpt_destroy(&m);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_gpt_plan_gather(const gt_gpt_shape *shape, const gt_gpt_part *part,
                       const gt_params_split *split, gt_dtype dtype,
                       size_t sizes[GT_GPT_GATHER_BUFS])
{
  gt_gpt *m = NULL;
  int status = gt_gpt_described(shape, part, split, dtype, &m);
  if (status == GT_SUCCESS)
    status = gt_gpt_passes(m);
  if (status == GT_SUCCESS)
    gt_gpt_gather_sizes(m, sizes);
  gt_gpt_destroy(&m);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The rotary tables (rope.h) into the activation buffer, once. */
static int gt_gpt_rope_upload(gt_gpt *m)
{
  gt_backend *be = m->be;
  const int64_t hs = gt_gpt_shape_head_size(&m->shape);
  const size_t n = (size_t)m->shape.max_seq * (size_t)(hs / 2);
  float *host = NULL;
  GT_CALL(be->ops->alloc_host(be, 2 * n * sizeof(float), (void **)&host));
  const double theta = m->shape.rope_theta > 0 ? m->shape.rope_theta : 10000.0;
  int status = gt_rope_tables(hs, m->shape.max_seq, theta, &m->shape.rope, host, host + n);
  if (status == GT_SUCCESS)
    status = be->ops->upload(be, m->rope_cos, host, n * sizeof(float), NULL);
  if (status == GT_SUCCESS)
    status = be->ops->upload(be, m->rope_sin, host + n, n * sizeof(float), NULL);
  if (status == GT_SUCCESS)
    status = be->ops->sync(be); /* the host tables are freed next */
  be->ops->free_host(be, host);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The pinned host copies of the MoE blocks' counts (2E int32 per slot and
 * local block, then the recomputation's and the decoding cache's) and the
 * event of their download. */
static int gt_gpt_moe_host(gt_gpt *m)
{
  gt_backend *be = m->be;
  const size_t E2 = 2 * (size_t)m->shape.experts;
  const size_t sets = (size_t)m->nslots * (size_t)m->local_blocks + 2;
  GT_CALL(be->ops->alloc_host(be, sets * E2 * sizeof(int32_t), (void **)&m->moe_host));
  GT_CALL(be->ops->event_create(be, &m->moe_scratch.counted));
  for (int s = 0; s < m->nslots; s++)
    for (int j = 0; j < m->slots[s].nb; j++)
      m->slots[s].acts[j].moe.host = m->moe_host + ((size_t)s * (size_t)m->local_blocks +
                                                    (size_t)(m->slots[s].l0 + j)) * E2;
  m->re.moe.host = m->moe_host + (sets - 2) * E2;
  return GT_SUCCESS;
}

int gt_gpt_create(gt_backend *be, const gt_gpt_shape *shape, const gt_gpt_part *part,
                  const gt_params_split *split, gt_dtype dtype, int batch, int seq, int slots,
                  gt_gpt **model)
{
  GT_CALL(gt_gpt_shell(be, shape, part, dtype, batch, seq, slots, model));
  gt_gpt *m = *model;
  const size_t ntok = (size_t)batch * (size_t)seq * sizeof(int32_t);
  int status = GT_SUCCESS;
  for (int s = 0; s < slots && status == GT_SUCCESS; s++) {
    gt_gpt_slot *sl = &m->slots[s];
    status = be->ops->alloc_host(be, ntok, (void **)&sl->host_tokens);
    if (status == GT_SUCCESS)
      status = be->ops->alloc_host(be, ntok, (void **)&sl->host_targets);
    if (status == GT_SUCCESS)
      status = be->ops->event_create(be, &sl->uploaded);
  }
  if (status == GT_SUCCESS)
    status = gt_params_create(be, dtype, &m->params);
  if (status == GT_SUCCESS)
    status = gt_gpt_register(m);
  if (status == GT_SUCCESS && split && split->size > 1)
    status = gt_params_shard(m->params, split->rank, split->size, split->stage);
  if (status == GT_SUCCESS)
    status = gt_params_finalize(m->params);
  if (status == GT_SUCCESS)
    status = gt_gpt_bind(m);
  if (status == GT_SUCCESS)
    status = gt_gpt_passes(m);
  if (status == GT_SUCCESS)
    status = be->ops->alloc(be, m->act_bytes, &m->act_buffer);
  if (status == GT_SUCCESS) {
    gt_carver carve = {m->act_buffer, 0};
    gt_gpt_layout(m, &carve);
    if (m->moe_here)
      status = gt_gpt_moe_host(m);
    /* Touch the whole buffer once, so first-use page faults stay out of steps. */
    if (status == GT_SUCCESS)
      status = be->ops->zero(be, m->act_buffer, m->act_bytes);
  }
  if (status == GT_SUCCESS && m->kind.rope)
    status = gt_gpt_rope_upload(m);
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
  gt_backend *be = m->be;
  if (m->act_buffer)
    be->ops->free(be, m->act_buffer);
  gt_params_destroy(&m->params);
  for (int s = 0; m->slots && s < m->nslots; s++) {
    gt_gpt_slot *sl = &m->slots[s];
    free(sl->acts);
    free(sl->resid);
    if (sl->host_tokens)
      be->ops->free_host(be, sl->host_tokens);
    if (sl->host_targets)
      be->ops->free_host(be, sl->host_targets);
    if (sl->uploaded)
      be->ops->event_destroy(be, sl->uploaded);
  }
  free(m->slots);
  free(m->dout);
  free(m->dout_busy);
  free(m->gptr);
  free(m->wptr);
  for (int c = 0; c < GT_GPT_MAX_CHUNKS; c++) {
    free(m->fwd[c].first);
    free(m->bwd[c].first);
  }
  free(m->w);
  free(m->g);
  if (m->moe_host)
    be->ops->free_host(be, m->moe_host);
  if (m->moe_scratch.counted)
    be->ops->event_destroy(be, m->moe_scratch.counted);
  free(m->moe_load);
  free(m->p_block);
  free(m->p_block_n);
  free(m->layer_of);
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
size_t gt_gpt_slot_bytes(const gt_gpt *m) { return m->slot_bytes; }
void *gt_gpt_input(gt_gpt *m, int slot) { return m->slots[slot].resid[0]; }
void *gt_gpt_output(gt_gpt *m, int slot) { return m->slots[slot].resid[m->slots[slot].nb]; }
void *gt_gpt_grad(gt_gpt *m, int slot) { return m->slots[slot].dgrad; }

int64_t gt_gpt_stream_rows(const gt_gpt *m, int B, int T)
{
  const int64_t N = (int64_t)B * T;
  return m->sp_on ? N / m->part.tp.size : N;
}
gt_dtype gt_gpt_dtype(const gt_gpt *m) { return m->dt; }
const gt_gpt_shape *gt_gpt_shape_of(const gt_gpt *m) { return &m->shape; }

void gt_gpt_tied_grad(gt_gpt *m, float **grad, size_t *n)
{
  *grad = NULL;
  *n = 0;
  const int tied = gt_gpt_tied_param(m);
  if (tied < 0) /* both ends here, or neither */
    return;
  const gt_param *wte = &m->params->list[tied];
  *grad = wte->grad.data; /* NULL when the gradients are in ZeRO 2 pieces */
  *n = wte->grad.data ? wte->numel : 0;
}

// ---- forward and backward -----------------------------------------------------------------------

gt_layer_dims gt_gpt_layer_dims(const gt_gpt *m, int64_t B, int64_t T,
                                const gt_progress *progress, const gt_seq_par *sp)
{
  return (gt_layer_dims){.B = B,
                         .T = T,
                         .C = m->shape.dim,
                         .H = m->H,
                         .dt = m->dt,
                         .tp = &m->part.tp,
                         .progress = progress,
                         .sp = sp,
                         .Hkv = m->Hkv,
                         .F = m->F,
                         .kind = m->kind};
}

gt_layer_dims gt_gpt_block_dims(gt_gpt *m, int l, gt_layer_dims d, gt_moe_dims *md,
                                float dlogit_scale, bool count)
{
  if (!gt_gpt_local_moe(m, l))
    return d;
  const gt_gpt_shape *s = &m->shape;
  /* the router's losses are means over a micro-batch's N tokens, and the
   * step's over its micro-batches: d(loss)/d(L) = coefficient * N / (the
   * step's tokens), which dlogit_scale * N is (with the loss scale) */
  const double per_mb = (double)dlogit_scale * (double)(d.B * d.T);
  *md = (gt_moe_dims){.E = s->experts,
                      .k = s->top_k,
                      .F = m->Fe,
                      .capacity_factor = s->capacity_factor,
                      .aux_scale = (float)(s->aux_loss * per_mb),
                      .z_scale = (float)(s->z_loss * per_mb),
                      .load = count ? m->moe_load + (size_t)l * (size_t)s->experts : NULL,
                      .dropped = count ? &m->moe_dropped : NULL,
                      .scratch = &m->moe_scratch};
  d.F = m->Fs;
  d.moe = md;
  return d;
}

gt_head_dims gt_gpt_head_dims(const gt_gpt *m, int64_t N)
{
  return (gt_head_dims){.N = N,
                        .C = m->shape.dim,
                        .norm = m->kind.norm,
                        .vocab_rows = m->vocab_rows,
                        .vocab_first = m->vocab_first,
                        .vocab_real = m->vocab_real,
                        .dt = m->dt,
                        .tp = &m->part.tp,
                        .sp = m->sp_on ? &m->sp : NULL};
}

/* Where block l of slot sl keeps its activations: the slot's own, with the
 * shared recomputation buffers for what the mode does not keep. */
static gt_block_acts gt_gpt_block_acts(const gt_gpt *m, const gt_gpt_slot *sl, int l)
{
  if (m->part.recompute == GT_RECOMPUTE_BLOCK)
    return m->re;
  gt_block_acts a = sl->acts[l];
  if (m->part.recompute == GT_RECOMPUTE_ATTENTION) {
    a.atty = m->re.atty;
    a.lse = m->re.lse;
  }
  return a;
}

/* Upload a micro-batch's tokens (n of them) through the slot's pinned
 * buffer, which the previous upload from it must have left. */
static int gt_gpt_upload_ids(gt_gpt *m, gt_gpt_slot *sl, int32_t *dev, int32_t *pinned,
                             const int32_t *ids, size_t n)
{
  gt_backend *be = m->be;
  if (sl->upload_pending) {
    GT_CALL(be->ops->event_wait(be, sl->uploaded));
    sl->upload_pending = false;
  }
  memcpy(pinned, ids, n * sizeof(int32_t));
  GT_CALL(be->ops->upload(be, dev, pinned, n * sizeof(int32_t), NULL));
  return GT_SUCCESS;
}

int gt_gpt_forward(gt_gpt *m, int slot, const int32_t *tokens, const int32_t *targets, int B,
                   int T, float dlogit_scale, double *loss_acc)
{
  GT_ASSERT(B >= 1 && B <= m->batch && T >= 1 && T <= m->seq);
  GT_ASSERT(slot >= 0 && slot < m->nslots);
  gt_backend *be = m->be;
  gt_gpt_slot *sl = &m->slots[slot];
  const int64_t N = (int64_t)B * T, C = m->shape.dim;
  GT_CHECK(!sl->w_pending, GT_ERR_INTERNAL,
           "a forward into slot %d, whose weight gradients (W) have not run", slot);
  GT_CHECK(!m->sp_on || N % m->part.tp.size == 0, GT_ERR_INPUT,
           "sequence parallelism: a micro-batch of %lld tokens does not split over tp=%d",
           (long long)N, m->part.tp.size);
  const gt_seq_par *sp = m->sp_on ? &m->sp : NULL;
  const gt_layer_dims d =
      gt_gpt_layer_dims(m, B, T, m->has_whook ? &m->whook.progress : NULL, sp);
  const bool embed = m->part.first && sl->chunk == 0;
  if (embed)
    GT_CALL(gt_gpt_upload_ids(m, sl, sl->tokens, sl->host_tokens, tokens, (size_t)N));
  if (sl->head_here)
    GT_CALL(gt_gpt_upload_ids(m, sl, sl->targets, sl->host_targets, targets, (size_t)N));
  if (embed || sl->head_here) {
    GT_CALL(be->ops->event_record(be, sl->uploaded, NULL));
    sl->upload_pending = true;
  }
  const gt_gpt_pass *ps = &m->fwd[sl->chunk];
  int k = 0; /* the weight unit of the pass (ZeRO 3) */
  if (embed) {
    GT_CALL(gt_gpt_take(m, ps, k));
    GT_CALL(gt_embedding_forward(be, m->dt, sl->resid[0], sl->tokens, m->wte, m->wpe, B, T, C,
                                 m->vocab_first, m->vocab_real, &m->part.tp, sp));
    GT_CALL(gt_gpt_drop(m, ps, k++));
  }
  for (int j = 0; j < sl->nb; j++) {
    const gt_block_acts a = gt_gpt_block_acts(m, sl, j);
    gt_moe_dims md;
    const gt_layer_dims dj = gt_gpt_block_dims(m, sl->l0 + j, d, &md, dlogit_scale, false);
    GT_CALL(gt_gpt_take(m, ps, k));
    GT_CALL(gt_block_forward(be, &m->w[sl->l0 + j], &a, sl->resid[j], sl->resid[j + 1], dj));
    GT_CALL(gt_gpt_drop(m, ps, k++));
  }
  if (sl->head_here) {
    const bool one_stage_tied = m->part.first && m->tied;
    GT_CALL(gt_gpt_take(m, ps, k));
    if (one_stage_tied)
      GT_CALL(gt_gpt_take(m, ps, k + 1));
    GT_CALL(gt_lm_head_forward(be, gt_gpt_head_weight(m), m->lnf_w, m->lnf_b, &sl->head,
                               sl->resid[sl->nb], sl->targets, m->stats_all,
                               gt_gpt_head_dims(m, N), dlogit_scale));
    GT_CALL(gt_gpt_drop(m, ps, k));
    if (one_stage_tied)
      GT_CALL(gt_gpt_drop(m, ps, k + 1));
    if (loss_acc)
      GT_CALL(be->ops->sum_add(be, loss_acc, sl->head.losses, (size_t)N));
  }
  sl->grad_ready = dlogit_scale != 0.0f;
  sl->dlogit_scale = dlogit_scale;
  sl->B = B;
  sl->T = T;
  return GT_SUCCESS;
}

/* Rerun what block j of slot sl (local block sl->l0 + j) did not keep (see
 * gpt.h), before its backward. */
static int gt_gpt_recompute(gt_gpt *m, gt_gpt_slot *sl, int j, const gt_block_acts *a,
                            gt_layer_dims d)
{
  const gt_recompute r = m->part.recompute;
  if (r == GT_RECOMPUTE_NONE)
    return GT_SUCCESS;
  d.progress = NULL;
  if (m->part.recompute_event >= 0)
    gt_event_begin(m->part.recompute_event);
  int status = r == GT_RECOMPUTE_BLOCK
                   ? gt_block_forward(m->be, &m->w[sl->l0 + j], a, sl->resid[j], m->re_out, d)
                   : gt_block_attention_forward(m->be, a, d);
  if (m->part.recompute_event >= 0)
    gt_event_end(m->part.recompute_event);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_gpt_grad_units(const gt_gpt *m, int *first, int *count, int max)
{
  int n = 0;
#define GT_UNIT(f, c)                                                                         \
  do {                                                                                        \
    if (n < max) {                                                                            \
      first[n] = (f);                                                                         \
      count[n] = (c);                                                                         \
    }                                                                                         \
    n++;                                                                                      \
  } while (0)
  if (m->part.last) {
    GT_UNIT(m->p_head, m->p_lnf_count);
    if (m->p_head_count > m->p_lnf_count) /* lm_head or the wte copy */
      GT_UNIT(m->p_head + m->p_lnf_count, 1);
  }
  for (int l = m->local_blocks - 1; l >= 0; l--)
    GT_UNIT(m->p_block[l], m->p_block_n[l]);
  if (m->part.first) {
    if (m->p_emb_count > 1)
      GT_UNIT(m->p_wte + 1, 1);
    GT_UNIT(m->p_wte, 1);
  }
#undef GT_UNIT
  return n;
}

/* Where unit [first, first + count)'s gradients go this micro-batch (the
 * flat buffer's views unless the hook says otherwise). */
static int gt_gpt_grads(gt_gpt *m, const gt_grad_hook *hook, int first, int count)
{
  if (!hook || !hook->grads || count <= 0)
    return GT_SUCCESS;
  float *base = NULL;
  GT_CALL(hook->grads(hook->ctx, first, count, &base));
  const gt_param *list = m->params->list;
  for (int j = first; j < first + count; j++)
    *m->gptr[j] = base + (list[j].offset - list[first].offset);
  return GT_SUCCESS;
}

static int gt_gpt_ready(const gt_grad_hook *hook, int first, int count)
{
  if (hook && hook->ready && count > 0)
    GT_CALL(hook->ready(hook->ctx, first, count));
  return GT_SUCCESS;
}

/* Which part of the backward a call runs. */
typedef enum { GT_BWD_ALL, GT_BWD_INPUT, GT_BWD_WEIGHTS } gt_bwd_part;

/* The projection output gradients of local block l in set k (0 <= k <
 * split_sets, checked by the caller). */
static gt_block_dout *gt_gpt_dout(gt_gpt *m, int k, int l)
{
  return &m->dout[(size_t)k * (size_t)m->local_blocks + (size_t)l];
}

/* Whether a split backward leaves the head weight's gradient to W: on a
 * last stage, unless the head is the embedding of a one-stage tied model,
 * whose gradient the embedding's backward (in B) adds to after the head's
 * (W after it would change the order of the sums). */
static bool gt_gpt_head_w_deferred(const gt_gpt *m) { return !(m->part.first && m->tied); }

/* The W of a slot whose B ran into set k (gt_gpt_backward_weights): the
 * head weight's gradient (gt_gpt_head_w_deferred), then the blocks' from
 * the last, the order of the joint backward. */
static int gt_gpt_weights_pass(gt_gpt *m, gt_gpt_slot *sl, int k, const gt_grad_hook *hook)
{
  if (sl->head_here && gt_gpt_head_w_deferred(m)) {
    GT_CALL(gt_lm_head_backward_weights(m->be, gt_gpt_head_grad(m), &sl->head,
                                        gt_gpt_head_dims(m, (int64_t)sl->B * sl->T)));
    GT_CALL(gt_gpt_ready(hook, m->p_head + m->p_lnf_count, m->p_head_count - m->p_lnf_count));
  }
  const gt_layer_dims d = gt_gpt_layer_dims(m, sl->B, sl->T, hook ? &hook->progress : NULL, NULL);
  for (int j = sl->nb - 1; j >= 0; j--) {
    const int l = sl->l0 + j;
    const gt_block_acts a = gt_gpt_block_acts(m, sl, j);
    GT_CALL(gt_block_backward_weights(m->be, &m->g[l], &a, gt_gpt_dout(m, k, l), d));
    GT_CALL(gt_gpt_ready(hook, m->p_block[l], m->p_block_n[l]));
  }
  return GT_SUCCESS;
}

static int gt_gpt_backward_part(gt_gpt *m, int slot, int set, const gt_grad_hook *hook,
                                gt_bwd_part part)
{
  GT_ASSERT(slot >= 0 && slot < m->nslots);
  gt_gpt_slot *sl = &m->slots[slot];
  if (part != GT_BWD_ALL)
    GT_CHECK(set >= 0 && set < m->part.split_sets, GT_ERR_INTERNAL,
             "split backward set %d of %d", set, m->part.split_sets);
  if (part == GT_BWD_WEIGHTS) {
    GT_CHECK(sl->w_pending && m->dout_busy[set] == slot, GT_ERR_INTERNAL,
             "gt_gpt_backward_weights of slot %d (set %d) needs its gt_gpt_backward_input "
             "first",
             slot, set);
    sl->w_pending = false;
    m->dout_busy[set] = -1;
    GT_CALL(gt_gpt_weights_pass(m, sl, set, hook));
    return GT_SUCCESS;
  }
  GT_CHECK(sl->grad_ready, GT_ERR_INTERNAL,
           "gt_gpt_backward needs a forward with dlogit_scale != 0 first");
  const bool split = part == GT_BWD_INPUT;
  if (split) {
    GT_CHECK(!m->has_whook && !m->sp_on && m->part.recompute == GT_RECOMPUTE_NONE &&
                 !(hook && hook->grads),
             GT_ERR_INPUT,
             "a split backward (zero-bubble schedules) takes neither ZeRO 2-3, sequence "
             "parallelism nor recomputation yet");
    GT_CHECK(!sl->w_pending && m->dout_busy[set] < 0, GT_ERR_INTERNAL,
             "gt_gpt_backward_input of slot %d into set %d, whose W is pending", slot, set);
  }
  gt_backend *be = m->be;
  const int64_t B = sl->B, T = sl->T, N = B * T, C = m->shape.dim;
  /* both hooks' progress runs the same engine (collectives.h) */
  const gt_progress *progress = hook           ? &hook->progress
                                : m->has_whook ? &m->whook.progress
                                               : NULL;
  const gt_seq_par *sp = m->sp_on ? &m->sp : NULL;
  const gt_layer_dims d = gt_gpt_layer_dims(m, B, T, progress, sp);
  const gt_gpt_pass *ps = &m->bwd[sl->chunk];
  int k = 0; /* the weight unit of the pass (ZeRO 3) */
  if (sl->head_here) {
    const bool one_stage_tied = m->part.first && m->tied;
    GT_CALL(gt_gpt_grads(m, hook, m->p_head, m->p_lnf_count));
    /* the head's weight: lm_head, the last stage's wte copy, or (one stage,
     * tied) the embedding itself, which the embedding's backward adds to at
     * the end */
    GT_CALL(gt_gpt_grads(m, hook, one_stage_tied ? m->p_wte : m->p_head + m->p_lnf_count, 1));
    GT_CALL(gt_gpt_take(m, ps, k));
    if (one_stage_tied)
      GT_CALL(gt_gpt_take(m, ps, k + 1));
    /* split: the head weight's gradient waits for W (gt_gpt_weights_pass) */
    const bool head_w = split && gt_gpt_head_w_deferred(m);
    GT_CALL(gt_lm_head_backward(be, gt_gpt_head_weight(m), head_w ? NULL : gt_gpt_head_grad(m),
                                m->lnf_w, m->dlnf_w, m->dlnf_b, &sl->head, sl->resid[sl->nb],
                                sl->dgrad, m->dlnf, gt_gpt_head_dims(m, N)));
    GT_CALL(gt_gpt_drop(m, ps, k++));
    if (one_stage_tied)
      GT_CALL(gt_gpt_drop(m, ps, k++));
    /* ln_f is final; so is the wte copy of a last stage (pp > 1) unless W
     * is still to add to it */
    GT_CALL(gt_gpt_ready(hook, m->p_head, head_w ? m->p_lnf_count : m->p_head_count));
  }
  for (int j = sl->nb - 1; j >= 0; j--) {
    const int l = sl->l0 + j;
    const gt_block_acts a = gt_gpt_block_acts(m, sl, j);
    gt_moe_dims md;
    const gt_layer_dims dj = gt_gpt_block_dims(m, l, d, &md, sl->dlogit_scale, true);
    GT_CALL(gt_gpt_grads(m, hook, m->p_block[l], m->p_block_n[l]));
    GT_CALL(gt_gpt_take(m, ps, k));
    GT_CALL(gt_gpt_recompute(m, sl, j, &a, dj));
    if (split)
      GT_CALL(gt_block_backward_input(be, &m->w[l], &m->g[l], &a, sl->resid[j], sl->dgrad,
                                      &m->scratch, gt_gpt_dout(m, set, l), dj));
    else
      GT_CALL(gt_block_backward(be, &m->w[l], &m->g[l], &a, sl->resid[j], sl->dgrad,
                                &m->scratch, dj));
    GT_CALL(gt_gpt_drop(m, ps, k++));
    if (!split)
      GT_CALL(gt_gpt_ready(hook, m->p_block[l], m->p_block_n[l]));
  }
  if (m->part.first && sl->chunk == 0) {
    if (m->p_emb_count > 1)
      GT_CALL(gt_gpt_grads(m, hook, m->p_wte + 1, 1));
    if (!m->part.last || !m->tied) /* a tied one-stage head asked already */
      GT_CALL(gt_gpt_grads(m, hook, m->p_wte, 1));
    GT_CALL(gt_embedding_backward(be, m->dt, m->dwte, m->dwpe, sl->dgrad, sl->tokens, B, T, C,
                                  m->vocab_first, m->vocab_real, &m->part.tp, sp));
    GT_CALL(gt_gpt_ready(hook, 0, m->p_emb_count));
  }
  sl->grad_ready = false;
  sl->w_pending = split;
  if (split)
    m->dout_busy[set] = slot;
  return GT_SUCCESS;
}

int gt_gpt_backward(gt_gpt *m, int slot, const gt_grad_hook *hook)
{
  GT_CALL(gt_gpt_backward_part(m, slot, -1, hook, GT_BWD_ALL));
  return GT_SUCCESS;
}

int gt_gpt_backward_input(gt_gpt *m, int slot, int set, const gt_grad_hook *hook)
{
  GT_CALL(gt_gpt_backward_part(m, slot, set, hook, GT_BWD_INPUT));
  return GT_SUCCESS;
}

int gt_gpt_backward_weights(gt_gpt *m, int slot, int set, const gt_grad_hook *hook)
{
  GT_CALL(gt_gpt_backward_part(m, slot, set, hook, GT_BWD_WEIGHTS));
  return GT_SUCCESS;
}

// ---- sizes --------------------------------------------------------------------------------------

size_t gt_gpt_param_count(const gt_gpt_shape *s)
{
  size_t n = 0;
  const int count = gt_gpt_logical_count(s);
  for (int i = 0; i < count; i++) {
    const gt_gpt_pdesc d = gt_gpt_describe(s, i);
    n += gt_gpt_pdesc_numel(&d);
  }
  return n;
}

/* Matrix entries a token meets in block l (its projections; in an MoE
 * block the router, its top_k experts and the shared ones: the active
 * parameters). */
static double gt_gpt_block_matrix(const gt_gpt_shape *s, int l)
{
  const double C = s->dim, hs = gt_gpt_shape_head_size(s), H = s->heads;
  const double K = gt_gpt_shape_kv_heads(s);
  const double per_unit = gt_gpt_shape_llama(s) ? 3.0 * C : 2.0 * C;
  double units = gt_gpt_shape_ffn(s), router = 0.0;
  if (gt_gpt_shape_moe_block(s, l)) {
    units = (double)s->top_k * gt_gpt_shape_expert_ffn(s) + gt_gpt_shape_shared_ffn(s);
    router = (double)s->experts * C;
  }
  return C * (H + 2.0 * K) * hs + H * hs * C + per_unit * units + router;
}

/* The mean over the blocks (they differ with experts every few blocks). */
static double gt_gpt_block_matrix_mean(const gt_gpt_shape *s)
{
  double sum = 0.0;
  for (int l = 0; l < s->layers; l++)
    sum += gt_gpt_block_matrix(s, l);
  return s->layers > 0 ? sum / s->layers : 0.0;
}

void gt_gpt_stage_costs(const gt_gpt_shape *s, int T, double *block, double *head)
{
  const double C = s->dim;
  *block = 2.0 * gt_gpt_block_matrix_mean(s) + 4.0 * C * T;
  *head = 2.0 * C * (double)s->vocab;
}

double gt_gpt_flops_per_token(const gt_gpt_shape *s, int T)
{
  const double C = s->dim, L = s->layers;
  const double matrix_params = L * gt_gpt_block_matrix_mean(s) + (double)s->vocab * C;
  return 6.0 * matrix_params + 12.0 * L * C * T;
}
