/*
 * coll_algos.c - ring, tree and recursive halving collectives on MPI point
 * to point (see coll_algos.h).
 *
 * An operation is a plan and an executor:
 *   - The plan lists the rounds of one segment for this member: each round
 *     at most one send and one receive (the receive either lands in the
 *     buffer or is summed into it) or a local "final" step. What a message
 *     carries is named in blocks, the p member blocks of the segment (an
 *     all-reduce's segment is cut into p equal blocks; a reduce-scatter's
 *     blocks are the members' counts, each cut into the segments). Plans
 *     depend on (algorithm, operation, p, rank, root) only and are built
 *     again only when one of those changes.
 *   - The executor runs up to `window` segments at once, one per slot. A
 *     slot posts its round's messages; once they are complete it sums what
 *     it received and posts the next round.
 * A reduce-scatter keeps its partial sums in a slot's accumulator, not in
 * the caller's buffer: a block counts as "dirty" once something was summed
 * into it, and from then on it is read from the accumulator; the final step
 * copies this member's finished blocks into the buffer. So it leaves the
 * other blocks of the buffer as they were. An all-reduce, which overwrites
 * every block in the end, sums in place. Either way the sums of one block
 * are made once, at one member, in the plan's order.
 */
#include "gridtrain/coll_algos.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"

// ---- names ----------------------------------------------------------------------------

static const char *const gt_algo_names[GT_ALGO_COUNT] = {"mpi", "ring", "tree", "halving",
                                                         "auto"};
static const char *const gt_op_names[GT_COLL_OPS] = {"allreduce", "reduce_scatter", "allgather",
                                                     "bcast"};

const char *gt_algo_name(gt_algo a) { return a < GT_ALGO_COUNT ? gt_algo_names[a] : "?"; }
const char *gt_coll_op_name(gt_coll_op op) { return op < GT_COLL_OPS ? gt_op_names[op] : "?"; }

int gt_algo_parse(const char *name, gt_algo *a)
{
  for (int i = 0; i < GT_ALGO_COUNT; i++)
    if (strcmp(name, gt_algo_names[i]) == 0) {
      *a = (gt_algo)i;
      return GT_SUCCESS;
    }
  return GT_ERROR(GT_ERR_INPUT, "unknown collective algorithm '%s': expected mpi, ring, tree, "
                  "halving or auto", name);
}

int gt_coll_op_parse(const char *name, gt_coll_op *op)
{
  for (int i = 0; i < GT_COLL_OPS; i++)
    if (strcmp(name, gt_op_names[i]) == 0) {
      *op = (gt_coll_op)i;
      return GT_SUCCESS;
    }
  return GT_ERROR(GT_ERR_INPUT, "unknown collective '%s': expected allreduce, reduce_scatter, "
                  "allgather or bcast", name);
}

// ---- communicators ----------------------------------------------------------------------

struct gt_algo_comm {
  MPI_Comm comm;
  int rank, size;
  unsigned long long seq; /* operations started */
  int tag_span;           /* distinct sequence numbers in the tag space */
};

