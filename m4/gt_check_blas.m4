# GT_CHECK_BLAS: OpenBLAS with the CBLAS interface.
#
# --with-blas=auto (default) prefers Debian's OpenMP build of OpenBLAS
# (libopenblas0-openmp, libopenblas-openmp-dev): it shares gridtrain's OpenMP
# thread pool and runs single-threaded inside our parallel regions. Otherwise
# the default `openblas` pkg-config module. --with-blas=openmp insists on the
# OpenMP build, --with-blas=openblas takes the default module; anything else
# is taken as a pkg-config module name.
AC_DEFUN([GT_CHECK_BLAS], [
  AC_ARG_WITH([blas],
    [AS_HELP_STRING([--with-blas=auto|openmp|openblas|MODULE],
                    [BLAS to use (default: auto, which prefers the OpenMP build of OpenBLAS)])],
    [], [with_blas=auto])
  gt_multiarch=`$CC -print-multiarch 2>/dev/null`
  gt_openmp_pc_dir="/usr/lib/$gt_multiarch/openblas-openmp/pkgconfig"
  gt_blas_module=openblas
  gt_blas_pc_path=
  AS_CASE([$with_blas],
    [auto], [AS_IF([test -n "$gt_multiarch" && test -f "$gt_openmp_pc_dir/openblas.pc"],
                   [gt_blas_pc_path=$gt_openmp_pc_dir])],
    [openmp], [AS_IF([test -n "$gt_multiarch" && test -f "$gt_openmp_pc_dir/openblas.pc"],
                     [gt_blas_pc_path=$gt_openmp_pc_dir],
                     [AC_MSG_ERROR([--with-blas=openmp: the OpenMP build of OpenBLAS was not found in $gt_openmp_pc_dir; install libopenblas-openmp-dev])])],
    [openblas|yes], [],
    [no], [AC_MSG_ERROR([gridtrain needs a BLAS; --without-blas is not possible])],
    [gt_blas_module=$with_blas])
  AS_IF([test -n "$gt_blas_pc_path"], [
    gt_save_PKG_CONFIG_PATH=$PKG_CONFIG_PATH
    PKG_CONFIG_PATH="$gt_blas_pc_path${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export PKG_CONFIG_PATH
  ])
  PKG_CHECK_MODULES([BLAS], [$gt_blas_module], [],
    [AC_MSG_ERROR([BLAS module $gt_blas_module not found; install libopenblas-dev (or set BLAS_CFLAGS and BLAS_LIBS)])])
  gt_blas_libdir=`$PKG_CONFIG --variable=libdir $gt_blas_module 2>/dev/null`
  AS_IF([test -n "$gt_blas_pc_path"], [
    PKG_CONFIG_PATH=$gt_save_PKG_CONFIG_PATH
    export PKG_CONFIG_PATH
  ])
  # The variant directories are not on the loader path: record them.
  AS_IF([test -n "$gt_blas_libdir"], [BLAS_LIBS="$BLAS_LIBS -Wl,-rpath,$gt_blas_libdir"])
  gt_save_CPPFLAGS=$CPPFLAGS
  gt_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $BLAS_CFLAGS"
  LIBS="$BLAS_LIBS $LIBS"
  AC_MSG_CHECKING([whether cblas_sgemm links])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[float a = 1, b = 1, c = 0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([cannot link cblas_sgemm with $BLAS_LIBS])])
  AC_CHECK_FUNCS([openblas_set_num_threads openblas_get_parallel openblas_get_config openblas_get_corename])
  CPPFLAGS=$gt_save_CPPFLAGS
  LIBS=$gt_save_LIBS
  gt_blas_summary="$gt_blas_module${gt_blas_pc_path:+ (OpenMP build)} in ${gt_blas_libdir:-default path}"
])
