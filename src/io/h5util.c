/*
 * h5util.c - HDF5 helpers for the io module: quiet errors, closing objects
 * of any kind on every path, MPI-IO file access, typed attributes.
 */
#include "h5util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/flight.h"

/* Chunk cache of each dataset in files opened with MPI-IO (HDF5's default
 * is 1 MiB): 8 MiB holds 128 chunks of 64 Ki tokens, so random sequence
 * reads of a corpus up to that size (the KJV is 4.4 MB) decompress and
 * checksum each chunk once. Slots: a prime, ~100 per chunk held, as HDF5
 * advises against hash collisions. */
#define GT_H5_CACHE_BYTES ((size_t)8 << 20)
#define GT_H5_CACHE_SLOTS 12799
/* Objects of at least this many bytes start on GT_H5_ALIGN boundaries in new
 * files: raw data then fills whole pages (at most 4 KiB lost per large
 * dataset). */
#define GT_H5_ALIGN_THRESHOLD ((hsize_t)64 << 10)
#define GT_H5_ALIGN ((hsize_t)4 << 10)

// ---- the flight records of collective file operations --------------------------

/* Files open with the MPI-IO driver: their close is collective too, and is
 * recorded on the channel of their open (flight.h). Main thread only. */
#define GT_H5_OPEN_FILES 32
static struct {
  hid_t file;
  int channel;
  char what[40];
} gt_h5_files[GT_H5_OPEN_FILES];
static int gt_h5_nfiles;

const char *gt_h5_base(const char *path)
{
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static void gt_h5_note_open(hid_t file, int channel, const char *what)
{
  if (channel < 0 || gt_h5_nfiles == GT_H5_OPEN_FILES)
    return;
  gt_h5_files[gt_h5_nfiles].file = file;
  gt_h5_files[gt_h5_nfiles].channel = channel;
  snprintf(gt_h5_files[gt_h5_nfiles].what, sizeof gt_h5_files[0].what, "%s", what);
  gt_h5_nfiles++;
}

static herr_t gt_h5_close_file(hid_t id)
{
  for (int i = 0; i < gt_h5_nfiles; i++)
    if (gt_h5_files[i].file == id) {
      const long rec = gt_flight_begin_file(gt_h5_files[i].channel, GT_FL_CLOSE,
                                            gt_h5_files[i].what);
      gt_h5_files[i] = gt_h5_files[--gt_h5_nfiles];
      const herr_t rc = H5Fclose(id);
      gt_flight_end(rec);
      return rc;
    }
  return H5Fclose(id);
}

// ---- errors and closing ------------------------------------------------------

int gt_h5_quiet(void)
{
  GT_CALL_HDF5(H5Eset_auto2(H5E_DEFAULT, NULL, NULL));
  return GT_SUCCESS;
}

static herr_t gt_h5_close_raw(hid_t id)
{
  switch (H5Iget_type(id)) {
  case H5I_FILE: return gt_h5_close_file(id);
  case H5I_GROUP: return H5Gclose(id);
  case H5I_DATASET: return H5Dclose(id);
  case H5I_DATASPACE: return H5Sclose(id);
  case H5I_DATATYPE: return H5Tclose(id);
  case H5I_ATTR: return H5Aclose(id);
  case H5I_GENPROP_LST: return H5Pclose(id);
  case H5I_BADID: return -1;
  default: return H5Idec_ref(id) < 0 ? -1 : 0;
  }
}

int gt_h5_close(hid_t *id)
{
  hid_t victim = *id;
  *id = H5I_INVALID_HID;
  if (victim < 0)
    return GT_SUCCESS;
  GT_CALL_HDF5(gt_h5_close_raw(victim));
  return GT_SUCCESS;
}

int gt_h5_close_all(int status, int n, hid_t ids[])
{
  for (int i = n - 1; i >= 0; i--) {
    if (status == GT_SUCCESS) {
      int closed = gt_h5_close(&ids[i]);
      if (closed != GT_SUCCESS)
        status = gt_error_push(closed, __FILE__, __LINE__, __func__);
    } else if (ids[i] >= 0) {
      /* Already failing: release what we can, keep the first error. */
      if (gt_h5_close_raw(ids[i]) < 0)
        H5Eclear2(H5E_DEFAULT);
      ids[i] = H5I_INVALID_HID;
    }
  }
  return status;
}

// ---- files ----------------------------------------------------------------------

/* create: make a new file (truncating), in the HDF5 1.10 format (every
 * metadata block checksummed), with metadata written collectively. */
static int gt_h5_mpio_in(const char *path, bool create, unsigned flags, MPI_Comm comm,
                         hid_t *file, hid_t *fapl)
{
  GT_H5_ID(*fapl, H5Pcreate(H5P_FILE_ACCESS));
  /* No data sieving of writes: HDF5's metadata (hundreds of small object
   * headers at the close) was otherwise written as a read-modify-write of
   * each 512 KiB window around them, 0.1 s for a 124M checkpoint. */
  MPI_Info info;
  GT_CALL_MPI(MPI_Info_create(&info));
  const int rc = MPI_Info_set(info, "romio_ds_write", "disable");
  const herr_t set = rc == MPI_SUCCESS ? H5Pset_fapl_mpio(*fapl, comm, info) : 0;
  MPI_Info_free(&info);
  GT_CALL_MPI(rc);
  GT_CALL_HDF5(set);
  GT_CALL_HDF5(H5Pset_cache(*fapl, 0, GT_H5_CACHE_SLOTS, GT_H5_CACHE_BYTES, 0.75));
  if (create) {
    GT_CALL_HDF5(H5Pset_libver_bounds(*fapl, H5F_LIBVER_V110, H5F_LIBVER_V110));
    GT_CALL_HDF5(H5Pset_coll_metadata_write(*fapl, true));
    GT_CALL_HDF5(H5Pset_alignment(*fapl, GT_H5_ALIGN_THRESHOLD, GT_H5_ALIGN));
    GT_H5_ID(*file, H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, *fapl));
  } else {
    GT_H5_ID(*file, H5Fopen(path, flags, *fapl));
  }
  return GT_SUCCESS;
}

