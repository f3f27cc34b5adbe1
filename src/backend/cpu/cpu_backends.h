/*
 * cpu_backends.h - the two host backends' tables and the host memory
 * functions they share (internal to src/backend).
 */
#ifndef GT_CPU_BACKENDS_H
#define GT_CPU_BACKENDS_H

#include "gridtrain/backend.h"

extern const gt_backend_ops gt_cpu_ops;     /* cpu.c: OpenBLAS + OpenMP */
extern const gt_backend_ops gt_cpu_ref_ops; /* cpu_ref.c: plain loops */

/* Host memory, shared by both tables (cpu_memory.c). */
int gt_host_alloc(gt_backend *be, size_t bytes, void **ptr);
int gt_host_free(gt_backend *be, void *ptr);
int gt_host_zero(gt_backend *be, void *ptr, size_t bytes);
int gt_host_copy(gt_backend *be, void *dst, const void *src, size_t bytes);
int gt_host_sync(gt_backend *be);

/* Causal attention of the fast backend (cpu_attention.c). */
int gt_cpu_attention_forward(gt_backend *be, float *out, float *att, const float *qkv, int B,
                             int T, int H, int hs);
int gt_cpu_attention_backward(gt_backend *be, float *dqkv, float *datt, const float *dout,
                              const float *qkv, const float *att, int B, int T, int H, int hs);

/* Prepare the fast CPU backend (thread counts of OpenMP and BLAS). */
int gt_cpu_setup(gt_backend *be);

#endif /* GT_CPU_BACKENDS_H */
