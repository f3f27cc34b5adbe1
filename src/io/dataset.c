/*
 * dataset.c - token datasets in HDF5: opening a spec collectively with the
 * MPI-IO driver (or, for a reader thread, alone through the POSIX driver),
 * validating it the same way on every rank, and independent reads of
 * sequences of T+1 tokens into int32 memory, adjacent sequences in one read.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/data.h"
#include "gridtrain/error.h"
#include "h5util.h"

/* The HDF5 objects a dataset holds; the file comes first so that
 * gt_h5_close_all closes it last. */
enum { GT_DS_FILE, GT_DS_DSET, GT_DS_FSPACE, GT_DS_MSPACE, GT_DS_TYPE, GT_DS_N };

/* The most tokens one read takes: a longer run of adjacent sequences is
 * read in pieces. */
#define GT_DS_MAX_READ ((hsize_t)1 << 20)

/* Sample i of a read, and the sequence it reads. */
typedef struct {
  long long seq;
  int i;
} gt_ds_pick;

struct gt_dataset {
  hid_t ids[GT_DS_N];
  hsize_t mem_cap;    /* elements in ids[GT_DS_MSPACE] and wide */
  int64_t *wide;      /* the tokens of a read, before the vocabulary check */
  gt_ds_pick *picks;  /* npicks: a read's samples in file order */
  int npicks;
  char *name;         /* "FILE:/path" */
  size_t file_len;    /* the FILE part of name */
  long long ntokens;
  long vocab;
};

// ---- opening ----------------------------------------------------------------

/* "FILE" or "FILE:/path": split at the last ':' only when a '/' follows it,
 * so that file names with colons still work. *file is a malloc'd copy; *dpath
 * points into it (NULL when the spec names no dataset). */
static int gt_dataset_parse_spec(const char *spec, char **file, const char **dpath)
{
  *dpath = NULL;
  *file = strdup(spec);
  GT_CHECK_ALLOC(*file, strlen(spec) + 1);
  char *colon = strrchr(*file, ':');
  if (colon && colon[1] == '/') {
    *colon = '\0';
    *dpath = colon + 1;
  }
  GT_CHECK((*file)[0] != '\0', GT_ERR_INPUT,
           "dataset '%s' names no file; write it as FILE.h5 or FILE.h5:/path", spec);
  return GT_SUCCESS;
}

/* Rank 0, before the collective open: a clear message for the common
 * mistakes (missing file, no permission, not HDF5). */
static int gt_dataset_check_file(const char *file)
{
  struct stat st;
  int fd = open(file, O_RDONLY);
  if (fd < 0)
    return GT_ERROR(GT_ERR_INPUT, "cannot open dataset file '%s': %s", file,
                    strerror(errno));
  int rc = fstat(fd, &st);
  int err = errno;
  close(fd);
  GT_CHECK(rc == 0, GT_ERR_INPUT, "cannot open dataset file '%s': %s", file, strerror(err));
  GT_CHECK(!S_ISDIR(st.st_mode), GT_ERR_INPUT,
           "cannot open dataset file '%s': %s", file, strerror(EISDIR));
  htri_t is_hdf5 = H5Fis_hdf5(file);
  if (is_hdf5 < 0)
    H5Eclear2(H5E_DEFAULT);
  /* HDF5's signature at the start, with a superblock that does not read:
   * damaged, not another kind of file */
  char head[8] = {0};
  FILE *f = is_hdf5 > 0 ? NULL : fopen(file, "rb");
  const bool signed_hdf5 = f && fread(head, 1, sizeof head, f) == sizeof head &&
                           memcmp(head, "\211HDF\r\n\032\n", 8) == 0;
  if (f)
    fclose(f);
  GT_CHECK(is_hdf5 > 0 || !signed_hdf5, GT_ERR_INPUT,
           "dataset file '%s' is an HDF5 file whose superblock is damaged; make it again "
           "with 'gridtrain ingest'", file);
  GT_CHECK(is_hdf5 > 0, GT_ERR_INPUT,
           "'%s' is not an HDF5 file; make one with 'gridtrain ingest text'", file);
  return GT_SUCCESS;
}

