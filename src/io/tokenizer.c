/*
 * tokenizer.c - the tokenizers and their storage in a dataset (tokenizer.h).
 *
 * The byte tokenizer is here. SentencePiece models are handled by the
 * library (libsentencepiece, C++) through tokenizer_spm.h when configure
 * found it (GT_HAVE_SENTENCEPIECE); without it a SentencePiece model is
 * refused with a message saying so. Byte-level BPE is tokenizer_bpe.c.
 */
#ifdef HAVE_CONFIG_H
#include "build_config.h"
#endif

#include "gridtrain/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gridtrain/error.h"
#include "h5util.h"
#include "tokenizer_bpe.h"
#ifdef GT_HAVE_SENTENCEPIECE
#include "tokenizer_spm.h"
#endif

#define GT_BYTES_VOCAB 256
#define GT_TOKENIZER_MODEL "/tokenizer/model" /* the model (SentencePiece, BPE) in a dataset */
#define GT_TOKENIZER_MODEL_MAX ((size_t)1 << 30) /* bytes: more is not a model */

struct gt_tokenizer {
  gt_tokenizer_kind kind;
  int vocab;
  void *model; /* the serialized model (SentencePiece, BPE), malloc'd */
  size_t model_size;
  gt_bpe *bpe;
#ifdef GT_HAVE_SENTENCEPIECE
  gt_spm *spm;
#endif
};

int gt_tokenizer_bytes(gt_tokenizer **out)
{
  gt_tokenizer *tok = calloc(1, sizeof *tok);
  GT_CHECK_ALLOC(tok, sizeof *tok);
  tok->kind = GT_TOKENIZER_BYTES;
  tok->vocab = GT_BYTES_VOCAB;
  *out = tok;
  return GT_SUCCESS;
}

