/*
 * cpu.c - the fast host backend: OpenBLAS sgemm for every matrix product,
 * OpenMP over rows (or column blocks, where rows would race) for the rest.
 *
 * Determinism: every reduction has a fixed partition and a fixed order for a
 * given thread count, so a run repeats bit for bit (restarts rely on it).
 * Reductions accumulate in double where fp32 would lose digits (statistics,
 * bias and LayerNorm gradients, loss sums).
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "build_config.h"
#include "cpu_backends.h"
#include "cpu_simd.h"
#include "gridtrain/error.h"

#define GT_LN_EPS 1e-5f
#define GT_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GT_COL_BLOCK 256              /* columns per task in column-parallel sums */

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int num_threads);
#endif


static void gt_blas_threads(int n)
{
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
  openblas_set_num_threads(n);
#else
  (void)n;
#endif
}

// ---- dense algebra ------------------------------------------------------------------

static int cpu_matmul(gt_backend *be, bool ta, bool tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta,
                      float *c, int ldc)
{
  (void)be;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return GT_SUCCESS;
}

/* The bias and the residual go into out first; sgemm then adds the product
 * (beta = 1), so neither needs a pass of its own afterwards. */
static int cpu_linear_forward(gt_backend *be, float *out, const float *in, const float *w,
                              const float *bias, const float *residual, int N, int C, int OC)
{
  (void)be;
  if (bias && residual) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
      float *o = out + (size_t)i * OC;
      const float *r = residual + (size_t)i * OC;
#pragma omp simd
      for (int j = 0; j < OC; j++)
        o[j] = r[j] + bias[j];
    }
  } else if (bias || residual) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
      memcpy(out + (size_t)i * OC, bias ? bias : residual + (size_t)i * OC,
             sizeof(float) * (size_t)OC);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, in, C, w, C,
              bias || residual ? 1.0f : 0.0f, out, OC);
  return GT_SUCCESS;
}

/* db(OC) += column sums of dy(N, OC), by column blocks (race-free, fixed order). */
static void gt_column_sums_add(float *db, const float *dy, int N, int OC)
{
  int nblocks = (OC + GT_COL_BLOCK - 1) / GT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * GT_COL_BLOCK, nc = OC - c0 < GT_COL_BLOCK ? OC - c0 : GT_COL_BLOCK;
    double acc[GT_COL_BLOCK] = {0};
    for (int i = 0; i < N; i++) {
      const float *row = dy + (size_t)i * OC + c0;
#pragma omp simd
      for (int c = 0; c < nc; c++)
        acc[c] += row[c];
    }
    for (int c = 0; c < nc; c++)
      db[c0 + c] += (float)acc[c];
  }
}

static int cpu_linear_backward(gt_backend *be, float *din, float *dw, float *dbias,
                               const float *dout, const float *in, const float *w, int N,
                               int C, int OC)
{
  (void)be;
  if (din)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                0.0f, din, C);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, in, C, 1.0f,
              dw, C);
  if (dbias)
    gt_column_sums_add(dbias, dout, N, OC);
  return GT_SUCCESS;
}

// ---- normalisation and activations ------------------------------------------------

static int cpu_layernorm_forward(gt_backend *be, float *out, float *mean, float *rstd,
                                 const float *in, const float *w, const float *b, int N,
                                 int C)
{
  (void)be;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *x = in + (size_t)i * C;
    float *y = out + (size_t)i * C;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++)
      s += x[c];
    float m = (float)(s / C);
    double v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++)
      v += (double)((x[c] - m) * (x[c] - m));
    float r = (float)(1.0 / sqrt(v / C + GT_LN_EPS));
