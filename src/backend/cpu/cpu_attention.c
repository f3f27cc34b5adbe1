/*
 * cpu_attention.c - causal self-attention for the fast CPU backend, in the
 * flash-attention form of backend.h: no T x T matrix exists at any time.
 *
 * One (batch, head) pair per OpenMP task (in backward, one (batch,
 * key/value head) pair, whose query heads it takes in turn: grouped-query
 * attention's dk and dv sum over them in one fixed order). A task packs its head's k and v
 * (converted from dt to fp32) into zero-padded tiles in thread-private
 * scratch, then walks the query rows in blocks of R (GT_QB): it packs the
 * block's q (and in backward dout), computes the block's scores against the
 * keys 0..t0+R-1 that the causal mask allows, and takes an exact softmax per
 * row. Three register-blocked kernels, written with GCC vector extensions
 * (16 floats: one AVX-512 register, two AVX2 ones), skip the blocks above
 * the causal diagonal:
 *   scores  S = a k^T    a: block rows; k in panels of 16 keys   (q k^T, dO v^T)
 *   mix     c = P b      rows of the block                       (P v, dS k)
 *   mix^T   c += P^T b   key rows, accumulated over the blocks   (dS^T q, P^T dO)
 * Forward:  out = (sum_u e^(s_u - m) v_u) / z, lse = m + log z per row.
 * Backward: P = exp(S - lse), dP = dO v^T, D = rowsum(dO o O),
 *           dS = P o (dP - D) / sqrt(hs); dq = dS k per block; dk += dS^T q
 *           and dv += P^T dO in fp32 over the blocks, rounded at the end.
 * Shapes: T tokens padded to Tp (multiple of 16), head size hs padded to hsp
 * (multiple of 16); score rows at stride Tp + 16 (off 4 KiB multiples).
 * Scratch per thread, in floats, R = GT_QB = 64:
 *   forward  2 Tp hsp + R (Tp + 2 hsp + 17)     (hs = 64: 768 T bytes + 36 KiB)
 *   backward 5 Tp hsp + R (2 Tp + 5 hsp + 33)   (hs = 64: 1792 T bytes + 88 KiB)
 * (T = 2048: 1.5 MiB and 3.6 MiB). Every sum runs in an order fixed by the
 * shapes alone (each output element is one chain over the keys, resp. the
 * query rows, in ascending order): results repeat bit for bit for any
 * thread count.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backends.h"
#include "cpu_simd.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"

#define GT_W 16  /* floats per vector, keys per panel */
#define GT_QB 64 /* query rows per block */
#define GT_RS 8  /* rows per register block in the score kernel */
#define GT_PS 3  /* key panels per register block in the score kernel (<= 3) */
#define GT_RM 4  /* rows per register block in the mix kernels */
#define GT_CM 4  /* vectors per row block in the mix kernels (64 floats) */

_Static_assert(GT_QB % GT_RS == 0 && GT_RS % GT_RM == 0 && GT_W % GT_RM == 0,
               "blocks: rows of a query block come in score blocks, which come in mix blocks");
_Static_assert(GT_PS >= 1 && GT_PS <= 3, "the score tile has 1 to 3 panels");
_Static_assert(GT_CM == 4, "the mix kernels dispatch chunks of 1 to 4 vectors");

/* Keep a vector in a register: GCC would rather fold its load into each FMA
 * that uses it, one load per use, and the kernel becomes load-bound. (Only
 * where 16 floats fit one register: AVX-512.) */
#if defined(__x86_64__) && defined(__AVX512F__)
#define GT_IN_REGISTER(v) __asm__("" : "+v"(v))
#else
#define GT_IN_REGISTER(v) ((void)0)
#endif

static inline int64_t gt_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

GT_INLINE gt_v16 gt_load(const float *p)
{
  gt_v16 v;
  memcpy(&v, p, sizeof v);
  return v;
}

GT_INLINE void gt_store(float *p, gt_v16 v) { memcpy(p, &v, sizeof v); }

static const gt_i16 gt_lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// ---- kernels ----------------------------------------------------------------------

