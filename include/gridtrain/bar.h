/*
 * gridtrain/bar.h - a one-line progress bar on the terminal, for the long
 * operations that print nothing while they run: `gridtrain ingest`,
 * checkpoint writes and `gridtrain ckpt convert`.
 *
 *   ingest data/kjv.h5  [##########..........]  52%  2.1/4.0 MiB
 *
 * The bar is drawn only by world rank 0 (log.h) and only when its standard
 * output is a terminal (isatty): a log file, a pipe, a batch job's output or
 * a rank under mpiexec (whose output the launcher forwards through a pipe)
 * never sees a carriage return or a bar. The first update draws it, later
 * ones redraw it over itself with '\r' at most 10 times a second (and only
 * when the percentage changed), and gt_bar_end wipes the line, so what is
 * printed after it starts on a clean line.
 *
 * A terminal has one line to draw on, so there is one bar per process: a
 * gt_bar_begin while a bar is open ends the open one first. Main thread
 * only; nothing here is collective and nothing can fail.
 */
#ifndef GRIDTRAIN_BAR_H
#define GRIDTRAIN_BAR_H

#include <stdbool.h>

/* What the counts are: bytes show as "2.1/4.0 MiB", items as "3/12". */
typedef enum { GT_BAR_BYTES, GT_BAR_ITEMS } gt_bar_unit;

/* Open the bar: label (copied, at most 40 characters shown), total > 0 of
 * unit. */
void gt_bar_begin(const char *label, double total, gt_bar_unit unit);

/* done of the total so far (clamped to [0, total]). */
void gt_bar_set(double done);

/* done += n. */
void gt_bar_add(double n);

/* Wipe the bar's line (nothing when no bar is open or none was drawn). */
void gt_bar_end(void);

/* Whether gt_bar_begin would draw on this process (rank 0, a terminal). */
bool gt_bar_enabled(void);

#endif /* GRIDTRAIN_BAR_H */
