/*
 * cpu_moe.c - the mixture-of-experts ops of backend.h (the router's choice,
 * the pairs in expert order, permutation into that order, combination back
 * into token order, and the backward of each) for both host backends: "cpu"
 * and "cpu-ref" share these kernels. They are copies, axpys and short dot
 * products, O(N k C) in all, already plain loops; a second reference copy
 * would only test itself.
 *
 * Determinism: OpenMP splits the tokens, never a sum. Every output element
 * is computed by one thread in the order the contract fixes (a row of the
 * expert-ordered buffer belongs to the one pair that names it), so results
 * repeat bit for bit for any thread count. moe_assign is one serial counting
 * pass, O(N k), which fixes the expert order without a sort.
 *
 * Precisions: the router ops are fp32 in and out; the softmax sums, the
 * gates' normalisation and the router backward run in double, each output
 * rounded once. The token ops read dt, add in fp32 in the contract's order
 * and round once (GT_BY_DT instantiates each row body per compute type);
 * the dgate dot product accumulates in double.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backends.h"
#include "cpu_simd.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"

/* Below this much work an op runs on the calling thread alone: a parallel
 * region costs more than a small router or a decoding step's few tokens
 * (and on an oversubscribed node much more). Elements of the router's (N,E)
 * rows, resp. element copies or additions of the token ops (N k C). Which
 * thread computes an element never changes its value. */
#define GT_MOE_PAR_ROUTER 4096
#define GT_MOE_PAR_TOKENS 16384

/* Columns summed at a time in an fp32 buffer on the stack: the row is read,
 * added to and rounded chunk by chunk, each element still in the contract's
 * order; 1 KiB keeps the buffer in L1 at any width C. */
#define GT_MOE_CHUNK 256

#define GT_CHECK_ROUTE(N, E, k)                                                              \
  GT_CHECK((N) >= 0 && (k) >= 1 && (k) <= (E), GT_ERR_INTERNAL,                              \
           "internal error: %s: N = %lld tokens routed to k = %lld of E = %lld experts "     \
           "(needs N >= 0 and 1 <= k <= E)",                                                 \
           __func__, (long long)(N), (long long)(k), (long long)(E))

#define GT_CHECK_TOKENS(dt, N, k, C)                                                         \
  do {                                                                                       \
    GT_CHECK_DT(dt);                                                                         \
    GT_CHECK((N) >= 0 && (k) >= 1 && (C) >= 0, GT_ERR_INTERNAL,                              \
             "internal error: %s: N = %lld, k = %lld, C = %lld (needs N >= 0, k >= 1, "      \
             "C >= 0)",                                                                      \
             __func__, (long long)(N), (long long)(k), (long long)(C));                      \
  } while (0)

// ---- the router -------------------------------------------------------------------------

/* The order of the top-k choice: larger probability first, the lower index
 * on a tie. A NaN (a row whose logits overflowed) ranks as -inf, so that the
 * order stays total and a row still gets k distinct experts. */
static inline float gt_route_key(float p) { return isnan(p) ? -INFINITY : p; }

static inline bool gt_route_before(const float *p, int64_t a, int64_t b)
{
  const float ka = gt_route_key(p[a]), kb = gt_route_key(p[b]);
  return ka > kb || (ka == kb && a < b);
}

/* Row n: softmax, log-sum-exp, top k, renormalised gates. */
static void gt_route_row(float *probs, float *lse, int32_t *sel, float *gate,
                         const float *logits, int64_t n, int64_t E, int64_t k)
{
  const float *l = logits + (size_t)n * (size_t)E;
  float *p = probs + (size_t)n * (size_t)E;
  float mx = -INFINITY;
  for (int64_t e = 0; e < E; e++)
    mx = l[e] > mx ? l[e] : mx;
  double s = 0;
  for (int64_t e = 0; e < E; e++)
    s += exp((double)l[e] - mx);
  /* exp again rather than kept in fp32: each probability is rounded once */
  for (int64_t e = 0; e < E; e++)
    p[e] = (float)(exp((double)l[e] - mx) / s);
  lse[n] = (float)(mx + log(s));
  /* Pick j is the first expert in gt_route_before's order after pick j-1:
   * k scans of the row, and no marks of what was taken. */
  int32_t *sn = sel + (size_t)n * (size_t)k;
  double z = 0;
  for (int64_t j = 0; j < k; j++) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; e++) {
      if (j > 0 && !gt_route_before(p, sn[j - 1], e))
        continue;
      if (best < 0 || gt_route_before(p, e, best))
        best = e;
    }
    sn[j] = (int32_t)best;
    z += p[best];
  }
  float *g = gate + (size_t)n * (size_t)k;
  for (int64_t j = 0; j < k; j++)
    g[j] = (float)(p[sn[j]] / z);
}

