/*
 * test_reader.c - the data reader (reader.h) and the dataset's reads in
 * file order (data.h): every batch, read ahead on the reader thread or
 * there and then, holds the bytes of the ingested text at the sequences
 * the order picks; runs of adjacent sequences longer than one read (2^20
 * tokens) and the wrap at the end of the data come out right; a token
 * outside the vocabulary is reported for the first sample that holds one.
 */
/* gt-test: ranks=1 tier=quick */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "../test_util.h"
#include "gridtrain/data.h"
#include "gridtrain/error.h"
#include "gridtrain/ingest.h"
#include "gridtrain/log.h"
#include "gridtrain/reader.h"

/* Every row of out (count x (T+1)) is the window of text at the sequence
 * that sample first + i reads (the expectation comes from the text, not
 * from HDF5). */
static bool rows_match(const int32_t *out, int count, int T, const unsigned char *text,
                       bool shuffle, unsigned long long seed, long long first, long long nseq)
{
  for (int i = 0; i < count; i++) {
    const long long g = first + i;
    const long long s = shuffle ? gt_order_sequence(seed, nseq, g) : g % nseq;
    for (int t = 0; t <= T; t++)
      if (out[(size_t)i * (size_t)(T + 1) + (size_t)t] != text[s * T + t]) {
        tap_diag("sample %lld (sequence %lld) token %d: %d, expected %d", g, s, t,
                 out[(size_t)i * (size_t)(T + 1) + (size_t)t], text[s * T + t]);
        return false;
      }
  }
  return true;
}

/* A text of n bytes: printable, pseudo-random, the same on every run. */
static unsigned char *make_text(const char *path, size_t n)
{
  unsigned char *text = malloc(n);
  FILE *f = fopen(path, "wb");
  if (!text || !f)
    return NULL;
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    text[i] = (unsigned char)(32 + x % 95);
  }
  const bool ok = fwrite(text, 1, n, f) == n;
  if (fclose(f) != 0 || !ok) {
    free(text);
    return NULL;
  }
  return text;
}

static void test_batches(gt_dataset *ds, const unsigned char *text, bool ahead)
{
  const int T = 64, count = 12;
  const long long nseq = gt_dataset_nseq(ds, T);
  const unsigned long long seed = 5;
  gt_reader *r = NULL;
  int st = gt_reader_create(ds, T, true, seed, 256, count, ahead, &r);
  tap_ok(st == GT_SUCCESS && gt_reader_threaded(r) == ahead, "reader %s a thread: %s",
         ahead ? "with" : "without", st == GT_SUCCESS ? "made" : gt_error_message());
  bool ok = st == GT_SUCCESS;
  /* a stream of batches, each read ahead during the one before it */
  const int32_t *rows = NULL;
  for (long long b = 0; b < 40 && ok; b++) {
    const long long first = 7 + b * count;
    ok = gt_reader_get(r, first, &rows) == GT_SUCCESS &&
         gt_reader_ahead(r, first + count) == GT_SUCCESS &&
         rows_match(rows, count, T, text, true, seed, first, nseq) &&
         gt_reader_get(r, first, &rows) == GT_SUCCESS && /* the same batch again */
         rows_match(rows, count, T, text, true, seed, first, nseq) &&
         gt_reader_settle(r) == GT_SUCCESS;
  }
  tap_ok(ok, "%s: 40 batches in a stream hold the text's sequences",
         ahead ? "read ahead" : "read when asked");
  /* a batch other than the one read ahead, and one far into a later epoch */
  ok = ok && gt_reader_ahead(r, 1000) == GT_SUCCESS && gt_reader_get(r, 5000, &rows) == 0 &&
       rows_match(rows, count, T, text, true, seed, 5000, nseq) &&
       gt_reader_get(r, 1000, &rows) == GT_SUCCESS &&
       rows_match(rows, count, T, text, true, seed, 1000, nseq) &&
       gt_reader_get(r, 9 * nseq + 3, &rows) == GT_SUCCESS &&
       rows_match(rows, count, T, text, true, seed, 9 * nseq + 3, nseq);
  tap_ok(ok, "%s: a batch other than the one read ahead, and one in epoch 9",
         ahead ? "read ahead" : "read when asked");
  tap_ok(gt_reader_destroy(&r) == GT_SUCCESS && r == NULL, "reader destroyed");
}

/* Without shuffle, adjacent sequences are read together: a run longer than
 * 2^20 tokens is read in pieces, and the end of the data wraps to its
 * start. */
