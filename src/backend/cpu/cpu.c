/*
 * cpu.c - the kernels of the fast host backend: OpenBLAS sgemm for every
 * matrix product, OpenMP over rows (or column blocks, where rows would race)
 * for the rest. Memory, streams and events come from cpu_stream.c.
 *
 * Precisions: each kernel body is written once over typed loads and stores
 * (gridtrain/half.h) and instantiated for fp32, bf16 and fp16 with the type a
 * constant (GT_BY_DT), so the 16-bit paths do the fp32 arithmetic on the
 * values they read and round each output once; the fp32 instantiation is
 * plain fp32 code. Matrix products convert 16-bit operands to fp32 scratch,
 * run sgemm and round the result once.
 *
 * Determinism: every reduction has a fixed partition and a fixed order for a
 * given thread count, so a run repeats bit for bit (restarts rely on it).
 * Reductions accumulate in double where fp32 would lose digits (statistics,
 * bias and LayerNorm gradients, loss sums).
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backends.h"
#include "cpu_simd.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"

#define GT_LN_EPS 1e-5f
#define GT_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GT_COL_BLOCK 256              /* columns per task in column-parallel sums */
#define GT_SPAN 8192                  /* elements per task in element-wise loops */

/* The largest M, N, K (and leading dimension) handed to one sgemm call:
 * OpenBLAS takes int. Tests may build with a small value to exercise the
 * splitting. */
#ifndef GT_GEMM_MAX
#define GT_GEMM_MAX INT_MAX
#endif

/* fp32 elements of 16-bit GEMM operands converted per row block (in and
 * out rows together): bounds the scratch of a large layer (the LM head). */
#ifndef GT_CVT_ELEMS
#define GT_CVT_ELEMS ((int64_t)1 << 25)
#endif

// ---- scratch: per thread, grows on demand, freed when the thread exits ---------------------

/* Kernels run on the thread that calls them (the host, or a cpu-async worker:
 * one op at a time per thread), so per-thread scratch needs no locks. Only
 * that thread asks for scratch, outside parallel regions. */
enum { GT_SCRATCH_SLOTS = 4 };
typedef struct {
  void *p[GT_SCRATCH_SLOTS];
  size_t cap[GT_SCRATCH_SLOTS];
} gt_scratch_set;

static _Thread_local gt_scratch_set *gt_scratch_tls;
static pthread_key_t gt_scratch_key;
static pthread_once_t gt_scratch_once = PTHREAD_ONCE_INIT;
static int gt_scratch_key_status;

static void gt_scratch_release(void *arg)
{
  gt_scratch_set *s = arg;
  for (int i = 0; i < GT_SCRATCH_SLOTS; i++)
    free(s->p[i]);
  free(s);
}

static void gt_scratch_key_init(void)
{
  gt_scratch_key_status = pthread_key_create(&gt_scratch_key, gt_scratch_release);
}

/* *p = slot's buffer of at least n floats (64-byte aligned). */
static int gt_scratch_f32(int slot, size_t n, float **p)
{
  gt_scratch_set *s = gt_scratch_tls;
  if (!s) {
    pthread_once(&gt_scratch_once, gt_scratch_key_init);
    GT_CHECK(gt_scratch_key_status == 0, GT_ERR_SYSTEM,
             "cannot create the key of the cpu backend's scratch (pthread_key_create: %d)",
             gt_scratch_key_status);
    s = calloc(1, sizeof *s);
    GT_CHECK_ALLOC(s, sizeof *s);
    if (pthread_setspecific(gt_scratch_key, s) != 0) {
      free(s);
      return GT_ERROR(GT_ERR_SYSTEM, "cannot register the cpu backend's scratch");
    }
    gt_scratch_tls = s;
  }
  const size_t bytes = (n ? n : 1) * sizeof(float);
  if (s->cap[slot] < bytes) {
    free(s->p[slot]);
    s->p[slot] = NULL;
    s->cap[slot] = 0;
    const size_t want = (bytes + bytes / 4 + 63) & ~(size_t)63; /* room to grow */
    void *q = NULL;
    GT_CHECK(posix_memalign(&q, 64, want) == 0, GT_ERR_SYSTEM,
             "out of memory allocating %zu bytes of cpu backend scratch", want);
    s->p[slot] = q;
    s->cap[slot] = want;
  }
  *p = s->p[slot];
  return GT_SUCCESS;
}

// ---- conversions of whole arrays (OpenMP) ----------------------------------------------------

/* dst (n fp32) = src (n of type t). */
static void gt_to_f32_par(gt_dtype t, float *dst, const void *src, size_t n)
{
  const size_t nb = (n + GT_SPAN - 1) / GT_SPAN;
#pragma omp parallel for schedule(static) if (nb > 1)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * GT_SPAN, len = n - lo < GT_SPAN ? n - lo : GT_SPAN;
    gt_to_f32(t, dst + lo, gt_cat(t, src, lo), len);
  }
}

/* dst (n of type t) = src (n fp32), rounded. */
static void gt_from_f32_par(gt_dtype t, void *dst, const float *src, size_t n)
{
  const size_t nb = (n + GT_SPAN - 1) / GT_SPAN;
#pragma omp parallel for schedule(static) if (nb > 1)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * GT_SPAN, len = n - lo < GT_SPAN ? n - lo : GT_SPAN;
    gt_from_f32(t, gt_at(t, dst, lo), src + lo, len);
  }
}

