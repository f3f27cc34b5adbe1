/*
 * test_costmodel.c - the planner's cost model (costmodel.h):
 *   - the FLOPs and bytes of every kernel of a block and of the head for a
 *     small shape, against counts done here by hand (not by the code);
 *   - bubble fractions of gpipe, 1f1b and interleaved:V;
 *   - the alpha-beta ring all-reduce, reduce-scatter and all-gather;
 *   - the roofline of one kernel;
 *   - the memory of a layout equal to gt_mem_plan's (what plan --memory
 *     prints);
 *   - the search (valid, sorted layouts) and CPU time-slicing;
 *   - the cluster file's errors (one line, GT_ERR_INPUT);
 *   - the published results (benchmarks/plan/published.tsv): mean absolute
 *     error <= 3.5% and largest <= 8% on each table.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test_util.h"
#include "gridtrain/costmodel.h"
#include "gridtrain/memory.h"

static const char *srcdir(void)
{
  const char *s = getenv("GT_SRCDIR");
  return s && *s ? s : ".";
}

static const gt_kernel *find(const gt_kernel *k, int n, const char *name)
{
  for (int i = 0; i < n; i++)
    if (strcmp(k[i].name, name) == 0)
      return &k[i];
  return NULL;
}

/* A small cluster: one device per rank, simple numbers. */
static void small_cluster(gt_cluster *c, bool flash)
{
  gt_cluster_defaults(c);
  const char *text = "[cluster]\nranks_per_node = 4\n[compute]\npeak_fp32 = 1e12\n"
                     "peak_bf16 = 4e12\nmemory = 1e9\nmemory_bw = 1e11\n[network]\n"
                     "intra_beta = 1e-10\n";
  if (gt_cluster_parse(c, text, "small.in") != GT_SUCCESS)
    gt_error_print(0);
  c->flash = flash;
}

