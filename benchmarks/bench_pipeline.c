/*
 * bench_pipeline.c - the pipeline bubble and the activation memory of the
 * GPipe, 1F1B, interleaved 1F1B, ZB-H1 and PipeDream-2BW schedules against
 * theory.
 *
 *   mpiexec -n P benchmarks/bench_pipeline [options]     (pp = P, dp = tp = 1)
 *
 * For every micro-batch count m one trainer per schedule is built
 * in-program (quiet); side by side they run W warm-up and N measured steps,
 * taking turns of --turn steps (so that the drift of a busy machine hits
 * both alike; a turn ends with its last update complete), and rank 0
 * reports per schedule
 *   bubble   sum over stages of pp.bubble / sum over stages of step time
 *   theory   (p - 1) / (V m + p - 1) (V = 1 but for interleaved:V;
 *            zb-h1: (p - 1) / (3 m + p - 1), backward = 2 forwards;
 *            pipedream-2bw: 0, no flush; its updates, inside the next
 *            step, show in step_ms); an
 *            interleaved schedule is skipped for an m it does not fit
 *            (m a multiple of p, p V <= layers)
 *   model    the bubble expected from the measured per-stage forward and
 *            backward times (stages that do not cost the same, and the
 *            step's non-pipeline work: optimizer, norms, all-reduces);
 *            for zb-h1, whose W the timers count as backward, the model
 *            takes W as filling the ramp, and the check accepts any bubble
 *            from there to 1F1B's model (W of no cost)
 *   imbal    how much longer the slowest stage computes than the mean stage
 *   ppcomm   share of the step in pp.comm (posting and completing sends)
 *   untimed  share of the step that no timer event covers
 *   act      peak micro-batches holding activations (stage 0, the largest
 *            stage, and what the schedule promises for stage 0) and bytes
 * and the median step time (slowest rank). The per-micro-batch size is
 * fixed, so the global batch is m micro-batches. See benchmarks/README.md.
 */
#include <math.h>

#include "bench_util.h"
#include "gridtrain/comm.h"
#include "gridtrain/grid.h"
#include "gridtrain/schedule.h"
#include "gridtrain/trainer.h"

#define BENCH_MAX_SCHED 5

typedef struct {
  bench_common c;
  int m[BENCH_LIST_MAX], nm;
  char sched[BENCH_MAX_SCHED][GT_NAME_MAX];
  int nsched;
  int micro;
  double tol;
  int turn; /* --turn: steps per trainer per turn */
  bool per_stage;
} bench_opts;

#define BENCH_MAX_STAGES 64

/* What rank 0 knows about one configuration. */
typedef struct {
  int p, m;
  const char *sched;
  double step_ms; /* median over steps of the slowest rank's step */
  double bubble, theory, model, untimed, ppcomm;
  double imbalance; /* slowest stage's forward + backward / mean over stages - 1 */
  double bubble_ms, fwd_ms, bwd_ms, ppcomm_ms; /* per step, mean over stages */
  int act_mb_s0, act_mb_max, act_mb_expect_s0;
  double act_bytes_s0, act_bytes_max;
  bool act_ok, oversubscribed;
  const char *wait;
  const char *verdict;
  /* per stage, ms per step: forward (with data), backward, pp.bubble, pp.comm,
   * the rest of the step; peak micro-batches */
  double st_fwd[BENCH_MAX_STAGES], st_bwd[BENCH_MAX_STAGES], st_bubble[BENCH_MAX_STAGES],
      st_pp[BENCH_MAX_STAGES], st_other[BENCH_MAX_STAGES];
  int st_act[BENCH_MAX_STAGES];
} bench_row;

/* Per-rank sums over the measured steps (ms), gathered to rank 0. */
enum { V_STAGE, V_STEP, V_BUBBLE, V_FWD, V_BWD, V_PPCOMM, V_DATA, V_TIMED, V_PEAK_MB,
       V_PEAK_BYTES, V_N };