static int cpu_cast(gt_backend *be, gt_dtype dst_t, void *dst, gt_dtype src_t, const void *src,
                    size_t n)
{
  (void)be;
  GT_CHECK(gt_float_type(dst_t) && gt_float_type(src_t), GT_ERR_INTERNAL,
           "internal error: cast from %s to %s: both must be fp32, bf16 or fp16",
           gt_dtype_name(src_t), gt_dtype_name(dst_t));
  if (dst_t == src_t) {
    if (dst != src && n)
      memmove(dst, src, n * gt_dtype_size(src_t));
    return GT_SUCCESS;
  }
  if (src_t == GT_F32) {
    gt_from_f32_par(dst_t, dst, src, n);
  } else if (dst_t == GT_F32) {
    gt_to_f32_par(src_t, dst, src, n);
  } else { /* bf16 <-> fp16 through fp32 (exact), rounded once */
    const size_t nb = (n + GT_SPAN - 1) / GT_SPAN;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (size_t b = 0; b < nb; b++) {
      float tmp[GT_SPAN];
      const size_t lo = b * GT_SPAN, len = n - lo < GT_SPAN ? n - lo : GT_SPAN;
      gt_to_f32(src_t, tmp, gt_cat(src_t, src, lo), len);
      gt_from_f32(dst_t, gt_at(dst_t, dst, lo), tmp, len);
    }
  }
  return GT_SUCCESS;
}

// ---- dense algebra ------------------------------------------------------------------

/* The leading dimension to hand to BLAS for a stored block of `cols`
 * columns: ld itself, or (for a one-row block, where BLAS never steps by
 * it) the block's width when ld does not fit; at least 1. */
static int gt_blas_ld(int64_t ld, int64_t cols)
{
  if (ld > GT_GEMM_MAX)
    ld = cols;
  return ld > 1 ? (int)ld : 1; /* BLAS wants >= 1 even when K = 0 */
}

/* Row-major C(M,N) = op(A)(M,K) op(B)(K,N) + beta C, as one cblas_sgemm call
 * when every size fits an int, else as several: blocks of rows and columns
 * of C, and blocks of K accumulated with beta = 1 after the first. A leading
 * dimension past the limit makes the blocks of that matrix one row high. */
static void gt_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
  if (M <= 0 || N <= 0)
    return;
  const int64_t big = GT_GEMM_MAX;
  const int64_t mmax = ldc > big || (!ta && lda > big) ? 1 : big;
  const int64_t kmax = (ta && lda > big) || (!tb && ldb > big) ? 1 : big;
  const int64_t nmax = tb && ldb > big ? 1 : big;
  for (int64_t m0 = 0; m0 < M; m0 += mmax) {
    const int64_t mc = gt_min64(mmax, M - m0);
    for (int64_t n0 = 0; n0 < N; n0 += nmax) {
      const int64_t nc = gt_min64(nmax, N - n0);
      int64_t k0 = 0;
      do { /* K = 0 still applies beta once */
        const int64_t kc = gt_min64(kmax, K - k0);
        const float *a = ta ? A + k0 * lda + m0 : A + m0 * lda + k0;
        const float *b = tb ? B + n0 * ldb + k0 : B + k0 * ldb + n0;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                    tb ? CblasTrans : CblasNoTrans, (int)mc, (int)nc, (int)kc, 1.0f, a,
                    gt_blas_ld(lda, ta ? mc : kc), b, gt_blas_ld(ldb, tb ? kc : nc),
                    k0 == 0 ? beta : 1.0f, C + m0 * ldc + n0, gt_blas_ld(ldc, nc));
        k0 += kc;
      } while (k0 < K);
    }
  }
}

/* Rows of a 16-bit GEMM operand block: in and out rows of `width` floats
 * together within GT_CVT_ELEMS. */
static int64_t gt_block_rows(int64_t N, int64_t width)
{
  int64_t rows = GT_CVT_ELEMS / (width > 1 ? width : 1);
  return rows < 1 ? 1 : (rows > N ? (N > 0 ? N : 1) : rows);
}

/* fp32: the bias and the residual go into out first; sgemm then adds the
 * product (beta = 1), so neither needs a pass of its own afterwards. */
static void gt_linear_forward_f32(float *out, const float *in, const float *w,
                                  const float *bias, const float *residual, int64_t N,
                                  int64_t C, int64_t OC)
{
  if (bias && residual) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
      float *o = out + (size_t)i * OC;
      const float *r = residual + (size_t)i * OC;
#pragma omp simd
      for (int64_t j = 0; j < OC; j++)
        o[j] = r[j] + bias[j];
    }
  } else if (bias || residual) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
      memcpy(out + (size_t)i * OC, bias ? bias : residual + (size_t)i * OC,
             sizeof(float) * (size_t)OC);
  }
  gt_sgemm(false, true, N, OC, C, in, C, w, C, bias || residual ? 1.0f : 0.0f, out, OC);
}

/* o(OC) fp32 = r (dt, may be NULL) + b (fp32, may be NULL), as the fp32 path. */
GT_INLINE void gt_bias_residual_row(gt_dtype dt, float *o, const void *r, const float *b,
                                    int64_t OC)
{
  if (r && b) {
#pragma omp simd
    for (int64_t j = 0; j < OC; j++)
      o[j] = gt_load1(dt, r, (size_t)j) + b[j];
  } else if (r) {
    gt_to_f32(dt, o, r, (size_t)OC);
  } else {
    memcpy(o, b, sizeof(float) * (size_t)OC);
  }
}

/* bf16 / fp16: w, bias and blocks of rows of in converted to fp32 scratch,
 * out's block built in fp32 as on the fp32 path, then rounded once. */
static int gt_linear_forward_16(gt_dtype dt, void *out, const void *in, const void *w,
                                const void *bias, const void *residual, int64_t N, int64_t C,
                                int64_t OC)
{
  float *w32, *b32 = NULL, *in32, *out32;
  GT_CALL(gt_scratch_f32(0, (size_t)OC * (size_t)C, &w32));
  gt_to_f32_par(dt, w32, w, (size_t)OC * (size_t)C);
  if (bias) {
    GT_CALL(gt_scratch_f32(1, (size_t)OC, &b32));
    gt_to_f32(dt, b32, bias, (size_t)OC);
  }
  const int64_t nb = gt_block_rows(N, C + OC);
  GT_CALL(gt_scratch_f32(2, (size_t)nb * (size_t)C, &in32));
  GT_CALL(gt_scratch_f32(3, (size_t)nb * (size_t)OC, &out32));
  for (int64_t i0 = 0; i0 < N; i0 += nb) {
    const int64_t rows = gt_min64(nb, N - i0);
    gt_to_f32_par(dt, in32, gt_cat(dt, in, (size_t)i0 * C), (size_t)rows * C);
    if (bias || residual) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < rows; i++) {
        const void *r = residual ? gt_cat(dt, residual, (size_t)(i0 + i) * OC) : NULL;
        GT_BY_DT(dt, gt_bias_residual_row, out32 + (size_t)i * OC, r, b32, OC);
      }
    }
    gt_sgemm(false, true, rows, OC, C, in32, C, w32, C, bias || residual ? 1.0f : 0.0f, out32,
             OC);
    gt_from_f32_par(dt, gt_at(dt, out, (size_t)i0 * OC), out32, (size_t)rows * OC);
  }
  return GT_SUCCESS;
}

