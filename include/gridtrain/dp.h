/*
 * dp.h - the data-parallel path of the gradients and the weights: one owner
 * for what happens to them between backward and the update, and after it.
 *
 * A gt_dp holds, for one group of data-parallel ranks and the parameters
 * they replicate:
 *   - the gradient reduction of its ZeRO stage, one entry of a table of
 *     operations (dp_stages.c): 0, the all-reduce of gradient buckets; 1,
 *     the same buckets with the tied embedding's held back and the weights
 *     all-gathered after the update; 2, each gradient unit reduce-scattered
 *     into the dp pieces per micro-batch; 3, that plus each unit's weights
 *     gathered before the model uses them (the model's weight hook);
 *   - the sum of the tied embedding's two copies over the first and last
 *     pipeline stage, at the point of the reduction where it belongs;
 *   - gradient compression ([parallel] compress, zero 0) and the
 *     [parallel] sync modes (local, diloco, easgd, stale), layered over the
 *     stage's reduction here, not in the step.
 * The step calls it in this order (train/trainer.c):
 *   gt_dp_begin -> backward with gt_dp_grad_hook -> gt_dp_finish (the plan
 *   of what to update) -> norm, scaler -> gt_dp_before_update -> the
 *   optimizer -> gt_dp_after_update.
 * A second gt_dp over another group (the experts of a mixture, reduced over
 * the ranks that hold the same experts) is another object with its own
 * parameters and group; the step calls each.
 *
 * Ownership: the gt_dp owns its buckets, gradient pieces, weight-gather
 * pool, sync state and the replica communicator; it borrows the model, the
 * optimizer's moments and the collectives context, which must outlive it.
 * Collectivity: gt_dp_create is collective on the world; the step's calls
 * are collective on the dp group (the tied sum also on the embedding group,
 * the sync modes on the replica), and every rank of the world calls them.
 */
#ifndef GRIDTRAIN_DP_H
#define GRIDTRAIN_DP_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/collectives.h"
#include "gridtrain/compress.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grid.h"
#include "gridtrain/optim.h"
#include "gridtrain/sync.h"

typedef struct gt_dp gt_dp;

/* The split of the parameters that ZeRO stage `stage` over dp_size ranks
 * needs on rank dp_rank (params.h): none for stage 0 or one rank, else
 * dp_size pieces of what the stage splits. The model is created with it
 * (gt_gpt_create), before the gt_dp that reduces its gradients. Pure. */
gt_params_split gt_dp_params_split(int stage, int dp_rank, int dp_size);

/* What a gt_dp is made from. The stage is the one in effect (0 when the
 * group has one rank); the model's parameters must have been split for it
 * (gt_dp_params_split). */
typedef struct gt_dp_setup {
  gt_gpt *model;  /* its parameters, gradient units, tied parameter, weight hook */
  gt_adamw *opt;  /* the moments the sync modes read */
  gt_coll *coll;
  const gt_grid *grid; /* dp, embedding and world communicators */
  int stage;           /* ZeRO stage in effect */
  bool overlap;        /* [parallel] dp_overlap: buckets start during backward */
  double bucket_mb;    /* [parallel] bucket_mb (0: one bucket) */
  gt_compress_spec compress; /* [parallel] compress */
  const char *compress_text; /* as the deck says it, for errors */
  gt_algo compress_algo;     /* how 16-bit payloads are reduced */
  uint64_t seed;             /* [run] seed: compression's random parts */
  gt_sync_spec sync;         /* [parallel] sync */
  const char *sync_text;
  double outer_lr, outer_momentum; /* diloco */
  /* The tied embedding's sum is left in flight by gt_dp_finish on the rank
   * whose copy does not count in the norm (the last stage, which ends its
   * step first) and completed by gt_dp_tied_wait: pipedream-2bw's deferred
   * update. Stage 0 only. */
  bool defer_tied;
  struct {
    int exposed;      /* dp.exposed: what backward did not hide */
    int tied;         /* tied.allreduce */
    int gather;       /* zero.allgather: the compute copy after an update */
    int param_gather; /* zero.gather: stage 3's per-unit gathers */
  } ev;
} gt_dp_setup;

