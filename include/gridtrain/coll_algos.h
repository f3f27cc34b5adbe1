/*
 * gridtrain/coll_algos.h - collectives of our own, on non-blocking MPI
 * point to point: ring, tree and recursive halving (Rabenseifner) forms of
 * all-reduce, reduce-scatter, all-gather and broadcast, for host-addressable
 * buffers (the CPU backend's memory, or collectives.h's pinned staging).
 *
 * Every operation is cut into segments of at most seg_bytes; up to `window`
 * segments run at once, each through the algorithm's rounds, so that a
 * large message keeps the link busy (and a tree pipelines: segment s climbs
 * one level while s + 1 starts below it). Nothing moves unless someone
 * tests the request: gt_algo_test posts a round's messages, completes the
 * rounds whose messages have arrived and starts the next ones; collectives.h
 * calls it from its progress engine, so that an operation in flight moves
 * along between backward's kernels like MPI's own requests.
 *
 * Reductions: fp32 sums in fp32; bf16 and fp16 payloads sum in fp32 and
 * round to the payload type at every step. Every block of the result is
 * summed once, at one member, in an order fixed by (algorithm, group size,
 * block), and then copied to the others, so every member holds the same
 * bits, run after run (the order differs between algorithms and from MPI's
 * own, so the bits do too, within rounding).
 *
 * Algorithms and their cost for n bytes over p members (alpha: latency of a
 * message, beta: time per byte on the link, gamma: time per byte reduced):
 *   ring     all-reduce 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma
 *            (reduce-scatter, then all-gather, around the ring); broadcast
 *            a pipelined chain.
 *   tree     binomial trees: all-reduce as a reduce to member 0 and a
 *            broadcast, each log2 p rounds, pipelined over segments;
 *            reduce-scatter (all-gather) as one binomial reduction to
 *            (broadcast from) every block's member at once, level by level:
 *            log2 p rounds, each member sends each block at most once.
 *   halving  recursive halving reduce-scatter and recursive doubling
 *            all-gather (Rabenseifner): 2 log2 p alpha for an all-reduce,
 *            with the bandwidth of the ring; broadcast as a scatter and an
 *            all-gather (van de Geijn). When p is not a power of two, the
 *            first 2r members (r = p - 2^floor(log2 p)) fold in pairs
 *            first: the even one hands its data to the odd one, sits out,
 *            and gets its result back at the end.
 * gt_algo_cost returns these coefficients; the benchmark fits alpha, beta
 * and gamma per algorithm and group size over all four operations
 * (benchmarks/coll_fit.py) and writes the table that [parallel] allreduce =
 * auto reads (gt_algo_table).
 */
#ifndef GRIDTRAIN_COLL_ALGOS_H
#define GRIDTRAIN_COLL_ALGOS_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/tensor.h"

typedef enum {
  GT_ALGO_MPI = 0, /* MPI's own collective (collectives.h; not run here) */
  GT_ALGO_RING,
  GT_ALGO_TREE,
  GT_ALGO_HALVING,
  GT_ALGO_AUTO, /* per operation and size, from a gt_algo_table */
  GT_ALGO_COUNT
} gt_algo;

typedef enum {
  GT_COLL_ALLREDUCE = 0,
  GT_COLL_REDUCE_SCATTER,
  GT_COLL_ALLGATHER,
  GT_COLL_BCAST,
  GT_COLL_OPS
} gt_coll_op;

/* "mpi", "ring", "tree", "halving", "auto"; "allreduce", "reduce_scatter",
 * "allgather", "bcast". gt_algo_parse: GT_ERR_INPUT on an unknown name. */
const char *gt_algo_name(gt_algo a);
const char *gt_coll_op_name(gt_coll_op op);
int gt_algo_parse(const char *name, gt_algo *a);
int gt_coll_op_parse(const char *name, gt_coll_op *op);

/* MPI user functions (MPI_User_function) for sums of bf16 and fp16
 * payloads: in fp32, rounded to the payload type (round to nearest even),
 * commutative, the same arithmetic as this module's own sums. For
 * MPI_Op_create(gt_algo_sum_bf16, 1, &op). */
void gt_algo_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type);
void gt_algo_sum_f16(void *in, void *inout, int *len, MPI_Datatype *type);

/* Segments and window when none is asked for. */
#define GT_ALGO_SEG_BYTES ((size_t)1 << 20)
#define GT_ALGO_WINDOW 4
#define GT_ALGO_WINDOW_MAX 8

/* ---- communicators --------------------------------------------------------------
 * Our messages travel on a duplicate of the group's communicator, so that
 * they never match anyone else's; every operation started on it takes the
 * next sequence number (the same on every member, as every member starts
 * the same operations in the same order), which keeps the tags of
 * operations in flight at once apart. */
typedef struct gt_algo_comm gt_algo_comm;

/* Collective on comm (MPI_Comm_dup, waited for in the wait mode). */
int gt_algo_comm_create(MPI_Comm comm, gt_algo_comm **ac);
int gt_algo_comm_destroy(gt_algo_comm **ac); /* not collective (MPI_Comm_free) */
int gt_algo_comm_size(const gt_algo_comm *ac);
int gt_algo_comm_rank(const gt_algo_comm *ac);