typedef enum {
  GT_OBJ_MISSING,
  GT_OBJ_DATASET,
  GT_OBJ_OTHER,
  GT_OBJ_DANGLING,
  GT_OBJ_DAMAGED /* its metadata (a group's or its own object header) does not read */
} gt_obj_kind;

/* A link at path that exists but leads to nothing readable: a soft or
 * external link that points nowhere (GT_OBJ_DANGLING), or a hard link to an
 * object whose header does not read (GT_OBJ_DAMAGED, the HDF5 error the
 * current one). */
static gt_obj_kind gt_dataset_broken(hid_t file, const char *path, const char *call)
{
  gt_error_hdf5(call, __FILE__, __LINE__, __func__); /* the reason, before the next call */
  H5L_info_t info;
  if (H5Lget_info(file, path, &info, H5P_DEFAULT) >= 0 && info.type != H5L_TYPE_HARD) {
    gt_error_clear();
    return GT_OBJ_DANGLING;
  }
  H5Eclear2(H5E_DEFAULT);
  return GT_OBJ_DAMAGED;
}

/* Open the dataset at path if it exists; *id stays invalid otherwise. Each
 * link on the path is checked in turn (H5Lexists fails, rather than answers
 * no, when a parent group is missing - or cannot be read: damaged); a link
 * on it that points nowhere (a dangling soft or external link) is
 * GT_OBJ_DANGLING, an object whose metadata does not read GT_OBJ_DAMAGED
 * (the HDF5 error is the current one). */
static int gt_dataset_find(hid_t file, const char *path, gt_obj_kind *kind, hid_t *id)
{
  *kind = GT_OBJ_MISSING;
  size_t len = strlen(path);
  char *prefix = malloc(len + 1);
  GT_CHECK_ALLOC(prefix, len + 1);
  memcpy(prefix, path, len + 1);
  htri_t exists = 1;
  for (size_t i = 1; i <= len && exists > 0; i++) {
    if (prefix[i] != '/' && prefix[i] != '\0')
      continue;
    if (prefix[i - 1] == '/') /* empty component: "//" or a trailing '/' */
      continue;
    char saved = prefix[i];
    prefix[i] = '\0';
    exists = H5Lexists(file, prefix, H5P_DEFAULT);
    if (exists < 0) /* its parent group exists (checked before) but does not read */
      gt_error_hdf5("H5Lexists", __FILE__, __LINE__, __func__);
    prefix[i] = saved;
  }
  free(prefix);
  if (exists < 0) {
    *kind = GT_OBJ_DAMAGED;
    return GT_SUCCESS;
  }
  if (exists > 0 && len > 0 && strcmp(path, "/") != 0 &&
      H5Oexists_by_name(file, path, H5P_DEFAULT) <= 0) { /* a link that leads nowhere */
    *kind = gt_dataset_broken(file, path, "H5Oexists_by_name");
    return GT_SUCCESS;
  }
  if (!exists || len == 0 || strcmp(path, "/") == 0)
    return GT_SUCCESS;

  *id = H5Oopen(file, path, H5P_DEFAULT);
  if (*id < 0) {
    *kind = gt_dataset_broken(file, path, "H5Oopen");
    return GT_SUCCESS;
  }
  H5I_type_t type;
  GT_CALL_HDF5(type = H5Iget_type(*id));
  if (type == H5I_DATASET) {
    *kind = GT_OBJ_DATASET;
  } else {
    *kind = GT_OBJ_OTHER;
    GT_CALL(gt_h5_close(id));
  }
  return GT_SUCCESS;
}

/* A dataset (or a group on its path) whose HDF5 metadata does not read:
 * bad input naming the file (the HDF5 error is the current one). */