static void test_kernels(void)
{
  /* L2 H4 C64 T32 V256; mbs 2 (N = 64 tokens), tp 2, fp32 (4 bytes) */
  const gt_gpt_shape s = {2, 4, 64, 32, 256, .arch = GT_MODEL_GPT};
  gt_cluster c;
  small_cluster(&c, true);
  gt_kernel k[GT_COST_MAX_KERNELS];
  int n = gt_cost_block_kernels(&s, 2, 32, 2, false, GT_F32, &c, k);
  tap_ok(n == 10, "flash block: 10 kernels (got %d)", n);
  const gt_kernel *q = find(k, n, "qkv"), *p = find(k, n, "attn_proj"), *f = find(k, n, "fc"),
                  *f2 = find(k, n, "fc_proj"), *a = find(k, n, "attention"),
                  *l1 = find(k, n, "ln_1");
  tap_ok(q && p && f && f2 && a && l1, "block kernels are named");
  if (!(q && p && f && f2 && a && l1))
    return;
  /* qkv: 2 N C (3C/tp) = 2 * 64 * 64 * 96 */
  tap_ok(q->flops == 786432.0, "qkv forward FLOPs 786432 (got %.0f)", q->flops);
  /* bytes: 4 * (N*C + C*96 + N*96) = 4 * (4096 + 6144 + 6144) */
  tap_ok(q->bytes == 65536.0, "qkv forward bytes 65536 (got %.0f)", q->bytes);
  tap_ok(q->bwd_flops == 2 * 786432.0 && q->nbwd == 2, "qkv backward: two products");
  tap_ok(p->flops == 262144.0, "attn_proj FLOPs 2*64*32*64 = 262144 (got %.0f)", p->flops);
  tap_ok(f->flops == 1048576.0 && f2->flops == 1048576.0,
         "fc and fc_proj FLOPs 2*64*64*128 = 1048576");
  /* the products of a block: 24 N C^2 / tp */
  tap_ok(q->flops + p->flops + f->flops + f2->flops == 24.0 * 64 * 64 * 64 / 2,
         "a block's products: 24 N C^2 / tp");
  /* causal flash attention: q.k and p.v over T/2 keys on average: 2 N T C/tp */
  tap_ok(a->flops == 2.0 * 64 * 32 * 32, "flash attention FLOPs 131072 (got %.0f)", a->flops);
  tap_ok(a->attn_core && !q->attn_core, "the attention kernel is the attention core");
  /* LayerNorm: reads and writes N x C */
  tap_ok(l1->bytes == 2.0 * 4 * 64 * 64 && l1->bwd_bytes == 3.0 * 4 * 64 * 64,
         "ln_1 bytes 32768 forward, 49152 backward");
  /* sequence parallel: LayerNorm on N/tp rows */
  n = gt_cost_block_kernels(&s, 2, 32, 2, true, GT_F32, &c, k);
  l1 = find(k, n, "ln_1");
  tap_ok(l1 && l1->bytes == 2.0 * 4 * 32 * 64, "sequence parallel: ln_1 on 32 rows");
  /* materialized attention (bf16): scores and p.v per head, (mbs Hl) = 4
   * heads of T x T x hs = 32 x 32 x 16 */
  small_cluster(&c, false);
  c.dropout = true;
  n = gt_cost_block_kernels(&s, 2, 32, 2, false, GT_BF16, &c, k);
  const gt_kernel *sc = find(k, n, "scores"), *sm = find(k, n, "softmax"),
                  *pv = find(k, n, "pv"), *dr = find(k, n, "attn_dropout");
  tap_ok(n == 13 && sc && sm && pv && dr, "materialized block with dropout: 13 kernels");
  if (sc && sm && pv && dr) {
    tap_ok(sc->flops == 2.0 * 4 * 32 * 32 * 16 && pv->flops == 2.0 * 4 * 32 * 32 * 16,
           "scores and p.v: 131072 FLOPs each");
    /* scores write S2 = 4 * 32 * 32 = 4096 elements and read q, k: 2 * (2 N Cl + S2) */
    tap_ok(sc->bytes == 2.0 * (2 * 64 * 32 + 4096), "scores bytes 16384 (got %.0f)",
           sc->bytes);
    tap_ok(sm->bytes == 2.0 * 2 * 4096 && dr->bytes == (2.0 * 2 + 1) * 4096,
           "softmax 16384 bytes, dropout 20480 (mask included)");
  }
  /* head: logits over ceil(V/tp) = 128 rows: 2 N C 128 */
  n = gt_cost_head_kernels(&s, 2, 32, 2, false, GT_F32, &c, k);
  const gt_kernel *lg = find(k, n, "logits");
  tap_ok(lg && lg->flops == 2.0 * 64 * 64 * 128, "logits FLOPs 1048576");
}

