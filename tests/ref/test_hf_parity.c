/*
 * test_hf_parity.c - models made by Hugging Face transformers, read by
 * gridtrain, against transformers itself.
 *
 * tests/ref/hf_parity_ref.py saves tiny random GPT2LMHeadModel and
 * LlamaForCausalLM models (tied and untied heads; the llama with grouped-
 * query attention, rope_theta 5e5, llama3 rope scaling and an MLP of 37
 * units) and a MixtralForCausalLM (4 experts of 24 units, top 2, in both
 * blocks; its routing in gridtrain is the same softmax, top 2 and
 * renormalisation) and computes in float64 the loss, the logits of one sequence and
 * every parameter gradient of one batch. gridtrain reads each directory
 * straight into its model (gt_hf_load_params, what [checkpoint] init and
 * score do) and, in fp32 on both host backends, must give:
 *   the loss within 1e-5 (relative), the logits that incremental decoding
 *   gives at every position within 1e-5 of the largest, and every
 *   gradient within 1e-4 (relative, norm-wise).
 *
 * gt-test: ranks=1 tier=quick
 */
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "../test_util.h"
#include "gridtrain/config.h"
#include "gridtrain/gpt.h"
#include "gridtrain/hf_import.h"
#include "ref_h5.h"

#define B 2
#define T 24

static int read_i32(hid_t f, const char *path, int32_t *out, size_t n)
{
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  if (d < 0)
    return -1;
  hid_t s = H5Dget_space(d);
  const bool fits = H5Sget_simple_extent_npoints(s) == (hssize_t)n;
  herr_t rc = fits ? H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) : -1;
  H5Sclose(s);
  H5Dclose(d);
  return rc < 0 ? -1 : 0;
}

/* The largest |a - b| over the largest |b|. */
static double max_rel(const float *a, const float *b, size_t n)
{
  double err = 0, big = 0;
  for (size_t i = 0; i < n; i++) {
    err = fmax(err, fabs((double)a[i] - (double)b[i]));
    big = fmax(big, fabs((double)b[i]));
  }
  return big > 0 ? err / big : err;
}

