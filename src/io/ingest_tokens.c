/*
 * ingest_tokens.c - token files of other trainers to an HDF5 token dataset
 * (ingest.h): nanoGPT's raw uint16, llm.c's .bin shards, NumPy's .npy.
 *
 * Each file's header is read and checked against the file's size first (all
 * files before any output); then the tokens are streamed in blocks,
 * widened to uint32, checked against the vocabulary and appended (its head
 * to /train/tokens, its tail to /val/tokens; ingest_out.c writes the file).
 */
#ifdef HAVE_CONFIG_H
#include "build_config.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/timer.h"
#include "h5util.h"
#include "ingest_internal.h"

#define GT_TOKENS_BLOCK ((size_t)1 << 20) /* tokens read at a time */
#define GT_LLMC_HEADER 1024                /* bytes: 256 int32 */
#define GT_NPY_HEADER_MAX 65536
#define GT_VOCAB_MAX 2147483647LL

/* Where the tokens of a file are and how they are stored. */
typedef struct {
  const char *format;  /* "nanogpt", "llmc", "npy" */
  long long offset;    /* bytes before the first token */
  long long count;     /* tokens */
  int size;            /* bytes per token: 1, 2, 4, 8 */
  bool is_signed;
} gt_token_layout;

// ---- little-endian numbers -------------------------------------------------------------

