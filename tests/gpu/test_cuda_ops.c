/*
 * test_cuda_ops.c - every op of the backend table on "cuda" against
 * "cpu-ref", in fp32, bf16 and fp16, on fresh random inputs (fixed seeds,
 * never zeros), plus the stream and event contract of backend.h and the
 * determinism the contract promises.
 *
 * Inputs are made on the host in fp32 and converted to the compute type by
 * cpu-ref's cast (upload fp32, cast, download the dt bytes); the very same
 * bytes are then uploaded to both backends. Every "=" output is poisoned
 * before each call (all bytes 0xff: a NaN in fp32, bf16 and fp16), so an
 * element an op leaves unwritten fails the comparison; "+=" outputs start
 * from the same random, non-zero values on both. Device memory is reached
 * only through uploads and downloads that the test waits for.
 *
 * Bounds (a = cuda, b = cpu-ref):
 *   fp32 outputs (fp32 compute, and every fp32 result of a 16-bit compute
 *   type: gradients of parameters, LayerNorm and softmax statistics, lse,
 *   losses, AdamW state): ||a - b|| / ||b|| <= 1e-5 and max|a - b| <=
 *   1e-5 max|b|. Both sides read the same inputs and differ only in the
 *   order (and width) of their accumulations: fp32 sums of up to K terms in
 *   another order against double sums, ~sqrt(K) 2^-24 ~ 1e-6 for the K <= 1024
 *   here (test_kernels.c measures <= 2e-6 for the cpu backend; the GPU's
 *   reduction trees and split-K GEMMs get 5x more room). A TF32 GEMM (10-bit
 *   mantissa, ~5e-4) or a missing term fails it by far.
 *   bf16 / fp16 outputs: the contract rounds each output to dt once, so the
 *   two sides differ only where their unrounded fp32 / double values straddle
 *   a rounding boundary: tests/compare.h's rule (worst element 1 ulp of the
 *   type + 1e-5 max|ref|; at most 2 + n/32 elements off by more than the
 *   slack; norm-wise u/8, u = 2^-8 bf16, 2^-11 fp16 the unit roundoff, and
 *   u for n < 256). A truncation, a double rounding or an intermediate
 *   rounded to dt moves about half the elements and fails.
 *   Attention bf16 / fp16 outputs (out, dqkv) get a bound of their own,
 *   since flash-attention kernels on tensor cores (cuDNN's, and ours if
 *   they use mma) round the probabilities P (for out = P V and dV = P^T dO)
 *   and dS = P o (dP - D) (for dQ, dK) to dt before the second product: one
 *   more rounding, of relative size <= u per term. It moves the unrounded
 *   value by a good fraction of u, so a third or more of the elements come
 *   out one ulp off, and the cancellation in small outputs (dS rows sum to
 *   zero) lets a few move further. A host simulation of exactly those
 *   roundings on this test's shapes and inputs gives norm-wise <= 0.69 u and
 *   every element within 1 ulp(ref) + 0.51 u max|ref| (bf16 and fp16 alike).
 *   Bounds: norm-wise <= ATTN_NORM u = 1.5 u, every element within 1
 *   ulp(ref) + ATTN_ELEM u max|ref| = 1.5 u max|ref| (bf16: 0.6% of the
 *   largest). A wrong scale, a missing causal mask, a wrong lse or a row of
 *   another head is off by O(1). Whether the kernels also meet compare.h's
 *   round-once rule is printed as a diagnostic.
 *   lse (fp32): |a - b| <= 1e-5 max(1, |b|) per element.
 *   Casts, the compute copy of AdamW, embedding rows copied without wpe,
 *   padding columns, outputs that must stay untouched (the heads rope does
 *   not rotate, the rows of the experts' buffers that no pair names),
 *   aliased calls against unaliased ones, the int32 results of the
 *   mixture-of-experts ops (sel, pos, load, kept) and their permutation (a
 *   bit copy): bit for bit.
 *   AdamW: p, m, v by the fp32 rule; the update p' - p norm-wise within
 *   1e-3 (p' is rounded to fp32, an ulp of |p| <= 1 is 6e-8 against an
 *   update of ~lr = 1e-3).
 *   sum_add / sumsq_add: |a - b| <= 1e-10 |b| (double sums in another
 *   order: the worst case of n = 3e6 terms is about n eps = 3e-10, the
 *   measured gap in a CPU emulation of the kernel 5e-13; a float
 *   accumulator anywhere would be off by ~1e-7); NaN in, NaN out.
 *   Determinism (embedding_backward, layernorm_backward, rmsnorm_backward,
 *   attention forward and backward, sum_add, every mixture-of-experts op):
 *   the same call twice gives the same bits; the embedding's dwte rows, and
 *   the k pairs of moe_permute_backward and moe_combine, are summed in the
 *   contract's order (checked bit for bit on values where any other order
 *   gives another result).
 *   Unaligned addresses (casts one element past an aligned address, sums of
 *   the same values at offsets of 0..3 floats: the same bits, as the order
 *   is fixed by n) run last, on a backend of their own, since a faulting
 *   access can end the process's device context for every later check.
 *
 * Attention runs under the backend's default implementation and, for
 * "cuda", again with GT_CUDA_ATTENTION=own and =cudnn set before creating
 * the backend (cuDNN falls back to our kernels for fp32 and where no engine
 * fits; grouped-query shapes, Hkv < H, run on cuDNN, and are counted as
 * such, only where the backend sends them there: compute capability 9.x,
 * gt_cuda_attention_stats.cudnn_gqa). The reference results are computed
 * once.
 *
 * Skips (exit 77, one line "1..0 # SKIP ...") only when creating "cuda"
 * fails because the build has no CUDA or no GPU is visible; any other
 * failure to create it, and any mismatch, fails. GT_GPU_TEST_BACKEND=cpu
 * (or cpu-async, cpu-guard) runs every check against that backend instead,
 * to check this test itself where there is no GPU.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <float.h>
#include <stdio.h>

#include "../compare.h"
#include "../test_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/cuda_info.h"

#define TOL32 1e-5
#define LSE_TOL 1e-5
#define SUM_TOL 1e-10
#define UPD_TOL 1e-3
#define ATTN_NORM 1.5
#define ATTN_ELEM 1.5

static gt_backend *gpu, *ref;
static const char *gpu_name = "cuda";
static const gt_dtype all_dt[3] = {GT_F32, GT_BF16, GT_F16};

static size_t es(gt_dtype t) { return gt_dtype_size(t); }

/* The "cuda" under test is the kernel emulator's (tests/gpu/test_cuda_emu:
 * this file built over tests/gpu/emu), not a GPU. */
static bool emulated(void)
{
#ifdef GT_CUDA_EMU
  return strcmp(gpu_name, "cuda") == 0;
#else
  return false;
#endif
}

__attribute__((noreturn)) static void fatal(const char *what, gt_backend *be)
{
  tap_bail("%s [%s]: %s", what, be ? be->name : "", gt_error_message());
  exit(1);
}

static void *xmalloc(size_t bytes)
{
  void *p = malloc(bytes ? bytes : 1);
  if (!p)
    abort();
  return p;
}

// ---- device memory, through the table only ------------------------------------------------

static void dev_put(gt_backend *be, void *dev, const void *host, size_t bytes)
{
  if (bytes && tu_upload(be, dev, host, bytes) != GT_SUCCESS)
    fatal("upload", be);
}

static void dev_get(gt_backend *be, void *host, const void *dev, size_t bytes)
{
  if (bytes && tu_download(be, host, dev, bytes) != GT_SUCCESS)
    fatal("download", be);
}

/* Every buffer has GUARD bytes before and after it, filled with a byte of
 * its own; dev_free checks that no op wrote there (a tail loop one element
 * too far, a vector store past the end), which no comparison of the buffer
 * itself would see. The byte differs from buffer to buffer, so that an op
 * that reads past the end of its input and writes what it read (or gelu of
 * a large value, which is the value) past the end of its output still
 * changes the output's guard. 256 keeps the buffer 256-byte aligned. */
#define GUARD 256
static long guard_hits, guards_checked, guard_serial;

typedef struct {
  void *user;
  size_t bytes;
  unsigned char byte;
} guarded;
static guarded *live;
static size_t nlive, live_cap;

static void *dev_alloc(gt_backend *be, size_t bytes)
{
  void *p = NULL;
  if (be->ops->alloc(be, bytes + 2 * GUARD, &p) != GT_SUCCESS)
    fatal("alloc", be);
  unsigned char g[GUARD];
  const unsigned char byte = (unsigned char)(0x11 + 37 * (guard_serial++ % 6)); /* 6 kinds */
  memset(g, byte, sizeof g);
  char *user = (char *)p + GUARD;
  dev_put(be, p, g, GUARD);
  dev_put(be, user + bytes, g, GUARD);
  if (nlive == live_cap) {
    live_cap = live_cap ? 2 * live_cap : 64;
    live = realloc(live, live_cap * sizeof *live);
    if (!live)
      abort();
  }
  live[nlive++] = (guarded){user, bytes, byte};
  return user;
}

static void dev_free(gt_backend *be, void *p)
{
  if (!p)
    return;
  size_t i = 0;
  while (i < nlive && live[i].user != p)
    i++;
  if (i == nlive) {
    tap_bail("dev_free of %p, which dev_alloc did not return", p);
    exit(1);
  }
  const size_t bytes = live[i].bytes;
  const unsigned char byte = live[i].byte;
  live[i] = live[--nlive];
  unsigned char before[GUARD], after[GUARD];
  char *base = (char *)p - GUARD;
  dev_get(be, before, base, GUARD);
  dev_get(be, after, (char *)p + bytes, GUARD);
  guards_checked++;
  for (int k = 0; k < GUARD; k++)
    if (before[k] != byte || after[k] != byte) {
      if (guard_hits++ < 10)
        tap_diag("a buffer of %zu bytes on %s: a write %s it (byte %d of the guard)", bytes,
                 be->name, before[k] != byte ? "before" : "past the end of",
                 before[k] != byte ? k - GUARD : k);
      break;
    }
  if (be->ops->free(be, base) != GT_SUCCESS)
    fatal("free", be);
}

static void *dev_fetch(gt_backend *be, const void *dev, size_t bytes)
{
  void *h = xmalloc(bytes);
  dev_get(be, h, dev, bytes);
  return h;
}

/* All bytes 0xff: NaN in fp32, bf16 and fp16. */
static void dev_poison(gt_backend *be, void *dev, size_t bytes)
{
  void *h = xmalloc(bytes);
  memset(h, 0xff, bytes);
  dev_put(be, dev, h, bytes);
  free(h);
}

/* The same buffer on both backends. */
typedef struct {
  void *g, *r;
  size_t bytes;
} twin;

static twin tw_new(size_t bytes) /* poisoned */
{
  twin t = {dev_alloc(gpu, bytes), dev_alloc(ref, bytes), bytes};
  dev_poison(gpu, t.g, bytes);
  dev_poison(ref, t.r, bytes);
  return t;
}

static void tw_put(twin t, const void *host)
{
  dev_put(gpu, t.g, host, t.bytes);
  dev_put(ref, t.r, host, t.bytes);
}

static void tw_poison(twin t)
{
  dev_poison(gpu, t.g, t.bytes);
  dev_poison(ref, t.r, t.bytes);
}

static twin tw_from(const void *host, size_t bytes)
{
  twin t = {dev_alloc(gpu, bytes), dev_alloc(ref, bytes), bytes};
  tw_put(t, host);
  return t;
}

static void tw_free(twin *t)
{
  dev_free(gpu, t->g);
  dev_free(ref, t->r);
  t->g = t->r = NULL;
}

/* Element offsets into a twin's device memory. */
static void *at_g(twin t, gt_dtype dt, size_t i) { return (char *)t.g + i * es(dt); }

// ---- calls --------------------------------------------------------------------------------

#define RUN(be, op, ...) tu_call_ok((be), (be)->ops->op((be), __VA_ARGS__), #op)

// ---- values ---------------------------------------------------------------------------------

static float dec(gt_dtype t, const void *p, size_t i)
{
  switch (t) {
  case GT_BF16: {
    const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
  }
  case GT_F16: {
    _Float16 v;
    memcpy(&v, (const uint16_t *)p + i, sizeof v);
    return (float)v;
  }
  default: return ((const float *)p)[i];
  }
}

static float *decode(gt_dtype t, const void *p, size_t n)
{
  float *x = tu_alloc(n);
  for (size_t i = 0; i < n; i++)
    x[i] = dec(t, p, i);
  return x;
}

/* x (n fp32) as bytes of dt, converted by cpu-ref's cast. */
static void *to_dt(gt_dtype dt, const float *x, size_t n)
{
  void *out = xmalloc(n * es(dt));
  if (dt == GT_F32 || n == 0) {
    memcpy(out, x, n * es(dt));
    return out;
  }
  void *src = dev_alloc(ref, n * sizeof(float)), *dst = dev_alloc(ref, n * es(dt));
  dev_put(ref, src, x, n * sizeof(float));
  if (!RUN(ref, cast, dt, dst, GT_F32, src, n))
    fatal("cpu-ref cast of the inputs", ref);
  dev_get(ref, out, dst, n * es(dt));
  dev_free(ref, src);
  dev_free(ref, dst);
  return out;
}

/* n random values of dt in [lo, hi) as host bytes. */
static void *rand_dt(gt_dtype dt, size_t n, uint64_t seed, float lo, float hi)
{
  float *x = tu_alloc(n);
  tu_fill(x, n, seed, lo, hi);
  void *p = to_dt(dt, x, n);
  free(x);
  return p;
}

/* The same n random values of dt on both backends. */
static twin tw_rand(gt_dtype dt, size_t n, uint64_t seed, float lo, float hi)
{
  void *h = rand_dt(dt, n, seed, lo, hi);
  twin t = tw_from(h, n * es(dt));
  free(h);
  return t;
}

// ---- comparisons ----------------------------------------------------------------------------

/* fp32 rule: norm-wise and max-abs relative error <= TOL32, all finite. */
static bool check32(const char *what, const float *a, const float *b, size_t n)
{
  double num = 0, den = 0, dmax = 0, bmax = 0;
  size_t at = 0, bad_at = 0;
  bool finite = true;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i]) || !isfinite(b[i])) {
      if (finite)
        bad_at = i;
      finite = false;
      continue;
    }
    const double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
    if (fabs(d) > dmax) {
      dmax = fabs(d);
      at = i;
    }
    bmax = fmax(bmax, fabs(b[i]));
  }
  const double rel = sqrt(num) / fmax(sqrt(den), 1e-30), mx = dmax / fmax(bmax, 1e-30);
  const bool ok = finite && rel <= TOL32 && mx <= TOL32;
  if (!tap_ok(ok, "%s (rel err %.2e, max err %.2e of max|ref|)", what, rel, mx)) {
    if (!finite)
      tap_diag("%s: element %zu not finite: %.9g vs %.9g", what, bad_at, a[bad_at], b[bad_at]);
    else
      tap_diag("%s: element %zu: %.9g vs %.9g; bound %.0e norm-wise and of max|ref| %.3g",
               what, at, a[at], b[at], TOL32, bmax);
  }
  return ok;
}

/* n decoded values of type t: fp32 rule or compare.h's round-once rule. */
static bool check_vals(gt_dtype t, const char *what, const float *a, const float *b, size_t n)
{
  return t == GT_F32 ? check32(what, a, b, n) : tu_check_close(t, what, a, b, n, false);
}

/* Two host arrays of type t. */
static bool check_bytes(gt_dtype t, const char *what, const void *a, const void *b, size_t n)
{
  float *x = decode(t, a, n), *y = decode(t, b, n);
  const bool ok = check_vals(t, what, x, y, n);
  free(x), free(y);
  return ok;
}

/* The first n elements of twin x (type t), cuda against cpu-ref. */
static bool check_tw(gt_dtype t, const char *what, twin x, size_t n)
{
  void *a = dev_fetch(gpu, x.g, n * es(t)), *b = dev_fetch(ref, x.r, n * es(t));
  const bool ok = check_bytes(t, what, a, b, n);
  free(a), free(b);
  return ok;
}

/* The gpu side of x equals host bytes bit for bit. */
static bool gpu_equals(twin x, const void *host, size_t bytes)
{
  void *a = dev_fetch(gpu, x.g, bytes);
  const bool same = memcmp(a, host, bytes) == 0;
  free(a);
  return same;
}

// ---- casts ------------------------------------------------------------------------------------

static bool is_nan_at(gt_dtype t, const void *p, size_t i)
{
  if (t == GT_F32)
    return isnan(((const float *)p)[i]);
  const uint16_t h = ((const uint16_t *)p)[i] & 0x7fff;
  return h > (t == GT_BF16 ? 0x7f80 : 0x7c00);
}

