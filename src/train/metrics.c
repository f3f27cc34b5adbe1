/*
 * metrics.c - console lines and JSON-lines records of training steps.
 */
#include "gridtrain/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"

struct gt_metrics {
  FILE *file;
  char path[1024];
};

int gt_metrics_open(const char *path, bool append, gt_metrics **m)
{
  *m = NULL;
  if (!path || !path[0])
    return GT_SUCCESS;
  FILE *f = fopen(path, append ? "a" : "w");
  GT_CHECK(f != NULL, GT_ERR_INPUT, "cannot create the metrics file '%s' ([run] metrics): %s",
           path, strerror(errno));
  gt_metrics *mm = calloc(1, sizeof *mm);
  if (!mm) {
    fclose(f);
    GT_CHECK_ALLOC(mm, sizeof *mm);
  }
  mm->file = f;
  snprintf(mm->path, sizeof mm->path, "%s", path);
  *m = mm;
  return GT_SUCCESS;
}

int gt_metrics_close(gt_metrics **m)
{
  gt_metrics *mm = *m;
  if (!mm)
    return GT_SUCCESS;
  int rc = fclose(mm->file);
  char path[1024];
  snprintf(path, sizeof path, "%s", mm->path);
  free(mm);
  *m = NULL;
  GT_CHECK(rc == 0, GT_ERR_SYSTEM, "cannot write the metrics file '%s': %s", path,
           strerror(errno));
  return GT_SUCCESS;
}

/* JSON has no NaN: write null. */
static void gt_json_num(FILE *f, const char *key, double v, bool comma)
{
  if (isfinite(v))
    fprintf(f, "%s\"%s\":%.9g", comma ? "," : "", key, v);
  else
    fprintf(f, "%s\"%s\":null", comma ? "," : "", key);
}

int gt_metrics_write_step(gt_metrics *m, const gt_step_stats *s)
{
  if (!m)
    return GT_SUCCESS;
  FILE *f = m->file;
  fprintf(f, "{\"step\":%ld", s->step);
  gt_json_num(f, "loss", s->loss, true);
  if (!isnan(s->val_loss))
    gt_json_num(f, "val_loss", s->val_loss, true);
  gt_json_num(f, "lr", s->lr, true);
  gt_json_num(f, "grad_norm", s->grad_norm, true);
  gt_json_num(f, "loss_scale", s->loss_scale, true);
  fprintf(f, ",\"skipped\":%s,\"skipped_steps\":%ld", s->skipped ? "true" : "false",
          s->skipped_total);
  gt_json_num(f, "step_ms", s->step_ms, true);
  gt_json_num(f, "tokens_per_s", s->tokens_per_s, true);
  gt_json_num(f, "compute_ms", s->compute_ms, true);
  gt_json_num(f, "comm_ms", s->comm_ms, true);
  gt_json_num(f, "data_ms", s->data_ms, true);
  gt_json_num(f, "bubble_ms", s->bubble_ms, true);
  gt_json_num(f, "forward_ms", s->forward_ms, true);
  gt_json_num(f, "backward_ms", s->backward_ms, true);
  gt_json_num(f, "tp_comm_ms", s->tp_comm_ms, true);
  gt_json_num(f, "pp_comm_ms", s->pp_comm_ms, true);
  gt_json_num(f, "dp_exposed_ms", s->dp_exposed_ms, true);
  gt_json_num(f, "optimizer_ms", s->optimizer_ms, true);
  gt_json_num(f, "recompute_ms", s->recompute_ms, true);
  gt_json_num(f, "comm_bytes", s->comm_bytes, true);
  if (s->moe.on)
    fprintf(f,
            ",\"moe_tokens_min\":%lld,\"moe_tokens_max\":%lld,\"moe_imbalance\":%.6g,"
            "\"moe_pairs\":%lld,\"moe_dropped\":%lld",
            (long long)s->moe.tokens_min, (long long)s->moe.tokens_max, s->moe.imbalance,
            (long long)s->moe.pairs, (long long)s->moe.dropped);
  fprintf(f, ",\"synced\":%s", s->synced ? "true" : "false");
  gt_json_num(f, "mfu", s->mfu, true);
  gt_json_num(f, "eta_s", s->eta_s, true);
  fprintf(f, "}\n");
  GT_CHECK(fflush(f) == 0, GT_ERR_SYSTEM, "cannot write the metrics file '%s': %s", m->path,
           strerror(errno));
  return GT_SUCCESS;
}

