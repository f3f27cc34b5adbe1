/*
 * cmd_plot.c - `gridtrain plot RUN.jsonl... -o OUT.png`: run the plot script
 * (scripts/gridtrain-plot.py, installed in $(pkglibexecdir)) with the
 * configured Python (PYTHON, default /usr/bin/python3) on rank 0, and turn
 * its one-line errors into ours.
 *
 * The script is looked for, in order: in the source tree when this binary is
 * the one in the build tree (an uninstalled build); beside the binary as
 * make install lays it out (BINDIR/../libexec/gridtrain, so that a moved
 * installation still finds its own); where configure said it would be
 * installed. The script runs as a child (posix_spawn, not exec: MPI is up
 * and must be finalized); its standard error comes back through a pipe.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"

/* Set by Makefile.am; these defaults serve builds that do not (make fuzz). */
#ifndef GT_PLOT_PYTHON
#define GT_PLOT_PYTHON "/usr/bin/python3"
#endif
#ifndef GT_PLOT_SCRIPT
#define GT_PLOT_SCRIPT "/usr/local/libexec/gridtrain/gridtrain-plot.py"
#endif
#ifndef GT_PLOT_SCRIPT_SRC
#define GT_PLOT_SCRIPT_SRC ""
#endif
#ifndef GT_PLOT_BUILDDIR
#define GT_PLOT_BUILDDIR ""
#endif
#define GT_PLOT_SCRIPT_NAME "gridtrain-plot.py"
#define GT_PLOT_ERR_PREFIX "gridtrain-plot: error: "
#define GT_PLOT_STDERR_MAX (64 * 1024)

extern char **environ;

static void gt_plot_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain plot RUN.jsonl... -o OUT.png [--size WxH] [--title TEXT]\n"
         "\n"
         "Draw training runs from their JSON-lines metrics ([run] metrics) into one PNG:\n"
         "training and validation loss against tokens seen, tokens/s (and MFU when the\n"
         "records have \"mfu\") against tokens, and each run's step time split into\n"
         "compute, comm, bubble, data and the rest as stacked areas against the step.\n"
         "Several runs are overlaid, named by their file names. Runs on rank 0 only, with\n"
         "%s and matplotlib (Debian: python3-matplotlib).\n"
         "\n"
         "Options:\n"
         "  -o, --output OUT.png   the picture to write\n"
         "  --size WxH             its size in pixels (default 1600x1000)\n"
         "  --title TEXT           the title (default: the run names)\n"
         "\n"
         "A missing, empty or malformed file, or a Python without matplotlib, is one\n"
         "error line and exit status 2.\n",
         GT_PLOT_PYTHON);
}

static bool gt_plot_is_file(const char *path)
{
  struct stat sb;
  return path[0] && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The plot script for this binary (see the top of the file). */
static int gt_plot_find_script(char *out, size_t size)
{
  char exe[PATH_MAX], dir[PATH_MAX] = "";
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      snprintf(dir, sizeof dir, "%s", exe);
    }
  }
  char build[PATH_MAX];
  if (dir[0] && GT_PLOT_BUILDDIR[0] && realpath(GT_PLOT_BUILDDIR, build) &&
      strcmp(build, dir) == 0 && gt_plot_is_file(GT_PLOT_SCRIPT_SRC)) {
    snprintf(out, size, "%s", GT_PLOT_SCRIPT_SRC);
    return GT_SUCCESS;
  }
  if (dir[0]) {
    snprintf(out, size, "%s/../libexec/gridtrain/" GT_PLOT_SCRIPT_NAME, dir);
    if (gt_plot_is_file(out))
      return GT_SUCCESS;
  }
  GT_CHECK(gt_plot_is_file(GT_PLOT_SCRIPT), GT_ERR_INPUT,
           "plot: cannot find the plot script " GT_PLOT_SCRIPT_NAME " (looked beside %s and in "
           "%s); reinstall gridtrain (make install)",
           dir[0] ? dir : "the binary", GT_PLOT_SCRIPT);
  snprintf(out, size, "%s", GT_PLOT_SCRIPT);
  return GT_SUCCESS;
}

/* The last non-empty line of text (cut at its end in place); "" when none. */
static char *gt_plot_last_line(char *text)
{
  size_t len = strlen(text);
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
    text[--len] = '\0';
  char *nl = strrchr(text, '\n');
  return nl ? nl + 1 : text;
}

