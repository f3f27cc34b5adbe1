/*
 * cuda_attention.cu - the cuda backend's own causal self-attention (the
 * contract of backend.h), FlashAttention-2 style on fp32 FMA units: no
 * T x T matrix exists at any time, and no floating-point atomics are used.
 *
 * Shapes: qkv (B,T,H+2Hkv,hs) dt (H query heads, then Hkv key heads, then
 * Hkv value heads; query head h reads key/value head h / (H / Hkv)); out,
 * dout (B,T,H*hs) dt; lse and the scratch D (B,H,T) fp32. Blocks read
 * tiles of rows of one (batch, head) as dt, widen them to fp32 in shared
 * memory (row stride HS + 1, so that walks down a column hit distinct
 * banks; zero past T and past hs), compute in fp32 FMA, and round each
 * output to dt once.
 *
 * Forward, one block per (query tile of BR rows, batch x head): for the
 * key/value tiles of BC rows up to the one holding the block's last row,
 * S = scale Q K^T (masked to -inf where key > query or key >= T), online
 * softmax per row (running max m, sum l, accumulator O rescaled by
 * e^(m_old - m_new)), O += P V; then out = O / l and lse = m + log l.
 * Backward: D = rowsum(dO o O); then, recomputing P = e^(S - lse),
 * dP = dO V^T and dS = P o (dP - D) scale tile by tile,
 *   one block per key tile:   dV = P^T dO, dK = dS^T Q over the query tiles
 *                             from the tile's first key to T (of every
 *                             query head of a key/value head's group);
 *   one block per query tile: dQ = dS K over the key tiles up to its last
 *                             row.
 * Every output element has one owner thread that sums in ascending key
 * (resp. query) order: the results repeat bit for bit. Scratch: D, 4 B H T
 * bytes (the op's one gt_cuda_scratch buffer).
 *
 * Threads: ATT_TX = 8 columns by TY rows. A thread owns RM = rows/TY
 * consecutive rows of the block's tile and the columns tx, tx + 8, ... of
 * the score tile and of the head dimension (accumulators in registers). A
 * row's 8 threads are 8 consecutive lanes of one warp: the softmax
 * reductions are shuffles, and each row of the P / dS tile in shared
 * memory is written and read by one warp (__syncwarp).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda_backend.h"
#include "cuda_launch.cuh"

#define ATT_TX 8       /* threads along a row (columns tx, tx + 8, ...) */
#define ATT_HS_MAX 256 /* largest head size */

// ---- tile configurations -----------------------------------------------------------
/* By head-size bound HS (32, 64, 128, 256: the smallest >= hs). Static
 * shared memory stays under 48 KiB, so no opt-in is needed on any GPU:
 * forward 41.0, 40.8, 36.4, 33.2 KiB; dK/dV 33.3, 36.9, 33.4, 32.5 KiB; dQ
 * 33.0, 36.6, 33.3, 32.4 KiB. SHARE_KV: K and V take turns in one buffer. */
template <int HS> struct att_fwd_cfg;
template <> struct att_fwd_cfg<32> {
  static constexpr int BR = 64, BC = 64, TY = 16;
  static constexpr bool SHARE_KV = false;
};
template <> struct att_fwd_cfg<64> {
  static constexpr int BR = 64, BC = 32, TY = 16;
  static constexpr bool SHARE_KV = false;
};
template <> struct att_fwd_cfg<128> {
  static constexpr int BR = 32, BC = 32, TY = 16;
  static constexpr bool SHARE_KV = true;
};
template <> struct att_fwd_cfg<256> {
  static constexpr int BR = 16, BC = 16, TY = 16;
  static constexpr bool SHARE_KV = true;
};

/* Backward: BA rows owned by a block (keys in the dK/dV kernel, queries in
 * the dQ kernel), BB rows per tile of the other side. */
template <int HS> struct att_bwd_cfg;
template <> struct att_bwd_cfg<32> { static constexpr int BA = 64, BB = 32, TY = 16; };
template <> struct att_bwd_cfg<64> { static constexpr int BA = 32, BB = 32, TY = 16; };
template <> struct att_bwd_cfg<128> { static constexpr int BA = 16, BB = 16, TY = 8; };
template <> struct att_bwd_cfg<256> { static constexpr int BA = 8, BB = 8, TY = 8; };

/* What every kernel needs to know of the problem. */
struct att_dims {
  int64_t T, H, BH;  /* tokens, query heads, B * H */
  int64_t Hkv, BHkv; /* key/value heads, B * Hkv */
  int64_t group;     /* query heads per key/value head: H / Hkv */
  int64_t C, C3;     /* row strides (elements) of out / dout and of qkv */
  int64_t ntiles;   /* tiles of the rows a block owns, per (batch, head) */
  int hs, hs4;      /* head size, rounded up to a multiple of 4 */
  float scale;      /* 1 / sqrt(hs) */
};

// ---- device helpers ----------------------------------------------------------------

