/*
 * gridtrain/cuda_info.h - what the CUDA runtime sees, through a plain C
 * interface (no mpi.h, no CUDA headers), so any file may ask.
 */
#ifndef GRIDTRAIN_CUDA_INFO_H
#define GRIDTRAIN_CUDA_INFO_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/backend.h"

/* True when this build includes CUDA (configure found the toolkit). */
bool gt_cuda_built(void);

/* Number of usable CUDA devices; 0 when the runtime finds none or CUDA is
 * not built. Not collective. */
int gt_cuda_device_count(void);

/* One line about the CUDA runtime and devices ("CUDA runtime 13.0, 0
 * devices: no CUDA-capable device is detected"). */
void gt_cuda_describe(char *buf, size_t size);

/* How a cuda backend has run attention so far: the calls cuDNN ran and
 * those gridtrain's own kernels ran (fp32, tensors cuDNN cannot take, a
 * shape with no cuDNN engine, attention = own), per direction; and whether
 * cuDNN started. All zero for any other backend. Not collective. */
typedef struct {
  long cudnn_forward, cudnn_backward, own_forward, own_backward;
  bool cudnn_built;  /* this build has cuDNN */
  bool cudnn_loaded; /* ... and this backend started it */
  bool cudnn_gqa;    /* ... and sends it grouped-query shapes (Hkv < H): compute capability 9.x */
} gt_cuda_attention_stats;
void gt_cuda_attention_counts(gt_backend *be, gt_cuda_attention_stats *st);

#endif /* GRIDTRAIN_CUDA_INFO_H */
