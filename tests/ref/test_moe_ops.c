/*
 * test_moe_ops.c - the mixture-of-experts ops of backend.h (moe_route,
 * moe_assign, moe_permute, moe_permute_backward, moe_combine,
 * moe_combine_backward, moe_route_backward) on every host backend: "cpu",
 * "cpu-ref", and the test modes "cpu-async" and "cpu-guard" (the ops'
 * wrappers in cpu_stream.c; device memory is reached only through
 * waited-for copies, so the test holds under GT_CPU_MODE=async and guard
 * too). Three parts:
 *
 * 1. Against PyTorch (tests/ref/moe_ops_ref.py, torch in float64 on the
 *    CPU), 108 cases: N in {1, 7, 64} tokens, E in {1, 2, 5, 8} experts, k in
 *    {1, 2, min(E, 3)} (k <= E), each with capacities -1 (dropless), 0, 1 and
 *    a small one that drops the tail of the busier experts at N = 64
 *    (3 N k / (4 E) + 1, at least 2), widths C cycling through 3, 16, 33 and
 *    300 (less than a vector, one, a tail past two, and past the CPU
 *    kernels' chunk of 256 columns), and (aux_scale, z_scale) cycling
 *    through (0, 0), (0.3, 0.05) and (0.01, 0.001). Random logits in [-4, 4)
 *    without near ties (the script refuses them). The router: probs, lse and
 *    gate against softmax, logsumexp and topk with renormalisation; sel and
 *    moe_assign's pos, load and kept exactly against a sort of the pairs;
 *    dlogits against torch.autograd of sum(dgate gate) + aux_scale L_aux +
 *    z_scale L_z with backend.h's formulas. The token ops in fp32, bf16 and
 *    fp16 on inputs the type holds exactly, fed the reference's pos (so each
 *    op is checked on its own): permute, permute_backward without and with
 *    extra, combine with base NULL, separate and equal to out, and
 *    combine_backward's dy and dgate. Outputs whose rows no pair names (xp,
 *    dy) are filled with a sentinel first, and those rows must keep its bits.
 * 2. Known answers written out here: ties to the lower index (equal logits
 *    give sel = 0..k-1 and gates 1/k), a capacity that drops exactly the later
 *    pairs of overloaded experts, pos = -1 pairs and rows no pair names
 *    ignored by permute, combine and their backward (dgate 0 for a dropped
 *    pair), the z-loss gradient of a one-expert router.
 * 3. Determinism: every op twice on "cpu" gives the same bits, and "cpu"
 *    created with 1 and with 2 threads gives the same bits (N = 1000).
 *
 * Bounds:
 *   sel, pos, load, kept, xp and the rows of dy no pair names: exact.
 *   probs, lse, gate: per element |a - b| <= 1e-6 |b|: the backend sums and
 *   divides in double and rounds once (6e-8), torch computes in float64.
 *   dlogits: ||a - b|| / max(||b||, s) <= 2e-6 and per element |a - b| <=
 *   1e-6 max(max |b|, s): the backend works in double from fp32 inputs (the
 *   reference's probs, lse and gates rounded to fp32, 6e-8 each) and rounds
 *   once; torch differentiates in float64 from the logits. s bounds the
 *   terms that may cancel, 2 max|dgate| + the aux and z terms' largest: a
 *   gradient that is 0 in exact arithmetic (k = 1 without aux and z) comes
 *   out as rounding noise of that size on both sides.
 *   token ops (tests/compare.h's rule): fp32 ||a - b|| / ||b|| <= 2e-6 (fp32
 *   chains of at most k + 2 terms against float64); bf16 and fp16: both sides
 *   round the same value once (the reference to fp32, then to dt, as the
 *   backends), so they differ only where fp32 and float64 straddle a rounding
 *   boundary: each element within 1 ulp + 1e-5 max|ref|, at most 2 + n/32
 *   elements beyond 1e-5 max|ref|, norm-wise u/8 (n >= 256) or u.
 *   dgate: fp32 rule (a double dot product against float64).
 *
 * Fails when python3 lacks torch, numpy or h5py (status 3 of the script,
 * said in a diagnostic): the README's set-up installs them. The script
 * takes about 2 s, mostly importing torch.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>

#include "../../src/io/h5util.h"
#include "../compare.h"
#include "../test_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/half.h"
#include "ref_h5.h"

#define ROUTE_TOL 1e-6
#define GRAD_NORM_TOL 2e-6
#define GRAD_MAX_TOL 1e-6
#define SENTINEL (-3.25f) /* held exactly by fp32, bf16 and fp16 */
#define NDT 3

static const gt_dtype all_dt[NDT] = {GT_F32, GT_BF16, GT_F16};
static const char *const dt_key[NDT] = {"f32", "bf16", "f16"}; /* the script's names */
static const char *const backends[] = {"cpu", "cpu-ref", "cpu-async", "cpu-guard"};
#define NBACKENDS ((int)(sizeof backends / sizeof *backends))

// ---- the cases --------------------------------------------------------------------------

typedef struct {
  int64_t N, E, k, C, capacity;
  float aux_scale, z_scale;
} moe_case;

#define MAX_CASES 128
static moe_case cases[MAX_CASES];
static int ncases;

static void make_cases(void)
{
  static const int64_t Ns[] = {1, 7, 64}, Es[] = {1, 2, 5, 8}, Cs[] = {3, 16, 33, 300};
  static const float scales[3][2] = {{0, 0}, {0.3f, 0.05f}, {0.01f, 0.001f}};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 4; b++) {
      const int64_t N = Ns[a], E = Es[b];
      const int64_t ks[3] = {1, 2, E < 3 ? E : 3};
      for (int c = 0; c < 3; c++) {
        const int64_t k = ks[c];
        if (k > E || (c > 0 && k <= ks[c - 1]))
          continue; /* k <= E, each k once */
        const int64_t small = 3 * N * k / (4 * E) + 1;
        const int64_t caps[4] = {-1, 0, 1, small > 2 ? small : 2};
        for (int d = 0; d < 4; d++) {
          moe_case *m = &cases[ncases];
          /* C and the capacity both step with the case: offset, so that each C
           * meets each capacity */
          *m = (moe_case){N, E, k, Cs[(ncases + ncases / 4) % 4], caps[d], 0, 0};
          m->aux_scale = scales[(ncases / 4) % 3][0];
          m->z_scale = scales[(ncases / 4) % 3][1];
          ncases++;
        }
      }
    }
}

/* The inputs of case i; the dt ones hold values that dt holds exactly
 * (rounded on the host, through gridtrain/half.h). */
typedef struct {
  float *logits, *dgate, *gate, *extra;
  float *x[NDT], *dx[NDT], *base[NDT], *dout[NDT], *dxp[NDT], *y[NDT];
} moe_inputs;

static float *random_dt(gt_dtype dt, size_t n, uint64_t seed, float lo, float hi)
{
  float *v = tu_alloc(n);
  tu_fill(v, n, seed, lo, hi);
  for (size_t i = 0; i < n; i++)
    v[i] = gt_round_to(dt, v[i]);
  return v;
}

