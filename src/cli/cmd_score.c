/*
 * cmd_score.c - `gridtrain score CHECKPOINT FILE... [--tokens] [--json]
 * [section.key=value ...]`: the mean cross-entropy and perplexity of a
 * checkpoint's model on text or token files (score.h), at any layout.
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
#include "gridtrain/ingest.h"
#include "gridtrain/layout.h"
#include "gridtrain/log.h"
#include "gridtrain/path.h"
#include "gridtrain/score.h"
#include "gridtrain/gpt.h"
#include "gridtrain/hf_import.h"
#include "gridtrain/tokenizer.h"

#define GT_SCORE_HINT "; see 'gridtrain score --help'"

static void gt_score_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf(
    "usage: gridtrain score CHECKPOINT.h5|DIR FILE... [--tokens] [--json]\n"
    "         [--data FILE.h5] [section.key=value ...]\n"
    "       mpiexec -n P gridtrain score CHECKPOINT.h5 FILE... [grid.tp=2 ...]\n"
    "\n"
    "Print the mean cross-entropy (nats per token) and the perplexity of the\n"
    "model of a checkpoint written by 'gridtrain train' on text files, tokenized\n"
    "with the tokenizer of the dataset the checkpoint's deck names in [data] train\n"
    "(or --data), or with --tokens on token files. A checkpoint directory stands\n"
    "for the checkpoint its 'latest' names.\n"
    "\n"
    "Each file is cut into windows of [model] seq_len predictions that do not\n"
    "overlap; every token but the first of a file is predicted once, a file's\n"
    "last window is as short as its tokens; a file of one token predicts nothing.\n"
    "The files' sums are added. The layout is the checkpoint's deck on this job's\n"
    "ranks as 'train' resolves it, grid.dp, grid.pp and grid.tp auto unless given:\n"
    "data-parallel replicas share the windows, pipeline stages and tensor-parallel\n"
    "groups split the model, in any layout (no sequence parallelism or ZeRO: a\n"
    "forward pass keeps no optimizer state).\n"
    "\n"
    "Options:\n"
    "  --tokens            the files are token ids: .npy, llm.c .bin or nanoGPT\n"
    "                      uint16 (the formats of 'gridtrain ingest tokens'), each\n"
    "                      id below the model's vocabulary\n"
    "  --json              print one JSON object instead:\n"
    "                      {\"tokens\": N, \"loss\": X, \"perplexity\": Y}\n"
    "  --data FILE.h5      take the tokenizer from this dataset\n"
    "  section.key=value   override the checkpoint's deck (grid.dp, grid.pp,\n"
    "                      grid.tp, data.microbatches, parallel.schedule,\n"
    "                      backend.device, backend.precision, backend.threads,\n"
    "                      ...); the model shape comes from the checkpoint\n"
    "  -h, --help          this help\n"
    "\n"
    "Rank 0 prints one line: 'score: N tokens, loss X nats/token, perplexity Y'\n"
    "(N: the tokens predicted) on stdout; everything else (the libraries a\n"
    "backend loads, warnings, errors) goes to stderr.\n"
    "Exit status: 0 ok, 2 bad input (options, a missing or empty file, a token\n"
    "outside the vocabulary, a missing or damaged checkpoint, a layout that does\n"
    "not fit), 1 other errors.\n");
  fflush(stdout);
}

// ---- command line --------------------------------------------------------------

typedef struct {
  const char *ckpt, *data;
  bool tokens, json;
  bool hf; /* ckpt is a Hugging Face model directory */
  int nfiles, noverrides;
  char **files, **overrides;
} gt_score_args;

/* section.key=value: a '.' before the first '=' and no '/' there. */
static bool gt_score_is_override(const char *arg)
{
  const char *eq = strchr(arg, '=');
  if (!eq)
    return false;
  const char *dot = memchr(arg, '.', (size_t)(eq - arg));
  const char *slash = memchr(arg, '/', (size_t)(eq - arg));
  return dot && dot > arg && !slash;
}