/* Bit for bit, NaN for NaN; index of the first difference in *bad. */
static bool same_or_nan(gt_dtype t, const void *a, const void *b, size_t n, size_t *bad)
{
  for (size_t i = 0; i < n; i++) {
    const bool na = is_nan_at(t, a, i), nb = is_nan_at(t, b, i);
    if (na != nb || (!na && memcmp((const char *)a + i * es(t), (const char *)b + i * es(t),
                                   es(t)) != 0)) {
      *bad = i;
      return false;
    }
  }
  return true;
}

static uint32_t bits_at(gt_dtype t, const void *p, size_t i)
{
  if (t == GT_F32) {
    uint32_t u;
    memcpy(&u, (const float *)p + i, 4);
    return u;
  }
  return ((const uint16_t *)p)[i];
}

/* src (n of st) cast to dt on both: the same bits. */
static void cast_case(gt_dtype dt, gt_dtype st, const void *src, size_t n, const char *label)
{
  twin s = tw_from(src, n * es(st)), d = tw_new(n * es(dt));
  RUN(gpu, cast, dt, d.g, st, s.g, n);
  RUN(ref, cast, dt, d.r, st, s.r, n);
  void *a = dev_fetch(gpu, d.g, n * es(dt)), *b = dev_fetch(ref, d.r, n * es(dt));
  size_t bad = 0;
  if (!tap_ok(same_or_nan(dt, a, b, n, &bad), "cast %s -> %s, %zu %s: bit for bit",
              gt_dtype_name(st), gt_dtype_name(dt), n, label))
    tap_diag("element %zu: source %#x, cuda %#x, cpu-ref %#x", bad, bits_at(st, src, bad),
             bits_at(dt, a, bad), bits_at(dt, b, bad));
  free(a), free(b);
  tw_free(&s), tw_free(&d);
}

/* The slice [1, n-1) of src cast into [1, n-1) of a poisoned output (both
 * one element past an aligned address): cpu-ref's bits inside, the two
 * ends left alone (no element written past the n asked for). */
static void cast_slice_case(gt_dtype dt, gt_dtype st, const void *src, size_t n)
{
  twin s = tw_from(src, n * es(st)), d = tw_new(n * es(dt));
  RUN(gpu, cast, dt, at_g(d, dt, 1), st, at_g(s, st, 1), n - 2);
  RUN(ref, cast, dt, d.r, st, s.r, n);
  void *c = dev_fetch(gpu, d.g, n * es(dt)), *b = dev_fetch(ref, d.r, n * es(dt));
  size_t bad = 0;
  const bool inside = same_or_nan(dt, (char *)c + es(dt), (char *)b + es(dt), n - 2, &bad);
  const unsigned char ff[4] = {0xff, 0xff, 0xff, 0xff};
  const bool ends = !memcmp(c, ff, es(dt)) && !memcmp((char *)c + (n - 1) * es(dt), ff, es(dt));
  tap_ok(inside && ends,
         "cast %s -> %s of elements [1, %zu) at unaligned addresses: the same bits, the ends "
         "untouched",
         gt_dtype_name(st), gt_dtype_name(dt), n - 1);
  free(c), free(b);
  tw_free(&s), tw_free(&d);
}

/* fp32 sources for the casts: the specials x[0..ns) and random values over
 * exponents -40..20 (both formats' subnormals, fp16 overflow). */
static float *cast_sources(const float *x, size_t ns, size_t nr)
{
  float *r = tu_alloc(ns + nr), *u = tu_alloc(nr);
  memcpy(r, x, ns * sizeof(float));
  tu_fill(u, nr, 43, -1, 1);
  tu_fill(r + ns, nr, 44, -40, 20);
  for (size_t i = 0; i < nr; i++)
    r[ns + i] = (u[i] < 0 ? -1.0f : 1.0f) * (1.0f + fabsf(u[i])) * exp2f(roundf(r[ns + i]));
  free(u);
  return r;
}

static uint16_t *all_patterns(void)
{
  uint16_t *pat = xmalloc(65536 * 2);
  for (size_t i = 0; i < 65536; i++)
    pat[i] = (uint16_t)i;
  return pat;
}

static void test_cast(void)
{
  /* special values with their expected patterns (tu_cast_cases) */
  const tu_cast_case *sp;
  const size_t ns = tu_cast_cases(&sp);
  float *x = tu_alloc(ns);
  uint16_t *wb = xmalloc(ns * 2), *wh = xmalloc(ns * 2);
  for (size_t i = 0; i < ns; i++) {
    x[i] = sp[i].x;
    wb[i] = sp[i].bf16;
    wh[i] = sp[i].f16;
  }
  twin s = tw_from(x, ns * 4), d = tw_new(ns * 2);
  const gt_dtype h16[2] = {GT_BF16, GT_F16};
  for (int k = 0; k < 2; k++) {
    tw_poison(d);
    RUN(gpu, cast, h16[k], d.g, GT_F32, s.g, ns);
    void *a = dev_fetch(gpu, d.g, ns * 2);
    size_t bad = 0;
    if (!tap_ok(same_or_nan(h16[k], a, k ? (void *)wh : (void *)wb, ns, &bad),
                "cast fp32 -> %s: zeros, NaN, inf, overflow to inf (65520 for fp16), ties to "
                "even, subnormals: the expected patterns",
                gt_dtype_name(h16[k])))
      tap_diag("%a: cuda %#x, expected %#x", x[bad], ((uint16_t *)a)[bad],
               k ? wh[bad] : wb[bad]);
    free(a);
  }
  tw_free(&s), tw_free(&d);

  /* fp32 sources: the specials and random values; 16-bit sources: every
   * pattern */
  const size_t nr = 100003, n32 = ns + nr;
  float *r = cast_sources(x, ns, nr);
  for (int k = 0; k < 3; k++)
    cast_case(all_dt[k], GT_F32, r, n32, "specials and random values");
  uint16_t *pat = all_patterns();
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 3; k++)
      cast_case(all_dt[k], h16[j], pat, 65536, "patterns (all)");
  free(x), free(wb), free(wh), free(r), free(pat);
}

// ---- dense algebra ----------------------------------------------------------------------------

static void test_linear(gt_dtype dt, int64_t N, int64_t C, int64_t OC)
{
  if (emulated()) { /* cuBLASLt is not emulated: the linear ops are cpu-ref's there */
    static bool said;
    if (!said)
      tap_diag("linear_forward / linear_backward: left out under the CUDA emulator, which "
               "runs cpu-ref's loops in place of cuBLASLt");
    said = true;
    return;
  }
  const size_t nin = (size_t)(N * C), nw = (size_t)(OC * C), nout = (size_t)(N * OC);
  const uint64_t sd = (uint64_t)(N * 7 + C * 3 + OC) * 10;
  twin in = tw_rand(dt, nin, sd + 1, -1, 1), w = tw_rand(dt, nw, sd + 2, -0.5f, 0.5f);
  twin b = tw_rand(dt, (size_t)OC, sd + 3, -1, 1), res = tw_rand(dt, nout, sd + 4, -1, 1);
  twin dout = tw_rand(dt, nout, sd + 5, -1, 1), out = tw_new(nout * es(dt));
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "N=%lld C=%lld OC=%lld [%s]", (long long)N, (long long)C,
           (long long)OC, gt_dtype_name(dt));
  for (int bias = 0; bias < 2; bias++)
    for (int r = 0; r < 2; r++) {
      tw_poison(out);
      RUN(gpu, linear_forward, dt, out.g, in.g, w.g, bias ? b.g : NULL, r ? res.g : NULL, N, C,
          OC);
      RUN(ref, linear_forward, dt, out.r, in.r, w.r, bias ? b.r : NULL, r ? res.r : NULL, N, C,
          OC);
      snprintf(what, sizeof what, "linear forward bias=%d residual=%d %s", bias, r, tag);
      check_tw(dt, what, out, nout);
    }
  float *dw0 = tu_alloc(nw), *db0 = tu_alloc((size_t)OC);
  tu_fill(dw0, nw, sd + 6, -1, 1);
  tu_fill(db0, (size_t)OC, sd + 7, -1, 1);
  twin din = tw_new(nin * es(dt)), dw = tw_from(dw0, nw * 4), db = tw_from(db0, (size_t)OC * 4);
  for (int with_din = 0; with_din < 2; with_din++)
    for (int with_db = 0; with_db < 2; with_db++) {
      tw_poison(din);
      tw_put(dw, dw0);
      tw_put(db, db0);
      RUN(gpu, linear_backward, dt, with_din ? din.g : NULL, dw.g, with_db ? db.g : NULL, dout.g,
          in.g, w.g, N, C, OC);
      RUN(ref, linear_backward, dt, with_din ? din.r : NULL, dw.r, with_db ? db.r : NULL, dout.r,
          in.r, w.r, N, C, OC);
      if (with_din) {
        snprintf(what, sizeof what, "linear backward din (=) dbias=%s %s",
                 with_db ? "on" : "NULL", tag);
        check_tw(dt, what, din, nin);
      }
      snprintf(what, sizeof what, "linear backward dw (+= onto random, fp32) din=%s dbias=%s %s",
               with_din ? "on" : "NULL", with_db ? "on" : "NULL", tag);
      check_tw(GT_F32, what, dw, nw);
      if (with_db) {
        snprintf(what, sizeof what, "linear backward dbias (+= onto random, fp32) din=%s %s",
                 with_din ? "on" : "NULL", tag);
        check_tw(GT_F32, what, db, (size_t)OC);
      }
    }
  free(dw0), free(db0);
  tw_free(&in), tw_free(&w), tw_free(&b), tw_free(&res), tw_free(&dout), tw_free(&out);
  tw_free(&din), tw_free(&dw), tw_free(&db);
}

// ---- normalisation and activations --------------------------------------------------------------

static void test_layernorm(gt_dtype dt, int64_t N, int64_t C)
{
  const size_t nc = (size_t)(N * C), cs = (size_t)C, ns = (size_t)N;
  const uint64_t sd = (uint64_t)(N * 13 + C) * 10;
  twin x = tw_rand(dt, nc, sd + 1, -2, 3), w = tw_rand(dt, cs, sd + 2, 0.5f, 1.5f);
  twin b = tw_rand(dt, cs, sd + 3, -1, 1), dy = tw_rand(dt, nc, sd + 4, -1, 1);
  twin y = tw_new(nc * es(dt)), mean = tw_new(ns * 4), rstd = tw_new(ns * 4);
  char what[160], tag[64];
  snprintf(tag, sizeof tag, "N=%lld C=%lld [%s]", (long long)N, (long long)C, gt_dtype_name(dt));
  RUN(gpu, layernorm_forward, dt, y.g, mean.g, rstd.g, x.g, w.g, b.g, N, C);
  RUN(ref, layernorm_forward, dt, y.r, mean.r, rstd.r, x.r, w.r, b.r, N, C);
  snprintf(what, sizeof what, "layernorm forward out %s", tag);
  check_tw(dt, what, y, nc);
  snprintf(what, sizeof what, "layernorm forward mean (fp32) %s", tag);
  check_tw(GT_F32, what, mean, ns);
  snprintf(what, sizeof what, "layernorm forward rstd (fp32) %s", tag);
  check_tw(GT_F32, what, rstd, ns);

  /* backward: both from cpu-ref's statistics; din, dw, db "+=" onto random */
  float *mr = dev_fetch(ref, mean.r, ns * 4), *rr = dev_fetch(ref, rstd.r, ns * 4);
  dev_put(gpu, mean.g, mr, ns * 4);
  dev_put(gpu, rstd.g, rr, ns * 4);
  void *dx0 = rand_dt(dt, nc, sd + 5, -1, 1);
  float *dw0 = tu_alloc(cs), *db0 = tu_alloc(cs);
  tu_fill(dw0, cs, sd + 6, -1, 1);
  tu_fill(db0, cs, sd + 7, -1, 1);
  twin dx = tw_from(dx0, nc * es(dt)), dw = tw_from(dw0, cs * 4), db = tw_from(db0, cs * 4);
  RUN(gpu, layernorm_backward, dt, dx.g, dw.g, db.g, dy.g, x.g, w.g, mean.g, rstd.g, N, C);
  RUN(ref, layernorm_backward, dt, dx.r, dw.r, db.r, dy.r, x.r, w.r, mean.r, rstd.r, N, C);
  snprintf(what, sizeof what, "layernorm backward din (+= onto random) %s", tag);
  check_tw(dt, what, dx, nc);
  snprintf(what, sizeof what, "layernorm backward dw (+= onto random, fp32) %s", tag);
  check_tw(GT_F32, what, dw, cs);
  snprintf(what, sizeof what, "layernorm backward db (+= onto random, fp32) %s", tag);
  check_tw(GT_F32, what, db, cs);

  /* din aliasing dout (the residual gradient of a pre-LN block): din =
   * dout + the input gradient. Against cpu-ref aliased, and bit for bit the
   * cuda result of the same values unaliased (din a copy of dout). */
  void *dyh = dev_fetch(ref, dy.r, nc * es(dt));
  twin al = tw_from(dyh, nc * es(dt)), aw = tw_from(dw0, cs * 4), ab = tw_from(db0, cs * 4);
  RUN(gpu, layernorm_backward, dt, al.g, aw.g, ab.g, al.g, x.g, w.g, mean.g, rstd.g, N, C);
  RUN(ref, layernorm_backward, dt, al.r, aw.r, ab.r, al.r, x.r, w.r, mean.r, rstd.r, N, C);
  snprintf(what, sizeof what, "layernorm backward din aliasing dout %s", tag);
  check_tw(dt, what, al, nc);
  snprintf(what, sizeof what, "layernorm backward dw with din aliasing dout (fp32) %s", tag);
  check_tw(GT_F32, what, aw, cs);
  snprintf(what, sizeof what, "layernorm backward db with din aliasing dout (fp32) %s", tag);
  check_tw(GT_F32, what, ab, cs);
  void *ua = dev_alloc(gpu, nc * es(dt));
  float *uw = dev_alloc(gpu, cs * 4), *ub = dev_alloc(gpu, cs * 4);
  dev_put(gpu, ua, dyh, nc * es(dt));
  dev_put(gpu, uw, dw0, cs * 4);
  dev_put(gpu, ub, db0, cs * 4);
  RUN(gpu, layernorm_backward, dt, ua, uw, ub, dy.g, x.g, w.g, mean.g, rstd.g, N, C);
  void *h1 = dev_fetch(gpu, ua, nc * es(dt)), *h2 = dev_fetch(gpu, uw, cs * 4);
  void *h3 = dev_fetch(gpu, ub, cs * 4);
  tap_ok(gpu_equals(al, h1, nc * es(dt)) && gpu_equals(aw, h2, cs * 4) &&
             gpu_equals(ab, h3, cs * 4),
         "layernorm backward with din aliasing dout: the same bits as unaliased %s", tag);
  free(h1), free(h2), free(h3), free(mr), free(rr), free(dx0), free(dw0), free(db0), free(dyh);
  dev_free(gpu, ua), dev_free(gpu, uw), dev_free(gpu, ub);
  tw_free(&x), tw_free(&w), tw_free(&b), tw_free(&dy), tw_free(&y), tw_free(&mean);
  tw_free(&rstd), tw_free(&dx), tw_free(&dw), tw_free(&db), tw_free(&al), tw_free(&aw);
  tw_free(&ab);
}

static void test_gelu(gt_dtype dt, size_t n)
{
  twin x = tw_rand(dt, n, 17 + n, -12, 12); /* both saturated ends and the middle */
  twin dy = tw_rand(dt, n, 18 + n, -1, 1), y = tw_new(n * es(dt)), dx = tw_new(n * es(dt));
  char what[96];
  RUN(gpu, gelu_forward, dt, y.g, x.g, n);
  RUN(ref, gelu_forward, dt, y.r, x.r, n);
  snprintf(what, sizeof what, "gelu forward n=%zu [%s]", n, gt_dtype_name(dt));
  check_tw(dt, what, y, n);
  RUN(gpu, gelu_backward, dt, dx.g, x.g, dy.g, n);
  RUN(ref, gelu_backward, dt, dx.r, x.r, dy.r, n);
  snprintf(what, sizeof what, "gelu backward n=%zu [%s]", n, gt_dtype_name(dt));
  check_tw(dt, what, dx, n);
  /* din aliasing dout */
  void *dyh = dev_fetch(ref, dy.r, n * es(dt)), *want = dev_fetch(gpu, dx.g, n * es(dt));
  twin al = tw_from(dyh, n * es(dt));
  RUN(gpu, gelu_backward, dt, al.g, x.g, al.g, n);
  RUN(ref, gelu_backward, dt, al.r, x.r, al.r, n);
  snprintf(what, sizeof what, "gelu backward din aliasing dout n=%zu [%s]", n,
           gt_dtype_name(dt));
  check_tw(dt, what, al, n);
  tap_ok(gpu_equals(al, want, n * es(dt)),
         "gelu backward din aliasing dout n=%zu [%s]: the same bits as unaliased", n,
         gt_dtype_name(dt));
  free(dyh), free(want);
  tw_free(&x), tw_free(&dy), tw_free(&y), tw_free(&dx), tw_free(&al);
}

