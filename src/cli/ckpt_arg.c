/*
 * ckpt_arg.c - the CHECKPOINT argument of `gridtrain sample` and `score`:
 * a checkpoint file, or a checkpoint directory standing for its newest
 * checkpoint (cli.h).
 */
#include <stdlib.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cli.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/error.h"
#include "gridtrain/path.h"

int gt_cli_checkpoint(const char *arg, char *path, size_t size, bool *no_checkpoint)
{
  struct stat sb;
  *no_checkpoint = false;
  snprintf(path, size, "%s", arg);
  if (stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return GT_SUCCESS;
  char (*list)[GT_PATH_MAX] = NULL, problem[GT_PATH_MAX + 128] = "";
  int n = 0;
  GT_CALL(gt_ckpt_candidates(arg, &list, &n, problem, sizeof problem));
  if (n > 0)
    snprintf(path, size, "%s", list[0]);
  free(list);
  *no_checkpoint = n == 0;
  return GT_SUCCESS;
}
