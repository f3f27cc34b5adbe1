/*
 * cuda_attention_cudnn.c - causal self-attention (bf16, fp16) through cuDNN's
 * graph (backend) API: one operation graph per direction and shape, whose
 * pattern cuDNN's fused flash-attention engines recognise, planned once and
 * cached; every call fills a variant pack and queues the plan on the
 * compute stream (the handle's stream), without waiting.
 *
 * cuDNN 9.19 has no causal mask on its single SDPA operation node (that came
 * with 9.21), so both graphs are the composite form that cudnn-frontend's
 * "sdpa" nodes lower to for such versions. A run-time cuDNN >= 9.21 could use
 * the fused CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD nodes instead; this file does
 * not (the composite graphs run on those versions too, and the headers we
 * build against do not declare the 9.21 attributes).
 *
 * Layouts (elements; dt = CUDNN_DATA_BFLOAT16 or CUDNN_DATA_HALF; H query
 * heads, Hkv key/value heads, C3 = (H + 2*Hkv)*hs, the row of qkv):
 *   Q   (B,H,T,hs)    strides (T*C3, hs, C3, 1)    at qkv
 *   K^T (B,Hkv,hs,T)  strides (T*C3, hs, 1, C3)    at qkv + H*hs  (K, transposed view)
 *   V   (B,Hkv,T,hs)  strides (T*C3, hs, C3, 1)    at qkv + (H+Hkv)*hs
 *   V^T (B,Hkv,hs,T)  strides (T*C3, hs, 1, C3)    (backward)
 *   O, dO (B,H,T,hs) strides (T*H*hs, hs, H*hs, 1) (out, dout: (B,T,H*hs))
 *   dQ, dK, dV      as Q, K, V, at dqkv
 *   stats (B,H,T,1) fp32 strides (H*T, T, 1, 1)    (lse: (B,H,T))
 *   score tensors (B,H,T,T) strides (H*T*T, T*T, T, 1), virtual
 *   scalars (1,1,1,1) fp32 by value: scale = 1/sqrt(hs), -inf, 1
 *
 * Forward (UIDs: Q 1, K 2, V 3, O 4, STATS 5, SCALE 6, NEG_INF 7):
 *   S   = matmul(Q, K^T)                  fp32
 *   S1  = S * scale
 *   r   = gen_index(S1, axis 2)           int32 (row: query position)
 *   c   = gen_index(S1, axis 3)           int32 (column: key position)
 *   keep = r >= c                          bool
 *   S2  = keep ? S1 : -inf                 binary_select
 *   M   = max over the row of S2           (B,H,T,1)
 *   E   = exp(S2 - M)
 *   Z   = sum over the row of E            (B,H,T,1)
 *   STATS = M + log(Z)                     = lse, the log-sum-exp of the
 *                                          scaled, masked scores
 *   P   = E / Z                            dt
 *   O   = matmul(P, V)                     dt
 *
 * Backward (UIDs as above plus DO 8, DQ 9, DK 10, DV 11, ONE 12, SOFTMAX_SUM
 * 13, DQ_ACCUM 14; the last two are fp32 buffers in the scratch, after the
 * engine's workspace). Two variants, by how dQ is summed over the key tiles:
 *   deterministic (backend.attention = cudnn, the default): dQ = dS K goes
 *     straight to dQ, which makes cuDNN's Hopper engines keep dP in their
 *     workspace (2 B H T~^2 bytes, T~ = T rounded up to 64) and sum each
 *     dQ element in one order: the same bits every time, as
 *     cudnn-frontend's sdpa_backward with set_deterministic_algorithm;
 *   fast (attention = cudnn-fast): dQ accumulates in DQ_ACCUM with
 *     floating-point atomics over key tiles, in whatever order the blocks
 *     run; faster, and not bit for bit the same from run to run.
 *   SOFTMAX_SUM = rowsum(dO * O) * 1       (B,H,T,1) fp32
 *   S   = matmul(Q, K^T) * scale - STATS
 *   S2  = causal mask of S (as forward)
 *   P   = exp(S2)                          fp32 (the forward probabilities)
 *   dV  = matmul(reshape P -> P^T (dt), dO)
 *   dP  = matmul(dO, V^T)                  fp32
 *   dS  = (dP - SOFTMAX_SUM) * P * scale   fp32
 *   dK  = matmul(reshape dS -> dS^T (dt), Q)
 *   DQ_ACCUM = matmul(dS, reshape K^T -> K)  fp32 (B,H,T,hs) dense
 *   dQ  = identity(DQ_ACCUM)               dt
 * Virtual tensors take UIDs from 100 on.
 *
 * Grouped-query attention (Hkv < H, H a multiple of Hkv; Hkv = 1 is
 * multi-query): K and V (so K^T, V^T, dK, dV) have Hkv heads, and the
 * matmuls with Q, P, dO and dS (H heads) broadcast them over each group of
 * H/Hkv consecutive query heads (query head h reads key/value head
 * h / (H/Hkv), as backend.h says). The backward computes dK and dV per
 * query head into virtual (B,H,T,hs) dt tensors, dense strides (H*T*hs,
 * T*hs, hs, 1), and sums each group into dK, dV with an ADD reduction over
 * the head axis:
 *   dK = reduce_add(dK_full = matmul(dS^T, Q))   (B,H,T,hs) -> (B,Hkv,T,hs)
 *   dV = reduce_add(dV_full = matmul(P^T, dO))
 * which is what cudnn-frontend's sdpa_backward emits for h_k, h_v < h_q
 * (the same since frontend 1.0; no cuDNN 9 version limit for fixed-length
 * batches, only ragged ones needed 9.6). With Hkv = H the graphs are the
 * ones above, unchanged. GQA goes to cuDNN only on compute capability 9.x
 * (H100, H200: where tests/gpu checks it); elsewhere our kernels run it,
 * since a silent GQA error of cuDNN's SDPA on sm_100 with few key/value
 * heads is reported and open (pytorch/pytorch issue 193893, cuDNN 9.19 and
 * 9.20).
 *
 * Both graphs are, operation for operation and tensor for tensor (types,
 * dims, strides, virtual and by-value flags, modes, GEN_INDEX axes), what
 * cudnn-frontend 1.23 lowers sdpa / sdpa_backward with a causal mask and
 * generated stats to for cuDNN 9.19 (compared in cuDNN's API log, offline),
 * including its quirks: the scalars are (1,1,1,1); P^T and dS^T are
 * reshape outputs typed dt while P and dS are fp32; K seen untransposed for
 * dQ is an fp32 view; SOFTMAX_SUM and DQ_ACCUM are real fp32 tensors (cuDNN
 * >= 9.6 initialises DQ_ACCUM itself; before, we zero it). Offline, with an
 * H200 device description, cuDNN's flash engines (forward: 1, 2; backward:
 * 6, 7) took both graphs as far as loading the compiled kernel.
 *
 * Engines: heuristics mode A (then FALLBACK) lists engine configs; the
 * first whose execution plan finalizes is kept, with every descriptor the
 * plan was built from, in a 16-entry cache keyed by (direction, dt, B, T, H,
 * Hkv, hs), least recently used out. Rank 0 logs each plan's engine and the
 * time it took to build. A graph no engine takes (or whose building fails)
 * is remembered as such, rank 0 warns once naming the shape and why, and
 * the entries report that they did not run (*ran = false): cuda_core.c runs
 * our own kernels for that shape only. Calls cuDNN does not take at all
 * (fp32, tensors not 16-byte aligned, an empty shape) also return
 * *ran = false, as do grouped-query calls off compute capability 9.x (above).
 * cuDNN itself is loaded at run time (cuda_dl.h).
 */
