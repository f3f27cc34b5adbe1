/*
 * gridtrain/backend.h - the compute backend interface.
 *
 * A backend is a table of functions over memory that lives on its device
 * (host memory for the cpu backends, GPU memory for "cuda"). Model code
 * allocates through the table, moves data with upload/download, and calls the
 * kernels; it never tests which backend it runs on. Backends:
 *
 *   "cpu"        OpenBLAS sgemm + OpenMP, fused where it pays (the default)
 *   "cpu-ref"    plain loops, double accumulators: the reference that tests
 *                compare "cpu" (and later "cuda") against; slow
 *   "cpu-async"  "cpu" whose ops run later, in order, on a worker thread per
 *                stream, each after a delay (test mode: a missing wait reads
 *                stale data or races, and results change)
 *   "cpu-guard"  "cpu" whose device memory the host cannot touch outside the
 *                backend's own ops (test mode: a touch by model code, the
 *                trainer, MPI or HDF5 faults, and the SIGSEGV handler names
 *                the address and says that device memory was touched)
 *   "cuda"       CUDA C kernels, cuBLASLt GEMMs, attention through cuDNN's
 *                graph API or our own flash-attention kernels; the GPU is
 *                picked by the node-local rank (binding.h)
 *
 * ---- streams, events and the rules of asynchrony --------------------------
 * Every op (kernels, fills, copies, uploads and downloads) is queued in order
 * on a stream and may run after the call returns; the host learns that work
 * is complete only through an event. Kernels run on the compute stream
 * (be->compute); copies name their stream (NULL: the compute stream). Work on
 * one stream runs in the order it was queued; work on different streams is
 * unordered unless a stream waits for an event of another.
 *
 *   event_record(ev, s)        ev completes when everything queued on s so far
 *                              has run (re-recording an event moves it)
 *   event_query(ev, &done)     has it completed? never blocks
 *   event_wait(ev)             the host blocks until it has completed
 *   stream_wait(s, ev)         work queued on s from now on starts only after
 *                              ev completes; the host does not block
 *   event_elapsed(a, b, &s)    seconds between two completed events
 *   sync()                     the host waits for every stream (tests,
 *                              shutdown; never inside a training step)
 *
 * The rules that follow, and that cpu-async and cpu-guard prove on the CPU:
 *   - The host reads device memory only through a download it has waited for
 *     (an event recorded after the download, or sync).
 *   - Host memory given to upload stays unchanged, and host memory given to
 *     download is not read, until the copy has completed.
 *   - MPI and HDF5 touch device memory only where the backend says that its
 *     memory is host-visible (be->host_visible), and only after an event wait
 *     for the work that wrote it; otherwise they go through host staging
 *     buffers (src/comm owns those).
 *   - A device buffer that MPI or a copy will overwrite is not still being
 *     read by queued work: wait for (or order after) the event of its last
 *     reader.
 * Pinned host memory (alloc_host) is what copies run fastest from and what
 * MPI staging uses; on the CPU it is plain aligned memory.
 *
 * ---- precisions ----------------------------------------------------------------
 * Kernels take the compute type dt (GT_F32, GT_BF16 or GT_F16) of their
 * activations and weights ("void *" below, "dt" in the shape notes). They
 * read dt, compute in fp32 (fp32 or wider accumulators), and round each
 * output to dt once, at the end. LayerNorm and RMSNorm statistics, softmax
 * statistics, rotary tables, losses and every gradient of a parameter
 * ("float *") are fp32. The reference backend rounds at the same points, so
 * fast and reference agree to within accumulation order before the one
 * rounding.
 *
 * ---- conventions for every kernel ---------------------------------------------
 *   - matrices are row-major; shapes are noted as (rows, cols);
 *   - sizes are 64-bit: "N" is the number of rows (tokens: B*T), "C" the
 *     width; element counts and offsets never pass through int;
 *   - outputs marked "+=" accumulate into what is there (gradient buffers are
 *     zeroed once per step and accumulate over micro-batches); outputs marked
 *     "=" are overwritten;
 *   - all functions return a gt_err status; none is collective. An error in
 *     an op that has already been queued is reported by a later call on the
 *     backend (at the latest by event_wait or sync).
 */
