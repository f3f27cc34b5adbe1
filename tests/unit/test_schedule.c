/*
 * test_schedule.c - pipeline schedules, the stage split, and data-parallel
 * buckets.
 *
 * The schedules are run through a small event simulation with the real
 * dependencies (F(v,i) after F(v-1,i); B(v,i) after B(v+1,i) and F(v,i),
 * over virtual stages v; each stage executes its list in order): every
 * (p, m) must finish without deadlock, keep no more units alive per chunk
 * than gt_schedule_chunk_slots says, and with equal stage costs idle
 * exactly (p-1)/(V m+p-1) of the time (V = 1 but for interleaved:V).
 * zb-h1 (its W(v,i) after B(v,i)) must idle (p-1)(tf+tb-tw) of a stage's
 * time at tw <= tb, (p-1) tf beyond, and keep at most min(p, m) units
 * alive from F to W on every stage. pipedream-2bw's steps
 * (gt_schedule_window) run as one stream over six steps: no deadlock,
 * 1F1B's slots, no bubble in the steady state, and the step time under
 * four rules for the update (simulate_2bw).
 *
 * gt-test: ranks=2 tier=quick
 */
#include <math.h>
#include <string.h>

#include "gridtrain/buckets.h"
#include "gridtrain/schedule.h"
#include "../test_util.h"

#define MAXP 8
#define MAXM 16
#define MAXV 4
#define MAXU (MAXM * MAXV) /* units of a stage */
#define MAXOPS (3 * MAXU)  /* operations of a stage (zb-h1: 3 m) */

typedef struct {
  double bubble;              /* idle fraction of the makespan, mean over stages */
  double idle;                /* idle time of the makespan, most of any stage */
  int in_flight[MAXP][MAXV];  /* most units alive per stage and chunk */
  int alive[MAXP];            /* most units alive per stage, all chunks */
  bool ok;                    /* finished, and every F before its B */
} sim_result;

/* Run p stage lists of schedule sc with forward cost tf and backward cost
 * tb + tw per micro-batch and stage (a chunk's unit costs 1/V of that; a
 * split schedule's B costs tb and its W tw). Unit
 * (c, i) of stage s is virtual stage c p + s: its forward follows the
 * forward of virtual stage c p + s - 1 (rank s - 1, or rank p - 1's chunk
 * c - 1), its backward the backward of virtual stage c p + s + 1. */
static sim_result simulate(const gt_schedule *sc, int p, int m, double tf, double tb,
                           double tw)
{
  const int V = sc->chunks, nv = p * V, n = gt_schedule_ops(sc, m);
  const bool split = gt_schedule_splits(sc);
  static gt_pipe_op ops[MAXP][MAXOPS];
  static double f_end[MAXP * MAXV][MAXM], b_end[MAXP * MAXV][MAXM], w_end[MAXP * MAXV][MAXM];
  int next[MAXP] = {0}, live[MAXP][MAXV] = {{0}}, all[MAXP] = {0};
  double clock[MAXP] = {0}, busy[MAXP] = {0};
  sim_result r = {.ok = true};
  for (int s = 0; s < p; s++)
    gt_schedule_build(sc, p, s, m, ops[s]);
  for (int v = 0; v < nv; v++)
    for (int i = 0; i < m; i++)
      f_end[v][i] = b_end[v][i] = w_end[v][i] = -1;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; s++) {
      if (next[s] == n)
        continue;
      gt_pipe_op op = ops[s][next[s]];
      const int v = op.chunk * p + s;
      double ready;
      if (op.pass == GT_PASS_W) { /* after its own B, on this stage */
        if (!split || b_end[v][op.mb] < 0 || w_end[v][op.mb] >= 0) {
          r.ok = false;
          return r;
        }
        ready = 0;
      } else if (op.pass == GT_PASS_F) {
        if (v > 0 && f_end[v - 1][op.mb] < 0)
          continue;
        ready = v > 0 ? f_end[v - 1][op.mb] : 0;
      } else {
        if (f_end[v][op.mb] < 0) {
          r.ok = false;
          return r;
        }
        if (v < nv - 1 && b_end[v + 1][op.mb] < 0)
          continue;
        ready = v < nv - 1 ? b_end[v + 1][op.mb] : 0;
      }
      double start = ready > clock[s] ? ready : clock[s];
      const double cost = (op.pass == GT_PASS_F   ? tf
                           : op.pass == GT_PASS_W ? tw
                           : split                ? tb
                                                  : tb + tw) /
                          V;
      clock[s] = start + cost;
      busy[s] += cost;
      int *l = &live[s][op.chunk];
      if (op.pass != GT_PASS_F) {
        (op.pass == GT_PASS_W ? w_end : b_end)[v][op.mb] = clock[s];
        if (op.pass == (split ? GT_PASS_W : GT_PASS_B)) { /* the unit ends */
          (*l)--;
          all[s]--;
        }
      } else {
        f_end[v][op.mb] = clock[s];
        if (++*l > r.in_flight[s][op.chunk])
          r.in_flight[s][op.chunk] = *l;
        if (++all[s] > r.alive[s])
          r.alive[s] = all[s];
      }
      next[s]++;
      progress = true;
    }
  }
  double makespan = 0;
  for (int s = 0; s < p; s++) {
    if (next[s] != n)
      r.ok = false; /* deadlock */
    makespan = clock[s] > makespan ? clock[s] : makespan;
  }
  for (int s = 0; s < p; s++) {
    r.bubble += (1.0 - busy[s] / makespan) / p;
    r.idle = fmax(r.idle, makespan - busy[s]);
  }
  return r;
}

