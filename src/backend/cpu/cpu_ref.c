/*
 * cpu_ref.c - the reference backend: every kernel as plain loops with double
 * accumulators, written for clarity. Tests compare the fast backends to it;
 * nothing here is tuned. Shapes as in backend.h.
 */
#include <math.h>
#include <string.h>

#include "cpu_backends.h"
#include "gridtrain/error.h"

#define GT_LN_EPS 1e-5
#define GT_GELU_K 0.7978845608028654 /* sqrt(2/pi) */

// ---- dense algebra ------------------------------------------------------------

static int ref_matmul(gt_backend *be, bool ta, bool tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta,
                      float *c, int ldc)
{
  (void)be;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int p = 0; p < k; p++) {
        double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        s += av * bv;
      }
      float *cij = &c[(size_t)i * ldc + j];
      *cij = (float)(alpha * s + (beta != 0.0f ? (double)beta * *cij : 0.0));
    }
  return GT_SUCCESS;
}

static int ref_linear_forward(gt_backend *be, float *out, const float *in, const float *w,
                              const float *bias, const float *residual, int N, int C, int OC)
{
  (void)be;
  for (int i = 0; i < N; i++)
    for (int o = 0; o < OC; o++) {
      double s = (bias ? bias[o] : 0.0) + (residual ? residual[(size_t)i * OC + o] : 0.0);
      for (int c = 0; c < C; c++)
        s += (double)in[(size_t)i * C + c] * w[(size_t)o * C + c];
      out[(size_t)i * OC + o] = (float)s;
    }
  return GT_SUCCESS;
}

static int ref_linear_backward(gt_backend *be, float *din, float *dw, float *dbias,
                               const float *dout, const float *in, const float *w, int N,
                               int C, int OC)
{
  (void)be;
  if (din)
    for (int i = 0; i < N; i++)
      for (int c = 0; c < C; c++) {
        double s = 0;
        for (int o = 0; o < OC; o++)
          s += (double)dout[(size_t)i * OC + o] * w[(size_t)o * C + c];
        din[(size_t)i * C + c] = (float)s;
      }
  for (int o = 0; o < OC; o++) {
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int i = 0; i < N; i++)
        s += (double)dout[(size_t)i * OC + o] * in[(size_t)i * C + c];
      dw[(size_t)o * C + c] += (float)s;
    }
    if (dbias) {
      double s = 0;
      for (int i = 0; i < N; i++)
        s += dout[(size_t)i * OC + o];
      dbias[o] += (float)s;
    }
  }
  return GT_SUCCESS;
}

// ---- normalisation and activations ----------------------------------------------

static int ref_layernorm_forward(gt_backend *be, float *out, float *mean, float *rstd,
                                 const float *in, const float *w, const float *b, int N,
                                 int C)
{
  (void)be;
  for (int i = 0; i < N; i++) {
    const float *x = in + (size_t)i * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++)
      m += x[c];
    m /= C;
    for (int c = 0; c < C; c++)
      v += (x[c] - m) * (x[c] - m);
    v /= C;
    double r = 1.0 / sqrt(v + GT_LN_EPS);
    for (int c = 0; c < C; c++)
      out[(size_t)i * C + c] = (float)((x[c] - m) * r * w[c] + b[c]);
    mean[i] = (float)m;
    rstd[i] = (float)r;
  }
  return GT_SUCCESS;
}

static int ref_layernorm_backward(gt_backend *be, float *din, float *dw, float *db,
                                  const float *dout, const float *in, const float *w,
                                  const float *mean, const float *rstd, int N, int C)
{
  (void)be;
  for (int i = 0; i < N; i++) {
    const float *x = in + (size_t)i * C, *dy = dout + (size_t)i * C;
    double m = mean[i], r = rstd[i];
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int c = 0; c < C; c++) {
      double xhat = (x[c] - m) * r, dxhat = (double)dy[c] * w[c];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    sum_dxhat /= C;
    sum_dxhat_xhat /= C;
    for (int c = 0; c < C; c++) {
      double xhat = (x[c] - m) * r, dxhat = (double)dy[c] * w[c];
      din[(size_t)i * C + c] += (float)(r * (dxhat - sum_dxhat - xhat * sum_dxhat_xhat));
      dw[c] += (float)(dy[c] * xhat);
      db[c] += dy[c];
    }
  }
  return GT_SUCCESS;
}