static __device__ __forceinline__ float att_ld(const float *p) { return *p; }
static __device__ __forceinline__ float att_ld(const __nv_bfloat16 *p)
{
  return __bfloat162float(*p);
}
static __device__ __forceinline__ float att_ld(const __half *p) { return __half2float(*p); }

static __device__ __forceinline__ void att_st(float *p, float v) { *p = v; }
static __device__ __forceinline__ void att_st(__nv_bfloat16 *p, float v)
{
  *p = __float2bfloat16_rn(v);
}
static __device__ __forceinline__ void att_st(__half *p, float v) { *p = __float2half_rn(v); }

/* Row 0 of batch b's query head h and of key/value head j's keys and
 * values in qkv (row stride C3). */
template <typename T>
static __device__ __forceinline__ const T *att_q(const T *qkv, const att_dims &a, int64_t b,
                                                 int64_t h)
{
  return qkv + b * a.T * a.C3 + h * a.hs;
}
template <typename T>
static __device__ __forceinline__ const T *att_k(const T *qkv, const att_dims &a, int64_t b,
                                                 int64_t j)
{
  return qkv + b * a.T * a.C3 + (a.H + j) * a.hs;
}
template <typename T>
static __device__ __forceinline__ const T *att_v(const T *qkv, const att_dims &a, int64_t b,
                                                 int64_t j)
{
  return qkv + b * a.T * a.C3 + (a.H + a.Hkv + j) * a.hs;
}

/* Max and sum over the 8 lanes of a row (xor butterfly: every lane gets the
 * same bits). */
static __device__ __forceinline__ float att_row_max(float v)
{
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
}

static __device__ __forceinline__ float att_row_sum(float v)
{
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v + __shfl_xor_sync(0xffffffffu, v, 1);
}

/* dst (R x HS fp32, row stride HS + 1) = rows [0, n) of src (n <= R, row
 * stride ld elements, hs elements used) widened; zero elsewhere. All NT
 * threads of the block take part; consecutive threads read consecutive
 * elements of a row. */
template <typename T, int HS, int R, int NT>
static __device__ __forceinline__ void att_load_tile(float *dst, const T *src, int64_t ld,
                                                     int n, int hs)
{
  static_assert((R * HS) % NT == 0, "a tile is a whole number of block-wide steps");
#pragma unroll 4
  for (int it = 0; it < R * HS / NT; it++) {
    const int e = it * NT + (int)threadIdx.x;
    const int r = e / HS, d = e % HS;
    float v = 0.0f;
    if (r < n && d < hs)
      v = att_ld(src + (int64_t)r * ld + d);
    dst[r * (HS + 1) + d] = v;
  }
}

/* acc[i][j] += sum_{d < n} a[i lda + d] b[j ldb + d], d ascending; n a
 * multiple of 4. (A tile of A B^T: rows i of a, rows j of b.) */
