/*
 * ingest.c - raw text to an HDF5 token dataset with the byte tokenizer.
 *
 * Serial HDF5 (default driver), run by one process. Inputs are checked first
 * (exist, regular, not empty) so that mistakes surface before any output is
 * made, then streamed in blocks: the head of each file goes to /train/tokens
 * and its tail to /val/tokens. The file is written as OUT.tmp and renamed to
 * OUT only when complete.
 */
#ifdef HAVE_CONFIG_H
#include "build_config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/bar.h"
#include "gridtrain/error.h"
#include "gridtrain/ingest.h"
#include "h5util.h"

#ifndef GT_INGEST_VERSION
#ifdef PACKAGE_VERSION
#define GT_INGEST_VERSION PACKAGE_VERSION
#else
#define GT_INGEST_VERSION "0.1.0"
#endif
#endif

#define GT_INGEST_BLOCK ((size_t)4 << 20) /* bytes read and written at a time */
#define GT_INGEST_CHUNK 65536             /* HDF5 chunk, elements */
#define GT_INGEST_VOCAB 256

typedef struct {
  const char *path;
  long long size, train, val; /* bytes: all, head to train, tail to val */
} gt_source;

/* The objects open while the file is written; the file first (closed last). */
enum {
  GT_IG_FILE, GT_IG_GTRAIN, GT_IG_GVAL, GT_IG_DTRAIN, GT_IG_DVAL,
  GT_IG_FTRAIN, GT_IG_FVAL, GT_IG_MSPACE, GT_IG_FAPL, GT_IG_N
};

// ---- inputs and output name -------------------------------------------------

static int gt_ingest_stat(gt_source *s, const char *path, double val_fraction)
{
  struct stat st;
  s->path = path;
  int fd = open(path, O_RDONLY);
  GT_CHECK(fd >= 0, GT_ERR_INPUT, "cannot read input '%s': %s", path, strerror(errno));
  int rc = fstat(fd, &st);
  int err = errno;
  close(fd);
  GT_CHECK(rc == 0, GT_ERR_INPUT, "cannot read input '%s': %s", path, strerror(err));
  GT_CHECK(S_ISREG(st.st_mode), GT_ERR_INPUT,
           "input '%s' is not a regular file; give text files", path);
  GT_CHECK(st.st_size > 0, GT_ERR_INPUT,
           "input '%s' is empty; remove it or give a file with text", path);
  s->size = (long long)st.st_size;
  s->val = (long long)floor((double)s->size * val_fraction);
  s->train = s->size - s->val;
  return GT_SUCCESS;
}

/* Make sure OUT.tmp can be created (for a clear message naming OUT). *tmp is
 * set, malloc'd, only when the probe file was created. */
static int gt_ingest_prepare_output(const char *out, char **tmp)
{
  struct stat st;
  GT_CHECK(!(stat(out, &st) == 0 && S_ISDIR(st.st_mode)), GT_ERR_INPUT,
           "cannot create '%s': %s; name a file", out, strerror(EISDIR));
  size_t size = strlen(out) + sizeof ".tmp";
  char *name = malloc(size);
  GT_CHECK_ALLOC(name, size);
  snprintf(name, size, "%s.tmp", out);
  FILE *probe = fopen(name, "wb");
  int err = errno;
  if (!probe)
    free(name);
  GT_CHECK(probe != NULL, GT_ERR_INPUT, "cannot create '%s': %s", out, strerror(err));
  fclose(probe);
  *tmp = name;
  return GT_SUCCESS;
}

// ---- datasets and attributes ---------------------------------------------------

/* vocab_size and tokenizer, on / and on each dataset. */
static int gt_ingest_tag(hid_t obj)
{
  GT_CALL(gt_h5_write_attr_i64(obj, "vocab_size", GT_INGEST_VOCAB));
  GT_CALL(gt_h5_write_attr_str(obj, "tokenizer", "bytes"));
  return GT_SUCCESS;
}

static int gt_ingest_make_dset_in(hid_t group, hsize_t n, hid_t *dset, hid_t tmp[2])
{
  /* An empty split (val_fraction 0) is a chunked dataset of size 0 that can
   * grow; others have fixed size. */
  hsize_t maxdims = n > 0 ? n : H5S_UNLIMITED;
  hsize_t chunk = n == 0 ? 1 : n < GT_INGEST_CHUNK ? n : GT_INGEST_CHUNK;
  GT_H5_ID(tmp[0], H5Screate_simple(1, &n, &maxdims));
  GT_H5_ID(tmp[1], H5Pcreate(H5P_DATASET_CREATE));
  GT_CALL_HDF5(H5Pset_chunk(tmp[1], 1, &chunk));
  GT_CALL_HDF5(H5Pset_fletcher32(tmp[1]));
  GT_H5_ID(*dset, H5Dcreate2(group, "tokens", H5T_STD_U8LE, tmp[0], H5P_DEFAULT,
                             tmp[1], H5P_DEFAULT));
  GT_CALL(gt_ingest_tag(*dset));
  return GT_SUCCESS;
}

