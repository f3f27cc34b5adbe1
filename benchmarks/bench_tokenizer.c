/*
 * benchmarks/bench_tokenizer.c - how fast a tokenizer encodes one text on
 * one thread, and whether decoding gives the text back.
 *
 *   bench_tokenizer TOKENIZER TEXT [--repeat N] [--ids FILE]
 *
 * TOKENIZER is what `ingest --tokenizer` takes without training: hf:PATH,
 * sentencepiece:MODEL or bytes. The whole text is encoded N times (default
 * 3) with gt_tokenizer_encode, as one text (the first run fills BPE's cache
 * of words, the later ones find it full), then decoded once. One row under a
 * '#' header: bytes, tokens, the first and the best run's seconds, the best
 * tokens/s and MB/s, and VALID when decode(encode(text)) == text byte for
 * byte, else INVALID (exit status 1). --ids FILE writes the ids as
 * little-endian uint32, for benchmarks/bench_tokenizer.sh to compare with
 * the tokenizers package. No MPI: the tokenizer is plain serial code.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/error.h"
#include "gridtrain/tokenizer.h"

static double bench_now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench_read(const char *path, char **text, size_t *len)
{
  FILE *f = fopen(path, "rb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot read %s: %s", path, strerror(errno));
  int status = GT_SUCCESS;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "cannot read %s: not a regular file", path);
  *text = status == GT_SUCCESS ? malloc((size_t)n + 1) : NULL;
  if (status == GT_SUCCESS && (!*text || fread(*text, 1, (size_t)n, f) != (size_t)n))
    status = GT_ERROR(GT_ERR_INPUT, "cannot read the %ld bytes of %s", n, path);
  fclose(f);
  *len = (size_t)(n > 0 ? n : 0);
  return status;
}

static int bench_tokenizer(const char *spec, gt_tokenizer **tok)
{
  if (strncmp(spec, "hf:", 3) == 0)
    return gt_tokenizer_load_hf(spec + 3, tok);
  if (strncmp(spec, "sentencepiece:", 14) == 0)
    return gt_tokenizer_load(spec + 14, tok);
  GT_CHECK(strcmp(spec, "bytes") == 0, GT_ERR_INPUT,
           "unknown tokenizer '%s'; give hf:PATH, sentencepiece:MODEL or bytes", spec);
  return gt_tokenizer_bytes(tok);
}

static int bench_write_ids(const char *path, const uint32_t *ids, size_t n)
{
  FILE *f = fopen(path, "wb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) {
    const unsigned char le[4] = {(unsigned char)ids[i], (unsigned char)(ids[i] >> 8),
                                 (unsigned char)(ids[i] >> 16), (unsigned char)(ids[i] >> 24)};
    ok = fwrite(le, 1, 4, f) == 4;
  }
  ok = fclose(f) == 0 && ok;
  GT_CHECK(ok, GT_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
  return GT_SUCCESS;
}

typedef struct {
  const char *spec, *text_path, *ids_path;
  int repeat;
} bench_args;

static int bench_run(const bench_args *a, bool *valid)
{
  gt_tokenizer *tok = NULL;
  char *text = NULL, *back = NULL;
  uint32_t *ids = NULL;
  size_t len = 0, n = 0, blen = 0;
  double first = 0, best = 0;
  int status = bench_read(a->text_path, &text, &len);
  if (status == GT_SUCCESS)
    status = bench_tokenizer(a->spec, &tok);
  for (int r = 0; r < a->repeat && status == GT_SUCCESS; r++) {
    free(ids);
    ids = NULL;
    const double t0 = bench_now();
    status = gt_tokenizer_encode(tok, text, len, &ids, &n);
    const double dt = bench_now() - t0;
    first = r == 0 ? dt : first;
    best = r == 0 || dt < best ? dt : best;
  }
  if (status == GT_SUCCESS)
    status = gt_tokenizer_decode(tok, ids, n, &back, &blen);
  if (status == GT_SUCCESS && a->ids_path)
    status = bench_write_ids(a->ids_path, ids, n);
  if (status == GT_SUCCESS) {
    *valid = blen == len && memcmp(back, text, len) == 0;
    const double b = best > 1e-9 ? best : 1e-9;
    printf("# bench_tokenizer: %s on %s, one thread, %d runs of gt_tokenizer_encode on the "
           "whole text\n", a->spec, a->text_path, a->repeat);
    printf("# %-12s %12s %10s %10s %14s %10s  %s\n", "tokenizer", "bytes", "tokens", "first_s",
           "tokens_per_s", "MB_per_s", "decode(encode(text)) == text");
    printf("  %-12s %12zu %10zu %10.4f %14.0f %10.2f  %s\n", gt_tokenizer_name(tok), len, n,
           first, (double)n / b, (double)len / b / 1e6, *valid ? "VALID" : "INVALID");
  }
  gt_tokenizer_free(tok);
  free(text);
  free(back);
  free(ids);
  return status;
}

int main(int argc, char **argv)
{
  bench_args a = {.repeat = 3};
  int pos = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      a.repeat = atoi(argv[++i]);
    else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
      a.ids_path = argv[++i];
    else if (pos == 0)
      a.spec = argv[i], pos++;
    else if (pos == 1)
      a.text_path = argv[i], pos++;
    else
      pos = 3;
  }
  if (pos != 2 || a.repeat < 1) {
    fprintf(stderr, "usage: bench_tokenizer hf:PATH|sentencepiece:MODEL|bytes TEXT "
                    "[--repeat N] [--ids FILE]\n");
    return 2;
  }
  bool valid = false;
  if (bench_run(&a, &valid) != GT_SUCCESS) {
    fprintf(stderr, "bench_tokenizer: error: %s\n", gt_error_message());
    return 2;
  }
  return valid ? 0 : 1;
}
