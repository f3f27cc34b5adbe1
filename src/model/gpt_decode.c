/*
 * gpt_decode.c - incremental decoding (gpt.h): a key/value cache per block
 * and the one-row forward that generation runs for each new token.
 *
 * One device buffer holds, per block, the (len, 3Cl) q, k, v rows of the
 * positions so far (gt_block_decode writes row t and attends over rows
 * 0..t), and one row of everything else: the residual stream (two rows,
 * ping-pong), a block's scratch shared by all blocks, the head's LayerNorm
 * and its (Vl) logits, those in fp32 and the (tp, Vl) gathered ones.
 */
#include "gpt_impl.h"

#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"

struct gt_gpt_cache {
  gt_gpt *m;
  int len, pos;
  void *buf;                 /* device */
  void **qkv;                /* per local block: (len, 3Cl) */
  gt_block_acts step;        /* one row of block scratch (qkv set per block) */
  void *x[2];                /* (C) the residual stream, ping-pong */
  gt_head_acts head;         /* lnf (C), stats, logits (Vl) */
  float *logits32, *gathered; /* (Vl) fp32, (P, Vl) fp32 */
  int32_t *token;            /* device (1) */
  int32_t *host_token;       /* pinned (1) */
  float *host_logits;        /* pinned (P Vl) */
  gt_device_event *done;
};

/* Lay out (c->buf NULL: measure) the cache's buffer. */
static size_t gt_cache_layout(gt_gpt_cache *c)
{
  const gt_gpt *m = c->m;
  const size_t C = (size_t)m->shape.dim, P = (size_t)m->part.tp.size;
  const size_t hs = (size_t)gt_gpt_shape_head_size(&m->shape);
  const size_t Cl = (size_t)m->H * hs, QKV = Cl + 2 * (size_t)m->Hkv * hs;
  /* the dense MLP of any block: a dense one's or an MoE one's shared experts */
  const size_t Fl = (size_t)(m->moe_here && m->Fs > m->F ? m->Fs : m->F);
  const size_t G = m->kind.swiglu ? 2 * Fl : Fl;
  const size_t E = gt_dtype_size(m->dt), F = sizeof(float);
  const size_t Vl = (size_t)m->vocab_rows;
  gt_carver cv = {c->buf, 0};
  for (int l = 0; l < m->local_blocks; l++)
    c->qkv[l] = gt_carve(&cv, (size_t)c->len * QKV * E);
  gt_block_acts *a = &c->step;
  a->ln1 = gt_carve(&cv, C * E);
  a->ln1_mean = gt_carve(&cv, F);
  a->ln1_rstd = gt_carve(&cv, F);
  a->atty = gt_carve(&cv, Cl * E);
  a->res2 = gt_carve(&cv, C * E);
  a->ln2 = gt_carve(&cv, C * E);
  a->ln2_mean = gt_carve(&cv, F);
  a->ln2_rstd = gt_carve(&cv, F);
  a->fc = gt_carve(&cv, G * E);
  a->gelu = gt_carve(&cv, Fl * E);
  if (m->moe_here) { /* the last of the model's host count sets is the cache's */
    a->moe.host = m->moe_host ? m->moe_host + ((size_t)m->nslots * (size_t)m->local_blocks + 1) *
                                                  2 * (size_t)m->shape.experts
                              : NULL;
    gt_gpt_layout_moe_acts(m, &a->moe, &cv, 1);
  }
  c->x[0] = gt_carve(&cv, C * E);
  c->x[1] = gt_carve(&cv, C * E);
  c->head.lnf = gt_carve(&cv, C * E);
  c->head.lnf_mean = gt_carve(&cv, F);
  c->head.lnf_rstd = gt_carve(&cv, F);
  c->head.logits = gt_carve(&cv, Vl * E);
  c->logits32 = gt_carve(&cv, Vl * F);
  c->gathered = gt_carve(&cv, P * Vl * F);
  c->token = gt_carve(&cv, sizeof(int32_t));
  return cv.off;
}

