/*
 * test_grid.c - layout resolution and validation, and the communicator
 * split at 4 ranks: rank order, sizes, and that each communicator groups the
 * ranks DESIGN.md says it does.
 *
 * gt-test: ranks=4 tier=quick
 */
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/grid.h"

static void expect_resolve(long dp, long pp, long tp, int world, int edp, int epp, int etp)
{
  int s[3] = {0, 0, 0};
  int st = gt_grid_resolve(dp, pp, tp, world, s);
  tap_ok(st == GT_SUCCESS && s[0] == edp && s[1] == epp && s[2] == etp,
         "resolve dp=%ld pp=%ld tp=%ld on %d ranks -> %d x %d x %d (got %d x %d x %d)", dp, pp,
         tp, world, edp, epp, etp, s[0], s[1], s[2]);
}

static void expect_resolve_error(long dp, long pp, long tp, int world, const char *needle)
{
  int s[3];
  gt_error_clear();
  int st = gt_grid_resolve(dp, pp, tp, world, s);
  if (!tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), needle),
              "resolve dp=%ld pp=%ld tp=%ld on %d ranks is refused", dp, pp, tp, world))
    tap_diag("status %d: %s", st, gt_error_message());
}

static void expect_model_error(const gt_config *cfg, int dp, int pp, int tp, const char *needle)
{
  int s[3] = {dp, pp, tp};
  gt_error_clear();
  int st = gt_grid_check_model(cfg, s);
  if (!tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), needle),
              "layout %d x %d x %d refused: '%s'", dp, pp, tp, needle))
    tap_diag("status %d: %s", st, gt_error_message());
}

int main(int argc, char **argv)
{
  int rank = tu_mpi_init(&argc, &argv);
  // ---- resolution (0 = auto)
  expect_resolve(0, 1, 1, 4, 4, 1, 1);
  expect_resolve(3, 1, 1, 3, 3, 1, 1);
  expect_resolve(0, 2, 0, 8, 4, 2, 1);
  expect_resolve(2, 0, 2, 8, 2, 2, 2);
  expect_resolve(0, 0, 0, 6, 6, 1, 1);
  expect_resolve(2, 3, 1, 6, 2, 3, 1);
  expect_resolve_error(3, 1, 1, 4, "needs 3 ranks but the job has 4");
  expect_resolve_error(0, 3, 1, 4, "does not divide the 4 ranks");

  // ---- validation against the model and batch
  gt_config cfg;
  gt_config_defaults(&cfg);
  cfg.model.heads = 4;
  cfg.model.dim = 128;
  cfg.model.layers = 2;
  cfg.data.batch = 12;
  cfg.data.microbatches = 2;
  int ok3[3] = {3, 1, 1};
  tap_ok(gt_grid_check_model(&cfg, ok3) == GT_SUCCESS, "dp=3 with batch 12 in 2 micro-batches");
  expect_model_error(&cfg, 4, 1, 1, "batch=12 does not split over dp=4 x microbatches=2");
  expect_model_error(&cfg, 1, 1, 3, "tp=3 does not divide [model] heads=4; choose tp in {1, 2, 4}");
  expect_model_error(&cfg, 1, 3, 1, "pp=3 pipeline stages need at least 3 layers");
  {
    const int ok_layouts[][3] = {{1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {1, 2, 4}, {3, 2, 2}};
    for (size_t i = 0; i < sizeof ok_layouts / sizeof ok_layouts[0]; i++) {
      gt_error_clear();
      int st = gt_grid_check_model(&cfg, ok_layouts[i]);
      if (!tap_ok(st == GT_SUCCESS, "layout %d x %d x %d accepted", ok_layouts[i][0],
                  ok_layouts[i][1], ok_layouts[i][2]))
        tap_diag("%s", gt_error_message());
    }
  }
  cfg.model.vocab = 5; /* tp=4: pieces of 2 rows, the last one would be empty */
  expect_model_error(&cfg, 1, 1, 4, "leaves a tensor-parallel rank without vocabulary rows");
  cfg.model.vocab = 7; /* pieces of 2, 2, 2 and 1 row: fine */
  {
    int s[3] = {1, 1, 4};
    tap_ok(gt_grid_check_model(&cfg, s) == GT_SUCCESS, "vocab 7 over tp=4 (padded) accepted");
  }
  cfg.model.vocab = 256;
  cfg.model.heads = 3;
  expect_model_error(&cfg, 1, 1, 1, "heads=3 does not divide dim=128");

  // ---- the split at 4 ranks, dp = 4
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  gt_config_defaults(&cfg);
  cfg.data.batch = 8;
  gt_grid *g = NULL;
  int st = gt_grid_create(&cfg, MPI_COMM_WORLD, &g);
  tap_ok(st == GT_SUCCESS, "grid create with dp=auto on %d ranks", world);
  if (st == GT_SUCCESS) {
    int ok = g->dp_size == world && g->pp_size == 1 && g->tp_size == 1 && g->dp_rank == rank &&
             g->world_rank == (g->pp_rank * g->dp_size + g->dp_rank) * g->tp_size + g->tp_rank;
    int dp_n, tp_n, pp_n, all;
    MPI_Comm_size(g->dp, &dp_n);
    MPI_Comm_size(g->tp, &tp_n);
    MPI_Comm_size(g->pp, &pp_n);
    ok = ok && dp_n == world && tp_n == 1 && pp_n == 1 && g->node_cores >= 1;
    /* the dp communicator really connects the ranks: sum of world ranks */
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, g->dp);
    ok = ok && sum == world * (world - 1) / 2;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    tap_ok(all, "rank order, communicator sizes and membership on every rank");
    gt_grid_destroy(&g);
    tap_ok(g == NULL, "destroy sets the handle to NULL");
  }
  // ---- a layout error is collective: every rank gets the same error
  cfg.grid.dp = 3;
  gt_error_clear();
  st = gt_grid_create(&cfg, MPI_COMM_WORLD, &g);
  int mine = st == GT_ERR_INPUT && gt_error_is_collective(), all;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  tap_ok(all, "a wrong layout is the same collective error on every rank");

  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
