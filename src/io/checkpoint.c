/*
 * checkpoint.c - checkpoint files in parallel HDF5 and the directory that
 * holds them (see checkpoint.h and docs/checkpoints.md).
 */
#define _GNU_SOURCE /* strdup, fsync on older headers */
#include "gridtrain/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "gridtrain/log.h"
#include "h5util.h"

/* Chunks hold at most this many bytes (whole rows of the first axis). */
#define GT_CKPT_CHUNK_BYTES ((size_t)1 << 20)

/* The three groups of tensors: values and the two AdamW moments. */
enum { GT_KIND_MODEL = 0, GT_KIND_M, GT_KIND_V, GT_NKINDS };
static const char *const gt_kind_group[GT_NKINDS] = {"/model", "/optim/m", "/optim/v"};

void gt_ckpt_meta_free(gt_ckpt_meta *meta)
{
  free(meta->deck);
  meta->deck = NULL;
}

// ---- selections -------------------------------------------------------------------------

/* Select, in the file space of the logical tensor and in the memory space
 * of the rank's local tensor, the entries this rank holds (padding left
 * out). Both selections list the entries in the same (row-major) order. */
static int gt_ckpt_select(const gt_param *t, hid_t fspace, hid_t mspace)
{
  if (t->shard.axis < 0) {
    GT_CALL_HDF5(H5Sselect_all(fspace));
    GT_CALL_HDF5(H5Sselect_all(mspace));
    return GT_SUCCESS;
  }
  const int ax = t->shard.axis;
  const long block = t->full_shape[ax] / t->shard.blocks;
  const long piece = t->value.shape[ax] / t->shard.blocks;
  const long k0 = (long)t->shard.index * piece;
  const long n = block - k0 < piece ? block - k0 : piece; /* real entries per block */
  if (n <= 0) {
    GT_CALL_HDF5(H5Sselect_none(fspace));
    GT_CALL_HDF5(H5Sselect_none(mspace));
    return GT_SUCCESS;
  }
  hsize_t fstart[GT_TENSOR_MAX_DIMS] = {0}, mstart[GT_TENSOR_MAX_DIMS] = {0};
  hsize_t count[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    count[d] = (hsize_t)t->full_shape[d];
  count[ax] = (hsize_t)n;
  for (int b = 0; b < t->shard.blocks; b++) {
    const H5S_seloper_t op = b == 0 ? H5S_SELECT_SET : H5S_SELECT_OR;
    fstart[ax] = (hsize_t)(b * block + k0);
    mstart[ax] = (hsize_t)(b * piece);
    GT_CALL_HDF5(H5Sselect_hyperslab(fspace, op, fstart, NULL, count, NULL));
    GT_CALL_HDF5(H5Sselect_hyperslab(mspace, op, mstart, NULL, count, NULL));
  }
  return GT_SUCCESS;
}

static int gt_ckpt_local_space(const gt_param *t, hid_t *space)
{
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    dims[d] = (hsize_t)t->value.shape[d];
  GT_H5_ID(*space, H5Screate_simple(t->ndim, dims, NULL));
  return GT_SUCCESS;
}

int gt_ckpt_selection_size(const gt_param *t, long long *file_points, long long *mem_points)
{
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    dims[d] = (hsize_t)t->full_shape[d];
  hid_t ids[2] = {H5I_INVALID_HID, H5I_INVALID_HID};
  int status = GT_SUCCESS;
  ids[0] = H5Screate_simple(t->ndim, dims, NULL);
  if (ids[0] < 0)
    status = gt_error_hdf5("H5Screate_simple", __FILE__, __LINE__, __func__);
  if (status == GT_SUCCESS)
    status = gt_ckpt_local_space(t, &ids[1]);
  if (status == GT_SUCCESS)
    status = gt_ckpt_select(t, ids[0], ids[1]);
  if (status == GT_SUCCESS) {
    *file_points = (long long)H5Sget_select_npoints(ids[0]);
    *mem_points = (long long)H5Sget_select_npoints(ids[1]);
  }
  GT_CALL(gt_h5_close_all(status, 2, ids));
  return GT_SUCCESS;
}

static float *gt_ckpt_kind_data(const gt_ckpt_state *st, const gt_param *t, int kind)
{
  float *values = st->values ? st->values : st->params->values;
  float *base = kind == GT_KIND_MODEL ? values : kind == GT_KIND_M ? st->m : st->v;
  return base + t->offset;
}

/* The host waits for the copy just queued between the device and the
 * staging buffer (HDF5 reads the staging buffer next, or it is refilled). */
static int gt_ckpt_copy_done(gt_backend *be)
{
  gt_device_event *ev;
  GT_CALL(be->ops->event_create(be, &ev));
  int status = be->ops->event_record(be, ev, NULL);
  if (status == GT_SUCCESS)
    status = be->ops->event_wait(be, ev);
  be->ops->event_destroy(be, ev);
  GT_CALL(status);
  return GT_SUCCESS;
}

static size_t gt_ckpt_largest_local(const gt_ckpt_state *st)
{
  size_t n = 1;
  for (int i = 0; st->params && i < st->params->count; i++)
    n = st->params->list[i].numel > n ? st->params->list[i].numel : n;
  return n;
}

// ---- writing --------------------------------------------------------------------------------

static int gt_ckpt_write_meta(hid_t file, const gt_ckpt_meta *m)
{
  GT_CALL(gt_h5_write_attr_i64(file, "format_version", m->format));
  GT_CALL(gt_h5_write_attr_str(file, "format", "gridtrain checkpoint"));
  GT_CALL(gt_h5_write_attr_i64(file, "step", m->step));
  GT_CALL(gt_h5_write_attr_i64(file, "tokens", m->tokens));
  GT_CALL(gt_h5_write_attr_i64(file, "data_samples", m->samples));
  GT_CALL(gt_h5_write_attr_u64(file, "seed", m->seed));
  GT_CALL(gt_h5_write_attr_f64(file, "loss_scale", m->loss_scale));
  GT_CALL(gt_h5_write_attr_i64(file, "loss_scale_good_steps", m->scale_good_steps));
  GT_CALL(gt_h5_write_attr_i64(file, "skipped_steps", m->skipped_steps));
  GT_CALL(gt_h5_write_attr_str(file, "precision", m->precision[0] ? m->precision : "fp32"));
  GT_CALL(gt_h5_write_attr_f64(file, "loss", m->loss));
  const long long layout[3] = {m->dp, m->pp, m->tp};
  GT_CALL(gt_h5_write_attr_i64s(file, "layout", 3, layout));
  const long long model[5] = {m->layers, m->heads, m->dim, m->seq_len, m->vocab};
  GT_CALL(gt_h5_write_attr_i64s(file, "model_shape", 5, model));
  GT_CALL(gt_h5_write_attr_i64(file, "batch", m->batch));
  GT_CALL(gt_h5_write_attr_str(file, "code_version", m->code_version));
  GT_CALL(gt_h5_write_attr_str(file, "created", m->created));
  GT_CALL(gt_h5_write_attr_str(file, "deck", m->deck ? m->deck : ""));
  return GT_SUCCESS;
}

/* One rank's state through a write. A failure that only this rank meets (a
 * download, a broken invariant) must not take it out of the collective
 * calls that the other ranks go on making (H5Dcreate2, H5Dwrite, H5Fclose):
 * the first one is kept in `local`, message and all, and the rank writes
 * empty selections from then on. Errors of HDF5 calls themselves are the
 * same on every rank (their I/O errors are held back by the write scope,
 * comm.h) and end the write everywhere alike. */
typedef struct {
  const gt_ckpt_state *st;
  float *staging;
  int rank;  /* world rank, for the fault hooks */
  long step; /* the checkpoint's step, for the fault hooks */
  int local; /* first local failure, or GT_SUCCESS */
  char local_message[1024];
} gt_ckpt_writer;

static void gt_ckpt_note_local(gt_ckpt_writer *w, int code)
{
  if (w->local == GT_SUCCESS) {
    w->local = code;
    snprintf(w->local_message, sizeof w->local_message, "%s", gt_error_message());
  }
  gt_error_clear();
}

/* Put this rank's entries of t (kind) into staging and select them in the
 * file space and a new memory space. */
static int gt_ckpt_stage(gt_ckpt_writer *w, const gt_param *t, const gt_ckpt_tensor *tensor,
                         int kind, hid_t fspace, hid_t *mspace)
{
  for (int d = 0; d < tensor->ndim; d++)
    GT_CHECK(t->ndim == tensor->ndim && t->full_shape[d] == tensor->dims[d], GT_ERR_INTERNAL,
             "internal error: parameter %s does not have its logical shape", t->name);
  GT_CHECK(!gt_fault_hit("ckpt_local_fail", w->rank, w->step), GT_ERR_DEVICE,
           "copying %s/%s to the host failed (injected by GT_FAULT=ckpt_local_fail)",
           gt_kind_group[kind], tensor->name);
  gt_backend *be = w->st->params->be;
  GT_CALL(be->ops->download(be, w->staging, gt_ckpt_kind_data(w->st, t, kind),
                            t->numel * sizeof(float), NULL));
  GT_CALL(gt_ckpt_copy_done(be));
  GT_CALL(gt_ckpt_local_space(t, mspace));
  GT_CALL(gt_ckpt_select(t, fspace, *mspace));
  return GT_SUCCESS;
}

enum { GT_W_SPACE, GT_W_DCPL, GT_W_DSET, GT_W_MSPACE, GT_W_N };

/* Create dataset `group/name` of one logical tensor and write this rank's
 * part of it (collective: ranks without a part, or after a local failure,
 * write an empty selection). */
static int gt_ckpt_write_tensor_in(hid_t file, hid_t dxpl, const gt_ckpt_tensor *tensor,
                                   int kind, gt_ckpt_writer *w, hid_t ids[])
{
  const gt_ckpt_state *st = w->st;
  char path[GT_PARAM_NAME_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", gt_kind_group[kind], tensor->name);
  hsize_t dims[GT_TENSOR_MAX_DIMS], chunk[GT_TENSOR_MAX_DIMS];
  size_t row = 1;
  for (int d = 0; d < tensor->ndim; d++) {
    dims[d] = chunk[d] = (hsize_t)tensor->dims[d];
    if (d > 0)
      row *= (size_t)tensor->dims[d];
  }
  /* At most 1 MiB of rows, in equal chunks: HDF5 stores a last partial chunk
   * at full size (1 MiB chunks of fixed rows left 7.8% of a 124M checkpoint
   * as padding). */
  size_t rows = GT_CKPT_CHUNK_BYTES / (row * sizeof(float));
  rows = rows < 1 ? 1 : rows;
  const size_t nchunks = (dims[0] + rows - 1) / rows;
  chunk[0] = (hsize_t)((dims[0] + nchunks - 1) / nchunks);
  GT_H5_ID(ids[GT_W_SPACE], H5Screate_simple(tensor->ndim, dims, NULL));
  GT_H5_ID(ids[GT_W_DCPL], H5Pcreate(H5P_DATASET_CREATE));
  GT_CALL_HDF5(H5Pset_chunk(ids[GT_W_DCPL], tensor->ndim, chunk));
  GT_CALL_HDF5(H5Pset_fletcher32(ids[GT_W_DCPL]));
  /* Every entry is written below: no fill values, chunks allocated by that
   * write. Parallel HDF5 1.10 still allocates and writes every chunk of a
   * filtered dataset at creation (the MPI-IO driver forces early
   * allocation), so each chunk goes to disk twice (benchmarks/README.md);
   * serial HDF5 and later versions honour these. */
  GT_CALL_HDF5(H5Pset_fill_time(ids[GT_W_DCPL], H5D_FILL_TIME_NEVER));
  GT_CALL_HDF5(H5Pset_alloc_time(ids[GT_W_DCPL], H5D_ALLOC_TIME_LATE));
  GT_H5_ID(ids[GT_W_DSET], H5Dcreate2(file, path, H5T_IEEE_F32LE, ids[GT_W_SPACE], H5P_DEFAULT,
                                      ids[GT_W_DCPL], H5P_DEFAULT));

  gt_param *t = st->params ? gt_params_find(st->params, tensor->name) : NULL;
  if (t && st->writer && t->counted && w->local == GT_SUCCESS) {
    int status = gt_ckpt_stage(w, t, tensor, kind, ids[GT_W_SPACE], &ids[GT_W_MSPACE]);
    if (status != GT_SUCCESS) {
      gt_ckpt_note_local(w, status);
      GT_CALL(gt_h5_close(&ids[GT_W_MSPACE])); /* and write nothing */
    }
  }
  if (ids[GT_W_MSPACE] < 0) {
    GT_H5_ID(ids[GT_W_MSPACE], H5Screate_simple(1, (hsize_t[]){1}, NULL));
    GT_CALL_HDF5(H5Sselect_none(ids[GT_W_MSPACE]));
    GT_CALL_HDF5(H5Sselect_none(ids[GT_W_SPACE]));
  }
  GT_CALL_HDF5(H5Dwrite(ids[GT_W_DSET], H5T_NATIVE_FLOAT, ids[GT_W_MSPACE], ids[GT_W_SPACE],
                        dxpl, w->staging));
  return GT_SUCCESS;
}

static int gt_ckpt_write_tensor(hid_t file, hid_t dxpl, const gt_ckpt_tensor *tensor, int kind,
                                gt_ckpt_writer *w)
{
  hid_t ids[GT_W_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_ckpt_write_tensor_in(file, dxpl, tensor, kind, w, ids);
  GT_CALL(gt_h5_close_all(status, GT_W_N, ids));
  return GT_SUCCESS;
}

/* GT_FAULT=ckpt_kill[:step=S] (fault.h): rank 0 dies halfway through the
 * write, as a node failure would. */
static void gt_ckpt_maybe_kill(const gt_ckpt_writer *w, int done, int total)
{
  if (done == total / 2 && gt_fault_hit("ckpt_kill", w->rank, w->step)) {
    fprintf(stderr, "gridtrain: GT_FAULT=ckpt_kill: killing rank %d in the checkpoint write of "
            "step %ld\n", w->rank, w->step);
    fflush(stderr);
    raise(SIGKILL);
  }
}

enum { GT_WF_FILE, GT_WF_DXPL, GT_WF_GROUP, GT_WF_N };

static int gt_ckpt_write_in(const char *path, const gt_ckpt_meta *meta, gt_ckpt_writer *w,
                            MPI_Comm comm, hid_t ids[])
{
  GT_CALL(gt_h5_create_mpio(path, comm, &ids[GT_WF_FILE]));
  const hid_t file = ids[GT_WF_FILE];
  GT_CALL(gt_ckpt_write_meta(file, meta));
  const char *groups[] = {"/model", "/optim", "/optim/m", "/optim/v"};
  for (int g = 0; g < 4; g++) {
    GT_H5_ID(ids[GT_WF_GROUP], H5Gcreate2(file, groups[g], H5P_DEFAULT, H5P_DEFAULT,
                                          H5P_DEFAULT));
    GT_CALL(gt_h5_close(&ids[GT_WF_GROUP]));
  }
  /* Filtered (checksummed) datasets are written collectively in parallel
   * HDF5. */
  GT_H5_ID(ids[GT_WF_DXPL], H5Pcreate(H5P_DATASET_XFER));
  GT_CALL_HDF5(H5Pset_dxpl_mpio(ids[GT_WF_DXPL], H5FD_MPIO_COLLECTIVE));
  const gt_ckpt_state *st = w->st;
  for (int i = 0; i < st->ntensors; i++) {
    gt_ckpt_maybe_kill(w, i, st->ntensors);
    for (int k = 0; k < GT_NKINDS; k++)
      GT_CALL(gt_ckpt_write_tensor(file, ids[GT_WF_DXPL], &st->tensors[i], k, w));
  }
  GT_CALL_HDF5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  return GT_SUCCESS;
}

/* gt_ckpt_write, naming the checkpoint `shown` in its error message. */
static int gt_ckpt_write_file(const char *path, const char *shown, const gt_ckpt_meta *meta,
                              const gt_ckpt_state *st, MPI_Comm comm)
{
  static float no_data; /* the buffer of empty selections when staging is missing */
  gt_ckpt_writer w = {.st = st, .step = meta->step, .local = GT_SUCCESS};
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  const size_t n = gt_ckpt_largest_local(st);
  float *staging = malloc(n * sizeof(float));
  if (!staging)
    gt_ckpt_note_local(&w, GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                                    n * sizeof(float)));
  w.staging = staging ? staging : &no_data;
  hid_t ids[GT_WF_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_comm_foreign_begin(comm);
  if (status == GT_SUCCESS) {
    /* Every rank makes every collective call of the write, whatever failed
     * here (write scope, `local`), and closes the file; only then is the
     * outcome known. The first I/O error is the cause of whatever followed,
     * then a local failure, then HDF5's own error. */
    gt_comm_io_begin(gt_fault_hit("ckpt_write_fail", w.rank, w.step));
    status = gt_ckpt_write_in(path, meta, &w, comm, ids);
    status = gt_h5_close_all(status, GT_WF_N, ids);
    const int io = gt_comm_io_end();
    gt_comm_foreign_end();
    if (io != GT_SUCCESS) {
      status = io;
    } else if (w.local != GT_SUCCESS) {
      status = gt_error_set(w.local, __FILE__, __LINE__, __func__, "%s", w.local_message);
    }
  }
  free(staging);
  if (status != GT_SUCCESS)
    return gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                         shown);
  return GT_SUCCESS;
}

int gt_ckpt_write(const char *path, const gt_ckpt_meta *meta, const gt_ckpt_state *st,
                  MPI_Comm comm)
{
  GT_CALL(gt_ckpt_write_file(path, path, meta, st, comm));
  return GT_SUCCESS;
}

// ---- reading ---------------------------------------------------------------------------------

static int gt_ckpt_read_meta_in(hid_t file, const char *path, gt_ckpt_meta *m)
{
  bool found;
  long long v;
  GT_CALL(gt_h5_read_attr_i64(file, "format_version", path, &found, &v));
  GT_CHECK(found, GT_ERR_INPUT,
           "%s is not a gridtrain checkpoint (no format_version attribute)", path);
  GT_CHECK(v >= 1 && v <= GT_CKPT_FORMAT, GT_ERR_INPUT,
           "%s has checkpoint format %lld; this gridtrain reads formats 1 to %d", path, v,
           GT_CKPT_FORMAT);
  m->format = (int)v;
  struct {
    const char *name;
    long long *dst;
  } ints[] = {{"step", &v}, {"tokens", &m->tokens}, {"data_samples", &m->samples},
              {"batch", &v}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    GT_CALL(gt_h5_read_attr_i64(file, ints[i].name, path, &found, ints[i].dst));
    GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no '%s' attribute", path, ints[i].name);
    if (i == 0)
      m->step = (long)v;
    if (i == 3)
      m->batch = (long)v;
  }
  GT_CALL(gt_h5_read_attr_i64(file, "seed", path, &found, &v));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'seed' attribute", path);
  m->seed = (unsigned long long)v;
  GT_CALL(gt_h5_read_attr_f64(file, "loss_scale", path, &found, &m->loss_scale));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'loss_scale' attribute", path);
  snprintf(m->precision, sizeof m->precision, "fp32");
  if (m->format >= 2) {
    const char *need[2] = {"loss_scale_good_steps", "skipped_steps"};
    long long *dst[2] = {&m->scale_good_steps, &m->skipped_steps};
    for (int i = 0; i < 2; i++) {
      GT_CALL(gt_h5_read_attr_i64(file, need[i], path, &found, dst[i]));
      GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no '%s' attribute", path, need[i]);
    }
    char *prec = NULL;
    GT_CALL(gt_h5_read_attr_str(file, "precision", path, &found, &prec));
    GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'precision' attribute", path);
    snprintf(m->precision, sizeof m->precision, "%s", prec);
    free(prec);
  }
  GT_CALL(gt_h5_read_attr_f64(file, "loss", path, &found, &m->loss));
  if (!found)
    m->loss = NAN;
  long long layout[3], model[5];
  GT_CALL(gt_h5_read_attr_i64s(file, "layout", path, 3, &found, layout));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'layout' attribute", path);
  GT_CALL(gt_h5_read_attr_i64s(file, "model_shape", path, 5, &found, model));
  GT_CHECK(found, GT_ERR_INPUT, "checkpoint %s has no 'model_shape' attribute", path);
  m->dp = (int)layout[0];
  m->pp = (int)layout[1];
  m->tp = (int)layout[2];
  m->layers = (int)model[0];
  m->heads = (int)model[1];
  m->dim = (int)model[2];
  m->seq_len = (int)model[3];
  m->vocab = (int)model[4];
  char *text = NULL;
  GT_CALL(gt_h5_read_attr_str(file, "code_version", path, &found, &text));
  snprintf(m->code_version, sizeof m->code_version, "%s", found ? text : "");
  free(text);
  GT_CALL(gt_h5_read_attr_str(file, "created", path, &found, &text));
  snprintf(m->created, sizeof m->created, "%s", found ? text : "");
  free(text);
  GT_CALL(gt_h5_read_attr_str(file, "deck", path, &found, &m->deck));
  return GT_SUCCESS;
}

/* A file that cannot be opened: say why in words a user can act on. */
static int gt_ckpt_open_error(const char *path)
{
  struct stat sb;
  if (stat(path, &sb) != 0)
    return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                        "cannot open checkpoint %s: %s", path, strerror(errno));
  return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                       "checkpoint %s is not a readable HDF5 file (truncated or damaged)", path);
}

