/*
 * cmd_ckpt.c - `gridtrain ckpt info|verify|convert`: look into checkpoint
 * files without training. Rank 0 does the work (serial HDF5 reads); other
 * ranks of the job wait for the result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/path.h"
#include "gridtrain/gpt.h"
#include "gridtrain/hf_export.h"
#include "gridtrain/hf_import.h"
#include "gridtrain/log.h"

static void gt_ckpt_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain ckpt info FILE\n"
         "       gridtrain ckpt verify FILE...\n"
         "       gridtrain ckpt convert FILE OUT.h5\n"
         "       gridtrain ckpt convert FILE --format hf [--dtype fp32|bf16|fp16]\n"
         "                              [--data DATA.h5] [--force] OUT_DIR\n"
         "       gridtrain ckpt import HF_DIR -o OUT.h5\n"
         "\n"
         "Inspect checkpoints written by 'gridtrain train' ([checkpoint] dir).\n"
         "\n"
         "  info     step, tokens, data position, layout that wrote it, model shape,\n"
         "           sizes, code version and the resolved input deck\n"
         "  verify   read every dataset through its Fletcher32 checksum, check that\n"
         "           every value is finite, every attribute in range, and every tensor\n"
         "           of the model there with its shape; prints one line per file\n"
         "  convert  write the model weights (from a checkpoint of any layout):\n"
         "    --format h5 (the default): a plain HDF5 file, one float32 dataset per\n"
         "           parameter at the root, full (unsharded) shape, named as in the\n"
         "           checkpoint's /model group, with attributes layers, heads, dim,\n"
         "           seq_len, vocab (docs/checkpoints.md shows how to load it with h5py\n"
         "           and PyTorch); the whole checkpoint is verified first\n"
         "    --format hf: a Hugging Face directory OUT_DIR (created if missing):\n"
         "           config.json (GPT2LMHeadModel for [model] type = gpt,\n"
         "           LlamaForCausalLM for llama, MixtralForCausalLM for a llama with\n"
         "           experts), model.safetensors (HF's names; GPT-2's Conv1D weights\n"
         "           transposed, Llama's q/k/v and gate/up, Mixtral's experts split out;\n"
         "           lm_head.weight when the head is untied; the vocabulary cut to the\n"
         "           tokenizer's), README.txt, and tokenizer.model for SentencePiece\n"
         "           data, tokenizer.json and tokenizer_config.json for byte-level BPE\n"
         "           data or an imported checkpoint's tokenizer (byte data needs none)\n"
         "    --dtype T   hf: the weights' type, fp32 (default), bf16 or fp16 (rounded\n"
         "           to nearest even; a weight beyond fp16's range is an error)\n"
         "    --data F    hf: the dataset that gives the vocabulary and tokenizer\n"
         "           (default: [data] train of the checkpoint's deck)\n"
         "    --force     hf: write into an OUT_DIR that is not empty (its export\n"
         "           files are replaced; without --force that is an error)\n"
         "  import   read a Hugging Face GPT2LMHeadModel, LlamaForCausalLM or\n"
         "           MixtralForCausalLM directory\n"
         "           (config.json; model.safetensors or the shards of\n"
         "           model.safetensors.index.json, in F32, BF16 or F16; tokenizer.json)\n"
         "           and write the gridtrain checkpoint OUT.h5: step 0, [model] from\n"
         "           config.json in its deck, the fp32 weights, zero moments, the\n"
         "           tokenizer stored in the file. One tensor is in memory at a time.\n"
         "           Unsupported settings (rope_scaling other than linear/llama3,\n"
         "           biases in Llama, sliding windows, ...) are one error naming the key.\n"
         "           '[checkpoint] init = HF_DIR' starts training from such a directory.\n"
         "\n"
         "Exit status: 0 ok, 1 a checkpoint is damaged or incomplete (verify) or\n"
         "another error, 2 bad usage or a file that is missing or not a checkpoint.\n");
}

/* Parameters of the checkpoint's tensors. */
static double gt_ckpt_nparams(const gt_gpt_shape *shape)
{
  double n = 0;
  for (int i = 0; i < gt_gpt_logical_count(shape); i++) {
    char name[GT_PARAM_NAME_MAX];
    int ndim;
    long dims[GT_TENSOR_MAX_DIMS];
    gt_gpt_logical_param(shape, i, name, &ndim, dims);
    n += (double)dims[0] * (double)(ndim == 2 ? dims[1] : 1);
  }
  return n;
}