/* Run argv (argv[0] a path) with its standard error into err (at most size
 * bytes kept, the rest drained); *wstatus: waitpid's status. */
static int gt_plot_spawn(char *const argv[], char *err, size_t size, int *wstatus)
{
  int fds[2];
  GT_CHECK(pipe2(fds, O_CLOEXEC) == 0, GT_ERR_SYSTEM, "plot: pipe failed: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGINT);
  sigaddset(&dflt, SIGTERM);
  sigaddset(&dflt, SIGUSR1);
  sigaddset(&dflt, SIGPIPE);
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  /* dup2 clears close-on-exec on the copy: the child's fd 2 is the pipe */
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  fflush(NULL); /* our buffered output before the child's */
  pid_t pid;
  const int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return GT_ERROR(GT_ERR_INPUT,
                    "plot: cannot run %s: %s (gridtrain plot needs Python 3 with matplotlib; "
                    "configure with PYTHON=...)",
                    argv[0], strerror(rc));
  }
  size_t len = 0;
  char drain[4096];
  for (;;) {
    char *dst = len + 1 < size ? err + len : drain;
    const size_t room = len + 1 < size ? size - 1 - len : sizeof drain;
    const ssize_t got = read(fds[0], dst, room);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    if (dst != drain)
      len += (size_t)got;
  }
  err[len] = '\0';
  close(fds[0]);
  pid_t w;
  do
    w = waitpid(pid, wstatus, 0);
  while (w < 0 && errno == EINTR);
  GT_CHECK(w == pid, GT_ERR_SYSTEM, "plot: waitpid failed: %s", strerror(errno));
  return GT_SUCCESS;
}

static int gt_plot_rank0(int argc, char **argv)
{
  char script[PATH_MAX + 64];
  GT_CALL(gt_plot_find_script(script, sizeof script));
  char **cargv = calloc((size_t)argc + 2, sizeof *cargv);
  GT_CHECK_ALLOC(cargv, ((size_t)argc + 2) * sizeof *cargv);
  cargv[0] = (char *)GT_PLOT_PYTHON;
  cargv[1] = script;
  for (int i = 1; i < argc; i++)
    cargv[i + 1] = argv[i];
  char *err = malloc(GT_PLOT_STDERR_MAX);
  if (!err) {
    free(cargv);
    GT_CHECK_ALLOC(err, GT_PLOT_STDERR_MAX);
  }
  int ws = 0;
  int status = gt_plot_spawn(cargv, err, GT_PLOT_STDERR_MAX, &ws);
  free(cargv);
  if (status != GT_SUCCESS) {
    free(err);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
    fputs(err, stderr); /* warnings */
  } else if (WIFEXITED(ws) && WEXITSTATUS(ws) == 2) {
    /* the script's one-line error; what came before it (warnings) goes on */
    char *line = gt_plot_last_line(err);
    if (line > err) {
      line[-1] = '\0';
      fprintf(stderr, "%s\n", err);
    }
    if (strncmp(line, GT_PLOT_ERR_PREFIX, strlen(GT_PLOT_ERR_PREFIX)) == 0)
      line += strlen(GT_PLOT_ERR_PREFIX);
    status = GT_ERROR(GT_ERR_INPUT, "plot: %s", line[0] ? line : "the plot script failed");
  } else {
    /* a crash of the script (a traceback): show all of it */
    fputs(err, stderr);
    if (WIFSIGNALED(ws))
      status = GT_ERROR(GT_ERR_SYSTEM, "plot: %s %s was killed by signal %d", GT_PLOT_PYTHON,
                        script, WTERMSIG(ws));
    else
      status = GT_ERROR(GT_ERR_INTERNAL, "plot: %s %s failed with status %d: %s",
                        GT_PLOT_PYTHON, script, WEXITSTATUS(ws), gt_plot_last_line(err));
  }
  free(err);
  return status;
}

int gt_cmd_plot(int argc, char **argv, MPI_Comm world)
{
  if (gt_cli_wants_help(argc, argv)) {
    gt_plot_usage();
    return GT_SUCCESS;
  }
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  const int status = rank == 0 ? gt_plot_rank0(argc, argv) : GT_SUCCESS;
  return gt_error_agree(status, world);
}
