/*
 * cuda_core.c - the "cuda" backend: device choice, device memory through a
 * caching allocator, pinned host memory, streams, events, copies, fills,
 * scratch, attention dispatch and the ops table (cuda_backend.h).
 *
 * Memory: cudaMalloc only (never managed memory). A freed block goes back
 * to a cache with an event recorded on every stream of the backend (the
 * compute stream and those stream_create made: the collectives' copies and
 * NCCL's work run there); a later alloc reuses a cached block of at least
 * the size (and at most twice it) once all those events have completed, so
 * no queued kernel or copy can still touch it. When cudaMalloc runs out,
 * the cache is released (after a device sync) and the allocation tried
 * again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_dl.h"
#include "cuda_entry.h"
#include "gridtrain/binding.h"
#include "gridtrain/cuda_info.h"
#include "gridtrain/log.h"

// ---- errors ---------------------------------------------------------------------------

int gt_cuda_error(int status, const char *call, const char *file, int line, const char *func)
{
  cudaError_t err = (cudaError_t)status;
  return gt_error_set(GT_ERR_DEVICE, file, line, func, "%s failed: %s (%s)", call,
                      cudaGetErrorString(err), cudaGetErrorName(err));
}

// ---- the caching allocator ---------------------------------------------------------------

typedef struct {
  void *ptr;
  size_t bytes;
  bool in_use;
  cudaEvent_t *freed; /* one per stream the block's last free recorded on */
  size_t nrecorded;   /* events recorded at the last free (0: none pending) */
  size_t nevents;     /* events created */
} gt_cuda_block;

struct gt_cuda_alloc {
  gt_cuda_block *blocks;
  size_t n, cap;
  size_t in_use_bytes, peak_bytes, cached_bytes;
};

static size_t gt_round_block(size_t bytes) { return (bytes + 511) & ~(size_t)511; }

static void gt_block_events_destroy(gt_cuda_block *b)
{
  for (size_t k = 0; k < b->nevents; k++)
    (void)cudaEventDestroy(b->freed[k]);
  free(b->freed);
  b->freed = NULL;
  b->nevents = b->nrecorded = 0;
}

static int gt_cuda_cache_release(gt_cuda_alloc *a)
{
  GT_CALL_CUDA(cudaDeviceSynchronize());
  size_t kept = 0;
  for (size_t i = 0; i < a->n; i++) {
    gt_cuda_block *b = &a->blocks[i];
    if (b->in_use) {
      a->blocks[kept++] = *b;
      continue;
    }
    gt_block_events_destroy(b);
    GT_CALL_CUDA(cudaFree(b->ptr));
    a->cached_bytes -= b->bytes;
  }
  a->n = kept;
  return GT_SUCCESS;
}

/* Has all work queued before the block's last free completed? */
static int gt_block_idle(gt_cuda_block *b, bool *idle)
{
  *idle = true;
  for (size_t k = 0; k < b->nrecorded && *idle; k++) {
    const cudaError_t q = cudaEventQuery(b->freed[k]);
    if (q == cudaErrorNotReady)
      *idle = false;
    else
      GT_CALL_CUDA(q);
  }
  return GT_SUCCESS;
}