int gt_ckpt_read_meta(const char *path, MPI_Comm comm, gt_ckpt_meta *meta)
{
  memset(meta, 0, sizeof *meta);
  hid_t file = H5I_INVALID_HID;
  GT_CALL(gt_comm_foreign_begin(comm));
  if (gt_h5_open_mpio(path, H5F_ACC_RDONLY, comm, &file) != GT_SUCCESS) {
    gt_comm_foreign_end();
    return gt_ckpt_open_error(path);
  }
  int status = gt_ckpt_read_meta_in(file, path, meta);
  status = gt_h5_close_all(status, 1, &file);
  gt_comm_foreign_end();
  if (status != GT_SUCCESS)
    gt_ckpt_meta_free(meta);
  GT_CALL(status);
  return GT_SUCCESS;
}

enum { GT_R_DSET, GT_R_SPACE, GT_R_MSPACE, GT_R_N };

/* Open dataset `group/name` (every rank), check its shape, and when this
 * rank holds the tensor and no read has failed here yet (*local), read its
 * part. Shape problems are the same on every rank; read problems are not,
 * so they go to *local and the loop goes on, keeping every rank in step. */
static int gt_ckpt_read_tensor_in(hid_t file, const char *path, const gt_ckpt_tensor *tensor,
                                  int kind, const gt_ckpt_state *st, float *staging,
                                  int *local, hid_t ids[])
{
  char name[GT_PARAM_NAME_MAX + 16];
  snprintf(name, sizeof name, "%s/%s", gt_kind_group[kind], tensor->name);
  htri_t exists = H5Lexists(file, gt_kind_group[kind], H5P_DEFAULT);
  if (exists > 0)
    exists = H5Lexists(file, name, H5P_DEFAULT);
  GT_CHECK(exists > 0, GT_ERR_INPUT,
           "checkpoint %s has no dataset %s: it was written for another model", path, name);
  GT_H5_ID(ids[GT_R_DSET], H5Dopen2(file, name, H5P_DEFAULT));
  GT_H5_ID(ids[GT_R_SPACE], H5Dget_space(ids[GT_R_DSET]));
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  int nd;
  GT_CALL_HDF5(nd = H5Sget_simple_extent_ndims(ids[GT_R_SPACE]));
  bool same = nd == tensor->ndim;
  if (same) {
    GT_CALL_HDF5(H5Sget_simple_extent_dims(ids[GT_R_SPACE], dims, NULL));
    for (int d = 0; d < nd; d++)
      same = same && dims[d] == (hsize_t)tensor->dims[d];
  }
  if (!same) {
    char want[96] = "", have[96] = "";
    for (int d = 0; d < tensor->ndim; d++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%ld", d ? ", " : "",
               tensor->dims[d]);
    for (int d = 0; d < nd && d < GT_TENSOR_MAX_DIMS; d++)
      snprintf(have + strlen(have), sizeof have - strlen(have), "%s%llu", d ? ", " : "",
               (unsigned long long)dims[d]);
    return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                        "checkpoint %s: %s has shape (%s) but the model needs (%s)", path, name,
                        have, want);
  }
  gt_param *t = st->params ? gt_params_find(st->params, tensor->name) : NULL;
  if (!t || *local != GT_SUCCESS)
    return GT_SUCCESS;
  int status = gt_ckpt_local_space(t, &ids[GT_R_MSPACE]);
  if (status == GT_SUCCESS)
    status = gt_ckpt_select(t, ids[GT_R_SPACE], ids[GT_R_MSPACE]);
  if (status == GT_SUCCESS) {
    memset(staging, 0, t->numel * sizeof(float)); /* padding stays zero */
    if (H5Dread(ids[GT_R_DSET], H5T_NATIVE_FLOAT, ids[GT_R_MSPACE], ids[GT_R_SPACE],
                H5P_DEFAULT, staging) < 0) {
      gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
      status = gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                             "checkpoint %s: %s is damaged", path, name);
    }
  }
  if (status == GT_SUCCESS) {
    gt_backend *be = st->params->be;
    status = be->ops->upload(be, gt_ckpt_kind_data(st, t, kind), staging,
                             t->numel * sizeof(float), NULL);
    if (status == GT_SUCCESS)
      status = gt_ckpt_copy_done(be);
  }
  *local = status;
  return GT_SUCCESS;
}