static int cpu_linear_forward(gt_backend *be, gt_dtype dt, void *out, const void *in,
                              const void *w, const void *bias, const void *residual, int64_t N,
                              int64_t C, int64_t OC)
{
  (void)be;
  GT_CHECK_DT(dt);
  GT_ASSERT(N >= 0 && C >= 0 && OC >= 0);
  if (dt == GT_F32) {
    gt_linear_forward_f32(out, in, w, bias, residual, N, C, OC);
    return GT_SUCCESS;
  }
  if (dt == GT_BF16 && gt_dnnl_bf16_enabled()) {
    /* the residual goes into out first; the product (with the bias) is
     * added to it before the one rounding */
    if (residual && N > 0)
      memcpy(out, residual, (size_t)N * (size_t)OC * sizeof(uint16_t));
    GT_CALL(gt_dnnl_matmul_bf16(false, true, N, OC, C, in, w, bias, residual != NULL, out,
                                GT_BF16));
    return GT_SUCCESS;
  }
  GT_CALL(gt_linear_forward_16(dt, out, in, w, bias, residual, N, C, OC));
  return GT_SUCCESS;
}

/* db(OC) += column sums of dy(N, OC) for columns [c0, c0 + nc), in double. */
GT_INLINE void gt_column_sums_block(gt_dtype dt, float *db, const void *dy, int64_t N,
                                    int64_t OC, int64_t c0, int64_t nc)
{
  double acc[GT_COL_BLOCK] = {0};
  for (int64_t i = 0; i < N; i++) {
    const size_t row = (size_t)i * OC + (size_t)c0;
#pragma omp simd
    for (int64_t c = 0; c < nc; c++)
      acc[c] += gt_load1(dt, dy, row + c);
  }
  for (int64_t c = 0; c < nc; c++)
    db[c0 + c] += (float)acc[c];
}

/* By column blocks: race-free, and each sum in row order. */
static void gt_column_sums_add(gt_dtype dt, float *db, const void *dy, int64_t N, int64_t OC)
{
  const int64_t nblocks = (OC + GT_COL_BLOCK - 1) / GT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; blk++) {
    const int64_t c0 = blk * GT_COL_BLOCK, nc = gt_min64(OC - c0, GT_COL_BLOCK);
    GT_BY_DT(dt, gt_column_sums_block, db, dy, N, OC, c0, nc);
  }
}

/* bf16 / fp16: blocks of rows of dout and in converted to fp32; dw "+=" by
 * sgemm with beta = 1 straight into dw; din's block computed into the
 * scratch of in (no longer needed) and rounded once. */
static int gt_linear_backward_16(gt_dtype dt, void *din, float *dw, const void *dout,
                                 const void *in, const void *w, int64_t N, int64_t C,
                                 int64_t OC)
{
  float *w32 = NULL, *in32, *dout32;
  if (din) {
    GT_CALL(gt_scratch_f32(0, (size_t)OC * (size_t)C, &w32));
    gt_to_f32_par(dt, w32, w, (size_t)OC * (size_t)C);
  }
  const int64_t nb = gt_block_rows(N, C + OC);
  GT_CALL(gt_scratch_f32(2, (size_t)nb * (size_t)C, &in32));
  GT_CALL(gt_scratch_f32(3, (size_t)nb * (size_t)OC, &dout32));
  for (int64_t i0 = 0; i0 < N; i0 += nb) {
    const int64_t rows = gt_min64(nb, N - i0);
    gt_to_f32_par(dt, dout32, gt_cat(dt, dout, (size_t)i0 * OC), (size_t)rows * OC);
    if (dw) {
      gt_to_f32_par(dt, in32, gt_cat(dt, in, (size_t)i0 * C), (size_t)rows * C);
      gt_sgemm(true, false, OC, C, rows, dout32, OC, in32, C, 1.0f, dw, C);
    }
    if (din) {
      gt_sgemm(false, false, rows, C, OC, dout32, OC, w32, C, 0.0f, in32, C);
      gt_from_f32_par(dt, gt_at(dt, din, (size_t)i0 * C), in32, (size_t)rows * C);
    }
  }
  return GT_SUCCESS;
}

static int cpu_linear_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *dbias,
                               const void *dout, const void *in, const void *w, int64_t N,
                               int64_t C, int64_t OC)
{
  (void)be;
  GT_CHECK_DT(dt);
  GT_ASSERT(N >= 0 && C >= 0 && OC >= 0);
  if (dt == GT_F32) {
    if (din)
      gt_sgemm(false, false, N, C, OC, dout, OC, w, C, 0.0f, din, C);
    if (dw)
      gt_sgemm(true, false, OC, C, N, dout, OC, in, C, 1.0f, dw, C);
  } else if (dt == GT_BF16 && gt_dnnl_bf16_enabled()) {
    if (din)
      GT_CALL(gt_dnnl_matmul_bf16(false, false, N, C, OC, dout, w, NULL, false, din, GT_BF16));
    if (dw)
      GT_CALL(gt_dnnl_matmul_bf16(true, false, OC, C, N, dout, in, NULL, true, dw, GT_F32));
  } else if (din || dw) {
    GT_CALL(gt_linear_backward_16(dt, din, dw, dout, in, w, N, C, OC));
  }
  if (dbias)
    gt_column_sums_add(dt, dbias, dout, N, OC);
  return GT_SUCCESS;
}

