/*
 * test_tokenizer.c - the byte tokenizer and how a dataset names its
 * tokenizer (tokenizer.h): round trips, ids outside the vocabulary, and the
 * files gt_tokenizer_from_file accepts and refuses, each written here with
 * the HDF5 C API (not by the code under test), plus one made by
 * `gridtrain ingest` (tu_genesis_dataset). With SentencePiece: a BPE and a
 * unigram model trained on Genesis give the text back (decode(encode(text))
 * == text), the same lines train the same model, the model survives a
 * dataset file, and junk, non-UTF-8 and impossible vocabularies are
 * refused; the text segments and the UTF-8 check on hand-made strings.
 * Byte-level BPE on a tokenizer.json written here (the 256 byte
 * characters, 15 merges, special tokens): encodings worked out by hand from
 * the merge ranks and the regexes, decode(encode(text)) == text for Genesis
 * and odd text, heads of blocks encode as the whole text, the model in a
 * dataset, GPT-2's vocab.json + merges.txt, and the files refused, each
 * with one line naming its key. (tests/io/test_ingest_bpe.sh checks the
 * tokens against the `tokenizers` package.)
 * (tests/io/test_ingest_spm.sh decodes ingested files with Python's
 * sentencepiece, independently of this code.)
 *
 * gt-test: ranks=1 tier=quick
 */
#ifdef HAVE_CONFIG_H
#include "build_config.h"
#endif

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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


static char *read_all(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* encode then decode text; true when it comes back byte for byte. */
static bool round_trip(gt_tokenizer *tok, const char *text, size_t len, size_t *ntok)
{
  uint32_t *ids = NULL;
  char *back = NULL;
  size_t n = 0, blen = 0;
  bool same = gt_tokenizer_encode(tok, text, len, &ids, &n) == GT_SUCCESS &&
              gt_tokenizer_decode(tok, ids, n, &back, &blen) == GT_SUCCESS && blen == len &&
              memcmp(back, text, len) == 0;
  for (size_t i = 0; same && i < n; i++)
    same = ids[i] < (uint32_t)gt_tokenizer_vocab(tok);
  *ntok = n;
  free(ids);
  free(back);
  return same;
}

// ---- text segments and UTF-8 (no SentencePiece needed)

static void segment_cases(void)
{
  tap_ok(gt_tokenizer_segment("ab\ncd\n", 6) == 3 && gt_tokenizer_segment("cd\n", 3) == 3 &&
             gt_tokenizer_segment("no newline", 10) == 10,
         "segment: a line with its newline; the rest without one");
  const size_t big = 3 * GT_TOKENIZER_SEGMENT;
  char *s = malloc(big);
  memset(s, 'a', big);
  s[100] = ' ', s[1500] = ' ', s[GT_TOKENIZER_SEGMENT + 5] = ' ';
  tap_ok(gt_tokenizer_segment(s, big) == 1500, "segment: a long line is cut before its last "
         "space within %d bytes (%zu)", GT_TOKENIZER_SEGMENT, gt_tokenizer_segment(s, big));
  memset(s, 'a', big);
  /* a 3-byte character (e2 96 81) straddling the limit: cut before it */
  memcpy(s + GT_TOKENIZER_SEGMENT - 1, "\xe2\x96\x81", 3);
  tap_ok(gt_tokenizer_segment(s, big) == GT_TOKENIZER_SEGMENT - 1,
         "segment: without a space, at a character's first byte (%zu)",
         gt_tokenizer_segment(s, big));
  s[0] = ' ';
  memset(s + 1, 'a', big - 1);
  tap_ok(gt_tokenizer_segment(s, big) == GT_TOKENIZER_SEGMENT,
         "segment: a space at the start only does not make an empty segment");
  free(s);

  static const struct {
    const char *s;
    size_t len, want;
  } u[] = {
      {"plain ascii", 11, 11},
      {"\xc3\xa9t\xc3\xa9", 6, 6},              /* été */
      {"\xf0\x9f\x8e\x89!", 5, 5},              /* an emoji */
      {"ab\xff", 3, 2},                         /* a byte never in UTF-8 */
      {"ab\xc3", 3, 2},                         /* cut character */
      {"\xc0\xaf", 2, 0},                       /* overlong '/' */
      {"x\xed\xa0\x80", 4, 1},                  /* a surrogate */
      {"\xf4\x90\x80\x80", 4, 0},               /* above U+10FFFF */
      {"\xe2\x28\xa1", 3, 0},                   /* bad continuation */
  };
  bool all = true;
  for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
    const size_t got = gt_utf8_prefix(u[i].s, u[i].len);
    if (got != u[i].want) {
      tap_diag("utf8_prefix case %zu: %zu, want %zu", i, got, u[i].want);
      all = false;
    }
  }
  tap_ok(all, "utf8_prefix: valid text whole; stops at bad, cut, overlong, surrogate bytes");
}

