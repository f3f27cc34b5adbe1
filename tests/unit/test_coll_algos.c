/*
 * test_coll_algos.c - our ring, tree and recursive-halving collectives
 * (coll_algos.h) at every group size from 2 to 8 (powers of two and not),
 * for all-reduce, reduce-scatter (uneven member blocks, empty ones among
 * them), all-gather and broadcast (several roots), fp32 and bf16, on sizes
 * from 1 element to several segments past the window:
 *   - exact: integer-valued data whose sums every type holds exactly must
 *     give exactly the sums (computed here in double from the formula that
 *     made the data), the blocks a reduce-scatter does not own must come
 *     back untouched, an all-gather must deliver every member's block;
 *   - bitwise: random fp32 and bf16 data must give the same bits on every member, the
 *     same bits when run again, and the sum within rounding;
 *   - two operations in flight at once on one group (as data-parallel
 *     buckets are) must not mix their messages;
 *   - the cost model and the table parser.
 *
 * gt-test: ranks=8 tier=quick
 */
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "../test_util.h"
#include "gridtrain/coll_algos.h"
#include "gridtrain/comm.h"
#include "gridtrain/half.h"

enum { SEG_BYTES = 256, WINDOW = 3 }; /* small segments: many of them, all slots busy */

static const gt_algo algos[] = {GT_ALGO_RING, GT_ALGO_TREE, GT_ALGO_HALVING};

/* The integer-valued datum of member r at element i: small enough that the
 * sum of 8 members is exact in bf16. */
static double datum(int r, size_t i) { return (double)((r * 7 + (long)(i % 97) * 3) % 11) - 5.0; }

static void store(gt_dtype t, void *buf, size_t i, double v)
{
  if (t == GT_F32)
    ((float *)buf)[i] = (float)v;
  else
    ((uint16_t *)buf)[i] = gt_f32_to_bf16((float)v);
}

static double load(gt_dtype t, const void *buf, size_t i)
{
  return t == GT_F32 ? ((const float *)buf)[i] : gt_bf16_to_f32(((const uint16_t *)buf)[i]);
}

/* Uneven member blocks with empty ones: weights 0, 1, 2, 0, 1, 2, ...,
 * the remainder to the last member. */
static void member_counts(size_t n, int p, size_t *counts)
{
  size_t w = 0, used = 0;
  for (int b = 0; b < p; b++)
    w += (size_t)(b % 3);
  for (int b = 0; b < p; b++) {
    counts[b] = w ? n * (size_t)(b % 3) / w : 0;
    used += counts[b];
  }
  counts[p - 1] += n - used;
}

static int run_op(gt_algo_req *r, gt_algo_comm *ac, gt_algo a, gt_coll_op op, void *buf,
                  size_t n, gt_dtype t, const size_t *counts, int root)
{
  GT_CALL(gt_algo_start(r, ac, a, op, buf, n, t, counts, root));
  return gt_algo_wait(r);
}

/* One exact case; returns the number of wrong elements (or -1 on error). */
static long exact_case(gt_algo_req *r, gt_algo_comm *ac, gt_algo a, gt_coll_op op, gt_dtype t,
                       size_t n, int root)
{
  const int p = gt_algo_comm_size(ac), me = gt_algo_comm_rank(ac);
  const size_t es = gt_dtype_size(t);
  char *buf = malloc(n * es + 1);
  size_t *counts = malloc(sizeof *counts * (size_t)p), *base = malloc(sizeof *base * (size_t)p);
  size_t at = 0;
  member_counts(n, p, counts);
  for (int b = 0; b < p; b++) {
    base[b] = at;
    at += counts[b];
  }
  const bool blocks = op == GT_COLL_REDUCE_SCATTER || op == GT_COLL_ALLGATHER;
  for (size_t i = 0; i < n; i++) {
    /* an all-gather's other blocks hold a marker the result must replace */
    const bool mine = i >= base[me] && i < base[me] + counts[me];
    store(t, buf, i, op == GT_COLL_ALLGATHER && !mine ? 99.0 : datum(me, i));
  }
  long wrong = 0;
  if (run_op(r, ac, a, op, buf, n, t, blocks ? counts : NULL, root) != GT_SUCCESS) {
    tap_diag("rank %d: %s", me, gt_error_message());
    wrong = -1;
  }
  for (size_t i = 0; i < n && wrong >= 0; i++) {
    int owner = 0;
    while (owner < p - 1 && i >= base[owner] + counts[owner])
      owner++;
    double want = 0.0;
    if (op == GT_COLL_ALLREDUCE || (op == GT_COLL_REDUCE_SCATTER && owner == me))
      for (int q = 0; q < p; q++)
        want += datum(q, i);
    else if (op == GT_COLL_REDUCE_SCATTER)
      want = datum(me, i); /* untouched */
    else if (op == GT_COLL_ALLGATHER)
      want = datum(owner, i);
    else
      want = datum(root, i);
    if (load(t, buf, i) != want)
      wrong++;
  }
  free(buf);
  free(counts);
  free(base);
  return wrong;
}

