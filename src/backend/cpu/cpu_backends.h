/*
 * cpu_backends.h - the host backends' tables and the pieces they share
 * (internal to src/backend).
 *
 * The kernels of "cpu" (cpu.c, cpu_attention.c) and "cpu-ref" (cpu_ref.c,
 * cpu_ref_attention.c), and the mixture-of-experts ops both share
 * (cpu_moe.c), run synchronously on the calling thread. The stream
 * layer (cpu_stream.c) gives both tables their memory, stream and event
 * entries; for the test modes it wraps the "cpu" kernels so that they run
 * later on a worker thread (cpu-async) or between memory-protection flips
 * (cpu-guard).
 */
#ifndef GT_CPU_BACKENDS_H
#define GT_CPU_BACKENDS_H

#include "gridtrain/backend.h"

/* Kernel tables: every entry from `cast` on (copies, fills and memory come
 * from the stream layer and are NULL here). */
extern const gt_backend_ops gt_cpu_kernels; /* cpu.c: OpenBLAS + OpenMP */
extern const gt_backend_ops gt_ref_kernels; /* cpu_ref.c: plain loops */

/* Causal attention of the fast backend (cpu_attention.c) and of the
 * reference (cpu_ref_attention.c); contract in backend.h. */
int gt_cpu_attention_forward(gt_backend *be, gt_dtype dt, void *out, float *lse,
                             const void *qkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                             int64_t hs);
int gt_cpu_attention_backward(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse, int64_t B,
                              int64_t T, int64_t H, int64_t Hkv, int64_t hs);
int gt_cpu_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv, int64_t T,
                            int64_t H, int64_t Hkv, int64_t hs);
int gt_ref_attention_forward(gt_backend *be, gt_dtype dt, void *out, float *lse,
                             const void *qkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                             int64_t hs);
int gt_ref_attention_backward(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse, int64_t B,
                              int64_t T, int64_t H, int64_t Hkv, int64_t hs);
int gt_ref_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv, int64_t T,
                            int64_t H, int64_t Hkv, int64_t hs);

/* The mixture-of-experts ops (cpu_moe.c), one implementation for both
 * tables: they are plain loops already, deterministic for any thread
 * count; contract in backend.h. */
int gt_cpu_moe_route(gt_backend *be, float *probs, float *lse, int32_t *sel, float *gate,
                     const float *logits, int64_t N, int64_t E, int64_t k);
int gt_cpu_moe_assign(gt_backend *be, int32_t *pos, int32_t *load, int32_t *kept,
                      const int32_t *sel, int64_t N, int64_t k, int64_t E, int64_t capacity);
int gt_cpu_moe_permute(gt_backend *be, gt_dtype dt, void *xp, const void *x, const int32_t *pos,
                       int64_t N, int64_t k, int64_t C);
int gt_cpu_moe_permute_backward(gt_backend *be, gt_dtype dt, void *dx, const void *dxp,
                                const float *extra, const int32_t *pos, int64_t N, int64_t k,
                                int64_t C);
int gt_cpu_moe_combine(gt_backend *be, gt_dtype dt, void *out, const void *base, const void *y,
                       const float *gate, const int32_t *pos, int64_t N, int64_t k, int64_t C);
int gt_cpu_moe_combine_backward(gt_backend *be, gt_dtype dt, void *dy, float *dgate,
                                const void *dout, const void *y, const float *gate,
                                const int32_t *pos, int64_t N, int64_t k, int64_t C);
int gt_cpu_moe_route_backward(gt_backend *be, float *dlogits, const float *dgate,
                              const float *probs, const float *lse, const int32_t *sel,
                              const float *gate, const int32_t *load, int64_t N, int64_t E,
                              int64_t k, float aux_scale, float z_scale);

/* bf16 matrix products through oneDNN (cpu_dnnl.c): C(M,N) = op(A) op(B)
 * (+ bias(N)) (+ C when accumulate), row-major, A, B and bias bf16, C bf16
 * or fp32, fp32 accumulation and one rounding. gt_dnnl_bf16_enabled: built
 * with oneDNN and not turned off by GT_CPU_BF16_GEMM=sgemm. */
bool gt_dnnl_bf16_enabled(void);
int gt_dnnl_matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                        const void *B, const void *bias, bool accumulate, void *C,
                        gt_dtype c_type);
const char *gt_dnnl_info(void); /* "oneDNN 2.6.3" or "no oneDNN" */

/* Prepare the fast CPU kernels on the calling thread (thread counts of
 * OpenMP and BLAS). cpu-async calls it on each worker thread too. */
int gt_cpu_setup(gt_backend *be);

/* ---- the stream layer (cpu_stream.c) ---- */
typedef enum { GT_CPU_SYNC = 0, GT_CPU_ASYNC, GT_CPU_GUARD } gt_cpu_mode;

/* Fill be (name, table, compute stream, impl) for a host backend: kernels
 * from `kernels`, run as `mode` says. delay_us: cpu-async's delay before
 * each op runs. */
int gt_cpu_backend_init(gt_backend *be, const gt_backend_ops *kernels, gt_cpu_mode mode,
                        double delay_us);

/* Bytes of device memory (the backend's alloc) allocated now and at most. */
void gt_cpu_memory_stats(gt_backend *be, size_t *in_use, size_t *peak);
void gt_cpu_memory_rewind(gt_backend *be, size_t peak); /* gt_backend_device_memory_rewind */

/* Wait for all work and release what gt_cpu_backend_init made. */
int gt_cpu_backend_fini(gt_backend *be);

#endif /* GT_CPU_BACKENDS_H */