/* Every (chunk, micro-batch) unit once forward and once backward; within a
 * chunk forwards and backwards in micro-batch order (what slot reuse by
 * mb mod slots needs). */
static bool order_is_right(const gt_schedule *sc, int p, int s, int m)
{
  static gt_pipe_op ops[MAXOPS];
  gt_schedule_build(sc, p, s, m, ops);
  int nf[MAXV] = {0}, nb[MAXV] = {0}, nw[MAXV] = {0};
  bool ok = true;
  for (int i = 0; i < gt_schedule_ops(sc, m); i++) {
    const gt_pipe_op op = ops[i];
    ok &= op.chunk >= 0 && op.chunk < sc->chunks;
    if (!ok)
      return false;
    if (op.pass == GT_PASS_W)
      ok &= op.mb == nw[op.chunk]++ && nw[op.chunk] <= nb[op.chunk];
    else if (op.pass == GT_PASS_B)
      ok &= op.mb == nb[op.chunk]++ && nb[op.chunk] <= nf[op.chunk];
    else
      ok &= op.mb == nf[op.chunk]++;
  }
  for (int c = 0; c < sc->chunks; c++)
    ok &= nf[c] == m && nb[c] == m && nw[c] == (gt_schedule_splits(sc) ? m : 0);
  return ok;
}

/* zb-h1:
 * every (p, m) without deadlock, F B W once each in order, units alive =
 * gt_schedule_chunk_slots <= min(p, m), and the bubble of the formula at
 * three cost ratios, a third of 1F1B's at equal costs. */
