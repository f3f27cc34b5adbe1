/*
 * gridtrain/sync.h - how often the data-parallel replicas synchronise
 * ([parallel] sync, docs/communication.md):
 *   every_step   the gradients of every step are all-reduced (the default).
 *   local:K      local SGD: each replica steps on its own gradients (its own
 *                micro-batches' mean); every K-th step (step + 1 a multiple
 *                of K) is synchronous: the replicas' parameters and AdamW
 *                moments are averaged, then that step's gradients are
 *                all-reduced, so the replicas leave it identical. K = 1 is
 *                synchronous training, bit for bit.
 *   diloco:K     DiLoCo: AdamW inner steps on each replica's own gradients;
 *                after every K-th, the mean of the replicas' parameter
 *                change since the last outer step is the outer gradient of
 *                a Nesterov-momentum SGD step ([parallel] outer_lr,
 *                outer_momentum) on the anchor, which every replica then
 *                takes as its parameters. Inner moments stay each
 *                replica's own.
 *   easgd:K,A    elastic averaging: after every K-th local step each
 *                replica moves by A towards a centre variable, and the
 *                centre by A towards each replica (centre += A (sum of
 *                replicas - p centre)); A p must be at most 1.
 *   stale:S      bounded staleness: every step all-reduces its gradients
 *                with a non-blocking collective and applies the sum of the
 *                step S before (waited for only if it has not arrived), so a
 *                replica runs up to S steps ahead of the slowest; replicas
 *                stay identical, the update is deterministic given the seed
 *                and S, and stale:0 is synchronous training.
 * What the modes keep (the trainer): local, diloco and easgd replicas
 * differ between synchronisations, so the logged gradient norm is replica
 * 0's (of its own gradients), the logged loss the mean over replicas of
 * each one's batch share, and checkpoints carry every replica's parameters
 * and moments and the mode's own state (gt_sync_state); stale's log shows
 * replica 0's loss (no per-step collective over the replicas).
 *
 * Needs ZeRO stage 0 (a replica that steps alone needs its whole optimizer
 * state). Collective calls are on the data-parallel group unless said.
 */
#ifndef GRIDTRAIN_SYNC_H
#define GRIDTRAIN_SYNC_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/collectives.h"
#include "gridtrain/params.h"

typedef enum {
  GT_SYNC_EVERY = 0,
  GT_SYNC_LOCAL,
  GT_SYNC_DILOCO,
  GT_SYNC_EASGD,
  GT_SYNC_STALE
} gt_sync_kind;

typedef struct gt_sync_spec {
  gt_sync_kind kind;
  long k;       /* local, diloco, easgd: steps between synchronisations */
  double alpha; /* easgd: elasticity */
  long s;       /* stale: steps of staleness */
} gt_sync_spec;

/* "every_step", "local:K", "diloco:K", "easgd:K,ALPHA", "stale:S";
 * GT_ERR_INPUT with the expected forms otherwise. */
int gt_sync_parse(const char *text, gt_sync_spec *spec);
void gt_sync_format(const gt_sync_spec *spec, char *out, size_t size);

typedef struct gt_sync gt_sync;

/* For the parameters params (fp32 master = values, not sharded) and their
 * AdamW moments m, v (device), replicated over dp. outer_lr and
 * outer_momentum: DiLoCo's. Allocates the mode's device buffers (the
 * anchor and momentum, the centre, the staleness ring) and copies the
 * current parameters into them: call after the parameters are final for
 * the start (initialised, or loaded: then gt_sync_state_load). Not
 * collective. */
int gt_sync_create(const gt_sync_spec *spec, gt_params *params, float *m, float *v,
                   const gt_group *dp, double outer_lr, double outer_momentum, gt_sync **s);
int gt_sync_destroy(gt_sync **s);

const gt_sync_spec *gt_sync_get_spec(const gt_sync *s);

/* Whether step `step`'s gradients are all-reduced over dp (every_step;
 * local:K at its synchronous steps), and so the step is a synchronous one. */
bool gt_sync_reduces_grads(const gt_sync *s, long step);

/* Whether the replicas can differ after step `step` (local, diloco, easgd
 * but right after a synchronisation). */
bool gt_sync_diverged(const gt_sync *s, long step);

/* Before the optimizer of step `step`: local:K, K > 1, at a synchronous
 * step: average the parameters and moments over dp. Collective on dp there. */
int gt_sync_before_update(gt_sync *s, long step);

/* After the optimizer of step `step`: diloco's outer step and easgd's
 * elastic pull at their steps. Collective on dp there. *synced: the mode
 * synchronised at this step. */
int gt_sync_after_update(gt_sync *s, long step, bool *synced);

/* stale:S: start the all-reduce of this step's gradients (params->grads, as
 * backward left them), then put the sum of step `step` - S's into
 * params->grads, waiting for it if needed; *have false in the first S
 * steps (nothing to apply). Collective on dp (non-blocking). */
int gt_sync_stale_exchange(gt_sync *s, long step, bool *have);

/* The mode's state for a checkpoint: gt_sync_state_len floats (0 for
 * every_step): local, diloco, easgd: this replica's parameters and moments,
 * then diloco's anchor and momentum or easgd's centre; stale: its first
 * step and the S sums not applied yet (completed first: collective on dp). save copies to host
 * memory, load from it (and then the parameters' compute copy must be
 * refreshed by the caller). */
size_t gt_sync_state_len(const gt_sync *s);

/* Start the mode afresh at step `step` from the current parameters (a
 * resume without the mode's state: another layout or mode): they become
 * DiLoCo's anchor (momentum zero) or EASGD's centre; stale applies nothing
 * until step + S. Not collective. */
int gt_sync_reset(gt_sync *s, long step);
int gt_sync_state_save(gt_sync *s, long step, float *host);
int gt_sync_state_load(gt_sync *s, long step, const float *host);

#endif /* GRIDTRAIN_SYNC_H */
