/*
 * cuda_nccl_none.c - the NCCL entries (cuda_entry.h) in a build without
 * NCCL: [parallel] collectives = nccl is an error that says how to rebuild.
 */
#include "cuda_entry.h"
#include "gridtrain/error.h"

#define GT_NO_NCCL                                                                        \
  GT_ERROR(GT_ERR_INPUT, "[parallel] collectives = nccl: this gridtrain was built without " \
           "NCCL; reconfigure with --with-cuda=DIR --with-nccl=DIR, or use collectives = mpi")

bool gt_nccl_built(void) { return false; }

const char *gt_nccl_describe(void) { return "no NCCL in this build"; }

int gt_nccl_load(void) { return GT_NO_NCCL; }

int gt_nccl_unique_id(void *id)
{
  (void)id;
  return GT_NO_NCCL;
}

int gt_nccl_create(gt_backend *be, const void *id, int nranks, int rank, gt_nccl **comm)
{
  (void)be, (void)id, (void)nranks, (void)rank, (void)comm;
  return GT_NO_NCCL;
}

int gt_nccl_destroy(gt_nccl **comm)
{
  (void)comm;
  return GT_SUCCESS;
}

int gt_nccl_allreduce(gt_backend *be, gt_nccl *comm, void *buf, size_t n, gt_dtype t,
                      gt_stream *s)
{
  (void)be, (void)comm, (void)buf, (void)n, (void)t, (void)s;
  return GT_NO_NCCL;
}

int gt_nccl_reduce(gt_backend *be, gt_nccl *comm, void *buf, size_t n, gt_dtype t, int root,
                   gt_stream *s)
{
  (void)be, (void)comm, (void)buf, (void)n, (void)t, (void)root, (void)s;
  return GT_NO_NCCL;
}

int gt_nccl_reduce_scatter(gt_backend *be, gt_nccl *comm, const void *send, void *recv,
                           size_t n, gt_dtype t, gt_stream *s)
{
  (void)be, (void)comm, (void)send, (void)recv, (void)n, (void)t, (void)s;
  return GT_NO_NCCL;
}

int gt_nccl_allgather(gt_backend *be, gt_nccl *comm, const void *send, void *recv, size_t n,
                      gt_dtype t, gt_stream *s)
{
  (void)be, (void)comm, (void)send, (void)recv, (void)n, (void)t, (void)s;
  return GT_NO_NCCL;
}
