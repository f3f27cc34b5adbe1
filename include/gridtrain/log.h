/*
 * gridtrain/log.h - rank-aware printing.
 *
 * gt_log_init() records this process's world rank once; afterwards
 * gt_info()/gt_warn() print on rank 0 only. Neither is collective.
 */
#ifndef GRIDTRAIN_LOG_H
#define GRIDTRAIN_LOG_H

#include <stdio.h>

/* Remember the world rank (call once, after MPI_Init). */
void gt_log_init(int world_rank);

/* World rank recorded by gt_log_init (0 before it is called). */
int gt_log_rank(void);

/* From now on gt_info prints to stderr: for commands whose stdout is their
 * result (sample, score), which a script reads. */
void gt_log_info_to_stderr(void);

/* Rank 0 only: printf to stdout (stderr after gt_log_info_to_stderr),
 * flushed. */
void gt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Rank 0 only: "gridtrain: warning: ..." to stderr. */
void gt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "12.3 MiB": bytes in B, KiB, MiB, GiB or TiB with one decimal. */
void gt_format_bytes(double bytes, char *buf, size_t size);

#endif /* GRIDTRAIN_LOG_H */
