/*
 * cuda_moe.cu - the mixture-of-experts ops of the "cuda" backend: routing,
 * assignment of (token, choice) pairs to expert rows, the permutation into
 * expert order and back, the gated combination and the router's backward.
 * Semantics (shapes, "=" and "+=", fp32 against dt, orders of summation) as
 * in the "mixture of experts" section of gridtrain/backend.h.
 *
 * Shapes: N tokens, E experts, k choices per token, P = N k pairs; logits,
 * probs, dlogits (N,E) fp32; sel, pos, gate, dgate (N,k) (pair q = n k + j);
 * load, kept (E) int32; x, dx, out, base (N,C) and xp, dxp, y, dy (R,C) dt
 * (R the rows of the expert-ordered buffer).
 *
 * Kernels:
 *   route, route_backward  one warp per token; E handled by a loop over
 *                          lanes, the row's reductions as fixed shuffle trees
 *   assign                 four steps over chunks of 256 pairs (below)
 *   permute                one block per pair: a bit copy of the row
 *   permute_backward,      one block per token row: the row's k pairs summed
 *   combine                in ascending j, in fp32, rounded once
 *   combine_backward       one block per pair: dy's row, and dgate as a block
 *                          reduction over C in a fixed tree
 *
 * Determinism: no floating-point atomics and no atomics at all. Every sum
 * has an order fixed by the shapes (the k pairs in ascending j; a row's
 * lanes, then a fixed tree). assign ranks pairs without any race: the
 * in-chunk rank of a pair counts the earlier pairs of its expert in the
 * chunk, and the chunks' counts are scanned per expert in chunk order.
 *
 * Precisions: the router ops read and write fp32 and compute in double
 * (below, at "routing": why), each output rounded once. Each dt kernel is
 * written once over its storage type T (float, __nv_bfloat16 or __half):
 * loads widen to fp32, the arithmetic is fp32, and each output is rounded
 * to T once (the element helpers of cuda_elem.cuh, as cuda_kernels.cu). Every entry queues its work on the
 * compute stream and returns.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda_backend.h"
#include "cuda_launch.cuh"
#include "cuda_elem.cuh"

namespace {

constexpr unsigned kRowThreads = 128;  /* a block per row or per pair */
constexpr int kChunk = 256;            /* assign: pairs per chunk = threads of the rank step */
constexpr unsigned kScanThreads = 256; /* assign: the scans over chunks and over experts */

// ---- reductions and scans (fixed trees) ------------------------------------------------------

/* Xor butterflies: every lane ends with the same bits (each step adds the
 * same two values in both partners, and + and max are commutative). */
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* The sum over the block (blockDim.x a multiple of 32), in every thread.
 * sh: 32 floats of shared memory; the leading barrier lets a block call
 * this again at once. */
__device__ __forceinline__ float block_sum(float v, float *sh)
{
  const unsigned lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0)
    sh[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < nwarps ? sh[lane] : 0.0f;
  return warp_sum(v);
}

/* The exclusive prefix sum of v over the block in thread order, and in
 * *total the block's sum (blockDim.x a multiple of 32). sh: 32 ints of
 * shared memory; the leading barrier lets a block call this again at once. */
__device__ __forceinline__ int block_scan_excl(int v, int *sh, int *total)
{
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  int inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, inc, o);
    if ((int)lane >= o)
      inc += u;
  }
  __syncthreads(); /* the previous call's readers of sh are done */
  if (lane == 31)
    sh[warp] = inc;
  __syncthreads();
  if (warp == 0) { /* the warps' totals, scanned in place by warp 0 */
    int w = lane < nwarps ? sh[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, w, o);
      if ((int)lane >= o)
        w += u;
    }
    if (lane < nwarps)
      sh[lane] = w;
  }
  __syncthreads();
  *total = sh[nwarps - 1];
  return (warp ? sh[warp - 1] : 0) + inc - v;
}

// ---- routing ------------------------------------------------------------------------------------
/* The softmax and the gates are computed in double and rounded to fp32 once,
 * as cpu-ref does: the top-k choice compares the fp32 probabilities, and a
 * near tie (two logits an ulp apart) must round the same way on both
 * backends, which an fp32 softmax (an error of a few ulps) would not. The
 * cost is E double exps per token, nothing beside the router's GEMM. */

