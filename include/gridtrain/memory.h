/*
 * gridtrain/memory.h - the memory account: the bytes a rank expects to hold,
 * by kind, for a layout and its settings, and the measured peaks to hold them
 * against.
 *
 * Model state follows the ZeRO formulas (Rajbhandari et al., arXiv
 * 1910.02054) for psi parameter elements on the rank and N = dp ranks, with
 * the bytes per element gridtrain uses: a compute copy of c bytes (2 in
 * bf16/fp16; 0 in fp32, where the compute weights are the fp32 master),
 * fp32 gradients (4), fp32 master (4) and two fp32 AdamW moments (8):
 *   zero 0   (c + 4 + 4 + 8) psi            fp32 16 psi, bf16 18 psi
 *   zero 1   (c + 4) psi + (4 + 8) psi / N  (fp32: the master is the compute
 *                                            copy and stays whole: 8 psi + 8 psi / N)
 *   zero 2   c psi + (4 + 4 + 8) psi / N    (fp32: 4 psi + 12 psi / N)
 *   zero 3   (c + 4 + 4 + 8) psi / N
 * (The paper's 16 psi, 4 psi + 12 psi / N, 2 psi + 14 psi / N and 16 psi / N
 * count 2-byte gradients; gridtrain keeps them in fp32.) Stages 2 and 3 also
 * hold their reduction buffers (grad_shards.h): a few of the largest
 * gradient unit and, for the tied wte of pp > 1, a whole one; stage 3 its
 * gather buffers (param_gather.h): one of the largest weight unit (an
 * embedding or head) and two of a block, in the compute type.
 * pipedream-2bw keeps an older weight version besides: one more whole
 * compute copy, c psi (4 psi in fp32), counted with the compute weights.
 *
 * Activations: what one micro-batch in flight keeps (by [model] recompute),
 * times the most in flight on the stage (by the schedule), plus buffers all
 * micro-batches share. Communication: MPI's pinned staging buffers (none
 * when MPI takes device pointers).
 */
#ifndef GRIDTRAIN_MEMORY_H
#define GRIDTRAIN_MEMORY_H

#include <stdbool.h>
#include <stdio.h>

#include "gridtrain/config.h"
#include "gridtrain/layout.h"
#include "gridtrain/tensor.h"

#define GT_MEM_MAX_STAGES 4096 /* pipeline stages gt_mem_plan handles */

typedef struct gt_mem_account {
  double psi;                             /* parameter elements on the rank */
  double compute, master, grads, moments; /* model state, bytes */
  double act_slot;   /* activations one micro-batch in flight keeps */
  int in_flight;     /* micro-batches in flight at most */
  double act_shared; /* activation buffers shared by the micro-batches */
  double comm;       /* MPI staging buffers */
  double grad_bufs;  /* zero 2, 3: the reduction buffers of grad_shards.h
                        (shown under gradients, outside the formula) */
  double gather_bufs; /* zero 3: the weight gather buffers of param_gather.h */
} gt_mem_account;

/* Fill the model-state terms of a (the rest is untouched) for psi elements,
 * compute type dt, ZeRO stage zero (0..3) over dp ranks, by the formulas
 * above. */
void gt_mem_model_state(double psi, gt_dtype dt, int zero, int dp, gt_mem_account *a);

/* A streaming schedule's older weight version (pipedream-2bw): one more
 * whole compute copy of a->psi elements, added to a->compute; at ZeRO
 * stage 0 (zero, in effect), whose update is deferred into the next step,
 * a second fp32 gradient buffer too, added to a->grads. */
struct gt_schedule;
void gt_mem_add_stash(gt_mem_account *a, const struct gt_schedule *sched, gt_dtype dt, int zero);

/* Model state (by the formula), activations (slot x in flight + shared),
 * and everything (with the zero 2 / 3 buffers and the staging). */
double gt_mem_model_total(const gt_mem_account *a);
double gt_mem_act_total(const gt_mem_account *a);
double gt_mem_total(const gt_mem_account *a);

/* Whether MPI stages device buffers through pinned host buffers, as `plan
 * --memory` and the planner assume: [backend] mpi_device = off, or auto with
 * memory that is not host-visible (cuda, cpu-guard); on says MPI is
 * CUDA-aware. Pure. */
bool gt_mem_staged(const gt_config *cfg);

/* The account of every pipeline stage of layout l (gt_layout_resolve's,
 * layout.h) of cfg's model ([model] shape, [parallel] stages), computed
 * without MPI or a device (what `gridtrain plan --memory` prints) into
 * stages (at least l->pp entries, at most max_stages). Communication
 * buffers are counted when staged (a backend whose memory MPI cannot take
 * directly). GT_ERR_INPUT for a [parallel] stages list that does not fit.
 * Not collective. */
int gt_mem_plan(const gt_config *cfg, const gt_layout *l, bool staged, gt_mem_account *stages,
                int max_stages);

/* A stage's parameter terms, which depend only on the model, the layer
 * split and (dp, tp, ZeRO stage, precision), not on the batch,
 * recomputation, sequence parallelism or the micro-batches in flight. */
typedef struct gt_mem_params {
  double psi;         /* parameter elements on the rank */
  double grad_bufs;   /* zero 2, 3: the reduction buffers */
  double gather_bufs; /* zero 3: the gather buffers */
} gt_mem_params;

/* A caller's store of parameter terms: the entry of stage s of the layout
 * sizes (dp, pp, tp) with `chunks` model chunks per rank, ZeRO stage zero
 * and compute type dt; *found says whether it holds them already (else
 * gt_mem_plan_cached fills it). NULL: out of memory. The store must be
 * emptied when the model or its [parallel] stages change. */
typedef gt_mem_params *(*gt_mem_params_find)(void *ctx, const int sizes[3], int chunks,
                                             int zero, gt_dtype dt, int s, bool *found);

/* gt_mem_plan, with the parameter terms kept in the caller's store (find,
 * ctx; NULL: computed every time), for a planner that accounts many
 * layouts of one model: laying out every named parameter is most of the
 * account's cost. The same bytes as gt_mem_plan. Not collective. */
int gt_mem_plan_cached(const gt_config *cfg, const gt_layout *l, bool staged,
                       gt_mem_account *stages, int max_stages, gt_mem_params_find find,
                       void *ctx);

/* The table: a header naming the settings (what) and the compute type,
 * then one row per rank or stage (label, account). */
void gt_mem_print_header(FILE *out, const char *what, gt_dtype dt, const char *label);
void gt_mem_print_row(FILE *out, const char *label, const gt_mem_account *a);

/* The peak resident set of this process (VmHWM), bytes; 0 if unknown. */
double gt_mem_rss_peak(void);

#endif /* GRIDTRAIN_MEMORY_H */