static void test_formulas(void)
{
  tap_ok(gt_cost_bubble_fraction(GT_SCHEDULE_GPIPE, 4, 8, 1, 0) == 3.0 / 8,
         "gpipe p=4 m=8: bubble 3/8 of the compute");
  tap_ok(gt_cost_bubble_fraction(GT_SCHEDULE_1F1B, 4, 8, 1, 0) == 3.0 / 8, "1f1b: the same");
  tap_ok(gt_cost_bubble_fraction(GT_SCHEDULE_INTERLEAVED, 4, 8, 2, 0) == 3.0 / 16,
         "interleaved:2: (p-1)/(V m) = 3/16");
  tap_ok(gt_cost_bubble_fraction(GT_SCHEDULE_1F1B, 1, 8, 1, 0) == 0, "one stage: no bubble");
  tap_ok(gt_cost_bubble_fraction(GT_SCHEDULE_ZBH1, 4, 8, 1, 0) == 3.0 / 24,
         "zb-h1: (p-1)/(3 m) = 3/24, a third of 1f1b's");
  tap_ok(gt_cost_bubble_fraction(GT_SCHEDULE_2BW, 4, 8, 1, 0) == 0,
         "pipedream-2bw at zero 0: none, its update deferred into the next step");
  tap_ok(fabs(gt_cost_bubble_fraction(GT_SCHEDULE_2BW, 4, 8, 1, 1) - 6.0 / 24) < 1e-15,
         "pipedream-2bw: 2 (p-1)/(3 m) = 6/24, the wait at its step's reductions");
  /* ring all-reduce: 2(n-1) alpha + 2 (n-1)/n bytes beta */
  const double ar = gt_cost_allreduce(4, 1e6, 1e-6, 1e-9, 0, 1);
  tap_ok(fabs(ar - (6e-6 + 1.5e-3)) < 1e-15, "ring all-reduce n=4, 1 MB: %.9g s", ar);
  tap_ok(fabs(gt_cost_allreduce(4, 1e6, 1e-6, 1e-9, 2e-10, 0.5) -
              (6e-6 + 3e-3 + 0.75 * 1e6 * 2e-10)) < 1e-15,
         "all-reduce with gamma and half the bandwidth");
  tap_ok(fabs(gt_cost_reduce_scatter(4, 1e6, 1e-6, 1e-9, 0, 1) - (3e-6 + 0.75e-3)) < 1e-15 &&
             fabs(gt_cost_allgather(4, 1e6, 1e-6, 1e-9, 1) - (3e-6 + 0.75e-3)) < 1e-15,
         "ring reduce-scatter and all-gather: half an all-reduce");
  tap_ok(gt_cost_allreduce(1, 1e6, 1, 1, 1, 1) == 0, "a group of one moves nothing");
  gt_cluster c;
  small_cluster(&c, true);
  /* 1e9 FLOPs at 1e12: 1 ms; 1e6 bytes at 1e11: 10 us -> compute-bound */
  tap_ok(fabs(gt_cost_kernel_time(&c, GT_F32, 1e9, 1e6, 1.0) - 1e-3) < 1e-15,
         "roofline: compute-bound kernel");
  tap_ok(fabs(gt_cost_kernel_time(&c, GT_BF16, 1e6, 1e9, 1.0) - 1e-2) < 1e-15,
         "roofline: memory-bound kernel");
  tap_ok(fabs(gt_cost_kernel_time(&c, GT_F32, 1e9, 0, 0.5) - 2e-3) < 1e-15,
         "half a device takes twice as long");
}

static void tiny_config(gt_config *cfg)
{
  gt_config_defaults(cfg);
  snprintf(cfg->data.train, sizeof cfg->data.train, "x.h5");
  cfg->model.layers = 4, cfg->model.heads = 4, cfg->model.dim = 128;
  cfg->model.seq_len = 128, cfg->model.vocab = 256;
  cfg->data.batch = 32, cfg->data.microbatches = 4;
  cfg->grid.dp = 2, cfg->grid.pp = 2, cfg->grid.tp = 2;
}