/* The key of the routing order: NaN (a row whose logits overflowed) ranks
 * as -inf, so that the order stays total and a row still gets k distinct
 * experts (p != p: NaN, without a math header that differs between nvcc
 * and the emulator's host C++). */
__device__ __forceinline__ float route_key(float p) { return p != p ? -INFINITY : p; }

/* (p, i) comes before (q, j) in the routing order: larger probability
 * first, ties to the lower expert index. */
__device__ __forceinline__ bool route_before(float p, int i, float q, int j)
{
  const float a = route_key(p), b = route_key(q);
  return a > b || (a == b && i < j);
}

__device__ __forceinline__ double warp_sum_d(double v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* probs (N,E), lse (N), sel, gate (N,k) "=" from logits (N,E); a warp per
 * token (grid-stride over tokens), lane l owning experts l, l + 32, ... */
__global__ void __launch_bounds__(kThreads)
    route_kernel(float *probs, float *lse, int32_t *sel, float *gate, const float *logits,
                 int64_t N, int64_t E, int64_t k)
{
  const int lane = (int)(threadIdx.x & 31);
  const int64_t wpb = blockDim.x >> 5, stride = (int64_t)gridDim.x * wpb;
  for (int64_t n = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); n < N; n += stride) {
    const float *l = logits + n * E;
    float *p = probs + n * E;
    float m = -INFINITY;
    for (int64_t e = lane; e < E; e += 32)
      m = fmaxf(m, l[e]);
    m = warp_max(m);
    double s = 0.0;
    for (int64_t e = lane; e < E; e += 32)
      s += exp((double)l[e] - m);
    s = warp_sum_d(s);
    for (int64_t e = lane; e < E; e += 32)
      p[e] = (float)(exp((double)l[e] - m) / s);
    if (lane == 0)
      lse[n] = (float)(m + log(s));
    /* top-k: pass j takes the first expert in the routing order after the
     * one pass j-1 took, so nothing taken needs remembering. A lane reads
     * back only the probabilities it wrote itself. */
    float prev_p = INFINITY;
    int prev_i = -1;
    double z = 0.0;
    for (int64_t j = 0; j < k; j++) {
      float bp = -INFINITY;
      int bi = -1; /* none yet */
      for (int64_t e = lane; e < E; e += 32) {
        const float pe = p[e];
        if ((j == 0 || route_before(prev_p, prev_i, pe, (int)e)) &&
            (bi < 0 || route_before(pe, (int)e, bp, bi))) {
          bp = pe;
          bi = (int)e;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float op = __shfl_xor_sync(0xffffffffu, bp, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || route_before(op, oi, bp, bi))) {
          bp = op;
          bi = oi;
        }
      }
      prev_p = bp;
      prev_i = bi;
      z += (double)bp; /* every lane alike, in ascending j */
      if (j % 32 == lane) {
        sel[n * k + j] = bi;
        gate[n * k + j] = bp; /* divided by z below, by this same lane */
      }
    }
    for (int64_t j = lane; j < k; j += 32)
      gate[n * k + j] = (float)((double)gate[n * k + j] / z);
  }
}

/* dlogits (N,E) "=" (backend.h), in double, each output rounded once; a
 * warp per token. aux = aux_scale E / (N^2 k) and zs = 2 z_scale / N. With
 * S = sum_i dgate gate and Z = sum_i probs[sel_i] (ascending i, every lane
 * alike): dp[e] = aux load[e] (+ (dgate[j] - S) / Z where sel[j] = e),
 * D = sum_e probs dp (the lanes' sums, then a fixed tree), and
 * dlogits[e] = probs[e] (dp[e] - D + zs lse). */
__device__ __forceinline__ double route_dp(int64_t e, const int32_t *sn, const float *dg,
                                           int64_t k, double S, double Z, double aux_e)
{
  double dp = aux_e;
  for (int64_t j = 0; j < k; j++)
    if (sn[j] == e)
      dp += ((double)dg[j] - S) / Z;
  return dp;
}

