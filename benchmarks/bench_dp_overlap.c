/*
 * bench_dp_overlap.c - how much of the data-parallel gradient all-reduce
 * the bucketed overlap hides behind backward.
 *
 *   mpiexec -n 2 benchmarks/bench_dp_overlap [options]    (dp = ranks, pp = tp = 1)
 *
 * For every bucket size two trainers are built in-program, side by side:
 * [parallel] dp_overlap = off (every bucket is all-reduced after backward,
 * so dp.exposed is the whole all-reduce) and = on (buckets start during the
 * last micro-batch's backward). After W warm-up steps each, they take N
 * measured steps in turns (off, on, on, off, ...), so that the drift of a
 * busy machine hits both modes alike. Rank 0 reports the median dp.exposed
 * (mean over ranks, and of the rank that arrived last), hidden = 1 -
 * exposed_on / exposed_off, the median step and backward times, and
 * whether both modes give the same losses bit for bit (they must: the same
 * buckets are summed, only earlier). For reference it times
 * one plain all-reduce of the whole gradient, and how many MPI_Test calls a
 * lone bucket needs to finish (MPI moves a non-blocking collective only
 * inside MPI calls). See benchmarks/README.md.
 */
#include <math.h>

#include "bench_util.h"
#include "gridtrain/buckets.h"
#include "gridtrain/comm.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grid.h"
#include "gridtrain/timer.h"
#include "gridtrain/trainer.h"

typedef struct {
  bench_common c;
  double buckets[BENCH_LIST_MAX];
  int nbuckets;
  int seqs, microbatches;
} bench_opts;

#define BENCH_PROBE_GAP_MS 5.0

/* Rank 0: per-step samples of one (bucket size, mode). */
typedef struct {
  double *exposed, *last, *step, *backward, *loss; /* last: min over ranks of dp.exposed */
  int n;
} bench_samples;

static void bench_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: mpiexec -n D bench_dp_overlap [options]    (D data-parallel ranks)\n"
         "\n"
         "  --data FILE.h5     token file (default data/kjv.h5; 'make data' makes it)\n"
         "  --csv FILE         rows as CSV (default bench_dp_overlap.csv)\n"
         "  --append           add rows to an existing CSV instead of overwriting it\n"
         "  --steps N          measured steps per mode and bucket size (default 20)\n"
         "  --warmup W         untimed steps first (default 2)\n"
         "  --bucket-mb LIST   bucket sizes in MiB (default 1,4,25; 0 = one bucket)\n"
         "  --seqs B           sequences per dp rank and step (default 8)\n"
         "  --microbatches M   micro-batches per step (default 1)\n"
         "  --seq-len T        tokens per sequence (default 128)\n"
         "  --layers L --dim C --heads H --vocab V   model (default 4 256 4 256)\n"
         "  --set KEY=VALUE    any other gridtrain key (section.key=value), repeatable\n"
         "\n"
         "One thread per rank (backend.threads=1), [parallel] wait = auto, pp = tp = 1.\n");
}

/* The options of bench_common, then bench_dp_overlap's own; o->c.help
 * when --help was asked. */
static int bench_parse(int argc, char **argv, bench_opts *o)
{
  *o = (bench_opts){.c = {.data = "data/kjv.h5", .csv = "bench_dp_overlap.csv", .warmup = 2,
                          .steps = 20, .layers = 4, .dim = 256, .heads = 4, .vocab = 256,
                          .seq = 128},
                    .buckets = {1, 4, 25}, .nbuckets = 3, .seqs = 8, .microbatches = 1};
  static const char *const known[] = {"--bucket-mb", "--seqs", "--microbatches", NULL};
  for (int i = 1; i < argc && !o->c.help; i++) {
    bool common;
    GT_CALL(bench_parse_common(argc, argv, &i, &o->c, &common));
    if (common)
      continue;
    const char *a = argv[i], *v = NULL;
    GT_CALL(bench_value(argc, argv, &i, known, &v));
    if (strcmp(a, "--bucket-mb") == 0)
      GT_CALL(bench_parse_reals(a, v, o->buckets, &o->nbuckets));
    else if (strcmp(a, "--seqs") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 1 << 20, &o->seqs));
    else if (strcmp(a, "--microbatches") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 1 << 20, &o->microbatches));
    else
      return BENCH_INPUT_ERROR("unknown option '%s'; see --help", a);
  }
  return GT_SUCCESS;
}

// ---- one bucket size ---------------------------------------------------------------------------