static int gt_ckpt_info(const char *path)
{
  gt_ckpt_meta m;
  GT_CALL(gt_ckpt_read_meta(path, MPI_COMM_SELF, &m));
  gt_gpt_shape shape;
  int status = gt_ckpt_meta_shape(&m, path, &shape);
  if (status == GT_SUCCESS) {
    struct stat sb;
    char disk[32] = "?", tensors[32];
    if (stat(path, &sb) == 0)
      gt_format_bytes((double)sb.st_size, disk, sizeof disk);
    const double nparams = gt_ckpt_nparams(&shape);
    gt_format_bytes(4.0 * nparams, tensors, sizeof tensors);
    printf("checkpoint     %s\n", path);
    printf("format         gridtrain checkpoint, version %d\n", m.format);
    printf("step           %ld (the next step to run)\n", m.step);
    printf("tokens         %lld\n", m.tokens);
    printf("data position  %lld sequences (global batch %ld)\n", m.samples, m.batch);
    printf("seed           %llu\n", m.seed);
    if (isnan(m.loss))
      printf("loss           -\n");
    else
      printf("loss           %.6f\n", m.loss);
    printf("precision      %s (the tensors are the fp32 master weights and moments)\n",
           m.precision);
    printf("loss scale     %g (%lld good steps since it last changed; %lld steps skipped)\n",
           m.loss_scale, m.scale_good_steps, m.skipped_steps);
    printf("layout         dp=%d x pp=%d x tp=%d (%d ranks)\n", m.dp, m.pp, m.tp,
           m.dp * m.pp * m.tp);
    printf("model          %s: layers %d, heads %d, dim %d, seq_len %d, vocab %d; %.2fM "
           "parameters\n",
           gt_gpt_shape_llama(&shape) ? "llama" : "gpt", m.layers, m.heads, m.dim, m.seq_len,
           m.vocab, nparams / 1e6);
    printf("sizes          %s on disk; /model, /optim/m, /optim/v %s each (%d tensors)\n",
           disk, tensors, gt_gpt_logical_count(&shape));
    printf("written by     gridtrain %s at %s\n", m.code_version, m.created);
    printf("deck           (the resolved configuration of the run that wrote it)\n");
    const char *deck = m.deck ? m.deck : "";
    while (*deck) {
      size_t len = strcspn(deck, "\n");
      printf("  %.*s\n", (int)len, deck);
      deck += len + (deck[len] == '\n');
    }
    fflush(stdout);
  }
  gt_ckpt_meta_free(&m);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* Every tensor of the model, with its shape, in /model, /optim/m and
 * /optim/v; then every dataset read through its checksum. */
static int gt_ckpt_verify_one(const char *path)
{
  gt_ckpt_meta m;
  GT_CALL(gt_ckpt_read_meta(path, MPI_COMM_SELF, &m));
  gt_gpt_shape shape;
  int status = gt_ckpt_meta_shape(&m, path, &shape);
  gt_ckpt_meta_free(&m);
  GT_CALL(status);
  const int n = gt_gpt_logical_count(&shape);
  gt_ckpt_tensor *tensors = calloc((size_t)n, sizeof *tensors);
  GT_CHECK_ALLOC(tensors, sizeof *tensors * (size_t)n);
  for (int i = 0; i < n; i++)
    gt_gpt_logical_param(&shape, i, tensors[i].name, &tensors[i].ndim, tensors[i].dims);
  gt_ckpt_state st = {.ntensors = n, .tensors = tensors};
  status = gt_ckpt_read(path, &st, MPI_COMM_SELF);
  free(tensors);
  if (status == GT_ERR_INPUT) { /* damaged, or a missing or misshapen tensor: verify's 1 */
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", gt_error_message());
    return gt_error_set(GT_ERR_HDF5, __FILE__, __LINE__, __func__, "%s%s",
                        strstr(cause, path) ? "" : "incomplete checkpoint: ", cause);
  }
  GT_CALL(status);
  long datasets;
  double bytes;
  GT_CALL(gt_ckpt_verify_file(path, &datasets, &bytes));
  GT_CHECK(datasets == 3L * n, GT_ERR_HDF5,
           "checkpoint %s has %ld datasets; the model needs %d", path, datasets, 3 * n);
  char b[32];
  gt_format_bytes(bytes, b, sizeof b);
  printf("%s: ok: %ld datasets, %s read through their checksums\n", path, datasets, b);
  fflush(stdout);
  return GT_SUCCESS;
}

#define GT_CONVERT_HINT "; see 'gridtrain ckpt --help'"

typedef struct {
  const char *in, *out;
  bool hf, force;
  const char *dtype, *data; /* NULL: not given */
} gt_convert_args;

/* "--name VALUE" or "--name=VALUE" at argv[*i]: *value, and *i past it. */
static int gt_convert_option(int argc, char **argv, int *i, const char *name, bool *matched,
                             const char **value)
{
  const char *arg = argv[*i];
  const size_t len = strlen(name);
  *matched = false;
  if (strncmp(arg, name, len) != 0 || (arg[len] != '\0' && arg[len] != '='))
    return GT_SUCCESS;
  *matched = true;
  if (arg[len] == '=') {
    *value = arg + len + 1;
  } else {
    GT_CHECK(*i + 1 < argc, GT_ERR_INPUT, "ckpt convert: %s needs a value" GT_CONVERT_HINT,
             name);
    *value = argv[++*i];
  }
  GT_CHECK((*value)[0] != '\0', GT_ERR_INPUT, "ckpt convert: %s needs a value" GT_CONVERT_HINT,
           name);
  return GT_SUCCESS;
}

static int gt_convert_parse(int argc, char **argv, gt_convert_args *a)
{
  const char *format = NULL;
  const char **targets[] = {&format, &a->dtype, &a->data};
  const char *names[] = {"--format", "--dtype", "--data"};
  for (int i = 2; i < argc; i++) {
    bool matched = false;
    for (int k = 0; k < 3 && !matched; k++) {
      const char *value = NULL;
      GT_CALL(gt_convert_option(argc, argv, &i, names[k], &matched, &value));
      if (matched) {
        GT_CHECK(*targets[k] == NULL, GT_ERR_INPUT,
                 "ckpt convert: %s is given twice" GT_CONVERT_HINT, names[k]);
        *targets[k] = value;
      }
    }
    if (matched)
      continue;
    if (strcmp(argv[i], "--force") == 0) {
      a->force = true;
      continue;
    }
    GT_CHECK(argv[i][0] != '-' || argv[i][1] == '\0', GT_ERR_INPUT,
             "ckpt convert: unknown option '%s'" GT_CONVERT_HINT, argv[i]);
    GT_CHECK(!a->out, GT_ERR_INPUT, "ckpt convert: too many arguments ('%s'); give the "
             "checkpoint and the output" GT_CONVERT_HINT, argv[i]);
    *(a->in ? &a->out : &a->in) = argv[i];
  }
  GT_CHECK(a->out, GT_ERR_INPUT, "ckpt convert: give the checkpoint and the output: gridtrain "
           "ckpt convert FILE [--format h5|hf] OUT" GT_CONVERT_HINT);
  GT_CHECK(!format || strcmp(format, "h5") == 0 || strcmp(format, "hf") == 0, GT_ERR_INPUT,
           "ckpt convert: unknown --format '%s'; choose h5 or hf" GT_CONVERT_HINT, format);
  a->hf = format && strcmp(format, "hf") == 0;
  GT_CHECK(a->hf || (!a->dtype && !a->data && !a->force), GT_ERR_INPUT,
           "ckpt convert: --dtype, --data and --force go with --format hf" GT_CONVERT_HINT);
  return GT_SUCCESS;
}

static int gt_ckpt_convert_hf(const gt_convert_args *a)
{
  gt_hf_options opt = {.dtype = GT_F32, .data = a->data, .force = a->force};
  if (a->dtype) {
    const int t = strcmp(a->dtype, "fp32") == 0   ? GT_F32
                  : strcmp(a->dtype, "bf16") == 0 ? GT_BF16
                  : strcmp(a->dtype, "fp16") == 0 ? GT_F16
                                                  : -1;
    GT_CHECK(t >= 0, GT_ERR_INPUT,
             "ckpt convert: unknown --dtype '%s'; choose fp32, bf16 or fp16" GT_CONVERT_HINT,
             a->dtype);
    opt.dtype = (gt_dtype)t;
  }
  gt_hf_summary s;
  GT_CALL(gt_hf_export(a->in, a->out, &opt, &s));
  char bytes[32], cut[96] = "";
  gt_format_bytes((double)s.bytes, bytes, sizeof bytes);
  if (s.vocab < s.model_vocab)
    snprintf(cut, sizeof cut, " (the checkpoint's %d rows cut)", s.model_vocab);
  const char *files = strcmp(s.tokenizer, "sentencepiece") == 0 ? ", tokenizer.model"
                      : strcmp(s.tokenizer, "bpe") == 0 ? ", tokenizer.json, tokenizer_config.json"
                                                        : "";
  printf("%s: Hugging Face GPT-2 model written to %s: model.safetensors (%d tensors, %s, %s), "
         "config.json, README.txt%s; vocabulary %d%s, tokenizer %s%s\n",
         a->in, a->out, s.tensors, gt_dtype_name(opt.dtype), bytes, files, s.vocab, cut,
         s.tokenizer, *files ? "" : " (no file)");
  fflush(stdout);
  return GT_SUCCESS;
}

static int gt_ckpt_convert(int argc, char **argv)
{
  gt_convert_args a = {0};
  GT_CALL(gt_convert_parse(argc, argv, &a));
  GT_CALL(gt_path_refuse_clobber(a.out, "the output", 1, (const char *const[]){a.in},
                                 (const char *const[]){"the checkpoint"}));
  if (a.hf)
    return gt_ckpt_convert_hf(&a);
  GT_CALL(gt_ckpt_verify_one(a.in));
  GT_CALL(gt_ckpt_export_weights(a.in, a.out));
  printf("%s: model weights written to %s\n", a.in, a.out);
  fflush(stdout);
  return GT_SUCCESS;
}

/* ckpt import HF_DIR -o OUT.h5 (or --output OUT.h5, in any order). */
static int gt_ckpt_import(int argc, char **argv)
{
  const char *dir = NULL, *out = NULL;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) {
      GT_CHECK(i + 1 < argc && !out, GT_ERR_INPUT,
               "ckpt import: -o needs one output file; see 'gridtrain ckpt --help'");
      out = argv[++i];
      continue;
    }
    GT_CHECK(argv[i][0] != '-', GT_ERR_INPUT,
             "ckpt import: unknown option '%s'; see 'gridtrain ckpt --help'", argv[i]);
    GT_CHECK(!dir, GT_ERR_INPUT, "ckpt import: too many arguments ('%s'); give one Hugging "
             "Face directory and -o OUT.h5", argv[i]);
    dir = argv[i];
  }
  GT_CHECK(dir && out, GT_ERR_INPUT,
           "ckpt import: give the Hugging Face directory and the output: gridtrain ckpt "
           "import HF_DIR -o OUT.h5");
  gt_hf_import_summary s;
  GT_CALL(gt_hf_import(dir, out, &s));
  char largest[32];
  gt_format_bytes((double)s.largest, largest, sizeof largest);
  printf("%s: %s imported to %s: %d tensors (%s from %d safetensors file%s, stored as fp32; "
         "largest %s), step 0, zero moments; tokenizer %s%s%s\n",
         dir, s.arch, out, s.tensors, s.dtype, s.files, s.files == 1 ? "" : "s", largest,
         s.tokenizer, s.tokenizer_note[0] ? ": " : "", s.tokenizer_note);
  fflush(stdout);
  return GT_SUCCESS;
}