/* One register block of scores: S[r][16p + j] = alpha sum_i a[i][r] kp[p][i][j]
 * for GT_RS rows r and np <= 3 panels p (np a constant once inlined). a: the
 * block's rows interleaved (hsp x GT_RS, so that one pointer reaches every
 * row's element i); kp: panels of hsp x 16 floats. */
GT_INLINE void gt_score_tile(float *S, int64_t ldS, const float *a, const float *kp,
                             int64_t hsp, float alpha, int np)
{
  gt_v16 acc[GT_RS][3];
  for (int r = 0; r < GT_RS; r++)
    for (int p = 0; p < np; p++)
      acc[r][p] = (gt_v16){0};
  const float *k1 = kp + hsp * GT_W, *k2 = k1 + hsp * GT_W;
  for (int64_t i = 0; i < hsp; i++) {
    const gt_v16 b0 = gt_load(kp + i * GT_W);
    const gt_v16 b1 = np > 1 ? gt_load(k1 + i * GT_W) : b0;
    const gt_v16 b2 = np > 2 ? gt_load(k2 + i * GT_W) : b0;
    for (int r = 0; r < GT_RS; r++) {
      const float x = a[i * GT_RS + r];
      acc[r][0] += x * b0;
      if (np > 1)
        acc[r][1] += x * b1;
      if (np > 2)
        acc[r][2] += x * b2;
    }
  }
  for (int r = 0; r < GT_RS; r++)
    for (int p = 0; p < np; p++)
      gt_store(S + r * ldS + p * GT_W, acc[r][p] * alpha);
}

/* Scores of a query block: rows [0, R) of S (stride ldS) = alpha a kp^T,
 * where a holds the rows of queries t0.. (padded with zero rows to a
 * multiple of GT_RS), interleaved by gt_pack_interleave. Each register
 * block of rows gets the panels up to the one holding its last row's
 * diagonal; entries past a row's diagonal are computed where a panel
 * straddles it and left unwritten past that. */
static void gt_scores(float *S, int64_t ldS, const float *a, const float *kp, int64_t hsp,
                      int64_t t0, int64_t R, float alpha)
{
  for (int64_t r0 = 0; r0 < R; r0 += GT_RS) {
    const int64_t np = (t0 + gt_min64(r0 + GT_RS, R) - 1) / GT_W + 1;
    float *s = S + r0 * ldS;
    const float *ar = a + r0 * hsp; /* GT_RS rows interleaved */
    int64_t p = 0;
    for (; p + GT_PS <= np; p += GT_PS)
      gt_score_tile(s + p * GT_W, ldS, ar, kp + p * hsp * GT_W, hsp, alpha, GT_PS);
    if (np - p == 2)
      gt_score_tile(s + p * GT_W, ldS, ar, kp + p * hsp * GT_W, hsp, alpha, 2);
    else if (np - p == 1)
      gt_score_tile(s + p * GT_W, ldS, ar, kp + p * hsp * GT_W, hsp, alpha, 1);
  }
}

/* One register block of the mix kernels: acc[r][v] += sum_{k in [k0, k1)}
 * coef[r rs + k ks] b[k hsp + 16 v], k ascending, for GT_RM rows and nv
 * vectors (a constant once inlined). */
GT_INLINE void gt_mix_tile(gt_v16 acc[GT_RM][GT_CM], const float *coef, int64_t rs,
                           int64_t ks, int64_t k0, int64_t k1, const float *b, int64_t hsp,
                           int nv)
{
  for (int64_t k = k0; k < k1; k++) {
    gt_v16 bv[GT_CM];
    for (int v = 0; v < nv; v++) {
      bv[v] = gt_load(b + k * hsp + v * GT_W);
      GT_IN_REGISTER(bv[v]);
    }
    const float *cf = coef + k * ks;
    for (int r = 0; r < GT_RM; r++) {
      const float x = cf[r * rs];
      for (int v = 0; v < nv; v++)
        acc[r][v] += x * bv[v];
    }
  }
}

/* c[r] (+)= sum_{k in [k0, k1)} coef(r, k) b[k] over one chunk of nv
 * vectors at column c0, for GT_RM rows of c (stride hsp). */