static uint64_t gt_le(const unsigned char *p, int size)
{
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

// ---- formats -------------------------------------------------------------------------------

static int gt_layout_nanogpt(const gt_ingest_source *s, gt_token_layout *l)
{
  GT_CHECK(s->size % 2 == 0, GT_ERR_INPUT,
           "'%s' has %lld bytes, not a whole number of uint16 tokens; it is not a nanoGPT "
           "token file (--format nanogpt)",
           s->path, s->size);
  *l = (gt_token_layout){"nanogpt", 0, s->size / 2, 2, false};
  return GT_SUCCESS;
}

static int gt_layout_llmc(const gt_ingest_source *s, const unsigned char *head, size_t got,
                          gt_token_layout *l)
{
  GT_CHECK(got >= GT_LLMC_HEADER, GT_ERR_INPUT,
           "'%s' has %lld bytes, fewer than llm.c's header of 256 int32 (--format llmc)",
           s->path, s->size);
  const int32_t magic = (int32_t)gt_le(head, 4), version = (int32_t)gt_le(head + 4, 4);
  const int32_t count = (int32_t)gt_le(head + 8, 4);
  int size = 0;
  if (magic == 20240520) {
    GT_CHECK(version == 1, GT_ERR_INPUT,
             "'%s': llm.c header version %d with the GPT-2 magic 20240520; version 1 (uint16 "
             "tokens) is the one known",
             s->path, (int)version);
    size = 2;
  } else if (magic == 20240801) {
    GT_CHECK(version == 7, GT_ERR_INPUT,
             "'%s': llm.c header version %d with the LLaMA-3 magic 20240801; version 7 (uint32 "
             "tokens) is the one known",
             s->path, (int)version);
    size = 4;
  } else {
    return GT_ERROR(GT_ERR_INPUT,
                    "'%s' starts with %d, not an llm.c magic number (20240520 for GPT-2, "
                    "20240801 for LLaMA-3): not an llm.c token file, or a damaged one",
                    s->path, (int)magic);
  }
  const long long have = (s->size - GT_LLMC_HEADER) / size;
  GT_CHECK(count > 0 && s->size == GT_LLMC_HEADER + (long long)count * size, GT_ERR_INPUT,
           "'%s': its llm.c header says %d tokens but the file holds %lld bytes after the "
           "header (%lld tokens of %d bytes%s); the file is truncated or damaged",
           s->path, (int)count, s->size - GT_LLMC_HEADER, have, size,
           (s->size - GT_LLMC_HEADER) % size ? " and a part" : "");
  *l = (gt_token_layout){"llmc", GT_LLMC_HEADER, count, size, false};
  return GT_SUCCESS;
}

/* The value text of 'key' in a .npy header dict (not NUL-terminated: up to
 * the next ',' or '}' at depth 0), or NULL. */
static const char *gt_npy_value(const char *hdr, const char *key, size_t *len)
{
  char quoted[32];
  snprintf(quoted, sizeof quoted, "'%s'", key);
  const char *k = strstr(hdr, quoted);
  if (!k) {
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    k = strstr(hdr, quoted);
  }
  if (!k)
    return NULL;
  const char *v = k + strlen(quoted);
  while (*v == ' ')
    v++;
  if (*v++ != ':')
    return NULL;
  while (*v == ' ')
    v++;
  int depth = 0;
  const char *e = v;
  for (; *e && (depth > 0 || (*e != ',' && *e != '}')); e++)
    depth += *e == '(' ? 1 : *e == ')' ? -1 : 0;
  while (e > v && e[-1] == ' ')
    e--;
  *len = (size_t)(e - v);
  return v;
}

static int gt_npy_descr(const gt_ingest_source *s, const char *v, size_t len, gt_token_layout *l)
{
  char d[16] = "";
  if (len >= 2 && len - 2 < sizeof d && (v[0] == '\'' || v[0] == '"') && v[len - 1] == v[0])
    memcpy(d, v + 1, len - 2);
  const char order = d[0], kind = d[1];
  const int size = d[2] >= '1' && d[2] <= '9' && d[3] == '\0' ? d[2] - '0' : 0;
  GT_CHECK(order != '>' || size == 1, GT_ERR_INPUT,
           "'%s' holds big-endian integers ('%s'); save them little-endian "
           "(np.save(f, a.astype('<%c%d')))",
           s->path, d, kind, size);
  GT_CHECK((order == '<' || order == '|' || order == '=') && (kind == 'u' || kind == 'i') &&
               (size == 1 || size == 2 || size == 4 || size == 8),
           GT_ERR_INPUT,
           "'%s' holds dtype '%s'; tokens must be integers (u1 i1 u2 i2 u4 i4 u8 i8): convert "
           "them with a.astype(np.uint32)",
           s->path, d[0] ? d : "?");
  l->size = size;
  l->is_signed = kind == 'i';
  return GT_SUCCESS;
}

static int gt_npy_shape(const gt_ingest_source *s, const char *v, size_t len, long long *n)
{
  char shape[128] = "";
  if (len < sizeof shape)
    memcpy(shape, v, len);
  long long dims[3];
  int nd = 0;
  const char *p = shape[0] == '(' ? shape + 1 : NULL;
  while (p && nd < 3) {
    while (*p == ' ')
      p++;
    if (*p == ')')
      break;
    char *end;
    errno = 0;
    const long long d = strtoll(p, &end, 10);
    if (end == p || errno != 0 || d < 0) {
      p = NULL;
      break;
    }
    dims[nd++] = d;
    p = end;
    while (*p == ' ')
      p++;
    if (*p == ',')
      p++;
    else if (*p != ')')
      p = NULL;
  }
  GT_CHECK(p && nd == 1, GT_ERR_INPUT,
           "'%s' holds an array of shape %s; give a 1-D array of tokens (a.reshape(-1))", s->path,
           shape[0] ? shape : "(unreadable)");
  *n = dims[0];
  return GT_SUCCESS;
}

static int gt_layout_npy(const gt_ingest_source *s, FILE *f, const unsigned char *head,
                         size_t got, gt_token_layout *l)
{
  GT_CHECK(got >= 10 && memcmp(head, "\x93NUMPY", 6) == 0, GT_ERR_INPUT,
           "'%s' does not start with the .npy magic \\x93NUMPY; not a NumPy file (--format npy)",
           s->path);
  const int major = head[6];
  GT_CHECK(major >= 1 && major <= 3, GT_ERR_INPUT,
           "'%s': .npy format version %d.%d; versions 1, 2 and 3 are known", s->path, major,
           head[7]);
  const long long start = major == 1 ? 10 : 12;
  GT_CHECK((long long)got >= start, GT_ERR_INPUT, "'%s' is truncated inside its .npy header",
           s->path);
  const long long hlen = (long long)gt_le(head + 8, major == 1 ? 2 : 4);
  GT_CHECK(hlen > 0 && hlen <= GT_NPY_HEADER_MAX && start + hlen <= s->size, GT_ERR_INPUT,
           "'%s': a .npy header of %lld bytes in a file of %lld; the file is damaged", s->path,
           hlen, s->size);
  char *hdr = malloc((size_t)hlen + 1);
  GT_CHECK_ALLOC(hdr, (size_t)hlen + 1);
  int status = GT_SUCCESS;
  if (fseeko(f, (off_t)start, SEEK_SET) != 0 || fread(hdr, 1, (size_t)hlen, f) != (size_t)hlen)
    status = GT_ERROR(GT_ERR_INPUT, "cannot read the .npy header of '%s'", s->path);
  hdr[hlen] = '\0';
  size_t dlen = 0, slen = 0, flen = 0;
  const char *descr = gt_npy_value(hdr, "descr", &dlen);
  const char *shape = gt_npy_value(hdr, "shape", &slen);
  const char *fortran = gt_npy_value(hdr, "fortran_order", &flen);
  if (status == GT_SUCCESS && (!descr || !shape || !fortran))
    status = GT_ERROR(GT_ERR_INPUT,
                      "'%s': the .npy header lacks descr, shape or fortran_order; the file is "
                      "damaged",
                      s->path);
  long long n = 0;
  if (status == GT_SUCCESS)
    status = gt_npy_descr(s, descr, dlen, l);
  if (status == GT_SUCCESS)
    status = gt_npy_shape(s, shape, slen, &n);
  /* a 1-D array is the same in C and Fortran order */
  free(hdr);
  GT_CALL(status);
  l->format = "npy";
  l->offset = start + hlen;
  l->count = n;
  GT_CHECK(n > 0, GT_ERR_INPUT, "'%s' holds an empty array; give tokens", s->path);
  GT_CHECK(s->size - l->offset == n * l->size, GT_ERR_INPUT,
           "'%s': its .npy header says %lld tokens of %d bytes but %lld bytes follow it; the file "
           "is truncated or damaged",
           s->path, n, l->size, s->size - l->offset);
  return GT_SUCCESS;
}

/* The layout of a file in the format asked for ("auto": found from its start). */
static int gt_token_layout_of(const gt_ingest_source *s, const char *format, gt_token_layout *l)
{
  FILE *f = fopen(s->path, "rb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  unsigned char head[GT_LLMC_HEADER];
  const size_t got = fread(head, 1, sizeof head, f);
  int status = GT_SUCCESS;
  if (ferror(f))
    status = GT_ERROR(GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  if (status == GT_SUCCESS && strcmp(format, "auto") == 0) {
    const int32_t magic = got >= 4 ? (int32_t)gt_le(head, 4) : 0;
    format = got >= 6 && memcmp(head, "\x93NUMPY", 6) == 0       ? "npy"
             : got >= 4 && (magic == 20240520 || magic == 20240801) ? "llmc"
                                                                   : "nanogpt";
  }
  if (status == GT_SUCCESS) {
    if (strcmp(format, "npy") == 0)
      status = gt_layout_npy(s, f, head, got, l);
    else if (strcmp(format, "llmc") == 0)
      status = gt_layout_llmc(s, head, got, l);
    else
      status = gt_layout_nanogpt(s, l);
  }
  fclose(f);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- streaming -----------------------------------------------------------------------------

/* n tokens of the file (its positions at, at + 1, ...) from raw into ids,
 * each checked to be in [0, vocab); hint ends the message of one that is
 * not. */
static int gt_tokens_decode(const gt_ingest_source *s, const gt_token_layout *l,
                            const unsigned char *raw, size_t n, long long at, long long vocab,
                            const char *hint, uint32_t *ids)
{
  for (size_t i = 0; i < n; i++) {
    const uint64_t u = gt_le(raw + i * (size_t)l->size, l->size);
    /* sign-extend signed values so that negatives show as such */
    const int shift = 64 - 8 * l->size;
    const int64_t v = l->is_signed ? (int64_t)(u << shift) >> shift : (int64_t)-1;
    if ((l->is_signed && v < 0) || u >= (uint64_t)vocab)
      return GT_ERROR(GT_ERR_INPUT,
                      "'%s': token %lld at position %lld is outside the vocabulary [0, %lld)%s",
                      s->path, l->is_signed ? (long long)v : (long long)u, at + (long long)i,
                      vocab, hint);
    ids[i] = (uint32_t)u;
  }
  return GT_SUCCESS;
}

/* The next n tokens of f into raw (n tokens of l->size bytes). */
static int gt_tokens_fread(const gt_ingest_source *s, const gt_token_layout *l, FILE *f,
                           size_t n, unsigned char *raw)
{
  const size_t got = fread(raw, (size_t)l->size, n, f);
  GT_CHECK(!ferror(f), GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  GT_CHECK(got == n, GT_ERR_INPUT, "input '%s' shrank while it was read; run the command again",
           s->path);
  return GT_SUCCESS;
}

/* Tokens [from, to) of a file to a split. */
static int gt_tokens_copy(gt_ingest_out *o, int split, const gt_ingest_source *s,
                          const gt_token_layout *l, FILE *f, long long from, long long to,
                          unsigned char *raw, uint32_t *ids)
{
  GT_CHECK(fseeko(f, (off_t)(l->offset + from * l->size), SEEK_SET) == 0, GT_ERR_INPUT,
           "cannot read input '%s': %s", s->path, strerror(errno));
  for (long long at = from; at < to;) {
    const size_t n = to - at < (long long)GT_TOKENS_BLOCK ? (size_t)(to - at) : GT_TOKENS_BLOCK;
    GT_CALL(gt_tokens_fread(s, l, f, n, raw));
    GT_CALL(gt_tokens_decode(s, l, raw, n, at, o->vocab,
                             "; give the right --vocab or check the file", ids));
    GT_CALL(gt_ingest_out_append(o, split, ids, n));
    at += (long long)n;
  }
  return GT_SUCCESS;
}

static int gt_tokens_file(gt_ingest_out *o, const gt_ingest_source *s, const gt_token_layout *l,
                          unsigned char *raw, uint32_t *ids)
{
  FILE *f = fopen(s->path, "rb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  int status = gt_tokens_copy(o, GT_SPLIT_TRAIN, s, l, f, 0, s->train, raw, ids);
  if (status == GT_SUCCESS)
    status = gt_tokens_copy(o, GT_SPLIT_VAL, s, l, f, s->train, l->count, raw, ids);
  if (status == GT_SUCCESS && fgetc(f) != EOF)
    status = GT_ERROR(GT_ERR_INPUT, "input '%s' grew while it was read; run the ingest again",
                      s->path);
  fclose(f);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The tokenizer that wrote the token files (--tokenizer: bytes,
 * sentencepiece:MODEL or hf:PATH; NULL when none is given), stored with the tokens so
 * that the dataset decodes (gridtrain sample, ckpt convert --format hf). Its
 * vocabulary is the dataset's: *vocab 0 takes it, another value must equal
 * it (gt_tokenizer_from_file refuses a vocab_size that differs). */
static int gt_tokens_tokenizer(const char *spec, long long *vocab, gt_tokenizer **tok)
{
  *tok = NULL;
  if (!spec)
    return GT_SUCCESS;
  gt_tok_spec t;
  GT_CALL(gt_tok_spec_parse(spec, &t));
  GT_CHECK(t.kind != GT_TOK_TRAIN, GT_ERR_INPUT,
           "--tokenizer %s: token files are tokenized already; name the tokenizer that "
           "wrote them (bytes, sentencepiece:MODEL or hf:PATH), or train one with 'ingest text'", spec);
  GT_CALL(gt_tok_spec_load(&t, tok));
  const long long has = gt_tokenizer_vocab(*tok);
  if (*vocab == 0)
    *vocab = has;
  if (*vocab != has) {
    gt_tokenizer_free(*tok);
    *tok = NULL;
    return GT_ERROR(GT_ERR_INPUT,
                    "--vocab %lld does not match the %lld pieces of the tokenizer %s; leave "
                    "--vocab out to take the tokenizer's",
                    *vocab, has, spec);
  }
  return GT_SUCCESS;
}

static int gt_tokens_write(gt_ingest_out *o, int n, gt_ingest_source *src,
                           const gt_token_layout *lay, const gt_ingest_opts *opts,
                           long long vocab, const gt_tokenizer *tok)
{
  unsigned char *raw = malloc(GT_TOKENS_BLOCK * 8);
  uint32_t *ids = malloc(GT_TOKENS_BLOCK * sizeof *ids);
  int status = GT_SUCCESS;
  if (!raw || !ids)
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", GT_TOKENS_BLOCK * 12);
  if (status == GT_SUCCESS)
    status = gt_ingest_out_create(o, vocab, tok);
  for (int i = 0; i < n && status == GT_SUCCESS; i++)
    status = gt_tokens_file(o, &src[i], &lay[i], raw, ids);
  if (status == GT_SUCCESS)
    status = gt_ingest_out_attrs(o, n, src, opts->val_fraction);
  const char **formats = status == GT_SUCCESS ? malloc((size_t)n * sizeof *formats) : NULL;
  if (status == GT_SUCCESS && !formats)
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                      (size_t)n * sizeof *formats);
  if (status == GT_SUCCESS) {
    for (int i = 0; i < n; i++)
      formats[i] = lay[i].format;
    status = gt_h5_write_attr_strs(o->file, "source_formats", n, formats);
  }
  if (status == GT_SUCCESS && tok)
    status = gt_h5_write_attr_str(o->file, "tokenizer_spec", opts->tokenizer);
  free(formats);
  free(raw);
  free(ids);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ----------------------------------------------------------------------------------------------

int gt_ingest_tokens(int nfiles, char *const files[], const char *out_path,
                     const gt_ingest_opts *opts, gt_ingest_counts *counts)
{
  GT_CALL(gt_ingest_check_args(nfiles, out_path, opts->val_fraction, "token"));
  const double vf = opts->val_fraction;
  const char *format = opts->format ? opts->format : "auto";
  GT_CHECK(strcmp(format, "auto") == 0 || strcmp(format, "nanogpt") == 0 ||
               strcmp(format, "llmc") == 0 || strcmp(format, "npy") == 0,
           GT_ERR_INPUT, "unknown token file format '%s'; choose auto, nanogpt, llmc or npy",
           format);
  long long vocab = opts->vocab;
  gt_tokenizer *tok = NULL;
  GT_CALL(gt_tokens_tokenizer(opts->tokenizer, &vocab, &tok));
  if (vocab < 1 || vocab > GT_VOCAB_MAX) {
    gt_tokenizer_free(tok);
    return GT_ERROR(GT_ERR_INPUT,
                    "the vocabulary size %lld is outside [1, %lld]; give --vocab N or "
                    "--tokenizer (the files do not say it: e.g. 50257 for GPT-2's tokenizer)",
                    vocab, GT_VOCAB_MAX);
  }

  const int n = nfiles + opts->nval;
  gt_ingest_source *src = calloc((size_t)n, sizeof *src);
  gt_token_layout *lay = calloc((size_t)n, sizeof *lay);
  int status = src && lay ? GT_SUCCESS
                          : GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                                     (size_t)n * (sizeof *src + sizeof *lay));
  for (int i = 0; i < n && status == GT_SUCCESS; i++) {
    const bool val = i >= nfiles;
    status = gt_ingest_stat(&src[i], val ? opts->val_files[i - nfiles] : files[i]);
    if (status == GT_SUCCESS)
      status = gt_token_layout_of(&src[i], format, &lay[i]);
    if (status == GT_SUCCESS) {
      src[i].format = lay[i].format;
      src[i].val = val ? lay[i].count : (long long)floor((double)lay[i].count * vf);
      src[i].train = lay[i].count - src[i].val;
    }
  }

  gt_ingest_out o = {0};
  const double t0 = gt_now();
  if (status == GT_SUCCESS)
    status = gt_ingest_out_probe(&o, out_path);
  if (status == GT_SUCCESS)
    status = gt_tokens_write(&o, n, src, lay, opts, vocab, tok);
  if (o.tmp)
    status = gt_ingest_out_finish(&o, status);
  if (status == GT_SUCCESS && counts) {
    *counts = (gt_ingest_counts){.train_tokens = o.n[GT_SPLIT_TRAIN],
                                 .val_tokens = o.n[GT_SPLIT_VAL],
                                 .vocab = o.vocab,
                                 .dtype = o.dtype,
                                 .format = lay[0].format,
                                 .encode_seconds = gt_now() - t0};
    for (int i = 0; i < n; i++) {
      counts->bytes += src[i].size;
      if (strcmp(lay[i].format, lay[0].format) != 0)
        counts->format = "mixed";
    }
  }
  gt_tokenizer_free(tok);
  free(src);
  free(lay);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- a whole file in memory ------------------------------------------------------------------

int gt_tokens_read_file(const char *path, const char *format, long long vocab, const char *hint,
                        uint32_t **ids, long long *n)
{
  *ids = NULL;
  *n = 0;
  format = format ? format : "auto";
  GT_CHECK(strcmp(format, "auto") == 0 || strcmp(format, "nanogpt") == 0 ||
               strcmp(format, "llmc") == 0 || strcmp(format, "npy") == 0,
           GT_ERR_INPUT, "unknown token file format '%s'; choose auto, nanogpt, llmc or npy",
           format);
  GT_CHECK(vocab >= 1 && vocab <= GT_VOCAB_MAX, GT_ERR_INPUT,
           "the vocabulary size %lld is outside [1, %lld]", vocab, GT_VOCAB_MAX);
  gt_ingest_source s;
  gt_token_layout l;
  GT_CALL(gt_ingest_stat(&s, path));
  GT_CALL(gt_token_layout_of(&s, format, &l));
  GT_CHECK(l.count >= 1, GT_ERR_INPUT, "'%s' holds no tokens", path);
  FILE *f = fopen(path, "rb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot read input '%s': %s", path, strerror(errno));
  unsigned char *raw = malloc(GT_TOKENS_BLOCK * 8);
  uint32_t *out = malloc(sizeof *out * (size_t)l.count);
  int status = raw && out ? GT_SUCCESS
                          : GT_ERROR(GT_ERR_SYSTEM, "out of memory for the %lld tokens of '%s'",
                                     l.count, path);
  if (status == GT_SUCCESS && fseeko(f, (off_t)l.offset, SEEK_SET) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "cannot read input '%s': %s", path, strerror(errno));
  for (long long at = 0; at < l.count && status == GT_SUCCESS;) {
    const size_t k =
        l.count - at < (long long)GT_TOKENS_BLOCK ? (size_t)(l.count - at) : GT_TOKENS_BLOCK;
    status = gt_tokens_fread(&s, &l, f, k, raw);
    if (status == GT_SUCCESS)
      status = gt_tokens_decode(&s, &l, raw, k, at, vocab, hint ? hint : "", out + at);
    at += (long long)k;
  }
  fclose(f);
  free(raw);
  if (status != GT_SUCCESS) {
    free(out);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *ids = out;
  *n = l.count;
  return GT_SUCCESS;
}