static void test_memory_and_search(void)
{
  gt_config cfg;
  tiny_config(&cfg);
  gt_cluster c;
  small_cluster(&c, true);
  c.ranks_per_node = 8;
  const char *zeros[] = {"0", "1", "2", "3"};
  for (int z = 0; z < 4; z++) {
    cfg.parallel.zero = z;
    cfg.model.recompute = z == 2 ? GT_RECOMPUTE_BLOCK : GT_RECOMPUTE_NONE;
    gt_layout l;
    gt_cost cost;
    int st = gt_layout_resolve(&cfg, 8, &l);
    if (st == GT_SUCCESS)
      st = gt_cost_evaluate(&cfg, &l, 8, &c, &cost);
    gt_mem_account acc[8];
    double worst = 0;
    if (st == GT_SUCCESS)
      st = gt_mem_plan(&cfg, &l, false, acc, 8);
    for (int s = 0; st == GT_SUCCESS && s < l.pp; s++)
      worst = fmax(worst, gt_mem_total(&acc[s]));
    tap_ok(st == GT_SUCCESS && cost.memory == worst,
           "zero %s: the cost model's memory equals gt_mem_plan's (%.0f vs %.0f bytes)",
           zeros[z], st == GT_SUCCESS ? cost.memory : -1.0, worst);
    if (st != GT_SUCCESS)
      gt_error_clear();
  }
  cfg.parallel.zero = 0;
  gt_plan_pins pins;
  memset(&pins, 0, sizeof pins);
  gt_plan_row *rows = NULL;
  int n = 0;
  int st = gt_plan_search(&cfg, &pins, 8, &c, &rows, &n);
  tap_ok(st == GT_SUCCESS && n > 100, "search on 8 ranks: %d layouts", n);
  bool valid = true, sorted = true;
  for (int i = 0; st == GT_SUCCESS && i < n; i++) {
    const gt_layout *l = &rows[i].layout;
    valid &= l->dp * l->pp * l->tp == 8 && (long)l->dp * l->mbs * l->micro == 32 &&
             4 % l->tp == 0 && rows[i].cost.step > 0;
    if (i > 0 && rows[i].cost.fits == rows[i - 1].cost.fits)
      sorted &= rows[i].cost.tokens_per_s <= rows[i - 1].cost.tokens_per_s;
    if (i > 0)
      sorted &= !(rows[i].cost.fits && !rows[i - 1].cost.fits);
  }
  tap_ok(valid, "every layout: dp x pp x tp = 8, dp x mbs x m = 32, tp divides the heads");
  /* every layout of the search is what its deck keys resolve to (what the
   * trainer would run), and its memory is gt_mem_plan's */
  int same = 0, resolved = 0, checked = 0;
  for (int i = 0; st == GT_SUCCESS && i < n; i += 1 + i % 3) {
    const gt_layout *l = &rows[i].layout;
    gt_config lc = cfg;
    gt_layout_to_config(l, &lc);
    gt_layout r;
    gt_mem_account acc[8];
    double worst = 0;
    checked++;
    if (gt_layout_resolve(&lc, 8, &r) != GT_SUCCESS || !gt_layout_equal(&r, l)) {
      gt_error_clear();
      continue;
    }
    resolved++;
    if (gt_mem_plan(&lc, &r, false, acc, 8) != GT_SUCCESS) {
      gt_error_clear();
      continue;
    }
    for (int s = 0; s < r.pp; s++)
      worst = fmax(worst, gt_mem_total(&acc[s]));
    same += worst == rows[i].cost.memory;
  }
  tap_ok(checked > 100 && resolved == checked,
         "%d of %d layouts of the search are what their deck keys resolve to", resolved,
         checked);
  tap_ok(checked > 100 && same == checked,
         "the memory of %d of %d layouts of the search equals gt_mem_plan's", same, checked);
  /* what does not apply is not searched: no ZeRO stage at dp = 1, no sequence
   * parallelism at tp = 1 */
  bool applies = true;
  for (int i = 0; st == GT_SUCCESS && i < n; i++)
    applies &= (rows[i].layout.dp > 1 || rows[i].layout.zero == 0) &&
               (rows[i].layout.tp > 1 || !rows[i].layout.seq_par);
  tap_ok(applies, "no layout of the search has zero > 0 at dp = 1 or sequence parallelism at "
                  "tp = 1");
  tap_ok(sorted, "sorted: fitting layouts first, by predicted tokens/s");
  double parts = 0;
  if (n > 0) {
    const gt_cost *k = &rows[0].cost;
    parts = k->compute + k->tp_comm + k->pp_comm + k->bubble + k->dp_comm + k->optimizer;
    tap_ok(fabs(parts - k->step) <= 1e-9 * k->step, "the parts of a step add up to it");
  }
  pins.tp = true; /* grid.tp = 2 pinned */
  free(rows);
  rows = NULL;
  st = gt_plan_search(&cfg, &pins, 8, &c, &rows, &n);
  bool tp2 = st == GT_SUCCESS;
  for (int i = 0; st == GT_SUCCESS && i < n; i++)
    tp2 &= rows[i].layout.tp == 2;
  tap_ok(tp2, "a pinned tp is kept in every layout");
  free(rows);
  /* 2 cores: 8 ranks of dp do the same work as 2, taking turns */
  gt_cluster cpu;
  small_cluster(&cpu, true);
  cpu.ranks_per_node = 8, cpu.cores_per_node = 2;
  gt_config d;
  tiny_config(&d);
  d.grid.pp = 1, d.grid.tp = 1, d.data.microbatches = 1;
  gt_layout l2, l8;
  gt_cost c2, c8;
  d.grid.dp = 2;
  st = gt_layout_resolve(&d, 2, &l2);
  if (st == GT_SUCCESS)
    st = gt_cost_evaluate(&d, &l2, 2, &cpu, &c2);
  d.grid.dp = 8;
  if (st == GT_SUCCESS)
    st = gt_layout_resolve(&d, 8, &l8);
  if (st == GT_SUCCESS)
    st = gt_cost_evaluate(&d, &l8, 8, &cpu, &c8);
  tap_ok(st == GT_SUCCESS && c8.step >= 0.95 * c2.step,
         "2 cores: a step of dp=8 takes no less than dp=2's, the same work in turns (%.3g s "
         "vs %.3g s)", c8.step, c2.step);
}

