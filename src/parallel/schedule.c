/*
 * schedule.c - GPipe, 1F1B, interleaved 1F1B, ZB-H1 and PipeDream-2BW
 * operation orders, and the stage split.
 */
#include "gridtrain/schedule.h"

#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"

int gt_schedule_parse(const char *name, gt_schedule *sched)
{
  memset(sched, 0, sizeof *sched);
  sched->chunks = 1;
  if (strcmp(name, "gpipe") == 0) {
    sched->kind = GT_SCHEDULE_GPIPE;
  } else if (strcmp(name, "1f1b") == 0) {
    sched->kind = GT_SCHEDULE_1F1B;
  } else if (strcmp(name, "zb-h1") == 0) {
    sched->kind = GT_SCHEDULE_ZBH1;
  } else if (strcmp(name, "pipedream-2bw") == 0) {
    sched->kind = GT_SCHEDULE_2BW;
  } else if (strncmp(name, "interleaved:", 12) == 0) {
    const char *v = name + 12;
    char *end;
    errno = 0;
    long chunks = strtol(v, &end, 10);
    GT_CHECK(end != v && *end == '\0' && errno == 0 && chunks >= 2 &&
                 chunks <= GT_SCHEDULE_MAX_CHUNKS,
             GT_ERR_INPUT,
             "[parallel] schedule = '%s': interleaved:V needs V, the model chunks per rank, "
             "a whole number from 2 to %d",
             name, GT_SCHEDULE_MAX_CHUNKS);
    sched->kind = GT_SCHEDULE_INTERLEAVED;
    sched->chunks = (int)chunks;
  } else {
    return GT_ERROR(GT_ERR_INPUT,
                    "[parallel] schedule = '%s': unknown schedule; use gpipe, 1f1b, "
                    "interleaved:V (V model chunks per rank), zb-h1 or pipedream-2bw",
                    name);
  }
  snprintf(sched->name, sizeof sched->name, "%s", name);
  return GT_SUCCESS;
}

const char *gt_schedule_name(const gt_schedule *sched) { return sched->name; }

gt_schedule gt_schedule_of(gt_schedule_kind kind, int chunks)
{
  gt_schedule s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.chunks = kind == GT_SCHEDULE_INTERLEAVED ? chunks : 1;
  if (kind == GT_SCHEDULE_INTERLEAVED)
    snprintf(s.name, sizeof s.name, "interleaved:%d", chunks);
  else
    snprintf(s.name, sizeof s.name, "%s",
             kind == GT_SCHEDULE_GPIPE  ? "gpipe"
             : kind == GT_SCHEDULE_ZBH1 ? "zb-h1"
             : kind == GT_SCHEDULE_2BW  ? "pipedream-2bw"
                                        : "1f1b");
  return s;
}

int gt_schedule_check(const gt_schedule *sched, int p, int m, int layers)
{
  if (sched->kind == GT_SCHEDULE_2BW)
    GT_CHECK(m >= p, GT_ERR_INPUT,
             "[parallel] schedule = pipedream-2bw keeps two weight versions, enough only "
             "with at least pp micro-batches: [data] microbatches = %d, pp = %d",
             m, p);
  if (sched->kind != GT_SCHEDULE_INTERLEAVED)
    return GT_SUCCESS;
  const int v = sched->chunks;
  GT_CHECK(p >= 2, GT_ERR_INPUT,
           "[parallel] schedule = %s needs pipeline parallelism: [grid] pp = %d; use pp >= 2 "
           "or schedule = 1f1b",
           sched->name, p);
  GT_CHECK(m % p == 0, GT_ERR_INPUT,
           "[parallel] schedule = %s sends groups of pp micro-batches through each chunk: "
           "[data] microbatches = %d must be a multiple of pp = %d",
           sched->name, m, p);
  GT_CHECK((long)p * v <= layers, GT_ERR_INPUT,
           "[parallel] schedule = %s over pp = %d needs %d virtual stages of at least one "
           "block, but [model] layers = %d",
           sched->name, p, p * v, layers);
  return GT_SUCCESS;
}

bool gt_schedule_splits(const gt_schedule *sched) { return sched->kind == GT_SCHEDULE_ZBH1; }

bool gt_schedule_streams(const gt_schedule *sched) { return sched->kind == GT_SCHEDULE_2BW; }

int gt_schedule_ops(const gt_schedule *sched, int m)
{
  return (gt_schedule_splits(sched) ? 3 : 2) * m * sched->chunks;
}

/* Unit k of the interleaved order: its chunk and micro-batch (forward
 * order; backward takes the chunks in reverse). */
static gt_pipe_op gt_interleaved_unit(int p, int v, int k, int backward)
{
  const int group = k / (p * v), in_group = k % (p * v);
  const int chunk = in_group / p;
  return (gt_pipe_op){backward ? GT_PASS_B : GT_PASS_F, group * p + in_group % p,
                      backward ? v - 1 - chunk : chunk, 0};
}

