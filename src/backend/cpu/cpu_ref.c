/*
 * cpu_ref.c - the kernels of the reference backend: every kernel as plain
 * loops with double accumulators, written for clarity. Tests compare the
 * fast backends to it; nothing here is tuned. Shapes as in backend.h.
 *
 * Precisions: inputs of the compute type dt are read as fp32 values, all
 * arithmetic is in double, and each dt output is rounded once, at the point
 * where the fast backend rounds it: the double result goes to fp32 (the
 * fast backend's working precision) and from there to dt.
 */
#include <math.h>
#include <string.h>

#include "cpu_backends.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"

#define GT_LN_EPS 1e-5
#define GT_GELU_K 0.7978845608028654 /* sqrt(2/pi) */

static bool ref_float_type(gt_dtype t) { return t == GT_F32 || t == GT_BF16 || t == GT_F16; }

#define REF_CHECK_DT(dt)                                                                     \
  GT_CHECK(ref_float_type(dt), GT_ERR_INTERNAL,                                              \
           "internal error: %s: element type %s is not fp32, bf16 or fp16", __func__,        \
           gt_dtype_name(dt))

/* Element i of an array of type t, as a double. */
static double ld(gt_dtype t, const void *p, size_t i) { return gt_load1(t, p, i); }

/* Store x in element i of an array of type t: to fp32, then to t. */
static void st(gt_dtype t, void *p, size_t i, double x) { gt_store1(t, p, i, (float)x); }

// ---- conversions ----------------------------------------------------------------------

static int ref_cast(gt_backend *be, gt_dtype dst_t, void *dst, gt_dtype src_t, const void *src,
                    size_t n)
{
  (void)be;
  GT_CHECK(ref_float_type(dst_t) && ref_float_type(src_t), GT_ERR_INTERNAL,
           "internal error: cast from %s to %s: both must be fp32, bf16 or fp16",
           gt_dtype_name(src_t), gt_dtype_name(dst_t));
  if (dst_t == src_t) { /* the identity, bit for bit */
    memmove(dst, src, n * gt_dtype_size(src_t));
    return GT_SUCCESS;
  }
  for (size_t i = 0; i < n; i++) /* fp32 holds every bf16 and fp16 value exactly */
    gt_store1(dst_t, dst, i, gt_load1(src_t, src, i));
  return GT_SUCCESS;
}

// ---- dense algebra ------------------------------------------------------------

static int ref_linear_forward(gt_backend *be, gt_dtype dt, void *out, const void *in,
                              const void *w, const void *bias, const void *residual, int64_t N,
                              int64_t C, int64_t OC)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t i = 0; i < N; i++)
    for (int64_t o = 0; o < OC; o++) {
      double s = (bias ? ld(dt, bias, o) : 0.0) + (residual ? ld(dt, residual, i * OC + o) : 0.0);
      for (int64_t c = 0; c < C; c++)
        s += ld(dt, in, i * C + c) * ld(dt, w, o * C + c);
      st(dt, out, i * OC + o, s);
    }
  return GT_SUCCESS;
}

static int ref_linear_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *dbias,
                               const void *dout, const void *in, const void *w, int64_t N,
                               int64_t C, int64_t OC)
{
  (void)be;
  REF_CHECK_DT(dt);
  if (din)
    for (int64_t i = 0; i < N; i++)
      for (int64_t c = 0; c < C; c++) {
        double s = 0;
        for (int64_t o = 0; o < OC; o++)
          s += ld(dt, dout, i * OC + o) * ld(dt, w, o * C + c);
        st(dt, din, i * C + c, s);
      }
  for (int64_t o = 0; o < OC; o++) {
    for (int64_t c = 0; dw && c < C; c++) {
      double s = 0;
      for (int64_t i = 0; i < N; i++)
        s += ld(dt, dout, i * OC + o) * ld(dt, in, i * C + c);
      dw[o * C + c] += (float)s;
    }
    if (dbias) {
      double s = 0;
      for (int64_t i = 0; i < N; i++)
        s += ld(dt, dout, i * OC + o);
      dbias[o] += (float)s;
    }
  }
  return GT_SUCCESS;
}

