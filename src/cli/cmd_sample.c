/*
 * cmd_sample.c - `gridtrain sample CHECKPOINT.h5 [options] [section.key=value ...]`:
 * text generation from a checkpoint with a key/value cache (gpt.h,
 * sample.h), on every rank of the job as one tensor-parallel group.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/comm.h"
#include "gridtrain/config.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grid.h"
#include "gridtrain/layout.h"
#include "gridtrain/log.h"
#include "gridtrain/path.h"
#include "gridtrain/prompt.h"
#include "gridtrain/sample.h"
#include "gridtrain/timer.h"

#define GT_SAMPLE_HINT "; see 'gridtrain sample --help'"

static void gt_sample_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf(
    "usage: gridtrain sample CHECKPOINT.h5|DIR [--prompt TEXT] [--tokens N]\n"
    "         [--temperature T] [--top-k K] [--seed S] [--data FILE.h5] [--ids]\n"
    "         [--logits FILE.npy] [section.key=value ...]\n"
    "       mpiexec -n P gridtrain sample CHECKPOINT.h5 ... [grid.tp=P]\n"
    "\n"
    "Generate text with the model of a checkpoint written by 'gridtrain train', one\n"
    "token at a time with a key/value cache, and print it (the prompt, then the\n"
    "new text) on stdout. A checkpoint directory ([checkpoint] dir) stands for the\n"
    "checkpoint its 'latest' names. The tokenizer is the one of the dataset that\n"
    "the checkpoint's deck names in [data] train (or --data). All ranks of the job\n"
    "form one tensor-parallel group (heads, MLP and vocabulary split as in\n"
    "training, whatever layout wrote the checkpoint); there is no data or pipeline\n"
    "parallelism: grid.dp and grid.pp may only be 1, grid.tp only the number of\n"
    "ranks. Every rank computes the same tokens; rank 0 prints them.\n"
    "\n"
    "Options:\n"
    "  --prompt TEXT       text to continue (default: a newline)\n"
    "  --tokens N          new tokens to generate, 1 to 1000000 (default 256); fewer\n"
    "                      when the prompt and the new text reach the model's\n"
    "                      context length ([model] seq_len): generation stops there\n"
    "  --temperature T     >= 0 (default 1); 0 is greedy: the most likely token\n"
    "  --top-k K           draw only among the K most likely tokens; 0 (default):\n"
    "                      the whole vocabulary\n"
    "  --seed S            seed of the draws (default 1337): the same seed gives the\n"
    "                      same text\n"
    "  --data FILE.h5      take the tokenizer from this dataset\n"
    "  --ids               print the new token ids (one line) instead of the text\n"
    "  --logits FILE.npy   write the logits each new token was picked from: a NumPy\n"
    "                      array, float32, one row per new token, one column per\n"
    "                      id of the model's vocabulary (numpy.load reads it)\n"
    "  section.key=value   override the checkpoint's deck (backend.device,\n"
    "                      backend.precision, backend.threads, grid.tp, ...); the\n"
    "                      model shape comes from the checkpoint\n"
    "  -h, --help          this help\n"
    "\n"
    "Rank 0 prints how many tokens it generated, and how fast, on stderr, with\n"
    "everything else that is not the text (the libraries a backend loads,\n"
    "warnings, errors).\n"
    "Exit status: 0 ok, 2 bad input (options, a missing or damaged checkpoint,\n"
    "a dataset without a tokenizer), 1 other errors.\n");
  fflush(stdout);
}

// ---- command line --------------------------------------------------------------

typedef struct {
  const char *ckpt, *prompt, *data, *logits;
  long tokens;
  gt_sample_opts opts;
  bool ids;
  int noverrides;
  char **overrides;
} gt_sample_args;

/* Match "--name VALUE" or "--name=VALUE" at argv[*i]. */
static int gt_sample_option(int argc, char **argv, int *i, const char *name, bool *matched,
                            const char **value)
{
  const char *arg = argv[*i];
  const size_t len = strlen(name);
  *matched = false;
  if (strncmp(arg, name, len) == 0 && arg[len] == '=') {
    *value = arg + len + 1;
  } else if (strcmp(arg, name) == 0) {
    GT_CHECK(*i + 1 < argc, GT_ERR_INPUT, "%s needs a value" GT_SAMPLE_HINT, name);
    *value = argv[++*i];
  } else {
    return GT_SUCCESS;
  }
  *matched = true;
  return GT_SUCCESS;
}