static int cuda_alloc(gt_backend *be, size_t bytes, void **ptr)
{
  gt_cuda_alloc *a = gt_cuda_of(be)->alloc;
  size_t want = gt_round_block(bytes ? bytes : 1);
  gt_cuda_block *best = NULL;
  for (size_t i = 0; i < a->n; i++) {
    gt_cuda_block *b = &a->blocks[i];
    if (b->in_use || b->bytes < want || b->bytes > 2 * want || (best && b->bytes >= best->bytes))
      continue;
    bool idle;
    GT_CALL(gt_block_idle(b, &idle));
    if (idle)
      best = b;
  }
  if (best) {
    best->in_use = true;
    best->nrecorded = 0;
    a->cached_bytes -= best->bytes;
  } else {
    if (a->n == a->cap) {
      size_t cap = a->cap ? 2 * a->cap : 64;
      gt_cuda_block *nb = realloc(a->blocks, cap * sizeof *nb);
      GT_CHECK_ALLOC(nb, cap * sizeof *nb);
      a->blocks = nb;
      a->cap = cap;
    }
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, want);
    if (err == cudaErrorMemoryAllocation && a->cached_bytes > 0) {
      (void)cudaGetLastError();
      GT_CALL(gt_cuda_cache_release(a));
      err = cudaMalloc(&p, want);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      return GT_ERROR(GT_ERR_DEVICE,
                      "out of GPU memory: cudaMalloc of %.1f MiB failed with %.1f MiB in use by "
                      "gridtrain and %.1f of %.1f MiB free on the device (smaller micro-batches, "
                      "more pipeline stages or tensor parallelism need less)",
                      want / 1048576.0, a->in_use_bytes / 1048576.0, free_b / 1048576.0,
                      total_b / 1048576.0);
    }
    GT_CALL_CUDA(err);
    best = &a->blocks[a->n++];
    *best = (gt_cuda_block){.ptr = p, .bytes = want, .in_use = true};
  }
  a->in_use_bytes += best->bytes;
  if (a->in_use_bytes > a->peak_bytes)
    a->peak_bytes = a->in_use_bytes;
  *ptr = best->ptr;
  return GT_SUCCESS;
}

static int cuda_free(gt_backend *be, void *ptr)
{
  if (!ptr)
    return GT_SUCCESS;
  gt_cuda_alloc *a = gt_cuda_of(be)->alloc;
  for (size_t i = 0; i < a->n; i++) {
    gt_cuda_block *b = &a->blocks[i];
    if (b->ptr != ptr)
      continue;
    GT_CHECK(b->in_use, GT_ERR_INTERNAL, "cuda: double free of device memory %p", ptr);
    gt_cuda *c = gt_cuda_of(be);
    const size_t nstreams = 1 + c->nstreams;
    if (b->nevents < nstreams) {
      cudaEvent_t *ev = realloc(b->freed, nstreams * sizeof *ev);
      GT_CHECK_ALLOC(ev, nstreams * sizeof *ev);
      b->freed = ev;
      for (; b->nevents < nstreams; b->nevents++)
        GT_CALL_CUDA(cudaEventCreateWithFlags(&b->freed[b->nevents], cudaEventDisableTiming));
    }
    b->nrecorded = 0;
    for (size_t k = 0; k < nstreams; k++) {
      GT_CALL_CUDA(cudaEventRecord(b->freed[k], k == 0 ? c->compute.s : c->streams[k - 1]));
      b->nrecorded++;
    }
    b->in_use = false;
    a->in_use_bytes -= b->bytes;
    a->cached_bytes += b->bytes;
    return GT_SUCCESS;
  }
  return GT_ERROR(GT_ERR_INTERNAL, "cuda: free of %p, which the backend did not allocate", ptr);
}

void gt_cuda_memory_stats(gt_backend *be, size_t *in_use, size_t *peak, size_t *cached)
{
  gt_cuda_alloc *a = gt_cuda_of(be)->alloc;
  *in_use = a->in_use_bytes;
  *peak = a->peak_bytes;
  *cached = a->cached_bytes;
}

void gt_cuda_memory_rewind(gt_backend *be, size_t peak)
{
  gt_cuda_alloc *a = gt_cuda_of(be)->alloc;
  a->peak_bytes = peak > a->in_use_bytes ? peak : a->in_use_bytes;
}

static int cuda_alloc_host(gt_backend *be, size_t bytes, void **ptr)
{
  (void)be;
  GT_CALL_CUDA(cudaMallocHost(ptr, bytes ? bytes : 1));
  return GT_SUCCESS;
}

static int cuda_free_host(gt_backend *be, void *ptr)
{
  (void)be;
  if (ptr)
    GT_CALL_CUDA(cudaFreeHost(ptr));
  return GT_SUCCESS;
}

// ---- scratch -------------------------------------------------------------------------------

int gt_cuda_scratch(gt_backend *be, size_t bytes, void **ptr)
{
  gt_cuda *c = gt_cuda_of(be);
  if (bytes > c->scratch_bytes) {
    size_t grow = gt_round_block(bytes + bytes / 4);
    if (c->scratch) {
      /* queued work may still read the old buffer */
      GT_CALL_CUDA(cudaStreamSynchronize(c->compute.s));
      GT_CALL_CUDA(cudaFree(c->scratch));
      c->scratch = NULL;
      c->scratch_bytes = 0;
    }
    GT_CALL_CUDA(cudaMalloc(&c->scratch, grow));
    c->scratch_bytes = grow;
  }
  *ptr = c->scratch;
  return GT_SUCCESS;
}

