/*
 * trainer_impl.h - the trainer's state, shared by its parts (internal to
 * src/train):
 *   setup.c          create and destroy
 *   report.c         the tables: configuration, memory per rank, devices, placement
 *   checkpointing.c  checkpoint metadata, save, load and the resume policy
 *   trainer.c        one step, evaluation, the run loop and the reports
 *   feed.c           the data feed: readers, read-ahead, micro-batches
 *   sharding.c       ZeRO: the whole model state for parameter gathers
 *   nonfinite.c      a step with non-finite numbers: which rank, which parameter
 *   step_faults.c    the test-only faults of a step (GT_FAULT)
 *   sampling.c       [run] sample_every: text samples during training
 *   local_state.c    the node-local tier: parts, partner copies (local_tier.h)
 *   local_resume.c   the node-local tier at start-up: the choice of a state, its load
 * The pipeline executor is src/parallel/pipeline.c.
 */
#ifndef GT_TRAINER_IMPL_H
#define GT_TRAINER_IMPL_H

#include "gridtrain/backend.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/collectives.h"
#include "gridtrain/data.h"
#include "gridtrain/dir_lock.h"
#include "gridtrain/dp.h"
#include "gridtrain/gpt.h"
#include "gridtrain/layout.h"
#include "gridtrain/optim.h"
#include "gridtrain/pace.h"
#include "gridtrain/reader.h"
#include "gridtrain/pipeline.h"
#include "gridtrain/sample.h"
#include "gridtrain/scaler.h"
#include "gridtrain/schedule.h"
#include "gridtrain/timer.h"
#include "gridtrain/tokenizer.h"
#include "gridtrain/trainer.h"

/* Device scalars of a step: reduced over the world at its end. */
enum { GT_SC_LOSS = 0, GT_SC_SUMSQ, GT_SC_EVAL, GT_NSCALARS };

typedef struct gt_straggler gt_straggler; /* report.c */

struct gt_trainer {
  gt_config cfg;
  gt_grid *grid;
  gt_backend *be;
  gt_coll *coll;
  gt_dp *dp;                 /* the data-parallel path (dp.h) */
  MPI_Request *sig_req;      /* the signal agreements in flight, sig_lag + 1; NULL: none */
  long sig_lag;              /* steps after which a signal is acted on (stale:S: S;
                                a deferred update: 1) */
  double *sig_val;           /* their values: 2 per slot (mine, agreed) */
  long sig_count;            /* agreements started by this process */
  gt_timer_clock *clock;
  gt_layout layout;          /* the configuration on this job's ranks (layout.h) */
  gt_gpt *model;
  gt_adamw *opt;
  gt_adamw_config opt_cfg;
  gt_scaler scaler;
  gt_dataset *train, *val;
  gt_metrics *metrics;
  gt_pace *pace;          /* MFU and ETA: made by gt_trainer_run */
  gt_straggler *straggler; /* [run] straggler_margin: made by the first report (report.c) */

  int T;          /* tokens per sequence */
  int B;          /* global batch, sequences */
  int B_rank;     /* sequences per DP rank and step */
  int threads;
  long step;      /* next step to run */
  long long samples; /* data-stream position: sequences consumed before step */
  double last_loss;  /* loss of the last step run (NaN before any) */
  long start_step;   /* the step this run started at (after a resume) */
  gt_ckpt_tensor *tensors; /* every logical parameter, for checkpoints */
  MPI_Comm writers;        /* dp rank 0 of every (pp, tp) position; else NULL */
  gt_dir_lock *lock;       /* rank 0: the checkpoint directory's lock (dir_lock.h) */
  struct gt_local_state *local; /* the node-local tier (local_state.c); NULL: none yet */
  gt_ckpt_async *ckpt_async; /* [checkpoint] async: made by the first save */
  int ntensors;
  int32_t *tokens, *targets; /* host (B_micro, T) each */
  gt_reader *train_reader, *val_reader; /* this rank's share of each batch (feed.c) */

  /* what the feed reads now: reader, first sample of the batch, and whether
   * a next batch (B samples on) will be read */
  gt_reader *feed_reader;
  long long feed_base;
  bool feed_more;

  gt_gpt_shape shape;
  double *moe_red; /* (layers x experts + 1): the step's routing counts (experts > 0) */
  int *stage_first;       /* pp V + 1: first block of every (virtual) stage */
  gt_pipe *pipe;

