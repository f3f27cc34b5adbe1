/*
 * cuda_info.cu - device query through the CUDA runtime (built by nvcc when
 * configure finds CUDA). Plain C linkage; no mpi.h here.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>

extern "C" {
#include "gridtrain/cuda_info.h"
}

extern "C" bool gt_cuda_built(void) { return true; }

extern "C" int gt_cuda_device_count(void)
{
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* clear the sticky error */
    return 0;
  }
  return n;
}

extern "C" void gt_cuda_describe(char *buf, size_t size)
{
  int rt = 0, n = 0;
  cudaError_t err = cudaRuntimeGetVersion(&rt);
  if (err != cudaSuccess) {
    snprintf(buf, size, "CUDA runtime unusable: %s", cudaGetErrorString(err));
    cudaGetLastError();
    return;
  }
  err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    snprintf(buf, size, "CUDA runtime %d.%d, 0 devices: %s", rt / 1000, (rt % 1000) / 10,
             cudaGetErrorString(err));
    cudaGetLastError();
    return;
  }
  cudaDeviceProp prop;
  if (n > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    snprintf(buf, size, "CUDA runtime %d.%d, %d device%s: %s (sm_%d%d, %.0f GiB)", rt / 1000,
             (rt % 1000) / 10, n, n == 1 ? "" : "s", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1 << 30));
  else
    snprintf(buf, size, "CUDA runtime %d.%d, %d devices", rt / 1000, (rt % 1000) / 10, n);
}