#define GT_DL_WANT_CUDNN /* cuDNN, loaded at run time */
#include "cuda_dl.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_backend.h"
#include "gridtrain/log.h"
#include "gridtrain/error.h"

enum {
  CACHE_SLOTS = 16, /* plans kept (direction x dtype x shape) */
  KEEP_MAX = 128,   /* descriptors a plan is built from */
  OPS_MAX = 40,     /* operations in one graph */
  CFGS_MAX = 32,    /* engine configs tried per heuristics mode */
  SCRATCH_ALIGN = 256
};

/* Tensor UIDs of the variant packs (see the top of the file). */
enum {
  UID_Q = 1,
  UID_K,
  UID_V,
  UID_O,
  UID_STATS,
  UID_SCALE,
  UID_NEG_INF,
  UID_DO,
  UID_DQ,
  UID_DK,
  UID_DV,
  UID_ONE,
  UID_SOFTMAX_SUM,
  UID_DQ_ACCUM,
  UID_VIRTUAL = 100
};

typedef enum { DIR_FWD = 0, DIR_BWD, DIR_BWD_FAST, DIRS } attn_dir;

static const char *const dir_names[DIRS] = {"forward", "backward",
                                            "backward (fast, atomics)"};

/* Descriptors owned together, destroyed in reverse order of creation. */
typedef struct {
  cudnnBackendDescriptor_t d[KEEP_MAX];
  int n;
} desc_list;

typedef struct {
  bool used;      /* the slot holds a key */
  bool ok;        /* ... and a plan (else: why no engine took it) */
  attn_dir dir;
  gt_dtype dt;
  int64_t B, T, H, Hkv, hs;
  uint64_t stamp; /* last use (LRU) */
  desc_list keep; /* tensors, operations, graph, heuristics, engine config, plan */
  cudnnBackendDescriptor_t plan;
  cudaEvent_t done;    /* recorded after each execution */
  size_t sum_off;      /* backward: SOFTMAX_SUM in the scratch */
  size_t accum_off;    /* fast backward: DQ_ACCUM in the scratch */
  size_t scratch;      /* scratch bytes: engine workspace (+ the two above) */
  float scale, neg_inf, one; /* the by-value scalars (host) */
  char engine[192];    /* "engine 8 {KERNEL_CFG=2,STAGES=3}" */
  double build_ms;     /* graph, heuristics and plan finalisation */
  char why[384];       /* failed: the message */
} attn_plan;

struct gt_cuda_cudnn {
  cudnnHandle_t handle;
  cudaStream_t stream; /* the compute stream, the handle's stream */
  size_t version;      /* cudnnGetVersion(): 91900 for 9.19.0 */
  bool verbose;        /* GT_CUDNN_VERBOSE: log each plan built */
  bool fast_backward;  /* attention = cudnn-fast: the atomics variant */
  bool gqa;            /* grouped-query shapes go to cuDNN (compute capability 9.x) */
  uint64_t clock;
  attn_plan slot[CACHE_SLOTS];
  char last[DIRS][320]; /* the last plan built per direction, described */
  char info[1024];     /* gt_cuda_cudnn_engine_info */
};

/* A graph under construction: its descriptors go to keep as they are made. */
typedef struct {
  desc_list *keep;
  cudnnBackendDescriptor_t ops[OPS_MAX];
  int nops;
  int64_t next_uid;
} graph_build;

// ---- errors ---------------------------------------------------------------------------

int gt_cudnn_error(int status, const char *call, const char *file, int line, const char *func)
{
  char detail[512];
  detail[0] = '\0';
  cudnnGetLastErrorString(detail, sizeof detail);
  const char *name = cudnnGetErrorString((cudnnStatus_t)status);
  if (detail[0])
    return gt_error_set(GT_ERR_DEVICE, file, line, func, "%s failed: %s (%d): %s", call, name,
                        status, detail);
  return gt_error_set(GT_ERR_DEVICE, file, line, func, "%s failed: %s (%d)", call, name, status);
}

/* As GT_CALL_CUDNN, for functions that release temporaries at `done:`. */
#define TRY_CUDNN(expr)                                                                 \
  do {                                                                                  \
    int try_cudnn_status_ = (int)(expr);                                                \
    if (try_cudnn_status_ != 0) {                                                       \
      rc = gt_cudnn_error(try_cudnn_status_, #expr, __FILE__, __LINE__, __func__);      \
      goto done;                                                                        \
    }                                                                                   \
  } while (0)

// ---- descriptor lists -----------------------------------------------------------------

static int desc_new(desc_list *l, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d)
{
  GT_ASSERT(l->n < KEEP_MAX);
  *d = NULL;
  GT_CALL_CUDNN(cudnnBackendCreateDescriptor(type, d));
  l->d[l->n++] = *d;
  return GT_SUCCESS;
}

/* Take ownership of an existing descriptor. */
static int desc_adopt(desc_list *l, cudnnBackendDescriptor_t d)
{
  GT_ASSERT(l->n < KEEP_MAX);
  l->d[l->n++] = d;
  return GT_SUCCESS;
}

/* Cleanup: a failing destroy has nothing left to undo. */
static void desc_destroy_all(desc_list *l)
{
  while (l->n > 0)
    (void)cudnnBackendDestroyDescriptor(l->d[--l->n]);
}

// ---- graph pieces ---------------------------------------------------------------------

static cudnnDataType_t cudnn_type(gt_dtype dt)
{
  return dt == GT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

static int tensor_new(desc_list *keep, cudnnBackendDescriptor_t *t, int64_t uid,
                      cudnnDataType_t type, int nd, const int64_t *dim, const int64_t *stride,
                      bool is_virtual, bool by_value)
{
  const int64_t align = 16;
  GT_CALL(desc_new(keep, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE,
                                         1, &type));
  GT_CALL_CUDNN(
      cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dim));
  GT_CALL_CUDNN(
      cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, stride));
  GT_CALL_CUDNN(
      cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64,
                                         1, &align));
  if (is_virtual)
    GT_CALL_CUDNN(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN,
                                           1, &is_virtual));
  if (by_value)
    GT_CALL_CUDNN(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE,
                                           CUDNN_TYPE_BOOLEAN, 1, &by_value));
  GT_CALL_CUDNN(cudnnBackendFinalize(*t));
  return GT_SUCCESS;
}

