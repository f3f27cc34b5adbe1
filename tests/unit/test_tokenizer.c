/*
 * test_tokenizer.c - the byte tokenizer and how a dataset names its
 * tokenizer (tokenizer.h): round trips, ids outside the vocabulary, and the
 * files gt_tokenizer_from_file accepts and refuses, each written here with
 * the HDF5 C API (not by the code under test), plus one made by
 * `gridtrain ingest` (tu_genesis_dataset).
 *
 * gt-test: ranks=1
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test_util.h"
#include "gridtrain/ingest.h"
#include "gridtrain/tokenizer.h"

/* A file with the given root attributes (NULL / < 0: left out) and, when
 * model_bytes > 0, a /tokenizer/model of that many bytes. */
static void write_file(const char *path, const char *tokenizer, long long vocab,
                       size_t model_bytes)
{
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t s = H5Screate(H5S_SCALAR);
  if (tokenizer) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(tokenizer) + 1);
    hid_t a = H5Acreate2(f, "tokenizer", t, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, tokenizer);
    H5Aclose(a);
    H5Tclose(t);
  }
  if (vocab >= 0) {
    hid_t a = H5Acreate2(f, "vocab_size", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &vocab);
    H5Aclose(a);
  }
  if (model_bytes > 0) {
    hid_t g = H5Gcreate2(f, "/tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = model_bytes;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "/tokenizer/model", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    unsigned char *junk = calloc(model_bytes, 1);
    memset(junk, 'x', model_bytes);
    H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, junk);
    free(junk);
    H5Dclose(d);
    H5Sclose(sp);
    H5Gclose(g);
  }
  H5Sclose(s);
  H5Fclose(f);
}

