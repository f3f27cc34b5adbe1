/*
 * ref_h5.h - the HDF5 exchange of the reference tests (tests/ref): a C test
 * writes its inputs, a Python reference writes float64 results, the test
 * reads them back.
 */
#ifndef GT_TESTS_REF_H5_H
#define GT_TESTS_REF_H5_H

#include <hdf5.h>
#include <math.h>
#include <stdlib.h>

static inline int write_dataset(hid_t loc, const char *name, hid_t type, int ndim, const long *shp,
                         const void *data)
{
  hsize_t dims[4];
  for (int i = 0; i < ndim; i++)
    dims[i] = (hsize_t)shp[i];
  hid_t s = H5Screate_simple(ndim, dims, NULL);
  hid_t d = H5Dcreate2(loc, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = d < 0 ? -1 : H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (d >= 0)
    H5Dclose(d);
  H5Sclose(s);
  return rc < 0 ? -1 : 0;
}

/* Read a float64 dataset into a float array of n elements; -1 on failure. */
static inline int read_f64(hid_t f, const char *path, float *out, size_t n)
{
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  if (d < 0)
    return -1;
  hid_t s = H5Dget_space(d);
  hssize_t count = H5Sget_simple_extent_npoints(s);
  double *buf = malloc(sizeof(double) * n);
  int rc = -1;
  if (count == (hssize_t)n && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0) {
    for (size_t i = 0; i < n; i++)
      out[i] = (float)buf[i];
    rc = 0;
  }
  free(buf);
  H5Sclose(s);
  H5Dclose(d);
  return rc;
}

static inline double read_scalar(hid_t f, const char *path)
{
  double v = NAN;
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  if (d >= 0) {
    if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
      v = NAN;
    H5Dclose(d);
  }
  return v;
}

#endif /* GT_TESTS_REF_H5_H */
