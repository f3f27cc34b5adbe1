/*
 * test_peak.c - peak FLOP/s (peak.h): the GPU table against the dense
 * figures of the datasheets, typed here by hand (never the sparse ones),
 * names the table does not know, and the CPU calibration's cache: measured
 * once, then read back; the last line of the machine wins; a damaged line
 * is ignored.
 */
/* gt-test: ranks=1 tier=quick */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "../test_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/peak.h"

static void test_table(void)
{
  const struct {
    const char *name;
    gt_peak_kind kind;
    double tflops;
  } cases[] = {
    {"NVIDIA H100 80GB HBM3", GT_PEAK_BF16, 989},
    {"NVIDIA H100 80GB HBM3", GT_PEAK_FP16, 989},
    {"NVIDIA H100 80GB HBM3", GT_PEAK_TF32, 494.5},
    {"NVIDIA H100 80GB HBM3", GT_PEAK_FP32, 67},
    {"NVIDIA H100 PCIe", GT_PEAK_BF16, 756},
    {"NVIDIA H100 PCIe", GT_PEAK_FP32, 51},
    {"NVIDIA H100 NVL", GT_PEAK_BF16, 0},
    {"NVIDIA H200", GT_PEAK_BF16, 989},
    {"NVIDIA H200", GT_PEAK_FP32, 67},
    {"NVIDIA H200 NVL", GT_PEAK_BF16, 0},
    {"NVIDIA GH200 480GB", GT_PEAK_BF16, 989},
    {"NVIDIA A100-SXM4-80GB", GT_PEAK_BF16, 312},
    {"NVIDIA A100-PCIE-40GB", GT_PEAK_FP16, 312},
    {"NVIDIA A100 80GB PCIe", GT_PEAK_TF32, 156},
    {"NVIDIA A100-SXM4-40GB", GT_PEAK_FP32, 19.5},
    {"NVIDIA A10", GT_PEAK_BF16, 125},
    {"NVIDIA A10", GT_PEAK_FP32, 31.2},
    {"NVIDIA L40S", GT_PEAK_BF16, 362.05},
    {"NVIDIA L40S", GT_PEAK_TF32, 183},
    {"Tesla V100-SXM2-32GB", GT_PEAK_FP16, 125},
    {"Tesla V100-PCIE-16GB", GT_PEAK_FP16, 112},
    {"Tesla V100-SXM2-16GB", GT_PEAK_BF16, 0},
    {"NVIDIA GeForce RTX 4090", GT_PEAK_BF16, 0},
    {"NVIDIA A40", GT_PEAK_BF16, 0},
    {"", GT_PEAK_FP32, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const double got = gt_peak_gpu(cases[i].name, cases[i].kind);
    tap_ok(got == cases[i].tflops * 1e12, "'%s' kind %d: %g TFLOP/s (expected %g)",
           cases[i].name, (int)cases[i].kind, got / 1e12, cases[i].tflops);
  }
  tap_ok(gt_peak_kind_of(GT_BF16) == GT_PEAK_BF16 && gt_peak_kind_of(GT_F16) == GT_PEAK_FP16 &&
             gt_peak_kind_of(GT_F32) == GT_PEAK_FP32,
         "precisions map to the kinds of their products (fp32 without TF32)");
}

/* The cache file's lines that start with "host=" (whole file). */
static int count_lines(const char *path, char *last, size_t size)
{
  FILE *f = fopen(path, "r");
  int n = 0;
  char line[1200];
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "host=", 5) == 0) {
      n++;
      snprintf(last, size, "%s", line);
    }
  if (f)
    fclose(f);
  return n;
}

static void append(const char *path, const char *line)
{
  FILE *f = fopen(path, "a");
  if (f) {
    fputs(line, f);
    fclose(f);
  }
}

static void test_cache(void)
{
  char dir[1024], cmd[2200], path[1200], got_path[1200], last[1200] = "";
  tu_tmp_dir("test_peak", dir, sizeof dir);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  if (system(cmd) != 0 || setenv("XDG_CACHE_HOME", dir, 1) != 0) {
    tap_ok(false, "make %s", dir);
    return;
  }
  snprintf(path, sizeof path, "%s/gridtrain/cpu-peak", dir);
  gt_backend *be = NULL;
  if (gt_backend_create("cpu", 1, &be) != GT_SUCCESS) {
    tap_ok(false, "cpu backend: %s", gt_error_message());
    return;
  }
  double first = 0, second = 0, third = 0;
  bool cached = true;
  int st = gt_peak_cpu(be, &first, &cached, got_path, sizeof got_path);
  tap_ok(st == GT_SUCCESS && !cached && first > 1e8 && first < 1e13,
         "first call measures: %.3g FLOP/s with 1 thread", first);
  tap_ok(strcmp(got_path, path) == 0 && count_lines(path, last, sizeof last) == 1,
         "the measurement is one line of %s", got_path);
  st = gt_peak_cpu(be, &second, &cached, NULL, 0);
  tap_ok(st == GT_SUCCESS && cached && second == first && count_lines(path, last, 0) == 1,
         "second call reads it back (%.6e) and measures nothing", second);
  /* the same key with another value, then a damaged value: the last good
   * line of the key wins */
  char *tab = strchr(last, '\t');
  if (tab) {
    char line[1300];
    snprintf(line, sizeof line, "%.*s\t5.000000e+10\n", (int)(tab - last), last);
    append(path, line);
    snprintf(line, sizeof line, "%.*s\t1e-300\n%.*s\tgarbage\nhost=other\t9e9\n",
             (int)(tab - last), last, (int)(tab - last), last);
    append(path, line);
  }
  st = gt_peak_cpu(be, &third, &cached, NULL, 0);
  tap_ok(tab && st == GT_SUCCESS && cached && third == 5e10,
         "the last valid line of this machine wins (%.3g)", third);
  /* without a cache directory: measured, and no error */
  unsetenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  char *saved = home ? strdup(home) : NULL;
  unsetenv("HOME");
  st = gt_peak_cpu(be, &third, &cached, got_path, sizeof got_path);
  tap_ok(st == GT_SUCCESS && !cached && third > 1e8 && got_path[0] == '\0',
         "no XDG_CACHE_HOME and no HOME: measured, no cache file");
  if (saved) {
    setenv("HOME", saved, 1);
    free(saved);
  }
  gt_backend_destroy(&be);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  test_table();
  if (getenv("GT_BUILDDIR"))
    test_cache();
  else
    tap_ok(false, "run through make check (GT_BUILDDIR unset)");
  const int rc = tap_done();
  MPI_Finalize();
  return rc;
}
