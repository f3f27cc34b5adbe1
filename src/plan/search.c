/*
 * search.c - the planner's search (costmodel.h): every valid layout of a
 * model and global batch on a cluster, evaluated and ranked by predicted
 * tokens/s among those that fit; the tables and the CSV; and the check
 * against published results (benchmarks/plan/published.tsv).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/costmodel.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/schedule.h"

// ---- enumeration ----------------------------------------------------------------

typedef struct {
  gt_plan_row *rows;
  int n, cap;
} gt_rowvec;

static int gt_rows_push(gt_rowvec *v, const gt_layout *l, const gt_cost *c)
{
  if (v->n == v->cap) {
    int cap = v->cap ? 2 * v->cap : 1024;
    gt_plan_row *r = realloc(v->rows, sizeof *r * (size_t)cap);
    GT_CHECK_ALLOC(r, sizeof *r * (size_t)cap);
    v->rows = r, v->cap = cap;
  }
  v->rows[v->n].layout = *l;
  v->rows[v->n].cost = *c;
  v->n++;
  return GT_SUCCESS;
}

static int gt_row_cmp(const void *a, const void *b)
{
  const gt_plan_row *x = a, *y = b;
  if (x->cost.fits != y->cost.fits)
    return x->cost.fits ? -1 : 1;
  if (x->cost.tokens_per_s != y->cost.tokens_per_s)
    return x->cost.tokens_per_s > y->cost.tokens_per_s ? -1 : 1;
  return x->cost.memory < y->cost.memory ? -1 : x->cost.memory > y->cost.memory;
}

/* The precisions searched: those the cluster has a peak for; fp16 only
 * where it is faster than bf16 (at the same speed bf16 wins: no loss
 * scaling). */
static bool gt_plan_precision(const gt_cluster *c, gt_dtype dt)
{
  switch (dt) {
  case GT_BF16:
    return c->peak[GT_PEAK_BF16] > 0;
  case GT_F16:
    return c->peak[GT_PEAK_FP16] > c->peak[GT_PEAK_BF16];
  default:
    return (c->fp32_tf32 ? c->peak[GT_PEAK_TF32] : c->peak[GT_PEAK_FP32]) > 0;
  }
}

