/*
 * cuda_gemm.c - the linear layer of the cuda backend through cuBLASLt:
 * forward with the bias in the epilogue and the residual as C (beta = 1),
 * backward with the bias gradient from the BGRADB epilogue of the weight
 * gradient product where cuBLASLt offers one, else from a product with a
 * ones vector (added to dbias by our axpby kernel). All work is queued on
 * the compute stream. cuBLASLt is loaded when the backend is created
 * (cuda_dl.h).
 *
 * Precisions: A and B in dt, fp32 accumulation (CUBLAS_COMPUTE_32F, never
 * TF32) and fp32 scale; D (and C) in dt for activations, fp32 for dw and
 * dbias. Split-K reductions are restricted to those done in a separate pass
 * in the compute type (no in-place atomics, and for 16-bit outputs no
 * partial sums rounded to the output type), so each output is rounded once.
 *
 * Determinism: the algorithm of a product is chosen once, by the heuristic,
 * for its (kind, dt, m, n, k, epilogue, beta, pointer alignment) and cached
 * with its descriptors, so the same call always runs the same kernel; the
 * pointer alignment of a call site is fixed by the allocator and the
 * parameter layout, hence the same in every run and after a restart.
 */
#define GT_DL_WANT_CUBLASLT /* cuBLASLt, loaded at run time */
#include "cuda_dl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "gridtrain/error.h"

#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's advice for Hopper */
#define GEMM_MAX_DIM INT32_MAX                  /* rows/cols cuBLASLt kernels take */
#define GEMM_MAX_ALIGN 256u                     /* cuBLASLt's default alignment */
#define ONES_MIN 4096                           /* first size of a ones vector */

// ---- the products: row-major gridtrain -> column-major cuBLASLt ------------------
/*
 * A row-major (R, C) matrix with leading dimension C is the column-major
 * (C, R) matrix with the same leading dimension: its transpose. cuBLASLt
 * computes D(m,n) = op(A)(m,k) op(B)(k,n) (+ beta C), all column-major, so
 * every row-major product Y = X W is computed as Y^T = W^T X^T with the
 * operands swapped. A stored matrix is (rows x cols, ld) below.
 *
 *   forward  out(N,OC) = in(N,C) w(OC,C)^T
 *            out^T(OC,N) = w(OC,C) . in^T(C,N)
 *            A = w    stored (C x OC, ld C), op T  -> (OC x C)
 *            B = in   stored (C x N,  ld C), op N  -> (C x N)
 *            D = out  (OC x N, ld OC); m = OC, n = N, k = C
 *            bias(OC): EPILOGUE_BIAS, one value per row of D (broadcast
 *            over the N columns = tokens); residual: C (same layout), beta 1
 *   C = 0    out^T(OC,N) = bias(OC x 1, ld OC) . ones(1 x N, ld 1) (+ residual)
 *            m = OC, n = N, k = 1 (no product to fuse the bias into)
 *   din      din(N,C) = dout(N,OC) w(OC,C)
 *            din^T(C,N) = w^T(C,OC) . dout^T(OC,N)
 *            A = w    stored (C x OC, ld C),  op N
 *            B = dout stored (OC x N, ld OC), op N
 *            D = din  (C x N, ld C); m = C, n = N, k = OC; beta 0
 *   dw       dw(OC,C) += dout^T(OC,N) in(N,C)
 *            dw^T(C,OC) += in^T(C,N) . dout(N,OC)
 *            A = in   stored (C x N,  ld C),  op N
 *            B = dout stored (OC x N, ld OC), op T -> (N x OC)
 *            C = D = dw (C x OC, ld C), fp32; m = C, n = OC, k = N; beta 1
 *            dbias: EPILOGUE_BGRADB = sums of op(B) over k, one per column
 *            of D: dbias[o] = sum_i dout[i][o], written ("=") to fp32 scratch
 *   dbias    (fallback) dbias(OC) += dout^T(OC,N) ones(N)
 *            A = dout stored (OC x N, ld OC), op N
 *            B = ones stored (N x 1, ld N),   op N
 *            C = D = dbias (OC x 1, ld OC), fp32; m = OC, n = 1, k = N; beta 1
 */