__global__ void __launch_bounds__(kThreads)
    route_backward_kernel(float *dlogits, const float *dgate, const float *probs,
                          const float *lse, const int32_t *sel, const float *gate,
                          const int32_t *load, int64_t N, int64_t E, int64_t k, double aux,
                          double zs)
{
  const int lane = (int)(threadIdx.x & 31);
  const int64_t wpb = blockDim.x >> 5, stride = (int64_t)gridDim.x * wpb;
  for (int64_t n = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); n < N; n += stride) {
    const float *p = probs + n * E;
    const int32_t *sn = sel + n * k;
    const float *dg = dgate + n * k, *g = gate + n * k;
    double Z = 0.0, S = 0.0;
    for (int64_t i = 0; i < k; i++) {
      const int32_t e = sn[i];
      Z += (e >= 0 && e < E) ? (double)p[e] : 0.0;
      S += (double)dg[i] * g[i];
    }
    double D = 0.0;
    for (int64_t e = lane; e < E; e += 32)
      D += (double)p[e] * route_dp(e, sn, dg, k, S, Z, aux * load[e]);
    D = warp_sum_d(D);
    const double zt = zs * lse[n];
    float *d = dlogits + n * E;
    for (int64_t e = lane; e < E; e += 32)
      d[e] = (float)((double)p[e] * (route_dp(e, sn, dg, k, S, Z, aux * load[e]) - D + zt));
  }
}

// ---- assignment -----------------------------------------------------------------------------
/* Pairs in chunks of kChunk (chunk c holds pairs [c kChunk, (c+1) kChunk)):
 *   1. rank:    per chunk, each pair's rank among the earlier pairs of its
 *               expert in the chunk ("=" into pos, for now), and count[e][c]
 *               "=" the chunk's pairs of expert e (written by its last pair;
 *               count was zeroed before);
 *   2. scan:    per expert, count[e][c] becomes the exclusive prefix over
 *               chunks in chunk order; load[e] "=" the total;
 *   3. offsets: one block: kept "=" load capped, off "=" the exclusive
 *               prefix of kept over experts;
 *   4. pos:     per pair, its rank in its expert r = count[e][c] + the
 *               in-chunk rank; pos "=" off[e] + r when r < kept[e], else -1.
 * A sel outside [0, E) (routing of NaN logits) counts for no expert and
 * gets pos -1. */

__device__ __forceinline__ int32_t expert_of(const int32_t *sel, int64_t p, int64_t P, int64_t E)
{
  const int32_t e = p < P ? sel[p] : -1;
  return e >= 0 && e < E ? e : -1;
}

__global__ void __launch_bounds__(kChunk)
    assign_rank_kernel(int32_t *rank, int32_t *count, const int32_t *sel, int64_t P,
                       int64_t nch, int64_t E)
{
  __shared__ int32_t sh[kChunk];
  const int t = (int)threadIdx.x;
  for (int64_t c = blockIdx.x; c < nch; c += gridDim.x) {
    const int64_t p = c * kChunk + t;
    const int32_t e = expert_of(sel, p, P, E);
    __syncthreads(); /* the previous chunk's readers of sh are done */
    sh[t] = e;
    __syncthreads();
    if (e >= 0) {
      int before = 0;
      bool last = true;
      for (int i = 0; i < kChunk; i++)
        if (sh[i] == e) {
          before += i < t;
          last = last && i <= t;
        }
      rank[p] = before;
      if (last)
        count[e * nch + c] = before + 1;
    }
  }
}

__global__ void __launch_bounds__(kScanThreads)
    assign_scan_kernel(int32_t *count, int32_t *load, int64_t nch, int64_t E)
{
  __shared__ int sh[32];
  for (int64_t e = blockIdx.x; e < E; e += gridDim.x) {
    int32_t *ce = count + e * nch;
    int carry = 0;
    for (int64_t c0 = 0; c0 < nch; c0 += blockDim.x) {
      const int64_t c = c0 + threadIdx.x;
      int total;
      const int ex = block_scan_excl(c < nch ? ce[c] : 0, sh, &total);
      if (c < nch)
        ce[c] = carry + ex;
      carry += total;
    }
    if (threadIdx.x == 0)
      load[e] = carry;
  }
}

__global__ void __launch_bounds__(kScanThreads)
    assign_offsets_kernel(int32_t *kept, int32_t *off, const int32_t *load, int64_t E,
                          int64_t capacity)
{
  __shared__ int sh[32];
  int carry = 0;
  for (int64_t e0 = 0; e0 < E; e0 += blockDim.x) {
    const int64_t e = e0 + threadIdx.x;
    int kp = 0;
    if (e < E)
      kp = capacity < 0 || load[e] <= capacity ? load[e] : (int)capacity;
    int total;
    const int ex = block_scan_excl(kp, sh, &total);
    if (e < E) {
      kept[e] = kp;
      off[e] = carry + ex;
    }
    carry += total;
  }
}