/* A tensor of the graph's variant pack (4-d, in device memory). */
static int io_tensor(graph_build *g, cudnnBackendDescriptor_t *t, int64_t uid,
                     cudnnDataType_t type, const int64_t dim[4], const int64_t stride[4])
{
  return tensor_new(g->keep, t, uid, type, 4, dim, stride, false, false);
}

/* A host fp32 scalar passed by value, shape (1,1,1,1): a pointwise operand
 * has the rank of the other one. */
static int scalar_tensor(graph_build *g, cudnnBackendDescriptor_t *t, int64_t uid)
{
  const int64_t ones[4] = {1, 1, 1, 1};
  return tensor_new(g->keep, t, uid, CUDNN_DATA_FLOAT, 4, ones, ones, false, true);
}

/* An intermediate that never reaches memory. */
static int virtual_tensor(graph_build *g, cudnnBackendDescriptor_t *t, cudnnDataType_t type,
                          const int64_t dim[4], const int64_t stride[4])
{
  return tensor_new(g->keep, t, g->next_uid++, type, 4, dim, stride, true, false);
}

static int add_op(graph_build *g, cudnnBackendDescriptor_t op)
{
  GT_ASSERT(g->nops < OPS_MAX);
  g->ops[g->nops++] = op;
  return GT_SUCCESS;
}

/* y = mode(x [, b [, t]]), computed in prec; axis for GEN_INDEX. */
static int pointwise(graph_build *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                     int64_t axis, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y)
{
  const float alpha = 1.0f;
  cudnnBackendDescriptor_t pw, op;
  GT_CALL(desc_new(g->keep, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
  GT_CALL_CUDNN(
      cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE,
                                         1, &prec));
  if (mode == CUDNN_POINTWISE_GEN_INDEX)
    GT_CALL_CUDNN(
        cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
  GT_CALL_CUDNN(cudnnBackendFinalize(pw));

  GT_CALL(desc_new(g->keep, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b)
    GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  if (t)
    GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
                                         CUDNN_TYPE_FLOAT, 1, &alpha));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,
                                         CUDNN_TYPE_FLOAT, 1, &alpha));
  GT_CALL_CUDNN(cudnnBackendFinalize(op));
  return add_op(g, op);
}

/* Shorthands: computed in fp32. */
static int pw1(graph_build *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t y)
{
  return pointwise(g, mode, CUDNN_DATA_FLOAT, -1, x, NULL, NULL, y);
}

static int pw2(graph_build *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y)
{
  return pointwise(g, mode, CUDNN_DATA_FLOAT, -1, x, b, NULL, y);
}

/* c = a b over the last two dimensions, batched over the first two; fp32. */
static int matmul(graph_build *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t c)
{
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t mm, op;
  GT_CALL(desc_new(g->keep, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm));
  GT_CALL_CUDNN(
      cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  GT_CALL_CUDNN(cudnnBackendFinalize(mm));

  GT_CALL(desc_new(g->keep, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &op));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_DESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm));
  GT_CALL_CUDNN(cudnnBackendFinalize(op));
  return add_op(g, op);
}

/* y = reduction of x over the dimensions where y is smaller (extent 1: the
 * whole axis; Hkv of H heads: each group of H/Hkv); fp32. */
static int reduction(graph_build *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t y)
{
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t red, op;
  GT_CALL(desc_new(g->keep, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &red));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_COMP_TYPE,
                                         CUDNN_TYPE_DATA_TYPE, 1, &comp));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(red, CUDNN_ATTR_REDUCTION_OPERATOR,
                                         CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode));
  GT_CALL_CUDNN(cudnnBackendFinalize(red));

  GT_CALL(desc_new(g->keep, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, &op));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  GT_CALL_CUDNN(cudnnBackendFinalize(op));
  return add_op(g, op);
}

/* y = x seen through y's dimensions and strides (a transposed view). */
static int reshape(graph_build *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
  cudnnBackendDescriptor_t op;
  GT_CALL(desc_new(g->keep, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, &op));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  GT_CALL_CUDNN(cudnnBackendFinalize(op));
  return add_op(g, op);
}

/* out = keep ? s : -inf with keep = row >= column over the (T,T) scores. */
static int causal_mask(graph_build *g, cudnnBackendDescriptor_t s,
                       cudnnBackendDescriptor_t neg_inf, const int64_t s_dim[4],
                       const int64_t s_str[4], cudnnBackendDescriptor_t *out)
{
  cudnnBackendDescriptor_t row, col, keep;
  GT_CALL(virtual_tensor(g, &row, CUDNN_DATA_INT32, s_dim, s_str));
  GT_CALL(virtual_tensor(g, &col, CUDNN_DATA_INT32, s_dim, s_str));
  GT_CALL(virtual_tensor(g, &keep, CUDNN_DATA_BOOLEAN, s_dim, s_str));
  GT_CALL(virtual_tensor(g, out, CUDNN_DATA_FLOAT, s_dim, s_str));
  GT_CALL(pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s, NULL, NULL, row));
  GT_CALL(pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s, NULL, NULL, col));
  GT_CALL(pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep));
  GT_CALL(pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s, neg_inf, keep,
                    *out));
  return GT_SUCCESS;
}

// ---- the two graphs -------------------------------------------------------------------

/* The shapes and strides shared by both graphs (see the top of the file). */
typedef struct {
  int64_t qkv_dim[4], qkv_str[4]; /* Q, dQ (and, with kv_dim, K, V, dK, dV) */
  int64_t kv_dim[4];              /* V, dV, dK, and K seen untransposed (strides qkv_str) */
  int64_t kt_dim[4], kt_str[4];   /* K^T, V^T */
  int64_t full_str[4];            /* GQA: dK, dV per query head (dims qkv_dim), dense */
  int64_t o_str[4];               /* O, dO (dims qkv_dim) */
  int64_t s_dim[4], s_str[4];     /* scores */
  int64_t st_str[4];              /* scores transposed (dims s_dim) */
  int64_t r_dim[4], r_str[4];     /* per row: stats, max, sum */
} attn_layout;

