/*
 * feed.c - the trainer's data feed: this rank's share of each batch from
 * its reader (reader.h), read ahead while the batch before it computes, and
 * split into the micro-batches' tokens and targets for the pipeline.
 */
#include "trainer_impl.h"

#include <string.h>

#include "gridtrain/error.h"

int gt_trainer_readers_create(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  /* only the first and the last stage read tokens (pipeline.h) */
  const bool reads = g->pp_rank == 0 || g->pp_rank == g->pp_size - 1;
  const bool ahead = reads && cfg->data.prefetch;
  GT_CALL(gt_reader_create(tr->train, tr->T, true, cfg->run.seed, cfg->model.vocab, tr->B_rank,
                           ahead, &tr->train_reader));
  if (tr->val)
    GT_CALL(gt_reader_create(tr->val, tr->T, false, cfg->run.seed, cfg->model.vocab,
                             tr->B_rank, ahead, &tr->val_reader));
  return GT_SUCCESS;
}

/* This rank's samples of micro-batch mb of the batch at the feed's base
 * into tr->tokens and tr->targets; mb = M + i is micro-batch i of the next
 * batch (a streaming schedule's next-step forwards). A batch's first
 * micro-batch also starts reading the batch after it (B samples on) when
 * the run has more. */
static int gt_feed_microbatch(gt_trainer *tr, int mb)
{
  const int M = tr->layout.micro;
  const long long batch = tr->feed_base + (mb >= M ? tr->B : 0);
  mb %= M;
  const long long first = batch + (long long)tr->grid->dp_rank * tr->B_rank;
  const int32_t *rows = NULL;
  GT_CALL(gt_reader_get(tr->feed_reader, first, &rows));
  if (mb == 0 && tr->feed_more)
    GT_CALL(gt_reader_ahead(tr->feed_reader, first + tr->B));
  const size_t len = (size_t)tr->T + 1;
  for (int b = 0; b < tr->layout.mbs; b++) {
    const int32_t *w = rows + ((size_t)mb * (size_t)tr->layout.mbs + (size_t)b) * len;
    memcpy(tr->tokens + (size_t)b * tr->T, w, sizeof(int32_t) * (size_t)tr->T);
    memcpy(tr->targets + (size_t)b * tr->T, w + 1, sizeof(int32_t) * (size_t)tr->T);
  }
  return GT_SUCCESS;
}

int gt_trainer_feed_read(void *ctx, int mb, const int32_t **tokens, const int32_t **targets)
{
  gt_trainer *tr = ctx;
  gt_event_begin(tr->ev.data);
  const int status = gt_feed_microbatch(tr, mb);
  gt_event_end(tr->ev.data);
  GT_CALL(status);
  *tokens = tr->tokens;
  *targets = tr->targets;
  return GT_SUCCESS;
}

gt_pipe_feed gt_trainer_feed(gt_trainer *tr, gt_reader *reader, long long base, bool more)
{
  tr->feed_reader = reader;
  tr->feed_base = base;
  tr->feed_more = more;
  return (gt_pipe_feed){.read = gt_trainer_feed_read, .ctx = tr};
}

int gt_trainer_feed_settle(gt_trainer *tr, int status)
{
  gt_event_begin(tr->ev.data);
  const int settled = gt_reader_settle(tr->feed_reader);
  gt_event_end(tr->ev.data);
  if (status != GT_SUCCESS)
    return status;
  GT_CALL(settled);
  return GT_SUCCESS;
}