typedef enum { OP_FWD = 0, OP_FWD_K0, OP_DIN, OP_DW, OP_DBIAS, OP_KINDS } op_kind;

static const char *const op_names[OP_KINDS] = {"forward", "forward (C = 0)", "input gradient",
                                               "weight gradient", "bias gradient"};

typedef struct {
  op_kind kind;
  gt_dtype dt;
  uint64_t m, n, k;
  cublasOperation_t ta, tb;
  int64_t lda, ldb, ldc;
  cudaDataType_t ab_t, cd_t;   /* A and B; C and D */
  cublasLtEpilogue_t epilogue; /* DEFAULT, BIAS or BGRADB */
  cudaDataType_t bias_t;       /* bias (dt) or bias gradient (fp32) */
  float beta;
  bool optional; /* no algorithm: report it instead of failing (BGRADB) */
} gemm_spec;

static cudaDataType_t cuda_type(gt_dtype dt)
{
  return dt == GT_BF16 ? CUDA_R_16BF : dt == GT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static void spec_init(gemm_spec *s, op_kind kind, gt_dtype dt, int64_t N, int64_t C, int64_t OC)
{
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->dt = dt;
  s->ab_t = cuda_type(dt);
  s->cd_t = cuda_type(dt);
  s->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  s->bias_t = cuda_type(dt);
  s->ta = s->tb = CUBLAS_OP_N;
  switch (kind) {
  case OP_FWD:
    s->m = (uint64_t)OC, s->n = (uint64_t)N, s->k = (uint64_t)C;
    s->ta = CUBLAS_OP_T;
    s->lda = C, s->ldb = C, s->ldc = OC;
    break;
  case OP_FWD_K0:
    s->m = (uint64_t)OC, s->n = (uint64_t)N, s->k = 1;
    s->lda = OC, s->ldb = 1, s->ldc = OC;
    break;
  case OP_DIN:
    s->m = (uint64_t)C, s->n = (uint64_t)N, s->k = (uint64_t)OC;
    s->lda = C, s->ldb = OC, s->ldc = C;
    break;
  case OP_DW:
    s->m = (uint64_t)C, s->n = (uint64_t)OC, s->k = (uint64_t)N;
    s->tb = CUBLAS_OP_T;
    s->lda = C, s->ldb = OC, s->ldc = C;
    s->cd_t = s->bias_t = CUDA_R_32F;
    break;
  default: /* OP_DBIAS */
    s->m = (uint64_t)OC, s->n = 1, s->k = (uint64_t)N;
    s->lda = OC, s->ldb = N, s->ldc = OC;
    s->cd_t = s->bias_t = CUDA_R_32F;
    break;
  }
}

// ---- cached plans: descriptors and the chosen algorithm, by key --------------------

typedef struct {
  op_kind kind;
  gt_dtype dt;
  cublasLtEpilogue_t epilogue;
  bool beta; /* beta != 0 */
  unsigned align;
  uint64_t m, n, k;
} plan_key;

typedef struct {
  bool used; /* slot taken */
  bool ok;   /* an algorithm was found (false only for an optional spec) */
  plan_key key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c; /* c serves C and D */
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulAlgo_t algo;
} plan;

/* A buffer kept until fini: a device ones vector that a larger one replaced
 * (queued work may still read it) and the host source of each fill. */
typedef struct kept {
  struct kept *next;
  void *dev, *host;
} kept;

struct gt_cuda_gemm {
  cublasLtHandle_t lt;
  void *workspace;
  size_t workspace_bytes;
  plan *plans; /* open addressing, linear probing; cap a power of two */
  size_t cap, count;
  void *ones[3]; /* per dt: ones_n[dt] ones */
  int64_t ones_n[3];
  kept *kept;
};

static bool key_eq(const plan_key *x, const plan_key *y)
{
  return x->kind == y->kind && x->dt == y->dt && x->epilogue == y->epilogue &&
         x->beta == y->beta && x->align == y->align && x->m == y->m && x->n == y->n &&
         x->k == y->k;
}

static uint64_t hash_mix(uint64_t h, uint64_t v)
{
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t key_hash(const plan_key *k)
{
  uint64_t h = 0xcbf29ce484222325ull;
  h = hash_mix(h, (uint64_t)k->kind | (uint64_t)k->dt << 8 | (uint64_t)k->beta << 16 |
                      (uint64_t)k->align << 24);
  h = hash_mix(h, (uint64_t)k->epilogue);
  h = hash_mix(h, k->m);
  h = hash_mix(h, k->n);
  h = hash_mix(h, k->k);
  return h ^ (h >> 31);
}

static plan *plan_find(gt_cuda_gemm *g, const plan_key *key)
{
  if (g->cap == 0)
    return NULL;
  for (size_t i = key_hash(key) & (g->cap - 1);; i = (i + 1) & (g->cap - 1)) {
    if (!g->plans[i].used)
      return NULL;
    if (key_eq(&g->plans[i].key, key))
      return &g->plans[i];
  }
}

static plan *slot_for(plan *slots, size_t cap, const plan_key *key)
{
  size_t i = key_hash(key) & (cap - 1);
  while (slots[i].used)
    i = (i + 1) & (cap - 1);
  return &slots[i];
}

/* Store p (by value) and return where it now lives. */
static int plan_insert(gt_cuda_gemm *g, const plan *p, plan **stored)
{
  if ((g->count + 1) * 2 > g->cap) {
    const size_t cap = g->cap ? 2 * g->cap : 64;
    plan *slots = calloc(cap, sizeof *slots);
    GT_CHECK_ALLOC(slots, cap * sizeof *slots);
    for (size_t i = 0; i < g->cap; i++)
      if (g->plans[i].used)
        *slot_for(slots, cap, &g->plans[i].key) = g->plans[i];
    free(g->plans);
    g->plans = slots;
    g->cap = cap;
  }
  *stored = slot_for(g->plans, g->cap, &p->key);
  **stored = *p;
  g->count++;
  return GT_SUCCESS;
}

static void plan_release(plan *p)
{
  if (p->pref)
    cublasLtMatmulPreferenceDestroy(p->pref);
  if (p->c)
    cublasLtMatrixLayoutDestroy(p->c);
  if (p->b)
    cublasLtMatrixLayoutDestroy(p->b);
  if (p->a)
    cublasLtMatrixLayoutDestroy(p->a);
  if (p->desc)
    cublasLtMatmulDescDestroy(p->desc);
  p->pref = NULL, p->c = p->b = p->a = NULL, p->desc = NULL;
}

/* Descriptors of s and the heuristic's best algorithm under our preferences.
 * bias_probe: a device address with exactly the call's alignment, which the
 * heuristic reads the expected bias alignment from (it never dereferences
 * it). Fills p; the caller releases p when this fails. */
static int plan_build(gt_cuda_gemm *g, const gemm_spec *s, const plan_key *key,
                      const void *bias_probe, plan *p)
{
  memset(p, 0, sizeof *p);
  p->used = true;
  p->key = *key;
  const int32_t ta = (int32_t)s->ta, tb = (int32_t)s->tb;
  const uint32_t epilogue = (uint32_t)s->epilogue;
  GT_CALL_CUBLAS(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  GT_CALL_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  GT_CALL_CUBLAS(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  GT_CALL_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                &epilogue, sizeof epilogue));
  if (s->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const int32_t bias_t = (int32_t)s->bias_t;
    GT_CALL_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &bias_t, sizeof bias_t));
    GT_CALL_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &bias_probe, sizeof bias_probe));
  }
  /* stored shapes: op(A) is (m x k), op(B) is (k x n) */
  const bool na = s->ta == CUBLAS_OP_N, nb = s->tb == CUBLAS_OP_N;
  GT_CALL_CUBLAS(cublasLtMatrixLayoutCreate(&p->a, s->ab_t, na ? s->m : s->k, na ? s->k : s->m,
                                            s->lda));
  GT_CALL_CUBLAS(cublasLtMatrixLayoutCreate(&p->b, s->ab_t, nb ? s->k : s->n, nb ? s->n : s->k,
                                            s->ldb));
  GT_CALL_CUBLAS(cublasLtMatrixLayoutCreate(&p->c, s->cd_t, s->m, s->n, s->ldc));

  const uint64_t ws = g->workspace_bytes;
  uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (s->cd_t == CUDA_R_32F) /* fp32 partials: the same as the compute type */
    schemes |= CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  const uint32_t align = key->align;
  GT_CALL_CUBLAS(cublasLtMatmulPreferenceCreate(&p->pref));
  GT_CALL_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  GT_CALL_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      p->pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
  static const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; i++)
    GT_CALL_CUBLAS(
        cublasLtMatmulPreferenceSetAttribute(p->pref, align_attrs[i], &align, sizeof align));

  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  memset(&result, 0, sizeof result);
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->a, p->b, p->c,
                                                           p->c, p->pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(p->pref);
  p->pref = NULL;
  const bool none = st == CUBLAS_STATUS_NOT_SUPPORTED ||
                    (st == CUBLAS_STATUS_SUCCESS &&
                     (found < 1 || result.state != CUBLAS_STATUS_SUCCESS ||
                      result.workspaceSize > g->workspace_bytes));
  if (s->optional && (none || st == CUBLAS_STATUS_INVALID_VALUE)) {
    plan_release(p); /* remembered as "no algorithm" */
    p->ok = false;
    return GT_SUCCESS;
  }
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
    return gt_cublas_error((int)st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
                           __func__);
  GT_CHECK(!none, GT_ERR_DEVICE,
           "cuBLASLt has no algorithm for the linear %s product (m=%llu, n=%llu, k=%llu, "
           "%s, epilogue %u, beta %d, %u-byte aligned, %zu bytes of workspace)",
           op_names[s->kind], (unsigned long long)s->m, (unsigned long long)s->n,
           (unsigned long long)s->k, gt_dtype_name(s->dt), (unsigned)s->epilogue,
           key->beta ? 1 : 0, key->align, g->workspace_bytes);
  p->algo = result.algo;
  p->ok = true;
  return GT_SUCCESS;
}