static void check_model(const char *backend, const char *dir, const char *kind)
{
  char path[900];
  snprintf(path, sizeof path, "%s/%s", dir, kind);
  gt_config cfg;
  gt_config_defaults(&cfg);
  if (!tu_ok_status(gt_hf_config_read(path, &cfg), "read config.json"))
    return;
  /* transformers' loss is the cross-entropy alone (its router loss, over
   * all blocks at once, comes only with output_router_logits): no router
   * losses here either */
  gt_gpt_shape shape = gt_gpt_shape_config(&cfg);
  shape.aux_loss = shape.z_loss = 0.0;
  const gt_gpt_part whole = gt_gpt_whole(&shape);
  gt_backend *be = NULL;
  gt_gpt *m = NULL;
  double *acc = NULL;
  if (!tap_ok(gt_backend_create(backend, 2, &be) == GT_SUCCESS &&
                  gt_gpt_create(be, &shape, &whole, NULL, GT_F32, B, T, 1, &m) == GT_SUCCESS &&
                  be->ops->alloc(be, sizeof(double), (void **)&acc) == GT_SUCCESS,
              "[%s] %s: a %s model of %d layers", backend, kind,
              shape.experts    ? "mixtral"
              : gt_gpt_shape_llama(&shape) ? "llama"
                                           : "gpt",
              shape.layers)) {
    tap_diag("%s", gt_error_message());
    return;
  }
  gt_params *p = gt_gpt_params(m);
  tap_ok(gt_hf_load_params(path, p) == GT_SUCCESS, "[%s] %s: the weights read from %s",
         backend, kind, path);
  snprintf(path, sizeof path, "%s/%s/ref.h5", dir, kind);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  int32_t tok[B * T], tgt[B * T];
  if (!tap_ok(f >= 0 && read_i32(f, "/tokens", tok, B * T) == 0 &&
                  read_i32(f, "/targets", tgt, B * T) == 0,
              "[%s] %s: the reference batch", backend, kind))
    return;

  /* loss and gradients of the batch */
  be->ops->zero(be, acc, sizeof(double));
  gt_params_zero_grads(p);
  int status = gt_gpt_forward(m, 0, tok, tgt, B, T, 1.0f / (B * T), acc);
  if (status == GT_SUCCESS)
    status = gt_gpt_backward(m, 0, NULL);
  double sum = 0;
  tu_download(be, &sum, acc, sizeof sum);
  const double loss = sum / (B * T), ref_loss = read_scalar(f, "/loss");
  tap_ok(status == GT_SUCCESS && fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss),
         "[%s] %s: loss %.9f vs transformers %.9f (rel %.1e)", backend, kind, loss, ref_loss,
         fabs(loss - ref_loss) / fabs(ref_loss));
  float *grads = tu_fetch(be, p->grads, p->numel);
  double worst = 0;
  const char *worst_name = "";
  int bad = 0;
  for (int i = 0; i < p->count; i++) {
    const gt_param *t = &p->list[i];
    float *ref = tu_alloc(t->numel);
    char name[GT_PARAM_NAME_MAX + 8];
    snprintf(name, sizeof name, "/grads/%s", t->name);
    const double e =
        read_f64(f, name, ref, t->numel) == 0 ? tu_rel_err(grads + t->offset, ref, t->numel) : 1;
    if (e > 1e-4) {
      bad++;
      tap_diag("[%s] %s: gradient of %s: relative error %.2e", backend, kind, t->name, e);
    }
    if (e >= worst) {
      worst = e;
      worst_name = t->name;
    }
    free(ref);
  }
  tap_ok(bad == 0, "[%s] %s: all %d parameter gradients within 1e-4 of transformers' "
                   "(worst %.1e, %s)",
         backend, kind, p->count, worst, worst_name);

  /* logits of sequence 0, one position at a time through the cache */
  const size_t V = (size_t)shape.vocab;
  float *ref_logits = tu_alloc((size_t)T * V), *logits = tu_alloc(V);
  gt_gpt_cache *cache = NULL;
  double lworst = read_f64(f, "/logits", ref_logits, (size_t)T * V) == 0 ? 0 : 1;
  status = gt_gpt_cache_create(m, T, &cache);
  for (int t = 0; t < T && status == GT_SUCCESS; t++) {
    status = gt_gpt_decode(m, cache, tok[t], logits);
    lworst = fmax(lworst, max_rel(logits, ref_logits + (size_t)t * V, V));
  }
  tap_ok(status == GT_SUCCESS && lworst <= 1e-5,
         "[%s] %s: the logits of %d positions decoded one by one within 1e-5 of "
         "transformers' (worst %.1e of the largest)",
         backend, kind, T, lworst);
  gt_gpt_cache_destroy(&cache);
  free(ref_logits);
  free(logits);
  free(grads);
  H5Fclose(f);
  be->ops->free(be, acc);
  gt_gpt_destroy(&m);
  gt_backend_destroy(&be);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  const char *src = getenv("GT_SRCDIR"), *build = getenv("GT_BUILDDIR");
  const char *python = getenv("PYTHON_REF") ? getenv("PYTHON_REF") : "/usr/bin/python3";
  if (!src || !build)
    return tap_bail("run through make check (GT_SRCDIR, GT_BUILDDIR unset)");
  static const char *const kinds[] = {"gpt2", "gpt2-untied", "llama", "llama-tied", "mixtral"};
  enum { NKINDS = sizeof kinds / sizeof kinds[0] };
  char dir[700], cmd[3000];
  tu_tmp_dir("test_hf_parity", dir, sizeof dir);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s' '%s/tests/ref/hf_parity_ref.py' '%s'",
           dir, dir, python, src, dir);
  for (int k = 0; k < NKINDS; k++)
    snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " %s", kinds[k]);
  const int rc = system(cmd);
  const int status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (!tap_ok(status == 0, "transformers made the models and their reference (%s)", python)) {
    tap_diag("'%s' failed with status %d: it needs torch, h5py and transformers "
             "(.ci/pypi.txt)", cmd, status);
    return tap_done();
  }
  for (int k = 0; k < NKINDS; k++) {
    check_model("cpu", dir, kinds[k]);
    check_model("cpu-ref", dir, kinds[k]);
  }
  const int result = tap_done();
  MPI_Finalize();
  return result;
}