/* Operation i of stage s's list: a warm-up of `warm` forwards, then a
 * forward and a backward alternating, then the remaining backwards, over
 * `units` units (unit k is unit_of(k)). */
static gt_pipe_op gt_schedule_op(const gt_schedule *sched, int p, int s, int m, int i)
{
  const int v = sched->chunks, units = m * v;
  int warm;
  switch (sched->kind) {
  case GT_SCHEDULE_GPIPE:
    warm = m;
    break;
  case GT_SCHEDULE_INTERLEAVED:
    warm = 2 * (p - s - 1) + (v - 1) * p;
    break;
  default:
    warm = p - s - 1;
  }
  warm = warm < units ? warm : units;
  int k, backward;
  if (i < warm) {
    k = i;
    backward = 0;
  } else if (i < warm + 2 * (units - warm)) {
    const int j = i - warm;
    backward = j % 2;
    k = backward ? j / 2 : warm + j / 2;
  } else {
    k = i - warm - (units - warm);
    backward = 1;
  }
  if (sched->kind == GT_SCHEDULE_INTERLEAVED)
    return gt_interleaved_unit(p, v, k, backward);
  return (gt_pipe_op){backward ? GT_PASS_B : GT_PASS_F, k, 0, 0};
}

/* Operation i of stage s's list, for every kind: ZB-H1 walks 1F1B's F
 * and B order, W(j - s) after each B(j), then the s remaining W's (O(m)
 * per call, O(m^2) for a list: the lists are built once per set-up). */
static gt_pipe_op gt_schedule_at(const gt_schedule *sched, int p, int s, int m, int i)
{
  if (!gt_schedule_splits(sched))
    return gt_schedule_op(sched, p, s, m, i);
  const gt_schedule fb = gt_schedule_of(GT_SCHEDULE_1F1B, 1);
  int n = 0;
  for (int k = 0; k < 2 * m; k++) {
    const gt_pipe_op op = gt_schedule_op(&fb, p, s, m, k);
    if (n++ == i)
      return op;
    if (op.pass == GT_PASS_B && op.mb >= s && n++ == i)
      return (gt_pipe_op){GT_PASS_W, op.mb - s, 0, 0};
  }
  return (gt_pipe_op){GT_PASS_W, m - (3 * m - i), 0, 0}; /* the last s W's */
}

int gt_schedule_window(int p, int s, int m, bool primed, bool prime_next, gt_pipe_op *ops)
{
  GT_ASSERT(p >= 1 && s >= 0 && s < p && m >= p);
  const int w = p - s - 1;
  int n = 0;
  for (int i = 0; !primed && i < w; i++)
    ops[n++] = (gt_pipe_op){GT_PASS_F, i, 0, 0};
  for (int i = 0; i < m - w; i++) {
    ops[n++] = (gt_pipe_op){GT_PASS_F, w + i, 0, 0};
    ops[n++] = (gt_pipe_op){GT_PASS_B, i, 0, 0};
  }
  for (int i = 0; i < w; i++) {
    if (prime_next)
      ops[n++] = (gt_pipe_op){GT_PASS_F, i, 0, 1};
    ops[n++] = (gt_pipe_op){GT_PASS_B, m - w + i, 0, 0};
  }
  return n;
}

int gt_schedule_build(const gt_schedule *sched, int p, int s, int m, gt_pipe_op *ops)
{
  GT_ASSERT(p >= 1 && s >= 0 && s < p && m >= 1);
  GT_ASSERT(sched->kind != GT_SCHEDULE_INTERLEAVED || m % p == 0);
  const int n = gt_schedule_ops(sched, m);
  for (int i = 0; i < n; i++)
    ops[i] = gt_schedule_at(sched, p, s, m, i);
  return GT_SUCCESS;
}

/* +1 where a unit starts (F), -1 where it ends (its W where the schedule
 * splits the backward, else its B), 0 otherwise. */
static int gt_schedule_live_step(const gt_schedule *sched, gt_pipe_op op)
{
  if (op.pass == GT_PASS_F)
    return 1;
  return op.pass == (gt_schedule_splits(sched) ? GT_PASS_W : GT_PASS_B) ? -1 : 0;
}

int gt_schedule_chunk_slots(const gt_schedule *sched, int p, int s, int m, int *slots)
{
  const int v = sched->chunks, n = gt_schedule_ops(sched, m);
  int live[GT_SCHEDULE_MAX_CHUNKS] = {0}, total = 0;
  for (int c = 0; c < v; c++)
    slots[c] = 0;
  for (int i = 0; i < n; i++) {
    const gt_pipe_op op = gt_schedule_at(sched, p, s, m, i);
    live[op.chunk] += gt_schedule_live_step(sched, op);
    if (live[op.chunk] > slots[op.chunk])
      slots[op.chunk] = live[op.chunk];
  }
  for (int c = 0; c < v; c++)
    total += slots[c];
  return total;
}