int gt_algo_comm_create(MPI_Comm comm, gt_algo_comm **acp)
{
  gt_algo_comm *ac = calloc(1, sizeof *ac);
  GT_CHECK_ALLOC(ac, sizeof *ac);
  ac->comm = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  int status = MPI_Comm_idup(comm, &ac->comm, &req) == MPI_SUCCESS
                   ? gt_comm_wait(&req)
                   : GT_ERROR(GT_ERR_MPI, "MPI_Comm_idup of a group for our collectives failed");
  if (status == GT_SUCCESS && (MPI_Comm_rank(ac->comm, &ac->rank) != MPI_SUCCESS ||
                               MPI_Comm_size(ac->comm, &ac->size) != MPI_SUCCESS))
    status = GT_ERROR(GT_ERR_MPI, "MPI_Comm_rank/size of a duplicated group failed");
  if (status == GT_SUCCESS) {
    int *ub = NULL, flag = 0;
    if (MPI_Comm_get_attr(ac->comm, MPI_TAG_UB, &ub, &flag) != MPI_SUCCESS)
      status = GT_ERROR(GT_ERR_MPI, "MPI_Comm_get_attr(MPI_TAG_UB) failed");
    const long top = flag && ub ? (long)*ub : 32767;
    long span = (top - 1) / GT_ALGO_WINDOW_MAX;
    ac->tag_span = (int)(span > 4096 ? 4096 : span);
  }
  if (status != GT_SUCCESS) {
    gt_algo_comm_destroy(&ac);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *acp = ac;
  return GT_SUCCESS;
}

int gt_algo_comm_destroy(gt_algo_comm **acp)
{
  gt_algo_comm *ac = *acp;
  if (!ac)
    return GT_SUCCESS;
  int status = GT_SUCCESS;
  if (ac->comm != MPI_COMM_NULL && MPI_Comm_free(&ac->comm) != MPI_SUCCESS)
    status = GT_ERROR(GT_ERR_MPI, "MPI_Comm_free of a group for our collectives failed");
  free(ac);
  *acp = NULL;
  return status;
}

int gt_algo_comm_size(const gt_algo_comm *ac) { return ac->size; }
int gt_algo_comm_rank(const gt_algo_comm *ac) { return ac->rank; }

// ---- plans ---------------------------------------------------------------------------------

typedef enum { GT_A_SEND = 0, GT_A_RECV, GT_A_RECV_SUM, GT_A_FINAL } gt_aop_kind;

typedef struct {
  gt_aop_kind kind;
  int peer;
  int first, count; /* its blocks: blk[first .. first + count), ascending */
} gt_aop;

typedef struct {
  int first, count; /* its ops */
} gt_around;

typedef struct {
  gt_algo algo;
  gt_coll_op op;
  int p, me, root;
  bool built;
  gt_aop *ops;
  int nops, cap_ops;
  int *blk;
  int nblk, cap_blk;
  gt_around *rounds;
  int nrounds, cap_rounds;
} gt_aplan;

static int gt_grow(void **p, int *cap, int need, size_t elem)
{
  if (need <= *cap)
    return GT_SUCCESS;
  int c = *cap ? *cap : 16;
  while (c < need)
    c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  GT_CHECK_ALLOC(q, (size_t)c * elem);
  *p = q;
  *cap = c;
  return GT_SUCCESS;
}

static int gt_plan_round(gt_aplan *pl)
{
  GT_CALL(gt_grow((void **)&pl->rounds, &pl->cap_rounds, pl->nrounds + 1, sizeof *pl->rounds));
  pl->rounds[pl->nrounds++] = (gt_around){pl->nops, 0};
  return GT_SUCCESS;
}

/* An op of the current round on blocks [lo, hi) (nothing when empty). */
static int gt_plan_op(gt_aplan *pl, gt_aop_kind kind, int peer, int lo, int hi)
{
  if (hi <= lo)
    return GT_SUCCESS;
  GT_CALL(gt_grow((void **)&pl->ops, &pl->cap_ops, pl->nops + 1, sizeof *pl->ops));
  GT_CALL(gt_grow((void **)&pl->blk, &pl->cap_blk, pl->nblk + (hi - lo), sizeof *pl->blk));
  pl->ops[pl->nops++] = (gt_aop){kind, peer, pl->nblk, hi - lo};
  for (int b = lo; b < hi; b++)
    pl->blk[pl->nblk++] = b;
  pl->rounds[pl->nrounds - 1].count++;
  return GT_SUCCESS;
}

/* An op on the blocks b (ascending) for which keep(b) holds. */
static int gt_plan_op_if(gt_aplan *pl, gt_aop_kind kind, int peer,
                         bool (*keep)(int b, int me, int p, int m), int m)
{
  int first = pl->nblk;
  for (int b = 0; b < pl->p; b++)
    if (keep(b, pl->me, pl->p, m)) {
      GT_CALL(gt_grow((void **)&pl->blk, &pl->cap_blk, pl->nblk + 1, sizeof *pl->blk));
      pl->blk[pl->nblk++] = b;
    }
  if (pl->nblk == first)
    return GT_SUCCESS;
  GT_CALL(gt_grow((void **)&pl->ops, &pl->cap_ops, pl->nops + 1, sizeof *pl->ops));
  pl->ops[pl->nops++] = (gt_aop){kind, peer, first, pl->nblk - first};
  pl->rounds[pl->nrounds - 1].count++;
  return GT_SUCCESS;
}

static int gt_mod(int a, int p) { return ((a % p) + p) % p; }

// ring ----------------------------------------------------------------------

/* Step k of p - 1: send block me-1-k right, sum block me-2-k from the left;
 * member me ends with block me complete. */
static int gt_plan_ring_rs(gt_aplan *pl)
{
  const int p = pl->p, me = pl->me, right = gt_mod(me + 1, p), left = gt_mod(me - 1, p);
  for (int k = 0; k < p - 1; k++) {
    GT_CALL(gt_plan_round(pl));
    const int rb = gt_mod(me - 2 - k, p), sb = gt_mod(me - 1 - k, p);
    GT_CALL(gt_plan_op(pl, GT_A_RECV_SUM, left, rb, rb + 1));
    GT_CALL(gt_plan_op(pl, GT_A_SEND, right, sb, sb + 1));
  }
  GT_CALL(gt_plan_round(pl));
  GT_CALL(gt_plan_op(pl, GT_A_FINAL, me, me, me + 1));
  return GT_SUCCESS;
}

/* Step k: send block me-k right, receive block me-1-k from the left. */
static int gt_plan_ring_ag(gt_aplan *pl)
{
  const int p = pl->p, me = pl->me, right = gt_mod(me + 1, p), left = gt_mod(me - 1, p);
  for (int k = 0; k < p - 1; k++) {
    GT_CALL(gt_plan_round(pl));
    const int rb = gt_mod(me - 1 - k, p), sb = gt_mod(me - k, p);
    GT_CALL(gt_plan_op(pl, GT_A_RECV, left, rb, rb + 1));
    GT_CALL(gt_plan_op(pl, GT_A_SEND, right, sb, sb + 1));
  }
  return GT_SUCCESS;
}

/* A chain from the root; segments in flight make it a pipeline. */
static int gt_plan_ring_bcast(gt_aplan *pl)
{
  const int p = pl->p, rel = gt_mod(pl->me - pl->root, p);
  GT_CALL(gt_plan_round(pl));
  if (rel > 0)
    GT_CALL(gt_plan_op(pl, GT_A_RECV, gt_mod(pl->me - 1, p), 0, p));
  GT_CALL(gt_plan_round(pl));
  if (rel < p - 1)
    GT_CALL(gt_plan_op(pl, GT_A_SEND, gt_mod(pl->me + 1, p), 0, p));
  return GT_SUCCESS;
}

// tree ----------------------------------------------------------------------

/* Binomial reduction of everything to member 0, one child per round (so
 * the sums of a member's children are made in a fixed order), then a
 * binomial broadcast from it. */
static int gt_plan_tree_ar(gt_aplan *pl)
{
  const int p = pl->p, me = pl->me;
  for (int m = 1; m < p; m <<= 1) {
    GT_CALL(gt_plan_round(pl));
    if ((me & (2 * m - 1)) == m)
      GT_CALL(gt_plan_op(pl, GT_A_SEND, me - m, 0, p));
    else if ((me & (2 * m - 1)) == 0 && me + m < p)
      GT_CALL(gt_plan_op(pl, GT_A_RECV_SUM, me + m, 0, p));
  }
  GT_CALL(gt_plan_round(pl));
  if (me == 0)
    GT_CALL(gt_plan_op(pl, GT_A_FINAL, 0, 0, p));
  for (int m = 1; m < p; m <<= 1) {
    GT_CALL(gt_plan_round(pl));
    if (me < m && me + m < p)
      GT_CALL(gt_plan_op(pl, GT_A_SEND, me + m, 0, p));
    else if (me >= m && me < 2 * m)
      GT_CALL(gt_plan_op(pl, GT_A_RECV, me - m, 0, p));
  }
  return GT_SUCCESS;
}

/* Block b's member-relative rank of me. */
static int gt_rel(int b, int me, int p) { return gt_mod(me - b, p); }

static bool gt_rs_sends(int b, int me, int p, int m) { return gt_rel(b, me, p) % (2 * m) == m; }
static bool gt_rs_recvs(int b, int me, int p, int m)
{
  const int rel = gt_rel(b, me, p);
  return rel % (2 * m) == 0 && rel + m < p;
}
static bool gt_ag_sends(int b, int me, int p, int m)
{
  const int rel = gt_rel(b, me, p);
  return rel < m && rel + m < p;
}
static bool gt_ag_recvs(int b, int me, int p, int m)
{
  const int rel = gt_rel(b, me, p);
  return rel >= m && rel < 2 * m;
}

/* A binomial reduction of every block b to member b, all at once: at level
 * m, me sums the blocks it is the level's parent of from me + m and sends
 * those it is the child of to me - m. */
static int gt_plan_tree_rs(gt_aplan *pl)
{
  const int p = pl->p, me = pl->me;
  for (int m = 1; m < p; m <<= 1) {
    GT_CALL(gt_plan_round(pl));
    GT_CALL(gt_plan_op_if(pl, GT_A_RECV_SUM, gt_mod(me + m, p), gt_rs_recvs, m));
    GT_CALL(gt_plan_op_if(pl, GT_A_SEND, gt_mod(me - m, p), gt_rs_sends, m));
  }
  GT_CALL(gt_plan_round(pl));
  GT_CALL(gt_plan_op(pl, GT_A_FINAL, me, me, me + 1));
  return GT_SUCCESS;
}

/* A binomial broadcast of every block b from member b, all at once. */
static int gt_plan_tree_ag(gt_aplan *pl)
{
  const int p = pl->p, me = pl->me;
  for (int m = 1; m < p; m <<= 1) {
    GT_CALL(gt_plan_round(pl));
    GT_CALL(gt_plan_op_if(pl, GT_A_RECV, gt_mod(me - m, p), gt_ag_recvs, m));
    GT_CALL(gt_plan_op_if(pl, GT_A_SEND, gt_mod(me + m, p), gt_ag_sends, m));
  }
  return GT_SUCCESS;
}

static int gt_plan_tree_bcast(gt_aplan *pl)
{
  const int p = pl->p, rel = gt_mod(pl->me - pl->root, p);
  for (int m = 1; m < p; m <<= 1) {
    GT_CALL(gt_plan_round(pl));
    if (rel < m && rel + m < p)
      GT_CALL(gt_plan_op(pl, GT_A_SEND, gt_mod(pl->me + m, p), 0, p));
    else if (rel >= m && rel < 2 * m)
      GT_CALL(gt_plan_op(pl, GT_A_RECV, gt_mod(pl->me - m, p), 0, p));
  }
  return GT_SUCCESS;
}

// recursive halving -------------------------------------------------------------

/* The power-of-two core: q = 2^floor(log2 p) virtual members; r = p - q
 * pairs (2i, 2i+1) fold into virtual member i (real 2i+1, blocks 2i and
 * 2i+1); virtual member v >= r is real v + r with block v + r. */
typedef struct {
  int q, r, v; /* v: this member's virtual rank, -1 when folded out */
} gt_fold;

static gt_fold gt_fold_of(int p, int me)
{
  int q = 1;
  while (q * 2 <= p)
    q *= 2;
  const int r = p - q;
  int v = me < 2 * r ? (me % 2 ? me / 2 : -1) : me - r;
  return (gt_fold){q, r, v};
}
static int gt_vreal(const gt_fold *f, int v) { return v < f->r ? 2 * v + 1 : v + f->r; }
static int gt_vlo(const gt_fold *f, int v) { return v < f->r ? 2 * v : v + f->r; }
/* The real blocks of virtual blocks [a, b). */
static int gt_vop(gt_aplan *pl, const gt_fold *f, gt_aop_kind kind, int peer_v, int a, int b)
{
  return gt_plan_op(pl, kind, gt_vreal(f, peer_v), gt_vlo(f, a), gt_vlo(f, b - 1) +
                    ((b - 1) < f->r ? 2 : 1));
}

/* The even member of a folded pair hands over blocks [lo, hi) to the odd
 * one (summed there when sum). */
static int gt_plan_fold_in(gt_aplan *pl, const gt_fold *f, bool sum, int lo, int hi)
{
  const int me = pl->me;
  GT_CALL(gt_plan_round(pl));
  if (me >= 2 * f->r)
    return GT_SUCCESS;
  if (me % 2 == 0)
    GT_CALL(gt_plan_op(pl, GT_A_SEND, me + 1, lo, hi));
  else
    GT_CALL(gt_plan_op(pl, sum ? GT_A_RECV_SUM : GT_A_RECV, me - 1, lo, hi));
  return GT_SUCCESS;
}

/* Recursive halving over the virtual members: at distance m (q/2 down to
 * 1), keep the half of the current range on v's side of the partner v^m,
 * send the other half, sum the partner's copy of the kept one. Ends with
 * v's own virtual block summed; the final step copies it out. */
static int gt_plan_halving_rs(gt_aplan *pl, const gt_fold *f)
{
  if (f->v < 0)
    return GT_SUCCESS;
  int lo = 0, hi = f->q;
  for (int m = f->q / 2; m >= 1; m /= 2) {
    const int mid = lo + (hi - lo) / 2, partner = f->v ^ m;
    GT_CALL(gt_plan_round(pl));
    if (f->v & m) {
      GT_CALL(gt_vop(pl, f, GT_A_RECV_SUM, partner, mid, hi));
      GT_CALL(gt_vop(pl, f, GT_A_SEND, partner, lo, mid));
      lo = mid;
    } else {
      GT_CALL(gt_vop(pl, f, GT_A_RECV_SUM, partner, lo, mid));
      GT_CALL(gt_vop(pl, f, GT_A_SEND, partner, mid, hi));
      hi = mid;
    }
  }
  return GT_SUCCESS;
}

/* Recursive doubling: at distance m (1 up to q/2), v holds the aligned
 * m-range of virtual blocks around it and swaps it for the partner's. */
static int gt_plan_doubling_ag(gt_aplan *pl, const gt_fold *f)
{
  if (f->v < 0)
    return GT_SUCCESS;
  for (int m = 1; m < f->q; m *= 2) {
    const int partner = f->v ^ m, mine = f->v & ~(m - 1), theirs = partner & ~(m - 1);
    GT_CALL(gt_plan_round(pl));
    GT_CALL(gt_vop(pl, f, GT_A_RECV, partner, theirs, theirs + m));
    GT_CALL(gt_vop(pl, f, GT_A_SEND, partner, mine, mine + m));
  }
  return GT_SUCCESS;
}

/* The odd member of a folded pair hands blocks [lo, hi) back. */
static int gt_plan_fold_out(gt_aplan *pl, const gt_fold *f, int lo, int hi)
{
  const int me = pl->me;
  GT_CALL(gt_plan_round(pl));
  if (me >= 2 * f->r)
    return GT_SUCCESS;
  if (me % 2)
    GT_CALL(gt_plan_op(pl, GT_A_SEND, me - 1, lo, hi));
  else
    GT_CALL(gt_plan_op(pl, GT_A_RECV, me + 1, lo, hi));
  return GT_SUCCESS;
}

/* The final copy of the summed virtual block of this member (its real
 * blocks: both of a folded pair for an all-reduce, its own for a
 * reduce-scatter). */
static int gt_plan_halving_final(gt_aplan *pl, const gt_fold *f, bool both)
{
  GT_CALL(gt_plan_round(pl));
  if (f->v < 0)
    return GT_SUCCESS;
  if (both)
    return gt_vop(pl, f, GT_A_FINAL, f->v, f->v, f->v + 1);
  return gt_plan_op(pl, GT_A_FINAL, pl->me, pl->me, pl->me + 1);
}

static int gt_plan_halving(gt_aplan *pl)
{
  const int p = pl->p, me = pl->me;
  const gt_fold f = gt_fold_of(p, me);
  switch (pl->op) {
  case GT_COLL_ALLREDUCE:
    GT_CALL(gt_plan_fold_in(pl, &f, true, 0, p));
    GT_CALL(gt_plan_halving_rs(pl, &f));
    GT_CALL(gt_plan_halving_final(pl, &f, true));
    GT_CALL(gt_plan_doubling_ag(pl, &f));
    return gt_plan_fold_out(pl, &f, 0, p);
  case GT_COLL_REDUCE_SCATTER:
    GT_CALL(gt_plan_fold_in(pl, &f, true, 0, p));
    GT_CALL(gt_plan_halving_rs(pl, &f));
    GT_CALL(gt_plan_halving_final(pl, &f, false));
    /* the odd member of a pair holds its partner's sum too */
    GT_CALL(gt_plan_round(pl));
    if (me < 2 * f.r) {
      if (me % 2)
        GT_CALL(gt_plan_op(pl, GT_A_SEND, me - 1, me - 1, me));
      else
        GT_CALL(gt_plan_op(pl, GT_A_RECV, me + 1, me, me + 1));
    }
    return GT_SUCCESS;
  case GT_COLL_ALLGATHER:
    GT_CALL(gt_plan_round(pl));
    if (me < 2 * f.r) {
      if (me % 2 == 0)
        GT_CALL(gt_plan_op(pl, GT_A_SEND, me + 1, me, me + 1));
      else
        GT_CALL(gt_plan_op(pl, GT_A_RECV, me - 1, me - 1, me));
    }
    GT_CALL(gt_plan_doubling_ag(pl, &f));
    return gt_plan_fold_out(pl, &f, 0, p);
  case GT_COLL_BCAST: {
    /* a folded-out root hands everything to its partner first */
    const int root = pl->root;
    const bool root_folded = root < 2 * f.r && root % 2 == 0;
    GT_CALL(gt_plan_round(pl));
    if (root_folded && me == root)
      GT_CALL(gt_plan_op(pl, GT_A_SEND, root + 1, 0, p));
    else if (root_folded && me == root + 1)
      GT_CALL(gt_plan_op(pl, GT_A_RECV, root, 0, p));
    const int vroot = gt_fold_of(p, root_folded ? root + 1 : root).v;
    /* scatter: the holder of an aligned 2m-range (relative to the root by
     * xor) sends the m-range around v ^ m to it */
    if (f.v >= 0)
      for (int m = f.q / 2; m >= 1; m /= 2) {
        const int x = f.v ^ vroot, partner = f.v ^ m;
        GT_CALL(gt_plan_round(pl));
        if ((x & (2 * m - 1)) == 0) {
          const int their = partner & ~(m - 1);
          GT_CALL(gt_vop(pl, &f, GT_A_SEND, partner, their, their + m));
        } else if ((x & (2 * m - 1)) == m) {
          const int mine = f.v & ~(m - 1);
          GT_CALL(gt_vop(pl, &f, GT_A_RECV, partner, mine, mine + m));
        }
      }
    GT_CALL(gt_plan_doubling_ag(pl, &f));
    GT_CALL(gt_plan_round(pl));
    if (me < 2 * f.r) {
      if (me % 2 && me - 1 != root)
        GT_CALL(gt_plan_op(pl, GT_A_SEND, me - 1, 0, p));
      else if (me % 2 == 0 && me != root)
        GT_CALL(gt_plan_op(pl, GT_A_RECV, me + 1, 0, p));
    }
    return GT_SUCCESS;
  }
  default: return GT_ERROR(GT_ERR_INTERNAL, "internal error: collective %d", (int)pl->op);
  }
}

static int gt_plan_build(gt_aplan *pl, gt_algo a, gt_coll_op op, int p, int me, int root)
{
  if (pl->built && pl->algo == a && pl->op == op && pl->p == p && pl->me == me &&
      pl->root == root)
    return GT_SUCCESS;
  pl->built = false;
  pl->nops = pl->nblk = pl->nrounds = 0;
  pl->algo = a;
  pl->op = op;
  pl->p = p;
  pl->me = me;
  pl->root = root;
  if (p > 1) {
    if (a == GT_ALGO_HALVING) {
      GT_CALL(gt_plan_halving(pl));
    } else if (a == GT_ALGO_RING) {
      if (op == GT_COLL_ALLREDUCE || op == GT_COLL_REDUCE_SCATTER)
        GT_CALL(gt_plan_ring_rs(pl));
      if (op == GT_COLL_ALLREDUCE || op == GT_COLL_ALLGATHER)
        GT_CALL(gt_plan_ring_ag(pl));
      if (op == GT_COLL_BCAST)
        GT_CALL(gt_plan_ring_bcast(pl));
    } else if (a == GT_ALGO_TREE) {
      if (op == GT_COLL_ALLREDUCE)
        GT_CALL(gt_plan_tree_ar(pl));
      else if (op == GT_COLL_REDUCE_SCATTER)
        GT_CALL(gt_plan_tree_rs(pl));
      else if (op == GT_COLL_ALLGATHER)
        GT_CALL(gt_plan_tree_ag(pl));
      else
        GT_CALL(gt_plan_tree_bcast(pl));
    } else {
      return GT_ERROR(GT_ERR_INTERNAL, "internal error: no plan for algorithm %s", gt_algo_name(a));
    }
  }
  /* the executor's assumptions: at most one send and one receive a round,
   * a final step alone in its round */
  for (int k = 0; k < pl->nrounds; k++) {
    int sends = 0, recvs = 0, finals = 0;
    for (int i = 0; i < pl->rounds[k].count; i++) {
      const gt_aop_kind kind = pl->ops[pl->rounds[k].first + i].kind;
      sends += kind == GT_A_SEND;
      recvs += kind == GT_A_RECV || kind == GT_A_RECV_SUM;
      finals += kind == GT_A_FINAL;
    }
    GT_ASSERT(sends <= 1 && recvs <= 1 && (finals == 0 || sends + recvs == 0));
  }
  pl->built = true;
  return GT_SUCCESS;
}

// ---- the executor ----------------------------------------------------------------------------

typedef struct {
  long seg;          /* the segment it runs; -1: idle */
  long next;         /* the next one it takes: segment s always runs on slot s % window,
                        on every member, so that the slot's tag names the same segment */
  int round;
  MPI_Request req[2];
  int nreq;
  size_t *off, *len, *poff; /* each block's place in buf and in the packed segment */
  unsigned char *dirty;     /* block summed into: it lives in acc */
  size_t total;             /* elements of the segment */
  char *acc, *stmp, *rtmp;  /* a segment each */
} gt_aslot;

struct gt_algo_req {
  size_t seg_bytes;
  int window;
  gt_aplan plan;
  gt_aslot slot[GT_ALGO_WINDOW_MAX];
  size_t cap_bytes; /* bytes each slot buffer holds */
  int cap_p;       /* blocks each slot's arrays hold */
  size_t mem;
  double sent;
  /* the operation in flight */
  bool active;
  bool in_place; /* an all-reduce: partial sums may go to buf (it is all overwritten) */
  gt_algo_comm *ac;
  gt_coll_op op;
  char *buf;
  size_t n, esize, seg_elems;
  gt_dtype t;
  size_t *counts, *base; /* reduce-scatter, all-gather: member blocks */
  long nseg, done_seg;
  int tag0;
};

int gt_algo_req_create(size_t seg_bytes, int window, gt_algo_req **rp)
{
  gt_algo_req *r = calloc(1, sizeof *r);
  GT_CHECK_ALLOC(r, sizeof *r);
  r->seg_bytes = seg_bytes ? seg_bytes : GT_ALGO_SEG_BYTES;
  r->window = window > 0 ? window : GT_ALGO_WINDOW;
  if (r->window > GT_ALGO_WINDOW_MAX)
    r->window = GT_ALGO_WINDOW_MAX;
  for (int s = 0; s < GT_ALGO_WINDOW_MAX; s++)
    r->slot[s].seg = -1;
  *rp = r;
  return GT_SUCCESS;
}

static void gt_slot_free(gt_aslot *s)
{
  free(s->off);
  free(s->len);
  free(s->poff);
  free(s->dirty);
  free(s->acc);
  free(s->stmp);
  free(s->rtmp);
}

int gt_algo_req_destroy(gt_algo_req **rp)
{
  gt_algo_req *r = *rp;
  if (!r)
    return GT_SUCCESS;
  int status = GT_SUCCESS;
  if (r->active) {
    for (int s = 0; s < r->window; s++)
      for (int i = 0; i < r->slot[s].nreq; i++)
        if (r->slot[s].req[i] != MPI_REQUEST_NULL) {
          MPI_Cancel(&r->slot[s].req[i]);
          MPI_Request_free(&r->slot[s].req[i]);
        }
    status = GT_ERROR(GT_ERR_INTERNAL, "internal error: a collective request was destroyed "
                      "in flight");
  }
  for (int s = 0; s < GT_ALGO_WINDOW_MAX; s++)
    gt_slot_free(&r->slot[s]);
  free(r->plan.ops);
  free(r->plan.blk);
  free(r->plan.rounds);
  free(r->counts);
  free(r->base);
  free(r);
  *rp = NULL;
  return status;
}

size_t gt_algo_req_memory(const gt_algo_req *r) { return r->mem; }
double gt_algo_req_sent(const gt_algo_req *r) { return r->sent; }

/* Part i of n elements cut into k near-equal parts. */
static void gt_part(size_t n, size_t k, size_t i, size_t *off, size_t *len)
{
  const size_t q = n / k, rem = n % k;
  *off = i * q + (i < rem ? i : rem);
  *len = q + (i < rem);
}

/* Segment s's blocks: an all-reduce's or broadcast's segment is a
 * contiguous piece of buf cut into p blocks; a reduce-scatter's or
 * all-gather's takes part s of every member block. */
static void gt_seg_layout(const gt_algo_req *r, long s, int p, size_t *off, size_t *len,
                          size_t *poff, size_t *total)
{
  size_t acc = 0;
  if (r->op == GT_COLL_ALLREDUCE || r->op == GT_COLL_BCAST) {
    size_t so, sl;
    gt_part(r->n, (size_t)r->nseg, (size_t)s, &so, &sl);
    for (int b = 0; b < p; b++) {
      size_t bo, bl;
      gt_part(sl, (size_t)p, (size_t)b, &bo, &bl);
      off[b] = so + bo;
      len[b] = bl;
      poff[b] = bo;
    }
    *total = sl;
    return;
  }
  for (int b = 0; b < p; b++) {
    size_t bo, bl;
    gt_part(r->counts[b], (size_t)r->nseg, (size_t)s, &bo, &bl);
    off[b] = r->base[b] + bo;
    len[b] = bl;
    poff[b] = acc;
    acc += bl;
  }
  *total = acc;
}

/* Room for segments of `elems` elements and p blocks in every slot. */
static int gt_req_reserve(gt_algo_req *r, size_t elems, int p)
{
  if (p > r->cap_p) {
    for (int s = 0; s < r->window; s++) {
      gt_aslot *sl = &r->slot[s];
      size_t **arr[3] = {&sl->off, &sl->len, &sl->poff};
      for (int k = 0; k < 3; k++) {
        size_t *q = realloc(*arr[k], (size_t)p * sizeof **arr[k]);
        GT_CHECK_ALLOC(q, (size_t)p * sizeof **arr[k]);
        *arr[k] = q;
      }
      unsigned char *d = realloc(sl->dirty, (size_t)p);
      GT_CHECK_ALLOC(d, (size_t)p);
      sl->dirty = d;
    }
    r->cap_p = p;
  }
  const size_t bytes = elems * r->esize;
  if (bytes > r->cap_bytes) {
    for (int s = 0; s < r->window; s++) {
      gt_aslot *sl = &r->slot[s];
      char **bufs[3] = {&sl->acc, &sl->stmp, &sl->rtmp};
      for (int k = 0; k < 3; k++) {
        free(*bufs[k]);
        *bufs[k] = malloc(bytes ? bytes : 1);
        GT_CHECK_ALLOC(*bufs[k], bytes);
      }
    }
    r->cap_bytes = bytes;
    r->mem = (size_t)r->window * 3 * bytes;
  }
  return GT_SUCCESS;
}

int gt_algo_start(gt_algo_req *r, gt_algo_comm *ac, gt_algo a, gt_coll_op op, void *buf,
                  size_t n, gt_dtype t, const size_t *counts, int root)
{
  GT_CHECK(!r->active, GT_ERR_INTERNAL,
           "internal error: a collective was started on a request in flight");
  GT_CHECK(a == GT_ALGO_RING || a == GT_ALGO_TREE || a == GT_ALGO_HALVING, GT_ERR_INTERNAL,
           "internal error: gt_algo_start with algorithm %s", gt_algo_name(a));
  const bool sums = op == GT_COLL_ALLREDUCE || op == GT_COLL_REDUCE_SCATTER;
  GT_CHECK(!sums || t == GT_F32 || t == GT_BF16 || t == GT_F16, GT_ERR_INTERNAL,
           "internal error: a sum of %s", gt_dtype_name(t));
  const int p = ac->size, me = ac->rank;
  GT_CHECK(op != GT_COLL_BCAST || (root >= 0 && root < p), GT_ERR_INTERNAL,
           "internal error: broadcast from member %d of %d", root, p);
  const bool blocks = op == GT_COLL_REDUCE_SCATTER || op == GT_COLL_ALLGATHER;
  GT_CHECK(!blocks || counts, GT_ERR_INTERNAL, "internal error: %s without member counts",
           gt_coll_op_name(op));
  GT_CALL(gt_plan_build(&r->plan, a, op, p, me, op == GT_COLL_BCAST ? root : 0));
  r->ac = ac;
  r->op = op;
  r->buf = buf;
  r->n = n;
  r->t = t;
  r->esize = gt_dtype_size(t);
  r->in_place = op == GT_COLL_ALLREDUCE;
  if (blocks) {
    size_t *c = realloc(r->counts, (size_t)p * sizeof *c);
    GT_CHECK_ALLOC(c, (size_t)p * sizeof *c);
    r->counts = c;
    size_t *bs = realloc(r->base, (size_t)p * sizeof *bs);
    GT_CHECK_ALLOC(bs, (size_t)p * sizeof *bs);
    r->base = bs;
    size_t sum = 0;
    for (int b = 0; b < p; b++) {
      r->counts[b] = counts[b];
      r->base[b] = sum;
      sum += counts[b];
    }
    GT_CHECK(sum == n, GT_ERR_INTERNAL,
             "internal error: member blocks of %zu elements for a buffer of %zu", sum, n);
  }
  size_t seg_elems = r->seg_bytes / r->esize;
  if (seg_elems < (size_t)p)
    seg_elems = (size_t)p;
  r->nseg = n == 0 || p == 1 ? 0 : (long)((n - 1) / seg_elems + 1);
  /* every segment's total fits: ceil(n / nseg) contiguous, or one part of
   * every block rounded up */
  size_t need = r->nseg ? (n - 1) / (size_t)r->nseg + 1 : 0;
  if (blocks && r->nseg)
    need += (size_t)p;
  GT_CHECK(need <= (size_t)INT32_MAX, GT_ERR_INTERNAL, "internal error: segment of %zu", need);
  GT_CALL(gt_req_reserve(r, need, p));
  r->done_seg = 0;
  for (int i = 0; i < r->window; i++)
    r->slot[i].next = i;
  r->tag0 = 1 + (int)(ac->seq % (unsigned long long)ac->tag_span) * GT_ALGO_WINDOW_MAX;
  ac->seq++;
  r->active = r->nseg > 0;
  if (r->active) {
    bool done;
    GT_CALL(gt_algo_test(r, &done));
  }
  return GT_SUCCESS;
}

// element work --------------------------------------------------------------------

/* dst[i] = a[i] + b[i] in the payload type (16-bit: in fp32, rounded). */
static void gt_sum_into(gt_dtype t, void *dst, const void *a, const void *b, size_t n)
{
  if (t == GT_F32) {
    float *d = dst;
    const float *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
      d[i] = x[i] + y[i];
  } else if (t == GT_BF16) {
    uint16_t *d = dst;
    const uint16_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
      d[i] = gt_f32_to_bf16(gt_bf16_to_f32(x[i]) + gt_bf16_to_f32(y[i]));
  } else {
    uint16_t *d = dst;
    const uint16_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
      d[i] = gt_f32_to_f16(gt_f16_to_f32(x[i]) + gt_f16_to_f32(y[i]));
  }
}

void gt_algo_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type)
{
  (void)type;
  gt_sum_into(GT_BF16, inout, in, inout, (size_t)*len);
}

