# GT_CHECK_PYTHON_REF: the interpreter that runs the PyTorch reference in the
# tests (Debian's /usr/bin/python3 sees python3-torch and python3-h5py).
# Missing modules are reported, not fatal for the build: the reference test
# then fails and says what to install.
AC_DEFUN([GT_CHECK_PYTHON_REF], [
  AC_ARG_VAR([PYTHON_REF], [Python with torch, h5py and numpy for the reference tests (default: /usr/bin/python3)])
  AS_IF([test -z "$PYTHON_REF"], [PYTHON_REF=/usr/bin/python3])
  AC_MSG_CHECKING([whether $PYTHON_REF has torch, h5py and numpy])
  AS_IF([$PYTHON_REF -c 'import torch, h5py, numpy' >/dev/null 2>&1],
    [gt_python_ref="yes ($PYTHON_REF, torch `$PYTHON_REF -c 'import torch; print(torch.__version__)'`)"],
    [gt_python_ref="no (apt-get install python3-torch python3-h5py python3-numpy)"])
  AC_MSG_RESULT([$gt_python_ref])
])
