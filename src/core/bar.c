/*
 * bar.c - the terminal's one-line progress bar (bar.h).
 */
#include "gridtrain/bar.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gridtrain/log.h"
#include "gridtrain/timer.h"

#define GT_BAR_WIDTH 20
#define GT_BAR_PERIOD 0.1 /* seconds between redraws */

static struct {
  bool open, drawn;
  char label[41];
  double total, done, last_draw;
  int last_percent;
  gt_bar_unit unit;
  int width; /* characters of the last line drawn */
} gt_bar;

bool gt_bar_enabled(void) { return gt_log_rank() == 0 && isatty(STDOUT_FILENO); }

static void gt_bar_draw(bool force)
{
  const double now = gt_now();
  const int percent = (int)(100.0 * gt_bar.done / gt_bar.total);
  if (!force && (now - gt_bar.last_draw < GT_BAR_PERIOD || percent == gt_bar.last_percent))
    return;
  gt_bar.last_draw = now;
  gt_bar.last_percent = percent;
  char fill[GT_BAR_WIDTH + 1];
  const int n = (int)(GT_BAR_WIDTH * gt_bar.done / gt_bar.total);
  for (int i = 0; i < GT_BAR_WIDTH; i++)
    fill[i] = i < n ? '#' : '.';
  fill[GT_BAR_WIDTH] = '\0';
  char count[64];
  if (gt_bar.unit == GT_BAR_BYTES)
    snprintf(count, sizeof count, "%.1f/%.1f MiB", gt_bar.done / (1 << 20),
             gt_bar.total / (1 << 20));
  else
    snprintf(count, sizeof count, "%.0f/%.0f", gt_bar.done, gt_bar.total);
  const int w = printf("\r%s  [%s] %3d%%  %s", gt_bar.label, fill, percent, count);
  if (w > 0)
    gt_bar.width = w - 1; /* not the '\r' */
  fflush(stdout);
  gt_bar.drawn = true;
}

void gt_bar_begin(const char *label, double total, gt_bar_unit unit)
{
  gt_bar_end();
  if (!(total > 0) || !gt_bar_enabled())
    return;
  memset(&gt_bar, 0, sizeof gt_bar);
  snprintf(gt_bar.label, sizeof gt_bar.label, "%s", label);
  gt_bar.total = total;
  gt_bar.unit = unit;
  gt_bar.last_percent = -1;
  gt_bar.last_draw = -1e30; /* the first update draws */
  gt_bar.open = true;
}

void gt_bar_set(double done)
{
  if (!gt_bar.open)
    return;
  gt_bar.done = done < 0 ? 0 : done > gt_bar.total ? gt_bar.total : done;
  gt_bar_draw(false);
}

void gt_bar_add(double n)
{
  if (gt_bar.open)
    gt_bar_set(gt_bar.done + n);
}

void gt_bar_end(void)
{
  if (gt_bar.open && gt_bar.drawn) {
    printf("\r%*s\r", gt_bar.width, "");
    fflush(stdout);
  }
  gt_bar.open = gt_bar.drawn = false;
}