static int gt_dataset_damaged(const char *file, const char *dpath)
{
  return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                       "'%s:%s' cannot be read: the file's HDF5 metadata on that path (an "
                       "object header or a group) is damaged; make the file again with "
                       "'gridtrain ingest'", file, dpath);
}

static int gt_dataset_set_name(gt_dataset *ds, const char *file, const char *dpath)
{
  size_t size = strlen(file) + strlen(dpath) + 2;
  ds->name = malloc(size);
  GT_CHECK_ALLOC(ds->name, size);
  snprintf(ds->name, size, "%s:%s", file, dpath);
  ds->file_len = strlen(file);
  return GT_SUCCESS;
}

/* Every rank: open the file (with the MPI-IO driver on comm; comm
 * MPI_COMM_NULL: alone, through the POSIX driver) and the dataset and
 * validate them. The file is the same everywhere, so every rank reaches the
 * same verdict. */
static int gt_dataset_open_local(gt_dataset *ds, const char *file, const char *dpath,
                                 const char *default_dset, MPI_Comm comm)
{
  hid_t *ids = ds->ids;
  const int opened = comm == MPI_COMM_NULL
                         ? gt_h5_open_posix(file, &ids[GT_DS_FILE])
                         : gt_h5_open_mpio(file, H5F_ACC_RDONLY, comm, &ids[GT_DS_FILE]);
  if (opened != GT_SUCCESS)
    return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                         "dataset file '%s' is not a readable HDF5 file (truncated or "
                         "damaged; make it again with 'gridtrain ingest')", file);

  gt_obj_kind kind = GT_OBJ_MISSING;
  if (dpath) {
    GT_CALL(gt_dataset_find(ids[GT_DS_FILE], dpath, &kind, &ids[GT_DS_DSET]));
    if (kind == GT_OBJ_DAMAGED)
      return gt_dataset_damaged(file, dpath);
    GT_CHECK(kind != GT_OBJ_DANGLING, GT_ERR_INPUT,
             "'%s:%s' is a link to nothing (a dangling soft or external link)", file, dpath);
    GT_CHECK(kind != GT_OBJ_MISSING, GT_ERR_INPUT,
             "'%s' has no dataset '%s'; list its contents with 'h5ls -r %s'",
             file, dpath, file);
    GT_CHECK(kind == GT_OBJ_DATASET, GT_ERR_INPUT,
             "'%s:%s' is not a dataset (a group?); name a dataset as '%s:/path'",
             file, dpath, file);
  } else {
    const char *tried[2];
    int ntried = 0;
    if (default_dset && default_dset[0] && strcmp(default_dset, "/tokens") != 0)
      tried[ntried++] = default_dset;
    tried[ntried++] = "/tokens";
    for (int i = 0; i < ntried && kind != GT_OBJ_DATASET; i++) {
      GT_CALL(gt_dataset_find(ids[GT_DS_FILE], tried[i], &kind, &ids[GT_DS_DSET]));
      dpath = tried[i];
      if (kind == GT_OBJ_DAMAGED)
        return gt_dataset_damaged(file, dpath);
      GT_CHECK(kind != GT_OBJ_DANGLING, GT_ERR_INPUT,
               "'%s:%s' is a link to nothing (a dangling soft or external link)", file, dpath);
    }
    if (ntried == 2)
      GT_CHECK(kind == GT_OBJ_DATASET, GT_ERR_INPUT,
               "'%s' has no dataset '%s' or '/tokens'; name one as '%s:/path' "
               "('h5ls -r %s' lists them)", file, tried[0], file, file);
    GT_CHECK(kind == GT_OBJ_DATASET, GT_ERR_INPUT,
             "'%s' has no dataset '/tokens'; name one as '%s:/path' "
             "('h5ls -r %s' lists them)", file, file, file);
  }
  GT_CALL(gt_dataset_set_name(ds, file, dpath));

  GT_H5_ID(ids[GT_DS_FSPACE], H5Dget_space(ids[GT_DS_DSET]));
  int ndims;
  GT_CALL_HDF5(ndims = H5Sget_simple_extent_ndims(ids[GT_DS_FSPACE]));
  GT_CHECK(ndims == 1, GT_ERR_INPUT,
           "'%s' has %d dimensions; token data must be a 1-D dataset", ds->name, ndims);
  hsize_t ntokens = 0;
  GT_CALL_HDF5(H5Sget_simple_extent_dims(ids[GT_DS_FSPACE], &ntokens, NULL));

  GT_H5_ID(ids[GT_DS_TYPE], H5Dget_type(ids[GT_DS_DSET]));
  H5T_class_t cls;
  GT_CALL_HDF5(cls = H5Tget_class(ids[GT_DS_TYPE]));
  const size_t tsize = H5Tget_size(ids[GT_DS_TYPE]); /* 0: an error */
  GT_CALL(gt_h5_close(&ids[GT_DS_TYPE]));
  GT_CHECK(cls == H5T_INTEGER, GT_ERR_INPUT,
           "'%s' does not hold integers; token data must be an integer dataset", ds->name);
  /* A damaged type can claim any size, and HDF5 sizes its read buffers by it. */
  GT_CHECK(tsize >= 1 && tsize <= 8, GT_ERR_INPUT,
           "'%s' holds integers of %zu bytes; token data must be integers of 1 to 8 bytes "
           "(the file may be damaged)", ds->name, tsize);

  bool found = false;
  long long vocab = 0;
  GT_CALL(gt_h5_read_attr_i64(ids[GT_DS_DSET], "vocab_size", ds->name, &found, &vocab));
  if (!found) /* a file id stands for its root group */
    GT_CALL(gt_h5_read_attr_i64(ids[GT_DS_FILE], "vocab_size", file, &found, &vocab));
  GT_CHECK(found, GT_ERR_INPUT,
           "'%s' has no vocab_size attribute (on the dataset or the root group); "
           "add one, or make the file with 'gridtrain ingest text'", ds->name);
  GT_CHECK(vocab >= 1 && vocab <= INT32_MAX, GT_ERR_INPUT,
           "'%s' has vocab_size %lld; it must be in [1, %d]", ds->name, vocab, INT32_MAX);
  GT_CHECK(ntokens >= 2, GT_ERR_INPUT,
           "'%s' has %llu tokens; a dataset needs at least 2", ds->name,
           (unsigned long long)ntokens);
  ds->ntokens = (long long)ntokens;
  ds->vocab = (long)vocab;
  return GT_SUCCESS;
}

