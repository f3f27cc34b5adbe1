# GT_PROG_MPICC: use MPICH's compiler wrapper as CC unless the user set CC.
# GT_CHECK_MPI: check that MPI links, that it is MPICH, and find mpiexec.
AC_DEFUN([GT_PROG_MPICC], [
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc.mpich, mpicc)])
  AS_IF([test -z "$CC"], [
    AC_CHECK_PROGS([MPICC], [mpicc.mpich mpicc], [none])
    AS_IF([test "x$MPICC" = xnone],
      [AC_MSG_ERROR([no MPI compiler wrapper found; install MPICH (apt-get install mpich libmpich-dev) or set CC=mpicc])])
    CC="$MPICC"
  ])
])

AC_DEFUN([GT_CHECK_MPI], [
  AC_MSG_CHECKING([whether $CC compiles and links MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                                  [[MPI_Init(0, 0); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC cannot build MPI programs; install MPICH (apt-get install mpich libmpich-dev) or set CC to an MPI wrapper])])
  AC_MSG_CHECKING([for the MPI library])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                    [[#ifndef MPICH_VERSION
                      #error not MPICH
                      #endif]])],
    [gt_mpi_impl="MPICH"], [gt_mpi_impl="other (not MPICH: untested)"])
  AC_MSG_RESULT([$gt_mpi_impl])
  AC_ARG_VAR([MPIEXEC], [MPI launcher used by the tests (default: mpiexec.mpich, mpiexec)])
  AC_PATH_PROGS([MPIEXEC], [mpiexec.mpich mpiexec mpirun], [none])
  AS_IF([test "x$MPIEXEC" = xnone],
    [AC_MSG_WARN([no mpiexec found: make check will fail])])
])