template <int M, int N>
static __device__ __forceinline__ void att_tile_abt(float (&acc)[M][N], const float *a,
                                                    int lda, const float *b, int ldb, int n)
{
  for (int d0 = 0; d0 < n; d0 += 4) {
#pragma unroll
    for (int dd = 0; dd < 4; dd++) {
      float av[M], bv[N];
#pragma unroll
      for (int i = 0; i < M; i++)
        av[i] = a[i * lda + d0 + dd];
#pragma unroll
      for (int j = 0; j < N; j++)
        bv[j] = b[j * ldb + d0 + dd];
#pragma unroll
      for (int i = 0; i < M; i++)
#pragma unroll
        for (int j = 0; j < N; j++)
          acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
}

/* acc[i][k] += sum_{c < K} p[i ldp + c] b[c ldb + k ATT_TX], c ascending.
 * (A tile of P B: rows i of p; b already offset by the thread's column.) */
template <int M, int N, int K>
static __device__ __forceinline__ void att_tile_ab(float (&acc)[M][N], const float *p, int ldp,
                                                   const float *b, int ldb)
{
#pragma unroll 4
  for (int c = 0; c < K; c++) {
    float pv[M], bv[N];
#pragma unroll
    for (int i = 0; i < M; i++)
      pv[i] = p[i * ldp + c];
#pragma unroll
    for (int k = 0; k < N; k++)
      bv[k] = b[c * ldb + k * ATT_TX];
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
      for (int k = 0; k < N; k++)
        acc[i][k] = fmaf(pv[i], bv[k], acc[i][k]);
  }
}

// ---- forward -----------------------------------------------------------------------

/* out (B,T,H*hs) dt, lse (B,H,T) fp32 from qkv (B,T,H+2Hkv,hs) dt. Block x:
 * query tile ntiles - 1 - x / BH (the longest first), batch x head x % BH;
 * NT = 8 TY threads. */
template <typename T, int HS>
static __global__ void __launch_bounds__(ATT_TX * att_fwd_cfg<HS>::TY)
    att_fwd_kernel(T *__restrict__ out, float *__restrict__ lse, const T *__restrict__ qkv,
                   att_dims a)
{
  using cfg = att_fwd_cfg<HS>;
  constexpr int BR = cfg::BR, BC = cfg::BC, TY = cfg::TY, NT = ATT_TX * TY;
  constexpr int RM = BR / TY, CN = BC / ATT_TX, OC = HS / ATT_TX;
  constexpr int LDS = HS + 1, LDP = BC + 1;
  static_assert(RM * TY == BR && CN * ATT_TX == BC && OC * ATT_TX == HS, "tile shapes");
  static_assert(NT % 32 == 0, "whole warps");
  __shared__ float qs[BR * LDS];
  __shared__ float ks[BC * LDS];
  __shared__ float vs_own[cfg::SHARE_KV ? 1 : BC * LDS];
  __shared__ float ps[BR * LDP];
  float *vs = cfg::SHARE_KV ? ks : vs_own;

  const int tid = (int)threadIdx.x, tx = tid % ATT_TX, ty = tid / ATT_TX;
  const int64_t blk = blockIdx.x, bh = blk % a.BH, b = bh / a.H, h = bh % a.H;
  const int64_t q0 = (a.ntiles - 1 - blk / a.BH) * BR;
  const int64_t qend = q0 + BR < a.T ? q0 + BR : a.T;
  const T *qb = att_q(qkv, a, b, h), *kb = att_k(qkv, a, b, h / a.group);
  const T *vb = att_v(qkv, a, b, h / a.group);
  att_load_tile<T, HS, BR, NT>(qs, qb + q0 * a.C3, a.C3, (int)(qend - q0), a.hs);

  float o[RM][OC] = {}, m[RM], l[RM];
#pragma unroll
  for (int i = 0; i < RM; i++) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  for (int64_t k0 = 0; k0 < qend; k0 += BC) {
    const int nk = (int)(a.T - k0 < BC ? a.T - k0 : BC);
    att_load_tile<T, HS, BC, NT>(ks, kb + k0 * a.C3, a.C3, nk, a.hs);
    if (!cfg::SHARE_KV)
      att_load_tile<T, HS, BC, NT>(vs, vb + k0 * a.C3, a.C3, nk, a.hs);
    __syncthreads();

    float s[RM][CN] = {};
    att_tile_abt<RM, CN>(s, qs + ty * RM * LDS, LDS, ks + tx * LDS, ATT_TX * LDS, a.hs4);
    /* Online softmax. Key 0 is valid for every row, so m is finite from the
     * first tile on and a row with no valid key in a later tile gets
     * alpha = 1 and p = 0. */
#pragma unroll
    for (int i = 0; i < RM; i++) {
      const int64_t qr = q0 + ty * RM + i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < CN; j++) {
        const int64_t kc = k0 + tx + ATT_TX * j;
        const float v = kc <= qr && kc < a.T ? s[i][j] * a.scale : -INFINITY;
        s[i][j] = v;
        mx = fmaxf(mx, v);
      }
      const float mnew = fmaxf(m[i], att_row_max(mx));
      const float alpha = expf(m[i] - mnew);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < CN; j++) {
        const float p = expf(s[i][j] - mnew);
        s[i][j] = p;
        sum += p;
      }
      l[i] = l[i] * alpha + att_row_sum(sum);
      m[i] = mnew;
#pragma unroll
      for (int k = 0; k < OC; k++)
        o[i][k] *= alpha;
#pragma unroll
      for (int j = 0; j < CN; j++)
        ps[(ty * RM + i) * LDP + tx + ATT_TX * j] = s[i][j];
    }
    if (cfg::SHARE_KV) { /* every thread is done with K: V takes its place */
      __syncthreads();
      att_load_tile<T, HS, BC, NT>(vs, vb + k0 * a.C3, a.C3, nk, a.hs);
      __syncthreads();
    } else {
      __syncwarp(); /* this warp's rows of P */
    }
    att_tile_ab<RM, OC, BC>(o, ps + ty * RM * LDP, LDP, vs + tx, LDS);
    __syncthreads(); /* before the next tile overwrites K, V and P */
  }

#pragma unroll
  for (int i = 0; i < RM; i++) {
    const int64_t qr = q0 + ty * RM + i;
    if (qr >= a.T)
      continue;
    const float inv = 1.0f / l[i];
    T *orow = out + (b * a.T + qr) * a.C + h * a.hs;
#pragma unroll
    for (int k = 0; k < OC; k++) {
      const int d = tx + ATT_TX * k;
      if (d < a.hs)
        att_st(orow + d, o[i][k] * inv);
    }
    if (tx == 0)
      lse[bh * a.T + qr] = m[i] + logf(l[i]);
  }
}

// ---- backward ----------------------------------------------------------------------

/* D (B,H,T) fp32 = per row the sum over the head of dout (B,T,H*hs) times
 * out (B,T,H*hs), both dt: one warp per (token, head) row, grid-stride. */
