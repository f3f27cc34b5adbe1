/*
 * gridtrain/metrics.h - what a training step reports, on the console (rank 0,
 * one compact key:value line) and as JSON lines for tools.
 *
 * JSON keys of a step record: step, loss, lr, grad_norm, loss_scale,
 * skipped (the step's update was skipped for an fp16 overflow),
 * skipped_steps (so far), step_ms, tokens_per_s, and rank 0's split of the
 * step: compute_ms, comm_ms,
 * data_ms, bubble_ms (by kind) and forward_ms, backward_ms, tp_comm_ms,
 * pp_comm_ms, dp_exposed_ms, optimizer_ms, recompute_ms (by event),
 * comm_bytes (the payload rank 0 handed to collectives in the step,
 * collectives.h), synced (the data-parallel replicas synchronised in the
 * step: always with sync = every_step, sync.h), mfu (model FLOP
 * utilisation, a fraction: null when no peak is known) and eta_s (seconds to
 * the last step; pace.h); val_loss when the step evaluated. A final record
 * has "summary": true with run totals, among them model_tflops, mfu and
 * peak_tflops (the run's peak, all ranks, when known).
 */
#ifndef GRIDTRAIN_METRICS_H
#define GRIDTRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct gt_step_stats {
  long step;            /* 0-based */
  double loss;          /* mean token loss of the global batch */
  double val_loss;      /* NaN when not evaluated this step */
  double lr;
  double grad_norm;     /* before clipping, of the unscaled gradients */
  double loss_scale;    /* the scale the step used (1 but with fp16) */
  bool dynamic_scale;   /* fp16: the console line shows the scale */
  bool skipped;         /* overflow: the update was skipped */
  long skipped_total;   /* steps skipped so far */
  double step_ms;
  double tokens_per_s;  /* global tokens of the step / step time */
  double compute_ms, comm_ms, data_ms, bubble_ms; /* this rank's split of the step */
  double forward_ms, backward_ms, tp_comm_ms, pp_comm_ms, dp_exposed_ms, optimizer_ms;
  double recompute_ms; /* the extra forwards of [model] recompute */
  double comm_bytes;   /* payload handed to collectives in the step */
  bool synced;         /* [parallel] sync: the replicas synchronised at this step */
  double mfu;          /* model FLOP/s over the run's peak (pace.h); NaN: unknown */
  double eta_s;        /* seconds to the last step (pace.h); NaN: unknown */
  /* mixture of experts ([model] experts > 0): the step's routing over the
   * whole model (every MoE block, summed over dp) */
  struct {
    bool on;
    int64_t tokens_min, tokens_max; /* pairs an expert of a block got, least and most */
    double imbalance;               /* the worst block's most over its mean */
    int64_t pairs, dropped;         /* (token, expert) pairs routed, dropped past capacity */
  } moe;
} gt_step_stats;

typedef struct gt_run_summary {
  long steps;
  double tokens;
  double seconds;
  double tokens_per_s;
  double model_tflops;  /* model FLOP/s, all ranks, in TFLOP/s */
  double peak_tflops;   /* the run's peak FLOP/s, all ranks, in TFLOP/s; 0: unknown */
  double mfu;           /* model_tflops / peak_tflops; NaN: unknown */
  double final_loss;
  double final_val_loss; /* NaN when never evaluated */
  double device_peak_bytes; /* most device memory any rank allocated; 0: host backend */
} gt_run_summary;

typedef struct gt_metrics gt_metrics;

/* Open the JSON-lines file, truncating it, or with append (a run resumed
 * from a checkpoint) adding to it; path "" or NULL: no file. Call on the
 * rank that reports (rank 0). GT_ERR_INPUT when it cannot be created. */
int gt_metrics_open(const char *path, bool append, gt_metrics **m);
int gt_metrics_close(gt_metrics **m);

/* Append one step record (flushed). m may be NULL. */
int gt_metrics_write_step(gt_metrics *m, const gt_step_stats *s);
int gt_metrics_write_summary(gt_metrics *m, const gt_run_summary *s);

/* The console line of a step:
 * "step 10/200 (6%) | loss 3.4521 | val 3.5012 | lr 1.00e-03 | gnorm 1.234 |
 *  412.3 ms | 9934 tok/s | MFU 41.2% | compute 91% comm 8% bubble 0% data 1% |
 *  ETA 1m18s"
 * (step is 0-based; the percentage is of the steps done after it), with
 * fp16 also " | scale 32768 (2 skipped)" and ", skipped" on a step whose
 * update was skipped; MFU and ETA are left out where unknown (NaN). */
void gt_metrics_format_step(const gt_step_stats *s, long total_steps, char *buf,
                            size_t size);

#endif /* GRIDTRAIN_METRICS_H */
