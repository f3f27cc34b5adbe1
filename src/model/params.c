/*
 * params.c - flat parameter and gradient buffers with named views.
 */
#include "gridtrain/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/rng.h"

int gt_params_create(gt_backend *be, gt_params **params)
{
  gt_params *p = calloc(1, sizeof *p);
  GT_CHECK_ALLOC(p, sizeof *p);
  p->be = be;
  *params = p;
  return GT_SUCCESS;
}

int gt_params_add(gt_params *p, const char *name, int ndim, const long *shape,
                  gt_init_kind init, float init_std, bool decay)
{
  GT_ASSERT(!p->finalized);
  GT_ASSERT(ndim >= 1 && ndim <= GT_TENSOR_MAX_DIMS);
  GT_ASSERT(strlen(name) < GT_PARAM_NAME_MAX);
  GT_ASSERT(gt_params_find(p, name) == NULL);
  if (p->count == p->capacity) {
    int cap = p->capacity ? 2 * p->capacity : 32;
    gt_param *grown = realloc(p->list, sizeof *grown * (size_t)cap);
    GT_CHECK_ALLOC(grown, sizeof *grown * (size_t)cap);
    p->list = grown;
    p->capacity = cap;
  }
  gt_param *t = &p->list[p->count++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->value.ndim = ndim;
  t->numel = 1;
  for (int i = 0; i < ndim; i++) {
    GT_ASSERT(shape[i] >= 1);
    t->value.shape[i] = shape[i];
    t->numel *= (size_t)shape[i];
  }
  t->value.dtype = GT_F32;
  t->value.device = p->be->device;
  t->grad = t->value;
  t->init = init;
  t->init_std = init_std;
  t->decay = decay;
  return GT_SUCCESS;
}

int gt_params_finalize(gt_params *p)
{
  GT_ASSERT(!p->finalized);
  /* Views start on 16-float (64-byte) boundaries. */
  size_t off = 0;
  for (int i = 0; i < p->count; i++) {
    p->list[i].offset = off;
    off += (p->list[i].numel + 15) & ~(size_t)15;
  }
  p->numel = off;
  GT_CALL(p->be->ops->alloc(p->be, off * sizeof(float), (void **)&p->values));
  GT_CALL(p->be->ops->alloc(p->be, off * sizeof(float), (void **)&p->grads));
  GT_CALL(p->be->ops->zero(p->be, p->values, off * sizeof(float)));
  GT_CALL(p->be->ops->zero(p->be, p->grads, off * sizeof(float)));
  for (int i = 0; i < p->count; i++) {
    p->list[i].value.data = p->values + p->list[i].offset;
    p->list[i].grad.data = p->grads + p->list[i].offset;
  }
  p->finalized = true;
  return GT_SUCCESS;
}

int gt_params_init(gt_params *p, uint64_t seed)
{
  GT_ASSERT(p->finalized);
  size_t largest = 0;
  for (int i = 0; i < p->count; i++)
    largest = p->list[i].numel > largest ? p->list[i].numel : largest;
  float *host = malloc(largest * sizeof(float));
  GT_CHECK_ALLOC(host, largest * sizeof(float));
  int status = GT_SUCCESS;
  for (int i = 0; i < p->count && status == GT_SUCCESS; i++) {
    gt_param *t = &p->list[i];
    switch (t->init) {
    case GT_INIT_NORMAL:
      gt_rng_normal_fill(host, t->numel, gt_rng_stream(seed, t->name), 0, t->init_std);
      break;
    case GT_INIT_ZEROS: memset(host, 0, t->numel * sizeof(float)); break;
    case GT_INIT_ONES:
      for (size_t j = 0; j < t->numel; j++)
        host[j] = 1.0f;
      break;
    }
    status = p->be->ops->upload(p->be, t->value.data, host, t->numel * sizeof(float));
  }
  free(host);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_params_zero_grads(gt_params *p)
{
  GT_CALL(p->be->ops->zero(p->be, p->grads, p->numel * sizeof(float)));
  return GT_SUCCESS;
}

gt_param *gt_params_find(gt_params *p, const char *name)
{
  for (int i = 0; i < p->count; i++)
    if (strcmp(p->list[i].name, name) == 0)
      return &p->list[i];
  return NULL;
}

int gt_params_destroy(gt_params **params)
{
  gt_params *p = *params;
  if (!p)
    return GT_SUCCESS;
  if (p->values)
    p->be->ops->free(p->be, p->values);
  if (p->grads)
    p->be->ops->free(p->be, p->grads);
  free(p->list);
  free(p);
  *params = NULL;
  return GT_SUCCESS;
}