static void test_zbh1(void)
{
  const gt_schedule zb = gt_schedule_of(GT_SCHEDULE_ZBH1, 1);
  const gt_schedule fb = gt_schedule_of(GT_SCHEDULE_1F1B, 1);
  static const double costs[][3] = {{1, 1, 1}, {1, 1.5, 0.5}, {1, 0.8, 1.2}, {2, 1, 1}};
  bool ok = true, order = true, flight = true, bubble = true, third = true, backlog = true;
  double worst = 0;
  int cases = 0;
  for (int p = 1; p <= MAXP; p++)
    for (int m = 1; m <= MAXM; m++) {
      cases++;
      for (size_t c = 0; c < sizeof costs / sizeof *costs; c++) {
        const double tf = costs[c][0], tb = costs[c][1], tw = costs[c][2];
        const sim_result r = simulate(&zb, p, m, tf, tb, tw);
        ok &= r.ok;
        /* from m >= p on; with fewer micro-batches the warm-up is cut short */
        const double want = (p - 1) * (tw <= tb ? tf + tb - tw : tf);
        if (m >= p) {
          worst = fmax(worst, fabs(r.idle - want));
          bubble &= fabs(r.idle - want) < 1e-9;
        }
        if (c == 0 && m >= p) {
          const sim_result one = simulate(&fb, p, m, tf, tb, tw);
          third &= fabs(3 * r.idle - one.idle) < 1e-9;
        }
      }
      const sim_result r = simulate(&zb, p, m, 1, 1, 1);
      for (int s = 0; s < p; s++) {
        int slots[MAXV];
        const int total = gt_schedule_chunk_slots(&zb, p, s, m, slots);
        flight &= total == r.in_flight[s][0] && total <= (p < m ? p : m) &&
                  gt_schedule_peak_units(&zb, p, s, m) == r.alive[s];
        order &= order_is_right(&zb, p, s, m);
        /* the W backlog: the sets of what B keeps for W */
        static gt_pipe_op ops[MAXOPS];
        gt_schedule_build(&zb, p, s, m, ops);
        int pending = 0, most = 0;
        for (int i = 0; i < gt_schedule_ops(&zb, m); i++) {
          pending += ops[i].pass == GT_PASS_B ? 1 : ops[i].pass == GT_PASS_W ? -1 : 0;
          most = pending > most ? pending : most;
        }
        backlog &= gt_schedule_w_backlog(&zb, p, s, m) == most &&
                   most == (s + 1 < m ? s + 1 : m) && gt_schedule_w_backlog(&fb, p, s, m) == 0;
      }
    }
  tap_ok(ok && cases > 0, "zb-h1: every stage list finishes for %d (p <= %d, m <= %d) cases at "
         "4 cost ratios (no deadlock, each W after its B)", cases, MAXP, MAXM);
  tap_ok(order, "zb-h1: each micro-batch once F, B and W, in order");
  tap_ok(flight, "zb-h1: units alive from F to W = gt_schedule_chunk_slots <= min(p, m)");
  tap_ok(bubble, "zb-h1: idle time per stage (p-1)(tf+tb-tw) at tw <= tb, (p-1) tf beyond, "
         "for m >= p (worst deviation %.1e)", worst);
  tap_ok(third, "zb-h1: a third of 1F1B's idle time at equal F, B, W costs");
  tap_ok(backlog, "zb-h1: at most min(s + 1, m) micro-batches between B and W on stage s "
         "(gt_schedule_w_backlog; 0 for 1f1b)");
  gt_pipe_op ops[12];
  gt_schedule_build(&zb, 2, 0, 4, ops);
  static const int want[12][2] = {{0, 0}, {0, 1}, {1, 0}, {2, 0}, {0, 2}, {1, 1},
                                  {2, 1}, {0, 3}, {1, 2}, {2, 2}, {1, 3}, {2, 3}};
  bool same = true;
  for (int i = 0; i < 12; i++)
    same &= (int)ops[i].pass == want[i][0] && ops[i].mb == want[i][1] && ops[i].chunk == 0;
  gt_schedule_build(&zb, 2, 1, 4, ops);
  static const int want1[12][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}, {0, 2},
                                   {1, 2}, {2, 1}, {0, 3}, {1, 3}, {2, 2}, {2, 3}};
  for (int i = 0; i < 12; i++)
    same &= (int)ops[i].pass == want1[i][0] && ops[i].mb == want1[i][1];
  tap_ok(same, "zb-h1, p = 2, m = 4: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3 and F0 B0 F1 B1 W0 "
         "F2 B2 W1 F3 B3 W2 W3, by hand");
}

/* PipeDream-2BW over K steps: stage s runs gt_schedule_window for steps
 * 0 .. K-1 (the first not primed, the last not priming), micro-batch g = t m
 * + mb of batch t one stream across the steps. What else holds a stage
 * back is the trainer's, not the schedule's: `policy` models the update of
 * each step (the global gradient norm of clipping needs every stage's
 * gradient of the batch):
 *   TBW_FREE      nothing (stages update on their own),
 *   TBW_DEFERRED  two gradient buffers: a batch's forwards wait for every
 *                 stage's last B of the batch two before (its weights),
 *   TBW_LAZY      one gradient buffer: a batch's B's wait for every stage's
 *                 last B of the batch before (the buffer is updated from),
 *   TBW_BARRIER   every stage's step starts once every stage ended the last.
 * Returns false on a deadlock or a broken order; *period is the most, over
 * stages, of the mean time a step takes between the ends of steps 1 and
 * K - 2 (the steady state), *alive[s] the most micro-batches alive. */
