/*
 * cluster.c - the cluster description file of the planner (costmodel.h):
 * INI text in the input deck's syntax, parsed with inih against a table of
 * keys, with the deck's rules (unknown sections and keys, bad values and
 * keys given twice are one-line errors naming file and line).
 */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/costmodel.h"
#include "gridtrain/error.h"

typedef enum { GT_CK_INT, GT_CK_REAL, GT_CK_NAME, GT_CK_BOOL, GT_CK_ENUM } gt_ck_type;

typedef struct {
  const char *section, *name;
  gt_ck_type type;
  size_t offset;
  double min, max;
  const char *choices; /* GT_CK_ENUM: "a|b" -> 0, 1 */
  bool required;
  const char *help;
} gt_ckey;

#define GT_COFF(member) offsetof(gt_cluster, member)

static const gt_ckey gt_ckeys[] = {
  {"cluster", "name", GT_CK_NAME, GT_COFF(name), 0, 0, NULL, false, "a name for the tables"},
  {"cluster", "nodes", GT_CK_INT, GT_COFF(nodes), 1, 1e7, NULL, false,
   "nodes (the command line's --nodes overrides)"},
  {"cluster", "ranks_per_node", GT_CK_INT, GT_COFF(ranks_per_node), 1, 65536, NULL, true,
   "ranks (GPUs, or MPI processes) per node"},
  {"cluster", "cores_per_node", GT_CK_INT, GT_COFF(cores_per_node), 0, 1e6, NULL, false,
   "CPU cores the ranks of a node share (beyond them the ranks take turns); 0: a device per rank"},
  {"compute", "peak_fp32", GT_CK_REAL, GT_COFF(peak[GT_PEAK_FP32]), 1e6, 1e20, NULL, true,
   "FLOP/s of fp32 products"},
  {"compute", "peak_tf32", GT_CK_REAL, GT_COFF(peak[GT_PEAK_TF32]), 0, 1e20, NULL, false,
   "FLOP/s of tf32 products (0: none)"},
  {"compute", "peak_bf16", GT_CK_REAL, GT_COFF(peak[GT_PEAK_BF16]), 0, 1e20, NULL, false,
   "FLOP/s of bf16 products (0: bf16 is not planned)"},
  {"compute", "peak_fp16", GT_CK_REAL, GT_COFF(peak[GT_PEAK_FP16]), 0, 1e20, NULL, false,
   "FLOP/s of fp16 products (0: fp16 is not planned)"},
  {"compute", "fp32_matmul", GT_CK_ENUM, GT_COFF(fp32_tf32), 0, 0, "fp32|tf32", false,
   "the peak fp32 products run at"},
  {"compute", "memory", GT_CK_REAL, GT_COFF(memory), 1e6, 1e18, NULL, true,
   "bytes of memory a device has (cores_per_node > 0: a node's RAM)"},
  {"compute", "memory_bw", GT_CK_REAL, GT_COFF(memory_bw), 1e6, 1e18, NULL, true,
   "bytes/s of a device's memory (cores_per_node > 0: a node's)"},
  {"network", "intra_alpha", GT_CK_REAL, GT_COFF(intra_alpha), 0, 1, NULL, false,
   "s per message inside a node"},
  {"network", "intra_beta", GT_CK_REAL, GT_COFF(intra_beta), 0, 1e-3, NULL, true,
   "s per byte per rank inside a node"},
  {"network", "inter_alpha", GT_CK_REAL, GT_COFF(inter_alpha), 0, 1, NULL, false,
   "s per message between nodes"},
  {"network", "inter_beta", GT_CK_REAL, GT_COFF(inter_beta), 0, 1e-3, NULL, false,
   "s per byte per rank between nodes (its share of the node's NICs; 0: as intra)"},
  {"network", "gamma", GT_CK_REAL, GT_COFF(gamma), 0, 1e-3, NULL, false,
   "s per byte reduced (host-side sums); 0 where it is free"},
  {"calibration", "eff_matmul", GT_CK_REAL, GT_COFF(eff_matmul), 1e-3, 16, NULL, false,
   "fraction of the peak that matrix products reach"},
  {"calibration", "eff_mem", GT_CK_REAL, GT_COFF(eff_mem), 1e-3, 16, NULL, false,
   "fraction of memory_bw that memory-bound kernels reach (above 1 where their data stays "
   "in cache)"},
  {"calibration", "eff_net", GT_CK_REAL, GT_COFF(eff_net), 1e-3, 16, NULL, false,
   "fraction of the link bandwidth (1 / beta) that collectives reach"},
  {"calibration", "eff_attention", GT_CK_REAL, GT_COFF(eff_attention), 0, 16, NULL, false,
   "fraction of the peak flash attention reaches (0: eff_matmul)"},
  {"calibration", "kernel_overhead", GT_CK_REAL, GT_COFF(kernel_overhead), 0, 1, NULL, false,
   "s added to every kernel (launch, synchronisation)"},
  {"calibration", "p2p_overhead", GT_CK_REAL, GT_COFF(p2p_overhead), 0, 10, NULL, false,
   "s added to every pipeline transfer"},
  {"calibration", "oversub_alpha", GT_CK_REAL, GT_COFF(oversub_alpha), 0, 10, NULL, false,
   "s added to each message step per rank beyond a node's cores (waits for a "
   "descheduled peer)"},
  {"calibration", "step_overhead", GT_CK_REAL, GT_COFF(step_overhead), 0, 1e4, NULL, false,
   "s per step outside the model (data, loss, logging)"},
  {"software", "attention", GT_CK_ENUM, GT_COFF(flash), 0, 0, "materialized|flash", false,
   "flash: causal, the T x T scores never in memory; materialized: scores, softmax and "
   "dropout written and read"},
  {"software", "dropout", GT_CK_BOOL, GT_COFF(dropout), 0, 0, NULL, false,
   "dropout after attention and on the residual branches (masks in memory)"},
  {"software", "pp_scatter_gather", GT_CK_BOOL, GT_COFF(pp_scatter_gather), 0, 0, NULL, false,
   "a pipeline transfer sends 1/tp per rank and all-gathers inside the node"},
  {"software", "sp_gather_overlap", GT_CK_BOOL, GT_COFF(sp_gather_overlap), 0, 0, NULL, false,
   "sequence parallelism's extra backward all-gathers overlap compute"},
  {"software", "stage_split", GT_CK_ENUM, GT_COFF(uniform_split), 0, 0, "balanced|uniform",
   false, "pipeline stages: balanced by cost (gridtrain) or layers / pp each"},
  {"software", "grad_bytes", GT_CK_INT, GT_COFF(grad_bytes), 2, 4, NULL, false,
   "bytes per gradient element in the data-parallel reduction (4: fp32)"},
};

