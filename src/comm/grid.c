/*
 * grid.c - the communicator split of a resolved layout (layout.h).
 */
#define _GNU_SOURCE
#include "gridtrain/grid.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"

// ---- communicators ----------------------------------------------------------

static int gt_comm_split_checked(MPI_Comm parent, int color, int key, MPI_Comm *out)
{
  GT_CALL_MPI(MPI_Comm_split(parent, color, key, out));
  GT_CALL_MPI(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
  return GT_SUCCESS;
}

/* CPUs of this node that its ranks may run on: the union of their affinity
 * masks (a rank bound to one core sees one; an unbound rank sees all). */
static int gt_node_cores(MPI_Comm node, int *cores)
{
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++)
      CPU_SET(i, &mask);
  }
  cpu_set_t all;
  GT_CALL_MPI(MPI_Allreduce(&mask, &all, (int)sizeof mask, MPI_BYTE, MPI_BOR, node));
  *cores = CPU_COUNT(&all);
  if (*cores < 1)
    *cores = 1;
  return GT_SUCCESS;
}

static int gt_grid_split(gt_grid *g, MPI_Comm world, const int sizes[3])
{
  GT_CALL_MPI(MPI_Comm_dup(world, &g->world));
  GT_CALL_MPI(MPI_Comm_set_errhandler(g->world, MPI_ERRORS_RETURN));
  GT_CALL_MPI(MPI_Comm_rank(g->world, &g->world_rank));
  GT_CALL_MPI(MPI_Comm_size(g->world, &g->world_size));
  g->dp_size = sizes[0];
  g->pp_size = sizes[1];
  g->tp_size = sizes[2];
  const int r = g->world_rank;
  g->tp_rank = r % g->tp_size;
  g->dp_rank = (r / g->tp_size) % g->dp_size;
  g->pp_rank = r / (g->tp_size * g->dp_size);
  GT_CALL(gt_comm_split_checked(g->world, g->pp_rank * g->dp_size + g->dp_rank,
                                g->tp_rank, &g->tp));
  GT_CALL(gt_comm_split_checked(g->world, g->pp_rank * g->tp_size + g->tp_rank,
                                g->dp_rank, &g->dp));
  GT_CALL(gt_comm_split_checked(g->world, g->dp_rank * g->tp_size + g->tp_rank,
                                g->pp_rank, &g->pp));
  /* First and last stage of the same (dp, tp): the tied embedding. */
  const bool ends = g->pp_size > 1 && (g->pp_rank == 0 || g->pp_rank == g->pp_size - 1);
  GT_CALL_MPI(MPI_Comm_split(g->world, ends ? g->dp_rank * g->tp_size + g->tp_rank
                                            : MPI_UNDEFINED,
                             g->pp_rank, &g->embed));
  if (g->embed != MPI_COMM_NULL)
    GT_CALL_MPI(MPI_Comm_set_errhandler(g->embed, MPI_ERRORS_RETURN));
  GT_CALL_MPI(MPI_Comm_split_type(g->world, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL,
                                  &g->node));
  GT_CALL_MPI(MPI_Comm_set_errhandler(g->node, MPI_ERRORS_RETURN));
  GT_CALL_MPI(MPI_Comm_rank(g->node, &g->node_rank));
  GT_CALL_MPI(MPI_Comm_size(g->node, &g->node_size));
  GT_CALL(gt_node_cores(g->node, &g->node_cores));
  /* The split must reproduce the rank order; anything else is a bug. */
  int check;
  GT_CALL_MPI(MPI_Comm_rank(g->dp, &check));
  GT_ASSERT(check == g->dp_rank);
  GT_CALL_MPI(MPI_Comm_rank(g->pp, &check));
  GT_ASSERT(check == g->pp_rank);
  GT_CALL_MPI(MPI_Comm_rank(g->tp, &check));
  GT_ASSERT(check == g->tp_rank);
  /* The flight recorder's names (flight.h) */
  const MPI_Comm comms[] = {g->world, g->dp, g->pp, g->tp, g->embed, g->node};
  const char *names[] = {"world", "dp", "pp", "tp", "embed", "node"};
  for (int i = 0; i < 6; i++)
    GT_CALL(gt_flight_name(comms[i], names[i]));
  return GT_SUCCESS;
}

int gt_grid_create(MPI_Comm world, const int sizes[3], gt_grid **grid)
{
  int world_size;
  GT_CALL_MPI(MPI_Comm_size(world, &world_size));
  /* Every rank evaluates the same check on the same sizes. */
  if ((long)sizes[0] * sizes[1] * sizes[2] != world_size || sizes[0] < 1 || sizes[1] < 1 ||
      sizes[2] < 1) {
    const int status = GT_ERROR(GT_ERR_INPUT, "layout dp=%d x pp=%d x tp=%d does not make "
                                "the %d ranks of the job", sizes[0], sizes[1], sizes[2],
                                world_size);
    gt_error_set_collective(true);
    return status;
  }
  gt_grid *g = calloc(1, sizeof *g);
  GT_CHECK_ALLOC(g, sizeof *g);
  g->world = g->dp = g->pp = g->tp = g->embed = g->node = MPI_COMM_NULL;
  int status = gt_grid_split(g, world, sizes);
  if (status != GT_SUCCESS) {
    gt_grid_destroy(&g);
    return status;
  }
  *grid = g;
  return GT_SUCCESS;
}

int gt_grid_destroy(gt_grid **grid)
{
  gt_grid *g = *grid;
  if (!g)
    return GT_SUCCESS;
  MPI_Comm *comms[] = {&g->tp, &g->dp, &g->pp, &g->embed, &g->node, &g->world};
  int first_error = MPI_SUCCESS;
  for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++)
    if (*comms[i] != MPI_COMM_NULL) {
      gt_flight_forget(*comms[i]);
      int rc = MPI_Comm_free(comms[i]); /* free them all, report the first failure */
      if (rc != MPI_SUCCESS && first_error == MPI_SUCCESS)
        first_error = rc;
    }
  free(g);
  *grid = NULL;
  GT_CALL_MPI(first_error);
  return GT_SUCCESS;
}

int gt_grid_threads(const gt_grid *g, long setting)
{
  if (setting > 0)
    return (int)setting;
  const char *env = getenv("OMP_NUM_THREADS");
  if (env && atoi(env) > 0)
    return atoi(env);
  const int t = g->node_cores / g->node_size;
  return t >= 1 ? t : 1;
}

void gt_grid_set_wait(const gt_grid *g, int threads, bool yield, bool busy)
{
  const bool oversubscribed = (long)g->node_size * threads > g->node_cores;
  gt_comm_set_wait_mode(yield || (!busy && oversubscribed) ? GT_WAIT_YIELD : GT_WAIT_BUSY);
}