// ---- the Llama block: RMSNorm, rotary positions, SwiGLU --------------------------------------

static void test_rmsnorm(gt_dtype dt, int64_t N, int64_t C, float eps)
{
  const size_t nc = (size_t)(N * C), cs = (size_t)C, ns = (size_t)N;
  const uint64_t sd = (uint64_t)(N * 17 + C) * 10 + 3;
  twin x = tw_rand(dt, nc, sd + 1, -2, 3), w = tw_rand(dt, cs, sd + 2, 0.5f, 1.5f);
  twin dy = tw_rand(dt, nc, sd + 3, -1, 1), y = tw_new(nc * es(dt)), rstd = tw_new(ns * 4);
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "N=%lld C=%lld eps=%g [%s]", (long long)N, (long long)C, eps,
           gt_dtype_name(dt));
  RUN(gpu, rmsnorm_forward, dt, y.g, rstd.g, x.g, w.g, eps, N, C);
  RUN(ref, rmsnorm_forward, dt, y.r, rstd.r, x.r, w.r, eps, N, C);
  snprintf(what, sizeof what, "rmsnorm forward out %s", tag);
  check_tw(dt, what, y, nc);
  snprintf(what, sizeof what, "rmsnorm forward rstd (fp32) %s", tag);
  check_tw(GT_F32, what, rstd, ns);

  /* backward: both from cpu-ref's rstd; din, dw "+=" onto random */
  float *rr = dev_fetch(ref, rstd.r, ns * 4);
  dev_put(gpu, rstd.g, rr, ns * 4);
  void *dx0 = rand_dt(dt, nc, sd + 4, -1, 1);
  float *dw0 = tu_alloc(cs);
  tu_fill(dw0, cs, sd + 5, -1, 1);
  twin dx = tw_from(dx0, nc * es(dt)), dw = tw_from(dw0, cs * 4);
  RUN(gpu, rmsnorm_backward, dt, dx.g, dw.g, dy.g, x.g, w.g, rstd.g, N, C);
  RUN(ref, rmsnorm_backward, dt, dx.r, dw.r, dy.r, x.r, w.r, rstd.r, N, C);
  snprintf(what, sizeof what, "rmsnorm backward din (+= onto random) %s", tag);
  check_tw(dt, what, dx, nc);
  snprintf(what, sizeof what, "rmsnorm backward dw (+= onto random, fp32) %s", tag);
  check_tw(GT_F32, what, dw, cs);
  /* again from the same start: the same bits (dw sums in a fixed order) */
  void *h1 = dev_fetch(gpu, dx.g, nc * es(dt)), *h2 = dev_fetch(gpu, dw.g, cs * 4);
  dev_put(gpu, dx.g, dx0, nc * es(dt));
  dev_put(gpu, dw.g, dw0, cs * 4);
  RUN(gpu, rmsnorm_backward, dt, dx.g, dw.g, dy.g, x.g, w.g, rstd.g, N, C);
  tap_ok(gpu_equals(dx, h1, nc * es(dt)) && gpu_equals(dw, h2, cs * 4),
         "rmsnorm backward twice: the same bits %s", tag);

  /* din aliasing dout (the residual gradient of a pre-norm block): against
   * cpu-ref aliased, and the same bits as the unaliased call (h1, h2) */
  void *dyh = dev_fetch(ref, dy.r, nc * es(dt));
  twin al = tw_from(dyh, nc * es(dt)), aw = tw_from(dw0, cs * 4);
  void *ua = dev_alloc(gpu, nc * es(dt));
  float *uw = dev_alloc(gpu, cs * 4);
  dev_put(gpu, ua, dyh, nc * es(dt));
  dev_put(gpu, uw, dw0, cs * 4);
  RUN(gpu, rmsnorm_backward, dt, al.g, aw.g, al.g, x.g, w.g, rstd.g, N, C);
  RUN(ref, rmsnorm_backward, dt, al.r, aw.r, al.r, x.r, w.r, rstd.r, N, C);
  RUN(gpu, rmsnorm_backward, dt, ua, uw, dy.g, x.g, w.g, rstd.g, N, C);
  snprintf(what, sizeof what, "rmsnorm backward din aliasing dout %s", tag);
  check_tw(dt, what, al, nc);
  snprintf(what, sizeof what, "rmsnorm backward dw with din aliasing dout (fp32) %s", tag);
  check_tw(GT_F32, what, aw, cs);
  void *u1 = dev_fetch(gpu, ua, nc * es(dt)), *u2 = dev_fetch(gpu, uw, cs * 4);
  tap_ok(gpu_equals(al, u1, nc * es(dt)) && gpu_equals(aw, u2, cs * 4),
         "rmsnorm backward with din aliasing dout: the same bits as unaliased %s", tag);
  free(rr), free(dx0), free(dw0), free(h1), free(h2), free(dyh), free(u1), free(u2);
  dev_free(gpu, ua), dev_free(gpu, uw);
  tw_free(&x), tw_free(&w), tw_free(&dy), tw_free(&y), tw_free(&rstd), tw_free(&dx);
  tw_free(&dw), tw_free(&al), tw_free(&aw);
}

/* Heads [nrot, S) of every token of the gpu side of t (B*T rows): the
 * bits of host. */
static bool rope_rest_same(gt_dtype dt, twin t, const void *host, int64_t NT, int64_t S,
                           int64_t nrot, int64_t hs)
{
  unsigned char *a = dev_fetch(gpu, t.g, t.bytes);
  const size_t row = (size_t)(S * hs) * es(dt), skip = (size_t)(nrot * hs) * es(dt);
  bool same = true;
  for (int64_t r = 0; r < NT && same; r++)
    same = !memcmp(a + (size_t)r * row + skip, (const char *)host + (size_t)r * row + skip,
                   row - skip);
  free(a);
  return same;
}

static void test_rope(gt_dtype dt, int64_t B, int64_t T, int64_t S, int64_t nrot, int64_t hs,
                      int64_t pos0)
{
  const int64_t max_pos = pos0 + T + 2;
  const size_t n = (size_t)(B * T * S * hs), nt = (size_t)(max_pos * (hs / 2));
  const uint64_t sd = (uint64_t)(B * 1009 + T * 101 + S * 11 + hs) * 10 + (uint64_t)pos0;
  float *ang = tu_alloc(nt), *cs = tu_alloc(nt), *sn = tu_alloc(nt);
  tu_fill(ang, nt, sd, -4, 4);
  for (size_t i = 0; i < nt; i++) {
    cs[i] = cosf(ang[i]);
    sn[i] = sinf(ang[i]);
  }
  twin tc = tw_from(cs, nt * 4), ts = tw_from(sn, nt * 4);
  void *xh = rand_dt(dt, n, sd + 1, -2, 2);
  twin x = tw_from(xh, n * es(dt));
  char what[192], tag[112];
  snprintf(tag, sizeof tag, "B=%lld T=%lld S=%lld nrot=%lld hs=%lld pos0=%lld [%s]",
           (long long)B, (long long)T, (long long)S, (long long)nrot, (long long)hs,
           (long long)pos0, gt_dtype_name(dt));
  RUN(gpu, rope_forward, dt, x.g, tc.g, ts.g, B, T, S, nrot, hs, pos0);
  RUN(ref, rope_forward, dt, x.r, tc.r, ts.r, B, T, S, nrot, hs, pos0);
  snprintf(what, sizeof what, "rope forward (in place) %s", tag);
  check_tw(dt, what, x, n);
  tap_ok(rope_rest_same(dt, x, xh, B * T, S, nrot, hs),
         "rope forward leaves heads [%lld, %lld) alone, bit for bit %s", (long long)nrot,
         (long long)S, tag);
  tw_put(x, xh);
  RUN(gpu, rope_backward, dt, x.g, tc.g, ts.g, B, T, S, nrot, hs, pos0);
  RUN(ref, rope_backward, dt, x.r, tc.r, ts.r, B, T, S, nrot, hs, pos0);
  snprintf(what, sizeof what, "rope backward (in place) %s", tag);
  check_tw(dt, what, x, n);
  tap_ok(rope_rest_same(dt, x, xh, B * T, S, nrot, hs),
         "rope backward leaves heads [%lld, %lld) alone, bit for bit %s", (long long)nrot,
         (long long)S, tag);
  free(ang), free(cs), free(sn), free(xh);
  tw_free(&tc), tw_free(&ts), tw_free(&x);
}

static void test_swiglu(gt_dtype dt, int64_t N, int64_t F)
{
  const size_t nf = (size_t)(N * F), nh = 2 * nf;
  const uint64_t sd = (uint64_t)(N * 31 + F) * 10 + 7;
  twin h = tw_rand(dt, nh, sd + 1, -8, 8), dy = tw_rand(dt, nf, sd + 2, -1, 1);
  twin out = tw_new(nf * es(dt)), dh = tw_new(nh * es(dt));
  char what[128], tag[64];
  snprintf(tag, sizeof tag, "N=%lld F=%lld [%s]", (long long)N, (long long)F, gt_dtype_name(dt));
  RUN(gpu, swiglu_forward, dt, out.g, h.g, N, F);
  RUN(ref, swiglu_forward, dt, out.r, h.r, N, F);
  snprintf(what, sizeof what, "swiglu forward %s", tag);
  check_tw(dt, what, out, nf);
  RUN(gpu, swiglu_backward, dt, dh.g, dy.g, h.g, N, F);
  RUN(ref, swiglu_backward, dt, dh.r, dy.r, h.r, N, F);
  snprintf(what, sizeof what, "swiglu backward dh (=) %s", tag);
  check_tw(dt, what, dh, nh);
  /* dh aliasing h: the same bits as unaliased */
  void *want = dev_fetch(gpu, dh.g, nh * es(dt)), *hh = dev_fetch(ref, h.r, nh * es(dt));
  twin al = tw_from(hh, nh * es(dt));
  RUN(gpu, swiglu_backward, dt, al.g, dy.g, al.g, N, F);
  tap_ok(gpu_equals(al, want, nh * es(dt)),
         "swiglu backward with dh aliasing h: the same bits as unaliased %s", tag);
  free(want), free(hh);
  tw_free(&h), tw_free(&dy), tw_free(&out), tw_free(&dh), tw_free(&al);
}

// ---- attention --------------------------------------------------------------------------------------

typedef tu_attn_shape shape;

/* One problem with cpu-ref's results, computed once. */
typedef struct {
  shape s;
  gt_dtype dt;
  void *qkv, *dout;      /* inputs, dt bytes */
  void *out, *dqkv;      /* cpu-ref's forward out and backward dqkv (from its out, lse) */
  float *lse;
  bool ok;
} attn_case;

static attn_case attn_make(gt_dtype dt, shape s)
{
  attn_case c = {.s = s, .dt = dt};
  const uint64_t sd =
      (uint64_t)(s.B * 1000003 + s.T * 1009 + s.H * 31 + s.hs + 131 * s.Hkv) + 7 * (uint64_t)dt;
  c.qkv = rand_dt(dt, tu_attn_n_qkv(s), sd, -2, 2);
  c.dout = rand_dt(dt, tu_attn_n_out(s), sd + 1, -1, 1);
  const size_t e = es(dt);
  void *q = dev_alloc(ref, tu_attn_n_qkv(s) * e), *o = dev_alloc(ref, tu_attn_n_out(s) * e);
  void *dy = dev_alloc(ref, tu_attn_n_out(s) * e), *dq = dev_alloc(ref, tu_attn_n_qkv(s) * e);
  float *l = dev_alloc(ref, tu_attn_n_lse(s) * 4);
  dev_put(ref, q, c.qkv, tu_attn_n_qkv(s) * e);
  dev_put(ref, dy, c.dout, tu_attn_n_out(s) * e);
  c.ok = RUN(ref, attention_forward, dt, o, l, q, s.B, s.T, s.H, tu_attn_kv(s), s.hs) &&
         RUN(ref, attention_backward, dt, dq, dy, q, o, l, s.B, s.T, s.H, tu_attn_kv(s), s.hs);
  c.out = dev_fetch(ref, o, tu_attn_n_out(s) * e);
  c.dqkv = dev_fetch(ref, dq, tu_attn_n_qkv(s) * e);
  c.lse = dev_fetch(ref, l, tu_attn_n_lse(s) * 4);
  dev_free(ref, q), dev_free(ref, o), dev_free(ref, dy), dev_free(ref, dq), dev_free(ref, l);
  return c;
}

static void attn_free(attn_case *c)
{
  free(c->qkv), free(c->dout), free(c->out), free(c->dqkv), free(c->lse);
}

/* Attention outputs of type t: the fp32 rule, or for 16 bits the bound of
 * the header (one more rounding of P and dS allowed), with compare.h's
 * round-once rule as a diagnostic. */
static bool check_attn(gt_dtype t, const char *what, const void *ga, const void *rb, size_t n)
{
  float *a = decode(t, ga, n), *b = decode(t, rb, n);
  if (t == GT_F32) {
    const bool ok = check32(what, a, b, n);
    free(a), free(b);
    return ok;
  }
  const double u = t == GT_BF16 ? 0x1p-8 : 0x1p-11;
  double num = 0, den = 0, inf = 0, worst = 0, strict_worst = 0;
  size_t at = 0, differ = 0;
  bool finite = true;
  for (size_t i = 0; i < n; i++) {
    finite = finite && isfinite(a[i]) && isfinite(b[i]);
    if (isfinite(a[i]) && isfinite(b[i])) {
      const double d = (double)a[i] - b[i];
      num += d * d;
      den += (double)b[i] * b[i];
      inf = fmax(inf, fabs(b[i]));
    }
  }
  for (size_t i = 0; i < n && finite; i++) {
    const double d = fabs((double)a[i] - b[i]), ulp = tu_ulp_of(t, b[i]);
    const double r = d / (ulp + ATTN_ELEM * u * inf);
    if (r > worst) {
      worst = r;
      at = i;
    }
    strict_worst = fmax(strict_worst, d / (ulp + TU_ULP_SLACK * inf));
    differ += d > TU_ULP_SLACK * inf;
  }
  const double rel = sqrt(num) / fmax(sqrt(den), 1e-30);
  const bool ok = finite && worst <= 1.0 && rel <= ATTN_NORM * u;
  if (!tap_ok(ok, "%s (rel err %.2e = %.2f u, worst %.2f of the element bound)", what, rel,
              rel / u, worst))
    tap_diag("%s: element %zu: %.9g vs %.9g (bound 1 ulp + %.2f u max|ref|); rel err %.3e "
             "(bound %.2f u = %.2e)%s",
             what, at, a[at], b[at], ATTN_ELEM, rel, ATTN_NORM, ATTN_NORM * u,
             finite ? "" : "; not finite");
  const bool strict = finite && strict_worst <= 1.0 && differ <= 2 + n / 32 &&
                      rel <= (n >= 256 ? u / 8 : u);
  tap_diag("  compare.h's round-once rule %s (worst %.2f ulp, %zu of %zu differ)",
           strict ? "met" : "not met", strict_worst, differ, n);
  free(a), free(b);
  return ok;
}

static bool check_lse(const char *what, const float *a, const float *b, size_t n)
{
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const double e = isfinite(a[i]) ? fabs((double)a[i] - b[i]) / fmax(1.0, fabs(b[i])) : INFINITY;
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  const bool ok = worst <= LSE_TOL && isfinite(worst);
  if (!tap_ok(ok, "%s (worst %.2e of max(1, |lse|))", what, worst))
    tap_diag("%s: row %zu: %.9g vs %.9g (bound %.0e)", what, at, a[at], b[at], LSE_TOL);
  return ok;
}

/* Every case on be: forward (out, lse), backward from cpu-ref's out and lse,
 * and each twice for the same bits. */
/* Who runs attention in each variant of the cuda backend: cuDNN for
 * bf16 / fp16 (every case here has 16-byte aligned tensors) where this
 * build has cuDNN and the variant asks for it, grouped-query shapes (Hkv <
 * H) only where the backend sends them to cuDNN (compute capability 9.x),
 * else our own kernels. */
typedef enum { WANT_ANY, WANT_CUDNN, WANT_OWN } attn_want;

static attn_want attn_expect(gt_backend *be, const char *variant, gt_dtype dt, shape s)
{
  if (strcmp(gpu_name, "cuda") != 0)
    return WANT_ANY; /* a cpu backend checking this test */
  if (dt == GT_F32 || strstr(variant, "own"))
    return WANT_OWN;
  gt_cuda_attention_stats st;
  gt_cuda_attention_counts(be, &st);
  if (tu_attn_kv(s) != s.H && !st.cudnn_gqa)
    return WANT_OWN;
  return st.cudnn_built ? WANT_CUDNN : WANT_OWN;
}

