/*
 * cuda_backend.h - the "cuda" backend's state and the pieces its files share
 * (internal to src/backend/cuda). Included by C (.c, gcc) and CUDA C (.cu,
 * nvcc) files alike: plain C declarations, C linkage, no mpi.h.
 *
 * Files:
 *   cuda_core.c            create/destroy, device memory (a caching
 *                          allocator), pinned host memory, streams, events,
 *                          copies, fills, scratch; the ops table
 *   cuda_gemm.c            linear forward/backward through cuBLASLt
 *   cuda_kernels.cu        cast, LayerNorm, GELU, RMSNorm, RoPE, SwiGLU,
 *                          embedding, cross-entropy, AdamW, sum/sumsq
 *                          reductions
 *   cuda_attention.cu      our own flash attention (tiled, online softmax) and
 *                          the one-row attention of decoding
 *   cuda_moe.cu            mixture of experts: routing, assignment to expert
 *                          rows, permutation, combination, router backward
 *   cuda_attention_cudnn.c attention through cuDNN's graph API
 *
 * Stream semantics: every op entry queues its work on the backend's compute
 * stream (gt_cuda_compute) and returns without waiting; a launch error is
 * returned at once, an error of the running kernel by a later call (at the
 * latest event_wait or sync), as backend.h says.
 */
#ifndef GT_CUDA_BACKEND_H
#define GT_CUDA_BACKEND_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "gridtrain/backend.h"
#include "gridtrain/error.h"

/* A stream of the cuda backend: what a gt_stream * points to. */
typedef struct gt_cuda_stream {
  cudaStream_t s;
} gt_cuda_stream;

/* An event of the cuda backend: what a gt_device_event * points to. */
typedef struct gt_cuda_event {
  cudaEvent_t e;
} gt_cuda_event;

typedef struct gt_cuda_alloc gt_cuda_alloc; /* cuda_core.c: the caching allocator */
typedef struct gt_cuda_gemm gt_cuda_gemm;   /* cuda_gemm.c: cuBLASLt handle, workspace */
typedef struct gt_cuda_cudnn gt_cuda_cudnn; /* cuda_attention_cudnn.c: handle, graphs */

typedef struct gt_cuda {
  int device;                 /* the CUDA device this rank drives */
  int sm_count;               /* multiprocessors (grid sizes) */
  int cc_major, cc_minor;     /* compute capability */
  gt_cuda_stream compute;     /* be->compute points here */
  gt_cuda_alloc *alloc;
  void *scratch;              /* device scratch (gt_cuda_scratch) */
  size_t scratch_bytes;
  gt_cuda_gemm *gemm;
  gt_cuda_cudnn *cudnn;       /* NULL: cuDNN attention unavailable */
  gt_attention_kind attention; /* [backend] attention (config_enums.h) */
  long attn_calls[2][2];      /* [cuDNN, ours][forward, backward]: calls so far */
  /* streams made by stream_create (the collectives' copy streams): a freed
   * block waits for work on each of them too */
  cudaStream_t *streams;
  size_t nstreams, streams_cap;
  char describe[256];         /* "GPU 0: NVIDIA H200 (sm_90, 139 GiB, PCI 0000:19:00.0)" */
  char name[128];             /* cudaDeviceProp.name: "NVIDIA H200" */
} gt_cuda;

static inline gt_cuda *gt_cuda_of(gt_backend *be) { return (gt_cuda *)be->impl; }
static inline cudaStream_t gt_cuda_compute(gt_backend *be) { return gt_cuda_of(be)->compute.s; }

/* ---- errors: every CUDA, cuBLAS and cuDNN call is checked -------------------
 * GT_ERR_DEVICE with the failing call, its status name and text, file:line. */
int gt_cuda_error(int status, const char *call, const char *file, int line, const char *func);
int gt_cublas_error(int status, const char *call, const char *file, int line,
                    const char *func);
int gt_cudnn_error(int status, const char *call, const char *file, int line, const char *func);

#define GT_CALL_CUDA(expr)                                                    \
  do {                                                                        \
    cudaError_t gt_cuda_status_ = (expr);                                     \
    if (gt_cuda_status_ != cudaSuccess)                                       \
      return gt_cuda_error((int)gt_cuda_status_, #expr, __FILE__, __LINE__,   \
                           __func__);                                         \
  } while (0)

/* After a kernel launch <<<...>>>: a bad configuration or a sticky error. */
#define GT_CUDA_LAUNCHED(what) GT_CALL_CUDA((cudaGetLastError()))

