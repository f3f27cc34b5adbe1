/*
 * ingest.c - raw text to an HDF5 token dataset (ingest.h), with the byte
 * tokenizer, a SentencePiece model given or trained here, or a Hugging Face
 * byte-level BPE.
 *
 * Inputs are checked first (exist, regular, not empty) and the output probed,
 * so that mistakes surface before any long work. A tokenizer to train reads
 * the training part of every input once, line by line (SentencePiece keeps
 * a bounded sample). Then each input is read in blocks; the tokenizer
 * encodes the head of each block that it can encode without the text after
 * it (gt_tokenizer_encode_head: whole lines for SentencePiece, all but the
 * last pre-tokenizer piece for BPE), the rest is carried into the next
 * block, and the ids are appended: the input's head to /train/tokens, its
 * tail to /val/tokens (ingest_out.c writes the file).
 */
#ifdef HAVE_CONFIG_H
#include "build_config.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/bar.h"
#include "gridtrain/error.h"
#include "gridtrain/timer.h"
#include "h5util.h"
#include "ingest_internal.h"

int gt_tok_spec_parse(const char *spec, gt_tok_spec *t)
{
  memset(t, 0, sizeof *t);
  if (!spec || strcmp(spec, "bytes") == 0) {
    t->kind = GT_TOK_BYTES;
    return GT_SUCCESS;
  }
  if (strncmp(spec, "sentencepiece:", 14) == 0) {
    t->kind = GT_TOK_MODEL;
    t->model = spec + 14;
    GT_CHECK(t->model[0] != '\0', GT_ERR_INPUT,
             "tokenizer 'sentencepiece:' names no model file; give sentencepiece:FILE.model");
    return GT_SUCCESS;
  }
  if (strncmp(spec, "hf:", 3) == 0) {
    t->kind = GT_TOK_HF;
    t->model = spec + 3;
    GT_CHECK(t->model[0] != '\0', GT_ERR_INPUT,
             "tokenizer 'hf:' names no file; give hf:tokenizer.json or hf:DIR (with "
             "tokenizer.json, or vocab.json and merges.txt)");
    return GT_SUCCESS;
  }
  if (strncmp(spec, "train:", 6) == 0) {
    const char *type = spec + 6, *colon = strchr(type, ':');
    GT_CHECK(colon && (size_t)(colon - type) < sizeof t->type, GT_ERR_INPUT,
             "tokenizer '%s' has no vocabulary size; " GT_TOK_SPEC_HELP, spec);
    memcpy(t->type, type, (size_t)(colon - type));
    GT_CHECK(strcmp(t->type, "bpe") == 0 || strcmp(t->type, "unigram") == 0, GT_ERR_INPUT,
             "tokenizer '%s': unknown model type '%s'; " GT_TOK_SPEC_HELP, spec, t->type);
    char *end;
    errno = 0;
    const long v = strtol(colon + 1, &end, 10);
    GT_CHECK(colon[1] != '\0' && *end == '\0' && errno == 0 && v > 0 && v <= (1L << 30),
             GT_ERR_INPUT, "tokenizer '%s': '%s' is not a vocabulary size; " GT_TOK_SPEC_HELP,
             spec, colon + 1);
    t->kind = GT_TOK_TRAIN;
    t->vocab = (int)v;
    return GT_SUCCESS;
  }
  return GT_ERROR(GT_ERR_INPUT, "unknown tokenizer '%s'; " GT_TOK_SPEC_HELP, spec);
}

int gt_tok_spec_load(const gt_tok_spec *t, gt_tokenizer **tok)
{
  GT_ASSERT(t->kind != GT_TOK_TRAIN);
  if (t->kind == GT_TOK_BYTES)
    return gt_tokenizer_bytes(tok);
  if (t->kind == GT_TOK_HF)
    return gt_tokenizer_load_hf(t->model, tok);
  return gt_tokenizer_load(t->model, tok);
}

// ---- the split of each input ---------------------------------------------------------------

/* For line-wise tokenizers: the train part ends at the start of the line
 * after the byte where the validation tail would begin (the whole input
 * when no line break follows). */