// ---- normalisation and activations ------------------------------------------------

/* Row i of (N, C). */
GT_INLINE void gt_ln_forward_row(gt_dtype dt, void *out, float *mean, float *rstd,
                                 const void *in, const void *w, const void *b, int64_t i,
                                 int64_t C)
{
  const size_t o = (size_t)i * (size_t)C;
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; c++)
    s += gt_load1(dt, in, o + c);
  float m = (float)(s / C);
  double v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t c = 0; c < C; c++) {
    const float x = gt_load1(dt, in, o + c);
    v += (double)((x - m) * (x - m));
  }
  float r = (float)(1.0 / sqrt(v / C + GT_LN_EPS));
#pragma omp simd
  for (int64_t c = 0; c < C; c++) {
    const float x = gt_load1(dt, in, o + c);
    gt_store1(dt, out, o + c, (x - m) * r * gt_load1(dt, w, c) + gt_load1(dt, b, c));
  }
  mean[i] = m;
  rstd[i] = r;
}

static int cpu_layernorm_forward(gt_backend *be, gt_dtype dt, void *out, float *mean,
                                 float *rstd, const void *in, const void *w, const void *b,
                                 int64_t N, int64_t C)
{
  (void)be;
  GT_CHECK_DT(dt);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    GT_BY_DT(dt, gt_ln_forward_row, out, mean, rstd, in, w, b, i, C);
  return GT_SUCCESS;
}

/* din row i "+=": the row's sums are taken before the row is written, so
 * din may alias dout. */
GT_INLINE void gt_ln_backward_row(gt_dtype dt, void *din, const void *dout, const void *in,
                                  const void *w, const float *mean, const float *rstd,
                                  int64_t i, int64_t C)
{
  const size_t o = (size_t)i * (size_t)C;
  const float m = mean[i], r = rstd[i];
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t c = 0; c < C; c++) {
    float dxhat = gt_load1(dt, dout, o + c) * gt_load1(dt, w, c);
    s1 += dxhat;
    s2 += dxhat * ((gt_load1(dt, in, o + c) - m) * r);
  }
  const float mean_dxhat = (float)(s1 / C), mean_dxhat_xhat = (float)(s2 / C);
#pragma omp simd
  for (int64_t c = 0; c < C; c++) {
    float xhat = (gt_load1(dt, in, o + c) - m) * r;
    float dx = gt_load1(dt, din, o + c);
    dx += r * (gt_load1(dt, dout, o + c) * gt_load1(dt, w, c) - mean_dxhat -
               xhat * mean_dxhat_xhat);
    gt_store1(dt, din, o + c, dx);
  }
}

/* dw, db "+=" over columns [c0, c0 + nc), summed in row order in double. */
GT_INLINE void gt_ln_backward_cols(gt_dtype dt, float *dw, float *db, const void *dout,
                                   const void *in, const float *mean, const float *rstd,
                                   int64_t N, int64_t C, int64_t c0, int64_t nc)
{
  double aw[GT_COL_BLOCK] = {0}, ab[GT_COL_BLOCK] = {0};
  for (int64_t i = 0; i < N; i++) {
    const size_t o = (size_t)i * (size_t)C + (size_t)c0;
    const float m = mean[i], r = rstd[i];
#pragma omp simd
    for (int64_t c = 0; c < nc; c++) {
      const float dy = gt_load1(dt, dout, o + c);
      aw[c] += dy * ((gt_load1(dt, in, o + c) - m) * r);
      ab[c] += dy;
    }
  }
  for (int64_t c = 0; c < nc; c++) {
    dw[c0 + c] += (float)aw[c];
    db[c0 + c] += (float)ab[c];
  }
}

/* dw, db first (by column blocks), then din (by rows): dw and db read dout
 * before din, which may alias it, changes. */
static int cpu_layernorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *db,
                                  const void *dout, const void *in, const void *w,
                                  const float *mean, const float *rstd, int64_t N, int64_t C)
{
  (void)be;
  GT_CHECK_DT(dt);
  const int64_t nblocks = (C + GT_COL_BLOCK - 1) / GT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; blk++) {
    const int64_t c0 = blk * GT_COL_BLOCK, nc = gt_min64(C - c0, GT_COL_BLOCK);
    GT_BY_DT(dt, gt_ln_backward_cols, dw, db, dout, in, mean, rstd, N, C, c0, nc);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    GT_BY_DT(dt, gt_ln_backward_row, din, dout, in, w, mean, rstd, i, C);
  return GT_SUCCESS;
}

GT_INLINE void gt_gelu_forward_span(gt_dtype dt, void *out, const void *in, size_t lo,
                                    size_t hi)
{
#pragma omp simd
  for (size_t i = lo; i < hi; i++) {
    float x = gt_load1(dt, in, i);
    gt_store1(dt, out, i, 0.5f * x * (1.0f + gt_tanhf(GT_GELU_K * (x + 0.044715f * x * x * x))));
  }
}

static int cpu_gelu_forward(gt_backend *be, gt_dtype dt, void *out, const void *in, size_t n)
{
  (void)be;
  GT_CHECK_DT(dt);
  const size_t nb = (n + GT_SPAN - 1) / GT_SPAN;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * GT_SPAN, hi = n - lo < GT_SPAN ? n : lo + GT_SPAN;
    GT_BY_DT(dt, gt_gelu_forward_span, out, in, lo, hi);
  }
  return GT_SUCCESS;
}

/* din may alias dout: element i is read before it is written. */
GT_INLINE void gt_gelu_backward_span(gt_dtype dt, void *din, const void *in, const void *dout,
                                     size_t lo, size_t hi)
{
#pragma omp simd
  for (size_t i = lo; i < hi; i++) {
    float x = gt_load1(dt, in, i);
    float t = gt_tanhf(GT_GELU_K * (x + 0.044715f * x * x * x));
    float d = 0.5f * (1.0f + t) +
              0.5f * x * (1.0f - t * t) * GT_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    gt_store1(dt, din, i, d * gt_load1(dt, dout, i));
  }
}

