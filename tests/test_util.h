/*
 * tests/test_util.h - helpers shared by the C tests: deterministic random
 * arrays, norm-wise relative error, MPI start-up.
 */
#ifndef GT_TESTS_UTIL_H
#define GT_TESTS_UTIL_H

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/backend.h"
#include "gridtrain/config.h"
#include "gridtrain/error.h"
#include "gridtrain/ingest.h"
#include "gridtrain/log.h"
#include "tap.h"

/* Set one configuration key from text, as on the command line
 * (tu_config_set(&cfg, "backend.precision=%s", name)); a test's own values
 * are valid, so a refusal ends the test. */
#define tu_config_set(cfg, ...)                                                   \
  do {                                                                            \
    if (gt_config_set((cfg), __VA_ARGS__) != GT_SUCCESS) {                        \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, gt_error_message());    \
      abort();                                                                    \
    }                                                                             \
  } while (0)

/* Uniform in [lo, hi) from a tiny LCG (tests only). */
static inline void tu_fill(float *x, size_t n, uint64_t seed, float lo, float hi)
{
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = lo + (hi - lo) * (float)((s >> 40) * 0x1.0p-24);
  }
}

static inline void tu_fill_int(int32_t *x, size_t n, uint64_t seed, int32_t upper)
{
  uint64_t s = seed * 2862933555777941757ULL + 3037000493ULL;
  for (size_t i = 0; i < n; i++) {
    s = s * 2862933555777941757ULL + 3037000493ULL;
    x[i] = (int32_t)((s >> 33) % (uint64_t)upper);
  }
}

/* ||a - b|| / ||b|| (||b|| floored at 1e-30). */
static inline double tu_rel_err(const float *a, const float *b, size_t n)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
  }
  return sqrt(num) / fmax(sqrt(den), 1e-30);
}

static inline float *tu_alloc(size_t n)
{
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p)
    abort();
  return p;
}

static inline float *tu_copy(const float *x, size_t n)
{
  float *p = tu_alloc(n);
  memcpy(p, x, n * sizeof(float));
  return p;
}

/* Device memory from and to the host: queue the copy and wait for it (the
 * backend's memory may be asynchronous or unreachable from the host:
 * cpu-async, cpu-guard). 0 on success. */
static inline int tu_download(gt_backend *be, void *host, const void *dev, size_t bytes)
{
  int rc = be->ops->download(be, host, dev, bytes, NULL);
  return rc != GT_SUCCESS ? rc : be->ops->sync(be);
}

static inline int tu_upload(gt_backend *be, void *dev, const void *host, size_t bytes)
{
  int rc = be->ops->upload(be, dev, host, bytes, NULL);
  return rc != GT_SUCCESS ? rc : be->ops->sync(be);
}

/* A fresh host copy of n floats of device memory (abort on failure). */
static inline float *tu_fetch(gt_backend *be, const float *dev, size_t n)
{
  float *h = calloc(n ? n : 1, sizeof(float));
  if (!h || tu_download(be, h, dev, n * sizeof(float)) != GT_SUCCESS)
    abort();
  return h;
}

/* The scratch directory of test `name` under the build tree; under a CPU
 * test mode (GT_CPU_MODE) the mode is part of the name, so that the same
 * program in two modes can run at once. */
static inline void tu_tmp_dir(const char *name, char *dir, size_t size)
{
  const char *mode = getenv("GT_CPU_MODE");
  snprintf(dir, size, "%s/tests/tmp/%s%s%s", getenv("GT_BUILDDIR"), name,
           mode && mode[0] ? "-" : "", mode ? mode : "");
}

/* Collective on the world: a fresh scratch directory for test `name`
 * (tu_tmp_dir; dir, at least 1024 bytes) holding genesis.h5, the bytes of
 * tests/data/genesis.txt as a dataset (all train, no validation), whose
 * path goes to path (size bytes). Rank 0 makes it; on failure the test bails
 * out and the job aborts. */