static void layout_of(const attn_plan *p, attn_layout *l)
{
  const int64_t B = p->B, T = p->T, H = p->H, Hkv = p->Hkv, hs = p->hs;
  const int64_t C3 = (H + 2 * Hkv) * hs;
  const attn_layout v = {
      .qkv_dim = {B, H, T, hs},
      .qkv_str = {T * C3, hs, C3, 1},
      .kv_dim = {B, Hkv, T, hs},
      .kt_dim = {B, Hkv, hs, T},
      .kt_str = {T * C3, hs, 1, C3},
      .full_str = {H * T * hs, T * hs, hs, 1},
      .o_str = {T * H * hs, hs, H * hs, 1},
      .s_dim = {B, H, T, T},
      .s_str = {H * T * T, T * T, T, 1},
      .st_str = {H * T * T, T * T, 1, T},
      .r_dim = {B, H, T, 1},
      .r_str = {H * T, T, 1, 1},
  };
  *l = v;
}

static int graph_forward(graph_build *g, const attn_plan *p)
{
  const cudnnDataType_t io = cudnn_type(p->dt), f32 = CUDNN_DATA_FLOAT;
  attn_layout l;
  layout_of(p, &l);
  cudnnBackendDescriptor_t q, kt, v, o, stats, scale, neg_inf;
  cudnnBackendDescriptor_t s, s1, s2, m, sub, e, z, logz, prob;
  GT_CALL(io_tensor(g, &q, UID_Q, io, l.qkv_dim, l.qkv_str));
  GT_CALL(io_tensor(g, &kt, UID_K, io, l.kt_dim, l.kt_str));
  GT_CALL(io_tensor(g, &v, UID_V, io, l.kv_dim, l.qkv_str));
  GT_CALL(io_tensor(g, &o, UID_O, io, l.qkv_dim, l.o_str));
  GT_CALL(io_tensor(g, &stats, UID_STATS, f32, l.r_dim, l.r_str));
  GT_CALL(scalar_tensor(g, &scale, UID_SCALE));
  GT_CALL(scalar_tensor(g, &neg_inf, UID_NEG_INF));

  GT_CALL(virtual_tensor(g, &s, f32, l.s_dim, l.s_str));
  GT_CALL(matmul(g, q, kt, s));
  GT_CALL(virtual_tensor(g, &s1, f32, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_MUL, s, scale, s1));
  GT_CALL(causal_mask(g, s1, neg_inf, l.s_dim, l.s_str, &s2));

  GT_CALL(virtual_tensor(g, &m, f32, l.r_dim, l.r_str));
  GT_CALL(reduction(g, CUDNN_REDUCE_TENSOR_MAX, s2, m));
  GT_CALL(virtual_tensor(g, &sub, f32, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_SUB, s2, m, sub));
  GT_CALL(virtual_tensor(g, &e, f32, l.s_dim, l.s_str));
  GT_CALL(pw1(g, CUDNN_POINTWISE_EXP, sub, e));
  GT_CALL(virtual_tensor(g, &z, f32, l.r_dim, l.r_str));
  GT_CALL(reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, z));
  GT_CALL(virtual_tensor(g, &logz, f32, l.r_dim, l.r_str));
  GT_CALL(pw1(g, CUDNN_POINTWISE_LOG, z, logz));
  GT_CALL(pw2(g, CUDNN_POINTWISE_ADD, m, logz, stats));
  GT_CALL(virtual_tensor(g, &prob, io, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_DIV, e, z, prob));

  GT_CALL(matmul(g, prob, v, o));
  return GT_SUCCESS;
}

/* dkv = a b (H heads each) for a key/value gradient: straight, or with
 * grouped-query heads (gqa) into a virtual per-query-head tensor of type io
 * whose groups of H/Hkv heads an ADD reduction sums into dkv (Hkv heads). */
static int matmul_to(graph_build *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t dkv, bool gqa, cudnnDataType_t io,
                     const attn_layout *l)
{
  if (!gqa)
    return matmul(g, a, b, dkv);
  cudnnBackendDescriptor_t full;
  GT_CALL(virtual_tensor(g, &full, io, l->qkv_dim, l->full_str));
  GT_CALL(matmul(g, a, b, full));
  return reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, dkv);
}