static void test_cluster_errors(void)
{
  struct {
    const char *text, *expect;
  } bad[] = {
    {"[compute]\nflops = 3\n", "small.in:2: unknown key 'flops' in [compute]"},
    {"[gpu]\nx = 1\n", "small.in:2: unknown section [gpu]"},
    {"[compute]\npeak_fp32 = fast\n", "peak_fp32 = 'fast' is not valid"},
    {"[compute]\nmemory = 1e9\nmemory = 2e9\n", "set twice (first on line 2)"},
    {"[software]\nattention = sparse\n", "expected materialized or flash"},
    {"[compute\n", "cannot parse this line"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    gt_cluster c;
    gt_cluster_defaults(&c);
    int st = gt_cluster_parse(&c, bad[i].text, "small.in");
    const char *msg = gt_error_message();
    tap_ok(st == GT_ERR_INPUT && strstr(msg, bad[i].expect) && !strchr(msg, '\n'),
           "cluster error %zu: one line with '%s' (%s)", i, bad[i].expect, msg);
    gt_error_clear();
  }
  gt_cluster c;
  gt_cluster_defaults(&c);
  int st = gt_cluster_parse(&c, "[cluster]\nranks_per_node = 8\n", "part.in");
  if (st == GT_SUCCESS)
    st = gt_cluster_check(&c);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "[compute] peak_fp32 is required"),
         "a missing required key is named (%s)", gt_error_message());
  gt_error_clear();
  gt_cluster_defaults(&c);
  tap_ok(gt_cluster_load(&c, "/nonexistent/cluster.in") == GT_ERR_INPUT &&
             strstr(gt_error_message(), "cannot open cluster file"),
         "a missing file: cannot open cluster file");
  gt_error_clear();
}

static void test_published(void)
{
  char a100[1024], meg[1024], tsv[1024];
  snprintf(a100, sizeof a100, "%s/inputs/clusters/a100-80gb-selene.in", srcdir());
  snprintf(meg, sizeof meg, "%s/benchmarks/plan/megatron.in", srcdir());
  snprintf(tsv, sizeof tsv, "%s/benchmarks/plan/published.tsv", srcdir());
  gt_cluster c;
  gt_cluster_defaults(&c);
  int st = gt_cluster_load(&c, a100);
  if (st == GT_SUCCESS)
    st = gt_cluster_load(&c, meg);
  if (st == GT_SUCCESS)
    st = gt_cluster_check(&c);
  gt_plan_check chk;
  char *table = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&table, &len);
  if (st == GT_SUCCESS && mem)
    st = gt_plan_validate(tsv, &c, mem, &chk);
  if (mem)
    fclose(mem);
  for (char *save = NULL, *line = table ? strtok_r(table, "\n", &save) : NULL; line;
       line = strtok_r(NULL, "\n", &save))
    tap_diag("%s", line); /* every row's prediction and error */
  free(table);
  tap_ok(st == GT_SUCCESS, "the published results load and evaluate (%s)",
         st == GT_SUCCESS ? "ok" : gt_error_message());
  if (st != GT_SUCCESS)
    return;
  tap_ok(chk.rows[0] == 10 && chk.rows[1] == 8, "10 rows of Table 1, 8 of Table 5");
  tap_ok(chk.mae[0] <= 0.035 && chk.max[0] <= 0.08,
         "Megatron SC'21 Table 1: mean error %.2f%% <= 3.5%%, largest %.2f%% <= 8%%",
         100 * chk.mae[0], 100 * chk.max[0]);
  tap_ok(chk.mae[1] <= 0.035 && chk.max[1] <= 0.08,
         "Korthikanti et al. Table 5: mean error %.2f%% <= 3.5%%, largest %.2f%% <= 8%%",
         100 * chk.mae[1], 100 * chk.max[1]);
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  tap_init(true);
  test_kernels();
  test_formulas();
  test_memory_and_search();
  test_cluster_errors();
  test_published();
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
