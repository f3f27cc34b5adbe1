/*
 * cuda_kernels.cu - the CUDA kernels of the "cuda" backend other than the
 * GEMMs and attention: cast, LayerNorm, GELU, RMSNorm, rotary positions
 * (RoPE), SwiGLU, embedding, cross-entropy, AdamW and the sum /
 * sum-of-squares reductions. Semantics (shapes, "=" and
 * "+=", aliasing) as in gridtrain/backend.h; math and rounding points as in
 * src/backend/cpu/cpu_ref.c.
 *
 * Precisions: each kernel is written once over its storage type T (float,
 * __nv_bfloat16 or __half). Loads widen to fp32, the arithmetic is fp32
 * (double where the reference's totals need it), and each output is rounded
 * to T once, to nearest even (fp16 overflow gives inf). Kernels move 16
 * bytes per access where every pointer (and the row width) allows it, and
 * run a scalar instantiation otherwise.
 *
 * Determinism: no floating-point atomics. Each reduction has a partition
 * fixed by the shapes alone (never by the SM count or timing) and a fixed
 * order: LayerNorm's dw/db, RMSNorm's dw and the sums go through
 * per-block partials in scratch and a second kernel; embedding backward
 * sorts (token, position) pairs with CUB's stable radix sort and sums each
 * token's rows in position order. Every entry queues its work on the compute stream and returns.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include <cub/cub.cuh>

#include "cuda_backend.h"
#include "cuda_launch.cuh"
#include "cuda_elem.cuh"

namespace {

constexpr float kLnEps = 1e-5f;
constexpr float kGeluK = 0.7978845608028654f; /* sqrt(2/pi) */
constexpr float kGeluA = 0.044715f;

// ---- reductions (fixed trees: the same inputs give the same bits) ------------------------

template <typename V> __device__ __forceinline__ V warp_sum(V v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* The sum over the block (blockDim.x a multiple of 32), in every thread. sh:
 * 32 elements of shared memory; the leading barrier lets a block call this
 * again at once. */
template <typename V> __device__ __forceinline__ V block_sum(V v, V *sh)
{
  const unsigned lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0)
    sh[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < nwarps ? sh[lane] : V(0);
  return warp_sum(v);
}

/* Sum over a row's group of G threads: a warp (G = 32) or the block. */
template <int G> __device__ __forceinline__ float group_sum(float v, float *sh)
{
  if constexpr (G == 32)
    return warp_sum(v);
  else
    return block_sum(v, sh);
}

// ---- cast ----------------------------------------------------------------------------------

/* dst (n, D) = src (n, S): packs of W, then the n % W tail. */
template <typename D, typename S, int W>
__global__ void cast_kernel(D *dst, const S *src, size_t n)
{
  const size_t np = n / W;
  for (size_t i = thread_index(); i < np; i += thread_count()) {
    float f[W];
    load_pack<S, W>(src + i * W, f);
    store_pack<D, W>(dst + i * W, f);
  }
  const size_t t = np * W + thread_index();
  if (t < n)
    dst[t] = from_f32<D>(to_f32(src[t]));
}

template <typename D, typename S>
int cast_t(cudaStream_t st, void *dst_, const void *src_, size_t n)
{
  constexpr int W = 8;
  D *dst = static_cast<D *>(dst_);
  const S *src = static_cast<const S *>(src_);
  if (pack_aligned<D, W>(dst) && pack_aligned<S, W>(src))
    gt_cuda_launch(cast_kernel<D, S, W>, grid_for(n / W, kThreads, kMaxBlocks), kThreads, 0, st,
                   dst, src, n);
  else
    gt_cuda_launch(cast_kernel<D, S, 1>, grid_for(n, kThreads, kMaxBlocks), kThreads, 0, st,
                   dst, src, n);
  GT_CUDA_LAUNCHED("cast");
  return GT_SUCCESS;
}

template <typename D>
int cast_from(cudaStream_t st, void *dst, gt_dtype src_t, const void *src, size_t n)
{
  switch (src_t) {
  case GT_F32: return cast_t<D, float>(st, dst, src, n);
  case GT_BF16: return cast_t<D, __nv_bfloat16>(st, dst, src, n);
  case GT_F16: return cast_t<D, __half>(st, dst, src, n);
  default: return GT_CUDA_BAD_DT(src_t);
  }
}

// ---- LayerNorm -------------------------------------------------------------------------------

constexpr unsigned kLnThreads = 256;
constexpr int64_t kLnWarpMaxC = 4096;  /* a warp per row up to this width, else a block */
constexpr int kLnColTile = 32;         /* dw/db partials: columns per block */
constexpr int kLnRowLanes = 8;         /* ... and rows in flight per block */
constexpr int64_t kLnChunkRows = 256;  /* rows per chunk (until there are kLnMaxChunks) */
constexpr int64_t kLnMaxChunks = 1024;
constexpr int kLnFinishLanes = 16;     /* chunk lanes of the dw/db finishing kernel */

/* out, in (N,C) dt; w, b (C) dt; mean, rstd (N) fp32. A group of G threads
 * per row (a warp, or the block); packs of W along the row (C % W == 0). */
template <typename T, int W, int G>
__global__ void __launch_bounds__(kLnThreads)
    ln_forward_kernel(T *out, float *mean, float *rstd, const T *in, const T *w, const T *b,
                      int64_t N, int64_t C)
{
  __shared__ float sh[32];
  constexpr int rows_per_block = (int)kLnThreads / G;
  const int lane = (int)(threadIdx.x % G);
  const int64_t np = C / W, stride = (int64_t)gridDim.x * rows_per_block;
  for (int64_t row = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / G; row < N;
       row += stride) {
    const T *x = in + row * C;
    T *y = out + row * C;
    float s = 0.0f;
    for (int64_t p = lane; p < np; p += G) {
      float f[W];
      load_pack<T, W>(x + p * W, f);
#pragma unroll
      for (int k = 0; k < W; k++)
        s += f[k];
    }
    const float m = group_sum<G>(s, sh) / (float)C;
    float v = 0.0f;
    for (int64_t p = lane; p < np; p += G) {
      float f[W];
      load_pack<T, W>(x + p * W, f);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const float d = f[k] - m;
        v += d * d;
      }
    }
    const float r = 1.0f / sqrtf(group_sum<G>(v, sh) / (float)C + kLnEps);
    for (int64_t p = lane; p < np; p += G) {
      float f[W], wf[W], bf[W], o[W];
      load_pack<T, W>(x + p * W, f);
      load_pack<T, W>(w + p * W, wf);
      load_pack<T, W>(b + p * W, bf);
#pragma unroll
      for (int k = 0; k < W; k++)
        o[k] = (f[k] - m) * r * wf[k] + bf[k];
      store_pack<T, W>(y + p * W, o);
    }
    if (lane == 0) {
      mean[row] = m;
      rstd[row] = r;
    }
  }
}

/* din (N,C) dt "+=" the input gradient, rounded once; din may alias dout
 * (each element is read by the thread that writes it, before it writes). */
template <typename T, int W, int G>
__global__ void __launch_bounds__(kLnThreads)
    ln_backward_din_kernel(T *din, const T *dout, const T *in, const T *w, const float *mean,
                           const float *rstd, int64_t N, int64_t C)
{
  __shared__ float sh[32];
  constexpr int rows_per_block = (int)kLnThreads / G;
  const int lane = (int)(threadIdx.x % G);
  const int64_t np = C / W, stride = (int64_t)gridDim.x * rows_per_block;
  for (int64_t row = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / G; row < N;
       row += stride) {
    const int64_t o = row * C;
    const float m = mean[row], r = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t p = lane; p < np; p += G) {
      float dy[W], x[W], wf[W];
      load_pack<T, W>(dout + o + p * W, dy);
      load_pack<T, W>(in + o + p * W, x);
      load_pack<T, W>(w + p * W, wf);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const float dxhat = dy[k] * wf[k];
        s1 += dxhat;
        s2 += dxhat * ((x[k] - m) * r);
      }
    }
    const float mean_dxhat = group_sum<G>(s1, sh) / (float)C;
    const float mean_dxhat_xhat = group_sum<G>(s2, sh) / (float)C;
    for (int64_t p = lane; p < np; p += G) {
      float dy[W], x[W], wf[W], d[W];
      load_pack<T, W>(dout + o + p * W, dy);
      load_pack<T, W>(in + o + p * W, x);
      load_pack<T, W>(w + p * W, wf);
      load_pack<T, W>(din + o + p * W, d);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const float xhat = (x[k] - m) * r;
        d[k] += r * (dy[k] * wf[k] - mean_dxhat - xhat * mean_dxhat_xhat);
      }
      store_pack<T, W>(din + o + p * W, d);
    }
  }
}

/* Partial dw, db of one chunk of rows: block (kLnColTile, kLnRowLanes) owns
 * columns [32 bx, 32 bx + 32) of rows [by rows, (by + 1) rows); pw, pb
 * (nchunks, C) fp32 "=". */