static void bench_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: mpiexec -n P bench_pipeline [options]    (P pipeline stages)\n"
         "\n"
         "  --data FILE.h5     token file (default data/kjv.h5; 'make data' makes it)\n"
         "  --csv FILE         rows as CSV (default bench_pipeline.csv)\n"
         "  --append           add rows to an existing CSV instead of overwriting it\n"
         "  --steps N          measured steps per configuration (default 10)\n"
         "  --warmup W         untimed steps first (default 2)\n"
         "  --microbatches L   micro-batch counts m (default 1,2,4,8,16)\n"
         "  --schedules S      up to 5 of gpipe, 1f1b, interleaved:V, zb-h1,\n"
         "                     pipedream-2bw, separated by commas (default all five,\n"
         "                     interleaved:2)\n"
         "  --micro-seqs B     sequences per micro-batch (default 2)\n"
         "  --seq-len T        tokens per sequence (default 64)\n"
         "  --layers L --dim C --heads H --vocab V   model (default 8 128 4 256)\n"
         "  --tol X            allowed |bubble - model| for VALID (default 0.05)\n"
         "  --turn N           steps a trainer runs per turn (default 5): pipedream-2bw\n"
         "                     defers each update into the next step, up to the turn's end\n"
         "  --per-stage        also print every stage's split of the step\n"
         "  --set KEY=VALUE    any other gridtrain key (section.key=value), repeatable\n"
         "\n"
         "One thread per rank (backend.threads=1), [parallel] wait = auto, dp = tp = 1.\n");
}

/* The options of bench_common, then bench_pipeline's own; o->c.help when
 * --help was asked. */
static int bench_parse(int argc, char **argv, bench_opts *o)
{
  *o = (bench_opts){.c = {.data = "data/kjv.h5", .csv = "bench_pipeline.csv", .warmup = 2,
                          .steps = 10, .layers = 8, .dim = 128, .heads = 4, .vocab = 256,
                          .seq = 64},
                    .nm = 5, .m = {1, 2, 4, 8, 16}, .nsched = 5,
                    .sched = {"gpipe", "1f1b", "interleaved:2", "zb-h1", "pipedream-2bw"},
                    .micro = 2, .tol = 0.05, .turn = 5};
  static const char *const known[] = {"--microbatches", "--micro-seqs", "--tol", "--schedules",
                                      "--turn", NULL};
  for (int i = 1; i < argc && !o->c.help; i++) {
    bool common;
    GT_CALL(bench_parse_common(argc, argv, &i, &o->c, &common));
    if (common)
      continue;
    const char *a = argv[i], *v = NULL;
    if (strcmp(a, "--per-stage") == 0) {
      o->per_stage = true;
      continue;
    }
    GT_CALL(bench_value(argc, argv, &i, known, &v));
    if (strcmp(a, "--microbatches") == 0)
      GT_CALL(bench_parse_ints(a, v, o->m, &o->nm));
    else if (strcmp(a, "--micro-seqs") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 1 << 20, &o->micro));
    else if (strcmp(a, "--tol") == 0)
      GT_CALL(bench_parse_real(a, v, &o->tol));
    else if (strcmp(a, "--turn") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 100000, &o->turn));
    else if (strcmp(a, "--schedules") == 0) {
      char buf[64];
      snprintf(buf, sizeof buf, "%s", v);
      o->nsched = 0;
      for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        gt_schedule k;
        if (o->nsched == BENCH_MAX_SCHED || gt_schedule_parse(t, &k) != GT_SUCCESS) {
          gt_error_clear();
          return BENCH_INPUT_ERROR("--schedules '%s': expected up to %d of gpipe, 1f1b, "
                                   "interleaved:V, zb-h1 and pipedream-2bw, separated by "
                                   "commas",
                                   v, BENCH_MAX_SCHED);
        }
        snprintf(o->sched[o->nsched++], GT_NAME_MAX, "%s", gt_schedule_name(&k));
      }
    } else
      return BENCH_INPUT_ERROR("unknown option '%s'; see --help", a);
  }
  return GT_SUCCESS;
}

// ---- one configuration -----------------------------------------------------------------------

/* The bubble the measured stage times predict. f, b: per-stage forward and
 * backward ms per micro-batch; o: per-stage ms per step outside the
 * pipeline. GPipe runs all forwards, then all backwards, each phase as long
 * as the sum over stages plus (m - 1) times the slowest stage; 1F1B's steady
 * state advances one micro-batch per slowest (forward + backward);
 * interleaved:V runs m V units of 1/V of a stage: the ramp through the
 * stages costs 1/V of 1F1B's, the steady state the same; zb-h1 fills the
 * ramp's backward half with the deferred weight gradients, leaving the
 * forwards' ramp ((p - 1) forwards with B and W of equal cost, which the
 * timers do not tell apart: both are "backward"); pipedream-2bw has no ramp,
 * the slowest stage sets the pace. */
