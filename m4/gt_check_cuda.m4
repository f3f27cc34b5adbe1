# GT_CHECK_CUDA: the CUDA toolkit (nvcc, cudart, cuBLASLt).
# --with-cuda=DIR looks in DIR, --with-cuda looks in /usr/local/cuda,
# --without-cuda turns it off; without the option, CUDA is used when found.
# Asking for CUDA explicitly and not finding it is an error.
AC_DEFUN([GT_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [CUDA toolkit (default: /usr/local/cuda when present)])],
    [], [with_cuda=check])
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [flags for nvcc (default: -O3, code for sm_80 and sm_90, compute_90 PTX for later GPUs)])
  gt_have_cuda=no
  gt_cuda_dir=
  AS_CASE([$with_cuda],
    [no], [],
    [yes|check], [gt_cuda_dir=/usr/local/cuda],
    [gt_cuda_dir=$with_cuda])
  CUDA_CPPFLAGS=
  CUDA_LIBS=
  # An explicit directory must hold the toolkit itself (not just something
  # the default search paths happen to find).
  AS_CASE([$with_cuda],
    [no|yes|check], [gt_cuda_nvcc_path="$gt_cuda_dir/bin$PATH_SEPARATOR$PATH"],
    [gt_cuda_nvcc_path="$gt_cuda_dir/bin"
     AS_IF([test -f "$gt_cuda_dir/include/cuda_runtime_api.h"], [],
       [AC_MSG_ERROR([--with-cuda=$with_cuda: $gt_cuda_dir/include/cuda_runtime_api.h not found; give the CUDA toolkit directory (for example /usr/local/cuda)])])])
  AS_IF([test -n "$gt_cuda_dir"], [
    AC_PATH_PROG([NVCC], [nvcc], [none], [$gt_cuda_nvcc_path])
    gt_cuda_libdir=$gt_cuda_dir/lib64
    gt_save_CPPFLAGS=$CPPFLAGS
    gt_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS -I$gt_cuda_dir/include"
    LIBS="-L$gt_cuda_libdir -Wl,-rpath,$gt_cuda_libdir -lcublasLt -lcublas -lcudart $LIBS"
    AC_MSG_CHECKING([for CUDA runtime, cuBLAS and cuBLASLt in $gt_cuda_dir])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime_api.h>
                                     #include <cublas_v2.h>
                                     #include <cublasLt.h>]],
                                    [[int n; cublasHandle_t h; cublasLtHandle_t l;
                                      cudaGetDeviceCount(&n); cublasCreate(&h); cublasLtCreate(&l);]])],
      [AS_IF([test "x$NVCC" != xnone], [gt_have_cuda=yes])])
    AC_MSG_RESULT([$gt_have_cuda])
    CPPFLAGS=$gt_save_CPPFLAGS
    LIBS=$gt_save_LIBS
  ])
  AS_IF([test "x$gt_have_cuda" = xyes], [
    CUDA_CPPFLAGS="-isystem $gt_cuda_dir/include"
    # The CUDA runtime is linked statically (it loads the driver at the first
    # CUDA call); cuBLASLt, cuDNN and NCCL are loaded at run time
    # (src/backend/cuda/cuda_dl.c), so a CPU run maps none of them. -lstdc++:
    # the C++ runtime that nvcc-compiled objects (launch stubs, CUB) need in a
    # C link.
    CUDA_LIBS="-L$gt_cuda_libdir -lcudart_static -ldl -lrt -lpthread -lstdc++"
    AC_DEFINE_UNQUOTED([GT_CUDA_LIBDIR], ["$gt_cuda_libdir"],
      [Where configure found cuBLASLt (looked in when dlopen finds no libcublasLt.so by its name)])
    AS_IF([test -z "$NVCCFLAGS"],
      [NVCCFLAGS="-O3 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"])
    gt_cuda_version=`$NVCC --version 2>/dev/null | sed -n 's/.*release \([[0-9.]]*\).*/\1/p'`
    AC_DEFINE([GT_HAVE_CUDA], [1], [Define to 1 when the CUDA toolkit is used])
  ], [
    AS_CASE([$with_cuda],
      [no|check], [],
      [AC_MSG_ERROR([--with-cuda=$with_cuda was requested but nvcc, cudart, cuBLAS or cuBLASLt was not found in $gt_cuda_dir])])
  ])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LIBS])
  AM_CONDITIONAL([GT_CUDA], [test "x$gt_have_cuda" = xyes])
])
