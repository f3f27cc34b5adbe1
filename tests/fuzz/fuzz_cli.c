/*
 * fuzz_cli.c - libFuzzer harness for the gridtrain command line
 * (gt_cli_dispatch, src/cli/): the input is NUL-separated words, the
 * arguments after "gridtrain" (at most 16, each under 256 bytes). It runs in
 * a private scratch directory in /dev/shm holding the files a command may
 * name: tiny.in (tests/decks/tiny.in), micro.in (a one-layer GPT that trains
 * in milliseconds), text.txt, data.h5 (ingested from text.txt), ckpt.h5 (a
 * checkpoint of micro.in at step 1, in ck/ too, with `latest`) and
 * flight-rank0.txt; after each input everything else there is removed and
 * the seed files that changed are put back.
 * Safety (this may run as root): an input with a word that holds '/' or
 * ".." is skipped, so that only names inside the scratch directory can be
 * read or written. `train` is run only when its resolved deck trains a
 * trivial amount (at most 8 steps of at most GT_FZ_TRAIN_FLOPS model
 * FLOPs, validation included); other train inputs are skipped after their
 * deck has been parsed (which is what they exercise).
 * Properties: the command returns GT_SUCCESS or an error with a message
 * whose code is input, HDF5, system (a file that cannot be written) or
 * numeric (a diverging run) - never a crash, a hang, a sanitizer report,
 * an internal, MPI, BLAS or device error; no HDF5 object stays open; the
 * signal handlers the command installs are put back, and the error stack
 * is cleared, before the next input.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "fuzz_util.h"
#include "gridtrain/config.h"
#include "gridtrain/error.h"

#define GT_FZ_WORDS 16
#define GT_FZ_WORD_MAX 256
#define GT_FZ_TRAIN_FLOPS 2e7
#define GT_FZ_SEEDS 16

static char gt_fz_root[256], gt_fz_work[300], gt_fz_seed[300];
static struct {
  char name[64];
  struct stat sb;
} gt_fz_seeds[GT_FZ_SEEDS];
static int gt_fz_nseeds;
static int gt_fz_cwd = -1; /* the fuzzer's own working directory */
static const int gt_fz_signals[3] = {SIGINT, SIGTERM, SIGUSR1};
static struct sigaction gt_fz_handlers[3];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char gt_fz_micro[] = "; micro.in - a GPT that trains in milliseconds (fuzz_cli)\n"
                                  "[run]\nsteps = 2\nseed = 3\nlog_every = 1\n"
                                  "hang_timeout = 0\n"
                                  "[model]\nlayers = 1\nheads = 2\ndim = 8\nseq_len = 8\n"
                                  "vocab = 256\n"
                                  "[data]\ntrain = data.h5\nbatch = 2\n"
                                  "[backend]\nthreads = 1\n";
static const char gt_fz_text[] = "In the beginning God created the heaven and the earth.\n"
                                 "And the earth was without form, and void; and darkness was "
                                 "upon the face of the deep.\n";
static const char gt_fz_flight[] =
  "# gridtrain flight records of rank 0 (fuzz; host h, pid 1), 2 operations\n"
  "# rank t_begin t_end comm op seq peer tag bytes step slot\n"
  "0 1.000000 1.000100 world allreduce 1 -1 -1 1024 0 -\n"
  "0 1.000200 0.000000 dp bcast 2 -1 -1 64 1 a\n";

static void gt_fz_die(const char *what)
{
  fprintf(gt_fuzz_log(), "fuzz_cli: %s: %s\n", what, gt_error_message());
  abort();
}

/* Run one command line at set-up; it must succeed. */
static void gt_fz_run(const char *line)
{
  char buf[512], *argv[GT_FZ_WORDS + 2];
  int argc = 0;
  snprintf(buf, sizeof buf, "gridtrain %s", line);
  for (char *w = strtok(buf, " "); w && argc < GT_FZ_WORDS + 1; w = strtok(NULL, " "))
    argv[argc++] = w;
  argv[argc] = NULL;
  if (gt_cli_dispatch(argc, argv, MPI_COMM_WORLD) != GT_SUCCESS)
    gt_fz_die(line);
  gt_error_clear();
}

