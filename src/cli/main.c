/*
 * main.c - the gridtrain program: MPI set-up, subcommand dispatch
 * (dispatch.c), and the one place where an error becomes a message and an
 * exit status.
 */
#include <hdf5.h>
#include <malloc.h>
#include <mpi.h>
#include <stdio.h>

#include "cli.h"
#include "gridtrain/bar.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/log.h"
#include "gridtrain/signals.h"

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
  /* HDF5 shuts down in MPI_Finalize (its MPI_COMM_SELF attribute), not at
   * exit: MPI_Abort exits through the atexit handlers, where HDF5 would close
   * open MPI-IO files with a barrier after the abort, and MPICH then fails an
   * assertion and exits 1 instead of the error's status. */
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5 errors come back through GT_CALL_HDF5 */

  /* Test-only fault switches (fault.h): a GT_FAULT that does not parse
   * stops every command at once, with one line. */
  int status = gt_error_agree(gt_fault_init(), MPI_COMM_WORLD);
  if (status == GT_SUCCESS)
    status = gt_cli_dispatch(argc, argv, MPI_COMM_WORLD);
  gt_bar_end(); /* an error's message starts on a clean line */
  return gt_comm_finish(status);
}
