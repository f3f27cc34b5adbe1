/*
 * tensor.c - helpers for gt_tensor views.
 */
#include "gridtrain/tensor.h"

#include <stdio.h>

size_t gt_dtype_size(gt_dtype dtype)
{
  switch (dtype) {
  case GT_F32: return 4;
  case GT_BF16: return 2;
  case GT_F16: return 2;
  case GT_I32: return 4;
  }
  return 0;
}

const char *gt_dtype_name(gt_dtype dtype)
{
  switch (dtype) {
  case GT_F32: return "f32";
  case GT_BF16: return "bf16";
  case GT_F16: return "f16";
  case GT_I32: return "i32";
  }
  return "?";
}

long gt_tensor_numel(const gt_tensor *t)
{
  long n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= t->shape[i];
  return n;
}

void gt_tensor_shape_str(const gt_tensor *t, char *buf, size_t size)
{
  size_t len = (size_t)snprintf(buf, size, "(");
  for (int i = 0; i < t->ndim && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%ld", i ? ", " : "", t->shape[i]);
  if (len < size)
    snprintf(buf + len, size - len, ")");
}