static int bench_create(const bench_opts *o, MPI_Comm world, double bucket_mb, bool overlap,
                        gt_trainer **tr)
{
  int size;
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  gt_config cfg;
  GT_CALL(bench_config_base(&o->c, &cfg));
  cfg.grid.dp = size;
  cfg.grid.pp = 1;
  cfg.grid.tp = 1;
  cfg.data.batch = (long)size * o->seqs;
  cfg.data.microbatches = o->microbatches;
  cfg.parallel.bucket_mb = bucket_mb;
  cfg.parallel.dp_overlap = overlap;
  GT_CALL(gt_trainer_create(&cfg, world, true, tr));
  return GT_SUCCESS;
}

/* One step of tr; rank 0 appends dp.exposed (mean over ranks, and the
 * least: that of the rank that reached it last, which waits for the
 * all-reduce only, not also for a slower replica), backward (mean over
 * ranks), the step time of the slowest rank and the loss. */
static int bench_step(gt_trainer *tr, MPI_Comm world, bool measured, bench_samples *out)
{
  int rank, size;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  gt_step_stats st;
  GT_CALL(gt_trainer_step(tr, &st));
  if (!measured)
    return GT_SUCCESS;
  double mine[3] = {st.dp_exposed_ms / size, st.backward_ms / size, st.step_ms}, sum[2], mx, mn;
  GT_CALL_MPI(MPI_Reduce(mine, sum, 2, MPI_DOUBLE, MPI_SUM, 0, world));
  GT_CALL_MPI(MPI_Reduce(&mine[2], &mx, 1, MPI_DOUBLE, MPI_MAX, 0, world));
  GT_CALL_MPI(MPI_Reduce(&st.dp_exposed_ms, &mn, 1, MPI_DOUBLE, MPI_MIN, 0, world));
  if (rank == 0) {
    out->exposed[out->n] = sum[0];
    out->last[out->n] = mn;
    out->backward[out->n] = sum[1];
    out->step[out->n] = mx;
    out->loss[out->n] = st.loss; /* the same on every rank */
    out->n++;
  }
  return GT_SUCCESS;
}

/* Both modes at one bucket size: smp[0] off, smp[1] on. *nbuckets and
 * *grad_bytes describe rank 0's buckets; *busy the wait mode chosen. */
static int bench_pair(const bench_opts *o, MPI_Comm world, double bucket_mb, bench_samples smp[2],
                      int *nbuckets, double *grad_bytes, bool *busy)
{
  gt_trainer *tr[2] = {NULL, NULL};
  GT_CALL(bench_create(o, world, bucket_mb, false, &tr[0]));
  GT_CALL(bench_create(o, world, bucket_mb, true, &tr[1]));
  gt_params *params = gt_trainer_params(tr[0]);
  gt_buckets *b = NULL; /* the trainer's layout, rebuilt to count it (no communication) */
  GT_CALL(gt_buckets_create(params, NULL, MPI_COMM_SELF, (size_t)(bucket_mb * 1024.0 * 1024.0),
                            &b));
  *nbuckets = gt_buckets_count(b);
  GT_CALL(gt_buckets_destroy(&b));
  *grad_bytes = (double)params->numel * sizeof(float);
  *busy = gt_comm_get_wait_mode() == GT_WAIT_BUSY;
  smp[0].n = smp[1].n = 0;
  for (int k = 0; k < o->c.warmup + o->c.steps; k++)
    for (int j = 0; j < 2; j++) {
      const int mode = (k % 2) ? 1 - j : j; /* off, on, on, off, ... */
      GT_CALL(bench_step(tr[mode], world, k >= o->c.warmup, &smp[mode]));
    }
  GT_CALL(gt_trainer_destroy(&tr[1]));
  GT_CALL(gt_trainer_destroy(&tr[0]));
  return GT_SUCCESS;
}

/* Median of a plain all-reduce of n floats over world (gridtrain's
 * gt_allreduce_f32), in ms. */
static int bench_allreduce_ms(MPI_Comm world, size_t n, int reps, double *ms)
{
  float *buf = calloc(n ? n : 1, sizeof(float));
  double *t = calloc((size_t)reps, sizeof(double));
  GT_CHECK(buf && t, GT_ERR_SYSTEM, "out of memory for %zu floats", n);
  for (int r = -1; r < reps; r++) { /* one untimed call first */
    GT_CALL_MPI(MPI_Barrier(world));
    double t0 = gt_now();
    GT_CALL(gt_allreduce_f32(buf, n, MPI_SUM, world));
    double dt = 1e3 * (gt_now() - t0), most;
    GT_CALL_MPI(MPI_Allreduce(&dt, &most, 1, MPI_DOUBLE, MPI_MAX, world));
    if (r >= 0)
      t[r] = most;
  }
  *ms = bench_median(t, reps);
  free(buf);
  free(t);
  return GT_SUCCESS;
}

