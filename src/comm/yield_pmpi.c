/*
 * yield_pmpi.c - the blocking MPI calls that other libraries (parallel HDF5)
 * make honour the wait mode (comm.h), through MPI's profiling interface;
 * and the file calls that change data pass through a watch that another
 * layer may install (gt_comm_watch_files: the checkpoint's write scope,
 * src/io/write_scope.c).
 *
 * Waiting: gridtrain's own communication goes through comm.c, which waits
 * by testing and sleeping when ranks outnumber cores (PLATFORM.md: MPICH's
 * busy polling then costs 6-25 ms a collective). Parallel HDF5 makes its own
 * blocking calls, dozens per dataset of a checkpoint; spinning in them made
 * a 1.4 MB checkpoint written by 4 ranks on 2 cores take 29 s. The
 * definitions below take the place of MPICH's for every caller in the
 * program (the standard PMPI mechanism). Outside a foreign-call scope
 * (gt_comm_foreign_begin) they call the PMPI_ routine at once. Inside one,
 * in yield mode, they start the non-blocking form and wait for it with
 * gt_comm_wait's test-and-sleep loop: same arguments, same results, same
 * ordering rules. A non-blocking collective cannot match a blocking one, so
 * a scope is entered by every rank of the communicator together, and they
 * agree on the mode. File calls are the exception: their ranks meet in a
 * yielding barrier and then make the blocking call (see "File calls that
 * change data" below for why).
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"

static int gt_scope_yield; /* inside a scope whose ranks agreed on yield */

static int gt_yielding(void) { return gt_scope_yield; }

static void gt_yield_sleep(void)
{
  struct timespec ts = {0, 10000};
  nanosleep(&ts, NULL);
}

/* Complete req by testing and sleeping; an MPI error code. */
static int gt_yield_wait(int rc, MPI_Request *req, MPI_Status *status)
{
  if (rc != MPI_SUCCESS)
    return rc;
  for (;;) {
    int done = 0;
    rc = PMPI_Test(req, &done, status);
    if (rc != MPI_SUCCESS || done)
      return rc;
    gt_yield_sleep();
  }
}

int gt_comm_foreign_begin(MPI_Comm comm)
{
  int mine = gt_comm_get_wait_mode() == GT_WAIT_YIELD, any = 0;
  MPI_Request r;
  int rc = PMPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm, &r);
  if (rc == MPI_SUCCESS)
    rc = mine ? gt_yield_wait(rc, &r, MPI_STATUS_IGNORE) : PMPI_Wait(&r, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS)
    return gt_error_mpi(rc, "MPI_Iallreduce (wait mode)", __FILE__, __LINE__, __func__);
  gt_scope_yield = any;
  return GT_SUCCESS;
}

void gt_comm_foreign_end(void) { gt_scope_yield = 0; }

int MPI_Barrier(MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Barrier(comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Ibarrier(comm, &r), &r, MPI_STATUS_IGNORE);
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Bcast(buf, count, type, root, comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Ibcast(buf, count, type, root, comm, &r), &r, MPI_STATUS_IGNORE);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, &r), &r,
                       MPI_STATUS_IGNORE);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                       recvtype, comm, &r),
                       &r, MPI_STATUS_IGNORE);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                           comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                        displs, recvtype, comm, &r),
                       &r, MPI_STATUS_IGNORE);
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                    root, comm, &r),
                       &r, MPI_STATUS_IGNORE);
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                        root, comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Igatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                                     recvtype, root, comm, &r),
                       &r, MPI_STATUS_IGNORE);
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm)
{
  if (!gt_yielding())
    return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype,
                         root, comm);
  MPI_Request r;
  return gt_yield_wait(PMPI_Iscatterv(sendbuf, sendcounts, displs, sendtype, recvbuf,
                                      recvcount, recvtype, root, comm, &r),
                       &r, MPI_STATUS_IGNORE);
}

