/*
 * gridtrain/fault.h - fault injection for the tests.
 *
 * The environment variable GT_FAULT arms faults that the code raises at
 * named points, so that the tests can exercise failure paths that real
 * machines produce only now and then (a full disk, a failing write on one
 * rank, a node that dies in a checkpoint). It is read once per process.
 * Syntax: a comma-separated list of
 *
 *   NAME[:rank=R][:step=S]
 *
 * rank R is the world rank the fault strikes on (absent: the fault's own
 * default, see below); step S the training step it strikes at (absent:
 * every step). Known faults (docs/checkpoints.md says what each does):
 *
 *   ckpt_kill        rank 0 by default: SIGKILL halfway through a checkpoint
 *                    write (a node failure)
 *   ckpt_write_fail  every rank by default: the MPI-IO writes of a checkpoint
 *                    fail with an I/O error, as a failing disk makes them
 *   ckpt_local_fail  every rank by default: copying the tensors to the host
 *                    for a checkpoint fails, before the collective write
 *   slow_step        rank 1 by default: the step sleeps 300 ms before its
 *                    forward (a straggler: a slow node, a noisy neighbour)
 *
 * A name that is not in this list, or a malformed field, is an error at
 * start (gt_fault_init). Unset or empty GT_FAULT arms nothing; the hooks
 * then cost one comparison each.
 */
#ifndef GRIDTRAIN_FAULT_H
#define GRIDTRAIN_FAULT_H

#include <stdbool.h>

/* Parse GT_FAULT (only the first call does work; later calls return the
 * first call's result). An unknown fault name or a malformed entry is
 * GT_ERR_INPUT with one line naming the entry and the known faults. Not
 * collective: every rank parses its own environment; agree on the result
 * (gt_error_agree) when ranks may differ. */
int gt_fault_init(void);

/* True when fault `name` (one of the names above) is armed for world rank
 * `rank` at step `step`. Parses GT_FAULT on first use if gt_fault_init has
 * not been called; a GT_FAULT that does not parse arms nothing. Not
 * collective. */
bool gt_fault_hit(const char *name, int rank, long step);

#endif /* GRIDTRAIN_FAULT_H */