static double bench_bubble_model(const gt_schedule *sched, int p, int m, const double *f,
                                 const double *b, const double *o)
{
  const double V = sched->chunks;
  double sf = 0, sb = 0, mf = 0, mb = 0, mfb = 0;
  for (int s = 0; s < p; s++) {
    sf += f[s];
    sb += b[s];
    mf = fmax(mf, f[s]);
    mb = fmax(mb, b[s]);
    mfb = fmax(mfb, f[s] + b[s]);
  }
  double pipe = sched->kind == GT_SCHEDULE_GPIPE ? sf + sb + (m - 1) * (mf + mb)
                 : gt_schedule_splits(sched)     ? m * mfb + (sf - mf)
                 : gt_schedule_streams(sched)    ? m * mfb
                                                 : (sf + sb) / V + (m * V - 1) * mfb / V;
  double idle = 0, total = 0;
  for (int s = 0; s < p; s++) {
    idle += pipe - m * (f[s] + b[s]);
    total += pipe + o[s];
  }
  return total > 0 ? idle / total : 0;
}

static int bench_create(const bench_opts *o, MPI_Comm world, const char *sched, int m,
                        gt_trainer **tr)
{
  int size;
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  gt_config cfg;
  GT_CALL(bench_config_base(&o->c, &cfg));
  cfg.grid.dp = 1;
  cfg.grid.pp = size;
  cfg.grid.tp = 1;
  cfg.data.batch = (long)m * o->micro;
  cfg.data.microbatches = m;
  snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "%s", sched);
  GT_CALL(gt_trainer_create(&cfg, world, true, tr));
  return GT_SUCCESS;
}

/* This rank's sums over the measured steps of one trainer. */
typedef struct {
  double v[V_N];
  double *step_ms; /* per measured step */
  int n;
} bench_acc;

/* One call of the trainer as gt_trainer_run makes it (flush: the turn's
 * last, which completes a deferred update); the steps it completed that
 * are measured (index >= warmup) go into acc. */
static int bench_step(gt_trainer *tr, bool flush, int warmup, bench_acc *acc, int max)
{
  gt_step_stats out[2];
  int n;
  GT_CALL(gt_trainer_advance(tr, flush, out, &n));
  for (int i = 0; i < n; i++) {
    const gt_step_stats *st = &out[i];
    if (st->step < warmup || acc->n >= max)
      continue;
    acc->step_ms[acc->n++] = st->step_ms;
    acc->v[V_STEP] += st->step_ms;
    acc->v[V_BUBBLE] += st->bubble_ms;
    acc->v[V_FWD] += st->forward_ms;
    acc->v[V_BWD] += st->backward_ms;
    acc->v[V_PPCOMM] += st->pp_comm_ms;
    acc->v[V_DATA] += st->data_ms;
    acc->v[V_TIMED] += st->compute_ms + st->comm_ms + st->data_ms + st->bubble_ms;
  }
  return GT_SUCCESS;
}

