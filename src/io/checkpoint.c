/*
 * checkpoint.c - checkpoint files in parallel HDF5 and the directory that
 * holds them (see checkpoint.h and docs/checkpoints.md): verification and
 * export, the directory (publishing, pruning, candidates) and saving. The
 * file's writer is ckpt_write.c, its reader ckpt_read.c.
 */
#define _GNU_SOURCE /* strdup, fsync on older headers */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/bar.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/log.h"
#include "gridtrain/path.h"
#include "ckpt_internal.h"
#include "h5util.h"

void gt_ckpt_meta_free(gt_ckpt_meta *meta)
{
  free(meta->deck);
  meta->deck = NULL;
}

int gt_ckpt_meta_shape(const gt_ckpt_meta *m, const char *path, gt_gpt_shape *shape)
{
  *shape = (gt_gpt_shape){m->layers, m->heads, m->dim, m->seq_len, m->vocab,
                          .arch = GT_MODEL_GPT};
  if (m->deck && m->deck[0]) {
    gt_config *cfg = malloc(sizeof *cfg);
    GT_CHECK_ALLOC(cfg, sizeof *cfg);
    gt_config_defaults(cfg);
    const int status = gt_config_parse(cfg, m->deck, path, 0, NULL);
    if (status == GT_SUCCESS)
      *shape = gt_gpt_shape_config(cfg);
    free(cfg);
    if (status != GT_SUCCESS)
      return gt_error_wrap(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                           "checkpoint %s: its deck does not parse", path);
  }
  const long have[5] = {shape->layers, shape->heads, shape->dim, shape->max_seq, shape->vocab};
  const long want[5] = {m->layers, m->heads, m->dim, m->seq_len, m->vocab};
  const char *key[5] = {"layers", "heads", "dim", "seq_len", "vocab"};
  for (int k = 0; k < 5; k++)
    GT_CHECK(have[k] == want[k], GT_ERR_INPUT,
             "checkpoint %s: its deck has [model] %s = %ld but model_shape has %ld; the file "
             "is damaged", path, key[k], have[k], want[k]);
  GT_CHECK(m->layers > 0 && m->heads > 0 && m->dim > 0 && m->seq_len > 0 && m->vocab > 0 &&
               m->dim % m->heads == 0,
           GT_ERR_INPUT, "checkpoint %s has an invalid model shape", path);
  return GT_SUCCESS;
}

// ---- verification and export (serial) ------------------------------------------------------

typedef struct {
  const char *path;
  const char *group;
  long datasets;
  double bytes;
  float *buf;
  size_t cap;
  hid_t out; /* export target, or H5I_INVALID_HID */
  unsigned long long file_bytes; /* the file's size: no dataset stores more */
  int status;
  int format;
  uint32_t *stored; /* format 3: checksums of the dataset */
  size_t scap;
  int ndim;         /* the shape of the dataset read last */
  hsize_t dims[GT_TENSOR_MAX_DIMS];
} gt_visit;

enum { GT_V_DSET, GT_V_SPACE, GT_V_DCPL, GT_V_OSPACE, GT_V_ODSET, GT_V_N };