// ---- byte-level BPE: a tokenizer.json written here, expectations by hand

/* GPT-2's character for byte b, written out from its definition (bytes
 * '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF stand for themselves, the other
 * 68 are U+0100 on, in byte order), as JSON string content (UTF-8, '"' and
 * '\' escaped) at out; its length. */
static bool visible(unsigned b)
{
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

static size_t json_char(unsigned b, char *out)
{
  unsigned cp = b, other = 0;
  if (!visible(b)) {
    for (unsigned c = 0; c < b; c++)
      other += !visible(c);
    cp = 256 + other;
  }
  if (cp == '"' || cp == '\\') {
    out[0] = '\\', out[1] = (char)cp;
    return 2;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  out[0] = (char)(0xc0 | cp >> 6);
  out[1] = (char)(0x80 | (cp & 0x3f));
  return 2;
}

static size_t json_chars(const char *s, char *out)
{
  size_t k = 0;
  for (; *s; s++)
    k += json_char((unsigned char)*s, out + k);
  return k;
}

/* The merges of the test tokenizer, by rank; merge i makes token 256 + i.
 * Tokens 0..255 are the bytes, 299 is "xyz" (no merge makes it), 300 the
 * special <|endoftext|> (in the vocabulary and an added token), 305 the
 * added <|pad|>; 271..298 and 301..304 name nothing. */
static const char *const merge_pair[][2] = {
    {"h", "e"},  {" ", "t"},  {" t", "he"}, {"i", "n"},  {"in", "g"},
    {" ", " "},  {"a", "b"},  {"b", "c"},   {"a", "a"},  {"  ", " "},
    {"e", "r"},  {"1", "2"},  {"12", "3"},  {"t", "h"},  {"\n", "\n"},
};
#define NMERGES (sizeof merge_pair / sizeof merge_pair[0])
#define GPT2_PRE "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"
/* Llama 3's pre-tokenizer as far as digits go: runs of at most 3 */
#define SPLIT_PRE                                                                           \
  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "       \
  "{\"Regex\": \"\\\\p{N}{1,3}|\\\\p{L}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)|\\\\s+\"}, " \
  "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "              \
  "\"add_prefix_space\": false, \"use_regex\": false}]}"

/* tokenizer.json text (malloc'd): pre the pre_tokenizer; model_extra and
 * top_extra added last to the model and the top object (a key given again
 * replaces the one before, in json-c as in serde). */
static char *bpe_json(const char *pre, const char *model_extra, const char *top_extra,
                      size_t *len)
{
  char *j = malloc(1 << 16);
  size_t k = (size_t)sprintf(j, "{\"version\": \"1.0\", \"added_tokens\": ["
                             "{\"id\": 300, \"content\": \"<|endoftext|>\", \"special\": true, "
                             "\"normalized\": false},"
                             "{\"id\": 305, \"content\": \"<|pad|>\", \"special\": true}],"
                             "\"normalizer\": null, \"pre_tokenizer\": %s, "
                             "\"post_processor\": null,"
                             "\"decoder\": {\"type\": \"ByteLevel\"},"
                             "\"model\": {\"type\": \"BPE\", \"vocab\": {", pre);
  for (unsigned b = 0; b < 256; b++) {
    j[k++] = '"';
    k += json_char(b, j + k);
    k += (size_t)sprintf(j + k, "\": %u, ", b);
  }
  for (size_t i = 0; i < NMERGES; i++) {
    char t[16];
    snprintf(t, sizeof t, "%s%s", merge_pair[i][0], merge_pair[i][1]);
    j[k++] = '"';
    k += json_chars(t, j + k);
    k += (size_t)sprintf(j + k, "\": %zu, ", 256 + i);
  }
  k += (size_t)sprintf(j + k, "\"xyz\": 299, \"<|endoftext|>\": 300}, \"merges\": [");
  for (size_t i = 0; i < NMERGES; i++) {
    k += (size_t)sprintf(j + k, "%s\"", i ? ", " : "");
    k += json_chars(merge_pair[i][0], j + k);
    j[k++] = ' ';
    k += json_chars(merge_pair[i][1], j + k);
    j[k++] = '"';
  }
  k += (size_t)sprintf(j + k, "]%s%s}%s%s}", *model_extra ? ", " : "", model_extra,
                       *top_extra ? ", " : "", top_extra);
  *len = k;
  return j;
}

static gt_tokenizer *bpe_make(const char *pre, const char *model_extra, const char *top_extra)
{
  size_t len;
  char *j = bpe_json(pre, model_extra, top_extra, &len);
  gt_tokenizer *tok = NULL;
  if (gt_tokenizer_bpe(j, len, "'test.json'", &tok) != GT_SUCCESS) {
    tap_diag("the test tokenizer: %s", gt_error_message());
    gt_error_clear();
  }
  free(j);
  return tok;
}

/* text encodes to the n ids of want. */
static void expect_ids(gt_tokenizer *tok, const char *text, const uint32_t *want, size_t n,
                       const char *what)
{
  uint32_t *ids = NULL;
  size_t got = 0;
  const int st = gt_tokenizer_encode(tok, text, strlen(text), &ids, &got);
  bool same = st == GT_SUCCESS && got == n && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
  tap_ok(same, "bpe: %s", what);
  if (!same) {
    char line[512] = "";
    size_t at = 0;
    for (size_t i = 0; i < got && at < sizeof line - 16; i++)
      at += (size_t)snprintf(line + at, sizeof line - at, " %u", ids[i]);
    tap_diag("got%s (%s)", line, st ? gt_error_message() : "ok");
  }
  gt_error_clear();
  free(ids);
}

/* The tokenizer.json with the extras is refused, one line naming `want`. */
static void expect_bad(const char *pre, const char *model_extra, const char *top_extra,
                       const char *want, const char *what)
{
  size_t len;
  char *j = bpe_json(pre, model_extra, top_extra, &len);
  gt_tokenizer *tok = (gt_tokenizer *)1;
  const int st = gt_tokenizer_bpe(j, len, "'test.json'", &tok);
  const char *msg = gt_error_message();
  tap_ok(st == GT_ERR_INPUT && tok == NULL && strstr(msg, want) && !strchr(msg, '\n') &&
             strstr(msg, "'test.json'"),
         "bpe refuses %s: one line naming '%s' (%s)", what, want, msg);
  gt_error_clear();
  free(j);
}

/* Encoding in heads as ingest does (gt_tokenizer_encode_head on blocks of
 * at most `block` bytes cut at a character, the rest carried) gives the
 * whole text's ids. */
static bool heads_as_whole(gt_tokenizer *tok, const char *text, size_t len, size_t block)
{
  uint32_t *whole = NULL, *ids = NULL;
  size_t nwhole = 0, n = 0, at = 0, k = 0;
  bool same = gt_tokenizer_encode(tok, text, len, &whole, &nwhole) == GT_SUCCESS;
  while (same && at < len) {
    size_t take = len - at < block ? len - at : block;
    while (at + take < len && ((unsigned char)text[at + take] & 0xc0) == 0x80)
      take--; /* a character cut by the block waits for the next one */
    size_t used = 0;
    same = gt_tokenizer_encode_head(tok, text + at, take, at + take == len, &ids, &n, &used) ==
               GT_SUCCESS &&
           used > 0 && k + n <= nwhole && (n == 0 || memcmp(ids, whole + k, n * sizeof *ids) == 0);
    free(ids);
    ids = NULL;
    k += n, at += used;
  }
  same = same && k == nwhole;
  free(whole);
  return same;
}

static void bpe_cases(const char *dir)
{
  gt_tokenizer *tok = bpe_make(GPT2_PRE, "", "");
  if (!tap_ok(tok != NULL, "bpe: the test tokenizer.json loads"))
    return;
  tap_ok(gt_tokenizer_vocab(tok) == 306 && gt_tokenizer_kind_of(tok) == GT_TOKENIZER_BPE &&
             strcmp(gt_tokenizer_name(tok), "bpe") == 0,
         "bpe: vocabulary 306 (the largest id + 1), named bpe");
  /* each by hand from the merges' ranks and GPT-2's regex */
  expect_ids(tok, " the", (const uint32_t[]){258}, 1, "' the': he, then ' t', then ' the'");
  expect_ids(tok, "the", (const uint32_t[]){'t', 256}, 2, "'the': he (rank 0) before th (13)");
  expect_ids(tok, "abc", (const uint32_t[]){262, 'c'}, 2, "'abc': ab (rank 6) before bc (7)");
  expect_ids(tok, "aaa", (const uint32_t[]){264, 'a'}, 2, "'aaa': the leftmost of equal ranks");
  expect_ids(tok, "aaaa", (const uint32_t[]){264, 264}, 2, "'aaaa': aa aa");
  expect_ids(tok, "singing", (const uint32_t[]){'s', 260, 260}, 3, "'singing': s ing ing");
  expect_ids(tok, "x   y", (const uint32_t[]){'x', 261, ' ', 'y'}, 4,
             "'x   y': GPT-2's regex leaves the last space to the word");
  expect_ids(tok, "1212", (const uint32_t[]){267, 267}, 2, "'1212': one digit run (GPT-2)");
  expect_ids(tok, "\n\n\n", (const uint32_t[]){270, '\n'}, 2, "three newlines: one piece");
  expect_ids(tok, "x<|endoftext|>y", (const uint32_t[]){'x', 300, 'y'}, 3,
             "<|endoftext|> inside a word is the special token");
  expect_ids(tok, "<|endoftext|><|pad|><|endoftext",
             (const uint32_t[]){300, 305, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't'},
             13, "added tokens side by side; one cut short is text");
  expect_ids(tok, "xyz", (const uint32_t[]){'x', 'y', 'z'}, 3,
             "'xyz' (in the vocabulary, no merge): its bytes");
  expect_ids(tok, "", NULL, 0, "empty text: no ids");
  char *back = NULL;
  size_t blen = 0;
  int st = gt_tokenizer_decode(tok, (const uint32_t[]){258, 301, 300, 10, 305}, 5, &back, &blen);
  static const char decoded[] = " the<|endoftext|>\n<|pad|>";
  tap_ok(st == GT_SUCCESS && blen == sizeof decoded - 1 && memcmp(back, decoded, blen) == 0,
         "bpe: decode maps tokens to their bytes; an id that names nothing is nothing");
  free(back);
  uint32_t bad_id = 306;
  st = gt_tokenizer_decode(tok, &bad_id, 1, &back, &blen);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "token 306"),
         "bpe: id 306 is outside the vocabulary (%s)", gt_error_message());
  gt_error_clear();
  uint32_t *ids = NULL;
  size_t n = 0;
  st = gt_tokenizer_encode(tok, "ab\xff" "cd", 5, &ids, &n);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "not UTF-8 at byte 2"),
         "bpe: text that is not UTF-8 is refused at its byte (%s)", gt_error_message());
  gt_error_clear();

  /* decode(encode(text)) == text: Genesis, and every byte value */
  char path[1100];
  snprintf(path, sizeof path, "%s/tests/data/genesis.txt", getenv("GT_SRCDIR"));
  size_t glen = 0;
  char *genesis = read_all(path, &glen);
  bool back_ok = genesis && round_trip(tok, genesis, glen, &n) && n < glen;
  tap_ok(back_ok, "bpe: decode(encode(Genesis)) is Genesis (%zu tokens)", n);
  static const char odd[] = " lead\t\ttab  two   three\n\n\r\ncaf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
                            "\xf0\x9f\x8e\x89\xf0\x9f\x8e\x89 12345 x\xc2\xa0y\xe2\x80\xa8z "
                            "\x01\x7f<|endoftext|>'s IT'S end";
  back_ok = round_trip(tok, odd, sizeof odd - 1, &n);
  tap_ok(back_ok, "bpe: white space, CJK, emoji, controls, special tokens come back (%zu "
         "tokens)", n);

  /* heads of blocks as ingest encodes them = the whole text */
  const size_t big = glen + 40 * (sizeof odd - 1);
  char *mix = malloc(big);
  memcpy(mix, genesis ? genesis : "", genesis ? glen : 0);
  for (size_t i = 0, at = genesis ? glen : 0; i < 40; i++, at += sizeof odd - 1)
    memcpy(mix + at, odd, sizeof odd - 1);
  const size_t mlen = (genesis ? glen : 0) + 40 * (sizeof odd - 1);
  bool heads = true;
  for (size_t block = 64; block <= 4096 && heads; block *= 4)
    heads = heads_as_whole(tok, mix, mlen, block);
  tap_ok(heads, "bpe: encoded in heads of 64 to 4096-byte blocks, the text gives its whole ids");
  free(mix);
  free(genesis);

  /* in a dataset and back */
  snprintf(path, sizeof path, "%s/bpe-model.h5", dir);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  st = f >= 0 ? gt_tokenizer_h5_write(f, tok) : GT_ERR_SYSTEM;
  if (f >= 0)
    H5Fclose(f);
  gt_tokenizer *again = NULL;
  const void *m1 = NULL, *m2 = NULL;
  size_t s1 = 0, s2 = 0;
  gt_tokenizer_model(tok, &m1, &s1);
  if (st == GT_SUCCESS)
    st = gt_tokenizer_from_file(path, &again);
  if (st == GT_SUCCESS)
    gt_tokenizer_model(again, &m2, &s2);
  tap_ok(st == GT_SUCCESS && s1 == s2 && memcmp(m1, m2, s1) == 0 &&
             gt_tokenizer_kind_of(again) == GT_TOKENIZER_BPE,
         "bpe: the tokenizer.json written with gt_tokenizer_h5_write reads back the same (%s)",
         st ? gt_error_message() : "ok");
  gt_error_clear();
  gt_tokenizer_free(again);
  gt_tokenizer_free(tok);

  /* Split (Llama 3's digit runs of 3), ignore_merges, unk */
  tok = bpe_make(SPLIT_PRE, "", "");
  if (tok)
    expect_ids(tok, "1212", (const uint32_t[]){267, '1', '2'}, 3,
               "'1212' with a Split regex of digit runs of at most 3: 121 2");
  gt_tokenizer_free(tok);
  /* Oniguruma's Ruby syntax, which tokenizers' regexes are in: ^ starts a
   * line, \h is a hexadecimal digit */
  tok = bpe_make("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                 "\"pattern\": {\"Regex\": \"^a|\\\\h+\"}, \"behavior\": \"Isolated\"}, "
                 "{\"type\": \"ByteLevel\", \"use_regex\": false}]}", "", "");
  if (tok) {
    expect_ids(tok, "ab\nab", (const uint32_t[]){'a', 'b', '\n', 'a', 'b'}, 5,
               "Split regex '^a|\\h+': ^ at each line's start");
    expect_ids(tok, "er", (const uint32_t[]){'e', 'r'}, 2,
               "Split regex '^a|\\h+': \\h is a hexadecimal digit, so e and r stay apart");
  }
  gt_tokenizer_free(tok);
  tok = bpe_make(GPT2_PRE, "\"ignore_merges\": true", "");
  if (tok)
    expect_ids(tok, "xyz the", (const uint32_t[]){299, 258}, 2,
               "ignore_merges: a word in the vocabulary is its id ('xyz')");
  gt_tokenizer_free(tok);
  tok = bpe_make(GPT2_PRE,
                 "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"?\": 3}, \"merges\": [\"a b\"], "
                 "\"unk_token\": \"?\", \"fuse_unk\": true", "\"added_tokens\": []");
  if (tok)
    expect_ids(tok, "abxyab", (const uint32_t[]){2, 3, 2}, 3,
               "bytes without a token are unk_token, fused (fuse_unk)");
  gt_tokenizer_free(tok);

  /* refused, one line naming the key */
  size_t jl;
  char *j = bpe_json(GPT2_PRE, "", "", &jl);
  tok = (gt_tokenizer *)1;
  st = gt_tokenizer_bpe(j, jl - 7, "'cut.json'", &tok);
  tap_ok(st == GT_ERR_INPUT && tok == NULL && strstr(gt_error_message(), "'cut.json' is not JSON"),
         "bpe refuses a tokenizer.json cut short (%s)", gt_error_message());
  gt_error_clear();
  free(j);
  st = gt_tokenizer_bpe("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", 51,
                        "'wp.json'", &tok);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "'wp.json': model.type is \"WordPiece\""),
         "bpe refuses a WordPiece model (%s)", gt_error_message());
  gt_error_clear();
  st = gt_tokenizer_bpe("[1, 2]", 6, "'list.json'", &tok);
  tap_ok(st == GT_ERR_INPUT &&
             strstr(gt_error_message(), "is an array, not a tokenizer.json object"),
         "bpe refuses JSON that is not an object (%s)", gt_error_message());
  gt_error_clear();
  expect_bad(GPT2_PRE, "", "\"normalizer\": {\"type\": \"NFC\"}", "normalizer is \"NFC\"",
             "a normalizer");
  expect_bad(GPT2_PRE, "\"dropout\": 0.1", "", "model.dropout is 0.1", "BPE dropout");
  expect_bad(GPT2_PRE, "\"byte_fallback\": true", "", "model.byte_fallback is true",
             "byte fallback");
  expect_bad(GPT2_PRE, "\"continuing_subword_prefix\": \"##\"", "",
             "model.continuing_subword_prefix is \"##\"", "a subword prefix");
  expect_bad(GPT2_PRE, "\"unk_token\": \"<unk>\"", "", "model.unk_token \"<unk>\" is not in",
             "an unk_token outside the vocabulary");
  expect_bad(GPT2_PRE, "\"merges\": [\"a b\", \"ab zz\"]", "",
             "model.merges[1] (\"ab zz\") names \"zz\"", "a merge of a token not there");
  expect_bad(GPT2_PRE, "\"merges\": [\"a b c\"]", "", "model.merges[0] is \"a b c\"",
             "a merge of three tokens");
  expect_bad(GPT2_PRE, "\"vocab\": {\"a\": 1, \"b\": 1}", "", "gives id 1 to two tokens",
             "two tokens with one id");
  expect_bad(GPT2_PRE, "\"vocab\": {\"a\": -1}", "", "is -1, outside [0, 16777216)",
             "a negative id");
  expect_bad("null", "", "", "pre_tokenizer is null", "no pre-tokenizer");
  expect_bad("{\"type\": \"Whitespace\"}", "", "", "pre_tokenizer.type is \"Whitespace\"",
             "another pre-tokenizer");
  expect_bad("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
             "{\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}",
             "", "", "pre_tokenizer.pretokenizers[0].pattern.Regex does not compile with PCRE2",
             "a regex PCRE2 cannot compile");
  expect_bad("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
             "{\"Regex\": \"a\"}, \"behavior\": \"Isolated\"}]}",
             "", "", "pre_tokenizer has no ByteLevel step", "no ByteLevel step");
  expect_bad(GPT2_PRE, "", "\"decoder\": {\"type\": \"Metaspace\"}", "decoder is \"Metaspace\"",
             "another decoder");
  expect_bad(GPT2_PRE, "", "\"post_processor\": {\"type\": \"Weird\"}",
             "post_processor.type is \"Weird\"", "an unknown post-processor");
  expect_bad(GPT2_PRE, "",
             "\"added_tokens\": [{\"id\": 300, \"content\": \"<|x|>\", \"single_word\": true}]",
             "added_tokens[0].single_word is true", "a single_word added token");
  expect_bad(GPT2_PRE, "", "\"added_tokens\": [{\"id\": 1e3, \"content\": \"<|x|>\"}]",
             "added_tokens[0].id is a number with a fraction, not a token id",
             "an id that is not an integer");

  /* GPT-2's vocab.json + merges.txt: <|endoftext|> (no merge makes it) is special */
  char vdir[1100], vpath[1200];
  snprintf(vdir, sizeof vdir, "%s/gpt2files", dir);
  mkdir(vdir, 0777);
  snprintf(vpath, sizeof vpath, "%s/vocab.json", vdir);
  FILE *v = fopen(vpath, "w");
  snprintf(vpath, sizeof vpath, "%s/merges.txt", vdir);
  FILE *m = fopen(vpath, "w");
  if (v && m) {
    char c[4];
    fputc('{', v);
    for (unsigned b = 0; b < 256; b++)
      fprintf(v, "\"%.*s\": %u, ", (int)json_char(b, c), c, b);
    fprintf(v, "\"ab\": 256, \"<|endoftext|>\": 257}");
    fprintf(m, "#version: 0.2\r\na b\r\n");
  }
  if (v)
    fclose(v);
  if (m)
    fclose(m);
  tok = NULL;
  st = gt_tokenizer_load_hf(vdir, &tok);
  tap_ok(st == GT_SUCCESS && gt_tokenizer_vocab(tok) == 258 &&
             gt_tokenizer_added_id(tok, "<|endoftext|>") == 257,
         "bpe: vocab.json + merges.txt (CRLF lines) load; <|endoftext|> is special (%s)",
         st ? gt_error_message() : "ok");
  gt_error_clear();
  if (tok)
    expect_ids(tok, "cab<|endoftext|>ab", (const uint32_t[]){'c', 256, 257, 256}, 4,
               "GPT-2's files: a b merges, <|endoftext|> matched in the text");
  gt_tokenizer_free(tok);
}

