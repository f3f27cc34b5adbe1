/*
 * moe.h - the MLP of a mixture-of-experts block (layers.h, "mixture of
 * experts"): router, experts, and their backward (internal to src/layers;
 * block.c calls it where a dense block runs its MLP).
 */
#ifndef GT_MOE_H
#define GT_MOE_H

#include "gridtrain/layers.h"

/* out (N,C) "=" base (NULL: 0; may be out) + the routed experts' output for
 * x (N,C), the block's normalised input, with d.moe's scratch, into a (routing, the rows in
 * expert order and what backward reads). lead: this rank adds the experts'
 * output biases (tp rank 0). Waits for the device once (the counts). Not
 * collective. */
int gt_moe_forward(gt_backend *be, const gt_moe_weights *w, const gt_moe_acts *a,
                   const void *x, const void *base, void *out,
                   gt_layer_dims d, bool lead);

/* dx (N,C) dt "+=" the gradient of the loss through the experts and the
 * router for x, from dout (N,C), the block output's gradient; the weights'
 * gradients "+=" into g. Reads what gt_moe_forward left in a. The router's
 * part of dx is added on the lead rank only (the caller sums dx over tp).
 * Collective on d.tp (the gates' gradients). */
int gt_moe_backward(gt_backend *be, const gt_moe_weights *w, const gt_moe_grads *g,
                    const gt_moe_acts *a, const void *x,
                    const void *dout, void *dx, gt_layer_dims d, bool lead);

#endif /* GT_MOE_H */
