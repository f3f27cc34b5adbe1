/*
 * pipeline.c - the pipeline executor (see pipeline.h).
 */
#include "gridtrain/pipeline.h"

#include <stdlib.h>

#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/flight.h"
#include "gridtrain/timer.h"

_Static_assert(GT_SCHEDULE_MAX_CHUNKS <= GT_GPT_MAX_CHUNKS,
               "a schedule's chunks must fit a model part");

enum { GT_RECV_ACT = 0, GT_SEND_ACT, GT_RECV_GRAD, GT_SEND_GRAD, GT_NREQ };

/* Messages of micro-batch mb across the boundary between virtual stages j
 * and j + 1 (with one chunk per rank: stages j and j + 1): its activations
 * forward and their gradient backward. */
#define GT_TAG_ACT(pl, mb, j) (2 * ((mb) * (pl)->nvirt + (j)))
#define GT_TAG_GRAD(pl, mb, j) (2 * ((mb) * (pl)->nvirt + (j)) + 1)

struct gt_pipe {
  gt_gpt *model;
  const gt_grid *grid;
  int M, B, T;
  int V, nvirt;      /* model chunks per rank, virtual stages (pp V) */
  int cslots[GT_SCHEDULE_MAX_CHUNKS]; /* activation slots of each chunk */
  int nslots, nops;
  gt_pipe_op *ops;   /* 2 M V operations of this stage */
  gt_xfer **req;     /* GT_NREQ per slot (NULL where this stage has none) */
  size_t n;          /* elements of a slot's activations */
  gt_dtype dt;
  gt_pipe_events ev;
  int split_sets;    /* the schedule splits the backward into B and W: the sets
                        of what B keeps for W (micro-batch i in set i mod
                        split_sets); 0: it does not */
  bool timed;
  int live, peak_live;
};

/* Virtual stage of this rank's chunk c, and whether it has a neighbour
 * before / after it (the ranks before / after this one on the pp ring). */
static int gt_pipe_vstage(const gt_pipe *pl, int c) { return c * pl->grid->pp_size + pl->grid->pp_rank; }
static bool gt_pipe_has_prev(const gt_pipe *pl, int c) { return gt_pipe_vstage(pl, c) > 0; }
static bool gt_pipe_has_next(const gt_pipe *pl, int c)
{
  return gt_pipe_vstage(pl, c) < pl->nvirt - 1;
}
static int gt_pipe_prev_rank(const gt_pipe *pl)
{
  return (pl->grid->pp_rank + pl->grid->pp_size - 1) % pl->grid->pp_size;
}
static int gt_pipe_next_rank(const gt_pipe *pl)
{
  return (pl->grid->pp_rank + 1) % pl->grid->pp_size;
}

