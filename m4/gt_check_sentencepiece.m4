# GT_CHECK_SENTENCEPIECE: SentencePiece (Debian's libsentencepiece-dev, a C++
# library), for the tokenizers `gridtrain ingest text --tokenizer` loads and
# trains (src/io/tokenizer_spm.cc, a small extern "C" shim built with $CXX).
# Optional: used when found; --with-sentencepiece insists,
# --without-sentencepiece leaves it out (only the byte tokenizer then).
# Sets SPM_CFLAGS and SPM_LIBS (with the C++ runtime, since the programs are
# linked by the C compiler), GT_HAVE_SENTENCEPIECE and the automake
# conditional GT_SENTENCEPIECE. Needs AC_PROG_CXX before it.
AC_DEFUN([GT_CHECK_SENTENCEPIECE], [
  AC_ARG_WITH([sentencepiece],
    [AS_HELP_STRING([--with-sentencepiece],
      [SentencePiece tokenizers (BPE, unigram) for ingest (default: when found)])],
    [], [with_sentencepiece=check])
  gt_have_spm=no
  gt_spm_version=
  AS_IF([test "x$with_sentencepiece" != xno], [
    PKG_CHECK_MODULES([SPM], [sentencepiece],
      [gt_spm_version=`$PKG_CONFIG --modversion sentencepiece`],
      [SPM_CFLAGS=; SPM_LIBS="-lsentencepiece -lsentencepiece_train"])
    AC_LANG_PUSH([C++])
    gt_save_CPPFLAGS=$CPPFLAGS
    gt_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $SPM_CFLAGS"
    LIBS="$SPM_LIBS $LIBS"
    AC_MSG_CHECKING([for SentencePiece (sentencepiece_trainer.h, $SPM_LIBS) with $CXX])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>]],
        [[sentencepiece::SentencePieceProcessor sp;
          std::string model;
          (void)sentencepiece::SentencePieceTrainer::Train("", nullptr, &model);
          return sp.LoadFromSerializedProto(model).ok();]])],
      [gt_have_spm=yes], [])
    AC_MSG_RESULT([$gt_have_spm])
    CPPFLAGS=$gt_save_CPPFLAGS
    LIBS=$gt_save_LIBS
    AC_LANG_POP([C++])
  ])
  AS_IF([test "x$gt_have_spm" = xyes], [
    SPM_LIBS="$SPM_LIBS -lstdc++"
    AC_DEFINE([GT_HAVE_SENTENCEPIECE], [1],
      [Define to 1 when SentencePiece tokenizers are built in])
    AC_DEFINE_UNQUOTED([GT_BUILD_SPM], ["${gt_spm_version:-found}"],
      [SentencePiece version found by configure])
  ], [
    SPM_CFLAGS=
    SPM_LIBS=
    AS_IF([test "x$with_sentencepiece" = xyes],
      [AC_MSG_ERROR([--with-sentencepiece was requested but SentencePiece was not found (or $CXX cannot build with it); install libsentencepiece-dev and g++])])
  ])
  AC_SUBST([SPM_CFLAGS])
  AC_SUBST([SPM_LIBS])
  AM_CONDITIONAL([GT_SENTENCEPIECE], [test "x$gt_have_spm" = xyes])
])