/* How many progress calls MPI needs to finish one bucket: start a
 * non-blocking all-reduce of n floats (as a bucket's request does) and test
 * it every gap_ms of busy work, as backward does between blocks. *tests: the most over ranks (capped at 1000,
 * then it waits). */
static int bench_progress_probe(MPI_Comm world, size_t n, double gap_ms, int *tests)
{
  float *buf = calloc(n ? n : 1, sizeof(float));
  GT_CHECK(buf, GT_ERR_SYSTEM, "out of memory for %zu floats", n);
  GT_CALL_MPI(MPI_Barrier(world));
  MPI_Request req;
  GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, world, &req));
  int done = 0, count = 0;
  while (!done && count < 1000) {
    const double t0 = gt_now();
    while (gt_now() - t0 < 1e-3 * gap_ms) /* stands for backward's GEMMs */
      ;
    GT_CALL_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    count++;
  }
  if (!done)
    GT_CALL(gt_comm_wait(&req));
  GT_CALL_MPI(MPI_Allreduce(&count, tests, 1, MPI_INT, MPI_MAX, world));
  free(buf);
  return GT_SUCCESS;
}

// ---- main --------------------------------------------------------------------------------------

static const char *bench_csv_header =
    "dp,bucket_mb,buckets,grad_bytes,layers,dim,seq_len,seqs_per_rank,microbatches,steps,"
    "exposed_off_ms,exposed_on_ms,hidden_frac,exposed_last_off_ms,exposed_last_on_ms,"
    "hidden_last_frac,step_off_ms,step_on_ms,backward_off_ms,backward_on_ms,"
    "allreduce_ms,probe_tests,same_loss,wait,verdict";

