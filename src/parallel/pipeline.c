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

/* Messages of the unit with tag key k (its micro-batch; streaming: its
 * stream index mod 2 M) across the boundary between virtual stages j and
 * j + 1 (with one chunk per rank: stages j and j + 1): its activations
 * forward and their gradient backward. */
#define GT_TAG_ACT(pl, k, j) (2 * ((k) * (pl)->nvirt + (j)))
#define GT_TAG_GRAD(pl, k, j) (2 * ((k) * (pl)->nvirt + (j)) + 1)

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
  /* streaming (pipedream-2bw): micro-batch i of the batch `next` steps on
   * is stream index base + next M + i; its slot is the index mod the
   * slots, its messages' tags the index mod 2 M */
  bool streams;
  bool primed;       /* the last step ran the next batch's first w forwards */
  int w;             /* p - s - 1: those forwards */
  long long base;    /* this step's micro-batch 0 (0 when not streaming) */
  long long fa, fb;  /* the stream indices of the running step's forwards */
  bool stale_compute; /* the last step's update is still to come (feed->update):
                         this step's batch reads the compute copy until it runs */
  gt_pipe_op *wops;  /* a step's operations (gt_schedule_window) */
};

/* One (chunk, micro-batch) unit of an operation: its model slot, the key of
 * its message tags and its stream index. */
typedef struct gt_pipe_unit {
  int c, mb, slot, key;
  bool next; /* of the next step's batch */
  long long g;
} gt_pipe_unit;

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

/* The unit of chunk c at stream index g (base + next M + mb). */
static gt_pipe_unit gt_pipe_unit_at(const gt_pipe *pl, int c, long long g)
{
  gt_pipe_unit u = {.c = c, .g = g};
  const long long i = g - pl->base;
  u.next = i >= pl->M;
  u.mb = (int)(i - (u.next ? pl->M : 0));
  if (pl->streams) {
    u.slot = gt_gpt_chunk_slot(pl->model, c, (int)(g % pl->cslots[c]));
    u.key = (int)(g % (2LL * pl->M));
  } else {
    u.slot = gt_gpt_chunk_slot(pl->model, c, u.mb);
    u.key = u.mb;
  }
  return u;
}

