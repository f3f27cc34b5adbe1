/*
 * coll_stage.h - the staging policy of the collectives (internal to
 * src/comm): whether MPI takes the backend's device pointers ("direct") or
 * the data goes through pinned host buffers that the context owns, and
 * those buffers. Nothing here is collective.
 */
#ifndef GT_COLL_STAGE_H
#define GT_COLL_STAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "coll_impl.h"

/* The policy for backend be and [backend] mpi_device ("auto", "on",
 * "off"): *direct, and why, into describe (size bytes) for the start-up
 * table. GT_ERR_INPUT for "on" where MPI cannot take the device pointers,
 * and for another word. */
int gt_coll_stage_policy(const gt_backend *be, const char *mpi_device, bool *direct,
                         char *describe, size_t size);

/* The context's copy stream and event (c->be set); gt_coll_stage_destroy
 * frees them and the group staging buffer (safe on partial state). */
int gt_coll_stage_create(gt_coll *c);
void gt_coll_stage_destroy(gt_coll *c);

/* MPI may work on the device buffer itself for type t: user-defined
 * reductions (reduce) run on the host, so 16-bit sums need host-visible
 * memory. */
bool gt_coll_stage_direct(const gt_coll *c, gt_dtype t, bool reduce);

/* The blocking group operations' staging buffer, at least bytes (owned by
 * the context; regrowing it waits for the copies queued on it). */
int gt_coll_stage_group(gt_coll *c, size_t bytes, void **stage);

/* The host waits until the compute stream has run everything queued. */
int gt_coll_stage_device_done(gt_coll *c);

/* Staged: the bytes of the device buffer dev copied to offset at of the
 * group staging buffer (*stage, at least room bytes), then the host waits
 * for the compute stream (the copy and the work before it). */
int gt_coll_stage_in(gt_coll *c, const void *dev, size_t bytes, size_t room, size_t at,
                     void **stage);

/* A request's staging buffer of bytes (*stage NULL when direct or bytes is
 * 0), counted in gt_coll_staging_bytes until gt_coll_stage_request_free. */
int gt_coll_stage_request(gt_coll *c, size_t bytes, void **stage);
void gt_coll_stage_request_free(gt_coll *c, void *stage, size_t bytes);

/* Copy bytes from the device at dev to the host at host on the copy
 * stream, after the event ready (recorded by the caller); ready is then
 * recorded again behind the copy. */
int gt_coll_stage_out(gt_coll *c, gt_device_event *ready, void *host, const void *dev,
                      size_t bytes);

#endif /* GT_COLL_STAGE_H */
