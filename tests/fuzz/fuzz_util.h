/*
 * fuzz_util.h - what the HDF5 and command-line fuzz harnesses share: MPI
 * and HDF5 set-up for one process, private scratch directories, the
 * property every call must keep, a reader of the input's bytes, and edits
 * of HDF5 files through the HDF5 C API (structure-aware inputs) and of
 * their bytes. None of it is collective: the harnesses run on one rank,
 * MPI_COMM_SELF.
 */
#ifndef GT_FUZZ_UTIL_H
#define GT_FUZZ_UTIL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Once per process: MPI (singleton, MPI_THREAD_MULTIPLE, errors return),
 * the log on rank 0, HDF5's error printing off, GT_FAULT unset; at exit the
 * scratch directories are removed and MPI finalized. */
void gt_fuzz_setup(void);

/* A new private directory /dev/shm/gt_fuzz_NAME.XXXXXX (else under /tmp),
 * removed at exit; its path is copied to dir (size bytes). Aborts on failure. */
void gt_fuzz_tmpdir(const char *name, char *dir, size_t size);

/* Remove a file or a directory tree (best effort). */
void gt_fuzz_remove(const char *path);

/* Write size bytes to path (created or truncated); false on failure. */
bool gt_fuzz_write(const char *path, const void *data, size_t size);

/* A seed input of the edit mode, written to the corpus by GT_FUZZ_SEEDS. */
typedef struct {
  const char *name;
  uint8_t bytes[40];
  size_t n;
} gt_fuzz_seed;

/* Write each seed to dir/NAME, and dir/NAME for a raw-mode seed: an input
 * header (head, hsize bytes) followed by a template file's bytes. */
void gt_fuzz_write_seeds(const char *dir, const gt_fuzz_seed *seeds, size_t n);
void gt_fuzz_write_raw_seed(const char *dir, const char *name, const uint8_t *head,
                            size_t hsize, const uint8_t *file, size_t fsize);

/* The whole of path, malloc'ed (free it); NULL on failure. */
uint8_t *gt_fuzz_read(const char *path, size_t *size);

/* The property of every call under test: GT_SUCCESS, or GT_ERR_INPUT or
 * GT_ERR_HDF5 with a message. Anything else prints the harness, the call,
 * the status and the message, and aborts (a finding). */
void gt_fuzz_expect(const char *harness, const char *call, int status);

/* The same with the error codes allowed given as a mask of (1u << code). */
void gt_fuzz_expect_codes(const char *harness, const char *call, int status,
                          unsigned allowed);

/* Unless GT_FUZZ_VERBOSE is set: stdout and stdio's stderr of the code
 * under test go to /dev/null (libFuzzer and the sanitizers still report on
 * file descriptor 2, and so do the property checks above). */
void gt_fuzz_quiet(void);

/* Where the harnesses report: stderr as it was before gt_fuzz_quiet. */
FILE *gt_fuzz_log(void);

/* The property after each input: no HDF5 object (file, dataset, group,
 * type, space, attribute, property list) is left open beyond those open at
 * the last gt_fuzz_baseline (the end of the harness's set-up); else prints
 * what is and aborts. */
void gt_fuzz_baseline(void);
void gt_fuzz_expect_closed(const char *harness);

/* The input as a stream of numbers; past its end every read is 0. */
typedef struct {
  const uint8_t *p;
  size_t n, at;
} gt_fuzz_in;

uint8_t gt_fuzz_u8(gt_fuzz_in *in);
uint16_t gt_fuzz_u16(gt_fuzz_in *in);
uint32_t gt_fuzz_u32(gt_fuzz_in *in);
uint64_t gt_fuzz_u64(gt_fuzz_in *in);
bool gt_fuzz_more(const gt_fuzz_in *in);

/* ---- edits of an HDF5 file --------------------------------------------- */

/* Replace attribute `name` of object `obj` (a path in file) by one of kind
 * (taken modulo the kinds: int64, uint8, int32 array of 1..6, double,
 * variable and fixed-length string, an empty (null) dataspace, a 2-D int)
 * with `value`. HDF5 errors are ignored (the edit is skipped). */
void gt_fuzz_h5_set_attr(hid_t file, const char *obj, const char *name, unsigned kind,
                         uint64_t value);
void gt_fuzz_h5_del_attr(hid_t file, const char *obj, const char *name);

/* Replace the object at path (its link) by a new dataset described by the
 * next input bytes: element type, rank 1..3, extents (small, or huge and
 * never written), layout (contiguous, compact, chunked, with deflate,
 * shuffle or Fletcher32), and values written from a ramp; the parent group
 * is made when missing. */
void gt_fuzz_h5_new_dataset(hid_t file, const char *path, gt_fuzz_in *in);

/* Write `value` (as a 64-bit integer or double, converted by HDF5) at flat
 * element `index` (modulo its size) of the dataset at path. */
void gt_fuzz_h5_poke(hid_t file, const char *path, uint64_t index, uint64_t value,
                     bool as_double);

/* Replace the object at path by an empty group, or by a soft link to
 * target (which may not exist). */
void gt_fuzz_h5_group(hid_t file, const char *path);
void gt_fuzz_h5_softlink(hid_t file, const char *path, const char *target);

/* Unlink the object at path. */
void gt_fuzz_h5_delete(hid_t file, const char *path);

/* Byte edits of the closed file: truncate to `at` (modulo the size), xor a
 * byte at `at`, or copy up to 16 bytes of the input at `at`. */
void gt_fuzz_truncate(const char *path, uint64_t at);
void gt_fuzz_flip(const char *path, uint64_t at, uint8_t mask);
void gt_fuzz_overwrite(const char *path, uint64_t at, gt_fuzz_in *in);

#endif /* GT_FUZZ_UTIL_H */
