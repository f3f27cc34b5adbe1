/*
 * dir_lock.c - the lock of a checkpoint directory (gridtrain/dir_lock.h).
 */
#define _GNU_SOURCE
#include "gridtrain/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/config.h"
#include "gridtrain/error.h"

struct gt_dir_lock {
  int fd[2]; /* the descriptor that holds the lock, and one more or -1 */
};

/* "host=... pid=... slurm_job=... started=..." of this process. */
static void gt_dir_lock_line(char *buf, size_t size)
{
  char host[256] = "?";
  if (gethostname(host, sizeof host) != 0)
    snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';
  const char *job = getenv("SLURM_JOB_ID");
  char when[32];
  time_t now = time(NULL);
  struct tm utc;
  gmtime_r(&now, &utc);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  snprintf(buf, size, "host=%s pid=%ld slurm_job=%s started=%s\n", host, (long)getpid(),
           job && job[0] ? job : "-", when);
}

/* Rank 0: lock and sign the file. The lock is held on a read-only
 * descriptor that stays open for the run; the holder's line is written
 * through another, closed at once: a file open for writing for the whole run
 * would keep the file system from being remounted read-only ("busy"), and
 * the checkpoint writes must be what meets that error. */
static int gt_dir_lock_local(const char *dir, int fds[2])
{
  char path[GT_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", dir, GT_DIR_LOCK_NAME);
  const int wo = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  GT_CHECK(wo >= 0, GT_ERR_SYSTEM, "cannot create the lock file %s: %s", path,
           strerror(errno));
  const int ro = open(path, O_RDONLY | O_CLOEXEC);
  if (ro < 0) {
    const int err = errno;
    close(wo);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot open the lock file %s: %s", path, strerror(err));
  }
  int held = ro;
  int locked = flock(ro, LOCK_EX | LOCK_NB);
  if (locked != 0 && errno == EBADF) {
    /* NFS emulates flock with byte-range locks, which want a descriptor
     * open for writing: there the lock is held on that one */
    held = wo;
    locked = flock(wo, LOCK_EX | LOCK_NB);
  }
  if (locked != 0) {
    const int err = errno;
    char holder[512] = "";
    ssize_t n = err == EWOULDBLOCK ? pread(ro, holder, sizeof holder - 1, 0) : -1;
    close(ro);
    close(wo);
    GT_CHECK(err == EWOULDBLOCK, GT_ERR_SYSTEM, "cannot lock %s: %s", path, strerror(err));
    holder[n > 0 ? n : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    return GT_ERROR(GT_ERR_INPUT,
                    "checkpoint directory %s is in use by another job (%s holds %s); wait "
                    "for it to end or give this run another [checkpoint] dir",
                    dir, holder[0] ? holder : "holder unknown", path);
  }
  char line[512];
  gt_dir_lock_line(line, sizeof line);
  const size_t len = strlen(line);
  int ok = ftruncate(wo, 0) == 0 && pwrite(wo, line, len, 0) == (ssize_t)len;
  const int err = errno;
  /* A flock belongs to its open file: the writer can go. Byte-range locks
   * (NFS) belong to the process and go with the first close of any
   * descriptor of the file: there both stay open until the release. */
  fds[0] = held;
  fds[1] = held == ro ? -1 : ro;
  if (held == ro)
    ok = close(wo) == 0 && ok;
  if (!ok) {
    close(fds[0]);
    if (fds[1] >= 0)
      close(fds[1]);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot write the lock file %s: %s", path, strerror(err));
  }
  return GT_SUCCESS;
}

int gt_dir_lock_take(const char *dir, MPI_Comm comm, gt_dir_lock **lock)
{
  GT_ASSERT(dir != NULL && lock != NULL);
  *lock = NULL;
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  int status = GT_SUCCESS;
  if (rank == 0) {
    *lock = malloc(sizeof **lock);
    status = *lock ? gt_dir_lock_local(dir, (*lock)->fd)
                   : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the directory lock");
    if (status != GT_SUCCESS) {
      free(*lock);
      *lock = NULL;
    }
  }
  status = gt_error_agree(status, comm);
  if (status != GT_SUCCESS) {
    gt_dir_lock_release(lock);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}

int gt_dir_lock_release(gt_dir_lock **lock)
{
  if (!lock || !*lock)
    return GT_SUCCESS;
  gt_dir_lock *victim = *lock;
  *lock = NULL;
  for (int i = 1; i >= 0; i--) /* the one that holds the lock last */
    if (victim->fd[i] >= 0)
      close(victim->fd[i]);
  free(victim);
  return GT_SUCCESS;
}