int gt_plan_search(const gt_config *cfg, const gt_plan_pins *pins, int ranks,
                   const gt_cluster *c, gt_plan_row **rows, int *n)
{
  *rows = NULL, *n = 0;
  const long B = cfg->data.batch;
  const int L = (int)cfg->model.layers, H = (int)cfg->model.heads;
  gt_layout base;
  memset(&base, 0, sizeof base);
  /* the deck's own values of the pinned dimensions (sizes may be auto) */
  base.dp = (int)cfg->grid.dp, base.pp = (int)cfg->grid.pp, base.tp = (int)cfg->grid.tp;
  GT_CALL(gt_schedule_parse(cfg->parallel.schedule, &base.schedule));
  base.zero = (int)cfg->parallel.zero;
  base.recompute = cfg->model.recompute;
  base.seq_par = cfg->parallel.sequence_parallel;
  base.dtype = cfg->backend.precision;
  base.dp_overlap = cfg->parallel.dp_overlap;
  gt_config lc = *cfg; /* a candidate's keys */
  if (!pins->pp)
    lc.parallel.stages[0] = '\0'; /* a block list fits one pp only */
  const gt_dtype dts[3] = {GT_F32, GT_BF16, GT_F16};
  gt_rowvec v = {NULL, 0, 0};
  int status = GT_SUCCESS;
  for (int tp = 1; tp <= ranks && status == GT_SUCCESS; tp++) {
    if (ranks % tp || H % tp || (pins->tp && base.tp > 0 && tp != base.tp))
      continue;
    if (!pins->tp && c->ranks_per_node % tp) /* TP stays inside a node */
      continue;
    for (int pp = 1; pp <= ranks / tp && status == GT_SUCCESS; pp++) {
      if ((ranks / tp) % pp || pp > L || (pins->pp && base.pp > 0 && pp != base.pp))
        continue;
      const int dp = ranks / tp / pp;
      if (B % dp || (pins->dp && base.dp > 0 && dp != base.dp))
        continue;
      const long per = B / dp; /* sequences per dp rank and step */
      for (long mbs = 1; mbs <= per && status == GT_SUCCESS; mbs++) {
        if (per % mbs)
          continue;
        const int m = (int)(per / mbs);
        if (pins->micro && m != cfg->data.microbatches)
          continue;
        /* sch: 0 GPipe, 1 1F1B, 2 .. GT_SCHEDULE_MAX_CHUNKS interleaved:sch,
         * then ZB-H1, then PipeDream-2BW, only where pinned: it changes the
         * update rule (weights one update behind), not only the speed */
        for (int sch = 0; sch <= GT_SCHEDULE_MAX_CHUNKS + 2 && status == GT_SUCCESS; sch++) {
          gt_layout l = base;
          l.dp = dp, l.pp = pp, l.tp = tp, l.mbs = (int)mbs, l.micro = m;
          if (sch < 2) {
            l.schedule = gt_schedule_of(sch == 0 ? GT_SCHEDULE_GPIPE : GT_SCHEDULE_1F1B, 1);
            if (pp == 1 && sch == 0)
              continue; /* one stage: the schedules are the same */
          } else if (sch == GT_SCHEDULE_MAX_CHUNKS + 2) {
            if (!pins->schedule || base.schedule.kind != GT_SCHEDULE_2BW)
              continue;
            l.schedule = gt_schedule_of(GT_SCHEDULE_2BW, 1);
          } else if (sch > GT_SCHEDULE_MAX_CHUNKS) {
            if (pp == 1)
              continue; /* one stage: no bubble to fill */
            l.schedule = gt_schedule_of(GT_SCHEDULE_ZBH1, 1);
          } else {
            const int V = sch; /* 2 .. 64, the trainer's GT_SCHEDULE_MAX_CHUNKS */
            if (pp == 1 || L < pp * V || (c->uniform_split && L % (pp * V)))
              continue; /* (bounds of the enumeration; the resolver checks) */
            l.schedule = gt_schedule_of(GT_SCHEDULE_INTERLEAVED, V);
          }
          if (pins->schedule && (l.schedule.kind != base.schedule.kind ||
                                 l.schedule.chunks != base.schedule.chunks))
            continue;
          for (int z = 0; z <= 3 && status == GT_SUCCESS; z++) {
            if (pins->zero && dp > 1 && z != base.zero)
              continue;
            l.zero = z;
            for (int r = 0; r < 3 && status == GT_SUCCESS; r++) {
              if (pins->recompute && r != (int)base.recompute)
                continue;
              l.recompute = (gt_recompute)r;
              for (int sp = 0; sp < 2 && status == GT_SUCCESS; sp++) {
                if (pins->seq_par && tp > 1 && sp != (int)base.seq_par)
                  continue;
                l.seq_par = sp;
                for (int d = 0; d < 3 && status == GT_SUCCESS; d++) {
                  if (pins->precision ? dts[d] != base.dtype : !gt_plan_precision(c, dts[d]))
                    continue;
                  l.dtype = dts[d];
                  /* the trainer runs what the candidate's keys resolve to */
                  gt_layout_to_config(&l, &lc);
                  gt_layout res;
                  if (gt_layout_resolve(&lc, ranks, &res) != GT_SUCCESS ||
                      !gt_layout_equal(&res, &l)) {
                    gt_error_clear();
                    continue;
                  }
                  gt_cost cost;
                  if (gt_cost_evaluate(&lc, &res, ranks, c, &cost) != GT_SUCCESS) {
                    if (gt_error_message()[0] && strstr(gt_error_message(), "out of memory"))
                      status = GT_ERR_SYSTEM;
                    else
                      gt_error_clear(); /* not a layout of this model */
                    continue;
                  }
                  status = gt_rows_push(&v, &res, &cost);
                }
              }
            }
          }
        }
      }
    }
  }
  if (status != GT_SUCCESS) {
    free(v.rows);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  GT_CHECK(v.n > 0, GT_ERR_INPUT,
           "plan: no valid layout of this model (heads=%d, layers=%d, batch=%ld) on %d ranks "
           "with the pinned choices; unpin some (drop section.key=value overrides) or change "
           "--global-batch", H, L, B, ranks);
  qsort(v.rows, (size_t)v.n, sizeof *v.rows, gt_row_cmp);
  *rows = v.rows, *n = v.n;
  return GT_SUCCESS;
}

// ---- output ----------------------------------------------------------------------

static void gt_fmt_time(double s, char *buf, size_t size)
{
  if (s == 0)
    snprintf(buf, size, "0");
  else if (s < 1e-3)
    snprintf(buf, size, "%.1f us", s * 1e6);
  else if (s < 1.0)
    snprintf(buf, size, "%.1f ms", s * 1e3);
  else
    snprintf(buf, size, "%.3g s", s);
}

static void gt_fmt_rate(double x, char *buf, size_t size)
{
  if (x >= 1e9)
    snprintf(buf, size, "%.3gG", x / 1e9);
  else if (x >= 1e6)
    snprintf(buf, size, "%.3gM", x / 1e6);
  else if (x >= 1e4)
    snprintf(buf, size, "%.3gk", x / 1e3);
  else
    snprintf(buf, size, "%.0f", x);
}

static const char *gt_rc_short(gt_recompute r)
{
  return r == GT_RECOMPUTE_BLOCK ? "block" : r == GT_RECOMPUTE_ATTENTION ? "attn" : "none";
}

static void gt_plan_header(FILE *out)
{
  fprintf(out, "# %4s %4s %4s %4s %4s %5s %-14s %4s %-5s %3s %-4s %9s %8s %5s %9s %9s %9s "
          "%9s %9s %9s %10s %4s\n",
          "rank", "dp", "pp", "tp", "mbs", "m", "schedule", "zero", "recmp", "sp", "prec",
          "step", "tok/s", "MFU", "compute", "tp comm", "pp comm", "bubble", "dp exp",
          "optim", "memory", "fits");
}

static void gt_plan_line(FILE *out, int rank, const gt_plan_row *r)
{
  const gt_layout *l = &r->layout;
  const gt_cost *c = &r->cost;
  char t[8][24], rate[24], mem[24];
  const char *sch = gt_schedule_name(&l->schedule);
  const double v[8] = {c->step, c->compute, c->tp_comm, c->pp_comm, c->bubble, c->dp_comm,
                       c->optimizer, 0};
  for (int i = 0; i < 7; i++)
    gt_fmt_time(v[i], t[i], sizeof t[i]);
  gt_fmt_rate(c->tokens_per_s, rate, sizeof rate);
  gt_format_bytes(c->memory, mem, sizeof mem);
  fprintf(out, "  %4d %4d %4d %4d %4d %5d %-14s %4d %-5s %3s %-4s %9s %8s %4.1f%% %9s %9s %9s "
          "%9s %9s %9s %10s %4s\n",
          rank, l->dp, l->pp, l->tp, l->mbs, l->micro, sch, l->zero, gt_rc_short(l->recompute),
          l->seq_par ? "on" : "off", gt_dtype_name(l->dtype), t[0], rate, 100.0 * c->mfu, t[1],
          t[2], t[3], t[4], t[5], t[6], mem, c->fits ? "yes" : "NO");
}

void gt_plan_print_top(FILE *out, const gt_plan_row *rows, int n, int top, const gt_cluster *c,
                       int ranks)
{
  int fit = 0;
  for (int i = 0; i < n; i++)
    fit += rows[i].cost.fits;
  const int R = ranks < c->ranks_per_node ? ranks : c->ranks_per_node;
  char lim[24];
  gt_format_bytes(c->cores_per_node > 0 ? c->memory / R : c->memory, lim, sizeof lim);
  fprintf(out, "# %d layouts evaluated on %d ranks of %s (%s); %d fit in %s per rank; the top "
          "%d by predicted tokens/s\n",
          n, ranks, c->name, c->source, fit, lim, top < n ? top : n);
  fprintf(out, "# times per step: compute (recomputation included), tensor- and pipeline-"
          "parallel communication, pipeline bubble, data-parallel/ZeRO communication not "
          "hidden by backward, optimizer\n");
  gt_plan_header(out);
  for (int i = 0; i < n && i < top; i++)
    gt_plan_line(out, i + 1, &rows[i]);
}

void gt_plan_print_one(FILE *out, const gt_plan_row *row, const gt_cluster *c, int ranks)
{
  const int R = ranks < c->ranks_per_node ? ranks : c->ranks_per_node;
  char lim[24];
  gt_format_bytes(c->cores_per_node > 0 ? c->memory / R : c->memory, lim, sizeof lim);
  fprintf(out, "# the deck's layout on %d ranks of %s (%s); memory per rank available %s\n",
          ranks, c->name, c->source, lim);
  gt_plan_header(out);
  gt_plan_line(out, 1, row);
  const gt_cost *k = &row->cost;
  fprintf(out, "predicted_step_s %.6g\npredicted_tokens_per_s %.6g\n", k->step,
          k->tokens_per_s);
}

int gt_plan_write_csv(const char *path, const gt_plan_row *rows, int n)
{
  FILE *f = fopen(path, "w");
  GT_CHECK(f != NULL, GT_ERR_INPUT, "plan: cannot write the CSV '%s': %s", path,
           strerror(errno));
  fprintf(f, "rank,dp,pp,tp,mbs,micro,schedule,zero,recompute,seq_par,precision,dp_overlap,"
          "step_s,tokens_per_s,mfu,compute_s,recompute_s,tp_comm_s,pp_comm_s,bubble_s,"
          "dp_exposed_s,dp_total_s,optimizer_s,memory_bytes,fits\n");
  for (int i = 0; i < n; i++) {
    const gt_layout *l = &rows[i].layout;
    const gt_cost *c = &rows[i].cost;
    const char *sch = gt_schedule_name(&l->schedule);
    fprintf(f, "%d,%d,%d,%d,%d,%d,%s,%d,%s,%s,%s,%s,%.6g,%.6g,%.4f,%.6g,%.6g,%.6g,%.6g,%.6g,"
            "%.6g,%.6g,%.6g,%.0f,%s\n",
            i + 1, l->dp, l->pp, l->tp, l->mbs, l->micro, sch, l->zero,
            gt_recompute_name(l->recompute), l->seq_par ? "on" : "off", gt_dtype_name(l->dtype),
            l->dp_overlap ? "on" : "off", c->step, c->tokens_per_s, c->mfu, c->compute,
            c->recompute, c->tp_comm, c->pp_comm, c->bubble, c->dp_comm, c->dp_total,
            c->optimizer, c->memory, c->fits ? "yes" : "no");
  }
  const bool failed = ferror(f) != 0;
  const bool closed = fclose(f) == 0;
  GT_CHECK(!failed && closed, GT_ERR_INPUT, "plan: cannot write the CSV '%s'", path);
  return GT_SUCCESS;
}

// ---- published results --------------------------------------------------------------

/* One row of published.tsv (tab-separated; '#' comments):
 * table model heads hidden layers tp pp gpus batch mbs seq vocab recompute seq_par
 * schedule precision dp_overlap metric published */
#define GT_PUB_FIELDS 19

static int gt_pub_row(const char *tsv, int line, char *text, const gt_cluster *c, FILE *out,
                      int *table, double *err)
{
  char *f[GT_PUB_FIELDS];
  int nf = 0;
  for (char *save = NULL, *tok = strtok_r(text, "\t\r\n", &save); tok && nf < GT_PUB_FIELDS;
       tok = strtok_r(NULL, "\t\r\n", &save))
    f[nf++] = tok;
  GT_CHECK(nf == GT_PUB_FIELDS, GT_ERR_INPUT, "%s:%d: expected %d tab-separated fields, "
           "found %d", tsv, line, GT_PUB_FIELDS, nf);
  long v[12];
  const int ints[] = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  for (int i = 0; i < 11; i++) {
    char *end = NULL;
    v[i] = strtol(f[ints[i]], &end, 10);
    GT_CHECK(end && *end == '\0' && v[i] >= 0, GT_ERR_INPUT,
             "%s:%d: field %d ('%s') is not a count", tsv, line, ints[i] + 1, f[ints[i]]);
  }
  char *end = NULL;
  const double published = strtod(f[18], &end);
  GT_CHECK(end && *end == '\0' && published > 0, GT_ERR_INPUT,
           "%s:%d: the published value '%s' is not a positive number", tsv, line, f[18]);
  const int tbl = (int)v[0], heads = (int)v[1], hidden = (int)v[2], layers = (int)v[3];
  const int tp = (int)v[4], pp = (int)v[5], gpus = (int)v[6], mbs = (int)v[8];
  const long batch = v[7];
  const int seq = (int)v[9], vocab = (int)v[10];
  GT_CHECK(tbl == 1 || tbl == 5, GT_ERR_INPUT, "%s:%d: table %d: expected 1 or 5", tsv, line,
           tbl);
  GT_CHECK(tp > 0 && pp > 0 && mbs > 0 && gpus % (tp * pp) == 0, GT_ERR_INPUT,
           "%s:%d: %d GPUs do not split into tp=%d x pp=%d", tsv, line, gpus, tp, pp);
  const int dp = gpus / (tp * pp);
  GT_CHECK(batch % ((long)dp * mbs) == 0, GT_ERR_INPUT,
           "%s:%d: batch %ld does not split over dp=%d x mbs=%d", tsv, line, batch, dp, mbs);
  gt_config cfg;
  gt_config_defaults(&cfg);
  snprintf(cfg.data.train, sizeof cfg.data.train, "none");
  cfg.model.layers = layers, cfg.model.heads = heads, cfg.model.dim = hidden;
  cfg.model.seq_len = seq, cfg.model.vocab = vocab;
  cfg.data.batch = batch;
  cfg.backend.device = GT_DEVICE_CUDA;
  cfg.backend.mpi_device = GT_TRI_ON;
  cfg.grid.dp = dp, cfg.grid.pp = pp, cfg.grid.tp = tp;
  cfg.data.microbatches = batch / dp / mbs;
  const int rc = gt_recompute_parse(f[12]);
  GT_CHECK(rc >= 0, GT_ERR_INPUT, "%s:%d: recompute '%s': expected none, attention or block",
           tsv, line, f[12]);
  cfg.model.recompute = (gt_recompute)rc;
  cfg.parallel.sequence_parallel = strcmp(f[13], "on") == 0;
  cfg.backend.precision = gt_precision_dtype(f[15]);
  cfg.parallel.dp_overlap = strcmp(f[16], "on") == 0;
  /* "interleaved:*": the best predicted of 1f1b and every interleaved:V the
   * model allows (the papers do not give V) */
  const bool any_v = strcmp(f[14], "interleaved:*") == 0;
  gt_cost best;
  int best_v = 0;
  memset(&best, 0, sizeof best);
  for (int V = 1; V <= (any_v ? layers : 1); V++) {
    const gt_schedule sched = gt_schedule_of(V > 1 ? GT_SCHEDULE_INTERLEAVED : GT_SCHEDULE_1F1B, V);
    snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "%s",
             any_v ? gt_schedule_name(&sched) : f[14]);
    gt_layout l;
    int status = gt_layout_resolve(&cfg, gpus, &l);
    if (status == GT_SUCCESS && any_v && V > 1 && c->uniform_split && layers % (pp * V))
      continue; /* not a split this cluster's software makes */
    if (status != GT_SUCCESS && any_v && V > 1) {
      gt_error_clear(); /* not an interleaving of this model */
      continue;
    }
    GT_CALL(status);
    gt_cost cost;
    GT_CALL(gt_cost_evaluate(&cfg, &l, gpus, c, &cost));
    if (best_v == 0 || cost.step < best.step)
      best = cost, best_v = l.schedule.chunks;
  }
  double predicted;
  const double h = hidden, s = seq, Lh = (double)layers * h;
  if (strcmp(f[17], "tflops") == 0) /* Narayanan et al., eq. 3: with recomputation */
    predicted = 96.0 * (double)batch * s * layers * h * h *
                (1.0 + s / (6.0 * h) + vocab / (16.0 * Lh)) / (gpus * best.step) / 1e12;
  else if (strcmp(f[17], "seconds") == 0)
    predicted = best.step;
  else
    return GT_ERROR(GT_ERR_INPUT, "%s:%d: metric '%s': expected tflops or seconds", tsv, line,
                    f[17]);
  *table = tbl;
  *err = (predicted - published) / published;
  if (out)
    fprintf(out, "  %5d %-7s %4d %4d %5d %5d %-9s %-3s %3d %9.4g %9.4g %+7.1f%%   %-7s %.1f%% "
            "compute, %.1f%% tp, %.1f%% pp, %.1f%% bubble, %.1f%% dp\n",
            tbl, f[1], tp, pp, gpus, dp, f[12], f[13], best_v, published, predicted,
            100.0 * *err, f[17], 100.0 * best.compute / best.step,
            100.0 * best.tp_comm / best.step, 100.0 * best.pp_comm / best.step,
            100.0 * best.bubble / best.step, 100.0 * best.dp_comm / best.step);
  return GT_SUCCESS;
}