  /* A step whose passes ran and whose update is still to come (trainer.c):
   * with a deferred update (pipedream-2bw at ZeRO stage 0, `defer`) it runs
   * inside the next step's passes, else at the end of the step's own. */
  bool defer;
  struct {
    bool on;
    long step;
    double loss_scale;       /* its gradients' */
    gt_dp_plan plan;
    double red[2];           /* the loss and the norm's squares, summed in flight */
    gt_allreduce_req req[2]; /* those sums (one, or one each) */
  } pend;
  /* An update that failed inside the next step's passes, where a stage
   * cannot stop alone (the others run on to their own update): reported,
   * with any collective diagnosis, once the passes are done (trainer.c). */
  bool in_pass;
  int late_status;
  struct {
    bool on;
    long step;
    double loss, norm;
  } late_nonfinite;
  gt_step_stats stats[2];    /* by step parity: a step's times and its update's values */
  long done[2];              /* the steps whose updates a call completed, */
  int ndone;                 /* oldest first */

  double *scalars;        /* device: GT_NSCALARS doubles */
  double *host_scalars;   /* pinned */
  gt_device_event *scalars_ready;

  struct { /* [run] sample_every (sampling.c); prompt NULL: no samples */
    gt_tokenizer *tok;      /* rank 0 */
    int32_t *prompt, *out;  /* np tokens; room for a sample */
    int np, vocab;          /* the prompt's length; the tokenizer's vocabulary */
    gt_gpt_cache *cache;    /* made at the first sample */
    int event;
  } sample;

  struct {
    int data, forward, backward, recompute, zero, tp_comm, pp_comm, bubble, dp_exposed, tied, reduce,
        norm, optimizer, zero_gather, param_gather, eval, checkpoint;
  } ev;
};

/* Rank 0 prints the tables of a trainer just set up: the configuration and
 * what was resolved, the expected memory per rank, the devices and where the
 * ranks run (report.c). Collective on the trainer's world. */
int gt_trainer_report_setup(gt_trainer *tr, FILE *out);

/* report.c: stragglers. Every step, each rank adds its own time (the step
 * less its waits for others: st's step_ms - comm_ms - bubble_ms); at a
 * report step (`report`: the same on every rank) rank 0 gets every rank's
 * mean since the last report and names, once, a rank that was above the
 * median of its pipeline stage's ranks by more than [run] straggler_margin
 * [run] straggler_reports reports in a row. Collective on the trainer's
 * world at report steps; nothing when the margin is 0, no stage has two
 * ranks, with sync = stale:S (whose replicas run out of step) or with a
 * deferred update (whose stages do). */
int gt_trainer_watch_stragglers(gt_trainer *tr, const gt_step_stats *st, bool report);
void gt_straggler_destroy(gt_straggler **s);
/* checkpointing.c: the run's checkpoint of the state now into [checkpoint]
 * dir (gt_trainer_save), written in the background with [checkpoint] async
 * (gt_trainer_ckpt_settle finishes it), after the write in flight. The
 * file's name in path. Collective on world. */
int gt_trainer_checkpoint(gt_trainer *tr, char *path, size_t size);

/* checkpointing.c: wait until the asynchronous checkpoint's copy of the
 * values and moments is made (the writer thread copies them while the
 * step's forward and backward run); before anything changes them. */
void gt_trainer_ckpt_snapshot(gt_trainer *tr);

/* checkpointing.c: what every rank's state outside the tensors is (the
 * rank state of checkpoints and node-local states), the same on every rank
 * of a run: the data-parallel state's tag, the layout and whether the
 * schedule keeps two weight versions. Not collective. */
void gt_trainer_rank_tag(const gt_trainer *tr, char *tag, size_t size);

/* checkpointing.c: this data-parallel rank's share of the flat buffers
 * (values and moments) when the replicas are equal: its ZeRO piece, or
 * without ZeRO its 1/dp; what it writes to a checkpoint and keeps in the
 * node-local tier. */
void gt_trainer_share(const gt_trainer *tr, size_t *lo, size_t *hi);

/* checkpointing.c: [checkpoint] async with a dir: the host memory of the
 * checkpoints, allocated and first touched (on a thread) before the first
 * step. Collective on world. */
int gt_trainer_ckpt_reserve(gt_trainer *tr);

/* checkpointing.c: the asynchronous checkpoint in flight ([checkpoint]
 * async; none: nothing): finished once every rank's write is done, or
 * (wait) waited for and finished; rank 0 says so unless quiet. Errors
 * collective ("cannot write checkpoint PATH: CAUSE"). Collective on world. */
int gt_trainer_ckpt_settle(gt_trainer *tr, bool wait, bool quiet);

/* checkpointing.c: a run that ends with an error every rank knows
 * (status): the write in flight is waited for and finished (its failure a
 * warning); returns status with the run's error kept as the current one.
 * Collective on world. */
int gt_trainer_ckpt_drain(gt_trainer *tr, int status);

/* checkpointing.c: the checkpoint policy's start-up part, run by
 * gt_trainer_create: [checkpoint] resume, and when nothing was resumed the
 * weights of [checkpoint] init. */
int gt_trainer_resume(gt_trainer *tr, bool quiet);

/* feed.c: the readers of the training and validation data, with a reader
 * thread where this rank reads tokens and [data] prefetch is on. */
