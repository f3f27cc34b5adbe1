/*
 * write_scope.h - the write scope of a checkpoint (io-internal): the
 * MPI-IO errors of one rank held back from parallel HDF5 until the file is
 * closed everywhere (write_scope.c says why).
 */
#ifndef GT_IO_WRITE_SCOPE_H
#define GT_IO_WRITE_SCOPE_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A write scope: between begin and end, the MPI-IO calls that put data on
 * disk (MPI_File_write_at_all, MPI_File_write_at, MPI_File_set_size,
 * MPI_File_sync, MPI_File_close), whoever makes them, note the first error
 * on this rank - a failed call or a write of fewer bytes than asked - and
 * report success in full, so that a library such as parallel HDF5 makes the
 * same collective calls on every rank to the end instead of leaving them on
 * the rank that failed. The calls are watched through the PMPI layer's file
 * watch (gt_comm_watch_files, comm.h). The data written in the scope can
 * then not be trusted on any rank until the error has been agreed on.
 * fail_writes makes every write of the scope on this rank fail with an
 * MPI_ERR_IO error (GT_FAULT=ckpt_write_fail, fault.h); a collective write
 * still takes part in the collective, with no data.
 * The scope is one flight record (flight.h), operation "write" of file
 * `file` (its name in messages) on the "file" channel of comm's members,
 * open from begin to end: the hang watchdog names a rank that never entered
 * the write, or stopped answering in it, when the others wait in one of its
 * collective calls.
 * Not collective; scopes do not nest. Works in both wait modes. */
void gt_write_scope_begin(bool fail_writes, MPI_Comm comm, const char *file);

/* End the write scope. GT_SUCCESS when no call failed; otherwise
 * GT_ERR_SYSTEM with the first error as the current one ("MPI_File_write_at_all
 * failed: No space left on device"). The error is this rank's alone: agree
 * on it (gt_error_agree) after the file is closed everywhere. */
int gt_write_scope_end(void);

/* Inside a write scope, for writes that do not go through MPI-IO (the
 * checkpoint writer's own pwrite of the tensor data, ckpt_write.c): note a
 * failed one with its one-line description ("pwrite failed: No space left
 * on device (...)"); the first error noted in the scope, from MPI-IO or from
 * here, is the one gt_write_scope_end reports. Outside a scope, a no-op. Not
 * collective. */
void gt_write_scope_note(const char *what);

/* The checksum agreement of the scope's file: sums[0..count) summed over
 * comm in place (MPI_Allreduce of uint64), a flight record "checksums" of
 * the file's channel. Collective on comm (the comm of gt_write_scope_begin). */
int gt_write_scope_sums(uint64_t *sums, size_t count, MPI_Comm comm);

/* True inside a write scope whose writes are to fail (gt_write_scope_begin's
 * fail_writes): a writer outside MPI-IO then fails its writes too. A writer
 * asks before each write: inside a scope the call counts as this rank's
 * progress for the hang watchdog (gt_flight_progress), so that a rank busy
 * with a long write of its own is not taken for a stuck one. */
bool gt_write_scope_failing(void);

#endif /* GT_IO_WRITE_SCOPE_H */
