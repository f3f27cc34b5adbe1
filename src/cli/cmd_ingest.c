/*
 * cmd_ingest.c - `gridtrain ingest text IN... -o OUT.h5 [--tokenizer T]
 * [--val-fraction F]` and `gridtrain ingest tokens FILE... -o OUT.h5 --vocab N|
 * --tokenizer T [--format F] [--val FILE]... [--val-fraction F]`: build an HDF5 token
 * dataset from text or from other trainers' token files (ingest.h). Rank 0
 * does the work; every rank returns the agreed status.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/path.h"
#include "gridtrain/ingest.h"
#include "gridtrain/log.h"

#define GT_INGEST_HINT "; see 'gridtrain ingest --help'"
#define GT_INGEST_LISTED 3 /* sources named in the summary line */

static const char gt_ingest_usage[] =
    "usage: gridtrain ingest text IN... -o OUT.h5 [--tokenizer T] [--val-fraction F]\n"
    "       gridtrain ingest tokens FILE... -o OUT.h5 --vocab N|--tokenizer T\n"
    "                               [--format F] [--val FILE]... [--val-fraction F]\n"
    "\n"
    "Build an HDF5 token dataset (/train/tokens, /val/tokens) for training.\n"
    "\n"
    "text: tokenize text files. Of each input the last F of its bytes go to\n"
    "/val/tokens (with a tokenizer other than bytes, from the start of the next\n"
    "line), the rest to /train/tokens.\n"
    "  --tokenizer T         bytes (default): every byte is one token, vocab 256;\n"
    "                        sentencepiece:MODEL: a SentencePiece .model file;\n"
    "                        hf:PATH: a Hugging Face byte-level BPE (GPT-2,\n"
    "                        Llama 3), PATH its tokenizer.json or a directory\n"
    "                        with tokenizer.json or with vocab.json and\n"
    "                        merges.txt; encoded as the tokenizers package does\n"
    "                        (special tokens matched in the text, none added);\n"
    "                        train:bpe:N, train:unigram:N: train a SentencePiece\n"
    "                        model of N pieces (at least 260) on the training\n"
    "                        text (a sample of at most 300000 lines), lossless\n"
    "                        with byte fallback. The model (the .model file, or\n"
    "                        the tokenizer.json) is stored in OUT.h5. All but\n"
    "                        bytes need UTF-8 text.\n"
    "\n"
    "tokens: import token ids written by other trainers; of each FILE the last F\n"
    "of its tokens go to /val/tokens.\n"
    "  --vocab N             the vocabulary size (the files do not say it; 50257\n"
    "                        for GPT-2's); every token must be below it\n"
    "  --tokenizer T         the tokenizer that wrote the files, stored with the\n"
    "                        tokens so that gridtrain sample can decode them:\n"
    "                        bytes, sentencepiece:MODEL or hf:PATH; its\n"
    "                        vocabulary is the dataset's (--vocab may then be\n"
    "                        left out)\n"
    "  --format F            auto (default: .npy and llm.c by their magic, else\n"
    "                        nanogpt), nanogpt (raw little-endian uint16, as\n"
    "                        train.bin and val.bin), llmc (llm.c's .bin shards:\n"
    "                        a 256-int32 header, uint16 or uint32 tokens), npy\n"
    "                        (a 1-D NumPy array of integers)\n"
    "  --val FILE            a file whose tokens all go to /val/tokens (repeat\n"
    "                        for more; e.g. nanoGPT's val.bin)\n"
    "\n"
    "options of both:\n"
    "  -o, --output OUT.h5   file to write (replaced if it exists)\n"
    "  --val-fraction F      share of each input held out for validation,\n"
    "                        in [0, 0.5] (default 0.1; 0 for tokens with --val)\n"
    "  -h, --help            print this help\n";

typedef struct {
  bool tokens;   /* the kind: tokens, else text */
  char **inputs; /* argc entries, ninputs used (pointers into argv) */
  int ninputs;
  char **val;    /* argc entries, nval used: --val files */
  int nval;
  const char *out;
  bool val_fraction_given;
  gt_ingest_opts opts;
  bool help;
} gt_ingest_args;

// ---- command line --------------------------------------------------------------