static int gt_sample_long(const char *name, const char *v, long lo, long hi, long *out)
{
  char *end;
  errno = 0;
  const long x = strtol(v, &end, 10);
  GT_CHECK(v[0] && *end == '\0' && errno == 0 && x >= lo && x <= hi, GT_ERR_INPUT,
           "%s '%s': expected an integer in [%ld, %ld]" GT_SAMPLE_HINT, name, v, lo, hi);
  *out = x;
  return GT_SUCCESS;
}

static int gt_sample_parse(int argc, char **argv, gt_sample_args *a)
{
  *a = (gt_sample_args){.prompt = "\n", .tokens = 256, .opts = {1.0, 0, 1337}};
  a->overrides = malloc(sizeof(char *) * (size_t)argc);
  GT_CHECK_ALLOC(a->overrides, sizeof(char *) * (size_t)argc);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL;
    bool m = false;
    if (arg[0] != '-') {
      if (!a->ckpt && !strchr(arg, '='))
        a->ckpt = arg;
      else if (a->ckpt && strchr(arg, '=') && strchr(arg, '.'))
        a->overrides[a->noverrides++] = argv[i];
      else
        return GT_ERROR(GT_ERR_INPUT,
                        "'%s': expected %s" GT_SAMPLE_HINT, arg,
                        a->ckpt ? "an option or section.key=value" : "the checkpoint file first");
      continue;
    }
    if (strcmp(arg, "--ids") == 0) {
      a->ids = true;
      continue;
    }
    GT_CALL(gt_sample_option(argc, argv, &i, "--prompt", &m, &v));
    if (m) {
      a->prompt = v;
      continue;
    }
    GT_CALL(gt_sample_option(argc, argv, &i, "--logits", &m, &v));
    if (m) {
      GT_CHECK(v[0], GT_ERR_INPUT, "--logits needs a file name" GT_SAMPLE_HINT);
      a->logits = v;
      continue;
    }
    GT_CALL(gt_sample_option(argc, argv, &i, "--data", &m, &v));
    if (m) {
      GT_CHECK(v[0], GT_ERR_INPUT, "--data needs a file name" GT_SAMPLE_HINT);
      a->data = v;
      continue;
    }
    GT_CALL(gt_sample_option(argc, argv, &i, "--tokens", &m, &v));
    if (m) {
      GT_CALL(gt_sample_long("--tokens", v, 1, 1000000, &a->tokens));
      continue;
    }
    GT_CALL(gt_sample_option(argc, argv, &i, "--top-k", &m, &v));
    if (m) {
      long k = 0;
      GT_CALL(gt_sample_long("--top-k", v, 0, 1L << 30, &k));
      a->opts.top_k = (int)k;
      continue;
    }
    GT_CALL(gt_sample_option(argc, argv, &i, "--temperature", &m, &v));
    if (m) {
      char *end;
      const double t = strtod(v, &end);
      GT_CHECK(v[0] && *end == '\0' && isfinite(t) && t >= 0, GT_ERR_INPUT,
               "--temperature '%s': expected a number >= 0 (0: greedy)" GT_SAMPLE_HINT, v);
      a->opts.temperature = t;
      continue;
    }
    GT_CALL(gt_sample_option(argc, argv, &i, "--seed", &m, &v));
    if (m) {
      char *end;
      errno = 0;
      const unsigned long long s = strtoull(v, &end, 10);
      GT_CHECK(v[0] >= '0' && v[0] <= '9' && *end == '\0' && errno == 0, GT_ERR_INPUT,
               "--seed '%s': expected an integer in [0, 18446744073709551615]" GT_SAMPLE_HINT,
               v);
      a->opts.seed = s;
      continue;
    }
    return GT_ERROR(GT_ERR_INPUT, "unknown option '%s'" GT_SAMPLE_HINT, arg);
  }
  GT_CHECK(a->ckpt, GT_ERR_INPUT,
           "sample: missing checkpoint; usage: gridtrain sample CHECKPOINT.h5 [options]"
           GT_SAMPLE_HINT);
  GT_CALL(gt_sample_check(&a->opts));
  return GT_SUCCESS;
}

// ---- configuration -------------------------------------------------------------------

/* The checkpoint's deck with the command line's overrides, on a grid of
 * dp = pp = 1 and tp = every rank. Not collective (the same on every rank). */
