/*
 * bench_coll.c - OSU-style latency and bandwidth of all-reduce,
 * reduce-scatter, all-gather and broadcast: MPI's own collective and
 * gridtrain's ring, tree and recursive halving (coll_algos.h), in the same
 * run, on the same buffers.
 *
 *   mpiexec -n P benchmarks/bench_coll [options]
 *
 * For every operation, size (4 B to 256 MiB by default, times 4) and
 * algorithm it runs one untimed operation, picks an iteration count that
 * takes about --time seconds (the same on every rank), and times three
 * blocks of that many; the row is the median block's time per operation,
 * the slowest rank's. Sizes are the whole buffer in bytes of fp32 (an
 * all-gather's output, a reduce-scatter's input), as in nccl-tests; bus
 * bandwidth is the algorithm bandwidth times 2(p-1)/p for an all-reduce,
 * (p-1)/p for reduce-scatter and all-gather, 1 for a broadcast, so that it
 * compares with what one link can carry. Every row also carries the cost
 * model's coefficients (gt_algo_cost) that benchmarks/coll_fit.py fits
 * alpha, beta and gamma to. MPI and ours wait alike: busy-polling when the
 * ranks fit on the cores, MPI_Test plus a short sleep when they do not
 * (--wait).
 */
#include <math.h>

#include "bench_util.h"
#include "gridtrain/coll_algos.h"

typedef struct {
  gt_coll_op ops[GT_COLL_OPS];
  int nops;
  gt_algo algos[GT_ALGO_AUTO];
  int nalgos;
  double min_bytes, max_bytes, factor, seconds;
  int seg_kib, window, min_iters;
  const char *csv, *wait;
  bool append, help;
} bench_opts;

static void bench_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: mpiexec -n P bench_coll [options]\n"
         "\n"
         "  --ops LIST        allreduce,reduce_scatter,allgather,bcast (default: all four)\n"
         "  --algos LIST      mpi,ring,tree,halving (default: all four)\n"
         "  --min-bytes B     smallest buffer (default 4)\n"
         "  --max-bytes B     largest buffer (default 268435456 = 256 MiB)\n"
         "  --factor F        size step (default 4)\n"
         "  --seg-kib K       our algorithms' segment size in KiB (default %zu)\n"
         "  --window W        our algorithms' segments in flight (default %d)\n"
         "  --time S          seconds per timed block (default 0.1)\n"
         "  --min-iters N     iterations per block at least (default 2)\n"
         "  --wait MODE       busy | yield | auto (default auto: yield when ranks > cores)\n"
         "  --csv FILE        rows as CSV (default bench_coll.csv)\n"
         "  --append          add rows to an existing CSV\n",
         GT_ALGO_SEG_BYTES >> 10, GT_ALGO_WINDOW);
}