int gt_plan_validate(const char *tsv, const gt_cluster *c, FILE *out, gt_plan_check *check)
{
  memset(check, 0, sizeof *check);
  FILE *f = fopen(tsv, "r");
  GT_CHECK(f != NULL, GT_ERR_INPUT, "cannot open the published results '%s': %s", tsv,
           strerror(errno));
  if (out)
    fprintf(out, "# %5s %-7s %4s %4s %5s %5s %-9s %-3s %3s %9s %9s %8s   %-7s %s\n", "table",
            "model", "tp", "pp", "gpus", "dp", "recompute", "sp", "V", "published",
            "predicted", "error", "metric", "predicted split");
  char line[1024];
  int ln = 0, status = GT_SUCCESS;
  while (status == GT_SUCCESS && fgets(line, sizeof line, f)) {
    ln++;
    const char *p = line + strspn(line, " \t");
    if (*p == '#' || *p == '\n' || *p == '\r' || *p == '\0')
      continue;
    int table = 0;
    double err = 0;
    status = gt_pub_row(tsv, ln, line, c, out, &table, &err);
    if (status == GT_SUCCESS) {
      const int t = table == 1 ? 0 : 1;
      check->rows[t]++;
      check->mae[t] += fabs(err);
      if (fabs(err) > check->max[t])
        check->max[t] = fabs(err);
    }
  }
  fclose(f);
  GT_CALL(status);
  for (int t = 0; t < 2; t++)
    if (check->rows[t])
      check->mae[t] /= check->rows[t];
  if (out)
    for (int t = 0; t < 2; t++)
      fprintf(out, "# table %d: %d rows, mean absolute error %.2f%%, largest %.2f%%\n",
              t == 0 ? 1 : 5, check->rows[t], 100.0 * check->mae[t], 100.0 * check->max[t]);
  return GT_SUCCESS;
}