template <typename T>
__global__ void __launch_bounds__(kLnColTile * kLnRowLanes)
    ln_backward_dwdb_partial(float *pw, float *pb, const T *dout, const T *in,
                             const float *mean, const float *rstd, int64_t N, int64_t C,
                             int64_t rows)
{
  __shared__ float sw[kLnRowLanes][kLnColTile + 1], sb[kLnRowLanes][kLnColTile + 1];
  const int64_t c = (int64_t)blockIdx.x * kLnColTile + threadIdx.x;
  const int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
  float aw = 0.0f, ab = 0.0f;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kLnRowLanes) {
      const float dy = to_f32(dout[r * C + c]);
      aw += dy * ((to_f32(in[r * C + c]) - mean[r]) * rstd[r]);
      ab += dy;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.0f, tb = 0.0f;
    for (int j = 0; j < kLnRowLanes; j++) {
      tw += sw[j][threadIdx.x];
      tb += sb[j][threadIdx.x];
    }
    pw[(int64_t)blockIdx.y * C + c] = tw;
    pb[(int64_t)blockIdx.y * C + c] = tb;
  }
}

/* dw, db (C) "+=" the sums over chunks of pw, pb (nchunks, C), in double in
 * a fixed order; block (kLnColTile, kLnFinishLanes) per 32 columns. */
__global__ void __launch_bounds__(kLnColTile * kLnFinishLanes)
    ln_backward_dwdb_finish(float *dw, float *db, const float *pw, const float *pb,
                            int64_t nchunks, int64_t C)
{
  __shared__ double sw[kLnFinishLanes][kLnColTile + 1], sb[kLnFinishLanes][kLnColTile + 1];
  const int64_t c = (int64_t)blockIdx.x * kLnColTile + threadIdx.x;
  double aw = 0.0, ab = 0.0;
  if (c < C)
    for (int64_t k = threadIdx.y; k < nchunks; k += kLnFinishLanes) {
      aw += pw[k * C + c];
      ab += pb[k * C + c];
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double tw = 0.0, tb = 0.0;
    for (int j = 0; j < kLnFinishLanes; j++) {
      tw += sw[j][threadIdx.x];
      tb += sb[j][threadIdx.x];
    }
    dw[c] += (float)tw;
    db[c] += (float)tb;
  }
}

template <typename T>
int ln_forward_t(cudaStream_t st, void *out_, float *mean, float *rstd, const void *in_,
                 const void *w_, const void *b_, int64_t N, int64_t C)
{
  constexpr int W = kVec<T>;
  T *out = static_cast<T *>(out_);
  const T *in = static_cast<const T *>(in_), *w = static_cast<const T *>(w_),
          *b = static_cast<const T *>(b_);
  const bool vec = C % W == 0 && pack_aligned<T, W>(out) && pack_aligned<T, W>(in) &&
                   pack_aligned<T, W>(w) && pack_aligned<T, W>(b);
  const unsigned warp_grid = grid_for((uint64_t)N, kLnThreads / 32, kMaxRowBlocks);
  const unsigned block_grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (C <= kLnWarpMaxC) {
    if (vec)
      gt_cuda_launch(ln_forward_kernel<T, W, 32>, warp_grid, kLnThreads, 0, st,
                     out, mean, rstd, in, w, b, N, C);
    else
      gt_cuda_launch(ln_forward_kernel<T, 1, 32>, warp_grid, kLnThreads, 0, st,
                     out, mean, rstd, in, w, b, N, C);
  } else {
    if (vec)
      gt_cuda_launch(ln_forward_kernel<T, W, (int)kLnThreads>, block_grid, kLnThreads, 0, st,
                     out, mean, rstd, in, w, b, N, C);
    else
      gt_cuda_launch(ln_forward_kernel<T, 1, (int)kLnThreads>, block_grid, kLnThreads, 0, st,
                     out, mean, rstd, in, w, b, N, C);
  }
  GT_CUDA_LAUNCHED("layernorm_forward");
  return GT_SUCCESS;
}

/* dw/db from dout first (partials, then their sums), din last: din may
 * alias dout, and stream order puts every read of dout by the dw/db
 * kernels before din's writes. */
template <typename T>
int ln_backward_t(gt_backend *be, void *din_, float *dw, float *db, const void *dout_,
                  const void *in_, const void *w_, const float *mean, const float *rstd,
                  int64_t N, int64_t C)
{
  cudaStream_t st = gt_cuda_compute(be);
  constexpr int W = kVec<T>;
  T *din = static_cast<T *>(din_);
  const T *dout = static_cast<const T *>(dout_), *in = static_cast<const T *>(in_),
          *w = static_cast<const T *>(w_);

  int64_t nchunks = (N + kLnChunkRows - 1) / kLnChunkRows;
  nchunks = nchunks > kLnMaxChunks ? kLnMaxChunks : nchunks;
  const int64_t rows = (N + nchunks - 1) / nchunks;
  nchunks = (N + rows - 1) / rows;
  const size_t part = align_up((size_t)nchunks * (size_t)C * sizeof(float), 256);
  void *scratch = NULL;
  GT_CALL(gt_cuda_scratch(be, 2 * part, &scratch));
  float *pw = static_cast<float *>(scratch);
  float *pb = reinterpret_cast<float *>(static_cast<char *>(scratch) + part);

  const uint64_t tiles = ((uint64_t)C + kLnColTile - 1) / kLnColTile;
  GT_CHECK(tiles <= INT_MAX, GT_ERR_INPUT, "layernorm: C = %lld is too wide", (long long)C);
  gt_cuda_launch(ln_backward_dwdb_partial<T>,
                 dim3((unsigned)tiles, (unsigned)nchunks), dim3(kLnColTile, kLnRowLanes), 0, st,
                 pw, pb, dout, in, mean, rstd, N, C, rows);
  GT_CUDA_LAUNCHED("layernorm_backward dw/db partials");
  gt_cuda_launch(ln_backward_dwdb_finish, (unsigned)tiles, dim3(kLnColTile, kLnFinishLanes), 0, st,
                 dw, db, pw, pb, nchunks, C);
  GT_CUDA_LAUNCHED("layernorm_backward dw/db");

  const bool vec = C % W == 0 && pack_aligned<T, W>(din) && pack_aligned<T, W>(dout) &&
                   pack_aligned<T, W>(in) && pack_aligned<T, W>(w);
  const unsigned warp_grid = grid_for((uint64_t)N, kLnThreads / 32, kMaxRowBlocks);
  const unsigned block_grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (C <= kLnWarpMaxC) {
    if (vec)
      gt_cuda_launch(ln_backward_din_kernel<T, W, 32>, warp_grid, kLnThreads, 0, st,
                     din, dout, in, w, mean, rstd, N, C);
    else
      gt_cuda_launch(ln_backward_din_kernel<T, 1, 32>, warp_grid, kLnThreads, 0, st,
                     din, dout, in, w, mean, rstd, N, C);
  } else {
    if (vec)
      gt_cuda_launch(ln_backward_din_kernel<T, W, (int)kLnThreads>, block_grid, kLnThreads, 0, st,
                     din, dout, in, w, mean, rstd, N, C);
    else
      gt_cuda_launch(ln_backward_din_kernel<T, 1, (int)kLnThreads>, block_grid, kLnThreads, 0, st,
                     din, dout, in, w, mean, rstd, N, C);
  }
  GT_CUDA_LAUNCHED("layernorm_backward din");
  return GT_SUCCESS;
}

// ---- GELU (tanh approximation) ---------------------------------------------------------------

