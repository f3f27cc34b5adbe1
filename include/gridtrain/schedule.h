/*
 * gridtrain/schedule.h - pipeline schedules and the split of layers into
 * stages. Pure functions: the trainer executes the operation lists.
 *
 * With p stages and m micro-batches, stage s runs 2m operations, a forward
 * F(i) and a backward B(i) of every micro-batch i, in one of these orders:
 *
 *   gpipe  F(0) .. F(m-1), then B(0) .. B(m-1): all m micro-batches keep
 *          their activations until the turn-around.
 *   1f1b   warm-up of w = min(p - s - 1, m) forwards, then one forward and
 *          one backward alternating (F(w+i), B(i)), then the remaining
 *          backwards: stage s holds at most min(p - s, m) micro-batches.
 *
 * Both have the same bubble, (p - 1) / (m + p - 1) of a step when stages
 * cost the same; 1F1B bounds the activation memory by p instead of m.
 *
 *   interleaved:V  Megatron's interleaved 1F1B (Narayanan et al., SC'21,
 *          arXiv 2104.04473). The blocks are split into p V virtual stages
 *          and rank s holds V model chunks, virtual stages s, p + s, ...,
 *          (V - 1) p + s: non-contiguous blocks. A micro-batch goes round
 *          the ranks V times. Stage s runs 2 m V operations on (chunk,
 *          micro-batch) units: forward unit k is chunk (k / p) mod V of
 *          micro-batch (k / (p V)) p + k mod p (groups of p micro-batches
 *          through one chunk after another); backward unit k the same with
 *          the chunks in reverse. A warm-up of min(2 (p - s - 1) + (V - 1) p,
 *          m V) forwards, then one forward and one backward alternating,
 *          then the remaining backwards. Each unit costs 1/V of a stage, so
 *          the bubble shrinks to (p - 1) / V of a micro-batch's time, a
 *          fraction (p - 1) / (V m + p - 1) of the step, at the price of V
 *          times the pipeline messages. Needs p >= 2, m a multiple of p and
 *          at least p V blocks.
 *
 *   zb-h1  ZB-H1 of "Zero Bubble Pipeline Parallelism" (Qi et al., ICLR
 *          2024): the backward splits into B, the input gradient, and W,
 *          the weight gradients (layers.h), and stage s runs 3 m operations:
 *          1F1B's order of F and B, with W(j - s) right after each B(j)
 *          (j >= s) and the s remaining W's at the end. A unit lives from
 *          its F to its W: at most min(p, m) on every stage, stage 0's
 *          1F1B bound. With costs tf, tb, tw the bubble is (p - 1)(tf + tb
 *          - tw) of a stage's time while tw <= tb ((p - 1) tf otherwise),
 *          against 1F1B's (p - 1)(tf + tb + tw): a third of it when the
 *          three cost the same. Not yet with ZeRO 2-3, sequence
 *          parallelism or recomputation (gt_layout_resolve refuses them).
 *
 *   pipedream-2bw  PipeDream-2BW (Narayanan et al., ICML 2021): no flush.
 *          The stream of micro-batches runs on across steps in 1F1B's
 *          steady order, and gt_schedule_window cuts it into steps: the
 *          step of batch t on stage s ends with the last B of batch t, so
 *          it runs the first w = p - s - 1 forwards of batch t + 1 (with
 *          the weights batch t + 1 uses, one version newer) besides batch
 *          t's own operations. Needs m >= p (two weight versions suffice
 *          then). gt_schedule_build gives the step of a pipeline that
 *          starts empty and ends empty, 1F1B's order (what evaluation
 *          runs). See docs/parallelism.md.
 */
#ifndef GRIDTRAIN_SCHEDULE_H
#define GRIDTRAIN_SCHEDULE_H

#include <stdbool.h>

typedef enum {
  GT_SCHEDULE_GPIPE = 0,
  GT_SCHEDULE_1F1B = 1,
  GT_SCHEDULE_INTERLEAVED = 2,
  GT_SCHEDULE_ZBH1 = 3,
  GT_SCHEDULE_2BW = 4
} gt_schedule_kind;

#define GT_SCHEDULE_MAX_CHUNKS 64 /* V of interleaved:V */

typedef struct gt_schedule {
  gt_schedule_kind kind;
  int chunks;    /* model chunks per rank: V of interleaved:V, else 1 */
  char name[24]; /* as written in a deck: "1f1b", "interleaved:2" */
} gt_schedule;

typedef enum {
  GT_PASS_F = 0, /* forward */
  GT_PASS_B = 1, /* backward: with the weight gradients unless the schedule splits them */
  GT_PASS_W = 2  /* the weight gradients of a split backward (zb-h1) */
} gt_pass;

typedef struct gt_pipe_op {
  gt_pass pass;
  int mb;    /* micro-batch */
  int chunk; /* model chunk of this rank (0 unless interleaved) */
  int next;  /* 1: micro-batch mb of the next step's batch (pipedream-2bw) */
} gt_pipe_op;