static void attn_run(gt_backend *be, const char *variant, attn_case *cs, int ncases)
{
  const bool fast = strstr(variant, "cudnn-fast") != NULL;
  for (int k = 0; k < ncases; k++) {
    attn_case *c = &cs[k];
    if (!c->ok)
      continue;
    const shape s = c->s;
    const gt_dtype dt = c->dt;
    const size_t e = es(dt), bq = tu_attn_n_qkv(s) * e, bo = tu_attn_n_out(s) * e, bl = tu_attn_n_lse(s) * 4;
    char tag[128], what[192];
    snprintf(tag, sizeof tag, "B=%lld T=%lld H=%lld Hkv=%lld hs=%lld [%s] (%s)",
             (long long)s.B, (long long)s.T, (long long)s.H, (long long)tu_attn_kv(s),
             (long long)s.hs, gt_dtype_name(dt), variant);
    void *q = dev_alloc(be, bq), *o = dev_alloc(be, bo), *dy = dev_alloc(be, bo);
    void *o_ref = dev_alloc(be, bo), *dq = dev_alloc(be, bq);
    float *l = dev_alloc(be, bl), *l_ref = dev_alloc(be, bl);
    dev_put(be, q, c->qkv, bq);
    dev_put(be, dy, c->dout, bo);
    dev_put(be, o_ref, c->out, bo);
    dev_put(be, l_ref, c->lse, bl);
    void *h_o[2], *h_l[2], *h_d[2];
    gt_cuda_attention_stats st0, st1;
    gt_cuda_attention_counts(be, &st0);
    for (int rep = 0; rep < 2; rep++) {
      dev_poison(be, o, bo);
      dev_poison(be, l, bl);
      dev_poison(be, dq, bq);
      RUN(be, attention_forward, dt, o, l, q, s.B, s.T, s.H, tu_attn_kv(s), s.hs);
      RUN(be, attention_backward, dt, dq, dy, q, o_ref, l_ref, s.B, s.T, s.H, tu_attn_kv(s),
          s.hs);
      h_o[rep] = dev_fetch(be, o, bo);
      h_l[rep] = dev_fetch(be, l, bl);
      h_d[rep] = dev_fetch(be, dq, bq);
    }
    gt_cuda_attention_counts(be, &st1);
    const long by_cudnn = st1.cudnn_forward - st0.cudnn_forward + st1.cudnn_backward -
                          st0.cudnn_backward,
               by_own = st1.own_forward - st0.own_forward + st1.own_backward - st0.own_backward;
    const attn_want want = attn_expect(be, variant, dt, s);
    if (want != WANT_ANY)
      tap_ok(want == WANT_CUDNN ? by_cudnn == 4 && by_own == 0 : by_own == 4 && by_cudnn == 0,
             "attention %s ran on %s (forward and backward twice: %ld calls by cuDNN, %ld by "
             "gridtrain's kernels)%s",
             tag, want == WANT_CUDNN ? "cuDNN" : "gridtrain's own kernels", by_cudnn, by_own,
             want == WANT_CUDNN && !st1.cudnn_loaded ? "; cuDNN did not start" : "");
    snprintf(what, sizeof what, "attention forward out %s", tag);
    check_attn(dt, what, h_o[0], c->out, tu_attn_n_out(s));
    snprintf(what, sizeof what, "attention forward lse (fp32) %s", tag);
    check_lse(what, h_l[0], c->lse, tu_attn_n_lse(s));
    snprintf(what, sizeof what, "attention backward dqkv %s", tag);
    check_attn(dt, what, h_d[0], c->dqkv, tu_attn_n_qkv(s));
    if (fast && dt != GT_F32) { /* dQ sums with atomics: only the forward is promised */
      tap_ok(!memcmp(h_o[0], h_o[1], bo) && !memcmp(h_l[0], h_l[1], bl),
             "attention forward twice: the same bits %s", tag);
      tap_diag("cudnn-fast backward twice: %s bits %s (not promised)",
               memcmp(h_d[0], h_d[1], bq) ? "different" : "the same", tag);
    } else {
      tap_ok(!memcmp(h_o[0], h_o[1], bo) && !memcmp(h_l[0], h_l[1], bl) &&
                 !memcmp(h_d[0], h_d[1], bq),
             "attention forward and backward twice: the same bits %s", tag);
    }
    for (int rep = 0; rep < 2; rep++)
      free(h_o[rep]), free(h_l[rep]), free(h_d[rep]);
    dev_free(be, q), dev_free(be, o), dev_free(be, dy), dev_free(be, o_ref);
    dev_free(be, dq), dev_free(be, l), dev_free(be, l_ref);
  }
}

/* Decoding (attention_decode) of the prefixes 1, T/2 and T of every
 * one-sequence case: row t of cpu-ref's forward out, by the bound of out,
 * and the same bits twice. */
static void attn_decode_run(gt_backend *be, attn_case *cs, int ncases)
{
  for (int k = 0; k < ncases; k++) {
    attn_case *c = &cs[k];
    if (!c->ok || c->s.B != 1)
      continue;
    const shape s = c->s;
    const gt_dtype dt = c->dt;
    const size_t e = es(dt), C = (size_t)(s.H * s.hs), bq = tu_attn_n_qkv(s) * e;
    void *q = dev_alloc(be, bq), *o = dev_alloc(be, C * e);
    dev_put(be, q, c->qkv, bq);
    const int64_t lens[3] = {1, s.T / 2 > 0 ? s.T / 2 : 1, s.T};
    for (int i = 0; i < 3; i++) {
      const int64_t n = lens[i];
      void *got[2];
      for (int rep = 0; rep < 2; rep++) {
        dev_poison(be, o, C * e);
        RUN(be, attention_decode, dt, o, q, n, s.H, tu_attn_kv(s), s.hs);
        got[rep] = dev_fetch(be, o, C * e);
      }
      char what[192];
      snprintf(what, sizeof what, "attention decode of %lld rows = forward row %lld, T=%lld "
               "H=%lld Hkv=%lld hs=%lld [%s]", (long long)n, (long long)(n - 1), (long long)s.T,
               (long long)s.H, (long long)tu_attn_kv(s), (long long)s.hs, gt_dtype_name(dt));
      check_attn(dt, what, got[0], (const char *)c->out + (size_t)(n - 1) * C * e, C);
      tap_ok(!memcmp(got[0], got[1], C * e), "%s: twice, the same bits", what);
      free(got[0]), free(got[1]);
    }
    dev_free(be, q), dev_free(be, o);
  }
}

// ---- mixture of experts -------------------------------------------------------------------------
/* The seven MoE ops of backend.h. Routing's sel and assignment's pos, load
 * and kept are int32 and must be cpu-ref's bits (so must the permutation's
 * rows, bit copies); the float outputs are held to the bounds above (fp32
 * rule for probs, gate, dgate, dlogits; lse's; the round-once rule for the
 * dt outputs). Logits come with and without ties (a few distinct values,
 * a row all equal, a row whose maximum sits at both ends), so that the
 * tie rule decides sel. pos tensors drop about a quarter of the pairs
 * (-1) and leave rows of the expert-ordered buffer that no pair names:
 * those rows start from random values and must keep their bits. Every
 * case also runs twice on the backend under test, for the same bits.
 * Shapes: N in {1, 7, 64, 300} tokens, E in {1, 2, 5, 8, 64} experts (and
 * 300, past one block of experts in the scans), k in {1, 2, min(E, 4)},
 * C in {3, 33, 128} (3 and 33 take the scalar paths of the 16-bit types,
 * 128 the packs); assignment also at N k = 4000 and 80000 pairs (chunks
 * of pairs past the emulator's grid cap, and past one block of chunks). */

/* Both backends have the seven ops (else one failed line: nothing to compare). */
static bool moe_have(void)
{
  gt_backend *bs[2] = {gpu, ref};
  for (int i = 0; i < 2; i++) {
    const gt_backend_ops *o = bs[i]->ops;
    if (!o->moe_route || !o->moe_assign || !o->moe_permute || !o->moe_permute_backward ||
        !o->moe_combine || !o->moe_combine_backward || !o->moe_route_backward) {
      tap_ok(false, "the mixture-of-experts ops: %s lacks some of the seven", bs[i]->name);
      return false;
    }
  }
  return true;
}

/* The first difference of two int32 arrays, or n. */
static size_t i32_diff(const int32_t *a, const int32_t *b, size_t n)
{
  size_t i = 0;
  while (i < n && a[i] == b[i])
    i++;
  return i;
}

/* Twin x (n int32): the same on both; a diagnostic names the first difference. */
static bool i32_same(const char *what, twin x, size_t n)
{
  int32_t *a = dev_fetch(gpu, x.g, n * 4), *b = dev_fetch(ref, x.r, n * 4);
  const size_t at = i32_diff(a, b, n);
  if (at < n)
    tap_diag("%s: element %zu: %d on %s, %d on cpu-ref", what, at, (int)a[at], gpu->name,
             (int)b[at]);
  free(a), free(b);
  return at == n;
}

/* Router logits (N,E) in [-3, 3). With ties: rounded to integers (7
 * values, so most rows hold equal maxima), row 0 all equal, and the last
 * row's maximum at both ends. */
static float *moe_logits(int64_t N, int64_t E, bool ties, uint64_t seed)
{
  const size_t n = (size_t)(N * E);
  float *l = tu_alloc(n);
  tu_fill(l, n, seed, -3, 3);
  if (ties) {
    for (size_t i = 0; i < n; i++)
      l[i] = roundf(l[i]);
    for (int64_t e = 0; e < E; e++)
      l[e] = 0.5f;
    if (N > 1) {
      l[(N - 1) * E] = 7.0f;
      l[(N - 1) * E + E - 1] = 7.0f;
    }
  }
  return l;
}

/* (p, i) before (q, j) in the routing order. */
static bool moe_before(float p, int i, float q, int j) { return p > q || (p == q && i < j); }

/* sel (N,k) against probs (N,E) of the same backend: k distinct experts in
 * routing order, and no expert left out that comes before the last one
 * taken. The contract's top-k, checked without cpu-ref. */
static bool moe_topk_ok(const float *p, const int32_t *sel, int64_t N, int64_t E, int64_t k,
                        int64_t *bad_row)
{
  for (int64_t n = 0; n < N; n++) {
    const float *pn = p + n * E;
    const int32_t *sn = sel + n * k;
    bool ok = true;
    for (int64_t j = 0; j < k && ok; j++)
      ok = sn[j] >= 0 && sn[j] < E &&
           (j == 0 || moe_before(pn[sn[j - 1]], sn[j - 1], pn[sn[j]], sn[j]));
    for (int64_t e = 0; e < E && ok; e++) {
      bool taken = false;
      for (int64_t j = 0; j < k; j++)
        taken = taken || sn[j] == e;
      ok = taken || !moe_before(pn[e], (int)e, pn[sn[k - 1]], sn[k - 1]);
    }
    if (!ok) {
      *bad_row = n;
      return false;
    }
  }
  return true;
}

static void test_moe_route(int64_t N, int64_t E, int64_t k, bool ties)
{
  const size_t ne = (size_t)(N * E), nk = (size_t)(N * k), ns = (size_t)N;
  const uint64_t sd = (uint64_t)(N * 131 + E * 7 + k) * 10 + ties;
  float *l = moe_logits(N, E, ties, sd);
  twin lg = tw_from(l, ne * 4), probs = tw_new(ne * 4), lse = tw_new(ns * 4);
  twin sel = tw_new(nk * 4), gate = tw_new(nk * 4);
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "N=%lld E=%lld k=%lld%s", (long long)N, (long long)E, (long long)k,
           ties ? " (ties)" : "");
  RUN(gpu, moe_route, probs.g, lse.g, sel.g, gate.g, lg.g, N, E, k);
  RUN(ref, moe_route, probs.r, lse.r, sel.r, gate.r, lg.r, N, E, k);
  snprintf(what, sizeof what, "moe_route probs %s", tag);
  check_tw(GT_F32, what, probs, ne);
  float *la = dev_fetch(gpu, lse.g, ns * 4), *lb = dev_fetch(ref, lse.r, ns * 4);
  snprintf(what, sizeof what, "moe_route lse %s", tag);
  check_lse(what, la, lb, ns);
  snprintf(what, sizeof what, "moe_route sel %s", tag);
  const bool same = i32_same(what, sel, nk);
  float *pa = dev_fetch(gpu, probs.g, ne * 4);
  int32_t *sa = dev_fetch(gpu, sel.g, nk * 4);
  int64_t bad = -1;
  const bool topk = moe_topk_ok(pa, sa, N, E, k, &bad);
  if (!topk)
    tap_diag("%s: row %lld is not the top %lld of %s's own probs in order, ties to the lower "
             "index",
             what, (long long)bad, (long long)k, gpu->name);
  tap_ok(same && topk, "%s: cpu-ref's bits, the top k by probability, ties to the lower index",
         what);
  snprintf(what, sizeof what, "moe_route gate %s", tag);
  check_tw(GT_F32, what, gate, nk);
  /* again into poisoned outputs: the same bits */
  void *ga = dev_fetch(gpu, gate.g, nk * 4);
  tw_poison(probs), tw_poison(lse), tw_poison(sel), tw_poison(gate);
  RUN(gpu, moe_route, probs.g, lse.g, sel.g, gate.g, lg.g, N, E, k);
  tap_ok(gpu_equals(probs, pa, ne * 4) && gpu_equals(lse, la, ns * 4) &&
             gpu_equals(sel, sa, nk * 4) && gpu_equals(gate, ga, nk * 4),
         "moe_route twice: the same bits %s", tag);
  free(l), free(la), free(lb), free(pa), free(sa), free(ga);
  tw_free(&lg), tw_free(&probs), tw_free(&lse), tw_free(&sel), tw_free(&gate);
}

/* sel (N,k) for assignment: k distinct experts per token, drawn with a
 * lean to the low indices (the smaller of two draws), so that some experts
 * overflow a capacity and others get nothing. */
static int32_t *moe_sel(int64_t N, int64_t E, int64_t k, uint64_t seed)
{
  const size_t nk = (size_t)(N * k);
  int32_t *sel = xmalloc(nk * 4), *perm = xmalloc((size_t)E * 4), *r = xmalloc(2 * nk * 4);
  tu_fill_int(r, 2 * nk, seed, INT32_MAX);
  for (int64_t n = 0; n < N; n++) {
    for (int64_t e = 0; e < E; e++)
      perm[e] = (int32_t)e;
    for (int64_t j = 0; j < k; j++) {
      const size_t q = (size_t)(n * k + j);
      const int64_t span = E - j, a = r[2 * q] % span, b = r[2 * q + 1] % span;
      const int64_t pick = j + (a < b ? a : b);
      const int32_t t = perm[j];
      perm[j] = perm[pick];
      perm[pick] = t;
      sel[q] = perm[j];
    }
  }
  free(perm), free(r);
  return sel;
}

/* Capacities -1 (dropless), 0, 1 and the mean load ceil(N k / E): pos,
 * load and kept cpu-ref's bits, and again the same bits. One line. */
static void test_moe_assign(int64_t N, int64_t E, int64_t k)
{
  const size_t nk = (size_t)(N * k), ne = (size_t)E;
  int32_t *s = moe_sel(N, E, k, (uint64_t)(N * 17 + E * 5 + k));
  twin sel = tw_from(s, nk * 4), pos = tw_new(nk * 4), load = tw_new(ne * 4);
  twin kept = tw_new(ne * 4);
  const int64_t caps[4] = {-1, 0, 1, (N * k + E - 1) / E};
  bool ok = true;
  char what[160];
  for (int c = 0; c < 4; c++) {
    snprintf(what, sizeof what, "moe_assign N=%lld E=%lld k=%lld capacity=%lld", (long long)N,
             (long long)E, (long long)k, (long long)caps[c]);
    tw_poison(pos), tw_poison(load), tw_poison(kept);
    RUN(gpu, moe_assign, pos.g, load.g, kept.g, sel.g, N, k, E, caps[c]);
    RUN(ref, moe_assign, pos.r, load.r, kept.r, sel.r, N, k, E, caps[c]);
    char part[200];
    snprintf(part, sizeof part, "%s pos", what);
    bool same = i32_same(part, pos, nk);
    snprintf(part, sizeof part, "%s load", what);
    same = i32_same(part, load, ne) && same;
    snprintf(part, sizeof part, "%s kept", what);
    same = i32_same(part, kept, ne) && same;
    void *pa = dev_fetch(gpu, pos.g, nk * 4), *la = dev_fetch(gpu, load.g, ne * 4);
    void *ka = dev_fetch(gpu, kept.g, ne * 4);
    tw_poison(pos), tw_poison(load), tw_poison(kept);
    RUN(gpu, moe_assign, pos.g, load.g, kept.g, sel.g, N, k, E, caps[c]);
    const bool again = gpu_equals(pos, pa, nk * 4) && gpu_equals(load, la, ne * 4) &&
                       gpu_equals(kept, ka, ne * 4);
    if (!again)
      tap_diag("%s: a second run gave other bits", what);
    ok = ok && same && again;
    free(pa), free(la), free(ka);
  }
  tap_ok(ok, "moe_assign N=%lld E=%lld k=%lld, capacity -1, 0, 1 and %lld: pos, load, kept "
         "bit for bit, twice the same",
         (long long)N, (long long)E, (long long)k, (long long)caps[3]);
  free(s);
  tw_free(&sel), tw_free(&pos), tw_free(&load), tw_free(&kept);
}