#ifndef GRIDTRAIN_BACKEND_H
#define GRIDTRAIN_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/config_enums.h"
#include "gridtrain/tensor.h"

typedef struct gt_backend gt_backend;
typedef struct gt_stream gt_stream; /* a queue of work, owned by the backend */
typedef struct gt_device_event gt_device_event; /* a marker in a stream */

typedef struct gt_backend_ops {
  /* ---- device and host memory ---- */
  int (*alloc)(gt_backend *be, size_t bytes, void **ptr); /* device, 64-byte aligned */
  int (*free)(gt_backend *be, void *ptr);
  int (*alloc_host)(gt_backend *be, size_t bytes, void **ptr); /* pinned host memory */
  int (*free_host)(gt_backend *be, void *ptr);

  /* ---- streams and events (see the top of this file) ---- */
  int (*stream_create)(gt_backend *be, gt_stream **s);
  int (*stream_destroy)(gt_backend *be, gt_stream *s);
  int (*event_create)(gt_backend *be, gt_device_event **ev);
  int (*event_destroy)(gt_backend *be, gt_device_event *ev);
  int (*event_record)(gt_backend *be, gt_device_event *ev, gt_stream *s);
  int (*event_query)(gt_backend *be, gt_device_event *ev, bool *done);
  int (*event_wait)(gt_backend *be, gt_device_event *ev);
  int (*stream_wait)(gt_backend *be, gt_stream *s, gt_device_event *ev);
  int (*event_elapsed)(gt_backend *be, gt_device_event *start, gt_device_event *end, double *seconds);
  int (*sync)(gt_backend *be);

  /* ---- copies and fills (s NULL: the compute stream) ---- */
  int (*upload)(gt_backend *be, void *dst, const void *host_src, size_t bytes, gt_stream *s);
  int (*download)(gt_backend *be, void *host_dst, const void *src, size_t bytes,
                  gt_stream *s);
  int (*copy)(gt_backend *be, void *dst, const void *src, size_t bytes, gt_stream *s);
  int (*zero)(gt_backend *be, void *ptr, size_t bytes); /* compute stream */
  /* dst (n, dst_t) "=" src (n, src_t) converted, rounding to nearest even;
   * any pair of GT_F32, GT_BF16, GT_F16. Compute stream. */
  int (*cast)(gt_backend *be, gt_dtype dst_t, void *dst, gt_dtype src_t, const void *src,
              size_t n);

  /* ---- dense algebra ---- */
  /* out(N,OC) = in(N,C) w(OC,C)^T + bias(OC) + residual(N,OC), all dt; bias
   * and residual may be NULL; residual must not alias out. */
  int (*linear_forward)(gt_backend *be, gt_dtype dt, void *out, const void *in,
                        const void *w, const void *bias, const void *residual, int64_t N,
                        int64_t C, int64_t OC);
  /* din(N,C) "=" dout w, dt; dw(OC,C) "+=" dout^T in, fp32; dbias(OC) "+="
   * column sums of dout, fp32. Each is skipped when NULL (in is not read
   * without dw, nor w without din), so a zero-bubble schedule computes the
   * input gradient now and the weight gradients later, bit for bit what
   * one call with both gives. */
  int (*linear_backward)(gt_backend *be, gt_dtype dt, void *din, float *dw, float *dbias,
                         const void *dout, const void *in, const void *w, int64_t N,
                         int64_t C, int64_t OC);

  /* ---- normalisation and activations ---- */
  /* out = (in - mean) * rstd * w + b per row, eps 1e-5; out, in, w, b dt;
   * mean, rstd (N) fp32 "=". */
  int (*layernorm_forward)(gt_backend *be, gt_dtype dt, void *out, float *mean, float *rstd,
                           const void *in, const void *w, const void *b, int64_t N,
                           int64_t C);
  /* din(N,C) dt "+=" (din + the input gradient, rounded once); dw(C), db(C)
   * fp32 "+=". din may alias dout only if it is the residual gradient that
   * flows past the LayerNorm unchanged (as in a pre-LN block). */
  int (*layernorm_backward)(gt_backend *be, gt_dtype dt, void *din, float *dw, float *db,
                            const void *dout, const void *in, const void *w,
                            const float *mean, const float *rstd, int64_t N, int64_t C);
  /* GELU, tanh approximation (GPT-2). out = gelu(in), n elements of dt. */
  int (*gelu_forward)(gt_backend *be, gt_dtype dt, void *out, const void *in, size_t n);
  /* din = gelu'(in) * dout ("="), dt; din may alias dout. */
  int (*gelu_backward)(gt_backend *be, gt_dtype dt, void *din, const void *in,
                       const void *dout, size_t n);

  /* ---- the Llama block's norm, positions and gated MLP ---- */
  /* RMSNorm: out = in * rstd * w per row, rstd (N) fp32 "=" 1 / sqrt(mean
   * over the row of in^2 + eps), eps the model's norm_eps (> 0); out, in
   * (N,C) and w (C) dt, computed in fp32 (the row's sum of squares in fp32
   * or wider), each out rounded once. No bias, no mean. */
  int (*rmsnorm_forward)(gt_backend *be, gt_dtype dt, void *out, float *rstd, const void *in,
                         const void *w, float eps, int64_t N, int64_t C);
  /* din(N,C) dt "+=" (din + the input gradient, rounded once): with
   * g = dout * w and xhat = in * rstd, the input gradient is
   * rstd * (g - xhat * mean over the row of g * xhat); dw(C) fp32 "+=" the
   * sum over rows of dout * xhat. rstd is forward's. din may alias dout only
   * if it is the residual gradient that flows past the norm unchanged (as in
   * a pre-norm block), as in layernorm_backward. */
  int (*rmsnorm_backward)(gt_backend *be, gt_dtype dt, void *din, float *dw, const void *dout,
                          const void *in, const void *w, const float *rstd, int64_t N,
                          int64_t C);
  /* Rotary position embedding, Hugging Face's "rotate half" form, in place.
   * x (B,T,S,hs) dt holds S head slots of size hs per token (the packed q,
   * k, v heads of grouped-query attention: S = H + 2 Hkv); the heads
   * [0, nrot) of every token are rotated (q and k: nrot = H + Hkv, with
   * 0 <= nrot <= S), the others (v) keep their bits. Token t of every
   * sequence has position p = pos0 + t (pos0 > 0 when decoding after a
   * cache); with h = hs/2 (hs even), c = cos[p][i], s = sin[p][i], i < h:
   *   x_i <- x_i c - x_{i+h} s,   x_{i+h} <- x_{i+h} c + x_i s
   * computed in fp32 from both old values, each rounded once. cos, sin
   * (max_pos, hs/2) fp32 device tables (rope.h fills them on the host),
   * pos0 + T <= max_pos. */
  int (*rope_forward)(gt_backend *be, gt_dtype dt, void *x, const float *cos, const float *sin,
                      int64_t B, int64_t T, int64_t S, int64_t nrot, int64_t hs, int64_t pos0);
  /* The transpose rotation (the gradient of rope_forward), in place on the
   * gradient dx (B,T,S,hs) dt, same arguments:
   *   dx_i <- dx_i c + dx_{i+h} s,   dx_{i+h} <- dx_{i+h} c - dx_i s */
  int (*rope_backward)(gt_backend *be, gt_dtype dt, void *dx, const float *cos,
                       const float *sin, int64_t B, int64_t T, int64_t S, int64_t nrot,
                       int64_t hs, int64_t pos0);
  /* SwiGLU: h (N,2F) dt holds per row the gate g = h[:, :F] and the up
   * projection u = h[:, F:]; out (N,F) dt "=" silu(g) * u, silu(x) =
   * x sigmoid(x), computed in fp32, rounded once. */
  int (*swiglu_forward)(gt_backend *be, gt_dtype dt, void *out, const void *h, int64_t N,
                        int64_t F);
  /* dh (N,2F) dt "=" from dout (N,F) dt and h: dg = dout * u * silu'(g),
   * du = dout * silu(g), silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))),
   * each in fp32, rounded once. dh may alias h (each pair g_j, u_j is read
   * before either is written); it must not overlap dout. */
  int (*swiglu_backward)(gt_backend *be, gt_dtype dt, void *dh, const void *dout,
                         const void *h, int64_t N, int64_t F);

  /* ---- mixture of experts (moe.h): routing, permutation, combination ----
   * N tokens, each routed to k of E experts (1 <= k <= E); a (token,
   * choice) pair (n, j), j < k, is "kept" when pos[n,j] >= 0. Every op is
   * deterministic: the same inputs give the same bits. */
  /* The router's choice, in fp32: probs (N,E) "=" the softmax of each row
   * of logits (N,E); lse (N) "=" each row's log-sum-exp (m + log sum
   * exp(logit - m)); sel (N,k) int32 "=" the k experts of largest
   * probability in descending order, ties to the lower expert index; gate
   * (N,k) "=" their probabilities divided by the sum of the k (Mixtral's
   * renormalisation). */
  int (*moe_route)(gt_backend *be, float *probs, float *lse, int32_t *sel, float *gate,
                   const float *logits, int64_t N, int64_t E, int64_t k);
  /* The pairs in expert order: pairs are ordered by expert sel[n,j], and
   * within an expert by n k + j ascending (token, then choice); an expert
   * keeps its first `capacity` pairs (capacity < 0: all of them, dropless)
   * and drops the rest. load (E) int32 "=" the pairs per expert before
   * dropping, kept (E) int32 "=" after; pos (N,k) int32 "=" the pair's row
   * in the expert-ordered buffer, whose expert e's rows start at the sum of
   * kept[e'] over e' < e; -1 for a dropped pair. */
  int (*moe_assign)(gt_backend *be, int32_t *pos, int32_t *load, int32_t *kept,
                    const int32_t *sel, int64_t N, int64_t k, int64_t E, int64_t capacity);
  /* Permutation into expert order: xp (R,C) dt, for every kept pair,
   * xp[pos[n,j]] "=" x[n] (bit copies); rows no pair names are left alone. */
  int (*moe_permute)(gt_backend *be, gt_dtype dt, void *xp, const void *x, const int32_t *pos,
                     int64_t N, int64_t k, int64_t C);
  /* Its transpose: dx (N,C) dt "+=": dx[n] + (extra[n] when extra, an (N,C)
   * fp32 tensor, is not NULL) + the sum over the kept pairs of n, j
   * ascending, of dxp[pos[n,j]] (dt), summed in fp32 in that order and
   * rounded once. */
  int (*moe_permute_backward)(gt_backend *be, gt_dtype dt, void *dx, const void *dxp,
                              const float *extra, const int32_t *pos, int64_t N, int64_t k,
                              int64_t C);
  /* The experts' outputs back in token order: out (N,C) dt "=" base[n] (0
   * when base is NULL) + the sum over the kept pairs of n, j ascending, of
   * gate[n,j] y[pos[n,j]], in fp32 in that order, rounded once. base (dt)
   * may be out itself (each row is read before it is written). */
  int (*moe_combine)(gt_backend *be, gt_dtype dt, void *out, const void *base, const void *y,
                     const float *gate, const int32_t *pos, int64_t N, int64_t k, int64_t C);
  /* Its backward: for every kept pair, dy[pos[n,j]] (dt) "=" gate[n,j]
   * dout[n] (computed in fp32, rounded once; other rows of dy are left
   * alone), and dgate (N,k) fp32 "=" the dot product of dout[n] and
   * y[pos[n,j]] (accumulated in fp32 or wider), 0 for a dropped pair. */
  int (*moe_combine_backward)(gt_backend *be, gt_dtype dt, void *dy, float *dgate,
                              const void *dout, const void *y, const float *gate,
                              const int32_t *pos, int64_t N, int64_t k, int64_t C);
  /* The router's backward, in fp32: dlogits (N,E) "=" the gradient of the
   * loss through moe_route's gates, the load-balancing loss and the router
   * z-loss. With Z_n = sum over i < k of probs[n, sel[n,i]], the gates give
   *   dp[n, sel[n,j]] = (dgate[n,j] - sum_i dgate[n,i] gate[n,i]) / Z_n
   * (0 for unselected experts); the load-balancing loss L_aux = E sum_e
   * load[e] / (N k) P_e with P_e = (1/N) sum_n probs[n,e] (load taken as
   * constant) adds aux_scale E load[e] / (N^2 k) to dp[n,e]; then
   *   dlogits[n,e] = probs[n,e] (dp[n,e] - sum_e' probs[n,e'] dp[n,e'])
   *                  + z_scale 2 lse[n] probs[n,e] / N,
   * the last term the gradient of the z-loss L_z = (1/N) sum_n lse[n]^2.
   * aux_scale and z_scale are d(loss)/d(L_aux) and d(loss)/d(L_z). */
  int (*moe_route_backward)(gt_backend *be, float *dlogits, const float *dgate,
                            const float *probs, const float *lse, const int32_t *sel,
                            const float *gate, const int32_t *load, int64_t N, int64_t E,
                            int64_t k, float aux_scale, float z_scale);

  /* ---- attention: the flash-attention / cuDNN SDPA contract ----
   * Causal self-attention with H query heads and Hkv key/value heads of
   * size hs (grouped-query attention: H a multiple of Hkv, and query head h
   * attends with key/value head h / (H / Hkv), as Hugging Face's repeat_kv;
   * Hkv = H is multi-head attention, Hkv = 1 multi-query), scores scaled by
   * 1/sqrt(hs). qkv (B,T,H+2Hkv,hs) holds per token the H query heads, then
   * the Hkv key heads, then the Hkv value heads ((B,T,3,H,hs) when Hkv = H);
   * out (B,T,H*hs) "=", dt; lse (B,H,T) fp32 "=": per query row, the
   * log-sum-exp of its scaled scores (m + log sum exp(s - m)). No (B,H,T,T)
   * buffer outlives a call: backward recomputes the probabilities tile by
   * tile from q, k and lse. */
  int (*attention_forward)(gt_backend *be, gt_dtype dt, void *out, float *lse,
                           const void *qkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                           int64_t hs);
  /* dqkv (B,T,H+2Hkv,hs) "=", dt, from dout (B,T,H*hs) and what forward
   * gave (out and lse for the same qkv); a key/value head's gradient sums
   * over the query heads of its group, in ascending head order. The same
   * inputs give the same bits, except on "cuda" with attention = cudnn-fast,
   * whose dQ sums with floating-point atomics (docs/cuda.md). */
  int (*attention_backward)(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                            const void *qkv, const void *out, const float *lse, int64_t B,
                            int64_t T, int64_t H, int64_t Hkv, int64_t hs);
  /* One step of incremental decoding over a key/value cache: qkv
   * (T,H+2Hkv,hs) holds the q, k, v rows of positions 0..T-1 of one
   * sequence (T >= 1); out (H*hs) "=", dt: the attention output of the last
   * position, T-1, over keys and values 0..T-1 (only its q is read) - what
   * attention_forward with B = 1 gives for row T-1. No lse. */
  int (*attention_decode)(gt_backend *be, gt_dtype dt, void *out, const void *qkv, int64_t T,
                          int64_t H, int64_t Hkv, int64_t hs);

  /* ---- embeddings and loss (vocabulary-parallel) ----
   * A rank may hold only the rows [v0, v0 + nv) of the token embedding
   * (tensor parallelism splits the vocabulary); with one shard v0 = 0 and
   * nv = V. */
  /* out(B*T,C) dt "=" wte[tokens - v0] for tokens in [v0, v0 + nv), 0 for
   * other tokens, plus wpe[t] when wpe is not NULL (summed in fp32, rounded
   * once). tokens (B,T) int32 on the device; wte holds the nv rows of this
   * shard, dt. */
  int (*embedding_forward)(gt_backend *be, gt_dtype dt, void *out, const int32_t *tokens,
                           const void *wte, const void *wpe, int64_t B, int64_t T, int64_t C,
                           int64_t v0, int64_t nv);
  /* dwte fp32 += scatter of dout (dt) by token (tokens in [v0, v0 + nv)
   * only, into row token - v0), each row summed in token order; dwpe fp32 +=
   * sum of dout over the batch (skipped when NULL). */
  int (*embedding_backward)(gt_backend *be, gt_dtype dt, float *dwte, float *dwpe,
                            const void *dout, const int32_t *tokens, int64_t B, int64_t T,
                            int64_t C, int64_t v0, int64_t nv);
  /* Softmax cross-entropy in two halves, in fp32, so that the vocabulary may
   * be split over P shards (no rank holds full logits). This shard's logits
   * are (N, ld), dt: column j < nv is vocabulary entry v0 + j, columns
   * nv..ld-1 are padding and ignored.
   * xent_partial: stats (N,3) fp32 "=" per row {m, s, t}: m = max of the nv
   * columns, s = sum of exp(logit - m) over them, t = the logit of the
   * target when the target is in [v0, v0 + nv), else 0. */
  int (*xent_partial)(gt_backend *be, gt_dtype dt, float *stats, const void *logits,
                      const int32_t *targets, int64_t N, int64_t nv, int64_t ld, int64_t v0);
  /* xent_finish: stats holds the (P, N, 3) partial stats of every shard in
   * shard order. Per row, M = max_r m_r, S = sum_r s_r exp(m_r - M) and
   * Tg = sum_r t_r, both summed in shard order r = 0..P-1, and losses(N)
   * fp32 "=" log(S) + M - Tg (= -log softmax[target]). When dlogit_scale !=
   * 0 this shard's logits are overwritten (dt) by
   * dlogits = (exp(logit - M) / S - [column is the target]) * dlogit_scale,
   * and 0 in the padding columns. Identical stats give identical losses on
   * every shard. */
  int (*xent_finish)(gt_backend *be, gt_dtype dt, float *losses, void *logits,
                     const float *stats, int P, const int32_t *targets, int64_t N, int64_t nv,
                     int64_t ld, int64_t v0, float dlogit_scale);

  /* ---- optimizer and reductions ---- */
  /* AdamW on n fp32 elements: g' = g * grad_mult (the clip factor over the
   * loss scale); m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
   * p -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd p); bc1 = 1 - b1^t,
   * bc2 = 1 - b2^t. When compute is not NULL it gets the new p rounded to
   * compute_t (the compute copy). */
  int (*adamw)(gt_backend *be, float *p, const float *g, float *m, float *v, void *compute,
               gt_dtype compute_t, size_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, float bc1, float bc2, float grad_mult);
  /* *acc (one double on the device) += sum of x (n fp32), resp. of x^2,
   * summed in double in an order fixed by n and the backend's thread count:
   * the same inputs give the same bits. */
  int (*sum_add)(gt_backend *be, double *acc, const float *x, size_t n);
  int (*sumsq_add)(gt_backend *be, double *acc, const float *x, size_t n);
  /* y = a x + b y on n fp32 elements, each in fp32 (x may be y): the
   * averages and elastic pulls of the local update modes (sync.h). */
  int (*axpby)(gt_backend *be, float *y, float a, const float *x, float b, size_t n);
} gt_backend_ops;

