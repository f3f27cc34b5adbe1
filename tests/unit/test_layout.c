/*
 * test_layout.c - the one layout resolver (layout.h):
 *   - auto sizes (0) resolved against the rank count, and the refusals;
 *   - the checks against the model and the batch, each with the message
 *     that says what to change;
 *   - what applies: ZeRO only with dp > 1, sequence parallelism only with
 *     tp > 1; the schedule parsed and checked against pp, the micro-batches
 *     and the layers; the micro-batch size;
 *   - a resolved layout written back as deck keys resolves to itself, and
 *     keys that do not apply (zero at dp = 1) resolve to another layout;
 *   - the one-line description.
 * Expected values are written out here, not computed by the code.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>
#include <string.h>

#include "../test_util.h"
#include "gridtrain/layout.h"

/* A model every test layout fits: 4 heads, 4 layers, batch 48 in 1
 * micro-batch. */
static void small_config(gt_config *cfg)
{
  gt_config_defaults(cfg);
  cfg->model.heads = 4;
  cfg->model.dim = 128;
  cfg->model.layers = 4;
  cfg->model.vocab = 256;
  cfg->model.seq_len = 16;
  cfg->data.batch = 48;
  cfg->data.microbatches = 1;
  snprintf(cfg->parallel.schedule, sizeof cfg->parallel.schedule, "1f1b");
}

static void expect_sizes(long dp, long pp, long tp, int world, int edp, int epp, int etp)
{
  gt_config cfg;
  small_config(&cfg);
  cfg.grid.dp = dp, cfg.grid.pp = pp, cfg.grid.tp = tp;
  gt_layout l;
  memset(&l, 0, sizeof l);
  gt_error_clear();
  int st = gt_layout_resolve(&cfg, world, &l);
  if (!tap_ok(st == GT_SUCCESS && l.dp == edp && l.pp == epp && l.tp == etp,
              "dp=%ld pp=%ld tp=%ld on %d ranks -> %d x %d x %d (got %d x %d x %d)", dp, pp, tp,
              world, edp, epp, etp, l.dp, l.pp, l.tp))
    tap_diag("status %d: %s", st, gt_error_message());
}

static void expect_error(const gt_config *cfg, int world, const char *needle, const char *what)
{
  gt_layout l;
  gt_error_clear();
  int st = gt_layout_resolve(cfg, world, &l);
  if (!tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), needle), "%s: refused ('%s')",
              what, needle))
    tap_diag("status %d: %s", st, gt_error_message());
}

static void expect_sizes_error(long dp, long pp, long tp, int world, const char *needle)
{
  gt_config cfg;
  small_config(&cfg);
  cfg.grid.dp = dp, cfg.grid.pp = pp, cfg.grid.tp = tp;
  char what[96];
  snprintf(what, sizeof what, "dp=%ld pp=%ld tp=%ld on %d ranks", dp, pp, tp, world);
  expect_error(&cfg, world, needle, what);
}

/* cfg with the sizes dp x pp x tp, resolved on their product */
static int resolve_at(gt_config *cfg, int dp, int pp, int tp, gt_layout *l)
{
  cfg->grid.dp = dp, cfg->grid.pp = pp, cfg->grid.tp = tp;
  gt_error_clear();
  int st = gt_layout_resolve(cfg, dp * pp * tp, l);
  if (st != GT_SUCCESS)
    tap_diag("%d x %d x %d: %s", dp, pp, tp, gt_error_message());
  return st;
}

static void test_sizes(void)
{
  expect_sizes(0, 1, 1, 4, 4, 1, 1);
  expect_sizes(3, 1, 1, 3, 3, 1, 1);
  expect_sizes(0, 2, 0, 8, 4, 2, 1);
  expect_sizes(2, 0, 2, 8, 2, 2, 2);
  expect_sizes(0, 0, 0, 6, 6, 1, 1);
  expect_sizes(2, 3, 1, 6, 2, 3, 1);
  expect_sizes_error(3, 1, 1, 4, "needs 3 ranks but the job has 4");
  expect_sizes_error(0, 3, 1, 4, "does not divide the 4 ranks");
}