__device__ __forceinline__ float gelu(float x)
{
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x)
{
  const float t = tanhf(kGeluK * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
}

/* out (n) = gelu(in (n)). */
template <typename T, int W> __global__ void gelu_forward_kernel(T *out, const T *in, size_t n)
{
  const size_t np = n / W;
  for (size_t i = thread_index(); i < np; i += thread_count()) {
    float f[W];
    load_pack<T, W>(in + i * W, f);
#pragma unroll
    for (int k = 0; k < W; k++)
      f[k] = gelu(f[k]);
    store_pack<T, W>(out + i * W, f);
  }
  const size_t t = np * W + thread_index();
  if (t < n)
    out[t] = from_f32<T>(gelu(to_f32(in[t])));
}

/* din (n) = gelu'(in) dout; din may alias dout (element by element). */
template <typename T, int W>
__global__ void gelu_backward_kernel(T *din, const T *in, const T *dout, size_t n)
{
  const size_t np = n / W;
  for (size_t i = thread_index(); i < np; i += thread_count()) {
    float x[W], d[W];
    load_pack<T, W>(in + i * W, x);
    load_pack<T, W>(dout + i * W, d);
#pragma unroll
    for (int k = 0; k < W; k++)
      d[k] *= gelu_grad(x[k]);
    store_pack<T, W>(din + i * W, d);
  }
  const size_t t = np * W + thread_index();
  if (t < n)
    din[t] = from_f32<T>(gelu_grad(to_f32(in[t])) * to_f32(dout[t]));
}

template <typename T> int gelu_forward_t(cudaStream_t st, void *out_, const void *in_, size_t n)
{
  constexpr int W = kVec<T>;
  T *out = static_cast<T *>(out_);
  const T *in = static_cast<const T *>(in_);
  if (pack_aligned<T, W>(out) && pack_aligned<T, W>(in))
    gt_cuda_launch(gelu_forward_kernel<T, W>,
                   grid_for(n / W, kThreads, kMaxBlocks), kThreads, 0, st,
                   out, in, n);
  else
    gt_cuda_launch(gelu_forward_kernel<T, 1>, grid_for(n, kThreads, kMaxBlocks), kThreads, 0, st,
                   out, in, n);
  GT_CUDA_LAUNCHED("gelu_forward");
  return GT_SUCCESS;
}

template <typename T>
int gelu_backward_t(cudaStream_t st, void *din_, const void *in_, const void *dout_, size_t n)
{
  constexpr int W = kVec<T>;
  T *din = static_cast<T *>(din_);
  const T *in = static_cast<const T *>(in_), *dout = static_cast<const T *>(dout_);
  if (pack_aligned<T, W>(din) && pack_aligned<T, W>(in) && pack_aligned<T, W>(dout))
    gt_cuda_launch(gelu_backward_kernel<T, W>,
                   grid_for(n / W, kThreads, kMaxBlocks), kThreads, 0, st,
                   din, in, dout, n);
  else
    gt_cuda_launch(gelu_backward_kernel<T, 1>, grid_for(n, kThreads, kMaxBlocks), kThreads, 0, st,
                   din, in, dout, n);
  GT_CUDA_LAUNCHED("gelu_backward");
  return GT_SUCCESS;
}

// ---- RMSNorm --------------------------------------------------------------------------------

/* out, in (N,C) dt; w (C) dt; rstd (N) fp32. A group of G threads per row
 * (a warp, or the block); packs of W along the row (C % W == 0). */
template <typename T, int W, int G>
__global__ void __launch_bounds__(kLnThreads)
    rms_forward_kernel(T *out, float *rstd, const T *in, const T *w, float eps, int64_t N,
                       int64_t C)
{
  __shared__ float sh[32];
  constexpr int rows_per_block = (int)kLnThreads / G;
  const int lane = (int)(threadIdx.x % G);
  const int64_t np = C / W, stride = (int64_t)gridDim.x * rows_per_block;
  for (int64_t row = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / G; row < N;
       row += stride) {
    const T *x = in + row * C;
    T *y = out + row * C;
    float s = 0.0f;
    for (int64_t p = lane; p < np; p += G) {
      float f[W];
      load_pack<T, W>(x + p * W, f);
#pragma unroll
      for (int k = 0; k < W; k++)
        s += f[k] * f[k];
    }
    const float r = 1.0f / sqrtf(group_sum<G>(s, sh) / (float)C + eps);
    for (int64_t p = lane; p < np; p += G) {
      float f[W], wf[W], o[W];
      load_pack<T, W>(x + p * W, f);
      load_pack<T, W>(w + p * W, wf);
#pragma unroll
      for (int k = 0; k < W; k++)
        o[k] = f[k] * r * wf[k];
      store_pack<T, W>(y + p * W, o);
    }
    if (lane == 0)
      rstd[row] = r;
  }
}

/* din (N,C) dt "+=" the input gradient, rounded once; din may alias dout
 * (each element is read by the thread that writes it, before it writes). */
template <typename T, int W, int G>
__global__ void __launch_bounds__(kLnThreads)
    rms_backward_din_kernel(T *din, const T *dout, const T *in, const T *w, const float *rstd,
                            int64_t N, int64_t C)
{
  __shared__ float sh[32];
  constexpr int rows_per_block = (int)kLnThreads / G;
  const int lane = (int)(threadIdx.x % G);
  const int64_t np = C / W, stride = (int64_t)gridDim.x * rows_per_block;
  for (int64_t row = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / G; row < N;
       row += stride) {
    const int64_t o = row * C;
    const float r = rstd[row];
    float s = 0.0f;
    for (int64_t p = lane; p < np; p += G) {
      float dy[W], x[W], wf[W];
      load_pack<T, W>(dout + o + p * W, dy);
      load_pack<T, W>(in + o + p * W, x);
      load_pack<T, W>(w + p * W, wf);
#pragma unroll
      for (int k = 0; k < W; k++)
        s += dy[k] * wf[k] * (x[k] * r);
    }
    const float mean_gx = group_sum<G>(s, sh) / (float)C;
    for (int64_t p = lane; p < np; p += G) {
      float dy[W], x[W], wf[W], d[W];
      load_pack<T, W>(dout + o + p * W, dy);
      load_pack<T, W>(in + o + p * W, x);
      load_pack<T, W>(w + p * W, wf);
      load_pack<T, W>(din + o + p * W, d);
#pragma unroll
      for (int k = 0; k < W; k++)
        d[k] += r * (dy[k] * wf[k] - (x[k] * r) * mean_gx);
      store_pack<T, W>(din + o + p * W, d);
    }
  }
}

/* Partial dw of one chunk of rows, as ln_backward_dwdb_partial: pw
 * (nchunks, C) fp32 "=". */
template <typename T>
__global__ void __launch_bounds__(kLnColTile * kLnRowLanes)
    rms_backward_dw_partial(float *pw, const T *dout, const T *in, const float *rstd, int64_t N,
                            int64_t C, int64_t rows)
{
  __shared__ float sw[kLnRowLanes][kLnColTile + 1];
  const int64_t c = (int64_t)blockIdx.x * kLnColTile + threadIdx.x;
  const int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < N ? r0 + rows : N;
  float aw = 0.0f;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kLnRowLanes)
      aw += to_f32(dout[r * C + c]) * (to_f32(in[r * C + c]) * rstd[r]);
  sw[threadIdx.y][threadIdx.x] = aw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.0f;
    for (int j = 0; j < kLnRowLanes; j++)
      tw += sw[j][threadIdx.x];
    pw[(int64_t)blockIdx.y * C + c] = tw;
  }
}

/* dw (C) "+=" the sum over chunks of pw (nchunks, C), in double in a fixed
 * order; block (kLnColTile, kLnFinishLanes) per 32 columns. */
__global__ void __launch_bounds__(kLnColTile * kLnFinishLanes)
    rms_backward_dw_finish(float *dw, const float *pw, int64_t nchunks, int64_t C)
{
  __shared__ double sw[kLnFinishLanes][kLnColTile + 1];
  const int64_t c = (int64_t)blockIdx.x * kLnColTile + threadIdx.x;
  double aw = 0.0;
  if (c < C)
    for (int64_t k = threadIdx.y; k < nchunks; k += kLnFinishLanes)
      aw += pw[k * C + c];
  sw[threadIdx.y][threadIdx.x] = aw;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double tw = 0.0;
    for (int j = 0; j < kLnFinishLanes; j++)
      tw += sw[j][threadIdx.x];
    dw[c] += (float)tw;
  }
}

template <typename T>
int rms_forward_t(cudaStream_t st, void *out_, float *rstd, const void *in_, const void *w_,
                  float eps, int64_t N, int64_t C)
{
  constexpr int W = kVec<T>;
  T *out = static_cast<T *>(out_);
  const T *in = static_cast<const T *>(in_), *w = static_cast<const T *>(w_);
  const bool vec = C % W == 0 && pack_aligned<T, W>(out) && pack_aligned<T, W>(in) &&
                   pack_aligned<T, W>(w);
  const unsigned warp_grid = grid_for((uint64_t)N, kLnThreads / 32, kMaxRowBlocks);
  const unsigned block_grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (C <= kLnWarpMaxC) {
    if (vec)
      gt_cuda_launch(rms_forward_kernel<T, W, 32>, warp_grid, kLnThreads, 0, st,
                     out, rstd, in, w, eps, N, C);
    else
      gt_cuda_launch(rms_forward_kernel<T, 1, 32>, warp_grid, kLnThreads, 0, st,
                     out, rstd, in, w, eps, N, C);
  } else {
    if (vec)
      gt_cuda_launch(rms_forward_kernel<T, W, (int)kLnThreads>, block_grid, kLnThreads, 0, st,
                     out, rstd, in, w, eps, N, C);
    else
      gt_cuda_launch(rms_forward_kernel<T, 1, (int)kLnThreads>, block_grid, kLnThreads, 0, st,
                     out, rstd, in, w, eps, N, C);
  }
  GT_CUDA_LAUNCHED("rmsnorm_forward");
  return GT_SUCCESS;
}

/* dw from dout first (partials, then their sums), din last: din may alias
 * dout, and stream order puts every read of dout by the dw kernels before
 * din's writes. */
