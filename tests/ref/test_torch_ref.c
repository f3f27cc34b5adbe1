/*
 * test_torch_ref.c - the whole GPT against an independent PyTorch reference.
 *
 * The test writes initial weights, hyper-parameters and a batch to HDF5;
 * tests/ref/gpt_ref.py computes, in float64 with torch, the loss, every
 * parameter gradient, the global gradient norm and the weights after one
 * clipped AdamW step. The C results (fp32, both host backends) must match:
 * loss within 1e-6 relative, each tensor within 1e-5 relative (norm-wise).
 * Device memory is reached only through waited-for copies, so the test also
 * runs under GT_CPU_MODE=async and guard.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <hdf5.h>
#include <stdio.h>
#include <sys/stat.h>

#include "../../src/io/h5util.h"
#include "../test_util.h"
#include "ref_h5.h"
#include "gridtrain/gpt.h"
#include "gridtrain/optim.h"

#define B 3
#define T 12
static const gt_gpt_shape shape = {2, 4, 32, 16, 67, .arch = GT_MODEL_GPT}; /* layers heads dim max_seq vocab */
static gt_gpt_part whole;
static const gt_adamw_config hp = {.lr = 1e-3, .min_lr = 1e-3, .warmup = 0, .steps = 1,
                                   .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                                   .eps = 1e-8, .grad_clip = 0.5};

/* values: the host copy of p's master values. */
static int write_input(const char *path, gt_params *p, const float *values, const int32_t *tok,
                       const int32_t *tgt)
{
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0)
    return -1;
  int rc = gt_h5_write_attr_i64(f, "layers", shape.layers);
  rc |= gt_h5_write_attr_i64(f, "heads", shape.heads);
  rc |= gt_h5_write_attr_i64(f, "dim", shape.dim);
  rc |= gt_h5_write_attr_i64(f, "seq_len", shape.max_seq);
  rc |= gt_h5_write_attr_i64(f, "vocab", shape.vocab);
  rc |= gt_h5_write_attr_f64(f, "lr", hp.lr);
  rc |= gt_h5_write_attr_f64(f, "beta1", hp.beta1);
  rc |= gt_h5_write_attr_f64(f, "beta2", hp.beta2);
  rc |= gt_h5_write_attr_f64(f, "eps", hp.eps);
  rc |= gt_h5_write_attr_f64(f, "weight_decay", hp.weight_decay);
  rc |= gt_h5_write_attr_f64(f, "grad_clip", hp.grad_clip);
  hid_t gp = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t gb = H5Gcreate2(f, "batch", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (int i = 0; i < p->count; i++)
    rc |= write_dataset(gp, p->list[i].name, H5T_NATIVE_FLOAT, p->list[i].value.ndim,
                        p->list[i].value.shape, values + p->list[i].offset);
  const long bt[2] = {B, T};
  rc |= write_dataset(gb, "tokens", H5T_NATIVE_INT32, 2, bt, tok);
  rc |= write_dataset(gb, "targets", H5T_NATIVE_INT32, 2, bt, tgt);
  H5Gclose(gp);
  H5Gclose(gb);
  H5Fclose(f);
  return rc;
}