static void test_model_checks(void)
{
  gt_config cfg;
  small_config(&cfg);
  cfg.model.layers = 2;
  cfg.data.batch = 12;
  cfg.data.microbatches = 2;
  gt_layout l;
  tap_ok(resolve_at(&cfg, 3, 1, 1, &l) == GT_SUCCESS && l.mbs == 2 && l.micro == 2,
         "dp=3 with batch 12 in 2 micro-batches of 2");
  cfg.grid.dp = 4, cfg.grid.pp = 1, cfg.grid.tp = 1;
  expect_error(&cfg, 4, "batch=12 does not split over dp=4 x microbatches=2", "dp=4");
  cfg.grid.dp = 1, cfg.grid.tp = 3;
  expect_error(&cfg, 3, "tp=3 does not divide [model] heads=4; choose tp in {1, 2, 4}", "tp=3");
  cfg.grid.tp = 1, cfg.grid.pp = 3;
  expect_error(&cfg, 3, "pp=3 pipeline stages need at least 3 layers", "pp=3");
  const int ok[][3] = {{1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {1, 2, 4}, {3, 2, 2}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    tap_ok(resolve_at(&cfg, ok[i][0], ok[i][1], ok[i][2], &l) == GT_SUCCESS,
           "layout %d x %d x %d accepted", ok[i][0], ok[i][1], ok[i][2]);
  cfg.model.vocab = 5; /* tp=4: pieces of 2 rows, the last one would be empty */
  cfg.grid.dp = 1, cfg.grid.pp = 1, cfg.grid.tp = 4;
  expect_error(&cfg, 4, "leaves a tensor-parallel rank without vocabulary rows", "vocab 5");
  cfg.model.vocab = 7; /* pieces of 2, 2, 2 and 1 row: fine */
  tap_ok(resolve_at(&cfg, 1, 1, 4, &l) == GT_SUCCESS, "vocab 7 over tp=4 (padded) accepted");
  cfg.model.heads = 3;
  cfg.grid.tp = 1;
  expect_error(&cfg, 1, "heads=3 does not divide dim=128", "heads 3");
  /* sequence parallelism: 1 sequence of 6 tokens per micro-batch over tp = 4 */
  small_config(&cfg);
  cfg.model.seq_len = 6;
  cfg.data.batch = 2;
  cfg.data.microbatches = 2;
  cfg.parallel.sequence_parallel = true;
  cfg.grid.dp = 1, cfg.grid.pp = 1, cfg.grid.tp = 4;
  expect_error(&cfg, 4, "a micro-batch's 6 tokens", "sequence parallel, 6 tokens over tp=4");
  tap_ok(resolve_at(&cfg, 1, 1, 2, &l) == GT_SUCCESS && l.seq_par,
         "sequence parallel, 6 tokens over tp=2");
}

static void test_what_applies(void)
{
  gt_config cfg;
  small_config(&cfg);
  gt_layout l;
  cfg.parallel.zero = 2;
  int st = resolve_at(&cfg, 1, 2, 2, &l);
  tap_ok(st == GT_SUCCESS && l.zero == 0, "zero = 2 with dp = 1 resolves to 0 (got %d)", l.zero);
  st = resolve_at(&cfg, 2, 1, 1, &l);
  tap_ok(st == GT_SUCCESS && l.zero == 2 && l.mbs == 24,
         "zero = 2 with dp = 2 stays 2; 24 sequences per micro-batch (got %d, %d)", l.zero,
         l.mbs);
  cfg.parallel.sequence_parallel = true;
  tap_ok(resolve_at(&cfg, 2, 1, 1, &l) == GT_SUCCESS && !l.seq_par,
         "sequence parallelism with tp = 1 does not apply");
  tap_ok(resolve_at(&cfg, 1, 1, 2, &l) == GT_SUCCESS && l.seq_par,
         "sequence parallelism with tp = 2 applies");
  cfg.parallel.sequence_parallel = false;
  cfg.model.recompute = GT_RECOMPUTE_ATTENTION;
  cfg.backend.precision = GT_BF16;
  cfg.parallel.dp_overlap = true;
  tap_ok(resolve_at(&cfg, 2, 1, 1, &l) == GT_SUCCESS && l.recompute == GT_RECOMPUTE_ATTENTION &&
             l.dtype == GT_BF16 && l.dp_overlap,
         "recompute, precision and dp_overlap as the deck says");

  /* the schedule */
  cfg.model.layers = 8;
  cfg.data.microbatches = 4;
  snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "interleaved:2");
  tap_ok(resolve_at(&cfg, 1, 2, 1, &l) == GT_SUCCESS &&
             l.schedule.kind == GT_SCHEDULE_INTERLEAVED && l.schedule.chunks == 2 &&
             strcmp(l.schedule.name, "interleaved:2") == 0 && l.micro == 4 && l.mbs == 12,
         "interleaved:2 on pp = 2: 2 chunks, 4 micro-batches of 12");
  cfg.grid.dp = 2, cfg.grid.pp = 1, cfg.grid.tp = 1;
  expect_error(&cfg, 2, "needs pipeline parallelism", "interleaved:2 on pp = 1");
  cfg.data.microbatches = 3;
  cfg.grid.dp = 1, cfg.grid.pp = 2;
  expect_error(&cfg, 2, "microbatches = 3 must be a multiple of pp = 2",
               "interleaved:2 with 3 micro-batches on pp = 2");
  cfg.data.microbatches = 4;
  cfg.model.layers = 3;
  expect_error(&cfg, 2, "needs 4 virtual stages", "interleaved:2 over pp = 2 with 3 layers");
  snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "zigzag");
  cfg.model.layers = 8;
  expect_error(&cfg, 2, "unknown schedule", "schedule zigzag");
  snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "gpipe");
  tap_ok(resolve_at(&cfg, 1, 2, 1, &l) == GT_SUCCESS && l.schedule.kind == GT_SCHEDULE_GPIPE &&
             l.schedule.chunks == 1,
         "gpipe: one chunk");
  /* zb-h1: what its split backward does not take yet */
  snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "zb-h1");
  const long zero = cfg.parallel.zero;
  const gt_recompute recompute = cfg.model.recompute;
  const bool sp = cfg.parallel.sequence_parallel;
  cfg.parallel.zero = 1;
  cfg.model.recompute = GT_RECOMPUTE_NONE;
  cfg.parallel.sequence_parallel = false;
  tap_ok(resolve_at(&cfg, 2, 2, 1, &l) == GT_SUCCESS && gt_schedule_splits(&l.schedule) &&
             strcmp(gt_schedule_name(&l.schedule), "zb-h1") == 0,
         "zb-h1 parses and splits the backward");
  cfg.grid.dp = 2, cfg.grid.pp = 2, cfg.grid.tp = 1;
  cfg.parallel.zero = 2;
  expect_error(&cfg, 4, "takes [parallel] zero = 0 or 1 (not yet 2", "zb-h1 with zero 2");
  cfg.parallel.zero = 0;
  cfg.grid.dp = 1, cfg.grid.tp = 2;
  cfg.parallel.sequence_parallel = true;
  expect_error(&cfg, 4, "does not take [parallel] sequence_parallel = on", "zb-h1 with sp");
  cfg.parallel.sequence_parallel = false;
  cfg.model.recompute = GT_RECOMPUTE_ATTENTION;
  expect_error(&cfg, 4, "does not take [model] recompute = attention", "zb-h1 with recompute");
  cfg.model.recompute = recompute;
  /* pipedream-2bw: two weight versions, so m >= pp, ZeRO 0-1, the
   * synchronous update, no node-local states yet */
  snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "pipedream-2bw");
  cfg.grid.dp = 2, cfg.grid.pp = 2, cfg.grid.tp = 1;
  cfg.parallel.zero = 1;
  tap_ok(resolve_at(&cfg, 2, 2, 1, &l) == GT_SUCCESS && gt_schedule_streams(&l.schedule) &&
             !gt_schedule_splits(&l.schedule) &&
             strcmp(gt_schedule_name(&l.schedule), "pipedream-2bw") == 0,
         "pipedream-2bw parses and streams across steps");
  cfg.parallel.zero = 2;
  expect_error(&cfg, 4, "takes [parallel] zero = 0 or 1 (not 2", "pipedream-2bw with zero 2");
  cfg.parallel.zero = 0;
  snprintf(cfg.parallel.sync, sizeof cfg.parallel.sync, "local:4");
  expect_error(&cfg, 4, "takes [parallel] sync = every_step only (not 'local:4'",
               "pipedream-2bw with sync = local:4");
  snprintf(cfg.parallel.sync, sizeof cfg.parallel.sync, "every_step");
  cfg.checkpoint.local_every = 5;
  expect_error(&cfg, 4, "does not take [checkpoint] local_every yet",
               "pipedream-2bw with node-local states");
  cfg.checkpoint.local_every = 0;
  const long micro = cfg.data.microbatches;
  cfg.grid.dp = 1, cfg.grid.pp = 4;
  cfg.data.microbatches = 2;
  expect_error(&cfg, 4, "enough only with at least pp micro-batches: [data] microbatches = 2",
               "pipedream-2bw with m < pp");
  cfg.data.microbatches = micro;
  cfg.parallel.zero = zero;
  cfg.parallel.sequence_parallel = sp;
}