// ---- streams and events ----------------------------------------------------------------------

static cudaStream_t gt_stream_of(gt_backend *be, gt_stream *s)
{
  return s ? ((gt_cuda_stream *)(void *)s)->s : gt_cuda_compute(be);
}

static int cuda_stream_create(gt_backend *be, gt_stream **s)
{
  gt_cuda *c = gt_cuda_of(be);
  if (c->nstreams == c->streams_cap) {
    const size_t cap = c->streams_cap ? 2 * c->streams_cap : 4;
    cudaStream_t *list = realloc(c->streams, cap * sizeof *list);
    GT_CHECK_ALLOC(list, cap * sizeof *list);
    c->streams = list;
    c->streams_cap = cap;
  }
  gt_cuda_stream *cs = calloc(1, sizeof *cs);
  GT_CHECK_ALLOC(cs, sizeof *cs);
  cudaError_t err = cudaStreamCreateWithFlags(&cs->s, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    free(cs);
    GT_CALL_CUDA(err);
  }
  c->streams[c->nstreams++] = cs->s;
  *s = (gt_stream *)(void *)cs;
  return GT_SUCCESS;
}

static int cuda_stream_destroy(gt_backend *be, gt_stream *s)
{
  if (!s)
    return GT_SUCCESS;
  gt_cuda *c = gt_cuda_of(be);
  gt_cuda_stream *cs = (gt_cuda_stream *)(void *)s;
  for (size_t k = 0; k < c->nstreams; k++) /* events recorded on it stay valid */
    if (c->streams[k] == cs->s) {
      c->streams[k] = c->streams[--c->nstreams];
      break;
    }
  cudaError_t err = cudaStreamSynchronize(cs->s);
  cudaError_t err2 = cudaStreamDestroy(cs->s);
  free(cs);
  GT_CALL_CUDA(err);
  GT_CALL_CUDA(err2);
  return GT_SUCCESS;
}

static int cuda_event_create(gt_backend *be, gt_device_event **ev)
{
  (void)be;
  gt_cuda_event *ce = calloc(1, sizeof *ce);
  GT_CHECK_ALLOC(ce, sizeof *ce);
  cudaError_t err = cudaEventCreate(&ce->e); /* with timing: the device clock uses them */
  if (err != cudaSuccess) {
    free(ce);
    GT_CALL_CUDA(err);
  }
  *ev = (gt_device_event *)(void *)ce;
  return GT_SUCCESS;
}

static cudaEvent_t gt_event_of(gt_device_event *ev) { return ((gt_cuda_event *)(void *)ev)->e; }

static int cuda_event_destroy(gt_backend *be, gt_device_event *ev)
{
  (void)be;
  if (!ev)
    return GT_SUCCESS;
  cudaError_t err = cudaEventDestroy(gt_event_of(ev));
  free(ev);
  GT_CALL_CUDA(err);
  return GT_SUCCESS;
}

static int cuda_event_record(gt_backend *be, gt_device_event *ev, gt_stream *s)
{
  GT_CALL_CUDA(cudaEventRecord(gt_event_of(ev), gt_stream_of(be, s)));
  return GT_SUCCESS;
}

static int cuda_event_query(gt_backend *be, gt_device_event *ev, bool *done)
{
  (void)be;
  cudaError_t err = cudaEventQuery(gt_event_of(ev));
  *done = err == cudaSuccess;
  if (err == cudaErrorNotReady)
    return GT_SUCCESS;
  GT_CALL_CUDA(err);
  return GT_SUCCESS;
}

static int cuda_event_wait(gt_backend *be, gt_device_event *ev)
{
  (void)be;
  GT_CALL_CUDA(cudaEventSynchronize(gt_event_of(ev)));
  return GT_SUCCESS;
}

