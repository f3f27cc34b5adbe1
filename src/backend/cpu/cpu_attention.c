/*
 * cpu_attention.c - causal self-attention for the fast CPU backend.
 *
 * One (batch, head) pair per OpenMP task. Each task packs its q, k, v (and
 * in backward dy) into zero-padded contiguous tiles in thread-private
 * scratch, then runs three register-blocked kernels written with GCC vector
 * extensions (16 floats: one AVX-512 register, two AVX2 ones) that skip the
 * blocks above the causal diagonal:
 *   scores  S = a b^T on and below the diagonal        (q k^T, dy v^T)
 *   mix     c = P b   with P lower triangular          (P v, dS k)
 *   mix^T   c = P^T b with P lower triangular          (P^T dy, dS^T q)
 * Shapes: T tokens, head size hs padded to hsp (multiple of 16), T padded to
 * Tp (multiple of 16). Every sum runs in a fixed order: results repeat bit
 * for bit for any thread count.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backends.h"
#include "cpu_simd.h"
#include "gridtrain/error.h"

#define GT_W 16   /* floats per vector */
#define GT_RS 8   /* rows per block in the score kernel */
#define GT_RM 4   /* rows per block in the mix kernels */
#define GT_CM 4   /* vectors per row block in the mix kernels (64 floats) */

static inline int gt_round_up(int x, int m) { return (x + m - 1) / m * m; }

