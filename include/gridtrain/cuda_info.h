/*
 * gridtrain/cuda_info.h - what the CUDA runtime sees, through a plain C
 * interface (no mpi.h, no CUDA headers), so any file may ask.
 */
#ifndef GRIDTRAIN_CUDA_INFO_H
#define GRIDTRAIN_CUDA_INFO_H

#include <stdbool.h>
#include <stddef.h>

/* True when this build includes CUDA (configure found the toolkit). */
bool gt_cuda_built(void);

/* Number of usable CUDA devices; 0 when the runtime finds none or CUDA is
 * not built. Not collective. */
int gt_cuda_device_count(void);

/* One line about the CUDA runtime and devices ("CUDA runtime 13.0, 0
 * devices: no CUDA-capable device is detected"). */
void gt_cuda_describe(char *buf, size_t size);

#endif /* GRIDTRAIN_CUDA_INFO_H */