#ifdef GT_HAVE_SENTENCEPIECE
// ---- SentencePiece

/* The lines of a text for gt_tokenizer_train (segments without '\n'). */
typedef struct {
  const char *text;
  size_t len, at;
} lines_ctx;

static int next_line(void *ctx, const char **line, size_t *len, bool *done)
{
  lines_ctx *c = ctx;
  if (c->at >= c->len) {
    *done = true;
    return GT_SUCCESS;
  }
  const size_t seg = gt_tokenizer_segment(c->text + c->at, c->len - c->at);
  *line = c->text + c->at;
  *len = seg - (c->text[c->at + seg - 1] == '\n');
  *done = false;
  c->at += seg;
  return GT_SUCCESS;
}

static int failing_line(void *ctx, const char **line, size_t *len, bool *done)
{
  (void)ctx, (void)line, (void)len, (void)done;
  return GT_ERROR(GT_ERR_INPUT, "the reader failed on purpose");
}

static void spm_cases(const char *dir)
{
  char path[1100];
  snprintf(path, sizeof path, "%s/tests/data/genesis.txt", getenv("GT_SRCDIR"));
  size_t len = 0;
  char *text = read_all(path, &len);
  if (!tap_ok(text != NULL, "read %s", path))
    return;

  gt_tokenizer *bpe = NULL, *again = NULL, *uni = NULL;
  lines_ctx c = {text, len, 0};
  int st = gt_tokenizer_train("bpe", 600, 100000, next_line, &c, &bpe);
  if (!tap_ok(st == GT_SUCCESS, "train a 600-piece BPE on Genesis (%s)",
              st ? gt_error_message() : "ok")) {
    free(text);
    return;
  }
  gt_error_clear();
  tap_ok(gt_tokenizer_vocab(bpe) == 600 && gt_tokenizer_kind_of(bpe) == GT_TOKENIZER_SENTENCEPIECE &&
             strcmp(gt_tokenizer_name(bpe), "sentencepiece") == 0,
         "bpe: 600 pieces, named sentencepiece");
  size_t n = 0;
  bool back_ok = round_trip(bpe, text, len, &n);
  tap_ok(back_ok && n > 0 && n < len / 2,
         "bpe: decode(encode(Genesis)) is Genesis, %zu tokens for %zu bytes", n, len);
  static const char odd[] = " lead space, tab\there,  two  spaces\n\n\r\n\xc3\xa9 \xe4\xb8\xad "
                            "\xf0\x9f\x8e\x89 \x7f \x01 end ";
  tap_ok(round_trip(bpe, odd, sizeof odd - 1, &n), "bpe: spaces, tabs, CR, characters never "
         "seen in training (byte fallback) come back");
  /* the one character that does not: U+2581, SentencePiece's own space mark */
  uint32_t *mark = NULL;
  char *spaced = NULL;
  size_t nmark = 0, nspaced = 0;
  tap_ok(gt_tokenizer_encode(bpe, "\xe2\x96\x81x", 4, &mark, &nmark) == GT_SUCCESS &&
             gt_tokenizer_decode(bpe, mark, nmark, &spaced, &nspaced) == GT_SUCCESS &&
             nspaced == 2 && memcmp(spaced, " x", 2) == 0,
         "bpe: U+2581 in the text comes back as a space (documented)");
  free(mark);
  free(spaced);
  char *long_line = malloc(5 * GT_TOKENIZER_SEGMENT);
  for (size_t i = 0; i < 5 * GT_TOKENIZER_SEGMENT; i++)
    long_line[i] = "abc def ghij\xc3\xa9 "[i % 15];
  long_line[5 * GT_TOKENIZER_SEGMENT - 1] = 'x'; /* don't end inside é */
  tap_ok(round_trip(bpe, long_line, 5 * GT_TOKENIZER_SEGMENT - 1, &n),
         "bpe: a line of %d bytes (cut into segments) comes back", 5 * GT_TOKENIZER_SEGMENT - 1);
  free(long_line);

  /* the same lines, the same model */
  c.at = 0;
  st = gt_tokenizer_train("bpe", 600, 100000, next_line, &c, &again);
  const void *m1 = NULL, *m2 = NULL;
  size_t s1 = 0, s2 = 0;
  gt_tokenizer_model(bpe, &m1, &s1);
  if (st == GT_SUCCESS)
    gt_tokenizer_model(again, &m2, &s2);
  tap_ok(st == GT_SUCCESS && s1 > 0 && s1 == s2 && memcmp(m1, m2, s1) == 0,
         "bpe: training again on the same lines gives the same %zu model bytes", s1);
  gt_tokenizer_free(again);
  again = NULL;
  st = gt_tokenizer_sentencepiece(m1, s1, &again);
  uint32_t *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  bool same = st == GT_SUCCESS && gt_tokenizer_encode(bpe, text, 5000, &a, &na) == GT_SUCCESS &&
              gt_tokenizer_encode(again, text, 5000, &b, &nb) == GT_SUCCESS && na == nb &&
              memcmp(a, b, na * sizeof *a) == 0;
  tap_ok(same, "bpe: the model loaded from its bytes encodes as the trained one");
  free(a);
  free(b);
  gt_tokenizer_free(again);

  /* the model in a dataset file and back */
  snprintf(path, sizeof path, "%s/spm-model.h5", dir);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  st = f >= 0 ? gt_tokenizer_h5_write(f, bpe) : GT_ERR_SYSTEM;
  if (f >= 0)
    H5Fclose(f);
  again = NULL;
  if (st == GT_SUCCESS)
    st = gt_tokenizer_from_file(path, &again);
  if (st == GT_SUCCESS)
    gt_tokenizer_model(again, &m2, &s2);
  tap_ok(st == GT_SUCCESS && s2 == s1 && memcmp(m1, m2, s1) == 0 &&
             gt_tokenizer_vocab(again) == 600,
         "the model written with gt_tokenizer_h5_write reads back the same (%s)",
         st ? gt_error_message() : "ok");
  gt_error_clear();
  gt_tokenizer_free(again);

  /* errors */
  uint32_t *ids = NULL;
  st = gt_tokenizer_encode(bpe, "ab\xff" "cd", 5, &ids, &n);
  tap_ok(st == GT_ERR_INPUT && ids == NULL && strstr(gt_error_message(), "not UTF-8 at byte 2"),
         "bpe: text that is not UTF-8 is refused at its byte (%s)", gt_error_message());
  gt_error_clear();
  const uint32_t beyond[2] = {5, 600};
  char *back = NULL;
  st = gt_tokenizer_decode(bpe, beyond, 2, &back, &n);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "token 600"),
         "bpe: id 600 is outside the vocabulary (%s)", gt_error_message());
  gt_error_clear();
  gt_tokenizer_free(bpe);

  c.at = 0;
  st = gt_tokenizer_train("unigram", 600, 100000, next_line, &c, &uni);
  back_ok = st == GT_SUCCESS && round_trip(uni, text, len, &n);
  tap_ok(back_ok && gt_tokenizer_vocab(uni) == 600,
         "unigram 600: trains and gives Genesis back (%zu tokens; %s)", n,
         st ? gt_error_message() : "ok");
  gt_error_clear();
  gt_tokenizer_free(uni);

  static const char junk[] = "this is not a SentencePiece model, only some words";
  again = (gt_tokenizer *)1;
  st = gt_tokenizer_sentencepiece(junk, sizeof junk, &again);
  tap_ok(st == GT_ERR_INPUT && again == NULL && strstr(gt_error_message(), "not a SentencePiece model"),
         "junk bytes are not a model (%s)", gt_error_message());
  gt_error_clear();
  c.at = 0;
  again = NULL;
  st = gt_tokenizer_train("bpe", 200000, 100000, next_line, &c, &again);
  tap_ok(st == GT_ERR_INPUT && again == NULL && strstr(gt_error_message(), "SentencePiece cannot train"),
         "200000 pieces from Genesis: SentencePiece's reason (%s)", gt_error_message());
  gt_error_clear();
  st = gt_tokenizer_train("bpe", 100, 100000, next_line, &c, &again);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "outside [260"),
         "100 pieces: below the bytes and special pieces (%s)", gt_error_message());
  gt_error_clear();
  st = gt_tokenizer_train("wordpiece", 600, 100000, next_line, &c, &again);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "'wordpiece'"),
         "an unknown model type (%s)", gt_error_message());
  gt_error_clear();
  c.at = c.len;
  st = gt_tokenizer_train("bpe", 600, 100000, next_line, &c, &again);
  tap_ok(st == GT_ERR_INPUT && again == NULL && strstr(gt_error_message(), "no text"),
         "no lines: refused (%s)", gt_error_message());
  gt_error_clear();
  st = gt_tokenizer_train("bpe", 600, 100000, failing_line, NULL, &again);
  tap_ok(st == GT_ERR_INPUT && strstr(gt_error_message(), "failed on purpose"),
         "the reader's error comes back as it was (%s)", gt_error_message());
  gt_error_clear();
  free(text);
}
#endif

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

  segment_cases();
  bpe_cases(dir);
#ifdef GT_HAVE_SENTENCEPIECE
  spm_cases(dir);
#else
  tok = (gt_tokenizer *)1;
  st = gt_tokenizer_train("bpe", 600, 1000, NULL, NULL, &tok);
  tap_ok(st == GT_ERR_INPUT && tok == NULL && strstr(gt_error_message(), "without SentencePiece"),
         "training in a build without SentencePiece is refused (%s)", gt_error_message());
  gt_error_clear();
#endif
  const int rc = tap_done();
  MPI_Finalize();
  return rc;
}
