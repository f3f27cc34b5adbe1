/*
 * cuda_info_none.c - the CUDA queries in a build without CUDA.
 */
#include <stdio.h>
#include <string.h>

#include "gridtrain/cuda_info.h"

bool gt_cuda_built(void) { return false; }
int gt_cuda_device_count(void) { return 0; }
void gt_cuda_describe(char *buf, size_t size)
{
  snprintf(buf, size, "not built (configure found no CUDA toolkit; use --with-cuda=DIR)");
}

// ---- the backend entry points (cuda_entry.h): a build without CUDA has none

#include "gridtrain/error.h"
#include "cuda_entry.h"

int gt_cuda_backend_init(gt_backend *be, int local_rank, gt_attention_kind attention)
{
  (void)be;
  (void)local_rank;
  (void)attention;
  return GT_ERROR(GT_ERR_INPUT, "[backend] device = cuda: this gridtrain was built without "
                  "CUDA; reconfigure with --with-cuda=DIR (or use device = cpu)");
}

int gt_cuda_backend_fini(gt_backend *be)
{
  (void)be;
  return GT_SUCCESS;
}

const char *gt_cuda_backend_describe(gt_backend *be)
{
  (void)be;
  return "no CUDA in this build";
}

const char *gt_cuda_backend_name(gt_backend *be)
{
  (void)be;
  return "";
}

void gt_cuda_attention_counts(gt_backend *be, gt_cuda_attention_stats *st)
{
  (void)be;
  memset(st, 0, sizeof *st);
}

void gt_cuda_memory_stats(gt_backend *be, size_t *in_use, size_t *peak, size_t *cached)
{
  (void)be;
  *in_use = *peak = *cached = 0;
}

void gt_cuda_memory_rewind(gt_backend *be, size_t peak)
{
  (void)be;
  (void)peak;
}