static int gt_h5_mpio(const char *path, bool create, unsigned flags, MPI_Comm comm, hid_t *file)
{
  /* ROMIO reads "name:" at the start of a path as a file-system prefix (ufs:,
   * nfs:, lustre:): a path with a colon names the generic Unix driver
   * explicitly, so that the colon stays part of the file name. */
  char *prefixed = NULL;
  if (strchr(path, ':')) {
    size_t size = strlen(path) + sizeof "ufs:";
    prefixed = malloc(size);
    GT_CHECK_ALLOC(prefixed, size);
    snprintf(prefixed, size, "ufs:%s", path);
  }
  hid_t fapl = H5I_INVALID_HID;
  *file = H5I_INVALID_HID;
  /* watched by the hang watchdog: a rank that never comes leaves the others
   * waiting in MPI_File_open */
  const int channel = gt_flight_file_channel(comm);
  const long rec = gt_flight_begin_file(channel, create ? GT_FL_CREATE : GT_FL_OPEN,
                                        gt_h5_base(path));
  int status = gt_h5_mpio_in(prefixed ? prefixed : path, create, flags, comm, file, &fapl);
  gt_flight_end(rec);
  if (status == GT_SUCCESS)
    gt_h5_note_open(*file, channel, gt_h5_base(path));
  free(prefixed);
  GT_CALL(gt_h5_close_all(status, 1, &fapl));
  return GT_SUCCESS;
}

int gt_h5_open_mpio(const char *path, unsigned flags, MPI_Comm comm, hid_t *file)
{
  GT_CALL(gt_h5_mpio(path, false, flags, comm, file));
  return GT_SUCCESS;
}

static int gt_h5_open_posix_in(const char *path, hid_t *fapl, hid_t *file)
{
  GT_H5_ID(*fapl, H5Pcreate(H5P_FILE_ACCESS));
  GT_CALL_HDF5(H5Pset_cache(*fapl, 0, GT_H5_CACHE_SLOTS, GT_H5_CACHE_BYTES, 0.75));
  GT_H5_ID(*file, H5Fopen(path, H5F_ACC_RDONLY, *fapl));
  return GT_SUCCESS;
}

int gt_h5_open_posix(const char *path, hid_t *file)
{
  hid_t fapl = H5I_INVALID_HID;
  *file = H5I_INVALID_HID;
  GT_CALL(gt_h5_close_all(gt_h5_open_posix_in(path, &fapl, file), 1, &fapl));
  return GT_SUCCESS;
}

int gt_h5_create_mpio(const char *path, MPI_Comm comm, hid_t *file)
{
  GT_CALL(gt_h5_mpio(path, true, 0, comm, file));
  return GT_SUCCESS;
}

// ---- attributes -------------------------------------------------------------------

enum { GT_AID_ATTR, GT_AID_SPACE, GT_AID_TYPE, GT_AID_N };

/* Open attribute `name` of obj with its type and space into ids, and give
 * its type class and element count; *found is false when there is none. */