// ---- normalisation and activations ----------------------------------------------

static int ref_layernorm_forward(gt_backend *be, gt_dtype dt, void *out, float *mean,
                                 float *rstd, const void *in, const void *w, const void *b,
                                 int64_t N, int64_t C)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t i = 0; i < N; i++) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; c++)
      m += ld(dt, in, i * C + c);
    m /= (double)C;
    for (int64_t c = 0; c < C; c++) {
      double d = ld(dt, in, i * C + c) - m;
      v += d * d;
    }
    v /= (double)C;
    double r = 1.0 / sqrt(v + GT_LN_EPS);
    for (int64_t c = 0; c < C; c++)
      st(dt, out, i * C + c, (ld(dt, in, i * C + c) - m) * r * ld(dt, w, c) + ld(dt, b, c));
    mean[i] = (float)m;
    rstd[i] = (float)r;
  }
  return GT_SUCCESS;
}

/* din "+=" (rounded once), dw, db "+=" summed over rows in double. Every
 * element of dout is read before din's element (which may alias it) is
 * written. */
static int ref_layernorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *db,
                                  const void *dout, const void *in, const void *w,
                                  const float *mean, const float *rstd, int64_t N, int64_t C)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t c = 0; c < C; c++) {
    double sw = 0, sb = 0;
    for (int64_t i = 0; i < N; i++) {
      double dy = ld(dt, dout, i * C + c), xhat = (ld(dt, in, i * C + c) - mean[i]) * rstd[i];
      sw += dy * xhat;
      sb += dy;
    }
    dw[c] += (float)sw;
    db[c] += (float)sb;
  }
  for (int64_t i = 0; i < N; i++) {
    double m = mean[i], r = rstd[i];
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (int64_t c = 0; c < C; c++) {
      double xhat = (ld(dt, in, i * C + c) - m) * r;
      double dxhat = ld(dt, dout, i * C + c) * ld(dt, w, c);
      mean_dxhat += dxhat;
      mean_dxhat_xhat += dxhat * xhat;
    }
    mean_dxhat /= (double)C;
    mean_dxhat_xhat /= (double)C;
    for (int64_t c = 0; c < C; c++) {
      double xhat = (ld(dt, in, i * C + c) - m) * r;
      double dxhat = ld(dt, dout, i * C + c) * ld(dt, w, c);
      double g = r * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      st(dt, din, i * C + c, ld(dt, din, i * C + c) + g);
    }
  }
  return GT_SUCCESS;
}

static int ref_gelu_forward(gt_backend *be, gt_dtype dt, void *out, const void *in, size_t n)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (size_t i = 0; i < n; i++) {
    double x = ld(dt, in, i);
    st(dt, out, i, 0.5 * x * (1.0 + tanh(GT_GELU_K * (x + 0.044715 * x * x * x))));
  }
  return GT_SUCCESS;
}

static int ref_gelu_backward(gt_backend *be, gt_dtype dt, void *din, const void *in,
                             const void *dout, size_t n)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (size_t i = 0; i < n; i++) {
    double x = ld(dt, in, i);
    double t = tanh(GT_GELU_K * (x + 0.044715 * x * x * x));
    double d = 0.5 * (1.0 + t) +
               0.5 * x * (1.0 - t * t) * GT_GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
    st(dt, din, i, d * ld(dt, dout, i));
  }
  return GT_SUCCESS;
}

// ---- the Llama block: RMSNorm, rotary positions, SwiGLU ------------------------------