static int gt_score_parse(int argc, char **argv, gt_score_args *a)
{
  *a = (gt_score_args){0};
  a->files = malloc(sizeof(char *) * (size_t)argc);
  a->overrides = malloc(sizeof(char *) * (size_t)argc);
  GT_CHECK(a->files && a->overrides, GT_ERR_SYSTEM, "out of memory for the arguments");
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--tokens") == 0) {
      a->tokens = true;
    } else if (strcmp(arg, "--json") == 0) {
      a->json = true;
    } else if (strcmp(arg, "--data") == 0 || strncmp(arg, "--data=", 7) == 0) {
      if (arg[6] == '=') {
        a->data = arg + 7;
      } else {
        GT_CHECK(i + 1 < argc, GT_ERR_INPUT, "--data needs a file name" GT_SCORE_HINT);
        a->data = argv[++i];
      }
      GT_CHECK(a->data[0], GT_ERR_INPUT, "--data needs a file name" GT_SCORE_HINT);
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return GT_ERROR(GT_ERR_INPUT, "unknown option '%s'" GT_SCORE_HINT, arg);
    } else if (a->ckpt && gt_score_is_override(arg)) {
      a->overrides[a->noverrides++] = argv[i];
    } else if (!a->ckpt) {
      GT_CHECK(!gt_score_is_override(arg), GT_ERR_INPUT,
               "'%s': expected the checkpoint first" GT_SCORE_HINT, arg);
      a->ckpt = arg;
    } else {
      a->files[a->nfiles++] = argv[i];
    }
  }
  GT_CHECK(a->ckpt, GT_ERR_INPUT,
           "score: missing checkpoint; usage: gridtrain score CHECKPOINT FILE..." GT_SCORE_HINT);
  GT_CHECK(a->nfiles > 0, GT_ERR_INPUT,
           "score: no file to score; usage: gridtrain score CHECKPOINT FILE..." GT_SCORE_HINT);
  GT_CHECK(!(a->tokens && a->data), GT_ERR_INPUT,
           "--data names a tokenizer, which --tokens files do not need" GT_SCORE_HINT);
  return GT_SUCCESS;
}

// ---- the checkpoint and the configuration --------------------------------------------------

/* Rank 0: a CHECKPOINT argument that names no checkpoint (a directory
 * without step files). This is where a Hugging Face model directory
 * (config.json, *.safetensors) will be imported; until then it is not a
 * checkpoint. */
/* A directory without checkpoints: a Hugging Face model directory (its
 * config.json and weights), or an error. Rank 0. */
static int gt_score_other_source(const char *arg, bool *hf)
{
  *hf = gt_hf_is_model_dir(arg);
  GT_CHECK(*hf, GT_ERR_INPUT,
           "%s is not a checkpoint: a directory without checkpoints (step_NNNNNNNN.h5) or "
           "config.json; give a checkpoint file, a [checkpoint] dir or a Hugging Face model "
           "directory",
           arg);
  return GT_SUCCESS;
}

/* The checkpoint's deck with the command line's overrides; the grid sizes
 * auto unless given, one window per micro-batch unless [data] batch is
 * given, no sequence parallelism. Not collective (the same everywhere). */
static int gt_score_config(const gt_score_args *a, const char *path, const gt_ckpt_meta *meta,
                           int ranks, gt_config *cfg)
{
  gt_config_defaults(cfg);
  if (a->hf) { /* the model config.json describes */
    GT_CALL(gt_hf_config_read(path, cfg));
  } else {
    GT_CHECK(meta->deck && meta->deck[0], GT_ERR_INPUT,
             "checkpoint %s holds no deck (the configuration that wrote it)", path);
    char source[GT_PATH_MAX + 32];
    snprintf(source, sizeof source, "%s (its deck)", path);
    GT_CALL(gt_config_parse(cfg, meta->deck, source, 0, NULL));
  }
  cfg->grid.dp = cfg->grid.pp = cfg->grid.tp = 0; /* auto: the training layout need not fit */
  cfg->data.batch = -1;                           /* -1: not on the command line */
  GT_CALL(gt_config_parse(cfg, NULL, NULL, a->noverrides, a->overrides));
  cfg->parallel.sequence_parallel = false;
  if (a->hf) {
    GT_CALL(gt_hf_check_model(path, cfg));
  } else {
    gt_gpt_shape have;
    GT_CALL(gt_ckpt_meta_shape(meta, path, &have));
    const gt_gpt_shape want = gt_gpt_shape_config(cfg);
    gt_gpt_shape_field f;
    GT_CHECK(!gt_gpt_shape_differ(&have, &want, true, &f), GT_ERR_INPUT,
             "model.%s=%s: the model shape comes from the checkpoint (%s = %s)", f.key, f.b,
             f.key, f.a);
  }
  if (cfg->data.batch == -1) { /* one window per micro-batch on each replica */
    gt_layout l;
    cfg->data.batch = (long)ranks * cfg->data.microbatches;
    GT_CALL(gt_layout_resolve(cfg, ranks, &l));
    cfg->data.batch = (long)l.dp * cfg->data.microbatches;
  }
  if (a->data)
    snprintf(cfg->data.train, sizeof cfg->data.train, "%s", a->data);
  else if (!a->hf && !cfg->data.train[0]) /* an imported checkpoint holds its own tokenizer */
    snprintf(cfg->data.train, sizeof cfg->data.train, "%s", path);
  GT_CALL(gt_config_check_values(cfg));
  return GT_SUCCESS;
}

