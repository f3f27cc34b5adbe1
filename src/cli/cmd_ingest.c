/*
 * cmd_ingest.c - `gridtrain ingest text IN... -o OUT.h5 [--val-fraction F]`:
 * turn text files into an HDF5 token dataset (byte tokenizer). Rank 0 does
 * the work; every rank returns the agreed status.
 */
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
    "usage: gridtrain ingest text IN... -o OUT.h5 [--val-fraction F]\n"
    "\n"
    "Turn text files into an HDF5 token dataset with the byte tokenizer: every\n"
    "byte is one token (vocab_size 256). Of each input, the last F of its bytes\n"
    "go to /val/tokens and the rest to /train/tokens.\n"
    "\n"
    "options:\n"
    "  -o, --output OUT.h5   file to write (replaced if it exists)\n"
    "  --val-fraction F      share of each input held out for validation,\n"
    "                        in [0, 0.5] (default 0.1)\n"
    "  -h, --help            print this help\n";

typedef struct {
  char **inputs; /* argc entries, ninputs used (pointers into argv) */
  int ninputs;
  const char *out;
  double val_fraction;
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

static int gt_ingest_parse(int argc, char **argv, gt_ingest_args *a)
{
  a->val_fraction = 0.1;
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (gt_is_help(argv[i])) {
      a->help = true;
      return GT_SUCCESS;
    }
  GT_CHECK(argc >= 2, GT_ERR_INPUT,
           "ingest needs the kind of input: gridtrain ingest text IN... -o OUT.h5"
           GT_INGEST_HINT);
  GT_CHECK(strcmp(argv[1], "text") == 0, GT_ERR_INPUT,
           "unknown input kind '%s'; the kind supported is 'text'" GT_INGEST_HINT, argv[1]);

  bool options = true;
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i], *value = NULL;
    if (!options || arg[0] != '-' || arg[1] == '\0') {
      a->inputs[a->ninputs++] = argv[i];
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options = false;
      continue;
    }
    bool matched;
    GT_CALL(gt_ingest_option(argc, argv, &i, "-o", "--output", &matched, &value));
    if (matched) {
      GT_CHECK(a->out == NULL, GT_ERR_INPUT, "-o given twice" GT_INGEST_HINT);
      a->out = value;
      continue;
    }
    GT_CALL(gt_ingest_option(argc, argv, &i, NULL, "--val-fraction", &matched, &value));
    if (matched) {
      char *end;
      double f = strtod(value, &end);
      GT_CHECK(*end == '\0' && isfinite(f), GT_ERR_INPUT,
               "--val-fraction '%s' is not a number" GT_INGEST_HINT, value);
      GT_CHECK(f >= 0.0 && f <= 0.5, GT_ERR_INPUT,
               "--val-fraction %s is outside [0, 0.5]" GT_INGEST_HINT, value);
      a->val_fraction = f;
      continue;
    }
    return GT_ERROR(GT_ERR_INPUT, "unknown option '%s'" GT_INGEST_HINT, arg);
  }
  GT_CHECK(a->ninputs > 0, GT_ERR_INPUT, "no input files; name at least one text file"
           GT_INGEST_HINT);
  GT_CHECK(a->out != NULL, GT_ERR_INPUT, "no output file; add -o OUT.h5" GT_INGEST_HINT);
  for (int i = 0; i < a->ninputs; i++) /* -o must not replace an input text */
    GT_CALL(gt_path_refuse_clobber(a->out, "the output (-o)", 1,
                                   (const char *const[]){a->inputs[i]},
                                   (const char *const[]){"the input"}));
  return GT_SUCCESS;
}

// ---- summary ----------------------------------------------------------------------

/* Rank 0's one line about what was written. */
static void gt_ingest_summary(const gt_ingest_args *a, const gt_ingest_counts *n)
{
  char list[512] = "";
  size_t used = 0;
  for (int i = 0; i < a->ninputs && i < GT_INGEST_LISTED && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                             a->inputs[i]);
  if (a->ninputs > GT_INGEST_LISTED && used < sizeof list)
    snprintf(list + used, sizeof list - used, ", ... (%d more)",
             a->ninputs - GT_INGEST_LISTED);
  gt_info("ingest: wrote %s: %lld train + %lld val tokens (bytes, vocab 256) from %d "
          "source%s: %s\n", a->out, n->train_tokens, n->val_tokens, a->ninputs,
          a->ninputs == 1 ? "" : "s", list);
}

// ----------------------------------------------------------------------------

static int gt_ingest_run(int argc, char **argv)
{
  gt_ingest_args a = {0};
  a.inputs = malloc((size_t)argc * sizeof *a.inputs);
  GT_CHECK_ALLOC(a.inputs, (size_t)argc * sizeof *a.inputs);
  int status = gt_ingest_parse(argc, argv, &a);
  if (status == GT_SUCCESS && a.help) {
    gt_info("%s", gt_ingest_usage);
  } else if (status == GT_SUCCESS) {
    gt_ingest_counts n;
    status = gt_ingest_text(a.ninputs, a.inputs, a.out, a.val_fraction, &n);
    if (status == GT_SUCCESS)
      gt_ingest_summary(&a, &n);
  }
  free(a.inputs);
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