int gt_cpu_moe_route(gt_backend *be, float *probs, float *lse, int32_t *sel, float *gate,
                     const float *logits, int64_t N, int64_t E, int64_t k)
{
  (void)be;
  GT_CHECK_ROUTE(N, E, k);
  GT_CHECK(E <= INT32_MAX, GT_ERR_INTERNAL,
           "internal error: %s: E = %lld experts do not fit the int32 of sel", __func__,
           (long long)E);
#pragma omp parallel for schedule(static) if (N * E >= GT_MOE_PAR_ROUTER)
  for (int64_t n = 0; n < N; n++)
    gt_route_row(probs, lse, sel, gate, logits, n, E, k);
  return GT_SUCCESS;
}

/* The pairs in expert order: a counting sort. load counts each expert's
 * pairs, kept caps them, the kept counts' prefix sums give each expert's
 * first row, and one walk in n k + j order hands out the rows, so that an
 * expert keeps its earliest pairs. */
int gt_cpu_moe_assign(gt_backend *be, int32_t *pos, int32_t *load, int32_t *kept,
                      const int32_t *sel, int64_t N, int64_t k, int64_t E, int64_t capacity)
{
  (void)be;
  GT_CHECK_ROUTE(N, E, k);
  GT_CHECK(N <= INT32_MAX / k, GT_ERR_INTERNAL,
           "internal error: %s: N k = %lld x %lld pairs do not fit the int32 rows of pos",
           __func__, (long long)N, (long long)k);
  const size_t pairs = (size_t)N * (size_t)k;
  for (int64_t e = 0; e < E; e++)
    load[e] = 0;
  for (size_t i = 0; i < pairs; i++) {
    GT_CHECK(sel[i] >= 0 && sel[i] < E, GT_ERR_INTERNAL,
             "internal error: %s: sel[%zu] = %d is not an expert of 0..%lld", __func__, i,
             (int)sel[i], (long long)E - 1);
    load[sel[i]]++;
  }
  /* next[e]: expert e's next free row; end[e]: one past its last */
  int64_t *next = malloc(2 * (size_t)E * sizeof *next);
  GT_CHECK_ALLOC(next, 2 * (size_t)E * sizeof *next);
  int64_t *end = next + E, row = 0;
  for (int64_t e = 0; e < E; e++) {
    kept[e] = capacity < 0 || load[e] <= capacity ? load[e] : (int32_t)capacity;
    next[e] = row;
    row += kept[e];
    end[e] = row;
  }
  for (size_t i = 0; i < pairs; i++) {
    const int32_t e = sel[i];
    pos[i] = next[e] < end[e] ? (int32_t)next[e]++ : -1;
  }
  free(next);
  return GT_SUCCESS;
}

/* dp[e] of one row: aux_unit load[e], plus (dgate[j] - S) / Z for the
 * choice j of expert e. The k choices are looked up per expert (O(E k), as
 * the choice itself), so that no row of dp is stored. */
static inline double gt_route_dp(int64_t e, const int32_t *sn, const float *dg, int64_t k,
                                 double S, double Z, double aux)
{
  double dp = aux;
  for (int64_t j = 0; j < k; j++)
    if (sn[j] == e)
      dp += (dg[j] - S) / Z;
  return dp;
}

/* Row n of the router's backward, in double, each output rounded once:
 * D = sum_e probs[e] dp[e], dlogits[e] = probs[e] (dp[e] - D + zt). */