static int plan_get(gt_cuda_gemm *g, const gemm_spec *s, const plan_key *key, plan **out)
{
  *out = plan_find(g, key);
  if (*out)
    return GT_SUCCESS;
  /* the workspace is 256-byte aligned: offset by align for exactly align */
  const void *probe = (const char *)g->workspace + (key->align < GEMM_MAX_ALIGN ? key->align : 0);
  plan p;
  const int rc = plan_build(g, s, key, probe, &p);
  if (rc != GT_SUCCESS) {
    plan_release(&p);
    return gt_error_push(rc, __FILE__, __LINE__, __func__);
  }
  const int irc = plan_insert(g, &p, out);
  if (irc != GT_SUCCESS) {
    plan_release(&p);
    return gt_error_push(irc, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

/* The largest power of two (at most 256) that divides every non-NULL pointer. */
static unsigned common_alignment(const void *const *ptrs, int n)
{
  uintptr_t bits = GEMM_MAX_ALIGN;
  for (int i = 0; i < n; i++)
    if (ptrs[i])
      bits |= (uintptr_t)ptrs[i];
  return (unsigned)(bits & (~bits + 1));
}

/* D = op(A) op(B) (+ beta Cin) (+ epilogue), queued on the compute stream.
 * bias: the bias (BIAS) or the bias gradient output (BGRADB). *ran (may be
 * NULL for a required spec) says whether it ran: false only when s is
 * optional and cuBLASLt has no algorithm for it. */
static int gemm(gt_backend *be, const gemm_spec *s, const void *A, const void *B,
                const void *Cin, void *D, const void *bias, bool *ran)
{
  gt_cuda_gemm *g = gt_cuda_of(be)->gemm;
  const void *ptrs[5] = {A, B, Cin, D, bias};
  plan_key key;
  memset(&key, 0, sizeof key);
  key.kind = s->kind;
  key.dt = s->dt;
  key.epilogue = s->epilogue;
  key.beta = s->beta != 0.0f;
  key.align = common_alignment(ptrs, 5);
  key.m = s->m, key.n = s->n, key.k = s->k;
  plan *p;
  GT_CALL(plan_get(g, s, &key, &p));
  if (ran)
    *ran = p->ok;
  if (!p->ok) {
    GT_ASSERT(s->optional);
    return GT_SUCCESS;
  }
  if (s->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    GT_CALL_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &bias, sizeof bias));
  const float alpha = 1.0f, beta = s->beta;
  GT_CALL_CUBLAS(cublasLtMatmul(g->lt, p->desc, &alpha, A, p->a, B, p->b, &beta, Cin, p->c, D,
                                p->c, &p->algo, g->workspace, g->workspace_bytes,
                                gt_cuda_compute(be)));
  return GT_SUCCESS;
}

// ---- the ones vector (bias of a C = 0 forward, the dbias fallback) ---------------

static void fill_ones(gt_dtype dt, void *host, int64_t n)
{
  if (dt == GT_F32) {
    float *f = host;
    for (int64_t i = 0; i < n; i++)
      f[i] = 1.0f;
  } else {
    const uint16_t one = dt == GT_BF16 ? 0x3F80 : 0x3C00; /* bf16, fp16 1.0 */
    uint16_t *h = host;
    for (int64_t i = 0; i < n; i++)
      h[i] = one;
  }
}

/* *ones = at least n ones of type dt on the device, filled on the compute
 * stream. A vector that is outgrown stays allocated until fini (queued work
 * may still read it), so growing never waits. */
static int ones_get(gt_backend *be, gt_dtype dt, int64_t n, const void **ones)
{
  gt_cuda_gemm *g = gt_cuda_of(be)->gemm;
  if (g->ones_n[dt] < n) {
    int64_t cap = 2 * g->ones_n[dt];
    cap = cap < ONES_MIN ? ONES_MIN : cap;
    cap = cap < n ? n : cap;
    const size_t bytes = (size_t)cap * gt_dtype_size(dt);
    kept *k = calloc(1, sizeof *k);
    GT_CHECK_ALLOC(k, sizeof *k);
    k->host = malloc(bytes);
    if (!k->host) {
      free(k);
      return GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", bytes);
    }
    fill_ones(dt, k->host, cap);
    void *dev = NULL;
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(dev, k->host, bytes, cudaMemcpyHostToDevice, gt_cuda_compute(be));
      if (e != cudaSuccess)
        cudaFree(dev);
    }
    if (e != cudaSuccess) {
      free(k->host);
      free(k);
      return gt_cuda_error((int)e, "cudaMalloc/cudaMemcpyAsync of the ones vector", __FILE__,
                           __LINE__, __func__);
    }
    k->dev = g->ones[dt]; /* the outgrown vector (or NULL) */
    k->next = g->kept;
    g->kept = k;
    g->ones[dt] = dev;
    g->ones_n[dt] = cap;
  }
  *ones = g->ones[dt];
  return GT_SUCCESS;
}

// ---- checks ----------------------------------------------------------------------

static int check_args(const char *what, gt_dtype dt, int64_t N, int64_t C, int64_t OC)
{
  GT_CHECK(dt == GT_F32 || dt == GT_BF16 || dt == GT_F16, GT_ERR_INPUT,
           "%s: element type %s is not fp32, bf16 or fp16", what, gt_dtype_name(dt));
  GT_CHECK(N >= 0 && C >= 0 && OC >= 0, GT_ERR_INPUT,
           "%s: negative size (N=%lld, C=%lld, OC=%lld)", what, (long long)N, (long long)C,
           (long long)OC);
  GT_CHECK(N <= GEMM_MAX_DIM && C <= GEMM_MAX_DIM && OC <= GEMM_MAX_DIM, GT_ERR_INPUT,
           "%s: N=%lld, C=%lld, OC=%lld: cuBLASLt takes matrix dimensions up to %lld; use "
           "smaller micro-batches (N = B*T) or split the layer over more tensor-parallel "
           "ranks (C, OC)",
           what, (long long)N, (long long)C, (long long)OC, (long long)GEMM_MAX_DIM);
  return GT_SUCCESS;
}

// ---- init and fini ---------------------------------------------------------------

static void gemm_free(gt_cuda_gemm *g)
{
  if (!g)
    return;
  for (size_t i = 0; i < g->cap; i++)
    if (g->plans[i].used)
      plan_release(&g->plans[i]);
  free(g->plans);
  for (int t = 0; t < 3; t++)
    if (g->ones[t])
      cudaFree(g->ones[t]);
  while (g->kept) {
    kept *k = g->kept;
    g->kept = k->next;
    if (k->dev)
      cudaFree(k->dev);
    free(k->host);
    free(k);
  }
  if (g->workspace)
    cudaFree(g->workspace);
  if (g->lt)
    cublasLtDestroy(g->lt);
  free(g);
}

static int gemm_setup(gt_backend *be, gt_cuda_gemm *g)
{
  (void)be;
  GT_CALL_CUBLAS(cublasLtCreate(&g->lt));
  g->workspace_bytes = GEMM_WORKSPACE_BYTES;
  GT_CALL_CUDA(cudaMalloc(&g->workspace, g->workspace_bytes));
  return GT_SUCCESS;
}

int gt_cuda_gemm_init(gt_backend *be)
{
  gt_cuda *cu = gt_cuda_of(be);
  GT_ASSERT(cu && !cu->gemm);
  GT_CALL(gt_cuda_dl_load(GT_DL_CUBLASLT));
  gt_cuda_gemm *g = calloc(1, sizeof *g);
  GT_CHECK_ALLOC(g, sizeof *g);
  const int rc = gemm_setup(be, g);
  if (rc != GT_SUCCESS) {
    gemm_free(g);
    return gt_error_push(rc, __FILE__, __LINE__, __func__);
  }
  cu->gemm = g;
  return GT_SUCCESS;
}

/* After the compute stream has drained (backend destroy); errors ignored. */
void gt_cuda_gemm_fini(gt_backend *be)
{
  gt_cuda *cu = gt_cuda_of(be);
  if (!cu)
    return;
  gemm_free(cu->gemm);
  cu->gemm = NULL;
}

// ---- linear forward and backward -------------------------------------------------

int gt_cuda_linear_forward(gt_backend *be, gt_dtype dt, void *out, const void *in,
                           const void *w, const void *bias, const void *residual, int64_t N,
                           int64_t C, int64_t OC)
{
  GT_CALL(check_args("linear forward", dt, N, C, OC));
  GT_ASSERT(gt_cuda_of(be)->gemm);
  if (N == 0 || OC == 0)
    return GT_SUCCESS;
  GT_ASSERT(out && out != residual);
  gemm_spec s;
  if (C == 0) { /* out = bias + residual */
    const size_t bytes = (size_t)N * (size_t)OC * gt_dtype_size(dt);
    if (!bias) {
      if (residual)
        GT_CALL_CUDA(cudaMemcpyAsync(out, residual, bytes, cudaMemcpyDeviceToDevice,
                                     gt_cuda_compute(be)));
      else
        GT_CALL_CUDA(cudaMemsetAsync(out, 0, bytes, gt_cuda_compute(be)));
      return GT_SUCCESS;
    }
    const void *ones;
    GT_CALL(ones_get(be, dt, N, &ones));
    spec_init(&s, OP_FWD_K0, dt, N, C, OC);
    s.beta = residual ? 1.0f : 0.0f;
    GT_CALL(gemm(be, &s, bias, ones, residual ? residual : out, out, NULL, NULL));
    return GT_SUCCESS;
  }
  GT_ASSERT(in && w);
  spec_init(&s, OP_FWD, dt, N, C, OC);
  s.beta = residual ? 1.0f : 0.0f;
  if (bias)
    s.epilogue = CUBLASLT_EPILOGUE_BIAS;
  GT_CALL(gemm(be, &s, w, in, residual ? residual : out, out, bias, NULL));
  return GT_SUCCESS;
}

int gt_cuda_linear_backward(gt_backend *be, gt_dtype dt, void *din, float *dw, float *dbias,
                            const void *dout, const void *in, const void *w, int64_t N,
                            int64_t C, int64_t OC)
{
  GT_CALL(check_args("linear backward", dt, N, C, OC));
  gt_cuda_gemm *g = gt_cuda_of(be)->gemm;
  GT_ASSERT(g);
  const cudaStream_t stream = gt_cuda_compute(be);
  if (N == 0) /* din is empty; dw and dbias gain nothing */
    return GT_SUCCESS;
  if (OC == 0) { /* din = an empty sum */
    if (din && C > 0)
      GT_CALL_CUDA(cudaMemsetAsync(din, 0, (size_t)N * (size_t)C * gt_dtype_size(dt), stream));
    return GT_SUCCESS;
  }
  GT_ASSERT(dout);
  gemm_spec s;
  if (din && C > 0) {
    GT_ASSERT(w);
    spec_init(&s, OP_DIN, dt, N, C, OC);
    GT_CALL(gemm(be, &s, w, dout, din, din, NULL, NULL));
  }
  bool dbias_done = false;
  if (C > 0 && dw) {
    GT_ASSERT(in);
    spec_init(&s, OP_DW, dt, N, C, OC);
    s.beta = 1.0f;
    if (dbias) { /* the bias gradient from the dw product's epilogue, if offered */
      void *scratch;
      GT_CALL(gt_cuda_scratch(be, (size_t)OC * sizeof(float), &scratch));
      s.epilogue = CUBLASLT_EPILOGUE_BGRADB;
      s.optional = true;
      GT_CALL(gemm(be, &s, in, dout, dw, dw, scratch, &dbias_done));
      if (dbias_done) /* dbias = 1 * bias gradient + 1 * dbias, one fp32 add each */
        GT_CALL(gt_cuda_axpby(be, dbias, 1.0f, scratch, 1.0f, (size_t)OC));
      s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      s.optional = false;
    }
    if (!dbias_done)
      GT_CALL(gemm(be, &s, in, dout, dw, dw, NULL, NULL));
  }
  if (dbias && !dbias_done) { /* dbias += dout^T ones */
    const void *ones;
    GT_CALL(ones_get(be, dt, N, &ones));
    spec_init(&s, OP_DBIAS, dt, N, C, OC);
    s.beta = 1.0f;
    GT_CALL(gemm(be, &s, dout, ones, dbias, dbias, NULL, NULL));
  }
  return GT_SUCCESS;
}

// ---- errors ----------------------------------------------------------------------

int gt_cublas_error(int status, const char *call, const char *file, int line, const char *func)
{
  /* cuBLAS and cuBLASLt share cublasStatus_t */
  const char *name = cublasLtGetStatusName((cublasStatus_t)status);
  const char *text = cublasLtGetStatusString((cublasStatus_t)status);
  return gt_error_set(GT_ERR_DEVICE, file, line, func, "%s failed: %s: %s (%d)", call,
                      name ? name : "unknown cuBLAS status", text ? text : "no description",
                      status);
}