#define GT_NCKEYS ((int)(sizeof gt_ckeys / sizeof gt_ckeys[0]))
_Static_assert(sizeof gt_ckeys / sizeof gt_ckeys[0] <= sizeof ((gt_cluster *)0)->keys_set,
               "raise gt_cluster.keys_set");

void gt_cluster_defaults(gt_cluster *c)
{
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "cluster");
  c->nodes = 1;
  c->eff_matmul = c->eff_mem = c->eff_net = 1.0;
  c->flash = true;
  c->grad_bytes = 4;
}

// ---- parsing ------------------------------------------------------------------

typedef struct {
  gt_cluster *c;
  const char *source, *text;
  size_t pos;
  int line, status;
  int set_line[GT_NCKEYS];
} gt_cparse;

static void gt_ckey_list(const char *section, char *buf, size_t size)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < GT_NCKEYS; i++) {
    const char *s = gt_ckeys[i].section;
    if (section ? strcmp(s, section) != 0
                : (i > 0 && strcmp(s, gt_ckeys[i - 1].section) == 0))
      continue;
    int w = snprintf(buf + used, size - used, "%s%s", used ? ", " : "",
                     section ? gt_ckeys[i].name : s);
    if (w < 0 || (size_t)w >= size - used)
      break;
    used += (size_t)w;
  }
}