int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[])
{
  if (!gt_yielding())
    return PMPI_Waitall(count, reqs, statuses);
  for (;;) {
    int done = 0;
    int rc = PMPI_Testall(count, reqs, &done, statuses);
    if (rc != MPI_SUCCESS || done)
      return rc;
    gt_yield_sleep();
  }
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status)
{
  if (!gt_yielding())
    return PMPI_Mprobe(source, tag, comm, message, status);
  for (;;) {
    int found = 0;
    int rc = PMPI_Improbe(source, tag, comm, &found, message, status);
    if (rc != MPI_SUCCESS || found)
      return rc;
    gt_yield_sleep();
  }
}

/* Collective file calls that are not waited for through a request spin
 * inside MPI until every rank of the file arrives. Letting the ranks first
 * meet in a yielding barrier keeps that spin short. The barrier needs the
 * file's communicator, recorded here when the file is opened. */
#define GT_YIELD_FILES 16
static struct {
  MPI_File fh;
  MPI_Comm comm;
} gt_yield_files[GT_YIELD_FILES];
static int gt_yield_files_ready;

static void gt_yield_files_init(void)
{
  if (gt_yield_files_ready)
    return;
  for (int i = 0; i < GT_YIELD_FILES; i++)
    gt_yield_files[i].fh = MPI_FILE_NULL;
  gt_yield_files_ready = 1;
}

/* In yield mode, files are opened without ROMIO's collective buffering
 * (romio_cb_write/read = disable): a collective write is then each rank's
 * own pwrite, with no communication inside MPI to spin in. Collective
 * writes are blocking here (see "File calls that change data"), and with
 * collective buffering their internal exchange spun on the oversubscribed
 * cores: a checkpoint of 4 ranks on 2 cores took ~40% longer; without it,
 * as long as with the non-blocking form. On one node the aggregation gains
 * nothing; busy mode (ranks <= cores, real clusters) keeps ROMIO's
 * defaults. */
static int gt_yield_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info,
                         MPI_File *fh)
{
  MPI_Info mine;
  int rc = info == MPI_INFO_NULL ? PMPI_Info_create(&mine) : PMPI_Info_dup(info, &mine);
  if (rc != MPI_SUCCESS)
    return rc;
  rc = PMPI_Info_set(mine, "romio_cb_write", "disable");
  if (rc == MPI_SUCCESS)
    rc = PMPI_Info_set(mine, "romio_cb_read", "disable");
  if (rc == MPI_SUCCESS)
    rc = PMPI_File_open(comm, filename, amode, mine, fh);
  PMPI_Info_free(&mine);
  return rc;
}

int MPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh)
{
  gt_yield_files_init();
  int rc = gt_yielding() ? gt_yield_open(comm, filename, amode, info, fh)
                         : PMPI_File_open(comm, filename, amode, info, fh);
  if (rc != MPI_SUCCESS)
    return rc;
  for (int i = 0; i < GT_YIELD_FILES; i++)
    if (gt_yield_files[i].fh == MPI_FILE_NULL) {
      gt_yield_files[i].fh = *fh;
      gt_yield_files[i].comm = comm;
      break;
    }
  return rc;
}

static int gt_yield_meet(MPI_File fh)
{
  if (!gt_yielding() || !gt_yield_files_ready)
    return MPI_SUCCESS;
  for (int i = 0; i < GT_YIELD_FILES; i++)
    if (gt_yield_files[i].fh == fh && fh != MPI_FILE_NULL) {
      MPI_Request r;
      return gt_yield_wait(PMPI_Ibarrier(gt_yield_files[i].comm, &r), &r, MPI_STATUS_IGNORE);
    }
  return MPI_SUCCESS;
}

// ---- file calls that change data ----------------------------------------------------
/*
 * The data-changing calls (writes, set_size, sync, close) go through the
 * file watch when one is installed (comm.h): it sees what MPI returned and
 * says what the caller gets; the checkpoint's write scope
 * (src/io/write_scope.c) keeps a failing rank in step with the others that
 * way.
 *
 * Why the writes are blocking in yield mode too. MPICH 4.0.2's
 * MPI_File_iwrite_at_all completes with MPI_SUCCESS and the full element
 * count after write(2) failed with EIO or ENOSPC (the same holds for
 * MPI_File_iread_at_all), and an MPI_File_iwrite_at whose write failed
 * with ENOSPC never completes: the error cannot be seen through a request.
 * The blocking MPI_File_write_at_all returns it. In yield mode the ranks
 * first meet in a yielding barrier (as for set_view) and the file has no
 * collective buffering (gt_yield_open), so the blocking call has nothing to
 * spin on.
 */