static int gt_sample_config(const gt_sample_args *a, const gt_ckpt_meta *meta, int ranks,
                            gt_config *cfg)
{
  GT_CHECK(meta->deck && meta->deck[0], GT_ERR_INPUT,
           "checkpoint %s holds no deck (the configuration that wrote it)", a->ckpt);
  gt_config_defaults(cfg);
  char source[GT_PATH_MAX + 32];
  snprintf(source, sizeof source, "%s (its deck)", a->ckpt);
  GT_CALL(gt_config_parse(cfg, meta->deck, source, 0, NULL));
  cfg->grid.dp = cfg->grid.pp = cfg->grid.tp = -1; /* -1: not on the command line */
  GT_CALL(gt_config_parse(cfg, NULL, NULL, a->noverrides, a->overrides));
  const long dp = cfg->grid.dp, pp = cfg->grid.pp, tp = cfg->grid.tp;
  GT_CHECK(dp == -1 || dp == 1, GT_ERR_INPUT,
           "grid.dp=%ld: sample runs one data-parallel replica (dp = 1)" GT_SAMPLE_HINT, dp);
  GT_CHECK(pp == -1 || pp == 1, GT_ERR_INPUT,
           "grid.pp=%ld: sample runs the whole model on one pipeline stage (pp = 1)"
           GT_SAMPLE_HINT, pp);
  GT_CHECK(tp <= 0 || tp == ranks, GT_ERR_INPUT,
           "grid.tp=%ld, but the job has %d rank%s: sample runs every rank in one "
           "tensor-parallel group; run it with mpiexec -n %ld",
           tp, ranks, ranks == 1 ? "" : "s", tp);
  cfg->grid.dp = cfg->grid.pp = 1;
  cfg->grid.tp = ranks;
  /* one sequence at a time through the whole model: no pipeline schedule,
   * no micro-batches, no sequence parallelism */
  snprintf(cfg->parallel.schedule, sizeof cfg->parallel.schedule, "1f1b");
  cfg->parallel.sequence_parallel = false;
  cfg->data.batch = cfg->data.microbatches = 1;
  gt_gpt_shape have;
  GT_CALL(gt_ckpt_meta_shape(meta, a->ckpt, &have));
  const gt_gpt_shape want = gt_gpt_shape_config(cfg);
  gt_gpt_shape_field f;
  GT_CHECK(!gt_gpt_shape_differ(&have, &want, true, &f), GT_ERR_INPUT,
           "model.%s=%s: the model shape comes from the checkpoint (%s = %s)", f.key, f.b,
           f.key, f.a);
  if (a->data)
    snprintf(cfg->data.train, sizeof cfg->data.train, "%s", a->data);
  else if (!cfg->data.train[0]) /* an imported checkpoint holds its own tokenizer */
    snprintf(cfg->data.train, sizeof cfg->data.train, "%s", a->ckpt);
  GT_CALL(gt_config_check_values(cfg));
  return GT_SUCCESS;
}

// ---- the run -------------------------------------------------------------------------

typedef struct {
  gt_grid *grid;
  gt_backend *be;
  gt_coll *coll;
  gt_gpt *model;
  gt_gpt_cache *cache;
  gt_tokenizer *tok;
  gt_ckpt_tensor *tensors;
  int32_t *prompt, *out;
  float *logits; /* rank 0 with --logits: tokens x vocab */
  int vocab;     /* the model's */
} gt_sample_run;

static void gt_sample_run_free(gt_sample_run *r)
{
  gt_gpt_cache_destroy(&r->cache);
  gt_gpt_destroy(&r->model);
  gt_coll_destroy(&r->coll);
  gt_backend_destroy(&r->be);
  gt_grid_destroy(&r->grid);
  gt_tokenizer_free(r->tok);
  free(r->tensors);
  free(r->prompt);
  free(r->out);
  free(r->logits);
}

/* A failure to read the checkpoint is bad input (exit 2) whatever its
 * cause inside the file (a damaged block is an HDF5 error). */
static int gt_sample_ckpt_error(int status, const char *path)
{
  if (status == GT_ERR_HDF5)
    return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                         "cannot read checkpoint %s", path);
  return status;
}

/* Backend, collectives, the model part of this rank with the checkpoint's
 * weights, and a cache of the context length. Collective on the world. */