/* Gather one trainer's sums and (rank 0) make its row. */
static int bench_make_row(const bench_opts *o, MPI_Comm world, gt_trainer *tr, bench_acc *acc,
                          const char *sched, int m, bench_row *row)
{
  int rank, size;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  const gt_grid *g = gt_trainer_grid(tr);
  int peak_mb;
  size_t peak_bytes;
  GT_CALL(gt_trainer_peak_activations(tr, &peak_mb, &peak_bytes));
  acc->v[V_STAGE] = g->pp_rank;
  acc->v[V_PEAK_MB] = peak_mb;
  acc->v[V_PEAK_BYTES] = (double)peak_bytes;
  const bool over = (long)g->node_size * 1 > g->node_cores; /* one thread per rank */
  double *slowest = calloc((size_t)o->c.steps, sizeof(double));
  double *all = calloc((size_t)V_N * (size_t)size, sizeof(double));
  GT_CHECK(slowest && all, GT_ERR_SYSTEM, "out of memory");
  GT_CALL_MPI(MPI_Gather(acc->v, V_N, MPI_DOUBLE, all, V_N, MPI_DOUBLE, 0, world));
  GT_CALL_MPI(MPI_Reduce(acc->step_ms, slowest, o->c.steps, MPI_DOUBLE, MPI_MAX, 0, world));

  if (rank == 0) {
    const int p = size;
    gt_schedule kind;
    GT_CALL(gt_schedule_parse(sched, &kind));
    double f[BENCH_MAX_STAGES], b[BENCH_MAX_STAGES], oth[BENCH_MAX_STAGES];
    double sum_step = 0, sum_bubble = 0, sum_timed = 0, sum_f = 0, sum_b = 0, sum_pp = 0;
    *row = (bench_row){.p = p, .m = m, .sched = sched, .oversubscribed = over, .act_ok = true};
    for (int r = 0; r < p; r++) {
      const double *v = all + (size_t)V_N * r;
      const int s = (int)v[V_STAGE];
      const double per_mb = (double)o->c.steps * m;
      f[s] = (v[V_FWD] + v[V_DATA] + 0.5 * v[V_PPCOMM]) / per_mb;
      b[s] = (v[V_BWD] + 0.5 * v[V_PPCOMM]) / per_mb;
      oth[s] = (v[V_STEP] - v[V_FWD] - v[V_BWD] - v[V_PPCOMM] - v[V_DATA] - v[V_BUBBLE]) /
               o->c.steps;
      row->st_fwd[s] = (v[V_FWD] + v[V_DATA]) / o->c.steps;
      row->st_bwd[s] = v[V_BWD] / o->c.steps;
      row->st_bubble[s] = v[V_BUBBLE] / o->c.steps;
      row->st_pp[s] = v[V_PPCOMM] / o->c.steps;
      row->st_other[s] = oth[s];
      row->st_act[s] = (int)v[V_PEAK_MB];
      sum_step += v[V_STEP];
      sum_bubble += v[V_BUBBLE];
      sum_timed += v[V_TIMED];
      sum_f += v[V_FWD];
      sum_b += v[V_BWD];
      sum_pp += v[V_PPCOMM];
      const int expect = gt_schedule_peak_units(&kind, p, s, m);
      row->act_ok = row->act_ok && (int)v[V_PEAK_MB] == expect;
      if (s == 0) {
        row->act_mb_s0 = (int)v[V_PEAK_MB];
        row->act_bytes_s0 = v[V_PEAK_BYTES];
        row->act_mb_expect_s0 = expect;
      }
      row->act_mb_max = (int)fmax(row->act_mb_max, v[V_PEAK_MB]);
      row->act_bytes_max = fmax(row->act_bytes_max, v[V_PEAK_BYTES]);
    }
    row->step_ms = bench_median(slowest, o->c.steps);
    row->bubble = sum_step > 0 ? sum_bubble / sum_step : 0;
    /* zb-h1 with B = W = F (a backward of twice a forward): a forward's
     * ramp in a step of 3 m forwards */
    const double units = gt_schedule_splits(&kind) ? 3.0 * m : (double)kind.chunks * m;
    row->theory = gt_schedule_streams(&kind) ? 0.0 /* no flush: no ramp */
                                             : (double)(p - 1) / (units + p - 1);
    row->model = bench_bubble_model(&kind, p, m, f, b, oth);
    double fb_max = 0, fb_sum = 0;
    for (int s = 0; s < p; s++) {
      fb_max = fmax(fb_max, f[s] + b[s]);
      fb_sum += f[s] + b[s];
    }
    row->imbalance = fb_sum > 0 ? fb_max / (fb_sum / p) - 1 : 0;
    row->untimed = sum_step > 0 ? 1 - sum_timed / sum_step : 0;
    row->ppcomm = sum_step > 0 ? sum_pp / sum_step : 0;
    row->ppcomm_ms = sum_pp / (p * (double)o->c.steps);
    row->bubble_ms = sum_bubble / (p * (double)o->c.steps);
    row->fwd_ms = sum_f / (p * (double)o->c.steps);
    row->bwd_ms = sum_b / (p * (double)o->c.steps);
    row->wait = gt_comm_get_wait_mode() == GT_WAIT_YIELD ? "yield" : "busy";
    if (!row->act_ok)
      row->verdict = "INVALID(act)";
    else if (over)
      row->verdict = "mechanism"; /* timings of an oversubscribed run prove nothing */
    else if (gt_schedule_streams(&kind))
      row->verdict = "unjudged"; /* no ramp to model; its updates run inside the next step */
    else if (gt_schedule_splits(&kind)) {
      /* the timers do not tell W from B: the model takes W as filling the
       * whole ramp; W of no cost leaves 1F1B's bubble */
      const gt_schedule plain = gt_schedule_of(GT_SCHEDULE_1F1B, 1);
      const double hi = bench_bubble_model(&plain, p, m, f, b, oth);
      row->verdict = row->bubble >= row->model - o->tol && row->bubble <= hi + o->tol
                         ? "VALID"
                         : "INVALID(bubble)";
    } else
      row->verdict = fabs(row->bubble - row->model) <= o->tol ? "VALID" : "INVALID(bubble)";
  }
  free(slowest);
  free(all);
  return GT_SUCCESS;
}