static inline gt_v16 gt_load(const float *p)
{
  gt_v16 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void gt_store(float *p, gt_v16 v) { memcpy(p, &v, sizeof v); }

// ---- kernels ---------------------------------------------------------------------

/* S (T x T, row stride T) = alpha a b^T for u <= t, 0 above the diagonal.
 * a: Tp8 x hsp rows (zero rows past T), bt: hsp x Tp (b transposed). */
static void gt_scores_lower(float *S, int T, const float *a, const float *bt, int hsp, int Tp,
                            float alpha)
{
  for (int t0 = 0; t0 < T; t0 += GT_RS) {
    const int R = T - t0 < GT_RS ? T - t0 : GT_RS;
    const int u_end = t0 + R; /* columns [0, u_end) can be non-zero */
    for (int u0 = 0; u0 < u_end; u0 += GT_W) {
      gt_v16 acc[GT_RS];
      for (int r = 0; r < GT_RS; r++)
        acc[r] = (gt_v16){0};
      const float *ar = a + (size_t)t0 * hsp;
      for (int i = 0; i < hsp; i++) {
        const gt_v16 b = gt_load(bt + (size_t)i * Tp + u0);
        for (int r = 0; r < GT_RS; r++)
          acc[r] += ar[(size_t)r * hsp + i] * b;
      }
      for (int r = 0; r < R; r++) {
        const int t = t0 + r;
        float *row = S + (size_t)t * T;
        acc[r] *= alpha;
        if (u0 + GT_W - 1 <= t && u0 + GT_W <= T) {
          gt_store(row + u0, acc[r]);
        } else {
          float tmp[GT_W];
          gt_store(tmp, acc[r]);
          for (int j = 0; j < GT_W && u0 + j < T; j++)
            row[u0 + j] = u0 + j <= t ? tmp[j] : 0.0f;
        }
      }
    }
    /* zero the rest of the block's rows */
    const int z0 = gt_round_up(u_end, GT_W);
    for (int r = 0; r < R; r++)
      if (z0 < T)
        memset(S + (size_t)(t0 + r) * T + z0, 0, sizeof(float) * (size_t)(T - z0));
  }
}

/* Store up to GT_CM vectors of a row block into c (first hs columns). */
static inline void gt_store_row(float *c, const gt_v16 *acc, int c0, int nv, int hs)
{
  for (int v = 0; v < nv; v++) {
    const int col = c0 + v * GT_W;
    if (col + GT_W <= hs) {
      gt_store(c + col, acc[v]);
    } else if (col < hs) {
      float tmp[GT_W];
      gt_store(tmp, acc[v]);
      memcpy(c + col, tmp, sizeof(float) * (size_t)(hs - col));
    }
  }
}

/* One block of R output rows: c[r] = sum_{k in [k_lo, k_hi)} coef(r, k) b[k]
 * with coef(r, k) = P[r * r_stride + k * k_stride]; b: rows of hsp floats;
 * c: rows of stride ldc, first hs columns written ("="). */
static void gt_mix_block(float *c, int ldc, const float *P, size_t r_stride, size_t k_stride,
                         int R, int k_lo, int k_hi, const float *b, int hsp, int hs)
{
  for (int c0 = 0; c0 < hsp; c0 += GT_CM * GT_W) {
    const int nv = (hsp - c0) / GT_W < GT_CM ? (hsp - c0) / GT_W : GT_CM;
    gt_v16 acc[GT_RM][GT_CM];
    for (int r = 0; r < GT_RM; r++)
      for (int v = 0; v < GT_CM; v++)
        acc[r][v] = (gt_v16){0};
    for (int k = k_lo; k < k_hi; k++) {
      gt_v16 bv[GT_CM];
      for (int v = 0; v < GT_CM; v++)
        bv[v] = v < nv ? gt_load(b + (size_t)k * hsp + c0 + v * GT_W) : (gt_v16){0};
      const float *coef = P + (size_t)k * k_stride;
      for (int r = 0; r < R; r++) {
        const float p = coef[(size_t)r * r_stride];
        for (int v = 0; v < GT_CM; v++)
          acc[r][v] += p * bv[v];
      }
    }
    for (int r = 0; r < R; r++)
      gt_store_row(c + (size_t)r * ldc, acc[r], c0, nv, hs);
  }
}

/* c[t] = sum_u P[t][u] b[u] for u <= t (P lower triangular, row stride T). */
static void gt_mix_lower(float *c, int ldc, const float *P, int T, const float *b, int hsp,
                         int hs)
{
  for (int t0 = 0; t0 < T; t0 += GT_RM) {
    const int R = T - t0 < GT_RM ? T - t0 : GT_RM;
    gt_mix_block(c + (size_t)t0 * ldc, ldc, P + (size_t)t0 * T, (size_t)T, 1, R, 0, t0 + R, b,
                 hsp, hs);
  }
}

/* c[u] = sum_t P[t][u] b[t] for t >= u: the product with P^T without forming
 * it (entries of P above the diagonal are zero). */
static void gt_mix_lower_t(float *c, int ldc, const float *P, int T, const float *b, int hsp,
                           int hs)
{
  for (int u0 = 0; u0 < T; u0 += GT_RM) {
    const int R = T - u0 < GT_RM ? T - u0 : GT_RM;
    gt_mix_block(c + (size_t)u0 * ldc, ldc, P + u0, 1, (size_t)T, R, u0, T, b, hsp, hs);
  }
}

// ---- packing ---------------------------------------------------------------------------

/* dst (rows x hsp, zero padded) from T rows of hs floats at stride ld. */
static void gt_pack_rows(float *dst, int rows, int hsp, const float *src, int T, int hs, int ld)
{
  for (int t = 0; t < rows; t++) {
    float *d = dst + (size_t)t * hsp;
    if (t < T) {
      memcpy(d, src + (size_t)t * ld, sizeof(float) * (size_t)hs);
      memset(d + hs, 0, sizeof(float) * (size_t)(hsp - hs));
    } else {
      memset(d, 0, sizeof(float) * (size_t)hsp);
    }
  }
}

/* dst (hsp x Tp, zero padded) = transpose of T rows of hs floats at stride
 * ld, by blocks of 16 rows: each write is a whole cache line, and the 16
 * source rows stay in cache while the block is read column by column. */
static void gt_pack_transposed(float *dst, int hsp, int Tp, const float *src, int T, int hs,
                               int ld)
{
  memset(dst, 0, sizeof(float) * (size_t)hsp * Tp);
  for (int t0 = 0; t0 < T; t0 += GT_W) {
    const int n = T - t0 < GT_W ? T - t0 : GT_W;
    const float *s0 = src + (size_t)t0 * ld;
    for (int i = 0; i < hs; i++) {
      float *d = dst + (size_t)i * Tp + t0;
      for (int t = 0; t < n; t++)
        d[t] = s0[(size_t)t * ld + i];
    }
  }
}

// ---- scratch ------------------------------------------------------------------------------

/* Thread-private scratch, grown on demand, never shrunk. */
static _Thread_local float *gt_att_scratch;
static _Thread_local size_t gt_att_scratch_n;

static float *gt_scratch(size_t n)
{
  if (n > gt_att_scratch_n) {
    free(gt_att_scratch);
    gt_att_scratch = NULL;
    gt_att_scratch_n = 0;
    if (posix_memalign((void **)&gt_att_scratch, 64, n * sizeof(float)) != 0)
      return NULL;
    gt_att_scratch_n = n;
  }
  return gt_att_scratch;
}

// ---- forward and backward ------------------------------------------------------------------

/* Softmax of row t of a causal score matrix, in place: entries 0..t are
 * scores, the rest zero and staying zero. Whole vectors, lanes past t
 * masked; only entries 0..t are read or written. */
static inline void gt_softmax_causal_row(float *s, int t)
{
  const int nfull = (t + 1) / GT_W * GT_W; /* vectors with every lane valid */
  const int tail = t + 1 - nfull;          /* valid lanes of the last vector */
  float tmp[GT_W] = {0};
  memcpy(tmp, s + nfull, sizeof(float) * (size_t)tail);
  gt_v16 last = gt_load(tmp);
  gt_i16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  gt_i16 valid = lane < tail;
  gt_v16 vmax = gt_v16_select(valid, last, gt_v16_splat(-INFINITY));
  for (int u = 0; u < nfull; u += GT_W) {
    gt_v16 x = gt_load(s + u);
    vmax = gt_v16_select(x > vmax, x, vmax);
  }
  const float mx = gt_v16_max(vmax);
  gt_v16 vz = {0};
  for (int u = 0; u < nfull; u += GT_W) {
    gt_v16 e = gt_v16_exp(gt_load(s + u) - mx);
    gt_store(s + u, e);
    vz += e;
  }
  last = gt_v16_select(valid, gt_v16_exp(last - mx), (gt_v16){0});
  vz += last;
  const float inv = 1.0f / gt_v16_sum(vz);
  for (int u = 0; u < nfull; u += GT_W)
    gt_store(s + u, gt_load(s + u) * inv);
  last *= inv;
  gt_store(tmp, last);
  memcpy(s + nfull, tmp, sizeof(float) * (size_t)tail);
}

/* Widths of one head's problem. */
typedef struct {
  int C, C3;    /* row strides of the attention output and of qkv */
  int hsp, Tp;  /* padded head size and sequence length */
  float scale;  /* 1 / sqrt(hs) */
} gt_att_dims;

static gt_att_dims gt_att_dims_of(int T, int H, int hs)
{
  return (gt_att_dims){H * hs, 3 * H * hs, gt_round_up(hs, GT_W), gt_round_up(T, GT_W),
                       1.0f / sqrtf((float)hs)};
}

/* What one (batch, head) task needs; filled by the caller. */
typedef struct {
  gt_att_dims g;
  int T, H, hs;
  float *out, *att, *dqkv, *datt;
  const float *qkv, *dout, *patt;
} gt_att_job;

/* Run task(job, b, h, scratch) for every (batch, head) pair on the OpenMP
 * threads, each with nfloats of thread-private scratch. */
static int gt_for_each_head(const gt_att_job *job, int B, size_t nfloats,
                            void (*task)(const gt_att_job *, int, int, float *))
{
  int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed)
  for (int bh = 0; bh < B * job->H; bh++) {
    float *scratch = gt_scratch(nfloats);
    if (scratch)
      task(job, bh / job->H, bh % job->H, scratch);
    else
      failed = 1;
  }
  GT_CHECK(!failed, GT_ERR_SYSTEM, "out of memory for attention scratch (%zu floats per thread)",
           nfloats);
  return GT_SUCCESS;
}

