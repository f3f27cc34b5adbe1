# GT_CHECK_DNNL: oneDNN (Debian's libdnnl-dev), for the CPU backend's bf16
# matrix products. Optional: used when found; --with-dnnl insists,
# --without-dnnl leaves it out (bf16 products then convert and use sgemm).
AC_DEFUN([GT_CHECK_DNNL], [
  AC_ARG_WITH([dnnl],
    [AS_HELP_STRING([--with-dnnl], [oneDNN for bf16 matrix products on the CPU (default: when found)])],
    [], [with_dnnl=check])
  gt_have_dnnl=no
  gt_dnnl_version=
  DNNL_LIBS=
  AS_IF([test "x$with_dnnl" != xno], [
    gt_save_LIBS=$LIBS
    LIBS="-ldnnl $LIBS"
    AC_MSG_CHECKING([for oneDNN (oneapi/dnnl/dnnl.h, -ldnnl)])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <oneapi/dnnl/dnnl.h>]],
        [[dnnl_engine_t e; return dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success;]])],
      [gt_have_dnnl=yes], [])
    AC_MSG_RESULT([$gt_have_dnnl])
    LIBS=$gt_save_LIBS
  ])
  AS_IF([test "x$gt_have_dnnl" = xyes], [
    DNNL_LIBS=-ldnnl
    AC_COMPUTE_INT([gt_dnnl_major], [DNNL_VERSION_MAJOR], [[#include <oneapi/dnnl/dnnl_version.h>]])
    AC_COMPUTE_INT([gt_dnnl_minor], [DNNL_VERSION_MINOR], [[#include <oneapi/dnnl/dnnl_version.h>]])
    gt_dnnl_version="$gt_dnnl_major.$gt_dnnl_minor"
    AC_DEFINE([GT_HAVE_DNNL], [1], [Define to 1 when oneDNN is used for bf16 products])
  ], [
    AS_IF([test "x$with_dnnl" = xyes],
      [AC_MSG_ERROR([--with-dnnl was requested but oneDNN was not found; install libdnnl-dev])])
  ])
  AC_SUBST([DNNL_LIBS])
])