void gt_algo_sum_f16(void *in, void *inout, int *len, MPI_Datatype *type)
{
  (void)type;
  gt_sum_into(GT_F16, inout, in, inout, (size_t)*len);
}

/* Where block b of a slot lives now. */
static char *gt_blk_src(const gt_algo_req *r, const gt_aslot *s, int b)
{
  return s->dirty[b] ? s->acc + s->poff[b] * r->esize : r->buf + s->off[b] * r->esize;
}

/* An op's blocks as one contiguous run of the slot's current data: its
 * address, or NULL when they are not contiguous (mixed places, gaps). */
static char *gt_op_run(const gt_algo_req *r, const gt_aslot *s, const gt_aop *o, size_t *elems,
                       bool for_recv)
{
  const int *blk = r->plan.blk + o->first;
  size_t total = 0;
  for (int i = 0; i < o->count; i++)
    total += s->len[blk[i]];
  *elems = total;
  const bool in_acc = !for_recv && s->dirty[blk[0]];
  char *start = for_recv ? r->buf + s->off[blk[0]] * r->esize : gt_blk_src(r, s, blk[0]);
  size_t next = (in_acc ? s->poff[blk[0]] : s->off[blk[0]]) + s->len[blk[0]];
  for (int i = 1; i < o->count; i++) {
    const int b = blk[i];
    if (s->len[b] == 0)
      continue;
    if (!for_recv && (bool)s->dirty[b] != in_acc)
      return NULL;
    if ((in_acc ? s->poff[b] : s->off[b]) != next)
      return NULL;
    next += s->len[b];
  }
  return start;
}