static gt_pipe_unit gt_pipe_unit_of(const gt_pipe *pl, gt_pipe_op op)
{
  return gt_pipe_unit_at(pl, op.chunk, pl->base + (long long)op.next * pl->M + op.mb);
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
  pl->streams = gt_schedule_streams(schedule);
  pl->w = grid->pp_size - grid->pp_rank - 1;
  pl->n = (size_t)gt_gpt_stream_rows(model, B_micro, T) * (size_t)gt_gpt_shape_of(model)->dim;
  pl->ops = malloc(sizeof *pl->ops * (size_t)pl->nops);
  pl->req = calloc((size_t)GT_NREQ * (size_t)pl->nslots, sizeof *pl->req);
  if (pl->streams)
    pl->wops = malloc(sizeof *pl->wops * 3 * (size_t)microbatches);
  if (!pl->ops || !pl->req || (pl->streams && !pl->wops)) {
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
  const int status = gt_pipe_drain(pl);
  for (int i = 0; pl->req && i < GT_NREQ * pl->nslots; i++)
    gt_xfer_destroy(&pl->req[i]);
  free(pl->req);
  free(pl->ops);
  free(pl->wops);
  free(pl);
  *pipe = NULL;
  GT_CALL(status);
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

/* Post the receive of the input of chunk c's unit at stream index g into
 * its slot. */
static int gt_pipe_post_input(gt_pipe *pl, int c, long long g)
{
  const gt_pipe_unit u = gt_pipe_unit_at(pl, c, g);
  GT_CALL(gt_xfer_recv(gt_pipe_req(pl, u.slot, GT_RECV_ACT), gt_gpt_input(pl->model, u.slot),
                       pl->n, pl->dt, gt_pipe_prev_rank(pl),
                       GT_TAG_ACT(pl, u.key, gt_pipe_vstage(pl, c) - 1), pl->grid->pp));
  return GT_SUCCESS;
}

/* Post the receive of the gradient of the output of unit u (virtual
 * stages before the last). */
static int gt_pipe_post_grad(gt_pipe *pl, gt_pipe_unit u)
{
  GT_CALL(gt_xfer_recv(gt_pipe_req(pl, u.slot, GT_RECV_GRAD), gt_gpt_grad(pl->model, u.slot),
                       pl->n, pl->dt, gt_pipe_next_rank(pl),
                       GT_TAG_GRAD(pl, u.key, gt_pipe_vstage(pl, u.c)), pl->grid->pp));
  return GT_SUCCESS;
}

/* One forward of unit u in its slot: receive the input (virtual stages
 * after the first), compute, send the output and pre-post the receive of
 * its gradient (virtual stages before the last, when training; a next
 * batch's unit posts it in the step that runs its backward). Streaming:
 * this step's batch computes with the older weight version, the next
 * batch's with the newer. */
static int gt_pipe_forward(gt_pipe *pl, const gt_pipe_feed *feed, gt_pipe_unit u,
                           float dlogit_scale, double *loss_acc)
{
  const gt_grid *g = pl->grid;
  const int c = u.c, slot = u.slot;
  const bool prev = gt_pipe_has_prev(pl, c), next = gt_pipe_has_next(pl, c);
  const int32_t *tokens = NULL, *targets = NULL;
  gt_flight_slot('F', u.mb);
  gt_fault_kill_at("forward");
  GT_ASSERT(!(u.next && !next)); /* the last stage runs no next-batch forwards */
  if (!prev || !next)
    GT_CALL(feed->read(feed->ctx, u.mb + (u.next ? pl->M : 0), &tokens, &targets));
  if (prev)
    GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_RECV_ACT), pl->ev.bubble));
  /* The slot takes a new micro-batch: the sends of its previous one (output
   * and input gradient) must be out before its buffers are written again. */
  GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_SEND_ACT), pl->ev.pp_comm));
  GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_SEND_GRAD), pl->ev.pp_comm));
  if (loss_acc && feed->counts && !next && !feed->counts(feed->ctx, u.mb))
    loss_acc = NULL; /* a filler of a short pass: computed, not counted */
  if (pl->streams) /* training (evaluation: the newest weights) */
    GT_CALL(gt_gpt_use_stash(pl->model, dlogit_scale != 0.0f && !u.next && !pl->stale_compute));
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
                          pl->n, pl->dt, gt_pipe_next_rank(pl), GT_TAG_ACT(pl, u.key, j), g->pp);
    if (status == GT_SUCCESS && dlogit_scale != 0.0f && !u.next)
      status = gt_pipe_post_grad(pl, u);
    gt_pipe_end(pl, pl->ev.pp_comm);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

/* Unit u's slot is free again (its backward, or its W where the schedule
 * splits it, has run): pre-post the receive of the input of the unit that
 * takes it over, when this step runs that one's forward. */