template <typename T>
int rms_backward_t(gt_backend *be, void *din_, float *dw, const void *dout_, const void *in_,
                   const void *w_, const float *rstd, int64_t N, int64_t C)
{
  cudaStream_t st = gt_cuda_compute(be);
  constexpr int W = kVec<T>;
  T *din = static_cast<T *>(din_);
  const T *dout = static_cast<const T *>(dout_), *in = static_cast<const T *>(in_),
          *w = static_cast<const T *>(w_);

  int64_t nchunks = (N + kLnChunkRows - 1) / kLnChunkRows;
  nchunks = nchunks > kLnMaxChunks ? kLnMaxChunks : nchunks;
  const int64_t rows = (N + nchunks - 1) / nchunks;
  nchunks = (N + rows - 1) / rows;
  void *scratch = NULL;
  GT_CALL(gt_cuda_scratch(be, (size_t)nchunks * (size_t)C * sizeof(float), &scratch));
  float *pw = static_cast<float *>(scratch);

  const uint64_t tiles = ((uint64_t)C + kLnColTile - 1) / kLnColTile;
  GT_CHECK(tiles <= INT_MAX, GT_ERR_INPUT, "rmsnorm: C = %lld is too wide", (long long)C);
  gt_cuda_launch(rms_backward_dw_partial<T>,
                 dim3((unsigned)tiles, (unsigned)nchunks), dim3(kLnColTile, kLnRowLanes), 0, st,
                 pw, dout, in, rstd, N, C, rows);
  GT_CUDA_LAUNCHED("rmsnorm_backward dw partials");
  gt_cuda_launch(rms_backward_dw_finish, (unsigned)tiles, dim3(kLnColTile, kLnFinishLanes), 0, st,
                 dw, pw, nchunks, C);
  GT_CUDA_LAUNCHED("rmsnorm_backward dw");

  const bool vec = C % W == 0 && pack_aligned<T, W>(din) && pack_aligned<T, W>(dout) &&
                   pack_aligned<T, W>(in) && pack_aligned<T, W>(w);
  const unsigned warp_grid = grid_for((uint64_t)N, kLnThreads / 32, kMaxRowBlocks);
  const unsigned block_grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (C <= kLnWarpMaxC) {
    if (vec)
      gt_cuda_launch(rms_backward_din_kernel<T, W, 32>, warp_grid, kLnThreads, 0, st,
                     din, dout, in, w, rstd, N, C);
    else
      gt_cuda_launch(rms_backward_din_kernel<T, 1, 32>, warp_grid, kLnThreads, 0, st,
                     din, dout, in, w, rstd, N, C);
  } else {
    if (vec)
      gt_cuda_launch(rms_backward_din_kernel<T, W, (int)kLnThreads>, block_grid, kLnThreads, 0,
                     st, din, dout, in, w, rstd, N, C);
    else
      gt_cuda_launch(rms_backward_din_kernel<T, 1, (int)kLnThreads>, block_grid, kLnThreads, 0,
                     st, din, dout, in, w, rstd, N, C);
  }
  GT_CUDA_LAUNCHED("rmsnorm_backward din");
  return GT_SUCCESS;
}

// ---- rotary position embedding ---------------------------------------------------------------

/* x (B*T, S, 2h) dt, rotated in place for heads [0, nrot): a thread per W
 * pairs (i, i + h) of one head (h % W == 0); sign -1: the transpose. Both
 * halves are read before either is written, by the thread that writes them. */
template <typename T, int W>
__global__ void rope_kernel(T *x, const float *cos, const float *sin, int64_t T_, int64_t S,
                            int64_t nrot, int64_t h, int64_t pos0, float sign, size_t npacks)
{
  const size_t hp = (size_t)(h / W), per_row = (size_t)nrot * hp;
  for (size_t k = thread_index(); k < npacks; k += thread_count()) {
    const size_t row = k / per_row, rem = k - row * per_row, s = rem / hp;
    const size_t i = (rem - s * hp) * W;
    T *v = x + (row * (size_t)S + s) * 2 * (size_t)h;
    const size_t p = (size_t)(pos0 + (int64_t)(row % (size_t)T_)) * (size_t)h + i;
    float a[W], b[W], c[W], sn[W];
    load_pack<T, W>(v + i, a);
    load_pack<T, W>(v + i + h, b);
    load_pack<float, W>(cos + p, c);
    load_pack<float, W>(sin + p, sn);
#pragma unroll
    for (int q = 0; q < W; q++) {
      const float si = sign * sn[q], x1 = a[q], x2 = b[q];
      a[q] = x1 * c[q] - x2 * si;
      b[q] = x2 * c[q] + x1 * si;
    }
    store_pack<T, W>(v + i, a);
    store_pack<T, W>(v + i + h, b);
  }
}

template <typename T>
int rope_t(cudaStream_t st, void *x_, const float *cos, const float *sin, int64_t B, int64_t T_,
           int64_t S, int64_t nrot, int64_t hs, int64_t pos0, float sign)
{
  constexpr int W = kVec<T>;
  T *x = static_cast<T *>(x_);
  const int64_t h = hs / 2;
  const size_t pairs = (size_t)B * (size_t)T_ * (size_t)nrot * (size_t)h;
  if (pairs == 0)
    return GT_SUCCESS;
  if (h % W == 0 && pack_aligned<T, W>(x) && pack_aligned<float, W>(cos) &&
      pack_aligned<float, W>(sin))
    gt_cuda_launch(rope_kernel<T, W>, grid_for(pairs / W, kThreads, kMaxBlocks), kThreads, 0, st,
                   x, cos, sin, T_, S, nrot, h, pos0, sign, pairs / W);
  else
    gt_cuda_launch(rope_kernel<T, 1>, grid_for(pairs, kThreads, kMaxBlocks), kThreads, 0, st,
                   x, cos, sin, T_, S, nrot, h, pos0, sign, pairs);
  GT_CUDA_LAUNCHED(sign > 0 ? "rope_forward" : "rope_backward");
  return GT_SUCCESS;
}

// ---- SwiGLU -----------------------------------------------------------------------------------

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* out (N,F) = silu(g) * u from h (N,2F): a thread per W columns of a row
 * (F % W == 0). */
template <typename T, int W>
__global__ void swiglu_forward_kernel(T *out, const T *h, int64_t F, size_t npacks)
{
  const size_t fp = (size_t)(F / W);
  for (size_t k = thread_index(); k < npacks; k += thread_count()) {
    const size_t row = k / fp, j = (k - row * fp) * W;
    const T *g = h + row * 2 * (size_t)F + j;
    float gf[W], uf[W], o[W];
    load_pack<T, W>(g, gf);
    load_pack<T, W>(g + F, uf);
#pragma unroll
    for (int q = 0; q < W; q++)
      o[q] = gf[q] * sigmoid(gf[q]) * uf[q];
    store_pack<T, W>(out + row * (size_t)F + j, o);
  }
}

/* dh (N,2F) from dout (N,F) and h: g and u of a pack are read before dh's
 * (which may alias them) are written, by the same thread. */
template <typename T, int W>
__global__ void swiglu_backward_kernel(T *dh, const T *dout, const T *h, int64_t F,
                                       size_t npacks)
{
  const size_t fp = (size_t)(F / W);
  for (size_t k = thread_index(); k < npacks; k += thread_count()) {
    const size_t row = k / fp, j = (k - row * fp) * W, gi = row * 2 * (size_t)F + j;
    float gf[W], uf[W], dy[W], dg[W], du[W];
    load_pack<T, W>(h + gi, gf);
    load_pack<T, W>(h + gi + F, uf);
    load_pack<T, W>(dout + row * (size_t)F + j, dy);
#pragma unroll
    for (int q = 0; q < W; q++) {
      const float s = sigmoid(gf[q]);
      dg[q] = dy[q] * uf[q] * (s * (1.0f + gf[q] * (1.0f - s)));
      du[q] = dy[q] * gf[q] * s;
    }
    store_pack<T, W>(dh + gi, dg);
    store_pack<T, W>(dh + gi + F, du);
  }
}

template <typename T>
int swiglu_forward_t(cudaStream_t st, void *out_, const void *h_, int64_t N, int64_t F)
{
  constexpr int W = kVec<T>;
  T *out = static_cast<T *>(out_);
  const T *h = static_cast<const T *>(h_);
  const size_t n = (size_t)N * (size_t)F;
  if (n == 0)
    return GT_SUCCESS;
  if (F % W == 0 && pack_aligned<T, W>(out) && pack_aligned<T, W>(h))
    gt_cuda_launch(swiglu_forward_kernel<T, W>, grid_for(n / W, kThreads, kMaxBlocks), kThreads, 0,
                   st, out, h, F, n / W);
  else
    gt_cuda_launch(swiglu_forward_kernel<T, 1>, grid_for(n, kThreads, kMaxBlocks), kThreads, 0, st,
                   out, h, F, n);
  GT_CUDA_LAUNCHED("swiglu_forward");
  return GT_SUCCESS;
}

