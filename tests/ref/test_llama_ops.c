/*
 * test_llama_ops.c - the Llama block's pieces against Hugging Face
 * transformers itself (4.44, torch on the CPU, fp32): the rotary tables of
 * rope.h for the default, linear and llama3 scalings, and the backend's
 * rmsnorm_forward, rope_forward (on packed q, k, v heads of grouped-query
 * attention, from a start position) and swiglu_forward on the same random
 * inputs, on both host backends. tests/ref/llama_ops_ref.py computes
 * transformers' results with its own functions: ROPE_INIT_FUNCTIONS,
 * LlamaRotaryEmbedding, LlamaRMSNorm, apply_rotary_pos_emb and the SiLU of
 * LlamaMLP. Nothing expected is computed by the code under test.
 *
 * Bounds:
 *   inv_freq: per element |a - b| <= 1e-6 |b|. Both compute each fp32 step
 *   the same way; only the fp32 power may differ, by an ulp (torch's SIMD
 *   powf against a correctly rounded one): 1.2e-7 relative.
 *   cos, sin: per element |a - b| <= 1e-6 max(|b|, 2^-20) in the columns
 *   whose inv_freq is the same bits as transformers': both then take cos
 *   and sin of the same fp32 angle and differ by an ulp of the result at
 *   most (torch's cosf is within 1 ulp). An angle computed otherwise (in
 *   double, or with an FMA) moves by up to half an ulp of the angle, 6e-5
 *   at p = 2047, and fails. In a column whose inv_freq differs by its ulp
 *   (relative <= 2^-23; only a powf of another torch build could do that,
 *   and the inv_freq check reports it), the angle p inv_freq moves by up to
 *   |angle| 2^-23 and its own rounding by as much again, so the bound there
 *   is 1e-6 max(|b|, 2^-20) + |angle| 2^-22. How many entries are bit for
 *   bit is printed. The second half of transformers' rows (a copy of the
 *   first) is compared too.
 *   rmsnorm, rope, swiglu outputs: ||a - b|| / ||b|| <= 1e-5 and
 *   max |a - b| <= 1e-5 max |b|: fp32 against fp32 in another order.
 *
 * Fails when python3 lacks torch, h5py or transformers (status 3 of the
 * script, said in a diagnostic): the README's set-up installs them, and a
 * machine without them is not one this test may pass on. Device memory is
 * reached only through waited-for copies, so the test runs under
 * GT_CPU_MODE=async and guard too. Sizes are small: the script takes about
 * 3 s, mostly importing transformers.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <hdf5.h>
#include <stdio.h>

#include "../../src/io/h5util.h"
#include "../test_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/rope.h"

#define OP_TOL 1e-5
#define TAB_TOL 1e-6

/* The rotary configurations: llama3 with Llama 3.1's values (the middle
 * band holds several frequencies at hs = 128) and with a short original
 * context (other bands at hs = 64), linear with a power of two and
 * without, the default with tiny heads. */
typedef struct {
  int64_t hs, max_pos;
  double theta;
  gt_rope_scaling sc;
} rope_case;