static int bench_main(int argc, char **argv, MPI_Comm world, int *invalid)
{
  int rank, size;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  bench_opts o;
  GT_CALL(bench_parse(argc, argv, &o));
  if (o.c.help) {
    bench_usage();
    return GT_SUCCESS;
  }
  if (size < 2)
    return BENCH_INPUT_ERROR("bench_dp_overlap needs at least 2 ranks (dp = ranks); run it as "
                             "mpiexec -n 2 bench_dp_overlap");
  FILE *csv = NULL;
  GT_CALL(bench_start(&o.c, world, bench_csv_header, &csv));

  const int cap = o.c.steps;
  bench_samples smp[2];
  for (int k = 0; k < 2; k++) {
    smp[k].exposed = calloc((size_t)cap, sizeof(double));
    smp[k].last = calloc((size_t)cap, sizeof(double));
    smp[k].step = calloc((size_t)cap, sizeof(double));
    smp[k].backward = calloc((size_t)cap, sizeof(double));
    smp[k].loss = calloc((size_t)cap, sizeof(double));
    GT_CHECK(smp[k].exposed && smp[k].last && smp[k].step && smp[k].backward && smp[k].loss,
             GT_ERR_SYSTEM, "out of memory");
  }
  /* The gradient buffer of a dp-only rank is the whole model. */
  const gt_gpt_shape shape = {o.c.layers, o.c.heads, o.c.dim, o.c.seq, o.c.vocab, .arch = GT_MODEL_GPT};
  const double grad_mib = (double)gt_gpt_param_count(&shape) * sizeof(float) / 1048576.0;
  double ar_ms = 0;
  GT_CALL(bench_allreduce_ms(world, gt_gpt_param_count(&shape), 5, &ar_ms));
  if (rank == 0) {
    bench_print_header(stdout, "gridtrain data-parallel overlap benchmark (bench_dp_overlap)");
    printf("# dp=%d pp=1 tp=1; model L=%d C=%d H=%d V=%d T=%d; %d sequences per rank in %d "
           "micro-batch%s; gradients %.2f MiB per rank; 1 thread per rank; wait=auto\n",
           size, o.c.layers, o.c.dim, o.c.heads, o.c.vocab, o.c.seq, o.seqs, o.microbatches,
           o.microbatches == 1 ? "" : "es", grad_mib);
    printf("# per bucket size an off and an on trainer side by side, %d warm-up + %d measured "
           "steps each, taken in turns; medians over the %d steps of a mode\n",
           o.c.warmup, o.c.steps, o.c.steps);
    printf("# exp = dp.exposed in ms, mean over ranks; hidden = 1 - exp_on/exp_off; last = "
           "dp.exposed of the rank that got there last (min over ranks: the all-reduce without "
           "the wait for a slower replica), hid_last likewise\n");
    printf("# step = slowest rank's step in ms; bwd = backward in ms (mean over ranks; with "
           "overlap on it includes the MPI_Test calls that move the buckets)\n");
    printf("# allreduce = one plain all-reduce of the whole gradient buffer (gt_allreduce_f32), "
           "median of 5: %.2f ms\n",
           ar_ms);
    printf("# tests = MPI_Test calls one bucket of that size needs to finish alone when tested "
           "every %.0f ms of busy work (backward tests the buckets about %d times: after each of "
           "the 8 kernels of every block, the head and the embedding)\n",
           BENCH_PROBE_GAP_MS, 8 * o.c.layers + 2);
    printf("# same_loss: off and on give bitwise-equal losses at every step (VALID) or not "
           "(INVALID)\n");
    printf("# MiB  bkts  exp_off  exp_on  hidden  last_off  last_on  hid_last  step_off  step_on  "
           "bwd_off  bwd_on  allreduce  tests  same_loss  check\n");
    fflush(stdout);
  }
  *invalid = 0;
  for (int bi = 0; bi < o.nbuckets; bi++) {
    int nb = 0;
    double grad_bytes = 0;
    bool busy = true;
    GT_CALL(bench_pair(&o, world, o.buckets[bi], smp, &nb, &grad_bytes, &busy));
    /* one bucket as large as the largest of this size */
    const double bucket_floats = o.buckets[bi] > 0 ? fmin(o.buckets[bi] * 1048576.0, grad_bytes)
                                                   / sizeof(float)
                                                   : grad_bytes / sizeof(float);
    int tests = 0;
    GT_CALL(bench_progress_probe(world, (size_t)bucket_floats, BENCH_PROBE_GAP_MS, &tests));
    if (rank != 0)
      continue;
    bool same = smp[0].n == smp[1].n;
    for (int i = 0; same && i < smp[0].n; i++)
      same = smp[0].loss[i] == smp[1].loss[i];
    double e_off = bench_median(smp[0].exposed, smp[0].n);
    double e_on = bench_median(smp[1].exposed, smp[1].n);
    double s_off = bench_median(smp[0].step, smp[0].n);
    double s_on = bench_median(smp[1].step, smp[1].n);
    double bwd_off = bench_median(smp[0].backward, smp[0].n);
    double bwd = bench_median(smp[1].backward, smp[1].n);
    double l_off = bench_median(smp[0].last, smp[0].n);
    double l_on = bench_median(smp[1].last, smp[1].n);
    double hidden = e_off > 0 ? 1 - e_on / e_off : 0;
    double hidden_last = l_off > 0 ? 1 - l_on / l_off : 0;
    const char *verdict = same ? "VALID" : "INVALID";
    *invalid += !same;
    printf("%5.1f %5d %8.2f %7.2f %7.3f %9.2f %8.2f %9.3f %9.1f %8.1f %8.1f %7.1f %10.2f %6d  "
           "%-9s  %s\n",
           o.buckets[bi], nb, e_off, e_on, hidden, l_off, l_on, hidden_last, s_off, s_on, bwd_off,
           bwd, ar_ms, tests, same ? "yes" : "no", verdict);
    fflush(stdout);
    fprintf(csv,
            "%d,%g,%d,%.0f,%d,%d,%d,%d,%d,%d,%.3f,%.3f,%.4f,%.3f,%.3f,%.4f,%.3f,%.3f,%.3f,"
            "%.3f,%.3f,%d,%d,%s,%s\n",
            size, o.buckets[bi], nb, grad_bytes, o.c.layers, o.c.dim, o.c.seq, o.seqs,
            o.microbatches, smp[0].n, e_off, e_on, hidden, l_off, l_on, hidden_last, s_off, s_on,
            bwd_off, bwd, ar_ms, tests, same ? 1 : 0, busy ? "busy" : "yield", verdict);
    fflush(csv);
  }
  if (rank == 0) {
    printf("# %s; rows written to %s\n", *invalid ? "some rows INVALID" : "all rows valid",
           o.c.csv);
    fclose(csv);
  }
  for (int k = 0; k < 2; k++) {
    free(smp[k].exposed);
    free(smp[k].last);
    free(smp[k].step);
    free(smp[k].backward);
    free(smp[k].loss);
  }
  GT_CALL_MPI(MPI_Bcast(invalid, 1, MPI_INT, 0, world));
  return GT_SUCCESS;
}

int main(int argc, char **argv)
{
  return bench_run(argc, argv, bench_main);
}