static bool gt_ckey_store(const gt_ckey *k, gt_cluster *c, const char *v)
{
  char *end = NULL;
  void *p = (char *)c + k->offset;
  switch (k->type) {
  case GT_CK_INT: {
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < k->min || x > k->max)
      return false;
    *(int *)p = (int)x;
    return true;
  }
  case GT_CK_REAL: {
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < k->min || x > k->max)
      return false;
    *(double *)p = x;
    return true;
  }
  case GT_CK_NAME:
    if (!*v || strlen(v) >= sizeof c->name)
      return false;
    snprintf((char *)p, sizeof c->name, "%s", v);
    return true;
  case GT_CK_BOOL:
    if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0) {
      *(bool *)p = strcmp(v, "on") == 0;
      return true;
    }
    return false;
  case GT_CK_ENUM: {
    const char *bar = strchr(k->choices, '|');
    size_t n0 = (size_t)(bar - k->choices);
    if (strlen(v) == n0 && strncmp(v, k->choices, n0) == 0)
      *(bool *)p = false;
    else if (strcmp(v, bar + 1) == 0)
      *(bool *)p = true;
    else
      return false;
    return true;
  }
  }
  return false;
}

static void gt_ckey_accepts(const gt_ckey *k, char *buf, size_t size)
{
  switch (k->type) {
  case GT_CK_INT:
    snprintf(buf, size, "an integer in [%.0f, %.0f]", k->min, k->max);
    break;
  case GT_CK_REAL:
    snprintf(buf, size, "a number in [%g, %g]", k->min, k->max);
    break;
  case GT_CK_NAME:
    snprintf(buf, size, "a name of 1 to %zu characters", sizeof ((gt_cluster *)0)->name - 1);
    break;
  case GT_CK_BOOL:
    snprintf(buf, size, "on or off");
    break;
  case GT_CK_ENUM: {
    const char *bar = strchr(k->choices, '|');
    snprintf(buf, size, "%.*s or %s", (int)(bar - k->choices), k->choices, bar + 1);
    break;
  }
  }
}

static int gt_capply(gt_cparse *ctx, const char *section, const char *name, const char *value)
{
  char list[512], accepts[128];
  const char *src = ctx->source;
  if (!*section) {
    gt_ckey_list(NULL, list, sizeof list);
    return GT_ERROR(GT_ERR_INPUT, "%s:%d: key '%s' is outside any section; put it under one "
                    "of [%s]", src, ctx->line, name, list);
  }
  bool known = false;
  int i = -1;
  for (int j = 0; j < GT_NCKEYS; j++)
    if (strcmp(gt_ckeys[j].section, section) == 0) {
      known = true;
      if (strcmp(gt_ckeys[j].name, name) == 0)
        i = j;
    }
  if (!known) {
    gt_ckey_list(NULL, list, sizeof list);
    return GT_ERROR(GT_ERR_INPUT, "%s:%d: unknown section [%s] in a cluster file; valid "
                    "sections: %s", src, ctx->line, section, list);
  }
  if (i < 0) {
    gt_ckey_list(section, list, sizeof list);
    return GT_ERROR(GT_ERR_INPUT, "%s:%d: unknown key '%s' in [%s]; valid keys: %s", src,
                    ctx->line, name, section, list);
  }
  if (ctx->set_line[i])
    return GT_ERROR(GT_ERR_INPUT, "%s:%d: [%s] %s is set twice (first on line %d)", src,
                    ctx->line, section, name, ctx->set_line[i]);
  ctx->set_line[i] = ctx->line;
  if (!gt_ckey_store(&gt_ckeys[i], ctx->c, value)) {
    gt_ckey_accepts(&gt_ckeys[i], accepts, sizeof accepts);
    return GT_ERROR(GT_ERR_INPUT, "%s:%d: [%s] %s = '%.60s' is not valid; expected %s", src,
                    ctx->line, section, name, value, accepts);
  }
  return GT_SUCCESS;
}

static int gt_chandler(void *user, const char *section, const char *name, const char *value)
{
  gt_cparse *ctx = user;
  if (ctx->status == GT_SUCCESS)
    ctx->status = gt_capply(ctx, section, name, value);
  return ctx->status == GT_SUCCESS;
}