static int gt_ckpt_visit_dataset_in(hid_t group, const char *name, gt_visit *v, hid_t ids[])
{
  GT_H5_ID(ids[GT_V_DSET], H5Dopen2(group, name, H5P_DEFAULT));
  GT_H5_ID(ids[GT_V_SPACE], H5Dget_space(ids[GT_V_DSET]));
  hssize_t npoints;
  GT_CALL_HDF5(npoints = H5Sget_simple_extent_npoints(ids[GT_V_SPACE]));
  int ndim;
  GT_CALL_HDF5(ndim = H5Sget_simple_extent_ndims(ids[GT_V_SPACE]));
  v->ndim = ndim <= GT_TENSOR_MAX_DIMS ? ndim : -1;
  if (v->ndim >= 0)
    GT_CALL_HDF5(H5Sget_simple_extent_dims(ids[GT_V_SPACE], v->dims, NULL));
  char full[GT_PARAM_NAME_MAX + 16];
  snprintf(full, sizeof full, "%s/%s", v->group, name);
  /* Every dataset is float32, written whole and uncompressed: one whose
   * shape asks for more than it stores, or than the file holds, is damaged,
   * and is refused before a buffer is allocated for it. */
  const unsigned long long stored = H5Dget_storage_size(ids[GT_V_DSET]);
  GT_CHECK((unsigned long long)npoints <= stored / sizeof(float) &&
               (unsigned long long)npoints <= v->file_bytes / sizeof(float),
           GT_ERR_HDF5, "checkpoint %s: %s has %lld values but stores %llu bytes; the file is "
           "damaged", v->path, full, (long long)npoints, stored);
  if (v->format < 3) {
    GT_H5_ID(ids[GT_V_DCPL], H5Dget_create_plist(ids[GT_V_DSET]));
    unsigned flags, config;
    size_t nelem = 0;
    GT_CHECK(H5Pget_filter_by_id2(ids[GT_V_DCPL], H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL,
                                  0, NULL, &config) >= 0,
             GT_ERR_HDF5, "checkpoint %s: %s has no Fletcher32 checksum", v->path, full);
    H5Eclear2(H5E_DEFAULT);
  }
  GT_CALL(gt_ckpt_grow((void **)&v->buf, &v->cap, (size_t)npoints, sizeof(float)));
  if (H5Dread(ids[GT_V_DSET], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->buf) < 0) {
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "checkpoint %s: %s is damaged", v->path, full);
  }
  if (v->format >= 3) {
    const size_t nsums = gt_ckpt_nsums((size_t)npoints);
    bool found;
    GT_CALL(gt_ckpt_grow((void **)&v->stored, &v->scap, nsums, sizeof(uint32_t)));
    GT_CALL(gt_h5_read_attr_u32s(ids[GT_V_DSET], "fletcher32", full, (int)nsums, &found,
                                 v->stored));
    GT_CHECK(found, GT_ERR_HDF5, "checkpoint %s: %s has no fletcher32 checksums", v->path,
             full);
    GT_CALL(gt_ckpt_check_sums(v->path, full, v->buf, (size_t)npoints, 0, nsums, v->stored));
  }
  if (strcmp(v->group, "/rank") != 0) { /* the ranks' own state is not a tensor's */
    GT_CALL(gt_ckpt_check_finite(v->path, full, v->buf, (size_t)npoints, 0));
    v->datasets++;
  }
  v->bytes += (double)npoints * sizeof(float);
  if (v->out >= 0) {
    GT_H5_ID(ids[GT_V_ODSET], H5Dcreate2(v->out, name, H5T_IEEE_F32LE, ids[GT_V_SPACE],
                                         H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    GT_CALL_HDF5(H5Dwrite(ids[GT_V_ODSET], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                          v->buf));
  }
  return GT_SUCCESS;
}

static herr_t gt_ckpt_visit_link(hid_t group, const char *name, const H5L_info_t *info,
                                 void *data)
{
  (void)info;
  gt_visit *v = data;
  hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) {
    v->status = gt_error_hdf5("H5Oopen", __FILE__, __LINE__, __func__);
    return -1;
  }
  const H5I_type_t type = H5Iget_type(obj);
  H5Oclose(obj);
  if (type != H5I_DATASET)
    return 0;
  hid_t ids[GT_V_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID,
                       H5I_INVALID_HID};
  int status = gt_ckpt_visit_dataset_in(group, name, v, ids);
  v->status = gt_h5_close_all(status, GT_V_N, ids);
  gt_bar_add(1);
  return v->status == GT_SUCCESS ? 0 : -1;
}

/* Read every dataset of group `name`. */
static int gt_ckpt_visit_group(hid_t file, const char *name, gt_visit *v, hid_t *group)
{
  v->group = name;
  GT_H5_ID(*group, H5Gopen2(file, name, H5P_DEFAULT));
  hsize_t idx = 0;
  /* Native order: in increasing order HDF5 1.10 first copies the links of a
   * large (dense) group into a table, and when a damaged link stops that
   * half-way it frees the entries it never filled (a crash, found by
   * tests/fuzz/fuzz_ckpt.c). Native order reads the links in place. */
  herr_t r = H5Literate(*group, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, gt_ckpt_visit_link, v);
  if (v->status != GT_SUCCESS)
    return v->status;
  GT_CALL_HDF5(r);
  GT_CALL(gt_h5_close(group));
  return GT_SUCCESS;
}

/* Read every dataset of the given groups (and, for all of them, of /rank
 * when there is one); export copies /model's into out. */