static int gt_sample_load(const gt_sample_args *a, const gt_config *cfg, MPI_Comm world,
                          gt_sample_run *r)
{
  int ranks;
  GT_CALL_MPI(MPI_Comm_size(world, &ranks));
  gt_layout l;
  int status = gt_layout_resolve(cfg, ranks, &l); /* the same on every rank */
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  const int sizes[3] = {l.dp, l.pp, l.tp};
  GT_CALL(gt_grid_create(world, sizes, &r->grid));
  const gt_grid *g = r->grid;
  const int threads = gt_grid_threads(g, cfg->backend.threads);
  gt_grid_set_wait(g, threads, false, false);
  const gt_backend_options opt = {threads, g->node_rank, cfg->backend.attention};
  status = gt_backend_create_device(cfg->backend.device, &opt, &r->be);
  if (status == GT_SUCCESS)
    status = gt_coll_create(r->be, gt_tristate_names[cfg->backend.mpi_device], &r->coll);
  if (status == GT_SUCCESS && cfg->parallel.collectives == GT_COLLECTIVES_NCCL)
    status = gt_coll_use_nccl(r->coll, &g->tp, 1);
  GT_CALL(gt_error_agree(status, g->world));
  const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
  gt_gpt_part part = gt_gpt_whole(&shape);
  part.tp = (gt_group){g->tp, g->tp_rank, g->tp_size, -1, r->coll};
  status = gt_gpt_create(r->be, &shape, &part, NULL, l.dtype, 1, 1, 1, &r->model);
  const int n = gt_gpt_logical_count(&shape);
  r->tensors = calloc((size_t)n, sizeof *r->tensors);
  if (status == GT_SUCCESS && !r->tensors)
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory for the tensor list");
  GT_CALL(gt_error_agree(status, g->world));
  for (int i = 0; i < n; i++)
    gt_gpt_logical_param(&shape, i, r->tensors[i].name, &r->tensors[i].ndim,
                         r->tensors[i].dims);
  gt_params *params = gt_gpt_params(r->model);
  /* the weights only: an empty range of the moments */
  const gt_ckpt_state st = {.ntensors = n, .tensors = r->tensors, .params = params,
                            .mlo = params->numel, .mhi = params->numel};
  status = gt_error_agree(gt_ckpt_read(a->ckpt, &st, g->world), g->world);
  GT_CALL(gt_sample_ckpt_error(status, a->ckpt));
  GT_CALL(gt_error_agree(gt_params_refresh_compute(params), g->world));
  GT_CALL(gt_error_agree(gt_gpt_cache_create(r->model, shape.max_seq, &r->cache), g->world));
  return GT_SUCCESS;
}

/* rows x cols float32 as a NumPy .npy file (format 1.0, little-endian). */
static int gt_sample_write_npy(const char *path, const float *x, int rows, int cols)
{
  char dict[128];
  const int n = snprintf(dict, sizeof dict,
                         "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows,
                         cols);
  const size_t hlen = (10 + (size_t)n + 1 + 63) / 64 * 64 - 10; /* dict, blanks, newline */
  unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                            (unsigned char)(hlen >> 8)};
  FILE *f = fopen(path, "wb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot write --logits %s: %s", path, strerror(errno));
  bool ok = fwrite(head, 1, sizeof head, f) == sizeof head && fputs(dict, f) >= 0;
  for (size_t i = (size_t)n; ok && i + 1 < hlen; i++)
    ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  ok = ok && fwrite(x, sizeof(float), (size_t)rows * (size_t)cols, f) ==
                 (size_t)rows * (size_t)cols;
  ok = fclose(f) == 0 && ok;
  GT_CHECK(ok, GT_ERR_SYSTEM, "cannot write --logits %s: %s", path, strerror(errno));
  return GT_SUCCESS;
}

/* Rank 0: the prompt and the new text (or the new ids) on stdout; the count
 * and rate on stderr. */
static int gt_sample_print(const gt_sample_args *a, gt_sample_run *r, int np, int nout,
                           int context, double seconds)
{
  if (a->logits)
    GT_CALL(gt_sample_write_npy(a->logits, r->logits, nout, r->vocab));
  if (a->ids) {
    for (int i = 0; i < nout; i++)
      printf("%s%d", i ? " " : "", (int)r->out[i]);
    printf("\n");
  } else {
    char *text = NULL;
    size_t len = 0;
    GT_CALL(gt_prompt_decode(r->tok, r->out, nout, &text, &len));
    fputs(a->prompt, stdout);
    fwrite(text, 1, len, stdout);
    printf("\n");
    free(text);
  }
  fflush(stdout);
  fprintf(stderr, "gridtrain: sample: %d new token%s after a prompt of %d in %.2f s (%.0f "
          "tokens/s through the model, the prompt's included)%s\n",
          nout, nout == 1 ? "" : "s", np, seconds, seconds > 0 ? (np + nout) / seconds : 0.0,
          nout < a->tokens ? "; stopped at the context length" : "");
  if (nout < a->tokens)
    fprintf(stderr, "gridtrain: sample: the model's context is %d tokens ([model] seq_len); "
            "the prompt and the new text fill it\n", context);
  return GT_SUCCESS;
}