static int gt_ckpt_read_tensor(hid_t file, const char *path, const gt_ckpt_tensor *tensor,
                               int kind, const gt_ckpt_state *st, float *staging, int *local)
{
  hid_t ids[GT_R_N] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_ckpt_read_tensor_in(file, path, tensor, kind, st, staging, local, ids);
  GT_CALL(gt_h5_close_all(status, GT_R_N, ids));
  return GT_SUCCESS;
}

int gt_ckpt_read(const char *path, const gt_ckpt_state *st, MPI_Comm comm)
{
  const size_t n = gt_ckpt_largest_local(st);
  float *staging = malloc(n * sizeof(float));
  GT_CHECK_ALLOC(staging, n * sizeof(float));
  hid_t file = H5I_INVALID_HID;
  int status = gt_comm_foreign_begin(comm);
  if (status != GT_SUCCESS) {
    free(staging);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  if (gt_h5_open_mpio(path, H5F_ACC_RDONLY, comm, &file) != GT_SUCCESS) {
    gt_comm_foreign_end();
    free(staging);
    return gt_ckpt_open_error(path);
  }
  int local = GT_SUCCESS;
  for (int i = 0; i < st->ntensors && status == GT_SUCCESS; i++)
    for (int k = 0; k < GT_NKINDS && status == GT_SUCCESS; k++)
      status = gt_ckpt_read_tensor(file, path, &st->tensors[i], k, st, staging, &local);
  if (status == GT_SUCCESS)
    status = local; /* its error is still the current one */
  status = gt_h5_close_all(status, 1, &file);
  gt_comm_foreign_end();
  free(staging);
  GT_CALL(status);
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
  int status;
} gt_visit;

enum { GT_V_DSET, GT_V_SPACE, GT_V_DCPL, GT_V_OSPACE, GT_V_ODSET, GT_V_N };

static int gt_ckpt_visit_dataset_in(hid_t group, const char *name, gt_visit *v, hid_t ids[])
{
  GT_H5_ID(ids[GT_V_DSET], H5Dopen2(group, name, H5P_DEFAULT));
  GT_H5_ID(ids[GT_V_SPACE], H5Dget_space(ids[GT_V_DSET]));
  GT_H5_ID(ids[GT_V_DCPL], H5Dget_create_plist(ids[GT_V_DSET]));
  unsigned flags, config;
  size_t nelem = 0;
  GT_CHECK(H5Pget_filter_by_id2(ids[GT_V_DCPL], H5Z_FILTER_FLETCHER32, &flags, &nelem, NULL, 0,
                                NULL, &config) >= 0,
           GT_ERR_HDF5, "checkpoint %s: %s/%s has no Fletcher32 checksum", v->path, v->group,
           name);
  H5Eclear2(H5E_DEFAULT);
  hssize_t npoints;
  GT_CALL_HDF5(npoints = H5Sget_simple_extent_npoints(ids[GT_V_SPACE]));
  if ((size_t)npoints > v->cap) {
    float *bigger = realloc(v->buf, (size_t)npoints * sizeof(float));
    GT_CHECK_ALLOC(bigger, (size_t)npoints * sizeof(float));
    v->buf = bigger;
    v->cap = (size_t)npoints;
  }
  if (H5Dread(ids[GT_V_DSET], H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->buf) < 0) {
    gt_error_hdf5("H5Dread", __FILE__, __LINE__, __func__);
    return gt_error_wrap(GT_ERR_HDF5, __FILE__, __LINE__, __func__,
                         "checkpoint %s: %s/%s is damaged", v->path, v->group, name);
  }
  v->datasets++;
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
  return v->status == GT_SUCCESS ? 0 : -1;
}

/* Read every dataset of the given groups; export copies /model's into out. */
static int gt_ckpt_visit_in(hid_t file, gt_visit *v, int ngroups, hid_t *group)
{
  for (int k = 0; k < ngroups; k++) {
    v->group = gt_kind_group[k];
    GT_H5_ID(*group, H5Gopen2(file, gt_kind_group[k], H5P_DEFAULT));
    hsize_t idx = 0;
    herr_t r = H5Literate(*group, H5_INDEX_NAME, H5_ITER_INC, &idx, gt_ckpt_visit_link, v);
    if (v->status != GT_SUCCESS)
      return v->status;
    GT_CALL_HDF5(r);
    GT_CALL(gt_h5_close(group));
  }
  return GT_SUCCESS;
}

static int gt_ckpt_visit(const char *path, gt_visit *v, int ngroups)
{
  hid_t file = H5I_INVALID_HID, group = H5I_INVALID_HID;
  if (gt_h5_open_mpio(path, H5F_ACC_RDONLY, MPI_COMM_SELF, &file) != GT_SUCCESS)
    return gt_ckpt_open_error(path);
  gt_ckpt_meta meta;
  int status = gt_ckpt_read_meta_in(file, path, &meta);
  gt_ckpt_meta_free(&meta);
  if (status == GT_SUCCESS)
    status = gt_ckpt_visit_in(file, v, ngroups, &group);
  hid_t ids[2] = {file, group};
  status = gt_h5_close_all(status, 2, ids);
  free(v->buf);
  v->buf = NULL;
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
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    const char saved = *p;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                          "cannot create checkpoint directory %s ([checkpoint] dir): %s", buf,
                          strerror(errno));
    *p = saved;
    if (saved == '\0')
      break;
  }
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

/* fsync a file or directory by name. */
static int gt_fsync_path(const char *path, bool directory)
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
static int gt_ckpt_publish(const char *dir, const char *tmp, const char *path, int keep,
                           long step)
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
  int status = writers != MPI_COMM_NULL ? gt_ckpt_write_file(tmp, path, meta, st, writers)
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