GT_INLINE void gt_mix_chunk(float *c, bool accumulate, const float *coef, int64_t rs,
                            int64_t ks, int64_t k0, int64_t k1, const float *b, int64_t hsp,
                            int nv)
{
  gt_v16 acc[GT_RM][GT_CM];
  for (int r = 0; r < GT_RM; r++)
    for (int v = 0; v < nv; v++)
      acc[r][v] = accumulate ? gt_load(c + r * hsp + v * GT_W) : (gt_v16){0};
  gt_mix_tile(acc, coef, rs, ks, k0, k1, b, hsp, nv);
  for (int r = 0; r < GT_RM; r++)
    for (int v = 0; v < nv; v++)
      gt_store(c + r * hsp + v * GT_W, acc[r][v]);
}

/* All column chunks of GT_RM rows of c (hsp wide), nv dispatched to a
 * constant so that the accumulators stay in registers. */
static void gt_mix_rows_block(float *c, bool accumulate, const float *coef, int64_t rs,
                              int64_t ks, int64_t k0, int64_t k1, const float *b, int64_t hsp)
{
  for (int64_t c0 = 0; c0 < hsp; c0 += GT_CM * GT_W) {
    const int64_t nv = gt_min64((hsp - c0) / GT_W, GT_CM);
    float *cc = c + c0;
    const float *bc = b + c0;
    switch (nv) {
    case 4: gt_mix_chunk(cc, accumulate, coef, rs, ks, k0, k1, bc, hsp, 4); break;
    case 3: gt_mix_chunk(cc, accumulate, coef, rs, ks, k0, k1, bc, hsp, 3); break;
    case 2: gt_mix_chunk(cc, accumulate, coef, rs, ks, k0, k1, bc, hsp, 2); break;
    default: gt_mix_chunk(cc, accumulate, coef, rs, ks, k0, k1, bc, hsp, 1); break;
    }
  }
}

/* c[r] = sum_{u <= t0 + r} P[r][u] b[u] for the rows r of a query block
 * (c: rows of hsp floats, padded to a multiple of GT_RM; P row stride ldP,
 * zero past each row's diagonal and in the padding rows; b: key rows). */
static void gt_mix(float *c, const float *P, int64_t ldP, const float *b, int64_t hsp,
                   int64_t t0, int64_t R)
{
  for (int64_t r0 = 0; r0 < R; r0 += GT_RM) {
    const int64_t k1 = t0 + gt_min64(r0 + GT_RM, R);
    gt_mix_rows_block(c + r0 * hsp, false, P + r0 * ldP, ldP, 1, 0, k1, b, hsp);
  }
}

/* c[u] += sum_{r: t0 + r >= u} P[r][u] b[r] for the keys u < t0 + R (c: key
 * rows of hsp floats, at least gt_up(t0 + R, GT_RM) of them; P as in gt_mix,
 * zero up to gt_up(t0 + R, GT_W); b: the block's rows). */
static void gt_mix_t(float *c, const float *P, int64_t ldP, const float *b, int64_t hsp,
                     int64_t t0, int64_t R)
{
  for (int64_t u0 = 0; u0 < t0 + R; u0 += GT_RM) {
    const int64_t r_lo = u0 > t0 ? u0 - t0 : 0;
    gt_mix_rows_block(c + u0 * hsp, true, P + u0, 1, ldP, r_lo, R, b, hsp);
  }
}

// ---- packing (dt -> fp32) ----------------------------------------------------------

typedef struct {
  gt_dtype dt;
  size_t esz;  /* bytes per element of dt */
  int64_t hs, hsp;
} gt_pack_fmt;

static inline const void *gt_elem(const gt_pack_fmt *f, const void *p, int64_t i)
{
  return (const char *)p + (size_t)i * f->esz;
}

/* dst (rows x hsp, zero padded) from n <= rows rows of hs elements at stride
 * ld (elements). */
