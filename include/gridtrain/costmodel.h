/*
 * gridtrain/costmodel.h - the planner's cost model: a cluster description,
 * the time of one training step of a GPT layout on it, and the search that
 * ranks layouts (`gridtrain plan`, docs/planning.md).
 *
 * The model, in one paragraph. Every kernel of a transformer block and of
 * the head has its FLOPs and bytes (forward and backward, at the rank's
 * local shape); its time is a roofline, max(flops / (peak x eff_matmul),
 * bytes / (bandwidth x eff_mem)) + kernel_overhead. A micro-batch's time on
 * a pipeline stage is the sum over its kernels (plus the recomputation's
 * reruns) and over the tensor-parallel collectives it waits for; the
 * collectives are alpha-beta(-gamma) rings placed inside a node or across
 * nodes by the rank order (TP fastest, then DP, then PP). A step is
 * m x (the slowest stage's micro-batch) + the pipeline bubble ((pp - 1) / V
 * of a mean stage's micro-batch, V = 1 for gpipe and 1f1b) + the part of
 * the data-parallel reduction that backward did not hide + the optimizer
 * (and ZeRO's gathers). Memory per rank is gt_mem_plan's account
 * (memory.h), the same numbers as `gridtrain plan --memory`.
 *
 * Nothing here is collective: every function is plain arithmetic, run by
 * each rank alike (rank 0 prints).
 */
#ifndef GRIDTRAIN_COSTMODEL_H
#define GRIDTRAIN_COSTMODEL_H

#include <stdbool.h>
#include <stdio.h>

#include "gridtrain/config.h"
#include "gridtrain/gpt.h"
#include "gridtrain/layout.h"
#include "gridtrain/tensor.h"

// ---- the cluster description (src/plan/cluster.c) ---------------------------

/* Peak FLOP/s of the matrix units per precision (gt_cluster.peak). */
typedef enum { GT_PEAK_FP32 = 0, GT_PEAK_TF32, GT_PEAK_BF16, GT_PEAK_FP16, GT_PEAK_COUNT } gt_peak_kind;

/* A cluster description file (INI, the deck's syntax; inputs/clusters/):
 *
 *   [cluster]      name, nodes, ranks_per_node, cores_per_node (CPU
 *                  clusters: the cores the ranks of a node share; 0 for one
 *                  device per rank)
 *   [compute]      peak_fp32, peak_tf32, peak_bf16, peak_fp16 (FLOP/s of a
 *                  device, or of a node's cores when cores_per_node > 0),
 *                  fp32_matmul (fp32 | tf32: which peak fp32 products get),
 *                  memory (bytes a rank may use: HBM per device, or RAM per
 *                  node when cores_per_node > 0), memory_bw (bytes/s, per
 *                  device or per node)
 *   [network]      intra_alpha, intra_beta (inside a node: s per message, s
 *                  per byte per rank), inter_alpha, inter_beta (between
 *                  nodes, per rank: its share of the node's NICs), gamma (s
 *                  per byte reduced, 0 where the reduction is free)
 *   [calibration]  eff_matmul, eff_mem, eff_net (fractions of the peaks
 *                  that large products, memory-bound kernels and the
 *                  collectives' bandwidth reach; above 1 against a measured
 *                  peak, or where the data stays in cache), eff_attention (flash
 *                  attention's fraction of the peak; 0: eff_matmul),
 *                  kernel_overhead (s per
 *                  kernel), p2p_overhead (s per pipeline transfer),
 *                  oversub_alpha (s added to every message step per rank
 *                  beyond the cores, CPU), step_overhead (s per step)
 *   [software]     what the training code does: attention (flash: causal,
 *                  no T x T tensor; materialized: scores, softmax and
 *                  dropout in memory), dropout (on | off), pp_scatter_gather
 *                  (on: a pipeline transfer sends 1/tp and all-gathers inside
 *                  the node), sp_gather_overlap (on: sequence parallelism's
 *                  extra backward all-gathers hide behind compute),
 *                  stage_split (balanced | uniform), grad_bytes (4: fp32
 *                  gradients reduced, 2: in the compute type)
 *
 * Later files override earlier ones key by key (gt_cluster_parse); within
 * one file a key may appear once. */
