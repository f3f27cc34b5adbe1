/*
 * coll_stage.c - the staging policy of the collectives (coll_stage.h):
 * direct or staged, and the pinned buffers and copy stream of staging.
 */
#include "coll_stage.h"

#include <stdio.h>
#include <string.h>

#include "gridtrain/error.h"

int gt_coll_stage_policy(const gt_backend *be, const char *mpi_device, bool *direct,
                         char *describe, size_t size)
{
  bool capable = be->host_visible;
  const char *why = be->host_visible ? "host-visible device memory" : "";
#ifdef MPIX_GPU_SUPPORT_CUDA
  if (be->device == GT_CUDA && MPIX_Query_cuda_support()) {
    capable = true;
    why = "CUDA-aware MPI";
  }
#endif
  *direct = capable;
  if (strcmp(mpi_device, "on") == 0) {
    GT_CHECK(capable, GT_ERR_INPUT,
             "[backend] mpi_device = on: MPI cannot take the device pointers of backend %s "
             "(its memory is not host-visible and MPI is not CUDA-aware); use auto or off",
             be->name);
  } else if (strcmp(mpi_device, "off") == 0) {
    *direct = false;
    why = "[backend] mpi_device = off";
  } else {
    GT_CHECK(strcmp(mpi_device, "auto") == 0, GT_ERR_INPUT,
             "[backend] mpi_device = '%s': expected auto, on or off", mpi_device);
    if (!capable)
      why = be->device == GT_HOST ? "device memory is not host-visible"
                                  : "MPI is not CUDA-aware";
  }
  snprintf(describe, size, "%s (%s)",
           *direct ? "MPI on device buffers" : "staged through pinned host buffers", why);
  return GT_SUCCESS;
}

int gt_coll_stage_create(gt_coll *c)
{
  gt_backend *be = c->be;
  GT_CALL(be->ops->stream_create(be, &c->copy));
  GT_CALL(be->ops->event_create(be, &c->ev));
  return GT_SUCCESS;
}

void gt_coll_stage_destroy(gt_coll *c)
{
  gt_backend *be = c->be;
  if (c->stage)
    be->ops->free_host(be, c->stage);
  if (c->ev)
    be->ops->event_destroy(be, c->ev);
  if (c->copy)
    be->ops->stream_destroy(be, c->copy);
  c->stage = NULL;
  c->stage_cap = 0;
  c->ev = NULL;
  c->copy = NULL;
}

bool gt_coll_stage_direct(const gt_coll *c, gt_dtype t, bool reduce)
{
  return c->direct && (!reduce || t == GT_F32 || c->be->host_visible);
}

int gt_coll_stage_group(gt_coll *c, size_t bytes, void **stage)
{
  if (bytes > c->stage_cap) {
    gt_backend *be = c->be;
    if (c->stage)
      GT_CALL(be->ops->free_host(be, c->stage)); /* waits for queued copies */
    c->stage = NULL;
    c->stage_cap = 0;
    GT_CALL(be->ops->alloc_host(be, bytes, &c->stage));
    c->stage_cap = bytes;
  }
  *stage = c->stage;
  return GT_SUCCESS;
}

int gt_coll_stage_device_done(gt_coll *c)
{
  GT_CALL(c->be->ops->event_record(c->be, c->ev, NULL));
  GT_CALL(c->be->ops->event_wait(c->be, c->ev));
  return GT_SUCCESS;
}

int gt_coll_stage_in(gt_coll *c, const void *dev, size_t bytes, size_t room, size_t at,
                     void **stage)
{
  GT_CALL(gt_coll_stage_group(c, room, stage));
  GT_CALL(c->be->ops->download(c->be, (char *)*stage + at, dev, bytes, NULL));
  GT_CALL(gt_coll_stage_device_done(c));
  return GT_SUCCESS;
}

int gt_coll_stage_request(gt_coll *c, size_t bytes, void **stage)
{
  *stage = NULL;
  if (c->direct || bytes == 0)
    return GT_SUCCESS;
  GT_CALL(c->be->ops->alloc_host(c->be, bytes, stage));
  c->staging_bytes += bytes;
  return GT_SUCCESS;
}

void gt_coll_stage_request_free(gt_coll *c, void *stage, size_t bytes)
{
  if (!stage)
    return;
  c->be->ops->free_host(c->be, stage);
  c->staging_bytes -= bytes;
}

int gt_coll_stage_out(gt_coll *c, gt_device_event *ready, void *host, const void *dev,
                      size_t bytes)
{
  gt_backend *be = c->be;
  GT_CALL(be->ops->stream_wait(be, c->copy, ready));
  GT_CALL(be->ops->download(be, host, dev, bytes, c->copy));
  GT_CALL(be->ops->event_record(be, ready, c->copy));
  return GT_SUCCESS;
}
