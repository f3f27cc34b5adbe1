/*
 * test_schedule.c - pipeline schedules, the stage split, and data-parallel
 * buckets.
 *
 * The schedules are run through a small event simulation with the real
 * dependencies (F(s,i) after F(s-1,i); B(s,i) after B(s+1,i) and F(s,i);
 * each stage executes its list in order): every (p, m) must finish without
 * deadlock, keep no more micro-batches alive than gt_schedule_in_flight
 * says, and with equal stage costs idle exactly (p-1)/(m+p-1) of the time.
 *
 * gt-test: ranks=2
 */
#include <math.h>
#include <string.h>

#include "gridtrain/buckets.h"
#include "gridtrain/schedule.h"
#include "../test_util.h"

#define MAXP 8
#define MAXM 16

typedef struct {
  double bubble;       /* idle fraction of the makespan, mean over stages */
  int in_flight[MAXP]; /* most micro-batches alive per stage */
  bool ok;             /* finished, and every F before its B */
} sim_result;

/* Run p stage lists with forward cost tf and backward cost tb. */
static sim_result simulate(gt_schedule_kind kind, int p, int m, double tf, double tb)
{
  gt_pipe_op ops[MAXP][2 * MAXM];
  double f_end[MAXP][MAXM], b_end[MAXP][MAXM];
  int next[MAXP] = {0}, live[MAXP] = {0};
  double clock[MAXP] = {0}, busy[MAXP] = {0};
  sim_result r = {.ok = true};
  for (int s = 0; s < p; s++) {
    gt_schedule_build(kind, p, s, m, ops[s]);
    for (int i = 0; i < m; i++)
      f_end[s][i] = b_end[s][i] = -1;
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; s++) {
      if (next[s] == 2 * m)
        continue;
      gt_pipe_op op = ops[s][next[s]];
      double ready;
      if (!op.backward) {
        if (s > 0 && f_end[s - 1][op.mb] < 0)
          continue;
        ready = s > 0 ? f_end[s - 1][op.mb] : 0;
      } else {
        if (f_end[s][op.mb] < 0) {
          r.ok = false;
          return r;
        }
        if (s < p - 1 && b_end[s + 1][op.mb] < 0)
          continue;
        ready = s < p - 1 ? b_end[s + 1][op.mb] : 0;
      }
      double start = ready > clock[s] ? ready : clock[s];
      double cost = op.backward ? tb : tf;
      clock[s] = start + cost;
      busy[s] += cost;
      if (op.backward) {
        b_end[s][op.mb] = clock[s];
        live[s]--;
      } else {
        f_end[s][op.mb] = clock[s];
        if (++live[s] > r.in_flight[s])
          r.in_flight[s] = live[s];
      }
      next[s]++;
      progress = true;
    }
  }
  double makespan = 0;
  for (int s = 0; s < p; s++) {
    if (next[s] != 2 * m)
      r.ok = false; /* deadlock */
    makespan = clock[s] > makespan ? clock[s] : makespan;
  }
  for (int s = 0; s < p; s++)
    r.bubble += (1.0 - busy[s] / makespan) / p;
  return r;
}

static void test_schedules(void)
{
  for (int kind = 0; kind < 2; kind++) {
    const char *name = gt_schedule_name((gt_schedule_kind)kind);
    bool all_ok = true, bubble_ok = true, flight_ok = true, order_ok = true;
    double worst_bubble = 0;
    for (int p = 1; p <= MAXP; p++)
      for (int m = 1; m <= MAXM; m++) {
        sim_result r = simulate((gt_schedule_kind)kind, p, m, 1.0, 2.0);
        all_ok &= r.ok;
        double theory = (double)(p - 1) / (m + p - 1);
        worst_bubble = fmax(worst_bubble, fabs(r.bubble - theory));
        bubble_ok &= fabs(r.bubble - theory) < 1e-12;
        for (int s = 0; s < p; s++) {
          int want = gt_schedule_in_flight((gt_schedule_kind)kind, p, s, m);
          flight_ok &= r.in_flight[s] == want;
          if (kind == GT_SCHEDULE_1F1B)
            flight_ok &= r.in_flight[s] <= p - s;
          /* every micro-batch once forward, once backward, each in order */
          gt_pipe_op ops[2 * MAXM];
          gt_schedule_build((gt_schedule_kind)kind, p, s, m, ops);
          int nf = 0, nb = 0;
          for (int i = 0; i < 2 * m; i++) {
            if (ops[i].backward)
              order_ok &= ops[i].mb == nb++;
            else
              order_ok &= ops[i].mb == nf++;
          }
          order_ok &= nf == m && nb == m;
        }
      }
    tap_ok(all_ok, "%s: every stage list finishes for p <= %d, m <= %d (no deadlock, F before B)",
           name, MAXP, MAXM);
    tap_ok(order_ok, "%s: each micro-batch once forward and once backward, in order", name);
    tap_ok(flight_ok, "%s: micro-batches alive per stage = gt_schedule_in_flight%s", name,
           kind == GT_SCHEDULE_1F1B ? " <= p - s" : " = m");
    tap_ok(bubble_ok, "%s: simulated bubble = (p-1)/(m+p-1) (worst deviation %.1e)", name,
           worst_bubble);
  }
  gt_schedule_kind k;
  tap_ok(gt_schedule_parse("1f1b", &k) == GT_SUCCESS && k == GT_SCHEDULE_1F1B &&
             gt_schedule_parse("gpipe", &k) == GT_SUCCESS && k == GT_SCHEDULE_GPIPE &&
             gt_schedule_parse("zigzag", &k) == GT_ERR_INPUT,
         "schedule names parse, unknown ones are refused");
}