static const gt_file_watch *gt_watch; /* gt_comm_watch_files; NULL: none */

void gt_comm_watch_files(const gt_file_watch *watch) { gt_watch = watch; }

static bool gt_watch_failing(void) { return gt_watch && gt_watch->failing(); }

/* What a data-changing call returns: rc as it is without a watch. */
static int gt_watch_done(int rc, const char *call, int count, MPI_Datatype type,
                         MPI_Status *st)
{
  return gt_watch ? gt_watch->done(rc, call, count, type, st) : rc;
}

int MPI_File_write_at_all(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                          MPI_Datatype type, MPI_Status *status)
{
  MPI_Status mine;
  MPI_Status *st = status == MPI_STATUS_IGNORE ? &mine : status;
  int rc = gt_yield_meet(fh);
  if (rc != MPI_SUCCESS)
    return rc;
  if (gt_watch_failing()) {
    /* A failing disk: this rank still takes part in the collective, and
     * none of its data arrives. */
    rc = PMPI_File_write_at_all(fh, offset, buf, 0, type, st);
    if (rc == MPI_SUCCESS)
      rc = gt_watch->injected("MPI_File_write_at_all");
  } else {
    rc = PMPI_File_write_at_all(fh, offset, buf, count, type, st);
  }
  return gt_watch_done(rc, "MPI_File_write_at_all", count, type, st);
}

int MPI_File_write_at(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                      MPI_Datatype type, MPI_Status *status)
{
  MPI_Status mine;
  MPI_Status *st = status == MPI_STATUS_IGNORE ? &mine : status;
  const int rc = gt_watch_failing()
                     ? gt_watch->injected("MPI_File_write_at")
                     : PMPI_File_write_at(fh, offset, buf, count, type, st);
  return gt_watch_done(rc, "MPI_File_write_at", count, type, st);
}

int MPI_File_read_at_all(MPI_File fh, MPI_Offset offset, void *buf, int count,
                         MPI_Datatype type, MPI_Status *status)
{
  /* Blocking after a yielding meeting, for the reason the writes are. */
  int rc = gt_yield_meet(fh);
  return rc != MPI_SUCCESS ? rc : PMPI_File_read_at_all(fh, offset, buf, count, type, status);
}

int MPI_File_close(MPI_File *fh)
{
  MPI_File old = *fh;
  int rc = gt_yield_meet(old);
  if (rc != MPI_SUCCESS)
    return rc;
  for (int i = 0; gt_yield_files_ready && i < GT_YIELD_FILES; i++)
    if (gt_yield_files[i].fh == old)
      gt_yield_files[i].fh = MPI_FILE_NULL;
  rc = PMPI_File_close(fh);
  if (rc != MPI_SUCCESS && gt_watch)
    *fh = MPI_FILE_NULL; /* ROMIO has let go of it either way */
  return gt_watch_done(rc, "MPI_File_close", 0, MPI_BYTE, NULL);
}

int MPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                      const char *datarep, MPI_Info info)
{
  int rc = gt_yield_meet(fh);
  return rc != MPI_SUCCESS ? rc : PMPI_File_set_view(fh, disp, etype, filetype, datarep, info);
}

int MPI_File_set_size(MPI_File fh, MPI_Offset size)
{
  int rc = gt_yield_meet(fh);
  if (rc != MPI_SUCCESS)
    return rc;
  return gt_watch_done(PMPI_File_set_size(fh, size), "MPI_File_set_size", 0, MPI_BYTE, NULL);
}

int MPI_File_sync(MPI_File fh)
{
  int rc = gt_yield_meet(fh);
  if (rc != MPI_SUCCESS)
    return rc;
  return gt_watch_done(PMPI_File_sync(fh), "MPI_File_sync", 0, MPI_BYTE, NULL);
}