static const rope_case cases[] = {
  {64, 2048, 10000.0, {.type = GT_ROPE_DEFAULT}},
  {2, 64, 10000.0, {.type = GT_ROPE_DEFAULT}},
  {6, 64, 10000.0, {.type = GT_ROPE_DEFAULT}},
  {128, 512, 10000.0, {.type = GT_ROPE_LINEAR, .factor = 4.0}},
  {64, 512, 1000000.0, {.type = GT_ROPE_LINEAR, .factor = 2.5}},
  {128, 2048, 500000.0,
   {.type = GT_ROPE_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
    .original_max_position_embeddings = 8192}},
  {64, 1024, 500000.0,
   {.type = GT_ROPE_LLAMA3, .factor = 4.0, .low_freq_factor = 1.0, .high_freq_factor = 2.0,
    .original_max_position_embeddings = 256}},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

/* The shapes of the op checks. */
#define RMS_N 7
#define RMS_C 96
#define RMS_EPS 1e-5
#define AP_B 2
#define AP_T 9
#define AP_H 4
#define AP_HKV 2
#define AP_HS 64
#define AP_POS0 5
#define AP_CASE 6 /* llama3, hs 64 */
#define SW_N 5
#define SW_F 37

static int write_f32(hid_t loc, const char *name, int ndim, const hsize_t *dims,
                     const float *data)
{
  hid_t s = H5Screate_simple(ndim, dims, NULL);
  hid_t d = H5Dcreate2(loc, name, H5T_NATIVE_FLOAT, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (d >= 0)
    H5Dclose(d);
  H5Sclose(s);
  return rc < 0 ? -1 : 0;
}

/* n floats of dataset path; NULL (and a failed check) when it is missing or
 * has another size. */
static float *read_f32(hid_t f, const char *path, size_t n)
{
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  float *out = NULL;
  if (d >= 0) {
    hid_t s = H5Dget_space(d);
    out = tu_alloc(n);
    if (H5Sget_simple_extent_npoints(s) != (hssize_t)n ||
        H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
      free(out);
      out = NULL;
    }
    H5Sclose(s);
    H5Dclose(d);
  }
  if (!out)
    tap_ok(false, "reference %s: missing, or not %zu floats", path, n);
  return out;
}

/* The random inputs, shared by the writer and the checks. */
static float rms_x[RMS_N * RMS_C], rms_w[RMS_C];
static float ap_x[AP_B * AP_T * (AP_H + 2 * AP_HKV) * AP_HS];
static float sw_h[SW_N * 2 * SW_F];

static int write_input(const char *path)
{
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0)
    return -1;
  int rc = 0;
  hid_t rope = H5Gcreate2(f, "rope", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (int k = 0; k < NCASES; k++) {
    char name[16];
    snprintf(name, sizeof name, "%d", k);
    hid_t g = H5Gcreate2(rope, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const rope_case *c = &cases[k];
    rc |= gt_h5_write_attr_i64(g, "hs", c->hs);
    rc |= gt_h5_write_attr_i64(g, "max_pos", c->max_pos);
    rc |= gt_h5_write_attr_f64(g, "theta", c->theta);
    rc |= gt_h5_write_attr_i64(g, "rope_type", (long long)c->sc.type);
    rc |= gt_h5_write_attr_f64(g, "factor", c->sc.factor);
    rc |= gt_h5_write_attr_f64(g, "low_freq_factor", c->sc.low_freq_factor);
    rc |= gt_h5_write_attr_f64(g, "high_freq_factor", c->sc.high_freq_factor);
    rc |= gt_h5_write_attr_i64(g, "original_max_position_embeddings",
                               c->sc.original_max_position_embeddings);
    H5Gclose(g);
  }
  H5Gclose(rope);
  hid_t g = H5Gcreate2(f, "rms", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t rd[2] = {RMS_N, RMS_C}, wd[1] = {RMS_C};
  rc |= write_f32(g, "x", 2, rd, rms_x) | write_f32(g, "w", 1, wd, rms_w);
  rc |= gt_h5_write_attr_f64(g, "eps", RMS_EPS);
  H5Gclose(g);
  g = H5Gcreate2(f, "apply", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t ad[4] = {AP_B, AP_T, AP_H + 2 * AP_HKV, AP_HS};
  rc |= write_f32(g, "x", 4, ad, ap_x);
  rc |= gt_h5_write_attr_i64(g, "H", AP_H) | gt_h5_write_attr_i64(g, "Hkv", AP_HKV);
  rc |= gt_h5_write_attr_i64(g, "pos0", AP_POS0) | gt_h5_write_attr_i64(g, "case", AP_CASE);
  H5Gclose(g);
  g = H5Gcreate2(f, "swiglu", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t sd[2] = {SW_N, 2 * SW_F};
  rc |= write_f32(g, "h", 2, sd, sw_h);
  H5Gclose(g);
  H5Fclose(f);
  return rc;
}

// ---- the rotary tables ----------------------------------------------------------------------

/* A call that must succeed: a failed check only when it does not. */
static bool call_ok(int status, const char *what)
{
  if (status == GT_SUCCESS)
    return true;
  tap_ok(false, "%s: %s", what, gt_error_message());
  gt_error_clear();
  return false;
}

static const char *type_name(gt_rope_type t)
{
  return t == GT_ROPE_LINEAR ? "linear" : t == GT_ROPE_LLAMA3 ? "llama3" : "default";
}

static void check_tables(hid_t f, int k)
{
  const rope_case *c = &cases[k];
  const int64_t h = c->hs / 2, P = c->max_pos;
  char tag[160], path[64];
  snprintf(tag, sizeof tag, "rope %s hs=%lld theta=%g factor=%g max_pos=%lld",
           type_name(c->sc.type), (long long)c->hs, c->theta, c->sc.factor, (long long)P);
  float *inv = tu_alloc((size_t)h), *cs = tu_alloc((size_t)(P * h)), *sn = tu_alloc((size_t)(P * h));
  if (!call_ok(gt_rope_inv_freq(c->hs, c->theta, &c->sc, inv), "gt_rope_inv_freq") ||
      !call_ok(gt_rope_tables(c->hs, P, c->theta, &c->sc, cs, sn), "gt_rope_tables"))
    goto done;
  snprintf(path, sizeof path, "/rope/%d/inv_freq", k);
  float *want_inv = read_f32(f, path, (size_t)h);
  if (!want_inv)
    goto done;
  double worst = 0;
  int exact = 0;
  for (int64_t i = 0; i < h; i++) {
    worst = fmax(worst, fabs((double)inv[i] - want_inv[i]) / fabs((double)want_inv[i]));
    exact += inv[i] == want_inv[i];
  }
  tap_ok(worst <= TAB_TOL, "%s: inv_freq as transformers' rope init (worst rel err %.2e, "
         "%d of %lld bit for bit)", tag, worst, exact, (long long)h);
  for (int which = 0; which < 2; which++) {
    snprintf(path, sizeof path, "/rope/%d/%s", k, which ? "sin" : "cos");
    float *want = read_f32(f, path, (size_t)(P * c->hs));
    if (!want)
      continue;
    const float *got = which ? sn : cs;
    double worst_r = 0;
    long same = 0, at = 0;
    for (int64_t p = 0; p < P; p++)
      for (int64_t j = 0; j < c->hs; j++) {
        const int64_t i = j % h;
        const double a = got[p * h + i], b = want[p * c->hs + j];
        double bound = TAB_TOL * fmax(fabs(b), 0x1p-20);
        if (inv[i] != want_inv[i]) /* the angle may move by its ulp and more */
          bound += fabs((double)inv[i] * (double)p) * 0x1p-22;
        const double r = fabs(a - b) / bound;
        if (!(r <= worst_r)) {
          worst_r = r;
          at = (long)(p * c->hs + j);
        }
        same += a == b;
      }
    if (!tap_ok(worst_r <= 1.0, "%s: %s table as LlamaRotaryEmbedding (both halves; worst %.2f "
                "of the bound, %ld of %lld bit for bit)", tag, which ? "sin" : "cos", worst_r,
                same, (long long)(P * c->hs)))
      tap_diag("%s: position %ld, column %ld: %.9g vs transformers' %.9g", path,
               at / (long)c->hs, at % (long)c->hs, got[(at / c->hs) * h + (at % c->hs) % h],
               want[at]);
    free(want);
  }
  free(want_inv);
done:
  free(inv), free(cs), free(sn);
}

/* Arguments out of range are the user's to fix: GT_ERR_INPUT. */
static void check_refusals(void)
{
  float inv[8], cs[8], sn[8];
  const gt_rope_scaling lin0 = {.type = GT_ROPE_LINEAR, .factor = 0};
  const gt_rope_scaling l3 = {.type = GT_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 4,
                              .high_freq_factor = 1, .original_max_position_embeddings = 8192};
  const gt_rope_scaling l3ctx = {.type = GT_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1,
                                 .high_freq_factor = 4, .original_max_position_embeddings = 0};
  const struct {
    int status;
    const char *what;
  } bad[] = {
    {gt_rope_inv_freq(7, 10000.0, NULL, inv), "an odd head size"},
    {gt_rope_inv_freq(8, 0.0, NULL, inv), "rope_theta = 0"},
    {gt_rope_inv_freq(8, 10000.0, &lin0, inv), "a linear factor of 0"},
    {gt_rope_inv_freq(8, 10000.0, &l3, inv), "llama3 with high_freq_factor < low_freq_factor"},
    {gt_rope_inv_freq(8, 10000.0, &l3ctx, inv), "llama3 without an original context"},
    {gt_rope_tables(8, 0, 10000.0, NULL, cs, sn), "max_pos = 0"},
  };
  bool all = true;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    if (bad[i].status != GT_ERR_INPUT) {
      all = false;
      tap_diag("%s: status %d, expected GT_ERR_INPUT", bad[i].what, bad[i].status);
    }
  }
  gt_error_clear();
  tap_ok(all, "rope tables refuse odd head sizes, theta <= 0, bad scaling and max_pos < 1 "
              "(GT_ERR_INPUT)");
}

// ---- the ops ----------------------------------------------------------------------------------

/* fp32 rule: norm-wise and max-abs relative error <= OP_TOL. */
static void check_op(const char *what, const float *a, const float *b, size_t n)
{
  double num = 0, den = 0, dmax = 0, bmax = 0;
  bool finite = true;
  for (size_t i = 0; i < n; i++) {
    finite = finite && isfinite(a[i]);
    const double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
    dmax = fmax(dmax, fabs(d));
    bmax = fmax(bmax, fabs(b[i]));
  }
  const double rel = sqrt(num) / fmax(sqrt(den), 1e-30), mx = dmax / fmax(bmax, 1e-30);
  tap_ok(finite && rel <= OP_TOL && mx <= OP_TOL, "%s (rel err %.2e, max err %.2e of max|ref|)",
         what, rel, mx);
}

/* n floats to a fresh device buffer of be. */
static void *to_dev(gt_backend *be, const float *host, size_t n)
{
  void *d = NULL;
  if (be->ops->alloc(be, n * sizeof(float), &d) != GT_SUCCESS ||
      tu_upload(be, d, host, n * sizeof(float)) != GT_SUCCESS) {
    tap_bail("[%s] device buffer of %zu floats: %s", be->name, n, gt_error_message());
    exit(1);
  }
  return d;
}

static void check_ops(const char *backend, hid_t f)
{
  gt_backend *be = NULL;
  if (gt_backend_create(backend, 2, &be) != GT_SUCCESS) {
    tap_ok(false, "[%s] create: %s", backend, gt_error_message());
    return;
  }
  const gt_backend_ops *op = be->ops;
  char what[160];

  /* RMSNorm */
  const size_t nr = RMS_N * RMS_C;
  float *x = to_dev(be, rms_x, nr), *w = to_dev(be, rms_w, RMS_C), *y = to_dev(be, rms_x, nr);
  float *rstd = to_dev(be, rms_x, RMS_N);
  call_ok(op->rmsnorm_forward(be, GT_F32, y, rstd, x, w, (float)RMS_EPS, RMS_N, RMS_C),
          "rmsnorm_forward");
  float *got = tu_fetch(be, y, nr), *want = read_f32(f, "/rms/out", nr);
  snprintf(what, sizeof what, "[%s] rmsnorm forward N=%d C=%d eps=%g as LlamaRMSNorm", backend,
           RMS_N, RMS_C, RMS_EPS);
  if (want)
    check_op(what, got, want, nr);
  free(got), free(want);
  op->free(be, x), op->free(be, w), op->free(be, y), op->free(be, rstd);

  /* RoPE on packed q, k, v heads, with this test's own tables */
  const rope_case *c = &cases[AP_CASE];
  const int64_t S = AP_H + 2 * AP_HKV, h = AP_HS / 2;
  const size_t na = (size_t)AP_B * AP_T * S * AP_HS, nt = (size_t)(c->max_pos * h);
  float *cs = tu_alloc(nt), *sn = tu_alloc(nt);
  if (c->hs == AP_HS && c->max_pos >= AP_POS0 + AP_T &&
      call_ok(gt_rope_tables(AP_HS, c->max_pos, c->theta, &c->sc, cs, sn), "gt_rope_tables")) {
    float *dc = to_dev(be, cs, nt), *ds = to_dev(be, sn, nt), *dx = to_dev(be, ap_x, na);
    call_ok(op->rope_forward(be, GT_F32, dx, dc, ds, AP_B, AP_T, S, AP_H + AP_HKV, AP_HS,
                             AP_POS0),
            "rope_forward");
    got = tu_fetch(be, dx, na);
    want = read_f32(f, "/apply/out", na);
    snprintf(what, sizeof what, "[%s] rope forward on (B=%d, T=%d, H+2Hkv=%d+2*%d, hs=%d) from "
             "position %d (%s) as apply_rotary_pos_emb", backend, AP_B, AP_T, AP_H, AP_HKV,
             AP_HS, AP_POS0, type_name(c->sc.type));
    if (want)
      check_op(what, got, want, na);
    free(got), free(want);
    op->free(be, dc), op->free(be, ds), op->free(be, dx);
  } else {
    tap_ok(false, "[%s] rope forward: case %d does not fit the op's check", backend, AP_CASE);
  }
  free(cs), free(sn);

  /* SwiGLU */
  const size_t nh = SW_N * 2 * SW_F, no = SW_N * SW_F;
  float *dh = to_dev(be, sw_h, nh), *dout = to_dev(be, sw_h, no);
  call_ok(op->swiglu_forward(be, GT_F32, dout, dh, SW_N, SW_F), "swiglu_forward");
  got = tu_fetch(be, dout, no);
  want = read_f32(f, "/swiglu/out", no);
  snprintf(what, sizeof what, "[%s] swiglu forward N=%d F=%d as silu(gate) * up of LlamaMLP",
           backend, SW_N, SW_F);
  if (want)
    check_op(what, got, want, no);
  free(got), free(want);
  op->free(be, dh), op->free(be, dout);
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
  char dir[700], in[800], out[800], cmd[3000];
  tu_tmp_dir("test_llama_ops", dir, sizeof dir);
  snprintf(in, sizeof in, "%s/in.h5", dir);
  snprintf(out, sizeof out, "%s/ref.h5", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (system(cmd) != 0)
    return tap_bail("cannot create %s", dir);

  tu_fill(rms_x, RMS_N * RMS_C, 301, -2, 3);
  for (int i = 0; i < 3 * RMS_C; i++) /* rows 0..2: mean(x^2) below eps, which then matters */
    rms_x[i] *= 1e-3f;
  tu_fill(rms_w, RMS_C, 302, 0.5f, 1.5f);
  tu_fill(ap_x, sizeof ap_x / sizeof *ap_x, 303, -2, 2);
  tu_fill(sw_h, SW_N * 2 * SW_F, 304, -6, 6);
  if (write_input(in) != 0)
    return tap_bail("cannot write %s", in);
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/llama_ops_ref.py' '%s' '%s'", python, src, in,
           out);
  const int rc = system(cmd);
  const int status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (!tap_ok(status == 0, "transformers' results computed (%s)", python)) {
    if (status == 3)
      tap_diag("%s lacks torch, h5py or transformers (the README's set-up installs them)",
               python);
    tap_diag("'%s' failed with status %d", cmd, status);
    const int result = tap_done();
    MPI_Finalize();
    return result;
  }
  hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0)
    return tap_bail("cannot open %s", out);
  for (int k = 0; k < NCASES; k++)
    check_tables(f, k);
  check_refusals();
  check_ops("cpu", f);
  check_ops("cpu-ref", f);
  H5Fclose(f);
  const int result = tap_done();
  MPI_Finalize();
  return result;
}