static void make_inputs(int i, moe_inputs *in)
{
  const moe_case *m = &cases[i];
  const size_t N = (size_t)m->N, E = (size_t)m->E, k = (size_t)m->k, C = (size_t)m->C;
  const size_t R = N * k + 1;
  const uint64_t s = 1000 * (uint64_t)(i + 1);
  in->logits = random_dt(GT_F32, N * E, s + 1, -4, 4);
  in->dgate = random_dt(GT_F32, N * k, s + 2, -1, 1);
  in->gate = random_dt(GT_F32, N * k, s + 3, 0, 1);
  in->extra = random_dt(GT_F32, N * C, s + 4, -1, 1);
  for (int t = 0; t < NDT; t++) {
    const uint64_t st = s + 10 * (uint64_t)(t + 1);
    in->x[t] = random_dt(all_dt[t], N * C, st + 1, -2, 2);
    in->dx[t] = random_dt(all_dt[t], N * C, st + 2, -2, 2);
    in->base[t] = random_dt(all_dt[t], N * C, st + 3, -2, 2);
    in->dout[t] = random_dt(all_dt[t], N * C, st + 4, -2, 2);
    in->dxp[t] = random_dt(all_dt[t], R * C, st + 5, -2, 2);
    in->y[t] = random_dt(all_dt[t], R * C, st + 6, -2, 2);
  }
}

static void free_inputs(moe_inputs *in)
{
  free(in->logits), free(in->dgate), free(in->gate), free(in->extra);
  for (int t = 0; t < NDT; t++)
    free(in->x[t]), free(in->dx[t]), free(in->base[t]), free(in->dout[t]), free(in->dxp[t]),
        free(in->y[t]);
}

static int write_f32(hid_t loc, const char *name, int64_t rows, int64_t cols, const float *v)
{
  const long shp[2] = {(long)rows, (long)cols};
  return write_dataset(loc, name, H5T_NATIVE_FLOAT, 2, shp, v);
}