static int gt_slot_post(gt_algo_req *r, gt_aslot *s, int slot_index)
{
  const gt_around *rd = &r->plan.rounds[s->round];
  MPI_Comm comm = r->ac->comm;
  const int tag = r->tag0 + slot_index;
  s->nreq = 0;
  const MPI_Datatype type = r->esize == 2 ? MPI_UINT16_T : MPI_FLOAT;
  const MPI_Datatype mtype = r->t == GT_I32 ? MPI_INT32_T : type;
  /* receives first */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < rd->count; i++) {
      const gt_aop *o = &r->plan.ops[rd->first + i];
      const bool recv = o->kind == GT_A_RECV || o->kind == GT_A_RECV_SUM;
      if (o->kind == GT_A_FINAL || recv != (pass == 0))
        continue;
      size_t elems = 0;
      char *run = gt_op_run(r, s, o, &elems, o->kind == GT_A_RECV);
      if (elems == 0)
        continue;
      MPI_Request *q = &s->req[s->nreq++];
      if (o->kind == GT_A_SEND) {
        if (!run) { /* pack the blocks */
          size_t at = 0;
          for (int k = 0; k < o->count; k++) {
            const int b = r->plan.blk[o->first + k];
            memcpy(s->stmp + at * r->esize, gt_blk_src(r, s, b), s->len[b] * r->esize);
            at += s->len[b];
          }
          run = s->stmp;
        }
        GT_CALL_MPI(MPI_Isend(run, (int)elems, mtype, o->peer, tag, comm, q));
        r->sent += (double)elems * (double)r->esize;
      } else {
        char *into = o->kind == GT_A_RECV && run ? run : s->rtmp;
        GT_CALL_MPI(MPI_Irecv(into, (int)elems, mtype, o->peer, tag, comm, q));
      }
    }
  return GT_SUCCESS;
}

