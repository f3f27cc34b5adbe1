/*
 * test_config.c - the input deck: defaults, precedence, round trip, and one
 * clear GT_ERR_INPUT message for each kind of mistake.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/config.h"

static const char *good_deck = "; a comment\n"
                               "[run]\n"
                               "steps = 42\n"
                               "seed = 18446744073709551615\n"
                               "metrics = out/m.jsonl ; inline comment\n"
                               "[grid]\n"
                               "dp = auto\n"
                               "pp = 2\n"
                               "# another comment\n"
                               "[model]\n"
                               "layers = 6\n"
                               "dim = 96\n"
                               "heads = 6\n"
                               "[data]\n"
                               "train = x.h5:/train/tokens\n"
                               "batch = 12\n"
                               "[optim]\n"
                               "lr = 6e-4\n"
                               "[backend]\n"
                               "device = cpu\n";

/* Parse deck text + overrides into a fresh config; return the status. */
static int parse(const char *text, int nover, char *const *over, gt_config *cfg)
{
  gt_config_defaults(cfg);
  gt_error_clear();
  return gt_config_parse(cfg, text, "deck.in", nover, over);
}

static void expect_error(const char *what, const char *text, const char *override,
                         const char *needle1, const char *needle2)
{
  gt_config cfg;
  char *over[1] = {(char *)override};
  int status = parse(text, override ? 1 : 0, over, &cfg);
  const char *msg = gt_error_message();
  bool ok = status == GT_ERR_INPUT && strstr(msg, needle1) && (!needle2 || strstr(msg, needle2));
  if (!tap_ok(ok, "error: %s", what))
    tap_diag("status %d, message: %s", status, msg);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  gt_config cfg;

  // ---- defaults and values
  tap_ok(parse(NULL, 0, NULL, &cfg) == GT_SUCCESS, "defaults parse");
  tap_ok(cfg.model.layers == 4 && cfg.model.dim == 128 && cfg.grid.dp == 0 && cfg.grid.tp == 1 &&
             cfg.backend.device == GT_DEVICE_CPU,
         "defaults: layers 4, dim 128, dp auto, tp 1, device cpu");
  tap_ok(gt_config_check_required(&cfg) == GT_ERR_INPUT && strstr(gt_error_message(), "[data] train"),
         "data.train is required");

  int st = parse(good_deck, 0, NULL, &cfg);
  if (st)
    tap_diag("%s", gt_error_message());
  tap_ok(st == GT_SUCCESS, "a full deck parses");
  tap_ok(cfg.run.steps == 42 && cfg.run.seed == 18446744073709551615ULL &&
             strcmp(cfg.run.metrics, "out/m.jsonl") == 0,
         "run values, u64 seed at its maximum, inline comment stripped");
  tap_ok(cfg.grid.dp == 0 && cfg.grid.pp == 2 && cfg.model.layers == 6 && cfg.model.heads == 6,
         "grid and model values");
  tap_ok(strcmp(cfg.data.train, "x.h5:/train/tokens") == 0 && cfg.optim.lr == 6e-4,
         "string with a colon, real in e-notation");

  // ---- precedence: command line over deck over defaults
  char *over[] = {"model.layers=8", "optim.lr=1e-3", "data.val=v.h5"};
  st = parse(good_deck, 3, over, &cfg);
  tap_ok(st == GT_SUCCESS && cfg.model.layers == 8 && cfg.optim.lr == 1e-3 &&
             strcmp(cfg.data.val, "v.h5") == 0 && cfg.model.dim == 96 && cfg.optim.beta1 == 0.9,
         "command line overrides the deck, the deck overrides defaults");

  // ---- round trip through the resolved INI text
  char text[8192];
  int len = gt_config_to_ini(&cfg, text, sizeof text);
  gt_config again;
  st = parse(text, 0, NULL, &again);
  bool same = st == GT_SUCCESS && len > 0 && (size_t)len < sizeof text &&
              again.model.layers == cfg.model.layers && again.optim.lr == cfg.optim.lr &&
              again.run.seed == cfg.run.seed && strcmp(again.data.train, cfg.data.train) == 0 &&
              again.grid.dp == cfg.grid.dp && again.optim.weight_decay == cfg.optim.weight_decay;
  tap_ok(same, "resolved INI text parses back to the same values");

  // ---- enum keys: each word is its C enum value, printed back as the word
  gt_config typed;
  gt_config_defaults(&typed);
  bool typed_ok = gt_config_set(&typed, "backend.precision=%s", "bf16") == GT_SUCCESS &&
                  gt_config_set(&typed, "model.recompute=block") == GT_SUCCESS &&
                  gt_config_set(&typed, "backend.device=cpu-guard") == GT_SUCCESS &&
                  gt_config_set(&typed, "parallel.allreduce=halving") == GT_SUCCESS &&
                  gt_config_set(&typed, "parallel.dp_overlap=off") == GT_SUCCESS &&
                  gt_config_set(&typed, "checkpoint.direct_io=on") == GT_SUCCESS;
  typed_ok = typed_ok && typed.backend.precision == GT_BF16 &&
             typed.model.recompute == GT_RECOMPUTE_BLOCK &&
             typed.backend.device == GT_DEVICE_CPU_GUARD &&
             typed.parallel.allreduce == GT_ALLREDUCE_HALVING && !typed.parallel.dp_overlap &&
             typed.data.prefetch && typed.checkpoint.direct_io == GT_TRI_ON &&
             typed.parallel.wait == GT_WAIT_SETTING_AUTO;
  len = gt_config_to_ini(&typed, text, sizeof text);
  typed_ok = typed_ok && len > 0 && (size_t)len < sizeof text &&
             strstr(text, "\nprecision = bf16\n") && strstr(text, "\nrecompute = block\n") &&
             strstr(text, "\ndevice = cpu-guard\n") && strstr(text, "\nallreduce = halving\n") &&
             strstr(text, "\ndp_overlap = off\n") && strstr(text, "\nprefetch = on\n") &&
             strstr(text, "\ndirect_io = on\n");
  tap_ok(typed_ok, "enum keys are C enums (on|off a bool) and print back as their words");

  // ---- every kind of mistake
  expect_error("unknown section", "[modle]\nlayers = 2\n", NULL, "unknown section [modle]",
               "valid sections: run, grid, model");
  expect_error("unknown key", "[model]\nlayer = 2\n", NULL, "unknown key 'layer' in [model]",
               "valid keys: type, layers");
  expect_error("not an integer", "[model]\nheads = four\n", NULL, "[model] heads = 'four'",
               "an integer in [1, 1024]");
  expect_error("integer out of range", "[model]\nlayers = 0\n", NULL, "[model] layers = '0'",
               "[1, 1024]");
  expect_error("real out of range", "[optim]\nbeta2 = 1.5\n", NULL, "[optim] beta2 = '1.5'",
               "a number in");
  expect_error("trailing garbage in a number", "[optim]\nlr = 1e-3x\n", NULL, "[optim] lr",
               "a number");
  expect_error("bad choice", "[backend]\ndevice = gpu\n", NULL, "[backend] device = 'gpu'",
               "one of cpu, cpu-async, cpu-guard, cuda");
  expect_error("bad auto", "[grid]\ntp = automatic\n", NULL, "[grid] tp = 'automatic'",
               "'auto' or an integer");
  expect_error("negative seed", "[run]\nseed = -1\n", NULL, "[run] seed = '-1'", NULL);
  expect_error("key set twice", "[model]\ndim = 64\nheads = 2\ndim = 32\n", NULL,
               "deck.in:4: [model] dim is set twice (first on line 2)", NULL);
  expect_error("key outside a section", "steps = 3\n", NULL, "outside any section", NULL);
  expect_error("line without '='", "[run]\nsteps\n", NULL, "deck.in:2: cannot parse", NULL);
  expect_error("unterminated section header", "[run\nsteps = 3\n", NULL, "deck.in:1", NULL);
  char longline[400];
  snprintf(longline, sizeof longline, "[data]\ntrain = %0300d\n", 1);
  expect_error("line too long", longline, NULL, "deck.in:2: line is longer", NULL);
  expect_error("override without a dot", NULL, "layers=3", "'layers=3' is not of the form section.key=value", NULL);
  expect_error("override without a value", NULL, "model.layers", "not of the form", NULL);
  expect_error("override of an unknown key", NULL, "model.depth=3",
               "command line: unknown key 'depth' in [model]", NULL);
  expect_error("override with a bad value", NULL, "data.batch=-4", "[data] batch = '-4'", NULL);

  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