/* "gpipe", "1f1b", "interleaved:V" (2 <= V <= GT_SCHEDULE_MAX_CHUNKS),
 * "zb-h1" or "pipedream-2bw" into *sched; GT_ERR_INPUT naming [parallel] schedule otherwise. */
int gt_schedule_parse(const char *name, gt_schedule *sched);
const char *gt_schedule_name(const gt_schedule *sched);

/* The schedule of a kind with `chunks` model chunks per rank (interleaved;
 * 1 otherwise), with its deck name: what gt_schedule_parse of that name
 * gives. */
gt_schedule gt_schedule_of(gt_schedule_kind kind, int chunks);

/* Whether sched fits p stages, m micro-batches and `layers` blocks
 * (interleaved: p >= 2, m a multiple of p, layers >= p V; pipedream-2bw:
 * m >= p); GT_ERR_INPUT
 * with the deck keys to change otherwise. */
int gt_schedule_check(const gt_schedule *sched, int p, int m, int layers);

/* Whether the schedule runs B and W as operations of their own. */
bool gt_schedule_splits(const gt_schedule *sched);

/* Whether micro-batches stream on across steps without a flush
 * (pipedream-2bw: the executor runs gt_schedule_window's steps). */
bool gt_schedule_streams(const gt_schedule *sched);

/* Operations per step of a stage: 2 m V, 3 m for a split schedule (a
 * streaming schedule's gt_schedule_window steps run up to 3 m). */
int gt_schedule_ops(const gt_schedule *sched, int m);

/* The gt_schedule_ops operations of stage s (of p) into ops. Not
 * collective. */
int gt_schedule_build(const gt_schedule *sched, int p, int s, int m, gt_pipe_op *ops);

/* PipeDream-2BW's operations of stage s in one step, into ops (at most
 * 3 m); returns their count. With w = p - s - 1 (m >= p): the w forwards
 * F(0) .. F(w - 1) unless `primed` (the step before ran them as its
 * next-batch forwards), then F(w + i), B(i) for i < m - w, then for i < w
 * F(i) of the next batch (`prime_next`; .next = 1) and B(m - w + i). A
 * stage holds at most p - s micro-batches, 1F1B's bound, across the steps.
 * Not collective. */
int gt_schedule_window(int p, int s, int m, bool primed, bool prime_next, gt_pipe_op *ops);

/* The most (chunk, micro-batch) units of chunk c alive at once on stage s:
 * between a unit's forward and its backward (its W where the schedule
 * splits the backward), by walking the operation list
 * (slots[c] for c < V); returns their sum, the activation slots stage s
 * allocates (with one chunk: the most micro-batches alive, min(p - s, m)
 * for 1f1b and m for gpipe). Within a chunk, units start and end in
 * micro-batch order, so micro-batch i may use slot i mod slots[c]. Not
 * collective. */
int gt_schedule_chunk_slots(const gt_schedule *sched, int p, int s, int m, int *slots);

/* The most micro-batches of stage s whose B has run and whose W has not
 * (0 unless the schedule splits the backward): the sets of projection
 * output gradients the stage keeps (gpt.h, part.split_sets), micro-batch i
 * in set i mod the count (B and W both run in micro-batch order). ZB-H1:
 * min(s + 1, m). Not collective. */
int gt_schedule_w_backlog(const gt_schedule *sched, int p, int s, int m);

/* gt_schedule_chunk_slots' sum (slots not wanted). */
int gt_schedule_in_flight(const gt_schedule *sched, int p, int s, int m);

/* The most units (of any chunk) alive at once on stage s: what the
 * executor's peak count reaches. The same as gt_schedule_in_flight with one
 * chunk; for interleaved:V min(2 (p - s - 1) + (V - 1) p + 1, m V)
 * (Megatron's bound), which the per-chunk slots exceed by at most
 * (V - 1) p. Not collective. */
int gt_schedule_peak_units(const gt_schedule *sched, int p, int s, int m);

/* Split `layers` blocks into p stages of at least one block each (for
 * interleaved:V, p is the p V virtual stages: virtual stage c p + s is
 * chunk c of rank s):
 * first[s] .. first[s+1]-1 are stage s's blocks (first[p] = layers).
 * spec "" balances cost: each block costs block_cost and the last stage
 * also carries head_cost (final LayerNorm, LM head, loss); the split with
 * the smallest most expensive stage wins, then the most even split (ties:
 * earlier stages larger).
 * Otherwise spec lists the block count of every stage ("3,5").
 * GT_ERR_INPUT for a spec that does not fit. Not collective. */
int gt_pipeline_split(int layers, int p, double block_cost, double head_cost,
                      const char *spec, int *first);

/* The split of `layers` blocks into the p V virtual stages of sched (a
 * layout's schedule, layout.h: already checked against p, m and the layers)
 * by gt_pipeline_split (cost and spec as there) into *vfirst (p V + 1
 * entries, malloc'd: the caller frees it, also after an error). Not
 * collective. */
int gt_schedule_plan(const gt_schedule *sched, const char *spec, int layers, int p,
                     double block_cost, double head_cost, int **vfirst);

#endif /* GRIDTRAIN_SCHEDULE_H */