/* The round's messages are in: sum or unpack what came, run a final step. */
static void gt_slot_complete(gt_algo_req *r, gt_aslot *s)
{
  const gt_around *rd = &r->plan.rounds[s->round];
  for (int i = 0; i < rd->count; i++) {
    const gt_aop *o = &r->plan.ops[rd->first + i];
    const int *blk = r->plan.blk + o->first;
    if (o->kind == GT_A_FINAL) {
      for (int k = 0; k < o->count; k++)
        if (s->dirty[blk[k]]) {
          memcpy(r->buf + s->off[blk[k]] * r->esize, s->acc + s->poff[blk[k]] * r->esize,
                 s->len[blk[k]] * r->esize);
          s->dirty[blk[k]] = 0;
        }
      continue;
    }
    if (o->kind == GT_A_SEND)
      continue;
    size_t elems = 0;
    char *run = gt_op_run(r, s, o, &elems, o->kind == GT_A_RECV);
    if (o->kind == GT_A_RECV) /* the blocks now live in buf again */
      for (int k = 0; k < o->count; k++)
        s->dirty[blk[k]] = 0;
    if (o->kind == GT_A_RECV && run)
      continue; /* landed in place */
    size_t at = 0;
    for (int k = 0; k < o->count; k++) {
      const int b = blk[k];
      const char *from = s->rtmp + at * r->esize;
      if (o->kind == GT_A_RECV) {
        memcpy(r->buf + s->off[b] * r->esize, from, s->len[b] * r->esize);
      } else if (r->in_place) {
        char *dst = r->buf + s->off[b] * r->esize;
        gt_sum_into(r->t, dst, dst, from, s->len[b]);
      } else {
        char *dst = s->acc + s->poff[b] * r->esize;
        gt_sum_into(r->t, dst, gt_blk_src(r, s, b), from, s->len[b]);
        s->dirty[b] = 1;
      }
      at += s->len[b];
    }
  }
}

