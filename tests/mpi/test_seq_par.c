/*
 * test_seq_par.c - sequence parallelism ([parallel] sequence_parallel = on)
 * trains like sequence_parallel = off in every tensor-parallel layout, and
 * keeps fewer activation bytes per micro-batch.
 *
 * Each case (layout, schedule, micro-batches, zero stage, recompute mode,
 * precision) trains 8 steps with the switch off and on, on the first
 * dp x pp x tp ranks: the losses of every step and every final parameter
 * tensor (full logical tensors, max|a - b| / max|b|) agree within 1e-5 in
 * fp32. The sums run in another order (reduce-scatter instead of
 * all-reduce, the bias and residual added to partial sums), so the bound is
 * the layout bound, not bitwise; in bf16 the layout bounds of bf16
 * (test_precision.c: losses 1e-3, parameters 5e-2 of how far AdamW could
 * move them, max(max|b|, lr * steps), since bf16 rounds each partial sum
 * and noise-level gradients then steer elements anywhere in that range). The layouts are the tensor-parallel ones of the parity
 * suite (test_layouts.c) with tp = 2, 3, 4 and 6; the model has 12 heads,
 * T = 12 so that every tp splits a micro-batch's tokens, and vocab 256,
 * which tp = 3 and 6 pad. With tp = 1 the switch
 * changes nothing, bit for bit.
 *
 * gt-test: ranks=8 tier=full
 */
#include <stdio.h>

#include "train_run.h"

#define STEPS 8
#define TOL 1e-5
#define BF16_LAYOUT_TOL 1e-3
#define BF16_PARAM_TOL 5e-2 /* of max(max|b|, lr * STEPS), test_precision.c */

typedef struct scase {
  int dp, pp, tp, mb, zero;
  const char *schedule, *recompute, *precision;
} scase;

static const scase cases[] = {
  {1, 1, 1, 1, 0, "1f1b", "none", "fp32"},      {1, 1, 2, 1, 0, "1f1b", "none", "fp32"},
  {1, 1, 3, 2, 0, "gpipe", "none", "fp32"},     {1, 1, 4, 1, 0, "1f1b", "none", "fp32"},
  {1, 1, 6, 1, 0, "1f1b", "none", "fp32"},      {4, 1, 2, 2, 1, "1f1b", "none", "fp32"},
  {2, 2, 2, 4, 2, "1f1b", "attention", "fp32"}, {2, 2, 2, 2, 3, "gpipe", "block", "fp32"},
  {2, 1, 4, 1, 3, "1f1b", "none", "fp32"},      {1, 2, 4, 4, 0, "gpipe", "none", "fp32"},
  {1, 4, 2, 4, 0, "1f1b", "block", "fp32"},     {2, 2, 2, 2, 0, "1f1b", "none", "bf16"},
};

/* The activation bytes of one micro-batch in flight on tp rank 0 of a
 * one-stage tp layout, micro-batch B. */
static size_t slot_bytes(const gt_gpt_shape *shape, int tp, bool sp, int B)
{
  gt_gpt_part part = gt_gpt_whole(shape);
  part.tp.size = tp;
  part.seq_par = sp;
  size_t act = 0, slot = 0;
  if (gt_gpt_plan(shape, &part, GT_F32, B, shape->max_seq, 1, &act, &slot) != GT_SUCCESS)
    return 0;
  return slot;
}