static int ref_rmsnorm_forward(gt_backend *be, gt_dtype dt, void *out, float *rstd,
                               const void *in, const void *w, float eps, int64_t N, int64_t C)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t i = 0; i < N; i++) {
    double ss = 0;
    for (int64_t c = 0; c < C; c++)
      ss += ld(dt, in, i * C + c) * ld(dt, in, i * C + c);
    double r = 1.0 / sqrt(ss / (double)C + (double)eps);
    for (int64_t c = 0; c < C; c++)
      st(dt, out, i * C + c, ld(dt, in, i * C + c) * r * ld(dt, w, c));
    rstd[i] = (float)r;
  }
  return GT_SUCCESS;
}

/* dw "+=" summed over rows in double, then din "+=" row by row; every
 * element of dout is read before din's element (which may alias it) is
 * written. */
static int ref_rmsnorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw,
                                const void *dout, const void *in, const void *w,
                                const float *rstd, int64_t N, int64_t C)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t c = 0; c < C; c++) {
    double sw = 0;
    for (int64_t i = 0; i < N; i++)
      sw += ld(dt, dout, i * C + c) * (ld(dt, in, i * C + c) * rstd[i]);
    dw[c] += (float)sw;
  }
  for (int64_t i = 0; i < N; i++) {
    double r = rstd[i], mean_gx = 0;
    for (int64_t c = 0; c < C; c++)
      mean_gx += ld(dt, dout, i * C + c) * ld(dt, w, c) * (ld(dt, in, i * C + c) * r);
    mean_gx /= (double)C;
    for (int64_t c = 0; c < C; c++) {
      double g = ld(dt, dout, i * C + c) * ld(dt, w, c), xhat = ld(dt, in, i * C + c) * r;
      st(dt, din, i * C + c, ld(dt, din, i * C + c) + r * (g - xhat * mean_gx));
    }
  }
  return GT_SUCCESS;
}

/* Rotate heads [0, nrot) of every token of x (B,T,S,hs) by the angles of
 * position pos0 + t; sign -1 turns the rotation into its transpose. Both
 * elements of a pair are read before either is written. */
static int ref_rope(gt_dtype dt, void *x, const float *cos, const float *sin, int64_t B,
                    int64_t T, int64_t S, int64_t nrot, int64_t hs, int64_t pos0, double sign)
{
  REF_CHECK_DT(dt);
  GT_CHECK(hs >= 2 && hs % 2 == 0 && nrot >= 0 && nrot <= S && pos0 >= 0, GT_ERR_INTERNAL,
           "internal error: rope: head size %lld (must be even), %lld of %lld heads rotated, "
           "first position %lld",
           (long long)hs, (long long)nrot, (long long)S, (long long)pos0);
  const int64_t h = hs / 2;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t s = 0; s < nrot; s++) {
        const int64_t base = ((b * T + t) * S + s) * hs, p = (pos0 + t) * h;
        for (int64_t i = 0; i < h; i++) {
          const double x1 = ld(dt, x, base + i), x2 = ld(dt, x, base + i + h);
          const double c = cos[p + i], sn = sign * sin[p + i];
          st(dt, x, base + i, x1 * c - x2 * sn);
          st(dt, x, base + i + h, x2 * c + x1 * sn);
        }
      }
  return GT_SUCCESS;
}

static int ref_rope_forward(gt_backend *be, gt_dtype dt, void *x, const float *cos,
                            const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                            int64_t hs, int64_t pos0)
{
  (void)be;
  return ref_rope(dt, x, cos, sin, B, T, S, nrot, hs, pos0, 1.0);
}

static int ref_rope_backward(gt_backend *be, gt_dtype dt, void *dx, const float *cos,
                             const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                             int64_t hs, int64_t pos0)
{
  (void)be;
  return ref_rope(dt, dx, cos, sin, B, T, S, nrot, hs, pos0, -1.0);
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static int ref_swiglu_forward(gt_backend *be, gt_dtype dt, void *out, const void *h, int64_t N,
                              int64_t F)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < F; j++) {
      const double g = ld(dt, h, i * 2 * F + j), u = ld(dt, h, i * 2 * F + F + j);
      st(dt, out, i * F + j, g * ref_sigmoid(g) * u);
    }
  return GT_SUCCESS;
}

