/*
 * test_optim.c - learning-rate schedule, clipping and AdamW against the
 * formulas written out here independently, in double precision.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/optim.h"

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  const double pi = 3.14159265358979323846;
  gt_adamw_config c = {.lr = 1e-3, .min_lr = 1e-4, .warmup = 10, .steps = 110,
                       .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                       .grad_clip = 1.0};
  // ---- schedule
  bool ok = true;
  for (long s = 0; s < 130; s++) {
    double expect;
    if (s < 10)
      expect = 1e-3 * (s + 1) / 10.0;
    else {
      double t = fmin((s - 10) / 100.0, 1.0);
      expect = 1e-4 + 0.5 * (1e-3 - 1e-4) * (1 + cos(pi * t));
    }
    if (fabs(gt_lr_at(&c, s) - expect) > 1e-15) {
      tap_diag("step %ld: lr %.17g expected %.17g", s, gt_lr_at(&c, s), expect);
      ok = false;
    }
  }
  tap_ok(ok, "warm-up then cosine to min_lr, flat after the last step");
  tap_ok(gt_lr_at(&c, 9) == 1e-3 && fabs(gt_lr_at(&c, 110) - 1e-4) < 1e-18,
         "peak at the end of warm-up, min_lr at the end");
  // ---- clipping
  tap_ok(gt_clip_factor(&c, 0.5) == 1.0, "no clipping below the threshold");
  tap_ok(fabs(gt_clip_factor(&c, 4.0) - 1.0 / (4.0 + 1e-6)) < 1e-15, "clip to 1/(norm + 1e-6)");
  gt_adamw_config off = c;
  off.grad_clip = 0;
  tap_ok(gt_clip_factor(&off, 1e9) == 1.0, "grad_clip = 0 turns clipping off");

  // ---- AdamW on two tensors: a decayed matrix and an undecayed bias
  gt_backend *be;
  if (gt_backend_create("cpu", 2, &be))
    return tap_bail("%s", gt_error_message());
  gt_params *p;
  long shape_w[2] = {5, 7}, shape_b[1] = {7};
  gt_params_create(be, GT_F32, &p);
  gt_params_add(p, "w", 2, shape_w, GT_SHARD_NONE, true, GT_INIT_NORMAL, 0.5f, true);
  gt_params_add(p, "b", 1, shape_b, GT_SHARD_NONE, true, GT_INIT_NORMAL, 0.5f, false);
  gt_params_finalize(p);
  gt_params_init(p, 3);
  gt_adamw *opt;
  if (gt_adamw_create(p, &c, &opt))
    return tap_bail("%s", gt_error_message());
  double ref_p[42], ref_m[42] = {0}, ref_v[42] = {0};
  float views[2][35], grads[2][35];
  int sizes[2] = {35, 7};
  for (int t = 0, k = 0; t < 2; t++) {
    tu_download(be, views[t], p->list[t].value.data, (size_t)sizes[t] * sizeof(float));
    for (int i = 0; i < sizes[t]; i++)
      ref_p[k++] = views[t][i];
  }
  for (long s = 0; s < 3; s++) {
    for (int t = 0; t < 2; t++) {
      tu_fill(grads[t], (size_t)sizes[t], 10 + (uint64_t)(s * 2 + t), -2, 2);
      tu_upload(be, p->list[t].grad.data, grads[t], (size_t)sizes[t] * sizeof(float));
    }
    double scale = 0.37, lr = gt_lr_at(&c, s);
    gt_adamw_step(opt, s, lr, scale);
    for (int t = 0, k = 0; t < 2; t++)
      for (int i = 0; i < sizes[t]; i++, k++) {
        double g = grads[t][i] * scale;
        ref_m[k] = 0.9 * ref_m[k] + 0.1 * g;
        ref_v[k] = 0.95 * ref_v[k] + 0.05 * g * g;
        double mh = ref_m[k] / (1 - pow(0.9, s + 1)), vh = ref_v[k] / (1 - pow(0.95, s + 1));
        double wd = t == 0 ? 0.1 : 0.0;
        ref_p[k] = ref_p[k] - lr * (mh / (sqrt(vh) + 1e-8) + wd * ref_p[k]);
      }
  }
  double worst = 0;
  for (int t = 0; t < 2; t++)
    tu_download(be, views[t], p->list[t].value.data, (size_t)sizes[t] * sizeof(float));
  for (int t = 0, k = 0; t < 2; t++)
    for (int i = 0; i < sizes[t]; i++, k++)
      worst = fmax(worst, fabs(views[t][i] - ref_p[k]) / fmax(fabs(ref_p[k]), 1e-3));
  tap_ok(worst < 1e-5, "3 AdamW steps with decay only on the matrix (worst rel err %.2e)", worst);
  gt_adamw_destroy(&opt);
  gt_params_destroy(&p);
  gt_backend_destroy(&be);
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
