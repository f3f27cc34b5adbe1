/*
 * gridtrain/tensor.h - a typed, shaped view of memory on a device.
 *
 * Tensors in gridtrain are mostly views: a parameter is a named gt_tensor
 * whose data points into the model's one flat parameter buffer. The owner
 * flag says whether destroying the tensor frees the memory.
 */
#ifndef GRIDTRAIN_TENSOR_H
#define GRIDTRAIN_TENSOR_H

#include <stdbool.h>

#define GT_TENSOR_MAX_DIMS 4

typedef enum { GT_F32 = 0, GT_BF16, GT_F16, GT_I32 } gt_dtype;
typedef enum { GT_HOST = 0, GT_CUDA } gt_device;

typedef struct gt_tensor {
  int ndim;
  long shape[GT_TENSOR_MAX_DIMS];
  gt_dtype dtype;
  gt_device device;
  void *data;
  bool owner;
} gt_tensor;

#endif /* GRIDTRAIN_TENSOR_H */