struct gt_backend {
  const gt_backend_ops *ops;
  const char *name;   /* "cpu", "cpu-ref", "cpu-async", "cpu-guard", "cuda" */
  gt_device device;   /* where the memory of this backend lives */
  bool host_visible;  /* device memory is host memory that the host and MPI may
                         touch once the work that wrote it is complete */
  int threads;        /* CPU threads used by the kernels */
  gt_stream *compute; /* the compute stream */
  void *impl;         /* backend-private state */
};

/* Create a backend by name with the given CPU thread count (>= 1).
 * GT_ERR_INPUT for an unknown name or one this build does not include (for
 * "cuda" without CUDA support the message says how to rebuild). With
 * GT_CPU_MODE=async or guard in the environment, "cpu" is created as
 * "cpu-async" or "cpu-guard" (so that any test runs under a test mode);
 * GT_CPU_ASYNC_DELAY_US sets cpu-async's delay (default 100 us).
 * Not collective. */
int gt_backend_create(const char *name, int threads, gt_backend **be);

/* What a backend is created with beyond its name. */
typedef struct gt_backend_options {
  int threads;           /* CPU threads of the kernels (>= 1) */
  int local_rank;        /* node-local rank, picks the GPU; < 0: from the
                            launcher's environment (binding.h) */
  gt_attention_kind attention; /* cuda: [backend] attention; GT_ATTENTION_DEFAULT:
                                  the environment's GT_CUDA_ATTENTION, else cudnn */
} gt_backend_options;

