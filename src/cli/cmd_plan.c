/*
 * cmd_plan.c - `gridtrain plan --memory DECK [--ranks N] [section.key=value ...]`:
 * the memory account of a layout without training (memory.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gridtrain/config.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/memory.h"

static void gt_plan_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain plan --memory DECK [--ranks N] [section.key=value ...]\n"
         "\n"
         "Print the memory account of the deck's layout and settings without training:\n"
         "per pipeline stage, the bytes a rank expects for its compute weights, fp32\n"
         "master weights, gradients and AdamW moments (by the ZeRO formulas of\n"
         "[parallel] zero), its activations (per micro-batch in flight, by [model]\n"
         "recompute, times the micro-batches the schedule keeps in flight) and its\n"
         "MPI staging buffers. It is the table `gridtrain train` prints at start-up.\n"
         "Nothing is allocated and no data is read.\n"
         "\n"
         "  --memory    the memory account (the only plan so far)\n"
         "  --ranks N   the job's rank count (default: the product of [grid] dp, pp and\n"
         "              tp when none of them is auto)\n"
         "\n"
         "Example: gridtrain plan --memory inputs/default.in --ranks 8 parallel.zero=1\n");
}

int gt_cmd_plan(int argc, char **argv, MPI_Comm world)
{
  bool memory = false;
  long ranks = 0;
  const char *deck = NULL;
  char **overrides = calloc((size_t)argc + 1, sizeof *overrides);
  GT_CHECK_ALLOC(overrides, sizeof *overrides * ((size_t)argc + 1));
  int n = 0, status = GT_SUCCESS;
  for (int i = 1; i < argc && status == GT_SUCCESS; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      gt_plan_usage();
      free(overrides);
      return GT_SUCCESS;
    }
    char *end = NULL;
    if (strcmp(a, "--memory") == 0)
      memory = true;
    else if (strcmp(a, "--ranks") == 0 && i + 1 < argc &&
             (ranks = strtol(argv[i + 1], &end, 10), end && *end == '\0' && ranks >= 1))
      i++;
    else if (strcmp(a, "--ranks") == 0)
      status = GT_ERROR(GT_ERR_INPUT, "plan: --ranks needs a positive rank count");
    else if (a[0] == '-')
      status = GT_ERROR(GT_ERR_INPUT, "plan: unknown option '%s'; see 'gridtrain plan --help'",
                        a);
    else if (!deck)
      deck = a;
    else
      overrides[n++] = argv[i];
  }
  if (status == GT_SUCCESS && (!memory || !deck))
    status = GT_ERROR(GT_ERR_INPUT, "plan: usage: gridtrain plan --memory DECK [--ranks N] "
                      "[section.key=value ...] (see 'gridtrain plan --help')");
  gt_config cfg;
  if (status == GT_SUCCESS)
    status = gt_config_load(&cfg, deck, n, overrides, world);
  free(overrides);
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true); /* every rank parsed the same arguments */
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  if (ranks == 0) {
    const bool fixed = cfg.grid.dp > 0 && cfg.grid.pp > 0 && cfg.grid.tp > 0;
    if (!fixed) {
      gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                   "plan: [grid] has a size set to auto; give the job's rank count with "
                   "--ranks N");
      gt_error_set_collective(true);
      return GT_ERR_INPUT;
    }
    ranks = cfg.grid.dp * cfg.grid.pp * cfg.grid.tp;
  }
  /* MPI stages through pinned buffers where it cannot take device pointers:
   * cpu-guard, and cuda unless [backend] mpi_device = on says MPI is
   * CUDA-aware. */
  const bool device_memory =
      strcmp(cfg.backend.device, "cuda") == 0 || strcmp(cfg.backend.device, "cpu-guard") == 0;
  const bool staged = strcmp(cfg.backend.mpi_device, "off") == 0 ||
                      (strcmp(cfg.backend.mpi_device, "auto") == 0 && device_memory);
  gt_mem_account *stages = calloc(GT_MEM_MAX_STAGES, sizeof *stages);
  GT_CHECK_ALLOC(stages, sizeof *stages * GT_MEM_MAX_STAGES);
  int sizes[3];
  status = gt_mem_plan(&cfg, (int)ranks, staged, stages, GT_MEM_MAX_STAGES, sizes);
  if (status != GT_SUCCESS) {
    free(stages);
    gt_error_set_collective(true);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  if (gt_log_rank() == 0) {
    char what[320];
    const int zero = sizes[0] > 1 ? (int)cfg.parallel.zero : 0;
    snprintf(what, sizeof what,
             "%s compute, zero %d over dp=%d, recompute %s, %s schedule%s; layout dp=%d x "
             "pp=%d x tp=%d on %ld ranks, %s; MPI %s",
             cfg.backend.precision[0] ? cfg.backend.precision : "fp32", zero, sizes[0],
             cfg.model.recompute, cfg.parallel.schedule,
             sizes[2] > 1 && strcmp(cfg.parallel.sequence_parallel, "on") == 0
                 ? ", sequence parallel over tp"
                 : "",
             sizes[0], sizes[1], sizes[2], ranks,
             cfg.backend.device, staged ? "staged" : "on device buffers");
    gt_mem_print_header(stdout, what, gt_precision_dtype(cfg.backend.precision), "stage");
    for (int s = 0; s < sizes[1]; s++) {
      char label[32];
      snprintf(label, sizeof label, "%d", s);
      gt_mem_print_row(stdout, label, &stages[s]);
    }
    fflush(stdout);
  }
  free(stages);
  return GT_SUCCESS;
}