/* A pos (N,k) over R = N k + 3 rows: the kept pairs take distinct rows in
 * a random order, about a quarter of the pairs are dropped (-1), and at
 * least 3 rows are named by no pair (named[r] false). */
typedef struct {
  int32_t *pos;
  bool *named;
  int64_t R;
} moe_rows;

static moe_rows moe_rows_make(int64_t N, int64_t k, uint64_t seed)
{
  const size_t P = (size_t)(N * k), R = P + 3;
  moe_rows m = {xmalloc(P * 4), xmalloc(R), (int64_t)R};
  int32_t *perm = xmalloc(R * 4), *r = xmalloc((R + P) * 4);
  tu_fill_int(r, R + P, seed, INT32_MAX);
  for (size_t i = 0; i < R; i++)
    perm[i] = (int32_t)i;
  for (size_t i = R - 1; i > 0; i--) {
    const size_t j = (size_t)r[i] % (i + 1);
    const int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  memset(m.named, 0, R);
  for (size_t q = 0; q < P; q++) {
    const bool drop = r[R + q] % 4 == 0;
    m.pos[q] = drop ? -1 : perm[q];
    if (!drop)
      m.named[perm[q]] = true;
  }
  free(perm), free(r);
  return m;
}

static void moe_rows_free(moe_rows *m)
{
  free(m->pos), free(m->named);
  m->pos = NULL, m->named = NULL;
}

/* The rows of host buffer a (R,C) of dt that no pair names have b's bits. */
static bool moe_alone(const moe_rows *m, gt_dtype dt, int64_t C, const void *a, const void *b,
                      int64_t *bad)
{
  const size_t row = (size_t)C * es(dt);
  for (int64_t r = 0; r < m->R; r++)
    if (!m->named[r] && memcmp((const char *)a + r * row, (const char *)b + r * row, row)) {
      *bad = r;
      return false;
    }
  return true;
}

static void test_moe_permute(gt_dtype dt, int64_t N, int64_t k, int64_t C)
{
  const uint64_t sd = (uint64_t)(N * 19 + k * 3 + C) * 10 + (uint64_t)dt;
  moe_rows m = moe_rows_make(N, k, sd);
  const size_t nx = (size_t)(N * C) * es(dt), nxp = (size_t)(m.R * C) * es(dt);
  void *xp0 = rand_dt(dt, (size_t)(m.R * C), sd + 2, -1, 1);
  twin pos = tw_from(m.pos, (size_t)(N * k) * 4), x = tw_rand(dt, (size_t)(N * C), sd + 1, -1, 1);
  twin xp = tw_from(xp0, nxp);
  char tag[80];
  snprintf(tag, sizeof tag, "N=%lld k=%lld C=%lld [%s]", (long long)N, (long long)k, (long long)C,
           gt_dtype_name(dt));
  RUN(gpu, moe_permute, dt, xp.g, x.g, pos.g, N, k, C);
  RUN(ref, moe_permute, dt, xp.r, x.r, pos.r, N, k, C);
  void *a = dev_fetch(gpu, xp.g, nxp), *b = dev_fetch(ref, xp.r, nxp);
  void *xh = dev_fetch(ref, x.r, nx);
  /* the kept pairs' rows: x's bits (a check of its own, beside cpu-ref's) */
  const size_t row = (size_t)C * es(dt);
  int64_t bad_pair = -1, bad_row = -1;
  for (int64_t q = 0; q < N * k && bad_pair < 0; q++)
    if (m.pos[q] >= 0 && memcmp((char *)a + m.pos[q] * row, (char *)xh + (q / k) * row, row))
      bad_pair = q;
  const bool alone = moe_alone(&m, dt, C, a, xp0, &bad_row);
  const bool same = memcmp(a, b, nxp) == 0;
  if (!tap_ok(same && bad_pair < 0 && alone,
              "moe_permute %s: the rows of x bit for bit (cpu-ref's), rows no pair names left "
              "alone",
              tag))
    tap_diag("moe_permute %s: %s; pair %lld's row differs from x's; row %lld was named by no "
             "pair and changed",
             tag, same ? "same as cpu-ref" : "differs from cpu-ref", (long long)bad_pair,
             (long long)bad_row);
  tw_put(xp, xp0);
  RUN(gpu, moe_permute, dt, xp.g, x.g, pos.g, N, k, C);
  tap_ok(gpu_equals(xp, a, nxp), "moe_permute twice: the same bits %s", tag);
  free(a), free(b), free(xh), free(xp0);
  moe_rows_free(&m);
  tw_free(&pos), tw_free(&x), tw_free(&xp);
}

static void test_moe_permute_backward(gt_dtype dt, int64_t N, int64_t k, int64_t C)
{
  const uint64_t sd = (uint64_t)(N * 23 + k * 5 + C) * 10 + (uint64_t)dt;
  moe_rows m = moe_rows_make(N, k, sd);
  const size_t nc = (size_t)(N * C);
  void *dx0 = rand_dt(dt, nc, sd + 1, -1, 1);
  float *ex = tu_alloc(nc);
  tu_fill(ex, nc, sd + 2, -1, 1);
  twin pos = tw_from(m.pos, (size_t)(N * k) * 4);
  twin dxp = tw_rand(dt, (size_t)(m.R * C), sd + 3, -1, 1), extra = tw_from(ex, nc * 4);
  twin dx = tw_from(dx0, nc * es(dt));
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "N=%lld k=%lld C=%lld [%s]", (long long)N, (long long)k, (long long)C,
           gt_dtype_name(dt));
  for (int with_extra = 0; with_extra < 2; with_extra++) {
    tw_put(dx, dx0);
    RUN(gpu, moe_permute_backward, dt, dx.g, dxp.g, with_extra ? extra.g : NULL, pos.g, N, k, C);
    RUN(ref, moe_permute_backward, dt, dx.r, dxp.r, with_extra ? extra.r : NULL, pos.r, N, k, C);
    snprintf(what, sizeof what, "moe_permute_backward dx (+= onto random) extra=%s %s",
             with_extra ? "on" : "NULL", tag);
    check_tw(dt, what, dx, nc);
    void *a = dev_fetch(gpu, dx.g, nc * es(dt));
    tw_put(dx, dx0);
    RUN(gpu, moe_permute_backward, dt, dx.g, dxp.g, with_extra ? extra.g : NULL, pos.g, N, k, C);
    tap_ok(gpu_equals(dx, a, nc * es(dt)),
           "moe_permute_backward extra=%s twice: the same bits %s", with_extra ? "on" : "NULL",
           tag);
    free(a);
  }
  free(dx0), free(ex);
  moe_rows_free(&m);
  tw_free(&pos), tw_free(&dxp), tw_free(&extra), tw_free(&dx);
}

/* base NULL, base a tensor of its own, and base = out (the same bits as a
 * base of its own). */
static void test_moe_combine(gt_dtype dt, int64_t N, int64_t k, int64_t C)
{
  const uint64_t sd = (uint64_t)(N * 29 + k * 7 + C) * 10 + (uint64_t)dt;
  moe_rows m = moe_rows_make(N, k, sd);
  const size_t nc = (size_t)(N * C), nk = (size_t)(N * k);
  float *g = tu_alloc(nk);
  tu_fill(g, nk, sd + 1, 0.05f, 1);
  void *b0 = rand_dt(dt, nc, sd + 2, -1, 1);
  twin pos = tw_from(m.pos, nk * 4), gate = tw_from(g, nk * 4);
  twin y = tw_rand(dt, (size_t)(m.R * C), sd + 3, -1, 1), base = tw_from(b0, nc * es(dt));
  twin out = tw_new(nc * es(dt));
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "N=%lld k=%lld C=%lld [%s]", (long long)N, (long long)k, (long long)C,
           gt_dtype_name(dt));
  void *with_base = NULL;
  for (int has_base = 0; has_base < 2; has_base++) {
    tw_poison(out);
    RUN(gpu, moe_combine, dt, out.g, has_base ? base.g : NULL, y.g, gate.g, pos.g, N, k, C);
    RUN(ref, moe_combine, dt, out.r, has_base ? base.r : NULL, y.r, gate.r, pos.r, N, k, C);
    snprintf(what, sizeof what, "moe_combine out (=) base=%s %s", has_base ? "on" : "NULL", tag);
    check_tw(dt, what, out, nc);
    void *a = dev_fetch(gpu, out.g, nc * es(dt));
    tw_poison(out);
    RUN(gpu, moe_combine, dt, out.g, has_base ? base.g : NULL, y.g, gate.g, pos.g, N, k, C);
    tap_ok(gpu_equals(out, a, nc * es(dt)), "moe_combine base=%s twice: the same bits %s",
           has_base ? "on" : "NULL", tag);
    if (has_base)
      with_base = a;
    else
      free(a);
  }
  /* base = out */
  tw_put(out, b0);
  RUN(gpu, moe_combine, dt, out.g, out.g, y.g, gate.g, pos.g, N, k, C);
  tap_ok(gpu_equals(out, with_base, nc * es(dt)),
         "moe_combine with base = out: the same bits as a base of its own %s", tag);
  free(g), free(b0), free(with_base);
  moe_rows_free(&m);
  tw_free(&pos), tw_free(&gate), tw_free(&y), tw_free(&base), tw_free(&out);
}

static void test_moe_combine_backward(gt_dtype dt, int64_t N, int64_t k, int64_t C)
{
  const uint64_t sd = (uint64_t)(N * 37 + k * 11 + C) * 10 + (uint64_t)dt;
  moe_rows m = moe_rows_make(N, k, sd);
  const size_t nc = (size_t)(N * C), nk = (size_t)(N * k), ny = (size_t)(m.R * C);
  float *g = tu_alloc(nk);
  tu_fill(g, nk, sd + 1, 0.05f, 1);
  void *dy0 = rand_dt(dt, ny, sd + 2, -1, 1);
  twin pos = tw_from(m.pos, nk * 4), gate = tw_from(g, nk * 4);
  twin dout = tw_rand(dt, nc, sd + 3, -1, 1), y = tw_rand(dt, ny, sd + 4, -1, 1);
  twin dy = tw_from(dy0, ny * es(dt)), dgate = tw_new(nk * 4);
  char what[160], tag[80];
  snprintf(tag, sizeof tag, "N=%lld k=%lld C=%lld [%s]", (long long)N, (long long)k, (long long)C,
           gt_dtype_name(dt));
  RUN(gpu, moe_combine_backward, dt, dy.g, dgate.g, dout.g, y.g, gate.g, pos.g, N, k, C);
  RUN(ref, moe_combine_backward, dt, dy.r, dgate.r, dout.r, y.r, gate.r, pos.r, N, k, C);
  snprintf(what, sizeof what, "moe_combine_backward dy (= on the kept pairs' rows) %s", tag);
  check_tw(dt, what, dy, ny);
  snprintf(what, sizeof what, "moe_combine_backward dgate (fp32) %s", tag);
  check_tw(GT_F32, what, dgate, nk);
  void *a = dev_fetch(gpu, dy.g, ny * es(dt));
  float *dga = dev_fetch(gpu, dgate.g, nk * 4);
  int64_t bad_row = -1, bad_pair = -1;
  const bool alone = moe_alone(&m, dt, C, a, dy0, &bad_row);
  for (int64_t q = 0; q < (int64_t)nk && bad_pair < 0; q++)
    if (m.pos[q] < 0 && !(dga[q] == 0.0f))
      bad_pair = q;
  if (!tap_ok(alone && bad_pair < 0,
              "moe_combine_backward %s: rows of dy no pair names left alone, dgate 0 for the "
              "dropped pairs",
              tag))
    tap_diag("row %lld named by no pair changed; dropped pair %lld has dgate %g",
             (long long)bad_row, (long long)bad_pair, bad_pair >= 0 ? dga[bad_pair] : 0.0);
  tw_put(dy, dy0);
  tw_poison(dgate);
  RUN(gpu, moe_combine_backward, dt, dy.g, dgate.g, dout.g, y.g, gate.g, pos.g, N, k, C);
  tap_ok(gpu_equals(dy, a, ny * es(dt)) && gpu_equals(dgate, dga, nk * 4),
         "moe_combine_backward twice: the same bits (dy, dgate) %s", tag);
  free(g), free(dy0), free(a), free(dga);
  moe_rows_free(&m);
  tw_free(&pos), tw_free(&gate), tw_free(&dout), tw_free(&y), tw_free(&dy), tw_free(&dgate);
}

/* The order of the sums, bit for bit: dx (or base) first, then extra, then
 * the kept pairs in ascending j, each step an fp32 add. With 2^24 first and
 * 1s after, every step rounds back to 2^24 (ties to even); any other order
 * adds 1s together first and ends at 2^24 + 2 or more. fp32 only (a 16-bit
 * type would round both to the same value); C = 5 (the scalar path) and 8
 * (packs); pair (1, 2) dropped. cpu-ref is held to the same values. */
static void test_moe_order(int64_t C)
{
  const int64_t N = 2, k = 4, P = N * k;
  const size_t nc = (size_t)(N * C), ny = (size_t)(P * C);
  int32_t pos[8];
  float g[8];
  for (int q = 0; q < 8; q++)
    pos[q] = q, g[q] = 1.0f;
  pos[6] = -1;
  const float big = 16777216.0f; /* 2^24 */
  float *first = tu_alloc(ny), *ones = tu_alloc(ny), *bigs = tu_alloc(nc), *zeros = tu_alloc(nc);
  for (size_t i = 0; i < ny; i++) {
    ones[i] = 1.0f;
    first[i] = (i / (size_t)C) % (size_t)k == 0 ? big : 1.0f; /* row of choice 0: 2^24 */
  }
  for (size_t i = 0; i < nc; i++)
    bigs[i] = big, zeros[i] = 0.0f;
  twin tpos = tw_from(pos, sizeof pos), gate = tw_from(g, sizeof g);
  twin yf = tw_from(first, ny * 4), y1 = tw_from(ones, ny * 4), e1 = tw_from(ones, nc * 4);
  twin base = tw_from(bigs, nc * 4), dx = tw_new(nc * 4), out = tw_new(nc * 4);
  bool okb[2][4] = {{true, true, true, true}, {true, true, true, true}};
  gt_backend *bs[2] = {gpu, ref};
  for (int b = 0; b < 2; b++) {
    gt_backend *be = bs[b];
    bool *ok = okb[b];
    void *d = b ? dx.r : dx.g, *o = b ? out.r : out.g;
    /* dx 0, dxp: 2^24 then 1s */
    dev_put(be, d, zeros, nc * 4);
    RUN(be, moe_permute_backward, GT_F32, d, b ? yf.r : yf.g, NULL, b ? tpos.r : tpos.g, N, k, C);
    float *r = dev_fetch(be, d, nc * 4);
    for (size_t i = 0; i < nc; i++)
      ok[0] = ok[0] && r[i] == big;
    free(r);
    /* dx 2^24, extra 1s, dxp 1s */
    dev_put(be, d, bigs, nc * 4);
    RUN(be, moe_permute_backward, GT_F32, d, b ? y1.r : y1.g, b ? e1.r : e1.g,
        b ? tpos.r : tpos.g, N, k, C);
    r = dev_fetch(be, d, nc * 4);
    for (size_t i = 0; i < nc; i++)
      ok[1] = ok[1] && r[i] == big;
    free(r);
    /* no base, y: 2^24 then 1s, gates 1 */
    RUN(be, moe_combine, GT_F32, o, NULL, b ? yf.r : yf.g, b ? gate.r : gate.g,
        b ? tpos.r : tpos.g, N, k, C);
    r = dev_fetch(be, o, nc * 4);
    for (size_t i = 0; i < nc; i++)
      ok[2] = ok[2] && r[i] == big;
    free(r);
    /* base 2^24, y 1s */
    RUN(be, moe_combine, GT_F32, o, b ? base.r : base.g, b ? y1.r : y1.g, b ? gate.r : gate.g,
        b ? tpos.r : tpos.g, N, k, C);
    r = dev_fetch(be, o, nc * 4);
    for (size_t i = 0; i < nc; i++)
      ok[3] = ok[3] && r[i] == big;
    free(r);
  }
  for (int b = 0; b < 2; b++)
    if (!(okb[b][0] && okb[b][1] && okb[b][2] && okb[b][3]))
      tap_diag("moe order C=%lld on %s: permute_backward %s, %s; combine %s, %s", (long long)C,
               bs[b]->name, okb[b][0] ? "ok" : "wrong", okb[b][1] ? "ok" : "wrong",
               okb[b][2] ? "ok" : "wrong", okb[b][3] ? "ok" : "wrong");
  tap_ok(okb[0][0] && okb[0][1] && okb[1][0] && okb[1][1],
         "moe_permute_backward C=%lld sums dx, extra, then the pairs in ascending j, in fp32 "
         "(2^24 then 1s stays 2^24, bit for bit, on %s and cpu-ref)",
         (long long)C, gpu->name);
  tap_ok(okb[0][2] && okb[0][3] && okb[1][2] && okb[1][3],
         "moe_combine C=%lld sums base, then the pairs in ascending j, in fp32 (2^24 then 1s "
         "stays 2^24, bit for bit, on %s and cpu-ref)",
         (long long)C, gpu->name);
  free(first), free(ones), free(bigs), free(zeros);
  tw_free(&tpos), tw_free(&gate), tw_free(&yf), tw_free(&y1), tw_free(&e1), tw_free(&base);
  tw_free(&dx), tw_free(&out);
}