/* ---- requests -------------------------------------------------------------------
 * A request is reusable: start an operation, test until done, start the
 * next. It keeps its working memory (three buffers of a segment for each
 * slot of the window) between operations. Not thread-safe. */
typedef struct gt_algo_req gt_algo_req;

/* seg_bytes 0 and window 0 take the defaults above. */
int gt_algo_req_create(size_t seg_bytes, int window, gt_algo_req **r);
/* GT_ERR_INTERNAL when an operation is still in flight (it is cancelled). */
int gt_algo_req_destroy(gt_algo_req **r);

/* Start `op` with algorithm a (ring, tree or halving) over ac on the n
 * elements of type t at buf (host-addressable; untouched by the caller
 * until done):
 *   GT_COLL_ALLREDUCE       buf "=" the sum over the members.
 *   GT_COLL_REDUCE_SCATTER  buf is cut into member blocks of counts[r]
 *                           elements (member order, summing to n); member
 *                           r's block becomes the sum of that block over
 *                           the members; the rest of buf is left as it was.
 *   GT_COLL_ALLGATHER       in place: this member's block (counts as above)
 *                           goes to every member's buffer.
 *   GT_COLL_BCAST           buf "=" member root's buf.
 * counts: p entries for reduce-scatter and all-gather (copied), else NULL;
 * root: for broadcast. Sums need t = fp32, bf16 or fp16; moves any type.
 * Collective on ac, non-blocking: every member starts the same operations
 * in the same order. */
int gt_algo_start(gt_algo_req *r, gt_algo_comm *ac, gt_algo a, gt_coll_op op, void *buf,
                  size_t n, gt_dtype t, const size_t *counts, int root);

/* Move the operation along; *done once it is complete (also when idle). */
int gt_algo_test(gt_algo_req *r, bool *done);

/* Test until complete, in the wait mode of comm.h (running its progress
 * engine between tests). */
int gt_algo_wait(gt_algo_req *r);

/* Bytes of working memory the request holds; bytes this member has sent
 * through it since it was created. */
size_t gt_algo_req_memory(const gt_algo_req *r);
double gt_algo_req_sent(const gt_algo_req *r);

/* ---- cost model -----------------------------------------------------------------
 * Time of `op` with algorithm a on n bytes over p members in segments of
 * seg_bytes: alpha * c[0] + beta * c[1] + gamma * c[2], where c are the
 * coefficients this fills (messages on the critical path, bytes through
 * the busiest link, bytes reduced on the critical path). For GT_ALGO_MPI
 * it assumes MPICH's large-message algorithms (Rabenseifner all-reduce and
 * reduce-scatter, recursive doubling all-gather, scatter + all-gather
 * broadcast). */
void gt_algo_cost(gt_algo a, gt_coll_op op, int p, double n, double seg_bytes, double c[3]);

/* The alpha-beta-gamma time of that: abg[0] c[0] + abg[1] c[1] / eff +
 * abg[2] c[2] with c from gt_algo_cost (0 for p <= 1); eff is the share
 * of the link's bandwidth reached (1: as fitted). The one place the model
 * is evaluated: gt_algo_pick at run time, the planner (costmodel.h) for
 * its estimates. */
double gt_algo_time(gt_algo a, gt_coll_op op, int p, double n, double seg_bytes,
                    const double abg[3], double eff);

/* The bytes a member sends for op on n bytes over p members under the
 * bandwidth-optimal ring: all-reduce 2(p-1)/p n; reduce-scatter and
 * all-gather (n the whole buffer) (p-1)/p n; broadcast (p-1)/p n on average
 * (a chain: every member but the last sends all of it). 0 for p <= 1. */
double gt_algo_ring_bytes(gt_coll_op op, int p, double n);

/* A table of fitted alpha, beta, gamma per operation, algorithm and group
 * size, as the benchmark writes it: lines "OP ALGO NP ALPHA BETA GAMMA"
 * (seconds, seconds per byte), '#' comments. */
#define GT_ALGO_TABLE_MAX 512
typedef struct gt_algo_row {
  gt_coll_op op;
  gt_algo algo;
  int np;
  double abg[3];
} gt_algo_row;
typedef struct gt_algo_table {
  int n;
  gt_algo_row rows[GT_ALGO_TABLE_MAX];
} gt_algo_table;

/* Read FILE; GT_ERR_INPUT with file:line on a malformed line, and for a
 * table without an all-reduce row. Not collective. */
int gt_algo_table_read(const char *path, gt_algo_table *table);

/* The algorithm with the smallest predicted time for op on n bytes over p
 * members, among the table's rows for op at the group size nearest p (the
 * smaller of two as near; GT_ALGO_MPI when the table has no row for op).
 * The same on every member for the same arguments. */
gt_algo gt_algo_pick(const gt_algo_table *table, gt_coll_op op, int p, double n,
                     double seg_bytes);

#endif /* GRIDTRAIN_COLL_ALGOS_H */
