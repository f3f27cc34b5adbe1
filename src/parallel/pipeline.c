/*
 * pipeline.c - the pipeline executor (see pipeline.h).
 */
#include "gridtrain/pipeline.h"

#include <stdlib.h>

#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/flight.h"
#include "gridtrain/timer.h"

enum { GT_RECV_ACT = 0, GT_SEND_ACT, GT_RECV_GRAD, GT_SEND_GRAD, GT_NREQ };

#define GT_TAG_ACT(mb) (2 * (mb))
#define GT_TAG_GRAD(mb) (2 * (mb) + 1)

struct gt_pipe {
  gt_gpt *model;
  const gt_grid *grid;
  int M, B, T;
  bool first, last;
  int nslots;
  gt_pipe_op *ops;   /* 2 M operations of this stage */
  gt_xfer **req;     /* GT_NREQ per slot (NULL where this stage has none) */
  size_t n;          /* elements of a slot's activations */
  gt_dtype dt;
  gt_pipe_events ev;
  bool timed;
  int live, peak_live;
};

int gt_pipe_create(gt_gpt *model, gt_coll *coll, const gt_grid *grid, gt_schedule_kind schedule,
                   int microbatches, int B_micro, int T, gt_pipe_events events,
                   gt_pipe **pipe)
{
  gt_pipe *pl = calloc(1, sizeof *pl);
  GT_CHECK_ALLOC(pl, sizeof *pl);
  *pipe = pl;
  pl->model = model;
  pl->grid = grid;
  pl->M = microbatches;
  pl->B = B_micro;
  pl->T = T;
  pl->first = grid->pp_rank == 0;
  pl->last = grid->pp_rank == grid->pp_size - 1;
  pl->nslots = gt_schedule_in_flight(schedule, grid->pp_size, grid->pp_rank, microbatches);
  pl->dt = gt_gpt_dtype(model);
  pl->ev = events;
  pl->n = (size_t)gt_gpt_stream_rows(model, B_micro, T) * (size_t)gt_gpt_shape_of(model)->dim;
  pl->ops = malloc(sizeof *pl->ops * 2 * (size_t)microbatches);
  pl->req = calloc((size_t)GT_NREQ * (size_t)pl->nslots, sizeof *pl->req);
  if (!pl->ops || !pl->req) {
    gt_pipe_destroy(pipe);
    return GT_ERROR(GT_ERR_SYSTEM, "out of memory for the pipeline schedule");
  }
  int status = gt_schedule_build(schedule, grid->pp_size, grid->pp_rank, microbatches, pl->ops);
  const size_t bytes = pl->n * gt_dtype_size(pl->dt);
  for (int s = 0; s < pl->nslots && status == GT_SUCCESS; s++)
    for (int k = 0; k < GT_NREQ && status == GT_SUCCESS; k++) {
      const bool needed = (k == GT_RECV_ACT || k == GT_SEND_GRAD) ? !pl->first : !pl->last;
      if (needed)
        status = gt_xfer_create(coll, bytes, &pl->req[GT_NREQ * s + k]);
    }
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

/* Post the receive of micro-batch mb's input into its slot. */
static int gt_pipe_post_input(gt_pipe *pl, int mb)
{
  const gt_grid *g = pl->grid;
  const int slot = mb % pl->nslots;
  GT_CALL(gt_xfer_recv(gt_pipe_req(pl, slot, GT_RECV_ACT), gt_gpt_input(pl->model, slot), pl->n,
                       pl->dt, g->pp_rank - 1, GT_TAG_ACT(mb), g->pp));
  return GT_SUCCESS;
}

/* One forward of micro-batch mb in its slot: receive the input (stages
 * after the first), compute, send the output and pre-post the receive of
 * its gradient (stages before the last, when training). */
static int gt_pipe_forward(gt_pipe *pl, const gt_pipe_feed *feed, int mb, float dlogit_scale,
                           double *loss_acc)
{
  const gt_grid *g = pl->grid;
  const int slot = mb % pl->nslots;
  const int32_t *tokens = NULL, *targets = NULL;
  gt_flight_slot('F', mb);
  gt_fault_kill_at("forward");
  if (pl->first || pl->last)
    GT_CALL(feed->read(feed->ctx, mb, &tokens, &targets));
  if (!pl->first)
    GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_RECV_ACT), pl->ev.bubble));
  /* The slot takes a new micro-batch: the sends of its previous one (output
   * and input gradient) must be out before its buffers are written again. */
  GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_SEND_ACT), pl->ev.pp_comm));
  GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_SEND_GRAD), pl->ev.pp_comm));
  gt_pipe_begin(pl, pl->ev.forward);
  int status = gt_gpt_forward(pl->model, slot, tokens, targets, pl->B, pl->T, dlogit_scale,
                              loss_acc);
  gt_pipe_end(pl, pl->ev.forward);
  GT_CALL(status);
  if (++pl->live > pl->peak_live)
    pl->peak_live = pl->live;
  if (!pl->last) {
    gt_pipe_begin(pl, pl->ev.pp_comm);
    status = gt_xfer_send(gt_pipe_req(pl, slot, GT_SEND_ACT), gt_gpt_output(pl->model, slot),
                          pl->n, pl->dt, g->pp_rank + 1, GT_TAG_ACT(mb), g->pp);
    if (status == GT_SUCCESS && dlogit_scale != 0.0f)
      status = gt_xfer_recv(gt_pipe_req(pl, slot, GT_RECV_GRAD), gt_gpt_grad(pl->model, slot),
                            pl->n, pl->dt, g->pp_rank + 1, GT_TAG_GRAD(mb), g->pp);
    gt_pipe_end(pl, pl->ev.pp_comm);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

/* One backward of micro-batch mb: wait for the gradient of the output
 * (stages before the last), compute (the last micro-batch feeds the DP
 * buckets), send the input gradient back and pre-post the receive of the
 * input of the micro-batch that takes over the slot. */
static int gt_pipe_backward(gt_pipe *pl, int mb, const gt_grad_hook *hook)
{
  const gt_grid *g = pl->grid;
  const int slot = mb % pl->nslots;
  gt_flight_slot('B', mb);
  if (!pl->last)
    GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_RECV_GRAD), pl->ev.bubble));
  gt_pipe_begin(pl, pl->ev.backward);
  const bool feeds = mb == pl->M - 1 || (hook && hook->every_microbatch);
  int status = gt_gpt_backward(pl->model, slot, feeds ? hook : NULL);
  gt_pipe_end(pl, pl->ev.backward);
  GT_CALL(status);
  pl->live--;
  if (!pl->first) {
    gt_pipe_begin(pl, pl->ev.pp_comm);
    status = gt_xfer_send(gt_pipe_req(pl, slot, GT_SEND_GRAD), gt_gpt_grad(pl->model, slot),
                          pl->n, pl->dt, g->pp_rank - 1, GT_TAG_GRAD(mb), g->pp);
    if (status == GT_SUCCESS && mb + pl->nslots < pl->M)
      status = gt_pipe_post_input(pl, mb + pl->nslots);
    gt_pipe_end(pl, pl->ev.pp_comm);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

/* Pre-post the first inputs, run the operations, drain. */
static int gt_pipe_run(gt_pipe *pl, const gt_pipe_feed *feed, float dlogit_scale,
                       double *loss_acc, const gt_grad_hook *hook, bool train)
{
  const gt_grid *g = pl->grid;
  pl->live = 0;
  if (!pl->first) {
    gt_pipe_begin(pl, pl->ev.pp_comm);
    int status = GT_SUCCESS;
    for (int k = 0; k < pl->nslots && k < pl->M && status == GT_SUCCESS; k++)
      status = gt_pipe_post_input(pl, k);
    gt_pipe_end(pl, pl->ev.pp_comm);
    GT_CALL(status);
  }
  if (train) {
    for (int i = 0; i < 2 * pl->M; i++) {
      if (pl->ops[i].backward)
        GT_CALL(gt_pipe_backward(pl, pl->ops[i].mb, hook));
      else
        GT_CALL(gt_pipe_forward(pl, feed, pl->ops[i].mb, dlogit_scale, loss_acc));
    }
  } else {
    for (int mb = 0; mb < pl->M; mb++) {
      GT_CALL(gt_pipe_forward(pl, feed, mb, 0.0f, loss_acc));
      pl->live--;
      /* forward only: the slot's next input can come as soon as this one's
       * readers have run (the receive waits for them) */
      if (!pl->first && mb + pl->nslots < pl->M)
        GT_CALL(gt_pipe_post_input(pl, mb + pl->nslots));
    }
  }
  /* The schedule is done: what remains is waiting for the other stages
   * (a send completes only once its receiver takes it, and stages finish
   * at different times), the bubble at the end of the step. */
  for (int i = 0; i < GT_NREQ * pl->nslots; i++)
    GT_CALL(gt_pipe_wait(pl, pl->req[i], pl->ev.bubble));
  if (g->pp_size > 1) {
    gt_pipe_begin(pl, pl->ev.bubble);
    int status = gt_barrier(g->pp);
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