/* Copy a file from one directory to another (same name). */
static void gt_fz_copy(const char *from_dir, const char *to_dir, const char *name)
{
  char from[600], to[600];
  size_t size;
  if (snprintf(from, sizeof from, "%s/%s", from_dir, name) >= (int)sizeof from ||
      snprintf(to, sizeof to, "%s/%s", to_dir, name) >= (int)sizeof to)
    gt_fz_die("a seed file's path is too long");
  uint8_t *bytes = gt_fuzz_read(from, &size);
  if (!bytes || !gt_fuzz_write(to, bytes, size))
    gt_fz_die("copying a seed file");
  free(bytes);
}

/* Record the seed files of the scratch directory (regular files at its top
 * and in ck/) and keep a copy of each. */
static void gt_fz_snapshot(void)
{
  static const char *const names[] = {"tiny.in",  "micro.in",        "text.txt",
                                      "data.h5",  "ckpt.h5",         "flight-rank0.txt",
                                      "ck/latest", "ck/step_00000001.h5"};
  char sub[400];
  snprintf(sub, sizeof sub, "%s/ck", gt_fz_seed);
  mkdir(sub, 0700);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(gt_fz_seeds[gt_fz_nseeds].name, sizeof gt_fz_seeds[0].name, "%s", names[i]);
    gt_fz_copy(gt_fz_work, gt_fz_seed, names[i]);
    if (stat(names[i], &gt_fz_seeds[gt_fz_nseeds].sb) != 0)
      gt_fz_die("a seed file is missing");
    gt_fz_nseeds++;
  }
}

