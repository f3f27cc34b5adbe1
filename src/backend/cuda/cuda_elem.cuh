/*
 * cuda_elem.cuh - what every kernel file of the cuda backend shares (after
 * cuda_launch.cuh): the dispatch of a compute type to its storage type, the
 * grid caps, fp32 to and from the storage types, 16-byte packs of elements,
 * and the grid arithmetic. Everything is in an anonymous namespace: each .cu
 * file gets its own copy, and the kernel emulation test (tests/gpu/emu)
 * builds it as host C++ like the rest.
 */
#ifndef GT_CUDA_ELEM_CUH
#define GT_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda_backend.h"

#define GT_CUDA_BAD_DT(dt)                                                                   \
  GT_ERROR(GT_ERR_INTERNAL, "internal error: %s: element type %s is not fp32, bf16 or fp16", \
           __func__, gt_dtype_name(dt))

/* return fn<T>(args...) with T the storage type of dt. */
#define GT_CUDA_BY_DT(dt, fn, ...)                                                           \
  do {                                                                                       \
    switch (dt) {                                                                            \
    case GT_F32: return fn<float>(__VA_ARGS__);                                              \
    case GT_BF16: return fn<__nv_bfloat16>(__VA_ARGS__);                                     \
    case GT_F16: return fn<__half>(__VA_ARGS__);                                             \
    default: return GT_CUDA_BAD_DT(dt);                                                      \
    }                                                                                        \
  } while (0)

/* Grids stop growing at these caps and the kernels stride over the rest.
 * The kernel emulation test builds the files with small caps, so that its
 * small shapes take the grid-stride paths too. */
#ifndef GT_CUDA_MAX_BLOCKS
#define GT_CUDA_MAX_BLOCKS (1u << 16)
#endif
#ifndef GT_CUDA_MAX_ROW_BLOCKS
#define GT_CUDA_MAX_ROW_BLOCKS (1u << 20)
#endif

namespace {

constexpr unsigned kThreads = 256;                        /* element-wise kernels */
constexpr uint64_t kMaxBlocks = GT_CUDA_MAX_BLOCKS;       /* grid-stride beyond this */
constexpr uint64_t kMaxRowBlocks = GT_CUDA_MAX_ROW_BLOCKS; /* row kernels: grid-stride beyond */

// ---- element types ---------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x)
{
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x)
{
  return __float2half_rn(x);
}

/* W elements of T moved as one access (two for 32 bytes): aligned to the
 * pack's size up to 16 bytes. */
template <typename T, int W>
struct alignas(W * sizeof(T) < 16 ? W * sizeof(T) : 16) Pack {
  T e[W];
};

/* Elements per 16 bytes. */
template <typename T> constexpr int kVec = (int)(16 / sizeof(T));

template <typename T, int W>
__device__ __forceinline__ void load_pack(const T *p, float (&f)[W])
{
  const Pack<T, W> v = *reinterpret_cast<const Pack<T, W> *>(p);
#pragma unroll
  for (int k = 0; k < W; k++)
    f[k] = to_f32(v.e[k]);
}

template <typename T, int W>
__device__ __forceinline__ void store_pack(T *p, const float (&f)[W])
{
  Pack<T, W> v;
#pragma unroll
  for (int k = 0; k < W; k++)
    v.e[k] = from_f32<T>(f[k]);
  *reinterpret_cast<Pack<T, W> *>(p) = v;
}

/* Can p (NULL: nothing to access) be accessed as Pack<T, W>? */
template <typename T, int W> inline bool pack_aligned(const void *p)
{
  return (reinterpret_cast<uintptr_t>(p) % alignof(Pack<T, W>)) == 0;
}

// ---- launch helpers ----------------------------------------------------------------------

/* Blocks for `work` items at `per_block` items a block: at least 1, at most cap. */
inline unsigned grid_for(uint64_t work, uint64_t per_block, uint64_t cap)
{
  uint64_t b = (work + per_block - 1) / per_block;
  b = b < 1 ? 1 : b;
  return (unsigned)(b > cap ? cap : b);
}

__device__ __forceinline__ size_t thread_index()
{
  return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ size_t thread_count() { return (size_t)gridDim.x * blockDim.x; }

inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

} // namespace

#endif /* GT_CUDA_ELEM_CUH */
