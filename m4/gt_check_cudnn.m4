# GT_CHECK_CUDNN: cuDNN, looked for beside CUDA unless --with-cudnn=DIR.
# Needs CUDA; asking for cuDNN explicitly and not finding it is an error.
AC_DEFUN([GT_CHECK_CUDNN], [
  AC_ARG_WITH([cudnn],
    [AS_HELP_STRING([--with-cudnn@<:@=DIR@:>@], [cuDNN (default: with CUDA when present)])],
    [], [with_cudnn=check])
  gt_have_cudnn=no
  CUDNN_CPPFLAGS=
  CUDNN_LIBS=
  AS_CASE([$with_cudnn],
    [no], [gt_cudnn_dirs=],
    [yes|check], [gt_cudnn_dirs="$gt_cuda_dir /usr/local /usr"],
    [gt_cudnn_dirs=$with_cudnn])
  AS_IF([test "x$gt_have_cuda" = xyes], [
    for gt_dir in $gt_cudnn_dirs; do
      AS_IF([test -f "$gt_dir/include/cudnn.h"], [
        gt_save_CPPFLAGS=$CPPFLAGS
        gt_save_LIBS=$LIBS
        CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS -I$gt_dir/include"
        LIBS="-L$gt_dir/lib64 -L$gt_dir/lib $CUDA_LIBS -lcudnn $LIBS"
        AC_MSG_CHECKING([for cuDNN in $gt_dir])
        AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cudnn.h>]], [[return (int)cudnnGetVersion();]])],
          [gt_have_cudnn=yes], [])
        AC_MSG_RESULT([$gt_have_cudnn])
        CPPFLAGS=$gt_save_CPPFLAGS
        LIBS=$gt_save_LIBS
        AS_IF([test "x$gt_have_cudnn" = xyes], [
          AS_IF([test "x$gt_dir" = x/usr], [CUDNN_CPPFLAGS=], [CUDNN_CPPFLAGS="-isystem $gt_dir/include"])
          gt_cudnn_libdir=$gt_dir/lib64
          AS_IF([test -d "$gt_cudnn_libdir"], [], [gt_cudnn_libdir=$gt_dir/lib])
          # loaded at run time (src/backend/cuda/cuda_dl.c): nothing to link
          CUDNN_LIBS=
          AC_DEFINE_UNQUOTED([GT_CUDNN_LIBDIR], ["$gt_cudnn_libdir"],
            [Where configure found cuDNN (looked in when dlopen finds no libcudnn.so by its name)])
          gt_cudnn_version=`sed -n 's/^#define CUDNN_MAJOR *\(@<:@0-9@:>@*\).*/\1/p; s/^#define CUDNN_MINOR *\(@<:@0-9@:>@*\).*/.\1/p' "$gt_dir/include/cudnn_version.h" 2>/dev/null | tr -d '\n'`
          AC_DEFINE([GT_HAVE_CUDNN], [1], [Define to 1 when cuDNN is used])
          break
        ])
      ])
    done
  ])
  AS_IF([test "x$gt_have_cudnn" = xno], [
    AS_CASE([$with_cudnn],
      [no|check], [],
      [AC_MSG_ERROR([--with-cudnn=$with_cudnn was requested but cuDNN was not found (it also needs CUDA)])])
  ])
  AC_SUBST([CUDNN_CPPFLAGS])
  AC_SUBST([CUDNN_LIBS])
  AM_CONDITIONAL([GT_CUDNN], [test "x$gt_have_cudnn" = xyes])
])