static int gt_ckpt_visit_in(hid_t file, gt_visit *v, int ngroups, hid_t *group)
{
  hsize_t items = 0; /* for the progress bar: the datasets of the groups */
  H5G_info_t info;
  for (int k = 0; k < ngroups && gt_bar_enabled(); k++)
    if (H5Gget_info_by_name(file, gt_kind_group[k], &info, H5P_DEFAULT) >= 0)
      items += info.nlinks;
  H5Eclear2(H5E_DEFAULT);
  gt_bar_begin(v->out >= 0 ? "ckpt convert" : "ckpt verify", (double)items, GT_BAR_ITEMS);
  for (int k = 0; k < ngroups; k++)
    GT_CALL(gt_ckpt_visit_group(file, gt_kind_group[k], v, group));
  if (ngroups == GT_NKINDS && H5Lexists(file, "/rank", H5P_DEFAULT) > 0)
    GT_CALL(gt_ckpt_visit_group(file, "/rank", v, group));
  H5Eclear2(H5E_DEFAULT);
  return GT_SUCCESS;
}

/* Open checkpoint path serially and learn its size and format into v. */
static int gt_ckpt_visit_open(const char *path, gt_visit *v, hid_t *file)
{
  if (gt_h5_open_mpio(path, H5F_ACC_RDONLY, MPI_COMM_SELF, file) != GT_SUCCESS)
    return gt_ckpt_open_error(path);
  struct stat sb;
  v->file_bytes = stat(path, &sb) == 0 ? (unsigned long long)sb.st_size : ~0ULL;
  gt_ckpt_meta meta = {0};
  int status = gt_ckpt_read_meta_in(*file, path, &meta);
  v->format = meta.format;
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  GT_CALL(gt_ckpt_read_format(*file, path, &v->format));
  return GT_SUCCESS;
}