/* The router's inputs from cpu-ref's moe_route and moe_assign (capacity
 * cap), the same bytes on both; dgate random, 0 for the dropped pairs (as
 * moe_combine_backward gives it). */
static void test_moe_route_backward(int64_t N, int64_t E, int64_t k, int64_t cap,
                                    float aux_scale, float z_scale)
{
  const size_t ne = (size_t)(N * E), nk = (size_t)(N * k), ns = (size_t)N;
  const uint64_t sd = (uint64_t)(N * 41 + E * 13 + k) * 10 + (cap > 0);
  float *l = moe_logits(N, E, false, sd);
  float *lg = dev_alloc(ref, ne * 4), *pr = dev_alloc(ref, ne * 4), *ls = dev_alloc(ref, ns * 4);
  float *gt = dev_alloc(ref, nk * 4);
  int32_t *sl = dev_alloc(ref, nk * 4), *ps = dev_alloc(ref, nk * 4);
  int32_t *ld = dev_alloc(ref, (size_t)E * 4), *kp = dev_alloc(ref, (size_t)E * 4);
  dev_put(ref, lg, l, ne * 4);
  RUN(ref, moe_route, pr, ls, sl, gt, lg, N, E, k);
  RUN(ref, moe_assign, ps, ld, kp, sl, N, k, E, cap);
  float *hp = dev_fetch(ref, pr, ne * 4), *hl = dev_fetch(ref, ls, ns * 4);
  float *hg = dev_fetch(ref, gt, nk * 4), *dg = tu_alloc(nk);
  int32_t *hs = dev_fetch(ref, sl, nk * 4), *hpos = dev_fetch(ref, ps, nk * 4);
  int32_t *hld = dev_fetch(ref, ld, (size_t)E * 4);
  tu_fill(dg, nk, sd + 1, -1, 1);
  for (size_t q = 0; q < nk; q++)
    if (hpos[q] < 0)
      dg[q] = 0.0f;
  twin probs = tw_from(hp, ne * 4), lse = tw_from(hl, ns * 4), gate = tw_from(hg, nk * 4);
  twin sel = tw_from(hs, nk * 4), load = tw_from(hld, (size_t)E * 4), dgate = tw_from(dg, nk * 4);
  twin dl = tw_new(ne * 4);
  char what[200], tag[120];
  snprintf(tag, sizeof tag, "N=%lld E=%lld k=%lld capacity=%lld aux_scale=%g z_scale=%g",
           (long long)N, (long long)E, (long long)k, (long long)cap, aux_scale, z_scale);
  RUN(gpu, moe_route_backward, dl.g, dgate.g, probs.g, lse.g, sel.g, gate.g, load.g, N, E, k,
      aux_scale, z_scale);
  RUN(ref, moe_route_backward, dl.r, dgate.r, probs.r, lse.r, sel.r, gate.r, load.r, N, E, k,
      aux_scale, z_scale);
  snprintf(what, sizeof what, "moe_route_backward dlogits (=) %s", tag);
  check_tw(GT_F32, what, dl, ne);
  void *a = dev_fetch(gpu, dl.g, ne * 4);
  tw_poison(dl);
  RUN(gpu, moe_route_backward, dl.g, dgate.g, probs.g, lse.g, sel.g, gate.g, load.g, N, E, k,
      aux_scale, z_scale);
  tap_ok(gpu_equals(dl, a, ne * 4), "moe_route_backward twice: the same bits %s", tag);
  free(l), free(hp), free(hl), free(hg), free(dg), free(hs), free(hpos), free(hld), free(a);
  dev_free(ref, lg), dev_free(ref, pr), dev_free(ref, ls), dev_free(ref, gt);
  dev_free(ref, sl), dev_free(ref, ps), dev_free(ref, ld), dev_free(ref, kp);
  tw_free(&probs), tw_free(&lse), tw_free(&gate), tw_free(&sel), tw_free(&load);
  tw_free(&dgate), tw_free(&dl);
}

static void test_moe(void)
{
  if (!moe_have())
    return;
  /* (E, k): every E with k in {1, 2, min(E, 4)} */
  const int64_t ek[][2] = {{1, 1}, {2, 1}, {2, 2}, {5, 1}, {5, 2}, {5, 4}, {8, 1},
                           {8, 2}, {8, 4}, {64, 1}, {64, 2}, {64, 4}, {300, 4}};
  const int nek = (int)(sizeof ek / sizeof *ek);
  /* (N, E, k) of the smaller token counts */
  const int64_t few[][3] = {{1, 1, 1}, {1, 64, 4}, {7, 2, 2}, {7, 5, 4}, {7, 300, 4},
                            {64, 8, 2}, {64, 64, 4}, {64, 2, 1}};
  const int nfew = (int)(sizeof few / sizeof *few);
  for (int i = 0; i < nek; i++)
    test_moe_route(300, ek[i][0], ek[i][1], false);
  for (int i = 0; i < nfew; i++)
    test_moe_route(few[i][0], few[i][1], few[i][2], false);
  const int64_t tie_ek[][2] = {{2, 1}, {5, 4}, {8, 2}, {64, 4}};
  for (int i = 0; i < 4; i++) {
    test_moe_route(7, tie_ek[i][0], tie_ek[i][1], true);
    test_moe_route(300, tie_ek[i][0], tie_ek[i][1], true);
  }
  for (int i = 0; i < nek; i++)
    test_moe_assign(300, ek[i][0], ek[i][1]);
  for (int i = 0; i < nfew; i++)
    test_moe_assign(few[i][0], few[i][1], few[i][2]);
  test_moe_assign(2000, 8, 2);   /* 16 chunks of pairs: past the emulator's grid cap */
  test_moe_assign(40000, 8, 2);  /* 313 chunks: past one block of the scan over chunks */
  /* the dt ops: (N, k, C) */
  const int64_t nkc[][3] = {{1, 1, 3},   {7, 2, 33},  {64, 4, 128}, {300, 2, 128},
                            {300, 4, 33}, {64, 1, 3}, {7, 1, 128},  {300, 1, 3}};
  const int nnkc = (int)(sizeof nkc / sizeof *nkc);
  for (int d = 0; d < 3; d++)
    for (int i = 0; i < nnkc; i++) {
      test_moe_permute(all_dt[d], nkc[i][0], nkc[i][1], nkc[i][2]);
      test_moe_permute_backward(all_dt[d], nkc[i][0], nkc[i][1], nkc[i][2]);
      test_moe_combine(all_dt[d], nkc[i][0], nkc[i][1], nkc[i][2]);
      test_moe_combine_backward(all_dt[d], nkc[i][0], nkc[i][1], nkc[i][2]);
    }
  test_moe_order(5);
  test_moe_order(8);
  test_moe_route_backward(1, 1, 1, -1, 0.01f, 0.001f);
  test_moe_route_backward(7, 2, 2, 1, 0.01f, 0.001f);
  test_moe_route_backward(64, 5, 4, 52, 0.01f, 0.001f);
  test_moe_route_backward(300, 8, 2, 75, 0.01f, 0.001f);
  test_moe_route_backward(300, 64, 4, -1, 0.01f, 0.001f);
  test_moe_route_backward(64, 64, 1, 0, 0.01f, 0.001f);
  test_moe_route_backward(7, 300, 4, -1, 0.01f, 0.001f);
  test_moe_route_backward(300, 8, 2, 75, 0.0f, 0.0f); /* the gates' gradient alone */
}

// ---- embeddings and loss ------------------------------------------------------------------------

/* Rows [v0, v0 + nv) of a V-row vocabulary; tokens in [0, tok_upper)
 * (repeats on purpose), with tokens on both edges of the shard and just
 * outside it. */
static void test_embedding(gt_dtype dt, int64_t B, int64_t T, int64_t C, int64_t V, int64_t v0,
                           int64_t nv, int32_t tok_upper, bool with_wpe)
{
  const size_t N = (size_t)(B * T), n = N * (size_t)C, cs = (size_t)C, nr = (size_t)nv * cs;
  int32_t *tok = xmalloc(N * sizeof(int32_t));
  tu_fill_int(tok, N, (uint64_t)(V * 3 + v0 + C), tok_upper);
  tok[0] = (int32_t)v0;
  tok[N - 1] = (int32_t)(v0 + nv - 1);
  if (v0 > 0 && N > 2)
    tok[1] = (int32_t)(v0 - 1);
  if (v0 + nv < V && N > 3)
    tok[2] = (int32_t)(v0 + nv);
  char tag[128], what[192];
  snprintf(tag, sizeof tag, "B=%lld T=%lld C=%lld rows [%lld, %lld) of %lld wpe=%s [%s]",
           (long long)B, (long long)T, (long long)C, (long long)v0, (long long)(v0 + nv),
           (long long)V, with_wpe ? "on" : "NULL", gt_dtype_name(dt));
  const uint64_t sd = (uint64_t)(B * T * C + v0) * 10;
  twin tk = tw_from(tok, N * sizeof(int32_t)), wte = tw_rand(dt, nr, sd + 1, -1, 1);
  twin wpe = tw_rand(dt, (size_t)T * cs, sd + 2, -1, 1), out = tw_new(n * es(dt));
  twin dy = tw_rand(dt, n, sd + 3, -1, 1);
  RUN(gpu, embedding_forward, dt, out.g, tk.g, wte.g, with_wpe ? wpe.g : NULL, B, T, C, v0, nv);
  RUN(ref, embedding_forward, dt, out.r, tk.r, wte.r, with_wpe ? wpe.r : NULL, B, T, C, v0, nv);
  snprintf(what, sizeof what, "embedding forward %s", tag);
  check_tw(dt, what, out, n);
  if (!with_wpe) {
    void *want = dev_fetch(ref, out.r, n * es(dt));
    tap_ok(gpu_equals(out, want, n * es(dt)),
           "embedding forward without wpe: the shard's rows bit for bit, exact zeros for "
           "other tokens %s",
           tag);
    free(want);
  }
  float *e0 = tu_alloc(nr), *p0 = tu_alloc((size_t)T * cs);
  tu_fill(e0, nr, sd + 4, -1, 1);
  tu_fill(p0, (size_t)T * cs, sd + 5, -1, 1);
  twin dwte = tw_from(e0, nr * 4), dwpe = tw_from(p0, (size_t)T * cs * 4);
  RUN(gpu, embedding_backward, dt, dwte.g, with_wpe ? dwpe.g : NULL, dy.g, tk.g, B, T, C, v0, nv);
  RUN(ref, embedding_backward, dt, dwte.r, with_wpe ? dwpe.r : NULL, dy.r, tk.r, B, T, C, v0, nv);
  snprintf(what, sizeof what, "embedding backward dwte (+= onto random, fp32) %s", tag);
  check_tw(GT_F32, what, dwte, nr);
  if (with_wpe) {
    snprintf(what, sizeof what, "embedding backward dwpe (+= onto random, fp32) %s", tag);
    check_tw(GT_F32, what, dwpe, (size_t)T * cs);
  }
  /* again from the same start: the same bits */
  void *g1 = dev_fetch(gpu, dwte.g, nr * 4), *q1 = dev_fetch(gpu, dwpe.g, (size_t)T * cs * 4);
  dev_put(gpu, dwte.g, e0, nr * 4);
  dev_put(gpu, dwpe.g, p0, (size_t)T * cs * 4);
  RUN(gpu, embedding_backward, dt, dwte.g, with_wpe ? dwpe.g : NULL, dy.g, tk.g, B, T, C, v0, nv);
  tap_ok(gpu_equals(dwte, g1, nr * 4) && gpu_equals(dwpe, q1, (size_t)T * cs * 4),
         "embedding backward twice: the same bits %s", tag);
  free(g1), free(q1), free(tok), free(e0), free(p0);
  tw_free(&tk), tw_free(&wte), tw_free(&wpe), tw_free(&out), tw_free(&dy), tw_free(&dwte);
  tw_free(&dwpe);
}

/* "each row summed in token order": one row R of the shard gets 2^24 from
 * its first token and 1 from each of its later ones, starting from 0.
 * In token order every 1 is lost to rounding (2^24 + 1 ties to 2^24): the
 * row stays 2^24 exactly. Any other order (the ones first, a tree) gives
 * 2^24 + 2 or more. The other rows: random values, compared as usual. */
static void test_embedding_order(gt_dtype dt)
{
  const int64_t B = 3, T = 16, C = 70, V = 40, v0 = 8, nv = 20, R = 10;
  const size_t N = (size_t)(B * T), n = N * (size_t)C, cs = (size_t)C, nr = (size_t)nv * cs;
  int32_t *tok = xmalloc(N * sizeof(int32_t));
  tu_fill_int(tok, N, 77, (int32_t)V);
  const size_t hits[] = {3, 7, 12, 16, 21, 31, 40, 47}; /* token order b*T + t */
  for (size_t i = 0; i < N; i++)
    if (tok[i] == R)
      tok[i] = R + 1;
  float *dy = tu_alloc(n);
  tu_fill(dy, n, 78, -1, 1);
  for (size_t k = 0; k < sizeof hits / sizeof *hits; k++) {
    tok[hits[k]] = (int32_t)R;
    for (size_t c = 0; c < cs; c++)
      dy[hits[k] * cs + c] = k == 0 ? 0x1p24f : 1.0f;
  }
  void *dyb = to_dt(dt, dy, n);
  float *e0 = tu_alloc(nr);
  tu_fill(e0, nr, 79, -1, 1);
  for (size_t c = 0; c < cs; c++)
    e0[(size_t)(R - v0) * cs + c] = 0.0f;
  twin tk = tw_from(tok, N * sizeof(int32_t)), d = tw_from(dyb, n * es(dt));
  twin dwte = tw_from(e0, nr * 4);
  RUN(gpu, embedding_backward, dt, dwte.g, NULL, d.g, tk.g, B, T, C, v0, nv);
  RUN(ref, embedding_backward, dt, dwte.r, NULL, d.r, tk.r, B, T, C, v0, nv);
  float *a = dev_fetch(gpu, dwte.g, nr * 4), *b = dev_fetch(ref, dwte.r, nr * 4);
  bool row_ok = true;
  size_t bad = 0;
  for (size_t c = 0; c < cs; c++) {
    const float want = 0x1p24f;
    if (memcmp(&a[(size_t)(R - v0) * cs + c], &want, 4) != 0 && row_ok) {
      row_ok = false;
      bad = c;
    }
  }
  if (!tap_ok(row_ok, "embedding backward [%s]: a repeated token's row is summed in token "
                      "order (2^24 then 1s stays 2^24, bit for bit)",
              gt_dtype_name(dt)))
    tap_diag("column %zu: %.9g (cpu-ref %.9g), expected 16777216", bad,
             a[(size_t)(R - v0) * cs + bad], b[(size_t)(R - v0) * cs + bad]);
  /* the other rows by the fp32 rule */
  for (size_t c = 0; c < cs; c++)
    a[(size_t)(R - v0) * cs + c] = b[(size_t)(R - v0) * cs + c] = 0;
  char what[96];
  snprintf(what, sizeof what, "embedding backward [%s]: the other rows (+=, fp32)",
           gt_dtype_name(dt));
  check32(what, a, b, nr);
  free(tok), free(dy), free(dyb), free(e0), free(a), free(b);
  tw_free(&tk), tw_free(&d), tw_free(&dwte);
}

/* Cross-entropy over a vocabulary of V split into P shards of w = ceil(V/P)
 * columns (the last shorter), each stored (N, ld) with padding garbage. */
