/*
 * ckpt_internal.h - what the checkpoint files' writer (ckpt_write.c), reader
 * (ckpt_read.c) and the rest (checkpoint.c) share (internal to src/io):
 * the layout of a rank's part of a logical tensor (runs, hyperslab
 * selections), the Fletcher-32 block checksums, and the plan of the
 * exchange inside the tensor-parallel group (docs/checkpoints.md,
 * "Performance"). None of it is collective unless it says so.
 */
#ifndef GT_IO_CKPT_INTERNAL_H
#define GT_IO_CKPT_INTERNAL_H

#include <hdf5.h>
#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/backend.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/params.h"

/* The three groups of tensors: values and the two AdamW moments. */
enum { GT_KIND_MODEL = 0, GT_KIND_M, GT_KIND_V, GT_NKINDS };
extern const char *const gt_kind_group[GT_NKINDS]; /* "/model", "/optim/m", "/optim/v" */

#define GT_CKPT_SUM_FLOATS (GT_CKPT_SUM_BYTES / sizeof(float))
#define GT_FLETCHER_MOD 65535u
#define GT_DIO_ALIGN ((size_t)4096) /* O_DIRECT blocks; the cut points of writes */
#define GT_DIO_FLOATS (GT_DIO_ALIGN / sizeof(float))
#define GT_CKPT_SWAP_TAG 0x6753     /* the exchange's messages on the group */
#define GT_CKPT_GROUP_MAX 32        /* larger groups do without the exchange */