static bool gt_is_help(const char *arg)
{
  return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* Match "-s VALUE", "--long VALUE" or "--long=VALUE" at argv[*i]. */
static int gt_ingest_option(int argc, char **argv, int *i, const char *shortname,
                            const char *longname, bool *matched, const char **value)
{
  const char *arg = argv[*i];
  size_t len = strlen(longname);
  *matched = false;
  if (strncmp(arg, longname, len) == 0 && arg[len] == '=') {
    *value = arg + len + 1;
  } else if (strcmp(arg, longname) == 0 || (shortname && strcmp(arg, shortname) == 0)) {
    GT_CHECK(*i + 1 < argc, GT_ERR_INPUT, "%s needs a value" GT_INGEST_HINT, arg);
    *value = argv[++*i];
  } else {
    return GT_SUCCESS;
  }
  *matched = true;
  GT_CHECK((*value)[0] != '\0', GT_ERR_INPUT, "%s needs a value" GT_INGEST_HINT, longname);
  return GT_SUCCESS;
}

/* An option of one kind only: refused for the other. */
static int gt_ingest_kind_only(const gt_ingest_args *a, bool tokens, const char *name)
{
  GT_CHECK(a->tokens == tokens, GT_ERR_INPUT, "%s is an option of 'ingest %s', not of 'ingest %s'"
           GT_INGEST_HINT, name, tokens ? "tokens" : "text", tokens ? "text" : "tokens");
  return GT_SUCCESS;
}

/* The options with values; *matched when argv[*i] was one. */
static int gt_ingest_valued(int argc, char **argv, int *i, gt_ingest_args *a, bool *matched)
{
  const char *value = NULL;
  GT_CALL(gt_ingest_option(argc, argv, i, "-o", "--output", matched, &value));
  if (*matched) {
    GT_CHECK(a->out == NULL, GT_ERR_INPUT, "-o given twice" GT_INGEST_HINT);
    a->out = value;
    return GT_SUCCESS;
  }
  GT_CALL(gt_ingest_option(argc, argv, i, NULL, "--val-fraction", matched, &value));
  if (*matched) {
    char *end;
    double f = strtod(value, &end);
    GT_CHECK(*end == '\0' && isfinite(f), GT_ERR_INPUT,
             "--val-fraction '%s' is not a number" GT_INGEST_HINT, value);
    GT_CHECK(f >= 0.0 && f <= 0.5, GT_ERR_INPUT,
             "--val-fraction %s is outside [0, 0.5]" GT_INGEST_HINT, value);
    a->opts.val_fraction = f;
    a->val_fraction_given = true;
    return GT_SUCCESS;
  }
  GT_CALL(gt_ingest_option(argc, argv, i, NULL, "--tokenizer", matched, &value));
  if (*matched) {
    a->opts.tokenizer = value;
    return GT_SUCCESS;
  }
  GT_CALL(gt_ingest_option(argc, argv, i, NULL, "--format", matched, &value));
  if (*matched) {
    GT_CALL(gt_ingest_kind_only(a, true, "--format"));
    a->opts.format = value;
    return GT_SUCCESS;
  }
  GT_CALL(gt_ingest_option(argc, argv, i, NULL, "--vocab", matched, &value));
  if (*matched) {
    GT_CALL(gt_ingest_kind_only(a, true, "--vocab"));
    char *end;
    errno = 0;
    const long long v = strtoll(value, &end, 10);
    GT_CHECK(*end == '\0' && errno == 0 && v >= 1 && v <= 2147483647LL, GT_ERR_INPUT,
             "--vocab '%s' is not a vocabulary size in [1, 2147483647]" GT_INGEST_HINT, value);
    a->opts.vocab = v;
    return GT_SUCCESS;
  }
  GT_CALL(gt_ingest_option(argc, argv, i, NULL, "--val", matched, &value));
  if (*matched) {
    GT_CALL(gt_ingest_kind_only(a, true, "--val"));
    a->val[a->nval++] = (char *)value;
  }
  return GT_SUCCESS;
}

static int gt_ingest_parse(int argc, char **argv, gt_ingest_args *a)
{
  a->opts.val_fraction = 0.1;
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (gt_is_help(argv[i])) {
      a->help = true;
      return GT_SUCCESS;
    }
  GT_CHECK(argc >= 2, GT_ERR_INPUT,
           "ingest needs the kind of input: gridtrain ingest text IN... -o OUT.h5, or "
           "gridtrain ingest tokens FILE... -o OUT.h5 --vocab N" GT_INGEST_HINT);
  a->tokens = strcmp(argv[1], "tokens") == 0;
  GT_CHECK(a->tokens || strcmp(argv[1], "text") == 0, GT_ERR_INPUT,
           "unknown input kind '%s'; the kinds supported are 'text' and 'tokens'" GT_INGEST_HINT,
           argv[1]);

  bool options = true;
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i];
    if (!options || arg[0] != '-' || arg[1] == '\0') {
      a->inputs[a->ninputs++] = argv[i];
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options = false;
      continue;
    }
    bool matched;
    GT_CALL(gt_ingest_valued(argc, argv, &i, a, &matched));
    GT_CHECK(matched, GT_ERR_INPUT, "unknown option '%s'" GT_INGEST_HINT, arg);
  }
  GT_CHECK(a->ninputs > 0, GT_ERR_INPUT, "no input files; name at least one %s file"
           GT_INGEST_HINT, a->tokens ? "token" : "text");
  GT_CHECK(a->out != NULL, GT_ERR_INPUT, "no output file; add -o OUT.h5" GT_INGEST_HINT);
  GT_CHECK(!a->tokens || a->opts.vocab > 0 || a->opts.tokenizer, GT_ERR_INPUT,
           "ingest tokens needs --vocab N or --tokenizer T: token files do not say their "
           "vocabulary (50257 for GPT-2's tokenizer)" GT_INGEST_HINT);
  if (a->tokens && a->nval > 0 && !a->val_fraction_given)
    a->opts.val_fraction = 0.0;
  a->opts.nval = a->nval;
  a->opts.val_files = a->val;
  for (int i = 0; i < a->ninputs + a->nval; i++) { /* -o must not replace an input */
    const char *in = i < a->ninputs ? a->inputs[i] : a->val[i - a->ninputs];
    GT_CALL(gt_path_refuse_clobber(a->out, "the output (-o)", 1, (const char *const[]){in},
                                   (const char *const[]){"the input"}));
  }
  return GT_SUCCESS;
}

