# GT_CHECK_INIH: the inih INI parser (Debian libinih-dev).
AC_DEFUN([GT_CHECK_INIH], [
  PKG_CHECK_MODULES([INIH], [inih], [],
    [AC_MSG_ERROR([inih not found; install libinih-dev (or set INIH_CFLAGS and INIH_LIBS)])])
  gt_inih_version=`$PKG_CONFIG --modversion inih`
])