static int write_input(const char *path)
{
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0)
    return -1;
  int rc = gt_h5_write_attr_f64(f, "sentinel", SENTINEL);
  hid_t top = H5Gcreate2(f, "case", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (int i = 0; i < ncases; i++) {
    const moe_case *m = &cases[i];
    char name[16];
    snprintf(name, sizeof name, "%d", i);
    hid_t g = H5Gcreate2(top, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    rc |= gt_h5_write_attr_i64(g, "N", m->N) | gt_h5_write_attr_i64(g, "E", m->E);
    rc |= gt_h5_write_attr_i64(g, "k", m->k) | gt_h5_write_attr_i64(g, "C", m->C);
    rc |= gt_h5_write_attr_i64(g, "capacity", m->capacity);
    rc |= gt_h5_write_attr_f64(g, "aux_scale", m->aux_scale);
    rc |= gt_h5_write_attr_f64(g, "z_scale", m->z_scale);
    moe_inputs in;
    make_inputs(i, &in);
    const int64_t R = m->N * m->k + 1;
    rc |= write_f32(g, "logits", m->N, m->E, in.logits);
    rc |= write_f32(g, "dgate", m->N, m->k, in.dgate);
    rc |= write_f32(g, "gate", m->N, m->k, in.gate);
    rc |= write_f32(g, "extra", m->N, m->C, in.extra);
    for (int t = 0; t < NDT; t++) {
      hid_t d = H5Gcreate2(g, dt_key[t], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      rc |= write_f32(d, "x", m->N, m->C, in.x[t]) | write_f32(d, "dx", m->N, m->C, in.dx[t]);
      rc |= write_f32(d, "base", m->N, m->C, in.base[t]);
      rc |= write_f32(d, "dout", m->N, m->C, in.dout[t]);
      rc |= write_f32(d, "dxp", R, m->C, in.dxp[t]) | write_f32(d, "y", R, m->C, in.y[t]);
      H5Gclose(d);
    }
    free_inputs(&in);
    H5Gclose(g);
  }
  H5Gclose(top);
  H5Fclose(f);
  return rc;
}

// ---- reading the reference --------------------------------------------------------------

static bool ref_ok = true; /* a missing reference dataset fails the run once */

static float *ref_f(hid_t f, int i, const char *dt, const char *name, size_t n)
{
  char path[96];
  snprintf(path, sizeof path, dt ? "/case/%d/%s/%s" : "/case/%d/%s%s", i, dt ? dt : name,
           dt ? name : "");
  float *v = tu_alloc(n);
  if (read_f64(f, path, v, n) != 0) {
    if (ref_ok)
      tap_diag("reference %s: missing, or not %zu values", path, n);
    ref_ok = false;
    for (size_t j = 0; j < n; j++)
      v[j] = NAN;
  }
  return v;
}

static int32_t *ref_i(hid_t f, int i, const char *name, size_t n)
{
  char path[96];
  snprintf(path, sizeof path, "/case/%d/%s", i, name);
  int32_t *v = calloc(n ? n : 1, sizeof *v);
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  bool ok = false;
  if (d >= 0) {
    hid_t s = H5Dget_space(d);
    ok = H5Sget_simple_extent_npoints(s) == (hssize_t)n &&
         H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    H5Sclose(s);
    H5Dclose(d);
  }
  if (!ok) {
    if (ref_ok)
      tap_diag("reference %s: missing, or not %zu integers", path, n);
    ref_ok = false;
    for (size_t j = 0; j < n; j++)
      v[j] = INT32_MIN;
  }
  return v;
}

// ---- device buffers ---------------------------------------------------------------------

/* Device buffers are carved out of one allocation per backend and handed
 * out again for each case (dev_reset): cpu-guard keeps at most 4096 device
 * allocations in a process, and the cases would make some 5000. */
#define DEV_BYTES ((size_t)32 << 20)
static struct {
  gt_backend *be;
  char *base;
  size_t used;
} arena;

static bool dev_open(gt_backend *be)
{
  void *p = NULL;
  if (be->ops->alloc(be, DEV_BYTES, &p) != GT_SUCCESS) {
    tap_ok(false, "[%s] alloc of %zu bytes: %s", be->name, DEV_BYTES, gt_error_message());
    gt_error_clear();
    return false;
  }
  arena.be = be, arena.base = p, arena.used = 0;
  return true;
}

static void dev_reset(void) { arena.used = 0; }

static void dev_close(void)
{
  if (arena.be && arena.base)
    arena.be->ops->free(arena.be, arena.base);
  arena.be = NULL, arena.base = NULL;
}

/* A device buffer of n elements of dt holding host (fp32 values dt holds),
 * or of n int32 (dt GT_I32); 64-byte aligned, with 64 bytes between
 * buffers. The test cannot go on without it. */
static void *dev_put(gt_backend *be, gt_dtype dt, const void *host, size_t n)
{
  const size_t es = gt_dtype_size(dt), bytes = n * es;
  const size_t need = (bytes + 127) / 64 * 64;
  if (be != arena.be || arena.used + need > DEV_BYTES) {
    tap_bail("[%s] device buffer of %zu elements: %s", be->name, n,
             be != arena.be ? "not this backend's" : "past the test's arena");
    exit(1);
  }
  void *d = arena.base + arena.used, *packed = malloc(bytes ? bytes : 1);
  arena.used += need;
  if (!packed)
    abort();
  if (dt == GT_I32 || dt == GT_F32)
    memcpy(packed, host, bytes);
  else
    for (size_t i = 0; i < n; i++)
      gt_store1(dt, packed, i, ((const float *)host)[i]);
  if (tu_upload(be, d, packed, bytes) != GT_SUCCESS) {
    tap_bail("[%s] upload of %zu elements: %s", be->name, n, gt_error_message());
    exit(1);
  }
  free(packed);
  return d;
}

/* n elements of device memory as fp32 values (or int32 for GT_I32). */
static void *dev_get(gt_backend *be, gt_dtype dt, const void *dev, size_t n)
{
  const size_t es = gt_dtype_size(dt);
  void *packed = malloc((n ? n : 1) * es), *out = malloc((n ? n : 1) * 4);
  if (!packed || !out || tu_download(be, packed, dev, n * es) != GT_SUCCESS)
    abort();
  if (dt == GT_I32 || dt == GT_F32)
    memcpy(out, packed, n * es);
  else
    for (size_t i = 0; i < n; i++)
      ((float *)out)[i] = gt_load1(dt, packed, i);
  free(packed);
  return out;
}

static float *filled(size_t n, float v)
{
  float *a = tu_alloc(n);
  for (size_t i = 0; i < n; i++)
    a[i] = v;
  return a;
}

/* An op's status, then sync; false (and a diagnostic, once per run of
 * failures) when it failed. */
static int op_failures;
static bool op_ok(gt_backend *be, int status, const char *what)
{
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  if (status != GT_SUCCESS) {
    if (op_failures++ < 10)
      tap_diag("[%s] %s: %s", be->name, what, gt_error_message());
    gt_error_clear();
    return false;
  }
  return true;
}

// ---- comparisons, tallied over the cases ------------------------------------------------

/* One TAP line per op, variant, type and backend, over all cases: the
 * worst measure and the first failing case. */
typedef struct {
  int cases, failed;
  double worst;
  char first[320];
} tally;

__attribute__((format(printf, 4, 5))) static void tally_add(tally *t, bool ok, double measure,
                                                            const char *fmt, ...)
{
  t->cases++;
  t->worst = fmax(t->worst, measure);
  if (!ok && t->failed++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->first, sizeof t->first, fmt, ap);
    va_end(ap);
  }
}

static void tally_report(const tally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tally_report(const tally *t, const char *fmt, ...)
{
  char what[240];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (!tap_ok(t->cases > 0 && t->failed == 0, "%s: %d cases, worst %.3g", what, t->cases,
              t->worst))
    tap_diag("%s: %d of %d cases fail; the first: %s", what, t->failed, t->cases, t->first);
}

/* Bit for bit: the number of elements that differ. */
static size_t differ_f(const float *a, const float *b, size_t n)
{
  size_t d = 0;
  for (size_t i = 0; i < n; i++)
    d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}

static size_t differ_i(const int32_t *a, const int32_t *b, size_t n)
{
  size_t d = 0;
  for (size_t i = 0; i < n; i++)
    d += a[i] != b[i];
  return d;
}

/* Per element |a - b| <= tol |b|: the worst ratio to tol. */
static double rel_each(const float *a, const float *b, size_t n, double tol, size_t *at)
{
  double worst = 0;
  *at = 0;
  for (size_t i = 0; i < n; i++) {
    const double r = fabs((double)a[i] - b[i]) / (tol * fmax(fabs(b[i]), 1e-30));
    if (!(r <= worst)) { /* NaN counts as the worst */
      worst = isnan(r) ? INFINITY : r;
      *at = i;
    }
  }
  return worst;
}

/* tests/compare.h's rule (tu_close) for a kernel's output of type t
 * against a reference rounded the same way, without its TAP line: the
 * worst measure goes to *measure (fp32: the norm-wise relative error;
 * 16-bit: the worst element in ulps), what failed to why. */
static bool close_rule(gt_dtype t, const float *a, const float *b, size_t n, double *measure,
                       char *why, size_t wsize)
{
  const tu_close_result r = tu_close(t, a, b, n, false);
  if (t == GT_F32) {
    *measure = r.finite ? r.rel : INFINITY;
    snprintf(why, wsize, "rel err %.3e (bound %.1e)%s", r.rel, TU_TOL32,
             r.finite ? "" : ", not finite");
    return r.ok;
  }
  *measure = r.finite ? r.worst : INFINITY;
  snprintf(why, wsize,
           "element %zu: %.9g vs %.9g (%.2f ulp); rel err %.3e (bound %.2e); %zu of %zu differ "
           "(bound %zu)%s",
           r.at, n ? a[r.at] : 0.0, n ? b[r.at] : 0.0, r.worst, r.rel, r.norm_tol, r.differ, n,
           r.max_differ, r.finite ? "" : "; not finite");
  return r.ok;
}

/* xp or dy (R rows of C) against the reference: the rows some kept pair
 * names by close_rule (or bit for bit), the others must hold the sentinel's
 * bits. */
static bool rows_check(gt_dtype t, bool exact, const float *a, const float *b,
                       const int32_t *pos, int64_t pairs, int64_t R, int64_t C, double *measure,
                       char *why, size_t wsize)
{
  bool *named = calloc((size_t)R, sizeof *named);
  size_t nn = 0;
  for (int64_t i = 0; i < pairs; i++)
    if (pos[i] >= 0 && pos[i] < R && !named[pos[i]]) {
      named[pos[i]] = true;
      nn++;
    }
  float *ga = tu_alloc(nn * (size_t)C), *gb = tu_alloc(nn * (size_t)C);
  const float s = SENTINEL;
  size_t touched = 0, r = 0;
  for (int64_t row = 0; row < R; row++) {
    const float *ar = a + row * C, *br = b + row * C;
    if (named[row]) {
      memcpy(ga + r * (size_t)C, ar, sizeof(float) * (size_t)C);
      memcpy(gb + r * (size_t)C, br, sizeof(float) * (size_t)C);
      r++;
    } else {
      for (int64_t c = 0; c < C; c++)
        touched += memcmp(&ar[c], &s, sizeof s) != 0;
    }
  }
  bool ok;
  if (exact) {
    const size_t d = differ_f(ga, gb, nn * (size_t)C);
    *measure = (double)d;
    snprintf(why, wsize, "%zu elements of the named rows differ", d);
    ok = d == 0;
  } else {
    ok = close_rule(t, ga, gb, nn * (size_t)C, measure, why, wsize);
  }
  if (touched) {
    const size_t len = strlen(why);
    snprintf(why + len, wsize - len, "; %zu elements of rows no pair names lost the sentinel",
             touched);
    ok = false;
  }
  free(named), free(ga), free(gb);
  return ok;
}

// ---- part 1: against PyTorch -----------------------------------------------------------

enum { T_PROBS, T_LSE, T_SEL, T_GATE, T_ASSIGN, T_DLOGITS, T_ROUTER };
enum { T_XP, T_DX_PLAIN, T_DX_EXTRA, T_OUT, T_OUT_BASE, T_OUT_INPLACE, T_DY, T_DGATE, T_TOKEN };

static const char *const router_what[T_ROUTER] = {
  "moe_route probs as torch.softmax (per element rel)",
  "moe_route lse as torch.logsumexp (per element rel)",
  "moe_route sel as torch.topk (elements that differ)",
  "moe_route gate as the top k over their sum (per element rel)",
  "moe_assign pos, load, kept as a sort of the pairs (elements that differ)",
  "moe_route_backward dlogits as torch.autograd of the gate, aux and z losses (norm rel)",
};
static const char *const token_what[T_TOKEN] = {
  "moe_permute xp, rows no pair names kept (elements that differ)",
  "moe_permute_backward dx += without extra",
  "moe_permute_backward dx += with extra",
  "moe_combine out = with base NULL",
  "moe_combine out = with a base",
  "moe_combine out = with base == out",
  "moe_combine_backward dy, rows no pair names kept",
  "moe_combine_backward dgate (fp32)",
};

static void check_case(gt_backend *be, hid_t f, int i, tally router[T_ROUTER],
                       tally token[T_TOKEN][NDT])
{
  const gt_backend_ops *op = be->ops;
  const moe_case *m = &cases[i];
  const int64_t N = m->N, E = m->E, k = m->k, C = m->C, R = N * k + 1;
  const size_t nE = (size_t)(N * E), nk = (size_t)(N * k), nC = (size_t)(N * C);
  const size_t nR = (size_t)(R * C);
  char tag[160], why[400];
  dev_reset();
  snprintf(tag, sizeof tag, "case %d (N=%lld E=%lld k=%lld C=%lld capacity=%lld)", i,
           (long long)N, (long long)E, (long long)k, (long long)C, (long long)m->capacity);
  moe_inputs in;
  make_inputs(i, &in);

  /* the reference */
  float *probs_r = ref_f(f, i, NULL, "probs", nE), *lse_r = ref_f(f, i, NULL, "lse", (size_t)N);
  float *gate_r = ref_f(f, i, NULL, "gate", nk), *dlog_r = ref_f(f, i, NULL, "dlogits", nE);
  int32_t *sel_r = ref_i(f, i, "sel", nk), *pos_r = ref_i(f, i, "pos", nk);
  int32_t *load_r = ref_i(f, i, "load", (size_t)E), *kept_r = ref_i(f, i, "kept", (size_t)E);

  /* moe_route */
  void *logits = dev_put(be, GT_F32, in.logits, nE);
  float *fill = filled(nE > nR ? nE : nR, SENTINEL);
  void *probs = dev_put(be, GT_F32, fill, nE), *lse = dev_put(be, GT_F32, fill, (size_t)N);
  void *gate = dev_put(be, GT_F32, fill, nk), *sel = dev_put(be, GT_I32, fill, nk);
  if (op_ok(be, op->moe_route(be, probs, lse, sel, gate, logits, N, E, k), "moe_route")) {
    float *p = dev_get(be, GT_F32, probs, nE), *l = dev_get(be, GT_F32, lse, (size_t)N);
    float *g = dev_get(be, GT_F32, gate, nk);
    int32_t *s = dev_get(be, GT_I32, sel, nk);
    size_t at;
    double w = rel_each(p, probs_r, nE, ROUTE_TOL, &at);
    tally_add(&router[T_PROBS], w <= 1, w * ROUTE_TOL, "%s: probs[%zu] %.9g vs %.9g", tag, at,
              p[at], probs_r[at]);
    w = rel_each(l, lse_r, (size_t)N, ROUTE_TOL, &at);
    tally_add(&router[T_LSE], w <= 1, w * ROUTE_TOL, "%s: lse[%zu] %.9g vs %.9g", tag, at,
              l[at], lse_r[at]);
    const size_t d = differ_i(s, sel_r, nk);
    tally_add(&router[T_SEL], d == 0, (double)d, "%s: %zu of %zu sel differ (row 0: %d vs %d)",
              tag, d, nk, s[0], sel_r[0]);
    w = rel_each(g, gate_r, nk, ROUTE_TOL, &at);
    tally_add(&router[T_GATE], w <= 1, w * ROUTE_TOL, "%s: gate[%zu] %.9g vs %.9g", tag, at,
              g[at], gate_r[at]);
    free(p), free(l), free(g), free(s);
  } else {
    tally_add(&router[T_PROBS], false, INFINITY, "%s: moe_route failed", tag);
  }

  /* moe_assign on the reference's sel */
  void *sel_in = dev_put(be, GT_I32, sel_r, nk), *pos = dev_put(be, GT_I32, fill, nk);
  void *load = dev_put(be, GT_I32, fill, (size_t)E), *kept = dev_put(be, GT_I32, fill, (size_t)E);
  if (op_ok(be, op->moe_assign(be, pos, load, kept, sel_in, N, k, E, m->capacity),
            "moe_assign")) {
    int32_t *p = dev_get(be, GT_I32, pos, nk), *l = dev_get(be, GT_I32, load, (size_t)E);
    int32_t *kk = dev_get(be, GT_I32, kept, (size_t)E);
    const size_t d = differ_i(p, pos_r, nk) + differ_i(l, load_r, (size_t)E) +
                     differ_i(kk, kept_r, (size_t)E);
    tally_add(&router[T_ASSIGN], d == 0, (double)d,
              "%s: %zu differ (pos[0] %d vs %d, load[0] %d vs %d, kept[0] %d vs %d)", tag, d,
              p[0], pos_r[0], l[0], load_r[0], kk[0], kept_r[0]);
    free(p), free(l), free(kk);
  } else {
    tally_add(&router[T_ASSIGN], false, INFINITY, "%s: moe_assign failed", tag);
  }

  /* moe_route_backward on the reference's router outputs (rounded to fp32) */
  void *dgate_in = dev_put(be, GT_F32, in.dgate, nk), *probs_in = dev_put(be, GT_F32, probs_r, nE);
  void *lse_in = dev_put(be, GT_F32, lse_r, (size_t)N), *gate_in = dev_put(be, GT_F32, gate_r, nk);
  void *load_in = dev_put(be, GT_I32, load_r, (size_t)E), *dlog = dev_put(be, GT_F32, fill, nE);
  if (op_ok(be, op->moe_route_backward(be, dlog, dgate_in, probs_in, lse_in, sel_in, gate_in,
                                       load_in, N, E, k, m->aux_scale, m->z_scale),
            "moe_route_backward")) {
    float *d = dev_get(be, GT_F32, dlog, nE);
    /* The size of the terms that may cancel (a one-choice gate has no
     * gradient at all): probs[n,e] dp[n,e] is at most 2 max|dgate| for a
     * chosen expert (probs <= Z), plus the aux and z terms. */
    double scale = 0, lmax = 0, mx = 0, dmax = 0, num = 0, den = 0;
    int32_t loadmax = 0;
    for (size_t j = 0; j < nk; j++)
      scale = fmax(scale, 2 * fabs(in.dgate[j]));
    for (int64_t e = 0; e < E; e++)
      loadmax = load_r[e] > loadmax ? load_r[e] : loadmax;
    for (int64_t n = 0; n < N; n++)
      lmax = fmax(lmax, fabs(lse_r[n]));
    scale += m->aux_scale * (double)E * loadmax / ((double)N * N * k) +
             2 * m->z_scale * lmax / (double)N;
    for (size_t j = 0; j < nE; j++) {
      const double diff = (double)d[j] - dlog_r[j];
      mx = fmax(mx, fabs(dlog_r[j]));
      dmax = fmax(dmax, fabs(diff));
      num += diff * diff;
      den += (double)dlog_r[j] * dlog_r[j];
    }
    const double rel = sqrt(num) / fmax(sqrt(den), scale), rmax = dmax / fmax(mx, scale);
    tally_add(&router[T_DLOGITS], rel <= GRAD_NORM_TOL && rmax <= GRAD_MAX_TOL, rel,
              "%s aux_scale=%g z_scale=%g: rel err %.3e (bound %.0e), max err %.3e of max|ref| "
              "(bound %.0e)",
              tag, m->aux_scale, m->z_scale, rel, GRAD_NORM_TOL, rmax, GRAD_MAX_TOL);
    free(d);
  } else {
    tally_add(&router[T_DLOGITS], false, INFINITY, "%s: moe_route_backward failed", tag);
  }

  /* the token ops, on the reference's pos */
  void *pos_in = dev_put(be, GT_I32, pos_r, nk), *gin = dev_put(be, GT_F32, in.gate, nk);
  void *extra = dev_put(be, GT_F32, in.extra, nC);
  for (int t = 0; t < NDT; t++) {
    const gt_dtype dt = all_dt[t];
    const char *key = dt_key[t];
    double w;
    void *x = dev_put(be, dt, in.x[t], nC), *y = dev_put(be, dt, in.y[t], nR);
    void *dxp = dev_put(be, dt, in.dxp[t], nR), *dout = dev_put(be, dt, in.dout[t], nC);
    void *base = dev_put(be, dt, in.base[t], nC);

    void *xp = dev_put(be, dt, fill, nR);
    if (op_ok(be, op->moe_permute(be, dt, xp, x, pos_in, N, k, C), "moe_permute")) {
      float *a = dev_get(be, dt, xp, nR), *b = ref_f(f, i, key, "xp", nR);
      const bool ok = rows_check(dt, true, a, b, pos_r, (int64_t)nk, R, C, &w, why, sizeof why);
      tally_add(&token[T_XP][t], ok, w, "%s: %s", tag, why);
      free(a), free(b);
    } else {
      tally_add(&token[T_XP][t], false, INFINITY, "%s: moe_permute failed", tag);
    }

    for (int with_extra = 0; with_extra < 2; with_extra++) {
      const int which = with_extra ? T_DX_EXTRA : T_DX_PLAIN;
      void *dx = dev_put(be, dt, in.dx[t], nC);
      if (op_ok(be,
                op->moe_permute_backward(be, dt, dx, dxp, with_extra ? extra : NULL, pos_in, N,
                                         k, C),
                "moe_permute_backward")) {
        float *a = dev_get(be, dt, dx, nC);
        float *b = ref_f(f, i, key, with_extra ? "dx_extra" : "dx_plain", nC);
        const bool ok = close_rule(dt, a, b, nC, &w, why, sizeof why);
        tally_add(&token[which][t], ok, w, "%s: %s", tag, why);
        free(a), free(b);
      } else {
        tally_add(&token[which][t], false, INFINITY, "%s: moe_permute_backward failed", tag);
      }
    }

    for (int variant = 0; variant < 3; variant++) { /* base NULL, separate, == out */
      const int which = variant == 0 ? T_OUT : variant == 1 ? T_OUT_BASE : T_OUT_INPLACE;
      void *out = dev_put(be, dt, variant == 2 ? in.base[t] : fill, nC);
      const void *b_arg = variant == 0 ? NULL : variant == 1 ? base : out;
      if (op_ok(be, op->moe_combine(be, dt, out, b_arg, y, gin, pos_in, N, k, C),
                "moe_combine")) {
        float *a = dev_get(be, dt, out, nC);
        float *b = ref_f(f, i, key, variant == 0 ? "out" : "out_base", nC);
        const bool ok = close_rule(dt, a, b, nC, &w, why, sizeof why);
        tally_add(&token[which][t], ok, w, "%s: %s", tag, why);
        free(a), free(b);
      } else {
        tally_add(&token[which][t], false, INFINITY, "%s: moe_combine failed", tag);
      }
    }

    void *dy = dev_put(be, dt, fill, nR), *dg = dev_put(be, GT_F32, fill, nk);
    if (op_ok(be, op->moe_combine_backward(be, dt, dy, dg, dout, y, gin, pos_in, N, k, C),
              "moe_combine_backward")) {
      float *a = dev_get(be, dt, dy, nR), *b = ref_f(f, i, key, "dy", nR);
      bool ok = rows_check(dt, false, a, b, pos_r, (int64_t)nk, R, C, &w, why, sizeof why);
      tally_add(&token[T_DY][t], ok, w, "%s: %s", tag, why);
      free(a), free(b);
      a = dev_get(be, GT_F32, dg, nk);
      b = ref_f(f, i, key, "dgate", nk);
      ok = close_rule(GT_F32, a, b, nk, &w, why, sizeof why);
      tally_add(&token[T_DGATE][t], ok, w, "%s: %s", tag, why);
      free(a), free(b);
    } else {
      tally_add(&token[T_DY][t], false, INFINITY, "%s: moe_combine_backward failed", tag);
    }
  }

  free(fill);
  free(probs_r), free(lse_r), free(gate_r), free(dlog_r);
  free(sel_r), free(pos_r), free(load_r), free(kept_r);
  free_inputs(&in);
}

/* True when be's table has all seven ops (a NULL one would crash the rest). */
static bool has_moe_ops(const gt_backend *be)
{
  const gt_backend_ops *op = be->ops;
  const bool all = op->moe_route && op->moe_assign && op->moe_permute &&
                   op->moe_permute_backward && op->moe_combine && op->moe_combine_backward &&
                   op->moe_route_backward;
  tap_ok(all, "[%s] the table has the seven mixture-of-experts ops", be->name);
  return all;
}

static void check_reference(const char *name, hid_t f)
{
  gt_backend *be = NULL;
  if (gt_backend_create(name, 2, &be) != GT_SUCCESS) {
    tap_ok(false, "[%s] create: %s", name, gt_error_message());
    gt_error_clear();
    return;
  }
  if (has_moe_ops(be) && dev_open(be)) {
    static tally router[T_ROUTER], token[T_TOKEN][NDT];
    memset(router, 0, sizeof router);
    memset(token, 0, sizeof token);
    for (int i = 0; i < ncases; i++)
      check_case(be, f, i, router, token);
    for (int w = 0; w < T_ROUTER; w++)
      tally_report(&router[w], "[%s] %s", be->name, router_what[w]);
    for (int w = 0; w < T_TOKEN; w++)
      for (int t = 0; t < NDT; t++)
        tally_report(&token[w][t], "[%s] %s [%s]%s", be->name, token_what[w],
                     gt_dtype_name(all_dt[t]),
                     w == T_XP ? "" : t == 0 || w == T_DGATE ? " (norm rel)" : " (worst ulp)");
  }
  dev_close();
  gt_backend_destroy(&be);
}

// ---- part 2: known answers -------------------------------------------------------------

/* Ties go to the lower expert index: equal logits give sel = 0..k-1, gates
 * 1/k, probs 1/E and lse = logit + log E; equal leaders among others are
 * taken in index order. */
static void known_ties(gt_backend *be)
{
  dev_reset();
  enum { N = 4, E = 5, K = 3 };
  const float logits[N * E] = {0.75f, 0.75f, 0.75f, 0.75f, 0.75f, /* all equal */
                               1, 3, 3, 0, 3,                     /* three leaders tie */
                               5, 2, 2, 2, 2,                     /* one leader, a tie after */
                               -1, -1, 7, 7, -1};                 /* two leaders, then a tie */
  const int32_t want_sel[N * K] = {0, 1, 2, 1, 2, 4, 0, 1, 2, 2, 3, 0};
  void *l = dev_put(be, GT_F32, logits, N * E), *p = dev_put(be, GT_F32, logits, N * E);
  const int32_t unset[N * K] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  void *lse = dev_put(be, GT_F32, logits, N), *sel = dev_put(be, GT_I32, unset, N * K);
  void *g = dev_put(be, GT_F32, logits, N * K);
  if (op_ok(be, be->ops->moe_route(be, p, lse, sel, g, l, N, E, K), "moe_route")) {
    int32_t *s = dev_get(be, GT_I32, sel, N * K);
    float *gh = dev_get(be, GT_F32, g, N * K), *ph = dev_get(be, GT_F32, p, N * E);
    float *lh = dev_get(be, GT_F32, lse, N);
    tap_ok(differ_i(s, want_sel, N * K) == 0,
           "[%s] moe_route ties to the lower index: sel {%d %d %d} {%d %d %d} {%d %d %d} "
           "{%d %d %d} (want {0 1 2} {1 2 4} {0 1 2} {2 3 0})",
           be->name, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11]);
    bool thirds = true, fifths = true;
    for (int j = 0; j < 2 * K; j++) /* rows 0 and 1: k equal probabilities */
      thirds = thirds && gh[j] == 1.0f / 3.0f;
    for (int e = 0; e < E; e++)
      fifths = fifths && ph[e] == 0.2f;
    tap_ok(thirds && fifths && tap_close(lh[0], 0.75 + log(5.0), 1e-6, 1e-6),
           "[%s] moe_route of equal logits: probs 1/E, gates 1/k, lse = logit + log E "
           "(gate %.9g, prob %.9g, lse %.9g)",
           be->name, gh[0], ph[0], lh[0]);
    free(s), free(gh), free(ph), free(lh);
  }
}

/* The pairs of six tokens over three experts (k = 2), by n k + j:
 *   expert 0: (0,0) (1,0) (2,1) (3,0) (5,0)   load 5
 *   expert 1: (0,1) (2,0) (4,1) (5,1)         load 4
 *   expert 2: (1,1) (3,1) (4,0)               load 3
 * Capacity 3 keeps each expert's first three, dropping exactly the later
 * pairs (3,0), (5,0) and (5,1); rows 0-2 expert 0, 3-5 expert 1, 6-8 expert 2. */
static void known_assign(gt_backend *be)
{
  dev_reset();
  enum { N = 6, K = 2, E = 3 };
  const int32_t sel[N * K] = {0, 1, 0, 2, 1, 0, 0, 2, 2, 1, 0, 1};
  static const struct {
    int64_t capacity;
    int32_t pos[N * K], load[E], kept[E];
  } want[] = {
    {3, {0, 3, 1, 6, 4, 2, -1, 7, 8, 5, -1, -1}, {5, 4, 3}, {3, 3, 3}},
    {-1, {0, 5, 1, 9, 6, 2, 3, 10, 11, 7, 4, 8}, {5, 4, 3}, {5, 4, 3}},
    {0, {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}, {5, 4, 3}, {0, 0, 0}},
    {4, {0, 4, 1, 8, 5, 2, 3, 9, 10, 6, -1, 7}, {5, 4, 3}, {4, 4, 3}},
  };
  void *s = dev_put(be, GT_I32, sel, N * K);
  for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
    const int32_t fill[N * K] = {99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99};
    void *pos = dev_put(be, GT_I32, fill, N * K), *load = dev_put(be, GT_I32, fill, E);
    void *kept = dev_put(be, GT_I32, fill, E);
    if (op_ok(be, be->ops->moe_assign(be, pos, load, kept, s, N, K, E, want[w].capacity),
              "moe_assign")) {
      int32_t *p = dev_get(be, GT_I32, pos, N * K), *l = dev_get(be, GT_I32, load, E);
      int32_t *kk = dev_get(be, GT_I32, kept, E);
      char got[160] = "";
      for (int i = 0; i < N * K; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", i ? " " : "", p[i]);
      tap_ok(differ_i(p, want[w].pos, N * K) == 0 && differ_i(l, want[w].load, E) == 0 &&
                 differ_i(kk, want[w].kept, E) == 0,
             "[%s] moe_assign capacity %lld: pos {%s}, load {%d %d %d}, kept {%d %d %d} as "
             "worked out by hand",
             be->name, (long long)want[w].capacity, got, l[0], l[1], l[2], kk[0], kk[1], kk[2]);
      free(p), free(l), free(kk);
    }
  }
}

/* Three tokens, k = 2, C = 4, an expert buffer of 7 rows of which pos names
 * rows 4, 0, 2 and 5 (pairs (0,1) and (2,0) dropped; rows 1, 3 and 6 named
 * by none). x[n][c] = n + 1 + c/8, y[r][c] = dxp[r][c] = r - c/2, dout[n][c]
 * = n + 1, dx = 0.5, extra = 0.25, base[n][c] = n + c/4; gates 0.5 (0.25),
 * 2, 4, (8) 0.125 (dropped ones in parentheses: they must not count). Every
 * input, product and sum needs at most 8 significant bits, so every answer
 * is exact in fp32, bf16 and fp16 alike. */
static void known_tokens(gt_backend *be, gt_dtype dt)
{
  dev_reset();
  enum { N = 3, K = 2, C = 4, R = 7 };
  const int32_t pos[N * K] = {4, -1, 0, 2, -1, 5};
  const float gate[N * K] = {0.5f, 0.25f, 2, 4, 8, 0.125f};
  float x[N * C], y[R * C], dout[N * C], dx[N * C], extra[N * C], base[N * C], sent[R * C];
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      x[n * C + c] = (float)n + 1 + (float)c / 8;
      dout[n * C + c] = (float)n + 1;
      dx[n * C + c] = 0.5f;
      extra[n * C + c] = 0.25f;
      base[n * C + c] = (float)n + (float)c / 4;
    }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++)
      y[r * C + c] = (float)r - (float)c / 2;
  for (int i = 0; i < R * C; i++)
    sent[i] = SENTINEL;
  const char *tn = gt_dtype_name(dt);
  const gt_backend_ops *op = be->ops;
  void *dpos = dev_put(be, GT_I32, pos, N * K), *dgate = dev_put(be, GT_F32, gate, N * K);
  void *dx_ = dev_put(be, dt, x, N * C), *dy_ = dev_put(be, dt, y, R * C);
  void *ddout = dev_put(be, dt, dout, N * C), *dextra = dev_put(be, GT_F32, extra, N * C);

  /* permute: xp row r holds x of the token that names it, or the sentinel */
  const int from[R] = {1, -1, 1, -1, 0, 2, -1};
  float want[R * C];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++)
      want[r * C + c] = from[r] < 0 ? SENTINEL : x[from[r] * C + c];
  void *xp = dev_put(be, dt, sent, R * C);
  if (op_ok(be, op->moe_permute(be, dt, xp, dx_, dpos, N, K, C), "moe_permute")) {
    float *a = dev_get(be, dt, xp, R * C);
    tap_ok(differ_f(a, want, R * C) == 0,
           "[%s] moe_permute [%s]: dropped pairs copy nothing, rows 1, 3, 6 keep their bits",
           be->name, tn);
    free(a);
  }

  /* permute_backward: dx[0] += dxp[4], dx[1] += dxp[0] + dxp[2], dx[2] += dxp[5] */
  for (int with_extra = 0; with_extra < 2; with_extra++) {
    const float e = with_extra ? 0.25f : 0.0f;
    float wdx[N * C];
    for (int c = 0; c < C; c++) {
      wdx[0 * C + c] = 0.5f + e + (4 - c / 2.0f);
      wdx[1 * C + c] = 0.5f + e + (0 - c / 2.0f) + (2 - c / 2.0f);
      wdx[2 * C + c] = 0.5f + e + (5 - c / 2.0f);
    }
    void *ddx = dev_put(be, dt, dx, N * C);
    if (op_ok(be, op->moe_permute_backward(be, dt, ddx, dy_, with_extra ? dextra : NULL, dpos,
                                           N, K, C),
              "moe_permute_backward")) {
      float *a = dev_get(be, dt, ddx, N * C);
      tap_ok(differ_f(a, wdx, N * C) == 0,
             "[%s] moe_permute_backward [%s] %s extra: only the kept pairs' rows are added "
             "(dx[1][3] %g, want %g)",
             be->name, tn, with_extra ? "with" : "without", a[1 * C + 3], wdx[1 * C + 3]);
      free(a);
    }
  }

  /* combine: out[0] = base[0] + 0.5 y[4], out[1] = base[1] + 2 y[0] + 4 y[2],
   * out[2] = base[2] + 0.125 y[5] */
  for (int with_base = 0; with_base < 2; with_base++) {
    float wout[N * C];
    for (int c = 0; c < C; c++) {
      const float b0 = with_base ? base[c] : 0, b1 = with_base ? base[C + c] : 0;
      const float b2 = with_base ? base[2 * C + c] : 0;
      wout[0 * C + c] = b0 + 0.5f * (4 - c / 2.0f);
      wout[1 * C + c] = b1 + 2 * (0 - c / 2.0f) + 4 * (2 - c / 2.0f);
      wout[2 * C + c] = b2 + 0.125f * (5 - c / 2.0f);
    }
    void *out = dev_put(be, dt, with_base ? base : sent, N * C);
    if (op_ok(be, op->moe_combine(be, dt, out, with_base ? out : NULL, dy_, dgate, dpos, N, K, C),
              "moe_combine")) {
      float *a = dev_get(be, dt, out, N * C);
      tap_ok(differ_f(a, wout, N * C) == 0,
             "[%s] moe_combine [%s] %s: dropped pairs add nothing (out[1][3] %g, want %g)",
             be->name, tn, with_base ? "with base == out" : "without base", a[1 * C + 3],
             wout[1 * C + 3]);
      free(a);
    }
  }

  /* combine_backward: dy rows 4, 0, 2, 5 = gate dout[n], rows 1, 3, 6 keep
   * the sentinel; dgate = dout[n] . y[pos] = (n + 1)(4 pos - 3), 0 when
   * dropped */
  float wdy[R * C];
  const float wdg[N * K] = {13, 0, -6, 10, 0, 51};
  for (int i = 0; i < R * C; i++)
    wdy[i] = SENTINEL;
  for (int c = 0; c < C; c++) {
    wdy[4 * C + c] = 0.5f * 1;
    wdy[0 * C + c] = 2.0f * 2;
    wdy[2 * C + c] = 4.0f * 2;
    wdy[5 * C + c] = 0.125f * 3;
  }
  void *ddy = dev_put(be, dt, sent, R * C), *ddg = dev_put(be, GT_F32, sent, N * K);
  if (op_ok(be, op->moe_combine_backward(be, dt, ddy, ddg, ddout, dy_, dgate, dpos, N, K, C),
            "moe_combine_backward")) {
    float *a = dev_get(be, dt, ddy, R * C), *g = dev_get(be, GT_F32, ddg, N * K);
    tap_ok(differ_f(a, wdy, R * C) == 0 && differ_f(g, wdg, N * K) == 0,
           "[%s] moe_combine_backward [%s]: dy of the kept pairs only, rows 1, 3, 6 keep their "
           "bits, dgate {%g %g %g %g %g %g} (want {13 0 -6 10 0 51})",
           be->name, tn, g[0], g[1], g[2], g[3], g[4], g[5]);
    free(a), free(g);
  }
}