static void gt_pack_rows(const gt_pack_fmt *f, float *dst, int64_t rows, const void *src,
                         int64_t n, int64_t ld)
{
  const int64_t ahead = 8;                     /* rows prefetched ahead: they lie */
  const size_t bytes = (size_t)f->hs * f->esz; /* too far apart for the hardware */
  for (int64_t t = 0; t < rows; t++) {
    float *d = dst + t * f->hsp;
    if (t + ahead < n) {
      const char *next = gt_elem(f, src, (t + ahead) * ld);
      for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(next + o);
      __builtin_prefetch(next + bytes - 1);
    }
    if (t < n) {
      gt_to_f32(f->dt, d, gt_elem(f, src, t * ld), (size_t)f->hs);
      memset(d + f->hs, 0, sizeof(float) * (size_t)(f->hsp - f->hs));
    } else {
      memset(d, 0, sizeof(float) * (size_t)f->hsp);
    }
  }
}

/* dst: Tp/16 panels of hsp x 16 floats, panel p holding keys 16p..16p+15
 * column by column (dst[p][i][j] = src row 16p + j, element i); zero past n
 * rows and hs columns. tmp: 16 x hsp floats. */
static void gt_pack_panels(const gt_pack_fmt *f, float *dst, int64_t Tp, const void *src,
                           int64_t n, int64_t ld, float *tmp)
{
  const int64_t hsp = f->hsp;
  for (int64_t t0 = 0; t0 < Tp; t0 += GT_W) {
    if (t0 < n)
      gt_pack_rows(f, tmp, GT_W, gt_elem(f, src, t0 * ld), gt_min64(GT_W, n - t0), ld);
    else
      memset(tmp, 0, sizeof(float) * (size_t)(GT_W * hsp));
    float *pan = dst + t0 * hsp;
    for (int64_t i = 0; i < hsp; i++)
      for (int j = 0; j < GT_W; j++)
        pan[i * GT_W + j] = tmp[j * hsp + i];
  }
}

/* dst: the rows (a multiple of GT_RS of them, hsp floats each) of src in
 * groups of GT_RS, each group interleaved: dst[g][i][r] = src[g GT_RS + r][i]. */
static void gt_pack_interleave(float *dst, const float *src, int64_t rows, int64_t hsp)
{
  for (int64_t g = 0; g < rows; g += GT_RS) {
    float *d = dst + g * hsp;
    const float *sg = src + g * hsp;
    for (int64_t i = 0; i < hsp; i++)
      for (int r = 0; r < GT_RS; r++)
        d[i * GT_RS + r] = sg[r * hsp + i];
  }
}

/* n elements of dt at dst = src rounded. */
static void gt_unpack_row(const gt_pack_fmt *f, void *dst, const float *src)
{
  gt_from_f32(f->dt, dst, src, (size_t)f->hs);
}

// ---- softmax rows -----------------------------------------------------------------

/* Row t of a block's scores, in place: entries 0..t are scores, entries up
 * to the end of t's vector may be anything. On return s[0..t] = e^(s - m),
 * s[t+1 .. n) = 0 (n a multiple of 16 past t), *m the row's maximum and *z
 * the sum of the exponentials (summed lane-wise, then lane by lane). */
static void gt_softmax_row(float *s, int64_t t, int64_t n, float *m, float *z)
{
  const int64_t last = t / GT_W * GT_W; /* the vector holding the diagonal */
  const gt_i16 valid = gt_lane <= (int32_t)(t - last);
  const gt_v16 ninf = gt_v16_splat(-INFINITY);
  gt_v16 vmax0 = gt_v16_select(valid, gt_load(s + last), ninf), vmax1 = ninf;
  int64_t u = 0;
  for (; u + 2 * GT_W <= last; u += 2 * GT_W) {
    const gt_v16 x0 = gt_load(s + u), x1 = gt_load(s + u + GT_W);
    vmax0 = gt_v16_select(x0 > vmax0, x0, vmax0);
    vmax1 = gt_v16_select(x1 > vmax1, x1, vmax1);
  }
  for (; u < last; u += GT_W) {
    const gt_v16 x = gt_load(s + u);
    vmax0 = gt_v16_select(x > vmax0, x, vmax0);
  }
  vmax0 = gt_v16_select(vmax1 > vmax0, vmax1, vmax0);
  const float mx = gt_v16_max(vmax0);
  gt_v16 vz = {0};
  for (u = 0; u < last; u += GT_W) {
    const gt_v16 e = gt_v16_exp(gt_load(s + u) - mx);
    gt_store(s + u, e);
    vz += e;
  }
  const gt_v16 e = gt_v16_select(valid, gt_v16_exp(gt_load(s + last) - mx), (gt_v16){0});
  gt_store(s + last, e);
  vz += e;
  for (u = last + GT_W; u < n; u += GT_W)
    gt_store(s + u, (gt_v16){0});
  *m = mx;
  *z = gt_v16_sum(vz);
}

