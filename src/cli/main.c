/*
 * main.c - the gridtrain program: MPI set-up, subcommand dispatch, and the
 * one place where an error becomes a message and an exit status.
 */
#include <hdf5.h>
#include <malloc.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "build_config.h"
#include "cli.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/log.h"
#include "gridtrain/signals.h"
#include "gridtrain/version.h"

static void gt_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain COMMAND [ARGS]\n"
         "\n"
         "gridtrain trains neural networks on MPI ranks with data, pipeline and tensor\n"
         "parallelism. Launch it with mpiexec or srun.\n"
         "\n"
         "Commands:\n"
         "  train DECK [section.key=value ...]   train the model of an input deck\n"
         "  ingest text IN... -o OUT.h5          make an HDF5 token dataset from text\n"
         "  ckpt info|verify|convert FILE ...    inspect, check or export a checkpoint\n"
         "  plan --memory DECK [--ranks N] ...   the memory account of a layout, no training\n"
         "  flight RUNDIR/flight-rank*.txt       merge the hang watchdog's records (a timeline)\n"
         "\n"
         "Options:\n"
         "  -h, --help       this help ('gridtrain COMMAND --help' for a command)\n"
         "  -V, --version    version and build information\n"
         "\n"
         "Exit status: 0 success, 2 bad input, 3 stopped by SIGUSR1/SIGTERM after\n"
         "writing a checkpoint (requeue to continue), 4 a hang found by the watchdog\n"
         "([run] hang_timeout), 130 stopped by SIGINT after writing a checkpoint,\n"
         "1 other errors.\n");
}

static int gt_dispatch(int argc, char **argv, MPI_Comm world)
{
  if (argc < 2) {
    gt_usage();
    gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                 "missing command; see 'gridtrain --help'");
    gt_error_set_collective(true);
    return GT_ERR_INPUT;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
    gt_usage();
    return GT_SUCCESS;
  }
  if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
    char info[2048];
    gt_build_info(info, sizeof info);
    gt_info("gridtrain %s\n%s", gt_version(), info);
    return GT_SUCCESS;
  }
  if (strcmp(cmd, "train") == 0)
    return gt_cmd_train(argc - 1, argv + 1, world);
  if (strcmp(cmd, "ingest") == 0)
    return gt_cmd_ingest(argc - 1, argv + 1, world);
  if (strcmp(cmd, "ckpt") == 0)
    return gt_cmd_ckpt(argc - 1, argv + 1, world);
  if (strcmp(cmd, "plan") == 0)
    return gt_cmd_plan(argc - 1, argv + 1, world);
  if (strcmp(cmd, "flight") == 0)
    return gt_cmd_flight(argc - 1, argv + 1, world);
  gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
               "unknown command '%s'; commands: train, ingest, ckpt, plan, flight (see 'gridtrain "
               "--help')", cmd);
  gt_error_set_collective(true);
  return GT_ERR_INPUT;
}

/* The signal handlers go in before anything else runs: .preinit_array
 * functions of the program run before the initialisers of its shared
 * libraries (glibc's _dl_init), which here take ~50 ms (CUDA, cuDNN, oneDNN,
 * OpenBLAS) during which a SIGUSR1 or SIGTERM would kill the rank. main
 * installs them again in case a toolchain ignores the section. */
static void gt_preinit(int argc, char **argv, char **envp)
{
  (void)argc, (void)argv, (void)envp;
  (void)gt_signals_install();
}
__attribute__((used, section(".preinit_array"))) static void (*const gt_preinit_entry)(
  int, char **, char **) = gt_preinit;

int main(int argc, char **argv)
{
  /* Large collectives: keep glibc from mapping and unmapping MPI's temporary
   * buffers on every call (PLATFORM.md: 8x on a 64 MiB all-reduce). */
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  /* Before MPI_Init: a SIGUSR1/SIGTERM/SIGINT that arrives in start-up is
   * recorded and acted on at the first step boundary, never lost. */
  if (gt_signals_install() != GT_SUCCESS) {
    fprintf(stderr, "gridtrain: error: cannot install the signal handlers\n");
    return 1;
  }
  int provided;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "gridtrain: error: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = 0;
  if (MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
      MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS) {
    fprintf(stderr, "gridtrain: error: cannot set up MPI_COMM_WORLD\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  gt_log_init(rank);
  gt_fault_set_rank(rank);
  gt_comm_set_threads(provided); /* the watchdog's thread needs MPI_THREAD_MULTIPLE */
  gt_signals_reclaim(NULL); /* MPI_Init may have installed its own */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5 errors come back through GT_CALL_HDF5 */

  /* Test-only fault switches (fault.h): a GT_FAULT that does not parse
   * stops every command at once, with one line. */
  int status = gt_error_agree(gt_fault_init(), MPI_COMM_WORLD);
  if (status == GT_SUCCESS)
    status = gt_dispatch(argc, argv, MPI_COMM_WORLD);
  return gt_comm_finish(status);
}