/* g and u are both read before dh's pair (which may alias them) is written. */
static int ref_swiglu_backward(gt_backend *be, gt_dtype dt, void *dh, const void *dout,
                               const void *h, int64_t N, int64_t F)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < F; j++) {
      const double g = ld(dt, h, i * 2 * F + j), u = ld(dt, h, i * 2 * F + F + j);
      const double dy = ld(dt, dout, i * F + j), s = ref_sigmoid(g);
      st(dt, dh, i * 2 * F + j, dy * u * (s * (1.0 + g * (1.0 - s))));
      st(dt, dh, i * 2 * F + F + j, dy * g * s);
    }
  return GT_SUCCESS;
}

// ---- embeddings and loss (vocabulary-parallel) --------------------------------------

static int ref_embedding_forward(gt_backend *be, gt_dtype dt, void *out, const int32_t *tokens,
                                 const void *wte, const void *wpe, int64_t B, int64_t T,
                                 int64_t C, int64_t v0, int64_t nv)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const int64_t i = b * T + t, row = tokens[i] - v0;
      const bool in_shard = row >= 0 && row < nv;
      for (int64_t c = 0; c < C; c++) {
        double e = in_shard ? ld(dt, wte, row * C + c) : 0.0;
        double p = wpe ? ld(dt, wpe, t * C + c) : 0.0;
        st(dt, out, i * C + c, e + p);
      }
    }
  return GT_SUCCESS;
}

/* In token order, straight into the fp32 gradients (the order the contract
 * fixes). */
static int ref_embedding_backward(gt_backend *be, gt_dtype dt, float *dwte, float *dwpe,
                                  const void *dout, const int32_t *tokens, int64_t B, int64_t T,
                                  int64_t C, int64_t v0, int64_t nv)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const int64_t i = b * T + t, row = tokens[i] - v0;
      if (row >= 0 && row < nv)
        for (int64_t c = 0; c < C; c++)
          dwte[row * C + c] += gt_load1(dt, dout, i * C + c);
      if (dwpe)
        for (int64_t c = 0; c < C; c++)
          dwpe[t * C + c] += gt_load1(dt, dout, i * C + c);
    }
  return GT_SUCCESS;
}

static int ref_xent_partial(gt_backend *be, gt_dtype dt, float *stats, const void *logits,
                            const int32_t *targets, int64_t N, int64_t nv, int64_t ldl,
                            int64_t v0)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t i = 0; i < N; i++) {
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < nv; j++)
      if (ld(dt, logits, i * ldl + j) > mx)
        mx = ld(dt, logits, i * ldl + j);
    for (int64_t j = 0; j < nv; j++)
      z += exp(ld(dt, logits, i * ldl + j) - mx);
    const int64_t y = targets[i] - v0;
    stats[3 * i] = (float)mx;
    stats[3 * i + 1] = (float)z;
    stats[3 * i + 2] = y >= 0 && y < nv ? (float)ld(dt, logits, i * ldl + y) : 0.0f;
  }
  return GT_SUCCESS;
}