static int bench_parse(int argc, char **argv, bench_opts *o)
{
  *o = (bench_opts){.min_bytes = 4, .max_bytes = 268435456.0, .factor = 4, .seconds = 0.1,
                    .seg_kib = (int)(GT_ALGO_SEG_BYTES >> 10), .window = GT_ALGO_WINDOW,
                    .min_iters = 2, .csv = "bench_coll.csv", .wait = "auto"};
  for (int k = 0; k < GT_COLL_OPS; k++)
    o->ops[o->nops++] = (gt_coll_op)k;
  for (int k = 0; k < GT_ALGO_AUTO; k++)
    o->algos[o->nalgos++] = (gt_algo)k;
  static const char *const known[] = {"--ops", "--algos", "--min-bytes", "--max-bytes",
                                      "--factor", "--seg-kib", "--window", "--time",
                                      "--min-iters", "--wait", "--csv", NULL};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      o->help = true;
      return GT_SUCCESS;
    }
    if (strcmp(argv[i], "--append") == 0) {
      o->append = true;
      continue;
    }
    const char *opt = argv[i], *v;
    GT_CALL(bench_value(argc, argv, &i, known, &v));
    if (strcmp(opt, "--ops") == 0 || strcmp(opt, "--algos") == 0) {
      const bool ops = opt[2] == 'o';
      char copy[256];
      snprintf(copy, sizeof copy, "%s", v);
      int n = 0;
      for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        int st;
        if (ops) {
          st = n < GT_COLL_OPS ? gt_coll_op_parse(tok, &o->ops[n]) : GT_ERR_INPUT;
        } else {
          st = n < GT_ALGO_AUTO ? gt_algo_parse(tok, &o->algos[n]) : GT_ERR_INPUT;
          if (st == GT_SUCCESS && o->algos[n] == GT_ALGO_AUTO)
            st = GT_ERR_INPUT;
        }
        if (st != GT_SUCCESS)
          return BENCH_INPUT_ERROR("%s: '%s' is not one of %s", opt, tok,
                                   ops ? "allreduce, reduce_scatter, allgather, bcast"
                                       : "mpi, ring, tree, halving");
        n++;
      }
      if (n == 0)
        return BENCH_INPUT_ERROR("%s: an empty list", opt);
      if (ops)
        o->nops = n;
      else
        o->nalgos = n;
    } else if (strcmp(opt, "--min-bytes") == 0) {
      GT_CALL(bench_parse_real(opt, v, &o->min_bytes));
    } else if (strcmp(opt, "--max-bytes") == 0) {
      GT_CALL(bench_parse_real(opt, v, &o->max_bytes));
    } else if (strcmp(opt, "--factor") == 0) {
      GT_CALL(bench_parse_real(opt, v, &o->factor));
      if (o->factor < 1.25)
        return BENCH_INPUT_ERROR("--factor %s: must be at least 1.25", v);
    } else if (strcmp(opt, "--seg-kib") == 0) {
      GT_CALL(bench_parse_int(opt, v, 1, 1 << 20, &o->seg_kib));
    } else if (strcmp(opt, "--window") == 0) {
      GT_CALL(bench_parse_int(opt, v, 1, GT_ALGO_WINDOW_MAX, &o->window));
    } else if (strcmp(opt, "--time") == 0) {
      GT_CALL(bench_parse_real(opt, v, &o->seconds));
    } else if (strcmp(opt, "--min-iters") == 0) {
      GT_CALL(bench_parse_int(opt, v, 1, 1000000, &o->min_iters));
    } else if (strcmp(opt, "--wait") == 0) {
      if (strcmp(v, "busy") && strcmp(v, "yield") && strcmp(v, "auto"))
        return BENCH_INPUT_ERROR("--wait %s: expected busy, yield or auto", v);
      o->wait = v;
    } else {
      o->csv = v;
    }
  }
  if (o->min_bytes < 4 || o->max_bytes < o->min_bytes || o->max_bytes > 4294967296.0)
    return BENCH_INPUT_ERROR("sizes: need 4 <= --min-bytes <= --max-bytes <= 4 GiB");
  return GT_SUCCESS;
}

/* The member blocks of n elements over p (an even split). */
static void bench_counts(size_t n, int p, size_t *counts, int *icounts, int *displs)
{
  size_t at = 0;
  for (int b = 0; b < p; b++) {
    counts[b] = n / (size_t)p + ((size_t)b < n % (size_t)p);
    icounts[b] = (int)counts[b];
    displs[b] = (int)at;
    at += counts[b];
  }
}

/* One operation, started and completed. */
static int bench_one(const bench_opts *o, gt_algo a, gt_coll_op op, float *buf, size_t n,
                     const size_t *counts, const int *icounts, const int *displs, int me,
                     gt_algo_comm *ac, gt_algo_req *r, MPI_Comm comm)
{
  (void)o;
  if (a != GT_ALGO_MPI) {
    GT_CALL(gt_algo_start(r, ac, a, op, buf, n, GT_F32, op == GT_COLL_REDUCE_SCATTER ||
                          op == GT_COLL_ALLGATHER ? counts : NULL, 0));
    return gt_algo_wait(r);
  }
  MPI_Request req = MPI_REQUEST_NULL;
  switch (op) {
  case GT_COLL_ALLREDUCE:
    GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &req));
    break;
  case GT_COLL_REDUCE_SCATTER: /* the result lands at the front, as MPI's in-place form has it */
    GT_CALL_MPI(MPI_Ireduce_scatter(MPI_IN_PLACE, buf, icounts, MPI_FLOAT, MPI_SUM, comm, &req));
    break;
  case GT_COLL_ALLGATHER:
    GT_CALL_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, icounts, displs,
                                MPI_FLOAT, comm, &req));
    break;
  default: GT_CALL_MPI(MPI_Ibcast(buf, (int)n, MPI_FLOAT, 0, comm, &req)); break;
  }
  (void)me;
  return gt_comm_wait(&req);
}

