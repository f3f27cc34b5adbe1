/*
 * gridtrain/backend.h - the compute backend interface.
 *
 * A backend is a table of functions over memory that lives on its device
 * (host memory for "cpu", GPU memory for "cuda"). Model code allocates through
 * the table, moves data with upload/download, and calls the kernels; it never
 * tests which backend it runs on. Backends:
 *
 *   "cpu"      OpenBLAS sgemm + OpenMP, fused where it pays (the default)
 *   "cpu-ref"  plain loops, double accumulators: the reference that tests
 *              compare "cpu" (and later "cuda") against; slow
 *   "cuda"     CUDA C kernels + cuBLAS + cuDNN (a later version)
 *
 * Conventions for every kernel:
 *   - matrices are row-major; shapes are noted as (rows, cols);
 *   - "N" is the number of rows (tokens: B*T), "C" the width;
 *   - outputs marked "+=" accumulate into what is there (gradient buffers are
 *     zeroed once per step and accumulate over micro-batches); outputs marked
 *     "=" are overwritten;
 *   - all functions return a gt_err status; none is collective.
 */
#ifndef GRIDTRAIN_BACKEND_H
#define GRIDTRAIN_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/tensor.h"

typedef struct gt_backend gt_backend;

typedef struct gt_backend_ops {
  /* ---- memory (device pointers) ---- */
  int (*alloc)(gt_backend *be, size_t bytes, void **ptr); /* 64-byte aligned */
  int (*free)(gt_backend *be, void *ptr);
  int (*zero)(gt_backend *be, void *ptr, size_t bytes);
  int (*upload)(gt_backend *be, void *dst, const void *host_src, size_t bytes);
  int (*download)(gt_backend *be, void *host_dst, const void *src, size_t bytes);
  int (*copy)(gt_backend *be, void *dst, const void *src, size_t bytes);
  int (*sync)(gt_backend *be); /* wait for queued work (no-op on the CPU) */

  /* ---- dense algebra ---- */
  /* c(m,n) = alpha * op(a) op(b) + beta * c, op = transpose when ta/tb. */
  int (*matmul)(gt_backend *be, bool ta, bool tb, int m, int n, int k, float alpha,
                const float *a, int lda, const float *b, int ldb, float beta, float *c,
                int ldc);
  /* out(N,OC) = in(N,C) w(OC,C)^T + bias(OC) + residual(N,OC); bias and
   * residual may be NULL; residual must not alias out. */
  int (*linear_forward)(gt_backend *be, float *out, const float *in, const float *w,
                        const float *bias, const float *residual, int N, int C, int OC);
  /* din(N,C) = dout w (skipped when din is NULL); dw(OC,C) += dout^T in;
   * dbias(OC) += column sums of dout (skipped when NULL). */
  int (*linear_backward)(gt_backend *be, float *din, float *dw, float *dbias,
                         const float *dout, const float *in, const float *w, int N,
                         int C, int OC);

  /* ---- normalisation and activations ---- */
  /* out = (in - mean) * rstd * w + b per row, eps 1e-5; mean, rstd (N) "=". */
  int (*layernorm_forward)(gt_backend *be, float *out, float *mean, float *rstd,
                           const float *in, const float *w, const float *b, int N, int C);
  /* din(N,C) +=, dw(C) +=, db(C) += */
  int (*layernorm_backward)(gt_backend *be, float *din, float *dw, float *db,
                            const float *dout, const float *in, const float *w,
                            const float *mean, const float *rstd, int N, int C);
  /* GELU, tanh approximation (GPT-2). out = gelu(in), n elements. */
  int (*gelu_forward)(gt_backend *be, float *out, const float *in, size_t n);
  /* din = gelu'(in) * dout ("="). */
  int (*gelu_backward)(gt_backend *be, float *din, const float *in, const float *dout,
                       size_t n);

  /* ---- attention ---- */
  /* Causal self-attention over H heads of size hs. qkv (B,T,3,H,hs) holds
   * q, k, v; out (B,T,H*hs) "="; att (B,H,T,T) "=" keeps the softmax
   * probabilities for backward (entries above the diagonal are zero).
   * Scores are scaled by 1/sqrt(hs). */
  int (*attention_forward)(gt_backend *be, float *out, float *att, const float *qkv,
                           int B, int T, int H, int hs);
  /* dqkv (B,T,3,H,hs) "="; datt (B,H,T,T) is scratch. */
  int (*attention_backward)(gt_backend *be, float *dqkv, float *datt, const float *dout,
                            const float *qkv, const float *att, int B, int T, int H,
                            int hs);

  /* ---- embeddings and loss (vocabulary-parallel) ----
   * A rank may hold only the rows [v0, v0 + nv) of the token embedding
   * (tensor parallelism splits the vocabulary); with one shard v0 = 0 and
   * nv = V. */
  /* out(B*T,C) "=" wte[tokens - v0] for tokens in [v0, v0 + nv), 0 for other
   * tokens, plus wpe[t] when wpe is not NULL. tokens (B,T) int32 on the
   * device; wte holds the nv rows of this shard. */
  int (*embedding_forward)(gt_backend *be, float *out, const int32_t *tokens,
                           const float *wte, const float *wpe, int B, int T, int C,
                           int v0, int nv);
  /* dwte += scatter of dout by token (tokens in [v0, v0 + nv) only, into row
   * token - v0); dwpe += sum of dout over the batch (skipped when NULL). */
  int (*embedding_backward)(gt_backend *be, float *dwte, float *dwpe, const float *dout,
                            const int32_t *tokens, int B, int T, int C, int v0, int nv);
  /* Softmax cross-entropy in two halves so that the vocabulary may be split
   * over P shards (no rank holds full logits). This shard's logits are
   * (N, ld): column j < nv is vocabulary entry v0 + j, columns nv..ld-1 are
   * padding and ignored.
   * xent_partial: stats (N,3) "=" per row {m, s, t}: m = max of the nv
   * columns, s = sum of exp(logit - m) over them, t = the logit of the
   * target when the target is in [v0, v0 + nv), else 0. */
  int (*xent_partial)(gt_backend *be, float *stats, const float *logits,
                      const int32_t *targets, int N, int nv, int ld, int v0);
  /* xent_finish: stats holds the (P, N, 3) partial stats of every shard in
   * shard order. Per row, M = max_r m_r, S = sum_r s_r exp(m_r - M) and
   * Tg = sum_r t_r, both summed in shard order r = 0..P-1, and
   * losses(N) "=" log(S) + M - Tg (= -log softmax[target]). When
   * grad_scale != 0 this shard's logits are overwritten by
   * dlogits = (exp(logit - M) / S - [column is the target]) * grad_scale,
   * and 0 in the padding columns. Identical stats give identical losses on
   * every shard. */
  int (*xent_finish)(gt_backend *be, float *losses, float *logits, const float *stats,
                     int P, const int32_t *targets, int N, int nv, int ld, int v0,
                     float grad_scale);

  /* ---- optimizer and reductions ---- */
  /* AdamW on n elements: g' = g * grad_scale; m = b1 m + (1-b1) g';
   * v = b2 v + (1-b2) g'^2; p -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd p).
   * bc1 = 1 - b1^t, bc2 = 1 - b2^t. */
  int (*adamw)(gt_backend *be, float *p, const float *g, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay,
               float bc1, float bc2, float grad_scale);
  /* *result (host) = sum of x^2, accumulated in double, deterministic. */
  int (*sumsq)(gt_backend *be, const float *x, size_t n, double *result);
} gt_backend_ops;

struct gt_backend {
  const gt_backend_ops *ops;
  const char *name;   /* "cpu", "cpu-ref", "cuda" */
  gt_device device;   /* where the memory of this backend lives */
  int threads;        /* CPU threads used by the kernels */
  void *impl;         /* backend-private state */
};

/* Create a backend by name with the given CPU thread count (>= 1).
 * GT_ERR_INPUT for an unknown name or one this build does not include (for
 * "cuda" without CUDA support the message says how to rebuild).
 * Not collective. */
int gt_backend_create(const char *name, int threads, gt_backend **be);

/* Free the backend and set *be to NULL. */
int gt_backend_destroy(gt_backend **be);

/* Describe the BLAS in use ("OpenBLAS 0.3.21 ... (core SkylakeX), OpenMP"). */
const char *gt_backend_blas_info(void);

/* A warning when the BLAS runs kernels far below what the CPU can do (OpenBLAS
 * falling back to generic kernels on a CPU model it does not know), else NULL. */
const char *gt_backend_blas_warning(void);

#endif /* GRIDTRAIN_BACKEND_H */