#pragma omp simd
    for (int c = 0; c < C; c++)
      y[c] = (x[c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
  return GT_SUCCESS;
}

static int cpu_layernorm_backward(gt_backend *be, float *din, float *dw, float *db,
                                  const float *dout, const float *in, const float *w,
                                  const float *mean, const float *rstd, int N, int C)
{
  (void)be;
  /* din by rows */
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *x = in + (size_t)i * C, *dy = dout + (size_t)i * C;
    float *dx = din + (size_t)i * C;
    const float m = mean[i], r = rstd[i];
    double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
    for (int c = 0; c < C; c++) {
      float dxhat = dy[c] * w[c];
      s1 += dxhat;
      s2 += dxhat * ((x[c] - m) * r);
    }
    const float mean_dxhat = (float)(s1 / C), mean_dxhat_xhat = (float)(s2 / C);
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float xhat = (x[c] - m) * r;
      dx[c] += r * (dy[c] * w[c] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
  /* dw, db by column blocks */
  int nblocks = (C + GT_COL_BLOCK - 1) / GT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * GT_COL_BLOCK, nc = C - c0 < GT_COL_BLOCK ? C - c0 : GT_COL_BLOCK;
    double aw[GT_COL_BLOCK] = {0}, ab[GT_COL_BLOCK] = {0};
    for (int i = 0; i < N; i++) {
      const float *x = in + (size_t)i * C + c0, *dy = dout + (size_t)i * C + c0;
      const float m = mean[i], r = rstd[i];
#pragma omp simd
      for (int c = 0; c < nc; c++) {
        aw[c] += dy[c] * ((x[c] - m) * r);
        ab[c] += dy[c];
      }
    }
    for (int c = 0; c < nc; c++) {
      dw[c0 + c] += (float)aw[c];
      db[c0 + c] += (float)ab[c];
    }
  }
  return GT_SUCCESS;
}

static int cpu_gelu_forward(gt_backend *be, float *out, const float *in, size_t n)
{
  (void)be;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + gt_tanhf(GT_GELU_K * (x + 0.044715f * x * x * x)));
  }
  return GT_SUCCESS;
}

static int cpu_gelu_backward(gt_backend *be, float *din, const float *in, const float *dout,
                             size_t n)
{
  (void)be;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = in[i];
    float t = gt_tanhf(GT_GELU_K * (x + 0.044715f * x * x * x));
    float d = 0.5f * (1.0f + t) +
              0.5f * x * (1.0f - t * t) * GT_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = d * dout[i];
  }
  return GT_SUCCESS;
}

// ---- embeddings and loss (vocabulary-parallel) ------------------------------------------

/* out(B*T,C): the shard's row of wte (or 0) plus wpe[t] (or nothing). */
static int cpu_embedding_forward(gt_backend *be, float *out, const int32_t *tokens,
                                 const float *wte, const float *wpe, int B, int T, int C,
                                 int v0, int nv)
{
  (void)be;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < B * T; i++) {
    const int row = tokens[i] - v0;
    const float *e = row >= 0 && row < nv ? wte + (size_t)row * C : NULL;
    const float *p = wpe ? wpe + (size_t)(i % T) * C : NULL;
    float *o = out + (size_t)i * C;
    if (e && p) {
#pragma omp simd
      for (int c = 0; c < C; c++)
        o[c] = e[c] + p[c];
    } else if (e || p) {
      memcpy(o, e ? e : p, sizeof(float) * (size_t)C);
    } else {
      memset(o, 0, sizeof(float) * (size_t)C);
    }
  }
  return GT_SUCCESS;
}

/* Rows of dwte collide (repeated tokens), so a task owns a range of the
 * shard's rows and a block of columns; every task scans all tokens and adds
 * those in its rows, in token order. Each element thus sums in token order
 * whatever the thread count. */
static int cpu_embedding_backward(gt_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int32_t *tokens, int B, int T,
                                  int C, int v0, int nv)
{
  const int N = B * T, nblocks = (C + GT_COL_BLOCK - 1) / GT_COL_BLOCK;
  const int nparts = be->threads < nv ? be->threads : (nv > 0 ? nv : 1);
#pragma omp parallel for collapse(2) schedule(static)
  for (int part = 0; part < nparts; part++)
    for (int blk = 0; blk < nblocks; blk++) {
      const int r0 = (int)((int64_t)nv * part / nparts);
      const int r1 = (int)((int64_t)nv * (part + 1) / nparts);
      const int c0 = blk * GT_COL_BLOCK;
      const int nc = C - c0 < GT_COL_BLOCK ? C - c0 : GT_COL_BLOCK;
      for (int i = 0; i < N; i++) {
        const int row = tokens[i] - v0;
        if (row < r0 || row >= r1)
          continue;
        const float *d = dout + (size_t)i * C + c0;
        float *e = dwte + (size_t)row * C + c0;
#pragma omp simd
        for (int c = 0; c < nc; c++)
          e[c] += d[c];
      }
    }
  if (dwpe) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
      float *p = dwpe + (size_t)t * C;
      for (int b = 0; b < B; b++) {
        const float *d = dout + ((size_t)b * T + t) * C;
#pragma omp simd
        for (int c = 0; c < C; c++)
          p[c] += d[c];
      }
    }
  }
  return GT_SUCCESS;
}