static int gt_ingest_make_dset(hid_t group, long long n, hid_t *dset)
{
  hid_t tmp[2] = {H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_ingest_make_dset_in(group, (hsize_t)n, dset, tmp);
  GT_CALL(gt_h5_close_all(status, 2, tmp));
  return GT_SUCCESS;
}

static int gt_ingest_root_attrs_in(hid_t file, int n, const gt_source *src,
                                   double val_fraction, const char **names,
                                   uint64_t *bytes)
{
  long long ntrain = 0, nval = 0;
  for (int i = 0; i < n; i++) {
    names[i] = src[i].path;
    bytes[i] = (uint64_t)src[i].size;
    ntrain += src[i].train;
    nval += src[i].val;
  }
  GT_CALL(gt_ingest_tag(file));
  GT_CALL(gt_h5_write_attr_strs(file, "sources", n, names));
  GT_CALL(gt_h5_write_attr_u64s(file, "source_bytes", n, bytes));
  GT_CALL(gt_h5_write_attr_f64(file, "val_fraction", val_fraction));
  GT_CALL(gt_h5_write_attr_i64(file, "train_tokens", ntrain));
  GT_CALL(gt_h5_write_attr_i64(file, "val_tokens", nval));
  GT_CALL(gt_h5_write_attr_str(file, "created_by", "gridtrain " GT_INGEST_VERSION));
  return GT_SUCCESS;
}

static int gt_ingest_root_attrs(hid_t file, int n, const gt_source *src, double val_fraction)
{
  const char **names = malloc((size_t)n * sizeof *names);
  uint64_t *bytes = malloc((size_t)n * sizeof *bytes);
  int status = GT_SUCCESS;
  if (!names || !bytes)
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                      (size_t)n * (sizeof *names + sizeof *bytes));
  else
    status = gt_ingest_root_attrs_in(file, n, src, val_fraction, names, bytes);
  free(names);
  free(bytes);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- streaming ---------------------------------------------------------------------

/* Write n bytes of buf at offset of a dataset (fspace: its dataspace, mspace:
 * a 1-D space of at least n elements). */
static int gt_ingest_put(hid_t dset, hid_t fspace, hid_t mspace, hsize_t offset,
                         const unsigned char *buf, hsize_t n)
{
  if (n == 0)
    return GT_SUCCESS;
  hsize_t zero = 0;
  GT_CALL_HDF5(H5Sselect_hyperslab(mspace, H5S_SELECT_SET, &zero, NULL, &n, NULL));
  GT_CALL_HDF5(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &offset, NULL, &n, NULL));
  GT_CALL_HDF5(H5Dwrite(dset, H5T_NATIVE_UCHAR, mspace, fspace, H5P_DEFAULT, buf));
  return GT_SUCCESS;
}

