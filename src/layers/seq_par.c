/*
 * seq_par.c - the pieces of sequence parallelism (layers.h) that the block,
 * the embedding and the head share.
 */
#include "seq_par.h"

#include "gridtrain/error.h"

/* Sequence parallelism on (layers.h)? Then ns rows from row r0 are here. */
bool gt_sp_on(const gt_group *tp, const gt_seq_par *sp, int64_t N, int64_t *r0,
                     int64_t *ns)
{
  const bool on = sp && tp && tp->size > 1;
  *ns = on ? N / tp->size : N;
  *r0 = on ? (int64_t)tp->rank * *ns : 0;
  return on;
}

/* A LayerNorm's weight gradients (fp32, C each) under sequence parallelism:
 * each rank's backward sees its rows only, so the members' contributions
 * are summed. Before the backward every member but 0 hands its copy of the
 * (replicated) accumulated gradient over by zeroing it; after it, the sum
 * over tp is the accumulated gradient plus every rank's part, on all. */
static int gt_ln_grads_begin(gt_backend *be, const gt_group *tp, float *dw, float *db,
                             int64_t C)
{
  if (tp->rank != 0) {
    GT_CALL(be->ops->zero(be, dw, (size_t)C * sizeof(float)));
    GT_CALL(be->ops->zero(be, db, (size_t)C * sizeof(float)));
  }
  return GT_SUCCESS;
}

static int gt_ln_grads_end(const gt_group *tp, float *dw, float *db, int64_t C)
{
  if (db == dw + C) { /* adjacent in the gradient buffer: one sum */
    GT_CALL(gt_group_allreduce_sum(tp, dw, 2 * (size_t)C, GT_F32));
    return GT_SUCCESS;
  }
  GT_CALL(gt_group_allreduce_sum(tp, dw, (size_t)C, GT_F32));
  GT_CALL(gt_group_allreduce_sum(tp, db, (size_t)C, GT_F32));
  return GT_SUCCESS;
}

/* LayerNorm backward over this rank's ns rows (sequence parallelism),
 * its weight gradients summed over tp. */
int gt_ln_backward_rows(gt_backend *be, gt_dtype dt, const gt_group *tp, void *din,
                               float *dw, float *db, const void *dout, const void *in,
                               const void *w, const float *mean, const float *rstd,
                               int64_t ns, int64_t C)
{
  GT_CALL(gt_ln_grads_begin(be, tp, dw, db, C));
  GT_CALL(be->ops->layernorm_backward(be, dt, din, dw, db, dout, in, w, mean, rstd, ns, C));
  GT_CALL(gt_ln_grads_end(tp, dw, db, C));
  return GT_SUCCESS;
}

