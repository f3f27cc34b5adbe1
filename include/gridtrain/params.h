/*
 * gridtrain/params.h - the parameters of a model (or of one pipeline stage):
 * one flat buffer of values, one of gradients, and named views into both.
 *
 * Usage: create, add every tensor (name, shape, initialisation, whether
 * weight decay applies), then finalize, which allocates the two buffers on
 * the backend's device and sets every view. One flat buffer makes the data-
 * parallel all-reduce, clipping and checkpointing slices of one array.
 *
 * Initial values are generated element by element from (seed, name, index)
 * with counter-based random numbers (rng.h), so they do not depend on which
 * rank generates them or on the layout.
 */
#ifndef GRIDTRAIN_PARAMS_H
#define GRIDTRAIN_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/backend.h"
#include "gridtrain/tensor.h"

#define GT_PARAM_NAME_MAX 64

typedef enum { GT_INIT_NORMAL = 0, GT_INIT_ZEROS, GT_INIT_ONES } gt_init_kind;

typedef struct gt_param {
  char name[GT_PARAM_NAME_MAX]; /* "h.3.attn.qkv.weight" */
  gt_tensor value;              /* view into the values buffer */
  gt_tensor grad;               /* view into the gradients buffer */
  size_t offset;                /* elements from the start of the buffers */
  size_t numel;
  bool decay;                   /* AdamW weight decay applies */
  gt_init_kind init;
  float init_std;               /* for GT_INIT_NORMAL */
} gt_param;

typedef struct gt_params {
  gt_backend *be;
  int count, capacity;
  gt_param *list;
  size_t numel;  /* total elements */
  float *values; /* device */
  float *grads;  /* device */
  bool finalized;
} gt_params;

/* Create an empty set on backend be. Not collective. */
int gt_params_create(gt_backend *be, gt_params **params);

/* Add a tensor before finalize. ndim in 1..4. Names must be unique. */
int gt_params_add(gt_params *p, const char *name, int ndim, const long *shape,
                  gt_init_kind init, float init_std, bool decay);

/* Allocate the buffers (64-byte aligned views) and zero the gradients. */
int gt_params_finalize(gt_params *p);

/* Fill every value from the seed (see above). */
int gt_params_init(gt_params *p, uint64_t seed);

/* Set every gradient to zero. */
int gt_params_zero_grads(gt_params *p);

/* The parameter with this name, or NULL. */
gt_param *gt_params_find(gt_params *p, const char *name);

/* Free buffers and set, set *params to NULL. */
int gt_params_destroy(gt_params **params);

#endif /* GRIDTRAIN_PARAMS_H */
