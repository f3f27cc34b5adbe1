/*
 * replay.c - run a libFuzzer harness over every file of its seed corpus and
 * regression directories, as a TAP test of `make check` (no clang needed):
 * each file is a test point; a crash, an abort or a sanitizer report fails
 * the test. GT_FUZZ_DIRS (set at build time) lists the directories.
 *
 * gt-test: ranks=1
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    LLVMFuzzerTestOneInput(buf ? buf : (const uint8_t *)"", len);
    free(buf);
    tap_ok(true, "%s: no crash, success or a bad-input error", e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

int main(void)
{
  char dirs[] = GT_FUZZ_DIRS;
  int n = 0;
  for (char *dir = strtok(dirs, ":"); dir; dir = strtok(NULL, ":"))
    n += gt_replay_dir(dir);
  tap_ok(n > 0, "%d inputs replayed", n);
  return tap_done();
}
