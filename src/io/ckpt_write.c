/*
 * ckpt_write.c - writing a checkpoint file: the metadata through parallel
 * HDF5, the tensor data through each rank's own pwrite after the exchange
 * inside the tensor-parallel group (checkpoint.h, docs/checkpoints.md).
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gridtrain/bar.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/fault.h"
#include "ckpt_internal.h"
#include "ckpt_writer.h"
#include "h5util.h"
#include "write_scope.h"

// ---- the file's attributes ------------------------------------------------------------------

int gt_ckpt_write_meta(hid_t file, const gt_ckpt_meta *m)
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
  GT_CALL(gt_h5_write_attr_i64(file, "checksum_block_bytes", (long long)GT_CKPT_SUM_BYTES));
  GT_CALL(gt_h5_write_attr_str(file, "checksum",
                               "fletcher32: attribute of every dataset, one per block of "
                               "checksum_block_bytes of its little-endian row-major bytes "
                               "(docs/checkpoints.md)"));
  return GT_SUCCESS;
}

void gt_ckpt_note_local(gt_ckpt_writer *w, int code)
{
  if (w->local == GT_SUCCESS) {
    w->local = code;
    snprintf(w->local_message, sizeof w->local_message, "%s", gt_error_message());
  }
  gt_error_clear();
}

// ---- the tensor data: each rank's entries at the dataset's file offset -----------------
/*
 * Why the data does not go through H5Dwrite. A column-split tensor is, in
 * the file, one short run per row and q/k/v block of each rank's piece:
 * ~110k runs of 768 B-3 KB per rank for GPT-2 124M at tp=4, which several
 * ranks write into the same pages. Whether HDF5 or our own pwrite makes
 * those writes, they cost the same (benchmarks/README.md). And through the
 * page cache every byte lands in a page the kernel has just allocated; on a
 * VM that hands freed memory back to its host (page reporting, as on this
 * project's machines) that first touch alone ran dd at 340-520 MB/s, while
 * O_DIRECT wrote the same disk at 1.7-3.2 GB/s from 1, 2 or 4 ranks.
 *
 * So: (1) the ranks of the group (tensor parallel) swap entries, so that
 * each holds one contiguous range of the group's part of every sharded
 * tensor, cut at 4 KiB file boundaries (two-phase I/O, as ROMIO's
 * collective buffering does, but through our own point-to-point calls,
 * which yield on oversubscribed cores); (2) each rank pwrite(2)s its ranges
 * at the dataset's offset (H5Dget_offset: datasets are contiguous,
 * allocated at creation and never filled, so HDF5 writes none of their
 * bytes), the whole 4 KiB blocks of a range with O_DIRECT, the ends through
 * the page cache. The file is the same HDF5 file as before.
 */
#define GT_PWRITE_MAX ((size_t)64 << 20) /* bytes per pwrite(2) */

/* A failed write of the data: into the write scope (synchronous: the
 * first error of the rank, whichever path met it), or w->io (deferred: the
 * writer thread's own). */
static void gt_ckpt_io_note(gt_ckpt_writer *w, const char *text)
{
  if (!w->defer) {
    gt_write_scope_note(text);
  } else if (!w->io) {
    w->io = 1;
    snprintf(w->io_message, sizeof w->io_message, "%s", text);
  }
}

/* Write len bytes from src at file offset off, in pieces of GT_PWRITE_MAX,
 * through descriptor fd. A failure is noted (gt_ckpt_io_note), except an
 * EINVAL when `refusable` (an O_DIRECT write the file system turned down,
 * which the caller makes again through the page cache): 0 or the errno. */
static int gt_ckpt_pwrite_fd(gt_ckpt_writer *w, int fd, const char *src, size_t len,
                             size_t off, const char *what, bool refusable)
{
  const bool injected = w->fail_writes;
  if (!w->defer) /* inside the write scope: this rank is working, not stuck */
    (void)gt_write_scope_failing();
  while (len > 0) {
    const size_t n = len < GT_PWRITE_MAX ? len : GT_PWRITE_MAX;
    const ssize_t got = injected ? -1 : pwrite(fd, src, n, (off_t)off);
    const int err = injected ? EIO : got < 0 ? errno : got == 0 ? EIO : 0;
    if (err == EINTR)
      continue;
    if (err == EINVAL && refusable)
      return err;
    if (err) {
      char text[512];
      snprintf(text, sizeof text, "pwrite failed: %s (%s%s%s%s, %zu bytes at offset %zu)",
               got == 0 && !injected ? "wrote nothing" : strerror(err),
               injected ? "injected by GT_FAULT=" : "", injected ? w->fault : "",
               injected ? "; " : "", what, n, off);
      gt_ckpt_io_note(w, text);
      return err;
    }
    src += got;
    off += (size_t)got;
    len -= (size_t)got;
  }
  return 0;
}

/* Write the entries [logical, logical + len) of a dataset that starts at
 * byte `base` of the file from src: the whole 4 KiB blocks with O_DIRECT
 * when there is a descriptor for it and src lies in memory as the entries
 * lie in the file (same offset in a block), the rest through the page
 * cache. An O_DIRECT write refused with EINVAL (direct_io = auto) goes
 * through the page cache, and so does the rest of the file. */