static int bench_body(int argc, char **argv, MPI_Comm world, int *invalid)
{
  (void)invalid;
  bench_opts o;
  GT_CALL(bench_parse(argc, argv, &o));
  if (o.help) {
    bench_usage();
    return GT_SUCCESS;
  }
  int me = 0, p = 1;
  GT_CALL_MPI(MPI_Comm_rank(world, &me));
  GT_CALL_MPI(MPI_Comm_size(world, &p));
  const bool yield = strcmp(o.wait, "yield") == 0 ||
                     (strcmp(o.wait, "auto") == 0 && p > sysconf(_SC_NPROCESSORS_ONLN));
  gt_comm_set_wait_mode(yield ? GT_WAIT_YIELD : GT_WAIT_BUSY);
  FILE *csv = NULL;
  int status = me == 0 ? bench_csv_open(o.csv, o.append,
                                        "np,op,algo,bytes,iters,seconds,algbw_GBs,busbw_GBs,"
                                        "c_alpha,c_beta,c_gamma,seg_bytes,window,wait",
                                        &csv)
                       : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, world));
  gt_algo_comm *ac = NULL;
  gt_algo_req *r = NULL;
  GT_CALL(gt_algo_comm_create(world, &ac));
  const size_t seg = (size_t)o.seg_kib << 10;
  GT_CALL(gt_algo_req_create(seg, o.window, &r));
  const size_t nmax = (size_t)(o.max_bytes / 4);
  float *buf = malloc(nmax * sizeof *buf + 64);
  size_t *counts = malloc(sizeof *counts * (size_t)p);
  int *icounts = malloc(sizeof *icounts * (size_t)p), *displs = malloc(sizeof *displs * (size_t)p);
  GT_CHECK(buf && counts && icounts && displs, GT_ERR_SYSTEM, "out of memory for %zu bytes",
           nmax * sizeof *buf);
  for (size_t i = 0; i < nmax; i++) /* touched once: no page faults in the timings */
    buf[i] = (float)((i + (size_t)me) % 7) * 0.125f;
  if (me == 0) {
    bench_print_header(stdout, "bench_coll: MPI's collectives against ring, tree, halving");
    printf("# %d ranks, wait %s; our segments %d KiB, %d in flight; times: slowest rank, "
           "median of 3 blocks\n", p, yield ? "yield" : "busy", o.seg_kib, o.window);
    printf("%-15s %-8s %12s %8s %12s %10s %10s\n", "op", "algo", "bytes", "iters", "usec",
           "algbw GB/s", "busbw GB/s");
  }
  for (int oi = 0; oi < o.nops && status == GT_SUCCESS; oi++) {
    const gt_coll_op op = o.ops[oi];
    for (double bytes = o.min_bytes; bytes <= o.max_bytes * 1.0001 && status == GT_SUCCESS;
         bytes *= o.factor) {
      const size_t n = (size_t)(bytes / 4) ? (size_t)(bytes / 4) : 1;
      bench_counts(n, p, counts, icounts, displs);
      for (int ai = 0; ai < o.nalgos && status == GT_SUCCESS; ai++) {
        const gt_algo a = o.algos[ai];
        GT_CALL(gt_barrier(world));
        double t0 = MPI_Wtime();
        GT_CALL(bench_one(&o, a, op, buf, n, counts, icounts, displs, me, ac, r, world));
        double warm = MPI_Wtime() - t0, warm_max = 0;
        GT_CALL_MPI(MPI_Allreduce(&warm, &warm_max, 1, MPI_DOUBLE, MPI_MAX, world));
        double want = o.seconds / fmax(warm_max, 1e-7);
        int iters = want < o.min_iters ? o.min_iters : want > 100000 ? 100000 : (int)want;
        double blocks[3];
        for (int b = 0; b < 3; b++) {
          GT_CALL(gt_barrier(world));
          t0 = MPI_Wtime();
          for (int k = 0; k < iters; k++)
            GT_CALL(bench_one(&o, a, op, buf, n, counts, icounts, displs, me, ac, r, world));
          double el = (MPI_Wtime() - t0) / iters, el_max = 0;
          GT_CALL_MPI(MPI_Allreduce(&el, &el_max, 1, MPI_DOUBLE, MPI_MAX, world));
          blocks[b] = el_max;
        }
        const double t = bench_median(blocks, 3), total = (double)n * 4.0;
        const double share = op == GT_COLL_ALLREDUCE ? 2.0 * (p - 1) / p
                             : op == GT_COLL_BCAST   ? 1.0
                                                     : (double)(p - 1) / p;
        double c[3];
        gt_algo_cost(a, op, p, total, (double)seg, c);
        if (me == 0) {
          printf("%-15s %-8s %12.0f %8d %12.2f %10.3f %10.3f\n", gt_coll_op_name(op),
                 gt_algo_name(a), total, iters, t * 1e6, total / t / 1e9, share * total / t / 1e9);
          fprintf(csv, "%d,%s,%s,%.0f,%d,%.9g,%.6g,%.6g,%.9g,%.9g,%.9g,%zu,%d,%s\n", p,
                  gt_coll_op_name(op), gt_algo_name(a), total, iters, t, total / t / 1e9,
                  share * total / t / 1e9, c[0], c[1], c[2], seg, o.window,
                  yield ? "yield" : "busy");
          fflush(stdout);
          fflush(csv);
        }
      }
    }
  }
  if (csv)
    fclose(csv);
  free(buf);
  free(counts);
  free(icounts);
  free(displs);
  GT_CALL(gt_algo_req_destroy(&r));
  GT_CALL(gt_algo_comm_destroy(&ac));
  return status;
}

int main(int argc, char **argv) { return bench_run(argc, argv, bench_body); }
