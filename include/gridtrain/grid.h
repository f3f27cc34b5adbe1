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
#include <stdbool.h>

typedef struct gt_grid {
  MPI_Comm world, dp, pp, tp, embed, node;
  int world_rank, world_size;
  int dp_rank, dp_size;
  int pp_rank, pp_size;
  int tp_rank, tp_size;
  int node_rank, node_size;
  int node_cores; /* CPUs the ranks of this node may run on, together */
} gt_grid;

/* Collective on world: split the communicators of the layout sizes[3] =
 * {dp, pp, tp} (gt_layout_resolve's, layout.h), whose product must be the
 * size of world (else the same GT_ERR_INPUT on every rank, collective).
 * The grid owns its communicators; gt_grid_destroy frees them. */
int gt_grid_create(MPI_Comm world, const int sizes[3], gt_grid **grid);

/* Collective on the grid's world: free the communicators and the grid and set
 * *grid to NULL. */
int gt_grid_destroy(gt_grid **grid);

/* The OpenMP/BLAS threads of a rank: `setting` ([backend] threads) when >
 * 0, else OMP_NUM_THREADS when set, else the node's cores shared among its
 * ranks (at least 1). Not collective. */
int gt_grid_threads(const gt_grid *g, long setting);

/* How MPI waits (comm.h's gt_comm_set_wait_mode) for ranks of `threads`
 * threads: yield when `yield` says so, or when auto (neither forced) and
 * the node's ranks oversubscribe its cores; else busy-poll. */
void gt_grid_set_wait(const gt_grid *g, int threads, bool yield, bool busy);

#endif /* GRIDTRAIN_GRID_H */
