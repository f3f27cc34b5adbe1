/*
 * cuda_emu.h - a CUDA emulator of our own, so that the cuda backend's kernels
 * (the .cu files of src/backend/cuda) build as host C++ and run on every CI machine,
 * without a GPU (tests/gpu/test_cuda_emu). The emulator's folder shadows the
 * CUDA headers our sources include (cuda_runtime_api.h, cuda_runtime.h,
 * cuda_bf16.h, cuda_fp16.h, cub/cub.cuh): each includes this file.
 *
 * What it provides:
 * - to C (cuda_core.c): the runtime API the backend calls, over host memory:
 *   cudaMalloc/cudaFree (every allocation tracked: a copy, set or free that
 *   strays outside one fails as on a GPU), pinned host memory, streams and
 *   events (ordered trivially: every operation runs when it is queued),
 *   device properties of an emulated device with 2 multiprocessors;
 * - to C++ (the .cu files): __global__ and friends as plain functions,
 *   threadIdx / blockIdx / blockDim / gridDim, __shared__ memory, barriers
 *   (__syncthreads, __syncwarp), warp shuffles and votes with the lanes
 *   synchronised, atomics, __nv_bfloat16 / __half with CUDA's conversions,
 *   the device math functions (as the host libm's), and
 *   cub::DeviceRadixSort::SortPairs (a stable host sort).
 *
 * How a launch runs (gt_cuda_launch, cuda_launch.cuh): every block, in a
 * shuffled order, one after the other; inside a block, one fiber (a
 * ucontext with a stack of its own) per CUDA thread, all on the calling
 * host thread. A fiber runs until it reaches a barrier or ends; the next one
 * is then picked at random, so the interleavings differ from launch to
 * launch. A __syncthreads returns once every thread of the block that has
 * not ended is waiting in one; a warp operation once every lane of its mask
 * is. Dynamic shared memory is filled with 0xff bytes (NaN in every
 * floating type) before each launch, and __shared__ variables hold what the
 * last block left, so a thread that reads what another has not yet written,
 * for want of a barrier, reads NaN or a stale value. A launch ends with an
 * error (cudaGetLastError) on a
 * bad configuration, a deadlock (a barrier that not every thread reaches),
 * or a warp operation whose mask names a lane that ended or that is not
 * waiting with the same mask.
 *
 * What it does not cover: cuBLAS(Lt), cuDNN and NCCL (not emulated), the
 * accuracy of the device math library (host libm instead), real
 * concurrency between blocks and between streams, the memory model
 * (fences, visibility), occupancy, register and shared-memory limits, and
 * speed.
 */
#ifndef GT_CUDA_EMU_H
#define GT_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>

#define GT_CUDA_EMU_VERSION 13000 /* reported as the runtime's version */

#ifdef __cplusplus
extern "C" {
#endif

// ---- the runtime API (C) ------------------------------------------------------------------

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719
} cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int multiProcessorCount;
  int major, minor;
  int warpSize;
  int maxThreadsPerBlock;
  size_t sharedMemPerBlock;
};

const char *cudaGetErrorString(cudaError_t err);
const char *cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char *bus_id, int len, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* The emulator's own: device bytes allocated now; launches run so far. */
size_t gt_emu_device_bytes(void);
unsigned long gt_emu_launches(void);

#ifdef __cplusplus
} /* extern "C" */

// ---- kernels (C++) ------------------------------------------------------------------------

#include <cmath>
#include <cstring>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
/* A __shared__ variable is a static of its kernel: the blocks of a launch
 * run one after the other on one host thread, each seeing what the one
 * before left (GCC drops a section attribute on the statics of templates,
 * so they cannot be found and refilled between blocks). */
#define __shared__ static __attribute__((aligned(16)))

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

constexpr int warpSize = 32;

namespace gt_emu {

/* The thread and block being run (set by the launch). */
const uint3 &thread_idx();
const uint3 &block_idx();
const dim3 &block_dim();
const dim3 &grid_dim();
void *dynamic_shared();

/* Barriers: of the block; of the lanes of mask in the calling warp. */
void sync_block();
void sync_warp(unsigned mask);

/* Warp exchange: every lane of mask offers 8 bytes; after the lanes have
 * met, *out = the bytes lane src offered (the caller's own where src is
 * outside the mask or the warp). */
void warp_exchange(unsigned mask, const void *mine, size_t bytes, int src, void *out);
/* Votes: the ballot of pred over the lanes of mask. */
unsigned warp_ballot(unsigned mask, bool pred);
unsigned lane_id();

/* Run body once per thread of every block (cuda_launch.cuh); name for
 * diagnostics (the kernel expression as written). */
void launch(const char *name, dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
            const std::function<void()> &body);

template <typename T> inline T shfl(unsigned mask, T v, int src)
{
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  T out;
  warp_exchange(mask, &v, sizeof v, src, &out);
  return out;
}

/* The lane a shuffle reads (width-lane segments, as CUDA). */
inline int seg_lane(int lane, int target, int width)
{
  const int base = lane & ~(width - 1);
  return base + (target & (width - 1));
}

} // namespace gt_emu

#define threadIdx (::gt_emu::thread_idx())
#define blockIdx (::gt_emu::block_idx())
#define blockDim (::gt_emu::block_dim())
#define gridDim (::gt_emu::grid_dim())

