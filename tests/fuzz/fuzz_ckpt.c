/*
 * fuzz_ckpt.c - libFuzzer harness for the checkpoint reader (checkpoint.h:
 * gt_ckpt_read_meta, gt_ckpt_read, gt_ckpt_verify_file,
 * gt_ckpt_export_weights; src/io/ckpt_read.c, checkpoint.c, ckpt_layout.c).
 * A tiny GPT (1 layer, 2 heads, dim 8, seq_len 8, vocab 16) is made at
 * start-up on the CPU backend, and written as a template checkpoint (format
 * 3, with a /rank/state row); a second template is the same checkpoint in
 * format 2 (chunked datasets with HDF5's Fletcher32 filter).
 * The input is an 8-byte header - mode (bit 0: edits, bit 1: template),
 * the layout loaded (the whole model, a tensor-parallel piece of it, shapes
 * only), the flat range loaded, the rank state asked for, export on or
 * off - and then either the bytes of the file itself or a list of edits of
 * the template: attributes set to other values, types and sizes, or
 * removed; datasets removed or replaced (type, rank, shape, layout,
 * filters); values overwritten (NaN, infinities: checksums and finiteness);
 * groups and dangling links; the closed file truncated, flipped or
 * overwritten at an offset.
 * Properties: every call ends in GT_SUCCESS or in GT_ERR_INPUT / GT_ERR_HDF5
 * with a message, never a crash, a hang, a sanitizer report or another
 * code; no HDF5 object stays open; the template with no edit reads back
 * exactly the values written.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gridtrain/backend.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/params.h"

#define GT_FUZZ_HEADER 8
#define GT_FZ_MAXT 32

enum { GT_FZ_WHOLE, GT_FZ_PIECE, GT_FZ_NLAYOUTS };

static char gt_fz_dir[256], gt_fz_file[300], gt_fz_out[300];
static uint8_t *gt_fz_template[2];
static size_t gt_fz_template_size[2];
static gt_backend *gt_fz_be;
static gt_ckpt_tensor gt_fz_tensors[GT_FZ_MAXT];
static int gt_fz_ntensors;
static gt_params *gt_fz_params[GT_FZ_NLAYOUTS];
static float *gt_fz_m[GT_FZ_NLAYOUTS], *gt_fz_v[GT_FZ_NLAYOUTS];
static float *gt_fz_written; /* the whole model's values in the template */
static const float gt_fz_rank_written[4] = {1, 2, 3, 4};
#define GT_FZ_TAG "fuzz rank state"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void gt_fz_die(const char *what)
{
  fprintf(gt_fuzz_log(), "fuzz_ckpt: %s: %s\n", what, gt_error_message());
  abort();
}

// ---- the model and the templates ---------------------------------------------------------

/* The parameters of a layout: the whole model, or piece 1 of 2 of every
 * matrix (split along one axis, in 3 blocks where the extent allows, as
 * q, k, v are). */
static void gt_fz_make_params(int layout)
{
  gt_params *p = NULL;
  if (gt_params_create(gt_fz_be, GT_F32, &p) != GT_SUCCESS)
    gt_fz_die("gt_params_create");
  for (int i = 0; i < gt_fz_ntensors; i++) {
    const gt_ckpt_tensor *t = &gt_fz_tensors[i];
    gt_shard shard = GT_SHARD_NONE;
    if (layout == GT_FZ_PIECE && t->ndim == 2) {
      const int axis = i % 2;
      shard = (gt_shard){axis, t->dims[axis] % 3 == 0 ? 3 : 1, 2, 1, {0}};
    }
    if (gt_params_add(p, t->name, t->ndim, t->dims, shard, true, GT_INIT_NORMAL, 0.02f,
                      t->ndim == 2) != GT_SUCCESS)
      gt_fz_die("gt_params_add");
  }
  if (gt_params_finalize(p) != GT_SUCCESS || gt_params_init(p, 11) != GT_SUCCESS)
    gt_fz_die("gt_params_finalize");
  gt_backend *be = gt_fz_be;
  const size_t bytes = p->numel * sizeof(float);
  float *host = calloc(p->numel, sizeof(float));
  if (!host || be->ops->alloc(be, bytes, (void **)&gt_fz_m[layout]) != GT_SUCCESS ||
      be->ops->alloc(be, bytes, (void **)&gt_fz_v[layout]) != GT_SUCCESS)
    gt_fz_die("the moments");
  for (size_t i = 0; i < p->numel; i++)
    host[i] = 0.001f * (float)(i % 97);
  be->ops->upload(be, gt_fz_m[layout], host, bytes, NULL);
  be->ops->upload(be, gt_fz_v[layout], host, bytes, NULL);
  if (layout == GT_FZ_WHOLE) {
    be->ops->download(be, host, p->values, bytes, NULL);
    gt_fz_written = host;
    host = NULL;
  }
  be->ops->sync(be);
  free(host);
  gt_fz_params[layout] = p;
}