int gt_pipe_create(gt_gpt *model, gt_coll *coll, const gt_grid *grid,
                   const gt_schedule *schedule, int microbatches, int B_micro, int T,
                   gt_pipe_events events, gt_pipe **pipe)
{
  gt_pipe *pl = calloc(1, sizeof *pl);
  GT_CHECK_ALLOC(pl, sizeof *pl);
  *pipe = pl;
  pl->model = model;
  pl->grid = grid;
  pl->M = microbatches;
  pl->B = B_micro;
  pl->T = T;
  pl->V = schedule->chunks;
  pl->nvirt = grid->pp_size * pl->V;
  GT_ASSERT(gt_gpt_chunks(model) == pl->V);
  pl->nslots = gt_schedule_chunk_slots(schedule, grid->pp_size, grid->pp_rank, microbatches,
                                       pl->cslots);
  pl->nops = gt_schedule_ops(schedule, microbatches);
  pl->dt = gt_gpt_dtype(model);
  pl->ev = events;
  pl->split_sets = gt_schedule_w_backlog(schedule, grid->pp_size, grid->pp_rank, microbatches);
  pl->n = (size_t)gt_gpt_stream_rows(model, B_micro, T) * (size_t)gt_gpt_shape_of(model)->dim;
  pl->ops = malloc(sizeof *pl->ops * (size_t)pl->nops);
  pl->req = calloc((size_t)GT_NREQ * (size_t)pl->nslots, sizeof *pl->req);
  if (!pl->ops || !pl->req) {
    gt_pipe_destroy(pipe);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory for the pipeline schedule");
  }
  int status = gt_schedule_build(schedule, grid->pp_size, grid->pp_rank, microbatches, pl->ops);
  const size_t bytes = pl->n * gt_dtype_size(pl->dt);
  /* a slot's chunk: slots of a chunk are contiguous (gpt.h) */
  int *chunk_of = calloc((size_t)pl->nslots, sizeof *chunk_of);
  if (!chunk_of && status == GT_SUCCESS)
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory for the pipeline schedule");
  for (int c = 0; c < pl->V && status == GT_SUCCESS; c++)
    for (int mb = 0; mb < microbatches; mb++)
      chunk_of[gt_gpt_chunk_slot(model, c, mb)] = c;
  for (int s = 0; s < pl->nslots && status == GT_SUCCESS; s++)
    for (int k = 0; k < GT_NREQ && status == GT_SUCCESS; k++) {
      const bool needed = (k == GT_RECV_ACT || k == GT_SEND_GRAD)
                              ? gt_pipe_has_prev(pl, chunk_of[s])
                              : gt_pipe_has_next(pl, chunk_of[s]);
      if (needed)
        status = gt_xfer_create(coll, bytes, &pl->req[GT_NREQ * s + k]);
    }
  free(chunk_of);
  if (status != GT_SUCCESS) {
    gt_pipe_destroy(pipe);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

int gt_pipe_destroy(gt_pipe **pipe)
{
  gt_pipe *pl = *pipe;
  if (!pl)
    return GT_SUCCESS;
  for (int i = 0; pl->req && i < GT_NREQ * pl->nslots; i++)
    gt_xfer_destroy(&pl->req[i]);
  free(pl->req);
  free(pl->ops);
  free(pl);
  *pipe = NULL;
  return GT_SUCCESS;
}

int gt_pipe_peak_live(const gt_pipe *pl) { return pl->peak_live; }

static void gt_pipe_begin(const gt_pipe *pl, int ev)
{
  if (pl->timed)
    gt_event_begin(ev);
}

static void gt_pipe_end(const gt_pipe *pl, int ev)
{
  if (pl->timed)
    gt_event_end(ev);
}

/* Complete a request, timed under event ev (nothing when it is idle). */
static int gt_pipe_wait(gt_pipe *pl, gt_xfer *x, int ev)
{
  if (!x || !gt_xfer_busy(x))
    return GT_SUCCESS;
  gt_pipe_begin(pl, ev);
  int status = gt_xfer_wait(x);
  gt_pipe_end(pl, ev);
  GT_CALL(status);
  return GT_SUCCESS;
}

static gt_xfer *gt_pipe_req(const gt_pipe *pl, int slot, int k)
{
  return pl->req[GT_NREQ * slot + k];
}

/* Post the receive of chunk c's input of micro-batch mb into its slot. */
static int gt_pipe_post_input(gt_pipe *pl, int c, int mb)
{
  const gt_grid *g = pl->grid;
  const int slot = gt_gpt_chunk_slot(pl->model, c, mb);
  GT_CALL(gt_xfer_recv(gt_pipe_req(pl, slot, GT_RECV_ACT), gt_gpt_input(pl->model, slot), pl->n,
                       pl->dt, gt_pipe_prev_rank(pl), GT_TAG_ACT(pl, mb, gt_pipe_vstage(pl, c) - 1),
                       g->pp));
  return GT_SUCCESS;
}

/* One forward of chunk c of micro-batch mb in its slot: receive the input
 * (virtual stages after the first), compute, send the output and pre-post
 * the receive of its gradient (virtual stages before the last, when
 * training). */
static int gt_pipe_forward(gt_pipe *pl, const gt_pipe_feed *feed, int c, int mb,
                           float dlogit_scale, double *loss_acc)
{
  const gt_grid *g = pl->grid;
  const int slot = gt_gpt_chunk_slot(pl->model, c, mb);
  const bool prev = gt_pipe_has_prev(pl, c), next = gt_pipe_has_next(pl, c);
  const int32_t *tokens = NULL, *targets = NULL;
  gt_flight_slot('F', mb);
  gt_fault_kill_at("forward");
  if (!prev || !next)
    GT_CALL(feed->read(feed->ctx, mb, &tokens, &targets));
  if (prev)
    GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_RECV_ACT), pl->ev.bubble));
  /* The slot takes a new micro-batch: the sends of its previous one (output
   * and input gradient) must be out before its buffers are written again. */
  GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_SEND_ACT), pl->ev.pp_comm));
  GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_SEND_GRAD), pl->ev.pp_comm));
  if (loss_acc && feed->counts && !next && !feed->counts(feed->ctx, mb))
    loss_acc = NULL; /* a filler of a short pass: computed, not counted */
  gt_pipe_begin(pl, pl->ev.forward);
  int status = gt_gpt_forward(pl->model, slot, tokens, targets, pl->B, pl->T, dlogit_scale,
                              loss_acc);
  gt_pipe_end(pl, pl->ev.forward);
  GT_CALL(status);
  if (++pl->live > pl->peak_live)
    pl->peak_live = pl->live;
  if (next) {
    const int j = gt_pipe_vstage(pl, c);
    gt_pipe_begin(pl, pl->ev.pp_comm);
    status = gt_xfer_send(gt_pipe_req(pl, slot, GT_SEND_ACT), gt_gpt_output(pl->model, slot),
                          pl->n, pl->dt, gt_pipe_next_rank(pl), GT_TAG_ACT(pl, mb, j), g->pp);
    if (status == GT_SUCCESS && dlogit_scale != 0.0f)
      status = gt_xfer_recv(gt_pipe_req(pl, slot, GT_RECV_GRAD), gt_gpt_grad(pl->model, slot),
                            pl->n, pl->dt, gt_pipe_next_rank(pl), GT_TAG_GRAD(pl, mb, j), g->pp);
    gt_pipe_end(pl, pl->ev.pp_comm);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

/* The slot of chunk c's micro-batch mb is free again (its backward, or its
 * W where the schedule splits it, has run): pre-post the receive of the
 * input of the micro-batch that takes it over. */
static int gt_pipe_slot_done(gt_pipe *pl, int c, int mb)
{
  pl->live--;
  if (!gt_pipe_has_prev(pl, c) || mb + pl->cslots[c] >= pl->M)
    return GT_SUCCESS;
  gt_pipe_begin(pl, pl->ev.pp_comm);
  const int status = gt_pipe_post_input(pl, c, mb + pl->cslots[c]);
  gt_pipe_end(pl, pl->ev.pp_comm);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* One backward of chunk c of micro-batch mb (B alone where the schedule
 * splits it): wait for the gradient of the output (virtual stages before
 * the last), compute (the chunk's last micro-batch feeds the DP buckets:
 * with chunks, the last chunk's units finish first, as gt_gpt_grad_units
 * orders them), send the input gradient back and, unless W is still to
 * come, free the slot. */
static int gt_pipe_backward(gt_pipe *pl, int c, int mb, const gt_grad_hook *hook)
{
  const gt_grid *g = pl->grid;
  const int slot = gt_gpt_chunk_slot(pl->model, c, mb);
  gt_flight_slot('B', mb);
  if (gt_pipe_has_next(pl, c))
    GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_RECV_GRAD), pl->ev.bubble));
  gt_pipe_begin(pl, pl->ev.backward);
  const bool feeds = mb == pl->M - 1 || (hook && hook->every_microbatch);
  int status = pl->split_sets ? gt_gpt_backward_input(pl->model, slot, mb % pl->split_sets,
                                                     feeds ? hook : NULL)
                              : gt_gpt_backward(pl->model, slot, feeds ? hook : NULL);
  gt_pipe_end(pl, pl->ev.backward);
  GT_CALL(status);
  if (gt_pipe_has_prev(pl, c)) {
    gt_pipe_begin(pl, pl->ev.pp_comm);
    status = gt_xfer_send(gt_pipe_req(pl, slot, GT_SEND_GRAD), gt_gpt_grad(pl->model, slot),
                          pl->n, pl->dt, gt_pipe_prev_rank(pl),
                          GT_TAG_GRAD(pl, mb, gt_pipe_vstage(pl, c) - 1), g->pp);
    gt_pipe_end(pl, pl->ev.pp_comm);
    GT_CALL(status);
  }
  if (!pl->split_sets)
    GT_CALL(gt_pipe_slot_done(pl, c, mb));
  return GT_SUCCESS;
}

