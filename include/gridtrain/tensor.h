/*
 * gridtrain/tensor.h - element types and a typed, shaped view of memory on
 * a device.
 *
 * Tensors in gridtrain are mostly views: a parameter is a named gt_tensor
 * whose data points into one of the model's flat buffers (the fp32 master
 * values, the fp32 gradients, or the compute copy in the training
 * precision). The owner flag says whether destroying the tensor frees the
 * memory.
 */
#ifndef GRIDTRAIN_TENSOR_H
#define GRIDTRAIN_TENSOR_H

#include <stdbool.h>
#include <stddef.h>

#define GT_TENSOR_MAX_DIMS 4

/* Element types. GT_BF16 is bfloat16 (8-bit exponent, 7-bit mantissa),
 * GT_F16 IEEE binary16; both are stored as 2-byte patterns and computed on
 * in fp32. */
typedef enum { GT_F32 = 0, GT_BF16, GT_F16, GT_I32 } gt_dtype;
typedef enum { GT_HOST = 0, GT_CUDA } gt_device;

/* Bytes per element. */
static inline size_t gt_dtype_size(gt_dtype t) { return t == GT_BF16 || t == GT_F16 ? 2 : 4; }

/* "fp32", "bf16", "fp16", "int32" (the deck's names for the precisions). */
const char *gt_dtype_name(gt_dtype t);

/* The compute type of a [backend] precision ("bf16", "fp16"; anything else
 * fp32: the deck's enum has checked it). */
gt_dtype gt_precision_dtype(const char *precision);

typedef struct gt_tensor {
  int ndim;
  long shape[GT_TENSOR_MAX_DIMS];
  gt_dtype dtype;
  gt_device device;
  void *data;
  bool owner;
} gt_tensor;

#endif /* GRIDTRAIN_TENSOR_H */
