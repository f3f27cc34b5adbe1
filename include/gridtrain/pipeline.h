/*
 * gridtrain/pipeline.h - the pipeline executor: this stage's part of one
 * step (the schedule's forwards and backwards over M micro-batches), or of
 * one forward-only pass for evaluation.
 *
 * Micro-batch mb lives in activation slot mb % slots of the model (with
 * model chunks, the interleaved schedule: in slot mb % slots of its chunk's
 * slots, gt_gpt_chunk_slot). Between stages the slot's activations travel
 * forward and their gradients backward, in the compute type, through
 * requests of collectives.h (one per slot and direction); with chunks the
 * pp group is a ring: the last rank's chunk c feeds the first rank's chunk
 * c + 1. Receives are pre-posted, a send starts once the
 * device has computed what it sends, and a slot takes a new micro-batch only
 * after the sends of its previous one are out. The last micro-batch's
 * backward reports finished gradients to the data-parallel buckets (the
 * hook) so their all-reduce overlaps the rest of backward.
 *
 * Timers: forward, backward, pp.comm (posting and completing sends) and
 * pp.bubble (waiting for another stage: receives, the sends' last waits and
 * the end-of-step barrier). Evaluation is untimed here (the caller times it).
 */
#ifndef GRIDTRAIN_PIPELINE_H
#define GRIDTRAIN_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "gridtrain/collectives.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grid.h"
#include "gridtrain/schedule.h"

typedef struct gt_pipe gt_pipe;

/* Where micro-batch mb's tokens and targets come from (first and last
 * stage; host arrays (B_micro, T) valid until the next call). */
typedef struct gt_pipe_feed {
  int (*read)(void *ctx, int mb, const int32_t **tokens, const int32_t **targets);
  void *ctx;
  /* Optional (NULL: every micro-batch counts): whether micro-batch mb's
   * token losses go to loss_acc (last stage). A pass shorter than the
   * schedule's M micro-batches (gridtrain score's last windows) fills the
   * rest with micro-batches that do not count: they run, and their losses
   * are dropped. */
  bool (*counts)(void *ctx, int mb);
  /* Streaming schedules (pipedream-2bw): whether this step may run the
   * first forwards of the next step's batch, whose micro-batch i read()
   * gets as mb = M + i. The trainer says no before anything that needs the
   * pipeline empty after the step (evaluation, sampling, the last step). */
  bool stream_next;
  /* Streaming schedules, optional (NULL: none): the last step's update,
   * deferred so that no stage waits for the others at a step's end. The
   * executor calls it once, before the first forward of the next batch
   * (the first that needs the updated weights); until then this step's
   * batch computes with the compute copy, which still holds the version
   * that the stash (gt_params_stash_save) gets at the update. A stage with
   * no such forward in the step (the last) does not call it: the trainer
   * runs it after the step's passes. */
  int (*update)(void *ctx);
} gt_pipe_feed;

typedef struct gt_pipe_events {
  int forward, backward, pp_comm, bubble;
} gt_pipe_events;

/* The executor of `schedule` over `microbatches` micro-batches of B_micro x
 * T tokens for this rank's stage (grid->pp_rank) of model, which must have
 * the schedule's chunks and, per chunk, gt_schedule_chunk_slots(...)
 * activation slots. Not collective. */
int gt_pipe_create(gt_gpt *model, gt_coll *coll, const gt_grid *grid,
                   const gt_schedule *schedule, int microbatches, int B_micro, int T,
                   gt_pipe_events events, gt_pipe **pipe);
/* Drains a primed pipeline first (collective on pp then). */
int gt_pipe_destroy(gt_pipe **pipe);

/* One step's schedule: forwards with dlogit_scale (the loss scale over the
 * global tokens) adding the last stage's token losses to *loss_acc (a device
 * double), backwards accumulating gradients; hook (may be NULL) sees the
 * last micro-batch's backward. Returns when every send is out and every
 * stage has finished (the end-of-step barrier on pp). A streaming schedule
 * (pipedream-2bw) has no such barrier: the step runs gt_schedule_window's
 * operations, the current batch's with the params' stash (the older weight
 * version, gt_gpt_use_stash) and the next batch's forwards (when
 * feed->stream_next) with the compute copy, leaves the model bound to the
 * compute copy, and returns with the last of those forwards' messages in
 * flight. Collective on the
 * grid's pp and tp groups. */
int gt_pipe_train(gt_pipe *pipe, const gt_pipe_feed *feed, float dlogit_scale,
                  double *loss_acc, const gt_grad_hook *hook);

/* Forwards only (no gradients): the last stage's token losses of the M
 * micro-batches are added to *loss_acc. Collective like gt_pipe_train. A
 * streaming pipeline must be empty (gt_pipe_drain). */
int gt_pipe_eval(gt_pipe *pipe, const gt_pipe_feed *feed, double *loss_acc);

/* Empty a streaming pipeline: drop the next batch's forwards of the last
 * step (the next step runs them again, with the same weights: the same
 * activations) and complete their messages. A no-op unless primed.
 * Collective on pp (every stage drains at the same step). */
int gt_pipe_drain(gt_pipe *pipe);

/* The most micro-batches (with chunks: (chunk, micro-batch) units) this
 * stage held activations for at once in any step so far. */
int gt_pipe_peak_live(const gt_pipe *pipe);

#endif /* GRIDTRAIN_PIPELINE_H */
