# GT_CHECK_HDF5: parallel HDF5 (Debian libhdf5-mpich-dev) through pkg-config.
AC_DEFUN([GT_CHECK_HDF5], [
  PKG_CHECK_MODULES([HDF5], [hdf5-mpich], [gt_hdf5_pc=hdf5-mpich],
    [PKG_CHECK_MODULES([HDF5], [hdf5-mpi], [gt_hdf5_pc=hdf5-mpi],
      [AC_MSG_ERROR([parallel HDF5 not found; install libhdf5-mpich-dev (or set HDF5_CFLAGS and HDF5_LIBS)])])])
  gt_save_CPPFLAGS=$CPPFLAGS
  gt_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $HDF5_CFLAGS"
  LIBS="$HDF5_LIBS $LIBS"
  AC_MSG_CHECKING([whether HDF5 is built with MPI-IO])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <hdf5.h>
                                   #ifndef H5_HAVE_PARALLEL
                                   #error serial HDF5
                                   #endif]],
                                  [[hid_t p = H5Pcreate(H5P_FILE_ACCESS);
                                    H5Pset_fapl_mpio(p, MPI_COMM_WORLD, MPI_INFO_NULL);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([HDF5 found through $gt_hdf5_pc is not parallel; install libhdf5-mpich-dev])])
  gt_hdf5_version=`$PKG_CONFIG --modversion $gt_hdf5_pc`
  CPPFLAGS=$gt_save_CPPFLAGS
  LIBS=$gt_save_LIBS
])
