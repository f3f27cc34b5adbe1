/*
 * test_binding.c - which GPU a rank drives, and what device = cuda says where
 * it cannot run. Runs without a GPU: the binding rule and the launcher
 * variables are host logic; the backend's refusal is checked against what
 * the build and the machine have (gt_cuda_built, gt_cuda_device_count).
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdlib.h>
#include <string.h>

#include "../test_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/binding.h"
#include "gridtrain/cuda_info.h"

static void unset_launcher_env(void)
{
  unsetenv("MPI_LOCALRANKID");
  unsetenv("SLURM_LOCALID");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
}

static void test_pick(void)
{
  /* node-local rank mod devices: 8 ranks on 4 GPUs share them round robin */
  static const int want[8] = {0, 1, 2, 3, 0, 1, 2, 3};
  bool all = true;
  for (int r = 0; r < 8; r++) {
    int dev = -1;
    all = all && gt_binding_pick(r, 4, &dev) == GT_SUCCESS && dev == want[r];
  }
  tap_ok(all, "8 node-local ranks on 4 GPUs: devices 0 1 2 3 0 1 2 3");
  int dev = -1;
  tap_ok(gt_binding_pick(5, 1, &dev) == GT_SUCCESS && dev == 0,
         "a rank that sees one GPU (CUDA_VISIBLE_DEVICES, srun --gpu-bind) drives it");
  tap_ok(gt_binding_pick(0, 0, &dev) == GT_ERR_INPUT &&
             strstr(gt_error_message(), "no GPU is visible") != NULL,
         "no visible GPU is an input error: %s", gt_error_message());
  gt_error_clear();
  tap_ok(gt_binding_pick(-1, 2, &dev) == GT_ERR_INPUT, "a negative local rank is refused");
  gt_error_clear();
  tap_ok(gt_binding_ranks_per_device(8, 4) == 2 && gt_binding_ranks_per_device(6, 4) == 2 &&
             gt_binding_ranks_per_device(3, 4) == 1 && gt_binding_ranks_per_device(4, 0) == 0,
         "ranks per device: ceil(local ranks / devices)");
}

static void test_env(void)
{
  int r = -1;
  unset_launcher_env();
  tap_ok(!gt_binding_local_rank_from_env(&r) && r == 0, "no launcher variable: local rank 0");
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
  tap_ok(gt_binding_local_rank_from_env(&r) && r == 5, "Open MPI's local rank: 5");
  setenv("SLURM_LOCALID", "3", 1);
  tap_ok(gt_binding_local_rank_from_env(&r) && r == 3, "SLURM_LOCALID wins over Open MPI's");
  setenv("MPI_LOCALRANKID", "2", 1);
  tap_ok(gt_binding_local_rank_from_env(&r) && r == 2, "MPICH's MPI_LOCALRANKID wins over both");
  setenv("MPI_LOCALRANKID", "x1", 1);
  bool found = gt_binding_local_rank_from_env(&r);
  tap_ok(found && r == 3, "a malformed value is skipped (got %d)", r);
  setenv("MPI_LOCALRANKID", "-4", 1);
  setenv("SLURM_LOCALID", "", 1);
  found = gt_binding_local_rank_from_env(&r);
  tap_ok(found && r == 5, "negative and empty values are skipped (got %d)", r);
  unset_launcher_env();
}

static void test_backend_refusal(void)
{
  gt_backend *be = NULL;
  gt_backend_options opt = {.threads = 1, .local_rank = 0};
  if (gt_cuda_built() && gt_cuda_device_count() > 0) {
    tap_ok(true, "# SKIP this machine has a GPU: device = cuda is tested in tests/gpu");
    tap_ok(true, "# SKIP this machine has a GPU");
    return;
  }
  int status = gt_backend_create_with("cuda", &opt, &be);
  const char *want = gt_cuda_built() ? "no GPU is visible to this rank"
                                     : "built without CUDA";
  tap_ok(status == GT_ERR_INPUT && be == NULL && strstr(gt_error_message(), want) != NULL,
         "device = cuda here is an input error naming why (%s): %s", want, gt_error_message());
  gt_error_clear();
  opt.attention = (gt_attention_kind)7; /* not a kind */
  status = gt_backend_create_with("cuda", &opt, &be);
  tap_ok(status == GT_ERR_INPUT && be == NULL, "a bad attention kind is refused too: %s",
         gt_error_message());
  gt_error_clear();
}

int main(void)
{
  test_pick();
  test_env();
  test_backend_refusal();
  return tap_done();
}