/* One expert: the softmax is 1 whatever the logit, so only the z-loss
 * moves the logits: dlogits[n] = 2 z_scale lse[n] / N = 2 z_scale logit / N. */
static void known_z_loss(gt_backend *be)
{
  dev_reset();
  enum { N = 2 };
  const float probs[N] = {1, 1}, lse[N] = {0.5f, -1.5f}, gate[N] = {1, 1}, dgate[N] = {3, -2};
  const int32_t sel[N] = {0, 0}, load[1] = {N};
  const float want[N] = {0.125f, -0.375f}; /* 2 (0.25) lse / 2 */
  void *p = dev_put(be, GT_F32, probs, N), *l = dev_put(be, GT_F32, lse, N);
  void *g = dev_put(be, GT_F32, gate, N), *dg = dev_put(be, GT_F32, dgate, N);
  void *s = dev_put(be, GT_I32, sel, N), *ld = dev_put(be, GT_I32, load, 1);
  void *d = dev_put(be, GT_F32, dgate, N);
  if (op_ok(be, be->ops->moe_route_backward(be, d, dg, p, l, s, g, ld, N, 1, 1, 0.5f, 0.25f),
            "moe_route_backward")) {
    float *a = dev_get(be, GT_F32, d, N);
    tap_ok(a[0] == want[0] && a[1] == want[1],
           "[%s] moe_route_backward, one expert: only the z-loss term, 2 z_scale lse / N "
           "({%g %g}, want {0.125 -0.375})",
           be->name, a[0], a[1]);
    free(a);
  }
}