static void gt_ckpt_pwrite(gt_ckpt_writer *w, size_t base, size_t logical, size_t len,
                           const float *src, const char *what)
{
  const char *p = (const char *)src;
  size_t off = base + logical * sizeof(float), end = off + len * sizeof(float);
  size_t d0 = gt_align_up(off, GT_DIO_ALIGN), d1 = end / GT_DIO_ALIGN * GT_DIO_ALIGN;
  if (w->fd_direct < 0 || d0 >= d1 || ((uintptr_t)p - off) % GT_DIO_ALIGN != 0)
    d0 = d1 = end;
  if (gt_ckpt_pwrite_fd(w, w->fd, p, d0 - off, off, what, false) != 0)
    return;
  const bool refusable = w->st->direct == GT_CKPT_DIRECT_AUTO;
  if (d1 > d0 && gt_ckpt_pwrite_fd(w, w->fd_direct, p + (d0 - off), d1 - d0, d0, what,
                                   refusable) == EINVAL && refusable) {
    close(w->fd_direct);
    w->fd_direct = -1;
    d1 = d0;
  }
  gt_ckpt_pwrite_fd(w, w->fd, p + (d1 - off), end - d1, d1, what, false);
}

/* Open the file's own descriptors (after H5Fcreate made it). */
static int gt_ckpt_open_data(gt_ckpt_writer *w)
{
  w->fd = open(w->path, O_WRONLY | O_CLOEXEC);
  GT_CHECK(w->fd >= 0, GT_ERR_SYSTEM, "cannot open %s to write its tensor data: %s", w->path,
           strerror(errno));
  if (w->st->direct == GT_CKPT_DIRECT_OFF)
    return GT_SUCCESS;
  w->fd_direct = open(w->path, O_WRONLY | O_DIRECT | O_CLOEXEC);
  GT_CHECK(w->fd_direct >= 0 || w->st->direct != GT_CKPT_DIRECT_ON, GT_ERR_INPUT,
           "checkpoint.direct_io = on, but the file system of %s does not take O_DIRECT "
           "(%s); set it to auto or off",
           w->path, strerror(errno));
  return GT_SUCCESS;
}

static void gt_ckpt_close_data(gt_ckpt_writer *w)
{
  int *fds[2] = {&w->fd, &w->fd_direct};
  for (int i = 0; i < 2; i++)
    if (*fds[i] >= 0) {
      if (close(*fds[i]) != 0) {
        char text[512];
        snprintf(text, sizeof text, "close failed: %s (%s)", strerror(errno), w->path);
        gt_ckpt_io_note(w, text);
      }
      *fds[i] = -1;
    }
}

/* The cut points of the group's contiguous range [lo, hi) of a dataset
 * starting at byte base: cut[0..gsize], rank i's range [cut[i], cut[i+1]),
 * on 4 KiB boundaries of the file where the range allows. */
static void gt_ckpt_cuts(size_t base, size_t lo, size_t hi, int g, size_t *cut)
{
  cut[0] = lo;
  cut[g] = hi;
  for (int i = 1; i < g; i++) {
    size_t c = lo + (size_t)((hi - lo) * (unsigned __int128)i / (unsigned)g);
    if (base % sizeof(float) == 0) {
      const size_t at = gt_align_up(base + c * sizeof(float), GT_DIO_ALIGN);
      c = (at - base) / sizeof(float);
    }
    c = c < cut[i - 1] ? cut[i - 1] : c > hi ? hi : c;
    cut[i] = c;
  }
}

/* A pointer into buf (4 KiB aligned, cap + GT_DIO_FLOATS floats) at which
 * entry `logical` of a dataset at byte base lies as it will in the file. */
static float *gt_ckpt_place(float *buf, size_t base, size_t logical)
{
  if (base % sizeof(float) != 0)
    return buf;
  return buf + (base / sizeof(float) + logical) % GT_DIO_FLOATS;
}

/* Cutting runs at the cut points, in logical order. */
typedef struct {
  const size_t *cut;
  int me, dest;        /* dest: the range the next entries fall in */
  const float *src;    /* sender: entries of local index a at src[0] */
  size_t a;
  float *send, *rows;  /* sender: packed for the others / this rank's range */
  size_t *count;       /* entries per destination (sender) */
  const float *recv;   /* receiver: what one member sent */
  size_t pos;          /* receiver: entries taken from recv */
} gt_cutter;

static int gt_cut_send(void *ctx, size_t local, size_t logical, size_t len)
{
  gt_cutter *c = ctx;
  while (len > 0) {
    while (logical >= c->cut[c->dest + 1])
      c->dest++;
    const size_t n = gt_min_size(len, c->cut[c->dest + 1] - logical);
    const float *from = c->src + (local - c->a);
    if (c->dest == c->me) {
      memcpy(c->rows + (logical - c->cut[c->me]), from, n * sizeof(float));
    } else {
      memcpy(c->send + c->pos, from, n * sizeof(float));
      c->pos += n;
      c->count[c->dest] += n;
    }
    local += n;
    logical += n;
    len -= n;
  }
  return GT_SUCCESS;
}

/* Receiver: a member's entries in this rank's range, counted (rows NULL)
 * or put in place. */