static int cpu_gelu_backward(gt_backend *be, gt_dtype dt, void *din, const void *in,
                             const void *dout, size_t n)
{
  (void)be;
  GT_CHECK_DT(dt);
  const size_t nb = (n + GT_SPAN - 1) / GT_SPAN;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * GT_SPAN, hi = n - lo < GT_SPAN ? n : lo + GT_SPAN;
    GT_BY_DT(dt, gt_gelu_backward_span, din, in, dout, lo, hi);
  }
  return GT_SUCCESS;
}

// ---- the Llama block: RMSNorm, rotary positions, SwiGLU ----------------------------------

/* Row i of (N, C): rstd from the sum of squares in double, out rounded once. */
GT_INLINE void gt_rms_forward_row(gt_dtype dt, void *out, float *rstd, const void *in,
                                  const void *w, float eps, int64_t i, int64_t C)
{
  const size_t o = (size_t)i * (size_t)C;
  double ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < C; c++) {
    const float x = gt_load1(dt, in, o + c);
    ss += (double)(x * x);
  }
  const float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
#pragma omp simd
  for (int64_t c = 0; c < C; c++)
    gt_store1(dt, out, o + c, gt_load1(dt, in, o + c) * r * gt_load1(dt, w, c));
  rstd[i] = r;
}

static int cpu_rmsnorm_forward(gt_backend *be, gt_dtype dt, void *out, float *rstd,
                               const void *in, const void *w, float eps, int64_t N, int64_t C)
{
  (void)be;
  GT_CHECK_DT(dt);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    GT_BY_DT(dt, gt_rms_forward_row, out, rstd, in, w, eps, i, C);
  return GT_SUCCESS;
}

/* din row i "+=": the row's sum is taken before the row is written, so din
 * may alias dout. */
GT_INLINE void gt_rms_backward_row(gt_dtype dt, void *din, const void *dout, const void *in,
                                   const void *w, const float *rstd, int64_t i, int64_t C)
{
  const size_t o = (size_t)i * (size_t)C;
  const float r = rstd[i];
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; c++)
    s += gt_load1(dt, dout, o + c) * gt_load1(dt, w, c) * (gt_load1(dt, in, o + c) * r);
  const float mean_gx = (float)(s / C);
#pragma omp simd
  for (int64_t c = 0; c < C; c++) {
    const float g = gt_load1(dt, dout, o + c) * gt_load1(dt, w, c);
    const float xhat = gt_load1(dt, in, o + c) * r;
    gt_store1(dt, din, o + c, gt_load1(dt, din, o + c) + r * (g - xhat * mean_gx));
  }
}

/* dw "+=" over columns [c0, c0 + nc), summed in row order in double. */
GT_INLINE void gt_rms_backward_cols(gt_dtype dt, float *dw, const void *dout, const void *in,
                                    const float *rstd, int64_t N, int64_t C, int64_t c0,
                                    int64_t nc)
{
  double aw[GT_COL_BLOCK] = {0};
  for (int64_t i = 0; i < N; i++) {
    const size_t o = (size_t)i * (size_t)C + (size_t)c0;
    const float r = rstd[i];
#pragma omp simd
    for (int64_t c = 0; c < nc; c++)
      aw[c] += gt_load1(dt, dout, o + c) * (gt_load1(dt, in, o + c) * r);
  }
  for (int64_t c = 0; c < nc; c++)
    dw[c0 + c] += (float)aw[c];
}

/* dw first (by column blocks), then din (by rows): dw reads dout before
 * din, which may alias it, changes. */
static int cpu_rmsnorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw,
                                const void *dout, const void *in, const void *w,
                                const float *rstd, int64_t N, int64_t C)
{
  (void)be;
  GT_CHECK_DT(dt);
  const int64_t nblocks = (C + GT_COL_BLOCK - 1) / GT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; blk++) {
    const int64_t c0 = blk * GT_COL_BLOCK, nc = gt_min64(C - c0, GT_COL_BLOCK);
    GT_BY_DT(dt, gt_rms_backward_cols, dw, dout, in, rstd, N, C, c0, nc);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    GT_BY_DT(dt, gt_rms_backward_row, din, dout, in, w, rstd, i, C);
  return GT_SUCCESS;
}

/* Token row (of B*T) of x (B*T, S, hs): heads [0, nrot) rotated by the
 * angles of its position; sign -1: the transpose rotation. Element i of a
 * pair is never element i + h of another, so the pairs vectorise. */
GT_INLINE void gt_rope_token(gt_dtype dt, void *x, const float *cos, const float *sin,
                             int64_t row, int64_t T, int64_t S, int64_t nrot, int64_t hs,
                             int64_t pos0, float sign)
{
  const int64_t h = hs / 2;
  const size_t p = (size_t)(pos0 + row % T) * (size_t)h;
  const float *c = cos + p, *sn = sin + p;
  for (int64_t s = 0; s < nrot; s++) {
    void *v = gt_at(dt, x, ((size_t)row * (size_t)S + (size_t)s) * (size_t)hs);
#pragma omp simd
    for (int64_t i = 0; i < h; i++) {
      const float x1 = gt_load1(dt, v, (size_t)i), x2 = gt_load1(dt, v, (size_t)(i + h));
      const float si = sign * sn[i];
      gt_store1(dt, v, (size_t)i, x1 * c[i] - x2 * si);
      gt_store1(dt, v, (size_t)(i + h), x2 * c[i] + x1 * si);
    }
  }
}

static int gt_rope(gt_dtype dt, void *x, const float *cos, const float *sin, int64_t B,
                   int64_t T, int64_t S, int64_t nrot, int64_t hs, int64_t pos0, float sign)
{
  GT_CHECK_DT(dt);
  GT_CHECK(hs >= 2 && hs % 2 == 0 && nrot >= 0 && nrot <= S && pos0 >= 0, GT_ERR_INTERNAL,
           "internal error: rope: head size %lld (must be even), %lld of %lld heads rotated, "
           "first position %lld",
           (long long)hs, (long long)nrot, (long long)S, (long long)pos0);
  const int64_t N = B * T;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; row++)
    GT_BY_DT(dt, gt_rope_token, x, cos, sin, row, T, S, nrot, hs, pos0, sign);
  return GT_SUCCESS;
}

