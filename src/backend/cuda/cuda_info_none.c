/*
 * cuda_info_none.c - the CUDA queries in a build without CUDA.
 */
#include <stdio.h>

#include "gridtrain/cuda_info.h"

bool gt_cuda_built(void) { return false; }
int gt_cuda_device_count(void) { return 0; }
void gt_cuda_describe(char *buf, size_t size)
{
  snprintf(buf, size, "not built (configure found no CUDA toolkit; use --with-cuda=DIR)");
}