static int graph_backward(graph_build *g, const attn_plan *p)
{
  const bool fast = p->dir == DIR_BWD_FAST;
  const bool gqa = p->Hkv != p->H;
  const cudnnDataType_t io = cudnn_type(p->dt), f32 = CUDNN_DATA_FLOAT;
  const int64_t T = p->T, H = p->H, hs = p->hs;
  /* dO * O as cudnn-frontend shapes it; virtual, so only the dims count */
  const int64_t doo_str[4] = {H * T * hs, T * hs, H * hs, 1};
  const int64_t acc_str[4] = {H * T * hs, T * hs, hs, 1};
  attn_layout l;
  layout_of(p, &l);
  cudnnBackendDescriptor_t q, kt, vt, o, dout, stats, dq, dk, dv, scale, neg_inf, one, ssum;
  cudnnBackendDescriptor_t acc = NULL;
  cudnnBackendDescriptor_t doo, doo_sum, s, s1, s2, s3, prob, prob_t, dp, dp1, ds0, ds, ds_t, k;
  GT_CALL(io_tensor(g, &q, UID_Q, io, l.qkv_dim, l.qkv_str));
  GT_CALL(io_tensor(g, &kt, UID_K, io, l.kt_dim, l.kt_str));
  GT_CALL(io_tensor(g, &vt, UID_V, io, l.kt_dim, l.kt_str));
  GT_CALL(io_tensor(g, &o, UID_O, io, l.qkv_dim, l.o_str));
  GT_CALL(io_tensor(g, &dout, UID_DO, io, l.qkv_dim, l.o_str));
  GT_CALL(io_tensor(g, &stats, UID_STATS, f32, l.r_dim, l.r_str));
  GT_CALL(io_tensor(g, &dq, UID_DQ, io, l.qkv_dim, l.qkv_str));
  GT_CALL(io_tensor(g, &dk, UID_DK, io, l.kv_dim, l.qkv_str));
  GT_CALL(io_tensor(g, &dv, UID_DV, io, l.kv_dim, l.qkv_str));
  GT_CALL(scalar_tensor(g, &scale, UID_SCALE));
  GT_CALL(scalar_tensor(g, &neg_inf, UID_NEG_INF));
  GT_CALL(scalar_tensor(g, &one, UID_ONE));
  GT_CALL(io_tensor(g, &ssum, UID_SOFTMAX_SUM, f32, l.r_dim, l.r_str));
  if (fast)
    GT_CALL(io_tensor(g, &acc, UID_DQ_ACCUM, f32, l.qkv_dim, acc_str));

  /* SOFTMAX_SUM = rowsum(dO * O) */
  GT_CALL(virtual_tensor(g, &doo, f32, l.qkv_dim, doo_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_MUL, dout, o, doo));
  GT_CALL(virtual_tensor(g, &doo_sum, f32, l.r_dim, l.r_str));
  GT_CALL(reduction(g, CUDNN_REDUCE_TENSOR_ADD, doo, doo_sum));
  GT_CALL(pw2(g, CUDNN_POINTWISE_MUL, doo_sum, one, ssum));

  /* P = exp(mask(Q K^T * scale - STATS)) */
  GT_CALL(virtual_tensor(g, &s, f32, l.s_dim, l.s_str));
  GT_CALL(matmul(g, q, kt, s));
  GT_CALL(virtual_tensor(g, &s1, f32, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_MUL, s, scale, s1));
  GT_CALL(virtual_tensor(g, &s2, f32, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_SUB, s1, stats, s2));
  GT_CALL(causal_mask(g, s2, neg_inf, l.s_dim, l.s_str, &s3));
  GT_CALL(virtual_tensor(g, &prob, f32, l.s_dim, l.s_str));
  GT_CALL(pw1(g, CUDNN_POINTWISE_EXP, s3, prob));

  /* dV = P^T dO (GQA: per query head, then summed over each group) */
  GT_CALL(virtual_tensor(g, &prob_t, io, l.s_dim, l.st_str));
  GT_CALL(reshape(g, prob, prob_t));
  GT_CALL(matmul_to(g, prob_t, dout, dv, gqa, io, &l));

  /* dS = (dO V^T - SOFTMAX_SUM) * P * scale */
  GT_CALL(virtual_tensor(g, &dp, f32, l.s_dim, l.s_str));
  GT_CALL(matmul(g, dout, vt, dp));
  GT_CALL(virtual_tensor(g, &dp1, f32, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_SUB, dp, ssum, dp1));
  GT_CALL(virtual_tensor(g, &ds0, f32, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_MUL, dp1, prob, ds0));
  GT_CALL(virtual_tensor(g, &ds, f32, l.s_dim, l.s_str));
  GT_CALL(pw2(g, CUDNN_POINTWISE_MUL, ds0, scale, ds));

  /* dK = dS^T Q (GQA: per query head, then summed over each group) */
  GT_CALL(virtual_tensor(g, &ds_t, io, l.s_dim, l.st_str));
  GT_CALL(reshape(g, ds, ds_t));
  GT_CALL(matmul_to(g, ds_t, q, dk, gqa, io, &l));

  /* dQ = dS K: straight to dQ (deterministic), or accumulated in fp32 in
   * DQ_ACCUM and then rounded once (fast) */
  GT_CALL(virtual_tensor(g, &k, f32, l.kv_dim, l.qkv_str));
  GT_CALL(reshape(g, kt, k));
  if (fast) {
    GT_CALL(matmul(g, ds, k, acc));
    GT_CALL(pw1(g, CUDNN_POINTWISE_IDENTITY, acc, dq));
  } else {
    GT_CALL(matmul(g, ds, k, dq));
  }
  return GT_SUCCESS;
}

// ---- engines and plans ----------------------------------------------------------------

static const char *knob_name(int64_t type)
{
  static const struct {
    int type;
    const char *name;
  } names[] = {
      {CUDNN_KNOB_TYPE_SWIZZLE, "SWIZZLE"},
      {CUDNN_KNOB_TYPE_TILE_SIZE, "TILE_SIZE"},
      {CUDNN_KNOB_TYPE_EDGE, "EDGE"},
      {CUDNN_KNOB_TYPE_MULTIPLY, "MULTIPLY"},
      {CUDNN_KNOB_TYPE_SPLIT_K_BUF, "SPLIT_K_BUF"},
      {CUDNN_KNOB_TYPE_TILEK, "TILEK"},
      {CUDNN_KNOB_TYPE_STAGES, "STAGES"},
      {CUDNN_KNOB_TYPE_REDUCTION_MODE, "REDUCTION_MODE"},
      {CUDNN_KNOB_TYPE_SPLIT_K_SLC, "SPLIT_K_SLC"},
      {CUDNN_KNOB_TYPE_IDX_MODE, "IDX_MODE"},
      {CUDNN_KNOB_TYPE_SPECFILT, "SPECFILT"},
      {CUDNN_KNOB_TYPE_KERNEL_CFG, "KERNEL_CFG"},
      {CUDNN_KNOB_TYPE_WORKSPACE, "WORKSPACE"},
      {CUDNN_KNOB_TYPE_TILE_CGA_M, "TILE_CGA_M"},
      {CUDNN_KNOB_TYPE_TILE_CGA_N, "TILE_CGA_N"},
      {CUDNN_KNOB_TYPE_BLOCK_SIZE, "BLOCK_SIZE"},
      {CUDNN_KNOB_TYPE_OCCUPANCY, "OCCUPANCY"},
      {CUDNN_KNOB_TYPE_ARRAY_SIZE_PER_THREAD, "ARRAY_SIZE_PER_THREAD"},
      {CUDNN_KNOB_TYPE_SPLIT_COLS, "SPLIT_COLS"},
      {CUDNN_KNOB_TYPE_TILE_ROWS, "TILE_ROWS"},
      {CUDNN_KNOB_TYPE_TILE_COLS, "TILE_COLS"},
      {CUDNN_KNOB_TYPE_LOAD_SIZE, "LOAD_SIZE"},
      {CUDNN_KNOB_TYPE_CTA_COUNT, "CTA_COUNT"},
      {CUDNN_KNOB_TYPE_STREAM_K, "STREAM_K"},
      {CUDNN_KNOB_TYPE_SPLIT_P_SLC, "SPLIT_P_SLC"},
      {CUDNN_KNOB_TYPE_TILE_M, "TILE_M"},
      {CUDNN_KNOB_TYPE_TILE_N, "TILE_N"},
      {CUDNN_KNOB_TYPE_WARP_SPEC_CFG, "WARP_SPEC_CFG"},
      {CUDNN_KNOB_TYPE_SWAP_AB, "SWAP_AB"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].type == type)
      return names[i].name;
  return NULL;
}