static int cpu_rope_forward(gt_backend *be, gt_dtype dt, void *x, const float *cos,
                            const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                            int64_t hs, int64_t pos0)
{
  (void)be;
  return gt_rope(dt, x, cos, sin, B, T, S, nrot, hs, pos0, 1.0f);
}

static int cpu_rope_backward(gt_backend *be, gt_dtype dt, void *dx, const float *cos,
                             const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                             int64_t hs, int64_t pos0)
{
  (void)be;
  return gt_rope(dt, dx, cos, sin, B, T, S, nrot, hs, pos0, -1.0f);
}

/* Columns [lo, hi) of row i: out = silu(g) * u. */
GT_INLINE void gt_swiglu_forward_span(gt_dtype dt, void *out, const void *h, int64_t i,
                                      int64_t F, int64_t lo, int64_t hi)
{
  const void *g = gt_cat(dt, h, (size_t)i * 2 * (size_t)F);
  const void *u = gt_cat(dt, h, ((size_t)i * 2 + 1) * (size_t)F);
  void *o = gt_at(dt, out, (size_t)i * (size_t)F);
#pragma omp simd
  for (int64_t j = lo; j < hi; j++) {
    const float x = gt_load1(dt, g, (size_t)j);
    const float sg = 1.0f / (1.0f + gt_expf(-x));
    gt_store1(dt, o, (size_t)j, x * sg * gt_load1(dt, u, (size_t)j));
  }
}

/* Columns [lo, hi) of row i: dg, du from dout; g_j and u_j are read before
 * either is written (dh may alias h). */
GT_INLINE void gt_swiglu_backward_span(gt_dtype dt, void *dh, const void *dout, const void *h,
                                       int64_t i, int64_t F, int64_t lo, int64_t hi)
{
  const void *g = gt_cat(dt, h, (size_t)i * 2 * (size_t)F);
  const void *u = gt_cat(dt, h, ((size_t)i * 2 + 1) * (size_t)F);
  const void *dy = gt_cat(dt, dout, (size_t)i * (size_t)F);
  void *dg = gt_at(dt, dh, (size_t)i * 2 * (size_t)F);
  void *du = gt_at(dt, dh, ((size_t)i * 2 + 1) * (size_t)F);
#pragma omp simd
  for (int64_t j = lo; j < hi; j++) {
    const float x = gt_load1(dt, g, (size_t)j), up = gt_load1(dt, u, (size_t)j);
    const float d = gt_load1(dt, dy, (size_t)j);
    const float sg = 1.0f / (1.0f + gt_expf(-x));
    gt_store1(dt, dg, (size_t)j, d * up * (sg * (1.0f + x * (1.0f - sg))));
    gt_store1(dt, du, (size_t)j, d * x * sg);
  }
}

/* Tasks of up to GT_SPAN columns of one row, so that one long row (decoding)
 * still spreads over the threads. */
static int cpu_swiglu_forward(gt_backend *be, gt_dtype dt, void *out, const void *h, int64_t N,
                              int64_t F)
{
  (void)be;
  GT_CHECK_DT(dt);
  const int64_t per_row = (F + GT_SPAN - 1) / GT_SPAN, ntasks = N * per_row;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < ntasks; k++) {
    const int64_t i = k / per_row, lo = (k % per_row) * GT_SPAN, hi = gt_min64(F, lo + GT_SPAN);
    GT_BY_DT(dt, gt_swiglu_forward_span, out, h, i, F, lo, hi);
  }
  return GT_SUCCESS;
}

static int cpu_swiglu_backward(gt_backend *be, gt_dtype dt, void *dh, const void *dout,
                               const void *h, int64_t N, int64_t F)
{
  (void)be;
  GT_CHECK_DT(dt);
  const int64_t per_row = (F + GT_SPAN - 1) / GT_SPAN, ntasks = N * per_row;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < ntasks; k++) {
    const int64_t i = k / per_row, lo = (k % per_row) * GT_SPAN, hi = gt_min64(F, lo + GT_SPAN);
    GT_BY_DT(dt, gt_swiglu_backward_span, dh, dout, h, i, F, lo, hi);
  }
  return GT_SUCCESS;
}

// ---- embeddings and loss (vocabulary-parallel) ------------------------------------------

/* Row i of out(B*T, C): the shard's row of wte (or 0) plus wpe[t] (or nothing). */
GT_INLINE void gt_embedding_row(gt_dtype dt, void *out, const int32_t *tokens, const void *wte,
                                const void *wpe, int64_t i, int64_t T, int64_t C, int64_t v0,
                                int64_t nv)
{
  const int64_t row = tokens[i] - v0;
  const size_t es = gt_dtype_size(dt), cs = (size_t)C;
  const void *e = row >= 0 && row < nv ? gt_cat(dt, wte, (size_t)row * cs) : NULL;
  const void *p = wpe ? gt_cat(dt, wpe, (size_t)(i % T) * cs) : NULL;
  void *o = gt_at(dt, out, (size_t)i * cs);
  if (e && p) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      gt_store1(dt, o, c, gt_load1(dt, e, c) + gt_load1(dt, p, c));
  } else if (e || p) {
    memcpy(o, e ? e : p, es * cs);
  } else {
    memset(o, 0, es * cs);
  }
}

static int cpu_embedding_forward(gt_backend *be, gt_dtype dt, void *out, const int32_t *tokens,
                                 const void *wte, const void *wpe, int64_t B, int64_t T,
                                 int64_t C, int64_t v0, int64_t nv)
{
  (void)be;
  GT_CHECK_DT(dt);
  const int64_t N = B * T;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    GT_BY_DT(dt, gt_embedding_row, out, tokens, wte, wpe, i, T, C, v0, nv);
  return GT_SUCCESS;
}

