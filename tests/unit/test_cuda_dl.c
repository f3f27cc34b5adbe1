/*
 * test_cuda_dl.c - the CUDA libraries load at run time (src/backend/cuda/
 * cuda_dl.h) in a CUDA build, on a machine without a GPU too: cuBLASLt,
 * cuDNN and NCCL where configure found them. Each loads once, reports its
 * soname, version and path, and a function called through its table gives
 * the version the library reports. Built in CUDA builds only; the error
 * paths (a library missing a function, another major version) are in
 * tests/cli/test_cuda_libs.sh, which runs gridtrain against fake libraries.
 *
 * gt-test: ranks=1 tier=quick
 */
#include "build_config.h"

#define GT_DL_WANT_CUBLASLT
#ifdef GT_HAVE_CUDNN
#define GT_DL_WANT_CUDNN
#endif
#ifdef GT_HAVE_NCCL
#define GT_DL_WANT_NCCL
#endif
#include "../../src/backend/cuda/cuda_dl.h"

#include <stdio.h>
#include <string.h>

#include "../tap.h"
#include "gridtrain/error.h"

/* "SONAME MAJOR.MINOR.PATCH /PATH" with this soname and major. */
static bool described(const char *d, const char *soname, long major)
{
  char name[64], path[512];
  long ma = -1, mi = -1, pa = -1;
  return sscanf(d, "%63s %ld.%ld.%ld %511s", name, &ma, &mi, &pa, path) == 5 &&
         strcmp(name, soname) == 0 && ma == major && mi >= 0 && pa >= 0 && path[0] == '/';
}

static void check_lib(gt_dl_lib lib, const char *what, const char *soname, long major,
                      long (*version)(void))
{
  const int rc = gt_cuda_dl_load(lib);
  if (!tap_ok(rc == GT_SUCCESS, "%s loads (%s)", what,
              rc == GT_SUCCESS ? gt_cuda_dl_describe(lib) : gt_error_message())) {
    gt_error_clear();
    return;
  }
  const char *d = gt_cuda_dl_describe(lib);
  tap_ok(described(d, soname, major), "%s describes itself as '%s %ld.x.y /path': %s", what,
         soname, major, d);
  long v = version(), shown = -1;
  char name[64];
  long mi = 0, pa = 0;
  if (sscanf(d, "%63s %ld.%ld.%ld", name, &shown, &mi, &pa) == 4)
    shown = shown * 10000 + mi * 100 + pa;
  tap_ok(v == shown, "%s: a call through the table gives version %ld, as described", what, v);
  tap_ok(gt_cuda_dl_load(lib) == GT_SUCCESS && strcmp(gt_cuda_dl_describe(lib), d) == 0,
         "%s: a second load is the first one", what);
}

static long cublaslt_v(void) { return (long)cublasLtGetVersion(); }
#ifdef GT_HAVE_CUDNN
static long cudnn_v(void) { return (long)cudnnGetVersion(); }
#endif
#ifdef GT_HAVE_NCCL
static long nccl_v(void)
{
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : -1;
}
#endif

int main(void)
{
  char soname[64];
  snprintf(soname, sizeof soname, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
  check_lib(GT_DL_CUBLASLT, "cuBLASLt", soname, CUBLAS_VER_MAJOR, cublaslt_v);
#ifdef GT_HAVE_CUDNN
  snprintf(soname, sizeof soname, "libcudnn.so.%d", CUDNN_MAJOR);
  check_lib(GT_DL_CUDNN, "cuDNN", soname, CUDNN_MAJOR, cudnn_v);
#else
  tap_diag("cuDNN: not in this build");
#endif
#ifdef GT_HAVE_NCCL
  snprintf(soname, sizeof soname, "libnccl.so.%d", NCCL_MAJOR);
  check_lib(GT_DL_NCCL, "NCCL", soname, NCCL_MAJOR, nccl_v);
#else
  tap_diag("NCCL: not in this build");
#endif
  return tap_done();
}