/* gt_tokenizer_from_file on path refuses it with a message holding want. */
static void expect_refused(const char *path, const char *want, const char *what)
{
  gt_tokenizer *tok = (gt_tokenizer *)1;
  const int st = gt_tokenizer_from_file(path, &tok);
  const char *msg = gt_error_message();
  tap_ok(st == GT_ERR_INPUT && tok == NULL && strstr(msg, want) != NULL, "%s: refused (%s)",
         what, msg);
  gt_error_clear();
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

  // ---- the byte tokenizer
  gt_tokenizer *tok = NULL;
  if (gt_tokenizer_bytes(&tok) != GT_SUCCESS)
    return tap_bail("%s", gt_error_message());
  tap_ok(gt_tokenizer_vocab(tok) == 256 && strcmp(gt_tokenizer_name(tok), "bytes") == 0 &&
             gt_tokenizer_kind_of(tok) == GT_TOKENIZER_BYTES,
         "bytes: vocabulary 256, named bytes");
  const char text[] = "In the beginning\n\xc3\xa9\xff";
  const size_t len = sizeof text - 1;
  uint32_t *ids = NULL;
  size_t n = 0;
  int st = gt_tokenizer_encode(tok, text, len, &ids, &n);
  bool same = st == GT_SUCCESS && n == len;
  for (size_t i = 0; same && i < n; i++)
    same = ids[i] == (unsigned char)text[i];
  tap_ok(same, "bytes: encode gives each byte as its id (%zu ids; 0xff is 255)", n);
  char *back = NULL;
  size_t blen = 0;
  st = gt_tokenizer_decode(tok, ids, n, &back, &blen);
  tap_ok(st == GT_SUCCESS && blen == len && memcmp(back, text, len) == 0 && back[blen] == '\0',
         "bytes: decode returns the same bytes, NUL-terminated");
  free(back);
  ids[3] = 256;
  back = (char *)1;
  st = gt_tokenizer_decode(tok, ids, n, &back, &blen);
  tap_ok(st == GT_ERR_INPUT && back == NULL && strstr(gt_error_message(), "token 256") &&
             strstr(gt_error_message(), "position 3"),
         "bytes: id 256 is refused, naming it and its position (%s)", gt_error_message());
  gt_error_clear();
  free(ids);
  st = gt_tokenizer_encode(tok, "", 0, &ids, &n);
  tap_ok(st == GT_SUCCESS && n == 0 && ids == NULL, "bytes: empty text, no ids");
  const void *model = (void *)1;
  size_t msize = 1;
  gt_tokenizer_model(tok, &model, &msize);
  tap_ok(model == NULL && msize == 0, "bytes: no serialized model");
  gt_tokenizer_free(tok);

  // ---- what a dataset file says
  char dir[1024], path[1100], genesis[1100];
  tu_genesis_dataset("test_tokenizer", dir, sizeof dir, genesis, sizeof genesis);
  tok = NULL;
  st = gt_tokenizer_from_file(genesis, &tok);
  tap_ok(st == GT_SUCCESS && tok && gt_tokenizer_kind_of(tok) == GT_TOKENIZER_BYTES,
         "an ingested dataset names the byte tokenizer (%s)",
         st == GT_SUCCESS ? "ok" : gt_error_message());
  gt_tokenizer_free(tok);
  gt_error_clear();
  char spec[1200];
  snprintf(spec, sizeof spec, "%s:/train/tokens", genesis);
  tok = NULL;
  st = gt_tokenizer_from_file(spec, &tok);
  tap_ok(st == GT_SUCCESS && tok, "FILE.h5:/dataset names the same file's tokenizer");
  gt_tokenizer_free(tok);
  gt_error_clear();

  snprintf(path, sizeof path, "%s/noattr.h5", dir);
  write_file(path, NULL, 256, 0);
  tok = NULL;
  st = gt_tokenizer_from_file(path, &tok);
  tap_ok(st == GT_SUCCESS && tok && gt_tokenizer_kind_of(tok) == GT_TOKENIZER_BYTES,
         "no tokenizer attribute and vocab_size 256: bytes");
  gt_tokenizer_free(tok);
  gt_error_clear();

  snprintf(path, sizeof path, "%s/noattr-50257.h5", dir);
  write_file(path, NULL, 50257, 0);
  expect_refused(path, "names no tokenizer", "no tokenizer attribute, vocab_size 50257");
  snprintf(path, sizeof path, "%s/wordpiece.h5", dir);
  write_file(path, "wordpiece", 30000, 0);
  expect_refused(path, "'wordpiece'", "an unknown tokenizer name");
  snprintf(path, sizeof path, "%s/bytes-300.h5", dir);
  write_file(path, "bytes", 300, 0);
  expect_refused(path, "vocab_size is 300", "bytes with vocab_size 300");
  snprintf(path, sizeof path, "%s/spm-nomodel.h5", dir);
  write_file(path, "sentencepiece", 4000, 0);
#ifdef GT_HAVE_SENTENCEPIECE
  expect_refused(path, "has no /tokenizer/model", "sentencepiece without /tokenizer/model");
  snprintf(path, sizeof path, "%s/spm-junk.h5", dir);
  write_file(path, "sentencepiece", 4000, 100);
  expect_refused(path, "SentencePiece", "sentencepiece with a model of junk bytes");
#else
  expect_refused(path, "has no /tokenizer/model", "sentencepiece without /tokenizer/model");
  snprintf(path, sizeof path, "%s/spm-junk.h5", dir);
  write_file(path, "sentencepiece", 4000, 100);
  expect_refused(path, "built without SentencePiece", "a sentencepiece file in this build");
#endif
  snprintf(path, sizeof path, "%s/missing.h5", dir);
  expect_refused(path, "cannot open", "a file that does not exist");
  snprintf(path, sizeof path, "%s/model.bin", dir);
  FILE *f = fopen(path, "wb");
  if (f)
    fclose(f);
  tok = (gt_tokenizer *)1;
  st = gt_tokenizer_load(path, &tok);
  tap_ok(st == GT_ERR_INPUT && tok == NULL && strstr(gt_error_message(), "empty"),
         "an empty .model file is refused (%s)", gt_error_message());
  gt_error_clear();
  const int rc = tap_done();
  MPI_Finalize();
  return rc;
}