/* Rewrite every dataset of the open file as format 2 writes it: chunked,
 * with HDF5's Fletcher32 filter. */
static void gt_fz_to_format2(hid_t file)
{
  static const char *const groups[3] = {"/model", "/optim/m", "/optim/v"};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < gt_fz_ntensors; i++) {
      char path[128];
      if (snprintf(path, sizeof path, "%s/%s", groups[k], gt_fz_tensors[i].name) >=
          (int)sizeof path)
        gt_fz_die("a tensor name is too long");
      hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
      hid_t space = H5Dget_space(d);
      const hssize_t n = H5Sget_simple_extent_npoints(space);
      float *buf = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
      hsize_t chunk[GT_TENSOR_MAX_DIMS];
      const int nd = H5Sget_simple_extent_dims(space, chunk, NULL);
      if (d < 0 || n <= 0 || nd < 1 || !buf ||
          H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        gt_fz_die("the format 2 template");
      H5Dclose(d);
      H5Ldelete(file, path, H5P_DEFAULT);
      hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      chunk[0] = chunk[0] > 1 ? chunk[0] / 2 : 1;
      H5Pset_chunk(dcpl, nd, chunk);
      H5Pset_fletcher32(dcpl);
      d = H5Dcreate2(file, path, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        gt_fz_die("the format 2 template");
      H5Dclose(d);
      H5Pclose(dcpl);
      H5Sclose(space);
      free(buf);
    }
  H5Ldelete(file, "/rank", H5P_DEFAULT);
  H5Adelete(file, "checksum_block_bytes");
  H5Eclear2(H5E_DEFAULT);
  gt_fuzz_h5_set_attr(file, "/", "format_version", 0, 2);
}

static void gt_fz_make_templates(void)
{
  gt_ckpt_meta meta = {.format = GT_CKPT_FORMAT, .step = 5, .tokens = 160, .samples = 20,
                       .seed = 11, .loss_scale = 1, .precision = "fp32", .loss = 2.5,
                       .dp = 1, .pp = 1, .tp = 1, .layers = 1, .heads = 2, .dim = 8,
                       .seq_len = 8, .vocab = 16, .batch = 4, .code_version = "fuzz",
                       .created = "2024-01-01T00:00:00Z",
                       .deck = "[run]\nsteps = 5\n[model]\nlayers = 1\n"};
  gt_params *p = gt_fz_params[GT_FZ_WHOLE];
  gt_ckpt_state st = {.ntensors = gt_fz_ntensors, .tensors = gt_fz_tensors, .params = p,
                      .m = gt_fz_m[GT_FZ_WHOLE], .v = gt_fz_v[GT_FZ_WHOLE], .writer = true,
                      .rank_state = (float *)gt_fz_rank_written, .rank_n = 4,
                      .rank_tag = GT_FZ_TAG, .direct = GT_CKPT_DIRECT_OFF};
  char path[300];
  snprintf(path, sizeof path, "%s/template.h5", gt_fz_dir);
  if (gt_ckpt_write(path, &meta, &st, MPI_COMM_SELF) != GT_SUCCESS)
    gt_fz_die("gt_ckpt_write");
  gt_fz_template[0] = gt_fuzz_read(path, &gt_fz_template_size[0]);
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0)
    gt_fz_die("reopening the template");
  gt_fz_to_format2(file);
  H5Fclose(file);
  gt_fz_template[1] = gt_fuzz_read(path, &gt_fz_template_size[1]);
  if (!gt_fz_template[0] || !gt_fz_template[1])
    gt_fz_die("reading the templates");
}

