/*
 * gridtrain/schedule.h - pipeline schedules and the split of layers into
 * stages. Pure functions: the trainer executes the operation lists.
 *
 * With p stages and m micro-batches, stage s runs 2m operations, a forward
 * F(i) and a backward B(i) of every micro-batch i, in one of two orders:
 *
 *   gpipe  F(0) .. F(m-1), then B(0) .. B(m-1): all m micro-batches keep
 *          their activations until the turn-around.
 *   1f1b   warm-up of w = min(p - s - 1, m) forwards, then one forward and
 *          one backward alternating (F(w+i), B(i)), then the remaining
 *          backwards: stage s holds at most min(p - s, m) micro-batches.
 *
 * Both have the same bubble, (p - 1) / (m + p - 1) of a step when stages
 * cost the same; 1F1B bounds the activation memory by p instead of m.
 */
#ifndef GRIDTRAIN_SCHEDULE_H
#define GRIDTRAIN_SCHEDULE_H

typedef enum { GT_SCHEDULE_GPIPE = 0, GT_SCHEDULE_1F1B = 1 } gt_schedule_kind;

typedef struct gt_pipe_op {
  int backward; /* 0: forward, 1: backward */
  int mb;       /* micro-batch */
} gt_pipe_op;

/* "gpipe" or "1f1b" into *kind; GT_ERR_INPUT otherwise. */
int gt_schedule_parse(const char *name, gt_schedule_kind *kind);
const char *gt_schedule_name(gt_schedule_kind kind);

/* The 2m operations of stage s (of p) into ops[2m]. Not collective. */
int gt_schedule_build(gt_schedule_kind kind, int p, int s, int m, gt_pipe_op *ops);

/* The most micro-batches whose activations stage s holds at once. */
int gt_schedule_in_flight(gt_schedule_kind kind, int p, int s, int m);

/* Split `layers` blocks into p stages of at least one block each:
 * first[s] .. first[s+1]-1 are stage s's blocks (first[p] = layers).
 * spec "" balances cost: each block costs block_cost and the last stage
 * also carries head_cost (final LayerNorm, LM head, loss); the split with
 * the smallest most expensive stage wins, then the most even split (ties:
 * earlier stages larger).
 * Otherwise spec lists the block count of every stage ("3,5").
 * GT_ERR_INPUT for a spec that does not fit. Not collective. */
int gt_pipeline_split(int layers, int p, double block_cost, double head_cost,
                      const char *spec, int *first);

#endif /* GRIDTRAIN_SCHEDULE_H */