/* "engine 8 {KERNEL_CFG=2,STAGES=3}" for the engine config cfg. */
static int engine_describe(cudnnBackendDescriptor_t cfg, char *buf, size_t size)
{
  int rc = GT_SUCCESS;
  cudnnBackendDescriptor_t engine = NULL, knob[CUDNN_KNOB_TYPE_COUNTS] = {NULL};
  int made = 0;
  int64_t n = 0, index = -1, nknobs = 0;
  TRY_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
  TRY_CUDNN(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  TRY_CUDNN(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                     &n, &index));
  for (made = 0; made < CUDNN_KNOB_TYPE_COUNTS; made++)
    TRY_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knob[made]));
  TRY_CUDNN(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS,
                                     &nknobs, knob));
  if (nknobs > CUDNN_KNOB_TYPE_COUNTS)
    nknobs = CUDNN_KNOB_TYPE_COUNTS;

  size_t len = (size_t)snprintf(buf, size, "engine %lld", (long long)index);
  for (int64_t i = 0; i < nknobs && len < size; i++) {
    cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
    int64_t value = 0;
    TRY_CUDNN(cudnnBackendGetAttribute(knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                       CUDNN_TYPE_KNOB_TYPE, 1, &n, &type));
    TRY_CUDNN(cudnnBackendGetAttribute(knob[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                       CUDNN_TYPE_INT64, 1, &n, &value));
    const char *name = knob_name((int64_t)type);
    const char *sep = i == 0 ? " {" : ",";
    if (name)
      len += (size_t)snprintf(buf + len, size - len, "%s%s=%lld", sep, name, (long long)value);
    else
      len += (size_t)snprintf(buf + len, size - len, "%sknob%d=%lld", sep, (int)type,
                              (long long)value);
  }
  if (len < size)
    snprintf(buf + len, size - len, "%s", nknobs > 0 ? "}" : " (no knobs)");
done:
  for (int i = 0; i < made; i++)
    (void)cudnnBackendDestroyDescriptor(knob[i]);
  if (engine)
    (void)cudnnBackendDestroyDescriptor(engine);
  return rc;
}

/* Why the last engine config failed, for the final message. */
typedef struct {
  int status;
  int tried;
  char detail[256];
} plan_failure;

static void failure_note(plan_failure *f, int status)
{
  f->status = status;
  f->detail[0] = '\0';
  cudnnGetLastErrorString(f->detail, sizeof f->detail);
}

/* Try the engine configs heuristics mode `mode` lists for graph, in order;
 * on success p->plan is set and it and its engine config belong to p->keep.
 * GT_SUCCESS with p->plan NULL: no config of this mode finalized. */
static int plan_try_mode(gt_cuda_cudnn *c, attn_plan *p, cudnnBackendDescriptor_t graph,
                         cudnnBackendHeurMode_t mode, plan_failure *fail)
{
  int rc = GT_SUCCESS;
  cudnnBackendDescriptor_t heur, cfg[CFGS_MAX] = {NULL}, plan = NULL;
  int made = 0;
  int64_t count = 0, got = 0;
  GT_CALL(desc_new(&p->keep, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  GT_CALL_CUDNN(
      cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  int status = (int)cudnnBackendFinalize(heur);
  if (status != 0) { /* this mode has nothing for the graph */
    failure_note(fail, status);
    return GT_SUCCESS;
  }
  GT_CALL_CUDNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL));
  if (count > CFGS_MAX)
    count = CFGS_MAX;
  if (count <= 0)
    return GT_SUCCESS;
  for (made = 0; made < count; made++)
    TRY_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[made]));
  TRY_CUDNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg));
  if (got > count)
    got = count;
  for (int64_t i = 0; i < got; i++) {
    TRY_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    TRY_CUDNN(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                       1, &c->handle));
    TRY_CUDNN(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]));
    fail->tried++;
    status = (int)cudnnBackendFinalize(plan);
    if (status == 0) {
      if (engine_describe(cfg[i], p->engine, sizeof p->engine) != GT_SUCCESS) {
        gt_error_clear(); /* informative only */
        snprintf(p->engine, sizeof p->engine, "engine ? (not queried)");
      }
      rc = desc_adopt(&p->keep, cfg[i]);
      if (rc != GT_SUCCESS)
        goto done;
      cfg[i] = NULL;
      rc = desc_adopt(&p->keep, plan);
      if (rc != GT_SUCCESS)
        goto done;
      p->plan = plan;
      plan = NULL;
      goto done;
    }
    failure_note(fail, status);
    (void)cudnnBackendDestroyDescriptor(plan);
    plan = NULL;
  }
done:
  if (plan)
    (void)cudnnBackendDestroyDescriptor(plan);
  for (int i = 0; i < made; i++)
    if (cfg[i])
      (void)cudnnBackendDestroyDescriptor(cfg[i]);
  return rc;
}

static size_t align_up(size_t x) { return (x + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN; }

/* Build p's graph, choose its engine, size its scratch. On failure the
 * caller releases p->keep. */
static int plan_build(gt_cuda_cudnn *c, attn_plan *p)
{
  graph_build g = {.keep = &p->keep, .nops = 0, .next_uid = UID_VIRTUAL};
  p->scale = (float)(1.0 / sqrt((double)p->hs));
  /* cudnn-frontend masks with -inf from 9.10 on, with the lowest float before */
  p->neg_inf = c->version >= 91000 ? -INFINITY : -FLT_MAX;
  p->one = 1.0f;
  if (p->dir == DIR_FWD)
    GT_CALL(graph_forward(&g, p));
  else
    GT_CALL(graph_backward(&g, p));

  cudnnBackendDescriptor_t graph;
  GT_CALL(desc_new(&p->keep, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, g.nops, g.ops));
  GT_CALL_CUDNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                                         CUDNN_TYPE_HANDLE, 1, &c->handle));
  GT_CALL_CUDNN(cudnnBackendFinalize(graph));

  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  plan_failure fail = {.status = 0, .tried = 0, .detail = ""};
  for (int i = 0; i < 2 && !p->plan; i++)
    GT_CALL(plan_try_mode(c, p, graph, modes[i], &fail));
  if (!p->plan) {
    if (fail.status == 0)
      return GT_ERROR(GT_ERR_DEVICE, "no cuDNN engine config for the graph");
    return GT_ERROR(GT_ERR_DEVICE,
                    "no cuDNN engine supports the graph (%d configs tried; last: %s (%d)%s%s)",
                    fail.tried, cudnnGetErrorString((cudnnStatus_t)fail.status), fail.status,
                    fail.detail[0] ? ": " : "", fail.detail);
  }

  int64_t n = 0, ws = 0;
  GT_CALL_CUDNN(cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &n, &ws));
  GT_ASSERT(ws >= 0);
  const size_t rows = (size_t)(p->B * p->H * p->T);
  if (p->dir == DIR_FWD) {
    p->scratch = (size_t)ws;
  } else if (p->dir == DIR_BWD) {
    p->sum_off = align_up((size_t)ws);
    p->scratch = p->sum_off + rows * sizeof(float);
  } else {
    p->sum_off = align_up((size_t)ws);
    p->accum_off = align_up(p->sum_off + rows * sizeof(float));
    p->scratch = p->accum_off + rows * (size_t)p->hs * sizeof(float);
  }
  GT_CALL_CUDA(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));
  return GT_SUCCESS;
}