static void test_runs(gt_dataset *ds, const unsigned char *text)
{
  const int T = 64;
  const long long nseq = gt_dataset_nseq(ds, T);
  const int count = (int)(nseq - 1000 + 1500); /* 17749 sequences, then 1500 wrapped */
  int32_t *out = malloc((size_t)count * (T + 1) * sizeof *out);
  int st = out ? gt_dataset_read_samples(ds, T, false, 0, 1000, count, 256, out) : -1;
  tap_ok(st == GT_SUCCESS && rows_match(out, count, T, text, false, 0, 1000, nseq),
         "%d adjacent sequences (%.2f M tokens, from 1000 of %lld, wrapping) in order", count,
         (double)count * T / 1e6, nseq);
  /* duplicates: a batch larger than the data holds every sequence twice */
  const int twice = (int)(2 * nseq);
  int32_t *dup = malloc((size_t)twice * (T + 1) * sizeof *dup);
  st = dup ? gt_dataset_read_samples(ds, T, true, 11, 0, twice, 256, dup) : -1;
  tap_ok(st == GT_SUCCESS && rows_match(dup, twice, T, text, true, 11, 0, nseq),
         "shuffled batch of two epochs (every sequence twice)");
  free(dup);
  free(out);
}

/* The first sample (in sample order) holding a byte >= limit, and where. */
static void first_bad(const unsigned char *text, int T, unsigned long long seed,
                      long long first, int count, long long nseq, int limit, int *token,
                      long long *pos)
{
  *token = -1;
  *pos = -1;
  for (int i = 0; i < count && *token < 0; i++) {
    const long long s = gt_order_sequence(seed, nseq, first + i);
    for (int t = 0; t <= T && *token < 0; t++)
      if (text[s * T + t] >= limit) {
        *token = text[s * T + t];
        *pos = s * T + t;
      }
  }
}

static void test_vocab_error(gt_dataset *ds, const unsigned char *text)
{
  const int T = 16, count = 40, limit = 120;
  const long long nseq = gt_dataset_nseq(ds, T);
  int token;
  long long pos;
  first_bad(text, T, 3, 100, count, nseq, limit, &token, &pos);
  gt_reader *r = NULL;
  const int32_t *rows;
  int st = gt_reader_create(ds, T, true, 3, limit, count, true, &r);
  if (st == GT_SUCCESS) {
    st = gt_reader_ahead(r, 100);
    st = st == GT_SUCCESS ? gt_reader_get(r, 100, &rows) : st;
  }
  char want[200];
  snprintf(want, sizeof want, "holds token %d at position %lld, outside the model's "
           "vocabulary [0, %d)", token, pos, limit);
  tap_ok(token >= 0 && st == GT_ERR_INPUT && strstr(gt_error_message(), want),
         "a batch read ahead with a token outside the vocabulary: the error of the first "
         "sample that holds one (%s)", gt_error_message());
  gt_error_clear();
  gt_reader_destroy(&r);
}

int main(int argc, char **argv)
{
  int rank = tu_mpi_init(&argc, &argv);
  (void)rank;
  if (!getenv("GT_BUILDDIR")) {
    tap_bail("run through make check (GT_BUILDDIR unset)");
    MPI_Finalize();
    return 1;
  }
  char dir[1024], txt[1200], h5[1200], cmd[2500];
  tu_tmp_dir("test_reader", dir, sizeof dir);
  snprintf(txt, sizeof txt, "%s/text.txt", dir);
  snprintf(h5, sizeof h5, "%s/text.h5", dir);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  const size_t n = 1200000; /* more than 2^20 tokens */
  unsigned char *text = system(cmd) == 0 ? make_text(txt, n) : NULL;
  gt_dataset *ds = NULL;
  int st = text ? gt_ingest_text(1, (char *[]){txt}, h5, 0.0, NULL) : GT_ERR_SYSTEM;
  if (st == GT_SUCCESS)
    st = gt_dataset_open(h5, "/train/tokens", MPI_COMM_WORLD, &ds);
  if (st != GT_SUCCESS) {
    tap_bail("cannot make the dataset %s: %s", h5, gt_error_message());
    MPI_Finalize();
    return 1;
  }
  test_batches(ds, text, true);
  test_batches(ds, text, false);
  test_runs(ds, text);
  test_vocab_error(ds, text);
  tap_ok(gt_dataset_close(&ds) == GT_SUCCESS, "dataset closed");
  free(text);
  const int rc = tap_done();
  MPI_Finalize();
  return rc;
}