static int ref_xent_finish(gt_backend *be, gt_dtype dt, float *losses, void *logits,
                           const float *stats, int P, const int32_t *targets, int64_t N,
                           int64_t nv, int64_t ldl, int64_t v0, float dlogit_scale)
{
  (void)be;
  REF_CHECK_DT(dt);
  for (int64_t i = 0; i < N; i++) {
    double mx = -INFINITY, z = 0, tg = 0;
    for (int r = 0; r < P; r++)
      if (stats[3 * (r * N + i)] > mx)
        mx = stats[3 * (r * N + i)];
    for (int r = 0; r < P; r++) {
      const float *s = stats + 3 * (r * N + i);
      z += s[1] * exp(s[0] - mx);
      tg += s[2];
    }
    losses[i] = (float)(log(z) + mx - tg);
    if (dlogit_scale == 0.0f)
      continue;
    const int64_t y = targets[i] - v0;
    for (int64_t j = 0; j < nv; j++) {
      double p = exp(ld(dt, logits, i * ldl + j) - mx) / z;
      st(dt, logits, i * ldl + j, (p - (j == y)) * dlogit_scale);
    }
    for (int64_t j = nv; j < ldl; j++)
      st(dt, logits, i * ldl + j, 0.0);
  }
  return GT_SUCCESS;
}

// ---- optimizer and reductions -------------------------------------------------------

static int ref_adamw(gt_backend *be, float *p, const float *g, float *m, float *v, void *compute,
                     gt_dtype compute_t, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float bc1, float bc2, float grad_mult)
{
  (void)be;
  if (compute)
    REF_CHECK_DT(compute_t);
  for (size_t i = 0; i < n; i++) {
    double gi = (double)g[i] * grad_mult;
    double mi = beta1 * (double)m[i] + (1.0 - beta1) * gi;
    double vi = beta2 * (double)v[i] + (1.0 - beta2) * gi * gi;
    m[i] = (float)mi;
    v[i] = (float)vi;
    double upd = (mi / bc1) / (sqrt(vi / bc2) + eps) + (double)weight_decay * p[i];
    p[i] = (float)(p[i] - (double)lr * upd);
    if (compute)
      gt_store1(compute_t, compute, i, p[i]);
  }
  return GT_SUCCESS;
}

static int ref_sum_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  (void)be;
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += x[i];
  *acc += s;
  return GT_SUCCESS;
}

static int ref_sumsq_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  (void)be;
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)x[i] * x[i];
  *acc += s;
  return GT_SUCCESS;
}

static int ref_axpby(gt_backend *be, float *y, float a, const float *x, float b, size_t n)
{
  (void)be;
  for (size_t i = 0; i < n; i++)
    y[i] = a * x[i] + b * y[i];
  return GT_SUCCESS;
}

const gt_backend_ops gt_ref_kernels = {
  .cast = ref_cast,
  .linear_forward = ref_linear_forward,
  .linear_backward = ref_linear_backward,
  .layernorm_forward = ref_layernorm_forward,
  .layernorm_backward = ref_layernorm_backward,
  .gelu_forward = ref_gelu_forward,
  .gelu_backward = ref_gelu_backward,
  .rmsnorm_forward = ref_rmsnorm_forward,
  .rmsnorm_backward = ref_rmsnorm_backward,
  .rope_forward = ref_rope_forward,
  .rope_backward = ref_rope_backward,
  .swiglu_forward = ref_swiglu_forward,
  .swiglu_backward = ref_swiglu_backward,
  /* the fast backend's own (cpu_moe.c): plain loops in the contract's order already */
  .moe_route = gt_cpu_moe_route,
  .moe_assign = gt_cpu_moe_assign,
  .moe_permute = gt_cpu_moe_permute,
  .moe_permute_backward = gt_cpu_moe_permute_backward,
  .moe_combine = gt_cpu_moe_combine,
  .moe_combine_backward = gt_cpu_moe_combine_backward,
  .moe_route_backward = gt_cpu_moe_route_backward,
  .attention_forward = gt_ref_attention_forward,
  .attention_backward = gt_ref_attention_backward,
  .attention_decode = gt_ref_attention_decode,
  .embedding_forward = ref_embedding_forward,
  .embedding_backward = ref_embedding_backward,
  .xent_partial = ref_xent_partial,
  .xent_finish = ref_xent_finish,
  .adamw = ref_adamw,
  .sum_add = ref_sum_add,
  .sumsq_add = ref_sumsq_add,
  .axpby = ref_axpby,
};
