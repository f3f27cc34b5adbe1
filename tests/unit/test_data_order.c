/*
 * test_data_order.c - the order of training sequences (a keyed permutation
 * per epoch) and the dataset reader, on a file written by gt_ingest_text.
 */
/* gt-test: ranks=1 tier=quick */
#include <errno.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../tap.h"
#include "gridtrain/data.h"
#include "gridtrain/error.h"
#include "gridtrain/ingest.h"
#include "gridtrain/log.h"

// ---- the order ----------------------------------------------------------------

static bool is_permutation(unsigned long long seed, long long nseq, long long epoch)
{
  unsigned char *seen = calloc((size_t)nseq, 1);
  bool ok = seen != NULL;
  for (long long i = 0; ok && i < nseq; i++) {
    long long v = gt_order_sequence(seed, nseq, epoch * nseq + i);
    ok = v >= 0 && v < nseq && !seen[v];
    if (ok)
      seen[v] = 1;
  }
  free(seen);
  return ok;
}

static long long count_differences(unsigned long long seed_a, long long epoch_a,
                                   unsigned long long seed_b, long long epoch_b,
                                   long long nseq)
{
  long long diff = 0;
  for (long long i = 0; i < nseq; i++)
    diff += gt_order_sequence(seed_a, nseq, epoch_a * nseq + i) !=
            gt_order_sequence(seed_b, nseq, epoch_b * nseq + i);
  return diff;
}

static int cmp_ll(const void *a, const void *b)
{
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_order(void)
{
  const long long sizes[] = {1, 2, 3, 7, 100, 1000, 4097, 100003};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    long long n = sizes[k];
    tap_ok(is_permutation(1, n, 0) && is_permutation(1, n, 5) &&
               is_permutation(0xdeadbeefULL, n, 0) && is_permutation(0xdeadbeefULL, n, 77),
           "order is a permutation of [0,%lld) for several seeds and epochs", n);
  }

  /* Random permutations of 1000 agree in about one place. */
  long long d_epoch = count_differences(42, 0, 42, 1, 1000);
  long long d_seed = count_differences(42, 3, 43, 3, 1000);
  tap_ok(d_epoch > 950, "epochs 0 and 1 differ (%lld of 1000 places)", d_epoch);
  tap_ok(d_seed > 950, "seeds 42 and 43 differ (%lld of 1000 places)", d_seed);
  long long d_small = count_differences(1, 0, 1, 1, 7) + count_differences(1, 1, 1, 2, 7) +
                      count_differences(1, 2, 1, 3, 7);
  tap_ok(d_small > 0, "small permutations change between epochs too");

  /* Pure: the same arguments give the same answer, whatever was called before. */
  bool pure = true;
  for (long long g = 0; g < 20000 && pure; g++) {
    long long a = gt_order_sequence(9, 4097, 3 * 4097 + g % 4097);
    (void)gt_order_sequence(10, 999, g);
    pure = a == gt_order_sequence(9, 4097, 3 * 4097 + g % 4097);
  }
  tap_ok(pure, "order is a pure function of (seed, nseq, g)");

  /* Roughly uniform: the first half of an epoch is spread over the range,
   * positions move about n/3 on average, neighbours are unrelated. */
  const long long n = 100003;
  double sum = 0, moved = 0;
  long long close_pairs = 0, prev = gt_order_sequence(5, n, 0);
  for (long long i = 0; i < n / 2; i++) {
    long long v = gt_order_sequence(5, n, i);
    sum += (double)v;
    moved += (double)llabs(v - i);
    if (i > 0 && llabs(v - prev) < n / 100)
      close_pairs++;
    prev = v;
  }
  double mean = sum / (double)(n / 2), mean_moved = moved / (double)(n / 2);
  tap_ok(tap_close(mean, (double)(n - 1) / 2, 0.01, 1),
         "mean of the first half sample is %.1f (expect %.1f)", mean, (double)(n - 1) / 2);
  tap_ok(mean_moved > 0.25 * (double)n && mean_moved < 0.42 * (double)n,
         "positions move %.3f n on average (about 1/3 for a random permutation)",
         mean_moved / (double)n);
  tap_ok((double)close_pairs < 0.03 * (double)(n / 2),
         "consecutive samples land within n/100 of each other %lld times (expect ~2%%)",
         close_pairs);

  /* The first sequence of an epoch, over many seeds: each of 10 equally often. */
  long long counts[10] = {0};
  for (unsigned long long seed = 0; seed < 20000; seed++)
    counts[gt_order_sequence(seed, 10, 0)]++;
  bool flat = true;
  for (int v = 0; v < 10; v++)
    flat = flat && counts[v] > 2000 - 250 && counts[v] < 2000 + 250;
  tap_ok(flat, "first sequence over 20000 seeds is uniform on 10 (%lld .. %lld)",
         counts[0], counts[9]);

  /* Huge datasets: 2^40 sequences, any epoch, fast, distinct within an epoch. */
  const long long big = 1LL << 40, calls = 1000000;
  long long *vals = malloc((size_t)calls * sizeof *vals);
  bool in_range = vals != NULL;
  double t0 = now_s();
  for (long long i = 0; in_range && i < calls; i++) {
    vals[i] = gt_order_sequence(1337, big, 7 * big + 123456789 + i);
    in_range = vals[i] >= 0 && vals[i] < big;
  }
  double per_call = (now_s() - t0) / (double)calls;
  bool distinct = in_range;
  if (distinct) {
    qsort(vals, (size_t)calls, sizeof *vals, cmp_ll);
    for (long long i = 1; i < calls && distinct; i++)
      distinct = vals[i] != vals[i - 1];
  }
  free(vals);
  tap_ok(in_range && distinct, "2^40 sequences: 10^6 samples in range and distinct");
  tap_ok(per_call < 2e-6, "2^40 sequences: %.0f ns a call", per_call * 1e9);
  tap_ok(gt_order_sequence(1, 1, 12345) == 0, "one sequence: always sequence 0");
}

