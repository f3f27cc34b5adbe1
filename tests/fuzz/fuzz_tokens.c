/*
 * fuzz_tokens.c - libFuzzer harness for the token-file readers of
 * `gridtrain ingest tokens` (ingest.h: gt_ingest_tokens; src/io/
 * ingest_tokens.c, ingest_out.c): nanoGPT's raw uint16, llm.c's headers,
 * NumPy's .npy headers. The input is a 3-byte header (the format asked
 * for: auto, nanogpt, llmc, npy; the vocabulary: 1, 256, 1000, 50257,
 * 2^31 - 1 or none with --tokenizer bytes; the validation fraction 0, 0.1 or 0.5, and whether the file is
 * also given with --val), then the file's bytes. Properties: the call ends
 * in GT_SUCCESS, or GT_ERR_INPUT / GT_ERR_HDF5 with a message; on success
 * the output holds train + val tokens, each below the vocabulary, as many as
 * the counts say, and a tokenizer attribute exactly when one was given; on an error neither the output nor its temporary is left;
 * no HDF5 object stays open. Built by `make fuzz` and replayed over
 * tests/fuzz/corpus/tokens by `make check` (replay.c).
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "gridtrain/error.h"
#include "gridtrain/ingest.h"

#define GT_FZ_HEADER 3

static char gt_fz_in[300], gt_fz_out[300], gt_fz_tmp[310];

static void gt_fz_fail(const char *what)
{
  fprintf(gt_fuzz_log(), "fuzz_tokens: %s\n", what);
  abort();
}

/* Every token of a split below vocab; *n: how many. */
static void gt_fz_check_split(hid_t file, const char *path, long long vocab, long long *n)
{
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  const hssize_t count = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
  if (count < 0)
    gt_fz_fail("an output without its datasets");
  uint64_t *buf = malloc((size_t)(count > 0 ? count : 1) * sizeof *buf);
  if (!buf || H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    gt_fz_fail("an output whose tokens do not read");
  for (hssize_t i = 0; i < count; i++)
    if (buf[i] >= (uint64_t)vocab)
      gt_fz_fail("a token at or above the vocabulary in the output");
  free(buf);
  H5Sclose(s);
  H5Dclose(d);
  *n = (long long)count;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc, (void)argv;
  gt_fuzz_setup();
  char dir[256];
  gt_fuzz_tmpdir("tokens", dir, sizeof dir);
  snprintf(gt_fz_in, sizeof gt_fz_in, "%s/in.bin", dir);
  snprintf(gt_fz_out, sizeof gt_fz_out, "%s/out.h5", dir);
  snprintf(gt_fz_tmp, sizeof gt_fz_tmp, "%s.tmp", gt_fz_out);
  gt_fuzz_quiet();
  gt_fuzz_baseline();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static const char *const formats[] = {"auto", "nanogpt", "llmc", "npy"};
  /* 0: no --vocab, the byte tokenizer's 256 (--tokenizer bytes) */
  static const long long vocabs[] = {1, 256, 1000, 50257, 2147483647LL, 0};
  static const double fractions[] = {0.0, 0.1, 0.5};
  if (size < GT_FZ_HEADER)
    return 0;
  gt_fuzz_in in = {data, GT_FZ_HEADER, 0};
  const uint8_t f = gt_fuzz_u8(&in), v = gt_fuzz_u8(&in), x = gt_fuzz_u8(&in);
  char *files[1] = {gt_fz_in};
  const gt_ingest_opts o = {.val_fraction = fractions[x % 3],
                            .format = formats[f % 4],
                            .vocab = vocabs[v % 6],
                            .tokenizer = vocabs[v % 6] == 0 ? "bytes" : NULL,
                            .nval = (x / 3) % 2,
                            .val_files = files};
  unlink(gt_fz_out);
  if (!gt_fuzz_write(gt_fz_in, data + GT_FZ_HEADER, size - GT_FZ_HEADER))
    gt_fz_fail("cannot write the input file");
  gt_ingest_counts c = {0};
  const int st = gt_ingest_tokens(1, files, gt_fz_out, &o, &c);
  gt_fuzz_expect("fuzz_tokens", "gt_ingest_tokens", st);
  if (access(gt_fz_tmp, F_OK) == 0)
    gt_fz_fail("the temporary output is left behind");
  if (st != GT_SUCCESS) {
    if (access(gt_fz_out, F_OK) == 0)
      gt_fz_fail("an error, but the output was written");
  } else {
    hid_t file = H5Fopen(gt_fz_out, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0)
      gt_fz_fail("success, but the output does not open");
    long long ntrain = 0, nval = 0;
    const long long vocab = o.tokenizer ? 256 : o.vocab;
    if (c.vocab != vocab)
      gt_fz_fail("the dataset's vocabulary is not the one asked for");
    gt_fz_check_split(file, "/train/tokens", vocab, &ntrain);
    gt_fz_check_split(file, "/val/tokens", vocab, &nval);
    if ((H5Aexists(file, "tokenizer") > 0) != (o.tokenizer != NULL))
      gt_fz_fail("a tokenizer attribute without --tokenizer, or none with it");
    H5Fclose(file);
    if (ntrain != c.train_tokens || nval != c.val_tokens || ntrain + nval == 0)
      gt_fz_fail("the counts do not match the output");
  }
  gt_error_clear();
  gt_fuzz_expect_closed("fuzz_tokens");
  return 0;
}