int gt_tokenizer_sentencepiece(const void *model, size_t size, gt_tokenizer **out)
{
  *out = NULL;
  GT_CHECK(size > 0, GT_ERR_INPUT, "an empty SentencePiece model");
#ifdef GT_HAVE_SENTENCEPIECE
  gt_tokenizer *tok = calloc(1, sizeof *tok);
  GT_CHECK_ALLOC(tok, sizeof *tok);
  tok->kind = GT_TOKENIZER_SENTENCEPIECE;
  tok->model = malloc(size);
  if (!tok->model) {
    free(tok);
    GT_CHECK_ALLOC(NULL, size);
  }
  memcpy(tok->model, model, size);
  tok->model_size = size;
  int status = gt_spm_load(model, size, &tok->spm, &tok->vocab);
  if (status != GT_SUCCESS) {
    gt_tokenizer_free(tok);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *out = tok;
  return GT_SUCCESS;
#else
  (void)model;
  return GT_ERROR(GT_ERR_INPUT,
          "this gridtrain was built without SentencePiece; install libsentencepiece-dev and "
          "run configure again");
#endif
}

/* The whole file at path (*buf malloc'd, *size > 0 bytes); what and hint
 * name it in messages ("the SentencePiece model", "give a ... file"). */
static int gt_tokenizer_read(const char *path, const char *what, const char *hint, char **buf,
                             size_t *size)
{
  *buf = NULL, *size = 0;
  FILE *f = fopen(path, "rb");
  GT_CHECK(f, GT_ERR_INPUT, "cannot read %s '%s': %s", what, path, strerror(errno));
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    n = ftell(f);
  if (n <= 0 || (size_t)n > GT_TOKENIZER_MODEL_MAX || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return GT_ERROR(GT_ERR_INPUT, "'%s' is %s; %s", path,
            n == 0 ? "empty" : "not a readable file of a model's size", hint);
  }
  char *b = malloc((size_t)n);
  int status = GT_SUCCESS;
  if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
    status = gt_error_set(b ? GT_ERR_INPUT : GT_ERR_SYSTEM, __FILE__, __LINE__, __func__,
                          "cannot read %s '%s'", what, path);
  fclose(f);
  if (status != GT_SUCCESS) {
    free(b);
    return status;
  }
  *buf = b, *size = (size_t)n;
  return GT_SUCCESS;
}

int gt_tokenizer_load(const char *model_path, gt_tokenizer **out)
{
  *out = NULL;
  char *buf = NULL;
  size_t size = 0;
  GT_CALL(gt_tokenizer_read(model_path, "the SentencePiece model",
                            "give a SentencePiece .model file", &buf, &size));
  const int status = gt_tokenizer_sentencepiece(buf, size, out);
  free(buf);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_tokenizer_bpe(const void *json, size_t size, const char *name, gt_tokenizer **out)
{
  *out = NULL;
  gt_tokenizer *tok = calloc(1, sizeof *tok);
  GT_CHECK_ALLOC(tok, sizeof *tok);
  tok->kind = GT_TOKENIZER_BPE;
  tok->model = malloc(size ? size : 1);
  int status = tok->model ? gt_bpe_load(json, size, name, &tok->bpe, &tok->vocab)
                          : GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", size);
  if (status != GT_SUCCESS) {
    gt_tokenizer_free(tok);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  memcpy(tok->model, json, size);
  tok->model_size = size;
  *out = tok;
  return GT_SUCCESS;
}

/* dir/name into path (size bytes); whether it is a regular file. */
static int gt_tokenizer_in_dir(const char *dir, const char *name, char *path, size_t size,
                               bool *found)
{
  const int n = snprintf(path, size, "%s/%s", dir, name);
  GT_CHECK(n > 0 && (size_t)n < size, GT_ERR_INPUT, "the tokenizer directory '%s' is too long",
           dir);
  struct stat st;
  *found = stat(path, &st) == 0 && S_ISREG(st.st_mode);
  return GT_SUCCESS;
}

/* A tokenizer.json file. */
static int gt_tokenizer_load_json(const char *path, gt_tokenizer **out)
{
  char *buf = NULL, name[4200];
  size_t size = 0;
  GT_CALL(gt_tokenizer_read(path, "the tokenizer", "give a Hugging Face tokenizer.json", &buf,
                            &size));
  snprintf(name, sizeof name, "'%s'", path);
  const int status = gt_tokenizer_bpe(buf, size, name, out);
  free(buf);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* GPT-2's vocab.json and merges.txt in dir, as a tokenizer.json. */
static int gt_tokenizer_load_gpt2(const char *dir, const char *vocab, const char *merges,
                                  gt_tokenizer **out)
{
  char *v = NULL, *m = NULL, *json = NULL, name[4200];
  size_t nv = 0, nm = 0, size = 0;
  snprintf(name, sizeof name, "'%s' (vocab.json + merges.txt)", dir);
  int status = gt_tokenizer_read(vocab, "the vocabulary", "give GPT-2's vocab.json", &v, &nv);
  if (status == GT_SUCCESS)
    status = gt_tokenizer_read(merges, "the merges", "give GPT-2's merges.txt", &m, &nm);
  if (status == GT_SUCCESS)
    status = gt_bpe_json_from_files(v, nv, m, nm, name, &json, &size);
  if (status == GT_SUCCESS)
    status = gt_tokenizer_bpe(json, size, name, out);
  free(v);
  free(m);
  free(json);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_tokenizer_load_hf(const char *path, gt_tokenizer **out)
{
  *out = NULL;
  struct stat st;
  GT_CHECK(stat(path, &st) == 0, GT_ERR_INPUT, "cannot read the tokenizer hf:%s: %s", path,
           strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return gt_tokenizer_load_json(path, out);
  char json[4200], vocab[4200], merges[4200];
  bool has_json = false, has_vocab = false, has_merges = false;
  GT_CALL(gt_tokenizer_in_dir(path, "tokenizer.json", json, sizeof json, &has_json));
  if (has_json)
    return gt_tokenizer_load_json(json, out);
  GT_CALL(gt_tokenizer_in_dir(path, "vocab.json", vocab, sizeof vocab, &has_vocab));
  GT_CALL(gt_tokenizer_in_dir(path, "merges.txt", merges, sizeof merges, &has_merges));
  GT_CHECK(has_vocab && has_merges, GT_ERR_INPUT,
           "the directory '%s' holds neither tokenizer.json nor vocab.json and merges.txt; give "
           "hf:DIR of a Hugging Face tokenizer, or hf:FILE.json", path);
  return gt_tokenizer_load_gpt2(path, vocab, merges, out);
}

int gt_tokenizer_added_id(const gt_tokenizer *tok, const char *content)
{
  return tok->kind == GT_TOKENIZER_BPE ? gt_bpe_added_id(tok->bpe, content) : -1;
}

gt_tokenizer_kind gt_tokenizer_kind_of(const gt_tokenizer *tok)
{
  return tok->kind;
}

const char *gt_tokenizer_name(const gt_tokenizer *tok)
{
  return tok->kind == GT_TOKENIZER_BYTES ? "bytes"
         : tok->kind == GT_TOKENIZER_BPE ? "bpe"
                                         : "sentencepiece";
}

int gt_tokenizer_vocab(const gt_tokenizer *tok)
{
  return tok->vocab;
}

void gt_tokenizer_model(const gt_tokenizer *tok, const void **model, size_t *size)
{
  *model = tok->model;
  *size = tok->model_size;
}

// ---- text ----------------------------------------------------------------------------

size_t gt_utf8_prefix(const char *text, size_t len)
{
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0;
  while (i < len) {
    const unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    /* RFC 3629: the length and the range of the second byte */
    size_t k;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
      k = 2;
    else if (c >= 0xe0 && c <= 0xef)
      k = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
      k = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
      return i;
    if (len - i < k || s[i + 1] < lo || s[i + 1] > hi)
      return i;
    for (size_t j = 2; j < k; j++)
      if ((s[i + j] & 0xc0) != 0x80)
        return i;
    i += k;
  }
  return len;
}

size_t gt_tokenizer_segment(const char *text, size_t len)
{
  const size_t max = len < GT_TOKENIZER_SEGMENT ? len : GT_TOKENIZER_SEGMENT;
  const char *nl = memchr(text, '\n', max);
  if (nl)
    return (size_t)(nl - text) + 1;
  if (len <= GT_TOKENIZER_SEGMENT)
    return len;
  for (size_t i = max; i > 1; i--) /* before the space at i - 1 (never the first byte) */
    if (text[i - 1] == ' ')
      return i - 1;
  for (size_t i = max; i > 0; i--) /* at a character's first byte */
    if (((unsigned char)text[i] & 0xc0) != 0x80)
      return i;
  return max;
}

size_t gt_tokenizer_line_head(const char *text, size_t len)
{
  for (size_t i = len; i > 0; i--)
    if (text[i - 1] == '\n')
      return i;
  size_t cut = 0; /* a line longer than text: whole segments of it */
  while (len - cut > GT_TOKENIZER_SEGMENT)
    cut += gt_tokenizer_segment(text + cut, len - cut);
  return cut;
}

#ifdef GT_HAVE_SENTENCEPIECE
/* SentencePiece, one segment at a time, the ids appended to a growing array. */
static int gt_tokenizer_encode_spm(gt_tokenizer *tok, const char *text, size_t len,
                                   uint32_t **ids, size_t *n)
{
  const size_t valid = gt_utf8_prefix(text, len);
  GT_CHECK(valid == len, GT_ERR_INPUT,
           "the text is not UTF-8 at byte %zu (0x%02x); SentencePiece takes UTF-8 text", valid,
           (unsigned char)text[valid]);
  uint32_t *all = NULL;
  size_t count = 0, cap = 0;
  int status = GT_SUCCESS;
  for (size_t at = 0; at < len && status == GT_SUCCESS;) {
    const size_t seg = gt_tokenizer_segment(text + at, len - at);
    uint32_t *part = NULL;
    size_t m = 0;
    status = gt_spm_encode(tok->spm, text + at, seg, &part, &m);
    if (status == GT_SUCCESS && count + m > cap) {
      size_t want = cap ? cap : 4096;
      while (want < count + m)
        want *= 2;
      uint32_t *grown = realloc(all, want * sizeof *grown);
      if (grown)
        all = grown, cap = want;
      else
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                          want * sizeof *grown);
    }
    if (status == GT_SUCCESS && m > 0)
      memcpy(all + count, part, m * sizeof *part), count += m;
    free(part);
    at += seg;
  }
  if (status != GT_SUCCESS || count == 0) {
    free(all);
    GT_CALL(status);
    return GT_SUCCESS;
  }
  *ids = all, *n = count;
  return GT_SUCCESS;
}
#endif

int gt_tokenizer_encode(gt_tokenizer *tok, const char *text, size_t len, uint32_t **ids,
                        size_t *n)
{
  *ids = NULL, *n = 0;
  if (tok->kind == GT_TOKENIZER_BPE) {
    size_t used = 0;
    return gt_bpe_encode(tok->bpe, text, len, true, ids, n, &used);
  }
#ifdef GT_HAVE_SENTENCEPIECE
  if (tok->kind == GT_TOKENIZER_SENTENCEPIECE)
    return gt_tokenizer_encode_spm(tok, text, len, ids, n);
#endif
  if (len == 0)
    return GT_SUCCESS;
  uint32_t *out = malloc(len * sizeof *out);
  GT_CHECK_ALLOC(out, len * sizeof *out);
  for (size_t i = 0; i < len; i++)
    out[i] = (unsigned char)text[i];
  *ids = out, *n = len;
  return GT_SUCCESS;
}

int gt_tokenizer_encode_head(gt_tokenizer *tok, const char *text, size_t len, bool last,
                             uint32_t **ids, size_t *n, size_t *used)
{
  *ids = NULL, *n = 0, *used = 0;
  if (tok->kind == GT_TOKENIZER_BPE)
    return gt_bpe_encode(tok->bpe, text, len, last, ids, n, used);
  size_t cut = len;
  if (!last && tok->kind == GT_TOKENIZER_SENTENCEPIECE) {
    cut = gt_tokenizer_line_head(text, len);
    cut = cut > 0 ? cut : len;
  }
  GT_CALL(gt_tokenizer_encode(tok, text, cut, ids, n));
  *used = cut;
  return GT_SUCCESS;
}

int gt_tokenizer_decode(gt_tokenizer *tok, const uint32_t *ids, size_t n, char **text,
                        size_t *len)
{
  *text = NULL, *len = 0;
  for (size_t i = 0; i < n; i++)
    GT_CHECK(ids[i] < (uint32_t)tok->vocab, GT_ERR_INPUT,
             "token %u at position %zu is outside the tokenizer's vocabulary of %d", ids[i], i,
             tok->vocab);
  if (tok->kind == GT_TOKENIZER_BPE)
    return gt_bpe_decode(tok->bpe, ids, n, text, len);
#ifdef GT_HAVE_SENTENCEPIECE
  if (tok->kind == GT_TOKENIZER_SENTENCEPIECE)
    return gt_spm_decode(tok->spm, ids, n, text, len);
#endif
  char *out = malloc(n + 1);
  GT_CHECK_ALLOC(out, n + 1);
  for (size_t i = 0; i < n; i++)
    out[i] = (char)ids[i];
  out[n] = '\0';
  *text = out, *len = n;
  return GT_SUCCESS;
}

// ---- in a dataset file ------------------------------------------------------------

static int gt_tokenizer_h5_write_model(hid_t file, const gt_tokenizer *tok, hid_t ids[3])
{
  const hsize_t n = tok->model_size;
  GT_H5_ID(ids[0], H5Gcreate2(file, "/tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  GT_H5_ID(ids[1], H5Screate_simple(1, &n, NULL));
  GT_H5_ID(ids[2], H5Dcreate2(file, GT_TOKENIZER_MODEL, H5T_STD_U8LE, ids[1], H5P_DEFAULT,
                              H5P_DEFAULT, H5P_DEFAULT));
  GT_CALL_HDF5(H5Dwrite(ids[2], H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok->model));
  return GT_SUCCESS;
}

int gt_tokenizer_h5_write(hid_t file, const gt_tokenizer *tok)
{
  GT_CALL(gt_h5_write_attr_str(file, "tokenizer", gt_tokenizer_name(tok)));
  if (tok->kind == GT_TOKENIZER_BYTES)
    return GT_SUCCESS;
  hid_t ids[3] = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  const int status = gt_tokenizer_h5_write_model(file, tok, ids);
  GT_CALL(gt_h5_close_all(status, 3, ids));
  return GT_SUCCESS;
}

/* The model bytes of /tokenizer/model (malloc'd). */
static int gt_tokenizer_h5_read_model(hid_t file, const char *path, const char *kind,
                                      void **model, size_t *size, hid_t ids[2])
{
  GT_CHECK(H5Lexists(file, "/tokenizer", H5P_DEFAULT) > 0 &&
               H5Lexists(file, GT_TOKENIZER_MODEL, H5P_DEFAULT) > 0,
           GT_ERR_INPUT, "'%s' says tokenizer = %s but has no %s; ingest it again", path, kind,
           GT_TOKENIZER_MODEL);
  GT_H5_ID(ids[0], H5Dopen2(file, GT_TOKENIZER_MODEL, H5P_DEFAULT));
  GT_H5_ID(ids[1], H5Dget_space(ids[0]));
  const hssize_t n = H5Sget_simple_extent_npoints(ids[1]);
  GT_CHECK(H5Sget_simple_extent_ndims(ids[1]) == 1 && n > 0 &&
               (size_t)n <= GT_TOKENIZER_MODEL_MAX,
           GT_ERR_INPUT, "'%s': %s is not a 1-D byte array of a model's size; the file is damaged",
           path, GT_TOKENIZER_MODEL);
  *model = malloc((size_t)n);
  GT_CHECK_ALLOC(*model, (size_t)n);
  *size = (size_t)n;
  GT_CALL_HDF5(H5Dread(ids[0], H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, *model));
  return GT_SUCCESS;
}

/* The tokenizer named by the open file's attributes. */
static int gt_tokenizer_from_h5(hid_t file, const char *path, gt_tokenizer **out)
{
  bool found = false, found_vocab = false;
  char *name = NULL;
  long long vocab = 0;
  GT_CALL(gt_h5_read_attr_i64(file, "vocab_size", path, &found_vocab, &vocab));
  GT_CALL(gt_h5_read_attr_str(file, "tokenizer", path, &found, &name));
  const bool bytes = found ? strcmp(name, "bytes") == 0 : vocab == GT_BYTES_VOCAB;
  const bool spm = found && strcmp(name, "sentencepiece") == 0;
  const bool bpe = found && strcmp(name, "bpe") == 0;
  if (!bytes && !spm && !bpe) {
    const int status =
        found ? gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                             "'%s' names the tokenizer '%s'; gridtrain knows bytes, "
                             "sentencepiece and bpe",
                             path, name)
              : gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__,
                             "'%s' names no tokenizer (no root attribute 'tokenizer') and its "
                             "vocab_size is %lld, not the bytes' 256; it cannot be decoded (ingest "
                             "token files with --tokenizer sentencepiece:MODEL or hf:PATH)",
                             path, vocab);
    free(name);
    return status;
  }
  free(name);
  if (bytes) {
    GT_CHECK(!found_vocab || vocab == GT_BYTES_VOCAB, GT_ERR_INPUT,
             "'%s' says tokenizer = bytes but its vocab_size is %lld, not 256", path, vocab);
    return gt_tokenizer_bytes(out);
  }
  hid_t ids[2] = {H5I_INVALID_HID, H5I_INVALID_HID};
  void *model = NULL;
  size_t size = 0;
  int status = gt_tokenizer_h5_read_model(file, path, bpe ? "bpe" : "sentencepiece", &model,
                                          &size, ids);
  status = gt_h5_close_all(status, 2, ids);
  char where[4200];
  snprintf(where, sizeof where, "'%s' %s", path, GT_TOKENIZER_MODEL);
  if (status == GT_SUCCESS)
    status = bpe ? gt_tokenizer_bpe(model, size, where, out)
                 : gt_tokenizer_sentencepiece(model, size, out);
  free(model);
  GT_CALL(status);
  /* the model's vocabulary may be smaller than the file's (padded), never larger */
  if (found_vocab && gt_tokenizer_vocab(*out) > vocab) {
    const int v = gt_tokenizer_vocab(*out);
    gt_tokenizer_free(*out);
    *out = NULL;
    return GT_ERROR(GT_ERR_INPUT,
            "'%s': its %s model has %d tokens but vocab_size is %lld; the file "
            "does not match its tokenizer",
            path, bpe ? "BPE" : "SentencePiece", v, vocab);
  }
  return GT_SUCCESS;
}

int gt_tokenizer_from_file(const char *path, gt_tokenizer **out)
{
  *out = NULL;
  char file[4096];
  const char *colon = strstr(path, ":/");
  const size_t len = colon ? (size_t)(colon - path) : strlen(path);
  GT_CHECK(len > 0 && len < sizeof file, GT_ERR_INPUT, "'%s' is not a dataset file name", path);
  memcpy(file, path, len);
  file[len] = '\0';
  GT_CALL(gt_h5_quiet());
  hid_t ids[1] = {H5I_INVALID_HID};
  ids[0] = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  GT_CHECK(ids[0] >= 0, GT_ERR_INPUT, "cannot open the dataset '%s' (not an HDF5 file?)", file);
  const int status = gt_tokenizer_from_h5(ids[0], file, out);
  GT_CALL(gt_h5_close_all(status, 1, ids));
  return GT_SUCCESS;
}

// ---- training ----------------------------------------------------------------------------

#define GT_TOKENIZER_TRAIN_MIN 260        /* 256 bytes, <unk>, <s>, </s>, and one more */
#define GT_TOKENIZER_TRAIN_MAX (1 << 24)

#ifdef GT_HAVE_SENTENCEPIECE
typedef struct {
  gt_tokenizer_lines_fn next;
  void *ctx;
} gt_tokenizer_lines;

static int gt_tokenizer_next_line(void *ctx, const char **line, size_t *len, int *done)
{
  gt_tokenizer_lines *l = ctx;
  bool end = false;
  const int status = l->next(l->ctx, line, len, &end);
  *done = end;
  return status;
}
#endif

int gt_tokenizer_train(const char *type, int vocab, long long max_lines,
                       gt_tokenizer_lines_fn next, void *ctx, gt_tokenizer **out)
{
  *out = NULL;
  GT_CHECK(strcmp(type, "bpe") == 0 || strcmp(type, "unigram") == 0, GT_ERR_INPUT,
           "unknown SentencePiece model type '%s'; choose bpe or unigram", type);
  GT_CHECK(vocab >= GT_TOKENIZER_TRAIN_MIN && vocab <= GT_TOKENIZER_TRAIN_MAX, GT_ERR_INPUT,
           "a trained vocabulary of %d pieces is outside [%d, %d] (the 256 bytes and 3 "
           "special pieces come first)",
           vocab, GT_TOKENIZER_TRAIN_MIN, GT_TOKENIZER_TRAIN_MAX);
  GT_CHECK(max_lines > 100, GT_ERR_INPUT, "train on more than 100 lines, not %lld", max_lines);
#ifdef GT_HAVE_SENTENCEPIECE
  gt_tokenizer_lines lines = {next, ctx};
  void *model = NULL;
  size_t size = 0;
  GT_CALL(gt_spm_train(type, vocab, max_lines, GT_TOKENIZER_SEGMENT, gt_tokenizer_next_line,
                       &lines, &model, &size));
  const int status = gt_tokenizer_sentencepiece(model, size, out);
  free(model);
  GT_CALL(status);
  return GT_SUCCESS;
#else
  (void)next, (void)ctx;
  return GT_ERROR(GT_ERR_INPUT,
          "this gridtrain was built without SentencePiece, which trains tokenizers; install "
          "libsentencepiece-dev and run configure again");
#endif
}

// ----------------------------------------------------------------------------------------

void gt_tokenizer_free(gt_tokenizer *tok)
{
  if (!tok)
    return;
#ifdef GT_HAVE_SENTENCEPIECE
  gt_spm_free(tok->spm);
#endif
  gt_bpe_free(tok->bpe);
  free(tok->model);
  free(tok);
}