enum { TBW_FREE, TBW_DEFERRED, TBW_LAZY, TBW_BARRIER };
#define TBW_K 6
static bool simulate_2bw(int p, int m, double tf, double tb, int policy, double *period,
                         int *alive)
{
  static gt_pipe_op ops[MAXP][TBW_K * 3 * MAXM];
  static int step_of[MAXP][TBW_K * 3 * MAXM];
  static double f_end[MAXP][(TBW_K + 1) * MAXM], b_end[MAXP][(TBW_K + 1) * MAXM];
  int n[MAXP] = {0}, next[MAXP] = {0}, live[MAXP] = {0}, f_next[MAXP] = {0}, b_next[MAXP] = {0};
  double clock[MAXP] = {0}, step_end[MAXP][TBW_K];
  for (int s = 0; s < p; s++) {
    alive[s] = 0;
    for (int t = 0; t < TBW_K; t++)
      step_end[s][t] = -1;
    for (int t = 0; t < TBW_K; t++) {
      const int k = gt_schedule_window(p, s, m, t > 0, t + 1 < TBW_K, ops[s] + n[s]);
      for (int i = 0; i < k; i++) {
        gt_pipe_op *op = &ops[s][n[s] + i];
        op->mb += (t + op->next) * m; /* the stream's numbering */
        step_of[s][n[s] + i] = t;
      }
      n[s] += k;
    }
    for (int g = 0; g < TBW_K * m; g++)
      f_end[s][g] = b_end[s][g] = -1;
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; s++) {
      if (next[s] == n[s])
        continue;
      const gt_pipe_op op = ops[s][next[s]];
      const int g = op.mb, batch = g / m, t = step_of[s][next[s]];
      double ready = 0;
      bool wait = false;
      if (op.pass == GT_PASS_F) {
        if (g != f_next[s])
          return false; /* forwards in stream order */
        wait = s > 0 && f_end[s - 1][g] < 0;
        ready = s > 0 ? f_end[s - 1][g] : 0;
      } else {
        if (g != b_next[s] || f_end[s][g] < 0)
          return false; /* backwards in stream order, after their forward */
        wait = s < p - 1 && b_end[s + 1][g] < 0;
        ready = s < p - 1 ? b_end[s + 1][g] : 0;
      }
      /* the trainer's dependency on every stage */
      const int need_batch = policy == TBW_DEFERRED && op.pass == GT_PASS_F ? batch - 2
                             : policy == TBW_LAZY && op.pass == GT_PASS_B   ? batch - 1
                                                                            : -1;
      for (int r = 0; r < p && need_batch >= 0; r++) {
        const double last = b_end[r][need_batch * m + m - 1];
        wait |= last < 0;
        ready = fmax(ready, last);
      }
      if (policy == TBW_BARRIER && t > 0)
        for (int r = 0; r < p; r++) {
          wait |= step_end[r][t - 1] < 0;
          ready = fmax(ready, step_end[r][t - 1]);
        }
      if (wait)
        continue;
      clock[s] = fmax(clock[s], ready) + (op.pass == GT_PASS_F ? tf : tb);
      if (op.pass == GT_PASS_F) {
        f_end[s][g] = clock[s];
        f_next[s]++;
        alive[s] = ++live[s] > alive[s] ? live[s] : alive[s];
      } else {
        b_end[s][g] = clock[s];
        b_next[s]++;
        live[s]--;
      }
      if (next[s] + 1 == n[s] || step_of[s][next[s] + 1] != t)
        step_end[s][t] = clock[s]; /* its last operation of step t */
      next[s]++;
      progress = true;
    }
  }
  *period = 0;
  for (int s = 0; s < p; s++) {
    if (next[s] != n[s] || f_next[s] != TBW_K * m || b_next[s] != TBW_K * m)
      return false; /* a deadlock, or a micro-batch left out */
    *period = fmax(*period, (step_end[s][TBW_K - 2] - step_end[s][1]) / (TBW_K - 3));
  }
  return true;
}

