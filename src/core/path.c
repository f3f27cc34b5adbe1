/*
 * path.c - outputs that would be inputs, mkdir -p, and atomic replacement
 * (gridtrain/path.h).
 */
#define _GNU_SOURCE /* fsync, O_CLOEXEC on older headers */
#include "gridtrain/path.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/config.h"
#include "gridtrain/error.h"

int gt_path_same_file(const char *a, const char *b, bool *same)
{
  GT_ASSERT(a != NULL && b != NULL && same != NULL);
  struct stat sa, sb;
  *same = a[0] && b[0] && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
          sa.st_ino == sb.st_ino;
  return GT_SUCCESS;
}

int gt_path_refuse_clobber(const char *out, const char *out_what, int n,
                           const char *const inputs[], const char *const in_what[])
{
  if (!out || !out[0])
    return GT_SUCCESS;
  for (int i = 0; i < n; i++) {
    if (!inputs[i] || !inputs[i][0])
      continue;
    bool same;
    GT_CALL(gt_path_same_file(out, inputs[i], &same));
    GT_CHECK(!same, GT_ERR_INPUT,
             "%s '%s' is the same file as %s '%s'; writing it would destroy that input: "
             "choose another output path",
             out_what, out, in_what[i], inputs[i]);
  }
  return GT_SUCCESS;
}

// ---- atomic replacement --------------------------------------------------------------------

int gt_path_write_all(int fd, const void *data, size_t bytes, const char *what)
{
  const char *p = data;
  while (bytes > 0) {
    const ssize_t w = write(fd, p, bytes);
    if (w < 0 && errno == EINTR)
      continue;
    GT_CHECK(w > 0, GT_ERR_SYSTEM, "cannot write %s: %s", what,
             w < 0 ? strerror(errno) : "no progress");
    p += w;
    bytes -= (size_t)w;
  }
  return GT_SUCCESS;
}

/* fsync the directory that holds path (so that a rename is durable). */
static int gt_path_sync_dir(const char *path)
{
  char buf[GT_PATH_MAX];
  GT_CHECK(strlen(path) < sizeof buf, GT_ERR_INPUT, "'%s' is too long", path);
  snprintf(buf, sizeof buf, "%s", path);
  const char *dir = dirname(buf);
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  GT_CHECK(fd >= 0, GT_ERR_SYSTEM, "cannot open %s to sync it: %s", dir, strerror(errno));
  const int r = fsync(fd), err = errno;
  close(fd);
  GT_CHECK(r == 0, GT_ERR_SYSTEM, "cannot sync %s: %s", dir, strerror(err));
  return GT_SUCCESS;
}

int gt_path_replace(const char *path, gt_path_writer write_fn, void *ctx)
{
  GT_ASSERT(path != NULL && write_fn != NULL);
  char tmp[GT_PATH_MAX];
  GT_CHECK(strlen(path) + 5 < sizeof tmp, GT_ERR_INPUT, "'%s' is too long", path);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return GT_ERROR(err == EACCES || err == EROFS || err == ENOENT || err == ENOTDIR
                        ? GT_ERR_INPUT
                        : GT_ERR_SYSTEM,
                    "cannot write %s: %s", tmp, strerror(err));
  }
  int status = write_fn(ctx, fd, tmp);
  if (status == GT_SUCCESS && fsync(fd) != 0)
    status = GT_ERROR(GT_ERR_SYSTEM, "cannot sync %s: %s", tmp, strerror(errno));
  if (close(fd) != 0 && status == GT_SUCCESS)
    status = GT_ERROR(GT_ERR_SYSTEM, "cannot close %s: %s", tmp, strerror(errno));
  if (status == GT_SUCCESS && rename(tmp, path) != 0)
    status = GT_ERROR(GT_ERR_SYSTEM, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (status != GT_SUCCESS) {
    unlink(tmp);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  GT_CALL(gt_path_sync_dir(path));
  return GT_SUCCESS;
}

typedef struct {
  const void *data;
  size_t bytes;
} gt_path_bytes;

static int gt_path_write_bytes(void *ctx, int fd, const char *tmp)
{
  const gt_path_bytes *b = ctx;
  return gt_path_write_all(fd, b->data, b->bytes, tmp);
}

int gt_path_replace_bytes(const char *path, const void *data, size_t bytes)
{
  gt_path_bytes b = {data, bytes};
  GT_CALL(gt_path_replace(path, gt_path_write_bytes, &b));
  return GT_SUCCESS;
}

int gt_path_mkdirs(const char *dir, char *failed, size_t size)
{
  const int n = snprintf(failed, size, "%s", dir);
  if (n < 0 || (size_t)n >= size)
    return ENAMETOOLONG;
  for (char *p = failed + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    const char saved = *p;
    *p = '\0';
    if (mkdir(failed, 0777) != 0 && errno != EEXIST)
      return errno;
    *p = saved;
    if (saved == '\0')
      return 0;
  }
}

/* Append len bytes of text at out[*o] (size bytes in all, a '\0' kept room
 * for); false when they do not fit. */
static bool gt_path_append(char *out, size_t size, size_t *o, const char *text, size_t len,
                           char *why, size_t msize)
{
  if (*o + len + 1 > size) {
    snprintf(why, msize, "the path is too long");
    return false;
  }
  memcpy(out + *o, text, len);
  *o += len;
  return true;
}

int gt_path_expand_env(const char *in, char *out, size_t size, char *why, size_t msize)
{
  size_t o = 0;
  for (const char *p = in; *p;) {
    char name[128];
    if (p[0] == '%' && (p[1] == 'h' || p[1] == '%')) { /* the host name, or a '%' */
      char host[256] = "%";
      if (p[1] == 'h' && gethostname(host, sizeof host) != 0) {
        snprintf(why, msize, "%%h: gethostname failed");
        return -1;
      }
      host[sizeof host - 1] = '\0';
      if (!gt_path_append(out, size, &o, host, strlen(host), why, msize))
        return -1;
      p += 2;
      continue;
    }
    if (p[0] == '$' && p[1] == '{') {
      const char *end = strchr(p + 2, '}');
      if (!end) {
        snprintf(why, msize, "an unterminated ${");
        return -1;
      }
      snprintf(name, sizeof name, "%.*s", (int)(end - p - 2), p + 2);
      p = end + 1;
    } else if (p[0] == '$' && (p[1] == '_' || (p[1] >= 'A' && p[1] <= 'Z') ||
                               (p[1] >= 'a' && p[1] <= 'z'))) {
      size_t n = 1;
      while (p[n] == '_' || (p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= 'a' && p[n] <= 'z') ||
             (p[n] >= '0' && p[n] <= '9'))
        n++;
      snprintf(name, sizeof name, "%.*s", (int)(n - 1), p + 1);
      p += n;
    } else {
      if (!gt_path_append(out, size, &o, p, 1, why, msize))
        return -1;
      p++;
      continue;
    }
    const char *value = getenv(name);
    if (!value || !value[0]) {
      snprintf(why, msize, "$%s is not set", name);
      return -1;
    }
    if (!gt_path_append(out, size, &o, value, strlen(value), why, msize))
      return -1;
  }
  if (size)
    out[o] = '\0';
  return 0;
}