static int gt_ckpt_visit(const char *path, gt_visit *v, int ngroups)
{
  hid_t file = H5I_INVALID_HID, group = H5I_INVALID_HID;
  int status = gt_ckpt_visit_open(path, v, &file);
  if (status == GT_SUCCESS)
    status = gt_ckpt_visit_in(file, v, ngroups, &group);
  gt_bar_end();
  hid_t ids[2] = {file, group};
  status = gt_h5_close_all(status, 2, ids);
  free(v->buf);
  v->buf = NULL;
  free(v->stored);
  v->stored = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_ckpt_verify_file(const char *path, long *datasets, double *bytes)
{
  gt_visit v = {.path = path, .out = H5I_INVALID_HID};
  int status = gt_ckpt_visit(path, &v, GT_NKINDS);
  *datasets = v.datasets;
  *bytes = v.bytes;
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- one tensor at a time (serial) ---------------------------------------------------------

struct gt_ckpt_weights {
  gt_visit v;
  hid_t file, group;
};

int gt_ckpt_weights_open(const char *path, gt_ckpt_weights **reader)
{
  *reader = NULL;
  gt_ckpt_weights *r = calloc(1, sizeof *r);
  GT_CHECK_ALLOC(r, sizeof *r);
  r->v = (gt_visit){.path = path, .group = gt_kind_group[GT_KIND_MODEL],
                    .out = H5I_INVALID_HID};
  r->file = r->group = H5I_INVALID_HID;
  int status = gt_ckpt_visit_open(path, &r->v, &r->file);
  if (status == GT_SUCCESS && H5Lexists(r->file, r->v.group, H5P_DEFAULT) <= 0)
    status = GT_ERROR(GT_ERR_INPUT, "checkpoint %s has no %s group", path, r->v.group);
  if (status == GT_SUCCESS && (r->group = H5Gopen2(r->file, r->v.group, H5P_DEFAULT)) < 0)
    status = gt_error_hdf5("H5Gopen2", __FILE__, __LINE__, __func__);
  *reader = r;
  if (status != GT_SUCCESS)
    gt_ckpt_weights_close(reader);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_ckpt_weights_get(gt_ckpt_weights *r, const char *name, int ndim, const long *dims,
                       const float **values)
{
  *values = NULL;
  const char *path = r->v.path, *group = r->v.group;
  GT_CHECK(H5Lexists(r->group, name, H5P_DEFAULT) > 0, GT_ERR_INPUT,
           "checkpoint %s has no %s/%s", path, group, name);
  hid_t ids[GT_V_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID,
                       H5I_INVALID_HID};
  const int status = gt_ckpt_visit_dataset_in(r->group, name, &r->v, ids);
  GT_CALL(gt_h5_close_all(status, GT_V_N, ids));
  bool same = r->v.ndim == ndim;
  for (int d = 0; same && d < ndim; d++)
    same = r->v.dims[d] == (hsize_t)dims[d];
  GT_CHECK(same, GT_ERR_INPUT, "checkpoint %s: %s/%s does not have the model's shape", path,
           group, name);
  *values = r->v.buf;
  return GT_SUCCESS;
}

int gt_ckpt_weights_close(gt_ckpt_weights **reader)
{
  gt_ckpt_weights *r = *reader;
  if (!r)
    return GT_SUCCESS;
  hid_t ids[2] = {r->file, r->group}; /* closed last to first */
  const int status = gt_h5_close_all(GT_SUCCESS, 2, ids);
  free(r->v.buf);
  free(r->v.stored);
  free(r);
  *reader = NULL;
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_ckpt_export_in(const char *path, const char *out, hid_t *file)
{
  GT_H5_ID(*file, H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  gt_ckpt_meta meta;
  GT_CALL(gt_ckpt_read_meta(path, MPI_COMM_SELF, &meta));
  const long long model[5] = {meta.layers, meta.heads, meta.dim, meta.seq_len, meta.vocab};
  const char *names[5] = {"layers", "heads", "dim", "seq_len", "vocab"};
  int status = GT_SUCCESS;
  for (int i = 0; i < 5 && status == GT_SUCCESS; i++)
    status = gt_h5_write_attr_i64(*file, names[i], model[i]);
  if (status == GT_SUCCESS)
    status = gt_h5_write_attr_i64(*file, "step", meta.step);
  if (status == GT_SUCCESS)
    status = gt_h5_write_attr_str(*file, "format", "gridtrain weights");
  if (status == GT_SUCCESS)
    status = gt_h5_write_attr_str(*file, "code_version", meta.code_version);
  gt_ckpt_meta_free(&meta);
  GT_CALL(status);
  gt_visit v = {.path = path, .out = *file};
  GT_CALL(gt_ckpt_visit(path, &v, 1));
  return GT_SUCCESS;
}

int gt_ckpt_export_weights(const char *path, const char *out)
{
  hid_t file = H5I_INVALID_HID;
  int status = gt_ckpt_export_in(path, out, &file);
  GT_CALL(gt_h5_close_all(status, 1, &file));
  return GT_SUCCESS;
}

// ---- the directory ----------------------------------------------------------------------------

int gt_ckpt_path(const char *dir, long step, char *path, size_t size)
{
  int n = snprintf(path, size, "%s/step_%08ld.h5", dir, step);
  GT_CHECK(n > 0 && (size_t)n + 4 < size, GT_ERR_INPUT,
           "[checkpoint] dir '%s' is too long", dir);
  return GT_SUCCESS;
}

/* mkdir -p */
static int gt_mkdirs(const char *dir)
{
  char buf[GT_PATH_MAX];
  GT_CHECK(strlen(dir) < sizeof buf, GT_ERR_INPUT, "[checkpoint] dir '%s' is too long", dir);
  const int err = gt_path_mkdirs(dir, buf, sizeof buf);
  GT_CHECK(err == 0, GT_ERR_INPUT, "cannot create checkpoint directory %s ([checkpoint] dir): %s",
           buf, strerror(err));
  struct stat sb;
  GT_CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), GT_ERR_INPUT,
           "[checkpoint] dir %s is not a directory", dir);
  GT_CHECK(access(dir, W_OK) == 0, GT_ERR_INPUT,
           "cannot write to checkpoint directory %s ([checkpoint] dir): %s", dir,
           strerror(errno));
  return GT_SUCCESS;
}

int gt_ckpt_dir_prepare(const char *dir, MPI_Comm comm)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  int status = rank == 0 ? gt_mkdirs(dir) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, comm));
  return GT_SUCCESS;
}

int gt_fsync_path(const char *path, bool directory)
{
  int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  GT_CHECK(fd >= 0, GT_ERR_SYSTEM, "cannot open %s to sync it: %s", path, strerror(errno));
  int r = fsync(fd);
  int err = errno;
  close(fd);
  GT_CHECK(r == 0, GT_ERR_SYSTEM, "fsync of %s failed: %s", path, strerror(err));
  return GT_SUCCESS;
}

/* Step number of a "step_NNNNNNNN.h5" name (suffix: ".h5" or ".h5.tmp"), or
 * -1. */
static long gt_ckpt_step_of(const char *name, const char *suffix)
{
  if (strncmp(name, "step_", 5) != 0)
    return -1;
  char *end;
  errno = 0;
  long step = strtol(name + 5, &end, 10);
  if (errno || end == name + 5 || step < 0 || strcmp(end, suffix) != 0)
    return -1;
  return step;
}