__global__ void assign_pos_kernel(int32_t *pos, const int32_t *sel, const int32_t *count,
                                  const int32_t *kept, const int32_t *off, int64_t P,
                                  int64_t nch, int64_t E)
{
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < P; p += stride) {
    const int32_t e = expert_of(sel, p, P, E);
    if (e < 0) {
      pos[p] = -1;
      continue;
    }
    const int32_t r = count[e * nch + p / kChunk] + pos[p];
    pos[p] = r < kept[e] ? off[e] + r : -1;
  }
}

// ---- permutation ------------------------------------------------------------------------------

/* xp[pos[q]] "=" x[q / k] for every kept pair q, as bit copies in units U
 * (a Pack of 16, 8 or 4 bytes, or 2 bytes), `units` of them a row. A block
 * per pair; a dropped pair's block does nothing. */
template <typename U>
__global__ void __launch_bounds__(kRowThreads)
    permute_kernel(U *xp, const U *x, const int32_t *pos, int64_t P, int64_t k, int64_t units)
{
  for (int64_t q = blockIdx.x; q < P; q += gridDim.x) {
    const int32_t r = pos[q];
    if (r < 0)
      continue;
    const U *src = x + (q / k) * units;
    U *dst = xp + (int64_t)r * units;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x)
      dst[u] = src[u];
  }
}

template <typename U>
int permute_launch(cudaStream_t st, void *xp, const void *x, const int32_t *pos, int64_t P,
                   int64_t k, int64_t row_bytes)
{
  gt_cuda_launch(permute_kernel<U>, grid_for((uint64_t)P, 1, kMaxRowBlocks), kRowThreads, 0, st,
                 static_cast<U *>(xp), static_cast<const U *>(x), pos, P, k,
                 row_bytes / (int64_t)sizeof(U));
  GT_CUDA_LAUNCHED("moe_permute");
  return GT_SUCCESS;
}

/* The widest unit that divides the row and both addresses. */
int permute_any(cudaStream_t st, void *xp, const void *x, const int32_t *pos, int64_t P,
                int64_t k, int64_t row_bytes)
{
  const uintptr_t a = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(x) |
                      (uintptr_t)row_bytes;
  if (a % 16 == 0)
    return permute_launch<Pack<uint32_t, 4>>(st, xp, x, pos, P, k, row_bytes);
  if (a % 8 == 0)
    return permute_launch<Pack<uint32_t, 2>>(st, xp, x, pos, P, k, row_bytes);
  if (a % 4 == 0)
    return permute_launch<uint32_t>(st, xp, x, pos, P, k, row_bytes);
  return permute_launch<uint16_t>(st, xp, x, pos, P, k, row_bytes);
}

/* dx (N,C) "+=" (extra) + the kept pairs' rows of dxp in ascending j, in
 * fp32, rounded once; a block per row, packs of W along it (C % W == 0). */
template <typename T, int W>
__global__ void __launch_bounds__(kRowThreads)
    permute_backward_kernel(T *dx, const T *dxp, const float *extra, const int32_t *pos,
                            int64_t N, int64_t k, int64_t C)
{
  const int64_t np = C / W;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t *pn = pos + n * k;
    for (int64_t pk = threadIdx.x; pk < np; pk += blockDim.x) {
      const int64_t o = pk * W;
      float acc[W];
      load_pack<T, W>(dx + n * C + o, acc);
      if (extra) {
        float f[W];
        load_pack<float, W>(extra + n * C + o, f);
#pragma unroll
        for (int i = 0; i < W; i++)
          acc[i] += f[i];
      }
      for (int64_t j = 0; j < k; j++) {
        const int32_t r = pn[j];
        if (r < 0)
          continue;
        float f[W];
        load_pack<T, W>(dxp + (int64_t)r * C + o, f);
#pragma unroll
        for (int i = 0; i < W; i++)
          acc[i] += f[i];
      }
      store_pack<T, W>(dx + n * C + o, acc);
    }
  }
}