template <typename T>
static __global__ void __launch_bounds__(256)
    att_bwd_d_kernel(float *__restrict__ D, const T *__restrict__ dout,
                     const T *__restrict__ out, att_dims a, int64_t nrows)
{
  const int lane = (int)(threadIdx.x % 32);
  const int64_t nwarps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; n < nrows;
       n += nwarps) {
    const T *dy = dout + n * a.hs, *y = out + n * a.hs; /* row n = (b T + t) H + h */
    float acc = 0.0f;
    for (int d = lane; d < a.hs; d += 32)
      acc = fmaf(att_ld(dy + d), att_ld(y + d), acc);
#pragma unroll
    for (int off = 16; off >= 1; off /= 2)
      acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
      const int64_t h = n % a.H, bt = n / a.H, t = bt % a.T, b = bt / a.T;
      D[(b * a.H + h) * a.T + t] = acc;
    }
  }
}

/* dK, dV of dqkv (B,T,H+2Hkv,hs) dt from dout (B,T,H*hs), qkv, lse and D
 * (B,H,T). Block x: key tile x / BHkv (the longest first), batch x
 * key/value head x % BHkv, whose query heads it takes in ascending order
 * (their sums go on in the same registers); NT = 8 TY threads. A thread
 * owns key rows ty RM + i and columns tx + 8 j (queries of the score tile)
 * / tx + 8 k (head dimension). */
template <typename T, int HS>
static __global__ void __launch_bounds__(ATT_TX * att_bwd_cfg<HS>::TY)
    att_bwd_kv_kernel(T *__restrict__ dqkv, const T *__restrict__ dout,
                      const T *__restrict__ qkv, const float *__restrict__ lse,
                      const float *__restrict__ D, att_dims a)
{
  using cfg = att_bwd_cfg<HS>;
  constexpr int BA = cfg::BA, BB = cfg::BB, TY = cfg::TY, NT = ATT_TX * TY;
  constexpr int RM = BA / TY, CN = BB / ATT_TX, OC = HS / ATT_TX;
  constexpr int LDS = HS + 1, LDP = BB + 1;
  static_assert(RM * TY == BA && CN * ATT_TX == BB && OC * ATT_TX == HS, "tile shapes");
  static_assert(NT % 32 == 0 && BB <= NT, "whole warps; one thread per row of lse and D");
  __shared__ float ks[BA * LDS], vs[BA * LDS];   /* this block's keys and values */
  __shared__ float qs[BB * LDS], dos[BB * LDS];  /* a tile of queries and of dout */
  __shared__ float pt[BA * LDP];                 /* P^T, then dS^T */
  __shared__ float lse_s[BB], d_s[BB];

  const int tid = (int)threadIdx.x, tx = tid % ATT_TX, ty = tid / ATT_TX;
  const int64_t blk = blockIdx.x, bkv = blk % a.BHkv, b = bkv / a.Hkv, kv = bkv % a.Hkv;
  const int64_t k0 = blk / a.BHkv * BA;
  const int nk = (int)(a.T - k0 < BA ? a.T - k0 : BA);
  att_load_tile<T, HS, BA, NT>(ks, att_k(qkv, a, b, kv) + k0 * a.C3, a.C3, nk, a.hs);
  att_load_tile<T, HS, BA, NT>(vs, att_v(qkv, a, b, kv) + k0 * a.C3, a.C3, nk, a.hs);

  float dk[RM][OC] = {}, dv[RM][OC] = {};
  /* the query tiles from k0 on (queries before k0 see none of these keys) of
   * each query head of the group in turn */
  const int64_t nqt = (a.T - k0 + BB - 1) / BB;
  for (int64_t u = 0; u < a.group * nqt; u++) {
    const int64_t h = kv * a.group + u / nqt, q0 = k0 + u % nqt * BB;
    const T *base = att_q(qkv, a, b, h);
    const T *dybase = dout + b * a.T * a.C + h * a.hs;
    const float *lse_h = lse + (b * a.H + h) * a.T, *d_h = D + (b * a.H + h) * a.T;
    const int nq = (int)(a.T - q0 < BB ? a.T - q0 : BB);
    att_load_tile<T, HS, BB, NT>(qs, base + q0 * a.C3, a.C3, nq, a.hs);
    att_load_tile<T, HS, BB, NT>(dos, dybase + q0 * a.C, a.C, nq, a.hs);
    if (tid < BB) {
      lse_s[tid] = tid < nq ? lse_h[q0 + tid] : 0.0f;
      d_s[tid] = tid < nq ? d_h[q0 + tid] : 0.0f;
    }
    __syncthreads();

    float s[RM][CN] = {}, dp[RM][CN] = {};
    att_tile_abt<RM, CN>(s, ks + ty * RM * LDS, LDS, qs + tx * LDS, ATT_TX * LDS, a.hs4);
    att_tile_abt<RM, CN>(dp, vs + ty * RM * LDS, LDS, dos + tx * LDS, ATT_TX * LDS, a.hs4);
#pragma unroll
    for (int i = 0; i < RM; i++) {
      const int64_t kc = k0 + ty * RM + i;
#pragma unroll
      for (int j = 0; j < CN; j++) {
        const int c = tx + ATT_TX * j;
        const bool valid = q0 + c >= kc && q0 + c < a.T;
        const float p = valid ? expf(s[i][j] * a.scale - lse_s[c]) : 0.0f;
        dp[i][j] = valid ? p * (dp[i][j] - d_s[c]) * a.scale : 0.0f;
        pt[(ty * RM + i) * LDP + c] = p;
      }
    }
    __syncwarp(); /* this warp's rows of P^T */
    att_tile_ab<RM, OC, BB>(dv, pt + ty * RM * LDP, LDP, dos + tx, LDS);
    __syncwarp(); /* read before overwritten */
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
      for (int j = 0; j < CN; j++)
        pt[(ty * RM + i) * LDP + tx + ATT_TX * j] = dp[i][j];
    __syncwarp();
    att_tile_ab<RM, OC, BB>(dk, pt + ty * RM * LDP, LDP, qs + tx, LDS);
    __syncthreads(); /* before the next tile overwrites Q, dO, lse and D */
  }

#pragma unroll
  for (int i = 0; i < RM; i++) {
    const int64_t kc = k0 + ty * RM + i;
    if (kc >= a.T)
      continue;
    T *row = dqkv + (b * a.T + kc) * a.C3 + (a.H + kv) * a.hs; /* key head kv's row */
#pragma unroll
    for (int k = 0; k < OC; k++) {
      const int d = tx + ATT_TX * k;
      if (d < a.hs) {
        att_st(row + d, dk[i][k]);
        att_st(row + a.Hkv * a.hs + d, dv[i][k]);
      }
    }
  }
}