/* Every schedule that fits m micro-batches: the trainers live side by side
 * and take their steps in turns, so that the drift of a busy machine hits
 * all alike. rows[i] for o->sched[i] (rank 0); fits[i] false for a
 * schedule that does not fit m (no row). */
static int bench_run_m(const bench_opts *o, MPI_Comm world, int m, bench_row *rows, bool *fits)
{
  int size;
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  gt_trainer *tr[BENCH_MAX_SCHED] = {NULL};
  bench_acc acc[BENCH_MAX_SCHED];
  int run[BENCH_MAX_SCHED], n = 0;
  memset(acc, 0, sizeof acc);
  for (int i = 0; i < o->nsched; i++) {
    gt_schedule sc;
    GT_CALL(gt_schedule_parse(o->sched[i], &sc));
    fits[i] = gt_schedule_check(&sc, size, m, o->c.layers) == GT_SUCCESS;
    gt_error_clear();
    if (!fits[i])
      continue;
    run[n++] = i;
    GT_CALL(bench_create(o, world, o->sched[i], m, &tr[i]));
    acc[i].step_ms = calloc((size_t)o->c.steps, sizeof(double));
    GT_CHECK_ALLOC(acc[i].step_ms, sizeof(double) * (size_t)o->c.steps);
  }
  const int total = o->c.warmup + o->c.steps;
  for (int k = 0, turn = 0; k < total; k += o->turn, turn++)
    for (int j = 0; j < n; j++) {
      const int i = run[(turn % 2) ? n - 1 - j : j]; /* A B B A A B ... */
      const int end = k + o->turn < total ? k + o->turn : total;
      for (int q = k; q < end; q++)
        GT_CALL(bench_step(tr[i], q + 1 == end, o->c.warmup, &acc[i], o->c.steps));
    }
  for (int j = 0; j < n; j++) {
    const int i = run[j];
    GT_CALL(bench_make_row(o, world, tr[i], &acc[i], o->sched[i], m, &rows[i]));
    GT_CALL(gt_trainer_destroy(&tr[i]));
    free(acc[i].step_ms);
  }
  return GT_SUCCESS;
}

// ---- main --------------------------------------------------------------------------------------

static const char *bench_csv_header =
    "pp,schedule,m,micro_seqs,seq_len,batch_seqs,layers,dim,vocab,steps,step_ms_median,"
    "bubble_frac,bubble_frac_theory,bubble_frac_model,stage_imbalance,pp_comm_frac,untimed_frac,"
    "bubble_ms_per_stage,pp_comm_ms_per_stage,forward_ms_per_stage,backward_ms_per_stage,"
    "act_mb_stage0,act_mb_max,act_mb_stage0_expected,act_bytes_stage0,act_bytes_max,"
    "oversubscribed,wait,verdict";

static void bench_print_stages(FILE *out, const bench_row *r)
{
  for (int s = 0; s < r->p; s++)
    fprintf(out,
            "#     stage %d: forward %.2f  backward %.2f  bubble %.2f  pp.comm %.2f  rest %.2f "
            "ms/step; peak %d micro-batches\n",
            s, r->st_fwd[s], r->st_bwd[s], r->st_bubble[s], r->st_pp[s], r->st_other[s],
            r->st_act[s]);
}

static void bench_print_row(FILE *out, const bench_row *r, const bench_opts *o)
{
  fprintf(out,
          "%4d  %-13s %3d %6d %9.1f %7.3f %7.3f %7.3f %6.3f %7.3f %8.3f %5d %5d %5d %9.2f %9.2f"
          "  %s\n",
          r->p, r->sched, r->m, r->m * o->micro, r->step_ms, r->bubble, r->theory, r->model,
          r->imbalance, r->ppcomm, r->untimed, r->act_mb_s0, r->act_mb_max, r->act_mb_expect_s0,
          r->act_bytes_s0 / 1048576.0, r->act_bytes_max / 1048576.0, r->verdict);
  fflush(out);
}

