/*
 * cpu_dnnl.c - bf16 matrix products of the fast CPU backend through
 * oneDNN's matmul (its brgemm kernels use AVX512_BF16 where the CPU has
 * it), when configure found oneDNN.
 *
 * Measured on the 2-core EPYC of the development machine against
 * converting to fp32 and calling OpenBLAS sgemm (benchmarks/README.md):
 * 1.6-2.6x faster on the GPT-2 124M shapes with OpenBLAS's AVX-512 kernels,
 * about 4x with its Haswell kernels; the same accuracy (one rounding of an
 * fp32 accumulator). So bf16 products go here; fp16 (no AVX512_FP16 on the
 * machines we have) and builds without oneDNN convert and use sgemm.
 * GT_CPU_BF16_GEMM=sgemm forces the conversion path (for benchmarks).
 *
 * Primitives are created once per shape and kept in a small per-thread
 * cache (ops run on one thread at a time per stream, so no locks), with
 * the OpenMP thread count part of the key.
 */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backends.h"
#include "gridtrain/error.h"

#ifdef GT_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#define GT_DNNL_CACHE 64

typedef struct {
  int64_t M, N, K;
  bool ta, tb, bias, accumulate;
  gt_dtype c_type;
  int threads;
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c, bias_mem;
  unsigned long long used;
} gt_dnnl_entry;

typedef struct {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  gt_dnnl_entry e[GT_DNNL_CACHE];
  int n;
  unsigned long long clock;
} gt_dnnl_state;

static _Thread_local gt_dnnl_state *gt_dnnl_tls;