typedef struct gt_cluster {
  char name[64];
  int nodes, ranks_per_node, cores_per_node;
  double peak[GT_PEAK_COUNT];
  bool fp32_tf32;
  double memory, memory_bw;
  double intra_alpha, intra_beta, inter_alpha, inter_beta, gamma;
  double eff_matmul, eff_mem, eff_net;
  double eff_attention; /* flash attention's fraction of the peak (0: eff_matmul) */
  double kernel_overhead, p2p_overhead, oversub_alpha, step_overhead;
  bool flash, dropout, pp_scatter_gather, sp_gather_overlap, uniform_split;
  int grad_bytes;
  char source[GT_PATH_MAX]; /* the files read, for messages */
  unsigned char keys_set[64]; /* which keys a file has set (required ones checked) */
} gt_cluster;

/* Built-in values (documented in docs/planning.md): a device per rank,
 * nothing else set; required keys must come from a file. */
void gt_cluster_defaults(gt_cluster *c);

/* Apply INI text (source names it in messages) on top of c. GT_ERR_INPUT
 * with "source:line: ..." for an unknown section or key, a bad value, a key
 * given twice in the text or a malformed line. Not collective. */
int gt_cluster_parse(gt_cluster *c, const char *text, const char *source);

/* Read and apply a file; GT_ERR_INPUT naming it when it cannot be read. */
int gt_cluster_load(gt_cluster *c, const char *path);

/* Every required key set, values consistent. GT_ERR_INPUT. */
int gt_cluster_check(const gt_cluster *c);

// ---- a layout and its cost (src/plan/costmodel.c) ---------------------------

/* One kernel at a rank's local shape, per micro-batch: forward FLOPs and
 * bytes, and the backward as nbwd kernels of bwd_flops / nbwd FLOPs and
 * bwd_bytes / nbwd bytes each (a product's data and weight gradients are two
 * kernels the size of its forward; a memory-bound kernel's backward reads
 * one more tensor: 1.5 times its bytes). attn_core: rerun by recompute =
 * attention. gemm: a matrix product (M x K times K x N). */
typedef struct gt_kernel {
  const char *name;
  double flops, bytes;
  double bwd_flops, bwd_bytes;
  int nbwd;
  bool attn_core, gemm;
  double m, n, k; /* gemm shape (forward) */
} gt_kernel;

#define GT_COST_MAX_KERNELS 32

/* The kernels of one transformer block for a micro-batch of mbs sequences of
 * seq tokens on a rank of a tensor-parallel group of tp (local shapes),
 * in order; returns their count. Not collective. */
int gt_cost_block_kernels(const gt_gpt_shape *shape, int mbs, int seq, int tp, bool seq_par,
                          gt_dtype dt, const gt_cluster *c, gt_kernel *k);

/* The kernels of the head (final LayerNorm, logits, cross-entropy) on the
 * last stage and of the embedding on the first. */
int gt_cost_head_kernels(const gt_gpt_shape *shape, int mbs, int seq, int tp, bool seq_par,
                         gt_dtype dt, const gt_cluster *c, gt_kernel *k);
int gt_cost_embed_kernels(const gt_gpt_shape *shape, int mbs, int seq, int tp, bool seq_par,
                          gt_dtype dt, const gt_cluster *c, gt_kernel *k);

/* Roofline time of a kernel of `flops` FLOPs and `bytes` bytes on one rank
 * of c in precision dt, with `share` of its device (1; less when CPU ranks
 * share cores). */
double gt_cost_kernel_time(const gt_cluster *c, gt_dtype dt, double flops, double bytes,
                           double share);

/* Collective times, alpha-beta(-gamma): n members, `bytes` the whole buffer
 * (all-reduce: each member's buffer; all-gather: the gathered result;
 * reduce-scatter: each member's input), alpha in s, beta in s per byte,
 * gamma in s per byte reduced, eff the bandwidth efficiency. Ring
 * algorithms: all-reduce 2(n-1) alpha + 2(n-1)/n bytes beta / eff + (n-1)/n
 * bytes gamma; reduce-scatter (n-1) alpha + (n-1)/n bytes (beta / eff +
 * gamma); all-gather (n-1) alpha + (n-1)/n bytes beta / eff. Evaluated by
 * coll_algos.h's gt_algo_time (the ring, with eff), as the runtime's
 * auto choice is. */
double gt_cost_allreduce(int n, double bytes, double alpha, double beta, double gamma,
                         double eff);
double gt_cost_reduce_scatter(int n, double bytes, double alpha, double beta, double gamma,
                              double eff);
double gt_cost_allgather(int n, double bytes, double alpha, double beta, double eff);