static void plan_release(attn_plan *p)
{
  desc_destroy_all(&p->keep);
  if (p->done)
    (void)cudaEventDestroy(p->done); /* released once a pending record completes */
  memset(p, 0, sizeof *p);
}

static int shape_text(char *buf, size_t size, attn_dir dir, gt_dtype dt, int64_t B, int64_t T,
                      int64_t H, int64_t Hkv, int64_t hs)
{
  if (Hkv != H)
    return snprintf(buf, size, "%s (%lld,%lld,%lld,%lld, %lld kv heads, %s)", dir_names[dir],
                    (long long)B, (long long)T, (long long)H, (long long)hs, (long long)Hkv,
                    gt_dtype_name(dt));
  return snprintf(buf, size, "%s (%lld,%lld,%lld,%lld, %s)", dir_names[dir], (long long)B,
                  (long long)T, (long long)H, (long long)hs, gt_dtype_name(dt));
}

/* A slot for a new plan: a free one, else the least recently used one whose
 * last execution has completed (only if all sixteen are still queued does
 * the host wait, for the oldest). */
static int slot_free(gt_cuda_cudnn *c, attn_plan **out)
{
  attn_plan *lru = NULL, *lru_done = NULL;
  for (int i = 0; i < CACHE_SLOTS; i++) {
    attn_plan *p = &c->slot[i];
    if (!p->used) {
      *out = p;
      return GT_SUCCESS;
    }
    if (!lru || p->stamp < lru->stamp)
      lru = p;
    bool idle = true;
    if (p->done) {
      cudaError_t err = cudaEventQuery(p->done);
      if (err == cudaErrorNotReady)
        idle = false;
      else
        GT_CALL_CUDA(err);
    }
    if (idle && (!lru_done || p->stamp < lru_done->stamp))
      lru_done = p;
  }
  if (!lru_done) {
    GT_CALL_CUDA(cudaEventSynchronize(lru->done));
    lru_done = lru;
  }
  plan_release(lru_done);
  *out = lru_done;
  return GT_SUCCESS;
}

static void engine_info_update(gt_cuda_cudnn *c)
{
  const size_t v = c->version;
  int len = snprintf(c->info, sizeof c->info, "cuDNN %zu.%zu.%zu", v / 10000, v % 10000 / 100,
                     v % 100);
  if (!c->last[DIR_FWD][0] && !c->last[DIR_BWD][0] && !c->last[DIR_BWD_FAST][0]) {
    snprintf(c->info + len, sizeof c->info - (size_t)len, ", no attention plan built yet");
    return;
  }
  for (int d = 0; d < DIRS && (size_t)len < sizeof c->info; d++)
    if (c->last[d][0])
      len += snprintf(c->info + len, sizeof c->info - (size_t)len, "; attention %s", c->last[d]);
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The plan for (dir, dt, B, T, H, Hkv, hs): cached, or built now. *out = NULL
 * (and GT_SUCCESS) when cuDNN has no usable plan for this shape: the slot
 * remembers why, and rank 0 has warned once, naming the shape. */
static int plan_get(gt_cuda_cudnn *c, attn_dir dir, gt_dtype dt, int64_t B, int64_t T,
                    int64_t H, int64_t Hkv, int64_t hs, attn_plan **out)
{
  *out = NULL;
  for (int i = 0; i < CACHE_SLOTS; i++) {
    attn_plan *p = &c->slot[i];
    if (p->used && p->dir == dir && p->dt == dt && p->B == B && p->T == T && p->H == H &&
        p->Hkv == Hkv && p->hs == hs) {
      p->stamp = ++c->clock;
      if (p->ok)
        *out = p;
      return GT_SUCCESS;
    }
  }

  attn_plan *p = NULL;
  GT_CALL(slot_free(c, &p));
  p->used = true;
  p->dir = dir;
  p->dt = dt;
  p->B = B, p->T = T, p->H = H, p->Hkv = Hkv, p->hs = hs;
  p->stamp = ++c->clock;

  char shape[96];
  shape_text(shape, sizeof shape, dir, dt, B, T, H, Hkv, hs);
  const double t0 = now_ms();
  int status = plan_build(c, p);
  p->build_ms = now_ms() - t0;
  if (status != GT_SUCCESS) { /* this shape runs on our own kernels */
    snprintf(p->why, sizeof p->why, "%s", gt_error_message());
    gt_error_clear();
    desc_destroy_all(&p->keep);
    if (p->done)
      (void)cudaEventDestroy(p->done);
    p->done = NULL;
    p->plan = NULL;
    p->ok = false;
    if (c->verbose) /* every rank */
      fprintf(stderr, "gridtrain: cuDNN attention %s: no usable plan (%s); gridtrain's own "
              "kernels run this shape\n", shape, p->why);
    else
      gt_warn("cuDNN attention %s: no usable plan (%s); gridtrain's own kernels run this "
              "shape", shape, p->why);
    return GT_SUCCESS;
  }
  p->ok = true;
  snprintf(c->last[dir], sizeof c->last[dir], "%s: %s, plan built in %.0f ms", shape, p->engine,
           p->build_ms);
  engine_info_update(c);
  if (c->verbose) /* every rank */
    fprintf(stderr, "gridtrain: cuDNN attention %s\n", c->last[dir]);
  else /* once per plan, rank 0 */
    gt_info("# cuDNN attention %s\n", c->last[dir]);
  *out = p;
  return GT_SUCCESS;
}

// ---- execution ------------------------------------------------------------------------

static int plan_execute(gt_cuda_cudnn *c, attn_plan *p, int n, const int64_t *uids,
                        void *const *ptrs, void *workspace)
{
  int rc = GT_SUCCESS;
  cudnnBackendDescriptor_t pack = NULL;
  TRY_CUDNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  TRY_CUDNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                     n, uids));
  TRY_CUDNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, n, ptrs));
  TRY_CUDNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                     CUDNN_TYPE_VOID_PTR, 1, &workspace));
  TRY_CUDNN(cudnnBackendFinalize(pack));
  TRY_CUDNN(cudnnBackendExecute(c->handle, p->plan, pack));
  cudaError_t err = cudaEventRecord(p->done, c->stream);
  if (err != cudaSuccess)
    rc = gt_cuda_error((int)err, "cudaEventRecord(p->done, c->stream)", __FILE__, __LINE__,
                       __func__);
done:
  if (pack)
    (void)cudnnBackendDestroyDescriptor(pack);
  return rc;
}

/* cuDNN takes the call: bf16 or fp16, a non-empty shape, key/value heads
 * that divide the query heads (grouped-query ones only where c->gqa), and
 * every tensor 16-byte aligned (the tensors declare it; H*hs and Hkv*hs
 * multiples of 8 make the K and V views, and so every row, aligned). */