/* dQ of dqkv (B,T,H+2Hkv,hs) dt from dout, qkv, lse and D. Block x: query
 * tile ntiles - 1 - x / BH (the longest first), batch x head x % BH;
 * NT = 8 TY threads. A thread owns query rows ty RM + i and columns
 * tx + 8 j (keys of the score tile) / tx + 8 k (head dimension). */
template <typename T, int HS>
static __global__ void __launch_bounds__(ATT_TX * att_bwd_cfg<HS>::TY)
    att_bwd_q_kernel(T *__restrict__ dqkv, const T *__restrict__ dout,
                     const T *__restrict__ qkv, const float *__restrict__ lse,
                     const float *__restrict__ D, att_dims a)
{
  using cfg = att_bwd_cfg<HS>;
  constexpr int BA = cfg::BA, BB = cfg::BB, TY = cfg::TY, NT = ATT_TX * TY;
  constexpr int RM = BA / TY, CN = BB / ATT_TX, OC = HS / ATT_TX;
  constexpr int LDS = HS + 1, LDP = BB + 1;
  static_assert(RM * TY == BA && CN * ATT_TX == BB && OC * ATT_TX == HS, "tile shapes");
  static_assert(NT % 32 == 0, "whole warps");
  __shared__ float qs[BA * LDS], dos[BA * LDS]; /* this block's queries and dout */
  __shared__ float ks[BB * LDS], vs[BB * LDS];  /* a tile of keys and of values */
  __shared__ float dss[BA * LDP];               /* dS */

  const int tid = (int)threadIdx.x, tx = tid % ATT_TX, ty = tid / ATT_TX;
  const int64_t blk = blockIdx.x, bh = blk % a.BH, b = bh / a.H, h = bh % a.H;
  const int64_t q0 = (a.ntiles - 1 - blk / a.BH) * BA;
  const int64_t qend = q0 + BA < a.T ? q0 + BA : a.T;
  const T *base = att_q(qkv, a, b, h), *kb = att_k(qkv, a, b, h / a.group);
  const T *vb = att_v(qkv, a, b, h / a.group);
  att_load_tile<T, HS, BA, NT>(qs, base + q0 * a.C3, a.C3, (int)(qend - q0), a.hs);
  att_load_tile<T, HS, BA, NT>(dos, dout + (b * a.T + q0) * a.C + h * a.hs, a.C,
                               (int)(qend - q0), a.hs);
  float lse_r[RM], d_r[RM];
#pragma unroll
  for (int i = 0; i < RM; i++) {
    const int64_t qr = q0 + ty * RM + i;
    lse_r[i] = qr < a.T ? lse[bh * a.T + qr] : 0.0f;
    d_r[i] = qr < a.T ? D[bh * a.T + qr] : 0.0f;
  }

  float dq[RM][OC] = {};
  for (int64_t k0 = 0; k0 < qend; k0 += BB) {
    const int nk = (int)(a.T - k0 < BB ? a.T - k0 : BB);
    att_load_tile<T, HS, BB, NT>(ks, kb + k0 * a.C3, a.C3, nk, a.hs);
    att_load_tile<T, HS, BB, NT>(vs, vb + k0 * a.C3, a.C3, nk, a.hs);
    __syncthreads();

    float s[RM][CN] = {}, dp[RM][CN] = {};
    att_tile_abt<RM, CN>(s, qs + ty * RM * LDS, LDS, ks + tx * LDS, ATT_TX * LDS, a.hs4);
    att_tile_abt<RM, CN>(dp, dos + ty * RM * LDS, LDS, vs + tx * LDS, ATT_TX * LDS, a.hs4);
#pragma unroll
    for (int i = 0; i < RM; i++) {
      const int64_t qr = q0 + ty * RM + i;
#pragma unroll
      for (int j = 0; j < CN; j++) {
        const int64_t kc = k0 + tx + ATT_TX * j;
        const bool valid = kc <= qr && qr < a.T;
        const float p = valid ? expf(s[i][j] * a.scale - lse_r[i]) : 0.0f;
        dss[(ty * RM + i) * LDP + tx + ATT_TX * j] =
            valid ? p * (dp[i][j] - d_r[i]) * a.scale : 0.0f;
      }
    }
    __syncwarp(); /* this warp's rows of dS */
    att_tile_ab<RM, OC, BB>(dq, dss + ty * RM * LDP, LDP, ks + tx, LDS);
    __syncthreads(); /* before the next tile overwrites K, V and dS */
  }

#pragma unroll
  for (int i = 0; i < RM; i++) {
    const int64_t qr = q0 + ty * RM + i;
    if (qr >= a.T)
      continue;
    T *row = dqkv + (b * a.T + qr) * a.C3 + h * a.hs;
#pragma unroll
    for (int k = 0; k < OC; k++) {
      const int d = tx + ATT_TX * k;
      if (d < a.hs)
        att_st(row + d, dq[i][k]);
    }
  }
}