/* Start segment seg on a slot. */
static void gt_slot_begin(gt_algo_req *r, gt_aslot *s, long seg)
{
  const int p = r->ac->size;
  s->seg = seg;
  s->round = 0;
  s->nreq = 0;
  gt_seg_layout(r, seg, p, s->off, s->len, s->poff, &s->total);
  memset(s->dirty, 0, (size_t)p);
}

/* Move one slot as far as it goes without waiting. */
static int gt_slot_advance(gt_algo_req *r, gt_aslot *s, int index)
{
  for (;;) {
    if (s->seg < 0) {
      if (s->next >= r->nseg)
        return GT_SUCCESS;
      gt_slot_begin(r, s, s->next);
      s->next += r->window;
      if (r->plan.nrounds > 0)
        GT_CALL(gt_slot_post(r, s, index));
    }
    if (s->nreq > 0) {
      bool all = true;
      for (int i = 0; i < s->nreq; i++) {
        int flag = 1;
        if (s->req[i] != MPI_REQUEST_NULL)
          GT_CALL_MPI(MPI_Test(&s->req[i], &flag, MPI_STATUS_IGNORE));
        all &= flag != 0;
      }
      if (!all)
        return GT_SUCCESS;
      s->nreq = 0;
    }
    if (s->round < r->plan.nrounds) {
      gt_slot_complete(r, s);
      s->round++;
    }
    if (s->round >= r->plan.nrounds) {
      s->seg = -1;
      r->done_seg++;
      continue;
    }
    GT_CALL(gt_slot_post(r, s, index));
  }
}