/* The weight gradients (W) of chunk c's micro-batch mb, whose B has run:
 * computed while the pipeline would otherwise wait; then the slot is free. */
static int gt_pipe_weights(gt_pipe *pl, int c, int mb, const gt_grad_hook *hook)
{
  const int slot = gt_gpt_chunk_slot(pl->model, c, mb);
  gt_flight_slot('W', mb);
  gt_pipe_begin(pl, pl->ev.backward);
  const bool feeds = mb == pl->M - 1 || (hook && hook->every_microbatch);
  const int status =
      gt_gpt_backward_weights(pl->model, slot, mb % pl->split_sets, feeds ? hook : NULL);
  gt_pipe_end(pl, pl->ev.backward);
  GT_CALL(status);
  GT_CALL(gt_pipe_slot_done(pl, c, mb));
  return GT_SUCCESS;
}

/* Pre-post the first inputs, run the operations, drain. */
static int gt_pipe_run(gt_pipe *pl, const gt_pipe_feed *feed, float dlogit_scale,
                       double *loss_acc, const gt_grad_hook *hook, bool train)
{
  const gt_grid *g = pl->grid;
  pl->live = 0;
  gt_pipe_begin(pl, pl->ev.pp_comm);
  int status = GT_SUCCESS;
  for (int c = 0; c < pl->V; c++)
    for (int k = 0; gt_pipe_has_prev(pl, c) && k < pl->cslots[c] && k < pl->M &&
                    status == GT_SUCCESS;
         k++)
      status = gt_pipe_post_input(pl, c, k);
  gt_pipe_end(pl, pl->ev.pp_comm);
  GT_CALL(status);
  for (int i = 0; i < pl->nops; i++) {
    const gt_pipe_op op = pl->ops[i];
    if (train && op.pass == GT_PASS_W) {
      GT_CALL(gt_pipe_weights(pl, op.chunk, op.mb, hook));
    } else if (train && op.pass == GT_PASS_B) {
      GT_CALL(gt_pipe_backward(pl, op.chunk, op.mb, hook));
    } else if (train) {
      GT_CALL(gt_pipe_forward(pl, feed, op.chunk, op.mb, dlogit_scale, loss_acc));
    } else if (op.pass == GT_PASS_F) { /* the forwards, in the schedule's order */
      GT_CALL(gt_pipe_forward(pl, feed, op.chunk, op.mb, 0.0f, loss_acc));
      pl->live--;
      /* forward only: the slot's next input can come as soon as this one's
       * readers have run (the receive waits for them) */
      if (gt_pipe_has_prev(pl, op.chunk) && op.mb + pl->cslots[op.chunk] < pl->M)
        GT_CALL(gt_pipe_post_input(pl, op.chunk, op.mb + pl->cslots[op.chunk]));
    }
  }
  /* The schedule is done: what remains is waiting for the other stages
   * (a send completes only once its receiver takes it, and stages finish
   * at different times), the bubble at the end of the step. */
  for (int i = 0; i < GT_NREQ * pl->nslots; i++)
    GT_CALL(gt_pipe_wait(pl, pl->req[i], pl->ev.bubble));
  if (g->pp_size > 1) {
    gt_pipe_begin(pl, pl->ev.bubble);
    status = gt_barrier(g->pp);
    gt_pipe_end(pl, pl->ev.bubble);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

int gt_pipe_train(gt_pipe *pl, const gt_pipe_feed *feed, float dlogit_scale, double *loss_acc,
                  const gt_grad_hook *hook)
{
  GT_ASSERT(dlogit_scale != 0.0f);
  pl->timed = true;
  GT_CALL(gt_pipe_run(pl, feed, dlogit_scale, loss_acc, hook, true));
  return GT_SUCCESS;
}

int gt_pipe_eval(gt_pipe *pl, const gt_pipe_feed *feed, double *loss_acc)
{
  pl->timed = false;
  GT_CALL(gt_pipe_run(pl, feed, 0.0f, loss_acc, NULL, false));
  return GT_SUCCESS;
}