static void test_2bw(void)
{
  static const double costs[][2] = {{1, 2}, {1, 1}, {2, 3}};
  bool ok = true, slots = true, free_zero = true, deferred_zero = true, order = true;
  int cases = 0;
  double lazy_worst = 0, barrier_worst = 0;
  for (int p = 1; p <= MAXP; p++)
    for (int m = p; m <= MAXM; m++) {
      cases++;
      for (size_t c = 0; c < sizeof costs / sizeof *costs; c++) {
        const double tf = costs[c][0], tb = costs[c][1], unit = m * (tf + tb);
        double per[4];
        int alive[MAXP];
        for (int pol = TBW_FREE; pol <= TBW_BARRIER; pol++) {
          ok &= simulate_2bw(p, m, tf, tb, pol, &per[pol], alive);
          for (int s = 0; pol == TBW_FREE && s < p; s++)
            slots &= alive[s] == (p - s < m ? p - s : m);
        }
        free_zero &= fabs(per[TBW_FREE] - unit) < 1e-9;
        deferred_zero &= fabs(per[TBW_DEFERRED] - unit) < 1e-9;
        order &= per[TBW_LAZY] <= per[TBW_BARRIER] + 1e-9 && per[TBW_LAZY] >= unit - 1e-9;
        lazy_worst = fmax(lazy_worst, per[TBW_LAZY] / unit - 1);
        barrier_worst = fmax(barrier_worst, per[TBW_BARRIER] / unit - 1);
      }
    }
  tap_ok(ok, "pipedream-2bw: %d (p <= %d, p <= m <= %d) cases over %d steps finish under "
         "each update policy, each micro-batch once F and once B per stage in stream order",
         cases, MAXP, MAXM, TBW_K);
  tap_ok(slots, "pipedream-2bw: stage s holds at most min(p - s, m) micro-batches across "
         "steps (1F1B's slots)");
  tap_ok(free_zero, "pipedream-2bw: a step takes m (tf + tb) in the steady state: no bubble");
  tap_ok(deferred_zero, "pipedream-2bw: still none when a batch's forwards wait for the "
         "update of the batch two before (two gradient buffers)");
  tap_ok(order, "pipedream-2bw: one gradient buffer (B's wait for the last batch's update) "
         "costs at most a barrier between steps (worst: +%.0f%% and +%.0f%% of the step)",
         100 * lazy_worst, 100 * barrier_worst);
  /* p = 2, m = 8, tf = 1, tb = 2, for the record */
  for (int pp = 2; pp <= 4; pp += 2) {
    double per[4];
    int alive[MAXP];
    for (int pol = TBW_FREE; pol <= TBW_BARRIER; pol++)
      simulate_2bw(pp, 8, 1, 2, pol, &per[pol], alive);
    tap_diag("pipedream-2bw p = %d, m = 8, tf = 1, tb = 2: step %.0f free, %.0f two gradient "
             "buffers, %.0f one buffer, %.0f barrier; 1F1B %.0f", pp, per[TBW_FREE],
             per[TBW_DEFERRED], per[TBW_LAZY], per[TBW_BARRIER], 8 * 3.0 + (pp - 1) * 3.0);
  }
  /* a step that starts and ends empty is 1F1B's, what gt_schedule_build
   * gives pipedream-2bw (evaluation; the slots) */
  const gt_schedule tbw = gt_schedule_of(GT_SCHEDULE_2BW, 1);
  const gt_schedule one = gt_schedule_of(GT_SCHEDULE_1F1B, 1);
  bool empty_same = gt_schedule_ops(&tbw, 8) == 16 && gt_schedule_streams(&tbw) &&
                    !gt_schedule_streams(&one);
  for (int p = 1; p <= MAXP && empty_same; p++)
    for (int m = p; m <= MAXM && empty_same; m++)
      for (int s = 0; s < p && empty_same; s++) {
        static gt_pipe_op a[MAXOPS], b[MAXOPS], c[MAXOPS];
        int sa[MAXV], sb[MAXV];
        const int n = gt_schedule_window(p, s, m, false, false, a);
        gt_schedule_build(&tbw, p, s, m, b);
        gt_schedule_build(&one, p, s, m, c);
        empty_same = n == 2 * m && memcmp(a, b, sizeof *a * (size_t)n) == 0 &&
                     memcmp(b, c, sizeof *b * (size_t)n) == 0 &&
                     gt_schedule_chunk_slots(&tbw, p, s, m, sa) ==
                         gt_schedule_chunk_slots(&one, p, s, m, sb);
      }
  tap_ok(empty_same, "pipedream-2bw: a step from and to an empty pipeline is 1F1B's list "
         "(gt_schedule_build, the same slots)");
  gt_pipe_op w[12];
  const int k = gt_schedule_window(2, 0, 4, true, true, w);
  static const int want[8][3] = {{0, 1, 0}, {1, 0, 0}, {0, 2, 0}, {1, 1, 0},
                                 {0, 3, 0}, {1, 2, 0}, {0, 0, 1}, {1, 3, 0}};
  bool same = k == 8;
  for (int i = 0; same && i < 8; i++)
    same &= (int)w[i].pass == want[i][0] && w[i].mb == want[i][1] && w[i].next == want[i][2];
  tap_ok(same, "pipedream-2bw, p = 2, m = 4, stage 0, primed: F1 B0 F2 B1 F3 B2 F0' B3 "
         "(F0' of the next batch), by hand");
}

