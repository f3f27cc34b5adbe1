/*
 * backend.c - choose a backend by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "cpu/cpu_backends.h"
#include "cuda/cuda_entry.h"
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

/* The backends by name: the configuration's devices at their gt_device_kind,
 * then "cpu-ref" (tests and benchmarks only). kernels NULL: cuda. */
static const struct {
  const char *name;
  const gt_backend_ops *kernels;
  gt_cpu_mode mode;
} gt_backends[] = {[GT_DEVICE_CPU] = {"cpu", &gt_cpu_kernels, GT_CPU_SYNC},
                   [GT_DEVICE_CPU_ASYNC] = {"cpu-async", &gt_cpu_kernels, GT_CPU_ASYNC},
                   [GT_DEVICE_CPU_GUARD] = {"cpu-guard", &gt_cpu_kernels, GT_CPU_GUARD},
                   [GT_DEVICE_CUDA] = {"cuda", NULL, GT_CPU_SYNC},
                   [GT_DEVICE_CUDA + 1] = {"cpu-ref", &gt_ref_kernels, GT_CPU_SYNC}};
#define GT_NBACKENDS ((int)(sizeof gt_backends / sizeof gt_backends[0]))

/* GT_CPU_MODE=async|guard turns "cpu" into a test mode (tests run any suite
 * under it without changing their decks). */
static int gt_cpu_mode_from_env(int *which)
{
  const char *mode = getenv("GT_CPU_MODE");
  if (!mode || !mode[0] || *which != GT_DEVICE_CPU)
    return GT_SUCCESS;
  if (strcmp(mode, "async") == 0)
    *which = GT_DEVICE_CPU_ASYNC;
  else if (strcmp(mode, "guard") == 0)
    *which = GT_DEVICE_CPU_GUARD;
  else if (strcmp(mode, "sync") != 0)
    return GT_ERROR(GT_ERR_INPUT, "GT_CPU_MODE=%s: expected async, guard or sync", mode);
  return GT_SUCCESS;
}

static int gt_async_delay(double *us)
{
  *us = 100.0;
  const char *env = getenv("GT_CPU_ASYNC_DELAY_US");
  if (!env || !env[0])
    return GT_SUCCESS;
  char *end;
  double v = strtod(env, &end);
  GT_CHECK(*end == '\0' && v >= 0 && v <= 1e7, GT_ERR_INPUT,
           "GT_CPU_ASYNC_DELAY_US=%s: expected microseconds in [0, 1e7]", env);
  *us = v;
  return GT_SUCCESS;
}

int gt_backend_create(const char *name, int threads, gt_backend **be)
{
  gt_backend_options opt = {
      .threads = threads, .local_rank = -1, .attention = GT_ATTENTION_DEFAULT};
  GT_CALL(gt_backend_create_with(name, &opt, be));
  return GT_SUCCESS;
}

static int gt_backend_create_cuda(const gt_backend_options *opt, gt_backend **be)
{
  if (!gt_cuda_built())
    return GT_ERROR(GT_ERR_INPUT,
                    "[backend] device = cuda: this gridtrain was built without CUDA; "
                    "reconfigure with --with-cuda=DIR (or use device = cpu)");
  gt_backend *b = calloc(1, sizeof *b);
  GT_CHECK_ALLOC(b, sizeof *b);
  b->threads = opt->threads;
  int status = gt_cuda_backend_init(b, opt->local_rank, opt->attention);
  if (status != GT_SUCCESS) {
    (void)gt_cuda_backend_fini(b);
    free(b);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *be = b;
  return GT_SUCCESS;
}

/* Create gt_backends[which]. */
static int gt_backend_create_at(int which, const gt_backend_options *opt, gt_backend **be)
{
  int threads = opt->threads;
  GT_CHECK(threads >= 1, GT_ERR_INPUT, "backend threads must be >= 1 (got %d)", threads);
  GT_CALL(gt_cpu_mode_from_env(&which));
  if (which == GT_DEVICE_CUDA) {
    GT_CALL(gt_backend_create_cuda(opt, be));
    return GT_SUCCESS;
  }
  double delay = 0;
  if (gt_backends[which].mode == GT_CPU_ASYNC)
    GT_CALL(gt_async_delay(&delay));
  gt_backend *b = calloc(1, sizeof *b);
  GT_CHECK_ALLOC(b, sizeof *b);
  b->name = gt_backends[which].name;
  b->threads = threads;
  int status = gt_cpu_backend_init(b, gt_backends[which].kernels, gt_backends[which].mode, delay);
  if (status != GT_SUCCESS) {
    free(b);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *be = b;
  return GT_SUCCESS;
}

int gt_backend_create_with(const char *name, const gt_backend_options *opt, gt_backend **be)
{
  for (int i = 0; i < GT_NBACKENDS; i++)
    if (strcmp(name, gt_backends[i].name) == 0) {
      GT_CALL(gt_backend_create_at(i, opt, be));
      return GT_SUCCESS;
    }
  return GT_ERROR(GT_ERR_INPUT,
                  "unknown backend '%s'; expected one of cpu, cpu-ref, cpu-async, cpu-guard, "
                  "cuda",
                  name);
}

int gt_backend_create_device(gt_device_kind device, const gt_backend_options *opt,
                             gt_backend **be)
{
  GT_ASSERT(device >= GT_DEVICE_CPU && device <= GT_DEVICE_CUDA);
  GT_CALL(gt_backend_create_at((int)device, opt, be));
  return GT_SUCCESS;
}

int gt_backend_destroy(gt_backend **be)
{
  if (!*be)
    return GT_SUCCESS;
  int status = (*be)->device == GT_CUDA ? gt_cuda_backend_fini(*be) : gt_cpu_backend_fini(*be);
  free(*be);
  *be = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

const char *gt_backend_describe(gt_backend *be)
{
  if (be->device == GT_CUDA)
    return gt_cuda_backend_describe(be);
  static _Thread_local char line[64];
  snprintf(line, sizeof line, "%s (%d thread%s)", be->name, be->threads,
           be->threads == 1 ? "" : "s");
  return line;
}

const char *gt_backend_device_name(gt_backend *be)
{
  return be->device == GT_CUDA ? gt_cuda_backend_name(be) : "";
}

void gt_backend_device_memory(gt_backend *be, size_t *in_use, size_t *peak)
{
  size_t cached = 0;
  *in_use = *peak = 0;
  if (be->device == GT_CUDA)
    gt_cuda_memory_stats(be, in_use, peak, &cached);
  else
    gt_cpu_memory_stats(be, in_use, peak);
}

void gt_backend_device_memory_rewind(gt_backend *be, size_t peak)
{
  if (be->device == GT_CUDA)
    gt_cuda_memory_rewind(be, peak);
  else
    gt_cpu_memory_rewind(be, peak);
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
  if (gt_dnnl_bf16_enabled()) /* bf16 products go through oneDNN */
    snprintf(info + strlen(info), sizeof info - strlen(info), "; bf16 GEMM %s", gt_dnnl_info());
  return info;
}