/* Bubble fraction of the compute of a step: (pp - 1) / (V m) (V = chunks,
 * 1 for gpipe and 1f1b); zb-h1 (pp - 1) / (3 m), with B, W and F of equal
 * cost (schedule.h); pipedream-2bw 0 at ZeRO stage `zero` 0 (its update
 * deferred into the next step), else 2 (pp - 1) / (3 m), the (pp - 1)
 * backwards (two thirds of F + B) its step's reductions wait for. The step
 * model (gt_cost_evaluate) charges it of the mean stage's time. */
double gt_cost_bubble_fraction(gt_schedule_kind s, int pp, int micro, int chunks, int zero);

/* The predicted step, per rank of the slowest stage (seconds; the parts
 * add up to step). */
typedef struct gt_cost {
  double step;
  double compute;   /* m x the slowest stage's kernels, recomputation included */
  double recompute; /* of which the reruns */
  double tp_comm;   /* m x its tensor-parallel collectives */
  double pp_comm;   /* m x its pipeline transfers */
  double bubble;    /* (pp - 1) / V x a mean stage's micro-batch */
  double dp_comm;   /* data-parallel and ZeRO traffic not hidden by compute */
  double dp_total;  /* all of it, hidden or not */
  double optimizer; /* AdamW, clipping, step overhead */
  double tokens_per_s;
  double model_flops; /* 6 x matrix parameters x tokens + attention, per step (gt_gpt_flops_per_token) */
  double mfu;         /* model_flops / (step x ranks x peak) */
  double memory;      /* the largest rank's expected bytes (gt_mem_plan) */
  bool fits;          /* memory <= the cluster's memory per rank */
  double stage_max, stage_mean; /* a micro-batch on the slowest / a mean stage */
} gt_cost;

/* The step of layout l (gt_layout_resolve's, layout.h) for the model of
 * cfg ([model] shape, [parallel] stages) on `ranks` ranks of cluster c.
 * Memory is gt_mem_plan's account of l (the same bytes as `gridtrain plan
 * --memory`). GT_ERR_INPUT for a layout the cluster cannot run (no peak
 * for its precision; with stage_split = uniform, an interleaved schedule
 * whose virtual stages do not divide the layers). Not collective. */
int gt_cost_evaluate(const gt_config *cfg, const gt_layout *l, int ranks, const gt_cluster *c,
                     gt_cost *out);

// ---- the search (src/plan/search.c) -----------------------------------------

/* Which dimensions of the search are pinned (to the value in cfg); the rest
 * are enumerated. */
typedef struct gt_plan_pins {
  bool dp, pp, tp, micro, schedule, zero, recompute, seq_par, precision, dp_overlap;
} gt_plan_pins;

typedef struct gt_plan_row {
  gt_layout layout;
  gt_cost cost;
} gt_plan_row;

/* Enumerate every layout of cfg's model and global batch on `ranks` ranks
 * of c (tp divides the heads and the ranks per node; pp <= layers; dp x mbs
 * x m = batch; schedules gpipe, 1f1b and interleaved:V; zero 0-3 when dp >
 * 1; recompute none, attention, block; sequence parallelism when tp > 1;
 * the precisions c has a peak for, fp16 only where it is faster than
 * bf16), keep those gt_layout_resolve accepts (a candidate's keys resolve
 * to the candidate: the trainer would run it), evaluate each, and sort:
 * layouts that fit first, by tokens/s, highest first. *rows is allocated
 * (free() it), *n set. Not collective. */
int gt_plan_search(const gt_config *cfg, const gt_plan_pins *pins, int ranks,
                   const gt_cluster *c, gt_plan_row **rows, int *n);

/* The ranking as a table (the first top rows) and the CSV of all rows. */
void gt_plan_print_top(FILE *out, const gt_plan_row *rows, int n, int top, const gt_cluster *c,
                       int ranks);
void gt_plan_print_one(FILE *out, const gt_plan_row *row, const gt_cluster *c, int ranks);
int gt_plan_write_csv(const char *path, const gt_plan_row *rows, int n);

/* The published-results check (benchmarks/plan/published.tsv): every row's
 * prediction with clusters c, written as a table to out (when not NULL),
 * and per table (1: Megatron SC'21 Table 1, 5: Korthikanti et al. Table 5)
 * the mean and largest absolute relative error. GT_ERR_INPUT for a file
 * that does not parse. Not collective. */
typedef struct gt_plan_check {
  int rows[2];
  double mae[2], max[2];
} gt_plan_check;
int gt_plan_validate(const char *tsv, const gt_cluster *c, FILE *out, gt_plan_check *check);

#endif /* GRIDTRAIN_COSTMODEL_H */
