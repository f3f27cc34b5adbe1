/*
 * cuda_nccl.c - NCCL communicators and collectives on the cuda backend's
 * streams (cuda_entry.h). Every NCCL call is checked; an asynchronous NCCL
 * error (a peer that died) is looked for after each operation. NCCL is
 * loaded at run time by gt_nccl_load (cuda_dl.h).
 */
#define GT_DL_WANT_NCCL /* NCCL, loaded at run time */
#include "cuda_dl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_entry.h"

_Static_assert(sizeof(ncclUniqueId) == GT_NCCL_ID_BYTES, "ncclUniqueId size");

struct gt_nccl {
  ncclComm_t comm;
};

static int gt_nccl_error(ncclResult_t r, const char *call, const char *file, int line,
                         const char *func)
{
  const char *last = ncclGetLastError(NULL);
  return gt_error_set(GT_ERR_DEVICE, file, line, func, "%s failed: %s%s%s", call,
                      ncclGetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
}

#define GT_CALL_NCCL(expr)                                                     \
  do {                                                                         \
    ncclResult_t gt_nccl_status_ = (expr);                                     \
    if (gt_nccl_status_ != ncclSuccess)                                        \
      return gt_nccl_error(gt_nccl_status_, #expr, __FILE__, __LINE__, __func__); \
  } while (0)

bool gt_nccl_built(void) { return true; }

int gt_nccl_load(void)
{
  GT_CALL(gt_cuda_dl_load(GT_DL_NCCL));
  return GT_SUCCESS;
}

const char *gt_nccl_describe(void)
{
  static char text[48];
  int v = 0;
  if (gt_cuda_dl_load(GT_DL_NCCL) != GT_SUCCESS) {
    gt_error_clear();
    return "NCCL (not loaded)";
  }
  if (ncclGetVersion(&v) != ncclSuccess)
    return "NCCL (version unknown)";
  /* NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9 */
  snprintf(text, sizeof text, "NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  return text;
}

int gt_nccl_unique_id(void *id)
{
  GT_CALL(gt_nccl_load()); /* loaded already where coll_nccl.c calls this */
  ncclUniqueId u;
  GT_CALL_NCCL(ncclGetUniqueId(&u));
  memcpy(id, &u, sizeof u);
  return GT_SUCCESS;
}

int gt_nccl_create(gt_backend *be, const void *id, int nranks, int rank, gt_nccl **comm)
{
  GT_CHECK(be->device == GT_CUDA, GT_ERR_INPUT,
           "[parallel] collectives = nccl needs [backend] device = cuda (not %s)", be->name);
  GT_CALL(gt_nccl_load());
  GT_CALL_CUDA(cudaSetDevice(gt_cuda_of(be)->device));
  gt_nccl *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclResult_t r = ncclCommInitRank(&c->comm, nranks, u, rank);
  if (r != ncclSuccess) {
    free(c);
    GT_CALL_NCCL(r);
  }
  *comm = c;
  return GT_SUCCESS;
}

int gt_nccl_destroy(gt_nccl **comm)
{
  gt_nccl *c = *comm;
  if (!c)
    return GT_SUCCESS;
  ncclResult_t r = ncclCommDestroy(c->comm);
  free(c);
  *comm = NULL;
  GT_CALL_NCCL(r);
  return GT_SUCCESS;
}

static cudaStream_t gt_nccl_stream(gt_backend *be, gt_stream *s)
{
  return s ? ((gt_cuda_stream *)(void *)s)->s : gt_cuda_compute(be);
}

static int gt_nccl_type(gt_dtype t, ncclDataType_t *nt)
{
  switch (t) {
  case GT_F32: *nt = ncclFloat32; return GT_SUCCESS;
  case GT_BF16: *nt = ncclBfloat16; return GT_SUCCESS;
  case GT_F16: *nt = ncclFloat16; return GT_SUCCESS;
  case GT_I32: *nt = ncclInt32; return GT_SUCCESS;
  }
  return GT_ERROR(GT_ERR_INTERNAL, "NCCL: unknown element type %d", (int)t);
}

/* A peer that failed shows up as an asynchronous error of the communicator. */
static int gt_nccl_check_async(gt_nccl *comm)
{
  ncclResult_t async = ncclSuccess;
  GT_CALL_NCCL(ncclCommGetAsyncError(comm->comm, &async));
  GT_CALL_NCCL(async);
  return GT_SUCCESS;
}

int gt_nccl_allreduce(gt_backend *be, gt_nccl *comm, void *buf, size_t n, gt_dtype t,
                      gt_stream *s)
{
  ncclDataType_t nt = ncclFloat32;
  GT_CALL(gt_nccl_type(t, &nt));
  if (n)
    GT_CALL_NCCL(ncclAllReduce(buf, buf, n, nt, ncclSum, comm->comm, gt_nccl_stream(be, s)));
  GT_CALL(gt_nccl_check_async(comm));
  return GT_SUCCESS;
}

int gt_nccl_reduce(gt_backend *be, gt_nccl *comm, void *buf, size_t n, gt_dtype t, int root,
                   gt_stream *s)
{
  ncclDataType_t nt = ncclFloat32;
  GT_CALL(gt_nccl_type(t, &nt));
  if (n)
    GT_CALL_NCCL(ncclReduce(buf, buf, n, nt, ncclSum, root, comm->comm, gt_nccl_stream(be, s)));
  GT_CALL(gt_nccl_check_async(comm));
  return GT_SUCCESS;
}

int gt_nccl_reduce_scatter(gt_backend *be, gt_nccl *comm, const void *send, void *recv,
                           size_t n, gt_dtype t, gt_stream *s)
{
  ncclDataType_t nt = ncclFloat32;
  GT_CALL(gt_nccl_type(t, &nt));
  if (n)
    GT_CALL_NCCL(
        ncclReduceScatter(send, recv, n, nt, ncclSum, comm->comm, gt_nccl_stream(be, s)));
  GT_CALL(gt_nccl_check_async(comm));
  return GT_SUCCESS;
}

int gt_nccl_allgather(gt_backend *be, gt_nccl *comm, const void *send, void *recv, size_t n,
                      gt_dtype t, gt_stream *s)
{
  ncclDataType_t nt = ncclFloat32;
  GT_CALL(gt_nccl_type(t, &nt));
  if (n)
    GT_CALL_NCCL(ncclAllGather(send, recv, n, nt, comm->comm, gt_nccl_stream(be, s)));
  GT_CALL(gt_nccl_check_async(comm));
  return GT_SUCCESS;
}