int gt_algo_test(gt_algo_req *r, bool *done)
{
  if (r->active) {
    for (int i = 0; i < r->window; i++)
      GT_CALL(gt_slot_advance(r, &r->slot[i], i));
    if (r->done_seg == r->nseg)
      r->active = false;
  }
  *done = !r->active;
  return GT_SUCCESS;
}

int gt_algo_wait(gt_algo_req *r)
{
  for (;;) {
    bool done;
    GT_CALL(gt_algo_test(r, &done));
    if (done)
      return GT_SUCCESS;
    GT_CALL(gt_comm_progress());
    GT_CALL(gt_algo_test(r, &done));
    if (done)
      return GT_SUCCESS;
    gt_comm_pause();
  }
}

// ---- cost model ---------------------------------------------------------------------------

static double gt_log2c(int p)
{
  int l = 0;
  while ((1 << l) < p)
    l++;
  return l;
}

double gt_algo_ring_bytes(gt_coll_op op, int p, double n)
{
  const double f = p > 1 ? (double)(p - 1) / p : 0.0;
  return op == GT_COLL_ALLREDUCE ? 2.0 * f * n : f * n;
}

void gt_algo_cost(gt_algo a, gt_coll_op op, int p, double n, double seg_bytes, double c[3])
{
  c[0] = c[1] = c[2] = 0.0;
  if (p <= 1)
    return;
  const double f = (double)(p - 1) / p, lg = gt_log2c(p);
  const double nseg = seg_bytes > 0 && n > seg_bytes ? ceil(n / seg_bytes) : 1.0;
  int q = 1;
  while (q * 2 <= p)
    q *= 2;
  const double lgq = gt_log2c(q), fold = q != p ? 1.0 : 0.0;
  switch (a) {
  case GT_ALGO_RING:
    if (op == GT_COLL_ALLREDUCE) {
      c[0] = 2.0 * (p - 1);
      c[1] = gt_algo_ring_bytes(op, p, n);
      c[2] = f * n;
    } else if (op == GT_COLL_REDUCE_SCATTER || op == GT_COLL_ALLGATHER) {
      c[0] = p - 1;
      c[1] = gt_algo_ring_bytes(op, p, n);
      c[2] = op == GT_COLL_REDUCE_SCATTER ? f * n : 0.0;
    } else { /* pipelined chain */
      c[0] = p - 2 + nseg;
      c[1] = n * (nseg + p - 2) / nseg;
    }
    return;
  case GT_ALGO_TREE:
    if (op == GT_COLL_ALLREDUCE) { /* the root's link carries log p copies each way */
      c[0] = 2.0 * lg + nseg - 1.0;
      c[1] = 2.0 * lg * n;
      c[2] = lg * n;
    } else if (op == GT_COLL_REDUCE_SCATTER || op == GT_COLL_ALLGATHER) {
      c[0] = lg;
      c[1] = f * n;
      c[2] = op == GT_COLL_REDUCE_SCATTER ? f * n : 0.0;
    } else {
      c[0] = lg + nseg - 1.0;
      c[1] = lg * n;
    }
    return;
  case GT_ALGO_MPI:
  case GT_ALGO_HALVING: {
    const double fq = (double)(q - 1) / q; /* the pairs fold in and out: one message each */
    if (op == GT_COLL_ALLREDUCE) {
      c[0] = 2.0 * lgq + 2.0 * fold;
      c[1] = 2.0 * fq * n + 2.0 * fold * n;
      c[2] = fq * n + fold * n;
    } else if (op == GT_COLL_REDUCE_SCATTER) {
      c[0] = lgq + 2.0 * fold;
      c[1] = fq * n + fold * (n + n / p);
      c[2] = fq * n + fold * n;
    } else if (op == GT_COLL_ALLGATHER) {
      c[0] = lgq + 2.0 * fold;
      c[1] = fq * n + fold * n + fold * n / p;
    } else {
      c[0] = 2.0 * lgq + 2.0 * fold;
      c[1] = 2.0 * fq * n + 2.0 * fold * n;
    }
    return;
  }
  default: return;
  }
}