template <typename T>
int permute_backward_t(cudaStream_t st, void *dx_, const void *dxp_, const float *extra,
                       const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  constexpr int W = kVec<T>;
  T *dx = static_cast<T *>(dx_);
  const T *dxp = static_cast<const T *>(dxp_);
  const unsigned grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (C % W == 0 && pack_aligned<T, W>(dx) && pack_aligned<T, W>(dxp) &&
      pack_aligned<float, W>(extra))
    gt_cuda_launch(permute_backward_kernel<T, W>, grid, kRowThreads, 0, st,
                   dx, dxp, extra, pos, N, k, C);
  else
    gt_cuda_launch(permute_backward_kernel<T, 1>, grid, kRowThreads, 0, st,
                   dx, dxp, extra, pos, N, k, C);
  GT_CUDA_LAUNCHED("moe_permute_backward");
  return GT_SUCCESS;
}

// ---- combination --------------------------------------------------------------------------------

/* out (N,C) "=" base (or 0) + the kept pairs' gate * y rows in ascending j,
 * in fp32, rounded once; a block per row, packs of W. base may be out: each
 * element is read by the thread that writes it, before it writes. */
template <typename T, int W>
__global__ void __launch_bounds__(kRowThreads)
    combine_kernel(T *out, const T *base, const T *y, const float *gate, const int32_t *pos,
                   int64_t N, int64_t k, int64_t C)
{
  const int64_t np = C / W;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int32_t *pn = pos + n * k;
    const float *gn = gate + n * k;
    for (int64_t pk = threadIdx.x; pk < np; pk += blockDim.x) {
      const int64_t o = pk * W;
      float acc[W];
      if (base) {
        load_pack<T, W>(base + n * C + o, acc);
      } else {
#pragma unroll
        for (int i = 0; i < W; i++)
          acc[i] = 0.0f;
      }
      for (int64_t j = 0; j < k; j++) {
        const int32_t r = pn[j];
        if (r < 0)
          continue;
        const float g = gn[j];
        float f[W];
        load_pack<T, W>(y + (int64_t)r * C + o, f);
#pragma unroll
        for (int i = 0; i < W; i++)
          acc[i] += g * f[i];
      }
      store_pack<T, W>(out + n * C + o, acc);
    }
  }
}

template <typename T>
int combine_t(cudaStream_t st, void *out_, const void *base_, const void *y_, const float *gate,
              const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  constexpr int W = kVec<T>;
  T *out = static_cast<T *>(out_);
  const T *base = static_cast<const T *>(base_), *y = static_cast<const T *>(y_);
  const unsigned grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (C % W == 0 && pack_aligned<T, W>(out) && pack_aligned<T, W>(base) &&
      pack_aligned<T, W>(y))
    gt_cuda_launch(combine_kernel<T, W>, grid, kRowThreads, 0, st,
                   out, base, y, gate, pos, N, k, C);
  else
    gt_cuda_launch(combine_kernel<T, 1>, grid, kRowThreads, 0, st,
                   out, base, y, gate, pos, N, k, C);
  GT_CUDA_LAUNCHED("moe_combine");
  return GT_SUCCESS;
}

/* For every pair q = n k + j: when kept, dy[pos[q]] "=" gate[q] dout[n]
 * (rounded once) and dgate[q] "=" the dot product of dout[n] and
 * y[pos[q]] (each thread's packs in order, then the block's fixed tree);
 * dgate[q] "=" 0 when dropped. A block per pair, packs of W. */
template <typename T, int W>
__global__ void __launch_bounds__(kRowThreads)
    combine_backward_kernel(T *dy, float *dgate, const T *dout, const T *y, const float *gate,
                            const int32_t *pos, int64_t P, int64_t k, int64_t C)
{
  __shared__ float sh[32];
  const int64_t np = C / W;
  for (int64_t q = blockIdx.x; q < P; q += gridDim.x) {
    const int32_t r = pos[q]; /* the same in the whole block: the branch is uniform */
    if (r < 0) {
      if (threadIdx.x == 0)
        dgate[q] = 0.0f;
      continue;
    }
    const float g = gate[q];
    const T *dn = dout + (q / k) * C;
    const T *yr = y + (int64_t)r * C;
    T *dr = dy + (int64_t)r * C;
    float dot = 0.0f;
    for (int64_t pk = threadIdx.x; pk < np; pk += blockDim.x) {
      const int64_t o = pk * W;
      float d[W], f[W], gd[W];
      load_pack<T, W>(dn + o, d);
      load_pack<T, W>(yr + o, f);
#pragma unroll
      for (int i = 0; i < W; i++) {
        dot += d[i] * f[i];
        gd[i] = g * d[i];
      }
      store_pack<T, W>(dr + o, gd);
    }
    dot = block_sum(dot, sh);
    if (threadIdx.x == 0)
      dgate[q] = dot;
  }
}