static bool split_is(int layers, int p, double bc, double hc, const char *spec,
                     const int *want)
{
  int first[MAXP + 1];
  gt_error_clear();
  if (gt_pipeline_split(layers, p, bc, hc, spec, first) != GT_SUCCESS) {
    tap_diag("split %d/%d: %s", layers, p, gt_error_message());
    return false;
  }
  for (int s = 0; s < p; s++)
    if (first[s + 1] - first[s] != want[s]) {
      tap_diag("split %d/%d: stage %d has %d blocks, want %d", layers, p, s,
               first[s + 1] - first[s], want[s]);
      return false;
    }
  return first[0] == 0 && first[p] == layers;
}

static void expect_split_error(int layers, int p, const char *spec, const char *needle)
{
  int first[MAXP + 1];
  gt_error_clear();
  int st = gt_pipeline_split(layers, p, 1.0, 0.0, spec, first);
  if (!tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), needle),
              "split of %d blocks over %d stages with '%s' refused", layers, p, spec))
    tap_diag("status %d: %s", st, gt_error_message());
}

static void test_split(void)
{
  tap_ok(split_is(8, 4, 1, 0, "", (int[]){2, 2, 2, 2}), "8 blocks over 4 stages: 2 each");
  tap_ok(split_is(7, 3, 1, 0, "", (int[]){3, 2, 2}), "7 over 3: earlier stages larger");
  tap_ok(split_is(4, 1, 1, 9, "", (int[]){4}), "one stage takes everything");
  /* GPT-2 124M: the head costs about 5.5 blocks */
  tap_ok(split_is(12, 4, 1, 5.5, "", (int[]){4, 4, 3, 1}),
         "12 over 4 with a head of 5.5 blocks: the last stage gets 1 block");
  tap_ok(split_is(8, 2, 1, 2, "", (int[]){5, 3}), "8 over 2 with a head of 2 blocks: 5 + 3");
  tap_ok(split_is(8, 2, 1, 0, "3,5", (int[]){3, 5}), "explicit split 3,5");
  expect_split_error(8, 2, "3", "names fewer stages than pp = 2");
  expect_split_error(8, 2, "3,4,1", "names more stages than pp = 2");
  expect_split_error(8, 2, "3,4", "covers 7 blocks but [model] layers = 8");
  expect_split_error(8, 2, "0,8", "expected 2 positive block counts");
  expect_split_error(8, 2, "a,b", "expected 2 positive block counts");
  expect_split_error(3, 4, "", "need at least 4 layers");
}

/* Buckets over two ranks: the sum arrives whatever order the model reports
 * parameters in, and the bucket count follows the size. */
static void test_buckets(int rank)
{
  gt_backend *be;
  gt_params *p;
  gt_coll *coll;
  if (gt_backend_create("cpu", 1, &be) || gt_params_create(be, GT_F32, &p) ||
      gt_coll_create(be, "auto", &coll)) {
    tap_ok(false, "bucket set-up: %s", gt_error_message());
    return;
  }
  const long sizes[5] = {1000, 24, 3000, 16, 500}; /* floats */
  for (int i = 0; i < 5; i++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    gt_params_add(p, name, 1, &sizes[i], GT_SHARD_NONE, true, GT_INIT_ZEROS, 0, false);
  }
  gt_params_finalize(p);
  gt_buckets *one, *small;
  gt_buckets_create(p, coll, MPI_COMM_WORLD, 0, &one);
  gt_buckets_create(p, coll, MPI_COMM_WORLD, 4096, &small); /* 1024 floats */
  tap_ok(gt_buckets_count(one) == 1, "bucket_mb 0: one bucket (%d)", gt_buckets_count(one));
  /* from the last: {t4, t3, t2} reaches 4096 bytes, then {t1, t0} */
  tap_ok(gt_buckets_count(small) == 2, "4 KiB buckets over 18 KiB: 2 buckets (%d)",
         gt_buckets_count(small));
  bool sums_ok = true;
  float *host = tu_alloc(p->numel);
  for (int trial = 0; trial < 2; trial++) {
    for (size_t j = 0; j < p->numel; j++)
      host[j] = (float)(rank + 1) * (float)(j % 7);
    tu_upload(be, p->grads, host, p->numel * sizeof(float));
    gt_buckets_reset(small);
    /* report in backward order in pieces, one parameter twice */
    int order[][2] = {{4, 1}, {3, 1}, {2, 1}, {2, 1}, {1, 1}, {0, 1}};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
      if (trial == 0)
        gt_buckets_ready(small, order[i][0], order[i][1]);
    gt_buckets_wait(small); /* trial 1: nothing reported, wait starts all */
    tu_download(be, host, p->grads, p->numel * sizeof(float));
    for (int i = 0; i < p->count; i++) {
      const gt_param *t = &p->list[i];
      for (size_t j = 0; j < t->numel; j++)
        sums_ok &= host[t->offset + j] == 3.0f * (float)((t->offset + j) % 7);
    }
  }
  tap_ok(sums_ok, "every gradient is the sum over both ranks (reported or not)");
  free(host);
  gt_buckets_destroy(&one);
  gt_buckets_destroy(&small);
  gt_coll_destroy(&coll);
  gt_params_destroy(&p);
  gt_backend_destroy(&be);
}

int main(int argc, char **argv)
{
  int rank = tu_mpi_init(&argc, &argv);
  tap_init(rank == 0);
  test_schedules();
  test_split();
  test_buckets(rank);
  MPI_Finalize();
  return tap_done();
}
