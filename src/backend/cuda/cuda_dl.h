/*
 * cuda_dl.h - the CUDA libraries the cuda backend calls, loaded at run time
 * (internal to src/backend/cuda). A CPU run maps none of them: cuBLASLt
 * (~520 MB) and cuDNN are loaded when a rank creates the cuda backend, NCCL
 * when collectives = nccl asks for it. The CUDA runtime is linked
 * statically (nvcc's cudart_static) and loads the driver (libcuda.so.1)
 * itself at the first CUDA call, so the same binary runs CPU jobs on nodes
 * without CUDA.
 *
 * A file that calls a library defines GT_DL_WANT_CUBLASLT, GT_DL_WANT_CUDNN
 * or GT_DL_WANT_NCCL and includes this header instead of the library's
 * own: each function the backend uses is then a macro for a pointer of the
 * library's own type (so a call is checked against the library's header),
 * looked up by gt_cuda_dl_load. Call sites read as plain library calls.
 *
 * Not thread-safe before a load has returned; loads are made on the thread
 * that creates the backend and on each rank alike (collectives.c checks
 * that every rank of a group loaded NCCL before any uses it).
 */
#ifndef GT_CUDA_DL_H
#define GT_CUDA_DL_H

#include <stdbool.h>

#include "gridtrain/error.h"

typedef enum { GT_DL_CUBLASLT = 0, GT_DL_CUDNN, GT_DL_NCCL, GT_DL_LIBS } gt_dl_lib;

/* Load lib (once per process) and look up every function the backend uses.
 * The shared object is looked for by its soname (libcublasLt.so.13,
 * libcudnn.so.9, libnccl.so.2: LD_LIBRARY_PATH, the program's run path, the
 * system's cache), then in the folder configure found it in. Rank 0 prints
 * "gridtrain: cuda library: SONAME VERSION PATH" once it is loaded.
 * GT_ERR_INPUT (exit status 2) with one line naming the library and the fix
 * when it is missing, of another major version or too old, or lacks a
 * function; later calls return the same error. Not collective. */
int gt_cuda_dl_load(gt_dl_lib lib);

/* "libcudnn.so.9 9.19.0 /usr/local/cuda/lib64/libcudnn.so.9" of a loaded
 * library, else why it is not loaded ("not loaded", or the load's error).
 * The string belongs to this module. */
const char *gt_cuda_dl_describe(gt_dl_lib lib);

// ---- the function tables ---------------------------------------------------------------
/* GT_DL_FIELD(f): a pointer of f's own type, named fp_f. The macros that
 * follow each table make f(...) call through it. */
#define GT_DL_FIELD(f) __typeof__(f) *fp_##f;

#if defined(GT_DL_WANT_CUBLASLT) && !defined(GT_DL_CUBLASLT_DECLARED)
#define GT_DL_CUBLASLT_DECLARED
/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#define GT_DL_CUBLASLT_FUNCS(X)                                                               \
  X(cublasLtGetVersion) X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName)          \
  X(cublasLtGetStatusString) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)               \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)   \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                         \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)                        \
  X(cublasLtMatrixLayoutDestroy)
typedef struct {
  GT_DL_CUBLASLT_FUNCS(GT_DL_FIELD)
} gt_dl_cublaslt_table;
extern gt_dl_cublaslt_table gt_dl_cublaslt;
#define cublasLtGetVersion (*gt_dl_cublaslt.fp_cublasLtGetVersion)
#define cublasLtCreate (*gt_dl_cublaslt.fp_cublasLtCreate)
#define cublasLtDestroy (*gt_dl_cublaslt.fp_cublasLtDestroy)
#define cublasLtGetStatusName (*gt_dl_cublaslt.fp_cublasLtGetStatusName)
#define cublasLtGetStatusString (*gt_dl_cublaslt.fp_cublasLtGetStatusString)
#define cublasLtMatmul (*gt_dl_cublaslt.fp_cublasLtMatmul)
#define cublasLtMatmulAlgoGetHeuristic (*gt_dl_cublaslt.fp_cublasLtMatmulAlgoGetHeuristic)
#define cublasLtMatmulDescCreate (*gt_dl_cublaslt.fp_cublasLtMatmulDescCreate)
#define cublasLtMatmulDescDestroy (*gt_dl_cublaslt.fp_cublasLtMatmulDescDestroy)
#define cublasLtMatmulDescSetAttribute (*gt_dl_cublaslt.fp_cublasLtMatmulDescSetAttribute)
#define cublasLtMatmulPreferenceCreate (*gt_dl_cublaslt.fp_cublasLtMatmulPreferenceCreate)
#define cublasLtMatmulPreferenceDestroy (*gt_dl_cublaslt.fp_cublasLtMatmulPreferenceDestroy)
#define cublasLtMatmulPreferenceSetAttribute                                                   \
  (*gt_dl_cublaslt.fp_cublasLtMatmulPreferenceSetAttribute)
