/*
 * gridtrain/safetensors.h - read and write tensors in the safetensors format
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


// ---- reading ------------------------------------------------------------------------------

/* An open safetensors file (gt_safetensors_open). The header is parsed (with
 * json-c) and checked when the file is opened; the tensors' data is read one
 * tensor at a time (pread), so reading a model needs memory near its largest
 * tensor, not the model. Not collective; not thread-safe on one object. */
typedef struct gt_st_file gt_st_file;

/* One tensor of an open file. dtype: GT_F32, GT_BF16 or GT_F16, or -1 for the
 * other types of the format (F64, I64, ..., named in type_name), which are
 * checked but cannot be read. offset: of its first byte in the file. */
typedef struct gt_st_info {
  const char *name;
  int dtype;
  const char *type_name; /* "F32", "BF16", ... as in the header */
  int ndim;
  long dims[GT_TENSOR_MAX_DIMS];
  size_t numel, bytes, offset;
} gt_st_info;

/* Not collective: open the safetensors file path and check its header: the
 * length (8 + N <= file size, N <= 100 MiB), the JSON (an object of objects
 * with "dtype", "shape", "data_offsets"; "__metadata__" an object of
 * strings), every dtype known, every shape of at most GT_TENSOR_MAX_DIMS
 * non-negative dimensions whose bytes are its data_offsets' length, every
 * range inside the file's data, no two ranges overlapping. Any problem is one
 * GT_ERR_INPUT naming the file and the tensor or field ("safetensors F:
 * tensor X: data_offsets [a, b) end past the data (c bytes)"); the file is
 * never read outside its size. *f is owned by the caller:
 * gt_safetensors_close. */
int gt_safetensors_open(const char *path, gt_st_file **f);

/* Tensors in the file (in the header's order), the i-th, and the index of
 * the tensor `name` (-1: none). The infos live as long as the file. */
int gt_safetensors_count(const gt_st_file *f);
const gt_st_info *gt_safetensors_info(const gt_st_file *f, int i);
int gt_safetensors_find(const gt_st_file *f, const char *name);

/* The value of key in __metadata__, or NULL. */
const char *gt_safetensors_meta(const gt_st_file *f, const char *key);

/* Not collective: read tensor i into out (numel floats, row-major), each
 * value converted to fp32 exactly (bf16 and fp16 are subsets of fp32).
 * A tensor of another type is GT_ERR_INPUT naming it; a short read (the
 * file changed since it was opened) GT_ERR_INPUT; an I/O error
 * GT_ERR_SYSTEM. */
int gt_safetensors_read_f32(gt_st_file *f, int i, float *out);

/* Close the file and free f; *f = NULL (NULL: nothing). */
void gt_safetensors_close(gt_st_file **f);

#endif /* GRIDTRAIN_SAFETENSORS_H */