/* Backward row t, in place: p (scores on entry) = e^(s - lse), dp (dO v^T on
 * entry) = p (dp - D) scale, both zero past t up to n. */
static void gt_dsoftmax_row(float *p, float *dp, int64_t t, int64_t n, float lse, float D,
                            float scale)
{
  const int64_t last = t / GT_W * GT_W;
  for (int64_t u = 0; u <= last; u += GT_W) {
    gt_v16 e = gt_v16_exp(gt_load(p + u) - lse);
    gt_v16 ds = e * (gt_load(dp + u) - D) * scale;
    if (u == last) {
      const gt_i16 valid = gt_lane <= (int32_t)(t - last);
      e = gt_v16_select(valid, e, (gt_v16){0});
      ds = gt_v16_select(valid, ds, (gt_v16){0});
    }
    gt_store(p + u, e);
    gt_store(dp + u, ds);
  }
  for (int64_t u = last + GT_W; u < n; u += GT_W) {
    gt_store(p + u, (gt_v16){0});
    gt_store(dp + u, (gt_v16){0});
  }
}

// ---- scratch ------------------------------------------------------------------------

/* Thread-private scratch, 64-byte aligned, grown on demand, never shrunk. */
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

// ---- forward and backward -----------------------------------------------------------

/* One call's problem, shared by its (batch, head) tasks. */
typedef struct {
  gt_pack_fmt f;
  int64_t T, H, Hkv, Tp, C, C3; /* C, C3: row strides (elements) of out and qkv */
  int64_t group;                /* query heads per key/value head: H / Hkv */
  int64_t ldS;             /* row stride of the score blocks: Tp + 16 */
  float scale;             /* 1 / sqrt(hs) */
  void *out, *dqkv;
  float *lse;
  const void *qkv, *dout, *fwd_out;
  const float *lse_in;
} gt_att_job;

static gt_att_job gt_att_job_of(gt_dtype dt, int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  const int64_t hsp = gt_up(hs, GT_W);
  const int64_t Tp = gt_up(T, GT_W);
  return (gt_att_job){.f = {dt, gt_dtype_size(dt), hs, hsp}, .T = T, .H = H, .Hkv = Hkv,
                      .Tp = Tp, .C = H * hs, .C3 = (H + 2 * Hkv) * hs, .group = H / Hkv,
                      .ldS = Tp + GT_W, .scale = 1.0f / sqrtf((float)hs)};
}

/* Row 0 of batch b's query head h, and of key/value head j's keys and
 * values, in qkv (stride C3 between rows). */
static const void *gt_att_q(const gt_att_job *j, const void *qkv, int64_t b, int64_t h)
{
  return gt_elem(&j->f, qkv, b * j->T * j->C3 + h * j->f.hs);
}

static const void *gt_att_k(const gt_att_job *j, const void *qkv, int64_t b, int64_t kv)
{
  return gt_elem(&j->f, qkv, b * j->T * j->C3 + (j->H + kv) * j->f.hs);
}

static const void *gt_att_v(const gt_att_job *j, const void *qkv, int64_t b, int64_t kv)
{
  return gt_elem(&j->f, qkv, b * j->T * j->C3 + (j->H + j->Hkv + kv) * j->f.hs);
}

static size_t gt_att_forward_floats(const gt_att_job *j)
{
  const int64_t hsp = j->f.hsp;
  return (size_t)(2 * j->Tp * hsp + GT_QB * (j->ldS + 2 * hsp + 1));
}

static size_t gt_att_backward_floats(const gt_att_job *j)
{
  const int64_t hsp = j->f.hsp;
  return (size_t)(5 * j->Tp * hsp + GT_QB * (2 * j->ldS + 5 * hsp + 1));
}