static int cuda_stream_wait(gt_backend *be, gt_stream *s, gt_device_event *ev)
{
  GT_CALL_CUDA(cudaStreamWaitEvent(gt_stream_of(be, s), gt_event_of(ev), 0));
  return GT_SUCCESS;
}

static int cuda_event_elapsed(gt_backend *be, gt_device_event *start, gt_device_event *end,
                              double *seconds)
{
  (void)be;
  float ms = 0;
  GT_CALL_CUDA(cudaEventElapsedTime(&ms, gt_event_of(start), gt_event_of(end)));
  *seconds = ms * 1e-3;
  return GT_SUCCESS;
}

static int cuda_sync(gt_backend *be)
{
  (void)be;
  GT_CALL_CUDA(cudaDeviceSynchronize());
  return GT_SUCCESS;
}

// ---- copies and fills -----------------------------------------------------------------------

static int cuda_upload(gt_backend *be, void *dst, const void *host_src, size_t bytes,
                       gt_stream *s)
{
  if (bytes)
    GT_CALL_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice,
                                 gt_stream_of(be, s)));
  return GT_SUCCESS;
}

static int cuda_download(gt_backend *be, void *host_dst, const void *src, size_t bytes,
                         gt_stream *s)
{
  if (bytes)
    GT_CALL_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost,
                                 gt_stream_of(be, s)));
  return GT_SUCCESS;
}

static int cuda_copy(gt_backend *be, void *dst, const void *src, size_t bytes, gt_stream *s)
{
  if (bytes && dst != src)
    GT_CALL_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                 gt_stream_of(be, s)));
  return GT_SUCCESS;
}

static int cuda_zero(gt_backend *be, void *ptr, size_t bytes)
{
  if (bytes)
    GT_CALL_CUDA(cudaMemsetAsync(ptr, 0, bytes, gt_cuda_compute(be)));
  return GT_SUCCESS;
}

// ---- attention: cuDNN, or our own kernels -----------------------------------------------------

/* cuDNN where it takes the call (bf16/fp16, aligned, an engine for the
 * shape), else our own kernels, call by call: both follow the same contract,
 * so forward and backward may differ in who ran them. */
static bool gt_cuda_wants_cudnn(const gt_cuda *c)
{
  return c->cudnn && (c->attention == GT_ATTENTION_CUDNN || c->attention == GT_ATTENTION_CUDNN_FAST);
}

static int cuda_attention_forward(gt_backend *be, gt_dtype dt, void *out, float *lse,
                                  const void *qkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                  int64_t hs)
{
  gt_cuda *c = gt_cuda_of(be);
  bool ran = false;
  if (gt_cuda_wants_cudnn(c))
    GT_CALL(gt_cuda_attention_forward_cudnn(be, dt, out, lse, qkv, B, T, H, Hkv, hs, &ran));
  if (!ran)
    GT_CALL(gt_cuda_attention_forward_own(be, dt, out, lse, qkv, B, T, H, Hkv, hs));
  c->attn_calls[ran ? 0 : 1][0]++;
  return GT_SUCCESS;
}

static int cuda_attention_backward(gt_backend *be, gt_dtype dt, void *dqkv, const void *dout,
                                   const void *qkv, const void *out, const float *lse,
                                   int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hs)
{
  gt_cuda *c = gt_cuda_of(be);
  bool ran = false;
  if (gt_cuda_wants_cudnn(c))
    GT_CALL(gt_cuda_attention_backward_cudnn(be, dt, dqkv, dout, qkv, out, lse, B, T, H, Hkv,
                                             hs, &ran));
  if (!ran)
    GT_CALL(
        gt_cuda_attention_backward_own(be, dt, dqkv, dout, qkv, out, lse, B, T, H, Hkv, hs));
  c->attn_calls[ran ? 0 : 1][1]++;
  return GT_SUCCESS;
}

void gt_cuda_attention_counts(gt_backend *be, gt_cuda_attention_stats *st)
{
  memset(st, 0, sizeof *st);
  if (!be || be->device != GT_CUDA || !be->impl)
    return;
  const gt_cuda *c = gt_cuda_of(be);
  st->cudnn_forward = c->attn_calls[0][0];
  st->cudnn_backward = c->attn_calls[0][1];
  st->own_forward = c->attn_calls[1][0];
  st->own_backward = c->attn_calls[1][1];
  st->cudnn_built = gt_cuda_cudnn_built();
  st->cudnn_loaded = c->cudnn != NULL;
  st->cudnn_gqa = gt_cuda_cudnn_takes_gqa(be);
}

