/*
 * replay.c - run a libFuzzer harness over every file of its seed corpus and
 * regression directories, as a TAP test of `make check` (no clang needed):
 * each file is a test point; a crash, an abort or a sanitizer report fails
 * the test. The program tests/fuzz/replay_NAME replays harness NAME over
 * GT_FUZZ_ROOT/corpus/NAME and GT_FUZZ_ROOT/regress/NAME (GT_FUZZ_ROOT is set
 * at build time). A harness's LLVMFuzzerInitialize, when it has one, runs
 * first, as under libFuzzer. What the code under test prints goes to stderr
 * (the test's log), so that stdout holds the TAP stream alone.
 *
 * gt-test: ranks=1 tier=quick
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Around the harness's calls: its stdout to stderr, and back. */
static int gt_replay_stdout = -1;

static void gt_replay_mute(bool mute)
{
  fflush(stdout);
  if (mute) {
    gt_replay_stdout = dup(1);
    dup2(2, 1);
  } else if (gt_replay_stdout >= 0) {
    dup2(gt_replay_stdout, 1);
    close(gt_replay_stdout);
    gt_replay_stdout = -1;
  }
}

static int gt_replay_dir(const char *dir)
{
  DIR *d = opendir(dir);
  if (!d)
    return 0; /* a harness without regressions yet */
  int n = 0;
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) {
      tap_ok(false, "%s: cannot open", path);
      continue;
    }
    uint8_t *buf = malloc(1 << 20);
    size_t len = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    gt_replay_mute(true);
    LLVMFuzzerTestOneInput(buf ? buf : (const uint8_t *)"", len);
    gt_replay_mute(false);
    free(buf);
    tap_ok(true, "%s: no crash, success or a bad-input error", e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

int main(int argc, char **argv)
{
  /* the harness's name: "replay_NAME" */
  const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  const char *name = strncmp(base, "replay_", 7) == 0 ? base + 7 : base;
  setenv("GT_FUZZ_VERBOSE", "1", 1); /* the harness leaves stdout alone */
  if (LLVMFuzzerInitialize) {
    gt_replay_mute(true);
    LLVMFuzzerInitialize(&argc, &argv);
    gt_replay_mute(false);
  }
  char dir[4096];
  int n = 0;
  snprintf(dir, sizeof dir, "%s/corpus/%s", GT_FUZZ_ROOT, name);
  n += gt_replay_dir(dir);
  snprintf(dir, sizeof dir, "%s/regress/%s", GT_FUZZ_ROOT, name);
  n += gt_replay_dir(dir);
  tap_ok(n > 0, "%d inputs of harness %s replayed", n, name);
  return tap_done();
}
