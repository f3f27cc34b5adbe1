/*
 * cuda_entry.h - what src/backend/backend.c calls of the "cuda" backend
 * (internal to src/backend). Plain C without CUDA headers, so that the
 * dispatcher compiles in every build; cuda_core.c implements it, and
 * cuda_info_none.c where the build has no CUDA (each call then fails with the
 * error that says how to rebuild).
 */
#ifndef GT_CUDA_ENTRY_H
#define GT_CUDA_ENTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/backend.h"

/* Fill be for "cuda": pick the GPU of node-local rank local_rank (< 0: from
 * the launcher's environment, binding.h), create its streams, cuBLASLt and
 * (attention cudnn or cudnn-fast) cuDNN. attention: [backend] attention, or
 * GT_ATTENTION_DEFAULT for GT_CUDA_ATTENTION from the environment, else
 * cudnn. On failure be may hold
 * partial state: call gt_cuda_backend_fini. */
int gt_cuda_backend_init(gt_backend *be, int local_rank, gt_attention_kind attention);

/* Wait for the device and release everything (safe on partial state). */
int gt_cuda_backend_fini(gt_backend *be);

/* "GPU 0 of 1: NVIDIA H200 (sm_90, 139 GiB, PCI 0000:19:00.0)". */
const char *gt_cuda_backend_describe(gt_backend *be);

/* The GPU's name as the runtime gives it: "NVIDIA H200". */
const char *gt_cuda_backend_name(gt_backend *be);

/* Bytes of device memory allocated through be now, at most so far, and kept
 * in the allocator's cache. */
void gt_cuda_memory_stats(gt_backend *be, size_t *in_use, size_t *peak, size_t *cached);

/* Lower the high-water mark to peak, or to what is in use now where that is
 * more (gt_backend_device_memory_rewind). */
void gt_cuda_memory_rewind(gt_backend *be, size_t peak);

/* NCCL (cuda_nccl.c; cuda_nccl_none.c in builds without it): gridtrain/nccl.h. */
#include "gridtrain/nccl.h"

#endif /* GT_CUDA_ENTRY_H */