// ---- edits -----------------------------------------------------------------------------------

static const char *const gt_fz_attrs[] = {
  "format_version", "step", "tokens", "data_samples", "batch", "seed", "loss_scale",
  "loss_scale_good_steps", "skipped_steps", "precision", "loss", "layout", "model_shape",
  "code_version", "created", "deck", "checksum_block_bytes", "fletcher32", "lengths", "tag"};
#define GT_FZ_NATTRS (sizeof gt_fz_attrs / sizeof gt_fz_attrs[0])

enum { GT_FZ_ATTR_SET, GT_FZ_ATTR_DEL, GT_FZ_DELETE, GT_FZ_NEW, GT_FZ_POKE, GT_FZ_GROUP,
       GT_FZ_LINK, GT_FZ_TRUNCATE, GT_FZ_FLIP, GT_FZ_OVERWRITE, GT_FZ_NOPS };

/* An object of the checkpoint picked by the next input bytes. */
static void gt_fz_pick(gt_fuzz_in *in, char *path, size_t size)
{
  static const char *const where[] = {"/", "/model", "/optim/m", "/optim/v", "/rank",
                                      "/optim"};
  const unsigned w = gt_fuzz_u8(in) % 8, i = gt_fuzz_u8(in) % (unsigned)gt_fz_ntensors;
  if (w == 6)
    snprintf(path, size, "/rank/state");
  else if (w == 7)
    snprintf(path, size, "/model/%s", gt_fz_tensors[i].name);
  else if (w >= 1 && w <= 3)
    snprintf(path, size, "%s/%s", where[w], gt_fz_tensors[i].name);
  else
    snprintf(path, size, "%s", where[w]);
}