int main(int argc, char **argv)
{
  tu_scratch scratch;
  const int rank = tu_mpi_start(&argc, &argv, "test_seq_par", 8, &scratch);
  if (rank < 0)
    return 1;
  gt_config cfg;
  tu_deck(&cfg, "test_seq_par",
          "[run]\nsteps = %d\nseed = 5\n"
          "[model]\nlayers = 4\nheads = 12\ndim = 48\nseq_len = 12\nvocab = 256\n"
          "[data]\ntrain = %s\nbatch = 16\nmicrobatches = 1\n"
          "[optim]\nlr = 1e-3\nmin_lr = 1e-4\nwarmup = 2\neps = 1e-4\n"
          "[backend]\nthreads = 1\n"
          "[parallel]\nwait = yield\n",
          STEPS, scratch.dataset);
  const gt_gpt_shape shape = tu_shape_of(&cfg);
  const size_t numel = gt_gpt_param_count(&shape);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const scase *z = &cases[i];
    char what[200];
    snprintf(what, sizeof what, "(dp,pp,tp)=(%d,%d,%d) %s mb=%d zero %d recompute %s %s",
             z->dp, z->pp, z->tp, z->schedule, z->mb, z->zero, z->recompute, z->precision);
    MPI_Comm comm = tu_first_ranks(z->dp * z->pp * z->tp);
    tu_outcome got[2];
    int st[2] = {GT_SUCCESS, GT_SUCCESS};
    for (int on = 0; on < 2; on++) {
      gt_config c = cfg;
      c.grid.dp = z->dp;
      c.grid.pp = z->pp;
      c.grid.tp = z->tp;
      c.data.microbatches = z->mb;
      c.parallel.zero = z->zero;
      snprintf(c.parallel.schedule, sizeof c.parallel.schedule, "%s", z->schedule);
      tu_config_set(&c, "model.recompute=%s", z->recompute);
      tu_config_set(&c, "backend.precision=%s", z->precision);
      tu_config_set(&c, "parallel.sequence_parallel=%s", on ? "on" : "off");
      memset(&got[on], 0, sizeof got[on]);
      if (comm != MPI_COMM_NULL)
        st[on] = tu_train(&c, comm, STEPS, NULL, numel, &got[on]);
    }
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
    tu_sleepy_barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      char t0[260], t1[260];
      snprintf(t0, sizeof t0, "%s: sequence_parallel = off trains", what);
      snprintf(t1, sizeof t1, "%s: sequence_parallel = on trains", what);
      if (tu_ok_status(st[0], t0) && tu_ok_status(st[1], t1)) {
        if (z->tp == 1) {
          tap_ok(memcmp(got[1].loss, got[0].loss, STEPS * sizeof(double)) == 0 &&
                     tu_same_bits(got[1].final, got[0].final, numel),
                 "%s: with tp = 1 the switch changes nothing, bit for bit", what);
        } else {
          const bool bf16 = strcmp(z->precision, "bf16") == 0;
          const double tol = bf16 ? BF16_LAYOUT_TOL : TOL, ptol = bf16 ? BF16_PARAM_TOL : TOL;
          const double floor = bf16 ? cfg.optim.lr * STEPS : 0.0;
          const double le = tu_loss_err(got[1].loss, got[0].loss, STEPS);
          const double pe = tu_param_err_at(&shape, got[1].final, got[0].final, floor, -1.0);
          tap_ok(le <= tol, "%s: losses of %d steps within %.0e of off (worst %.2e)", what,
                 STEPS, tol, le);
          if (le > tol)
            for (int k = 0; k < STEPS; k++)
              tap_diag("  step %d: %.9f vs %.9f", k, got[1].loss[k], got[0].loss[k]);
          tap_ok(pe <= ptol, "%s: final parameters within %.0e of off (worst %.2e)", what,
                 ptol, pe);
          if (!(pe <= ptol))
            tu_param_err_at(&shape, got[1].final, got[0].final, floor, ptol);
        }
        tap_ok(got[1].loss[STEPS - 1] < got[1].loss[0] - 0.3, "%s: it learns: %.4f -> %.4f",
               what, got[1].loss[0], got[1].loss[STEPS - 1]);
      }
    }
    for (int k = 0; k < 2; k++)
      tu_free_outcome(&got[k]);
  }
  if (rank == 0) {
    /* per block: ln1, ln2, res2 (and their statistics) and the residual
     * stream shrink by tp; what attention and the MLP keep does not */
    const int B = 4;
    for (int tp = 2; tp <= 4; tp += 2) {
      const size_t off = slot_bytes(&shape, tp, false, B), on = slot_bytes(&shape, tp, true, B);
      const size_t N = (size_t)B * (size_t)shape.max_seq, C = (size_t)shape.dim;
      /* per block 3 (N,C) tensors and 4 (N) statistics, the stream (L+1
       * of them), the gradient and the head's ln_f with statistics */
      const size_t rows = (size_t)shape.layers * (3 * C * 4 + 4 * 4) + (shape.layers + 2) * C * 4 +
                          (C * 4 + 2 * 4);
      const size_t saved = N * rows - N / tp * rows;
      tap_ok(off > on && off - on >= saved * 9 / 10,
             "tp=%d: a micro-batch in flight keeps %zu bytes with sequence parallelism, %zu "
             "without (the LayerNorm side shrinks by tp: about %zu fewer)",
             tp, on, off, saved);
    }
  }
  return tu_mpi_finish();
}