int gt_schedule_w_backlog(const gt_schedule *sched, int p, int s, int m)
{
  if (!gt_schedule_splits(sched))
    return 0;
  const int n = gt_schedule_ops(sched, m);
  int pending = 0, most = 0;
  for (int i = 0; i < n; i++) {
    const gt_pipe_op op = gt_schedule_at(sched, p, s, m, i);
    pending += op.pass == GT_PASS_B ? 1 : op.pass == GT_PASS_W ? -1 : 0;
    most = pending > most ? pending : most;
  }
  return most;
}

int gt_schedule_in_flight(const gt_schedule *sched, int p, int s, int m)
{
  int slots[GT_SCHEDULE_MAX_CHUNKS];
  return gt_schedule_chunk_slots(sched, p, s, m, slots);
}

int gt_schedule_peak_units(const gt_schedule *sched, int p, int s, int m)
{
  const int n = gt_schedule_ops(sched, m);
  int live = 0, most = 0;
  for (int i = 0; i < n; i++) {
    live += gt_schedule_live_step(sched, gt_schedule_at(sched, p, s, m, i));
    most = live > most ? live : most;
  }
  return most;
}

/* Parse "a,b,c" into p positive counts that sum to layers. */
static int gt_split_explicit(int layers, int p, const char *spec, int *first)
{
  const char *c = spec;
  int total = 0;
  first[0] = 0;
  for (int s = 0; s < p; s++) {
    char *end;
    errno = 0;
    long n = strtol(c, &end, 10);
    GT_CHECK(end != c && errno == 0 && n >= 1 && n <= layers, GT_ERR_INPUT,
             "[parallel] stages = '%s': expected %d positive block counts separated by "
             "commas, one per pipeline stage",
             spec, p);
    total += (int)n;
    first[s + 1] = first[s] + (int)n;
    c = end;
    if (s + 1 < p) {
      GT_CHECK(*c == ',', GT_ERR_INPUT,
               "[parallel] stages = '%s' names fewer stages than pp = %d", spec, p);
      c++;
    }
  }
  while (*c == ' ')
    c++;
  GT_CHECK(*c == '\0', GT_ERR_INPUT, "[parallel] stages = '%s' names more stages than pp = %d",
           spec, p);
  GT_CHECK(total == layers, GT_ERR_INPUT,
           "[parallel] stages = '%s' covers %d blocks but [model] layers = %d", spec, total,
           layers);
  return GT_SUCCESS;
}

int gt_pipeline_split(int layers, int p, double block_cost, double head_cost,
                      const char *spec, int *first)
{
  GT_CHECK(p >= 1 && p <= layers, GT_ERR_INPUT,
           "pp=%d pipeline stages need at least %d layers but [model] layers=%d", p, p, layers);
  if (spec && spec[0])
    return gt_split_explicit(layers, p, spec, first);
  /* Stage costs only depend on block counts, so choose the counts: the
   * last stage takes k blocks, the first p-1 stages share the rest as
   * evenly as possible (earlier stages take the remainder). Try every k:
   * the smallest most expensive stage wins, then the smallest spread
   * between the most and least expensive stage, then the smaller k. */
  if (p == 1) {
    first[0] = 0;
    first[1] = layers;
    return GT_SUCCESS;
  }
  double best = DBL_MAX, best_spread = DBL_MAX;
  int best_k = 1;
  for (int k = 1; k <= layers - (p - 1); k++) {
    const int rest = layers - k;
    const double hi = (double)((rest + p - 2) / (p - 1)) * block_cost;
    const double lo = (double)(rest / (p - 1)) * block_cost;
    const double last = k * block_cost + head_cost;
    const double worst = hi > last ? hi : last, least = lo < last ? lo : last;
    const double tol = 1e-9 * (worst > 0 ? worst : 1);
    if (worst < best - tol || (worst <= best + tol && worst - least < best_spread - tol)) {
      best = worst;
      best_spread = worst - least;
      best_k = k;
    }
  }
  const int rest = layers - best_k;
  first[0] = 0;
  for (int s = 0; s + 1 < p; s++) {
    int n = rest / (p - 1) + (s < rest % (p - 1) ? 1 : 0);
    first[s + 1] = first[s] + n;
  }
  first[p] = layers;
  return GT_SUCCESS;
}

int gt_schedule_plan(const gt_schedule *sched, const char *spec, int layers, int p,
                     double block_cost, double head_cost, int **vfirst)
{
  const int nv = p * sched->chunks;
  *vfirst = malloc(sizeof(int) * (size_t)(nv + 1));
  GT_CHECK_ALLOC(*vfirst, sizeof(int) * (size_t)(nv + 1));
  GT_CALL(gt_pipeline_split(layers, nv, block_cost, head_cost, spec, *vfirst));
  return GT_SUCCESS;
}