static uint64_t fnv(const void *p, size_t bytes)
{
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; i++)
    h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
  return h;
}

/* Random data of type t: the all-reduce gives the same bits on every
 * member and on a second run, and the sum within rounding (fp32: 1e-5 p;
 * bf16, rounded at every step: 2^-8 per step on values below 1 ... p). */
static bool bitwise_case(gt_algo_req *r, gt_algo_comm *ac, MPI_Comm comm, gt_algo a,
                         gt_dtype t, size_t n)
{
  const int p = gt_algo_comm_size(ac), me = gt_algo_comm_rank(ac);
  const size_t es = gt_dtype_size(t);
  float *f = malloc(n * sizeof *f);
  char *x = malloc(n * es), *y = malloc(n * es);
  double *want = calloc(n, sizeof *want);
  bool ok = true;
  for (int q = 0; q <= p; q++) {
    tu_fill(f, n, 1000u + (unsigned)(q < p ? q : me), -1.0f, 1.0f);
    for (size_t i = 0; i < n; i++) {
      store(t, x, i, f[i]);
      if (q < p)
        want[i] += load(t, x, i);
    }
  }
  memcpy(y, x, n * es);
  ok &= run_op(r, ac, a, GT_COLL_ALLREDUCE, x, n, t, NULL, 0) == GT_SUCCESS;
  ok &= run_op(r, ac, a, GT_COLL_ALLREDUCE, y, n, t, NULL, 0) == GT_SUCCESS;
  ok &= memcmp(x, y, n * es) == 0;
  const double tol = t == GT_F32 ? 1e-5 * p : 0x1p-8 * p * p;
  for (size_t i = 0; i < n; i++)
    ok &= fabs(load(t, x, i) - want[i]) <= tol;
  uint64_t h = fnv(x, n * es), *all = malloc(sizeof *all * (size_t)p);
  MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, comm);
  for (int q = 0; q < p; q++)
    ok &= all[q] == h;
  free(all);
  free(f);
  free(x);
  free(y);
  free(want);
  return ok;
}

/* Two operations in flight on one group, tested in turns. */
static bool overlap_case(gt_algo_comm *ac, size_t n)
{
  const int p = gt_algo_comm_size(ac), me = gt_algo_comm_rank(ac);
  gt_algo_req *r1 = NULL, *r2 = NULL;
  gt_algo_req_create(SEG_BYTES, WINDOW, &r1);
  gt_algo_req_create(SEG_BYTES, WINDOW, &r2);
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  size_t *counts = malloc(sizeof *counts * (size_t)p);
  member_counts(n, p, counts);
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)datum(me, i);
    b[i] = (float)datum(me, i + 5);
  }
  bool ok = gt_algo_start(r1, ac, GT_ALGO_RING, GT_COLL_ALLREDUCE, a, n, GT_F32, NULL, 0) ==
                GT_SUCCESS &&
            gt_algo_start(r2, ac, GT_ALGO_HALVING, GT_COLL_ALLREDUCE, b, n, GT_F32, NULL, 0) ==
                GT_SUCCESS;
  bool d1 = false, d2 = false;
  while (ok && !(d1 && d2)) {
    ok &= gt_algo_test(r2, &d2) == GT_SUCCESS && gt_algo_test(r1, &d1) == GT_SUCCESS;
    gt_comm_pause();
  }
  for (size_t i = 0; i < n && ok; i++) {
    double wa = 0, wb = 0;
    for (int q = 0; q < p; q++) {
      wa += datum(q, i);
      wb += datum(q, i + 5);
    }
    ok &= a[i] == wa && b[i] == wb;
  }
  gt_algo_req_destroy(&r1);
  gt_algo_req_destroy(&r2);
  free(a);
  free(b);
  free(counts);
  return ok;
}

static bool all_ok(bool ok, MPI_Comm comm)
{
  int v = ok, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_LAND, comm);
  return all;
}

