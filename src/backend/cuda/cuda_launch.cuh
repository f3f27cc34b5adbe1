/*
 * cuda_launch.cuh - kernel launches of the cuda backend's .cu files, written
 * so that the same source builds twice: with nvcc for the GPU, and with a host
 * C++ compiler for the kernel emulation test (tests/gpu/emu), which defines
 * GT_CUDA_EMU and supplies its own CUDA headers.
 *
 *   gt_cuda_launch(kernel, grid, block, smem_bytes, stream, args...);
 *
 * is kernel<<<grid, block, smem_bytes, stream>>>(args...): queued on stream,
 * no wait; a bad configuration is reported by the next cudaGetLastError()
 * (GT_CUDA_LAUNCHED). kernel may be a template-id (ln_forward_kernel<T, W, 32>).
 * Under GT_CUDA_EMU the launch runs every thread block on the host at once
 * (tests/gpu/emu/cuda_emu.h).
 *
 * Dynamic shared memory (smem_bytes > 0) is declared in a kernel with
 * GT_CUDA_DYNAMIC_SHARED(T, name): `extern __shared__ T name[]` on the GPU.
 */
#ifndef GT_CUDA_LAUNCH_CUH
#define GT_CUDA_LAUNCH_CUH

#include <cstddef>
#include <utility>

#ifdef GT_CUDA_EMU
/* gt_cuda_launch and GT_CUDA_DYNAMIC_SHARED come from the emulator's headers */
#include "cuda_emu.h"
#else
#include <cuda_runtime.h>

template <typename... P, typename... A>
inline void gt_cuda_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes,
                           cudaStream_t stream, A &&...args)
{
  kernel<<<grid, block, smem_bytes, stream>>>(std::forward<A>(args)...);
}

#define GT_CUDA_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

#endif /* GT_CUDA_LAUNCH_CUH */
