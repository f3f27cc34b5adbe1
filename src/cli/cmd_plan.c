/*
 * cmd_plan.c - `gridtrain plan`: the memory account of a layout (--memory,
 * memory.h), and the cost model's search over layouts on a cluster
 * (costmodel.h, docs/planning.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gridtrain/config.h"
#include "gridtrain/costmodel.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/layout.h"
#include "gridtrain/log.h"
#include "gridtrain/memory.h"

#define GT_PLAN_MAX_CLUSTERS 8

static void gt_plan_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf(
    "usage: gridtrain plan --memory DECK [--ranks N] [section.key=value ...]\n"
    "       gridtrain plan DECK --cluster FILE [--nodes N | --ranks N] [--global-batch B]\n"
    "                      [--seq T] [--top K] [--csv OUT.csv] [--evaluate]\n"
    "                      [section.key=value ...]\n"
    "       gridtrain plan --validate TSV --cluster FILE [--cluster FILE ...]\n"
    "\n"
    "--memory prints the memory account of the deck's layout and settings without\n"
    "training: per pipeline stage, the bytes a rank expects for its compute weights,\n"
    "fp32 master weights, gradients and AdamW moments (by the ZeRO formulas of\n"
    "[parallel] zero), its activations (per micro-batch in flight, by [model]\n"
    "recompute, times the micro-batches the schedule keeps in flight) and its MPI\n"
    "staging buffers. It is the table `gridtrain train` prints at start-up.\n"
    "\n"
    "With --cluster, plan searches the layouts of the deck's model and global batch\n"
    "on the cluster: dp x pp x tp = ranks (tp dividing the heads and the ranks per\n"
    "node), micro-batch size and count, schedule (gpipe, 1f1b, interleaved:V,\n"
    "zb-h1), ZeRO 0-3, recompute none/attention/block, sequence parallelism and\n"
    "precision. Each\n"
    "gets a predicted step time from a roofline of every kernel and alpha-beta\n"
    "collectives, and the memory of --memory; the layouts that fit are ranked by\n"
    "predicted tokens/s. A section.key=value on the command line pins that choice\n"
    "(grid.tp=8, model.recompute=block, parallel.schedule=interleaved:2, ...).\n"
    "Nothing is allocated and no data is read (docs/planning.md).\n"
    "\n"
    "  --memory          the memory account of the deck's layout\n"
    "  --ranks N         the job's rank count (--memory: default the product of [grid]\n"
    "                    dp, pp and tp when none is auto; search: instead of --nodes)\n"
    "  --cluster FILE    a cluster description (inputs/clusters/*.in); a later file\n"
    "                    overrides an earlier one key by key\n"
    "  --nodes N         nodes of the cluster to plan for (default its [cluster] nodes)\n"
    "  --global-batch B  sequences per step (default [data] batch)\n"
    "  --seq T           tokens per sequence (default [model] seq_len)\n"
    "  --top K           layouts to print (default 10)\n"
    "  --csv FILE        write every evaluated layout with its prediction\n"
    "  --evaluate        predict the deck's own layout only (its [grid], [data]\n"
    "                    microbatches, [parallel] and [model] recompute)\n"
    "  --validate TSV    predict the published results in TSV (benchmarks/plan/\n"
    "                    published.tsv) and print the errors per row and table\n"
    "\n"
    "Examples:\n"
    "  gridtrain plan --memory inputs/default.in --ranks 8 parallel.zero=1\n"
    "  gridtrain plan inputs/gpt2-124m.in --cluster inputs/clusters/a100-80gb-selene.in \\\n"
    "      --nodes 2 --global-batch 512 --seq 1024 --top 5 --csv plan.csv\n");
}

static int gt_plan_memory(const gt_config *cfg, long ranks)
{
  const bool staged = gt_mem_staged(cfg);
  gt_layout l;
  GT_CALL(gt_layout_resolve(cfg, (int)ranks, &l));
  gt_mem_account *stages = calloc((size_t)l.pp, sizeof *stages);
  GT_CHECK_ALLOC(stages, sizeof *stages * (size_t)l.pp);
  int status = gt_mem_plan(cfg, &l, staged, stages, l.pp);
  if (status != GT_SUCCESS) {
    free(stages);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  if (gt_log_rank() == 0) {
    char desc[256], what[400];
    gt_layout_describe(&l, desc, sizeof desc);
    snprintf(what, sizeof what, "%s; layout dp=%d x pp=%d x tp=%d on %ld ranks, %s; MPI %s",
             desc, l.dp, l.pp, l.tp, ranks, gt_device_kind_names[cfg->backend.device],
             staged ? "staged" : "on device buffers");
    gt_mem_print_header(stdout, what, l.dtype, "stage");
    for (int s = 0; s < l.pp; s++) {
      char label[32];
      snprintf(label, sizeof label, "%d", s);
      gt_mem_print_row(stdout, label, &stages[s]);
    }
    fflush(stdout);
  }
  free(stages);
  return GT_SUCCESS;
}

/* Does the override name this key ("section.key=...")? */
static bool gt_names(const char *ov, const char *key)
{
  size_t n = strlen(key);
  return strncmp(ov, key, n) == 0 && ov[n] == '=';
}