static int gt_cut_recv(void *ctx, size_t local, size_t logical, size_t len)
{
  (void)local;
  gt_cutter *c = ctx;
  const size_t lo = c->cut[c->me], hi = c->cut[c->me + 1];
  const size_t s = logical > lo ? logical : lo, e = logical + len < hi ? logical + len : hi;
  if (s >= e)
    return GT_SUCCESS;
  if (c->rows)
    memcpy(c->rows + (s - lo), c->recv + c->pos, (e - s) * sizeof(float));
  c->pos += e - s;
  return GT_SUCCESS;
}

/* Checksum terms and writes of t's runs in [a, b), each where it belongs. */
typedef struct {
  gt_ckpt_writer *w;
  const float *src; /* local index a at src[0] */
  size_t a, base;
  uint64_t *sums;
  size_t total;
  const char *what;
  int tensor, kind;
} gt_run_writer;

/* The checksum terms and the write of len entries at src, from entry
 * `logical` of the dataset on: made now, or listed for the writer thread
 * (deferred). */
static int gt_ckpt_emit(gt_run_writer *r, size_t logical, size_t len, const float *src)
{
  gt_ckpt_writer *w = r->w;
  if (!w->defer) {
    gt_fletcher_add(r->sums, r->total, src, logical, len);
    gt_ckpt_pwrite(w, r->base, logical, len, src, r->what);
    return GT_SUCCESS;
  }
  if (w->njobs == w->jobs_cap)
    GT_CALL(gt_ckpt_grow((void **)&w->jobs, &w->jobs_cap, 2 * w->njobs + 64, sizeof *w->jobs));
  w->jobs[w->njobs++] = (gt_ckpt_job){.src = src, .base = r->base, .logical = logical,
                                      .len = len, .total = r->total, .sums = r->sums,
                                      .tensor = r->tensor, .kind = r->kind};
  return GT_SUCCESS;
}

static int gt_write_run(void *ctx, size_t local, size_t logical, size_t len)
{
  gt_run_writer *r = ctx;
  GT_CALL(gt_ckpt_emit(r, logical, len, r->src + (local - r->a)));
  return GT_SUCCESS;
}

/* The exchange of one sharded tensor's whole slabs (local [x0, x1)) inside
 * the group; this rank then writes its range. ok: this rank's staging holds
 * its entries (else it takes part with whatever is there, and writes
 * nothing). Collective on the group. */
static int gt_ckpt_swap(gt_ckpt_writer *w, const gt_param *t, const int *index, size_t a,
                        size_t x0, size_t x1, size_t base, gt_run_writer *rw, bool ok)
{
  const int g = w->plan.gsize, me = w->plan.grank;
  const MPI_Comm comm = *w->st->group;
  size_t ls, fs;
  gt_ckpt_slab_sizes(t, &ls, &fs);
  size_t cut[GT_CKPT_GROUP_MAX + 1], scount[GT_CKPT_GROUP_MAX] = {0};
  size_t rcount[GT_CKPT_GROUP_MAX] = {0};
  gt_ckpt_cuts(base, x0 / ls * fs, x1 / ls * fs, g, cut);
  const size_t mine = cut[me + 1] - cut[me];
  GT_CHECK(mine + GT_DIO_FLOATS <= w->rows_cap, GT_ERR_INTERNAL,
           "internal error: checkpoint exchange range of %zu entries past %zu", mine,
           w->rows_cap);
  float *rows = gt_ckpt_place(w->rows, base, cut[me]);
  gt_cutter send = {.cut = cut, .me = me, .src = rw->src, .a = a, .send = w->send,
                    .rows = rows, .count = scount};
  GT_CALL(gt_ckpt_runs_at(t, index[me], x0, x1, gt_cut_send, &send));
  size_t rtotal = 0;
  for (int j = 0; j < g; j++) {
    if (j == me)
      continue;
    gt_cutter c = {.cut = cut, .me = me};
    GT_CALL(gt_ckpt_runs_at(t, index[j], x0, x1, gt_cut_recv, &c));
    rcount[j] = c.pos;
    rtotal += c.pos;
  }
  GT_CHECK(send.pos <= w->cap && rtotal <= w->cap, GT_ERR_INTERNAL,
           "internal error: checkpoint exchange of %zu / %zu entries past %zu", send.pos,
           rtotal, w->cap);
  GT_CALL(gt_ckpt_swap_post(comm, g, w->send, scount, w->recv, rcount));
  if (!ok)
    return GT_SUCCESS;
  size_t roff = 0;
  for (int j = 0; j < g; j++) {
    if (j == me)
      continue;
    gt_cutter c = {.cut = cut, .me = me, .recv = w->recv + roff, .rows = rows};
    GT_CALL(gt_ckpt_runs_at(t, index[j], x0, x1, gt_cut_recv, &c));
    roff += rcount[j];
  }
  GT_CALL(gt_ckpt_emit(rw, cut[me], mine, rows));
  return GT_SUCCESS;
}

/* Floats of the arena (deferred writes) one part takes: its entries
 * downloaded, placed as in the file (gt_ckpt_place), and the range it
 * writes after an exchange; each slice starts on a 4 KiB boundary. */
static size_t gt_ckpt_slice(size_t n) { return gt_align_up(n + 2 * GT_DIO_FLOATS, GT_DIO_FLOATS); }

static float *gt_ckpt_take(gt_ckpt_writer *w, size_t n)
{
  const size_t need = gt_ckpt_slice(n);
  if (w->arena_used + need > w->arena_cap)
    return NULL;
  float *p = w->arena + w->arena_used;
  w->arena_used += need;
  return p;
}