static void gt_attention_forward_head(const gt_att_job *j, int b, int h, float *qp)
{
  const int T = j->T, hs = j->hs, C = j->g.C, C3 = j->g.C3, hsp = j->g.hsp, Tp = j->g.Tp;
  float *ktp = qp + (size_t)Tp * hsp, *vp = ktp + (size_t)Tp * hsp;
  const float *q = j->qkv + (size_t)b * T * C3 + (size_t)h * hs;
  gt_pack_rows(qp, Tp, hsp, q, T, hs, C3);
  gt_pack_transposed(ktp, hsp, Tp, q + C, T, hs, C3);
  gt_pack_rows(vp, Tp, hsp, q + 2 * C, T, hs, C3);
  float *s = j->att + ((size_t)b * j->H + h) * T * T;
  gt_scores_lower(s, T, qp, ktp, hsp, Tp, j->g.scale);
  for (int t = 0; t < T; t++)
    gt_softmax_causal_row(s + (size_t)t * T, t);
  gt_mix_lower(j->out + (size_t)b * T * C + (size_t)h * hs, C, s, T, vp, hsp, hs);
}

static void gt_attention_backward_head(const gt_att_job *j, int b, int h, float *dyp)
{
  const int T = j->T, hs = j->hs, C = j->g.C, C3 = j->g.C3, hsp = j->g.hsp, Tp = j->g.Tp;
  float *vtp = dyp + (size_t)Tp * hsp, *qp = vtp + (size_t)Tp * hsp;
  float *kp = qp + (size_t)Tp * hsp;
  const float *q = j->qkv + (size_t)b * T * C3 + (size_t)h * hs;
  const float *dy = j->dout + (size_t)b * T * C + (size_t)h * hs;
  gt_pack_rows(dyp, Tp, hsp, dy, T, hs, C);
  gt_pack_transposed(vtp, hsp, Tp, q + 2 * C, T, hs, C3);
  gt_pack_rows(qp, Tp, hsp, q, T, hs, C3);
  gt_pack_rows(kp, Tp, hsp, q + C, T, hs, C3);
  const size_t off = ((size_t)b * j->H + h) * T * T;
  const float *p = j->patt + off;
  float *ds = j->datt + off;
  /* dp = dy v^T (lower triangle); ds = p * (dp - rowsum(p * dp)) * scale */
  gt_scores_lower(ds, T, dyp, vtp, hsp, Tp, 1.0f);
  for (int t = 0; t < T; t++) {
    float *dsr = ds + (size_t)t * T;
    const float *pr = p + (size_t)t * T;
    /* entries past t: p = 0 and dp = 0, so whole vectors are safe */
    const int n = gt_round_up(t + 1, GT_W) < T ? gt_round_up(t + 1, GT_W) : T;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int u = 0; u < n; u++)
      dot += pr[u] * dsr[u];
#pragma omp simd
    for (int u = 0; u < n; u++)
      dsr[u] = pr[u] * (dsr[u] - dot) * j->g.scale;
  }
  float *dq = j->dqkv + (size_t)b * T * C3 + (size_t)h * hs;
  gt_mix_lower(dq, C3, ds, T, kp, hsp, hs);           /* dq = ds k */
  gt_mix_lower_t(dq + C, C3, ds, T, qp, hsp, hs);     /* dk = ds^T q */
  gt_mix_lower_t(dq + 2 * C, C3, p, T, dyp, hsp, hs); /* dv = p^T dy */
}

int gt_cpu_attention_forward(gt_backend *be, float *out, float *att, const float *qkv, int B,
                             int T, int H, int hs)
{
  (void)be;
  gt_att_job job = {.g = gt_att_dims_of(T, H, hs), .T = T, .H = H, .hs = hs, .out = out,
                    .att = att, .qkv = qkv};
  GT_CALL(gt_for_each_head(&job, B, (size_t)3 * job.g.Tp * job.g.hsp,
                           gt_attention_forward_head));
  return GT_SUCCESS;
}

int gt_cpu_attention_backward(gt_backend *be, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int H, int hs)
{
  (void)be;
  gt_att_job job = {.g = gt_att_dims_of(T, H, hs), .T = T, .H = H, .hs = hs, .dqkv = dqkv,
                    .datt = datt, .qkv = qkv, .dout = dout, .patt = att};
  GT_CALL(gt_for_each_head(&job, B, (size_t)4 * job.g.Tp * job.g.hsp,
                           gt_attention_backward_head));
  return GT_SUCCESS;
}