/* The tokens in rows [r0, r1) of the shard, columns [c0, c0 + nc): into dwte, in token order. */
GT_INLINE void gt_embedding_scatter(gt_dtype dt, float *dwte, const void *dout,
                                    const int32_t *tokens, int64_t N, int64_t C, int64_t v0,
                                    int64_t r0, int64_t r1, int64_t c0, int64_t nc)
{
  for (int64_t i = 0; i < N; i++) {
    const int64_t row = tokens[i] - v0;
    if (row < r0 || row >= r1)
      continue;
    const size_t d = (size_t)i * (size_t)C + (size_t)c0;
    float *e = dwte + (size_t)row * (size_t)C + c0;
#pragma omp simd
    for (int64_t c = 0; c < nc; c++)
      e[c] += gt_load1(dt, dout, d + c);
  }
}

/* dwpe row t += dout over the batch, in batch order. */
GT_INLINE void gt_embedding_positions(gt_dtype dt, float *dwpe, const void *dout, int64_t t,
                                      int64_t B, int64_t T, int64_t C)
{
  float *p = dwpe + (size_t)t * (size_t)C;
  for (int64_t b = 0; b < B; b++) {
    const size_t d = ((size_t)b * (size_t)T + (size_t)t) * (size_t)C;
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      p[c] += gt_load1(dt, dout, d + c);
  }
}

/* Rows of dwte collide (repeated tokens), so a task owns a range of the
 * shard's rows and a block of columns; every task scans all tokens and adds
 * those in its rows, in token order. Each element thus sums in token order
 * whatever the thread count. */
static int cpu_embedding_backward(gt_backend *be, gt_dtype dt, float *dwte, float *dwpe,
                                  const void *dout, const int32_t *tokens, int64_t B, int64_t T,
                                  int64_t C, int64_t v0, int64_t nv)
{
  GT_CHECK_DT(dt);
  const int64_t N = B * T, nblocks = (C + GT_COL_BLOCK - 1) / GT_COL_BLOCK;
  const int64_t nparts = be->threads < nv ? be->threads : (nv > 0 ? nv : 1);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t part = 0; part < nparts; part++)
    for (int64_t blk = 0; blk < nblocks; blk++) {
      const int64_t r0 = nv * part / nparts, r1 = nv * (part + 1) / nparts;
      const int64_t c0 = blk * GT_COL_BLOCK, nc = gt_min64(C - c0, GT_COL_BLOCK);
      GT_BY_DT(dt, gt_embedding_scatter, dwte, dout, tokens, N, C, v0, r0, r1, c0, nc);
    }
  if (dwpe) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++)
      GT_BY_DT(dt, gt_embedding_positions, dwpe, dout, t, B, T, C);
  }
  return GT_SUCCESS;
}

/* Row i: stats = {max, sum exp(l - max), target logit}. */
GT_INLINE void gt_xent_partial_row(gt_dtype dt, float *stats, const void *logits,
                                   const int32_t *targets, int64_t i, int64_t nv, int64_t ld,
                                   int64_t v0)
{
  const void *l = gt_cat(dt, logits, (size_t)i * (size_t)ld);
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < nv; j++) {
    const float x = gt_load1(dt, l, j);
    mx = x > mx ? x : mx;
  }
  double z = 0;
#pragma omp simd reduction(+ : z)
  for (int64_t j = 0; j < nv; j++)
    z += gt_expf(gt_load1(dt, l, j) - mx);
  const int64_t y = targets[i] - v0;
  stats[3 * (size_t)i] = mx;
  stats[3 * (size_t)i + 1] = (float)z;
  stats[3 * (size_t)i + 2] = y >= 0 && y < nv ? gt_load1(dt, l, y) : 0.0f;
}

static int cpu_xent_partial(gt_backend *be, gt_dtype dt, float *stats, const void *logits,
                            const int32_t *targets, int64_t N, int64_t nv, int64_t ld,
                            int64_t v0)
{
  (void)be;
  GT_CHECK_DT(dt);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    GT_BY_DT(dt, gt_xent_partial_row, stats, logits, targets, i, nv, ld, v0);
  return GT_SUCCESS;
}

/* Row i: the loss from the (P, N, 3) stats; the row's dlogits over (ld)
 * when grad_scale != 0. fp32 stores exp(l - M) / S * scale and then
 * subtracts the scale at the target; 16-bit rows subtract before their one
 * rounding. */
GT_INLINE void gt_xent_finish_row(gt_dtype dt, float *losses, void *logits, const float *stats,
                                  int P, const int32_t *targets, int64_t i, int64_t N,
                                  int64_t nv, int64_t ld, int64_t v0, float grad_scale)
{
  const size_t shard = 3 * (size_t)N;
  const float *st = stats + 3 * (size_t)i;
  float mx = -INFINITY;
  for (int r = 0; r < P; r++)
    mx = st[r * shard] > mx ? st[r * shard] : mx;
  double z = 0, tg = 0;
  for (int r = 0; r < P; r++) {
    z += st[r * shard + 1] * exp((double)st[r * shard] - mx);
    tg += st[r * shard + 2];
  }
  losses[i] = (float)(log(z) + mx - tg);
  if (grad_scale == 0.0f)
    return;
  void *l = gt_at(dt, logits, (size_t)i * (size_t)ld);
  const float s = (float)(grad_scale / z);
  const int64_t y = targets[i] - v0;
  if (dt == GT_F32) {
    float *lf = l;
#pragma omp simd
    for (int64_t j = 0; j < nv; j++)
      lf[j] = gt_expf(lf[j] - mx) * s;
    for (int64_t j = nv; j < ld; j++)
      lf[j] = 0.0f;
    if (y >= 0 && y < nv)
      lf[y] -= grad_scale;
  } else {
#pragma omp simd
    for (int64_t j = 0; j < nv; j++) {
      float g = gt_expf(gt_load1(dt, l, j) - mx) * s;
      gt_store1(dt, l, j, g - (j == y ? grad_scale : 0.0f));
    }
    memset(gt_at(dt, l, (size_t)nv), 0, (size_t)(ld - nv) * gt_dtype_size(dt));
  }
}