static int gt_ingest_copy_in(const gt_source *s, FILE *f, unsigned char *buf,
                             const hid_t ids[], hsize_t *toff, hsize_t *voff)
{
  long long done = 0;
  while (done < s->size) {
    size_t want = s->size - done < (long long)GT_INGEST_BLOCK ? (size_t)(s->size - done)
                                                               : GT_INGEST_BLOCK;
    size_t got = fread(buf, 1, want, f);
    GT_CHECK(!ferror(f), GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
    GT_CHECK(got == want, GT_ERR_INPUT,
             "input '%s' shrank while it was read; run the ingest again", s->path);
    long long left = s->train - done;
    size_t ntrain = left <= 0 ? 0 : left < (long long)got ? (size_t)left : got;
    GT_CALL(gt_ingest_put(ids[GT_IG_DTRAIN], ids[GT_IG_FTRAIN], ids[GT_IG_MSPACE],
                          *toff, buf, ntrain));
    GT_CALL(gt_ingest_put(ids[GT_IG_DVAL], ids[GT_IG_FVAL], ids[GT_IG_MSPACE], *voff,
                          buf + ntrain, got - ntrain));
    *toff += ntrain;
    *voff += got - ntrain;
    done += (long long)got;
    gt_bar_add((double)got);
  }
  GT_CHECK(fgetc(f) == EOF, GT_ERR_INPUT,
           "input '%s' grew while it was read; run the ingest again", s->path);
  return GT_SUCCESS;
}

static int gt_ingest_copy(const gt_source *s, unsigned char *buf, const hid_t ids[],
                          hsize_t *toff, hsize_t *voff)
{
  FILE *f = fopen(s->path, "rb");
  GT_CHECK(f != NULL, GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  int status = gt_ingest_copy_in(s, f, buf, ids, toff, voff);
  fclose(f);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_ingest_write(const char *tmp, int n, const gt_source *src,
                           double val_fraction, unsigned char *buf, hid_t ids[])
{
  long long ntrain = 0, nval = 0;
  for (int i = 0; i < n; i++) {
    ntrain += src[i].train;
    nval += src[i].val;
  }
  /* the HDF5 1.10 format, as checkpoints: every object header and B-tree
   * node is checksummed, so damage to the metadata is a clean error when the
   * file is read, not a read of garbage deep inside HDF5 */
  GT_H5_ID(ids[GT_IG_FAPL], H5Pcreate(H5P_FILE_ACCESS));
  GT_CALL_HDF5(H5Pset_libver_bounds(ids[GT_IG_FAPL], H5F_LIBVER_V110, H5F_LIBVER_V110));
  GT_H5_ID(ids[GT_IG_FILE], H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, ids[GT_IG_FAPL]));
  GT_H5_ID(ids[GT_IG_GTRAIN],
           H5Gcreate2(ids[GT_IG_FILE], "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  GT_H5_ID(ids[GT_IG_GVAL],
           H5Gcreate2(ids[GT_IG_FILE], "val", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  GT_CALL(gt_ingest_make_dset(ids[GT_IG_GTRAIN], ntrain, &ids[GT_IG_DTRAIN]));
  GT_CALL(gt_ingest_make_dset(ids[GT_IG_GVAL], nval, &ids[GT_IG_DVAL]));
  GT_H5_ID(ids[GT_IG_FTRAIN], H5Dget_space(ids[GT_IG_DTRAIN]));
  GT_H5_ID(ids[GT_IG_FVAL], H5Dget_space(ids[GT_IG_DVAL]));
  hsize_t block = GT_INGEST_BLOCK;
  GT_H5_ID(ids[GT_IG_MSPACE], H5Screate_simple(1, &block, NULL));

  hsize_t toff = 0, voff = 0;
  gt_bar_begin("ingest", (double)(ntrain + nval), GT_BAR_BYTES);
  for (int i = 0; i < n; i++)
    GT_CALL(gt_ingest_copy(&src[i], buf, ids, &toff, &voff));
  gt_bar_end();
  GT_ASSERT(toff == (hsize_t)ntrain && voff == (hsize_t)nval);
  GT_CALL(gt_ingest_root_attrs(ids[GT_IG_FILE], n, src, val_fraction));
  return GT_SUCCESS;
}

// ----------------------------------------------------------------------------

int gt_ingest_text(int nfiles, char *const files[], const char *out_path,
                   double val_fraction, gt_ingest_counts *counts)
{
  GT_CHECK(nfiles >= 1, GT_ERR_INPUT, "no input files; name at least one text file");
  GT_CHECK(out_path != NULL && out_path[0] != '\0', GT_ERR_INPUT,
           "no output file; name the .h5 file to write");
  GT_CHECK(val_fraction >= 0.0 && val_fraction <= 0.5, GT_ERR_INPUT,
           "validation fraction %g is outside [0, 0.5]; choose a value in that range",
           val_fraction);
  GT_CALL(gt_h5_quiet());

  gt_source *src = calloc((size_t)nfiles, sizeof *src);
  GT_CHECK_ALLOC(src, (size_t)nfiles * sizeof *src);
  int status = GT_SUCCESS;
  for (int i = 0; i < nfiles && status == GT_SUCCESS; i++)
    status = gt_ingest_stat(&src[i], files[i], val_fraction);

  char *tmp = NULL;
  unsigned char *buf = NULL;
  if (status == GT_SUCCESS)
    status = gt_ingest_prepare_output(out_path, &tmp);
  if (status == GT_SUCCESS) {
    buf = malloc(GT_INGEST_BLOCK);
    if (!buf)
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", GT_INGEST_BLOCK);
  }
  if (status == GT_SUCCESS) {
    hid_t ids[GT_IG_N];
    for (int i = 0; i < GT_IG_N; i++)
      ids[i] = H5I_INVALID_HID;
    status = gt_ingest_write(tmp, nfiles, src, val_fraction, buf, ids);
    status = gt_h5_close_all(status, GT_IG_N, ids);
  }
  if (status == GT_SUCCESS && rename(tmp, out_path) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "cannot create '%s': %s", out_path, strerror(errno));
  if (status != GT_SUCCESS && tmp)
    unlink(tmp);
  if (status == GT_SUCCESS && counts) {
    *counts = (gt_ingest_counts){0, 0};
    for (int i = 0; i < nfiles; i++) {
      counts->train_tokens += src[i].train;
      counts->val_tokens += src[i].val;
    }
  }
  free(tmp);
  free(buf);
  free(src);
  GT_CALL(status);
  return GT_SUCCESS;
}