static void gt_attention_forward_head(const gt_att_job *j, int64_t b, int64_t h, float *ws)
{
  const gt_pack_fmt *f = &j->f;
  const int64_t T = j->T, Tp = j->Tp, ldS = j->ldS, hsp = f->hsp, C = j->C, C3 = j->C3;
  float *kp = ws, *vr = kp + Tp * hsp, *qb = vr + Tp * hsp, *S = qb + GT_QB * hsp;
  float *ob = S + GT_QB * ldS, *rz = ob + GT_QB * hsp;
  const void *q = gt_att_q(j, j->qkv, b, h);
  const int64_t kv = h / j->group;
  gt_pack_panels(f, kp, Tp, gt_att_k(j, j->qkv, b, kv), T, C3, qb); /* qb: 16 x hsp of room */
  gt_pack_rows(f, vr, Tp, gt_att_v(j, j->qkv, b, kv), T, C3);
  float *lse = j->lse + (b * j->H + h) * T;
  for (int64_t t0 = 0; t0 < T; t0 += GT_QB) {
    const int64_t R = gt_min64(GT_QB, T - t0), Rp = gt_up(R, GT_RS);
    const int64_t n = gt_up(t0 + R, GT_W); /* columns the block's rows span */
    gt_pack_rows(f, ob, Rp, gt_elem(f, q, t0 * C3), R, C3);
    gt_pack_interleave(qb, ob, Rp, hsp);
    gt_scores(S, ldS, qb, kp, hsp, t0, R, j->scale);
    for (int64_t r = 0; r < R; r++) {
      float m, z;
      gt_softmax_row(S + r * ldS, t0 + r, n, &m, &z);
      lse[t0 + r] = m + logf(z);
      rz[r] = 1.0f / z;
    }
    for (int64_t r = R; r < Rp; r++)
      memset(S + r * ldS, 0, sizeof(float) * (size_t)n);
    gt_mix(ob, S, ldS, vr, hsp, t0, R);
    for (int64_t r = 0; r < R; r++) {
      float *o = ob + r * hsp;
      const float inv = rz[r];
      for (int64_t i = 0; i < f->hs; i++)
        o[i] *= inv;
      gt_unpack_row(f, (char *)j->out + (size_t)((b * T + t0 + r) * C + h * f->hs) * f->esz,
                    o);
    }
  }
}

/* Backward of key/value head kv of batch b: the query heads of its group in
 * ascending order, each writing its dq; dk and dv sum over all of them in
 * fp32 and are rounded once at the end. */