template <typename T>
int swiglu_backward_t(cudaStream_t st, void *dh_, const void *dout_, const void *h_, int64_t N,
                      int64_t F)
{
  constexpr int W = kVec<T>;
  T *dh = static_cast<T *>(dh_);
  const T *dout = static_cast<const T *>(dout_), *h = static_cast<const T *>(h_);
  const size_t n = (size_t)N * (size_t)F;
  if (n == 0)
    return GT_SUCCESS;
  if (F % W == 0 && pack_aligned<T, W>(dh) && pack_aligned<T, W>(dout) && pack_aligned<T, W>(h))
    gt_cuda_launch(swiglu_backward_kernel<T, W>, grid_for(n / W, kThreads, kMaxBlocks), kThreads,
                   0, st, dh, dout, h, F, n / W);
  else
    gt_cuda_launch(swiglu_backward_kernel<T, 1>, grid_for(n, kThreads, kMaxBlocks), kThreads, 0,
                   st, dh, dout, h, F, n);
  GT_CUDA_LAUNCHED("swiglu_backward");
  return GT_SUCCESS;
}

// ---- embeddings ----------------------------------------------------------------------------

constexpr unsigned kEmbRunThreads = 128;

/* out (N,C) = wte[tokens - v0] (0 outside [0, nv)) + wpe[i % T] (when given),
 * packs of W along rows (C % W == 0). */
template <typename T, int W>
__global__ void embedding_forward_kernel(T *out, const int32_t *tokens, const T *wte,
                                         const T *wpe, int64_t N, int64_t T_, int64_t C,
                                         int64_t v0, int64_t nv)
{
  const size_t np = (size_t)N * (size_t)C / W;
  for (size_t pk = thread_index(); pk < np; pk += thread_count()) {
    const size_t e = pk * W, i = e / (size_t)C, c = e - i * (size_t)C;
    const int64_t row = (int64_t)tokens[i] - v0;
    float f[W];
#pragma unroll
    for (int k = 0; k < W; k++)
      f[k] = 0.0f;
    if (row >= 0 && row < nv) {
      float g[W];
      load_pack<T, W>(wte + (size_t)row * (size_t)C + c, g);
#pragma unroll
      for (int k = 0; k < W; k++)
        f[k] += g[k];
    }
    if (wpe) {
      float g[W];
      load_pack<T, W>(wpe + (i % (size_t)T_) * (size_t)C + c, g);
#pragma unroll
      for (int k = 0; k < W; k++)
        f[k] += g[k];
    }
    store_pack<T, W>(out + e, f);
  }
}

/* Sort keys and values: key i = tokens[i] - v0 for tokens in the shard,
 * else nv (sorts last); value i = i. */
__global__ void embedding_keys_kernel(uint32_t *keys, uint32_t *pos, const int32_t *tokens,
                                      int64_t N, int64_t v0, int64_t nv)
{
  for (size_t i = thread_index(); i < (size_t)N; i += thread_count()) {
    const int64_t row = (int64_t)tokens[i] - v0;
    keys[i] = (uint32_t)(row >= 0 && row < nv ? row : nv);
    pos[i] = (uint32_t)i;
  }
}

/* dwte (nv,C) fp32 "+=": keys/pos (N) sorted by key, stably (positions
 * ascend within a run). Block x takes sorted indices k = x, x + gridDim.x,
 * ...; at the start of a run of equal keys < nv it sums the run's dout rows
 * in position order (fp32) over its columns, packs of W from column
 * W * (blockIdx.y * blockDim.x + threadIdx.x), and adds the sum to the row
 * once. Each element of dwte has one writer. */
template <typename T, int W>
__global__ void __launch_bounds__(kEmbRunThreads)
    embedding_runs_kernel(float *dwte, const T *dout, const uint32_t *keys, const uint32_t *pos,
                          int64_t N, int64_t C, uint32_t nv)
{
  const int64_t cp = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (cp >= C / W)
    return;
  const int64_t c = cp * W;
  for (int64_t k = blockIdx.x; k < N; k += gridDim.x) {
    const uint32_t key = keys[k];
    if (key >= nv)
      break; /* out-of-shard tokens sort last */
    if (k > 0 && keys[k - 1] == key)
      continue; /* inside a run */
    float acc[W];
#pragma unroll
    for (int q = 0; q < W; q++)
      acc[q] = 0.0f;
    for (int64_t j = k; j < N && keys[j] == key; j++) {
      float f[W];
      load_pack<T, W>(dout + (int64_t)pos[j] * C + c, f);
#pragma unroll
      for (int q = 0; q < W; q++)
        acc[q] += f[q];
    }
    float *d = dwte + (int64_t)key * C + c;
    float cur[W];
    load_pack<float, W>(d, cur);
#pragma unroll
    for (int q = 0; q < W; q++)
      cur[q] += acc[q];
    store_pack<float, W>(d, cur);
  }
}

/* dwpe (T,C) fp32 "+=" sum over b of dout[b, t, :], in batch order; packs of W. */
template <typename T, int W>
__global__ void embedding_positions_kernel(float *dwpe, const T *dout, int64_t B, int64_t T_,
                                           int64_t C)
{
  const size_t tc = (size_t)T_ * (size_t)C, np = tc / W;
  for (size_t pk = thread_index(); pk < np; pk += thread_count()) {
    const size_t e = pk * W;
    float acc[W];
#pragma unroll
    for (int q = 0; q < W; q++)
      acc[q] = 0.0f;
    for (int64_t b = 0; b < B; b++) {
      float f[W];
      load_pack<T, W>(dout + (size_t)b * tc + e, f);
#pragma unroll
      for (int q = 0; q < W; q++)
        acc[q] += f[q];
    }
    float cur[W];
    load_pack<float, W>(dwpe + e, cur);
#pragma unroll
    for (int q = 0; q < W; q++)
      cur[q] += acc[q];
    store_pack<float, W>(dwpe + e, cur);
  }
}

template <typename T>
int embedding_forward_t(cudaStream_t st, void *out_, const int32_t *tokens, const void *wte_,
                        const void *wpe_, int64_t B, int64_t T_, int64_t C, int64_t v0,
                        int64_t nv)
{
  constexpr int W = kVec<T>;
  const int64_t N = B * T_;
  if (N <= 0 || C <= 0)
    return GT_SUCCESS;
  T *out = static_cast<T *>(out_);
  const T *wte = static_cast<const T *>(wte_), *wpe = static_cast<const T *>(wpe_);
  const uint64_t n = (uint64_t)N * (uint64_t)C;
  if (C % W == 0 && pack_aligned<T, W>(out) && pack_aligned<T, W>(wte) && pack_aligned<T, W>(wpe))
    gt_cuda_launch(embedding_forward_kernel<T, W>,
                   grid_for(n / W, kThreads, kMaxBlocks), kThreads, 0, st,
                   out, tokens, wte, wpe, N, T_, C, v0, nv);
  else
    gt_cuda_launch(embedding_forward_kernel<T, 1>,
                   grid_for(n, kThreads, kMaxBlocks), kThreads, 0, st,
                   out, tokens, wte, wpe, N, T_, C, v0, nv);
  GT_CUDA_LAUNCHED("embedding_forward");
  return GT_SUCCESS;
}

template <typename T, int W>
int embedding_backward_launch(cudaStream_t st, float *dwte, float *dwpe, const T *dout,
                              const uint32_t *keys, const uint32_t *pos, int64_t B, int64_t T_,
                              int64_t C, int64_t nv)
{
  const int64_t N = B * T_;
  if (keys) {
    const uint64_t ychunks = ((uint64_t)(C / W) + kEmbRunThreads - 1) / kEmbRunThreads;
    GT_CHECK(ychunks <= 65535, GT_ERR_INPUT, "embedding_backward: C = %lld is too wide",
             (long long)C);
    const dim3 grid(grid_for((uint64_t)N, 1, kMaxBlocks), (unsigned)(ychunks ? ychunks : 1));
    gt_cuda_launch(embedding_runs_kernel<T, W>, grid, kEmbRunThreads, 0, st,
                   dwte, dout, keys, pos, N, C, (uint32_t)nv);
    GT_CUDA_LAUNCHED("embedding_backward dwte");
  }
  if (dwpe) {
    const uint64_t np = (uint64_t)T_ * (uint64_t)C / W;
    gt_cuda_launch(embedding_positions_kernel<T, W>,
                   grid_for(np, kThreads, kMaxBlocks), kThreads, 0, st,
                   dwpe, dout, B, T_, C);
    GT_CUDA_LAUNCHED("embedding_backward dwpe");
  }
  return GT_SUCCESS;
}

/* dwte: keys and positions from the tokens, a stable radix sort by key over
 * the bits that nv needs (CUB), then one pass over the runs. Scratch: 4
 * arrays of N uint32 (keys and positions, in and out) and CUB's temporary
 * storage, each 256-byte aligned. */