static inline void tu_genesis_dataset(const char *name, char *dir, size_t dsize, char *path,
                                      size_t size)
{
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  tu_tmp_dir(name, dir, dsize);
  snprintf(path, size, "%s/genesis.h5", dir);
  int st = GT_SUCCESS;
  if (rank == 0) {
    char cmd[4400], text[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    snprintf(text, sizeof text, "%s/tests/data/genesis.txt", getenv("GT_SRCDIR"));
    char *files[1] = {text};
    st = system(cmd) == 0 ? gt_ingest_text(1, files, path, 0.0, NULL) : GT_ERR_SYSTEM;
  }
  MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (st != GT_SUCCESS) {
    tap_bail("cannot make the dataset %s: %s", path, rank == 0 ? gt_error_message() : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Barrier that sleeps while it waits, so that ranks with nothing to do do
 * not take the cores of those still working (oversubscribed tests). */
static inline void tu_sleepy_barrier(MPI_Comm comm)
{
  MPI_Request req;
  int done = 0;
  MPI_Ibarrier(comm, &req);
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

/* MPI_Init, error handler, log rank; TAP output on rank 0 only. */
/* The world size a test runs at: the count its source declares ("gt-test:
 * ranks=N"), or the smaller one a quick-tier wrapper of tests/quick/ asks
 * for with GT_TEST_RANKS (tests/run-test starts that many). */
static inline int tu_test_ranks(int declared)
{
  const char *e = getenv("GT_TEST_RANKS");
  return e && atoi(e) > 0 ? atoi(e) : declared;
}

static inline int tu_mpi_init(int *argc, char ***argv)
{
  int provided, rank;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  gt_log_init(rank);
  tap_init(rank == 0);
  return rank;
}

/* Report a gridtrain error status as a failed TAP line; true when ok. */
static inline bool tu_ok_status(int status, const char *what)
{
  if (status != GT_SUCCESS)
    tap_diag("%s: %s", what, gt_error_message());
  return tap_ok(status == GT_SUCCESS, "%s", what);
}

/* A backend op's status, then sync (where an error of a queued op shows): a
 * failure is a failed TAP line naming the op and the backend; true when ok. */
static inline bool tu_call_ok(gt_backend *be, int status, const char *what)
{
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  if (status != GT_SUCCESS) {
    tap_ok(false, "%s [%s]: %s", what, be->name, gt_error_message());
    gt_error_clear();
  }
  return status == GT_SUCCESS;
}

/* The same check counted instead of reported: a failure adds to *failures
 * and prints a TAP comment (for tests that assert "no call failed" once). */
static inline void tu_call_counted(int *failures, gt_backend *be, int status, const char *what)
{
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  if (status != GT_SUCCESS) {
    (*failures)++;
    tap_diag("%s [%s]: %s", what, be->name, gt_error_message());
    gt_error_clear();
  }
}

/* An attention problem (batch, tokens, query heads, head size, key/value
 * heads: 0 for as many as query heads) and the element counts of qkv
 * (B,T,H+2Hkv,hs), out (B,T,H*hs) and lse (B,H,T). */
typedef struct {
  int64_t B, T, H, hs, Hkv;
} tu_attn_shape;

static inline int64_t tu_attn_kv(tu_attn_shape s) { return s.Hkv ? s.Hkv : s.H; }
/* Elements of a token's row of qkv. */
static inline int64_t tu_attn_row(tu_attn_shape s) { return (s.H + 2 * tu_attn_kv(s)) * s.hs; }
static inline size_t tu_attn_n_qkv(tu_attn_shape s) { return (size_t)(s.B * s.T * tu_attn_row(s)); }
static inline size_t tu_attn_n_out(tu_attn_shape s) { return (size_t)(s.B * s.T * s.H * s.hs); }
static inline size_t tu_attn_n_lse(tu_attn_shape s) { return (size_t)(s.B * s.H * s.T); }

/* fp32 values with the bf16 and fp16 patterns that round to nearest even
 * gives them, written out by hand: specials, overflow, ties, subnormals. */
typedef struct {
  float x;
  uint16_t bf16, f16;
} tu_cast_case;

static inline size_t tu_cast_cases(const tu_cast_case **cases)
{
  static const tu_cast_case sp[] = {
    {0.0f, 0x0000, 0x0000},          {-0.0f, 0x8000, 0x8000},
    {1.0f, 0x3f80, 0x3c00},          {-1.0f, 0xbf80, 0xbc00},
    {NAN, 0x7fc0, 0x7e00},           {-NAN, 0xffc0, 0xfe00},
    {INFINITY, 0x7f80, 0x7c00},      {-INFINITY, 0xff80, 0xfc00},
    {65504.0f, 0x4780, 0x7bff},      {65519.996f, 0x4780, 0x7bff}, /* below the fp16 cut */
    {65520.0f, 0x4780, 0x7c00},      {-65520.0f, 0xc780, 0xfc00}, /* fp16 overflows */
    {65536.0f, 0x4780, 0x7c00},      {1e10f, 0x5015, 0x7c00},
    {3.40282347e38f, 0x7f80, 0x7c00}, /* FLT_MAX: bf16 overflows too */
    {1.0f + 0x1p-8f, 0x3f80, 0x3c04}, /* bf16 tie: even (down) */
    {1.0f + 0x3p-8f, 0x3f82, 0x3c0c}, /* bf16 tie: even (up) */
    {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81, 0x3c04},
    {1.0f + 0x1p-11f, 0x3f80, 0x3c00}, /* fp16 tie: even (down) */
    {1.0f + 0x3p-11f, 0x3f80, 0x3c02}, /* fp16 tie: even (up) */
    {2049.0f, 0x4500, 0x6800},       {2051.0f, 0x4500, 0x6802},
    {0x1p-14f, 0x3880, 0x0400},      /* smallest fp16 normal */
    {0x1p-24f, 0x3380, 0x0001},      /* smallest fp16 subnormal */
    {0x1p-25f, 0x3300, 0x0000},      /* fp16 tie with 0: even */
    {-0x1p-25f, 0xb300, 0x8000},     {0x3p-25f, 0x33c0, 0x0002}, /* tie: even (up) */
    {0x3p-26f, 0x3340, 0x0001},      {0x1p-126f, 0x0080, 0x0000}, /* FLT_MIN */
    {1e-40f, 0x0001, 0x0000}, /* fp32 subnormal */
  };
  *cases = sp;
  return sizeof sp / sizeof sp[0];
}

#endif /* GT_TESTS_UTIL_H */