// ---- the dataset reader ----------------------------------------------------------------

static char tmpdir[1024];

static int make_tmpdir(void)
{
  const char *build = getenv("GT_BUILDDIR");
  const char *parts[] = {"tests", "tmp", "test_data_order"};
  snprintf(tmpdir, sizeof tmpdir, "%s", build && build[0] ? build : ".");
  for (size_t i = 0; i < 3; i++) {
    size_t len = strlen(tmpdir);
    snprintf(tmpdir + len, sizeof tmpdir - len, "/%s", parts[i]);
    if (mkdir(tmpdir, 0777) != 0 && errno != EEXIST)
      return -1;
  }
  return 0;
}

static int write_file(const char *path, const char *text, size_t n)
{
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  size_t put = fwrite(text, 1, n, f);
  return fclose(f) == 0 && put == n ? 0 : -1;
}

/* Every row of out (count x (T+1)) is the window of text at sequence s(g). */
static bool rows_match(const int32_t *out, int count, int T, const char *text,
                       bool shuffle, unsigned long long seed, long long first, long long nseq)
{
  for (int i = 0; i < count; i++) {
    long long g = first + i;
    long long s = shuffle ? gt_order_sequence(seed, nseq, g) : g % nseq;
    for (int t = 0; t <= T; t++)
      if (out[(size_t)i * (T + 1) + t] != (unsigned char)text[s * T + t])
        return false;
  }
  return true;
}

/* The error is GT_ERR_INPUT, agreed (collective), and its message has `want`. */
static bool input_error(int status, const char *want)
{
  bool ok = status == GT_ERR_INPUT && gt_error_is_collective() &&
            strstr(gt_error_message(), want) != NULL;
  if (!ok)
    tap_diag("status %d, message: %s", status, gt_error_message());
  gt_error_clear();
  return ok;
}