// ---- launches ----------------------------------------------------------------------

static att_dims att_dims_of(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  att_dims a;
  a.T = T;
  a.H = H;
  a.BH = B * H;
  a.Hkv = Hkv;
  a.BHkv = B * Hkv;
  a.group = H / Hkv;
  a.C = H * hs;
  a.C3 = (H + 2 * Hkv) * hs;
  a.ntiles = 0;
  a.hs = (int)hs;
  a.hs4 = (int)((hs + 3) / 4 * 4);
  a.scale = 1.0f / sqrtf((float)hs);
  return a;
}

/* Blocks for tiles of `rows` rows of every (batch, head) of bh of them
 * (query heads B H, or key/value heads B Hkv): one grid of at most INT_MAX
 * blocks. */
static int att_grid(att_dims *a, int rows, int64_t bh, unsigned *blocks)
{
  a->ntiles = (a->T + rows - 1) / rows;
  const int64_t n = a->ntiles * bh;
  GT_CHECK(n <= INT_MAX, GT_ERR_INPUT,
           "attention: B*H*ceil(T/%d) = %lld thread blocks exceed the CUDA grid limit "
           "(%d); use a smaller batch or sequence",
           rows, (long long)n, INT_MAX);
  *blocks = (unsigned)n;
  return GT_SUCCESS;
}

template <typename T, int HS>
static int att_forward_hs(gt_backend *be, void *out, float *lse, const void *qkv, att_dims a)
{
  using cfg = att_fwd_cfg<HS>;
  unsigned blocks = 0;
  GT_CALL(att_grid(&a, cfg::BR, a.BH, &blocks));
  gt_cuda_launch(att_fwd_kernel<T, HS>, blocks, ATT_TX * cfg::TY, 0, gt_cuda_compute(be),
                 (T *)out, lse, (const T *)qkv, a);
  GT_CUDA_LAUNCHED("attention forward");
  return GT_SUCCESS;
}

template <typename T, int HS>
static int att_backward_hs(gt_backend *be, void *dqkv, const void *dout, const void *qkv,
                           const void *out, const float *lse, float *D, att_dims a)
{
  using cfg = att_bwd_cfg<HS>;
  cudaStream_t st = gt_cuda_compute(be);
  const int64_t nrows = a.BH * a.T; /* (token, head) rows */
  const int sms = gt_cuda_of(be)->sm_count > 0 ? gt_cuda_of(be)->sm_count : 128;
  const int64_t dblocks_all = (nrows + 7) / 8; /* 8 warps per block */
  const unsigned dblocks = (unsigned)(dblocks_all < 32LL * sms ? dblocks_all : 32LL * sms);
  gt_cuda_launch(att_bwd_d_kernel<T>, dblocks, 256, 0, st,
                 D, (const T *)dout, (const T *)out, a, nrows);
  GT_CUDA_LAUNCHED("attention backward D");
  unsigned blocks = 0;
  GT_CALL(att_grid(&a, cfg::BA, a.BHkv, &blocks));
  gt_cuda_launch(att_bwd_kv_kernel<T, HS>, blocks, ATT_TX * cfg::TY, 0, st,
                 (T *)dqkv, (const T *)dout, (const T *)qkv, lse, D, a);
  GT_CUDA_LAUNCHED("attention backward dK dV");
  GT_CALL(att_grid(&a, cfg::BA, a.BH, &blocks));
  gt_cuda_launch(att_bwd_q_kernel<T, HS>, blocks, ATT_TX * cfg::TY, 0, st,
                 (T *)dqkv, (const T *)dout, (const T *)qkv, lse, D, a);
  GT_CUDA_LAUNCHED("attention backward dQ");
  return GT_SUCCESS;
}