/* This rank's part of tensor (kind): its local entries [*a, *b), whether
 * the group exchanges it; false: nothing to write or exchange. */
static bool gt_ckpt_part(const gt_ckpt_writer *w, const gt_ckpt_tensor *tensor, int kind,
                         gt_param **param, size_t *a, size_t *b, bool *swap)
{
  const gt_ckpt_state *st = w->st;
  gt_param *t = st->params ? gt_params_find(st->params, tensor->name) : NULL;
  if (!t || !st->writer || !t->counted)
    return false;
  const size_t i = (size_t)(tensor - st->tensors);
  *swap = w->plan.swap && w->plan.swap[i];
  size_t lo, hi, count = 0;
  gt_ckpt_range(st, kind, &lo, &hi);
  gt_ckpt_clip(t, lo, hi, a, b);
  *param = t;
  if (gt_ckpt_runs(t, *a, *b, gt_run_count, &count) != GT_SUCCESS) {
    gt_error_clear(); /* the write itself meets it again and reports it */
    return true;
  }
  return count > 0 || *swap; /* a member of the group may hold padding only */
}

size_t gt_ckpt_arena_floats(const gt_ckpt_writer *w)
{
  size_t n = 0;
  for (int i = 0; i < w->st->ntensors; i++)
    for (int k = 0; k < GT_NKINDS; k++) {
      gt_param *t = NULL;
      size_t a = 0, b = 0;
      bool swap = false;
      if (!gt_ckpt_part(w, &w->st->tensors[i], k, &t, &a, &b, &swap))
        continue;
      /* the exchanged range is at most (b - a) + GT_DIO_FLOATS + 1 entries */
      n += gt_ckpt_slice(b - a) + (swap ? gt_ckpt_slice(b - a + GT_DIO_FLOATS) : 0);
    }
  return n;
}

/* Write this rank's entries of tensor (kind) into dset, independently - but
 * an exchanged tensor is collective on the group, which every member takes
 * part in, failed or not. */
static int gt_ckpt_write_part_in(gt_ckpt_writer *w, hid_t dset, const gt_ckpt_tensor *tensor,
                                 int kind)
{
  const gt_ckpt_state *st = w->st;
  gt_param *t = NULL;
  size_t a = 0, b = 0, count = 0;
  bool swap = false;
  if (!gt_ckpt_part(w, tensor, kind, &t, &a, &b, &swap))
    return GT_SUCCESS;
  GT_CALL(gt_ckpt_runs(t, a, b, gt_run_count, &count)); /* reports what gt_ckpt_part met */
  const size_t i = (size_t)(tensor - st->tensors);
  if (w->defer) { /* the snapshot: a slice of the arena for each part */
    w->staging = gt_ckpt_take(w, b - a);
    w->rows = swap ? gt_ckpt_take(w, b - a + GT_DIO_FLOATS) : NULL;
    w->rows_cap = swap ? gt_ckpt_slice(b - a + GT_DIO_FLOATS) : 0;
    GT_CHECK(w->staging && (w->rows || !swap), GT_ERR_INTERNAL,
             "internal error: the checkpoint's host copy has no room for %s", tensor->name);
  }
  for (int d = 0; d < tensor->ndim; d++)
    GT_CHECK(t->ndim == tensor->ndim && t->full_shape[d] == tensor->dims[d], GT_ERR_INTERNAL,
             "internal error: parameter %s does not have its logical shape", t->name);
  const haddr_t base = H5Dget_offset(dset);
  GT_CHECK(base != HADDR_UNDEF, GT_ERR_HDF5,
           "H5Dget_offset gave no file offset for %s/%s (not contiguous and allocated?)",
           gt_kind_group[kind], tensor->name);
  /* The local entries [a, b), downloaded where entry a lies as in the file. */
  float *src = t->shard.axis < 0 ? gt_ckpt_place(w->staging, (size_t)base, a) : w->staging;
  bool ok = w->local == GT_SUCCESS;
  if (ok && gt_fault_hit("ckpt_local_fail", w->rank, w->step)) {
    gt_error_set(GT_ERR_DEVICE, __FILE__, __LINE__, __func__,
                 "copying %s/%s to the host failed (injected by GT_FAULT=ckpt_local_fail)",
                 gt_kind_group[kind], tensor->name);
    gt_ckpt_note_local(w, GT_ERR_DEVICE);
    ok = false;
  }
  gt_backend *be = st->params->be;
  if (ok && w->defer && st->copy_later && be->host_visible && !swap) {
    /* the writer thread copies it while the caller goes on */
    if (w->ncopies == w->copies_cap)
      GT_CALL(gt_ckpt_grow((void **)&w->copies, &w->copies_cap, 2 * w->ncopies + 64,
                           sizeof *w->copies));
    w->copies[w->ncopies++] = (gt_ckpt_copy){
        .dst = src, .src = gt_ckpt_part_data(st, kind, t->offset + a), .n = b - a};
  } else if (ok) {
    int status = be->ops->download(be, src, gt_ckpt_part_data(st, kind, t->offset + a),
                                   (b - a) * sizeof(float), NULL);
    if (status == GT_SUCCESS)
      status = gt_ckpt_copy_done(be);
    if (status != GT_SUCCESS) {
      gt_ckpt_note_local(w, status);
      ok = false;
    }
  }
  char what[GT_PARAM_NAME_MAX + 16];
  snprintf(what, sizeof what, "%s/%s", gt_kind_group[kind], tensor->name);
  gt_run_writer rw = {.w = w, .src = src, .a = a, .base = (size_t)base,
                      .sums = w->sums + 2 * w->sum_base[i * GT_NKINDS + (size_t)kind],
                      .total = gt_ckpt_tensor_numel(tensor), .what = what,
                      .tensor = (int)i, .kind = kind};
  size_t x0 = a, x1 = a; /* the whole slabs, exchanged */
  if (swap)
    gt_ckpt_whole_slabs(t, a, b, &x0, &x1);
  if (x0 < x1)
    GT_CALL(gt_ckpt_swap(w, t, w->plan.index + i * (size_t)w->plan.gsize, a, x0, x1,
                         (size_t)base, &rw, ok));
  if (!ok)
    return GT_SUCCESS;
  GT_CALL(gt_ckpt_runs(t, a, x0, gt_write_run, &rw));
  GT_CALL(gt_ckpt_runs(t, x1 > x0 ? x1 : a, b, gt_write_run, &rw));
  return GT_SUCCESS;
}

