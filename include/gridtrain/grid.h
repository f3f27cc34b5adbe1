/*
 * gridtrain/grid.h - the process grid: world = DP x PP x TP.
 *
 * Rank order is TP fastest, then DP, then PP:
 *     world_rank = (pp_rank * DP + dp_rank) * TP + tp_rank
 * so a TP group is a run of consecutive ranks (inside a node when TP divides
 * the ranks per node). MPI_Comm_split makes:
 *     tp   ranks with the same (pp, dp)  - tensor-parallel collectives
 *     dp   ranks with the same (pp, tp)  - gradient all-reduce
 *     pp   ranks with the same (dp, tp)  - pipeline sends and receives
 *     embed  first and last stage of the same (dp, tp) when pp > 1 - the
 *          tied embedding's gradient (MPI_COMM_NULL on other ranks)
 *     node ranks sharing memory (MPI_COMM_TYPE_SHARED) - GPU choice, threads
 * Every communicator is a duplicate or split of a duplicate of the world
 * communicator and returns MPI errors to the caller (MPI_ERRORS_RETURN).
 */
#ifndef GRIDTRAIN_GRID_H
#define GRIDTRAIN_GRID_H

#include <mpi.h>

#include "gridtrain/config.h"

typedef struct gt_grid {
  MPI_Comm world, dp, pp, tp, embed, node;
  int world_rank, world_size;
  int dp_rank, dp_size;
  int pp_rank, pp_size;
  int tp_rank, tp_size;
  int node_rank, node_size;
  int node_cores; /* CPUs the ranks of this node may run on, together */
} gt_grid;

/* Resolve the layout sizes (0 = auto) against world_size into sizes[3] =
 * {dp, pp, tp}. The product of the fixed sizes must divide world_size; the
 * remainder goes to the first auto size in the order dp, pp, tp and any
 * other auto size becomes 1. Not collective; GT_ERR_INPUT on mismatch. */
int gt_grid_resolve(long dp, long pp, long tp, int world_size, int sizes[3]);

/* Check a resolved layout against the model and the batch: heads divisible
 * by tp (and every vocabulary piece non-empty), layers >= pp, batch divisible
 * by dp x microbatches. Not collective;
 * GT_ERR_INPUT with what to change. */
int gt_grid_check_model(const gt_config *cfg, const int sizes[3]);

/* Collective on world: resolve and check the layout from cfg, then split the
 * communicators. Errors are reported identically on every rank (collective).
 * The grid owns its communicators; gt_grid_destroy frees them. */
int gt_grid_create(const gt_config *cfg, MPI_Comm world, gt_grid **grid);

/* Collective on the grid's world: free the communicators and the grid and set
 * *grid to NULL. */
int gt_grid_destroy(gt_grid **grid);

#endif /* GRIDTRAIN_GRID_H */