#define GT_CALL_CUBLAS(expr)                                                  \
  do {                                                                        \
    int gt_cublas_status_ = (int)(expr);                                      \
    if (gt_cublas_status_ != 0)                                               \
      return gt_cublas_error(gt_cublas_status_, #expr, __FILE__, __LINE__,    \
                             __func__);                                       \
  } while (0)

#define GT_CALL_CUDNN(expr)                                                   \
  do {                                                                        \
    int gt_cudnn_status_ = (int)(expr);                                       \
    if (gt_cudnn_status_ != 0)                                                \
      return gt_cudnn_error(gt_cudnn_status_, #expr, __FILE__, __LINE__,      \
                            __func__);                                        \
  } while (0)

/* ---- scratch ----------------------------------------------------------------
 * *ptr = device memory of at least `bytes`, for work queued on the compute
 * stream by the caller's op. It stays valid until the next gt_cuda_scratch
 * call; because everything using it is ordered on the compute stream, the
 * next op may reuse it without a wait. Growing it waits for the compute
 * stream once, before the old buffer is freed. Host-side, not collective. */
int gt_cuda_scratch(gt_backend *be, size_t bytes, void **ptr);

/* ---- the ops of each file (signatures as in gt_backend_ops) ------------------ */
/* cuda_gemm.c */
int gt_cuda_gemm_init(gt_backend *be);
void gt_cuda_gemm_fini(gt_backend *be);
int gt_cuda_linear_forward(gt_backend *be, gt_dtype dt, void *out, const void *in,
                           const void *w, const void *bias, const void *residual, int64_t N,
                           int64_t C, int64_t OC);
int gt_cuda_linear_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *dbias,
                            const void *dout, const void *in, const void *w, int64_t N,
                            int64_t C, int64_t OC);

/* cuda_kernels.cu */
int gt_cuda_cast(gt_backend *be, gt_dtype dst_t, void *dst, gt_dtype src_t, const void *src,
                 size_t n);
int gt_cuda_layernorm_forward(gt_backend *be, gt_dtype dt, void *out, float *mean, float *rstd,
                              const void *in, const void *w, const void *b, int64_t N,
                              int64_t C);
int gt_cuda_layernorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *db,
                               const void *dout, const void *in, const void *w,
                               const float *mean, const float *rstd, int64_t N, int64_t C);
int gt_cuda_gelu_forward(gt_backend *be, gt_dtype dt, void *out, const void *in, size_t n);
int gt_cuda_gelu_backward(gt_backend *be, gt_dtype dt, void *din, const void *in,
                          const void *dout, size_t n);
int gt_cuda_rmsnorm_forward(gt_backend *be, gt_dtype dt, void *out, float *rstd,
                            const void *in, const void *w, float eps, int64_t N, int64_t C);
int gt_cuda_rmsnorm_backward(gt_backend *be, gt_dtype dt, void *din, float *dw,
                             const void *dout, const void *in, const void *w,
                             const float *rstd, int64_t N, int64_t C);
int gt_cuda_rope_forward(gt_backend *be, gt_dtype dt, void *x, const float *cos,
                         const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                         int64_t hs, int64_t pos0);
int gt_cuda_rope_backward(gt_backend *be, gt_dtype dt, void *dx, const float *cos,
                          const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                          int64_t hs, int64_t pos0);
int gt_cuda_swiglu_forward(gt_backend *be, gt_dtype dt, void *out, const void *h, int64_t N,
                           int64_t F);
int gt_cuda_swiglu_backward(gt_backend *be, gt_dtype dt, void *dh, const void *dout,
                            const void *h, int64_t N, int64_t F);
int gt_cuda_embedding_forward(gt_backend *be, gt_dtype dt, void *out, const int32_t *tokens,
                              const void *wte, const void *wpe, int64_t B, int64_t T,
                              int64_t C, int64_t v0, int64_t nv);
int gt_cuda_embedding_backward(gt_backend *be, gt_dtype dt, float *dwte, float *dwpe,
                               const void *dout, const int32_t *tokens, int64_t B, int64_t T,
                               int64_t C, int64_t v0, int64_t nv);
int gt_cuda_xent_partial(gt_backend *be, gt_dtype dt, float *stats, const void *logits,
                         const int32_t *targets, int64_t N, int64_t nv, int64_t ld,
                         int64_t v0);
int gt_cuda_xent_finish(gt_backend *be, gt_dtype dt, float *losses, void *logits,
                        const float *stats, int P, const int32_t *targets, int64_t N,
                        int64_t nv, int64_t ld, int64_t v0, float dlogit_scale);
int gt_cuda_adamw(gt_backend *be, float *p, const float *g, float *m, float *v, void *compute,
                  gt_dtype compute_t, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float bc1, float bc2, float grad_mult);
