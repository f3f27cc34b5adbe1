/*
 * cuda_attention_nocudnn.c - the cuDNN attention entries in a CUDA build
 * that configure built without cuDNN: there is no cuDNN handle, and the
 * backend runs our own attention kernels (every call returns *ran = false).
 */
#include "cuda_backend.h"

bool gt_cuda_cudnn_built(void) { return false; }

int gt_cuda_cudnn_init(gt_backend *be, bool fast_backward)
{
  (void)fast_backward;
  gt_cuda_of(be)->cudnn = NULL;
  return GT_SUCCESS;
}

void gt_cuda_cudnn_fini(gt_backend *be) { (void)be; }

bool gt_cuda_cudnn_takes_gqa(gt_backend *be)
{
  (void)be;
  return false;
}

const char *gt_cuda_cudnn_engine_info(gt_backend *be)
{
  (void)be;
  return "no cuDNN in this build (configure --with-cudnn=DIR)";
}

int gt_cuda_attention_forward_cudnn(gt_backend *be, gt_dtype dt, void *out, float *lse,
                                    const void *qkv, int64_t B, int64_t T, int64_t H,
                                    int64_t Hkv, int64_t hs, bool *ran)
{
  (void)be, (void)dt, (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)H, (void)Hkv,
      (void)hs;
  *ran = false;
  return GT_SUCCESS;
}

int gt_cuda_attention_backward_cudnn(gt_backend *be, gt_dtype dt, void *dqkv,
                                     const void *dout, const void *qkv, const void *out,
                                     const float *lse, int64_t B, int64_t T, int64_t H,
                                     int64_t Hkv, int64_t hs, bool *ran)
{
  (void)be, (void)dt, (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)B,
      (void)T, (void)H, (void)Hkv, (void)hs;
  *ran = false;
  return GT_SUCCESS;
}
