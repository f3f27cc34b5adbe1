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
  int fd;
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
static int gt_dir_lock_local(const char *dir, int *fd_out)
{
  char path[GT_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", dir, GT_DIR_LOCK_NAME);
  int wfd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  GT_CHECK(wfd >= 0, GT_ERR_SYSTEM, "cannot create the lock file %s: %s", path,
           strerror(errno));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    close(wfd);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot open the lock file %s: %s", path, strerror(err));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[512] = "";
    ssize_t n = err == EWOULDBLOCK ? pread(fd, holder, sizeof holder - 1, 0) : -1;
    close(fd);
    close(wfd);
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
  int ok = ftruncate(wfd, 0) == 0 && pwrite(wfd, line, len, 0) == (ssize_t)len;
  const int err = errno;
  ok = close(wfd) == 0 && ok;
  if (!ok) {
    close(fd);
    return GT_ERROR(GT_ERR_SYSTEM, "cannot write the lock file %s: %s", path, strerror(err));
  }
  *fd_out = fd;
  return GT_SUCCESS;
}

int gt_dir_lock_take(const char *dir, MPI_Comm comm, gt_dir_lock **lock)
{
  GT_ASSERT(dir != NULL && lock != NULL);
  *lock = NULL;
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  int fd = -1, status = GT_SUCCESS;
  if (rank == 0) {
    status = gt_dir_lock_local(dir, &fd);
    if (status == GT_SUCCESS) {
      *lock = malloc(sizeof **lock);
      if (!*lock) {
        close(fd);
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory for the directory lock");
      } else {
        (*lock)->fd = fd;
      }
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
  close(victim->fd); /* closing the last descriptor drops the flock */
  free(victim);
  return GT_SUCCESS;
}