/* logits (N,ld), nv real columns; stats (N,3) = {max, sum exp(l - max), target logit}. */
static int cpu_xent_partial(gt_backend *be, float *stats, const float *logits,
                            const int32_t *targets, int N, int nv, int ld, int v0)
{
  (void)be;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *l = logits + (size_t)i * ld;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < nv; j++)
      mx = l[j] > mx ? l[j] : mx;
    double z = 0;
#pragma omp simd reduction(+ : z)
    for (int j = 0; j < nv; j++)
      z += gt_expf(l[j] - mx);
    const int y = targets[i] - v0;
    stats[3 * (size_t)i] = mx;
    stats[3 * (size_t)i + 1] = (float)z;
    stats[3 * (size_t)i + 2] = y >= 0 && y < nv ? l[y] : 0.0f;
  }
  return GT_SUCCESS;
}

/* stats (P,N,3) of all shards -> losses (N); dlogits over this shard's (N,ld). */
static int cpu_xent_finish(gt_backend *be, float *losses, float *logits, const float *stats,
                           int P, const int32_t *targets, int N, int nv, int ld, int v0,
                           float grad_scale)
{
  (void)be;
  const size_t shard = 3 * (size_t)N;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
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
      continue;
    float *l = logits + (size_t)i * ld;
    const float s = (float)(grad_scale / z);
#pragma omp simd
    for (int j = 0; j < nv; j++)
      l[j] = gt_expf(l[j] - mx) * s;
    for (int j = nv; j < ld; j++)
      l[j] = 0.0f;
    const int y = targets[i] - v0;
    if (y >= 0 && y < nv)
      l[y] -= grad_scale;
  }
  return GT_SUCCESS;
}

// ---- optimizer and reductions ---------------------------------------------------------------

static int cpu_adamw(gt_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     float bc1, float bc2, float grad_scale)
{
  (void)be;
  const float inv_bc1 = 1.0f / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi * inv_bc1 / (sqrtf(vi) * inv_sqrt_bc2 + eps) + weight_decay * p[i]);
  }
  return GT_SUCCESS;
}

static int cpu_sumsq(gt_backend *be, const float *x, size_t n, double *result)
{
  /* Fixed split into be->threads contiguous parts, summed in order. */
  enum { GT_MAX_PARTS = 256 };
  double part[GT_MAX_PARTS] = {0};
  int nparts = be->threads < GT_MAX_PARTS ? be->threads : GT_MAX_PARTS;
#pragma omp parallel for schedule(static, 1) num_threads(nparts)
  for (int t = 0; t < nparts; t++) {
    size_t lo = n * (size_t)t / (size_t)nparts, hi = n * (size_t)(t + 1) / (size_t)nparts;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; i++)
      s += (double)x[i] * x[i];
    part[t] = s;
  }
  double s = 0;
  for (int t = 0; t < nparts; t++)
    s += part[t];
  *result = s;
  return GT_SUCCESS;
}

// ---- set-up ------------------------------------------------------------------------------------

int gt_cpu_setup(gt_backend *be)
{
  omp_set_num_threads(be->threads);
  gt_blas_threads(be->threads);
  return GT_SUCCESS;
}

const gt_backend_ops gt_cpu_ops = {
  .alloc = gt_host_alloc,
  .free = gt_host_free,
  .zero = gt_host_zero,
  .upload = gt_host_copy,
  .download = gt_host_copy,
  .copy = gt_host_copy,
  .sync = gt_host_sync,
  .matmul = cpu_matmul,
  .linear_forward = cpu_linear_forward,
  .linear_backward = cpu_linear_backward,
  .layernorm_forward = cpu_layernorm_forward,
  .layernorm_backward = cpu_layernorm_backward,
  .gelu_forward = cpu_gelu_forward,
  .gelu_backward = cpu_gelu_backward,
  .attention_forward = gt_cpu_attention_forward,
  .attention_backward = gt_cpu_attention_backward,
  .embedding_forward = cpu_embedding_forward,
  .embedding_backward = cpu_embedding_backward,
  .xent_partial = cpu_xent_partial,
  .xent_finish = cpu_xent_finish,
  .adamw = cpu_adamw,
  .sumsq = cpu_sumsq,
};