static void test_round_trip(void)
{
  gt_config cfg;
  small_config(&cfg);
  cfg.model.layers = 8;
  cfg.data.batch = 64;
  cfg.data.microbatches = 4;
  cfg.parallel.sequence_parallel = true;
  cfg.parallel.zero = 3;
  const struct {
    int dp, pp, tp;
    const char *schedule;
  } cases[] = {{2, 2, 2, "interleaved:2"}, {4, 1, 2, "1f1b"}, {1, 4, 2, "gpipe"},
               {2, 4, 1, "interleaved:2"}, {8, 1, 1, "1f1b"}};
  int same = 0, n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++) {
    snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "%s", cases[i].schedule);
    gt_layout l, back;
    if (resolve_at(&cfg, cases[i].dp, cases[i].pp, cases[i].tp, &l) != GT_SUCCESS)
      continue; /* (a failure: the count below falls short) */
    gt_config other;
    small_config(&other);
    other.model.layers = 8;
    gt_layout_to_config(&l, &other);
    if (gt_layout_resolve(&other, cases[i].dp * cases[i].pp * cases[i].tp, &back) ==
            GT_SUCCESS &&
        gt_layout_equal(&l, &back))
      same++;
  }
  tap_ok(same == n, "%d of %d resolved layouts written as keys resolve to themselves", same, n);

  /* keys that do not apply: the candidate is not what runs */
  gt_layout want, got;
  tap_ok(resolve_at(&cfg, 2, 1, 2, &want) == GT_SUCCESS, "a layout with zero 3");
  want.dp = 1, want.tp = 4; /* zero 3 at dp = 1: runs as zero 0 */
  gt_layout_to_config(&want, &cfg);
  tap_ok(gt_layout_resolve(&cfg, 4, &got) == GT_SUCCESS && got.zero == 0 &&
             !gt_layout_equal(&want, &got),
         "zero 3 written for dp = 1 resolves to zero 0, another layout");
}