static int gt_cmp_long_desc(const void *a, const void *b)
{
  long x = *(const long *)a, y = *(const long *)b;
  return (x < y) - (x > y);
}

/* The step numbers of dir's complete checkpoints, newest first. */
static int gt_ckpt_list_steps(const char *dir, long **steps, int *n)
{
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return GT_SUCCESS;
  int cap = 0, status = GT_SUCCESS;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long s = gt_ckpt_step_of(e->d_name, ".h5");
    if (s < 0)
      continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      long *bigger = realloc(*steps, sizeof(long) * (size_t)cap);
      if (!bigger) {
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory listing %s", dir);
        break;
      }
      *steps = bigger;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  GT_CALL(status);
  if (*n > 1)
    qsort(*steps, (size_t)*n, sizeof(long), gt_cmp_long_desc);
  return GT_SUCCESS;
}

/* Remove step files beyond the newest `keep` up to `newest` (the one just
 * written) and leftover .tmp files of writes that never finished. Files of
 * later steps (left by a run that was rolled back to an older checkpoint)
 * are not counted and not touched; they are replaced as the run reaches
 * their steps. */
static int gt_ckpt_prune(const char *dir, int keep, long newest)
{
  long *steps;
  int n;
  GT_CALL(gt_ckpt_list_steps(dir, &steps, &n));
  char path[GT_PATH_MAX];
  int status = GT_SUCCESS, kept = 0;
  for (int i = 0; i < n && status == GT_SUCCESS; i++) {
    if (steps[i] > newest || keep <= 0 || ++kept <= keep)
      continue;
    status = gt_ckpt_path(dir, steps[i], path, sizeof path);
    if (status == GT_SUCCESS && unlink(path) != 0 && errno != ENOENT)
      status = GT_ERROR(GT_ERR_SYSTEM, "cannot remove old checkpoint %s: %s", path,
                        strerror(errno));
  }
  free(steps);
  GT_CALL(status);
  DIR *d = opendir(dir);
  GT_CHECK(d != NULL, GT_ERR_SYSTEM, "cannot list %s: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long s = gt_ckpt_step_of(e->d_name, ".h5.tmp");
    if (s >= 0 && s < newest) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path); /* best effort: a leftover costs only space */
    }
  }
  closedir(d);
  return GT_SUCCESS;
}

/* Write `text` to the new file `path` and fsync it; on failure remove it. */
static int gt_write_synced(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  GT_CHECK(f != NULL, GT_ERR_SYSTEM, "cannot create %s: %s", path, strerror(errno));
  int ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  if (!ok)
    unlink(path);
  GT_CHECK(ok, GT_ERR_SYSTEM, "cannot write %s: %s", path, strerror(err));
  return GT_SUCCESS;
}

/* How far gt_ckpt_publish_in got: what a failure has to undo. */
enum { GT_PUB_NONE, GT_PUB_RENAMED, GT_PUB_LATEST };

static int gt_ckpt_publish_in(const char *dir, const char *tmp, const char *path,
                              const char *latest, const char *latest_tmp, int *stage)
{
  GT_CALL(gt_fsync_path(tmp, false));
  /* latest.tmp first: on a full disk this is what fails, while nothing has a
   * new name yet. */
  char line[GT_PATH_MAX];
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  snprintf(line, sizeof line, "%s\n", base);
  GT_CALL(gt_write_synced(latest_tmp, line));
  GT_CHECK(rename(tmp, path) == 0, GT_ERR_SYSTEM, "cannot rename %s to %s: %s", tmp, path,
           strerror(errno));
  *stage = GT_PUB_RENAMED;
  GT_CALL(gt_fsync_path(dir, true));
  GT_CHECK(rename(latest_tmp, latest) == 0, GT_ERR_SYSTEM, "cannot rename %s to %s: %s",
           latest_tmp, latest, strerror(errno));
  *stage = GT_PUB_LATEST;
  GT_CALL(gt_fsync_path(dir, true));
  return GT_SUCCESS;
}

/* Rank 0, after every rank has closed the .tmp file: make it durable, give
 * it its name, point `latest` at it, then prune. A failure on the way
 * undoes what was done (best effort; the first error is the one reported),
 * so that the directory is as before the write: the earlier step files and
 * `latest` as they were, neither the new file nor a .tmp left. */
