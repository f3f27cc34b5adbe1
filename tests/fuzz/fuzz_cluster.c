/*
 * fuzz_cluster.c - libFuzzer harness for the cluster-description parser of
 * `gridtrain plan` (costmodel.h: gt_cluster_parse, gt_cluster_check) and
 * the cost model over what it accepts (gt_cost_evaluate). The input is a
 * cluster file, optionally followed by a NUL byte and a second file that
 * overrides it key by key (as `--cluster A --cluster B`). Properties:
 * parsing and checking end in success or a GT_ERR_INPUT error with a
 * message, never a crash or another code; and a cluster that passes the
 * check gives every layout of a small model (dp x pp x tp on 8 ranks, two
 * schedules, ZeRO 0 and 3) a finite, positive step time and tokens/s, finite
 * non-negative parts, and a finite memory, or a GT_ERR_INPUT with a message.
 * Built by `make fuzz` (clang, libFuzzer, ASan, UBSan) and replayed over
 * tests/fuzz/corpus/cluster and tests/fuzz/regress/cluster by `make check`
 * (replay.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/config.h"
#include "gridtrain/costmodel.h"
#include "gridtrain/error.h"

static void gt_fuzz_fail(const char *what, int status)
{
  fprintf(stderr, "fuzz_cluster: %s: status %d: %s\n", what, status, gt_error_message());
  abort();
}

static void gt_fuzz_expect_input(const char *what, int status)
{
  if (status != GT_SUCCESS && status != GT_ERR_INPUT)
    gt_fuzz_fail(what, status);
  if (status != GT_SUCCESS && gt_error_message()[0] == '\0')
    gt_fuzz_fail("an error without a message", status);
}

static bool gt_fuzz_finite_nonneg(double v)
{
  return isfinite(v) && v >= 0.0;
}

/* Every layout of an 8-rank grid for a 4-layer model on cluster c. */
static void gt_fuzz_evaluate(const gt_cluster *c)
{
  gt_config cfg;
  gt_config_defaults(&cfg);
  cfg.model.layers = 4, cfg.model.heads = 4, cfg.model.dim = 64, cfg.model.seq_len = 32;
  cfg.model.vocab = 256;
  const int ranks = 8;
  for (int dp = 1; dp <= ranks; dp *= 2)
    for (int pp = 1; dp * pp <= ranks; pp *= 2)
      for (int zero = 0; zero <= 3; zero += 3)
        for (int sched = 0; sched < 2; sched++) {
          /* the layout as the trainer resolves it (layout.h); one the model
           * does not allow (tp beyond the heads) is no case */
          cfg.grid.dp = dp, cfg.grid.pp = pp, cfg.grid.tp = ranks / dp / pp;
          cfg.data.batch = 4L * dp, cfg.data.microbatches = 4;
          snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "%s",
                   sched ? "1f1b" : "gpipe");
          cfg.parallel.zero = zero;
          cfg.backend.precision = GT_F32;
          cfg.parallel.dp_overlap = true;
          gt_layout l;
          if (gt_layout_resolve(&cfg, ranks, &l) != GT_SUCCESS) {
            gt_error_clear();
            continue;
          }
          gt_cost out;
          const int status = gt_cost_evaluate(&cfg, &l, ranks, c, &out);
          gt_fuzz_expect_input("evaluate", status);
          gt_error_clear();
          if (status != GT_SUCCESS)
            continue;
          if (!(isfinite(out.step) && out.step > 0.0 && isfinite(out.tokens_per_s) &&
                out.tokens_per_s > 0.0) ||
              !gt_fuzz_finite_nonneg(out.compute) || !gt_fuzz_finite_nonneg(out.tp_comm) ||
              !gt_fuzz_finite_nonneg(out.pp_comm) || !gt_fuzz_finite_nonneg(out.bubble) ||
              !gt_fuzz_finite_nonneg(out.dp_comm) || !gt_fuzz_finite_nonneg(out.optimizer) ||
              !gt_fuzz_finite_nonneg(out.memory)) {
            fprintf(stderr,
                    "fuzz_cluster: dp=%d pp=%d zero=%d: step %g tok/s %g compute %g tp %g "
                    "pp %g bubble %g dp %g optim %g memory %g\n",
                    dp, pp, l.zero, out.step, out.tokens_per_s, out.compute, out.tp_comm,
                    out.pp_comm, out.bubble, out.dp_comm, out.optimizer, out.memory);
            gt_fuzz_fail("a prediction that is not a finite, non-negative time", -1);
          }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > 1 << 16)
    return 0;
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  const size_t first = strlen(text);
  gt_cluster c;
  gt_cluster_defaults(&c);
  int status = gt_cluster_parse(&c, text, "fuzz.in");
  if (status == GT_SUCCESS && first + 1 < size)
    status = gt_cluster_parse(&c, text + first + 1, "override.in");
  if (status == GT_SUCCESS)
    status = gt_cluster_check(&c);
  gt_fuzz_expect_input("parse", status);
  gt_error_clear();
  if (status == GT_SUCCESS)
    gt_fuzz_evaluate(&c);
  free(text);
  return 0;
}