/* What the step does with the gradients gt_dp_finish left. */
typedef struct gt_dp_plan {
  bool update;        /* there is an update to apply (stale:S: none in the first S steps) */
  bool norm_here;     /* this rank's gradients count in the norm (dp rank 0 of replicas
                         with the same sums; every rank with pieces or own gradients) */
  bool together;      /* the loss and the norm's squares sum in one call over loss_comm */
  MPI_Comm loss_comm; /* where the loss sums: the world, or this replica (stale) */
  MPI_Comm norm_comm; /* where the norm's squares sum */
  bool own_loss;      /* the loss is this replica's mean (stale) */
  double grad_mult;   /* the update takes this times the gradients: dp where the
                         replicas keep their own (each 1/dp of its batch mean) */
  long lag;           /* the update applies the gradients of step - lag */
} gt_dp_plan;

/* Make the data-parallel path of setup. Errors (refused combinations of
 * stage, compression and sync; allocations) are agreed over the world.
 * Collective on the world. */
int gt_dp_create(const gt_dp_setup *setup, gt_dp **dp);
int gt_dp_destroy(gt_dp **dp);

/* ---- the step ---- */

/* Before backward of step `step` (after the gradients are zeroed). Not
 * collective. */
int gt_dp_begin(gt_dp *dp, long step);

/* The hook backward calls as gradient units finish (NULL: none this step);
 * valid until gt_dp_finish. */
const gt_grad_hook *gt_dp_grad_hook(gt_dp *dp);

/* After the pipeline's pass: wait for what backward did not hide, sum the
 * tied embedding's copies in the stage's order, and (stale) exchange the
 * sums in flight; *plan says what the step updates. Collective on dp and
 * the embedding group. */
int gt_dp_finish(gt_dp *dp, long step, gt_dp_plan *plan);

/* Complete the tied embedding's sum that gt_dp_finish left in flight
 * (setup.defer_tied); a no-op when none is. Collective on the embedding
 * group (its other member completed its part in gt_dp_finish). */
int gt_dp_tied_wait(gt_dp *dp);

/* Before the optimizer's update (local:K: the replicas averaged at the
 * steps that synchronise). Collective on dp where it acts. */
int gt_dp_before_update(gt_dp *dp, long step);

/* After the update (updated: one was applied): the compute copy outside
 * this rank's piece from the other pieces (stages 1 and 2), then the sync
 * mode's part (*synced: the replicas hold the same weights now). Collective
 * on dp. */
int gt_dp_after_update(gt_dp *dp, long step, bool updated, bool *synced);

/* ---- outside the step ---- */

/* The compute copy outside this rank's piece from the other dp ranks (after
 * an initialisation or a load); a no-op without pieces and at stage 3.
 * Collective on dp. */
int gt_dp_gather_compute(gt_dp *dp);

/* The dp group (communicator, rank, size; its event is zero.allgather). */
const gt_group *gt_dp_group(const gt_dp *dp);

/* The stage's report row: its name ("dp all-reduce", "dp reduce-scatter")
 * and what it does; name[0] == '\0' when the group has one rank. */
void gt_dp_describe(const gt_dp *dp, char *name, size_t name_size, char *value,
                    size_t value_size);

/* Bytes of the stage's own buffers: gradient pieces (stages 2, 3) and
 * weight gathers (stage 3), for the memory account. */
void gt_dp_buffer_bytes(const gt_dp *dp, double *grad_bufs, double *gather_bufs);

/* ---- each rank's state in checkpoints: compression residuals, then the
 * ---- sync mode's state ---- */

/* What the state is, the same on every rank of a run ("compress=... bucket_mb=...
 * sync=..."): a checkpoint whose tag differs holds no state for this run. */
void gt_dp_state_tag(const gt_dp *dp, char *tag, size_t size);
size_t gt_dp_state_len(const gt_dp *dp);
/* The compression part's length (0: no compression state). */
size_t gt_dp_compress_state_len(const gt_dp *dp);
/* The sync mode's spec; NULL for every_step. */
const gt_sync_spec *gt_dp_sync_spec(const gt_dp *dp);
/* Whether the replicas' weights may differ after step (the sync mode). */
bool gt_dp_diverged(const gt_dp *dp, long step);
/* Into buf (gt_dp_state_len floats, host). Collective on dp (stale
 * completes its sums in flight). */
int gt_dp_state_save(gt_dp *dp, long step, float *buf);
/* The state of a checkpoint of step `step` (loaded: buf holds it; else the
 * modes start afresh at step). Not collective. */
int gt_dp_state_restore(gt_dp *dp, long step, const float *buf, bool loaded);

#endif /* GRIDTRAIN_DP_H */
