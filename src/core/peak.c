/*
 * peak.c - peak FLOP/s: the GPU table and the cached CPU calibration
 * (peak.h).
 */
#include "gridtrain/peak.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gridtrain/error.h"
#include "gridtrain/path.h"
#include "gridtrain/timer.h"

gt_peak_kind gt_peak_kind_of(gt_dtype precision)
{
  return precision == GT_BF16 ? GT_PEAK_BF16 : precision == GT_F16 ? GT_PEAK_FP16 : GT_PEAK_FP32;
}

// ---- GPUs -------------------------------------------------------------------------------------

/* Dense TFLOP/s (fp32, tf32, bf16, fp16 tensor core) from NVIDIA's
 * datasheets; the sparse figures are twice these. A GPU matches an entry
 * when its name has the entry's word (and the qualifier word, where there
 * is one; the first matching entry wins); words are split at spaces and
 * '-' ("NVIDIA A100-SXM4-80GB"). An entry of zeros names a variant whose
 * figures are not in the table, so that it does not take its family's. */
static const struct {
  const char *word, *qualifier;
  double tflops[4]; /* indexed by gt_peak_kind */
} gt_gpu_peaks[] = {
  /* H100 datasheet (s: with sparsity): SXM 67 fp32, 989s tf32, 1979s bf16
   * and fp16; PCIe 51, 756s, 1513s */
  {"H100", "PCIe", {51, 378, 756, 756}},
  {"H100", "NVL", {0, 0, 0, 0}},
  {"H100", NULL, {67, 494.5, 989, 989}},
  /* H200 datasheet: SXM as the H100 SXM; NVL 60, 835s, 1671s */
  {"H200", "NVL", {0, 0, 0, 0}},
  {"H200", NULL, {67, 494.5, 989, 989}},
  {"GH200", NULL, {67, 494.5, 989, 989}},
  /* A100 datasheet (40 and 80 GB, PCIe and SXM): 19.5 fp32, 156 tf32,
   * 312 bf16/fp16 */
  {"A100", NULL, {19.5, 156, 312, 312}},
  /* L40S datasheet: 91.6 fp32, 183 tf32, 362.05 bf16/fp16 */
  {"L40S", NULL, {91.6, 183, 362.05, 362.05}},
  /* A10 datasheet: 31.2 fp32, 62.5 tf32, 125 bf16/fp16 */
  {"A10", NULL, {31.2, 62.5, 125, 125}},
  /* V100 datasheet: PCIe 14 fp32, 112 tensor (fp16); SXM2 15.7, 125;
   * no tf32 or bf16 units */
  {"V100", "PCIE", {14, 0, 0, 112}},
  {"V100", NULL, {15.7, 0, 0, 125}},
};

/* Whether `name` has the word w (case-insensitive; words split at ' ' and
 * '-'). */
static bool gt_has_word(const char *name, const char *w)
{
  const size_t n = strlen(w);
  for (const char *p = name; *p;) {
    const size_t len = strcspn(p, " -");
    if (len == n && strncasecmp(p, w, n) == 0)
      return true;
    p += len;
    p += strspn(p, " -");
  }
  return false;
}

double gt_peak_gpu(const char *name, gt_peak_kind kind)
{
  if (!name || (int)kind < 0 || (int)kind > GT_PEAK_FP16)
    return 0;
  for (size_t i = 0; i < sizeof gt_gpu_peaks / sizeof gt_gpu_peaks[0]; i++)
    if (gt_has_word(name, gt_gpu_peaks[i].word) &&
        (!gt_gpu_peaks[i].qualifier || gt_has_word(name, gt_gpu_peaks[i].qualifier)))
      return 1e12 * gt_gpu_peaks[i].tflops[kind];
  return 0;
}

// ---- the CPU ----------------------------------------------------------------------------------

/* One product of n^3 (out = in w^T, all n x n) and the wait for it:
 * its seconds. */
static int gt_peak_time(gt_backend *be, void *out, const void *in, const void *w, int64_t n,
                        double *seconds)
{
  const double t0 = gt_now();
  GT_CALL(be->ops->linear_forward(be, GT_F32, out, in, w, NULL, NULL, n, n, n));
  GT_CALL(be->ops->sync(be));
  *seconds = gt_now() - t0;
  return GT_SUCCESS;
}

static int gt_peak_measure_in(gt_backend *be, double seconds, void *buf[3], int64_t nmax,
                              double *best)
{
  const size_t bytes = (size_t)nmax * (size_t)nmax * sizeof(float);
  for (int i = 0; i < 3; i++) {
    GT_CALL(be->ops->alloc(be, bytes, &buf[i]));
    GT_CALL(be->ops->zero(be, buf[i], bytes)); /* the values do not change sgemm's speed */
  }
  const double end = gt_now() + seconds;
  for (int64_t n = 256; n <= nmax; n *= 2) {
    const double flop = 2.0 * (double)n * (double)n * (double)n;
    /* a size whose warm-up and one timed product would overrun is skipped */
    if (*best > 0 && gt_now() + 2 * flop / *best > end)
      break;
    double dt;
    GT_CALL(gt_peak_time(be, buf[2], buf[0], buf[1], n, &dt)); /* warm-up: first touch */
    for (int r = 0; r < 3 && gt_now() < end; r++) {
      GT_CALL(gt_peak_time(be, buf[2], buf[0], buf[1], n, &dt));
      if (dt > 0 && flop / dt > *best)
        *best = flop / dt;
    }
  }
  return GT_SUCCESS;
}