template <typename T>
int combine_backward_t(cudaStream_t st, void *dy_, float *dgate, const void *dout_,
                       const void *y_, const float *gate, const int32_t *pos, int64_t N,
                       int64_t k, int64_t C)
{
  constexpr int W = kVec<T>;
  T *dy = static_cast<T *>(dy_);
  const T *dout = static_cast<const T *>(dout_), *y = static_cast<const T *>(y_);
  const int64_t P = N * k;
  const unsigned grid = grid_for((uint64_t)P, 1, kMaxRowBlocks);
  if (C % W == 0 && pack_aligned<T, W>(dy) && pack_aligned<T, W>(dout) &&
      pack_aligned<T, W>(y))
    gt_cuda_launch(combine_backward_kernel<T, W>, grid, kRowThreads, 0, st,
                   dy, dgate, dout, y, gate, pos, P, k, C);
  else
    gt_cuda_launch(combine_backward_kernel<T, 1>, grid, kRowThreads, 0, st,
                   dy, dgate, dout, y, gate, pos, P, k, C);
  GT_CUDA_LAUNCHED("moe_combine_backward");
  return GT_SUCCESS;
}

} // namespace

// ---- entries (C linkage, declared in cuda_backend.h) -------------------------------------------

/* The routing shapes: sel and pos index with int32. */
static int moe_route_ok(int64_t N, int64_t E, int64_t k, const char *op)
{
  GT_CHECK(N >= 0 && k >= 1 && E >= k && E <= INT32_MAX && N <= INT32_MAX / k, GT_ERR_INTERNAL,
           "internal error: %s: N = %lld tokens, E = %lld experts, k = %lld: need 1 <= k <= E "
           "and N k and E within int32",
           op, (long long)N, (long long)E, (long long)k);
  return GT_SUCCESS;
}

/* The token ops' shapes, and dt. */
static int moe_tokens_ok(gt_dtype dt, int64_t N, int64_t k, int64_t C, const char *op)
{
  GT_CHECK(dt == GT_F32 || dt == GT_BF16 || dt == GT_F16, GT_ERR_INTERNAL,
           "internal error: %s: element type %s is not fp32, bf16 or fp16", op,
           gt_dtype_name(dt));
  GT_CHECK(N >= 0 && k >= 1 && C >= 0 && N <= INT32_MAX / k, GT_ERR_INTERNAL,
           "internal error: %s: N = %lld tokens, k = %lld, C = %lld: need N >= 0, k >= 1, "
           "C >= 0 and N k within int32",
           op, (long long)N, (long long)k, (long long)C);
  return GT_SUCCESS;
}

extern "C" int gt_cuda_moe_route(gt_backend *be, float *probs, float *lse, int32_t *sel,
                                 float *gate, const float *logits, int64_t N, int64_t E,
                                 int64_t k)
{
  GT_CALL(moe_route_ok(N, E, k, "moe_route"));
  if (N == 0)
    return GT_SUCCESS;
  const unsigned warps = kThreads / 32;
  gt_cuda_launch(route_kernel, grid_for((uint64_t)N, warps, kMaxBlocks), kThreads, 0,
                 gt_cuda_compute(be), probs, lse, sel, gate, logits, N, E, k);
  GT_CUDA_LAUNCHED("moe_route");
  return GT_SUCCESS;
}