static int ref_gelu_forward(gt_backend *be, float *out, const float *in, size_t n)
{
  (void)be;
  for (size_t i = 0; i < n; i++) {
    double x = in[i];
    out[i] = (float)(0.5 * x * (1.0 + tanh(GT_GELU_K * (x + 0.044715 * x * x * x))));
  }
  return GT_SUCCESS;
}

static int ref_gelu_backward(gt_backend *be, float *din, const float *in, const float *dout,
                             size_t n)
{
  (void)be;
  for (size_t i = 0; i < n; i++) {
    double x = in[i];
    double t = tanh(GT_GELU_K * (x + 0.044715 * x * x * x));
    double d = 0.5 * (1.0 + t) +
               0.5 * x * (1.0 - t * t) * GT_GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
    din[i] = (float)(d * dout[i]);
  }
  return GT_SUCCESS;
}

// ---- attention ----------------------------------------------------------------------

static int ref_attention_forward(gt_backend *be, float *out, float *att, const float *qkv,
                                 int B, int T, int H, int hs)
{
  (void)be;
  const int C = H * hs, C3 = 3 * C;
  const double scale = 1.0 / sqrt((double)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        float *p = att + (((size_t)b * H + h) * T + t) * T;
        double mx = -INFINITY;
        double s[T];
        for (int u = 0; u <= t; u++) {
          const float *k = qkv + ((size_t)b * T + u) * C3 + C + (size_t)h * hs;
          double d = 0;
          for (int i = 0; i < hs; i++)
            d += (double)q[i] * k[i];
          s[u] = d * scale;
          if (s[u] > mx)
            mx = s[u];
        }
        double z = 0;
        for (int u = 0; u <= t; u++) {
          s[u] = exp(s[u] - mx);
          z += s[u];
        }
        for (int u = 0; u < T; u++)
          p[u] = u <= t ? (float)(s[u] / z) : 0.0f;
        float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
        for (int i = 0; i < hs; i++) {
          double acc = 0;
          for (int u = 0; u <= t; u++)
            acc += s[u] / z * qkv[((size_t)b * T + u) * C3 + 2 * C + (size_t)h * hs + i];
          o[i] = (float)acc;
        }
      }
  return GT_SUCCESS;
}

static int ref_attention_backward(gt_backend *be, float *dqkv, float *datt,
                                  const float *dout, const float *qkv, const float *att,
                                  int B, int T, int H, int hs)
{
  (void)be;
  (void)datt;
  const int C = H * hs, C3 = 3 * C;
  const double scale = 1.0 / sqrt((double)hs);
  memset(dqkv, 0, sizeof(float) * (size_t)B * T * C3);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        const float *p = att + (((size_t)b * H + h) * T + t) * T;
        const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
        const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
        double dp[T], dot = 0;
        for (int u = 0; u <= t; u++) {
          const float *v = qkv + ((size_t)b * T + u) * C3 + 2 * C + (size_t)h * hs;
          float *dv = dqkv + ((size_t)b * T + u) * C3 + 2 * C + (size_t)h * hs;
          double d = 0;
          for (int i = 0; i < hs; i++) {
            d += (double)dy[i] * v[i];
            dv[i] += (float)((double)p[u] * dy[i]);
          }
          dp[u] = d;
          dot += d * p[u];
        }
        for (int u = 0; u <= t; u++) {
          double ds = p[u] * (dp[u] - dot) * scale;
          const float *k = qkv + ((size_t)b * T + u) * C3 + C + (size_t)h * hs;
          float *dk = dqkv + ((size_t)b * T + u) * C3 + C + (size_t)h * hs;
          for (int i = 0; i < hs; i++) {
            dq[i] += (float)(ds * k[i]);
            dk[i] += (float)(ds * q[i]);
          }
        }
      }
  return GT_SUCCESS;
}

// ---- embeddings and loss (vocabulary-parallel) --------------------------------------

static int ref_embedding_forward(gt_backend *be, float *out, const int32_t *tokens,
                                 const float *wte, const float *wpe, int B, int T, int C,
                                 int v0, int nv)
{
  (void)be;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int row = tokens[b * T + t] - v0;
      const bool in_shard = row >= 0 && row < nv;
      float *o = out + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; c++) {
        double e = in_shard ? wte[(size_t)row * C + c] : 0.0;
        double p = wpe ? wpe[(size_t)t * C + c] : 0.0;
        o[c] = (float)(e + p);
      }
    }
  return GT_SUCCESS;
}