template <typename T>
int embedding_backward_t(gt_backend *be, float *dwte, float *dwpe, const void *dout_,
                         const int32_t *tokens, int64_t B, int64_t T_, int64_t C, int64_t v0,
                         int64_t nv)
{
  cudaStream_t st = gt_cuda_compute(be);
  constexpr int W = kVec<T>;
  const int64_t N = B * T_;
  if (N <= 0 || C <= 0)
    return GT_SUCCESS;
  const T *dout = static_cast<const T *>(dout_);
  uint32_t *keys = NULL, *pos = NULL;
  if (nv > 0) {
    GT_CHECK(N <= INT32_MAX && nv < INT32_MAX, GT_ERR_INPUT,
             "embedding_backward: %lld tokens or %lld vocabulary rows exceed the int32 range",
             (long long)N, (long long)nv);
    int bits = 1;
    while (((int64_t)1 << bits) <= nv)
      bits++;
    size_t temp_bytes = 0;
    GT_CALL_CUDA(cub::DeviceRadixSort::SortPairs(
        NULL, temp_bytes, (const uint32_t *)NULL, (uint32_t *)NULL, (const uint32_t *)NULL,
        (uint32_t *)NULL, (int)N, 0, bits, st));
    const size_t arr = align_up((size_t)N * sizeof(uint32_t), 256);
    void *scratch = NULL;
    GT_CALL(gt_cuda_scratch(be, 256 + 4 * arr + temp_bytes, &scratch));
    char *base = reinterpret_cast<char *>(align_up(reinterpret_cast<uintptr_t>(scratch), 256));
    uint32_t *keys_in = reinterpret_cast<uint32_t *>(base);
    uint32_t *pos_in = reinterpret_cast<uint32_t *>(base + arr);
    keys = reinterpret_cast<uint32_t *>(base + 2 * arr);
    pos = reinterpret_cast<uint32_t *>(base + 3 * arr);
    gt_cuda_launch(embedding_keys_kernel,
                   grid_for((uint64_t)N, kThreads, kMaxBlocks), kThreads, 0, st,
                   keys_in, pos_in, tokens, N, v0, nv);
    GT_CUDA_LAUNCHED("embedding_backward keys");
    GT_CALL_CUDA(cub::DeviceRadixSort::SortPairs(base + 4 * arr, temp_bytes, keys_in, keys,
                                                 pos_in, pos, (int)N, 0, bits, st));
  }
  if (C % W == 0 && pack_aligned<T, W>(dout) && pack_aligned<float, W>(dwte) &&
      pack_aligned<float, W>(dwpe))
    return embedding_backward_launch<T, W>(st, dwte, dwpe, dout, keys, pos, B, T_, C, nv);
  return embedding_backward_launch<T, 1>(st, dwte, dwpe, dout, keys, pos, B, T_, C, nv);
}

// ---- cross-entropy (vocabulary-parallel) -----------------------------------------------------

constexpr unsigned kXentThreads = 512;

/* A running softmax normaliser: max m and s = sum exp(x - m). */
struct MaxSum {
  float m, s;
};

/* Add x. -inf adds nothing; NaN makes s NaN (as the reference's sum). */
__device__ __forceinline__ void maxsum_push(MaxSum &a, float x)
{
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.0f;
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += expf(x - a.m);
  }
}

/* Merge two normalisers (commutative; {-inf, 0} is the identity). */
__device__ __forceinline__ MaxSum maxsum_merge(MaxSum a, MaxSum b)
{
  const float m = b.m > a.m ? b.m : a.m;
  const float sa = a.m == m ? a.s : a.s * expf(a.m - m);
  const float sb = b.m == m ? b.s : b.s * expf(b.m - m);
  return MaxSum{m, sa + sb};
}

/* The block's merged normaliser, in thread 0. */
__device__ __forceinline__ MaxSum block_maxsum(MaxSum a, float *shm, float *shs)
{
  const unsigned lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    a = maxsum_merge(a, MaxSum{__shfl_xor_sync(0xffffffffu, a.m, o),
                               __shfl_xor_sync(0xffffffffu, a.s, o)});
  __syncthreads();
  if (lane == 0) {
    shm[threadIdx.x >> 5] = a.m;
    shs[threadIdx.x >> 5] = a.s;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    a = lane < nwarps ? MaxSum{shm[lane], shs[lane]} : MaxSum{-INFINITY, 0.0f};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      a = maxsum_merge(a, MaxSum{__shfl_xor_sync(0xffffffffu, a.m, o),
                                 __shfl_xor_sync(0xffffffffu, a.s, o)});
  }
  return a;
}

/* stats (N,3) fp32 "=" {m, s, t} of the rows of logits (N, ld), columns
 * [0, nv); a block per row, one read of each logit (packs of W: ld % W == 0,
 * columns from nv on in a pack are skipped). */
template <typename T, int W>
__global__ void __launch_bounds__(kXentThreads)
    xent_partial_kernel(float *stats, const T *logits, const int32_t *targets, int64_t N,
                        int64_t nv, int64_t ld, int64_t v0)
{
  __shared__ float shm[32], shs[32];
  const int64_t np = (nv + W - 1) / W;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T *l = logits + row * ld;
    MaxSum a{-INFINITY, 0.0f};
    for (int64_t p = threadIdx.x; p < np; p += blockDim.x) {
      float f[W];
      load_pack<T, W>(l + p * W, f);
#pragma unroll
      for (int k = 0; k < W; k++)
        if (p * W + k < nv)
          maxsum_push(a, f[k]);
    }
    a = block_maxsum(a, shm, shs);
    if (threadIdx.x == 0) {
      /* as the reference: an infinite max puts exp(inf - inf) in its sum */
      const float s = nv > 0 && fabsf(a.m) == INFINITY ? __int_as_float(0x7fc00000) : a.s;
      const int64_t y = (int64_t)targets[row] - v0;
      stats[3 * row] = a.m;
      stats[3 * row + 1] = s;
      stats[3 * row + 2] = y >= 0 && y < nv ? to_f32(l[y]) : 0.0f;
    }
  }
}

/* Row i's totals over the P shards of stats (P,N,3), in shard order, and its
 * loss log(S) + M - Tg (as the reference, in double). */
__device__ __forceinline__ float xent_row_totals(const float *stats, int P, int64_t N,
                                                 int64_t row, float *M_out, double *S_out)
{
  float M = -INFINITY;
  for (int r = 0; r < P; r++) {
    const float m = stats[3 * ((int64_t)r * N + row)];
    M = m > M ? m : M;
  }
  double S = 0.0, Tg = 0.0;
  for (int r = 0; r < P; r++) {
    const float *s = stats + 3 * ((int64_t)r * N + row);
    S += (double)s[1] * exp((double)s[0] - (double)M);
    Tg += s[2];
  }
  *M_out = M;
  *S_out = S;
  return (float)(log(S) + (double)M - Tg);
}

/* losses (N) "=" only (dlogit_scale == 0): a thread per row. */
__global__ void xent_loss_kernel(float *losses, const float *stats, int P, int64_t N)
{
  for (size_t row = thread_index(); row < (size_t)N; row += thread_count()) {
    float M;
    double S;
    losses[row] = xent_row_totals(stats, P, N, (int64_t)row, &M, &S);
  }
}

/* losses (N) "="; logits (N, ld) overwritten by (softmax - onehot) * scale in
 * columns [0, nv) and 0 in the padding; a block per row, each logit read
 * and written once (packs of W: ld % W == 0). */
template <typename T, int W>
__global__ void __launch_bounds__(kXentThreads)
    xent_finish_kernel(float *losses, T *logits, const float *stats, int P,
                       const int32_t *targets, int64_t N, int64_t nv, int64_t ld, int64_t v0,
                       float scale)
{
  __shared__ float sh_m, sh_s;
  const int64_t np = ld / W;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    if (threadIdx.x == 0) {
      float M;
      double S;
      losses[row] = xent_row_totals(stats, P, N, row, &M, &S);
      sh_m = M;
      sh_s = (float)((double)scale / S);
    }
    __syncthreads();
    const float M = sh_m, s = sh_s;
    const int64_t y = (int64_t)targets[row] - v0;
    T *l = logits + row * ld;
    for (int64_t p = threadIdx.x; p < np; p += blockDim.x) {
      float f[W];
      load_pack<T, W>(l + p * W, f);
#pragma unroll
      for (int k = 0; k < W; k++) {
        const int64_t j = p * W + k;
        float g = 0.0f;
        if (j < nv) {
          g = expf(f[k] - M) * s;
          if (j == y)
            g -= scale;
        }
        f[k] = g;
      }
      store_pack<T, W>(l + p * W, f);
    }
    __syncthreads(); /* sh_m, sh_s are read before the next row's */
  }
}

