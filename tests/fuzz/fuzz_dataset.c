/*
 * fuzz_dataset.c - libFuzzer harness for the token-dataset opener and
 * reader (data.h: gt_dataset_open, gt_dataset_read_samples; src/io/
 * dataset.c, h5util.c). The input is an 8-byte header - mode, dataset spec,
 * T, count, shuffle and vocabulary limit, first sample, seed - and then
 * either (mode bit 0 clear) the bytes of the HDF5 file itself, or (set) a
 * list of edits applied to a valid template file made at start-up (bit 1
 * picks it: one from `gridtrain ingest`, one written in the 1.10 format with
 * a root /tokens): attributes set, retyped or removed, datasets removed or
 * replaced by others (type, rank, shape, layout, filters), tokens written
 * beyond the vocabulary, groups and dangling links, and the closed file
 * truncated, flipped or overwritten at an offset. The file is opened through
 * the real code path (parallel HDF5 on MPI_COMM_SELF) from a private
 * directory in /dev/shm.
 * Properties: every call ends in GT_SUCCESS or in GT_ERR_INPUT / GT_ERR_HDF5
 * with a message, never a crash, a hang, a sanitizer report or another
 * code; the tokens read are in [0, vocabulary limit).
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gridtrain/data.h"
#include "gridtrain/error.h"
#include "gridtrain/ingest.h"

#define GT_FUZZ_HEADER 8

static char gt_fz_dir[256], gt_fz_file[300];
static uint8_t *gt_fz_template[2];
static size_t gt_fz_template_size[2];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void gt_fz_die(const char *what)
{
  fprintf(gt_fuzz_log(), "fuzz_dataset: %s: %s\n", what, gt_error_message());
  abort();
}

/* Template 1: /tokens uint16, contiguous, vocab_size on the root, the 1.10
 * format (checksummed metadata), as a user may make with h5py. */
static void gt_fz_make_v110(const char *path)
{
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110);
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  hsize_t n = 300;
  hid_t space = H5Screate_simple(1, &n, NULL);
  hid_t dset = H5Dcreate2(file, "/tokens", H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT);
  unsigned short v[300];
  for (int i = 0; i < 300; i++)
    v[i] = (unsigned short)(i * 7 % 1000);
  if (file < 0 || dset < 0 || H5Dwrite(dset, H5T_NATIVE_USHORT, H5S_ALL, H5S_ALL,
                                       H5P_DEFAULT, v) < 0)
    gt_fz_die("the 1.10 template");
  H5Dclose(dset);
  H5Sclose(space);
  H5Pclose(fapl);
  gt_fuzz_h5_set_attr(file, "/", "vocab_size", 0, 1000);
  H5Fclose(file);
}

static const char *const gt_fz_paths[] = {"/train/tokens", "/val/tokens", "/tokens", "/train",
                                          "/", "/val", "/x/y"};
#define GT_FZ_NPATHS (sizeof gt_fz_paths / sizeof gt_fz_paths[0])
static const char *const gt_fz_attrs[] = {"vocab_size", "tokenizer", "train_tokens"};

enum { GT_FZ_ATTR_SET, GT_FZ_ATTR_DEL, GT_FZ_DELETE, GT_FZ_NEW, GT_FZ_POKE, GT_FZ_GROUP,
       GT_FZ_LINK, GT_FZ_TRUNCATE, GT_FZ_FLIP, GT_FZ_OVERWRITE, GT_FZ_NOPS };

/* GT_FUZZ_SEEDS=DIR: write the seed corpus there (the raw templates and a
 * few edit lists), as tests/fuzz/corpus/dataset was made. */