// ---- the input ---------------------------------------------------------------------

/* Every file's tokens, one after the other. */
typedef struct {
  int32_t *ids;
  long long *start, *len;
  long long total;
} gt_score_input;

static void gt_score_input_free(gt_score_input *in)
{
  free(in->ids);
  free(in->start);
  free(in->len);
  *in = (gt_score_input){0};
}

/* A text file whole into *text (*size > 0 bytes, malloc'd). */
static int gt_score_slurp(const char *path, char **text, size_t *size)
{
  FILE *f = fopen(path, "rb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot read '%s': %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  int status = GT_SUCCESS;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : (size_t)1 << 16;
      char *grown = realloc(buf, cap);
      if (!grown) {
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory reading '%s' (%zu bytes)", path, cap);
        break;
      }
      buf = grown;
    }
    const size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0)
      break;
  }
  if (status == GT_SUCCESS && ferror(f))
    status = GT_ERROR(GT_ERR_INPUT, "cannot read '%s': %s", path, strerror(errno));
  fclose(f);
  if (status == GT_SUCCESS && n == 0)
    status = GT_ERROR(GT_ERR_INPUT, "'%s' is empty: nothing to score", path);
  if (status != GT_SUCCESS) {
    free(buf);
    return status;
  }
  *text = buf;
  *size = n;
  return GT_SUCCESS;
}

/* Append n ids to the input as file i. */
static int gt_score_append(gt_score_input *in, int i, const uint32_t *ids, long long n)
{
  int32_t *grown = realloc(in->ids, sizeof(int32_t) * (size_t)(in->total + n + 1));
  GT_CHECK_ALLOC(grown, sizeof(int32_t) * (size_t)(in->total + n + 1));
  in->ids = grown;
  for (long long k = 0; k < n; k++)
    in->ids[in->total + k] = (int32_t)ids[k];
  in->start[i] = in->total;
  in->len[i] = n;
  in->total += n;
  return GT_SUCCESS;
}

/* Rank 0: every file's tokens. */
static int gt_score_read(const gt_score_args *a, const gt_config *cfg, gt_score_input *in)
{
  const long long vocab = cfg->model.vocab;
  gt_tokenizer *tok = NULL;
  if (!a->tokens) {
    if (a->hf && !a->data)
      GT_CALL(gt_hf_load_tokenizer(a->ckpt, &tok)); /* the model's own */
    else
      GT_CALL(gt_tokenizer_from_file(cfg->data.train, &tok));
    const int tv = gt_tokenizer_vocab(tok);
    if (tv > vocab) {
      gt_tokenizer_free(tok);
      return GT_ERROR(GT_ERR_INPUT,
                      "the tokenizer of %s has %d tokens, more than the model's vocabulary of "
                      "%lld: it is not the data the model was trained on",
                      cfg->data.train, tv, vocab);
    }
  }
  char hint[96];
  snprintf(hint, sizeof hint, " of the model ([model] vocab = %lld)", vocab);
  int status = GT_SUCCESS;
  for (int i = 0; i < a->nfiles && status == GT_SUCCESS; i++) {
    uint32_t *ids = NULL;
    long long n = 0;
    if (a->tokens) {
      status = gt_tokens_read_file(a->files[i], "auto", vocab, hint, &ids, &n);
    } else {
      char *text = NULL;
      size_t size = 0, got = 0;
      status = gt_score_slurp(a->files[i], &text, &size);
      if (status == GT_SUCCESS)
        status = gt_tokenizer_encode(tok, text, size, &ids, &got);
      if (status != GT_SUCCESS && status != GT_ERR_SYSTEM && text)
        status = gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__, "'%s'",
                               a->files[i]);
      n = (long long)got;
      free(text);
    }
    if (status == GT_SUCCESS)
      status = gt_score_append(in, i, ids, n);
    free(ids);
  }
  gt_tokenizer_free(tok);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* Rank 0 reads, every rank gets the input. Collective on world. */