static void gt_fz_edit(unsigned which, gt_fuzz_in *in)
{
  gt_fuzz_write(gt_fz_file, gt_fz_template[which], gt_fz_template_size[which]);
  if (!gt_fuzz_more(in))
    return;
  hid_t file = H5Fopen(gt_fz_file, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  size_t bytes_at = in->n;
  char path[128], target[128];
  for (int k = 0; k < 16 && gt_fuzz_more(in); k++) {
    const unsigned op = gt_fuzz_u8(in) % GT_FZ_NOPS;
    if (op >= GT_FZ_TRUNCATE) {
      bytes_at = in->at - 1;
      break;
    }
    gt_fz_pick(in, path, sizeof path);
    switch (op) {
    case GT_FZ_ATTR_SET: {
      const char *name = gt_fz_attrs[gt_fuzz_u8(in) % GT_FZ_NATTRS];
      const unsigned kind = gt_fuzz_u8(in);
      gt_fuzz_h5_set_attr(file, path, name, kind, gt_fuzz_u64(in));
      break;
    }
    case GT_FZ_ATTR_DEL:
      gt_fuzz_h5_del_attr(file, path, gt_fz_attrs[gt_fuzz_u8(in) % GT_FZ_NATTRS]);
      break;
    case GT_FZ_DELETE: gt_fuzz_h5_delete(file, path); break;
    case GT_FZ_NEW: gt_fuzz_h5_new_dataset(file, path, in); break;
    case GT_FZ_POKE: {
      const uint64_t index = gt_fuzz_u32(in), value = gt_fuzz_u64(in);
      gt_fuzz_h5_poke(file, path, index, value, true);
      break;
    }
    case GT_FZ_GROUP: gt_fuzz_h5_group(file, path); break;
    default:
      gt_fz_pick(in, target, sizeof target);
      gt_fuzz_h5_softlink(file, path, target);
      break;
    }
  }
  H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
  in->at = bytes_at;
  for (int k = 0; k < 8 && gt_fuzz_more(in); k++) {
    const unsigned op = gt_fuzz_u8(in) % GT_FZ_NOPS;
    const uint64_t at = gt_fuzz_u32(in);
    if (op == GT_FZ_TRUNCATE)
      gt_fuzz_truncate(gt_fz_file, at);
    else if (op == GT_FZ_OVERWRITE)
      gt_fuzz_overwrite(gt_fz_file, at, in);
    else
      gt_fuzz_flip(gt_fz_file, at, gt_fuzz_u8(in));
  }
}

// ---- seeds and set-up ------------------------------------------------------------------------

/* GT_FUZZ_SEEDS=DIR: write the seed corpus there (the raw templates and a
 * few edit lists), as tests/fuzz/corpus/ckpt was made. */
static void gt_fz_seeds(const char *dir)
{
  for (int t = 0; t < 2; t++) {
    const uint8_t head[GT_FUZZ_HEADER] = {0, (uint8_t)t, 0, 0, 1, 0, 0, 0};
    char name[32];
    snprintf(name, sizeof name, "raw-format%d", 3 - t);
    gt_fuzz_write_raw_seed(dir, name, head, GT_FUZZ_HEADER, gt_fz_template[t],
                           gt_fz_template_size[t]);
  }
  static const gt_fuzz_seed edits[] = {
    {"edit-none-whole", {1, 0, 0, 0, 1, 1}, 8},
    {"edit-none-piece", {1, 1, 3, 200, 1, 0}, 8},
    {"edit-none-format2", {3, 0, 0, 0, 0, 1}, 8},
    {"edit-step",
     {1, 0, 0, 0, 0, 0, 0, 0, GT_FZ_ATTR_SET, 0, 0, 1, 0, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff},
     21},
    {"edit-model-shape", {1, 0, 0, 0, 0, 0, 0, 0, GT_FZ_ATTR_SET, 0, 0, 12, 2, 4}, 21},
    {"edit-fletcher32", {1, 1, 0, 0, 0, 0, 0, 0, GT_FZ_ATTR_SET, 1, 2, 17, 2, 3}, 21},
    {"edit-poke-nan",
     {1, 0, 0, 0, 0, 0, 0, 0, GT_FZ_POKE, 2, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f},
     21},
    {"edit-delete", {1, 0, 0, 0, 0, 0, 0, 0, GT_FZ_DELETE, 3, 2}, 11},
    {"edit-new-shape", {1, 0, 0, 0, 0, 0, 0, 0, GT_FZ_NEW, 7, 0, 7, 1, 0, 4, 0, 9, 0}, 24},
    {"edit-rank-lengths", {1, 0, 0, 0, 1, 0, 0, 0, GT_FZ_ATTR_SET, 6, 0, 18, 2, 9}, 21},
    {"edit-truncate", {1, 0, 0, 0, 0, 0, 0, 0, GT_FZ_TRUNCATE, 0, 0x30, 0, 0}, 13},
    {"edit-flip", {3, 0, 0, 0, 0, 0, 0, 0, GT_FZ_FLIP, 0x80, 0x10, 0, 0, 4}, 14},
  };
  gt_fuzz_write_seeds(dir, edits, sizeof edits / sizeof edits[0]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  gt_fuzz_setup();
  gt_fuzz_tmpdir("ckpt", gt_fz_dir, sizeof gt_fz_dir);
  snprintf(gt_fz_file, sizeof gt_fz_file, "%s/fuzz.h5", gt_fz_dir);
  snprintf(gt_fz_out, sizeof gt_fz_out, "%s/weights.h5", gt_fz_dir);
  if (gt_backend_create("cpu", 1, &gt_fz_be) != GT_SUCCESS)
    gt_fz_die("gt_backend_create");
  const gt_gpt_shape shape = {1, 2, 8, 8, 16, .arch = GT_MODEL_GPT};
  gt_fz_ntensors = gt_gpt_logical_count(&shape);
  if (gt_fz_ntensors > GT_FZ_MAXT)
    gt_fz_die("too many tensors");
  for (int i = 0; i < gt_fz_ntensors; i++)
    gt_gpt_logical_param(&shape, i, gt_fz_tensors[i].name, &gt_fz_tensors[i].ndim,
                         gt_fz_tensors[i].dims);
  for (int l = 0; l < GT_FZ_NLAYOUTS; l++)
    gt_fz_make_params(l);
  gt_fz_make_templates();
  if (getenv("GT_FUZZ_SEEDS"))
    gt_fz_seeds(getenv("GT_FUZZ_SEEDS"));
  gt_fuzz_baseline();
  return 0;
}

// ---- one input -----------------------------------------------------------------------------

/* The template read back with no edit: exactly what was written. */
static void gt_fz_check_values(bool rank_loaded, bool want_rank)
{
  gt_params *p = gt_fz_params[GT_FZ_WHOLE];
  float *host = malloc(p->numel * sizeof(float));
  if (!host)
    abort();
  gt_fz_be->ops->download(gt_fz_be, host, p->values, p->numel * sizeof(float), NULL);
  gt_fz_be->ops->sync(gt_fz_be);
  for (int i = 0; i < p->count; i++) {
    const gt_param *t = &p->list[i];
    if (memcmp(host + t->offset, gt_fz_written + t->offset, t->numel * sizeof(float)) != 0) {
      fprintf(gt_fuzz_log(), "fuzz_ckpt: %s reads back other values than were written\n", t->name);
      abort();
    }
  }
  free(host);
  if (want_rank && !rank_loaded) {
    fprintf(gt_fuzz_log(), "fuzz_ckpt: the rank state of the template was not loaded\n");
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > 1 << 20)
    return 0;
  uint8_t head[GT_FUZZ_HEADER] = {0};
  memcpy(head, data, size < GT_FUZZ_HEADER ? size : GT_FUZZ_HEADER);
  gt_fuzz_in in = {data, size, size < GT_FUZZ_HEADER ? size : GT_FUZZ_HEADER};
  const bool edits = head[0] & 1, format2 = (head[0] >> 1) & 1;
  if (edits)
    gt_fz_edit(format2, &in);
  else
    gt_fuzz_write(gt_fz_file, data + in.at, size - in.at);
  /* the template itself: every call succeeds and reads what was written */
  const bool pristine = edits && in.at == GT_FUZZ_HEADER;

  gt_ckpt_meta meta;
  int status = gt_ckpt_read_meta(gt_fz_file, MPI_COMM_SELF, &meta);
  gt_fuzz_expect("ckpt", "gt_ckpt_read_meta", status);
  if (status == GT_SUCCESS)
    gt_ckpt_meta_free(&meta);
  if (pristine && status != GT_SUCCESS)
    gt_fz_die("the template's metadata do not read");
  gt_error_clear();

  /* the load: a layout, a flat range of it, maybe the rank state */
  const unsigned layout = head[1] % 3;
  gt_params *p = layout < GT_FZ_NLAYOUTS ? gt_fz_params[layout] : NULL;
  float rank_state[8] = {0};
  bool rank_loaded = false;
  const bool want_rank = head[4] & 1;
  gt_ckpt_state st = {.ntensors = gt_fz_ntensors, .tensors = gt_fz_tensors, .params = p,
                      .rank_state = rank_state, .rank_n = head[4] & 2 ? 3 : 4,
                      .rank_tag = head[4] & 4 ? "another tag" : GT_FZ_TAG,
                      .rank_loaded = want_rank ? &rank_loaded : NULL};
  if (p) {
    st.m = gt_fz_m[layout];
    st.v = gt_fz_v[layout];
    st.lo = st.mlo = p->numel * head[2] / 256;
    st.hi = st.mhi = head[3] ? st.lo + (p->numel - st.lo) * head[3] / 255 : 0;
  }
  status = gt_ckpt_read(gt_fz_file, &st, MPI_COMM_SELF);
  gt_fuzz_expect("ckpt", "gt_ckpt_read", status);
  if (pristine) {
    if (status != GT_SUCCESS)
      gt_fz_die("the template does not read");
    if (layout == GT_FZ_WHOLE && head[2] == 0 && head[3] == 0)
      gt_fz_check_values(rank_loaded, want_rank && !(head[4] & 6) && !format2);
  }
  gt_error_clear();

  long datasets = 0;
  double bytes = 0;
  status = gt_ckpt_verify_file(gt_fz_file, &datasets, &bytes);
  gt_fuzz_expect("ckpt", "gt_ckpt_verify_file", status);
  if (pristine && (status != GT_SUCCESS || datasets != 3L * gt_fz_ntensors))
    gt_fz_die("the template does not verify");
  gt_error_clear();

  if (head[5] & 1) {
    status = gt_ckpt_export_weights(gt_fz_file, gt_fz_out);
    gt_fuzz_expect("ckpt", "gt_ckpt_export_weights", status);
    if (pristine && status != GT_SUCCESS)
      gt_fz_die("the template does not export");
    gt_error_clear();
  }
  gt_fuzz_expect_closed("ckpt");
  return 0;
}
