/*
 * cuda_dl.c - load cuBLASLt, cuDNN and NCCL at run time and fill their
 * function tables (cuda_dl.h).
 */
#define _GNU_SOURCE /* dlinfo */
#include "build_config.h"

#define GT_DL_WANT_CUBLASLT
#ifdef GT_HAVE_CUDNN
#define GT_DL_WANT_CUDNN
#endif
#ifdef GT_HAVE_NCCL
#define GT_DL_WANT_NCCL
#endif
#include "cuda_dl.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "gridtrain/log.h"

#ifndef GT_CUDA_LIBDIR
#define GT_CUDA_LIBDIR ""
#endif
#ifndef GT_CUDNN_LIBDIR
#define GT_CUDNN_LIBDIR ""
#endif
#ifndef GT_NCCL_LIBDIR
#define GT_NCCL_LIBDIR ""
#endif

gt_dl_cublaslt_table gt_dl_cublaslt;
#ifdef GT_HAVE_CUDNN
gt_dl_cudnn_table gt_dl_cudnn;
#endif
#ifdef GT_HAVE_NCCL
gt_dl_nccl_table gt_dl_nccl;
#endif

typedef struct {
  const char *name;
  size_t offset; /* of its pointer in the table */
} dl_sym;

/* # and ## keep f from expanding to its call-through macro (cuda_dl.h) */
#define DL_CUBLASLT_SYM(f) {#f, offsetof(gt_dl_cublaslt_table, fp_##f)},
#define DL_CUDNN_SYM(f) {#f, offsetof(gt_dl_cudnn_table, fp_##f)},
#define DL_NCCL_SYM(f) {#f, offsetof(gt_dl_nccl_table, fp_##f)},

static const dl_sym cublaslt_syms[] = {GT_DL_CUBLASLT_FUNCS(DL_CUBLASLT_SYM)};
#ifdef GT_HAVE_CUDNN
static const dl_sym cudnn_syms[] = {GT_DL_CUDNN_FUNCS(DL_CUDNN_SYM)};
#endif
#ifdef GT_HAVE_NCCL
static const dl_sym nccl_syms[] = {GT_DL_NCCL_FUNCS(DL_NCCL_SYM)};
#endif

// ---- versions: what each library reports, and what we need ---------------------------------

/* *v = the library's version as major * 10000 + minor * 100 + patch. */
static void cublaslt_version(long *v) { *v = (long)cublasLtGetVersion(); }
#ifdef GT_HAVE_CUDNN
static void cudnn_version(long *v) { *v = (long)cudnnGetVersion(); }
#endif
#ifdef GT_HAVE_NCCL
static void nccl_version(long *v)
{
  int n = 0;
  *v = ncclGetVersion(&n) == ncclSuccess ? n : 0;
}
#endif

#define DL_STR_(x) #x
#define DL_STR(x) DL_STR_(x)

typedef struct {
  const char *what;     /* "cuBLASLt" */
  const char *soname;   /* "libcublasLt.so.13" */
  const char *libdir;   /* where configure found it */
  void *table;
  const dl_sym *syms;
  size_t nsyms;
  void (*version)(long *v);
  long major;           /* the major version built against */
  long min_version;     /* the oldest version that works */
  const char *fix;      /* what to install */
  const char *key;      /* what asked for it, for the message */
  /* state */
  bool tried, ok;
  void *handle;
  char describe[512];
  char error[640];
} dl_lib;

