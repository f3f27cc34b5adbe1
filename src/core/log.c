/*
 * log.c - rank-aware printing (rank 0 prints, others stay quiet).
 */
#include "gridtrain/log.h"

#include <stdarg.h>
#include <stdbool.h>

static int gt_world_rank;
static bool gt_info_stderr;

void gt_log_init(int world_rank) { gt_world_rank = world_rank; }
void gt_log_info_to_stderr(void) { gt_info_stderr = true; }
int gt_log_rank(void) { return gt_world_rank; }

void gt_info(const char *fmt, ...)
{
  if (gt_world_rank != 0)
    return;
  FILE *out = gt_info_stderr ? stderr : stdout;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
  fflush(out);
}

void gt_warn(const char *fmt, ...)
{
  if (gt_world_rank != 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  fputs("gridtrain: warning: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
}

void gt_format_bytes(double bytes, char *buf, size_t size)
{
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    u++;
  }
  snprintf(buf, size, "%.1f %s", bytes, unit[u]);
}