static void test_xent(gt_dtype dt, int64_t N, int64_t V, int P, int64_t ld)
{
  const int64_t w = (V + P - 1) / P;
  const size_t e = es(dt), nl = (size_t)(N * ld), ns = 3 * (size_t)N;
  char tag[112], what[192];
  snprintf(tag, sizeof tag, "N=%lld V=%lld P=%d ld=%lld [%s]", (long long)N, (long long)V, P,
           (long long)ld, gt_dtype_name(dt));
  float *full = tu_alloc((size_t)(N * V));
  tu_fill(full, (size_t)(N * V), (uint64_t)(N * V + P), -8, 8);
  int32_t *y = xmalloc((size_t)N * sizeof(int32_t));
  tu_fill_int(y, (size_t)N, (uint64_t)(N + V), (int32_t)V);
  for (int r = 0; r < P && 2 * r + 1 < N; r++) { /* first and last column of each shard */
    y[2 * r] = (int32_t)(r * w < V ? r * w : V - 1);
    y[2 * r + 1] = (int32_t)((r + 1) * w < V ? (r + 1) * w - 1 : V - 1);
  }
  twin ty = tw_from(y, (size_t)N * sizeof(int32_t));
  twin stats = tw_new((size_t)P * ns * 4), loss = tw_new((size_t)N * 4);
  void **host = xmalloc(sizeof(void *) * (size_t)P);
  twin *lg = xmalloc(sizeof(twin) * (size_t)P);
  int64_t *v0 = xmalloc(sizeof(int64_t) * (size_t)P), *nv = xmalloc(sizeof(int64_t) * (size_t)P);
  for (int r = 0; r < P; r++) {
    v0[r] = r * w;
    nv[r] = V - v0[r] < w ? V - v0[r] : w;
    if (nv[r] < 0)
      nv[r] = 0;
    float *sh = tu_alloc(nl);
    for (int64_t i = 0; i < N; i++)
      for (int64_t j = 0; j < ld; j++)
        sh[i * ld + j] = j < nv[r] ? full[i * V + v0[r] + j] : ((i + j) % 2 ? 60.0f : -60.0f);
    host[r] = to_dt(dt, sh, nl);
    lg[r] = tw_from(host[r], nl * e);
    free(sh);
    RUN(gpu, xent_partial, dt, (float *)stats.g + ns * r, lg[r].g, ty.g, N, nv[r], ld, v0[r]);
    RUN(ref, xent_partial, dt, (float *)stats.r + ns * r, lg[r].r, ty.r, N, nv[r], ld, v0[r]);
  }
  snprintf(what, sizeof what, "xent_partial stats {m, s, t} (fp32) of every shard %s", tag);
  check_tw(GT_F32, what, stats, (size_t)P * ns);
  /* xent_finish from the same (cpu-ref's) stats on both */
  float *st = dev_fetch(ref, stats.r, (size_t)P * ns * 4);
  dev_put(gpu, stats.g, st, (size_t)P * ns * 4);
  for (int pass = 0; pass < 2; pass++) {
    const float scale = pass ? 0.25f : 0.0f;
    bool same_losses = true, untouched = true, pad_zero = true;
    float *loss0 = NULL;
    float *ga = tu_alloc((size_t)(N * V)), *rb = tu_alloc((size_t)(N * V));
    for (int r = 0; r < P; r++) {
      tw_put(lg[r], host[r]);
      tw_poison(loss);
      RUN(gpu, xent_finish, dt, loss.g, lg[r].g, stats.g, P, ty.g, N, nv[r], ld, v0[r], scale);
      RUN(ref, xent_finish, dt, loss.r, lg[r].r, stats.r, P, ty.r, N, nv[r], ld, v0[r], scale);
      snprintf(what, sizeof what, "xent_finish losses (fp32) dlogit_scale=%g shard %d %s",
               scale, r, tag);
      check_tw(GT_F32, what, loss, (size_t)N);
      float *l = dev_fetch(gpu, loss.g, (size_t)N * 4);
      if (!loss0)
        loss0 = l;
      else {
        same_losses = same_losses && !memcmp(l, loss0, (size_t)N * 4);
        free(l);
      }
      void *a = dev_fetch(gpu, lg[r].g, nl * e), *b = dev_fetch(ref, lg[r].r, nl * e);
      if (!pass)
        untouched = untouched && !memcmp(a, host[r], nl * e);
      for (int64_t i = 0; i < N; i++) {
        for (int64_t j = 0; j < nv[r]; j++) {
          ga[i * V + v0[r] + j] = dec(dt, a, (size_t)(i * ld + j));
          rb[i * V + v0[r] + j] = dec(dt, b, (size_t)(i * ld + j));
        }
        for (int64_t j = nv[r]; j < ld && pass; j++)
          pad_zero = pad_zero && dec(dt, a, (size_t)(i * ld + j)) == 0.0f &&
                     !signbit(dec(dt, a, (size_t)(i * ld + j)));
      }
      free(a), free(b);
    }
    tap_ok(same_losses, "xent_finish dlogit_scale=%g: identical losses on every shard %s",
           scale, tag);
    if (!pass)
      tap_ok(untouched, "xent_finish dlogit_scale=0 leaves the logits alone, bit for bit %s",
             tag);
    else {
      snprintf(what, sizeof what, "xent_finish dlogits dlogit_scale=%g %s", scale, tag);
      check_vals(dt, what, ga, rb, (size_t)(N * V));
      tap_ok(pad_zero, "xent_finish padding columns exactly +0 (ld - nv = %lld on the last) %s",
             (long long)(ld - nv[P - 1]), tag);
    }
    free(loss0), free(ga), free(rb);
  }
  for (int r = 0; r < P; r++) {
    free(host[r]);
    tw_free(&lg[r]);
  }
  free(host), free(lg), free(v0), free(nv), free(full), free(y), free(st);
  tw_free(&ty), tw_free(&stats), tw_free(&loss);
}

// ---- optimizer and reductions ---------------------------------------------------------------------

/* compute_t < 0: no compute copy. */
static void test_adamw(size_t n, int compute_t)
{
  const gt_dtype ct = compute_t < 0 ? GT_F32 : (gt_dtype)compute_t;
  const char *cname = compute_t < 0 ? "none" : gt_dtype_name(ct);
  float *p0 = tu_alloc(n), *g = tu_alloc(n), *m0 = tu_alloc(n), *v0 = tu_alloc(n);
  tu_fill(p0, n, 28, -1, 1);
  tu_fill(g, n, 29, -0.1f, 0.1f);
  tu_fill(m0, n, 30, -0.01f, 0.01f);
  tu_fill(v0, n, 31, 1e-6f, 1e-3f);
  twin p = tw_from(p0, n * 4), tg = tw_from(g, n * 4), m = tw_from(m0, n * 4);
  twin v = tw_from(v0, n * 4), c = tw_new(n * es(ct));
  RUN(gpu, adamw, p.g, tg.g, m.g, v.g, compute_t < 0 ? NULL : c.g, ct, n, 1e-3f, 0.9f, 0.95f,
      1e-8f, 0.1f, 0.271f, 0.1426f, 0.8f);
  RUN(ref, adamw, p.r, tg.r, m.r, v.r, compute_t < 0 ? NULL : c.r, ct, n, 1e-3f, 0.9f, 0.95f,
      1e-8f, 0.1f, 0.271f, 0.1426f, 0.8f);
  char what[112];
  snprintf(what, sizeof what, "adamw n=%zu parameters (compute copy %s)", n, cname);
  check_tw(GT_F32, what, p, n);
  snprintf(what, sizeof what, "adamw n=%zu first moment (compute copy %s)", n, cname);
  check_tw(GT_F32, what, m, n);
  snprintf(what, sizeof what, "adamw n=%zu second moment (compute copy %s)", n, cname);
  check_tw(GT_F32, what, v, n);
  float *pa = dev_fetch(gpu, p.g, n * 4), *pb = dev_fetch(ref, p.r, n * 4);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double ua = (double)pa[i] - p0[i], ub = (double)pb[i] - p0[i];
    num += (ua - ub) * (ua - ub);
    den += ub * ub;
  }
  const double rel = sqrt(num) / fmax(sqrt(den), 1e-30);
  tap_ok(rel <= UPD_TOL && isfinite(rel),
         "adamw n=%zu (compute copy %s): the update p' - p within %.0e (rel err %.2e)", n, cname,
         UPD_TOL, rel);
  if (compute_t >= 0) {
    void *want = to_dt(ct, pa, n), *got = dev_fetch(gpu, c.g, n * es(ct));
    tap_ok(!memcmp(want, got, n * es(ct)),
           "adamw n=%zu: the compute copy (%s) is cuda's new master rounded, bit for bit", n,
           cname);
    free(want), free(got);
  }
  free(p0), free(g), free(m0), free(v0), free(pa), free(pb);
  tw_free(&p), tw_free(&tg), tw_free(&m), tw_free(&v), tw_free(&c);
}

/* *acc on the device, from 0.375, += the sum (or sum of squares) of x. */
static double sum_on(gt_backend *be, bool sq, const float *x_dev, size_t n)
{
  double acc = 0.375, *d = dev_alloc(be, sizeof(double));
  dev_put(be, d, &acc, sizeof acc);
  if (sq)
    RUN(be, sumsq_add, d, x_dev, n);
  else
    RUN(be, sum_add, d, x_dev, n);
  dev_get(be, &acc, d, sizeof acc);
  dev_free(be, d);
  return acc;
}

static void test_sums(size_t n)
{
  float *x = tu_alloc(n + 1);
  tu_fill(x, n + 1, 42 + n, -0.5f, 1.0f);
  twin t = tw_from(x, (n + 1) * 4);
  for (int sq = 0; sq < 2; sq++) {
    const char *name = sq ? "sumsq_add" : "sum_add";
    const double a1 = sum_on(gpu, sq, t.g, n), b = sum_on(ref, sq, t.r, n);
    const double a2 = sum_on(gpu, sq, t.g, n);
    tap_ok(fabs(a1 - b) <= SUM_TOL * fabs(b), "%s n=%zu onto *acc = 0.375 (%.17g vs %.17g)",
           name, n, a1, b);
    tap_ok(!memcmp(&a1, &a2, sizeof a1), "%s n=%zu twice: the same bits", name, n);
    /* NaN in the middle (and at the end) propagates */
    float *xn = tu_copy(x, n + 1);
    xn[n / 2] = NAN;
    float *dn = dev_alloc(gpu, (n + 1) * 4);
    dev_put(gpu, dn, xn, (n + 1) * 4);
    const double an = sum_on(gpu, sq, dn, n);
    xn[n / 2] = x[n / 2];
    xn[n - 1] = NAN;
    dev_put(gpu, dn, xn, (n + 1) * 4);
    const double an2 = sum_on(gpu, sq, dn, n);
    tap_ok(isnan(an) && isnan(an2), "%s n=%zu: a NaN input (middle, last) gives NaN (%g, %g)",
           name, n, an, an2);
    dev_free(gpu, dn);
    free(xn);
    const double z = sum_on(gpu, sq, t.g, 0);
    tap_ok(z == 0.375, "%s of nothing leaves *acc alone (%.17g)", name, z);
  }
  free(x);
  tw_free(&t);
}

// ---- fills, copies, streams, events, host memory ---------------------------------------------------

static void test_zero(void)
{
  const size_t bytes = 4099;
  unsigned char *h = xmalloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    h[i] = (unsigned char)(i * 131 + 7) | 1; /* never 0 */
  void *d = dev_alloc(gpu, bytes);
  dev_put(gpu, d, h, bytes);
  const size_t off = 6, len = 2003;
  RUN(gpu, zero, (char *)d + off, len);
  unsigned char *back = dev_fetch(gpu, d, bytes);
  bool ok = true;
  for (size_t i = 0; i < bytes; i++)
    ok = ok && back[i] == (i >= off && i < off + len ? 0 : h[i]);
  tap_ok(ok, "zero of %zu bytes at byte offset %zu: exactly those bytes", len, off);
  free(back), free(h);
  dev_free(gpu, d);
  const size_t n = 3000001;
  float *x = tu_alloc(n);
  tu_fill(x, n, 55, 1, 2);
  float *dx = dev_alloc(gpu, n * 4);
  dev_put(gpu, dx, x, n * 4);
  RUN(gpu, zero, dx, n * 4);
  float *y = dev_fetch(gpu, dx, n * 4);
  ok = true;
  for (size_t i = 0; i < n; i++)
    ok = ok && y[i] == 0.0f && !signbit(y[i]);
  tap_ok(ok, "zero of %zu floats: all +0", n);
  free(x), free(y);
  dev_free(gpu, dx);
}

/* Upload on a second stream, a kernel and a copy on the compute stream
 * after it (stream_wait), the download on the second stream after those;
 * 64 MiB, so that a missing wait reads the poisoned buffers. */
static void test_streams(void)
{
  const gt_backend_ops *o = gpu->ops;
  const size_t n = (size_t)16 << 20, bytes = n * 4;
  float *hx = NULL, *hy = NULL;
  if (!tu_ok_status(o->alloc_host(gpu, bytes, (void **)&hx), "alloc_host 64 MiB") ||
      !tu_ok_status(o->alloc_host(gpu, bytes, (void **)&hy), "alloc_host 64 MiB (second)"))
    return;
  tu_fill(hx, n, 61, -3, 3);
  for (size_t i = 0; i < n; i++)
    hy[i] = -1;
  float *a = dev_alloc(gpu, bytes), *b = dev_alloc(gpu, bytes), *c = dev_alloc(gpu, bytes);
  float *c2 = dev_alloc(gpu, bytes);
  dev_poison(gpu, a, bytes), dev_poison(gpu, b, bytes), dev_poison(gpu, c, bytes);
  dev_poison(gpu, c2, bytes);
  gt_stream *s2 = NULL;
  gt_device_event *e0 = NULL, *e1 = NULL, *e2 = NULL, *e3 = NULL;
  bool ok = tu_ok_status(o->stream_create(gpu, &s2), "stream_create");
  ok = ok && tu_ok_status(o->event_create(gpu, &e0), "event_create") &&
       o->event_create(gpu, &e1) == GT_SUCCESS && o->event_create(gpu, &e2) == GT_SUCCESS &&
       o->event_create(gpu, &e3) == GT_SUCCESS;
  if (!ok)
    return;
  int st = o->event_record(gpu, e0, s2);
  if (!st) st = o->upload(gpu, a, hx, bytes, s2);
  if (!st) st = o->event_record(gpu, e1, s2);
  if (!st) st = o->stream_wait(gpu, gpu->compute, e1);
  if (!st) st = o->gelu_forward(gpu, GT_F32, b, a, n);
  if (!st) st = o->copy(gpu, c, b, bytes, NULL);
  if (!st) st = o->event_record(gpu, e2, NULL);
  if (!st) st = o->stream_wait(gpu, s2, e2);
  if (!st) st = o->copy(gpu, c2, a, bytes, s2); /* device to device on s2 */
  if (!st) st = o->download(gpu, hy, c, bytes, s2);
  if (!st) st = o->event_record(gpu, e3, s2);
  bool early = false;
  if (!st) st = o->event_query(gpu, e3, &early);
  if (!st) st = o->event_wait(gpu, e3);
  tu_ok_status(st, "upload, stream_wait, kernel, copy, stream_wait, download, event_wait "
                   "across two streams");
  tap_diag("event_query right after queuing 64 MiB each way: %s",
           early ? "complete" : "pending");
  bool d0 = false, d3 = false;
  double sec = -1;
  st = o->event_query(gpu, e0, &d0);
  if (!st) st = o->event_query(gpu, e3, &d3);
  if (!st) st = o->event_elapsed(gpu, e0, e3, &sec);
  tap_ok(st == GT_SUCCESS && d0 && d3,
         "event_query after event_wait: the waited-for event and an earlier one are complete");
  tap_ok(st == GT_SUCCESS && sec >= 0 && sec < 60,
         "event_elapsed between the first and the last marker: %.3f ms >= 0", 1e3 * sec);
  /* the expected bits: the same kernel on the compute stream alone */
  float *want_d = dev_alloc(gpu, bytes);
  dev_put(gpu, a, hx, bytes);
  RUN(gpu, gelu_forward, GT_F32, want_d, a, n);
  float *want = dev_fetch(gpu, want_d, bytes);
  tap_ok(!memcmp(hy, want, bytes),
         "the download on the second stream saw the kernel's result, which saw the upload "
         "(64 MiB bit for bit)");
  float *got2 = dev_fetch(gpu, c2, bytes);
  tap_ok(!memcmp(got2, hx, bytes), "copy on the second stream after its upload: bit for bit");
  /* pageable host memory both ways on the second stream */
  float *px = tu_alloc(n), *py = tu_alloc(n);
  tu_fill(px, n, 62, -1, 1);
  st = o->upload(gpu, b, px, bytes, s2);
  if (!st) st = o->download(gpu, py, b, bytes, s2);
  if (!st) st = o->event_record(gpu, e3, s2);
  if (!st) st = o->event_wait(gpu, e3);
  tap_ok(st == GT_SUCCESS && !memcmp(px, py, bytes),
         "pageable host memory: upload then download on the second stream, bit for bit");
  st = o->sync(gpu);
  tu_ok_status(st, "sync");
  free(want), free(got2), free(px), free(py);
  dev_free(gpu, want_d), dev_free(gpu, a), dev_free(gpu, b), dev_free(gpu, c);
  dev_free(gpu, c2);
  st = o->event_destroy(gpu, e0);
  if (!st) st = o->event_destroy(gpu, e1);
  if (!st) st = o->event_destroy(gpu, e2);
  if (!st) st = o->event_destroy(gpu, e3);
  if (!st) st = o->stream_destroy(gpu, s2);
  if (!st) st = o->free_host(gpu, hx);
  if (!st) st = o->free_host(gpu, hy);
  tu_ok_status(st, "event_destroy, stream_destroy, free_host");
}

