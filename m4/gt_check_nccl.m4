# GT_CHECK_NCCL: NCCL, looked for beside CUDA unless --with-nccl=DIR.
# Needs CUDA; asking for NCCL explicitly and not finding it is an error.
AC_DEFUN([GT_CHECK_NCCL], [
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@], [NCCL for [parallel] collectives = nccl (default: with CUDA when present)])],
    [], [with_nccl=check])
  gt_have_nccl=no
  NCCL_CPPFLAGS=
  NCCL_LIBS=
  AS_CASE([$with_nccl],
    [no], [gt_nccl_dirs=],
    [yes|check], [gt_nccl_dirs="$gt_cuda_dir /usr/local /usr"],
    [gt_nccl_dirs=$with_nccl])
  AS_IF([test "x$gt_have_cuda" = xyes], [
    for gt_dir in $gt_nccl_dirs; do
      AS_IF([test -f "$gt_dir/include/nccl.h"], [
        gt_save_CPPFLAGS=$CPPFLAGS
        gt_save_LIBS=$LIBS
        gt_nccl_libdir=$gt_dir/lib64
        AS_IF([test -d "$gt_nccl_libdir"], [], [gt_nccl_libdir=$gt_dir/lib])
        CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS -I$gt_dir/include"
        LIBS="-L$gt_nccl_libdir $CUDA_LIBS -lnccl $LIBS"
        AC_MSG_CHECKING([for NCCL in $gt_dir])
        AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <nccl.h>]],
                                        [[ncclUniqueId id; return (int)ncclGetUniqueId(&id);]])],
          [gt_have_nccl=yes], [])
        AC_MSG_RESULT([$gt_have_nccl])
        CPPFLAGS=$gt_save_CPPFLAGS
        LIBS=$gt_save_LIBS
        AS_IF([test "x$gt_have_nccl" = xyes], [
          AS_IF([test "x$gt_dir" = x/usr], [], [NCCL_CPPFLAGS="-isystem $gt_dir/include"])
          # loaded at run time (src/backend/cuda/cuda_dl.c): nothing to link
          NCCL_LIBS=
          AC_DEFINE_UNQUOTED([GT_NCCL_LIBDIR], ["$gt_nccl_libdir"],
            [Where configure found NCCL (looked in when dlopen finds no libnccl.so by its name)])
          gt_nccl_version=`sed -n 's/^#define NCCL_MAJOR *\(@<:@0-9@:>@*\).*/\1/p; s/^#define NCCL_MINOR *\(@<:@0-9@:>@*\).*/.\1/p' "$gt_dir/include/nccl.h" 2>/dev/null | tr -d '\n'`
          AC_DEFINE([GT_HAVE_NCCL], [1], [Define to 1 when NCCL is used])
          break
        ])
      ])
    done
  ])
  AS_IF([test "x$gt_have_nccl" = xno], [
    AS_CASE([$with_nccl],
      [no|check], [],
      [AC_MSG_ERROR([--with-nccl=$with_nccl was requested but NCCL was not found (it also needs CUDA)])])
  ])
  AC_SUBST([NCCL_CPPFLAGS])
  AC_SUBST([NCCL_LIBS])
  AM_CONDITIONAL([GT_NCCL], [test "x$gt_have_nccl" = xyes])
])