inline void __syncthreads() { gt_emu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { gt_emu::sync_warp(mask); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
  const int lane = (int)gt_emu::lane_id();
  return gt_emu::shfl(mask, v, gt_emu::seg_lane(lane, src, width));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
  const int lane = (int)gt_emu::lane_id();
  const int src = lane ^ lane_mask;
  /* a source outside the caller's segment gives the caller's own value */
  return gt_emu::shfl(mask, v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
  const int lane = (int)gt_emu::lane_id();
  const int src = lane + (int)delta;
  return gt_emu::shfl(mask, v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
  const int lane = (int)gt_emu::lane_id();
  const int src = lane - (int)delta;
  return gt_emu::shfl(mask, v, src >= (lane & ~(width - 1)) ? src : lane);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return gt_emu::warp_ballot(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return gt_emu::warp_ballot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred)
{
  return gt_emu::warp_ballot(mask, pred != 0) == mask;
}

/* Atomics: the fibers of a launch share one host thread and never switch
 * inside these, so plain read-modify-writes are atomic. */
template <typename T> inline T atomicAdd(T *p, T v)
{
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T> inline T atomicSub(T *p, T v)
{
  const T old = *p;
  *p = old - v;
  return old;
}
template <typename T> inline T atomicMax(T *p, T v)
{
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T> inline T atomicMin(T *p, T v)
{
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T> inline T atomicExch(T *p, T v)
{
  const T old = *p;
  *p = v;
  return old;
}
template <typename T> inline T atomicCAS(T *p, T compare, T v)
{
  const T old = *p;
  if (old == compare)
    *p = v;
  return old;
}

template <typename T> inline T __ldg(const T *p) { return *p; }

// ---- device math (host libm: the ulps of CUDA's are not emulated) --------------------------

inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float __int_as_float(int i)
{
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}
inline int __float_as_int(float f)
{
  int i;
  memcpy(&i, &f, sizeof i);
  return i;
}
inline float __uint_as_float(unsigned u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f)
{
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return u;
}

// ---- bf16 and fp16 storage types, with CUDA's conversions ---------------------------------

struct __nv_bfloat16 {
  unsigned short x;
};
struct __half {
  unsigned short x;
};

/* Round to nearest even; NaN gives the canonical quiet NaN 0x7fff. */
inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return __nv_bfloat16{0x7fff};
  const unsigned r = u + 0x7fffu + ((u >> 16) & 1u);
  return __nv_bfloat16{(unsigned short)(r >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.x << 16); }

/* fp32 -> fp16 to nearest even: subnormals, overflow to inf, NaN kept quiet. */
inline __half __float2half_rn(float f)
{
  const unsigned u = __float_as_uint(f);
  const unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
  const unsigned a = u & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: quiet, payload's top bits */
    return __half{(unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
  if (a >= 0x477ff000u) /* >= 65520 rounds to inf (and inf) */
    return __half{(unsigned short)(sign | 0x7c00u)};
  if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
    const float mag = __uint_as_float(a);
    /* adding 2^-1 * 2^-24 * 2^24... : scale so that the ulp (2^-24) is 1 */
    const float scaled = mag * 16777216.0f; /* exact */
    const float r = nearbyintf(scaled);      /* ties to even (default mode) */
    return __half{(unsigned short)(sign | (unsigned short)r)};
  }
  const unsigned exp = (a >> 23) - 127 + 15;
  const unsigned mant = a & 0x7fffffu;
  unsigned h = (exp << 10) | (mant >> 13);
  const unsigned rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    h++; /* may carry into the exponent: still right, up to inf */
  return __half{(unsigned short)(sign | h)};
}
inline float __half2float(__half h)
{
  const unsigned sign = (unsigned)(h.x & 0x8000u) << 16;
  const unsigned e = (h.x >> 10) & 0x1fu, m = h.x & 0x3ffu;
  if (e == 0) { /* zero or subnormal: m * 2^-24 */
    const float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (e == 31) /* inf or NaN */
    return __uint_as_float(sign | 0x7f800000u | (m << 13));
  return __uint_as_float(sign | ((e - 15 + 127) << 23) | (m << 13));
}

// ---- launches -------------------------------------------------------------------------------

/* As in cuda_launch.cuh, with the kernel expression kept for messages. */
template <typename... P, typename... A>
inline void gt_emu_launch_named(const char *text, void (*kernel)(P...), dim3 grid, dim3 block,
                                size_t smem_bytes, cudaStream_t stream, A &&...args)
{
  gt_emu::launch(text, grid, block, smem_bytes, stream, [&]() { kernel(args...); });
}
#define gt_cuda_launch(...) gt_emu_launch_named(#__VA_ARGS__, __VA_ARGS__)

#define GT_CUDA_DYNAMIC_SHARED(T, name) T *name = static_cast<T *>(::gt_emu::dynamic_shared())

// ---- cub --------------------------------------------------------------------------------------

namespace gt_emu {
/* keys_out, values_out = the pairs sorted by bits [begin_bit, end_bit) of
 * the key, stably. */
void radix_sort_pairs_u32(const uint32_t *keys_in, uint32_t *keys_out, const uint32_t *values_in,
                          uint32_t *values_out, int n, int begin_bit, int end_bit);
} // namespace gt_emu

namespace cub {
struct DeviceRadixSort {
  static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const uint32_t *keys_in,
                               uint32_t *keys_out, const uint32_t *values_in,
                               uint32_t *values_out, int n, int begin_bit = 0,
                               int end_bit = 32, cudaStream_t stream = nullptr)
  {
    (void)stream;
    if (!temp) {
      temp_bytes = 16;
      return cudaSuccess;
    }
    gt_emu::radix_sort_pairs_u32(keys_in, keys_out, values_in, values_out, n, begin_bit,
                                 end_bit);
    return cudaSuccess;
  }
};
} // namespace cub

#endif /* __cplusplus */

#endif /* GT_CUDA_EMU_H */