template <typename T>
int xent_partial_t(cudaStream_t st, float *stats, const void *logits_, const int32_t *targets,
                   int64_t N, int64_t nv, int64_t ld, int64_t v0)
{
  constexpr int W = kVec<T>;
  const T *logits = static_cast<const T *>(logits_);
  const unsigned grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (ld % W == 0 && pack_aligned<T, W>(logits))
    gt_cuda_launch(xent_partial_kernel<T, W>, grid, kXentThreads, 0, st,
                   stats, logits, targets, N, nv, ld, v0);
  else
    gt_cuda_launch(xent_partial_kernel<T, 1>, grid, kXentThreads, 0, st,
                   stats, logits, targets, N, nv, ld, v0);
  GT_CUDA_LAUNCHED("xent_partial");
  return GT_SUCCESS;
}

template <typename T>
int xent_finish_t(cudaStream_t st, float *losses, void *logits_, const float *stats, int P,
                  const int32_t *targets, int64_t N, int64_t nv, int64_t ld, int64_t v0,
                  float scale)
{
  constexpr int W = kVec<T>;
  T *logits = static_cast<T *>(logits_);
  const unsigned grid = grid_for((uint64_t)N, 1, kMaxRowBlocks);
  if (ld % W == 0 && pack_aligned<T, W>(logits))
    gt_cuda_launch(xent_finish_kernel<T, W>, grid, kXentThreads, 0, st,
                   losses, logits, stats, P, targets, N, nv, ld, v0, scale);
  else
    gt_cuda_launch(xent_finish_kernel<T, 1>, grid, kXentThreads, 0, st,
                   losses, logits, stats, P, targets, N, nv, ld, v0, scale);
  GT_CUDA_LAUNCHED("xent_finish");
  return GT_SUCCESS;
}

// ---- AdamW ------------------------------------------------------------------------------------

struct AdamArgs {
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_mult;
};

__device__ __forceinline__ void adamw_step(float &p, float g, float &m, float &v,
                                           const AdamArgs &a)
{
  const float gi = g * a.grad_mult;
  const float mi = a.beta1 * m + (1.0f - a.beta1) * gi;
  const float vi = a.beta2 * v + (1.0f - a.beta2) * gi * gi;
  m = mi;
  v = vi;
  p -= a.lr * ((mi / a.bc1) / (sqrtf(vi / a.bc2) + a.eps) + a.weight_decay * p);
}

/* p, g, m, v (n) fp32; compute (n) CT "=" the new p rounded (when STORE);
 * packs of W, then the tail. */
template <typename CT, bool STORE, int W>
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, CT *compute, size_t n,
                             AdamArgs a)
{
  const size_t np = n / W;
  for (size_t i = thread_index(); i < np; i += thread_count()) {
    float pp[W], gg[W], mm[W], vv[W];
    load_pack<float, W>(p + i * W, pp);
    load_pack<float, W>(g + i * W, gg);
    load_pack<float, W>(m + i * W, mm);
    load_pack<float, W>(v + i * W, vv);
#pragma unroll
    for (int k = 0; k < W; k++)
      adamw_step(pp[k], gg[k], mm[k], vv[k], a);
    store_pack<float, W>(p + i * W, pp);
    store_pack<float, W>(m + i * W, mm);
    store_pack<float, W>(v + i * W, vv);
    if (STORE)
      store_pack<CT, W>(compute + i * W, pp);
  }
  const size_t t = np * W + thread_index();
  if (t < n) {
    float pp = p[t], mm = m[t], vv = v[t];
    adamw_step(pp, g[t], mm, vv, a);
    p[t] = pp;
    m[t] = mm;
    v[t] = vv;
    if (STORE)
      compute[t] = from_f32<CT>(pp);
  }
}

template <typename CT, bool STORE>
int adamw_t(cudaStream_t st, float *p, const float *g, float *m, float *v, void *compute_,
            size_t n, const AdamArgs &a)
{
  constexpr int W = 4;
  CT *compute = static_cast<CT *>(compute_);
  if (pack_aligned<float, W>(p) && pack_aligned<float, W>(g) && pack_aligned<float, W>(m) &&
      pack_aligned<float, W>(v) && pack_aligned<CT, W>(compute))
    gt_cuda_launch(adamw_kernel<CT, STORE, W>,
                   grid_for(n / W, kThreads, kMaxBlocks), kThreads, 0, st,
                   p, g, m, v, compute, n, a);
  else
    gt_cuda_launch(adamw_kernel<CT, STORE, 1>, grid_for(n, kThreads, kMaxBlocks), kThreads, 0, st,
                   p, g, m, v, compute, n, a);
  GT_CUDA_LAUNCHED("adamw");
  return GT_SUCCESS;
}

template <typename CT>
int adamw_store_t(cudaStream_t st, float *p, const float *g, float *m, float *v, void *compute,
                  size_t n, const AdamArgs &a)
{
  return adamw_t<CT, true>(st, p, g, m, v, compute, n, a);
}

// ---- sums -----------------------------------------------------------------------------------

constexpr unsigned kSumThreads = 256;
constexpr uint64_t kSumItemsPerBlock = 1024; /* blocks = ceil(n / this) ... */
constexpr uint64_t kSumMaxBlocks = 1024;     /* ... up to this (the finishing block's size) */

/* part[blockIdx.x] "=" the block's sum of x (or x^2) in double: thread j
 * sums elements j, j + threads, ... in order, then a fixed tree. The grid
 * depends on n only. */
template <bool SQUARE> __global__ void __launch_bounds__(kSumThreads)
    sum_partial_kernel(double *part, const float *x, size_t n)
{
  __shared__ double sh[32];
  double acc = 0.0;
  for (size_t i = thread_index(); i < n; i += thread_count()) {
    const double xi = x[i];
    acc += SQUARE ? xi * xi : xi;
  }
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0)
    part[blockIdx.x] = acc;
}

/* *acc += the sum of part (nparts <= kSumMaxBlocks): one block of kSumMaxBlocks. */
__global__ void __launch_bounds__(kSumMaxBlocks)
    sum_finish_kernel(double *acc, const double *part, unsigned nparts)
{
  __shared__ double sh[32];
  double v = threadIdx.x < nparts ? part[threadIdx.x] : 0.0;
  v = block_sum(v, sh);
  if (threadIdx.x == 0)
    *acc += v;
}

template <bool SQUARE> int sum_add_t(gt_backend *be, double *acc, const float *x, size_t n)
{
  if (n == 0)
    return GT_SUCCESS;
  cudaStream_t st = gt_cuda_compute(be);
  const unsigned nb = grid_for(n, kSumItemsPerBlock, kSumMaxBlocks);
  void *scratch = NULL;
  GT_CALL(gt_cuda_scratch(be, nb * sizeof(double), &scratch));
  double *part = static_cast<double *>(scratch);
  gt_cuda_launch(sum_partial_kernel<SQUARE>, nb, kSumThreads, 0, st, part, x, n);
  GT_CUDA_LAUNCHED("sum partials");
  gt_cuda_launch(sum_finish_kernel, 1, kSumMaxBlocks, 0, st, acc, part, nb);
  GT_CUDA_LAUNCHED("sum");
  return GT_SUCCESS;
}

/* y (n) = a x + b y. */
__global__ void axpby_kernel(float *y, float a, const float *x, float b, size_t n)
{
  for (size_t i = thread_index(); i < n; i += thread_count())
    y[i] = a * x[i] + b * y[i];
}

} // namespace

// ---- entries (C linkage, declared in cuda_backend.h) -------------------------------------------

extern "C" int gt_cuda_cast(gt_backend *be, gt_dtype dst_t, void *dst, gt_dtype src_t,
                            const void *src, size_t n)
{
  cudaStream_t st = gt_cuda_compute(be);
  const bool dst_ok = dst_t == GT_F32 || dst_t == GT_BF16 || dst_t == GT_F16;
  const bool src_ok = src_t == GT_F32 || src_t == GT_BF16 || src_t == GT_F16;
  GT_CHECK(dst_ok && src_ok, GT_ERR_INTERNAL,
           "internal error: cast from %s to %s: both must be fp32, bf16 or fp16",
           gt_dtype_name(src_t), gt_dtype_name(dst_t));
  if (n == 0)
    return GT_SUCCESS;
  if (dst_t == src_t) { /* the identity, bit for bit (overlap as memmove) */
    const size_t bytes = n * gt_dtype_size(src_t);
    const char *d = static_cast<const char *>(dst), *s = static_cast<const char *>(src);
    if (d == s)
      return GT_SUCCESS;
    if (d < s + bytes && s < d + bytes) {
      void *tmp = NULL;
      GT_CALL(gt_cuda_scratch(be, bytes, &tmp));
      GT_CALL_CUDA(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, st));
      GT_CALL_CUDA(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, st));
    } else {
      GT_CALL_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
    }
    return GT_SUCCESS;
  }
  switch (dst_t) {
  case GT_F32: return cast_from<float>(st, dst, src_t, src, n);
  case GT_BF16: return cast_from<__nv_bfloat16>(st, dst, src_t, src, n);
  case GT_F16: return cast_from<__half>(st, dst, src_t, src, n);
  default: return GT_CUDA_BAD_DT(dst_t);
  }
}