int gt_peak_cpu_measure(gt_backend *be, double seconds, double *flops)
{
  void *buf[3] = {NULL, NULL, NULL};
  *flops = 0;
  size_t in_use, peak;
  gt_backend_device_memory(be, &in_use, &peak);
  int status = gt_peak_measure_in(be, seconds, buf, 2048, flops);
  for (int i = 0; i < 3; i++)
    if (buf[i])
      be->ops->free(be, buf[i]);
  /* the products' 48 MiB are the measurement's, not the run's: they stay out
   * of the allocator's high-water mark that the memory table measures */
  gt_backend_device_memory_rewind(be, peak);
  GT_CALL(status);
  GT_CHECK(*flops > 0, GT_ERR_INTERNAL, "the sgemm calibration measured no time");
  return GT_SUCCESS;
}

// ---- the cache --------------------------------------------------------------------------------

/* The first "model name" of /proc/cpuinfo ("AMD EPYC 9B14"), else "?". */
static void gt_cpu_model(char *buf, size_t size)
{
  snprintf(buf, size, "?");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
      const char *v = strchr(line, ':') + 1;
      v += strspn(v, " \t");
      snprintf(buf, size, "%.*s", (int)strcspn(v, "\n"), v);
      break;
    }
  fclose(f);
}

/* This machine's key: "host=H cpu=MODEL backend=B threads=N coretype=C",
 * tabs and newlines made spaces (a tab ends the key in the file). */
static void gt_peak_key(const gt_backend *be, char *key, size_t size)
{
  char host[256] = "?", model[256];
  (void)gethostname(host, sizeof host - 1);
  gt_cpu_model(model, sizeof model);
  const char *core = getenv("OPENBLAS_CORETYPE");
  snprintf(key, size, "host=%s cpu=%s backend=%s threads=%d coretype=%s", host, model,
           be->name, be->threads, core && core[0] ? core : "-");
  for (char *p = key; *p; p++)
    if (*p == '\t' || *p == '\n')
      *p = ' ';
}

/* The cache file's directory and name; false when there is none. */
static bool gt_peak_cache_path(char *dir, size_t dsize, char *path, size_t psize)
{
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (xdg && xdg[0] == '/')
    n = snprintf(dir, dsize, "%s/gridtrain", xdg);
  else if (home && home[0])
    n = snprintf(dir, dsize, "%s/.cache/gridtrain", home);
  else
    return false;
  if (n < 0 || (size_t)n >= dsize)
    return false;
  n = snprintf(path, psize, "%s/cpu-peak", dir);
  return n > 0 && (size_t)n < psize;
}

/* The last line of the file for key: its FLOP/s, else 0. */
static double gt_peak_cache_read(const char *path, const char *key)
{
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  double found = 0;
  char line[1024];
  const size_t klen = strlen(key);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, key, klen) != 0 || line[klen] != '\t')
      continue;
    char *end;
    const double v = strtod(line + klen + 1, &end);
    if (end != line + klen + 1 && isfinite(v) && v >= 1e6 && v <= 1e18)
      found = v;
  }
  fclose(f);
  return found;
}

/* One line appended with one write (O_APPEND: concurrent writers do not
 * interleave a short line). */
static void gt_peak_cache_write(const char *dir, const char *path, const char *key, double v)
{
  char failed[1024];
  if (gt_path_mkdirs(dir, failed, sizeof failed) != 0)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0)
    return;
  char line[1100];
  const int n = snprintf(line, sizeof line, "%s\t%.17g\n", key, v); /* exact */
  if (n > 0 && (size_t)n < sizeof line)
    (void)!write(fd, line, (size_t)n);
  close(fd);
}

int gt_peak_cpu(gt_backend *be, double *flops, bool *cached, char *path, size_t size)
{
  char key[700], dir[1024], file[1100];
  gt_peak_key(be, key, sizeof key);
  const bool have = gt_peak_cache_path(dir, sizeof dir, file, sizeof file);
  if (path)
    snprintf(path, size, "%s", have ? file : "");
  *flops = have ? gt_peak_cache_read(file, key) : 0;
  *cached = *flops > 0;
  if (*cached)
    return GT_SUCCESS;
  GT_CALL(gt_peak_cpu_measure(be, 1.0, flops));
  if (have)
    gt_peak_cache_write(dir, file, key, *flops);
  return GT_SUCCESS;
}