static int gt_dataset_alloc(gt_dataset **ds)
{
  *ds = calloc(1, sizeof **ds);
  GT_CHECK_ALLOC(*ds, sizeof **ds);
  for (int i = 0; i < GT_DS_N; i++)
    (*ds)->ids[i] = H5I_INVALID_HID;
  return GT_SUCCESS;
}

static int gt_dataset_free(gt_dataset *ds, int status)
{
  status = gt_h5_close_all(status, GT_DS_N, ds->ids);
  free(ds->wide);
  free(ds->picks);
  free(ds->name);
  free(ds);
  return status;
}

int gt_dataset_open(const char *spec, const char *default_dset, MPI_Comm comm,
                    gt_dataset **out)
{
  GT_ASSERT(spec != NULL && out != NULL);
  *out = NULL;
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));

  char *file = NULL;
  const char *dpath = NULL;
  gt_dataset *ds = NULL;
  int status = gt_h5_quiet();
  if (status == GT_SUCCESS)
    status = gt_dataset_parse_spec(spec, &file, &dpath);
  if (status == GT_SUCCESS && rank == 0)
    status = gt_dataset_check_file(file);
  status = gt_error_agree(status, comm);
  if (status == GT_SUCCESS) {
    status = gt_dataset_alloc(&ds);
    if (status == GT_SUCCESS)
      status = gt_dataset_open_local(ds, file, dpath, default_dset, comm);
    /* A failure on one rank alone must not leave the others waiting. */
    status = gt_error_agree(status, comm);
  }
  free(file);
  if (status != GT_SUCCESS) {
    if (ds)
      gt_dataset_free(ds, status);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *out = ds;
  return GT_SUCCESS;
}

