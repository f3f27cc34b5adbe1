/*
 * yield_pmpi.c - blocking MPI calls made by other libraries honour the wait
 * mode too (comm.h), through MPI's profiling interface.
 *
 * gridtrain's own communication goes through comm.c, which waits by testing
 * and sleeping when ranks outnumber cores (PLATFORM.md: MPICH's busy polling
 * then costs 6-25 ms a collective). Parallel HDF5 makes its own blocking
 * calls, dozens per dataset of a checkpoint; spinning in them made a 1.4 MB
 * checkpoint written by 4 ranks on 2 cores take 29 s. The definitions below
 * take the place of MPICH's for every caller in the program (the standard
 * PMPI mechanism). Outside a foreign-call scope (gt_comm_foreign_begin) they
 * call the PMPI_ routine at once. Inside one, in yield mode, they start the
 * non-blocking form and wait for it with gt_comm_wait's test-and-sleep loop:
 * same arguments, same results, same ordering rules. A non-blocking
 * collective cannot match a blocking one, so a scope is entered by every
 * rank of the communicator together, and they agree on the mode.
 */
#include <mpi.h>
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

int MPI_File_write_at_all(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                          MPI_Datatype type, MPI_Status *status)
{
  if (!gt_yielding())
    return PMPI_File_write_at_all(fh, offset, buf, count, type, status);
  MPI_Request r;
  return gt_yield_wait(PMPI_File_iwrite_at_all(fh, offset, buf, count, type, &r), &r, status);
}

int MPI_File_read_at_all(MPI_File fh, MPI_Offset offset, void *buf, int count,
                         MPI_Datatype type, MPI_Status *status)
{
  if (!gt_yielding())
    return PMPI_File_read_at_all(fh, offset, buf, count, type, status);
  MPI_Request r;
  return gt_yield_wait(PMPI_File_iread_at_all(fh, offset, buf, count, type, &r), &r, status);
}

/* Collective file calls with no non-blocking form (MPI_File_set_view) spin
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

int MPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh)
{
  gt_yield_files_init();
  int rc = PMPI_File_open(comm, filename, amode, info, fh);
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

int MPI_File_close(MPI_File *fh)
{
  MPI_File old = *fh;
  int rc = gt_yield_meet(old);
  if (rc != MPI_SUCCESS)
    return rc;
  for (int i = 0; gt_yield_files_ready && i < GT_YIELD_FILES; i++)
    if (gt_yield_files[i].fh == old)
      gt_yield_files[i].fh = MPI_FILE_NULL;
  return PMPI_File_close(fh);
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
  return rc != MPI_SUCCESS ? rc : PMPI_File_set_size(fh, size);
}

int MPI_File_sync(MPI_File fh)
{
  int rc = gt_yield_meet(fh);
  return rc != MPI_SUCCESS ? rc : PMPI_File_sync(fh);
}
