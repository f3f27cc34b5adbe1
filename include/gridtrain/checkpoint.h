/*
 * gridtrain/checkpoint.h - checkpoints in parallel HDF5: one file per
 * checkpoint, every tensor at its full logical (unsharded) shape, each rank
 * writing and reading only its own hyperslab, so a checkpoint written by one
 * layout loads into any other (docs/checkpoints.md).
 *
 * File (format version GT_CKPT_FORMAT):
 *   /model/<name>      float32, the parameter's logical shape (the fp32
 *                      master weights whatever the training precision)
 *   /optim/m/<name>    AdamW first moment, same shape
 *   /optim/v/<name>    AdamW second moment, same shape
 *   /rank/state        float32 (ranks x L), optional: each rank's state
 *                      outside the tensors (gt_ckpt_state.rank_state), a
 *                      row per rank padded to the longest, with attributes
 *                      `lengths` (each row's) and `tag`
 * Format 3: every dataset is contiguous (one run of bytes, readable as it is
 * by h5py) with the attribute `fletcher32`: the Fletcher-32 checksum of each
 * GT_CKPT_SUM_BYTES block of its row-major data (docs/checkpoints.md), so a
 * damaged block fails the read and names the dataset and the block. Each
 * rank writes its hyperslabs with independent MPI-IO writes; the only
 * collective calls of a write are the creation of the file, its groups,
 * datasets and attributes, one MPI_Allreduce of the checksums, and the close.
 * Formats 1 and 2 (still read): every dataset chunked along its first axis
 * (at most 1 MiB a chunk) with HDF5's Fletcher32 filter.
 * Root attributes: see gt_ckpt_meta (names in docs/checkpoints.md).
 *
 * A directory of checkpoints holds step_NNNNNNNN.h5 files and `latest`, a
 * one-line text file naming the newest complete one. A checkpoint is written
 * as step_NNNNNNNN.h5.tmp, flushed and closed, fsync'ed; latest.tmp is
 * written and fsync'ed; the file is renamed; only then is `latest` replaced
 * (latest.tmp renamed over it), so a crash at any point leaves `latest`
 * naming a complete file, and a failure leaves the directory as it was.
 */
#ifndef GRIDTRAIN_CHECKPOINT_H
#define GRIDTRAIN_CHECKPOINT_H

#include <mpi.h>
#include <stdbool.h>

#include "gridtrain/config.h"
#include "gridtrain/params.h"
#include "gridtrain/tensor.h"

/* Format 2 adds precision, loss_scale_good_steps and skipped_steps (a
 * format-1 file reads as fp32 with a fresh scaler). Format 3 stores the
 * datasets contiguous with our own per-block checksums instead of HDF5's
 * chunked Fletcher32 filter (which parallel HDF5 1.10 writes twice and only
 * collectively, one dataset at a time). */
#define GT_CKPT_FORMAT 3
#define GT_CKPT_SUM_BYTES ((size_t)1 << 20) /* bytes of data per checksum */
#define GT_CKPT_NAME_MAX 64 /* "step_NNNNNNNN.h5" and longer step numbers */

/* What a checkpoint records besides its tensors. */
typedef struct gt_ckpt_meta {
  int format;                  /* GT_CKPT_FORMAT */
  long step;                   /* optimizer steps done = the next step to run */
  long long tokens;            /* tokens trained on */
  long long samples;           /* data-stream position: sequences consumed */
  unsigned long long seed;     /* [run] seed: initial weights and data order */
  double loss_scale;           /* the fp16 loss scale; 1 for fp32 and bf16 */
  long long scale_good_steps;  /* good steps since the scale last changed */
  long long skipped_steps;     /* steps skipped for overflow so far */
  char precision[8];           /* "fp32", "bf16", "fp16": the run that wrote it */
  double loss;                 /* loss of the last step (NaN before any) */
  int dp, pp, tp;              /* layout that wrote it */
  int layers, heads, dim, seq_len, vocab; /* model shape */
  long batch;                  /* global batch (sequences) that wrote it */
  char code_version[64];       /* gridtrain version */
  char created[32];            /* UTC time, ISO 8601 */
  char *deck;                  /* resolved deck text; owned: gt_ckpt_meta_free */
} gt_ckpt_meta;

