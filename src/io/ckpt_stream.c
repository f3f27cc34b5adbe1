/*
 * ckpt_stream.c - a checkpoint written by one process, one tensor at a time
 * from host memory (checkpoint.h, gt_ckpt_stream): the format the parallel
 * writer makes (contiguous datasets, per-block Fletcher-32 attributes), through
 * serial HDF5, for imports that must not hold the whole model.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gridtrain/checkpoint.h"
#include "gridtrain/error.h"
#include "gridtrain/tokenizer.h"
#include "ckpt_internal.h"
#include "h5util.h"

struct gt_ckpt_stream {
  char path[GT_PATH_MAX], tmp[GT_PATH_MAX + 8];
  hid_t file;
  int n;
  const gt_ckpt_tensor *tensors;
  bool *done;
  uint64_t *sums; /* one tensor's terms */
  uint32_t *values;
  size_t cap;     /* blocks sums and values hold */
};

/* Dataset kind/name of a tensor: contiguous, allocated now; the moments
 * filled with zeros as they are allocated, the values written by put. */
static int gt_stream_create(gt_ckpt_stream *s, const gt_ckpt_tensor *t, int kind)
{
  char path[GT_PARAM_NAME_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", gt_kind_group[kind], t->name);
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    dims[d] = (hsize_t)t->dims[d];
  hid_t ids[3] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  int status = GT_SUCCESS;
  ids[0] = H5Screate_simple(t->ndim, dims, NULL);
  ids[1] = H5Pcreate(H5P_DATASET_CREATE);
  const float zero = 0.0f;
  if (ids[0] < 0 || ids[1] < 0 || H5Pset_layout(ids[1], H5D_CONTIGUOUS) < 0 ||
      H5Pset_alloc_time(ids[1], H5D_ALLOC_TIME_EARLY) < 0 ||
      H5Pset_fill_value(ids[1], H5T_NATIVE_FLOAT, &zero) < 0 ||
      H5Pset_fill_time(ids[1], kind == GT_KIND_MODEL ? H5D_FILL_TIME_NEVER
                                                     : H5D_FILL_TIME_ALLOC) < 0 ||
      (ids[2] = H5Dcreate2(s->file, path, H5T_IEEE_F32LE, ids[0], H5P_DEFAULT, ids[1],
                           H5P_DEFAULT)) < 0)
    status = gt_error_hdf5("H5Dcreate2", __FILE__, __LINE__, __func__);
  const size_t total = gt_ckpt_tensor_numel(t), nb = gt_ckpt_nsums(total);
  if (status == GT_SUCCESS && kind != GT_KIND_MODEL) { /* zeros: every block's sum is 0 */
    const uint64_t zero_sum[2] = {0, 0};
    for (size_t b = 0; b < nb; b++)
      s->values[b] = gt_fletcher_value(zero_sum);
    status = gt_h5_write_attr_u32s(ids[2], "fletcher32", (int)nb, s->values);
  }
  GT_CALL(gt_h5_close_all(status, 3, ids));
  return GT_SUCCESS;
}

static int gt_stream_open_in(gt_ckpt_stream *s, const gt_ckpt_meta *meta,
                             const gt_tokenizer *tok)
{
  s->file = H5Fcreate(s->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  GT_CHECK(s->file >= 0, GT_ERR_INPUT, "cannot create the checkpoint %s (as %s)", s->path,
           s->tmp);
  GT_CALL(gt_ckpt_write_meta(s->file, meta));
  const char *groups[] = {"/model", "/optim", "/optim/m", "/optim/v"};
  for (int g = 0; g < 4; g++) {
    hid_t id = H5Gcreate2(s->file, groups[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    GT_CHECK(id >= 0, GT_ERR_HDF5, "cannot create %s in %s", groups[g], s->tmp);
    GT_CALL(gt_h5_close(&id));
  }
  for (int i = 0; i < s->n; i++) {
    const size_t nb = gt_ckpt_nsums(gt_ckpt_tensor_numel(&s->tensors[i]));
    if (nb > s->cap) {
      free(s->sums);
      free(s->values);
      s->sums = calloc(2 * nb, sizeof *s->sums);
      s->values = calloc(nb, sizeof *s->values);
      GT_CHECK(s->sums && s->values, GT_ERR_SYSTEM, "out of memory for %zu checksums", nb);
      s->cap = nb;
    }
  }
  for (int i = 0; i < s->n; i++)
    for (int k = 0; k < GT_NKINDS; k++)
      GT_CALL(gt_stream_create(s, &s->tensors[i], k));
  if (tok)
    GT_CALL(gt_tokenizer_h5_write(s->file, tok));
  return GT_SUCCESS;
}

int gt_ckpt_stream_open(const char *path, const gt_ckpt_meta *meta, int ntensors,
                        const gt_ckpt_tensor *tensors, const gt_tokenizer *tok,
                        gt_ckpt_stream **out)
{
  *out = NULL;
  gt_ckpt_stream *s = calloc(1, sizeof *s);
  GT_CHECK_ALLOC(s, sizeof *s);
  s->file = H5I_INVALID_HID;
  s->n = ntensors;
  s->tensors = tensors;
  snprintf(s->path, sizeof s->path, "%s", path);
  snprintf(s->tmp, sizeof s->tmp, "%s.tmp", path);
  s->done = calloc((size_t)ntensors + 1, sizeof *s->done);
  int status = s->done && strlen(path) < GT_PATH_MAX
                   ? GT_SUCCESS
                   : GT_ERROR(GT_ERR_INPUT, "cannot write the checkpoint %s (out of memory "
                              "or too long a path)", path);
  if (status == GT_SUCCESS)
    status = gt_stream_open_in(s, meta, tok);
  if (status != GT_SUCCESS) {
    gt_ckpt_stream_close(&s, false);
    return status;
  }
  *out = s;
  return GT_SUCCESS;
}

int gt_ckpt_stream_put(gt_ckpt_stream *s, int i, const float *values)
{
  GT_ASSERT(s && i >= 0 && i < s->n && !s->done[i]);
  const gt_ckpt_tensor *t = &s->tensors[i];
  const size_t total = gt_ckpt_tensor_numel(t), nb = gt_ckpt_nsums(total);
  char path[GT_PARAM_NAME_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", gt_kind_group[GT_KIND_MODEL], t->name);
  hid_t ids[1] = {H5Dopen2(s->file, path, H5P_DEFAULT)};
  int status = ids[0] >= 0 && H5Dwrite(ids[0], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                                       H5P_DEFAULT, values) >= 0
                   ? GT_SUCCESS
                   : gt_error_hdf5("H5Dwrite", __FILE__, __LINE__, __func__);
  if (status == GT_SUCCESS) {
    memset(s->sums, 0, 2 * nb * sizeof *s->sums);
    gt_fletcher_add(s->sums, total, values, 0, total);
    for (size_t b = 0; b < nb; b++)
      s->values[b] = gt_fletcher_value(&s->sums[2 * b]);
    status = gt_h5_write_attr_u32s(ids[0], "fletcher32", (int)nb, s->values);
  }
  GT_CALL(gt_h5_close_all(status, 1, ids));
  s->done[i] = true;
  return GT_SUCCESS;
}

int gt_ckpt_stream_close(gt_ckpt_stream **sp, bool keep)
{
  gt_ckpt_stream *s = sp ? *sp : NULL;
  if (!s)
    return GT_SUCCESS;
  int status = GT_SUCCESS;
  for (int i = 0; keep && i < s->n && status == GT_SUCCESS; i++)
    if (!s->done[i])
      status = GT_ERROR(GT_ERR_INTERNAL, "internal error: checkpoint %s closed without tensor "
                        "%s", s->path, s->tensors[i].name);
  if (s->file >= 0) {
    if (status == GT_SUCCESS && keep && H5Fflush(s->file, H5F_SCOPE_GLOBAL) < 0)
      status = gt_error_hdf5("H5Fflush", __FILE__, __LINE__, __func__);
    hid_t ids[1] = {s->file};
    status = gt_h5_close_all(status, 1, ids);
  }
  if (status == GT_SUCCESS && keep && rename(s->tmp, s->path) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "cannot rename %s to %s: %s", s->tmp, s->path,
                      strerror(errno));
  if (status != GT_SUCCESS || !keep)
    unlink(s->tmp);
  free(s->done);
  free(s->sums);
  free(s->values);
  free(s);
  *sp = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}
