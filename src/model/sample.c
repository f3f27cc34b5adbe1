/*
 * sample.c - the next token from the logits, and the generation loop over a
 * key/value cache (sample.h).
 */
#include "gridtrain/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/rng.h"

int gt_sample_check(const gt_sample_opts *o)
{
  GT_CHECK(isfinite(o->temperature) && o->temperature >= 0, GT_ERR_INPUT,
           "temperature %g: expected a number >= 0 (0: greedy)", o->temperature);
  GT_CHECK(o->top_k >= 0, GT_ERR_INPUT,
           "top-k %d: expected an integer >= 0 (0: the whole vocabulary)", o->top_k);
  return GT_SUCCESS;
}

/* qsort's comparison over candidate ids: larger logit first, then lower id. */
static const float *gt_sort_logits;
static int gt_by_logit(const void *a, const void *b)
{
  const int i = *(const int *)a, j = *(const int *)b;
  const float x = gt_sort_logits[i], y = gt_sort_logits[j];
  return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

int gt_sample_pick(const float *logits, int n, const gt_sample_opts *o, uint64_t index,
                   int *scratch, int32_t *token)
{
  GT_ASSERT(n >= 1);
  int best = 0;
  for (int i = 0; i < n; i++) {
    GT_CHECK(isfinite(logits[i]), GT_ERR_NUMERIC,
             "the model's logit of token %d is %g: the weights are not finite", i,
             (double)logits[i]);
    best = logits[i] > logits[best] ? i : best;
  }
  if (o->temperature == 0) {
    *token = best;
    return GT_SUCCESS;
  }
  for (int i = 0; i < n; i++)
    scratch[i] = i;
  gt_sort_logits = logits; /* not thread-safe: generation runs on one thread */
  qsort(scratch, (size_t)n, sizeof *scratch, gt_by_logit);
  const int k = o->top_k > 0 && o->top_k < n ? o->top_k : n;
  const double top = logits[scratch[0]];
  double total = 0;
  for (int r = 0; r < k; r++)
    total += exp(((double)logits[scratch[r]] - top) / o->temperature);
  const double target = gt_rng_uniform(gt_rng_stream(o->seed, "sample"), index) * total;
  double sum = 0;
  int r = 0;
  for (; r < k - 1; r++) {
    sum += exp(((double)logits[scratch[r]] - top) / o->temperature);
    if (sum >= target)
      break;
  }
  *token = scratch[r];
  return GT_SUCCESS;
}

int gt_generate(gt_gpt *m, gt_gpt_cache *c, const int32_t *prompt, int np, int max_new,
                int vocab_limit, const gt_sample_opts *o, int32_t *out, float *kept,
                int *nout)
{
  const int vocab = gt_gpt_shape_of(m)->vocab, cap = gt_gpt_cache_capacity(c);
  GT_ASSERT(np >= 1 && max_new >= 0 && vocab_limit >= 1 && vocab_limit <= vocab);
  GT_CHECK(np < cap, GT_ERR_INPUT,
           "the prompt is %d tokens and the model's context %d (seq_len): nothing is left to "
           "generate; use a shorter prompt",
           np, cap);
  *nout = 0;
  float *logits = malloc(sizeof(float) * (size_t)vocab);
  int *scratch = malloc(sizeof(int) * (size_t)vocab);
  int status = logits && scratch ? GT_SUCCESS
                                 : GT_ERROR(GT_ERR_SYSTEM, "out of memory for %d logits", vocab);
  gt_gpt_cache_reset(c);
  for (int i = 0; i < np && status == GT_SUCCESS; i++)
    status = gt_gpt_decode(m, c, prompt[i], logits);
  /* the prompt's last position gave the first logits; each new token, but
   * the one that makes the sequence as long as the context, gives the next */
  while (status == GT_SUCCESS && *nout < max_new) {
    int32_t next = 0;
    status = gt_sample_pick(logits, vocab_limit, o, (uint64_t)*nout, scratch, &next);
    if (status != GT_SUCCESS)
      break;
    if (kept)
      memcpy(kept + (size_t)*nout * (size_t)vocab, logits, sizeof(float) * (size_t)vocab);
    out[(*nout)++] = next;
    if (*nout == max_new || np + *nout == cap)
      break;
    status = gt_gpt_decode(m, c, next, logits);
  }
  free(logits);
  free(scratch);
  GT_CALL(status);
  return GT_SUCCESS;
}