static inline size_t gt_min_size(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t gt_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ---- a rank's part of a logical tensor ---------------------------------------------------

/* Select, in the file space of the logical tensor and in the memory space
 * of the rank's local tensor, the entries this rank holds (padding left
 * out), both in row-major order. */
int gt_ckpt_select(const gt_param *t, hid_t fspace, hid_t mspace);

/* The dataspace of t's local tensor (close it). */
int gt_ckpt_local_space(const gt_param *t, hid_t *space);

/* The flat range [*a, *b) of t's local entries (indices into the local
 * tensor) that fall in the flat range [lo, hi) of the buffers. */
void gt_ckpt_clip(const gt_param *t, size_t lo, size_t hi, size_t *a, size_t *b);

/* A run: len entries contiguous both in the local tensor (from index
 * `local`) and in the logical tensor (row-major, from index `logical`). */
typedef int (*gt_run_fn)(void *ctx, size_t local, size_t logical, size_t len);

/* Call fn on the runs of the real (not padding) local entries with index in
 * [a, b) of t's piece `index` (gt_ckpt_runs: this rank's own, t->shard.index)
 * in local order, which is also logical order. The members of a
 * tensor-parallel group hold the same local shape, each its own piece. */
int gt_ckpt_runs_at(const gt_param *t, int index, size_t a, size_t b, gt_run_fn fn, void *ctx);
int gt_ckpt_runs(const gt_param *t, size_t a, size_t b, gt_run_fn fn, void *ctx);

/* A gt_run_fn that adds len to the size_t at ctx. */
int gt_run_count(void *ctx, size_t local, size_t logical, size_t len);

/* Hyperslab selections built from flat ranges: the boxes of the row-major
 * range [lo, hi) over dims[0..m) (at most 2m - 1 of them), each completed by
 * the fixed start/count of dims m..nd-1, ORed into space. */
typedef struct {
  hid_t space;
  int nd, m;
  hsize_t dims[GT_TENSOR_MAX_DIMS], start[GT_TENSOR_MAX_DIMS], count[GT_TENSOR_MAX_DIMS];
  bool first;
} gt_sel;

/* OR into s->space the boxes of the row-major flat range [lo, hi) over
 * dims[d..m), completed by the fixed start/count of dims m..nd-1. */
int gt_sel_flat(gt_sel *s, int d, hsize_t lo, hsize_t hi);

/* Device pointer of flat element `flat` of kind's buffer. */
float *gt_ckpt_part_data(const gt_ckpt_state *st, int kind, size_t flat);

/* The flat range of kind's buffer this rank writes or loads. */
void gt_ckpt_range(const gt_ckpt_state *st, int kind, size_t *lo, size_t *hi);

/* Wait for the copy just queued between the device and a host buffer. */
int gt_ckpt_copy_done(gt_backend *be);

/* Entries of the largest local tensor (at least 1); of a logical tensor. */
size_t gt_ckpt_largest_local(const gt_ckpt_state *st);
size_t gt_ckpt_tensor_numel(const gt_ckpt_tensor *tensor);

/* Make *buf hold at least n items of `size` bytes (*cap items now). */
int gt_ckpt_grow(void **buf, size_t *cap, size_t n, size_t size);

// ---- checksums -------------------------------------------------------------------------

/* Add to sums (2 terms per GT_CKPT_SUM_BYTES block of a dataset of `total`
 * entries) the terms of its entries [logical, logical + len), held in data.
 * The terms of any split of a block add up to the block's (an all-reduce
 * completes them). */
void gt_fletcher_add(uint64_t *sums, size_t total, const float *data, size_t logical,
                     size_t len);

/* The Fletcher-32 checksum of a block's two terms (reduced mod 65535). */
uint32_t gt_fletcher_value(const uint64_t *sum);

/* Checksum blocks of a dataset of `total` entries. */
size_t gt_ckpt_nsums(size_t total);

/* Check blocks [blk0, blk0 + n) of dataset `name` of checkpoint `path`,
 * whose entries from block blk0 on are in data, against stored; a
 * mismatch is GT_ERR_HDF5 naming the bytes. */
int gt_ckpt_check_sums(const char *path, const char *name, const float *data, size_t total,
                       size_t blk0, size_t n, const uint32_t *stored);

/* Every one of the n values in data (element `first` on of dataset name)
 * is finite; else GT_ERR_HDF5 naming the dataset and the element. */
int gt_ckpt_check_finite(const char *path, const char *name, const float *data, size_t n,
                         size_t first);

// ---- the exchange inside the group -------------------------------------------------------

/* The exchange inside the group (gt_ckpt_state.group) of a write or read:
 * which tensors take part, and the shard index of each member. */
typedef struct {
  int gsize, grank; /* the group (1, 0: none) */
  int *index;       /* ntensors x gsize: shard index of each member */
  bool *swap, any;  /* swap[i]: tensor i is exchanged; any: some tensor is */
} gt_swap_plan;

void gt_swap_plan_free(gt_swap_plan *p);

/* Which tensors the group (st->group) exchanges: those every member holds
 * sharded over the group, one piece each, when all members write
 * (`writing`) or read the same ranges of the same flat layout. No group, or
 * one of 1 or more than GT_CKPT_GROUP_MAX ranks: none. Collective on the
 * group (one all-gather). */
int gt_ckpt_plan_swap(const gt_ckpt_state *st, bool writing, gt_swap_plan *plan);

/* For a sharded t (shard.axis >= 0): the entries of one slab of the shard
 * axis (one index of the axes before it) locally (*ls) and in the logical
 * tensor (*fs); and the local entries [*x0, *x1) of [a, b) that are whole
 * slabs (*x0 == *x1 == a: none). */
void gt_ckpt_slab_sizes(const gt_param *t, size_t *ls, size_t *fs);
void gt_ckpt_whole_slabs(const gt_param *t, size_t a, size_t b, size_t *x0, size_t *x1);

/* Send scount[j] floats to member j (packed in member order from send) and
 * receive rcount[j] from it (into recv, in member order), member g's own
 * entries 0, and wait for all. Collective on comm (the group). */
int gt_ckpt_swap_post(MPI_Comm comm, int g, const float *send, const size_t *scount, float *recv,
                      const size_t *rcount);

// ---- shared by the files ---------------------------------------------------------------

/* gt_ckpt_write, naming the checkpoint `shown` in its error message
 * (ckpt_write.c); fault_rank: the rank the GT_FAULT hooks (fault.h) match,
 * the caller's rank in the job. Collective on comm. */
int gt_ckpt_write_file(const char *path, const char *shown, const gt_ckpt_meta *meta,
                       const gt_ckpt_state *st, MPI_Comm comm, int fault_rank);

/* fsync a file or directory by name (checkpoint.c). Not collective. */
int gt_fsync_path(const char *path, bool directory);

/* Rank 0, after every rank has closed the file tmp and agreed that it is
 * complete: fsync it, write latest.tmp, rename tmp to path and latest.tmp
 * to latest, prune dir to `keep` step files (checkpoint.c). A failure
 * undoes what was done: dir as before. Not collective. */

int gt_ckpt_publish(const char *dir, const char *tmp, const char *path, int keep, long step);

/* The root attributes of meta (gt_ckpt_meta) into an open checkpoint being
 * written (ckpt_write.c); collective with MPI-IO. */
int gt_ckpt_write_meta(hid_t file, const gt_ckpt_meta *m);

/* The format of an open checkpoint (1..GT_CKPT_FORMAT), checking the
 * checksum block size of format 3 (ckpt_read.c). */
int gt_ckpt_read_format(hid_t file, const char *path, int *format);

/* The attributes of an open checkpoint into m (ckpt_read.c); free with
 * gt_ckpt_meta_free. */
int gt_ckpt_read_meta_in(hid_t file, const char *path, gt_ckpt_meta *m);

/* The error for a checkpoint that cannot be opened: GT_ERR_INPUT naming it
 * (missing, not HDF5). */
int gt_ckpt_open_error(const char *path);

#endif