int gt_dataset_open_posix(const gt_dataset *ds, gt_dataset **out)
{
  GT_ASSERT(ds != NULL && out != NULL);
  *out = NULL;
  char *file = strdup(ds->name);
  GT_CHECK_ALLOC(file, strlen(ds->name) + 1);
  file[ds->file_len] = '\0';
  const char *dpath = file + ds->file_len + 1;
  gt_dataset *copy = NULL;
  int status = gt_dataset_alloc(&copy);
  if (status == GT_SUCCESS)
    status = gt_dataset_open_local(copy, file, dpath, NULL, MPI_COMM_NULL);
  free(file);
  if (status != GT_SUCCESS) {
    if (copy)
      gt_dataset_free(copy, status);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *out = copy;
  return GT_SUCCESS;
}

int gt_dataset_close(gt_dataset **ds)
{
  if (!ds || !*ds)
    return GT_SUCCESS;
  gt_dataset *victim = *ds;
  *ds = NULL;
  GT_CALL(gt_dataset_free(victim, GT_SUCCESS));
  return GT_SUCCESS;
}

// ---- queries ----------------------------------------------------------------

const char *gt_dataset_name(const gt_dataset *ds) { return ds->name; }
long long gt_dataset_ntokens(const gt_dataset *ds) { return ds->ntokens; }
long gt_dataset_vocab(const gt_dataset *ds) { return ds->vocab; }

long long gt_dataset_nseq(const gt_dataset *ds, int T)
{
  return T >= 1 ? (ds->ntokens - 1) / T : 0;
}

// ---- reading ------------------------------------------------------------------

static int gt_ds_pick_cmp(const void *a, const void *b)
{
  const gt_ds_pick *x = a, *y = b;
  if (x->seq != y->seq)
    return x->seq < y->seq ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* Room for count picks and a read of tokens elements. */
static int gt_dataset_room(gt_dataset *ds, int count, hsize_t tokens)
{
  if (count > ds->npicks) {
    gt_ds_pick *p = realloc(ds->picks, (size_t)count * sizeof *p);
    GT_CHECK_ALLOC(p, (size_t)count * sizeof *p);
    ds->picks = p;
    ds->npicks = count;
  }
  if (tokens > ds->mem_cap) {
    hid_t *ids = ds->ids;
    GT_CALL(gt_h5_close(&ids[GT_DS_MSPACE]));
    ds->mem_cap = 0;
    free(ds->wide);
    ds->wide = malloc((size_t)tokens * sizeof *ds->wide);
    GT_CHECK_ALLOC(ds->wide, (size_t)tokens * sizeof *ds->wide);
    GT_H5_ID(ids[GT_DS_MSPACE], H5Screate_simple(1, &tokens, NULL));
    ds->mem_cap = tokens;
  }
  return GT_SUCCESS;
}

/* Tokens [start, start + n) into ds->wide. */
static int gt_dataset_read_run(gt_dataset *ds, hsize_t start, hsize_t n)
{
  hid_t *ids = ds->ids;
  const hsize_t zero = 0;
  GT_CALL_HDF5(H5Sselect_hyperslab(ids[GT_DS_MSPACE], H5S_SELECT_SET, &zero, NULL, &n, NULL));
  GT_CALL_HDF5(H5Sselect_hyperslab(ids[GT_DS_FSPACE], H5S_SELECT_SET, &start, NULL, &n, NULL));
  /* read as 64-bit integers: HDF5 clamps what does not fit the memory
   * type, and a token of 2^40 must not be reported as 2^31 - 1 */
  if (H5Dread(ids[GT_DS_DSET], H5T_NATIVE_INT64, ids[GT_DS_MSPACE], ids[GT_DS_FSPACE],
              H5P_DEFAULT, ds->wide) < 0) {
    /* Name the data and keep HDF5's reason (a checksum error, an I/O error). */
    char why[640];
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    snprintf(why, sizeof why, "%s", gt_error_message());
    return GT_ERROR(GT_ERR_INPUT, /* a damaged dataset is bad input, exit 2 */
                    "cannot read tokens [%llu, %llu) of '%s': %s; if the file is "
                    "damaged, make it again with 'gridtrain ingest'",
                    (unsigned long long)start, (unsigned long long)(start + n), ds->name, why);
  }
  return GT_SUCCESS;
}

int gt_dataset_read_samples(gt_dataset *ds, int T, bool shuffle,
                            unsigned long long seed, long long first, int count,
                            long vocab_limit, int32_t *out)
{
  GT_ASSERT(ds != NULL && out != NULL && T >= 1 && T < INT_MAX && first >= 0 && count >= 0);
  const long long nseq = gt_dataset_nseq(ds, T);
  GT_CHECK(nseq >= 1, GT_ERR_INPUT,
           "'%s' has %lld tokens, too few for one sequence of %d; use a shorter "
           "sequence length or more data", ds->name, ds->ntokens, T + 1);
  if (count == 0)
    return GT_SUCCESS;
  const int len = T + 1;
  /* sequences per read: a run of adjacent ones shares its boundary tokens */
  const long long per_read = (long long)(GT_DS_MAX_READ - 1) / T > 1
                                 ? (long long)(GT_DS_MAX_READ - 1) / T
                                 : 1;
  const long long most = count < per_read ? count : per_read;
  GT_CALL(gt_dataset_room(ds, count, (hsize_t)most * (hsize_t)T + 1));
  gt_ds_pick *picks = ds->picks;
  for (int i = 0; i < count; i++) {
    const long long g = first + i;
    picks[i] = (gt_ds_pick){shuffle ? gt_order_sequence(seed, nseq, g) : g % nseq, i};
  }
  qsort(picks, (size_t)count, sizeof *picks, gt_ds_pick_cmp);

  /* the vocabulary check reports the first bad token in sample order */
  int bad_i = INT_MAX;
  long long bad_token = 0;
  unsigned long long bad_pos = 0;
  for (int k = 0; k < count;) {
    int j = k + 1;
    while (j < count && j - k < per_read && picks[j].seq == picks[j - 1].seq + 1)
      j++;
    const hsize_t start = (hsize_t)picks[k].seq * (hsize_t)T;
    GT_CALL(gt_dataset_read_run(ds, start, (hsize_t)(j - k) * (hsize_t)T + 1));
    for (int m = k; m < j; m++) {
      const size_t off = (size_t)(picks[m].seq - picks[k].seq) * (size_t)T;
      const int64_t *src = ds->wide + off;
      int32_t *row = out + (size_t)picks[m].i * (size_t)len;
      for (int t = 0; t < len; t++) {
        if ((src[t] < 0 || src[t] >= vocab_limit) && picks[m].i < bad_i) {
          bad_i = picks[m].i;
          bad_token = (long long)src[t];
          bad_pos = (unsigned long long)(start + off + (hsize_t)t);
        }
        row[t] = (int32_t)src[t];
      }
    }
    k = j;
  }
  GT_CHECK(bad_i == INT_MAX, GT_ERR_INPUT,
           "'%s' holds token %lld%s at position %llu, outside the model's vocabulary "
           "[0, %ld); use data made for this vocabulary or raise vocab_size",
           ds->name, bad_token, bad_token == INT64_MAX ? " or more" : "", bad_pos,
           vocab_limit);
  return GT_SUCCESS;
}
