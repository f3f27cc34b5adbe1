/*
 * test_grid.c - the communicator split at 4 ranks: rank order, sizes, and
 * that each communicator groups the ranks DESIGN.md says it does; sizes
 * that do not make the job are the same error on every rank. (Resolving a
 * deck into sizes is test_layout.c's.)
 *
 * gt-test: ranks=4 tier=quick
 */
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/grid.h"

int main(int argc, char **argv)
{
  int rank = tu_mpi_init(&argc, &argv);
  // ---- the split at 4 ranks, dp = 4
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  gt_grid *g = NULL;
  const int all_dp[3] = {world, 1, 1};
  int st = gt_grid_create(MPI_COMM_WORLD, all_dp, &g);
  tap_ok(st == GT_SUCCESS, "grid create with dp=%d on %d ranks", world, world);
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
  // ---- pp = 2 x tp = 2 at 4 ranks: TP fastest, then DP, then PP
  const int pp_tp[3] = {1, 2, 2};
  st = world == 4 ? gt_grid_create(MPI_COMM_WORLD, pp_tp, &g) : GT_ERR_INPUT;
  tap_ok(st == GT_SUCCESS, "grid create with pp=2 x tp=2");
  if (st == GT_SUCCESS) {
    int ok = g->tp_rank == rank % 2 && g->pp_rank == rank / 2 && g->dp_rank == 0 &&
             g->embed != MPI_COMM_NULL;
    /* the tp group holds the consecutive pair, the pp group the ranks 2 apart */
    int tp_sum = 0, pp_sum = 0, all;
    MPI_Allreduce(&rank, &tp_sum, 1, MPI_INT, MPI_SUM, g->tp);
    MPI_Allreduce(&rank, &pp_sum, 1, MPI_INT, MPI_SUM, g->pp);
    ok = ok && tp_sum == 4 * (rank / 2) + 1 && pp_sum == 2 * (rank % 2) + 2;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    tap_ok(all, "pp=2 x tp=2: tp pairs (0,1) (2,3), pp pairs (0,2) (1,3), embed on every rank");
    gt_grid_destroy(&g);
  }
  // ---- a layout error is collective: every rank gets the same error
  const int three[3] = {3, 1, 1};
  gt_error_clear();
  st = gt_grid_create(MPI_COMM_WORLD, three, &g);
  int mine = st == GT_ERR_INPUT && gt_error_is_collective(), all;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  tap_ok(all, "a wrong layout is the same collective error on every rank");

  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