static void test_describe(void)
{
  gt_config cfg;
  small_config(&cfg);
  cfg.parallel.zero = 1;
  cfg.parallel.sequence_parallel = true;
  cfg.backend.precision = GT_BF16;
  cfg.model.recompute = GT_RECOMPUTE_BLOCK;
  gt_layout l;
  char buf[256] = "";
  if (resolve_at(&cfg, 2, 1, 2, &l) == GT_SUCCESS)
    gt_layout_describe(&l, buf, sizeof buf);
  tap_ok(strcmp(buf, "bf16 compute, zero 1 over dp=2, recompute block, 1f1b schedule, "
                     "sequence parallel over tp") == 0,
         "description: '%s'", buf);
  if (resolve_at(&cfg, 1, 1, 4, &l) == GT_SUCCESS)
    gt_layout_describe(&l, buf, sizeof buf);
  tap_ok(strcmp(buf, "bf16 compute, zero 0 over dp=1, recompute block, 1f1b schedule, "
                     "sequence parallel over tp") == 0,
         "description at dp = 1: '%s'", buf);
}

/* The llama keys against each other and the layout: each error is one line
 * that names the key to change. */
static void expect_llama_error(const gt_config *cfg, int tp, const char *key, const char *needle,
                               const char *what)
{
  gt_config c = *cfg;
  c.grid.dp = 1, c.grid.pp = 1, c.grid.tp = tp;
  gt_layout l;
  gt_error_clear();
  const int st = gt_layout_resolve(&c, tp, &l);
  const char *msg = gt_error_message();
  if (!tap_ok(st == GT_ERR_INPUT && strstr(msg, key) && strstr(msg, needle) && !strchr(msg, '\n'),
              "%s: refused in one line naming %s ('%s')", what, key, needle))
    tap_diag("status %d: %s", st, msg);
}