static int gt_sample_main(gt_sample_args *a, MPI_Comm world)
{
  int ranks;
  GT_CALL_MPI(MPI_Comm_size(world, &ranks));
  char path[GT_PATH_MAX];
  bool none = false;
  int status = gt_log_rank() == 0 ? gt_cli_checkpoint(a->ckpt, path, sizeof path, &none)
                                  : GT_SUCCESS;
  if (status == GT_SUCCESS && none)
    status = GT_ERROR(GT_ERR_INPUT,
                      "%s is a directory without checkpoints (step_NNNNNNNN.h5)", a->ckpt);
  GT_CALL(gt_error_agree(status, world));
  GT_CALL(gt_bcast_bytes(path, sizeof path, 0, world));
  a->ckpt = path;
  gt_ckpt_meta meta;
  status = gt_error_agree(gt_ckpt_read_meta(a->ckpt, world, &meta), world);
  GT_CALL(gt_sample_ckpt_error(status, a->ckpt));
  gt_config cfg;
  status = gt_sample_config(a, &meta, ranks, &cfg);
  gt_ckpt_meta_free(&meta);
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true); /* the same file and arguments everywhere */
    return status;
  }
  gt_sample_run r = {0};
  int np = 0, limit = 0, nout = 0;
  status = gt_sample_load(a, &cfg, world, &r);
  status = gt_config_locate_error(&cfg, status); /* a check after parsing: name the line */
  if (status == GT_SUCCESS)
    status = gt_prompt_encode(cfg.data.train, a->prompt, (int)cfg.model.vocab, world, &r.tok,
                              &r.prompt, &np, &limit);
  if (status == GT_SUCCESS) {
    r.vocab = (int)cfg.model.vocab;
    r.out = malloc(sizeof(int32_t) * (size_t)a->tokens);
    int mine = r.out ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
    if (mine == GT_SUCCESS && a->logits && gt_log_rank() == 0) {
      const char *in[2] = {a->ckpt, cfg.data.train};
      mine = gt_path_refuse_clobber(a->logits, "--logits", 2, in,
                                    (const char *const[]){"the checkpoint", "the dataset"});
      const size_t bytes = sizeof(float) * (size_t)a->tokens * (size_t)r.vocab;
      r.logits = mine == GT_SUCCESS ? malloc(bytes) : NULL;
      if (mine == GT_SUCCESS && !r.logits)
        mine = GT_ERROR(GT_ERR_SYSTEM, "out of memory for --logits (%zu bytes)", bytes);
    }
    status = gt_error_agree(mine, world);
  }
  const double t1 = gt_now();
  if (status == GT_SUCCESS) {
    /* a problem here (a prompt too long) is the same on every rank */
    status = gt_generate(r.model, r.cache, r.prompt, np, (int)a->tokens, limit, &a->opts,
                         r.out, r.logits, &nout);
    status = gt_error_agree(status, world);
  }
  if (status == GT_SUCCESS && gt_log_rank() == 0)
    status = gt_sample_print(a, &r, np, nout, (int)cfg.model.seq_len, gt_now() - t1);
  status = gt_error_agree(status, world);
  gt_sample_run_free(&r);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_cmd_sample(int argc, char **argv, MPI_Comm world)
{
  if (gt_cli_wants_help(argc, argv)) {
    gt_sample_usage();
    return GT_SUCCESS;
  }
  gt_log_info_to_stderr(); /* stdout is the text */
  gt_sample_args a;
  int status = gt_sample_parse(argc, argv, &a);
  if (status != GT_SUCCESS) {
    free(a.overrides);
    gt_error_set_collective(true); /* every rank parses the same arguments */
    return status;
  }
  status = gt_sample_main(&a, world);
  free(a.overrides);
  GT_CALL(status);
  return GT_SUCCESS;
}