/* After an input: remove what it made, put back the seed files it changed. */
static void gt_fz_restore(void)
{
  const char *dirs[2] = {".", "ck"};
  for (int d = 0; d < 2; d++) {
    DIR *dir = opendir(dirs[d]);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
          (d == 0 && strcmp(e->d_name, "ck") == 0))
        continue;
      char name[600];
      snprintf(name, sizeof name, "%s%s%s", d ? dirs[d] : "", d ? "/" : "", e->d_name);
      bool seed = false;
      for (int i = 0; i < gt_fz_nseeds; i++)
        seed = seed || strcmp(gt_fz_seeds[i].name, name) == 0;
      if (!seed)
        gt_fuzz_remove(name);
    }
    if (dir)
      closedir(dir);
  }
  struct stat sb;
  if (lstat("ck", &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    gt_fuzz_remove("ck");
    mkdir("ck", 0700);
  }
  for (int i = 0; i < gt_fz_nseeds; i++) {
    const struct stat *was = &gt_fz_seeds[i].sb;
    if (lstat(gt_fz_seeds[i].name, &sb) == 0 && S_ISREG(sb.st_mode) &&
        sb.st_size == was->st_size && sb.st_mtim.tv_sec == was->st_mtim.tv_sec &&
        sb.st_mtim.tv_nsec == was->st_mtim.tv_nsec && sb.st_mode == was->st_mode)
      continue;
    gt_fuzz_remove(gt_fz_seeds[i].name);
    gt_fz_copy(gt_fz_seed, gt_fz_work, gt_fz_seeds[i].name);
    if (stat(gt_fz_seeds[i].name, &gt_fz_seeds[i].sb) != 0)
      gt_fz_die("putting back a seed file");
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  gt_fuzz_setup();
  gt_fuzz_tmpdir("cli", gt_fz_root, sizeof gt_fz_root);
  snprintf(gt_fz_work, sizeof gt_fz_work, "%s/work", gt_fz_root);
  snprintf(gt_fz_seed, sizeof gt_fz_seed, "%s/seed", gt_fz_root);
  gt_fz_cwd = open(".", O_RDONLY | O_DIRECTORY);
  if (gt_fz_cwd < 0 || mkdir(gt_fz_work, 0700) != 0 || mkdir(gt_fz_seed, 0700) != 0 ||
      chdir(gt_fz_work) != 0)
    gt_fz_die("the scratch directory");
  for (int i = 0; i < 3; i++)
    sigaction(gt_fz_signals[i], NULL, &gt_fz_handlers[i]);
  size_t size = 0;
  uint8_t *tiny = NULL;
#ifdef GT_FUZZ_ROOT
  tiny = gt_fuzz_read(GT_FUZZ_ROOT "/../decks/tiny.in", &size);
#endif
  if (!tiny || !gt_fuzz_write("tiny.in", tiny, size) ||
      !gt_fuzz_write("micro.in", gt_fz_micro, sizeof gt_fz_micro - 1) ||
      !gt_fuzz_write("text.txt", gt_fz_text, sizeof gt_fz_text - 1) ||
      !gt_fuzz_write("flight-rank0.txt", gt_fz_flight, sizeof gt_fz_flight - 1))
    gt_fz_die("writing the seed files (is GT_FUZZ_ROOT/../decks/tiny.in there?)");
  free(tiny);
  gt_fuzz_quiet();
  gt_fz_run("ingest text text.txt -o data.h5 --val-fraction 0.2");
  gt_fz_run("train micro.in checkpoint.dir=ck run.steps=1");
  gt_fz_copy("ck", ".", "step_00000001.h5");
  if (rename("step_00000001.h5", "ckpt.h5") != 0)
    gt_fz_die("naming ckpt.h5");
  gt_fz_snapshot();
  for (int i = 0; i < 3; i++)
    sigaction(gt_fz_signals[i], &gt_fz_handlers[i], NULL);
  if (fchdir(gt_fz_cwd) != 0)
    gt_fz_die("back to the working directory");
  gt_fuzz_baseline();
  return 0;
}

/* Train only what trains a trivial amount; false: skip this input. argv[0]
 * is "train", argv[1] the deck, the overrides follow. */
static bool gt_fz_train_small(int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return true;
  if (argc < 2 || argv[1][0] == '-')
    return true;
  gt_config cfg;
  const int status = gt_config_load(&cfg, argv[1], argc - 2, argv + 2, MPI_COMM_WORLD);
  gt_error_clear();
  if (status != GT_SUCCESS)
    return true; /* fails the same way, fast */
  const double d = (double)cfg.model.dim, layers = (double)cfg.model.layers;
  const double params = layers * 12 * d * d + (double)(cfg.model.vocab + cfg.model.seq_len) * d;
  double steps = (double)cfg.run.steps;
  if (cfg.run.eval_every > 0 && cfg.data.val[0])
    steps += (double)cfg.run.eval_batches * (steps / (double)cfg.run.eval_every + 1);
  const double flops = 6 * params * steps * (double)cfg.data.batch * (double)cfg.model.seq_len;
  return cfg.run.steps <= 8 && steps <= 64 && flops <= GT_FZ_TRAIN_FLOPS;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > GT_FZ_WORDS * GT_FZ_WORD_MAX)
    return 0;
  char text[GT_FZ_WORDS * GT_FZ_WORD_MAX + 1];
  memcpy(text, data, size);
  text[size] = '\0';
  char *argv[GT_FZ_WORDS + 2] = {"gridtrain"};
  int argc = 1;
  for (size_t at = 0; at < size && argc <= GT_FZ_WORDS; at += strlen(text + at) + 1) {
    const char *w = text + at;
    if (strlen(w) >= GT_FZ_WORD_MAX || strchr(w, '/') || strstr(w, ".."))
      return 0; /* only names inside the scratch directory */
    argv[argc++] = text + at;
  }
  argv[argc] = NULL;
  if (chdir(gt_fz_work) != 0)
    gt_fz_die("the scratch directory");
  const bool skip =
    argc >= 2 && strcmp(argv[1], "train") == 0 && !gt_fz_train_small(argc - 1, argv + 1);
  if (skip) {
    if (fchdir(gt_fz_cwd) != 0)
      gt_fz_die("back to the working directory");
    return 0;
  }
  const int status = gt_cli_dispatch(argc, argv, MPI_COMM_WORLD);
  gt_fuzz_expect_codes("cli", "gt_cli_dispatch", status,
                       1u << GT_ERR_INPUT | 1u << GT_ERR_HDF5 | 1u << GT_ERR_SYSTEM |
                         1u << GT_ERR_NUMERIC);
  gt_error_clear();
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < 3; i++)
    sigaction(gt_fz_signals[i], &gt_fz_handlers[i], NULL);
  gt_fuzz_expect_closed("cli");
  gt_fz_restore();
  if (fchdir(gt_fz_cwd) != 0)
    gt_fz_die("back to the working directory");
  return 0;
}