double gt_algo_time(gt_algo a, gt_coll_op op, int p, double n, double seg_bytes,
                    const double abg[3], double eff)
{
  double c[3];
  gt_algo_cost(a, op, p, n, seg_bytes, c);
  return c[0] * abg[0] + c[1] * abg[1] / eff + c[2] * abg[2];
}

int gt_algo_table_read(const char *path, gt_algo_table *table)
{
  table->n = 0;
  FILE *fp = fopen(path, "r");
  GT_CHECK(fp, GT_ERR_INPUT, "cannot open the collective table %s: %s", path, strerror(errno));
  char line[512];
  int lineno = 0, status = GT_SUCCESS;
  bool allreduce = false;
  while (status == GT_SUCCESS && fgets(line, sizeof line, fp)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char op[64], algo[64];
    double v[3];
    int np = 0;
    int got = sscanf(line, "%63s %63s %d %lf %lf %lf", op, algo, &np, &v[0], &v[1], &v[2]);
    if (got <= 0)
      continue;
    gt_coll_op o = GT_COLL_ALLREDUCE;
    gt_algo a = GT_ALGO_MPI;
    if (got != 6 || gt_coll_op_parse(op, &o) != GT_SUCCESS ||
        gt_algo_parse(algo, &a) != GT_SUCCESS || a == GT_ALGO_AUTO || np < 2 ||
        !isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2]) || v[0] < 0 || v[1] < 0 ||
        v[2] < 0) {
      gt_error_clear();
      status = GT_ERROR(GT_ERR_INPUT, "%s:%d: expected 'OP ALGO NP ALPHA BETA GAMMA' (an "
                        "operation, an algorithm, a group size >= 2, three times >= 0), got "
                        "'%.60s'", path, lineno, line);
      break;
    }
    if (table->n == GT_ALGO_TABLE_MAX) {
      status = GT_ERROR(GT_ERR_INPUT, "%s:%d: more than %d rows", path, lineno,
                        GT_ALGO_TABLE_MAX);
      break;
    }
    gt_algo_row *r = &table->rows[table->n++];
    *r = (gt_algo_row){o, a, np, {v[0], v[1], v[2]}};
    allreduce |= o == GT_COLL_ALLREDUCE;
  }
  fclose(fp);
  GT_CALL(status);
  GT_CHECK(allreduce, GT_ERR_INPUT,
           "%s: no allreduce row (is it a table of benchmarks/run_coll.sh?)", path);
  return GT_SUCCESS;
}

gt_algo gt_algo_pick(const gt_algo_table *table, gt_coll_op op, int p, double n, double seg_bytes)
{
  int near = -1; /* the group size of the table nearest p */
  for (int i = 0; i < table->n; i++) {
    const gt_algo_row *r = &table->rows[i];
    if (r->op != op)
      continue;
    const int d = abs(r->np - p), dn = near < 0 ? 0 : abs(near - p);
    if (near < 0 || d < dn || (d == dn && r->np < near))
      near = r->np;
  }
  gt_algo best = GT_ALGO_MPI;
  double best_t = INFINITY;
  for (int i = 0; i < table->n; i++) {
    const gt_algo_row *r = &table->rows[i];
    if (r->op != op || r->np != near)
      continue;
    const double t = gt_algo_time(r->algo, op, p, n, seg_bytes, r->abg, 1.0);
    if (t < best_t) {
      best_t = t;
      best = r->algo;
    }
  }
  return best;
}