static int gt_h5_attr_open(hid_t obj, const char *name, bool *found, H5T_class_t *cls,
                           hssize_t *npoints, hid_t ids[])
{
  htri_t exists;
  GT_CALL_HDF5(exists = H5Aexists(obj, name));
  *found = exists > 0;
  if (!*found)
    return GT_SUCCESS;
  GT_H5_ID(ids[GT_AID_ATTR], H5Aopen(obj, name, H5P_DEFAULT));
  GT_H5_ID(ids[GT_AID_TYPE], H5Aget_type(ids[GT_AID_ATTR]));
  GT_H5_ID(ids[GT_AID_SPACE], H5Aget_space(ids[GT_AID_ATTR]));
  GT_CALL_HDF5(*cls = H5Tget_class(ids[GT_AID_TYPE]));
  GT_CALL_HDF5(*npoints = H5Sget_simple_extent_npoints(ids[GT_AID_SPACE]));
  return GT_SUCCESS;
}

/* Read attribute `name` of obj as n values of memory type mtype; the stored
 * type must be of class cls (integers as integers, floats as floats). */
static int gt_h5_read_attr_in(hid_t obj, const char *name, const char *what, H5T_class_t cls,
                              hid_t mtype, long long n, void *buf, bool *found, hid_t ids[])
{
  H5T_class_t stored;
  hssize_t npoints;
  GT_CALL(gt_h5_attr_open(obj, name, found, &stored, &npoints, ids));
  if (!*found)
    return GT_SUCCESS;
  *found = false;
  GT_CHECK(stored == cls && npoints == n, GT_ERR_INPUT,
           "attribute '%s' of %s is not %lld %s%s", name, what, n,
           cls == H5T_INTEGER ? "integer" : "number", n == 1 ? "" : "s");
  GT_CALL_HDF5(H5Aread(ids[GT_AID_ATTR], mtype, buf));
  *found = true;
  return GT_SUCCESS;
}

