/*
 * binding.c - which GPU a rank drives (binding.h). Plain C, no CUDA.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "gridtrain/binding.h"
#include "gridtrain/error.h"

static bool gt_parse_rank(const char *s, int *rank)
{
  if (!s || !*s)
    return false;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 0 || v > INT_MAX)
    return false;
  *rank = (int)v;
  return true;
}

bool gt_binding_local_rank_from_env(int *rank)
{
  static const char *vars[] = {"MPI_LOCALRANKID", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (gt_parse_rank(getenv(vars[i]), rank))
      return true;
  *rank = 0;
  return false;
}

int gt_binding_pick(int local_rank, int ndev, int *device)
{
  GT_CHECK(ndev >= 1, GT_ERR_INPUT, "no GPU is visible to this rank (check CUDA_VISIBLE_DEVICES "
           "and the job's GPU request, e.g. sbatch --gpus-per-node)");
  GT_CHECK(local_rank >= 0, GT_ERR_INPUT, "node-local rank %d is negative", local_rank);
  *device = local_rank % ndev;
  return GT_SUCCESS;
}

int gt_binding_ranks_per_device(int local_size, int ndev)
{
  return ndev < 1 ? 0 : (local_size + ndev - 1) / ndev;
}
