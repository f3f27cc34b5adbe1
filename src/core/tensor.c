/*
 * tensor.c - the element types' names (see tensor.h).
 */
#include "gridtrain/tensor.h"

#include <string.h>

const char *gt_dtype_name(gt_dtype t)
{
  switch (t) {
  case GT_F32: return "fp32";
  case GT_BF16: return "bf16";
  case GT_F16: return "fp16";
  case GT_I32: return "int32";
  }
  return "?";
}

gt_dtype gt_precision_dtype(const char *precision)
{
  return strcmp(precision, "bf16") == 0   ? GT_BF16
         : strcmp(precision, "fp16") == 0 ? GT_F16
                                          : GT_F32;
}