int gt_cuda_sum_add(gt_backend *be, double *acc, const float *x, size_t n);
int gt_cuda_axpby(gt_backend *be, float *y, float a, const float *x, float b, size_t n);
int gt_cuda_sumsq_add(gt_backend *be, double *acc, const float *x, size_t n);

/* cuda_moe.cu */
int gt_cuda_moe_route(gt_backend *be, float *probs, float *lse, int32_t *sel, float *gate,
                      const float *logits, int64_t N, int64_t E, int64_t k);
int gt_cuda_moe_assign(gt_backend *be, int32_t *pos, int32_t *load, int32_t *kept,
                       const int32_t *sel, int64_t N, int64_t k, int64_t E, int64_t capacity);
int gt_cuda_moe_permute(gt_backend *be, gt_dtype dt, void *xp, const void *x, const int32_t *pos,
                        int64_t N, int64_t k, int64_t C);
int gt_cuda_moe_permute_backward(gt_backend *be, gt_dtype dt, void *dx, const void *dxp,
                                 const float *extra, const int32_t *pos, int64_t N, int64_t k,
                                 int64_t C);
int gt_cuda_moe_combine(gt_backend *be, gt_dtype dt, void *out, const void *base, const void *y,
                        const float *gate, const int32_t *pos, int64_t N, int64_t k, int64_t C);
int gt_cuda_moe_combine_backward(gt_backend *be, gt_dtype dt, void *dy, float *dgate,
                                 const void *dout, const void *y, const float *gate,
                                 const int32_t *pos, int64_t N, int64_t k, int64_t C);
int gt_cuda_moe_route_backward(gt_backend *be, float *dlogits, const float *dgate,
                               const float *probs, const float *lse, const int32_t *sel,
                               const float *gate, const int32_t *load, int64_t N, int64_t E,
                               int64_t k, float aux_scale, float z_scale);

/* cuda_attention.cu: our own kernels */
int gt_cuda_attention_forward_own(gt_backend *be, gt_dtype dt, void *out, float *lse,
                                  const void *qkv, int64_t B, int64_t T, int64_t H,
                                  int64_t Hkv, int64_t hs);
int gt_cuda_attention_backward_own(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                                   const void *qkv, const void *out, const float *lse,
                                   int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hs);
int gt_cuda_attention_decode(gt_backend *be, gt_dtype dt, void *out, const void *qkv,
                             int64_t T, int64_t H, int64_t Hkv, int64_t hs);

/* cuda_attention_cudnn.c: cuDNN graphs (built per shape and cached). init
 * loads cuDNN and makes its handle; it returns GT_SUCCESS with be's cudnn
 * left NULL when this build has no cuDNN, and an error when cuDNN cannot
 * start (cuda_core.c then warns and runs our own kernels). fast_backward:
 * the backward that sums dQ with atomics (attention = cudnn-fast), else the
 * deterministic one. The forward/backward entries set *ran = false, and
 * return GT_SUCCESS, where cuDNN does not take the call (no handle, fp32,
 * unaligned tensors, no engine for the shape: warned once per shape;
 * grouped-query attention, Hkv < H, off compute capability 9.x); the caller
 * then runs our own kernels. gt_cuda_cudnn_takes_gqa: whether be sends
 * grouped-query shapes to cuDNN (false without a cuDNN handle). */
bool gt_cuda_cudnn_built(void);
int gt_cuda_cudnn_init(gt_backend *be, bool fast_backward);
void gt_cuda_cudnn_fini(gt_backend *be);
bool gt_cuda_cudnn_takes_gqa(gt_backend *be);
int gt_cuda_attention_forward_cudnn(gt_backend *be, gt_dtype dt, void *out, float *lse,
                                    const void *qkv, int64_t B, int64_t T, int64_t H,
                                    int64_t Hkv, int64_t hs, bool *ran);
int gt_cuda_attention_backward_cudnn(gt_backend *be, gt_dtype dt, void *dqkv,
                                     const void *dout, const void *qkv, const void *out,
                                     const float *lse, int64_t B, int64_t T, int64_t H,
                                     int64_t Hkv, int64_t hs, bool *ran);
/* One line for the run's log: the cuDNN version and, per direction, the shape
 * and engine (global index, knobs) of the last attention plan built. The
 * string belongs to be (valid until gt_cuda_cudnn_fini). */
const char *gt_cuda_cudnn_engine_info(gt_backend *be);

#ifdef __cplusplus
}
#endif

#endif /* GT_CUDA_BACKEND_H */