static int gt_score_input_share(const gt_score_args *a, const gt_config *cfg, MPI_Comm world,
                                gt_score_input *in)
{
  const size_t nf = (size_t)a->nfiles;
  in->start = calloc(nf, sizeof *in->start);
  in->len = calloc(nf, sizeof *in->len);
  GT_CALL(gt_error_agree(in->start && in->len
                             ? GT_SUCCESS
                             : GT_ERROR(GT_ERR_SYSTEM, "out of memory for %zu files", nf),
                         world));
  const int status = gt_log_rank() == 0 ? gt_score_read(a, cfg, in) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, world));
  GT_CALL(gt_bcast_bytes(&in->total, sizeof in->total, 0, world));
  GT_CALL(gt_bcast_bytes(in->start, nf * sizeof *in->start, 0, world));
  GT_CALL(gt_bcast_bytes(in->len, nf * sizeof *in->len, 0, world));
  if (gt_log_rank() != 0) {
    in->ids = malloc(sizeof(int32_t) * (size_t)(in->total + 1));
    GT_CALL(gt_error_agree(in->ids ? GT_SUCCESS
                                   : GT_ERROR(GT_ERR_SYSTEM, "out of memory for %lld tokens",
                                              in->total),
                           world));
  } else {
    GT_CALL(gt_error_agree(GT_SUCCESS, world));
  }
  GT_CALL(gt_bcast_bytes(in->ids, sizeof(int32_t) * (size_t)in->total, 0, world));
  return GT_SUCCESS;
}

// ---- the run -------------------------------------------------------------------------

static void gt_score_print(const gt_score_args *a, long long tokens, double loss)
{
  const double ppl = exp(loss);
  if (a->json)
    printf("{\"tokens\": %lld, \"loss\": %.17g, \"perplexity\": %.17g}\n", tokens, loss, ppl);
  else
    printf("score: %lld tokens, loss %.4f nats/token, perplexity %.2f\n", tokens, loss, ppl);
  fflush(stdout);
}

static int gt_score_main(const gt_score_args *args, MPI_Comm world)
{
  int ranks;
  GT_CALL_MPI(MPI_Comm_size(world, &ranks));
  gt_score_args local = *args, *a = &local;
  char path[GT_PATH_MAX];
  bool none = false;
  int status = gt_log_rank() == 0 ? gt_cli_checkpoint(a->ckpt, path, sizeof path, &none)
                                  : GT_SUCCESS;
  if (status == GT_SUCCESS && gt_log_rank() == 0 && none) {
    status = gt_score_other_source(a->ckpt, &a->hf);
    snprintf(path, sizeof path, "%s", a->ckpt);
  }
  GT_CALL(gt_error_agree(status, world));
  GT_CALL(gt_bcast_bytes(path, sizeof path, 0, world));
  GT_CALL(gt_bcast_bytes(&a->hf, sizeof a->hf, 0, world));
  gt_ckpt_meta meta = {0};
  if (!a->hf) {
    status = gt_error_agree(gt_ckpt_read_meta(path, world, &meta), world);
    if (status == GT_ERR_HDF5)
      status = gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                             "cannot read checkpoint %s", path);
    GT_CALL(status);
  }
  gt_config cfg;
  status = gt_score_config(a, path, &meta, ranks, &cfg);
  gt_ckpt_meta_free(&meta);
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true); /* the same file and arguments everywhere */
    return status;
  }
  gt_score_input in = {0};
  status = gt_score_input_share(a, &cfg, world, &in);
  long long predicted = 0;
  for (int i = 0; status == GT_SUCCESS && i < a->nfiles; i++)
    predicted += in.len[i] > 1 ? in.len[i] - 1 : 0;
  if (status == GT_SUCCESS && predicted == 0) {
    status = GT_ERROR(GT_ERR_INPUT, "nothing to score: every file holds fewer than 2 tokens");
    gt_error_set_collective(true);
  }
  gt_scorer *s = NULL;
  double sum = 0;
  if (status == GT_SUCCESS)
    status = gt_scorer_create(&cfg, path, world, &s);
  status = gt_config_locate_error(&cfg, status); /* a check after parsing: name the line */
  if (status == GT_SUCCESS)
    status = gt_scorer_run(s, a->nfiles, in.ids, in.start, in.len, &sum, &predicted);
  if (status == GT_SUCCESS && gt_log_rank() == 0)
    gt_score_print(a, predicted, sum / (double)predicted);
  const int destroyed = gt_scorer_destroy(&s);
  gt_score_input_free(&in);
  GT_CALL(status);
  GT_CALL(destroyed);
  return GT_SUCCESS;
}

int gt_cmd_score(int argc, char **argv, MPI_Comm world)
{
  if (gt_cli_wants_help(argc, argv)) {
    gt_score_usage();
    return GT_SUCCESS;
  }
  gt_log_info_to_stderr(); /* stdout is the score (--json: one object) */
  gt_score_args a;
  int status = gt_score_parse(argc, argv, &a);
  if (status == GT_SUCCESS)
    status = gt_score_main(&a, world);
  else
    gt_error_set_collective(true); /* every rank parses the same arguments */
  free(a.files);
  free(a.overrides);
  GT_CALL(status);
  return GT_SUCCESS;
}
