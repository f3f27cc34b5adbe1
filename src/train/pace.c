/*
 * pace.c - MFU and ETA of a training run (pace.h).
 */
#include "gridtrain/pace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/peak.h"

#define GT_PACE_DECAY 0.9 /* weight of a step time per step back */

struct gt_pace {
  double peak;           /* FLOP/s, all ranks; 0: unknown */
  double flops_per_step; /* model FLOPs of one global batch */
  long steps;            /* [run] steps */
  long timed;            /* steps counted so far */
  double first_ms;       /* the run's first step (warm-up) */
  double num, den;       /* the weighted sum of later step times, and of their weights */
};

// ---- the peak -------------------------------------------------------------------------------

/* Node-local rank 0 measures (or reads the cache), while the node's other
 * ranks wait by testing and sleeping: a rank spinning in MPI would take a
 * core from the measurement. out: {FLOP/s (0: failed), from the cache}. */
static int gt_pace_calibrate(const gt_grid *g, gt_backend *be, double out[2], char *why,
                             size_t size)
{
  out[0] = out[1] = 0;
  if (g->node_rank == 0) {
    bool cached = false;
    char path[1100];
    if (gt_peak_cpu(be, &out[0], &cached, path, sizeof path) == GT_SUCCESS) {
      out[1] = cached;
    } else {
      snprintf(why, size, "the sgemm calibration failed: %s", gt_error_message());
      gt_error_clear();
      out[0] = 0;
    }
  }
  MPI_Request req;
  GT_CALL_MPI(MPI_Ibcast(out, 2, MPI_DOUBLE, 0, g->node, &req));
  for (int done = 0;;) {
    GT_CALL_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done)
      break;
    nanosleep(&(struct timespec){0, 1000000L}, NULL);
  }
  return GT_SUCCESS;
}

int gt_pace_create(const gt_config *cfg, const gt_grid *g, gt_backend *be,
                   double flops_per_step, bool quiet, gt_pace **pace)
{
  *pace = NULL;
  gt_pace *p = calloc(1, sizeof *p);
  GT_CHECK_ALLOC(p, sizeof *p);
  p->flops_per_step = flops_per_step;
  p->steps = cfg->run.steps;
  *pace = p;

  /* this rank's share of the run's peak, and whether it has none */
  double mine[2] = {0, 0}, per_rank = 0, calib[2] = {0, 0};
  char source[160] = "", why[600] = "";
  if (cfg->run.peak_tflops > 0) {
    per_rank = 1e12 * cfg->run.peak_tflops;
    snprintf(source, sizeof source, "[run] peak_tflops");
    mine[0] = per_rank;
  } else if (be->device == GT_CUDA) {
    const char *name = gt_backend_device_name(be);
    per_rank = gt_peak_gpu(name, gt_peak_kind_of(cfg->backend.precision));
    const char *precision = gt_precision_names[cfg->backend.precision];
    snprintf(source, sizeof source, "%s, dense %s", name, precision);
    if (per_rank <= 0)
      snprintf(why, sizeof why, "gridtrain's table has no dense %s peak for the GPU '%s'",
               precision, name);
    mine[0] = per_rank;
  } else {
    GT_CALL(gt_pace_calibrate(g, be, calib, why, sizeof why));
    per_rank = calib[0];
    snprintf(source, sizeof source, "sgemm with %d thread%s, %s", be->threads,
             be->threads == 1 ? "" : "s", calib[1] ? "cached" : "measured");
    /* the node's ranks that can compute at once */
    const double fit = g->node_cores / (be->threads > 0 ? be->threads : 1);
    const double ranks = fit < 1 ? 1 : fit < g->node_size ? fit : g->node_size;
    mine[0] = per_rank * ranks / g->node_size;
  }
  mine[1] = per_rank > 0 ? 0 : 1;
  GT_CALL(gt_allreduce_f64(mine, 2, MPI_SUM, g->world));
  p->peak = mine[1] > 0 ? 0 : mine[0];
  if (quiet || g->world_rank != 0)
    return GT_SUCCESS;
  if (p->peak > 0)
    gt_info("gridtrain: MFU against a peak of %.4g TFLOP/s: %.4g per rank (%s) x %d rank%s%s\n",
            p->peak / 1e12, per_rank / 1e12, source, g->world_size,
            g->world_size == 1 ? "" : "s",
            p->peak < 0.999 * per_rank * g->world_size
                ? " (counting only the ranks whose threads the nodes' cores hold)"
                : "");
  else
    gt_info("gridtrain: note: MFU is not reported: %s; set [run] peak_tflops to one rank's "
            "dense peak\n",
            why[0] ? why : "a rank has no known peak");
  return GT_SUCCESS;
}

// ---- each step ------------------------------------------------------------------------------

void gt_pace_step(gt_pace *p, gt_step_stats *st)
{
  st->mfu = p->peak > 0 && st->step_ms > 0
                ? p->flops_per_step / (st->step_ms / 1e3) / p->peak
                : NAN;
  if (p->timed++ == 0) {
    p->first_ms = st->step_ms;
  } else {
    p->num = GT_PACE_DECAY * p->num + st->step_ms;
    p->den = GT_PACE_DECAY * p->den + 1;
  }
  const double mean_ms = p->den > 0 ? p->num / p->den : p->first_ms;
  const long left = p->steps - (st->step + 1);
  st->eta_s = (left > 0 ? (double)left : 0) * mean_ms / 1e3;
}

double gt_pace_peak(const gt_pace *p) { return p ? p->peak : 0; }

void gt_pace_destroy(gt_pace **p)
{
  free(*p);
  *p = NULL;
}