static void gt_ckpt_write_part(gt_ckpt_writer *w, hid_t dset, const gt_ckpt_tensor *tensor,
                               int kind)
{
  int status = gt_ckpt_write_part_in(w, dset, tensor, kind);
  if (status != GT_SUCCESS)
    gt_ckpt_note_local(w, status);
}

enum { GT_C_SPACE, GT_C_DCPL, GT_C_N };

/* Create dataset `group/name` of one logical tensor: contiguous, its space
 * allocated now (parallel HDF5 does so anyway), never filled (every entry
 * is written). Collective. */
static int gt_ckpt_create_in(hid_t file, const gt_ckpt_tensor *tensor, int kind, hid_t *dset,
                             hid_t ids[])
{
  char path[GT_PARAM_NAME_MAX + 16];
  snprintf(path, sizeof path, "%s/%s", gt_kind_group[kind], tensor->name);
  hsize_t dims[GT_TENSOR_MAX_DIMS];
  for (int d = 0; d < tensor->ndim; d++)
    dims[d] = (hsize_t)tensor->dims[d];
  GT_H5_ID(ids[GT_C_SPACE], H5Screate_simple(tensor->ndim, dims, NULL));
  GT_H5_ID(ids[GT_C_DCPL], H5Pcreate(H5P_DATASET_CREATE));
  GT_CALL_HDF5(H5Pset_layout(ids[GT_C_DCPL], H5D_CONTIGUOUS));
  GT_CALL_HDF5(H5Pset_fill_time(ids[GT_C_DCPL], H5D_FILL_TIME_NEVER));
  GT_CALL_HDF5(H5Pset_alloc_time(ids[GT_C_DCPL], H5D_ALLOC_TIME_EARLY));
  GT_H5_ID(*dset, H5Dcreate2(file, path, H5T_IEEE_F32LE, ids[GT_C_SPACE], H5P_DEFAULT,
                             ids[GT_C_DCPL], H5P_DEFAULT));
  return GT_SUCCESS;
}

static int gt_ckpt_create(hid_t file, const gt_ckpt_tensor *tensor, int kind, hid_t *dset)
{
  hid_t ids[GT_C_N] = {H5I_INVALID_HID, H5I_INVALID_HID};
  int status = gt_ckpt_create_in(file, tensor, kind, dset, ids);
  GT_CALL(gt_h5_close_all(status, GT_C_N, ids));
  return GT_SUCCESS;
}

/* GT_FAULT=ckpt_kill[:step=S] (fault.h): rank 0 dies halfway through the
 * write, as a node failure would. */