static void gt_route_backward_row(float *dlogits, const float *dgate, const float *probs,
                                  const float *lse, const int32_t *sel, const float *gate,
                                  const int32_t *load, int64_t n, int64_t E, int64_t k,
                                  double aux_unit, double z_unit)
{
  const float *p = probs + (size_t)n * (size_t)E;
  const int32_t *sn = sel + (size_t)n * (size_t)k;
  const float *dg = dgate + (size_t)n * (size_t)k, *g = gate + (size_t)n * (size_t)k;
  double Z = 0, S = 0;
  for (int64_t j = 0; j < k; j++) {
    Z += p[sn[j]];
    S += (double)dg[j] * g[j];
  }
  double D = 0;
  for (int64_t e = 0; e < E; e++)
    D += p[e] * gt_route_dp(e, sn, dg, k, S, Z, aux_unit * load[e]);
  const double zt = z_unit * lse[n];
  float *dl = dlogits + (size_t)n * (size_t)E;
  for (int64_t e = 0; e < E; e++)
    dl[e] = (float)(p[e] * (gt_route_dp(e, sn, dg, k, S, Z, aux_unit * load[e]) - D + zt));
}

int gt_cpu_moe_route_backward(gt_backend *be, float *dlogits, const float *dgate,
                              const float *probs, const float *lse, const int32_t *sel,
                              const float *gate, const int32_t *load, int64_t N, int64_t E,
                              int64_t k, float aux_scale, float z_scale)
{
  (void)be;
  GT_CHECK_ROUTE(N, E, k);
  if (N == 0)
    return GT_SUCCESS;
  /* d(aux_scale L_aux)/dprobs[n,e] = aux_unit load[e]; d(z_scale L_z)/dlse[n] = z_unit lse[n] */
  const double aux_unit = (double)aux_scale * (double)E / ((double)N * (double)N * (double)k);
  const double z_unit = 2.0 * (double)z_scale / (double)N;
#pragma omp parallel for schedule(static) if (N * E >= GT_MOE_PAR_ROUTER)
  for (int64_t n = 0; n < N; n++)
    gt_route_backward_row(dlogits, dgate, probs, lse, sel, gate, load, n, E, k, aux_unit,
                          z_unit);
  return GT_SUCCESS;
}

// ---- permutation into expert order and back ---------------------------------------------

/* Bit copies, no arithmetic: one code path for every dt. A row of xp is
 * named by one pair at most, so the tokens' threads never share one. */
int gt_cpu_moe_permute(gt_backend *be, gt_dtype dt, void *xp, const void *x, const int32_t *pos,
                       int64_t N, int64_t k, int64_t C)
{
  (void)be;
  GT_CHECK_TOKENS(dt, N, k, C);
  const size_t row = (size_t)C * gt_dtype_size(dt);
#pragma omp parallel for schedule(static) if (N * k * C >= GT_MOE_PAR_TOKENS)
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < k; j++) {
      const int32_t p = pos[(size_t)n * (size_t)k + (size_t)j];
      if (p >= 0)
        memcpy((char *)xp + (size_t)p * row, (const char *)x + (size_t)n * row, row);
    }
  return GT_SUCCESS;
}

/* Row n: dx + extra + dxp of the kept pairs in j order, one fp32 chain per
 * element, rounded once. A row with nothing to add keeps its bits. */
GT_INLINE void gt_permute_backward_row(gt_dtype dt, void *dx, const void *dxp, const float *extra,
                                       const int32_t *pos, int64_t n, int64_t k, int64_t C)
{
  const int32_t *pn = pos + (size_t)n * (size_t)k;
  bool any = extra != NULL;
  for (int64_t j = 0; j < k; j++)
    any = any || pn[j] >= 0;
  if (!any)
    return;
  float acc[GT_MOE_CHUNK];
  for (int64_t c0 = 0; c0 < C; c0 += GT_MOE_CHUNK) {
    const int64_t nc = gt_min64(GT_MOE_CHUNK, C - c0);
    void *d = gt_at(dt, dx, (size_t)n * (size_t)C + (size_t)c0);
    gt_to_f32(dt, acc, d, (size_t)nc);
    if (extra) {
      const float *e = extra + (size_t)n * (size_t)C + (size_t)c0;
#pragma omp simd
      for (int64_t c = 0; c < nc; c++)
        acc[c] += e[c];
    }
    for (int64_t j = 0; j < k; j++) {
      if (pn[j] < 0)
        continue;
      const void *g = gt_cat(dt, dxp, (size_t)pn[j] * (size_t)C + (size_t)c0);
#pragma omp simd
      for (int64_t c = 0; c < nc; c++)
        acc[c] += gt_load1(dt, g, (size_t)c);
    }
    gt_from_f32(dt, d, acc, (size_t)nc);
  }
}