/* gt_backend_create with options. For "cuda", GT_ERR_INPUT when the build
 * has no CUDA or no GPU is visible (the message says which). Not collective. */
int gt_backend_create_with(const char *name, const gt_backend_options *opt, gt_backend **be);

/* The same for the configuration's [backend] device (GT_CPU_MODE applies to
 * GT_DEVICE_CPU as to "cpu"). Not collective. */
int gt_backend_create_device(gt_device_kind device, const gt_backend_options *opt,
                             gt_backend **be);

/* Wait for all queued work, free the backend and set *be to NULL. */
int gt_backend_destroy(gt_backend **be);

/* One line about where be runs: "cpu (N threads)" or "GPU 0 of 4: NVIDIA
 * H200 (sm_90, 139 GiB, PCI 0000:19:00.0)". Owned by be. */
const char *gt_backend_describe(gt_backend *be);

/* The GPU's name as the CUDA runtime gives it ("NVIDIA H100 80GB HBM3"),
 * which peak.h looks up; "" on the CPU backends. Owned by be. */
const char *gt_backend_device_name(gt_backend *be);

/* Device bytes allocated through be (its alloc op; on the CPU backends too)
 * now and at most so far: the allocator's high-water mark. */
void gt_backend_device_memory(gt_backend *be, size_t *in_use, size_t *peak);

/* Lower that high-water mark back to peak (a value it had before), or to
 * what is in use now where that is more: for a measurement whose buffers are
 * freed again and are no part of the run's account (the CPU calibration of
 * peak.h). Not collective. */
void gt_backend_device_memory_rewind(gt_backend *be, size_t peak);

/* A device clock for the named timers (timer.h) that marks be's compute
 * stream with events. Not collective. */
typedef struct gt_timer_clock gt_timer_clock;
int gt_backend_clock_create(gt_backend *be, gt_timer_clock **clock);
int gt_backend_clock_destroy(gt_timer_clock **clock);

/* Describe the BLAS in use ("OpenBLAS 0.3.21 ... (core SkylakeX, OpenMP)",
 * plus "; bf16 GEMM oneDNN 2.6.3" when bf16 products go through oneDNN). */
const char *gt_backend_blas_info(void);

/* A warning when the BLAS runs kernels far below what the CPU can do (OpenBLAS
 * falling back to generic kernels on a CPU model it does not know), else NULL. */
const char *gt_backend_blas_warning(void);

#endif /* GRIDTRAIN_BACKEND_H */