static void gt_ckpt_maybe_kill(const gt_ckpt_writer *w, size_t done, size_t total)
{
  if (done == total / 2 && w->kill) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(stderr, "gridtrain: GT_FAULT=ckpt_kill: killing rank %d in the checkpoint write of "
            "step %ld%s (t=%.3f)\n", w->rank, w->step, w->defer ? ", in the background" : "",
            (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
    fflush(stderr);
    raise(SIGKILL);
  }
}

enum { GT_RS_GROUP, GT_RS_SPACE, GT_RS_DCPL, GT_RS_DSET, GT_RS_MEM, GT_RS_N };

/* /rank/state: every rank's row of rank_n floats, padded to the longest
 * row L (collective: creation, attributes, the checksum sums; each row is
 * this rank's own independent write). */
static int gt_ckpt_write_rank_in(hid_t file, gt_ckpt_writer *w, MPI_Comm comm, hid_t ids[])
{
  const gt_ckpt_state *st = w->st;
  unsigned long long mine = st->rank_state ? st->rank_n : 0, longest = 0;
  GT_CALL_MPI(MPI_Allreduce(&mine, &longest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm));
  if (longest == 0)
    return GT_SUCCESS;
  int rank = 0, size = 1;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL_MPI(MPI_Comm_size(comm, &size));
  GT_CHECK(longest <= UINT32_MAX, GT_ERR_INPUT, "rank state of %llu floats is too long",
           longest);
  uint32_t *lengths = malloc(sizeof *lengths * (size_t)size);
  const size_t L = (size_t)longest, total = L * (size_t)size, nsums = gt_ckpt_nsums(total);
  float *row = calloc(L, sizeof *row);
  uint64_t *sums = calloc(2 * nsums, sizeof *sums);
  uint32_t *values = malloc(sizeof *values * nsums);
  int status = lengths && row && sums && values
                   ? GT_SUCCESS
                   : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the rank state");
  const uint32_t my_len = (uint32_t)mine;
  if (status == GT_SUCCESS &&
      MPI_Allgather(&my_len, 1, MPI_UINT32_T, lengths, 1, MPI_UINT32_T, comm) != MPI_SUCCESS)
    status = GT_ERROR(GT_ERR_MPI, "MPI_Allgather of the rank state lengths failed");
  if (status == GT_SUCCESS) {
    if (mine)
      memcpy(row, st->rank_state, mine * sizeof *row);
    gt_fletcher_add(sums, total, row, (size_t)rank * L, L);
    if (MPI_Allreduce(MPI_IN_PLACE, sums, (int)(2 * nsums), MPI_UINT64_T, MPI_SUM, comm) !=
        MPI_SUCCESS)
      status = GT_ERROR(GT_ERR_MPI, "MPI_Allreduce of the rank state checksums failed");
  }
  for (size_t b = 0; b < nsums && status == GT_SUCCESS; b++) {
    uint64_t sum[2] = {sums[2 * b] % GT_FLETCHER_MOD, sums[2 * b + 1] % GT_FLETCHER_MOD};
    values[b] = gt_fletcher_value(sum);
  }
  free(sums);
  if (status == GT_SUCCESS) {
    const hsize_t dims = (hsize_t)total, start = (hsize_t)rank * L, count = L;
    status = GT_SUCCESS;
    ids[GT_RS_GROUP] = H5Gcreate2(file, "/rank", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ids[GT_RS_SPACE] = H5Screate_simple(1, &dims, NULL);
    ids[GT_RS_DCPL] = H5Pcreate(H5P_DATASET_CREATE);
    if (ids[GT_RS_GROUP] < 0 || ids[GT_RS_SPACE] < 0 || ids[GT_RS_DCPL] < 0 ||
        H5Pset_layout(ids[GT_RS_DCPL], H5D_CONTIGUOUS) < 0 ||
        H5Pset_fill_time(ids[GT_RS_DCPL], H5D_FILL_TIME_NEVER) < 0 ||
        H5Pset_alloc_time(ids[GT_RS_DCPL], H5D_ALLOC_TIME_EARLY) < 0 ||
        (ids[GT_RS_DSET] = H5Dcreate2(file, "/rank/state", H5T_IEEE_F32LE, ids[GT_RS_SPACE],
                                      H5P_DEFAULT, ids[GT_RS_DCPL], H5P_DEFAULT)) < 0)
      status = gt_error_hdf5("H5Dcreate2(/rank/state)", __FILE__, __LINE__, __func__);
    if (status == GT_SUCCESS) {
      int local = GT_SUCCESS; /* this rank's row: a failure here is local */
      ids[GT_RS_MEM] = H5Screate_simple(1, &count, NULL);
      if (ids[GT_RS_MEM] < 0 ||
          H5Sselect_hyperslab(ids[GT_RS_SPACE], H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
          H5Dwrite(ids[GT_RS_DSET], H5T_NATIVE_FLOAT, ids[GT_RS_MEM], ids[GT_RS_SPACE],
                   H5P_DEFAULT, row) < 0)
        local = gt_error_hdf5("H5Dwrite(/rank/state)", __FILE__, __LINE__, __func__);
      if (local != GT_SUCCESS)
        gt_ckpt_note_local(w, local);
      status = gt_h5_write_attr_u32s(ids[GT_RS_DSET], "lengths", size, lengths);
      if (status == GT_SUCCESS)
        status = gt_h5_write_attr_str(ids[GT_RS_DSET], "tag", st->rank_tag ? st->rank_tag : "");
      if (status == GT_SUCCESS)
        status = gt_h5_write_attr_u32s(ids[GT_RS_DSET], "fletcher32", (int)nsums, values);
    }
  }
  free(lengths);
  free(row);
  free(values);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_ckpt_write_rank(hid_t file, gt_ckpt_writer *w, MPI_Comm comm)
{
  hid_t ids[GT_RS_N];
  for (int i = 0; i < GT_RS_N; i++)
    ids[i] = H5I_INVALID_HID;
  int status = gt_ckpt_write_rank_in(file, w, comm, ids);
  GT_CALL(gt_h5_close_all(status, GT_RS_N, ids));
  return GT_SUCCESS;
}

int gt_ckpt_write_begin(gt_ckpt_writer *w, const gt_ckpt_meta *meta, MPI_Comm comm,
                        hid_t ids[])
{
  GT_CALL(gt_h5_create_mpio(w->path, comm, &ids[GT_WF_FILE]));
  const hid_t file = ids[GT_WF_FILE];
  GT_CALL(gt_ckpt_write_meta(file, meta));
  const char *groups[] = {"/model", "/optim", "/optim/m", "/optim/v"};
  for (int g = 0; g < 4; g++) {
    GT_H5_ID(ids[GT_WF_GROUP], H5Gcreate2(file, groups[g], H5P_DEFAULT, H5P_DEFAULT,
                                          H5P_DEFAULT));
    GT_CALL(gt_h5_close(&ids[GT_WF_GROUP]));
  }
  const gt_ckpt_state *st = w->st;
  for (int i = 0; i < st->ntensors; i++)
    for (int k = 0; k < GT_NKINDS; k++)
      GT_CALL(gt_ckpt_create(file, &st->tensors[i], k, &w->dsets[i * GT_NKINDS + k]));
  /* the data: our own writes (the exchanged tensors collective on the group
   * only), no collective call of HDF5's per tensor */
  if (st->writer && st->params) {
    const int opened = gt_ckpt_open_data(w);
    if (opened != GT_SUCCESS)
      gt_ckpt_note_local(w, opened);
  }
  w->arena_used = 0;
  for (int i = 0; i < st->ntensors; i++) {
    if (!w->defer) /* deferred: the writer thread dies halfway instead */
      gt_ckpt_maybe_kill(w, (size_t)i, (size_t)st->ntensors);
    for (int k = 0; k < GT_NKINDS; k++)
      gt_ckpt_write_part(w, w->dsets[i * GT_NKINDS + k], &st->tensors[i], k);
    gt_bar_set(i + 1);
  }
  if (!w->defer)
    gt_ckpt_close_data(w);
  GT_CALL(gt_ckpt_write_rank(file, w, comm));
  return GT_SUCCESS;
}

void gt_ckpt_write_jobs(gt_ckpt_writer *w, atomic_bool *cancel, void (*snapped)(void *),
                        void *ctx)
{
  for (size_t c = 0; c < w->ncopies && !atomic_load(cancel); c++)
    memcpy(w->copies[c].dst, w->copies[c].src, w->copies[c].n * sizeof(float));
  if (snapped)
    snapped(ctx);
  for (size_t j = 0; j < w->njobs && !w->io && !atomic_load(cancel); j++) {
    gt_ckpt_maybe_kill(w, j, w->njobs);
    const gt_ckpt_job *job = &w->jobs[j];
    char what[GT_PARAM_NAME_MAX + 16];
    snprintf(what, sizeof what, "%s/%s", gt_kind_group[job->kind],
             w->st->tensors[job->tensor].name);
    gt_fletcher_add(job->sums, job->total, job->src, job->logical, job->len);
    gt_ckpt_pwrite(w, job->base, job->logical, job->len, job->src, what);
  }
  /* the data durable before the main thread names the file */
  if (!w->io && w->fd >= 0 && fdatasync(w->fd) != 0) {
    char text[512];
    snprintf(text, sizeof text, "fdatasync failed: %s (%s)", strerror(errno), w->path);
    gt_ckpt_io_note(w, text);
  }
  gt_ckpt_close_data(w);
}

int gt_ckpt_write_end(gt_ckpt_writer *w, hid_t file, MPI_Comm comm, bool sync)
{
  const gt_ckpt_state *st = w->st;
  /* Every entry was written by one rank: the sums of the terms are the
   * checksums. */
  GT_CALL(gt_write_scope_sums(w->sums, 2 * w->nsums, comm));
  for (size_t b = 0; b < w->nsums; b++) {
    uint64_t sum[2] = {w->sums[2 * b] % GT_FLETCHER_MOD, w->sums[2 * b + 1] % GT_FLETCHER_MOD};
    w->values[b] = gt_fletcher_value(sum);
  }
  for (int i = 0; i < st->ntensors; i++)
    for (int k = 0; k < GT_NKINDS; k++) {
      const size_t d = (size_t)(i * GT_NKINDS + k);
      const size_t n = gt_ckpt_nsums(gt_ckpt_tensor_numel(&st->tensors[i]));
      GT_CALL(gt_h5_write_attr_u32s(w->dsets[d], "fletcher32", (int)n,
                                    w->values + w->sum_base[d]));
    }
  if (sync) /* MPI_File_sync: what every rank wrote is durable (the close does not sync) */
    GT_CALL_HDF5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  return GT_SUCCESS;
}

/* The writer's buffers (every rank: the checksum all-reduce has the same
 * size everywhere). */
static int gt_ckpt_writer_alloc(gt_ckpt_writer *w)
{
  const gt_ckpt_state *st = w->st;
  w->fd = w->fd_direct = -1;
  w->local = GT_SUCCESS;
  const size_t nd = (size_t)st->ntensors * GT_NKINDS;
  const size_t n = gt_ckpt_largest_local(st);
  w->cap = n + 2 * GT_DIO_FLOATS;
  w->rows_cap = w->cap + GT_DIO_FLOATS;
  w->sum_base = malloc((nd + 1) * sizeof(size_t));
  w->dsets = malloc((nd + 1) * sizeof(hid_t));
  GT_CHECK(w->sum_base && w->dsets, GT_ERR_SYSTEM, "out of memory for the dataset list");
  for (size_t d = 0; d < nd; d++) {
    w->dsets[d] = H5I_INVALID_HID;
    w->sum_base[d] = w->nsums;
    w->nsums += gt_ckpt_nsums(gt_ckpt_tensor_numel(&st->tensors[d / GT_NKINDS]));
  }
  GT_CHECK(2 * w->nsums <= (size_t)INT_MAX, GT_ERR_INPUT,
           "a checkpoint of %zu checksum blocks is too large", w->nsums);
  w->sums = calloc(2 * w->nsums + 1, sizeof(uint64_t));
  w->values = malloc((w->nsums + 1) * sizeof(uint32_t));
  GT_CHECK(w->sums && w->values, GT_ERR_SYSTEM, "out of memory allocating %zu bytes of checksums",
           w->nsums * (2 * sizeof(uint64_t) + sizeof(uint32_t)));
  /* staging and rows get room to start where their first entry lies in a
   * 4 KiB block of the file (gt_ckpt_place) */
  const size_t bytes = (w->cap + GT_DIO_FLOATS) * sizeof(float);
  float **bufs[4] = {&w->send, &w->recv, &w->staging, &w->rows};
  const int nb = w->defer ? (w->plan.any ? 2 : 0) : w->plan.any ? 4 : 3;
  for (int b = w->plan.any ? 0 : 2; b < nb; b++) {
    void *p = NULL;
    GT_CHECK(posix_memalign(&p, GT_DIO_ALIGN, bytes) == 0, GT_ERR_SYSTEM,
             "out of memory allocating %zu bytes of checkpoint staging buffers", bytes);
    *bufs[b] = p;
  }
  return GT_SUCCESS;
}

int gt_ckpt_writer_init(gt_ckpt_writer *w, MPI_Comm comm)
{
  (void)comm; /* the plan's all-gather is on st->group */
  w->plan = (gt_swap_plan){.gsize = 1};
  w->fail_writes = gt_fault_hit("ckpt_write_fail", w->rank, w->step);
  w->fault = "ckpt_write_fail";
  w->kill = gt_fault_hit("ckpt_kill", w->rank, w->step);
  GT_CALL(gt_ckpt_plan_swap(w->st, true, &w->plan));
  GT_CALL(gt_ckpt_writer_alloc(w));
  return GT_SUCCESS;
}

void gt_ckpt_writer_free(gt_ckpt_writer *w)
{
  if (w->defer) /* slices of the arena, which the caller owns */
    w->staging = w->rows = NULL;
  free(w->sum_base);
  free(w->dsets);
  free(w->sums);
  free(w->values);
  free(w->staging);
  free(w->rows);
  free(w->send);
  free(w->recv);
  free(w->jobs);
  free(w->copies);
  w->sum_base = NULL;
  w->dsets = NULL;
  w->sums = NULL;
  w->values = NULL;
  w->staging = w->rows = w->send = w->recv = NULL;
  w->jobs = NULL;
  w->njobs = w->jobs_cap = 0;
  w->copies = NULL;
  w->ncopies = w->copies_cap = 0;
  gt_swap_plan_free(&w->plan);
}

/* gt_ckpt_write, naming the checkpoint `shown` in its error message. */
int gt_ckpt_write_file(const char *path, const char *shown, const gt_ckpt_meta *meta,
                       const gt_ckpt_state *st, MPI_Comm comm, int fault_rank)
{
  gt_ckpt_writer w = {.st = st, .path = path, .rank = fault_rank, .step = meta->step,
                      .local = GT_SUCCESS, .fd = -1, .fd_direct = -1, .plan = {.gsize = 1}};
  int status = gt_comm_foreign_begin(comm);
  const bool in_scope = status == GT_SUCCESS;
  if (status == GT_SUCCESS)
    status = gt_ckpt_writer_init(&w, comm);
  status = gt_error_agree(status, comm);
  hid_t ids[GT_WF_N] = {H5I_INVALID_HID, H5I_INVALID_HID};
  if (status == GT_SUCCESS) {
    /* Every rank makes every collective call of the write, whatever failed
     * here (write scope, `local`), and closes the file; only then is the
     * outcome known. The first I/O error is the cause of whatever followed,
     * then a local failure, then HDF5's own error. */
    gt_write_scope_begin(w.fail_writes, comm, shown);
    const char *base = strrchr(shown, '/');
    gt_bar_begin(base ? base + 1 : shown, st->ntensors, GT_BAR_ITEMS);
    status = gt_ckpt_write_begin(&w, meta, comm, ids);
    if (status == GT_SUCCESS)
      status = gt_ckpt_write_end(&w, ids[GT_WF_FILE], comm, true);
    gt_bar_end();
    status = gt_h5_close_all(status, st->ntensors * GT_NKINDS, w.dsets);
    status = gt_h5_close_all(status, GT_WF_N, ids);
    const int io = gt_write_scope_end();
    if (io != GT_SUCCESS) {
      status = io;
    } else if (w.local != GT_SUCCESS) {
      status = gt_error_set(w.local, __FILE__, __LINE__, __func__, "%s", w.local_message);
    }
  }
  if (in_scope)
    gt_comm_foreign_end();
  gt_ckpt_writer_free(&w);
  if (status != GT_SUCCESS)
    return gt_error_wrap(status, __FILE__, __LINE__, __func__, "cannot write checkpoint %s",
                         shown);
  return GT_SUCCESS;
}

int gt_ckpt_write(const char *path, const gt_ckpt_meta *meta, const gt_ckpt_state *st,
                  MPI_Comm comm)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  GT_CALL(gt_ckpt_write_file(path, path, meta, st, comm, rank));
  return GT_SUCCESS;
}