static void check_known(const char *name)
{
  gt_backend *be = NULL;
  if (gt_backend_create(name, 2, &be) != GT_SUCCESS) {
    tap_ok(false, "[%s] create: %s", name, gt_error_message());
    gt_error_clear();
    return;
  }
  if (has_moe_ops(be) && dev_open(be)) {
    known_ties(be);
    known_assign(be);
    for (int t = 0; t < NDT; t++)
      known_tokens(be, all_dt[t]);
    known_z_loss(be);
  }
  dev_close();
  gt_backend_destroy(&be);
}

// ---- part 3: determinism ----------------------------------------------------------------

#define DET_N 1000
#define DET_E 8
#define DET_K 2
#define DET_C 100
#define DET_CAP 220 /* of a mean load of 250: drops */

/* Every op's output of one fixed input, as bytes: route (probs, lse, sel,
 * gate), assign (pos, load, kept), route_backward, and the token ops in dt. */
typedef struct {
  unsigned char *bytes;
  size_t len;
} det_out;

static void det_append(det_out *o, gt_backend *be, const void *dev, size_t bytes)
{
  o->bytes = realloc(o->bytes, o->len + bytes);
  if (!o->bytes || tu_download(be, o->bytes + o->len, dev, bytes) != GT_SUCCESS)
    abort();
  o->len += bytes;
}

