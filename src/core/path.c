/*
 * path.c - outputs that would be inputs, and mkdir -p (gridtrain/path.h).
 */
#include "gridtrain/path.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

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