int gt_ckpt_publish(const char *dir, const char *tmp, const char *path, int keep, long step)
{
  char latest[GT_PATH_MAX + 16], latest_tmp[GT_PATH_MAX + 16], before[GT_PATH_MAX] = "";
  snprintf(latest, sizeof latest, "%s/latest", dir);
  snprintf(latest_tmp, sizeof latest_tmp, "%s/latest.tmp", dir);
  FILE *f = fopen(latest, "r");
  const bool had_latest = f != NULL;
  if (f) {
    if (!fgets(before, sizeof before, f))
      before[0] = '\0';
    fclose(f);
  }
  int stage = GT_PUB_NONE;
  int status = gt_ckpt_publish_in(dir, tmp, path, latest, latest_tmp, &stage);
  if (status != GT_SUCCESS) {
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", gt_error_message());
    if (stage == GT_PUB_LATEST) {
      /* `latest` names the new file, whose name may not be durable: put the
       * old text back (the new one's space is free again) or remove it. */
      if (!had_latest)
        unlink(latest);
      else if (gt_write_synced(latest_tmp, before) != GT_SUCCESS ||
               rename(latest_tmp, latest) != 0)
        unlink(latest_tmp);
    }
    if (stage >= GT_PUB_RENAMED)
      unlink(path);
    unlink(tmp);
    unlink(latest_tmp);
    if (stage >= GT_PUB_RENAMED)
      gt_fsync_path(dir, true);
    status = gt_error_set(status, __FILE__, __LINE__, __func__, "%s", cause);
    return gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                         path);
  }
  /* The checkpoint is complete and named: old files that cannot be removed
   * cost space, not data. */
  if (gt_ckpt_prune(dir, keep, step) != GT_SUCCESS) {
    gt_warn("checkpoint %s is written, but pruning %s failed: %s", path, dir,
            gt_error_message());
    gt_error_clear();
  }
  return GT_SUCCESS;
}

int gt_ckpt_save(const char *dir, int keep, const gt_ckpt_meta *meta, const gt_ckpt_state *st,
                 MPI_Comm writers, MPI_Comm comm, char *path, size_t size)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL(gt_ckpt_path(dir, meta->step, path, size));
  GT_CALL(gt_ckpt_dir_prepare(dir, comm));
  char tmp[GT_PATH_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int status = writers != MPI_COMM_NULL
                   ? gt_ckpt_write_file(tmp, path, meta, st, writers, rank)
                   : GT_SUCCESS;
  /* Every writer has closed the file: agree, then publish or clean up. */
  status = gt_error_agree(status, comm);
  if (status != GT_SUCCESS) {
    if (rank == 0)
      unlink(tmp); /* never leave a half-written file under a checkpoint's name */
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  status = rank == 0 ? gt_ckpt_publish(dir, tmp, path, keep, meta->step) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, comm));
  return GT_SUCCESS;
}

int gt_ckpt_candidates(const char *dir, char (**list)[GT_PATH_MAX], int *n,
                       char *latest_problem, size_t problem_size)
{
  *list = NULL;
  *n = 0;
  latest_problem[0] = '\0';
  long *steps;
  int nsteps;
  GT_CALL(gt_ckpt_list_steps(dir, &steps, &nsteps));
  char (*out)[GT_PATH_MAX] = calloc((size_t)nsteps + 1, sizeof *out);
  if (!out) {
    free(steps);
    GT_CHECK_ALLOC(out, sizeof *out);
  }
  int count = 0;
  /* `latest` first */
  char latest[GT_PATH_MAX + 16], name[GT_PATH_MAX] = "";
  snprintf(latest, sizeof latest, "%s/latest", dir);
  FILE *f = fopen(latest, "r");
  long latest_step = -1;
  if (f) {
    if (fgets(name, sizeof name, f))
      name[strcspn(name, "\r\n")] = '\0';
    fclose(f);
    latest_step = gt_ckpt_step_of(name, ".h5");
    struct stat sb;
    char full[GT_PATH_MAX];
    if (latest_step >= 0 && gt_ckpt_path(dir, latest_step, full, sizeof full) == GT_SUCCESS &&
        stat(full, &sb) == 0) {
      snprintf(out[count++], GT_PATH_MAX, "%s", full);
    } else {
      snprintf(latest_problem, problem_size, "%s names '%s', which is not a checkpoint here",
               latest, name);
      latest_step = -1;
      gt_error_clear();
    }
  }
  for (int i = 0; i < nsteps; i++)
    if (steps[i] != latest_step && gt_ckpt_path(dir, steps[i], out[count], GT_PATH_MAX) ==
                                       GT_SUCCESS)
      count++;
  free(steps);
  *list = out;
  *n = count;
  return GT_SUCCESS;
}