/* stats (P,N,3) of all shards -> losses (N); dlogits over this shard's (N,ld). */
static int cpu_xent_finish(gt_backend *be, gt_dtype dt, float *losses, void *logits,
                           const float *stats, int P, const int32_t *targets, int64_t N,
                           int64_t nv, int64_t ld, int64_t v0, float dlogit_scale)
{
  (void)be;
  GT_CHECK_DT(dt);
  GT_ASSERT(P >= 1 && nv <= ld);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    GT_BY_DT(dt, gt_xent_finish_row, losses, logits, stats, P, targets, i, N, nv, ld, v0,
             dlogit_scale);
  return GT_SUCCESS;
}

// ---- optimizer and reductions ---------------------------------------------------------------

/* Elements [lo, hi); the compute copy (type ct) gets round(p) when store. */
GT_INLINE void gt_adamw_span(gt_dtype ct, bool store, float *p, const float *g, float *m,
                             float *v, void *compute, size_t lo, size_t hi, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float inv_bc1, float inv_sqrt_bc2, float grad_mult)
{
#pragma omp simd
  for (size_t i = lo; i < hi; i++) {
    float gi = g[i] * grad_mult;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi * inv_bc1 / (sqrtf(vi) * inv_sqrt_bc2 + eps) + weight_decay * p[i]);
    if (store)
      gt_store1(ct, compute, i, p[i]);
  }
}

#define GT_ADAMW_COPY(ct, ...) gt_adamw_span(ct, true, __VA_ARGS__)

static int cpu_adamw(gt_backend *be, float *p, const float *g, float *m, float *v, void *compute,
                     gt_dtype compute_t, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float bc1, float bc2, float grad_mult)
{
  (void)be;
  if (compute)
    GT_CHECK_DT(compute_t);
  const float inv_bc1 = 1.0f / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
  const size_t nb = (n + GT_SPAN - 1) / GT_SPAN;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = b * GT_SPAN, hi = n - lo < GT_SPAN ? n : lo + GT_SPAN;
    if (!compute)
      gt_adamw_span(GT_F32, false, p, g, m, v, NULL, lo, hi, lr, beta1, beta2, eps,
                    weight_decay, inv_bc1, inv_sqrt_bc2, grad_mult);
    else
      GT_BY_DT(compute_t, GT_ADAMW_COPY, p, g, m, v, compute, lo, hi, lr, beta1, beta2, eps,
               weight_decay, inv_bc1, inv_sqrt_bc2, grad_mult);
  }
  return GT_SUCCESS;
}

/* *acc += the sum of x (or of x^2) in double: a fixed split into be->threads
 * contiguous parts, each summed by one thread, the parts added in order. */
enum { GT_MAX_PARTS = 256 };

static int gt_sum_parts(gt_backend *be, double *acc, const float *x, size_t n, bool square)
{
  double part[GT_MAX_PARTS] = {0};
  const int nparts = be->threads < GT_MAX_PARTS ? be->threads : GT_MAX_PARTS;
#pragma omp parallel for schedule(static, 1) num_threads(nparts)
  for (int t = 0; t < nparts; t++) {
    const size_t lo = n * (size_t)t / (size_t)nparts, hi = n * (size_t)(t + 1) / (size_t)nparts;
    double s = 0;
    if (square) {
#pragma omp simd reduction(+ : s)
      for (size_t i = lo; i < hi; i++)
        s += (double)x[i] * x[i];
    } else {
#pragma omp simd reduction(+ : s)
      for (size_t i = lo; i < hi; i++)
        s += x[i];
    }
    part[t] = s;
  }
  double s = 0;
  for (int t = 0; t < nparts; t++)
    s += part[t];
  *acc += s;
  return GT_SUCCESS;
}

static int cpu_sum_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  return gt_sum_parts(be, acc, x, n, false);
}

static int cpu_sumsq_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  return gt_sum_parts(be, acc, x, n, true);
}

static int cpu_axpby(gt_backend *be, float *y, float a, const float *x, float b, size_t n)
{
  (void)be;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++)
    y[i] = a * x[i] + b * y[i];
  return GT_SUCCESS;
}

// ---- the table -------------------------------------------------------------------------------

const gt_backend_ops gt_cpu_kernels = {
  .cast = cpu_cast,
  .linear_forward = cpu_linear_forward,
  .linear_backward = cpu_linear_backward,
  .layernorm_forward = cpu_layernorm_forward,
  .layernorm_backward = cpu_layernorm_backward,
  .gelu_forward = cpu_gelu_forward,
  .gelu_backward = cpu_gelu_backward,
  .rmsnorm_forward = cpu_rmsnorm_forward,
  .rmsnorm_backward = cpu_rmsnorm_backward,
  .rope_forward = cpu_rope_forward,
  .rope_backward = cpu_rope_backward,
  .swiglu_forward = cpu_swiglu_forward,
  .swiglu_backward = cpu_swiglu_backward,
  .moe_route = gt_cpu_moe_route,
  .moe_assign = gt_cpu_moe_assign,
  .moe_permute = gt_cpu_moe_permute,
  .moe_permute_backward = gt_cpu_moe_permute_backward,
  .moe_combine = gt_cpu_moe_combine,
  .moe_combine_backward = gt_cpu_moe_combine_backward,
  .moe_route_backward = gt_cpu_moe_route_backward,
  .attention_forward = gt_cpu_attention_forward,
  .attention_backward = gt_cpu_attention_backward,
  .attention_decode = gt_cpu_attention_decode,
  .embedding_forward = cpu_embedding_forward,
  .embedding_backward = cpu_embedding_backward,
  .xent_partial = cpu_xent_partial,
  .xent_finish = cpu_xent_finish,
  .adamw = cpu_adamw,
  .sum_add = cpu_sum_add,
  .sumsq_add = cpu_sumsq_add,
  .axpby = cpu_axpby,
};