static void test_host_memory(void)
{
  const gt_backend_ops *o = gpu->ops;
  const size_t sizes[3] = {1, 4096 + 3, (size_t)3 << 20};
  for (int k = 0; k < 3; k++) {
    unsigned char *h = NULL;
    int st = o->alloc_host(gpu, sizes[k], (void **)&h);
    if (!tu_ok_status(st, "alloc_host"))
      continue;
    for (size_t i = 0; i < sizes[k]; i++)
      h[i] = (unsigned char)(i * 7 + 1);
    void *d = dev_alloc(gpu, sizes[k]);
    dev_put(gpu, d, h, sizes[k]);
    unsigned char *back = dev_fetch(gpu, d, sizes[k]);
    tap_ok(((uintptr_t)h % 16) == 0 && !memcmp(back, h, sizes[k]),
           "alloc_host %zu bytes: aligned, writable, round trip through the device", sizes[k]);
    free(back);
    dev_free(gpu, d);
    tu_ok_status(o->free_host(gpu, h), "free_host");
  }
}

// ---- determinism at larger sizes -------------------------------------------------------------------

static void test_determinism(gt_dtype dt)
{
  char tag[32];
  snprintf(tag, sizeof tag, "[%s]", gt_dtype_name(dt));
  /* embedding backward: 1024 tokens over 256 rows */
  {
    const int64_t B = 8, T = 128, C = 768, V = 256;
    const size_t N = (size_t)(B * T), n = N * (size_t)C;
    int32_t *tok = xmalloc(N * 4);
    tu_fill_int(tok, N, 91, (int32_t)V);
    void *dy = rand_dt(dt, n, 92, -1, 1);
    float *e0 = tu_alloc((size_t)(V * C)), *p0 = tu_alloc((size_t)(T * C));
    tu_fill(e0, (size_t)(V * C), 93, -1, 1);
    tu_fill(p0, (size_t)(T * C), 94, -1, 1);
    int32_t *dt_tok = dev_alloc(gpu, N * 4);
    void *ddy = dev_alloc(gpu, n * es(dt));
    float *de = dev_alloc(gpu, (size_t)(V * C) * 4), *dp = dev_alloc(gpu, (size_t)(T * C) * 4);
    dev_put(gpu, dt_tok, tok, N * 4);
    dev_put(gpu, ddy, dy, n * es(dt));
    void *r1[2], *r2[2];
    for (int rep = 0; rep < 2; rep++) {
      dev_put(gpu, de, e0, (size_t)(V * C) * 4);
      dev_put(gpu, dp, p0, (size_t)(T * C) * 4);
      RUN(gpu, embedding_backward, dt, de, dp, ddy, dt_tok, B, T, C, 0, V);
      r1[rep] = dev_fetch(gpu, de, (size_t)(V * C) * 4);
      r2[rep] = dev_fetch(gpu, dp, (size_t)(T * C) * 4);
    }
    tap_ok(!memcmp(r1[0], r1[1], (size_t)(V * C) * 4) &&
               !memcmp(r2[0], r2[1], (size_t)(T * C) * 4),
           "embedding backward B=8 T=128 C=768 V=256 twice: the same bits %s", tag);
    for (int rep = 0; rep < 2; rep++)
      free(r1[rep]), free(r2[rep]);
    free(tok), free(dy), free(e0), free(p0);
    dev_free(gpu, dt_tok), dev_free(gpu, ddy), dev_free(gpu, de), dev_free(gpu, dp);
  }
  /* layernorm backward: dw, db reduced over 2048 rows */
  {
    const int64_t N = 2048, C = 768;
    const size_t nc = (size_t)(N * C);
    void *x = rand_dt(dt, nc, 95, -2, 3), *w = rand_dt(dt, (size_t)C, 96, 0.5f, 1.5f);
    void *b = rand_dt(dt, (size_t)C, 97, -1, 1), *dy = rand_dt(dt, nc, 98, -1, 1);
    void *dx0 = rand_dt(dt, nc, 99, -1, 1);
    void *dxd = dev_alloc(gpu, nc * es(dt)), *yd = dev_alloc(gpu, nc * es(dt));
    void *wd = dev_alloc(gpu, (size_t)C * es(dt)), *bd = dev_alloc(gpu, (size_t)C * es(dt));
    void *dyd = dev_alloc(gpu, nc * es(dt)), *xd = dev_alloc(gpu, nc * es(dt));
    float *md = dev_alloc(gpu, (size_t)N * 4), *rd = dev_alloc(gpu, (size_t)N * 4);
    float *dwd = dev_alloc(gpu, (size_t)C * 4), *dbd = dev_alloc(gpu, (size_t)C * 4);
    dev_put(gpu, xd, x, nc * es(dt));
    dev_put(gpu, wd, w, (size_t)C * es(dt));
    dev_put(gpu, bd, b, (size_t)C * es(dt));
    dev_put(gpu, dyd, dy, nc * es(dt));
    RUN(gpu, layernorm_forward, dt, yd, md, rd, xd, wd, bd, N, C);
    void *r[2][3];
    for (int rep = 0; rep < 2; rep++) {
      dev_put(gpu, dxd, dx0, nc * es(dt));
      RUN(gpu, zero, dwd, (size_t)C * 4);
      RUN(gpu, zero, dbd, (size_t)C * 4);
      RUN(gpu, layernorm_backward, dt, dxd, dwd, dbd, dyd, xd, wd, md, rd, N, C);
      r[rep][0] = dev_fetch(gpu, dxd, nc * es(dt));
      r[rep][1] = dev_fetch(gpu, dwd, (size_t)C * 4);
      r[rep][2] = dev_fetch(gpu, dbd, (size_t)C * 4);
    }
    tap_ok(!memcmp(r[0][0], r[1][0], nc * es(dt)) && !memcmp(r[0][1], r[1][1], (size_t)C * 4) &&
               !memcmp(r[0][2], r[1][2], (size_t)C * 4),
           "layernorm backward N=2048 C=768 twice: the same bits (din, dw, db) %s", tag);
    for (int rep = 0; rep < 2; rep++)
      for (int k = 0; k < 3; k++)
        free(r[rep][k]);
    free(x), free(w), free(b), free(dy), free(dx0);
    dev_free(gpu, dxd), dev_free(gpu, yd), dev_free(gpu, wd), dev_free(gpu, bd);
    dev_free(gpu, dyd), dev_free(gpu, xd), dev_free(gpu, md), dev_free(gpu, rd);
    dev_free(gpu, dwd), dev_free(gpu, dbd);
  }
}

// ---- unaligned addresses (last: a faulting access may end the device context) --------------

static void test_odd_addresses(void)
{
  const float sp[4] = {INFINITY, NAN, 65520.0f, 1e-40f};
  float *r = cast_sources(sp, 4, 20011);
  uint16_t *pat = all_patterns();
  const gt_dtype h16[2] = {GT_BF16, GT_F16};
  for (int k = 0; k < 3; k++)
    cast_slice_case(all_dt[k], GT_F32, r, 20015);
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 3; k++)
      cast_slice_case(all_dt[k], h16[j], pat, 65536);
  free(r), free(pat);
  /* sums: an order fixed by n, so the same values at any address give the
   * same bits */
  const size_t sizes[2] = {1000, 3000001};
  for (int k = 0; k < 2; k++) {
    const size_t n = sizes[k];
    float *x = tu_alloc(n);
    tu_fill(x, n, 45 + n, -0.5f, 1.0f);
    float *d = dev_alloc(gpu, (n + 4) * 4);
    for (int sq = 0; sq < 2; sq++) {
      double at[4];
      for (int off = 0; off < 4; off++) {
        dev_put(gpu, d + off, x, n * 4);
        at[off] = sum_on(gpu, sq, d + off, n);
      }
      float *dr = dev_alloc(ref, n * 4);
      dev_put(ref, dr, x, n * 4);
      const double want = sum_on(ref, sq, dr, n);
      dev_free(ref, dr);
      tap_ok(!memcmp(&at[0], &at[1], 8) && !memcmp(&at[0], &at[2], 8) &&
                 !memcmp(&at[0], &at[3], 8) && fabs(at[1] - want) <= SUM_TOL * fabs(want),
             "%s n=%zu at offsets of 0..3 floats: the same bits (%.17g, %.17g, %.17g, %.17g)",
             sq ? "sumsq_add" : "sum_add", n, at[0], at[1], at[2], at[3]);
    }
    dev_free(gpu, d);
    free(x);
  }
}

// ---- set-up --------------------------------------------------------------------------------------------

/* Create the backend under test; skip (exit 77) when "cuda" cannot be
 * created because there is no CUDA or no GPU, bail out otherwise. */
static gt_backend *create_gpu(const char *what)
{
  gt_backend *be = NULL;
  if (gt_backend_create(gpu_name, 1, &be) == GT_SUCCESS)
    return be;
  if (strcmp(gpu_name, "cuda") == 0 && (!gt_cuda_built() || gt_cuda_device_count() == 0)) {
    char desc[256];
    gt_cuda_describe(desc, sizeof desc);
    printf("1..0 # SKIP no CUDA device: %s\n", desc);
    fflush(stdout);
    gt_backend_destroy(&ref);
    MPI_Finalize();
    exit(77);
  }
  tap_bail("cannot create the %s backend (%s): %s", gpu_name, what, gt_error_message());
  exit(1);
}

/* The guards of every buffer, then the plan. */
static int finish(void)
{
  tap_ok(guard_hits == 0, "no op wrote outside its buffers (%ld buffers' guards checked, %ld hit)",
         guards_checked, guard_hits);
  const int rc = tap_done();
  MPI_Finalize();
  return rc;
}

/* --smoke: the first minute of a GPU run (tests/gpu/run.sh): one product
 * of each precision with bias and residual, forward and backward, and one
 * attention case forward and backward in each, against cpu-ref by the same
 * bounds as the full run. */
static int smoke(void)
{
  for (int k = 0; k < 3; k++)
    test_linear(all_dt[k], 257, 96, 200);
  attn_case cases[3];
  for (int k = 0; k < 3; k++)
    cases[k] = attn_make(all_dt[k], (shape){2, 130, 3, 64, 3});
  attn_run(gpu, "default", cases, 3);
  for (int k = 0; k < 3; k++)
    attn_free(&cases[k]);
  gt_backend_destroy(&gpu);
  gt_backend_destroy(&ref);
  return finish();
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  unsetenv("GT_CUDA_ATTENTION"); /* the default variant is the default: cudnn */
  const char *env = getenv("GT_GPU_TEST_BACKEND");
  if (env && env[0])
    gpu_name = env;
  if (gt_backend_create("cpu-ref", 1, &ref) != GT_SUCCESS)
    return tap_bail("cannot create cpu-ref: %s", gt_error_message());
  gpu = create_gpu("default");
  char desc[256];
  gt_cuda_describe(desc, sizeof desc);
  tap_diag("backend under test: %s, reference: %s; %s", gpu->name, ref->name, desc);
  if (argc > 1 && strcmp(argv[1], "--smoke") == 0)
    return smoke();
  if (argc > 1)
    return tap_bail("usage: test_cuda_ops [--smoke]");

  test_cast();
  for (int k = 0; k < 3; k++) {
    const gt_dtype dt = all_dt[k];
    test_linear(dt, 257, 96, 200); /* several tiles in N and OC, C not a multiple of 64 */
    test_linear(dt, 37, 24, 40);
    test_linear(dt, 1, 7, 3);
    test_linear(dt, 33, 100, 1);
    test_linear(dt, 256, 512, 520); /* a K of 512, OC past 512 */
    test_linear(dt, 3, 0, 5);       /* C = 0: out = bias + residual, dw unchanged */
    test_layernorm(dt, 33, 40);
    test_layernorm(dt, 9, 600);
    test_layernorm(dt, 5, 13);
    test_layernorm(dt, 7, 1001);
    test_layernorm(dt, 512, 768);
    test_gelu(dt, 1001);
    test_gelu(dt, 20011);
    test_gelu(dt, ((size_t)1 << 20) + 3);
    test_rmsnorm(dt, 33, 40, 1e-5f);
    test_rmsnorm(dt, 5, 13, 1e-6f);      /* C odd: the scalar path */
    test_rmsnorm(dt, 300, 72, 1e-5f);    /* two chunks of dw partials */
    test_rmsnorm(dt, 3, 4104, 1e-5f);    /* past 4096: a block per row */
    test_rope(dt, 2, 5, 6, 4, 2, 3);     /* hs = 2: one pair, the scalar path */
    test_rope(dt, 2, 7, 3, 2, 64, 0);    /* (B,T,3,H,hs) with H = 1 */
    test_rope(dt, 1, 3, 5, 3, 18, 11);   /* hs/2 odd, GQA-like S = 1 + 2*2 */
    test_rope(dt, 3, 17, 10, 6, 128, 1); /* packs */
    test_swiglu(dt, 7, 13);              /* F odd: the scalar path */
    test_swiglu(dt, 33, 1000);           /* packs */
    test_swiglu(dt, 3, 1001);
    test_embedding(dt, 3, 11, 300, 37, 0, 37, 12, true);  /* repeats, the whole vocabulary */
    test_embedding(dt, 3, 11, 300, 37, 5, 12, 37, false); /* a shard, tokens on both sides */
    test_embedding(dt, 3, 11, 300, 37, 5, 12, 37, true);
    test_embedding(dt, 8, 128, 768, 256, 100, 100, 256, true);
    test_xent(dt, 19, 67, 1, 67);
    test_xent(dt, 7, 61, 1, 64);     /* padding */
    test_xent(dt, 33, 1000, 1, 1024);
    test_xent(dt, 19, 67, 3, 23);    /* padding on the last shard only */
    test_xent(dt, 13, 61, 3, 32);    /* padding on every shard */
    test_xent(dt, 16, 50257, 3, 16768); /* GPT-2 vocabulary rows */
    test_determinism(dt);
  }
  test_embedding_order(GT_F32);
  test_embedding_order(GT_BF16);
  test_moe();
  test_adamw(1000003, -1);
  for (int k = 0; k < 3; k++)
    test_adamw(1000003, all_dt[k]);
  test_sums(1);
  test_sums(1000);
  test_sums(3000001);
  test_zero();
  test_streams();
  test_host_memory();

  /* attention: cpu-ref once, then the default backend and both variants;
   * the long case is T = 1024 on a GPU, and T = 300 under the emulator (it
   * still spans many tiles each way, at a tenth of the host's work) */
  /* grouped-query shapes: 2 query heads per key/value head, 4 per head
   * with hs = 64 (Llama's group and head size), and one key/value head for
   * all (multi-query), over several key tiles */
  const shape shapes[] = {{2, 1, 3, 16, 3},     {2, 1, 3, 64, 3},  {2, 17, 3, 16, 3},
                          {2, 17, 3, 64, 3},    {2, 64, 3, 16, 3}, {2, 64, 3, 64, 3},
                          {2, 130, 3, 16, 3},   {2, 130, 3, 64, 3}, {2, 70, 4, 32, 2},
                          {2, 100, 8, 64, 2},   {1, 130, 3, 64, 1},
                          {1, emulated() ? 300 : 1024, 3, 64, 3}};
  const int nsh = (int)(sizeof shapes / sizeof *shapes);
  attn_case cases[3 * sizeof shapes / sizeof *shapes];
  int nc = 0;
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < nsh; i++)
      cases[nc++] = attn_make(all_dt[k], shapes[i]);
  attn_run(gpu, "default", cases, nc);
  attn_decode_run(gpu, cases, nc);
  gt_backend_destroy(&gpu);
  /* the other variants (the default is cudnn): our kernels, and cuDNN's
   * fast backward; under the emulator, which has no cuDNN, the default
   * already ran our kernels */
  if (strcmp(gpu_name, "cuda") == 0 && !emulated()) {
    const char *kinds[2] = {"own", "cudnn-fast"};
    char *saved = getenv("GT_CUDA_ATTENTION") ? strdup(getenv("GT_CUDA_ATTENTION")) : NULL;
    for (int k = 0; k < 2; k++) {
      char label[40];
      snprintf(label, sizeof label, "GT_CUDA_ATTENTION=%s", kinds[k]);
      setenv("GT_CUDA_ATTENTION", kinds[k], 1);
      gpu = create_gpu(label);
      attn_run(gpu, label, cases, nc);
      gt_backend_destroy(&gpu);
    }
    if (saved)
      setenv("GT_CUDA_ATTENTION", saved, 1);
    else
      unsetenv("GT_CUDA_ATTENTION");
    free(saved);
  } else {
    tap_diag("GT_CUDA_ATTENTION variants own and cudnn-fast: only for the cuda backend on a "
             "GPU");
  }
  for (int k = 0; k < nc; k++)
    attn_free(&cases[k]);
  gpu = create_gpu("for unaligned addresses");
  test_odd_addresses();
  gt_backend_destroy(&gpu);
  gt_backend_destroy(&ref);
  return finish();
}