static int ref_embedding_backward(gt_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int32_t *tokens, int B, int T,
                                  int C, int v0, int nv)
{
  (void)be;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      const int row = tokens[b * T + t] - v0;
      if (row >= 0 && row < nv)
        for (int c = 0; c < C; c++)
          dwte[(size_t)row * C + c] += d[c];
      if (dwpe)
        for (int c = 0; c < C; c++)
          dwpe[(size_t)t * C + c] += d[c];
    }
  return GT_SUCCESS;
}

static int ref_xent_partial(gt_backend *be, float *stats, const float *logits,
                            const int32_t *targets, int N, int nv, int ld, int v0)
{
  (void)be;
  for (int i = 0; i < N; i++) {
    const float *l = logits + (size_t)i * ld;
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < nv; j++)
      if (l[j] > mx)
        mx = l[j];
    for (int j = 0; j < nv; j++)
      z += exp(l[j] - mx);
    const int y = targets[i] - v0;
    stats[3 * (size_t)i] = (float)mx;
    stats[3 * (size_t)i + 1] = (float)z;
    stats[3 * (size_t)i + 2] = y >= 0 && y < nv ? l[y] : 0.0f;
  }
  return GT_SUCCESS;
}

static int ref_xent_finish(gt_backend *be, float *losses, float *logits, const float *stats,
                           int P, const int32_t *targets, int N, int nv, int ld, int v0,
                           float grad_scale)
{
  (void)be;
  for (int i = 0; i < N; i++) {
    double mx = -INFINITY, z = 0, tg = 0;
    for (int r = 0; r < P; r++) {
      const float *st = stats + 3 * ((size_t)r * N + i);
      if (st[0] > mx)
        mx = st[0];
    }
    for (int r = 0; r < P; r++) {
      const float *st = stats + 3 * ((size_t)r * N + i);
      z += st[1] * exp(st[0] - mx);
      tg += st[2];
    }
    losses[i] = (float)(log(z) + mx - tg);
    if (grad_scale != 0.0f) {
      float *l = logits + (size_t)i * ld;
      const int y = targets[i] - v0;
      for (int j = 0; j < nv; j++)
        l[j] = (float)((exp(l[j] - mx) / z - (j == y)) * grad_scale);
      for (int j = nv; j < ld; j++)
        l[j] = 0.0f;
    }
  }
  return GT_SUCCESS;
}

// ---- optimizer and reductions -------------------------------------------------------

static int ref_adamw(gt_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     float bc1, float bc2, float grad_scale)
{
  (void)be;
  for (size_t i = 0; i < n; i++) {
    double gi = (double)g[i] * grad_scale;
    double mi = beta1 * (double)m[i] + (1.0 - beta1) * gi;
    double vi = beta2 * (double)v[i] + (1.0 - beta2) * gi * gi;
    m[i] = (float)mi;
    v[i] = (float)vi;
    double upd = (mi / bc1) / (sqrt(vi / bc2) + eps) + (double)weight_decay * p[i];
    p[i] = (float)(p[i] - (double)lr * upd);
  }
  return GT_SUCCESS;
}

static int ref_sumsq(gt_backend *be, const float *x, size_t n, double *result)
{
  (void)be;
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)x[i] * x[i];
  *result = s;
  return GT_SUCCESS;
}

const gt_backend_ops gt_cpu_ref_ops = {
  .alloc = gt_host_alloc,
  .free = gt_host_free,
  .zero = gt_host_zero,
  .upload = gt_host_copy,
  .download = gt_host_copy,
  .copy = gt_host_copy,
  .sync = gt_host_sync,
  .matmul = ref_matmul,
  .linear_forward = ref_linear_forward,
  .linear_backward = ref_linear_backward,
  .layernorm_forward = ref_layernorm_forward,
  .layernorm_backward = ref_layernorm_backward,
  .gelu_forward = ref_gelu_forward,
  .gelu_backward = ref_gelu_backward,
  .attention_forward = ref_attention_forward,
  .attention_backward = ref_attention_backward,
  .embedding_forward = ref_embedding_forward,
  .embedding_backward = ref_embedding_backward,
  .xent_partial = ref_xent_partial,
  .xent_finish = ref_xent_finish,
  .adamw = ref_adamw,
  .sumsq = ref_sumsq,
};