void gt_ckpt_meta_free(gt_ckpt_meta *meta);

/* The model shape of a checkpoint: its deck's [model] section
 * (gt_gpt_shape_config), which must agree with the model_shape attribute;
 * a checkpoint without a deck is GPT-2 of model_shape. GT_ERR_INPUT naming
 * path for a deck that does not parse or disagrees. Not collective. */
struct gt_gpt_shape;
int gt_ckpt_meta_shape(const gt_ckpt_meta *meta, const char *path, struct gt_gpt_shape *shape);

/* One logical tensor of the model (the same list, in the same order, on
 * every rank). */
typedef struct gt_ckpt_tensor {
  char name[GT_PARAM_NAME_MAX];
  int ndim;
  long dims[GT_TENSOR_MAX_DIMS];
} gt_ckpt_tensor;

/* How the tensor data reaches the file (gt_ckpt_state.direct): with
 * O_DIRECT where the file system takes it (auto), always (on: an error
 * where it does not) or never (off: through the page cache). */
typedef enum { GT_CKPT_DIRECT_AUTO = 0, GT_CKPT_DIRECT_ON, GT_CKPT_DIRECT_OFF } gt_ckpt_direct;

/* What one rank holds, and which part of it this rank writes or loads.
 * Tensors not in params are skipped on this rank. Ranges are of the flat
 * buffers of params (gt_param offset + local index), so a ZeRO piece
 * (params.h) or any other split of the flat buffer is a range. */
typedef struct gt_ckpt_state {
  int ntensors;
  const gt_ckpt_tensor *tensors; /* every logical tensor of the model */
  gt_params *params;             /* this rank's parameters (device); NULL: none
                                    (gt_ckpt_read then only checks the shapes) */
  float *m, *v;                  /* AdamW moments (device): flat elements from
                                    moments_lo on */
  bool writer;                   /* write this rank's entries [lo, hi) of its
                                    counted tensors */
  float *values;                 /* fp32 master values (device): flat elements
                                    from values_lo on; NULL: params->values */
  size_t values_lo, moments_lo;  /* flat index of values[0], of m[0] and v[0] */
  size_t lo, hi;                 /* the flat range of values written or loaded;
                                    hi == 0: [values_lo, params->numel) */
  size_t mlo, mhi;               /* the same for the moments; mhi == 0:
                                    [moments_lo, params->numel) */
  const MPI_Comm *group;         /* writing: NULL, or the ranks holding the
                                    other pieces of this rank's sharded
                                    tensors (its tensor-parallel group), all
                                    writers of the same ranges: they swap
                                    entries so that each writes one
                                    contiguous range of every such tensor.
                                    Every rank of it calls gt_ckpt_write. */
  gt_ckpt_direct direct;         /* writing: O_DIRECT for the tensor data */
  bool copy_later;               /* gt_ckpt_async_begin: the caller leaves the
                                    values and moments unchanged until
                                    gt_ckpt_async_snapshot returns, so that
                                    where device memory is host memory the
                                    writer thread copies them while the
                                    caller goes on */
  /* State of each rank that is not a tensor of the model (compression
   * residuals, local replicas): rank_n floats of host memory at rank_state,
   * and rank_tag, one line saying what they are that is the same on every
   * rank ("compress=topk:0.01 dp=4 pp=1 tp=1"). Written as row `rank` (of
   * comm) of /rank/state; read back into rank_state only when the file has
   * that tag, the same number of ranks and this rank's rank_n, on every
   * rank (all or none: *rank_loaded says which, the same everywhere). */
  float *rank_state;
  size_t rank_n;
  const char *rank_tag;
  bool *rank_loaded;             /* reading: NULL when nothing is wanted */
} gt_ckpt_state;