static void test_model(const char *dir)
{
  double c2[3], c8[3];
  gt_algo_cost(GT_ALGO_RING, GT_COLL_ALLREDUCE, 8, 1 << 20, 0, c8);
  tap_ok(c8[0] == 14 && fabs(c8[1] - 2.0 * 7 / 8 * (1 << 20)) < 1e-6 &&
             fabs(c8[2] - 7.0 / 8 * (1 << 20)) < 1e-6,
         "ring all-reduce costs 2(p-1) messages, 2(p-1)/p n on the link, (p-1)/p n summed");
  gt_algo_cost(GT_ALGO_HALVING, GT_COLL_ALLREDUCE, 8, 1 << 20, 0, c8);
  gt_algo_cost(GT_ALGO_HALVING, GT_COLL_ALLREDUCE, 6, 1 << 20, 0, c2);
  tap_ok(c8[0] == 6 && c2[0] == 6, "halving all-reduce: 2 log2 p messages; p = 6 folds into 4 "
         "(2 log2 4 + 2), got %g and %g", c8[0], c2[0]);

  char path[512];
  snprintf(path, sizeof path, "%s/coll-table-%d.txt", dir, (int)getpid());
  FILE *fp = fopen(path, "w");
  fprintf(fp, "# op algo np alpha beta gamma\nallreduce mpi 2 1e-6 1e-9 0\n"
              "allreduce ring 2 1e-3 1e-10 0 # slow start, fast link\n"
              "allreduce mpi 8 1e-6 1e-12 0\nallreduce ring 8 1e-3 1e-10 0\n");
  fclose(fp);
  gt_algo_table tab;
  int st = gt_algo_table_read(path, &tab);
  tap_ok(st == GT_SUCCESS && gt_algo_pick(&tab, GT_COLL_ALLREDUCE, 2, 64, 0) == GT_ALGO_MPI &&
             gt_algo_pick(&tab, GT_COLL_ALLREDUCE, 2, 64e6, 0) == GT_ALGO_RING &&
             gt_algo_pick(&tab, GT_COLL_ALLREDUCE, 3, 64e6, 0) == GT_ALGO_RING &&
             gt_algo_pick(&tab, GT_COLL_ALLREDUCE, 7, 64e6, 0) == GT_ALGO_MPI &&
             gt_algo_pick(&tab, GT_COLL_BCAST, 2, 64e6, 0) == GT_ALGO_MPI,
         "auto picks MPI for small messages, ring for large ones, from the rows of the nearest "
         "group size, MPI where the table is silent");
  fp = fopen(path, "w");
  fprintf(fp, "allreduce ring 2 1e-6 fast 0\n");
  fclose(fp);
  gt_error_clear();
  st = gt_algo_table_read(path, &tab);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), ":1: expected"),
         "a malformed table line is refused with file:line (%s)", gt_error_message());
  unlink(path);
}

int main(int argc, char **argv)
{
  int rank = tu_mpi_init(&argc, &argv), world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  gt_comm_set_wait_mode(GT_WAIT_YIELD);
  const gt_dtype types[] = {GT_F32, GT_BF16};
  for (int p = 2; p <= world; p++) {
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, rank < p ? 0 : MPI_UNDEFINED, rank, &comm);
    if (comm == MPI_COMM_NULL) {
      MPI_Barrier(MPI_COMM_WORLD);
      continue;
    }
    gt_algo_comm *ac = NULL;
    bool made = gt_algo_comm_create(comm, &ac) == GT_SUCCESS;
    gt_algo_req *r = NULL;
    made &= gt_algo_req_create(SEG_BYTES, WINDOW, &r) == GT_SUCCESS;
    if (!all_ok(made, comm)) {
      tap_ok(false, "p = %d: communicator and request: %s", p, gt_error_message());
      MPI_Barrier(MPI_COMM_WORLD);
      continue;
    }
    /* 1 element up to several windows of segments (a segment: 64 fp32) */
    const size_t sizes[] = {1, 2, (size_t)p - 1, (size_t)p, 7, 65, 1000, 64 * WINDOW * 3 + 17};
    for (size_t ai = 0; ai < sizeof algos / sizeof *algos; ai++)
      for (int op = 0; op < GT_COLL_OPS; op++)
        for (size_t ti = 0; ti < 2; ti++) {
          long wrong = 0;
          for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            const int roots[] = {0, p - 1, p / 2};
            for (int ri = 0; ri < (op == GT_COLL_BCAST ? 3 : 1); ri++) {
              long w = exact_case(r, ac, algos[ai], (gt_coll_op)op, types[ti], sizes[si],
                                  roots[ri]);
              wrong = w < 0 || wrong < 0 ? -1 : wrong + w;
            }
          }
          long total = 0;
          MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, comm);
          int any_err = wrong < 0, err = 0;
          MPI_Allreduce(&any_err, &err, 1, MPI_INT, MPI_LOR, comm);
          tap_ok(!err && total == 0, "p = %d %s %s %s: exact on sizes 1 .. %zu (%ld wrong)", p,
                 gt_algo_name(algos[ai]), gt_coll_op_name((gt_coll_op)op),
                 gt_dtype_name(types[ti]), sizes[sizeof sizes / sizeof *sizes - 1], total);
        }
    for (size_t ai = 0; ai < sizeof algos / sizeof *algos; ai++)
      for (size_t ti = 0; ti < 2; ti++) {
        bool ok = bitwise_case(r, ac, comm, algos[ai], types[ti], 1000) &&
                  bitwise_case(r, ac, comm, algos[ai], types[ti], 64 * WINDOW * 2 + 3);
        tap_ok(all_ok(ok, comm), "p = %d %s: random %s all-reduce is bitwise equal on every "
               "member and run to run, and within rounding of the sum", p,
               gt_algo_name(algos[ai]), gt_dtype_name(types[ti]));
      }
    tap_ok(all_ok(overlap_case(ac, 777), comm),
           "p = %d: a ring and a halving all-reduce in flight at once keep their messages apart",
           p);
    gt_algo_req_destroy(&r);
    gt_algo_comm_destroy(&ac);
    MPI_Comm_free(&comm);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0)
    test_model(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int status = tap_done();
  MPI_Finalize();
  return status;
}
