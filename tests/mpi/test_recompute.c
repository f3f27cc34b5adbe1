/*
 * test_recompute.c - activation recomputation ([model] recompute =
 * attention | block) trains bit for bit like recompute = none, keeps fewer
 * bytes per micro-batch in flight, and times its extra forwards under their
 * own event.
 *
 * Each case (layout, schedule, micro-batches, precision) trains 6 steps with
 * every mode on the first dp x pp x tp ranks: the losses of every step and
 * the final parameters (full logical tensors) of attention and block are
 * bitwise those of none. The activation bytes a micro-batch keeps
 * (gt_gpt_plan) fall from none to attention to block.
 *
 * gt-test: ranks=4 tier=quick
 */
#include <stdio.h>

#include "train_run.h"

#define STEPS 6

typedef struct rcase {
  int dp, pp, tp, mb;
  const char *schedule, *precision;
} rcase;

static const rcase cases[] = {
  {1, 1, 1, 1, "1f1b", "fp32"}, {1, 2, 2, 2, "1f1b", "fp32"}, {2, 1, 2, 2, "gpipe", "bf16"},
  {1, 4, 1, 4, "1f1b", "bf16"}, {4, 1, 1, 1, "1f1b", "fp16"},
};

/* The activation bytes one micro-batch in flight keeps (a whole model on
 * one rank, micro-batch B). */
static size_t slot_bytes(const gt_gpt_shape *shape, gt_recompute mode, gt_dtype dt, int B)
{
  gt_gpt_part part = gt_gpt_whole(shape);
  part.recompute = mode;
  size_t act = 0, slot = 0;
  if (gt_gpt_plan(shape, &part, dt, B, shape->max_seq, 1, &act, &slot) != GT_SUCCESS)
    return 0;
  return slot;
}

int main(int argc, char **argv)
{
  tu_scratch scratch;
  const int rank = tu_mpi_start(&argc, &argv, "test_recompute", 4, &scratch);
  if (rank < 0)
    return 1;
  gt_config cfg;
  tu_deck(&cfg, "test_recompute",
          "[run]\nsteps = %d\nseed = 3\n"
          "[model]\nlayers = 4\nheads = 4\ndim = 32\nseq_len = 16\nvocab = 256\n"
          "[data]\ntrain = %s\nbatch = 16\nmicrobatches = 1\n"
          "[optim]\nlr = 3e-3\nmin_lr = 3e-4\nwarmup = 2\n"
          "[backend]\nthreads = 1\n"
          "[parallel]\nwait = yield\n",
          STEPS, scratch.dataset);
  const gt_gpt_shape shape = tu_shape_of(&cfg);
  const size_t numel = gt_gpt_param_count(&shape);
  static const char *modes[] = {"none", "attention", "block"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const rcase *r = &cases[i];
    char what[128];
    snprintf(what, sizeof what, "(dp,pp,tp)=(%d,%d,%d) %s mb=%d %s", r->dp, r->pp, r->tp,
             r->schedule, r->mb, r->precision);
    MPI_Comm comm = tu_first_ranks(r->dp * r->pp * r->tp);
    tu_outcome got[3];
    int st[3];
    size_t bytes[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
      gt_config c = cfg;
      c.grid.dp = r->dp;
      c.grid.pp = r->pp;
      c.grid.tp = r->tp;
      c.data.microbatches = r->mb;
      snprintf(c.parallel.schedule, sizeof c.parallel.schedule, "%s", r->schedule);
      tu_config_set(&c, "backend.precision=%s", r->precision);
      tu_config_set(&c, "model.recompute=%s", modes[k]);
      memset(&got[k], 0, sizeof got[k]);
      st[k] = GT_SUCCESS;
      if (comm != MPI_COMM_NULL) {
        st[k] = tu_train(&c, comm, STEPS, NULL, numel, &got[k]);
      }
    }
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
    tu_sleepy_barrier(MPI_COMM_WORLD);
    const gt_dtype dt = gt_precision_dtype(r->precision);
    for (int k = 0; k < 3; k++)
      bytes[k] = slot_bytes(&shape, (gt_recompute)k, dt, (int)cfg.data.batch / r->dp / r->mb);
    if (rank == 0) {
      for (int k = 1; k < 3; k++) {
        char t[200];
        snprintf(t, sizeof t, "%s: recompute = %s trains", what, modes[k]);
        if (!tu_ok_status(st[0], "recompute = none trains") || !tu_ok_status(st[k], t))
          continue;
        bool same = memcmp(got[k].loss, got[0].loss, STEPS * sizeof(double)) == 0;
        tap_ok(same, "%s: recompute = %s: the losses of %d steps are bitwise those of none",
               what, modes[k], STEPS);
        if (!same)
          for (int s = 0; s < STEPS; s++)
            tap_diag("  step %d: %.17g vs %.17g", s, got[k].loss[s], got[0].loss[s]);
        tap_ok(tu_same_bits(got[k].final, got[0].final, numel),
               "%s: recompute = %s: final parameters bitwise those of none", what, modes[k]);
      }
      tap_ok(bytes[2] < bytes[1] && bytes[1] < bytes[0],
             "%s: a micro-batch keeps fewer bytes: none %zu > attention %zu > block %zu", what,
             bytes[0], bytes[1], bytes[2]);
    }
    for (int k = 0; k < 3; k++)
      tu_free_outcome(&got[k]);
  }
  return tu_mpi_finish();
}