static bool gt_parse_count(const char *s, long *out)
{
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!end || end == s || *end || v < 1)
    return false;
  *out = v;
  return true;
}

typedef struct {
  bool memory, evaluate;
  long ranks, nodes, batch, seq, top;
  const char *deck, *csv, *validate;
  const char *clusters[GT_PLAN_MAX_CLUSTERS];
  int nclusters;
} gt_plan_args;

static int gt_plan_parse_args(int argc, char **argv, gt_plan_args *a, char **overrides,
                              int *n)
{
  memset(a, 0, sizeof *a);
  a->top = 10;
  *n = 0;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    long *count = strcmp(s, "--ranks") == 0          ? &a->ranks
                  : strcmp(s, "--nodes") == 0        ? &a->nodes
                  : strcmp(s, "--global-batch") == 0 ? &a->batch
                  : strcmp(s, "--seq") == 0          ? &a->seq
                  : strcmp(s, "--top") == 0          ? &a->top
                                                     : NULL;
    if (count) {
      GT_CHECK(val && gt_parse_count(val, count), GT_ERR_INPUT,
               "plan: %s needs a positive integer", s);
      i++;
    } else if (strcmp(s, "--memory") == 0)
      a->memory = true;
    else if (strcmp(s, "--evaluate") == 0)
      a->evaluate = true;
    else if (strcmp(s, "--cluster") == 0 || strcmp(s, "--csv") == 0 ||
             strcmp(s, "--validate") == 0) {
      GT_CHECK(val && val[0], GT_ERR_INPUT, "plan: %s needs a file name", s);
      if (strcmp(s, "--cluster") == 0) {
        GT_CHECK(a->nclusters < GT_PLAN_MAX_CLUSTERS, GT_ERR_INPUT,
                 "plan: at most %d --cluster files", GT_PLAN_MAX_CLUSTERS);
        a->clusters[a->nclusters++] = val;
      } else if (strcmp(s, "--csv") == 0)
        a->csv = val;
      else
        a->validate = val;
      i++;
    } else if (s[0] == '-')
      return GT_ERROR(GT_ERR_INPUT, "plan: unknown option '%s'; see 'gridtrain plan --help'",
                      s);
    else if (!a->deck && !strchr(s, '='))
      a->deck = s;
    else
      overrides[(*n)++] = argv[i];
  }
  if (a->memory) {
    GT_CHECK(a->deck && !a->validate && !a->nclusters, GT_ERR_INPUT,
             "plan: usage: gridtrain plan --memory DECK [--ranks N] [section.key=value ...] "
             "(see 'gridtrain plan --help')");
    return GT_SUCCESS;
  }
  if (a->validate) {
    GT_CHECK(!a->deck && *n == 0, GT_ERR_INPUT,
             "plan: --validate takes a TSV and --cluster files, no deck or overrides");
    GT_CHECK(a->nclusters > 0, GT_ERR_INPUT, "plan: --validate needs --cluster FILE");
    return GT_SUCCESS;
  }
  GT_CHECK(a->deck, GT_ERR_INPUT,
           "plan: usage: gridtrain plan DECK --cluster FILE [--nodes N] ... or gridtrain plan "
           "--memory DECK ... (see 'gridtrain plan --help')");
  GT_CHECK(a->nclusters > 0, GT_ERR_INPUT,
           "plan: give a cluster description with --cluster FILE (inputs/clusters/*.in), or "
           "--memory for the memory account alone");
  GT_CHECK(!(a->nodes && a->ranks), GT_ERR_INPUT, "plan: give --nodes or --ranks, not both");
  return GT_SUCCESS;
}