static bool det_run(gt_backend *be, gt_dtype dt, det_out *o)
{
  const int64_t N = DET_N, E = DET_E, k = DET_K, C = DET_C, R = N * k;
  const size_t es = gt_dtype_size(dt), nE = N * E, nk = N * k, nC = N * C, nR = R * C;
  const gt_backend_ops *op = be->ops;
  dev_reset();
  float *logits = random_dt(GT_F32, nE, 71, -4, 4), *dg = random_dt(GT_F32, nk, 72, -1, 1);
  float *x = random_dt(dt, nC, 73, -2, 2), *y = random_dt(dt, nR, 74, -2, 2);
  float *extra = random_dt(GT_F32, nC, 75, -1, 1);
  void *l = dev_put(be, GT_F32, logits, nE), *p = dev_put(be, GT_F32, logits, nE);
  void *lse = dev_put(be, GT_F32, logits, N), *g = dev_put(be, GT_F32, logits, nk);
  void *sel = dev_put(be, GT_I32, logits, nk), *pos = dev_put(be, GT_I32, logits, nk);
  void *load = dev_put(be, GT_I32, logits, E), *kept = dev_put(be, GT_I32, logits, E);
  void *dgate = dev_put(be, GT_F32, dg, nk), *dlog = dev_put(be, GT_F32, logits, nE);
  void *dx = dev_put(be, dt, x, nC), *dy = dev_put(be, dt, y, nR), *xp = dev_put(be, dt, y, nR);
  void *dout = dev_put(be, dt, x, nC), *out = dev_put(be, dt, x, nC);
  void *dext = dev_put(be, GT_F32, extra, nC), *dgo = dev_put(be, GT_F32, dg, nk);
  bool ok = op_ok(be, op->moe_route(be, p, lse, sel, g, l, N, E, k), "moe_route") &&
            op_ok(be, op->moe_assign(be, pos, load, kept, sel, N, k, E, DET_CAP), "moe_assign") &&
            op_ok(be, op->moe_route_backward(be, dlog, dgate, p, lse, sel, g, load, N, E, k,
                                             0.01f, 0.001f),
                  "moe_route_backward") &&
            op_ok(be, op->moe_permute(be, dt, xp, dx, pos, N, k, C), "moe_permute") &&
            op_ok(be, op->moe_permute_backward(be, dt, dx, xp, dext, pos, N, k, C),
                  "moe_permute_backward") &&
            op_ok(be, op->moe_combine(be, dt, out, out, dy, g, pos, N, k, C), "moe_combine") &&
            op_ok(be, op->moe_combine_backward(be, dt, dy, dgo, dout, xp, g, pos, N, k, C),
                  "moe_combine_backward");
  if (ok) {
    det_append(o, be, p, nE * 4), det_append(o, be, lse, (size_t)N * 4);
    det_append(o, be, sel, nk * 4), det_append(o, be, g, nk * 4);
    det_append(o, be, pos, nk * 4), det_append(o, be, load, (size_t)E * 4);
    det_append(o, be, kept, (size_t)E * 4), det_append(o, be, dlog, nE * 4);
    det_append(o, be, xp, nR * es), det_append(o, be, dx, nC * es);
    det_append(o, be, out, nC * es), det_append(o, be, dy, nR * es);
    det_append(o, be, dgo, nk * 4);
  }
  free(logits), free(dg), free(x), free(y), free(extra);
  return ok;
}