extern "C" int gt_cuda_moe_assign(gt_backend *be, int32_t *pos, int32_t *load, int32_t *kept,
                                  const int32_t *sel, int64_t N, int64_t k, int64_t E,
                                  int64_t capacity)
{
  GT_CALL(moe_route_ok(N, E, k, "moe_assign"));
  cudaStream_t st = gt_cuda_compute(be);
  const int64_t P = N * k, nch = (P + kChunk - 1) / kChunk;
  /* scratch: off (E), then count (E, nch), each 256-byte aligned */
  const size_t off_bytes = align_up((size_t)E * sizeof(int32_t), 256);
  const size_t count_bytes = (size_t)E * (size_t)nch * sizeof(int32_t);
  void *scratch = NULL;
  GT_CALL(gt_cuda_scratch(be, 256 + off_bytes + count_bytes, &scratch));
  char *base = reinterpret_cast<char *>(align_up(reinterpret_cast<uintptr_t>(scratch), 256));
  int32_t *off = reinterpret_cast<int32_t *>(base);
  int32_t *count = reinterpret_cast<int32_t *>(base + off_bytes);
  if (nch > 0) {
    /* a chunk writes only the counts of the experts it holds */
    GT_CALL_CUDA(cudaMemsetAsync(count, 0, count_bytes, st));
    gt_cuda_launch(assign_rank_kernel, grid_for((uint64_t)nch, 1, kMaxBlocks), kChunk, 0, st,
                   pos, count, sel, P, nch, E);
    GT_CUDA_LAUNCHED("moe_assign ranks");
  }
  gt_cuda_launch(assign_scan_kernel, grid_for((uint64_t)E, 1, kMaxBlocks), kScanThreads, 0, st,
                 count, load, nch, E);
  GT_CUDA_LAUNCHED("moe_assign loads");
  gt_cuda_launch(assign_offsets_kernel, 1, kScanThreads, 0, st, kept, off, load, E, capacity);
  GT_CUDA_LAUNCHED("moe_assign offsets");
  if (P > 0) {
    gt_cuda_launch(assign_pos_kernel, grid_for((uint64_t)P, kThreads, kMaxBlocks), kThreads, 0,
                   st, pos, sel, count, kept, off, P, nch, E);
    GT_CUDA_LAUNCHED("moe_assign positions");
  }
  return GT_SUCCESS;
}

extern "C" int gt_cuda_moe_permute(gt_backend *be, gt_dtype dt, void *xp, const void *x,
                                   const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  GT_CALL(moe_tokens_ok(dt, N, k, C, "moe_permute"));
  if (N == 0 || C == 0)
    return GT_SUCCESS;
  return permute_any(gt_cuda_compute(be), xp, x, pos, N * k, k,
                     C * (int64_t)gt_dtype_size(dt));
}

extern "C" int gt_cuda_moe_permute_backward(gt_backend *be, gt_dtype dt, void *dx,
                                            const void *dxp, const float *extra,
                                            const int32_t *pos, int64_t N, int64_t k, int64_t C)
{
  GT_CALL(moe_tokens_ok(dt, N, k, C, "moe_permute_backward"));
  if (N == 0 || C == 0)
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, permute_backward_t, gt_cuda_compute(be), dx, dxp, extra, pos, N, k, C);
}

extern "C" int gt_cuda_moe_combine(gt_backend *be, gt_dtype dt, void *out, const void *base,
                                   const void *y, const float *gate, const int32_t *pos,
                                   int64_t N, int64_t k, int64_t C)
{
  GT_CALL(moe_tokens_ok(dt, N, k, C, "moe_combine"));
  if (N == 0 || C == 0)
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, combine_t, gt_cuda_compute(be), out, base, y, gate, pos, N, k, C);
}

extern "C" int gt_cuda_moe_combine_backward(gt_backend *be, gt_dtype dt, void *dy,
                                            float *dgate, const void *dout, const void *y,
                                            const float *gate, const int32_t *pos, int64_t N,
                                            int64_t k, int64_t C)
{
  GT_CALL(moe_tokens_ok(dt, N, k, C, "moe_combine_backward"));
  if (N == 0)
    return GT_SUCCESS;
  /* C = 0 still writes dgate (0 for every pair: an empty dot product) */
  GT_CUDA_BY_DT(dt, combine_backward_t, gt_cuda_compute(be), dy, dgate, dout, y, gate, pos, N, k,
               C);
}

extern "C" int gt_cuda_moe_route_backward(gt_backend *be, float *dlogits, const float *dgate,
                                          const float *probs, const float *lse,
                                          const int32_t *sel, const float *gate,
                                          const int32_t *load, int64_t N, int64_t E, int64_t k,
                                          float aux_scale, float z_scale)
{
  GT_CALL(moe_route_ok(N, E, k, "moe_route_backward"));
  if (N == 0)
    return GT_SUCCESS;
  const double dn = (double)N;
  const double aux = (double)aux_scale * (double)E / (dn * dn * (double)k);
  const double zs = 2.0 * (double)z_scale / dn;
  const unsigned warps = kThreads / 32;
  gt_cuda_launch(route_backward_kernel, grid_for((uint64_t)N, warps, kMaxBlocks), kThreads, 0,
                 gt_cuda_compute(be), dlogits, dgate, probs, lse, sel, gate, load, N, E, k, aux,
                 zs);
  GT_CUDA_LAUNCHED("moe_route_backward");
  return GT_SUCCESS;
}