template <typename T>
static int att_forward_t(gt_backend *be, void *out, float *lse, const void *qkv, att_dims a)
{
  if (a.hs <= 32)
    return att_forward_hs<T, 32>(be, out, lse, qkv, a);
  if (a.hs <= 64)
    return att_forward_hs<T, 64>(be, out, lse, qkv, a);
  if (a.hs <= 128)
    return att_forward_hs<T, 128>(be, out, lse, qkv, a);
  return att_forward_hs<T, 256>(be, out, lse, qkv, a);
}

template <typename T>
static int att_backward_t(gt_backend *be, void *dqkv, const void *dout, const void *qkv,
                          const void *out, const float *lse, float *D, att_dims a)
{
  if (a.hs <= 32)
    return att_backward_hs<T, 32>(be, dqkv, dout, qkv, out, lse, D, a);
  if (a.hs <= 64)
    return att_backward_hs<T, 64>(be, dqkv, dout, qkv, out, lse, D, a);
  if (a.hs <= 128)
    return att_backward_hs<T, 128>(be, dqkv, dout, qkv, out, lse, D, a);
  return att_backward_hs<T, 256>(be, dqkv, dout, qkv, out, lse, D, a);
}

static int att_check(gt_dtype dt, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  GT_CHECK(dt == GT_F32 || dt == GT_BF16 || dt == GT_F16, GT_ERR_INPUT,
           "attention: compute type %s; expected fp32, bf16 or fp16", gt_dtype_name(dt));
  GT_CHECK(B >= 0 && T >= 0 && H >= 1 && hs >= 1 && Hkv >= 1 && H % Hkv == 0, GT_ERR_INPUT,
           "attention: shape B=%lld T=%lld H=%lld Hkv=%lld hs=%lld; expected B, T >= 0, H, "
           "hs >= 1 and H a multiple of Hkv >= 1",
           (long long)B, (long long)T, (long long)H, (long long)Hkv, (long long)hs);
  GT_CHECK(hs <= ATT_HS_MAX, GT_ERR_INPUT,
           "attention: head size %lld is larger than gridtrain's own CUDA attention kernels "
           "support (%d); choose more heads or a smaller width (hs = n_embd / n_head)",
           (long long)hs, ATT_HS_MAX);
  return GT_SUCCESS;
}

// ---- decoding: one query row over a key/value cache ----------------------------------
/* One block per query head h, reading key/value head h / (H / Hkv). qkv
 * (T,H+2Hkv,hs) of one sequence; the query is row
 * T-1. Scores go to s (H,T) fp32 scratch: each warp takes keys u = warp,
 * warp + DEC_WARPS, ... and sums the dot product over its lanes (a fixed
 * shuffle tree); then the block finds the maximum and the sum of the
 * exponentials (a fixed tree in shared memory), and thread i sums p_u v_u[i]
 * over u in ascending order. Every result has one owner and one order: the
 * bits repeat. */
#define DEC_THREADS 128
#define DEC_WARPS (DEC_THREADS / 32)

