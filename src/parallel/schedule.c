/*
 * schedule.c - GPipe and 1F1B operation orders, and the stage split.
 */
#include "gridtrain/schedule.h"

#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"

int gt_schedule_parse(const char *name, gt_schedule_kind *kind)
{
  if (strcmp(name, "gpipe") == 0)
    *kind = GT_SCHEDULE_GPIPE;
  else if (strcmp(name, "1f1b") == 0)
    *kind = GT_SCHEDULE_1F1B;
  else
    return GT_ERROR(GT_ERR_INPUT, "unknown pipeline schedule '%s'; use gpipe or 1f1b", name);
  return GT_SUCCESS;
}

const char *gt_schedule_name(gt_schedule_kind kind)
{
  return kind == GT_SCHEDULE_GPIPE ? "gpipe" : "1f1b";
}

int gt_schedule_build(gt_schedule_kind kind, int p, int s, int m, gt_pipe_op *ops)
{
  GT_ASSERT(p >= 1 && s >= 0 && s < p && m >= 1);
  int n = 0;
  if (kind == GT_SCHEDULE_GPIPE) {
    for (int i = 0; i < m; i++)
      ops[n++] = (gt_pipe_op){0, i};
    for (int i = 0; i < m; i++)
      ops[n++] = (gt_pipe_op){1, i};
    return GT_SUCCESS;
  }
  const int warm = p - s - 1 < m ? p - s - 1 : m;
  for (int i = 0; i < warm; i++)
    ops[n++] = (gt_pipe_op){0, i};
  for (int i = 0; i < m - warm; i++) {
    ops[n++] = (gt_pipe_op){0, warm + i};
    ops[n++] = (gt_pipe_op){1, i};
  }
  for (int i = m - warm; i < m; i++)
    ops[n++] = (gt_pipe_op){1, i};
  GT_ASSERT(n == 2 * m);
  return GT_SUCCESS;
}

int gt_schedule_in_flight(gt_schedule_kind kind, int p, int s, int m)
{
  if (kind == GT_SCHEDULE_GPIPE)
    return m;
  return p - s < m ? p - s : m;
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