static char *gt_creader(char *str, int num, void *stream)
{
  gt_cparse *ctx = stream;
  const char *t = ctx->text + ctx->pos;
  if (!*t || ctx->status != GT_SUCCESS)
    return NULL;
  const char *nl = strchr(t, '\n');
  size_t len = nl ? (size_t)(nl - t) + 1 : strlen(t);
  ctx->line++;
  if (len >= (size_t)num) {
    ctx->status = GT_ERROR(GT_ERR_INPUT, "%s:%d: line is longer than %d characters",
                           ctx->source, ctx->line, num - 2);
    return NULL;
  }
  memcpy(str, t, len);
  str[len] = '\0';
  ctx->pos += len;
  return str;
}

int gt_cluster_parse(gt_cluster *c, const char *text, const char *source)
{
  gt_cparse ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.c = c;
  ctx.source = source ? source : "cluster";
  ctx.text = text;
  int rc = ini_parse_stream(gt_creader, &ctx, gt_chandler, &ctx);
  if (ctx.status != GT_SUCCESS)
    return ctx.status;
  if (rc != 0)
    return GT_ERROR(GT_ERR_INPUT, "%s:%d: cannot parse this line; expected '[section]', "
                    "'key = value' or a comment starting with ';' or '#'",
                    ctx.source, rc > 0 ? rc : ctx.line);
  for (int i = 0; i < GT_NCKEYS; i++)
    if (ctx.set_line[i])
      c->keys_set[i] = 1;
  size_t used = strlen(c->source);
  snprintf(c->source + used, sizeof c->source - used, "%s%s", used ? " + " : "", ctx.source);
  return GT_SUCCESS;
}

int gt_cluster_load(gt_cluster *c, const char *path)
{
  FILE *f = fopen(path, "rb");
  GT_CHECK(f != NULL, GT_ERR_INPUT, "cannot open cluster file '%s': %s", path,
           strerror(errno));
  char *text = malloc(65537);
  if (!text) {
    fclose(f);
    GT_CHECK_ALLOC(text, 65537);
  }
  size_t n = fread(text, 1, 65536, f);
  const bool more = fgetc(f) != EOF, failed = ferror(f) != 0;
  fclose(f);
  text[n] = '\0';
  int status = GT_SUCCESS;
  if (failed)
    status = GT_ERROR(GT_ERR_INPUT, "cannot read cluster file '%s'", path);
  else if (more)
    status = GT_ERROR(GT_ERR_INPUT, "cluster file '%s' is larger than 64 KiB; is it a cluster "
                      "description?", path);
  else if (strlen(text) != n)
    status = GT_ERROR(GT_ERR_INPUT, "cluster file '%s' contains a NUL byte; is it a text "
                      "file?", path);
  else
    status = gt_cluster_parse(c, text, path);
  free(text);
  return status;
}

int gt_cluster_check(const gt_cluster *c)
{
  const char *src = c->source[0] ? c->source : "cluster";
  for (int i = 0; i < GT_NCKEYS; i++)
    GT_CHECK(!gt_ckeys[i].required || c->keys_set[i], GT_ERR_INPUT,
             "%s: [%s] %s is required (%s)", src, gt_ckeys[i].section, gt_ckeys[i].name,
             gt_ckeys[i].help);
  GT_CHECK(c->peak[GT_PEAK_FP32] > 0, GT_ERR_INPUT, "%s: [compute] peak_fp32 must be > 0", src);
  /* 0 says "no such precision"; anything else is a device's FLOP/s (below a
   * million FLOP/s the predicted times would leave the range of a double
   * for a large model) */
  static const char *const peak_keys[GT_PEAK_COUNT] = {"peak_fp32", "peak_tf32", "peak_bf16",
                                                       "peak_fp16"};
  for (int p = 0; p < GT_PEAK_COUNT; p++)
    GT_CHECK(c->peak[p] == 0 || c->peak[p] >= 1e6, GT_ERR_INPUT,
             "%s: [compute] %s = %g: 0 (none) or at least 1e6 FLOP/s", src, peak_keys[p],
             c->peak[p]);
  GT_CHECK(!c->fp32_tf32 || c->peak[GT_PEAK_TF32] > 0, GT_ERR_INPUT,
           "%s: [compute] fp32_matmul = tf32 needs peak_tf32 > 0", src);
  GT_CHECK(c->intra_beta > 0, GT_ERR_INPUT, "%s: [network] intra_beta must be > 0", src);
  return GT_SUCCESS;
}
