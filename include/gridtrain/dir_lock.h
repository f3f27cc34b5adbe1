/*
 * gridtrain/dir_lock.h - one job per checkpoint directory.
 *
 * Rank 0 takes flock(LOCK_EX | LOCK_NB) on DIR/.lock and holds it for the
 * run; the file says who holds it, one line:
 *   host=NAME pid=PID slurm_job=ID started=2026-12-05T00:45:00Z
 * (slurm_job=- without SLURM_JOB_ID). The kernel drops the lock when the
 * holder exits in any way (kill -9 included), so a requeued job that
 * restarts after its previous run died takes it again; the old line is
 * then overwritten. A second live job on the same directory gets a
 * GT_ERR_INPUT error naming the holder from that line.
 */
#ifndef GRIDTRAIN_DIR_LOCK_H
#define GRIDTRAIN_DIR_LOCK_H

#include <mpi.h>

typedef struct gt_dir_lock gt_dir_lock;

/* Name of the lock file inside the directory. */
#define GT_DIR_LOCK_NAME ".lock"

/* Collective on comm: rank 0 takes the lock of directory dir (which must
 * exist) and writes its holder line; every rank learns the outcome (the
 * error is agreed on and collective). *lock is non-NULL on rank 0 only.
 * Errors: GT_ERR_INPUT when another process holds the lock ("checkpoint
 * directory D is in use by another job: host=... pid=..."), GT_ERR_SYSTEM
 * when the file cannot be created or locked. */
int gt_dir_lock_take(const char *dir, MPI_Comm comm, gt_dir_lock **lock);

/* Not collective: release the lock (the file stays, with its last line) and
 * free; *lock becomes NULL. NULL is a no-op. */
int gt_dir_lock_release(gt_dir_lock **lock);

#endif /* GRIDTRAIN_DIR_LOCK_H */