int gt_trainer_readers_create(gt_trainer *tr);

/* feed.c: read micro-batch mb of the batch at tr->feed_base (the feed of
 * the pipeline; tokens and targets into tr->tokens / tr->targets); the
 * first micro-batch starts reading the next batch when there is one. */
int gt_trainer_feed_read(void *ctx, int mb, const int32_t **tokens, const int32_t **targets);

/* feed.c: point the feed at the batch of reader that starts at sample base
 * (more: the batch B samples on will be read next). */
gt_pipe_feed gt_trainer_feed(gt_trainer *tr, gt_reader *reader, long long base, bool more);

/* feed.c: after the pipeline's pass over the feed's batch (which returned
 * status): wait for the read ahead (timed as data), so that nothing reads
 * the file once the step is over. status, else the wait's. */
int gt_trainer_feed_settle(gt_trainer *tr, int status);

/* trainer.c: gt_trainer_settle, dropping the stats (what reads the state
 * outside the run loop). Collective on world. */
int gt_trainer_settled(gt_trainer *tr);

/* trainer.c: the device scalars [first, first + n) to the host
 * (tr->host_scalars) and summed over comm (the world, or a replica) into
 * out. Collective on comm. */
int gt_trainer_reduce_scalars(gt_trainer *tr, int first, int n, double *out, MPI_Comm comm);

/* setup.c: the run directory (flight records, ranks.txt): [checkpoint] dir
 * when set, else the directory of [run] metrics, else ".". */
void gt_run_dir(const gt_config *cfg, char *dir, size_t size);

/* nonfinite.c: a step's reduced loss or gradient norm is not finite (fp32,
 * bf16: no loss scaler to skip it): find the rank and the parameter it
 * came from and set the error (GT_ERR_NUMERIC, collective). Collective on
 * world. */
int gt_trainer_nonfinite(gt_trainer *tr, long step, double loss, double norm);

/* sampling.c: [run] sample_every. Set-up: the prompt (rank 0 reads the
 * tokenizer of [data] train) where the layout allows samples (pp = 1), or
 * rank 0's note that it does not. Collective on world. */
int gt_trainer_sample_setup(gt_trainer *tr, bool quiet);

/* sampling.c: whether a sample follows the step that ends at step index
 * `step` (a multiple of sample_every, where the layout takes samples). */
bool gt_trainer_sample_due(const gt_trainer *tr, long step);

/* sampling.c: at a step boundary: when a sample is due, every rank decodes
 * a greedy sample and rank 0 prints it. Collective on world. */
int gt_trainer_sample(gt_trainer *tr);

void gt_trainer_sample_free(gt_trainer *tr);

/* step_faults.c: the test-only faults of GT_FAULT (fault.h) that act on a
 * step: slow_step (a straggler) and nan_grad (a NaN in this rank's
 * gradients). Call it after the gradients are zeroed (backward accumulates
 * onto the NaN). A no-op unless such a fault names this rank and step. */
int gt_trainer_step_faults(gt_trainer *tr, long step);


/* The whole fp32 master values and AdamW moments, flat and parallel to the
 * parameters (device). Not sharded: the trainer's own buffers. Sharded:
 * buffers made here (own[k]: values, m, v), freed by gt_full_state_free. */
typedef struct gt_full_state {
  float *values, *m, *v;
  bool owned, own[3];
} gt_full_state;

/* Collective on dp: the whole state on dp rank 0 (values, and the moments
 * when asked), gathered from the pieces; NULL on other dp ranks where made
 * here. */
int gt_full_state_gather(gt_trainer *tr, bool moments, gt_full_state *fs);

void gt_full_state_free(gt_trainer *tr, gt_full_state *fs);

/* local_state.c: at a step boundary, when [checkpoint] local_every divides
 * the step: every rank writes its part of the state to [checkpoint]
 * local_dir (and with partner = on to its partner's), the ranks agree that
 * all are written, mark the state complete and delete the states beyond
 * local_keep. A failed write is reported on rank 0 and training goes on.
 * Collective on world. */
int gt_local_state_save(gt_trainer *tr);

/* local_resume.c: resume = auto: when the newest complete node-local state
 * (own or partner copies, every part verified) is at least as new as the
 * global checkpoint global (NULL: none), load it (any layout of the same
 * model) and set *resumed; otherwise say why and leave *resumed false.
 * Collective on world. */
int gt_local_state_resume(gt_trainer *tr, const char *global, bool quiet, bool *resumed);

/* local_state.c: after start-up chose where to begin (tr->step): delete
 * the node-local states of later steps (an abandoned or refused history),
 * so that a state of this run is never mixed with them. Collective on
 * world. */
int gt_local_state_settle(gt_trainer *tr);

void gt_local_state_free(gt_trainer *tr);

#endif /* GT_TRAINER_IMPL_H */
