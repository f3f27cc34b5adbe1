/*
 * gridtrain/sample.h - text generation: the choice of the next token from
 * the logits (greedy, or a seeded draw at a temperature from the top k),
 * and the generation loop over a GPT's key/value cache (gpt.h), on token
 * ids (the text around them: prompt.h).
 *
 * A draw is a pure function of (logits, options, the index of the token in
 * the generation): u = gt_rng_uniform(gt_rng_stream(seed, "sample"), index)
 * picks from the candidates sorted by logit, largest first (the lower id
 * first on ties), cut to the top k, with probabilities proportional to
 * exp((logit - max) / temperature), summed in double. So the same seed gives
 * the same tokens on every rank and every run, and on every tensor-parallel
 * layout as long as the layouts' logits order the candidates the same (they
 * differ by the summation order of the row-parallel sums, a few ulp).
 */
#ifndef GRIDTRAIN_SAMPLE_H
#define GRIDTRAIN_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "gridtrain/gpt.h"

typedef struct gt_sample_opts {
  double temperature; /* 0: greedy (the argmax, the lower id on ties); > 0 */
  int top_k;          /* candidates kept: 0 for the whole vocabulary */
  uint64_t seed;      /* of the draws (unused when greedy) */
} gt_sample_opts;

/* GT_ERR_INPUT naming the option when temperature is negative or not
 * finite, or top_k negative. Not collective. */
int gt_sample_check(const gt_sample_opts *o);

/* The token for logits[0, n) (n >= 1), the index-th of a generation.
 * scratch: n ints (the candidate order). GT_ERR_NUMERIC when a logit is not
 * finite. Not collective. */
int gt_sample_pick(const float *logits, int n, const gt_sample_opts *o, uint64_t index,
                   int *scratch, int32_t *token);

/* Generate with m: reset the cache, feed the np >= 1 prompt tokens, then
 * append up to max_new tokens, each picked (gt_sample_pick, index 0, 1, ...)
 * from the logits of the one before among the ids below vocab_limit (the
 * tokenizer's vocabulary; at most the model's). Stops early when the
 * prompt and the output together are as long as the cache's capacity (the
 * context length, seq_len): no sliding window. out gets the new tokens (room
 * for max_new), *nout their count; logits, when not NULL (room for max_new
 * rows of the model's vocab), the whole row of logits each was picked from.
 * GT_ERR_INPUT when the prompt leaves no room for one token. Collective on the tensor-parallel group (gt_gpt_decode); every
 * rank picks the same tokens from the same gathered logits. */
int gt_generate(gt_gpt *m, gt_gpt_cache *c, const int32_t *prompt, int np, int max_new,
                int vocab_limit, const gt_sample_opts *o, int32_t *out, float *logits,
                int *nout);

#endif /* GRIDTRAIN_SAMPLE_H */