static int gt_plan_clusters(const gt_plan_args *a, gt_cluster *c)
{
  gt_cluster_defaults(c);
  for (int i = 0; i < a->nclusters; i++)
    GT_CALL(gt_cluster_load(c, a->clusters[i]));
  GT_CALL(gt_cluster_check(c));
  return GT_SUCCESS;
}

static int gt_plan_run(const gt_plan_args *a, const gt_config *cfg_in, const gt_plan_pins *pins)
{
  gt_cluster c;
  GT_CALL(gt_plan_clusters(a, &c));
  gt_config cfg = *cfg_in;
  if (a->batch)
    cfg.data.batch = a->batch;
  if (a->seq)
    cfg.model.seq_len = a->seq;
  if (a->nodes)
    c.nodes = (int)a->nodes;
  const long ranks = a->ranks ? a->ranks : (long)c.nodes * c.ranks_per_node;
  GT_CHECK(ranks <= 1 << 24, GT_ERR_INPUT, "plan: %ld ranks are too many to plan", ranks);
  if (a->ranks)
    c.nodes = (int)((ranks + c.ranks_per_node - 1) / c.ranks_per_node);
  const bool root = gt_log_rank() == 0;
  if (a->evaluate) {
    gt_plan_row row;
    GT_CALL(gt_layout_resolve(&cfg, (int)ranks, &row.layout));
    GT_CALL(gt_cost_evaluate(&cfg, &row.layout, (int)ranks, &c, &row.cost));
    if (root) {
      gt_plan_print_one(stdout, &row, &c, (int)ranks);
      fflush(stdout);
    }
    if (a->csv && root)
      GT_CALL(gt_plan_write_csv(a->csv, &row, 1));
    return GT_SUCCESS;
  }
  gt_plan_row *rows = NULL;
  int n = 0;
  GT_CALL(gt_plan_search(&cfg, pins, (int)ranks, &c, &rows, &n));
  int status = GT_SUCCESS;
  if (root) {
    const gt_gpt_shape shape = gt_gpt_shape_config(&cfg);
    char kv[32] = "";
    if (gt_gpt_shape_kv_heads(&shape) != shape.heads)
      snprintf(kv, sizeof kv, " KV%d", gt_gpt_shape_kv_heads(&shape));
    char moe[96] = "";
    if (shape.experts > 0)
      snprintf(moe, sizeof moe, " E%d top%d Fe%d every%d", shape.experts, shape.top_k,
               gt_gpt_shape_expert_ffn(&shape), shape.moe_every > 0 ? shape.moe_every : 1);
    printf("# plan: %s L%d H%d%s C%d F%d%s V%d, %ld sequences x %ld tokens per step, on %ld "
           "ranks (%d node%s x %d)\n",
           gt_gpt_shape_llama(&shape) ? "Llama" : "GPT", shape.layers, shape.heads, kv,
           shape.dim, gt_gpt_shape_ffn(&shape), moe, shape.vocab, cfg.data.batch,
           cfg.model.seq_len, ranks, c.nodes, c.nodes == 1 ? "" : "s", c.ranks_per_node);
    gt_plan_print_top(stdout, rows, n, (int)a->top, &c, (int)ranks);
    if (!rows[0].cost.fits)
      printf("# no layout fits the memory of a rank: use more nodes, a smaller batch or model\n");
    if (a->csv) {
      status = gt_plan_write_csv(a->csv, rows, n);
      if (status == GT_SUCCESS)
        printf("# all %d layouts written to %s\n", n, a->csv);
    }
    fflush(stdout);
  }
  free(rows);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_plan_validate_cmd(const gt_plan_args *a)
{
  gt_cluster c;
  GT_CALL(gt_plan_clusters(a, &c));
  gt_plan_check check;
  GT_CALL(gt_plan_validate(a->validate, &c, gt_log_rank() == 0 ? stdout : NULL, &check));
  fflush(stdout);
  return GT_SUCCESS;
}

int gt_cmd_plan(int argc, char **argv, MPI_Comm world)
{
  if (gt_cli_wants_help(argc, argv)) {
    gt_plan_usage();
    return GT_SUCCESS;
  }
  char **overrides = calloc((size_t)argc + 2, sizeof *overrides);
  GT_CHECK_ALLOC(overrides, sizeof *overrides * ((size_t)argc + 2));
  gt_plan_args a;
  int n = 0;
  int status = gt_plan_parse_args(argc, argv, &a, overrides, &n);
  gt_plan_pins pins;
  memset(&pins, 0, sizeof pins);
  bool has_train = false;
  for (int i = 0; i < n; i++) {
    const char *o = overrides[i];
    pins.dp |= gt_names(o, "grid.dp");
    pins.pp |= gt_names(o, "grid.pp") || gt_names(o, "parallel.stages");
    pins.tp |= gt_names(o, "grid.tp");
    pins.micro |= gt_names(o, "data.microbatches");
    pins.schedule |= gt_names(o, "parallel.schedule");
    pins.zero |= gt_names(o, "parallel.zero");
    pins.recompute |= gt_names(o, "model.recompute");
    pins.seq_par |= gt_names(o, "parallel.sequence_parallel");
    pins.precision |= gt_names(o, "backend.precision");
    pins.dp_overlap |= gt_names(o, "parallel.dp_overlap");
    has_train |= gt_names(o, "data.train");
  }
  /* planning reads no data: a deck without [data] train plans too */
  static char no_data[] = "data.train=(not read by plan)";
  if (status == GT_SUCCESS && !has_train && !a.validate)
    overrides[n++] = no_data;
  gt_config cfg;
  if (status == GT_SUCCESS && !a.validate)
    status = gt_config_load(&cfg, a.deck, n, overrides, world);
  free(overrides);
  if (status == GT_SUCCESS && a.memory) {
    long ranks = a.ranks;
    if (ranks == 0) {
      if (!(cfg.grid.dp > 0 && cfg.grid.pp > 0 && cfg.grid.tp > 0))
        status = GT_ERROR(GT_ERR_INPUT, "plan: [grid] has a size set to auto; give the job's "
                          "rank count with --ranks N");
      else
        ranks = cfg.grid.dp * cfg.grid.pp * cfg.grid.tp;
    }
    if (status == GT_SUCCESS)
      status = gt_plan_memory(&cfg, ranks);
  } else if (status == GT_SUCCESS && a.validate)
    status = gt_plan_validate_cmd(&a);
  else if (status == GT_SUCCESS)
    status = gt_plan_run(&a, &cfg, &pins);
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true); /* every rank parsed and computed the same */
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  return GT_SUCCESS;
}