static int gt_ckpt_run(int argc, char **argv)
{
  const char *sub = argv[1];
  if (strcmp(sub, "info") == 0 && argc == 3)
    return gt_ckpt_info(argv[2]);
  if (strcmp(sub, "verify") == 0 && argc == 3)
    return gt_ckpt_verify_one(argv[2]);
  if (strcmp(sub, "verify") == 0 && argc > 3) {
    /* Several files: one line each, then one error naming how many failed. */
    int bad = 0, worst = GT_SUCCESS;
    for (int i = 2; i < argc; i++) {
      int status = gt_ckpt_verify_one(argv[i]);
      if (status != GT_SUCCESS) {
        printf("%s: FAILED: %s\n", argv[i], gt_error_message());
        fflush(stdout);
        bad++;
        worst = worst == GT_ERR_HDF5 ? worst : status;
        gt_error_clear();
      }
    }
    if (bad)
      return gt_error_set(worst, __FILE__, __LINE__, __func__,
                          "%d of %d checkpoints failed verification", bad, argc - 2);
    return GT_SUCCESS;
  }
  if (strcmp(sub, "convert") == 0)
    return gt_ckpt_convert(argc, argv);
  if (strcmp(sub, "import") == 0)
    return gt_ckpt_import(argc, argv);
  return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                      "ckpt: bad arguments; usage: gridtrain ckpt info FILE | verify FILE... "
                      "| convert FILE [--format h5|hf ...] OUT | import HF_DIR -o OUT.h5 (see "
                      "'gridtrain ckpt --help')");
}

int gt_cmd_ckpt(int argc, char **argv, MPI_Comm world)
{
  if (gt_cli_wants_help(argc, argv)) {
    gt_ckpt_usage();
    return GT_SUCCESS;
  }
  if (argc < 2) {
    gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                 "ckpt: missing subcommand (info, verify, convert, import); see 'gridtrain ckpt "
                 "--help'");
    gt_error_set_collective(true);
    return GT_ERR_INPUT;
  }
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  int status = rank == 0 ? gt_ckpt_run(argc, argv) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, world));
  return GT_SUCCESS;
}