static bool det_with(int threads, gt_dtype dt, det_out *first, det_out *second)
{
  gt_backend *be = NULL;
  if (gt_backend_create("cpu", threads, &be) != GT_SUCCESS) {
    tap_diag("cpu with %d threads: create: %s", threads, gt_error_message());
    gt_error_clear();
    return false;
  }
  const bool ok = dev_open(be) && det_run(be, dt, first) && (!second || det_run(be, dt, second));
  dev_close();
  gt_backend_destroy(&be);
  return ok;
}

/* The cpu backend is created with 1 thread and with 2, one after the other
 * (a backend sets the OpenMP thread count of the thread that uses it). */
static void check_determinism(void)
{
  for (int t = 0; t < 2; t++) {
    const gt_dtype dt = all_dt[t];
    det_out a = {0}, b = {0}, one = {0};
    const bool ran = det_with(2, dt, &a, &b) && det_with(1, dt, &one, NULL);
    tap_ok(ran && a.len == b.len && a.len > 0 && memcmp(a.bytes, b.bytes, a.len) == 0,
           "[cpu] every moe op twice on the same inputs [%s] (N=%d E=%d k=%d C=%d capacity=%d): "
           "the same bits",
           gt_dtype_name(dt), DET_N, DET_E, DET_K, DET_C, DET_CAP);
    tap_ok(ran && a.len == one.len && a.len > 0 && memcmp(a.bytes, one.bytes, a.len) == 0,
           "[cpu] every moe op with 1 thread and with 2 [%s]: the same bits", gt_dtype_name(dt));
    free(a.bytes), free(b.bytes), free(one.bytes);
  }
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
  tu_tmp_dir("test_moe_ops", dir, sizeof dir);
  snprintf(in, sizeof in, "%s/in.h5", dir);
  snprintf(out, sizeof out, "%s/ref.h5", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (system(cmd) != 0)
    return tap_bail("cannot create %s", dir);

  make_cases();
  for (int b = 0; b < NBACKENDS; b++)
    check_known(backends[b]);
  check_determinism();

  if (write_input(in) != 0)
    return tap_bail("cannot write %s", in);
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/moe_ops_ref.py' '%s' '%s'", python, src, in,
           out);
  const int rc = system(cmd);
  const int status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (!tap_ok(status == 0, "PyTorch's results computed for %d cases (%s)", ncases, python)) {
    if (status == 3)
      tap_diag("%s lacks torch, numpy or h5py (the README's set-up installs them)", python);
    tap_diag("'%s' failed with status %d", cmd, status);
  } else {
    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
      return tap_bail("cannot open %s", out);
    for (int b = 0; b < NBACKENDS; b++)
      check_reference(backends[b], f);
    tap_ok(ref_ok, "every reference dataset was there");
    H5Fclose(f);
  }
  tap_ok(op_failures == 0, "no op call failed (%d did)", op_failures);
  const int result = tap_done();
  MPI_Finalize();
  return result;
}