/* The number of entries this rank's part of t selects in the file (the
 * logical tensor) and in its local tensor; the two are equal. 64-bit, and no
 * tensor data is touched (for tests of large shapes). Not collective. */
int gt_ckpt_selection_size(const gt_param *t, long long *file_points, long long *mem_points);

/* Collective on comm: write the checkpoint file `path` (created or
 * truncated) with MPI-IO, flush and close it. Each rank that is a writer
 * writes the entries of its counted tensors that fall in its ranges; the
 * writers' ranges must hold every entry of every tensor exactly once (for
 * instance each data-parallel rank its ZeRO piece, or 1/dp of the flat
 * buffer when the replicas are whole). A failure on some ranks only - an
 * MPI-IO write error (inside HDF5 too: the write scope of
 * src/io/write_scope.c), a failed copy to the host - does not take them
 * out of the write: every rank makes every collective call and closes the
 * file, and the error ("cannot write checkpoint PATH: CAUSE") is known to
 * the ranks that met it; agree on it (gt_error_agree). The file is then not
 * a checkpoint. The GT_FAULT hooks of the write (fault.h) take the rank in
 * comm for the world rank. */
int gt_ckpt_write(const char *path, const gt_ckpt_meta *meta, const gt_ckpt_state *st,
                  MPI_Comm comm);

/* Collective on comm: read the attributes of `path` into meta (free with
 * gt_ckpt_meta_free). A file that is missing, not HDF5, or not a gridtrain
 * checkpoint of a known format is GT_ERR_INPUT naming the file. */
int gt_ckpt_read_meta(const char *path, MPI_Comm comm, gt_ckpt_meta *meta);

/* Collective on comm: load the entries of every tensor this rank holds
 * that fall in its ranges (values [lo, hi), moments [mlo, mhi)) from `path`,
 * each rank reading its own part (format 3: the checksum blocks that hold
 * it, verified; formats 1-2: its hyperslab through HDF5's checksum filter).
 * A missing dataset or a shape that differs from st->tensors is GT_ERR_INPUT;
 * a checksum failure is GT_ERR_HDF5 naming the dataset. The error is local
 * to the ranks that met it: agree on it (gt_error_agree). Padding entries of
 * sharded tensors are set to zero. */
int gt_ckpt_read(const char *path, const gt_ckpt_state *st, MPI_Comm comm);

/* Not collective: read every dataset of `path` in full and check it against
 * its checksums (MPI_COMM_SELF). *datasets counts the tensors' datasets
 * read (not /rank/state), *bytes all bytes read. Corruption is
 * GT_ERR_HDF5 naming the dataset. */
int gt_ckpt_verify_file(const char *path, long *datasets, double *bytes);

/* Not collective: write the model weights of checkpoint `path` as a plain
 * HDF5 file `out`: one contiguous float32 dataset per parameter at the root,
 * named as in /model, plus the model-shape attributes. */
int gt_ckpt_export_weights(const char *path, const char *out);

/* Not collective: read the model tensors (/model) of checkpoint `path` one
 * at a time, each whole, checked as verify checks it (its checksums, every
 * value finite), for exports. open: GT_ERR_INPUT for a file that is missing
 * or not a checkpoint. get: tensor `name` of /model, which must have the
 * shape (ndim, dims); *values points to its entries in row-major order,
 * owned by the reader and valid until the next get or close. A missing
 * tensor or another shape is GT_ERR_INPUT, damage GT_ERR_HDF5. close: free
 * the reader and set *reader to NULL (NULL: nothing). */
typedef struct gt_ckpt_weights gt_ckpt_weights;
int gt_ckpt_weights_open(const char *path, gt_ckpt_weights **reader);
int gt_ckpt_weights_get(gt_ckpt_weights *reader, const char *name, int ndim, const long *dims,
                       const float **values);
