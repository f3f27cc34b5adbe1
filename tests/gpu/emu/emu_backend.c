/*
 * emu_backend.c - what the CUDA emulator (cuda_emu.h) puts in place of the
 * parts of the cuda backend that are not our own code: the device queries
 * of cuda_info.cu, and the linear layer, which is cuBLASLt on a GPU and
 * here cpu-ref's loops on the emulated device's (host) memory. The
 * emulation test checks our kernels; a linear op here checks nothing of
 * cuBLASLt, and test_cuda_ops leaves the linear checks out under the
 * emulator. The rest of the backend (cuda_core.c, cuda_kernels.cu,
 * cuda_attention.cu, cuda_moe.cu) is the real code.
 */
#include <stdio.h>

#include "cpu/cpu_backends.h"
#include "cuda_backend.h"
#include "cuda_dl.h"
#include "gridtrain/cuda_info.h"

bool gt_cuda_built(void) { return true; }

int gt_cuda_device_count(void) { return 1; }

void gt_cuda_describe(char *buf, size_t size)
{
  snprintf(buf, size, "CUDA emulator: the cuda backend's kernels as host C++ (tests/gpu/emu), "
           "1 device with 2 multiprocessors");
}

int gt_cuda_gemm_init(gt_backend *be)
{
  (void)be;
  return GT_SUCCESS;
}

void gt_cuda_gemm_fini(gt_backend *be) { (void)be; }

int gt_cuda_linear_forward(gt_backend *be, gt_dtype dt, void *out, const void *in,
                           const void *w, const void *bias, const void *residual, int64_t N,
                           int64_t C, int64_t OC)
{
  return gt_ref_kernels.linear_forward(be, dt, out, in, w, bias, residual, N, C, OC);
}

int gt_cuda_linear_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *dbias,
                            const void *dout, const void *in, const void *w, int64_t N,
                            int64_t C, int64_t OC)
{
  return gt_ref_kernels.linear_backward(be, dt, din, dw, dbias, dout, in, w, N, C, OC);
}

// ---- the run-time loader (cuda_dl.h): nothing to load under the emulator

int gt_cuda_dl_load(gt_dl_lib lib)
{
  (void)lib;
  return GT_SUCCESS;
}

const char *gt_cuda_dl_describe(gt_dl_lib lib)
{
  (void)lib;
  return "not loaded: the CUDA emulator emulates no CUDA library";
}
