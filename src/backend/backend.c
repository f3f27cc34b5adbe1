/*
 * backend.c - choose a backend by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "cpu/cpu_backends.h"
#include "gridtrain/backend.h"
#include "gridtrain/cuda_info.h"
#include "gridtrain/error.h"

#ifdef HAVE_OPENBLAS_GET_CONFIG
char *openblas_get_config(void);
#endif
#ifdef HAVE_OPENBLAS_GET_PARALLEL
int openblas_get_parallel(void);
#endif
#ifdef HAVE_OPENBLAS_GET_CORENAME
char *openblas_get_corename(void);
#endif

int gt_backend_create(const char *name, int threads, gt_backend **be)
{
  GT_CHECK(threads >= 1, GT_ERR_INPUT, "backend threads must be >= 1 (got %d)", threads);
  const gt_backend_ops *ops = NULL;
  const char *canonical = NULL;
  if (strcmp(name, "cpu") == 0) {
    ops = &gt_cpu_ops;
    canonical = "cpu";
  } else if (strcmp(name, "cpu-ref") == 0) {
    ops = &gt_cpu_ref_ops;
    canonical = "cpu-ref";
  } else if (strcmp(name, "cuda") == 0) {
    if (!gt_cuda_built())
      return GT_ERROR(GT_ERR_INPUT,
                      "[backend] device = cuda: this gridtrain was built without CUDA; "
                      "reconfigure with --with-cuda=DIR (or use device = cpu)");
    return GT_ERROR(GT_ERR_INPUT,
                    "[backend] device = cuda: the CUDA backend is not part of gridtrain %s "
                    "yet (CUDA is detected, kernels come later); use device = cpu",
                    PACKAGE_VERSION);
  } else {
    return GT_ERROR(GT_ERR_INPUT, "unknown backend '%s'; expected one of cpu, cpu-ref, cuda",
                    name);
  }
  gt_backend *b = calloc(1, sizeof *b);
  GT_CHECK_ALLOC(b, sizeof *b);
  b->ops = ops;
  b->name = canonical;
  b->device = GT_HOST;
  b->threads = threads;
  int status = gt_cpu_setup(b);
  if (status != GT_SUCCESS) {
    free(b);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *be = b;
  return GT_SUCCESS;
}

int gt_backend_destroy(gt_backend **be)
{
  free(*be);
  *be = NULL;
  return GT_SUCCESS;
}

const char *gt_backend_blas_warning(void)
{
#ifdef HAVE_OPENBLAS_GET_CORENAME
  /* OpenBLAS 0.3.21 falls back to pre-AVX kernels on CPUs it does not know. */
  static const char *generic[] = {"Prescott", "Core2", "Katmai", "Coppermine", "Northwood",
                                  "Banias", "Atom", "Nehalem", "Dunnington", "Penryn"};
  const char *core = openblas_get_corename();
  bool is_generic = false;
  for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
    is_generic = is_generic || strcmp(core, generic[i]) == 0;
  __builtin_cpu_init();
  if (is_generic && __builtin_cpu_supports("avx2")) {
    static char msg[320];
    snprintf(msg, sizeof msg,
             "OpenBLAS uses its generic %s kernels although this CPU has %s; matrix "
             "products run several times slower. Set OPENBLAS_CORETYPE=%s",
             core, __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2",
             __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
    return msg;
  }
#endif
  return NULL;
}

const char *gt_backend_blas_info(void)
{
  static char info[256];
  char name[64] = "", core[64] = "", mode[32] = "";
#ifdef HAVE_OPENBLAS_GET_CONFIG
  /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": keep the first two words */
  const char *config = openblas_get_config();
  int words = 0;
  size_t n = 0;
  for (const char *p = config; *p && n + 1 < sizeof name; p++) {
    if (*p == ' ' && ++words == 2)
      break;
    name[n++] = *p;
  }
  name[n] = '\0';
#endif
#ifdef HAVE_OPENBLAS_GET_CORENAME
  snprintf(core, sizeof core, "core %s, ", openblas_get_corename());
#endif
#ifdef HAVE_OPENBLAS_GET_PARALLEL
  static const char *modes[] = {"sequential", "pthreads", "OpenMP"};
  int par = openblas_get_parallel();
  snprintf(mode, sizeof mode, "%s", par >= 0 && par <= 2 ? modes[par] : "?");
#endif
  if (name[0])
    snprintf(info, sizeof info, "%s (%s%s)", name, core, mode);
  else
    snprintf(info, sizeof info, "%s", GT_BUILD_BLAS);
  return info;
}