#define GT_CALL_DNNL(expr)                                                                   \
  do {                                                                                       \
    dnnl_status_t gt_dnnl_status_ = (expr);                                                  \
    if (gt_dnnl_status_ != dnnl_success)                                                     \
      return gt_error_set(GT_ERR_BLAS, __FILE__, __LINE__, __func__,                         \
                          "oneDNN: %s failed (status %d)", #expr, (int)gt_dnnl_status_);     \
  } while (0)

static int gt_dnnl_state_get(gt_dnnl_state **out)
{
  if (!gt_dnnl_tls) {
    gt_dnnl_state *s = calloc(1, sizeof *s);
    GT_CHECK_ALLOC(s, sizeof *s);
    if (dnnl_engine_create(&s->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&s->stream, s->engine, dnnl_stream_default_flags) != dnnl_success) {
      free(s);
      return GT_ERROR(GT_ERR_BLAS, "oneDNN: cannot create a CPU engine and stream");
    }
    gt_dnnl_tls = s; /* lives as long as its thread (a few per process) */
  }
  *out = gt_dnnl_tls;
  return GT_SUCCESS;
}

static void gt_dnnl_entry_free(gt_dnnl_entry *e)
{
  if (e->prim)
    dnnl_primitive_destroy(e->prim);
  dnnl_memory_t mems[4] = {e->a, e->b, e->c, e->bias_mem};
  for (int i = 0; i < 4; i++)
    if (mems[i])
      dnnl_memory_destroy(mems[i]);
  memset(e, 0, sizeof *e);
}

/* The primitive of C(M,N) = op(A) op(B) [+ bias] [+ C] with bf16 A, B and
 * bias, C of c_type; row-major, transposes by strides. */
static int gt_dnnl_build(gt_dnnl_state *s, gt_dnnl_entry *e)
{
  dnnl_memory_desc_t am, bm, cm, biasm;
  dnnl_dims_t ad = {e->M, e->K}, as = {e->ta ? 1 : e->K, e->ta ? e->M : 1};
  dnnl_dims_t bd = {e->K, e->N}, bs = {e->tb ? 1 : e->N, e->tb ? e->K : 1};
  dnnl_dims_t cd = {e->M, e->N}, cs = {e->N, 1};
  dnnl_dims_t biasd = {1, e->N}, biass = {e->N, 1};
  const dnnl_data_type_t ct = e->c_type == GT_F32 ? dnnl_f32 : dnnl_bf16;
  GT_CALL_DNNL(dnnl_memory_desc_init_by_strides(&am, 2, ad, dnnl_bf16, as));
  GT_CALL_DNNL(dnnl_memory_desc_init_by_strides(&bm, 2, bd, dnnl_bf16, bs));
  GT_CALL_DNNL(dnnl_memory_desc_init_by_strides(&cm, 2, cd, ct, cs));
  GT_CALL_DNNL(dnnl_memory_desc_init_by_strides(&biasm, 2, biasd, dnnl_bf16, biass));
  dnnl_matmul_desc_t md;
  GT_CALL_DNNL(dnnl_matmul_desc_init(&md, &am, &bm, e->bias ? &biasm : NULL, &cm));
  dnnl_primitive_attr_t attr;
  GT_CALL_DNNL(dnnl_primitive_attr_create(&attr));
  dnnl_post_ops_t po = NULL;
  dnnl_status_t st = dnnl_success;
  if (e->accumulate) { /* C += product: the sum post-op reads C as it is */
    st = dnnl_post_ops_create(&po);
    if (st == dnnl_success)
      st = dnnl_post_ops_append_sum(po, 1.0f);
    if (st == dnnl_success)
      st = dnnl_primitive_attr_set_post_ops(attr, po);
  }
  dnnl_primitive_desc_t pd = NULL;
  if (st == dnnl_success)
    st = dnnl_primitive_desc_create(&pd, &md, attr, s->engine, NULL);
  if (po)
    dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  if (st == dnnl_success)
    st = dnnl_primitive_create(&e->prim, pd);
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  GT_CHECK(st == dnnl_success, GT_ERR_BLAS,
           "oneDNN: cannot create a bf16 matmul of %lld x %lld x %lld (status %d)",
           (long long)e->M, (long long)e->N, (long long)e->K, (int)st);
  GT_CALL_DNNL(dnnl_memory_create(&e->a, &am, s->engine, DNNL_MEMORY_NONE));
  GT_CALL_DNNL(dnnl_memory_create(&e->b, &bm, s->engine, DNNL_MEMORY_NONE));
  GT_CALL_DNNL(dnnl_memory_create(&e->c, &cm, s->engine, DNNL_MEMORY_NONE));
  GT_CALL_DNNL(dnnl_memory_create(&e->bias_mem, &biasm, s->engine, DNNL_MEMORY_NONE));
  return GT_SUCCESS;
}

static int gt_dnnl_lookup(gt_dnnl_state *s, const gt_dnnl_entry *key, gt_dnnl_entry **out)
{
  int oldest = 0;
  for (int i = 0; i < s->n; i++) {
    gt_dnnl_entry *e = &s->e[i];
    if (e->M == key->M && e->N == key->N && e->K == key->K && e->ta == key->ta &&
        e->tb == key->tb && e->bias == key->bias && e->accumulate == key->accumulate &&
        e->c_type == key->c_type && e->threads == key->threads) {
      e->used = ++s->clock;
      *out = e;
      return GT_SUCCESS;
    }
    if (e->used < s->e[oldest].used)
      oldest = i;
  }
  gt_dnnl_entry *e = s->n < GT_DNNL_CACHE ? &s->e[s->n++] : &s->e[oldest];
  gt_dnnl_entry_free(e);
  *e = *key;
  e->prim = NULL;
  e->a = e->b = e->c = e->bias_mem = NULL;
  int status = gt_dnnl_build(s, e);
  if (status != GT_SUCCESS) {
    gt_dnnl_entry_free(e); /* an empty slot matches nothing */
    e->M = -1;
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  e->used = ++s->clock;
  *out = e;
  return GT_SUCCESS;
}

bool gt_dnnl_bf16_enabled(void)
{
  static int enabled = -1;
  if (enabled < 0) {
    const char *env = getenv("GT_CPU_BF16_GEMM");
    enabled = !(env && strcmp(env, "sgemm") == 0);
  }
  return enabled;
}

int gt_dnnl_matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                        const void *B, const void *bias, bool accumulate, void *C,
                        gt_dtype c_type)
{
  if (M <= 0 || N <= 0)
    return GT_SUCCESS;
  gt_dnnl_state *s = NULL;
  GT_CALL(gt_dnnl_state_get(&s));
  gt_dnnl_entry key = {.M = M, .N = N, .K = K, .ta = ta, .tb = tb, .bias = bias != NULL,
                       .accumulate = accumulate, .c_type = c_type,
                       .threads = omp_get_max_threads()};
  gt_dnnl_entry *e = NULL;
  GT_CALL(gt_dnnl_lookup(s, &key, &e));
  GT_CALL_DNNL(dnnl_memory_set_data_handle(e->a, (void *)A));
  GT_CALL_DNNL(dnnl_memory_set_data_handle(e->b, (void *)B));
  GT_CALL_DNNL(dnnl_memory_set_data_handle(e->c, C));
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b},
                             {DNNL_ARG_DST, e->c}, {DNNL_ARG_BIAS, e->bias_mem}};
  if (bias)
    GT_CALL_DNNL(dnnl_memory_set_data_handle(e->bias_mem, (void *)bias));
  GT_CALL_DNNL(dnnl_primitive_execute(e->prim, s->stream, bias ? 4 : 3, args));
  GT_CALL_DNNL(dnnl_stream_wait(s->stream));
  return GT_SUCCESS;
}

const char *gt_dnnl_info(void)
{
  static char info[64];
  const dnnl_version_t *v = dnnl_version();
  snprintf(info, sizeof info, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
  return info;
}

#else /* no oneDNN: the conversion path does every product */

bool gt_dnnl_bf16_enabled(void) { return false; }

int gt_dnnl_matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                        const void *B, const void *bias, bool accumulate, void *C,
                        gt_dtype c_type)
{
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)B, (void)bias;
  (void)accumulate, (void)C, (void)c_type;
  return GT_ERROR(GT_ERR_INTERNAL, "internal error: oneDNN is not part of this build");
}

const char *gt_dnnl_info(void) { return "no oneDNN"; }

#endif