/* The libraries of this build; a NULL what: not built in. */
static dl_lib libs[GT_DL_LIBS] = {
    [GT_DL_CUBLASLT] = {.what = "cuBLASLt",
                        .soname = "libcublasLt.so." DL_STR(CUBLAS_VER_MAJOR),
                        .libdir = GT_CUDA_LIBDIR,
                        .table = &gt_dl_cublaslt,
                        .syms = cublaslt_syms,
                        .nsyms = sizeof cublaslt_syms / sizeof *cublaslt_syms,
                        .version = cublaslt_version,
                        .major = CUBLAS_VER_MAJOR,
                        .min_version = (long)CUBLAS_VER_MAJOR * 10000,
                        .fix = "the CUDA toolkit's cuBLAS (or the pip package nvidia-cublas)",
                        .key = "[backend] device = cuda"},
#ifdef GT_HAVE_CUDNN
    [GT_DL_CUDNN] = {.what = "cuDNN",
                     .soname = "libcudnn.so." DL_STR(CUDNN_MAJOR),
                     .libdir = GT_CUDNN_LIBDIR,
                     .table = &gt_dl_cudnn,
                     .syms = cudnn_syms,
                     .nsyms = sizeof cudnn_syms / sizeof *cudnn_syms,
                     .version = cudnn_version,
                     .major = CUDNN_MAJOR,
                     .min_version = (long)CUDNN_MAJOR * 10000,
                     .fix = "cuDNN 9 (or the pip package nvidia-cudnn-cu13)",
                     .key = "[backend] attention = cudnn"},
#endif
#ifdef GT_HAVE_NCCL
    [GT_DL_NCCL] = {.what = "NCCL",
                    .soname = "libnccl.so." DL_STR(NCCL_MAJOR),
                    .libdir = GT_NCCL_LIBDIR,
                    .table = &gt_dl_nccl,
                    .syms = nccl_syms,
                    .nsyms = sizeof nccl_syms / sizeof *nccl_syms,
                    .version = nccl_version,
                    .major = NCCL_MAJOR,
                    .min_version = 21000, /* bf16 reductions */
                    .fix = "NCCL 2.10 or later (or the pip package nvidia-nccl-cu13)",
                    .key = "[parallel] collectives = nccl"},
#endif
};
static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;

static void dl_fail(dl_lib *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dl_fail(dl_lib *l, const char *fmt, ...)
{
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(l->error, sizeof l->error,
           "%s: %s; install %s, or put the folder that holds %s on LD_LIBRARY_PATH", l->key, why,
           l->fix, l->soname);
  if (l->handle)
    dlclose(l->handle);
  l->handle = NULL;
}

static void dl_open(dl_lib *l)
{
  l->handle = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
  char first[256];
  snprintf(first, sizeof first, "%s", l->handle ? "" : dlerror());
  if (!l->handle && l->libdir[0]) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", l->libdir, l->soname);
    l->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!l->handle) {
    dl_fail(l, "cannot load %s (%s)", l->soname, first);
    return;
  }
  for (size_t i = 0; i < l->nsyms; i++) {
    dlerror();
    void *f = dlsym(l->handle, l->syms[i].name);
    if (!f) {
      dl_fail(l, "%s has no %s: too old a %s", l->soname, l->syms[i].name, l->what);
      return;
    }
    memcpy((char *)l->table + l->syms[i].offset, &f, sizeof f);
  }
  long v = 0;
  l->version(&v);
  const char *path = l->soname;
  struct link_map *map = NULL;
  if (dlinfo(l->handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
    path = map->l_name;
  if (v / 10000 != l->major || v < l->min_version) {
    dl_fail(l, "%s is %s %ld.%ld.%ld; gridtrain needs %s %ld.x from %ld.%ld on (%s)",
            l->soname, l->what, v / 10000, v / 100 % 100, v % 100, l->what, l->major,
            l->min_version / 10000, l->min_version / 100 % 100, path);
    return;
  }
  snprintf(l->describe, sizeof l->describe, "%s %ld.%ld.%ld %s", l->soname, v / 10000,
           v / 100 % 100, v % 100, path);
  l->ok = true;
  gt_info("gridtrain: cuda library: %s\n", l->describe);
}

int gt_cuda_dl_load(gt_dl_lib lib)
{
  GT_ASSERT(lib >= 0 && lib < GT_DL_LIBS);
  pthread_mutex_lock(&dl_lock);
  dl_lib *l = &libs[lib];
  if (!l->what) {
    pthread_mutex_unlock(&dl_lock);
    return GT_ERROR(GT_ERR_INPUT, "%s: this gridtrain was built without it",
                    lib == GT_DL_CUDNN ? "cuDNN" : "NCCL");
  }
  if (!l->tried) {
    l->tried = true;
    dl_open(l);
  }
  const bool ok = l->ok;
  pthread_mutex_unlock(&dl_lock);
  GT_CHECK(ok, GT_ERR_INPUT, "%s", l->error);
  return GT_SUCCESS;
}

const char *gt_cuda_dl_describe(gt_dl_lib lib)
{
  if (lib < 0 || lib >= GT_DL_LIBS)
    return "no such library";
  pthread_mutex_lock(&dl_lock);
  const dl_lib *l = &libs[lib];
  const char *s = !l->what ? "not built in" : l->ok ? l->describe : l->tried ? l->error
                                                                         : "not loaded";
  pthread_mutex_unlock(&dl_lock);
  return s;
}
