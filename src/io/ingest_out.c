/*
 * ingest_out.c - the dataset file an ingest writes (ingest_internal.h):
 * OUT.tmp with /train/tokens and /val/tokens growing block by block, the
 * attributes, then the rename to OUT. Serial HDF5 (default driver).
 */
#ifdef HAVE_CONFIG_H
#include "build_config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/error.h"
#include "h5util.h"
#include "ingest_internal.h"

#ifndef GT_INGEST_VERSION
#ifdef PACKAGE_VERSION
#define GT_INGEST_VERSION PACKAGE_VERSION
#else
#define GT_INGEST_VERSION "0.1.0"
#endif
#endif

#define GT_INGEST_CHUNK 65536 /* HDF5 chunk, elements */

static const char *const gt_split_group[2] = {"train", "val"};

// ---- inputs ------------------------------------------------------------------------------

int gt_ingest_check_args(int nfiles, const char *out_path, double val_fraction,
                         const char *what)
{
  GT_CHECK(nfiles >= 1, GT_ERR_INPUT, "no input files; name at least one %s file", what);
  GT_CHECK(out_path != NULL && out_path[0] != '\0', GT_ERR_INPUT,
           "no output file; name the .h5 file to write");
  GT_CHECK(val_fraction >= 0.0 && val_fraction <= 0.5, GT_ERR_INPUT,
           "validation fraction %g is outside [0, 0.5]; choose a value in that range",
           val_fraction);
  return GT_SUCCESS;
}

int gt_ingest_stat(gt_ingest_source *s, const char *path)
{
  struct stat st;
  memset(s, 0, sizeof *s);
  s->path = path;
  int fd = open(path, O_RDONLY);
  GT_CHECK(fd >= 0, GT_ERR_INPUT, "cannot read input '%s': %s", path, strerror(errno));
  int rc = fstat(fd, &st);
  int err = errno;
  close(fd);
  GT_CHECK(rc == 0, GT_ERR_INPUT, "cannot read input '%s': %s", path, strerror(err));
  GT_CHECK(S_ISREG(st.st_mode), GT_ERR_INPUT, "input '%s' is not a regular file; give files",
           path);
  GT_CHECK(st.st_size > 0, GT_ERR_INPUT, "input '%s' is empty; remove it or give a file with data",
           path);
  s->size = (long long)st.st_size;
  return GT_SUCCESS;
}

// ---- the file -------------------------------------------------------------------------------

int gt_ingest_out_probe(gt_ingest_out *o, const char *path)
{
  struct stat st;
  o->path = path;
  o->tmp = NULL;
  o->file = o->dset[0] = o->dset[1] = H5I_INVALID_HID;
  o->n[0] = o->n[1] = 0;
  GT_CHECK(!(stat(path, &st) == 0 && S_ISDIR(st.st_mode)), GT_ERR_INPUT,
           "cannot create '%s': %s; name a file", path, strerror(EISDIR));
  size_t size = strlen(path) + sizeof ".tmp";
  char *name = malloc(size);
  GT_CHECK_ALLOC(name, size);
  snprintf(name, size, "%s.tmp", path);
  FILE *probe = fopen(name, "wb");
  int err = errno;
  if (!probe)
    free(name);
  GT_CHECK(probe != NULL, GT_ERR_INPUT, "cannot create '%s': %s", path, strerror(err));
  fclose(probe);
  o->tmp = name;
  return GT_SUCCESS;
}

/* vocab_size and, when known, tokenizer. */
static int gt_ingest_tag(hid_t obj, long long vocab, const gt_tokenizer *tok)
{
  GT_CALL(gt_h5_write_attr_i64(obj, "vocab_size", vocab));
  if (tok)
    GT_CALL(gt_h5_write_attr_str(obj, "tokenizer", gt_tokenizer_name(tok)));
  return GT_SUCCESS;
}

/* An empty 1-D dataset that grows, in chunks of GT_INGEST_CHUNK. */
static int gt_ingest_dset_in(gt_ingest_out *o, int split, hid_t ftype, const gt_tokenizer *tok,
                             hid_t tmp[3])
{
  const hsize_t zero = 0, maxdims = H5S_UNLIMITED, chunk = GT_INGEST_CHUNK;
  GT_H5_ID(tmp[0], H5Gcreate2(o->file, gt_split_group[split], H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT));
  GT_H5_ID(tmp[1], H5Screate_simple(1, &zero, &maxdims));
  GT_H5_ID(tmp[2], H5Pcreate(H5P_DATASET_CREATE));
  GT_CALL_HDF5(H5Pset_chunk(tmp[2], 1, &chunk));
  GT_CALL_HDF5(H5Pset_fletcher32(tmp[2]));
  GT_H5_ID(o->dset[split],
           H5Dcreate2(tmp[0], "tokens", ftype, tmp[1], H5P_DEFAULT, tmp[2], H5P_DEFAULT));
  GT_CALL(gt_ingest_tag(o->dset[split], o->vocab, tok));
  return GT_SUCCESS;
}

static int gt_ingest_dset(gt_ingest_out *o, int split, hid_t ftype, const gt_tokenizer *tok)
{
  hid_t tmp[3] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  const int status = gt_ingest_dset_in(o, split, ftype, tok, tmp);
  GT_CALL(gt_h5_close_all(status, 3, tmp));
  return GT_SUCCESS;
}

