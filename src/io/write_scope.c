/*
 * write_scope.c - the checkpoint's write scope (write_scope.h): while a
 * checkpoint is written, the MPI-IO calls that change data note this rank's
 * first error and report success, through the file watch of the PMPI layer
 * (gt_comm_watch_files, comm.h).
 *
 * Why the writes are wrapped. Parallel HDF5 1.10 stops on the rank where an
 * MPI-IO call fails, and the other ranks go on into the next collective
 * call of the same operation: after a failed MPI_File_write_at_all the
 * failing rank skips the MPI_File_set_view that resets the view, or goes
 * on to the MPI_Bcast of H5FD_truncate, while the others wait in the
 * set_view's all-reduce - the job hangs with no message (one rank of
 * pp=2 x tp=2 with EIO; a full disk). HDF5 offers no way to keep a failed
 * rank in step, and a rank cannot leave a collective HDF5 call half way.
 * So inside a write scope the calls that put data on disk note the first
 * error on this rank and tell HDF5 that they succeeded in full
 * (MPI_Status_set_elements_x): every rank then makes the same sequence of
 * collective calls to the end, H5Fclose completes everywhere (nothing is
 * left for HDF5's close callbacks at MPI_Finalize, which crashed on a file
 * whose close had failed), and the caller collects the noted error with
 * gt_write_scope_end and agrees on it across the ranks before it renames
 * anything. The file is garbage by then and the caller deletes it. Errors
 * of reads and of calls that change no data are left to HDF5. (Why those
 * writes are blocking calls even in yield mode: src/comm/yield_pmpi.c.)
 *
 * A write is checked twice: its return code, and the bytes it reports
 * (MPICH keeps the byte count in the status, so MPI_Get_elements_x with
 * MPI_BYTE reads it) against count x the type's size; a short write is an
 * error too, which HDF5 1.10 itself accepts silently.
 */
#include "write_scope.h"

#include <mpi.h>
#include <limits.h>
#include <stdio.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"
#include "h5util.h"

static struct {
  int active; /* inside gt_write_scope_begin / gt_write_scope_end */
  int fail;   /* GT_FAULT=ckpt_write_fail armed for this scope on this rank */
  int code;   /* the first error noted (MPI_SUCCESS: none) */
  char what[512];
  int channel;  /* the flight recorder's file channel (-1: none) */
  long record;  /* the scope's flight record */
  char file[40];
} gt_io = {.channel = -1, .record = -1};

static void gt_io_note(int code, const char *what)
{
  if (gt_io.code != MPI_SUCCESS)
    return; /* the first error is the cause; later ones follow from it */
  gt_io.code = code;
  snprintf(gt_io.what, sizeof gt_io.what, "%s", what);
}

static bool gt_io_failing(void) { return gt_io.fail; }

/* An injected write failure (fail_writes): noted with a text that says
 * where it comes from, and returned as the MPI_ERR_IO a failing disk gives.
 * (A code of our own through MPI_Add_error_code would be neater, but
 * MPICH 4.0.2 answers MPI_Error_string for it with an unrelated text.) */
static int gt_io_injected(const char *call)
{
  char what[sizeof gt_io.what];
  snprintf(what, sizeof what,
           "%s failed: Input/output error (injected by GT_FAULT=ckpt_write_fail)", call);
  gt_io_note(MPI_ERR_IO, what);
  return MPI_ERR_IO;
}

/* What a data-changing file call returned (rc; for writes, the status of
 * count items of type). An error is noted and the call reports success: a
 * write in full. */
static int gt_io_done(int rc, const char *call, int count, MPI_Datatype type, MPI_Status *st)
{
  char what[sizeof gt_io.what];
  MPI_Count want = 0;
  if (st && PMPI_Type_size_x(type, &want) == MPI_SUCCESS)
    want *= count;
  if (rc != MPI_SUCCESS) {
    char text[384];
    gt_error_mpi_text(rc, text, sizeof text);
    snprintf(what, sizeof what, "%s failed: %s", call, text);
    gt_io_note(rc, what);
  } else if (st) {
    MPI_Count got = 0;
    if (PMPI_Get_elements_x(st, MPI_BYTE, &got) == MPI_SUCCESS && got != MPI_UNDEFINED &&
        got < want) {
      snprintf(what, sizeof what, "%s wrote %lld of %lld bytes (short write)", call,
               (long long)got, (long long)want);
      gt_io_note(MPI_ERR_IO, what);
    } else {
      return MPI_SUCCESS;
    }
  }
  if (st)
    PMPI_Status_set_elements_x(st, MPI_BYTE, want);
  return MPI_SUCCESS;
}

static const gt_file_watch gt_io_watch = {
    .failing = gt_io_failing, .injected = gt_io_injected, .done = gt_io_done};

void gt_write_scope_begin(bool fail_writes, MPI_Comm comm, const char *file)
{
  snprintf(gt_io.file, sizeof gt_io.file, "%s", file ? gt_h5_base(file) : "");
  gt_io.channel = gt_flight_file_channel(comm);
  gt_io.record = gt_flight_begin_file(gt_io.channel, GT_FL_WRITE, gt_io.file);
  gt_io.active = 1;
  gt_io.fail = fail_writes;
  gt_io.code = MPI_SUCCESS;
  gt_io.what[0] = '\0';
  gt_comm_watch_files(&gt_io_watch);
}

int gt_write_scope_end(void)
{
  gt_comm_watch_files(NULL);
  gt_flight_end(gt_io.record);
  gt_io.record = -1;
  gt_io.channel = -1;
  const int code = gt_io.code;
  gt_io.active = gt_io.fail = 0;
  gt_io.code = MPI_SUCCESS;
  if (code == MPI_SUCCESS)
    return GT_SUCCESS;
  return gt_error_set(GT_ERR_SYSTEM, __FILE__, __LINE__, __func__, "%s", gt_io.what);
}

void gt_write_scope_note(const char *what)
{
  if (gt_io.active)
    gt_io_note(MPI_ERR_IO, what);
}

int gt_write_scope_sums(uint64_t *sums, size_t count, MPI_Comm comm)
{
  GT_CHECK(count <= (size_t)INT_MAX, GT_ERR_INPUT, "%zu checksum terms are too many", count);
  const long rec = gt_flight_begin_file(gt_io.channel, GT_FL_CHECKSUMS, gt_io.file);
  const int rc = MPI_Allreduce(MPI_IN_PLACE, sums, (int)count, MPI_UINT64_T, MPI_SUM, comm);
  gt_flight_end(rec);
  GT_CALL_MPI(rc);
  return GT_SUCCESS;
}

bool gt_write_scope_failing(void)
{
  if (gt_io.active) /* asked before each data write: this rank is working, not stuck */
    gt_flight_progress();
  return gt_io.active && gt_io.fail;
}
