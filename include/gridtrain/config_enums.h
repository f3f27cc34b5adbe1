/*
 * gridtrain/config_enums.h - the C enums of the input deck's keys that take
 * one of a fixed set of words (config.h). Free of MPI, so that backend.h and
 * the .cu files it reaches can include it.
 *
 * A key with a fixed set of choices is stored as a C enum when the deck is
 * read; nothing outside the configuration module compares the text. Each
 * gt_X_names array holds a deck's word for each value, indexed by the value,
 * in the order that messages and --help list them; NULL ends it. on|off keys
 * are bools. [backend] precision is a gt_dtype (GT_F32, GT_BF16, GT_F16),
 * named by gt_precision_names.
 */
#ifndef GRIDTRAIN_CONFIG_ENUMS_H
#define GRIDTRAIN_CONFIG_ENUMS_H

#include "gridtrain/tensor.h"

typedef enum { GT_MODEL_GPT = 0, GT_MODEL_LLAMA } gt_model_type;
/* [model] rope_scaling: the values are gt_rope_type's (rope.h). */
typedef enum { GT_ROPE_SCALING_NONE = 0, GT_ROPE_SCALING_LINEAR, GT_ROPE_SCALING_LLAMA3 } gt_rope_scaling_kind;
typedef enum { GT_RECOMPUTE_NONE = 0, GT_RECOMPUTE_ATTENTION, GT_RECOMPUTE_BLOCK } gt_recompute;
typedef enum {
  GT_DEVICE_CPU = 0,
  GT_DEVICE_CPU_ASYNC,
  GT_DEVICE_CPU_GUARD,
  GT_DEVICE_CUDA
} gt_device_kind;
typedef enum { GT_TRI_AUTO = 0, GT_TRI_ON, GT_TRI_OFF } gt_tristate; /* auto | on | off */
typedef enum {
  GT_ATTENTION_DEFAULT = -1, /* backend options only: GT_CUDA_ATTENTION's, else cudnn */
  GT_ATTENTION_CUDNN = 0,
  GT_ATTENTION_CUDNN_FAST,
  GT_ATTENTION_OWN
} gt_attention_kind;
typedef enum {
  GT_WAIT_SETTING_AUTO = 0,
  GT_WAIT_SETTING_BUSY,
  GT_WAIT_SETTING_YIELD
} gt_wait_setting;
typedef enum { GT_COLLECTIVES_MPI = 0, GT_COLLECTIVES_NCCL } gt_collectives_kind;
typedef enum {
  GT_ALLREDUCE_MPI = 0,
  GT_ALLREDUCE_RING,
  GT_ALLREDUCE_TREE,
  GT_ALLREDUCE_HALVING,
  GT_ALLREDUCE_AUTO
} gt_allreduce_algo;
typedef enum { GT_ON_ERROR_STOP = 0, GT_ON_ERROR_WARN } gt_on_error;

extern const char *const gt_model_type_names[];
extern const char *const gt_recompute_names[];
extern const char *const gt_rope_scaling_names[];
extern const char *const gt_device_kind_names[];
extern const char *const gt_precision_names[];
extern const char *const gt_tristate_names[];
extern const char *const gt_attention_kind_names[];
extern const char *const gt_wait_setting_names[];
extern const char *const gt_collectives_kind_names[];
extern const char *const gt_allreduce_algo_names[];
extern const char *const gt_on_error_names[];

#endif /* GRIDTRAIN_CONFIG_ENUMS_H */