static int gt_pipe_slot_done(gt_pipe *pl, gt_pipe_unit u)
{
  pl->live--;
  const long long g = u.g + pl->cslots[u.c];
  if (!gt_pipe_has_prev(pl, u.c) || g < pl->fa || g >= pl->fb)
    return GT_SUCCESS;
  gt_pipe_begin(pl, pl->ev.pp_comm);
  const int status = gt_pipe_post_input(pl, u.c, g);
  gt_pipe_end(pl, pl->ev.pp_comm);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* One backward of unit u (B alone where the schedule splits it): wait for
 * the gradient of the output (virtual stages before the last), compute (the
 * chunk's last micro-batch feeds the DP buckets: with chunks, the last
 * chunk's units finish first, as gt_gpt_grad_units orders them), send the
 * input gradient back and, unless W is still to come, free the slot. */
static int gt_pipe_backward(gt_pipe *pl, gt_pipe_unit u, const gt_grad_hook *hook)
{
  const gt_grid *g = pl->grid;
  const int c = u.c, slot = u.slot;
  gt_flight_slot('B', u.mb);
  if (gt_pipe_has_next(pl, c))
    GT_CALL(gt_pipe_wait(pl, gt_pipe_req(pl, slot, GT_RECV_GRAD), pl->ev.bubble));
  if (pl->streams)
    GT_CALL(gt_gpt_use_stash(pl->model, !pl->stale_compute));
  gt_pipe_begin(pl, pl->ev.backward);
  /* the last micro-batch feeds the hook; one that only polls, every one */
  const bool feeds = u.mb == pl->M - 1 || (hook && (hook->every_microbatch || !hook->ready));
  int status = pl->split_sets ? gt_gpt_backward_input(pl->model, slot, u.mb % pl->split_sets,
                                                     feeds ? hook : NULL)
                              : gt_gpt_backward(pl->model, slot, feeds ? hook : NULL);
  gt_pipe_end(pl, pl->ev.backward);
  GT_CALL(status);
  if (gt_pipe_has_prev(pl, c)) {
    gt_pipe_begin(pl, pl->ev.pp_comm);
    status = gt_xfer_send(gt_pipe_req(pl, slot, GT_SEND_GRAD), gt_gpt_grad(pl->model, slot),
                          pl->n, pl->dt, gt_pipe_prev_rank(pl),
                          GT_TAG_GRAD(pl, u.key, gt_pipe_vstage(pl, c) - 1), g->pp);
    gt_pipe_end(pl, pl->ev.pp_comm);
    GT_CALL(status);
  }
  if (!pl->split_sets)
    GT_CALL(gt_pipe_slot_done(pl, u));
  return GT_SUCCESS;
}

/* The weight gradients (W) of unit u, whose B has run: computed while the
 * pipeline would otherwise wait; then the slot is free. */
static int gt_pipe_weights(gt_pipe *pl, gt_pipe_unit u, const gt_grad_hook *hook)
{
  gt_flight_slot('W', u.mb);
  gt_pipe_begin(pl, pl->ev.backward);
  const bool feeds = u.mb == pl->M - 1 || (hook && hook->every_microbatch);
  const int status =
      gt_gpt_backward_weights(pl->model, u.slot, u.mb % pl->split_sets, feeds ? hook : NULL);
  gt_pipe_end(pl, pl->ev.backward);
  GT_CALL(status);
  GT_CALL(gt_pipe_slot_done(pl, u));
  return GT_SUCCESS;
}

/* Pre-post the first inputs, run the operations, end the step: wait for
 * every message and the other stages (the flush), or, streaming, for every
 * message but the next batch's last forward's, which the next stage takes
 * in its next step (or its gt_pipe_drain). */
static int gt_pipe_run(gt_pipe *pl, const gt_pipe_feed *feed, float dlogit_scale,
                       double *loss_acc, const gt_grad_hook *hook, bool train)
{
  const gt_grid *g = pl->grid;
  const bool stream = pl->streams && train;
  const bool prime_next = stream && feed->stream_next; /* (the last stage has w = 0) */
  GT_ASSERT(stream || !pl->primed);
  const gt_pipe_op *ops = pl->ops;
  int nops = pl->nops, alive = 0;
  if (stream) {
    nops = gt_schedule_window(g->pp_size, g->pp_rank, pl->M, pl->primed, prime_next, pl->wops);
    ops = pl->wops;
    alive = pl->primed ? pl->w : 0;
  } else {
    pl->base = 0; /* a streaming pipeline is empty here: numbering from 0 */
  }
  pl->fa = pl->base + alive;
  pl->fb = pl->base + pl->M + (prime_next ? pl->w : 0);
  pl->live = alive;
  gt_pipe_begin(pl, pl->ev.pp_comm);
  int status = GT_SUCCESS;
  for (int c = 0; c < pl->V; c++)
    for (long long k = pl->fa; gt_pipe_has_prev(pl, c) && k < pl->fb &&
                               k < pl->fa + pl->cslots[c] - alive && status == GT_SUCCESS;
         k++)
      status = gt_pipe_post_input(pl, c, k);
  /* the units the last step ran forward take their gradients in this one */
  for (long long k = pl->base; gt_pipe_has_next(pl, 0) && k < pl->base + alive &&
                               status == GT_SUCCESS;
       k++)
    status = gt_pipe_post_grad(pl, gt_pipe_unit_at(pl, 0, k));
  gt_pipe_end(pl, pl->ev.pp_comm);
  GT_CALL(status);
  pl->stale_compute = stream && feed->update;
  for (int i = 0; i < nops; i++) {
    const gt_pipe_op op = ops[i];
    const gt_pipe_unit u = gt_pipe_unit_of(pl, op);
    if (u.next && pl->stale_compute) { /* the next batch needs the last step's update */
      pl->stale_compute = false;
      GT_CALL(feed->update(feed->ctx));
    }
    if (train && op.pass == GT_PASS_W) {
      GT_CALL(gt_pipe_weights(pl, u, hook));
    } else if (train && op.pass == GT_PASS_B) {
      GT_CALL(gt_pipe_backward(pl, u, hook));
    } else if (train) {
      GT_CALL(gt_pipe_forward(pl, feed, u, dlogit_scale, u.next ? NULL : loss_acc));
    } else if (op.pass == GT_PASS_F) { /* the forwards, in the schedule's order */
      GT_CALL(gt_pipe_forward(pl, feed, u, 0.0f, loss_acc));
      pl->live--;
      /* forward only: the slot's next input can come as soon as this one's
       * readers have run (the receive waits for them) */
      if (gt_pipe_has_prev(pl, op.chunk) && u.g + pl->cslots[op.chunk] < pl->fb)
        GT_CALL(gt_pipe_post_input(pl, op.chunk, u.g + pl->cslots[op.chunk]));
    }
  }
  /* The schedule is done: what remains is waiting for the other stages (a
   * send completes only once its receiver takes it, and stages finish at
   * different times), the bubble at the end of the step. Streaming, the
   * stage runs on into its next step without waiting for the others: every
   * message is out but the next batch's last forward's output, which the
   * next stage takes in its next step. */
  const int held = prime_next && pl->w > 0 && gt_pipe_has_next(pl, 0)
                       ? gt_pipe_unit_at(pl, 0, pl->fb - 1).slot
                       : -1;
  for (int i = 0; i < GT_NREQ * pl->nslots; i++)
    if (i != GT_NREQ * held + GT_SEND_ACT)
      GT_CALL(gt_pipe_wait(pl, pl->req[i], pl->ev.bubble));
  if (stream) {
    GT_CALL(gt_gpt_use_stash(pl->model, false));
    pl->stale_compute = false;
    pl->primed = prime_next;
    pl->base += pl->M;
    return GT_SUCCESS;
  }
  if (g->pp_size > 1) {
    gt_pipe_begin(pl, pl->ev.bubble);
    status = gt_barrier(g->pp);
    gt_pipe_end(pl, pl->ev.bubble);
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

int gt_pipe_drain(gt_pipe *pl)
{
  if (!pl || !pl->primed)
    return GT_SUCCESS;
  /* The stage before ran one forward more of this step's batch than this
   * one (its w is one larger): take its output, then every send is taken. */
  if (gt_pipe_has_prev(pl, 0))
    GT_CALL(gt_pipe_post_input(pl, 0, pl->base + pl->w));
  for (int i = 0; i < GT_NREQ * pl->nslots; i++)
    GT_CALL(gt_pipe_wait(pl, pl->req[i], pl->ev.bubble));
  pl->live -= pl->w;
  pl->primed = false;
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