static bool attn_takes(const gt_cuda_cudnn *c, gt_dtype dt, int64_t B, int64_t T, int64_t H,
                       int64_t Hkv, const void *const *ptrs, int n)
{
  if ((dt != GT_BF16 && dt != GT_F16) || B <= 0 || T <= 0 || H <= 0 || Hkv <= 0 ||
      H % Hkv != 0 || (Hkv != H && !c->gqa))
    return false;
  for (int i = 0; i < n; i++)
    if (((uintptr_t)ptrs[i] & 15u) != 0)
      return false;
  return true;
}

int gt_cuda_attention_forward_cudnn(gt_backend *be, gt_dtype dt, void *out, float *lse,
                                    const void *qkv, int64_t B, int64_t T, int64_t H,
                                    int64_t Hkv, int64_t hs, bool *ran)
{
  *ran = false;
  gt_cuda_cudnn *c = gt_cuda_of(be)->cudnn;
  const size_t e = gt_dtype_size(dt), k_at = (size_t)(H * hs) * e,
               v_at = (size_t)((H + Hkv) * hs) * e;
  char *q = (char *)qkv;
  void *ptrs[7] = {q, q + k_at, q + v_at, out, lse, NULL, NULL};
  if (!c || !attn_takes(c, dt, B, T, H, Hkv, (const void *const *)ptrs, 5))
    return GT_SUCCESS;
  attn_plan *p = NULL;
  GT_CALL(plan_get(c, DIR_FWD, dt, B, T, H, Hkv, hs, &p));
  if (!p)
    return GT_SUCCESS;
  ptrs[5] = &p->scale;
  ptrs[6] = &p->neg_inf;
  static const int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
  void *ws = NULL;
  if (p->scratch > 0)
    GT_CALL(gt_cuda_scratch(be, p->scratch, &ws));
  GT_CALL(plan_execute(c, p, 7, uids, ptrs, ws));
  *ran = true;
  return GT_SUCCESS;
}

int gt_cuda_attention_backward_cudnn(gt_backend *be, gt_dtype dt, void *dqkv,
                                     const void *dout, const void *qkv, const void *out,
                                     const float *lse, int64_t B, int64_t T, int64_t H,
                                     int64_t Hkv, int64_t hs, bool *ran)
{
  *ran = false;
  gt_cuda_cudnn *c = gt_cuda_of(be)->cudnn;
  const size_t e = gt_dtype_size(dt), k_at = (size_t)(H * hs) * e,
               v_at = (size_t)((H + Hkv) * hs) * e;
  char *q = (char *)qkv, *dq = (char *)dqkv;
  void *ptrs[14] = {q,  q + k_at,  q + v_at,  (void *)out, (void *)dout, (void *)lse, dq,
                    dq + k_at, dq + v_at, NULL, NULL, NULL, NULL, NULL};
  if (!c || !attn_takes(c, dt, B, T, H, Hkv, (const void *const *)ptrs, 9))
    return GT_SUCCESS;
  const attn_dir dir = c->fast_backward ? DIR_BWD_FAST : DIR_BWD;
  attn_plan *p = NULL;
  GT_CALL(plan_get(c, dir, dt, B, T, H, Hkv, hs, &p));
  if (!p)
    return GT_SUCCESS;
  void *ws;
  GT_CALL(gt_cuda_scratch(be, p->scratch, &ws));
  char *w = ws;
  ptrs[9] = &p->scale;
  ptrs[10] = &p->neg_inf;
  ptrs[11] = &p->one;
  ptrs[12] = w + p->sum_off;
  int n = 13;
  if (dir == DIR_BWD_FAST) {
    ptrs[13] = w + p->accum_off;
    n = 14;
    /* cudnn-frontend zeroes dQ_accum itself before cuDNN 9.6; later cuDNN does */
    if (c->version < 90600)
      GT_CALL_CUDA(cudaMemsetAsync(ptrs[13], 0, p->scratch - p->accum_off, c->stream));
  }
  static const int64_t uids[14] = {UID_Q,  UID_K,  UID_V,  UID_O,     UID_DO,      UID_STATS,
                                   UID_DQ, UID_DK, UID_DV, UID_SCALE, UID_NEG_INF, UID_ONE,
                                   UID_SOFTMAX_SUM, UID_DQ_ACCUM};
  GT_CALL(plan_execute(c, p, n, uids, ptrs, ws));
  *ran = true;
  return GT_SUCCESS;
}

// ---- handle ---------------------------------------------------------------------------

bool gt_cuda_cudnn_built(void) { return true; }

int gt_cuda_cudnn_init(gt_backend *be, bool fast_backward)
{
  gt_cuda *g = gt_cuda_of(be);
  GT_CALL(gt_cuda_dl_load(GT_DL_CUDNN));
  gt_cuda_cudnn *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  c->fast_backward = fast_backward;
  c->gqa = g->cc_major == 9; /* see the top of the file */
  c->version = cudnnGetVersion();
  c->stream = gt_cuda_compute(be);
  const char *verbose = getenv("GT_CUDNN_VERBOSE");
  c->verbose = verbose && verbose[0] && strcmp(verbose, "0") != 0;
  int status = (int)cudnnCreate(&c->handle);
  if (status == 0) {
    status = (int)cudnnSetStream(c->handle, c->stream);
    if (status != 0) {
      int rc = gt_cudnn_error(status, "cudnnSetStream(c->handle, c->stream)", __FILE__,
                              __LINE__, __func__);
      (void)cudnnDestroy(c->handle);
      free(c);
      return rc;
    }
  } else {
    free(c);
    return gt_cudnn_error(status, "cudnnCreate(&c->handle)", __FILE__, __LINE__, __func__);
  }
  engine_info_update(c);
  g->cudnn = c;
  return GT_SUCCESS;
}

/* cuda_core.c has waited for the device before this. */
void gt_cuda_cudnn_fini(gt_backend *be)
{
  gt_cuda *g = gt_cuda_of(be);
  gt_cuda_cudnn *c = g ? g->cudnn : NULL;
  if (!c)
    return;
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (c->slot[i].used)
      plan_release(&c->slot[i]);
  (void)cudnnDestroy(c->handle);
  free(c);
  g->cudnn = NULL;
}

bool gt_cuda_cudnn_takes_gqa(gt_backend *be)
{
  gt_cuda *g = be ? gt_cuda_of(be) : NULL;
  return g && g->cudnn && g->cudnn->gqa;
}

const char *gt_cuda_cudnn_engine_info(gt_backend *be)
{
  gt_cuda *g = be ? gt_cuda_of(be) : NULL;
  if (!g || !g->cudnn)
    return "cuDNN attention not in use";
  return g->cudnn->info;
}