static void test_schedules(void)
{
  static const char *const names[] = {"gpipe", "1f1b", "interleaved:2", "interleaved:3",
                                      "interleaved:4"};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    gt_schedule sc;
    if (!tap_ok(gt_schedule_parse(names[k], &sc) == GT_SUCCESS, "%s parses", names[k]))
      continue;
    const int V = sc.chunks;
    const bool inter = sc.kind == GT_SCHEDULE_INTERLEAVED;
    bool all_ok = true, bubble_ok = true, flight_ok = true, order_ok = true, bound_ok = true;
    double worst_bubble = 0;
    int cases = 0;
    for (int p = inter ? 2 : 1; p <= MAXP; p++)
      for (int m = 1; m <= MAXM; m++) {
        if (gt_schedule_check(&sc, p, m, 64) != GT_SUCCESS) {
          gt_error_clear();
          continue;
        }
        cases++;
        sim_result r = simulate(&sc, p, m, 1.0, 2.0, 0.0);
        all_ok &= r.ok;
        double theory = (double)(p - 1) / ((double)V * m + p - 1);
        worst_bubble = fmax(worst_bubble, fabs(r.bubble - theory));
        bubble_ok &= fabs(r.bubble - theory) < 1e-12;
        for (int s = 0; s < p; s++) {
          int want[MAXV], sum = 0;
          const int total = gt_schedule_chunk_slots(&sc, p, s, m, want);
          for (int c = 0; c < V; c++) {
            flight_ok &= r.in_flight[s][c] == want[c];
            sum += r.in_flight[s][c];
          }
          flight_ok &= total == sum && gt_schedule_in_flight(&sc, p, s, m) == total &&
                       gt_schedule_peak_units(&sc, p, s, m) == r.alive[s];
          /* the activation bound: 1f1b at most p - s micro-batches; the
           * interleaved schedule keeps at most w + 1 units of 1/V of a
           * stage alive at once (w = min(2 (p-s-1) + (V-1) p, m V - 1), the
           * warm-up: Megatron's bound), and its per-chunk slot pools hold
           * at most (V - 1) p units more */
          if (sc.kind == GT_SCHEDULE_1F1B) {
            bound_ok &= total <= p - s;
          } else if (inter) {
            int w = 2 * (p - s - 1) + (V - 1) * p;
            w = w < m * V - 1 ? w : m * V - 1;
            bound_ok &= r.alive[s] == w + 1 && gt_schedule_peak_units(&sc, p, s, m) == w + 1 &&
                        total <= w + 1 + (V - 1) * p;
            if (!bound_ok)
              tap_diag("p %d m %d s %d: %d alive, %d slots, bound %d + %d", p, m, s,
                       r.alive[s], total, w + 1, (V - 1) * p);
          }
          order_ok &= order_is_right(&sc, p, s, m);
        }
      }
    tap_ok(all_ok && cases > 0,
           "%s: every stage list finishes for %d (p <= %d, m <= %d) cases (no deadlock, F "
           "before B)",
           names[k], cases, MAXP, MAXM);
    tap_ok(order_ok, "%s: each unit once forward and once backward, per chunk in order",
           names[k]);
    tap_ok(flight_ok, "%s: units alive per stage and chunk = gt_schedule_chunk_slots", names[k]);
    tap_ok(bound_ok, "%s: activation bound %s", names[k],
           sc.kind == GT_SCHEDULE_GPIPE ? "m (none)"
           : inter                      ? "w + 1 units alive (w: the warm-up), slots <= w + 1 + (V-1) p"
                                        : "p - s micro-batches");
    tap_ok(bubble_ok, "%s: simulated bubble = (p-1)/(V m+p-1) (worst deviation %.1e)", names[k],
           worst_bubble);
  }
  gt_schedule k;
  tap_ok(gt_schedule_parse("1f1b", &k) == GT_SUCCESS && k.kind == GT_SCHEDULE_1F1B &&
             k.chunks == 1 && gt_schedule_parse("gpipe", &k) == GT_SUCCESS &&
             k.kind == GT_SCHEDULE_GPIPE && gt_schedule_parse("interleaved:3", &k) == GT_SUCCESS &&
             k.kind == GT_SCHEDULE_INTERLEAVED && k.chunks == 3 &&
             strcmp(gt_schedule_name(&k), "interleaved:3") == 0 &&
             gt_schedule_parse("zigzag", &k) == GT_ERR_INPUT &&
             gt_schedule_parse("interleaved:1", &k) == GT_ERR_INPUT &&
             gt_schedule_parse("interleaved:", &k) == GT_ERR_INPUT &&
             gt_schedule_parse("interleaved:2x", &k) == GT_ERR_INPUT &&
             gt_schedule_parse("interleaved:65", &k) == GT_ERR_INPUT,
         "schedule names parse, unknown ones and bad chunk counts are refused");
  gt_error_clear();
  gt_schedule_parse("interleaved:2", &k);
  tap_ok(gt_schedule_check(&k, 1, 4, 8) == GT_ERR_INPUT &&
             strstr(gt_error_message(), "pp = 1") != NULL,
         "interleaved needs pp >= 2");
  gt_error_clear();
  tap_ok(gt_schedule_check(&k, 2, 3, 8) == GT_ERR_INPUT &&
             strstr(gt_error_message(), "multiple of pp = 2") != NULL,
         "interleaved needs m a multiple of pp");
  gt_error_clear();
  tap_ok(gt_schedule_check(&k, 4, 4, 7) == GT_ERR_INPUT &&
             strstr(gt_error_message(), "needs 8 virtual stages") != NULL,
         "interleaved needs p V blocks");
  gt_error_clear();
  /* the exact list of Megatron's example: p = 2, V = 2, m = 4, stage 0:
   * warm-up 2 (p-1) + (V-1) p = 4 forwards F0c0 F1c0 F0c1 F1c1, then
   * F2c0 B0c1, F3c0 B1c1, F2c1 B0c0, F3c1 B1c0, then B2c1 B3c1 B2c0 B3c0 */
  gt_pipe_op ops[16];
  gt_schedule_build(&k, 2, 0, 4, ops);
  static const int want[16][3] = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1},
                                  {0, 2, 0}, {1, 0, 1}, {0, 3, 0}, {1, 1, 1},
                                  {0, 2, 1}, {1, 0, 0}, {0, 3, 1}, {1, 1, 0},
                                  {1, 2, 1}, {1, 3, 1}, {1, 2, 0}, {1, 3, 0}};
  bool same = true;
  for (int i = 0; i < 16; i++)
    same &= (int)ops[i].pass == want[i][0] && ops[i].mb == want[i][1] && ops[i].chunk == want[i][2];
  tap_ok(same, "interleaved:2, p = 2, m = 4, stage 0: Megatron's order, by hand");
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
  test_zbh1();
  test_2bw();
  test_split();
  test_buckets(rank);
  MPI_Finalize();
  return tap_done();
}