int gt_gpt_cache_create(gt_gpt *m, int len, gt_gpt_cache **cache)
{
  *cache = NULL;
  GT_CHECK(m->part.first && m->part.last && m->chunks == 1, GT_ERR_INPUT,
           "decoding needs the whole model on one pipeline stage (pp = 1); this rank holds "
           "blocks %d-%d%s",
           m->part.layer_begin, m->part.layer_end - 1,
           m->part.first ? "" : " without the embedding");
  GT_CHECK(len >= 1 && len <= m->shape.max_seq, GT_ERR_INPUT,
           "a decoding cache of %d positions; the model has 1 to %d (seq_len)", len,
           m->shape.max_seq);
  gt_backend *be = m->be;
  gt_gpt_cache *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  c->m = m;
  c->len = len;
  c->qkv = calloc((size_t)(m->local_blocks > 0 ? m->local_blocks : 1), sizeof *c->qkv);
  int status = c->qkv ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the cache");
  const size_t bytes = status == GT_SUCCESS ? gt_cache_layout(c) : 0;
  if (status == GT_SUCCESS)
    status = be->ops->alloc(be, bytes, &c->buf);
  if (status == GT_SUCCESS) {
    gt_cache_layout(c);
    status = be->ops->zero(be, c->buf, bytes);
  }
  if (status == GT_SUCCESS)
    status = be->ops->alloc_host(be, sizeof(int32_t), (void **)&c->host_token);
  if (status == GT_SUCCESS)
    status =
        be->ops->alloc_host(be, sizeof(float) * (size_t)m->part.tp.size * (size_t)m->vocab_rows,
                            (void **)&c->host_logits);
  if (status == GT_SUCCESS)
    status = be->ops->event_create(be, &c->done);
  *cache = c;
  if (status != GT_SUCCESS) {
    gt_gpt_cache_destroy(cache);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

int gt_gpt_cache_destroy(gt_gpt_cache **cache)
{
  gt_gpt_cache *c = *cache;
  if (!c)
    return GT_SUCCESS;
  gt_backend *be = c->m->be;
  int status = be->ops->sync(be); /* nothing queued may still use the buffers */
  if (c->buf)
    be->ops->free(be, c->buf);
  if (c->host_token)
    be->ops->free_host(be, c->host_token);
  if (c->host_logits)
    be->ops->free_host(be, c->host_logits);
  if (c->done)
    be->ops->event_destroy(be, c->done);
  free(c->qkv);
  free(c);
  *cache = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_gpt_cache_length(const gt_gpt_cache *c) { return c->pos; }
int gt_gpt_cache_capacity(const gt_gpt_cache *c) { return c->len; }
void gt_gpt_cache_reset(gt_gpt_cache *c) { c->pos = 0; }

// ---- one position -----------------------------------------------------------------

/* The whole vocabulary's logits (fp32) of the head's one row into
 * c->host_logits, gathered over tp, waited for. */
static int gt_cache_logits(gt_gpt *m, gt_gpt_cache *c)
{
  gt_backend *be = m->be;
  const size_t Vl = (size_t)m->vocab_rows, P = (size_t)m->part.tp.size;
  float *mine = c->head.logits;
  if (m->dt != GT_F32) {
    GT_CALL(be->ops->cast(be, GT_F32, c->logits32, m->dt, c->head.logits, Vl));
    mine = c->logits32;
  }
  const float *all = mine;
  if (P > 1) {
    GT_CALL(gt_group_allgather(&m->part.tp, mine, c->gathered, Vl, GT_F32));
    all = c->gathered;
  }
  GT_CALL(be->ops->download(be, c->host_logits, all, P * Vl * sizeof(float), NULL));
  GT_CALL(be->ops->event_record(be, c->done, NULL));
  GT_CALL(be->ops->event_wait(be, c->done));
  return GT_SUCCESS;
}

int gt_gpt_decode(gt_gpt *m, gt_gpt_cache *c, int32_t token, float *logits)
{
  GT_ASSERT(c->m == m);
  GT_CHECK(c->pos < c->len, GT_ERR_INPUT,
           "the decoding cache is full: %d positions (the context length)", c->len);
  GT_CHECK(token >= 0 && token < m->shape.vocab, GT_ERR_INPUT,
           "token %d is outside the model's vocabulary [0, %d)", (int)token, m->shape.vocab);
  gt_backend *be = m->be;
  const int64_t C = m->shape.dim, t = c->pos;
  const gt_layer_dims d = gt_gpt_layer_dims(m, 1, 1, m->has_whook ? &m->whook.progress : NULL,
                                            NULL);
  /* the last call waited for its download, so the upload before it is done */
  *c->host_token = token;
  GT_CALL(be->ops->upload(be, c->token, c->host_token, sizeof(int32_t), NULL));
  const gt_gpt_pass *ps = &m->fwd[0];
  int k = 0; /* the weight unit of the pass (ZeRO 3) */
  GT_CALL(gt_gpt_take(m, ps, k));
  const void *wpe_t =
      m->wpe ? (const char *)m->wpe + (size_t)(t * C) * gt_dtype_size(m->dt) : NULL;
  GT_CALL(gt_embedding_forward(be, m->dt, c->x[0], c->token, m->wte, wpe_t, 1, 1, C, m->vocab_first,
                               m->vocab_real, &m->part.tp, NULL));
  GT_CALL(gt_gpt_drop(m, ps, k++));
  int cur = 0;
  for (int l = 0; l < m->local_blocks; l++) {
    gt_block_acts a = c->step;
    a.qkv = c->qkv[l];
    GT_CALL(gt_gpt_take(m, ps, k));
    gt_moe_dims md;
    const gt_layer_dims dl = gt_gpt_block_dims(m, l, d, &md, 0.0f, false);
    GT_CALL(gt_block_decode(be, &m->w[l], &a, t, c->x[cur], c->x[1 - cur], dl));
    GT_CALL(gt_gpt_drop(m, ps, k++));
    cur = 1 - cur;
  }
  GT_CALL(gt_gpt_take(m, ps, k)); /* ln_f (and an untied head) */
  if (m->tied)
    GT_CALL(gt_gpt_take(m, ps, k + 1)); /* wte for the tied head */
  gt_head_dims hd = gt_gpt_head_dims(m, 1);
  hd.sp = NULL;
  GT_CALL(gt_lm_head_logits(be, gt_gpt_head_weight(m), m->lnf_w, m->lnf_b, &c->head,
                            c->x[cur], hd));
  GT_CALL(gt_gpt_drop(m, ps, k));
  if (m->tied)
    GT_CALL(gt_gpt_drop(m, ps, k + 1));
  GT_CALL(gt_cache_logits(m, c));
  /* rank r's piece holds vocabulary entries r Vl .. r Vl + nv_r - 1 */
  memcpy(logits, c->host_logits, sizeof(float) * (size_t)m->shape.vocab);
  c->pos++;
  return GT_SUCCESS;
}