int gt_cpu_moe_permute_backward(gt_backend *be, gt_dtype dt, void *dx, const void *dxp,
                                const float *extra, const int32_t *pos, int64_t N, int64_t k,
                                int64_t C)
{
  (void)be;
  GT_CHECK_TOKENS(dt, N, k, C);
#pragma omp parallel for schedule(static) if (N * k * C >= GT_MOE_PAR_TOKENS)
  for (int64_t n = 0; n < N; n++)
    GT_BY_DT(dt, gt_permute_backward_row, dx, dxp, extra, pos, n, k, C);
  return GT_SUCCESS;
}

// ---- combination into token order and back ----------------------------------------------

/* Row n: base (or 0) + gate y of the kept pairs in j order, one fp32 chain
 * per element, rounded once. A chunk of base is read before the same chunk
 * of out is written, so base may be out. */
GT_INLINE void gt_combine_row(gt_dtype dt, void *out, const void *base, const void *y,
                              const float *gate, const int32_t *pos, int64_t n, int64_t k,
                              int64_t C)
{
  const int32_t *pn = pos + (size_t)n * (size_t)k;
  const float *gn = gate + (size_t)n * (size_t)k;
  float acc[GT_MOE_CHUNK];
  for (int64_t c0 = 0; c0 < C; c0 += GT_MOE_CHUNK) {
    const int64_t nc = gt_min64(GT_MOE_CHUNK, C - c0);
    const size_t at = (size_t)n * (size_t)C + (size_t)c0;
    if (base)
      gt_to_f32(dt, acc, gt_cat(dt, base, at), (size_t)nc);
    else
      memset(acc, 0, sizeof(float) * (size_t)nc);
    for (int64_t j = 0; j < k; j++) {
      if (pn[j] < 0)
        continue;
      const float g = gn[j];
      const void *yr = gt_cat(dt, y, (size_t)pn[j] * (size_t)C + (size_t)c0);
#pragma omp simd
      for (int64_t c = 0; c < nc; c++)
        acc[c] += g * gt_load1(dt, yr, (size_t)c);
    }
    gt_from_f32(dt, gt_at(dt, out, at), acc, (size_t)nc);
  }
}

int gt_cpu_moe_combine(gt_backend *be, gt_dtype dt, void *out, const void *base, const void *y,
                       const float *gate, const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  (void)be;
  GT_CHECK_TOKENS(dt, N, k, C);
#pragma omp parallel for schedule(static) if (N * k * C >= GT_MOE_PAR_TOKENS)
  for (int64_t n = 0; n < N; n++)
    GT_BY_DT(dt, gt_combine_row, out, base, y, gate, pos, n, k, C);
  return GT_SUCCESS;
}

/* Row n's pairs: dgate = dout . y[pos] in double (exact products; the sum
 * split over SIMD lanes in an order fixed by the build), then dy[pos] =
 * gate dout. y's row is read before dy's is written, so dy may be y. */
GT_INLINE void gt_combine_backward_row(gt_dtype dt, void *dy, float *dgate, const void *dout,
                                       const void *y, const float *gate, const int32_t *pos,
                                       int64_t n, int64_t k, int64_t C)
{
  const void *d = gt_cat(dt, dout, (size_t)n * (size_t)C);
  for (int64_t j = 0; j < k; j++) {
    const size_t pair = (size_t)n * (size_t)k + (size_t)j;
    const int32_t p = pos[pair];
    if (p < 0) {
      dgate[pair] = 0.0f;
      continue;
    }
    const void *yr = gt_cat(dt, y, (size_t)p * (size_t)C);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++)
      s += (double)gt_load1(dt, d, (size_t)c) * gt_load1(dt, yr, (size_t)c);
    dgate[pair] = (float)s;
    const float g = gate[pair];
    void *o = gt_at(dt, dy, (size_t)p * (size_t)C);
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      gt_store1(dt, o, (size_t)c, g * gt_load1(dt, d, (size_t)c));
  }
}

int gt_cpu_moe_combine_backward(gt_backend *be, gt_dtype dt, void *dy, float *dgate,
                                const void *dout, const void *y, const float *gate,
                                const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  (void)be;
  GT_CHECK_TOKENS(dt, N, k, C);
#pragma omp parallel for schedule(static) if (N * k * C >= GT_MOE_PAR_TOKENS)
  for (int64_t n = 0; n < N; n++)
    GT_BY_DT(dt, gt_combine_backward_row, dy, dgate, dout, y, gate, pos, n, k, C);
  return GT_SUCCESS;
}