// ---- summary ----------------------------------------------------------------------

/* Rank 0's one line about what was written. */
static void gt_ingest_summary(const gt_ingest_args *a, const gt_ingest_counts *n)
{
  char list[512] = "", trained[64] = "", kind[1200];
  size_t used = 0;
  const int total = a->ninputs + a->nval;
  for (int i = 0; i < total && i < GT_INGEST_LISTED && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                             i < a->ninputs ? a->inputs[i] : a->val[i - a->ninputs]);
  if (total > GT_INGEST_LISTED && used < sizeof list)
    snprintf(list + used, sizeof list - used, ", ... (%d more)", total - GT_INGEST_LISTED);
  if (n->train_seconds > 0)
    snprintf(trained, sizeof trained, "tokenizer trained in %.1f s, ", n->train_seconds);
  const char *tokenizer = a->opts.tokenizer ? a->opts.tokenizer : "bytes";
  if (a->tokens && a->opts.tokenizer) /* "nanogpt, sentencepiece:M.model" */
    snprintf(kind, sizeof kind, "%s, %s", n->format, tokenizer);
  else
    snprintf(kind, sizeof kind, "%s", a->tokens ? n->format : tokenizer);
  const double secs = n->encode_seconds > 1e-6 ? n->encode_seconds : 1e-6;
  const long long tokens = n->train_tokens + n->val_tokens;
  gt_info("ingest: wrote %s: %lld train + %lld val tokens (%s, vocab %lld, %s) from %d "
          "source%s: %s; %s%.1f MB %s in %.2f s (%.0f tokens/s)\n",
          a->out, n->train_tokens, n->val_tokens,
          kind, n->vocab,
          n->dtype, total, total == 1 ? "" : "s", list, trained, (double)n->bytes / 1e6,
          a->tokens ? "read" : "tokenized", secs, (double)tokens / secs);
}

// ----------------------------------------------------------------------------

static int gt_ingest_run(int argc, char **argv)
{
  gt_ingest_args a = {0};
  a.inputs = malloc((size_t)argc * sizeof *a.inputs);
  a.val = malloc((size_t)argc * sizeof *a.val);
  int status = a.inputs && a.val ? GT_SUCCESS
                                 : GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                                            2 * (size_t)argc * sizeof *a.inputs);
  if (status == GT_SUCCESS)
    status = gt_ingest_parse(argc, argv, &a);
  if (status == GT_SUCCESS && a.help) {
    gt_info("%s", gt_ingest_usage);
  } else if (status == GT_SUCCESS) {
    gt_ingest_counts n = {0};
    status = a.tokens ? gt_ingest_tokens(a.ninputs, a.inputs, a.out, &a.opts, &n)
                      : gt_ingest_text_opts(a.ninputs, a.inputs, a.out, &a.opts, &n);
    if (status == GT_SUCCESS)
      gt_ingest_summary(&a, &n);
  }
  free(a.inputs);
  free(a.val);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_cmd_ingest(int argc, char **argv, MPI_Comm world)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  int status = rank == 0 ? gt_ingest_run(argc, argv) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, world));
  return GT_SUCCESS;
}
