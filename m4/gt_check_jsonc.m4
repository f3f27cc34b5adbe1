# GT_CHECK_JSONC: json-c (Debian's libjson-c-dev) through pkg-config, the
# JSON reader and writer of gridtrain (Hugging Face tokenizer.json today;
# config.json and safetensors headers are to follow). Required. Sets
# JSONC_CFLAGS, JSONC_LIBS and gt_jsonc_version; the headers are included as
# <json.h> (pkg-config's -I points into json-c/).
AC_DEFUN([GT_CHECK_JSONC], [
  PKG_CHECK_MODULES([JSONC], [json-c >= 0.15], [],
    [AC_MSG_ERROR([json-c 0.15 or newer not found; install libjson-c-dev (or set JSONC_CFLAGS and JSONC_LIBS)])])
  gt_save_CPPFLAGS=$CPPFLAGS
  gt_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $JSONC_CFLAGS"
  LIBS="$JSONC_LIBS $LIBS"
  AC_MSG_CHECKING([whether json-c links (json_tokener_parse_ex)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <json.h>]],
      [[json_tokener *t = json_tokener_new();
        json_object *o = json_tokener_parse_ex(t, "{}", 2);
        json_object_put(o);
        json_tokener_free(t);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([json-c was found by pkg-config but a program cannot link with it ($JSONC_LIBS)])])
  CPPFLAGS=$gt_save_CPPFLAGS
  LIBS=$gt_save_LIBS
  gt_jsonc_version=`$PKG_CONFIG --modversion json-c`
  AC_DEFINE_UNQUOTED([GT_BUILD_JSONC], ["$gt_jsonc_version"], [json-c version found by configure])
])
