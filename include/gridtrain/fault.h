/*
 * gridtrain/fault.h - fault injection for the tests.
 *
 * The environment variable GT_FAULT arms faults that the code raises at
 * named points, so that the tests can exercise failure paths that real
 * machines produce only now and then (a full disk, a failing write on one
 * rank, a node that dies in a checkpoint). It is read once per process.
 * Syntax: a comma-separated list of
 *
 *   NAME[:rank=R][:step=S][:comm=C][:op=O]
 *
 * rank R is the world rank the fault strikes on (absent: the fault's own
 * default, see below); step S the training step it strikes at (absent:
 * every step); comm C (world, dp, pp, tp, embed) and op O (flight.h's
 * operation names: allreduce, reduce_scatter, allgather, gather, bcast,
 * reduce, barrier, send, recv; and forward, eval for kill) pick
 * the operation of the faults below that strike once, at the first
 * operation that matches. Known faults (docs/reliability.md says more):
 *
 *   ckpt_kill        rank 0 by default: SIGKILL halfway through a checkpoint
 *                    write (a node failure)
 *   ckpt_write_fail  every rank by default: the MPI-IO writes of a checkpoint
 *                    fail with an I/O error, as a failing disk makes them
 *   ckpt_local_fail  every rank by default: copying the tensors to the host
 *                    for a checkpoint fails, before the collective write
 *   ckpt_async_fail  every rank by default: the writer thread's writes of an
 *                    asynchronous checkpoint fail with an I/O error (the
 *                    HDF5 part of the file is written)
 *   ckpt_async_slow  every rank by default: the writer thread of an
 *                    asynchronous checkpoint waits 1 s before it writes (a
 *                    slow file system: the write spans steps)
 *   slow_step        rank 1 by default: the step sleeps 300 ms before its
 *                    forward (a straggler: a slow node, a noisy neighbour)
 *   coll_skip        rank 1 by default, once: skip the operation (a rank
 *                    that never enters a collective or a pipeline send)
 *   coll_sleep       rank 1 by default, once: sleep (an hour) before the
 *                    operation begins (a rank stuck in compute)
 *   kill             rank 1 by default, once: SIGKILL at the operation
 *                    (comm/op as above, or op=forward, op=eval)
 *   nan_grad         rank 1 by default: a NaN in this rank's gradient of
 *                    the step (bad hardware numbers)
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

/* As gt_fault_hit, for the one-shot faults that pick an operation: true
 * (once per entry) when fault name is armed for rank at step and its comm=
 * and op= fields (absent: any) match comm and op. Not collective. */
bool gt_fault_hit_op(const char *name, int rank, long step, const char *comm, const char *op);

/* This process's world rank, for hooks that do not know the grid (set by
 * main after MPI_Init; 0 before). */
void gt_fault_set_rank(int rank);
int gt_fault_rank(void);

/* The training step that gt_fault_kill_at matches step= against (the
 * trainer sets it at the start of every step). */
void gt_fault_set_step(long step);

/* GT_FAULT=kill:op=PHASE (forward, eval): SIGKILL this process when the
 * fault is armed for it at the current step. */
void gt_fault_kill_at(const char *phase);

#endif /* GRIDTRAIN_FAULT_H */