static void bench_csv_row(FILE *csv, const bench_row *r, const bench_opts *o)
{
  fprintf(csv,
          "%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%.3f,%.5f,%.5f,%.5f,%.4f,%.5f,%.5f,%.3f,%.3f,%.3f,%.3f,"
          "%d,%d,%d,%.0f,%.0f,%d,%s,%s\n",
          r->p, r->sched, r->m, o->micro, o->c.seq, r->m * o->micro, o->c.layers, o->c.dim,
          o->c.vocab, o->c.steps, r->step_ms, r->bubble, r->theory, r->model, r->imbalance,
          r->ppcomm, r->untimed, r->bubble_ms, r->ppcomm_ms, r->fwd_ms, r->bwd_ms, r->act_mb_s0,
          r->act_mb_max, r->act_mb_expect_s0, r->act_bytes_s0, r->act_bytes_max,
          r->oversubscribed ? 1 : 0, r->wait, r->verdict);
  fflush(csv);
}

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
  if (size < 2 || size > BENCH_MAX_STAGES)
    return BENCH_INPUT_ERROR("bench_pipeline needs 2 to %d ranks (one per pipeline stage); "
                             "run it as mpiexec -n 2 (or 4) bench_pipeline",
                             BENCH_MAX_STAGES);
  FILE *csv = NULL;
  GT_CALL(bench_start(&o.c, world, bench_csv_header, &csv));

  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (rank == 0) {
    bench_print_header(stdout, "gridtrain pipeline benchmark (bench_pipeline)");
    printf("# pp=%d dp=1 tp=1; model L=%d C=%d H=%d V=%d T=%d; micro-batch %d x %d tokens, "
           "global batch = m x %d sequences; 1 thread per rank; wait=auto\n",
           size, o.c.layers, o.c.dim, o.c.heads, o.c.vocab, o.c.seq, o.micro, o.c.seq, o.micro);
    printf("# per m the schedules' trainers run side by side, %d warm-up + %d measured steps "
           "each, taken in turns; step_ms = median of the slowest rank's step\n",
           o.c.warmup, o.c.steps);
    printf("# bubble = sum(pp.bubble)/sum(step) over stages; theory = (p-1)/(V m+p-1) (V: "
           "chunks of interleaved:V, else 1); model = from measured stage times;\n");
    printf("#   imbal = slowest stage's forward+backward over the mean stage's, minus 1; "
           "ppcomm = sum(pp.comm)/sum(step);\n");
    printf("#   untimed = share of the step no timer covers\n");
    printf("# act = peak micro-batches holding activations: stage 0 / largest stage / "
           "schedule's promise for stage 0; MiB likewise (stage 0 / largest)\n");
    if (size > cores)
      printf("# NOTE: %d ranks on %ld cores: oversubscribed, the ranks take turns on the cores; "
             "timings and bubble only check the mechanism (verdict 'mechanism' = activations "
             "as the schedule promises)\n",
             size, cores);
    printf("# pp  sched           m  batch   step_ms  bubble  theory   model  imbal  ppcomm  untimed  "
           "act0  amax  aexp  act0_MiB  amax_MiB  check\n");
    fflush(stdout);
  }
  *invalid = 0;
  for (int mi = 0; mi < o.nm; mi++) {
    bench_row rows[BENCH_MAX_SCHED];
    bool fits[BENCH_MAX_SCHED];
    GT_CALL(bench_run_m(&o, world, o.m[mi], rows, fits));
    for (int si = 0; si < o.nsched && rank == 0; si++) {
      if (!fits[si])
        continue;
      bench_print_row(stdout, &rows[si], &o);
      if (o.per_stage)
        bench_print_stages(stdout, &rows[si]);
      bench_csv_row(csv, &rows[si], &o);
      *invalid += strncmp(rows[si].verdict, "INVALID", 7) == 0;
    }
  }
  if (rank == 0) {
    printf("# %s; rows written to %s\n", *invalid ? "some rows INVALID" : "all rows valid",
           o.c.csv);
    fclose(csv);
  }
  GT_CALL_MPI(MPI_Bcast(invalid, 1, MPI_INT, 0, world));
  return GT_SUCCESS;
}

int main(int argc, char **argv)
{
  return bench_run(argc, argv, bench_main);
}
