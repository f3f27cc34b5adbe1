/*
 * test_precision_curve.c - bf16 and fp16 training of the default model
 * follows the fp32 loss curve.
 *
 * Three ranks train the default deck's model (4 layers, width 128, 4 heads,
 * context 128, bytes; batch 8 rather than 16, for time) on Genesis for
 * STEPS steps from the same
 * weights and data, one in each precision (rank 0 fp32, 1 bf16, 2 fp16),
 * each alone (MPI_COMM_SELF). Against the fp32 curve:
 *   - mean |loss - loss_fp32| over the last 50 steps <= MEAN_TOL * loss_fp32,
 *   - every step's |loss - loss_fp32| <= STEP_TOL * loss_fp32,
 *   - every precision learns (the last 50 steps average below 75% of the
 *     first step's loss), and fp16 skips no step after its first 20.
 * The bounds: the loss of one step is a mean over 1024 tokens of a
 * cross-entropy whose inputs carry rounding of 2^-9 (bf16) or 2^-12 (fp16)
 * relative from each of ~25 rounding points per block; after the first
 * steps the trajectories separate the way two fp32 runs with different
 * summation orders do, but by more, because every weight update is seen
 * through the rounded compute copy. What must hold is that the curves stay
 * on top of each other. Measured here: mean gaps over the last 50 steps of
 * 0.0009 (bf16) and 0.0004 (fp16) at a loss of 2.22, the largest single
 * step 0.19% and 0.08%; with batch 16, 0.34% and 0.14% mean, 0.98% worst.
 * MEAN_TOL = 1% and STEP_TOL = 3% leave a factor of 3 over the worst of
 * those and are far below what a real defect does (an unscaled gradient,
 * a stale compute copy or a wrong rounding point leaves the loss stuck
 * above 3, or off by 10% and more).
 *
 * gt-test: ranks=3 tier=quick
 */
#include <stdio.h>

#include "train_run.h"
#include "gridtrain/trainer.h"

#define STEPS 200
#define BATCH 8
#define TAIL 50
#define MEAN_TOL 0.01
#define STEP_TOL 0.03

int main(int argc, char **argv)
{
  tu_scratch scratch;
  const int rank = tu_mpi_start(&argc, &argv, "test_precision_curve", 3, &scratch);
  if (rank < 0)
    return 1;
  const char *src = getenv("GT_SRCDIR");
  static const char *precisions[3] = {"fp32", "bf16", "fp16"};
  const char *data = scratch.dataset;

  /* the default deck's model and optimizer */
  char deck[1200], kv[3][80];
  snprintf(deck, sizeof deck, "%s/inputs/default.in", src);
  snprintf(kv[0], sizeof kv[0], "backend.precision=%s", precisions[rank]);
  snprintf(kv[1], sizeof kv[1], "run.steps=%d", STEPS);
  snprintf(kv[2], sizeof kv[2], "data.batch=%d", BATCH);
  char data_kv[1300];
  snprintf(data_kv, sizeof data_kv, "data.train=%s", data);
  char *over[] = {kv[0], kv[1], kv[2], data_kv, "data.val=", "run.eval_every=0", "run.metrics=",
                  "checkpoint.dir=", "grid.dp=1", "grid.pp=1", "grid.tp=1",
                  "data.microbatches=1", "backend.threads=1", "parallel.wait=yield"};
  gt_config cfg;
  double loss[STEPS] = {0};
  int skipped_late = 0;
  int st = gt_config_load(&cfg, deck, (int)(sizeof over / sizeof *over), over, MPI_COMM_SELF);
  gt_trainer *tr = NULL;
  if (st == GT_SUCCESS)
    st = gt_trainer_create(&cfg, MPI_COMM_SELF, true, &tr);
  for (int s = 0; s < STEPS && st == GT_SUCCESS; s++) {
    gt_step_stats stats;
    st = gt_trainer_step(tr, &stats);
    loss[s] = stats.loss;
    skipped_late += s >= 20 && stats.skipped;
  }
  if (st != GT_SUCCESS)
    fprintf(stderr, "rank %d (%s): %s\n", rank, precisions[rank], gt_error_message());
  gt_trainer_destroy(&tr);

  double all[3][STEPS];
  int sts[3], late[3];
  MPI_Gather(loss, STEPS, MPI_DOUBLE, all, STEPS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(&st, 1, MPI_INT, sts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Gather(&skipped_late, 1, MPI_INT, late, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int p = 0; p < 3; p++) {
      double tail = 0;
      for (int s = STEPS - TAIL; s < STEPS; s++)
        tail += all[p][s] / TAIL;
      tap_ok(sts[p] == GT_SUCCESS && tail < 0.75 * all[p][0],
             "%s trains %d steps of the default model: loss %.4f -> %.4f (mean of the last %d)",
             precisions[p], STEPS, all[p][0], tail, TAIL);
    }
    for (int p = 1; p < 3; p++) {
      double mean = 0, worst = 0, ref = 0;
      int at = 0;
      for (int s = 0; s < STEPS; s++) {
        const double d = fabs(all[p][s] - all[0][s]) / all[0][s];
        if (!(d <= worst)) {
          worst = isnan(d) ? INFINITY : d;
          at = s;
        }
        if (s >= STEPS - TAIL) {
          mean += fabs(all[p][s] - all[0][s]) / TAIL;
          ref += all[0][s] / TAIL;
        }
      }
      tap_ok(mean <= MEAN_TOL * ref,
             "%s tracks fp32 over the last %d steps: mean |gap| %.4f <= %.0f%% of %.3f", precisions[p],
             TAIL, mean, 100 * MEAN_TOL, ref);
      tap_ok(worst <= STEP_TOL, "%s within %.0f%% of fp32 at every step (worst %.2f%% at step %d)",
             precisions[p], 100 * STEP_TOL, 100 * worst, at);
    }
    tap_ok(late[2] == 0, "fp16 skips no step after the first 20 (%d)", late[2]);
  }
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
