/*
 * h5util.h - small HDF5 helpers shared by the io module (internal).
 *
 * Ownership pattern: a function that holds several HDF5 objects keeps their
 * ids in a local array initialised to H5I_INVALID_HID, does its work in a
 * helper that stores each id there as it opens it (GT_H5_ID / GT_CALL_HDF5
 * return early on failure), and then hands the array to gt_h5_close_all,
 * which closes whatever was opened on every path.
 */
#ifndef GT_IO_H5UTIL_H
#define GT_IO_H5UTIL_H

#include <hdf5.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

/* The part of path after its last '/' (for messages). */
const char *gt_h5_base(const char *path);

/* Turn off HDF5's automatic printing of its error stack (process-wide):
 * errors reach us through GT_CALL_HDF5 instead. Not collective. */
int gt_h5_quiet(void);

/* Close one object of any kind (file, group, dataset, dataspace, datatype,
 * attribute, property list); an invalid id is skipped. *id becomes
 * H5I_INVALID_HID either way. */
int gt_h5_close(hid_t *id);

/* Close ids[n-1] down to ids[0] (so put the file first) after work that
 * returned `status`. Returns status when it is an error (then close failures
 * are dropped and the first error stays on the stack), else the first close
 * failure, else GT_SUCCESS. */
int gt_h5_close_all(int status, int n, hid_t ids[]);

/* The collective file calls below (gt_h5_open_mpio, gt_h5_create_mpio, and
 * closing a file they opened) are flight records of the "file" channel
 * (flight.h): the hang watchdog names a rank that never entered one.
 *
 * Open an existing file with the MPI-IO driver on comm (flags: H5F_ACC_RDONLY
 * or H5F_ACC_RDWR), with an 8 MiB chunk cache per dataset for random reads.
 * path is a plain file name, colons included (ROMIO file-system prefixes such
 * as "lustre:" are not interpreted). Collective on comm. */
int gt_h5_open_mpio(const char *path, unsigned flags, MPI_Comm comm, hid_t *file);

/* Open an existing file read-only through HDF5's default (POSIX) driver,
 * with the chunk cache of gt_h5_open_mpio: no MPI call, now or in later
 * reads (a reader thread's handle, reader.h). Not collective. */
int gt_h5_open_posix(const char *path, hid_t *file);

/* Create (or truncate) a file with the MPI-IO driver on comm, in the HDF5
 * 1.10 format (checksummed metadata), metadata written collectively, objects
 * of 64 KiB and more aligned to 4 KiB (whole pages for the raw data). Same
 * path rules as gt_h5_open_mpio. Collective on comm. */
int gt_h5_create_mpio(const char *path, MPI_Comm comm, hid_t *file);

/* Read an integer attribute (any integer type, one element) of obj. *found is
 * false (and *value untouched) when obj has no such attribute. An attribute
 * that is not one integer is GT_ERR_INPUT naming `what` (the object, for the
 * message). Not collective. */
int gt_h5_read_attr_i64(hid_t obj, const char *name, const char *what,
                        bool *found, long long *value);

/* The same for n integers, one double, one string (any HDF5 string type;
 * *value is malloc'ed, free it). */
int gt_h5_read_attr_i64s(hid_t obj, const char *name, const char *what, int n,
                         bool *found, long long *values);
int gt_h5_read_attr_f64(hid_t obj, const char *name, const char *what,
                        bool *found, double *value);
int gt_h5_read_attr_str(hid_t obj, const char *name, const char *what, bool *found,
                        char **value);

/* Create scalar attributes of obj: int64, uint64, double, UTF-8 string. */
int gt_h5_write_attr_u64(hid_t obj, const char *name, unsigned long long value);
int gt_h5_write_attr_i64(hid_t obj, const char *name, long long value);
int gt_h5_write_attr_f64(hid_t obj, const char *name, double value);
int gt_h5_write_attr_str(hid_t obj, const char *name, const char *value);

/* Create 1-D attributes of obj with n elements: UTF-8 strings, int64, uint64. */
int gt_h5_write_attr_i64s(hid_t obj, const char *name, int n, const long long values[]);
int gt_h5_write_attr_strs(hid_t obj, const char *name, int n, const char *const values[]);
int gt_h5_write_attr_u64s(hid_t obj, const char *name, int n, const uint64_t values[]);
int gt_h5_write_attr_u32s(hid_t obj, const char *name, int n, const uint32_t values[]);

/* Read a 1-D attribute of n unsigned 32-bit integers (stored as any integer
 * type). *found as for gt_h5_read_attr_i64. Not collective. */
int gt_h5_read_attr_u32s(hid_t obj, const char *name, const char *what, int n, bool *found,
                         uint32_t *values);

#endif /* GT_IO_H5UTIL_H */