int gt_ckpt_weights_close(gt_ckpt_weights **reader);

/* Not collective: a checkpoint written by one process from host memory, one
 * tensor at a time (imports: hf_import.h). open creates path.tmp with meta's
 * attributes and the datasets of every tensor of the list (/model and the
 * moments /optim/m, /optim/v, all zero), stores tok (NULL: none) as a dataset
 * stores it (tokenizer.h: the root attribute `tokenizer` and /tokenizer/model,
 * which gt_tokenizer_from_file reads back from the checkpoint); put writes
 * tensor i's values (its logical shape, row-major) and their checksums; close
 * with keep (every tensor put) writes the checksums, syncs and renames
 * path.tmp to path, else (or on any error) removes path.tmp. Memory: the
 * checksum terms of one tensor. Errors: GT_ERR_INPUT for a path that cannot
 * be written, GT_ERR_HDF5 for HDF5's failures. */
struct gt_tokenizer;
typedef struct gt_ckpt_stream gt_ckpt_stream;
int gt_ckpt_stream_open(const char *path, const gt_ckpt_meta *meta, int ntensors,
                        const gt_ckpt_tensor *tensors, const struct gt_tokenizer *tok,
                        gt_ckpt_stream **s);
int gt_ckpt_stream_put(gt_ckpt_stream *s, int i, const float *values);
int gt_ckpt_stream_close(gt_ckpt_stream **s, bool keep);

/* ---- a directory of checkpoints ---------------------------------------- */

/* "DIR/step_00000100.h5" */
int gt_ckpt_path(const char *dir, long step, char *path, size_t size);

/* Collective on comm: create dir (and parents) on rank 0. Errors are
 * collective GT_ERR_INPUT. */
int gt_ckpt_dir_prepare(const char *dir, MPI_Comm comm);

/* Collective on comm: write the checkpoint of `meta->step` into dir as
 * described at the top, then keep only the newest `keep` step files
 * (keep <= 0: all). The file is written by the ranks of `writers` (a
 * sub-communicator of comm holding rank 0 of comm and, between their
 * ranges, every entry of every tensor exactly once; MPI_COMM_NULL on the
 * other ranks, which only wait). The trainer passes comm itself: every
 * data-parallel rank writes its own part. The GT_FAULT hooks of the write
 * (fault.h) take the rank in comm for the world rank. The
 * file name is returned in path. Errors collective. A write that fails on
 * any rank, or a failure while rank 0 makes it durable and names it (fsync,
 * rename, latest.tmp on a full disk), leaves dir as it was: the earlier
 * step files and `latest` untouched, no .tmp of this write left. */
int gt_ckpt_save(const char *dir, int keep, const gt_ckpt_meta *meta,
                 const gt_ckpt_state *st, MPI_Comm writers, MPI_Comm comm, char *path,
                 size_t size);

/* ---- asynchronous checkpoints ([checkpoint] async) --------------------- */
/*
 * The same file, directory and guarantees as gt_ckpt_save, with the write
 * in the background: gt_ckpt_async_begin creates the file, its groups and
 * datasets and the root attributes (collective HDF5 calls, on the calling
 * thread) and copies this rank's part of the tensors into pinned host
 * memory (the backend's alloc_host, kept from one checkpoint to the next:
 * as many bytes as this rank writes); then it returns, and a writer thread
 * writes that copy at the datasets' offsets with its own pwrite calls (no
 * HDF5, no MPI). The copy is a snapshot: the caller may change the state at
 * once, or with st->copy_later (host-visible memory: the thread makes the
 * copy) after gt_ckpt_async_snapshot. gt_ckpt_async_settle, at every step boundary, finishes the file
 * (checksums, attributes, close) once every rank's writer is done; rank 0
 * then makes it durable and names it (latest, pruning) on the writer
 * thread, and a later settle agrees on that. At most one write is in
 * flight, its publishing included.
 */