/* One backend: forward, backward, norm, clipped AdamW; compare with ref. */
static void check_backend(const char *backend, const char *ref_path, const float *init_values,
                          const int32_t *tok, const int32_t *tgt)
{
  gt_backend *be;
  gt_gpt *m;
  double *acc = NULL; /* device: loss sum, sum of squares */
  if (gt_backend_create(backend, 2, &be) ||
      gt_gpt_create(be, &shape, &whole, NULL, GT_F32, B, T, 1, &m) ||
      be->ops->alloc(be, 2 * sizeof(double), (void **)&acc)) {
    tap_ok(false, "[%s] set-up: %s", backend, gt_error_message());
    return;
  }
  gt_params *p = gt_gpt_params(m);
  tu_upload(be, p->values, init_values, p->numel * sizeof(float));
  hid_t f = H5Fopen(ref_path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    tap_ok(false, "[%s] open the reference %s", backend, ref_path);
    return;
  }
  const double ref_loss = read_scalar(f, "/loss"), ref_norm = read_scalar(f, "/grad_norm");
  double sums[2];
  be->ops->zero(be, acc, 2 * sizeof(double));
  gt_params_zero_grads(p);
  gt_gpt_forward(m, 0, tok, tgt, B, T, 1.0f / (B * T), &acc[0]);
  gt_gpt_backward(m, 0, NULL);
  gt_params_grad_sumsq(p, &acc[1]);
  tu_download(be, sums, acc, sizeof sums);
  float *grads = tu_fetch(be, p->grads, p->numel);
  double loss = sums[0] / (B * T);
  tap_ok(fabs(loss - ref_loss) <= 1e-6 * fabs(ref_loss), "[%s] loss %.9f vs torch %.9f (rel %.1e)",
         backend, loss, ref_loss, fabs(loss - ref_loss) / fabs(ref_loss));

  double worst = 0;
  const char *worst_name = "";
  int bad = 0;
  char path[128];
  for (int i = 0; i < p->count; i++) {
    gt_param *t = &p->list[i];
    float *ref = tu_alloc(t->numel);
    snprintf(path, sizeof path, "/grads/%s", t->name);
    double e = read_f64(f, path, ref, t->numel) == 0
                   ? tu_rel_err(grads + t->offset, ref, t->numel)
                   : 1;
    if (e > 1e-5) {
      bad++;
      tap_diag("[%s] gradient of %s: relative error %.2e", backend, t->name, e);
    }
    if (e > worst) {
      worst = e;
      worst_name = t->name;
    }
    free(ref);
  }
  tap_ok(bad == 0, "[%s] all %d parameter gradients within 1e-5 of torch (worst %.1e, %s)",
         backend, p->count, worst, worst_name);

  double norm = sqrt(sums[1]);
  tap_ok(fabs(norm - ref_norm) <= 1e-5 * ref_norm, "[%s] gradient norm %.7f vs torch %.7f",
         backend, norm, ref_norm);
  double scale = gt_clip_factor(&hp, norm);
  if (!tap_ok(scale < 1.0, "[%s] clipping is active in this test (scale %.3f)", backend, scale))
    tap_diag("raise the test's gradients or lower its grad_clip");

  gt_adamw *opt;
  gt_adamw_create(p, &hp, &opt);
  gt_adamw_step(opt, 0, hp.lr, scale);
  float *after = tu_fetch(be, p->values, p->numel);
  bad = 0;
  worst = 0;
  for (int i = 0; i < p->count; i++) {
    gt_param *t = &p->list[i];
    float *ref = tu_alloc(t->numel);
    snprintf(path, sizeof path, "/params_after/%s", t->name);
    /* Compare the update, not the weights: weights hide small update errors. */
    const float *before = init_values + t->offset;
    float *upd_c = tu_alloc(t->numel), *upd_ref = tu_alloc(t->numel);
    double e = 1;
    if (read_f64(f, path, ref, t->numel) == 0) {
      for (size_t j = 0; j < t->numel; j++) {
        upd_c[j] = after[t->offset + j] - before[j];
        upd_ref[j] = ref[j] - before[j];
      }
      double ew = tu_rel_err(after + t->offset, ref, t->numel);
      double eu = tu_rel_err(upd_c, upd_ref, t->numel);
      e = fmax(ew, eu * 1e-2); /* updates are ~lr: rounding of w - w0 dominates */
      if (ew > 1e-5 || eu > 1e-3)
        tap_diag("[%s] %s after AdamW: weights rel err %.2e, update rel err %.2e", backend,
                 t->name, ew, eu);
      bad += ew > 1e-5 || eu > 1e-3;
    }
    worst = fmax(worst, e);
    free(ref), free(upd_c), free(upd_ref);
  }
  tap_ok(bad == 0, "[%s] weights after one clipped AdamW step within 1e-5 of torch "
                   "(updates within 1e-3)", backend);
  H5Fclose(f);
  free(grads);
  free(after);
  gt_adamw_destroy(&opt);
  be->ops->free(be, acc);
  gt_gpt_destroy(&m);
  gt_backend_destroy(&be);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  whole = gt_gpt_whole(&shape);
  const char *src = getenv("GT_SRCDIR"), *build = getenv("GT_BUILDDIR");
  const char *python = getenv("PYTHON_REF") ? getenv("PYTHON_REF") : "/usr/bin/python3";
  if (!src || !build)
    return tap_bail("run through make check (GT_SRCDIR, GT_BUILDDIR unset)");
  char dir[700], in[800], out[800], cmd[3000];
  tu_tmp_dir("test_torch_ref", dir, sizeof dir);
  snprintf(in, sizeof in, "%s/in.h5", dir);
  snprintf(out, sizeof out, "%s/ref.h5", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (system(cmd) != 0)
    return tap_bail("cannot create %s", dir);

  /* Weights: GPT-2 initialisation from a seed, then biases and LayerNorm
   * parameters made non-trivial so that their gradients are tested too. */
  gt_backend *be;
  gt_gpt *m;
  if (gt_backend_create("cpu", 2, &be) ||
      gt_gpt_create(be, &shape, &whole, NULL, GT_F32, B, T, 1, &m))
    return tap_bail("%s", gt_error_message());
  gt_gpt_init(m, 2024);
  gt_params *p = gt_gpt_params(m);
  float *init = tu_fetch(be, p->values, p->numel);
  for (int i = 0; i < p->count; i++) {
    gt_param *t = &p->list[i];
    if (strstr(t->name, "bias"))
      tu_fill(init + t->offset, t->numel, 500 + (uint64_t)i, -0.1f, 0.1f);
    else if (strstr(t->name, "ln_"))
      tu_fill(init + t->offset, t->numel, 500 + (uint64_t)i, 0.8f, 1.2f);
  }
  int32_t tok[B * T], tgt[B * T];
  tu_fill_int(tok, B * T, 11, shape.vocab);
  tu_fill_int(tgt, B * T, 12, shape.vocab);
  if (write_input(in, p, init, tok, tgt) != 0)
    return tap_bail("cannot write %s", in);
  gt_gpt_destroy(&m);
  gt_backend_destroy(&be);

  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/gpt_ref.py' '%s' '%s'", python, src, in, out);
  int rc = system(cmd);
  int status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (!tap_ok(status == 0, "torch reference computed (%s)", python)) {
    tap_diag("'%s' failed with status %d%s", cmd, status,
             status == 3 ? ": install python3-torch python3-h5py" : "");
    return tap_done();
  }
  check_backend("cpu", out, init, tok, tgt);
  check_backend("cpu-ref", out, init, tok, tgt);
  free(init);
  int result = tap_done();
  MPI_Finalize();
  return result;
}