static int gt_ingest_split_at_line(gt_ingest_source *s)
{
  if (s->val == 0)
    return GT_SUCCESS;
  FILE *f = fopen(s->path, "rb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  int status = GT_SUCCESS;
  long long at = s->train, end = s->size;
  if (fseeko(f, (off_t)at, SEEK_SET) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  for (int c; status == GT_SUCCESS && at < s->size && (c = fgetc(f)) != EOF; at++)
    if (c == '\n') {
      end = at + 1;
      break;
    }
  fclose(f);
  GT_CALL(status);
  s->train = end;
  s->val = s->size - end;
  return GT_SUCCESS;
}

// ---- reading a byte range in blocks ------------------------------------------------------------

/* A reader of [from, to) of an input, a block at a time: each fill gives
 * what was read and not yet taken, and the caller takes a head of it; the
 * rest comes again at the front of the next fill. */
typedef struct {
  const gt_ingest_source *src;
  FILE *f;
  char *buf;
  size_t have;     /* bytes in buf */
  size_t given;    /* bytes of buf handed out by the last call (dropped on the next) */
  long long pos;   /* file offset of buf[0] */
  long long to;
  bool utf8;       /* check that the text is UTF-8 */
} gt_range_reader;

static int gt_range_open(gt_range_reader *r, const gt_ingest_source *s, long long from,
                         long long to, bool utf8, char *buf)
{
  memset(r, 0, sizeof *r);
  r->src = s, r->buf = buf, r->pos = from, r->to = to, r->utf8 = utf8;
  r->f = fopen(s->path, "rb");
  GT_CHECK(r->f, GT_ERR_INPUT, "cannot read input '%s': %s", s->path, strerror(errno));
  GT_CHECK(fseeko(r->f, (off_t)from, SEEK_SET) == 0, GT_ERR_INPUT, "cannot read input '%s': %s",
           s->path, strerror(errno));
  return GT_SUCCESS;
}

static void gt_range_close(gt_range_reader *r)
{
  if (r->f)
    fclose(r->f);
  r->f = NULL;
}

/* The bytes read and not taken: *text, *len (0 at the end); *last when
 * they reach `to`. UTF-8 text ends at a whole character (a character cut
 * by the block's end comes whole in the next fill) and is checked. */
static int gt_range_fill(gt_range_reader *r, const char **text, size_t *len, bool *last)
{
  /* drop what was handed out, keep the rest at the front */
  memmove(r->buf, r->buf + r->given, r->have - r->given);
  r->have -= r->given;
  r->pos += (long long)r->given;
  r->given = 0;
  const long long left = r->to - r->pos - (long long)r->have;
  const size_t want = GT_INGEST_BLOCK - r->have < (unsigned long long)left
                          ? GT_INGEST_BLOCK - r->have
                          : (size_t)left;
  const size_t got = fread(r->buf + r->have, 1, want, r->f);
  GT_CHECK(!ferror(r->f), GT_ERR_INPUT, "cannot read input '%s': %s", r->src->path,
           strerror(errno));
  GT_CHECK(got == want, GT_ERR_INPUT, "input '%s' shrank while it was read; run the ingest again",
           r->src->path);
  r->have += got;
  *last = r->pos + (long long)r->have == r->to;
  size_t n = r->have;
  if (r->utf8) {
    const size_t ok = gt_utf8_prefix(r->buf, r->have);
    GT_CHECK(ok == r->have || (!*last && r->have - ok < 4), GT_ERR_INPUT,
             "input '%s' is not UTF-8 text at byte %lld (0x%02x); tokenizers other than bytes "
             "take UTF-8: convert it (iconv) or use --tokenizer bytes",
             r->src->path, r->pos + (long long)ok, (unsigned char)r->buf[ok]);
    n = ok; /* up to 3 bytes of a cut character wait for the next fill */
  }
  *text = r->buf, *len = n;
  return GT_SUCCESS;
}

/* The first n bytes of the last fill are used. */
static void gt_range_take(gt_range_reader *r, size_t n)
{
  r->given = n;
}

/* The next piece of text for training: whole lines (or, in a line longer
 * than a block, whole segments), *len 0 at the end. */
static int gt_range_next(gt_range_reader *r, const char **text, size_t *len)
{
  bool last = false;
  GT_CALL(gt_range_fill(r, text, len, &last));
  if (!last) {
    const size_t head = gt_tokenizer_line_head(*text, *len);
    *len = head > 0 ? head : *len;
  }
  gt_range_take(r, *len);
  return GT_SUCCESS;
}

// ---- training the tokenizer ------------------------------------------------------------------

/* The lines of the training parts of all inputs, for gt_tokenizer_train. */
typedef struct {
  const gt_ingest_source *src;
  int n, i;            /* inputs; the one being read */
  bool open;
  gt_range_reader r;
  const char *piece;   /* the current piece and what is left of it */
  size_t left;
  char *buf;
} gt_train_lines;

static int gt_train_next(void *ctx, const char **line, size_t *len, bool *done)
{
  gt_train_lines *t = ctx;
  while (t->left == 0) {
    if (t->open) {
      GT_CALL(gt_range_next(&t->r, &t->piece, &t->left));
      if (t->left > 0)
        break;
      gt_range_close(&t->r);
      t->open = false;
      t->i++;
    }
    if (t->i >= t->n) {
      *done = true;
      return GT_SUCCESS;
    }
    GT_CALL(gt_range_open(&t->r, &t->src[t->i], 0, t->src[t->i].train, true, t->buf));
    t->open = true;
  }
  const size_t seg = gt_tokenizer_segment(t->piece, t->left);
  *line = t->piece;
  *len = seg - (t->piece[seg - 1] == '\n');
  t->piece += seg, t->left -= seg;
  *done = false;
  return GT_SUCCESS;
}

static int gt_ingest_tokenizer(const gt_tok_spec *spec, int n, const gt_ingest_source *src,
                               char *buf, gt_tokenizer **tok)
{
  if (spec->kind != GT_TOK_TRAIN)
    return gt_tok_spec_load(spec, tok);
  gt_train_lines t = {.src = src, .n = n, .buf = buf};
  const int status = gt_tokenizer_train(spec->type, spec->vocab, GT_INGEST_TRAIN_LINES,
                                         gt_train_next, &t, tok);
  gt_range_close(&t.r);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- encoding ----------------------------------------------------------------------------------

static int gt_ingest_encode_range(gt_ingest_out *o, int split, gt_tokenizer *tok,
                                  const gt_ingest_source *s, long long from, long long to,
                                  char *buf)
{
  if (to <= from)
    return GT_SUCCESS;
  gt_range_reader r;
  int status = gt_range_open(&r, s, from, to, gt_tokenizer_kind_of(tok) != GT_TOKENIZER_BYTES,
                             buf);
  for (;;) {
    const char *text = NULL;
    size_t len = 0, n = 0, used = 0;
    bool last = false;
    uint32_t *ids = NULL;
    if (status == GT_SUCCESS)
      status = gt_range_fill(&r, &text, &len, &last);
    if (status != GT_SUCCESS || len == 0)
      break;
    status = gt_tokenizer_encode_head(tok, text, len, last, &ids, &n, &used);
    if (status == GT_SUCCESS && used == 0) /* (it always takes something) */
      status = GT_ERROR(GT_ERR_INTERNAL, "internal error: the tokenizer took none of %zu bytes",
                        len);
    gt_range_take(&r, used);
    if (status == GT_SUCCESS)
      status = gt_ingest_out_append(o, split, ids, n);
    free(ids);
    gt_bar_add((double)used);
  }
  if (status == GT_SUCCESS)
    status = fgetc(r.f) == EOF || to < s->size
                 ? GT_SUCCESS
                 : GT_ERROR(GT_ERR_INPUT, "input '%s' grew while it was read; run the ingest again",
                            s->path);
  gt_range_close(&r);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_ingest_text_write(gt_ingest_out *o, const gt_tok_spec *spec, int n,
                                gt_ingest_source *src, const gt_ingest_opts *opts, char *buf,
                                gt_tokenizer **tok, gt_ingest_counts *c)
{
  const double t0 = gt_now();
  GT_CALL(gt_ingest_tokenizer(spec, n, src, buf, tok));
  const double t1 = gt_now();
  GT_CALL(gt_ingest_out_create(o, gt_tokenizer_vocab(*tok), *tok));
  double bytes = 0;
  for (int i = 0; i < n; i++)
    bytes += (double)src[i].size;
  gt_bar_begin("ingest", bytes, GT_BAR_BYTES);
  int status = GT_SUCCESS;
  for (int i = 0; i < n && status == GT_SUCCESS; i++) {
    status = gt_ingest_encode_range(o, GT_SPLIT_TRAIN, *tok, &src[i], 0, src[i].train, buf);
    if (status == GT_SUCCESS)
      status = gt_ingest_encode_range(o, GT_SPLIT_VAL, *tok, &src[i], src[i].train,
                                      src[i].size, buf);
  }
  gt_bar_end();
  GT_CALL(status);
  GT_CALL(gt_ingest_out_attrs(o, n, src, opts->val_fraction));
  GT_CALL(gt_h5_write_attr_str(o->file, "tokenizer_spec",
                               opts->tokenizer ? opts->tokenizer : "bytes"));
  c->train_seconds = spec->kind == GT_TOK_TRAIN ? t1 - t0 : 0.0;
  c->encode_seconds = gt_now() - t1;
  return GT_SUCCESS;
}

// ----------------------------------------------------------------------------------------------

int gt_ingest_text_opts(int nfiles, char *const files[], const char *out_path,
                        const gt_ingest_opts *opts, gt_ingest_counts *counts)
{
  GT_CALL(gt_ingest_check_args(nfiles, out_path, opts->val_fraction, "text"));
  const double vf = opts->val_fraction;
  gt_tok_spec spec;
  GT_CALL(gt_tok_spec_parse(opts->tokenizer, &spec));

  gt_ingest_source *src = calloc((size_t)nfiles, sizeof *src);
  GT_CHECK_ALLOC(src, (size_t)nfiles * sizeof *src);
  int status = GT_SUCCESS;
  for (int i = 0; i < nfiles && status == GT_SUCCESS; i++) {
    status = gt_ingest_stat(&src[i], files[i]);
    src[i].val = (long long)floor((double)src[i].size * vf);
    src[i].train = src[i].size - src[i].val;
    if (status == GT_SUCCESS && spec.kind != GT_TOK_BYTES)
      status = gt_ingest_split_at_line(&src[i]);
  }

  gt_ingest_out o = {0};
  gt_ingest_counts c = {0};
  gt_tokenizer *tok = NULL;
  char *buf = NULL;
  if (status == GT_SUCCESS)
    status = gt_ingest_out_probe(&o, out_path);
  if (status == GT_SUCCESS) {
    buf = malloc(GT_INGEST_BLOCK);
    if (!buf)
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", GT_INGEST_BLOCK);
  }
  if (status == GT_SUCCESS)
    status = gt_ingest_text_write(&o, &spec, nfiles, src, opts, buf, &tok, &c);
  if (o.tmp)
    status = gt_ingest_out_finish(&o, status);
  if (status == GT_SUCCESS && counts) {
    c.train_tokens = o.n[GT_SPLIT_TRAIN], c.val_tokens = o.n[GT_SPLIT_VAL];
    c.vocab = o.vocab, c.dtype = o.dtype;
    for (int i = 0; i < nfiles; i++)
      c.bytes += src[i].size;
    *counts = c;
  }
  gt_tokenizer_free(tok);
  free(buf);
  free(src);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_ingest_text(int nfiles, char *const files[], const char *out_path, double val_fraction,
                   gt_ingest_counts *counts)
{
  const gt_ingest_opts o = {.val_fraction = val_fraction, .tokenizer = "bytes"};
  GT_CALL(gt_ingest_text_opts(nfiles, files, out_path, &o, counts));
  return GT_SUCCESS;
}