#define cublasLtMatrixLayoutCreate (*gt_dl_cublaslt.fp_cublasLtMatrixLayoutCreate)
#define cublasLtMatrixLayoutDestroy (*gt_dl_cublaslt.fp_cublasLtMatrixLayoutDestroy)
#endif

#if defined(GT_DL_WANT_CUDNN) && !defined(GT_DL_CUDNN_DECLARED)
#define GT_DL_CUDNN_DECLARED
#include <cudnn.h>
#define GT_DL_CUDNN_FUNCS(X)                                                                  \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate)          \
  X(cudnnDestroy) X(cudnnSetStream) X(cudnnBackendCreateDescriptor)                            \
  X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute)     \
  X(cudnnBackendFinalize) X(cudnnBackendExecute)
typedef struct {
  GT_DL_CUDNN_FUNCS(GT_DL_FIELD)
} gt_dl_cudnn_table;
extern gt_dl_cudnn_table gt_dl_cudnn;
#define cudnnGetVersion (*gt_dl_cudnn.fp_cudnnGetVersion)
#define cudnnGetErrorString (*gt_dl_cudnn.fp_cudnnGetErrorString)
#define cudnnGetLastErrorString (*gt_dl_cudnn.fp_cudnnGetLastErrorString)
#define cudnnCreate (*gt_dl_cudnn.fp_cudnnCreate)
#define cudnnDestroy (*gt_dl_cudnn.fp_cudnnDestroy)
#define cudnnSetStream (*gt_dl_cudnn.fp_cudnnSetStream)
#define cudnnBackendCreateDescriptor (*gt_dl_cudnn.fp_cudnnBackendCreateDescriptor)
#define cudnnBackendDestroyDescriptor (*gt_dl_cudnn.fp_cudnnBackendDestroyDescriptor)
#define cudnnBackendSetAttribute (*gt_dl_cudnn.fp_cudnnBackendSetAttribute)
#define cudnnBackendGetAttribute (*gt_dl_cudnn.fp_cudnnBackendGetAttribute)
#define cudnnBackendFinalize (*gt_dl_cudnn.fp_cudnnBackendFinalize)
#define cudnnBackendExecute (*gt_dl_cudnn.fp_cudnnBackendExecute)
#endif

#if defined(GT_DL_WANT_NCCL) && !defined(GT_DL_NCCL_DECLARED)
#define GT_DL_NCCL_DECLARED
#include <nccl.h>
#define GT_DL_NCCL_FUNCS(X)                                                                   \
  X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId)               \
  X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommGetAsyncError) X(ncclAllReduce)             \
  X(ncclAllGather) X(ncclReduce) X(ncclReduceScatter)
typedef struct {
  GT_DL_NCCL_FUNCS(GT_DL_FIELD)
} gt_dl_nccl_table;
extern gt_dl_nccl_table gt_dl_nccl;
#define ncclGetVersion (*gt_dl_nccl.fp_ncclGetVersion)
#define ncclGetErrorString (*gt_dl_nccl.fp_ncclGetErrorString)
#define ncclGetLastError (*gt_dl_nccl.fp_ncclGetLastError)
#define ncclGetUniqueId (*gt_dl_nccl.fp_ncclGetUniqueId)
#define ncclCommInitRank (*gt_dl_nccl.fp_ncclCommInitRank)
#define ncclCommDestroy (*gt_dl_nccl.fp_ncclCommDestroy)
#define ncclCommGetAsyncError (*gt_dl_nccl.fp_ncclCommGetAsyncError)
#define ncclAllReduce (*gt_dl_nccl.fp_ncclAllReduce)
#define ncclAllGather (*gt_dl_nccl.fp_ncclAllGather)
#define ncclReduce (*gt_dl_nccl.fp_ncclReduce)
#define ncclReduceScatter (*gt_dl_nccl.fp_ncclReduceScatter)
#endif

#endif /* GT_CUDA_DL_H */