// ---- the table --------------------------------------------------------------------------------

static const gt_backend_ops gt_cuda_ops = {
  .alloc = cuda_alloc,
  .free = cuda_free,
  .alloc_host = cuda_alloc_host,
  .free_host = cuda_free_host,
  .stream_create = cuda_stream_create,
  .stream_destroy = cuda_stream_destroy,
  .event_create = cuda_event_create,
  .event_destroy = cuda_event_destroy,
  .event_record = cuda_event_record,
  .event_query = cuda_event_query,
  .event_wait = cuda_event_wait,
  .stream_wait = cuda_stream_wait,
  .event_elapsed = cuda_event_elapsed,
  .sync = cuda_sync,
  .upload = cuda_upload,
  .download = cuda_download,
  .copy = cuda_copy,
  .zero = cuda_zero,
  .cast = gt_cuda_cast,
  .linear_forward = gt_cuda_linear_forward,
  .linear_backward = gt_cuda_linear_backward,
  .layernorm_forward = gt_cuda_layernorm_forward,
  .layernorm_backward = gt_cuda_layernorm_backward,
  .gelu_forward = gt_cuda_gelu_forward,
  .gelu_backward = gt_cuda_gelu_backward,
  .rmsnorm_forward = gt_cuda_rmsnorm_forward,
  .rmsnorm_backward = gt_cuda_rmsnorm_backward,
  .rope_forward = gt_cuda_rope_forward,
  .rope_backward = gt_cuda_rope_backward,
  .swiglu_forward = gt_cuda_swiglu_forward,
  .swiglu_backward = gt_cuda_swiglu_backward,
  .moe_route = gt_cuda_moe_route,
  .moe_assign = gt_cuda_moe_assign,
  .moe_permute = gt_cuda_moe_permute,
  .moe_permute_backward = gt_cuda_moe_permute_backward,
  .moe_combine = gt_cuda_moe_combine,
  .moe_combine_backward = gt_cuda_moe_combine_backward,
  .moe_route_backward = gt_cuda_moe_route_backward,
  .attention_forward = cuda_attention_forward,
  .attention_backward = cuda_attention_backward,
  .attention_decode = gt_cuda_attention_decode,
  .embedding_forward = gt_cuda_embedding_forward,
  .embedding_backward = gt_cuda_embedding_backward,
  .xent_partial = gt_cuda_xent_partial,
  .xent_finish = gt_cuda_xent_finish,
  .adamw = gt_cuda_adamw,
  .sum_add = gt_cuda_sum_add,
  .axpby = gt_cuda_axpby,
  .sumsq_add = gt_cuda_sumsq_add,
};

// ---- create and destroy --------------------------------------------------------------------------

static int gt_cuda_pick_device(gt_cuda *c, int local_rank)
{
  int ndev = 0;
  cudaError_t err = cudaGetDeviceCount(&ndev);
  if (err != cudaSuccess || ndev < 1) {
    char why[256];
    gt_cuda_describe(why, sizeof why);
    (void)cudaGetLastError();
    return GT_ERROR(GT_ERR_INPUT,
                    "[backend] device = cuda: no GPU is visible to this rank (%s); run on a GPU "
                    "node (check CUDA_VISIBLE_DEVICES and the job's GPU request) or use "
                    "device = cpu",
                    why);
  }
  if (local_rank < 0)
    (void)gt_binding_local_rank_from_env(&local_rank);
  GT_CALL(gt_binding_pick(local_rank, ndev, &c->device));
  GT_CALL_CUDA(cudaSetDevice(c->device));
  struct cudaDeviceProp prop;
  GT_CALL_CUDA(cudaGetDeviceProperties(&prop, c->device));
  c->sm_count = prop.multiProcessorCount;
  c->cc_major = prop.major;
  c->cc_minor = prop.minor;
  snprintf(c->name, sizeof c->name, "%.127s", prop.name);
  char pci[32] = "?";
  (void)cudaDeviceGetPCIBusId(pci, (int)sizeof pci, c->device);
  snprintf(c->describe, sizeof c->describe, "GPU %d of %d: %.96s (sm_%d%d, %.0f GiB, PCI %.31s)",
           c->device, ndev, prop.name, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (1 << 30), pci);
  return GT_SUCCESS;
}

