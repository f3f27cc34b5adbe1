/*
 * norm.h - the normalisation of a block or head (layers.h's gt_norm):
 * LayerNorm or RMSNorm through one call (internal to src/layers).
 */
#ifndef GT_NORM_H
#define GT_NORM_H

#include "gridtrain/layers.h"

/* out (n,C) "=" norm(in) w (+ b for LayerNorm); rstd (and mean, LayerNorm
 * only: RMSNorm leaves it alone, may be NULL) (n) fp32 "=". Queued on the
 * compute stream. */
int gt_norm_forward(gt_backend *be, gt_dtype dt, gt_norm k, void *out, float *mean, float *rstd,
                    const void *in, const void *w, const void *b, int64_t n, int64_t C);

/* din "+=" the input gradient, dw (and db, LayerNorm) "+=" (the backend's
 * layernorm_backward / rmsnorm_backward contract). */
int gt_norm_backward(gt_backend *be, gt_dtype dt, gt_norm k, void *din, float *dw, float *db,
                     const void *dout, const void *in, const void *w, const float *mean,
                     const float *rstd, int64_t n, int64_t C);

/* gt_norm_backward over this rank's ns rows (sequence parallelism), the
 * weight gradients dw, db (C each, fp32, replicated over tp; db NULL for
 * RMSNorm) then summed over tp so they stay replicated. Collective on tp. */
int gt_norm_backward_rows(gt_backend *be, gt_dtype dt, gt_norm k, const gt_group *tp, void *din,
                          float *dw, float *db, const void *dout, const void *in, const void *w,
                          const float *mean, const float *rstd, int64_t ns, int64_t C);

#endif /* GT_NORM_H */
