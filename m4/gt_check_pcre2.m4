# GT_CHECK_PCRE2: PCRE2, 8-bit code units (Debian's libpcre2-dev), through
# pkg-config: the regular expressions of byte-level BPE pre-tokenizers
# (src/io/tokenizer_bpe.c; UTF and UCP modes for \p{L}, \p{N}). Required.
# Sets PCRE2_CFLAGS, PCRE2_LIBS, gt_pcre2_version and gt_pcre2_jit (whether
# the library has its just-in-time compiler; without it the interpreter
# matches, slower).
AC_DEFUN([GT_CHECK_PCRE2], [
  PKG_CHECK_MODULES([PCRE2], [libpcre2-8 >= 10.30], [],
    [AC_MSG_ERROR([PCRE2 10.30 or newer (8-bit) not found; install libpcre2-dev (or set PCRE2_CFLAGS and PCRE2_LIBS)])])
  gt_save_CPPFLAGS=$CPPFLAGS
  gt_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $PCRE2_CFLAGS"
  LIBS="$PCRE2_LIBS $LIBS"
  AC_MSG_CHECKING([whether PCRE2 links with Unicode support])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>]],
      [[uint32_t unicode = 0;
        pcre2_config(PCRE2_CONFIG_UNICODE, &unicode);
        int err; PCRE2_SIZE at;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)"\\p{L}+", PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
        pcre2_code_free(re);
        return !unicode;]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([PCRE2 was found by pkg-config but a program cannot link with it ($PCRE2_LIBS)])])
  AC_MSG_CHECKING([whether PCRE2 has its JIT compiler])
  AC_RUN_IFELSE([AC_LANG_PROGRAM([[#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>]],
      [[uint32_t jit = 0;
        pcre2_config(PCRE2_CONFIG_JIT, &jit);
        return !jit;]])],
    [gt_pcre2_jit=yes], [gt_pcre2_jit=no], [gt_pcre2_jit="unknown (cross-compiling)"])
  AC_MSG_RESULT([$gt_pcre2_jit])
  CPPFLAGS=$gt_save_CPPFLAGS
  LIBS=$gt_save_LIBS
  gt_pcre2_version=`$PKG_CONFIG --modversion libpcre2-8`
  AC_DEFINE_UNQUOTED([GT_BUILD_PCRE2], ["$gt_pcre2_version"], [PCRE2 version found by configure])
])
