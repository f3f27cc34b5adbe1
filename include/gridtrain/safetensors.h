/*
 * gridtrain/safetensors.h - write tensors in the safetensors format
 * (https://github.com/huggingface/safetensors), the file Hugging Face models
 * load their weights from.
 *
 * File: an 8-byte little-endian unsigned header length N; N bytes of JSON
 *   {"__metadata__": {"key": "value", ...},
 *    "NAME": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [begin, end]}, ...}
 * padded with spaces so that the data starts on an 8-byte boundary; then the
 * tensors' bytes, row-major and little-endian, one after another in the
 * order given, with no gaps (offsets are relative to the start of the data).
 *
 * The file is written as PATH.tmp, synced, and renamed to PATH, so PATH is
 * either the complete new file or what it was before (a failure removes the
 * .tmp). Not collective; one rank writes.
 */
#ifndef GRIDTRAIN_SAFETENSORS_H
#define GRIDTRAIN_SAFETENSORS_H

#include <stddef.h>

#include "gridtrain/tensor.h"

/* One tensor of the file: its name (unique, non-empty), element type (GT_F32
 * "F32", GT_BF16 "BF16" or GT_F16 "F16") and shape (ndim 0: a scalar). */
typedef struct gt_st_tensor {
  const char *name;
  gt_dtype dtype;
  int ndim;
  long dims[GT_TENSOR_MAX_DIMS];
} gt_st_tensor;

/* Fill data with the `bytes` bytes of tensor i (little-endian, row-major).
 * Called once per tensor, in order; data is only valid during the call.
 * Return GT_SUCCESS or an error (pushed on the error stack), which stops the
 * write. */
typedef int (*gt_st_fill_fn)(void *ctx, int i, void *data, size_t bytes);

/* Not collective: write the n tensors of t (their bytes from fill) and the
 * nmeta string pairs of meta (key, value; "__metadata__", may be 0) to the
 * safetensors file path, atomically (above). A name that is empty or given
 * twice, an unknown dtype or a negative dimension is GT_ERR_INPUT; a file
 * that cannot be written is GT_ERR_INPUT ("cannot write PATH: REASON") when
 * its directory cannot be written to, else GT_ERR_SYSTEM. The whole file's
 * size is *total (may be NULL). */
int gt_safetensors_write(const char *path, int n, const gt_st_tensor *t, int nmeta,
                         const char *const meta[][2], gt_st_fill_fn fill, void *ctx,
                         size_t *total);

/* "F32", "BF16", "F16" (NULL for a type safetensors files of ours do not
 * hold). */
const char *gt_safetensors_dtype(gt_dtype t);

#endif /* GRIDTRAIN_SAFETENSORS_H */
