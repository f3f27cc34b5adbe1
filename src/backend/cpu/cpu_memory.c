/*
 * cpu_memory.c - host memory for the cpu and cpu-ref backends.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_backends.h"
#include "gridtrain/error.h"

int gt_host_alloc(gt_backend *be, size_t bytes, void **ptr)
{
  (void)be;
  void *p = NULL;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  int rc = posix_memalign(&p, 64, rounded ? rounded : 64);
  GT_CHECK(rc == 0, GT_ERR_SYSTEM, "out of memory allocating %zu bytes", bytes);
  *ptr = p;
  return GT_SUCCESS;
}

int gt_host_free(gt_backend *be, void *ptr)
{
  (void)be;
  free(ptr);
  return GT_SUCCESS;
}

/* Large buffers (gradients) are zeroed by all threads: first touch and
 * bandwidth both favour it. */
int gt_host_zero(gt_backend *be, void *ptr, size_t bytes)
{
  (void)be;
  const size_t block = (size_t)1 << 20;
  if (bytes < 4 * block) {
    memset(ptr, 0, bytes);
    return GT_SUCCESS;
  }
  size_t nblocks = (bytes + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < nblocks; b++) {
    size_t off = b * block;
    memset((char *)ptr + off, 0, bytes - off < block ? bytes - off : block);
  }
  return GT_SUCCESS;
}

int gt_host_copy(gt_backend *be, void *dst, const void *src, size_t bytes)
{
  (void)be;
  if (dst != src && bytes)
    memcpy(dst, src, bytes);
  return GT_SUCCESS;
}

int gt_host_sync(gt_backend *be)
{
  (void)be;
  return GT_SUCCESS;
}