int gt_metrics_write_summary(gt_metrics *m, const gt_run_summary *s)
{
  if (!m)
    return GT_SUCCESS;
  FILE *f = m->file;
  fprintf(f, "{\"summary\":true,\"steps\":%ld", s->steps);
  gt_json_num(f, "tokens", s->tokens, true);
  gt_json_num(f, "seconds", s->seconds, true);
  gt_json_num(f, "tokens_per_s", s->tokens_per_s, true);
  gt_json_num(f, "model_tflops", s->model_tflops, true);
  if (s->peak_tflops > 0)
    gt_json_num(f, "peak_tflops", s->peak_tflops, true);
  gt_json_num(f, "mfu", s->mfu, true);
  gt_json_num(f, "final_loss", s->final_loss, true);
  gt_json_num(f, "final_val_loss", s->final_val_loss, true);
  if (s->device_peak_bytes > 0)
    gt_json_num(f, "device_peak_bytes", s->device_peak_bytes, true);
  fprintf(f, "}\n");
  GT_CHECK(fflush(f) == 0, GT_ERR_SYSTEM, "cannot write the metrics file '%s': %s", m->path,
           strerror(errno));
  return GT_SUCCESS;
}

/* "45s", "3m05s", "2h03m", "3d04h". */
static void gt_format_eta(double s, char *buf, size_t size)
{
  const long t = (long)(s + 0.5);
  if (t < 60)
    snprintf(buf, size, "%lds", t);
  else if (t < 3600)
    snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
  else if (t < 86400)
    snprintf(buf, size, "%ldh%02ldm", t / 3600, t % 3600 / 60);
  else
    snprintf(buf, size, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
}

void gt_metrics_format_step(const gt_step_stats *s, long total_steps, char *buf, size_t size)
{
  char val[32] = "", scale[64] = "", mfu[32] = "", eta[48] = "";
  if (!isnan(s->val_loss))
    snprintf(val, sizeof val, " | val %.4f", s->val_loss);
  if (s->dynamic_scale)
    snprintf(scale, sizeof scale, " | scale %g (%ld skipped)%s", s->loss_scale,
             s->skipped_total, s->skipped ? ", skipped" : "");
  if (isfinite(s->mfu))
    snprintf(mfu, sizeof mfu, " | MFU %.1f%%", 100 * s->mfu);
  if (isfinite(s->eta_s) && s->eta_s >= 0 && s->eta_s < 1e9) {
    char t[32];
    gt_format_eta(s->eta_s, t, sizeof t);
    snprintf(eta, sizeof eta, " | ETA %s", t);
  }
  char moe[96] = "";
  if (s->moe.on)
    snprintf(moe, sizeof moe, " | experts %lld-%lld tok, imbalance %.2f, dropped %.1f%%",
             (long long)s->moe.tokens_min, (long long)s->moe.tokens_max, s->moe.imbalance,
             s->moe.pairs > 0 ? 100.0 * (double)s->moe.dropped / (double)s->moe.pairs : 0.0);
  const double ms = s->step_ms > 0 ? s->step_ms : 1;
  const double done = total_steps > 0 ? 100.0 * (double)(s->step + 1) / (double)total_steps : 0;
  snprintf(buf, size,
           "step %ld/%ld (%.0f%%) | loss %.4f%s | lr %.2e | gnorm %.3f%s | %.1f ms | %.0f tok/s%s"
           " | compute %.0f%% comm %.0f%% bubble %.0f%% data %.0f%%%s%s",
           s->step, total_steps, done, s->loss, val, s->lr, s->grad_norm, scale, s->step_ms,
           s->tokens_per_s, mfu, 100 * s->compute_ms / ms, 100 * s->comm_ms / ms,
           100 * s->bubble_ms / ms, 100 * s->data_ms / ms, moe, eta);
}