static void gt_attention_backward_head(const gt_att_job *j, int64_t b, int64_t kv, float *ws)
{
  const gt_pack_fmt *f = &j->f;
  const int64_t T = j->T, Tp = j->Tp, ldS = j->ldS, hsp = f->hsp, hs = f->hs;
  const int64_t C = j->C, C3 = j->C3;
  float *kp = ws, *kr = kp + Tp * hsp, *vp = kr + Tp * hsp, *dk = vp + Tp * hsp;
  float *dv = dk + Tp * hsp, *qb = dv + Tp * hsp, *db = qb + GT_QB * hsp;
  float *ob = db + GT_QB * hsp, *P = ob + GT_QB * hsp, *dS = P + GT_QB * ldS;
  float *qi = dS + GT_QB * ldS, *di = qi + GT_QB * hsp, *Dr = di + GT_QB * hsp;
  const void *k = gt_att_k(j, j->qkv, b, kv), *v = gt_att_v(j, j->qkv, b, kv);
  gt_pack_panels(f, kp, Tp, k, T, C3, qb);
  gt_pack_rows(f, kr, Tp, k, T, C3);
  gt_pack_panels(f, vp, Tp, v, T, C3, qb);
  memset(dk, 0, sizeof(float) * (size_t)(2 * Tp * hsp)); /* dk and dv */
  for (int64_t h = kv * j->group; h < (kv + 1) * j->group; h++) {
    const void *q = gt_att_q(j, j->qkv, b, h);
    const size_t dq_at = (size_t)(b * T * C3 + h * hs); /* dq's row 0 in dqkv */
    const void *dy = gt_elem(f, j->dout, b * T * C + h * hs);
    const void *y = gt_elem(f, j->fwd_out, b * T * C + h * hs);
    const float *lse = j->lse_in + (b * j->H + h) * T;
    for (int64_t t0 = 0; t0 < T; t0 += GT_QB) {
      const int64_t R = gt_min64(GT_QB, T - t0), Rp = gt_up(R, GT_RS);
      const int64_t n = gt_up(t0 + R, GT_W);
      gt_pack_rows(f, qb, Rp, gt_elem(f, q, t0 * C3), R, C3);
      gt_pack_rows(f, db, Rp, gt_elem(f, dy, t0 * C), R, C);
      gt_pack_rows(f, ob, R, gt_elem(f, y, t0 * C), R, C); /* the forward's out rows */
      for (int64_t r = 0; r < R; r++) { /* D = rowsum(dO o O) */
        gt_v16 acc = {0};
        for (int64_t i = 0; i < hsp; i += GT_W)
          acc += gt_load(db + r * hsp + i) * gt_load(ob + r * hsp + i);
        Dr[r] = gt_v16_sum(acc);
      }
      gt_pack_interleave(qi, qb, Rp, hsp);
      gt_pack_interleave(di, db, Rp, hsp);
      gt_scores(P, ldS, qi, kp, hsp, t0, R, j->scale);
      gt_scores(dS, ldS, di, vp, hsp, t0, R, 1.0f);
      for (int64_t r = 0; r < R; r++)
        gt_dsoftmax_row(P + r * ldS, dS + r * ldS, t0 + r, n, lse[t0 + r], Dr[r], j->scale);
      for (int64_t r = R; r < Rp; r++) {
        memset(P + r * ldS, 0, sizeof(float) * (size_t)n);
        memset(dS + r * ldS, 0, sizeof(float) * (size_t)n);
      }
      gt_mix(ob, dS, ldS, kr, hsp, t0, R); /* dq = dS k */
      for (int64_t r = 0; r < R; r++)
        gt_unpack_row(f, (char *)j->dqkv + (dq_at + (size_t)((t0 + r) * C3)) * f->esz,
                      ob + r * hsp);
      gt_mix_t(dk, dS, ldS, qb, hsp, t0, R); /* dk += dS^T q */
      gt_mix_t(dv, P, ldS, db, hsp, t0, R);  /* dv += P^T dO */
    }
  }
  const size_t dk_at = (size_t)(b * T * C3 + (j->H + kv) * hs);
  const size_t dv_at = dk_at + (size_t)(j->Hkv * hs);
  for (int64_t t = 0; t < T; t++) {
    gt_unpack_row(f, (char *)j->dqkv + (dk_at + (size_t)(t * C3)) * f->esz, dk + t * hsp);
    gt_unpack_row(f, (char *)j->dqkv + (dv_at + (size_t)(t * C3)) * f->esz, dv + t * hsp);
  }
}

/* Decoding (backend.h attention_decode): the last row's q against the T
 * key rows of head h, in fp32: scores, an exact softmax, the mix of the
 * value rows in ascending order. Scratch: T + 2 hs floats. */
static void gt_attention_decode_head(const gt_att_job *j, int64_t b, int64_t h, float *ws)
{
  (void)b;
  const gt_pack_fmt *f = &j->f;
  const int64_t T = j->T, hs = f->hs, C3 = j->C3;
  float *s = ws, *q = s + T, *row = q + hs;
  const void *k = gt_att_k(j, j->qkv, 0, h / j->group), *v = gt_att_v(j, j->qkv, 0, h / j->group);
  gt_to_f32(f->dt, q, gt_elem(f, gt_att_q(j, j->qkv, 0, h), (T - 1) * C3), (size_t)hs);
  float m = -INFINITY;
  for (int64_t u = 0; u < T; u++) {
    gt_to_f32(f->dt, row, gt_elem(f, k, u * C3), (size_t)hs);
    float d = 0;
    for (int64_t i = 0; i < hs; i++)
      d += q[i] * row[i];
    s[u] = d * j->scale;
    m = s[u] > m ? s[u] : m;
  }
  float z = 0;
  for (int64_t u = 0; u < T; u++) {
    s[u] = expf(s[u] - m);
    z += s[u];
  }
  memset(q, 0, sizeof(float) * (size_t)hs); /* q becomes the output accumulator */
  for (int64_t u = 0; u < T; u++) {
    gt_to_f32(f->dt, row, gt_elem(f, v, u * C3), (size_t)hs);
    for (int64_t i = 0; i < hs; i++)
      q[i] += s[u] * row[i];
  }
  const float inv = 1.0f / z;
  for (int64_t i = 0; i < hs; i++)
    q[i] *= inv;
  gt_unpack_row(f, (char *)j->out + (size_t)(h * hs) * f->esz, q);
}