static int gt_ingest_out_create_in(gt_ingest_out *o, const gt_tokenizer *tok, hid_t *fapl)
{
  const hid_t ftype = o->vocab <= 256     ? H5T_STD_U8LE
                      : o->vocab <= 65536 ? H5T_STD_U16LE
                                          : H5T_STD_U32LE;
  o->dtype = o->vocab <= 256 ? "uint8" : o->vocab <= 65536 ? "uint16" : "uint32";
  /* the HDF5 1.10 format, as checkpoints: every object header and B-tree
   * node is checksummed, so damage to the metadata is a clean error when the
   * file is read, not a read of garbage deep inside HDF5 */
  GT_H5_ID(*fapl, H5Pcreate(H5P_FILE_ACCESS));
  GT_CALL_HDF5(H5Pset_libver_bounds(*fapl, H5F_LIBVER_V110, H5F_LIBVER_V110));
  GT_H5_ID(o->file, H5Fcreate(o->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, *fapl));
  GT_CALL(gt_ingest_dset(o, GT_SPLIT_TRAIN, ftype, tok));
  GT_CALL(gt_ingest_dset(o, GT_SPLIT_VAL, ftype, tok));
  GT_CALL(gt_ingest_tag(o->file, o->vocab, NULL));
  if (tok)
    GT_CALL(gt_tokenizer_h5_write(o->file, tok));
  return GT_SUCCESS;
}

int gt_ingest_out_create(gt_ingest_out *o, long long vocab, const gt_tokenizer *tok)
{
  GT_CALL(gt_h5_quiet());
  o->vocab = vocab;
  hid_t fapl = H5I_INVALID_HID;
  const int status = gt_ingest_out_create_in(o, tok, &fapl);
  GT_CALL(gt_h5_close_all(status, 1, &fapl));
  return GT_SUCCESS;
}

static int gt_ingest_out_append_in(gt_ingest_out *o, int split, const uint32_t *ids,
                                   hsize_t n, hid_t sp[2])
{
  const hsize_t at = (hsize_t)o->n[split], size = at + n;
  GT_CALL_HDF5(H5Dset_extent(o->dset[split], &size));
  GT_H5_ID(sp[0], H5Dget_space(o->dset[split]));
  GT_CALL_HDF5(H5Sselect_hyperslab(sp[0], H5S_SELECT_SET, &at, NULL, &n, NULL));
  GT_H5_ID(sp[1], H5Screate_simple(1, &n, NULL));
  GT_CALL_HDF5(H5Dwrite(o->dset[split], H5T_NATIVE_UINT32, sp[1], sp[0], H5P_DEFAULT, ids));
  o->n[split] = (long long)size;
  return GT_SUCCESS;
}

int gt_ingest_out_append(gt_ingest_out *o, int split, const uint32_t *ids, size_t n)
{
  if (n == 0)
    return GT_SUCCESS;
  hid_t sp[2] = {H5I_INVALID_HID, H5I_INVALID_HID};
  const int status = gt_ingest_out_append_in(o, split, ids, (hsize_t)n, sp);
  GT_CALL(gt_h5_close_all(status, 2, sp));
  return GT_SUCCESS;
}

int gt_ingest_out_attrs(gt_ingest_out *o, int n, const gt_ingest_source *src,
                        double val_fraction)
{
  const char **names = malloc((size_t)n * sizeof *names);
  uint64_t *bytes = malloc((size_t)n * sizeof *bytes);
  int status = GT_SUCCESS;
  if (!names || !bytes) {
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                      (size_t)n * (sizeof *names + sizeof *bytes));
  } else {
    for (int i = 0; i < n; i++)
      names[i] = src[i].path, bytes[i] = (uint64_t)src[i].size;
    const hid_t f = o->file;
    if ((status = gt_h5_write_attr_strs(f, "sources", n, names)) == GT_SUCCESS &&
        (status = gt_h5_write_attr_u64s(f, "source_bytes", n, bytes)) == GT_SUCCESS &&
        (status = gt_h5_write_attr_f64(f, "val_fraction", val_fraction)) == GT_SUCCESS &&
        (status = gt_h5_write_attr_i64(f, "train_tokens", o->n[GT_SPLIT_TRAIN])) ==
            GT_SUCCESS &&
        (status = gt_h5_write_attr_i64(f, "val_tokens", o->n[GT_SPLIT_VAL])) == GT_SUCCESS)
      status = gt_h5_write_attr_str(f, "created_by", "gridtrain " GT_INGEST_VERSION);
  }
  free(names);
  free(bytes);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_ingest_out_finish(gt_ingest_out *o, int status)
{
  hid_t ids[3] = {o->file, o->dset[0], o->dset[1]};
  o->file = o->dset[0] = o->dset[1] = H5I_INVALID_HID;
  status = gt_h5_close_all(status, 3, ids);
  if (o->tmp && status == GT_SUCCESS && rename(o->tmp, o->path) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "cannot create '%s': %s", o->path, strerror(errno));
  if (o->tmp && status != GT_SUCCESS)
    unlink(o->tmp);
  free(o->tmp);
  o->tmp = NULL;
  return status;
}