static void gt_fz_seeds(const char *dir)
{
  for (int t = 0; t < 2; t++) {
    const uint8_t head[GT_FUZZ_HEADER] = {0, (uint8_t)(1 + t), 15, 2, 1, 3, 0, 7};
    char name[32];
    snprintf(name, sizeof name, "raw-template%d", t);
    gt_fuzz_write_raw_seed(dir, name, head, GT_FUZZ_HEADER, gt_fz_template[t],
                           gt_fz_template_size[t]);
  }
  static const gt_fuzz_seed edits[] = {
    {"edit-none", {1, 1, 7, 1, 0, 0, 0, 0}, 8},
    {"edit-vocab-small", {1, 3, 7, 3, 0, 1, 0, 0, GT_FZ_ATTR_SET, 0, 0, 0, 3}, 21},
    {"edit-vocab-string", {3, 2, 7, 1, 0, 0, 0, 0, GT_FZ_ATTR_SET, 4, 0, 4, '4', '2'}, 22},
    {"edit-new-2d", {1, 3, 3, 1, 0, 0, 0, 0, GT_FZ_NEW, 0, 5, 1, 0, 2, 20, 0, 3, 10, 0, 2, 1}, 29},
    {"edit-new-huge", {1, 3, 3, 1, 0, 0, 0, 0, GT_FZ_NEW, 0, 2, 0, 0x80, 0x40, 20, 1}, 24},
    {"edit-poke", {1, 3, 3, 1, 0, 0, 0, 0, GT_FZ_POKE, 0, 2, 0, 0, 0, 0xff, 0xff}, 24},
    {"edit-group", {3, 0, 3, 1, 0, 0, 0, 0, GT_FZ_GROUP, 2}, 10},
    {"edit-link", {1, 2, 3, 1, 0, 0, 0, 0, GT_FZ_LINK, 2, 6}, 11},
    {"edit-truncate", {1, 1, 3, 1, 0, 0, 0, 0, GT_FZ_TRUNCATE, 0, 8, 0, 0}, 13},
    {"edit-flip", {3, 0, 3, 1, 0, 0, 0, 0, GT_FZ_FLIP, 0x40, 0, 0, 0, 1}, 14},
  };
  gt_fuzz_write_seeds(dir, edits, sizeof edits / sizeof edits[0]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  gt_fuzz_setup();
  gt_fuzz_tmpdir("dataset", gt_fz_dir, sizeof gt_fz_dir);
  char text[300], tmpl[300];
  snprintf(text, sizeof text, "%s/in.txt", gt_fz_dir);
  snprintf(tmpl, sizeof tmpl, "%s/template.h5", gt_fz_dir);
  snprintf(gt_fz_file, sizeof gt_fz_file, "%s/fuzz.h5", gt_fz_dir);
  const char verse[] = "In the beginning God created the heaven and the earth. And the "
                       "earth was without form, and void; and darkness was upon the face "
                       "of the deep. And the Spirit of God moved upon the face of the "
                       "waters. And God said, Let there be light: and there was light.\n";
  char *files[1] = {text};
  if (!gt_fuzz_write(text, verse, sizeof verse - 1) ||
      gt_ingest_text(1, files, tmpl, 0.2, NULL) != GT_SUCCESS)
    gt_fz_die("the ingest template");
  gt_fz_template[0] = gt_fuzz_read(tmpl, &gt_fz_template_size[0]);
  gt_fz_make_v110(tmpl);
  gt_fz_template[1] = gt_fuzz_read(tmpl, &gt_fz_template_size[1]);
  if (!gt_fz_template[0] || !gt_fz_template[1])
    gt_fz_die("reading the templates");
  /* both templates open and read as they are */
  for (int t = 0; t < 2; t++) {
    gt_dataset *ds = NULL;
    int32_t out[2 * 9];
    gt_fuzz_write(gt_fz_file, gt_fz_template[t], gt_fz_template_size[t]);
    if (gt_dataset_open(gt_fz_file, "/train/tokens", MPI_COMM_SELF, &ds) != GT_SUCCESS ||
        gt_dataset_read_samples(ds, 8, true, 1, 0, 2, gt_dataset_vocab(ds), out) !=
          GT_SUCCESS ||
        gt_dataset_close(&ds) != GT_SUCCESS)
      gt_fz_die("a template does not read");
  }
  if (getenv("GT_FUZZ_SEEDS"))
    gt_fz_seeds(getenv("GT_FUZZ_SEEDS"));
  gt_fuzz_baseline();
  return 0;
}

/* Mode "edits": the template, edited through the HDF5 API, then its bytes. */
static void gt_fz_edit(unsigned which, gt_fuzz_in *in)
{
  gt_fuzz_write(gt_fz_file, gt_fz_template[which], gt_fz_template_size[which]);
  hid_t file = H5Fopen(gt_fz_file, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  /* byte edits wait until the file is closed */
  size_t bytes_at = in->n;
  for (int k = 0; k < 16 && gt_fuzz_more(in); k++) {
    const unsigned op = gt_fuzz_u8(in) % GT_FZ_NOPS;
    if (op >= GT_FZ_TRUNCATE) {
      bytes_at = in->at - 1;
      break;
    }
    const char *path = gt_fz_paths[gt_fuzz_u8(in) % GT_FZ_NPATHS];
    switch (op) {
    case GT_FZ_ATTR_SET: {
      const char *name = gt_fz_attrs[gt_fuzz_u8(in) % 3];
      const unsigned kind = gt_fuzz_u8(in);
      gt_fuzz_h5_set_attr(file, path, name, kind, gt_fuzz_u64(in));
      break;
    }
    case GT_FZ_ATTR_DEL: gt_fuzz_h5_del_attr(file, path, gt_fz_attrs[gt_fuzz_u8(in) % 3]); break;
    case GT_FZ_DELETE: gt_fuzz_h5_delete(file, path); break;
    case GT_FZ_NEW: gt_fuzz_h5_new_dataset(file, path, in); break;
    case GT_FZ_POKE: {
      const uint64_t index = gt_fuzz_u32(in), value = gt_fuzz_u64(in);
      gt_fuzz_h5_poke(file, path, index, value, false);
      break;
    }
    case GT_FZ_GROUP: gt_fuzz_h5_group(file, path); break;
    default: gt_fuzz_h5_softlink(file, path, gt_fz_paths[gt_fuzz_u8(in) % GT_FZ_NPATHS]); break;
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size > 1 << 20)
    return 0;
  uint8_t head[GT_FUZZ_HEADER] = {0};
  memcpy(head, data, size < GT_FUZZ_HEADER ? size : GT_FUZZ_HEADER);
  gt_fuzz_in in = {data, size, size < GT_FUZZ_HEADER ? size : GT_FUZZ_HEADER};
  if (head[0] & 1)
    gt_fz_edit((head[0] >> 1) & 1, &in);
  else
    gt_fuzz_write(gt_fz_file, data + in.at, size - in.at);

  static const char *const specs[] = {"", "", ":/tokens", ":/train/tokens", ":/val/tokens",
                                      ":/train", ":/", ":/nope/x", "://train//tokens/"};
  const unsigned which = head[1] % (sizeof specs / sizeof specs[0]);
  char spec[400];
  snprintf(spec, sizeof spec, "%s%s", gt_fz_file, specs[which]);
  const int T = 1 + head[2] % 64, count = 1 + head[3] % 4;
  const bool shuffle = head[4] & 1;
  const long long first = head[5] | head[6] << 8;

  gt_dataset *ds = NULL;
  int status = gt_dataset_open(spec, which == 1 ? "/train/tokens" : NULL, MPI_COMM_SELF, &ds);
  gt_fuzz_expect("dataset", "gt_dataset_open", status);
  if (status == GT_SUCCESS) {
    const long vocab = gt_dataset_vocab(ds);
    const long limits[4] = {vocab, 16, 1, INT32_MAX};
    const long limit = limits[(head[4] >> 1) % 4];
    int32_t *out = malloc(sizeof *out * (size_t)count * (size_t)(T + 1));
    if (!out)
      abort();
    status = gt_dataset_read_samples(ds, T, shuffle, head[7], first, count, limit, out);
    gt_fuzz_expect("dataset", "gt_dataset_read_samples", status);
    for (int i = 0; status == GT_SUCCESS && i < count * (T + 1); i++)
      if (out[i] < 0 || out[i] >= limit) {
        fprintf(gt_fuzz_log(), "fuzz_dataset: token %d outside [0, %ld) read\n", (int)out[i], limit);
        abort();
      }
    free(out);
    gt_error_clear();
    gt_fuzz_expect("dataset", "gt_dataset_close", gt_dataset_close(&ds));
  }
  gt_error_clear();
  gt_fuzz_expect_closed("dataset");
  return 0;
}
