/*
 * dispatch.c - the gridtrain command line: the top-level usage and the
 * dispatch of argv to a subcommand (cli.h). Shared by main.c and the
 * command-line fuzz harness (tests/fuzz/fuzz_cli.c).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "build_config.h"
#include "cli.h"
#include "gridtrain/backend.h"
#include "gridtrain/cuda_info.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/version.h"

/* The build, for --version: the MPI library, HDF5, BLAS, CUDA and the
 * tokenizers, a line each. */
static void gt_build_info(char *buf, unsigned long size)
{
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  if (MPI_Get_library_version(mpi, &len) != MPI_SUCCESS)
    snprintf(mpi, sizeof mpi, "unknown (MPI_Get_library_version failed)");
  char *nl = strchr(mpi, '\n');
  if (nl)
    *nl = '\0';
  for (char *p = mpi; *p; p++)
    if (*p == '\t')
      *p = ' ';
  char cuda[256];
  gt_cuda_describe(cuda, sizeof cuda);
#define GT_BPE_INFO "byte-level BPE (PCRE2 " GT_BUILD_PCRE2 ", json-c " GT_BUILD_JSONC ")"
#ifdef GT_HAVE_SENTENCEPIECE
  const char *tokens = "bytes, SentencePiece " GT_BUILD_SPM " (BPE, unigram), " GT_BPE_INFO;
#else
  const char *tokens = "bytes, " GT_BPE_INFO " (built without SentencePiece)";
#endif
  snprintf(buf, size,
           "  MPI   : %s\n"
           "  HDF5  : %s (parallel)\n"
           "  BLAS  : %s\n"
           "  CUDA  : %s\n"
           "  TOKENS: %s\n",
           mpi, GT_BUILD_HDF5, gt_backend_blas_info(), cuda, tokens);
}

static void gt_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain COMMAND [ARGS]\n"
         "\n"
         "gridtrain trains neural networks on MPI ranks with data, pipeline and tensor\n"
         "parallelism. Launch it with mpiexec or srun.\n"
         "\n"
         "Commands:\n"
         "  train DECK [section.key=value ...]   train the model of an input deck\n"
         "  ingest text IN... -o OUT.h5          make an HDF5 token dataset from text\n"
         "  ingest tokens FILE... -o OUT.h5 ...  ... from nanoGPT, llm.c or .npy token files\n"
         "  ckpt info|verify|convert FILE ...    inspect, check or export a checkpoint\n"
         "  sample CKPT [--prompt TEXT] ...      generate text with a checkpoint's model\n"
         "  score CKPT FILE... [--tokens] ...    loss and perplexity of a model on files\n"
         "  plan --memory DECK [--ranks N] ...   the memory account of a layout, no training\n"
         "  plan DECK --cluster FILE --nodes N   rank layouts by predicted step time and memory\n"
         "  flight RUNDIR/flight-rank*.txt       merge the hang watchdog's records (a timeline)\n"
         "  plot RUN.jsonl... -o OUT.png         draw loss, tokens/s and the step time split\n"
         "\n"
         "Options:\n"
         "  -h, --help       this help ('gridtrain COMMAND --help' for a command)\n"
         "  -V, --version    version and build information\n"
         "\n"
         "Exit status: 0 success, 2 bad input, 3 stopped by SIGUSR1/SIGTERM after\n"
         "writing a checkpoint (requeue to continue), 4 a hang found by the watchdog\n"
         "([run] hang_timeout), 130 stopped by SIGINT after writing a checkpoint,\n"
         "1 other errors.\n");
}

bool gt_cli_wants_help(int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return true;
  return false;
}

int gt_cli_dispatch(int argc, char **argv, MPI_Comm world)
{
  if (argc < 2) {
    gt_usage();
    gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                 "missing command; see 'gridtrain --help'");
    gt_error_set_collective(true);
    return GT_ERR_INPUT;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
    gt_usage();
    return GT_SUCCESS;
  }
  if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
    char info[2048];
    gt_build_info(info, sizeof info);
    gt_info("gridtrain %s\n%s", gt_version(), info);
    return GT_SUCCESS;
  }
  if (strcmp(cmd, "train") == 0)
    return gt_cmd_train(argc - 1, argv + 1, world);
  if (strcmp(cmd, "ingest") == 0)
    return gt_cmd_ingest(argc - 1, argv + 1, world);
  if (strcmp(cmd, "ckpt") == 0)
    return gt_cmd_ckpt(argc - 1, argv + 1, world);
  if (strcmp(cmd, "plan") == 0)
    return gt_cmd_plan(argc - 1, argv + 1, world);
  if (strcmp(cmd, "flight") == 0)
    return gt_cmd_flight(argc - 1, argv + 1, world);
  if (strcmp(cmd, "plot") == 0)
    return gt_cmd_plot(argc - 1, argv + 1, world);
  if (strcmp(cmd, "sample") == 0)
    return gt_cmd_sample(argc - 1, argv + 1, world);
  if (strcmp(cmd, "score") == 0)
    return gt_cmd_score(argc - 1, argv + 1, world);
  gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
               "unknown command '%s'; commands: train, ingest, ckpt, sample, score, plan, flight, "
               "plot (see 'gridtrain --help')",
               cmd);
  gt_error_set_collective(true);
  return GT_ERR_INPUT;
}