static __device__ __forceinline__ float dec_warp_sum(float v)
{
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* op over the block's DEC_THREADS values v (every thread gets the result). */
template <bool MAX> static __device__ float dec_block_reduce(float v, float *red)
{
  red[threadIdx.x] = v;
  __syncthreads();
  for (int n = DEC_THREADS / 2; n > 0; n >>= 1) {
    if ((int)threadIdx.x < n)
      red[threadIdx.x] = MAX ? fmaxf(red[threadIdx.x], red[threadIdx.x + n])
                             : red[threadIdx.x] + red[threadIdx.x + n];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

template <typename T>
__global__ void __launch_bounds__(DEC_THREADS)
    att_decode_kernel(T *out, const T *qkv, float *s, int64_t Tn, int64_t H, int64_t Hkv, int hs,
                      float scale)
{
  __shared__ float q[ATT_HS_MAX];
  __shared__ float red[DEC_THREADS];
  const int64_t h = blockIdx.x, C3 = (H + 2 * Hkv) * hs, j = h / (H / Hkv);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T *base = qkv + h * hs, *kb = qkv + (H + j) * hs, *vb = qkv + (H + Hkv + j) * hs;
  for (int i = threadIdx.x; i < hs; i += DEC_THREADS)
    q[i] = att_ld(base + (Tn - 1) * C3 + i);
  __syncthreads();
  float *sh = s + h * Tn;
  for (int64_t u = warp; u < Tn; u += DEC_WARPS) {
    const T *k = kb + u * C3;
    float d = 0.0f;
    for (int i = lane; i < hs; i += 32)
      d = fmaf(q[i], att_ld(k + i), d);
    d = dec_warp_sum(d);
    if (lane == 0)
      sh[u] = d * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int64_t u = threadIdx.x; u < Tn; u += DEC_THREADS)
    m = fmaxf(m, sh[u]);
  m = dec_block_reduce<true>(m, red);
  float z = 0.0f;
  for (int64_t u = threadIdx.x; u < Tn; u += DEC_THREADS) {
    const float e = __expf(sh[u] - m);
    sh[u] = e;
    z += e;
  }
  z = dec_block_reduce<false>(z, red); /* its __syncthreads orders the writes of sh */
  const float inv = 1.0f / z;
  for (int i = threadIdx.x; i < hs; i += DEC_THREADS) {
    float acc = 0.0f;
    const T *v = vb + i;
    for (int64_t u = 0; u < Tn; u++)
      acc = fmaf(sh[u], att_ld(v + u * C3), acc);
    att_st(out + h * hs + i, acc * inv);
  }
}

template <typename T>
static int att_decode_t(gt_backend *be, void *out, const void *qkv, float *s, int64_t Tn,
                        int64_t H, int64_t Hkv, int64_t hs)
{
  gt_cuda_launch(att_decode_kernel<T>, (unsigned)H, DEC_THREADS, 0, gt_cuda_compute(be),
                 (T *)out, (const T *)qkv, s, Tn, H, Hkv, (int)hs, 1.0f / sqrtf((float)hs));
  GT_CUDA_LAUNCHED("attention decode");
  return GT_SUCCESS;
}

// ---- entry points ------------------------------------------------------------------

extern "C" int gt_cuda_attention_forward_own(gt_backend *be, gt_dtype dt, void *out,
                                             float *lse, const void *qkv, int64_t B,
                                             int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  GT_CALL(att_check(dt, B, T, H, Hkv, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  const att_dims a = att_dims_of(B, T, H, Hkv, hs);
  switch (dt) {
  case GT_F32: GT_CALL(att_forward_t<float>(be, out, lse, qkv, a)); break;
  case GT_BF16: GT_CALL(att_forward_t<__nv_bfloat16>(be, out, lse, qkv, a)); break;
  default: GT_CALL(att_forward_t<__half>(be, out, lse, qkv, a)); break;
  }
  return GT_SUCCESS;
}

extern "C" int gt_cuda_attention_backward_own(gt_backend *be, gt_dtype dt, void *dqkv,
                                              const void *dout, const void *qkv,
                                              const void *out, const float *lse, int64_t B,
                                              int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  GT_CALL(att_check(dt, B, T, H, Hkv, hs));
  if (B == 0 || T == 0)
    return GT_SUCCESS;
  const att_dims a = att_dims_of(B, T, H, Hkv, hs);
  void *scratch = NULL; /* D (B,H,T) fp32: the one scratch buffer of this op */
  GT_CALL(gt_cuda_scratch(be, sizeof(float) * (size_t)(B * H * T), &scratch));
  float *D = (float *)scratch;
  switch (dt) {
  case GT_F32: GT_CALL(att_backward_t<float>(be, dqkv, dout, qkv, out, lse, D, a)); break;
  case GT_BF16:
    GT_CALL(att_backward_t<__nv_bfloat16>(be, dqkv, dout, qkv, out, lse, D, a));
    break;
  default: GT_CALL(att_backward_t<__half>(be, dqkv, dout, qkv, out, lse, D, a)); break;
  }
  return GT_SUCCESS;
}

extern "C" int gt_cuda_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv,
                                        int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  GT_CALL(att_check(dt, 1, T, H, Hkv, hs));
  GT_CHECK(T >= 1, GT_ERR_INPUT, "attention decode: T = %lld; expected at least 1 position",
           (long long)T);
  GT_CHECK(H <= INT_MAX, GT_ERR_INPUT, "attention decode: %lld heads is too many",
           (long long)H);
  void *scratch = NULL; /* the scores (H,T) fp32: the one scratch buffer of this op */
  GT_CALL(gt_cuda_scratch(be, sizeof(float) * (size_t)(H * T), &scratch));
  float *s = (float *)scratch;
  switch (dt) {
  case GT_F32: GT_CALL(att_decode_t<float>(be, out, qkv, s, T, H, Hkv, hs)); break;
  case GT_BF16: GT_CALL(att_decode_t<__nv_bfloat16>(be, out, qkv, s, T, H, Hkv, hs)); break;
  default: GT_CALL(att_decode_t<__half>(be, out, qkv, s, T, H, Hkv, hs)); break;
  }
  return GT_SUCCESS;
}