static void test_llama_checks(void)
{
  gt_config cfg;
  small_config(&cfg); /* 4 heads, dim 128: head size 32 */
  cfg.model.type = GT_MODEL_LLAMA;
  cfg.model.kv_heads = 2;
  cfg.model.ffn_dim = 96;
  gt_layout l;
  tap_ok(resolve_at(&cfg, 1, 1, 2, &l) == GT_SUCCESS, "llama heads 4, kv_heads 2, ffn_dim 96 at tp=2");
  gt_config c = cfg;
  c.model.kv_heads = 3;
  expect_llama_error(&c, 1, "kv_heads=3", "does not divide heads=4", "llama kv_heads 3 of 4 heads");
  expect_llama_error(&cfg, 4, "kv_heads=2", "tp=4 does not divide", "llama tp=4 over kv_heads 2");
  c = cfg;
  c.model.kv_heads = 1;
  expect_llama_error(&c, 2, "kv_heads=1", "tp=2 does not divide", "llama tp=2 over kv_heads 1");
  c = cfg;
  c.model.kv_heads = 4;
  c.model.ffn_dim = 90;
  expect_llama_error(&c, 4, "ffn_dim=90", "tp=4 does not divide", "llama tp=4 over ffn_dim 90");
  c = cfg;
  c.model.kv_heads = 4;
  c.model.dim = 4 * 5; /* head size 5 */
  c.model.ffn_dim = 80;
  expect_llama_error(&c, 1, "dim / heads", "even head size", "llama head size 5");
  c = cfg;
  c.model.type = GT_MODEL_GPT;
  c.model.ffn_dim = 0;
  expect_llama_error(&c, 1, "kv_heads=2", "type = gpt", "gpt with kv_heads 2 of 4 heads");
  c = cfg;
  c.model.type = GT_MODEL_GPT;
  c.model.kv_heads = 0;
  expect_llama_error(&c, 1, "ffn_dim=96", "type = gpt", "gpt with ffn_dim 96, not 4 dim");
  c = cfg;
  c.model.rope_scaling = GT_ROPE_SCALING_LINEAR;
  c.model.rope_factor = 0;
  expect_llama_error(&c, 1, "rope_factor = 0", "positive", "llama linear rope_factor 0");
  c = cfg;
  c.model.rope_scaling = GT_ROPE_SCALING_LLAMA3;
  c.model.rope_low_freq_factor = 4;
  c.model.rope_high_freq_factor = 2;
  expect_llama_error(&c, 1, "rope_high_freq_factor = 2", "high_freq_factor > low_freq_factor",
                     "llama3 rope_high_freq_factor below rope_low_freq_factor");
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  test_sizes();
  test_model_checks();
  test_llama_checks();
  test_what_applies();
  test_round_trip();
  test_describe();
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