static void test_dataset(void)
{
  char txt[1200], h5[1200], colon[1200], zero[1200], empty[1200], spec[1300];
  snprintf(txt, sizeof txt, "%s/text.txt", tmpdir);
  snprintf(h5, sizeof h5, "%s/text.h5", tmpdir);
  snprintf(colon, sizeof colon, "%s/odd:name.h5", tmpdir);
  snprintf(zero, sizeof zero, "%s/noval.h5", tmpdir);
  snprintf(empty, sizeof empty, "%s/empty.txt", tmpdir);

  /* ~9 KB of text with every letter, 'z' (122) included. */
  static char text[16384];
  size_t n = 0;
  for (int i = 0; i < 200; i++)
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "%d: the quick brown fox jumps over the lazy dog\n", i);
  long long nval = (long long)((double)n * 0.1), ntrain = (long long)n - nval;
  if (write_file(txt, text, n) != 0 || write_file(empty, "", 0) != 0) {
    tap_ok(false, "write the test text under %s", tmpdir);
    return;
  }
  char *files[] = {txt};
  int st = gt_ingest_text(1, files, h5, 0.1, NULL);
  if (!tap_ok(st == GT_SUCCESS, "gt_ingest_text writes %s", h5)) {
    tap_diag("%s", gt_error_message());
    return;
  }

  gt_dataset *ds = NULL;
  st = gt_dataset_open(h5, "/train/tokens", MPI_COMM_WORLD, &ds);
  if (!tap_ok(st == GT_SUCCESS && ds, "open %s (default /train/tokens)", h5)) {
    tap_diag("%s", gt_error_message());
    return;
  }
  snprintf(spec, sizeof spec, "%s:/train/tokens", h5);
  tap_ok(strcmp(gt_dataset_name(ds), spec) == 0, "name is '%s'", gt_dataset_name(ds));
  tap_ok(gt_dataset_ntokens(ds) == ntrain && gt_dataset_vocab(ds) == 256,
         "train split: %lld tokens (expect %lld), vocab %ld", gt_dataset_ntokens(ds),
         ntrain, gt_dataset_vocab(ds));

  const int T = 32;
  long long nseq = gt_dataset_nseq(ds, T);
  tap_ok(nseq == (ntrain - 1) / T, "nseq = (ntokens - 1) / T = %lld", nseq);
  int count = (int)nseq + 3;
  int32_t *out = malloc((size_t)count * (T + 1) * sizeof *out);
  st = gt_dataset_read_samples(ds, T, false, 0, 0, count, 256, out);
  tap_ok(st == GT_SUCCESS && rows_match(out, count, T, text, false, 0, 0, nseq),
         "in order: sample g is the text at (g %% nseq) * T, across the epoch end");
  st = gt_dataset_read_samples(ds, T, true, 7, 5, count, 256, out);
  bool windows = st == GT_SUCCESS && rows_match(out, count, T, text, true, 7, 5, nseq);
  tap_ok(windows, "shuffled: every sample is the text window of its sequence");
  bool moved = false;
  for (int i = 0; i < count && !moved; i++)
    moved = out[(size_t)i * (T + 1)] != (unsigned char)text[((5 + i) % nseq) * T] ||
            out[(size_t)i * (T + 1) + 3] != (unsigned char)text[((5 + i) % nseq) * T + 3];
  tap_ok(moved, "shuffled order differs from the file order");
  st = gt_dataset_read_samples(ds, 16, false, 0, 0, 4, 256, out);
  tap_ok(st == GT_SUCCESS && rows_match(out, 4, 16, text, false, 0, 0, (ntrain - 1) / 16),
         "another T on the same dataset");
  st = gt_dataset_read_samples(ds, T, false, 0, 0, 1, 100, out);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "position") &&
             strstr(gt_error_message(), "outside"),
         "token >= vocab_limit is GT_ERR_INPUT: %s", gt_error_message());
  gt_error_clear();
  st = gt_dataset_read_samples(ds, (int)ntrain, false, 0, 0, 1, 256, out);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "too few"),
         "T longer than the data is GT_ERR_INPUT: %s", gt_error_message());
  gt_error_clear();
  st = gt_dataset_close(&ds);
  tap_ok(st == GT_SUCCESS && ds == NULL, "close sets the handle to NULL");

  snprintf(spec, sizeof spec, "%s:/val/tokens", h5);
  st = gt_dataset_open(spec, "/train/tokens", MPI_COMM_WORLD, &ds);
  tap_ok(st == GT_SUCCESS && gt_dataset_ntokens(ds) == nval,
         "FILE:/val/tokens picks the val split (%lld tokens)", ds ? gt_dataset_ntokens(ds) : -1);
  if (ds) {
    st = gt_dataset_read_samples(ds, 8, false, 0, 0, 2, 256, out);
    tap_ok(st == GT_SUCCESS && rows_match(out, 2, 8, text + ntrain, false, 0, 0, (nval - 1) / 8),
           "val split is the tail of the text");
    gt_dataset_close(&ds);
  }
  free(out);

  /* A colon in the file name is not a dataset path. */
  st = gt_ingest_text(1, files, colon, 0.0, NULL);
  tap_ok(st == GT_SUCCESS, "ingest with val_fraction 0 to '%s'", colon);
  st = gt_dataset_open(colon, "/train/tokens", MPI_COMM_WORLD, &ds);
  tap_ok(st == GT_SUCCESS && gt_dataset_ntokens(ds) == (long long)n,
         "a ':' not followed by '/' stays in the file name; all %zu tokens in train", n);
  gt_dataset_close(&ds);
  gt_error_clear();
  snprintf(spec, sizeof spec, "%s:/val/tokens", colon);
  st = gt_dataset_open(spec, NULL, MPI_COMM_WORLD, &ds);
  tap_ok(input_error(st, "has 0 tokens") && ds == NULL,
         "the empty val split opens as HDF5 and is refused as too short");

  /* Errors, each GT_ERR_INPUT with a message that says what is wrong. */
  snprintf(spec, sizeof spec, "%s/missing.h5", tmpdir);
  st = gt_dataset_open(spec, NULL, MPI_COMM_WORLD, &ds);
  tap_ok(input_error(st, "No such file or directory") && ds == NULL, "missing file");
  st = gt_dataset_open(txt, NULL, MPI_COMM_WORLD, &ds);
  tap_ok(input_error(st, "is not an HDF5 file"), "a text file is not HDF5");
  st = gt_dataset_open(tmpdir, NULL, MPI_COMM_WORLD, &ds);
  tap_ok(input_error(st, "Is a directory"), "a directory is not a dataset file");
  snprintf(spec, sizeof spec, "%s:/nope/tokens", h5);
  st = gt_dataset_open(spec, NULL, MPI_COMM_WORLD, &ds);
  tap_ok(input_error(st, "has no dataset '/nope/tokens'"), "missing dataset path");
  st = gt_dataset_open(h5, "/other", MPI_COMM_WORLD, &ds);
  tap_ok(input_error(st, "'/other' or '/tokens'"), "default lookup names what it tried");
  snprintf(spec, sizeof spec, "%s:/train", h5);
  st = gt_dataset_open(spec, NULL, MPI_COMM_WORLD, &ds);
  tap_ok(input_error(st, "is not a dataset"), "a group is not a dataset");

  st = gt_ingest_text(1, (char *[]){empty}, zero, 0.1, NULL);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "is empty"),
         "ingest refuses an empty input: %s", gt_error_message());
  gt_error_clear();
  st = gt_ingest_text(1, files, zero, 0.6, NULL);
  tap_ok(st == GT_ERR_INPUT, "ingest refuses val_fraction 0.6: %s", gt_error_message());
  gt_error_clear();
  struct stat sb;
  tap_ok(stat(zero, &sb) != 0, "failed ingests leave no output");

  ssize_t open_ids = H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL);
  tap_ok(open_ids == 0, "no HDF5 object left open after all of the above (%zd)", open_ids);
}

// ----------------------------------------------------------------------------

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  gt_log_init(rank);
  tap_init(rank == 0);

  test_order();
  if (make_tmpdir() != 0)
    tap_ok(false, "create %s: %s", tmpdir, strerror(errno));
  else
    test_dataset();

  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