/* The configuration's attention kind; GT_ATTENTION_DEFAULT: the environment's
 * GT_CUDA_ATTENTION (tests), else cudnn. */
static int gt_cuda_attention_choice(gt_attention_kind want, gt_attention_kind *kind)
{
  *kind = want;
  if (want != GT_ATTENTION_DEFAULT) {
    GT_CHECK(want >= GT_ATTENTION_CUDNN && want <= GT_ATTENTION_OWN, GT_ERR_INPUT,
             "[backend] attention = %d: expected cudnn, cudnn-fast or own", (int)want);
    return GT_SUCCESS;
  }
  const char *env = getenv("GT_CUDA_ATTENTION");
  if (!env || !env[0] || strcmp(env, "cudnn") == 0)
    *kind = GT_ATTENTION_CUDNN;
  else if (strcmp(env, "own") == 0)
    *kind = GT_ATTENTION_OWN;
  else if (strcmp(env, "cudnn-fast") == 0)
    *kind = GT_ATTENTION_CUDNN_FAST;
  else
    return GT_ERROR(GT_ERR_INPUT, "GT_CUDA_ATTENTION=%s: expected cudnn, cudnn-fast or own",
                    env);
  return GT_SUCCESS;
}

int gt_cuda_backend_init(gt_backend *be, int local_rank, gt_attention_kind attention)
{
  gt_cuda *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  be->impl = c;
  be->ops = &gt_cuda_ops;
  be->name = "cuda";
  be->device = GT_CUDA;
  be->host_visible = false;
  GT_CALL(gt_cuda_attention_choice(attention, &c->attention));
  /* the libraries first: a missing one is the error to report even on a
   * node without a GPU */
  GT_CALL(gt_cuda_dl_load(GT_DL_CUBLASLT));
  GT_CALL(gt_cuda_pick_device(c, local_rank));
  c->alloc = calloc(1, sizeof *c->alloc);
  GT_CHECK_ALLOC(c->alloc, sizeof *c->alloc);
  GT_CALL_CUDA(cudaStreamCreateWithFlags(&c->compute.s, cudaStreamNonBlocking));
  be->compute = (gt_stream *)(void *)&c->compute;
  GT_CALL(gt_cuda_gemm_init(be));
  if (c->attention != GT_ATTENTION_OWN &&
      gt_cuda_cudnn_init(be, c->attention == GT_ATTENTION_CUDNN_FAST) != GT_SUCCESS) {
    /* fp32 and our own attention need no cuDNN: run on without it */
    gt_warn("cuDNN cannot start (%s); gridtrain's own attention kernels run instead",
            gt_error_message());
    gt_error_clear();
    c->cudnn = NULL;
  }
  return GT_SUCCESS;
}

const char *gt_cuda_backend_describe(gt_backend *be) { return gt_cuda_of(be)->describe; }

const char *gt_cuda_backend_name(gt_backend *be) { return gt_cuda_of(be)->name; }

int gt_cuda_backend_fini(gt_backend *be)
{
  gt_cuda *c = gt_cuda_of(be);
  if (!c)
    return GT_SUCCESS;
  cudaError_t err = c->compute.s ? cudaDeviceSynchronize() : cudaSuccess;
  gt_cuda_cudnn_fini(be);
  gt_cuda_gemm_fini(be);
  if (c->scratch)
    cudaFree(c->scratch);
  if (c->alloc) {
    for (size_t i = 0; i < c->alloc->n; i++) {
      gt_block_events_destroy(&c->alloc->blocks[i]);
      cudaFree(c->alloc->blocks[i].ptr);
    }
    free(c->alloc->blocks);
    free(c->alloc);
  }
  if (c->compute.s)
    cudaStreamDestroy(c->compute.s);
  free(c->streams);
  free(c);
  be->impl = NULL;
  GT_CALL_CUDA(err);
  return GT_SUCCESS;
}