typedef struct gt_ckpt_async gt_ckpt_async;

/* What a finished asynchronous write took. */
typedef struct gt_ckpt_async_report {
  bool finished;            /* a write was finished and named by this call */
  char path[GT_PATH_MAX];   /* its file */
  long step;
  double blocked_s;         /* the begin: how long the caller waited */
  double wait_s;            /* the settle: waiting for this rank's writer */
  double finish_s;          /* the finish: checksums, close, publish */
  double total_s;           /* from the begin to the file's name */
} gt_ckpt_async_report;

/* Not collective: a saver whose host copies come from be's alloc_host. */
int gt_ckpt_async_create(gt_backend *be, gt_ckpt_async **a);

/* Collective on comm: allocate the host memory that writing st will take
 * and touch it on a thread while training starts, so that the first
 * checkpoint does not wait for its pages (where the state grows later,
 * begin allocates more). Errors collective. */
int gt_ckpt_async_reserve(gt_ckpt_async *a, const gt_ckpt_state *st, MPI_Comm comm);

/* Collective on comm: begin the checkpoint of meta->step in dir (as
 * gt_ckpt_save, every rank of comm a writer of its ranges of st), and
 * return once this rank's part is in host memory and the writer thread
 * has started; the file name in path. st's tensors, params and group must
 * stay valid until the write is settled; its rank state is written now.
 * Errors collective: a failure (here: a collective HDF5 call, an I/O error,
 * a failed copy to the host, on any rank) leaves dir as it was. The write
 * before must be settled (GT_ERR_INTERNAL otherwise). */
int gt_ckpt_async_begin(gt_ckpt_async *a, const char *dir, int keep, const gt_ckpt_meta *meta,
                        const gt_ckpt_state *st, MPI_Comm comm, char *path, size_t size);

/* Collective on the begin's comm, at a step boundary: with a write in
 * flight, one all-reduce of two ints (through comm.h, seen by the flight
 * recorder). When every rank's writer is done, or any one's failed, the
 * write is finished: the checksums' all-reduce, the attributes, the close,
 * the agreement; then rank 0 makes the file durable and names it, as
 * gt_ckpt_save does, on the writer thread; when that is done, a settle
 * agrees on its outcome. `wait`: this rank waits for each part in turn and
 * the call returns with the write settled. A failure on any rank ("cannot
 * write checkpoint PATH: CAUSE", collective) leaves dir as it was: the
 * earlier files and `latest` untouched, no .tmp. report (may be NULL) says
 * what was settled. Nothing in flight (or a NULL): returns at once, no
 * communication. */
int gt_ckpt_async_settle(gt_ckpt_async *a, bool wait, gt_ckpt_async_report *report);

/* Not collective: wait until the writer thread has copied what the begin
 * left to it (st->copy_later); the caller may then change the state. At
 * once when nothing is left to copy. */
void gt_ckpt_async_snapshot(gt_ckpt_async *a);

/* Not collective: a write is in flight (begun, not settled). */
bool gt_ckpt_async_busy(const gt_ckpt_async *a);

/* Not collective: free a and its host memory; NULL: nothing. A write still
 * in flight (an error of this rank alone) is stopped and left as a .tmp
 * file; settle it first on every rank to keep it. */
int gt_ckpt_async_destroy(gt_ckpt_async **a);

/* Not collective: the checkpoints of dir to try when resuming, best first:
 * the file `latest` names, then every other step_NNNNNNNN.h5, newest first.
 * *n = 0 when there are none (or no dir). *latest_problem gets a one-line
 * description when `latest` exists but names no file here ("" otherwise).
 * The list is malloc'ed (free it). */
int gt_ckpt_candidates(const char *dir, char (**list)[GT_PATH_MAX], int *n,
                       char *latest_problem, size_t problem_size);

#endif /* GRIDTRAIN_CHECKPOINT_H */
