/*
 * sampling.c - [run] sample_every: a short greedy text sample of the model
 * in training, printed by rank 0 at step boundaries (docs/generation.md).
 *
 * It needs the whole model on each tensor-parallel group (pp = 1): every
 * rank decodes with its own part and the key/value cache of gpt.h, so the
 * data-parallel replicas run it side by side (and ZeRO 3's weight gathers
 * stay in step over dp); rank 0 prints its replica's text. With pp > 1 rank
 * 0 warns at start that there will be no samples.
 */
#include "trainer_impl.h"

#include <stdlib.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/prompt.h"

#define GT_SAMPLE_TOKENS 64
#define GT_SAMPLE_PROMPT "\n"

int gt_trainer_sample_setup(gt_trainer *tr, bool quiet)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  if (cfg->run.sample_every <= 0)
    return GT_SUCCESS;
  if (g->pp_size > 1) {
    if (!quiet)
      gt_warn("[run] sample_every = %ld needs pp = 1 (each tensor-parallel group decodes "
              "with the whole model); this run (pp = %d) prints no samples",
              cfg->run.sample_every, g->pp_size);
    return GT_SUCCESS;
  }
  GT_CALL(gt_prompt_encode(cfg->data.train, GT_SAMPLE_PROMPT, (int)cfg->model.vocab, g->world,
                           &tr->sample.tok, &tr->sample.prompt, &tr->sample.np,
                           &tr->sample.vocab));
  tr->sample.out = malloc(sizeof(int32_t) * GT_SAMPLE_TOKENS);
  GT_CALL(gt_error_agree(tr->sample.out ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory"),
                         g->world));
  tr->sample.event = gt_event("sample", GT_EV_OTHER);
  return GT_SUCCESS;
}

/* Rank 0: the text, with control characters but newline and tab shown as
 * '?' (a byte model's early samples hold any byte). */
static int gt_trainer_sample_print(gt_trainer *tr, int n)
{
  char *text = NULL;
  size_t len = 0;
  GT_CALL(gt_prompt_decode(tr->sample.tok, tr->sample.out, n, &text, &len));
  for (size_t i = 0; i < len; i++) {
    const unsigned char c = (unsigned char)text[i];
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
      text[i] = '?';
  }
  gt_info("--- sample after step %ld: %d tokens, greedy, after a newline ---\n%s\n---\n",
          tr->step, n, text);
  free(text);
  return GT_SUCCESS;
}

bool gt_trainer_sample_due(const gt_trainer *tr, long step)
{
  const long every = tr->cfg.run.sample_every;
  return tr->sample.prompt && every > 0 && step % every == 0;
}

int gt_trainer_sample(gt_trainer *tr)
{
  if (!gt_trainer_sample_due(tr, tr->step))
    return GT_SUCCESS;
  const gt_grid *g = tr->grid;
  GT_CALL(gt_pipe_drain(tr->pipe)); /* streaming: nothing of training in flight on pp */
  if (!tr->sample.cache)
    GT_CALL(gt_error_agree(gt_gpt_cache_create(tr->model, tr->T, &tr->sample.cache), g->world));
  const gt_sample_opts greedy = {0.0, 0, 0};
  int n = 0;
  gt_event_begin(tr->sample.event);
  int status = gt_generate(tr->model, tr->sample.cache, tr->sample.prompt, tr->sample.np,
                           GT_SAMPLE_TOKENS, tr->sample.vocab, &greedy, tr->sample.out, NULL, &n);
  if (status == GT_SUCCESS && g->world_rank == 0)
    status = gt_trainer_sample_print(tr, n);
  gt_event_end(tr->sample.event);
  GT_CALL(gt_error_agree(status, g->world));
  return GT_SUCCESS;
}

void gt_trainer_sample_free(gt_trainer *tr)
{
  gt_gpt_cache_destroy(&tr->sample.cache);
  gt_tokenizer_free(tr->sample.tok);
  free(tr->sample.prompt);
  free(tr->sample.out);
  tr->sample.tok = NULL;
  tr->sample.prompt = tr->sample.out = NULL;
}