extern "C" int gt_cuda_layernorm_forward(gt_backend *be, gt_dtype dt, void *out, float *mean,
                                         float *rstd, const void *in, const void *w,
                                         const void *b, int64_t N, int64_t C)
{
  GT_ASSERT(N >= 0 && C >= 1);
  if (N == 0)
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, ln_forward_t, gt_cuda_compute(be), out, mean, rstd, in, w, b, N, C);
}

extern "C" int gt_cuda_layernorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw,
                                          float *db, const void *dout, const void *in,
                                          const void *w, const float *mean, const float *rstd,
                                          int64_t N, int64_t C)
{
  GT_ASSERT(N >= 0 && C >= 1);
  if (N == 0)
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, ln_backward_t, be, din, dw, db, dout, in, w, mean, rstd, N, C);
}

extern "C" int gt_cuda_gelu_forward(gt_backend *be, gt_dtype dt, void *out, const void *in,
                                    size_t n)
{
  if (n == 0 && (dt == GT_F32 || dt == GT_BF16 || dt == GT_F16))
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, gelu_forward_t, gt_cuda_compute(be), out, in, n);
}

extern "C" int gt_cuda_gelu_backward(gt_backend *be, gt_dtype dt, void *din, const void *in,
                                     const void *dout, size_t n)
{
  if (n == 0 && (dt == GT_F32 || dt == GT_BF16 || dt == GT_F16))
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, gelu_backward_t, gt_cuda_compute(be), din, in, dout, n);
}

extern "C" int gt_cuda_rmsnorm_forward(gt_backend *be, gt_dtype dt, void *out, float *rstd,
                                       const void *in, const void *w, float eps, int64_t N,
                                       int64_t C)
{
  GT_ASSERT(N >= 0 && C >= 1);
  if (N == 0)
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, rms_forward_t, gt_cuda_compute(be), out, rstd, in, w, eps, N, C);
}

extern "C" int gt_cuda_rmsnorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw,
                                        const void *dout, const void *in, const void *w,
                                        const float *rstd, int64_t N, int64_t C)
{
  GT_ASSERT(N >= 0 && C >= 1);
  if (N == 0)
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, rms_backward_t, be, din, dw, dout, in, w, rstd, N, C);
}

/* Both directions: the checks of the contract, then the rotation of sign. */
static int gt_cuda_rope(gt_backend *be, gt_dtype dt, void *x, const float *cos,
                        const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                        int64_t hs, int64_t pos0, float sign)
{
  GT_CHECK(hs >= 2 && hs % 2 == 0 && nrot >= 0 && nrot <= S && pos0 >= 0 && B >= 0 && T >= 0,
           GT_ERR_INTERNAL,
           "internal error: rope: head size %lld (must be even), %lld of %lld heads rotated, "
           "first position %lld",
           (long long)hs, (long long)nrot, (long long)S, (long long)pos0);
  GT_CUDA_BY_DT(dt, rope_t, gt_cuda_compute(be), x, cos, sin, B, T, S, nrot, hs, pos0, sign);
}

extern "C" int gt_cuda_rope_forward(gt_backend *be, gt_dtype dt, void *x, const float *cos,
                                    const float *sin, int64_t B, int64_t T, int64_t S,
                                    int64_t nrot, int64_t hs, int64_t pos0)
{
  return gt_cuda_rope(be, dt, x, cos, sin, B, T, S, nrot, hs, pos0, 1.0f);
}

extern "C" int gt_cuda_rope_backward(gt_backend *be, gt_dtype dt, void *dx, const float *cos,
                                     const float *sin, int64_t B, int64_t T, int64_t S,
                                     int64_t nrot, int64_t hs, int64_t pos0)
{
  return gt_cuda_rope(be, dt, dx, cos, sin, B, T, S, nrot, hs, pos0, -1.0f);
}

extern "C" int gt_cuda_swiglu_forward(gt_backend *be, gt_dtype dt, void *out, const void *h,
                                      int64_t N, int64_t F)
{
  GT_ASSERT(N >= 0 && F >= 0);
  GT_CUDA_BY_DT(dt, swiglu_forward_t, gt_cuda_compute(be), out, h, N, F);
}

extern "C" int gt_cuda_swiglu_backward(gt_backend *be, gt_dtype dt, void *dh, const void *dout,
                                       const void *h, int64_t N, int64_t F)
{
  GT_ASSERT(N >= 0 && F >= 0);
  GT_CUDA_BY_DT(dt, swiglu_backward_t, gt_cuda_compute(be), dh, dout, h, N, F);
}

extern "C" int gt_cuda_embedding_forward(gt_backend *be, gt_dtype dt, void *out,
                                         const int32_t *tokens, const void *wte,
                                         const void *wpe, int64_t B, int64_t T, int64_t C,
                                         int64_t v0, int64_t nv)
{
  GT_CUDA_BY_DT(dt, embedding_forward_t, gt_cuda_compute(be), out, tokens, wte, wpe, B, T, C,
                v0, nv);
}

extern "C" int gt_cuda_embedding_backward(gt_backend *be, gt_dtype dt, float *dwte,
                                          float *dwpe, const void *dout,
                                          const int32_t *tokens, int64_t B, int64_t T,
                                          int64_t C, int64_t v0, int64_t nv)
{
  GT_CUDA_BY_DT(dt, embedding_backward_t, be, dwte, dwpe, dout, tokens, B, T, C, v0, nv);
}

extern "C" int gt_cuda_xent_partial(gt_backend *be, gt_dtype dt, float *stats,
                                    const void *logits, const int32_t *targets, int64_t N,
                                    int64_t nv, int64_t ld, int64_t v0)
{
  GT_ASSERT(N >= 0 && nv >= 0 && nv <= ld);
  if (N == 0)
    return GT_SUCCESS;
  GT_CUDA_BY_DT(dt, xent_partial_t, gt_cuda_compute(be), stats, logits, targets, N, nv, ld, v0);
}

extern "C" int gt_cuda_xent_finish(gt_backend *be, gt_dtype dt, float *losses, void *logits,
                                   const float *stats, int P, const int32_t *targets, int64_t N,
                                   int64_t nv, int64_t ld, int64_t v0, float dlogit_scale)
{
  GT_ASSERT(P >= 1 && N >= 0 && nv >= 0 && nv <= ld);
  GT_CHECK(dt == GT_F32 || dt == GT_BF16 || dt == GT_F16, GT_ERR_INTERNAL,
           "internal error: %s: element type %s is not fp32, bf16 or fp16", __func__,
           gt_dtype_name(dt));
  if (N == 0)
    return GT_SUCCESS;
  cudaStream_t st = gt_cuda_compute(be);
  if (dlogit_scale == 0.0f) {
    gt_cuda_launch(xent_loss_kernel, grid_for((uint64_t)N, kThreads, kMaxBlocks), kThreads, 0, st,
                   losses, stats, P, N);
    GT_CUDA_LAUNCHED("xent_finish losses");
    return GT_SUCCESS;
  }
  GT_CUDA_BY_DT(dt, xent_finish_t, st, losses, logits, stats, P, targets, N, nv, ld, v0,
                dlogit_scale);
}

extern "C" int gt_cuda_adamw(gt_backend *be, float *p, const float *g, float *m, float *v,
                             void *compute, gt_dtype compute_t, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bc1, float bc2,
                             float grad_mult)
{
  const AdamArgs a{lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_mult};
  cudaStream_t st = gt_cuda_compute(be);
  if (!compute)
    return n ? adamw_t<float, false>(st, p, g, m, v, NULL, n, a) : GT_SUCCESS;
  if (n == 0 && (compute_t == GT_F32 || compute_t == GT_BF16 || compute_t == GT_F16))
    return GT_SUCCESS;
  GT_CUDA_BY_DT(compute_t, adamw_store_t, st, p, g, m, v, compute, n, a);
}

extern "C" int gt_cuda_sum_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  return sum_add_t<false>(be, acc, x, n);
}

extern "C" int gt_cuda_sumsq_add(gt_backend *be, double *acc, const float *x, size_t n)
{
  return sum_add_t<true>(be, acc, x, n);
}

extern "C" int gt_cuda_axpby(gt_backend *be, float *y, float a, const float *x, float b,
                             size_t n)
{
  if (n == 0)
    return GT_SUCCESS;
  gt_cuda_launch(axpby_kernel, grid_for(n, kThreads, kMaxBlocks), kThreads, 0, gt_cuda_compute(be),
                 y, a, x, b, n);

  GT_CUDA_LAUNCHED("axpby");
  return GT_SUCCESS;
}
