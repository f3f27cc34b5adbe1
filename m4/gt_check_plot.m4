# GT_CHECK_PLOT: the Python that `gridtrain plot` runs its script with
# (PYTHON, default Debian's /usr/bin/python3, which sees python3-matplotlib),
# and help2man for the man page. Neither is needed to build: without
# matplotlib `gridtrain plot` says what to install; without help2man the
# man page holds the --help texts as they are (man/make-man.sh).
AC_DEFUN([GT_CHECK_PLOT], [
  AC_ARG_VAR([PYTHON], [Python 3 with matplotlib and numpy for gridtrain plot (default: /usr/bin/python3)])
  AS_IF([test -z "$PYTHON"], [PYTHON=/usr/bin/python3])
  AC_MSG_CHECKING([whether $PYTHON has matplotlib and numpy])
  AS_IF([$PYTHON -c 'import matplotlib, numpy' >/dev/null 2>&1],
    [gt_plot_python="yes ($PYTHON, matplotlib `$PYTHON -c 'import matplotlib; print(matplotlib.__version__)'`)"],
    [gt_plot_python="no: gridtrain plot will not work (apt-get install python3-matplotlib)"])
  AC_MSG_RESULT([$gt_plot_python])
  AC_CHECK_PROGS([HELP2MAN], [help2man], [:])
  AS_IF([test "x$HELP2MAN" = "x:"],
    [gt_man_summary="the --help texts as they are (no help2man: apt-get install help2man)"],
    [gt_man_summary="help2man"])
])