/* Run task(job, b, h, scratch) for every (batch, head) pair, of `heads`
 * heads a batch, on the backend's threads, each with nfloats of
 * thread-private scratch. */
static int gt_for_each_head(gt_backend *be, const gt_att_job *job, int64_t B, int64_t heads,
                            size_t nfloats,
                            void (*task)(const gt_att_job *, int64_t, int64_t, float *))
{
  int failed = 0;
  const int64_t n = B * heads;
#pragma omp parallel for num_threads(be->threads) schedule(dynamic, 1) reduction(| : failed)
  for (int64_t bh = 0; bh < n; bh++) {
    float *scratch = gt_scratch(nfloats);
    if (scratch)
      task(job, bh / heads, bh % heads, scratch);
    else
      failed = 1;
  }
  GT_CHECK(!failed, GT_ERR_SYSTEM,
           "out of memory for attention scratch (%zu bytes per thread)",
           nfloats * sizeof(float));
  return GT_SUCCESS;
}

static int gt_att_check(gt_dtype dt, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  GT_CHECK(dt == GT_F32 || dt == GT_BF16 || dt == GT_F16, GT_ERR_INPUT,
           "attention: compute type %s; expected fp32, bf16 or fp16", gt_dtype_name(dt));
  GT_CHECK(B >= 0 && T >= 0 && H >= 1 && hs >= 1 && Hkv >= 1 && H % Hkv == 0, GT_ERR_INPUT,
           "attention: shape B=%lld T=%lld H=%lld Hkv=%lld hs=%lld; expected B, T >= 0, H, "
           "hs >= 1 and H a multiple of Hkv >= 1",
           (long long)B, (long long)T, (long long)H, (long long)Hkv, (long long)hs);
  return GT_SUCCESS;
}

int gt_cpu_attention_forward(gt_backend *be, gt_dtype dt, void *out, float *lse,
                             const void *qkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                             int64_t hs)
{
  GT_CALL(gt_att_check(dt, B, T, H, Hkv, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  gt_att_job job = gt_att_job_of(dt, T, H, Hkv, hs);
  job.out = out;
  job.lse = lse;
  job.qkv = qkv;
  GT_CALL(gt_for_each_head(be, &job, B, H, gt_att_forward_floats(&job),
                           gt_attention_forward_head));
  return GT_SUCCESS;
}

int gt_cpu_attention_backward(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse, int64_t B,
                              int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  GT_CALL(gt_att_check(dt, B, T, H, Hkv, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  gt_att_job job = gt_att_job_of(dt, T, H, Hkv, hs);
  job.dqkv = dqkv;
  job.dout = dout;
  job.qkv = qkv;
  job.fwd_out = out;
  job.lse_in = lse;
  GT_CALL(gt_for_each_head(be, &job, B, Hkv, gt_att_backward_floats(&job),
                           gt_attention_backward_head));
  return GT_SUCCESS;
}

int gt_cpu_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv, int64_t T,
                            int64_t H, int64_t Hkv, int64_t hs)
{
  GT_CALL(gt_att_check(dt, 1, T, H, Hkv, hs));
  GT_CHECK(T >= 1, GT_ERR_INPUT, "attention decode: T = %lld; expected at least 1 position",
           (long long)T);
  gt_att_job job = gt_att_job_of(dt, T, H, Hkv, hs);
  job.out = out;
  job.qkv = qkv;
  GT_CALL(gt_for_each_head(be, &job, 1, H, (size_t)(T + 2 * hs), gt_attention_decode_head));
  return GT_SUCCESS;
}
