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
#include "gridtrain/log.h"

static void gt_ckpt_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain ckpt info FILE\n"
         "       gridtrain ckpt verify FILE...\n"
         "       gridtrain ckpt convert FILE OUT.h5\n"
         "\n"
         "Inspect checkpoints written by 'gridtrain train' ([checkpoint] dir).\n"
         "\n"
         "  info     step, tokens, data position, layout that wrote it, model shape,\n"
         "           sizes, code version and the resolved input deck\n"
         "  verify   read every dataset through its Fletcher32 checksum, check that\n"
         "           every value is finite, every attribute in range, and every tensor\n"
         "           of the model there with its shape; prints one line per file\n"
         "  convert  write the model weights as a plain HDF5 file: one float32\n"
         "           dataset per parameter at the root, full (unsharded) shape, named\n"
         "           as in the checkpoint's /model group, with attributes layers,\n"
         "           heads, dim, seq_len, vocab (docs/checkpoints.md shows how to load\n"
         "           it with h5py and PyTorch)\n"
         "\n"
         "Exit status: 0 ok, 1 a checkpoint is damaged or incomplete (verify) or\n"
         "another error, 2 bad usage or a file that is missing or not a checkpoint.\n");
}

static int gt_ckpt_shape(const gt_ckpt_meta *m, gt_gpt_shape *shape)
{
  *shape = (gt_gpt_shape){m->layers, m->heads, m->dim, m->seq_len, m->vocab};
  GT_CHECK(m->layers > 0 && m->heads > 0 && m->dim > 0 && m->seq_len > 0 && m->vocab > 0 &&
               m->dim % m->heads == 0,
           GT_ERR_INPUT, "checkpoint has an invalid model shape");
  return GT_SUCCESS;
}

static int gt_ckpt_info(const char *path)
{
  gt_ckpt_meta m;
  GT_CALL(gt_ckpt_read_meta(path, MPI_COMM_SELF, &m));
  gt_gpt_shape shape;
  int status = gt_ckpt_shape(&m, &shape);
  if (status == GT_SUCCESS) {
    struct stat sb;
    char disk[32] = "?", tensors[32];
    if (stat(path, &sb) == 0)
      gt_format_bytes((double)sb.st_size, disk, sizeof disk);
    const double nparams = (double)gt_gpt_param_count(&shape);
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
    printf("model          gpt: layers %d, heads %d, dim %d, seq_len %d, vocab %d; %.2fM "
           "parameters\n",
           m.layers, m.heads, m.dim, m.seq_len, m.vocab, nparams / 1e6);
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
  int status = gt_ckpt_shape(&m, &shape);
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
  if (status == GT_ERR_INPUT) /* a missing or misshapen tensor: incomplete */
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__, "incomplete checkpoint");
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
  if (strcmp(sub, "convert") == 0 && argc == 4) {
    GT_CALL(gt_path_refuse_clobber(argv[3], "the output", 1, (const char *const[]){argv[2]},
                                   (const char *const[]){"the checkpoint"}));
    GT_CALL(gt_ckpt_verify_one(argv[2]));
    GT_CALL(gt_ckpt_export_weights(argv[2], argv[3]));
    printf("%s: model weights written to %s\n", argv[2], argv[3]);
    fflush(stdout);
    return GT_SUCCESS;
  }
  return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                      "ckpt: bad arguments; usage: gridtrain ckpt info FILE | verify FILE... "
                      "| convert FILE OUT.h5 (see 'gridtrain ckpt --help')");
}

int gt_cmd_ckpt(int argc, char **argv, MPI_Comm world)
{
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      gt_ckpt_usage();
      return GT_SUCCESS;
    }
  if (argc < 2) {
    gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                 "ckpt: missing subcommand (info, verify, convert); see 'gridtrain ckpt "
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