static int gt_h5_read_attr(hid_t obj, const char *name, const char *what, H5T_class_t cls,
                           hid_t mtype, long long n, void *buf, bool *found)
{
  hid_t ids[GT_AID_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_h5_read_attr_in(obj, name, what, cls, mtype, n, buf, found, ids);
  GT_CALL(gt_h5_close_all(status, GT_AID_N, ids));
  return GT_SUCCESS;
}

int gt_h5_read_attr_i64(hid_t obj, const char *name, const char *what,
                        bool *found, long long *value)
{
  GT_CALL(gt_h5_read_attr(obj, name, what, H5T_INTEGER, H5T_NATIVE_LLONG, 1, value, found));
  return GT_SUCCESS;
}

int gt_h5_read_attr_i64s(hid_t obj, const char *name, const char *what, int n,
                         bool *found, long long *values)
{
  GT_CALL(gt_h5_read_attr(obj, name, what, H5T_INTEGER, H5T_NATIVE_LLONG, n, values, found));
  return GT_SUCCESS;
}

int gt_h5_read_attr_u32s(hid_t obj, const char *name, const char *what, int n, bool *found,
                         uint32_t *values)
{
  GT_CALL(gt_h5_read_attr(obj, name, what, H5T_INTEGER, H5T_NATIVE_UINT32, n, values, found));
  return GT_SUCCESS;
}

int gt_h5_read_attr_f64(hid_t obj, const char *name, const char *what,
                        bool *found, double *value)
{
  GT_CALL(gt_h5_read_attr(obj, name, what, H5T_FLOAT, H5T_NATIVE_DOUBLE, 1, value, found));
  return GT_SUCCESS;
}

static int gt_h5_read_attr_str_in(hid_t obj, const char *name, const char *what,
                                  bool *found, char **value, hid_t ids[])
{
  H5T_class_t stored;
  hssize_t npoints;
  htri_t variable;
  GT_CALL(gt_h5_attr_open(obj, name, found, &stored, &npoints, ids));
  if (!*found)
    return GT_SUCCESS;
  *found = false;
  GT_CHECK(stored == H5T_STRING && npoints == 1, GT_ERR_INPUT,
           "attribute '%s' of %s is not one string", name, what);
  GT_CALL_HDF5(variable = H5Tis_variable_str(ids[GT_AID_TYPE]));
  if (variable) {
    char *text = NULL;
    GT_CALL_HDF5(H5Aread(ids[GT_AID_ATTR], ids[GT_AID_TYPE], &text));
    *value = strdup(text ? text : "");
    H5free_memory(text);
  } else {
    size_t size = H5Tget_size(ids[GT_AID_TYPE]);
    GT_CHECK(size > 0, GT_ERR_INPUT, "attribute '%s' of %s is not a string", name, what);
    *value = calloc(size + 1, 1);
    GT_CHECK_ALLOC(*value, size + 1);
    GT_CALL_HDF5(H5Aread(ids[GT_AID_ATTR], ids[GT_AID_TYPE], *value));
  }
  GT_CHECK_ALLOC(*value, 1);
  *found = true;
  return GT_SUCCESS;
}

int gt_h5_read_attr_str(hid_t obj, const char *name, const char *what, bool *found,
                        char **value)
{
  hid_t ids[GT_AID_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  *value = NULL;
  int status = gt_h5_read_attr_str_in(obj, name, what, found, value, ids);
  if (status != GT_SUCCESS) {
    free(*value);
    *value = NULL;
  }
  GT_CALL(gt_h5_close_all(status, GT_AID_N, ids));
  return GT_SUCCESS;
}

/* n < 0: scalar. ftype H5I_INVALID_HID means a variable-length UTF-8
 * string, used as both file and memory type. */
static int gt_h5_attr_put_in(hid_t obj, const char *name, hid_t ftype, hid_t mtype,
                             long long n, const void *buf, hid_t ids[])
{
  if (ftype == H5I_INVALID_HID) {
    GT_H5_ID(ids[GT_AID_TYPE], H5Tcopy(H5T_C_S1));
    GT_CALL_HDF5(H5Tset_size(ids[GT_AID_TYPE], H5T_VARIABLE));
    GT_CALL_HDF5(H5Tset_cset(ids[GT_AID_TYPE], H5T_CSET_UTF8));
    ftype = mtype = ids[GT_AID_TYPE];
  }
  if (n < 0) {
    GT_H5_ID(ids[GT_AID_SPACE], H5Screate(H5S_SCALAR));
  } else {
    hsize_t dims = (hsize_t)n;
    GT_H5_ID(ids[GT_AID_SPACE], H5Screate_simple(1, &dims, NULL));
  }
  GT_H5_ID(ids[GT_AID_ATTR],
           H5Acreate2(obj, name, ftype, ids[GT_AID_SPACE], H5P_DEFAULT, H5P_DEFAULT));
  GT_CALL_HDF5(H5Awrite(ids[GT_AID_ATTR], mtype, buf));
  return GT_SUCCESS;
}

static int gt_h5_attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype,
                          long long n, const void *buf)
{
  hid_t ids[GT_AID_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_h5_attr_put_in(obj, name, ftype, mtype, n, buf, ids);
  GT_CALL(gt_h5_close_all(status, GT_AID_N, ids));
  return GT_SUCCESS;
}

int gt_h5_write_attr_u64(hid_t obj, const char *name, unsigned long long value)
{
  GT_CALL(gt_h5_attr_put(obj, name, H5T_STD_U64LE, H5T_NATIVE_ULLONG, -1, &value));
  return GT_SUCCESS;
}

int gt_h5_write_attr_i64(hid_t obj, const char *name, long long value)
{
  GT_CALL(gt_h5_attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, -1, &value));
  return GT_SUCCESS;
}

int gt_h5_write_attr_f64(hid_t obj, const char *name, double value)
{
  GT_CALL(gt_h5_attr_put(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, -1, &value));
  return GT_SUCCESS;
}

int gt_h5_write_attr_str(hid_t obj, const char *name, const char *value)
{
  GT_CALL(gt_h5_attr_put(obj, name, H5I_INVALID_HID, H5I_INVALID_HID, -1, &value));
  return GT_SUCCESS;
}

int gt_h5_write_attr_strs(hid_t obj, const char *name, int n, const char *const values[])
{
  GT_ASSERT(n >= 0);
  GT_CALL(gt_h5_attr_put(obj, name, H5I_INVALID_HID, H5I_INVALID_HID, n, values));
  return GT_SUCCESS;
}

int gt_h5_write_attr_i64s(hid_t obj, const char *name, int n, const long long values[])
{
  GT_ASSERT(n >= 0);
  GT_CALL(gt_h5_attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, n, values));
  return GT_SUCCESS;
}

int gt_h5_write_attr_u64s(hid_t obj, const char *name, int n, const uint64_t values[])
{
  GT_ASSERT(n >= 0);
  GT_CALL(gt_h5_attr_put(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, n, values));
  return GT_SUCCESS;
}

int gt_h5_write_attr_u32s(hid_t obj, const char *name, int n, const uint32_t values[])
{
  GT_ASSERT(n >= 0);
  GT_CALL(gt_h5_attr_put(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, n, values));
  return GT_SUCCESS;
}
