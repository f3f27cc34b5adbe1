/*
 * tokenizer_bpe.c - byte-level BPE as the `tokenizers` package runs it
 * (tokenizer_bpe.h), read from a Hugging Face tokenizer.json with json-c and
 * pre-tokenized with PCRE2.
 *
 * Encoding, in the order of `tokenizers`:
 *   1. added tokens are cut out of the text, leftmost-longest, first those
 *      with normalized = false over the whole text, then those with
 *      normalized = true in the text between (lstrip / rstrip take the
 *      white space beside them);
 *   2. each stretch of text between them is split by the pre-tokenizer's
 *      regexes (each Split step, then ByteLevel's when use_regex), every
 *      match and every gap between matches a piece (behavior Isolated);
 *   3. each piece is one word for BPE: its bytes start as one symbol each
 *      (the id of the byte's character in GPT-2's byte-to-character map),
 *      and the adjacent pair of lowest merge rank (the leftmost of equal
 *      ones) merges until no pair has a merge; with ignore_merges a word
 *      that is in the vocabulary is its id at once.
 * Tokens are kept as the bytes they stand for (the map undone when the
 * vocabulary is read), so no text is mapped to characters while encoding.
 * Words of up to GT_BPE_CACHE_WORD bytes are cached with their ids.
 */
#ifdef HAVE_CONFIG_H
#include "build_config.h"
#endif

#include "tokenizer_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <json.h>
#include <pcre2.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/tokenizer.h"

#define GT_BPE_MAX_VOCAB (1 << 24)   /* ids: more is not a tokenizer */
#define GT_BPE_MAX_REGEX 8           /* Split steps + ByteLevel's */
#define GT_BPE_CACHE_WORD 64         /* bytes: longer words are not cached */
#define GT_BPE_CACHE_IDS (1u << 22)  /* ids in the cache before it is emptied */
#define GT_BPE_EMPTY UINT32_MAX
#define GT_BPE_JIT_STACK (8u << 20)  /* bytes of the JIT's stack, at most */

/* GPT-2's regex, the ByteLevel pre-tokenizer's with use_regex = true */
static const char gt_bpe_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Unicode's White_Space characters: what Oniguruma (the regex engine of
 * `tokenizers`) means by \s, and Rust's char::is_whitespace (lstrip,
 * rstrip). PCRE2 10.42's \s also takes U+180E, so \s and \S are spelled out
 * with this list (gt_bpe_spaces_spelled). */
#define GT_BPE_WS                                                                          \
  "\\t\\n\\x0b\\f\\r\\x20\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"    \
  "\\x{202f}\\x{205f}\\x{3000}"

// ---- GPT-2's map of bytes to characters ----------------------------------------------

/* Bytes that stand for themselves: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF;
 * the other 68 are U+0100 + their rank among them. */
static bool gt_bpe_visible(unsigned b)
{
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

typedef struct {
  uint32_t cp[256];   /* byte -> character */
  int16_t byte[324];  /* character (< 324) -> byte, -1 for none */
} gt_bpe_bytemap;

static void gt_bpe_bytemap_init(gt_bpe_bytemap *m)
{
  unsigned other = 0;
  for (unsigned i = 0; i < 324; i++)
    m->byte[i] = -1;
  for (unsigned b = 0; b < 256; b++) {
    m->cp[b] = gt_bpe_visible(b) ? b : 256 + other++;
    m->byte[m->cp[b]] = (int16_t)b;
  }
}

/* The code point at s[*i] (n bytes in all), *i moved past it; -1 for bytes
 * that are not UTF-8 (json-c does not check its strings). */
static long gt_bpe_utf8_next(const unsigned char *s, size_t n, size_t *i)
{
  const unsigned c = s[*i];
  size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (k == 0 || *i + k > n)
    return -1;
  long cp = k == 1 ? (long)c : (long)(c & (0x7f >> k));
  for (size_t j = 1; j < k; j++) {
    if ((s[*i + j] & 0xc0) != 0x80)
      return -1;
    cp = cp << 6 | (s[*i + j] & 0x3f);
  }
  *i += k;
  return cp;
}

/* The bytes a token's text stands for: through the inverse map when every
 * character of it is in the map (*mapped true), else its UTF-8 text as it is
 * (the ByteLevel decoder's rule). out has room for n bytes; *len. */
static void gt_bpe_unmap(const gt_bpe_bytemap *m, const char *text, size_t n, char *out,
                         size_t *len, bool *mapped)
{
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0, k = 0;
  *mapped = true;
  while (i < n) {
    const long cp = gt_bpe_utf8_next(s, n, &i);
    if (cp < 0 || cp >= 324 || m->byte[cp] < 0) {
      *mapped = false;
      break;
    }
    out[k++] = (char)m->byte[cp];
  }
  if (!*mapped) {
    memcpy(out, text, n);
    k = n;
  }
  *len = k;
}

static bool gt_bpe_is_space(long cp)
{
  return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// ---- hash tables ---------------------------------------------------------------------------

static uint64_t gt_bpe_mix(uint64_t h)
{
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

static uint64_t gt_bpe_hash(const unsigned char *p, size_t n)
{
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = gt_bpe_mix(h ^ w);
  }
  uint64_t w = 0;
  memcpy(&w, p, n);
  return gt_bpe_mix(h ^ w ^ 0xff);
}

/* (left id, right id) -> (rank, merged id): open addressing, a power of two
 * of slots, an empty slot's key UINT64_MAX. */
typedef struct {
  uint64_t key;
  uint32_t rank, id;
} gt_bpe_pair;

typedef struct {
  gt_bpe_pair *slot;
  size_t mask;
} gt_bpe_pairs;

static int gt_bpe_pairs_init(gt_bpe_pairs *p, size_t n)
{
  size_t cap = 16;
  while (cap < 2 * n)
    cap *= 2;
  p->slot = malloc(cap * sizeof *p->slot);
  GT_CHECK_ALLOC(p->slot, cap * sizeof *p->slot);
  memset(p->slot, 0xff, cap * sizeof *p->slot);
  p->mask = cap - 1;
  return GT_SUCCESS;
}

/* A later merge of the same pair replaces an earlier one (as `tokenizers`). */
static void gt_bpe_pairs_put(gt_bpe_pairs *p, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
  const uint64_t key = (uint64_t)a << 32 | b;
  size_t i = gt_bpe_mix(key) & p->mask;
  while (p->slot[i].key != UINT64_MAX && p->slot[i].key != key)
    i = (i + 1) & p->mask;
  p->slot[i] = (gt_bpe_pair){key, rank, id};
}

static const gt_bpe_pair *gt_bpe_pairs_get(const gt_bpe_pairs *p, uint32_t a, uint32_t b)
{
  const uint64_t key = (uint64_t)a << 32 | b;
  for (size_t i = gt_bpe_mix(key) & p->mask;; i = (i + 1) & p->mask) {
    if (p->slot[i].key == key)
      return &p->slot[i];
    if (p->slot[i].key == UINT64_MAX)
      return NULL;
  }
}

/* bytes -> a value: the keys in one growing buffer; an empty slot's value
 * GT_BPE_EMPTY; grows at half full. */
typedef struct {
  uint64_t hash;
  uint32_t off, len, val;
} gt_bpe_slot;

typedef struct {
  gt_bpe_slot *slot;
  size_t mask, count;
  unsigned char *keys;
  size_t keys_len, keys_cap;
} gt_bpe_words;

static void gt_bpe_words_clear(gt_bpe_words *m)
{
  if (m->slot)
    memset(m->slot, 0xff, (m->mask + 1) * sizeof *m->slot);
  m->count = 0;
  m->keys_len = 0;
}

static int gt_bpe_words_grow(gt_bpe_words *m)
{
  const size_t cap = m->slot ? 2 * (m->mask + 1) : 1024;
  gt_bpe_slot *slot = malloc(cap * sizeof *slot);
  GT_CHECK_ALLOC(slot, cap * sizeof *slot);
  memset(slot, 0xff, cap * sizeof *slot);
  for (size_t i = 0; m->slot && i <= m->mask; i++) {
    if (m->slot[i].val == GT_BPE_EMPTY)
      continue;
    size_t j = m->slot[i].hash & (cap - 1);
    while (slot[j].val != GT_BPE_EMPTY)
      j = (j + 1) & (cap - 1);
    slot[j] = m->slot[i];
  }
  free(m->slot);
  m->slot = slot;
  m->mask = cap - 1;
  return GT_SUCCESS;
}

static bool gt_bpe_words_get(const gt_bpe_words *m, const unsigned char *k, size_t n, uint64_t h,
                             uint32_t *val)
{
  if (!m->slot)
    return false;
  for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
    const gt_bpe_slot *s = &m->slot[i];
    if (s->val == GT_BPE_EMPTY)
      return false;
    if (s->hash == h && s->len == n && memcmp(m->keys + s->off, k, n) == 0) {
      *val = s->val;
      return true;
    }
  }
}

/* Insert a key that is not there yet. */
static int gt_bpe_words_put(gt_bpe_words *m, const unsigned char *k, size_t n, uint64_t h,
                            uint32_t val)
{
  if (!m->slot || 2 * (m->count + 1) > m->mask + 1)
    GT_CALL(gt_bpe_words_grow(m));
  if (m->keys_len + n > m->keys_cap) {
    size_t cap = m->keys_cap ? m->keys_cap : 4096;
    while (cap < m->keys_len + n)
      cap *= 2;
    unsigned char *keys = realloc(m->keys, cap);
    GT_CHECK_ALLOC(keys, cap);
    m->keys = keys, m->keys_cap = cap;
  }
  GT_CHECK(m->keys_len + n <= UINT32_MAX, GT_ERR_INPUT, "the tokenizer's words exceed 4 GiB");
  memcpy(m->keys + m->keys_len, k, n);
  size_t i = h & m->mask;
  while (m->slot[i].val != GT_BPE_EMPTY)
    i = (i + 1) & m->mask;
  m->slot[i] = (gt_bpe_slot){h, (uint32_t)m->keys_len, (uint32_t)n, val};
  m->keys_len += n;
  m->count++;
  return GT_SUCCESS;
}

static void gt_bpe_words_free(gt_bpe_words *m)
{
  free(m->slot);
  free(m->keys);
  memset(m, 0, sizeof *m);
}

// ---- the tokenizer -------------------------------------------------------------------------

typedef struct {
  char *text;       /* the token's text in the input, malloc'd */
  size_t len;
  uint32_t id;
  bool lstrip, rstrip;
} gt_bpe_added;

/* The added tokens matched in one pass, ordered by first byte, longest first. */
typedef struct {
  gt_bpe_added *tok;
  int n;
  uint32_t first[257]; /* tok[first[c] .. first[c+1]) start with byte c */
} gt_bpe_added_set;

typedef struct {
  uint32_t id;
  int32_t prev, next;
  bool gone;
} gt_bpe_sym;

typedef struct {
  uint32_t rank, pos, id;
} gt_bpe_merge;

struct gt_bpe {
  int vocab;
  /* id -> the bytes it decodes to: dec[dec_off[id], + dec_len[id]) */
  uint32_t *dec_off, *dec_len;
  char *dec;
  int32_t byte_id[256];       /* the id of each byte's character, -1 for none */
  gt_bpe_pairs merges;
  gt_bpe_words words;         /* a token's bytes -> id (ignore_merges) */
  bool ignore_merges, fuse_unk;
  int32_t unk;                /* -1: none */
  int nregex;
  pcre2_code *re[GT_BPE_MAX_REGEX];
  pcre2_match_data *md[GT_BPE_MAX_REGEX];
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit;
  gt_bpe_added_set added[2];  /* [0] normalized = false, [1] true */
  size_t added_max;           /* bytes of the longest added token */
  gt_bpe_words cache;         /* word -> offset in cache_ids of {count, ids...} */
  uint32_t *cache_ids;
  size_t cache_n;
  gt_bpe_sym *sym;            /* one word's scratch */
  gt_bpe_merge *heap;
  size_t sym_cap;
  uint32_t *out;              /* ids of the text being encoded */
  size_t nout, out_cap;
};

// ---- reading tokenizer.json -----------------------------------------------------------------

/* The JSON value of text (size bytes); GT_ERR_INPUT naming what it is not. */
static int gt_bpe_parse(const char *text, size_t size, const char *name, json_object **out)
{
  *out = NULL;
  GT_CHECK(size > 0, GT_ERR_INPUT, "%s is empty; give a Hugging Face tokenizer.json", name);
  GT_CHECK(size < INT_MAX, GT_ERR_INPUT, "%s is larger than 2 GiB: not a tokenizer", name);
  json_tokener *tk = json_tokener_new();
  GT_CHECK_ALLOC(tk, sizeof(void *));
  json_object *o = json_tokener_parse_ex(tk, text, (int)size);
  const enum json_tokener_error err = json_tokener_get_error(tk);
  size_t end = json_tokener_get_parse_end(tk);
  json_tokener_free(tk);
  if (!o) {
    return GT_ERROR(GT_ERR_INPUT, "%s is not JSON (%s at byte %zu); give a Hugging Face "
                    "tokenizer.json", name,
                    err == json_tokener_continue ? "it ends inside a value"
                                                 : json_tokener_error_desc(err),
                    end);
  }
  while (end < size && strchr(" \t\r\n", text[end]))
    end++;
  if (end < size) {
    json_object_put(o);
    return GT_ERROR(GT_ERR_INPUT, "%s is not JSON (text after the value at byte %zu); give a "
                    "Hugging Face tokenizer.json", name, end);
  }
  *out = o;
  return GT_SUCCESS;
}

/* obj[key] when it is there and not null, else NULL. */
static json_object *gt_bpe_get(json_object *obj, const char *key)
{
  json_object *v = NULL;
  if (!obj || !json_object_is_type(obj, json_type_object) ||
      !json_object_object_get_ex(obj, key, &v))
    return NULL;
  return v;
}

/* What a JSON value is, with its article ("an array", "null"). */
static const char *gt_bpe_json_type(json_object *v)
{
  switch (v ? json_object_get_type(v) : json_type_null) {
  case json_type_boolean: return "a boolean";
  case json_type_double: return "a number with a fraction";
  case json_type_int: return "an integer";
  case json_type_object: return "an object";
  case json_type_array: return "an array";
  case json_type_string: return "a string";
  default: return "null";
  }
}

/* A boolean obj[key] (path says where obj is), dflt when absent or null. */
static int gt_bpe_bool(json_object *obj, const char *path, const char *key, bool dflt,
                       const char *name, bool *out)
{
  json_object *v = gt_bpe_get(obj, key);
  GT_CHECK(!v || json_object_is_type(v, json_type_boolean), GT_ERR_INPUT,
           "%s: %s%s%s is %s, not true or false", name, path, *path ? "." : "", key,
           gt_bpe_json_type(v));
  *out = v ? json_object_get_boolean(v) : dflt;
  return GT_SUCCESS;
}

/* A string obj[key] or NULL when absent or null. */
static int gt_bpe_str(json_object *obj, const char *path, const char *key, const char *name,
                      const char **out)
{
  json_object *v = gt_bpe_get(obj, key);
  GT_CHECK(!v || json_object_is_type(v, json_type_string), GT_ERR_INPUT,
           "%s: %s%s%s is %s, not a string", name, path, *path ? "." : "", key,
           gt_bpe_json_type(v));
  *out = v ? json_object_get_string(v) : NULL;
  return GT_SUCCESS;
}

/* An id: an integer in [0, GT_BPE_MAX_VOCAB). */
static int gt_bpe_id(json_object *v, const char *what, const char *name, uint32_t *id)
{
  GT_CHECK(v && json_object_is_type(v, json_type_int), GT_ERR_INPUT,
           "%s: %s is %s, not a token id", name, what, gt_bpe_json_type(v));
  const int64_t x = json_object_get_int64(v);
  GT_CHECK(x >= 0 && x < GT_BPE_MAX_VOCAB, GT_ERR_INPUT,
           "%s: %s is %lld, outside [0, %d)", name, what, (long long)x, GT_BPE_MAX_VOCAB);
  *id = (uint32_t)x;
  return GT_SUCCESS;
}

/* pat (n bytes) in PCRE2's words for what Oniguruma's Ruby syntax (the
 * regexes of `tokenizers`) means: \s and \S spelled as the White_Space list
 * (outside a character class \s -> [list], \S -> [^list]; inside one \s ->
 * list, \S stays PCRE2's), and \h, \H, a hexadecimal digit and not one
 * (PCRE2's are horizontal space). \Q...\E and [:posix:] are copied as they
 * are. *out malloc'd, NUL-terminated. */
static int gt_bpe_spaces_spelled(const char *pat, size_t n, char **out)
{
  const size_t ws = sizeof GT_BPE_WS - 1;
  const size_t cap = n * (ws + 4) + 1;
  char *o = malloc(cap);
  GT_CHECK_ALLOC(o, cap);
  size_t k = 0, i = 0;
  bool in_class = false;
  while (i < n) {
    const char c = pat[i];
    if (c == '\\' && i + 1 < n) {
      const char d = pat[i + 1];
      if (d == 'Q') { /* a literal run up to \E */
        const char *e = NULL;
        for (size_t j = i + 2; j + 1 < n && !e; j++)
          if (pat[j] == '\\' && pat[j + 1] == 'E')
            e = pat + j;
        const size_t stop = e ? (size_t)(e - pat) + 2 : n;
        memcpy(o + k, pat + i, stop - i);
        k += stop - i;
        i = stop;
        continue;
      }
      if (d == 's' || (d == 'S' && !in_class) || d == 'h' || (d == 'H' && !in_class)) {
        const char *open = in_class ? "" : d == 's' || d == 'h' ? "[" : "[^";
        k += (size_t)sprintf(o + k, "%s%s%s", open, d == 's' || d == 'S' ? GT_BPE_WS : "0-9a-fA-F",
                             in_class ? "" : "]");
      } else {
        o[k++] = c, o[k++] = d;
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      o[k++] = pat[i++];
      if (i < n && pat[i] == '^')
        o[k++] = pat[i++];
      if (i < n && pat[i] == ']') /* a ']' first in a class is itself */
        o[k++] = pat[i++];
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {
      const char *e = strstr(pat + i + 2, ":]");
      const size_t stop = e && (size_t)(e - pat) + 2 <= n ? (size_t)(e - pat) + 2 : i + 1;
      memcpy(o + k, pat + i, stop - i);
      k += stop - i;
      i = stop;
      continue;
    }
    if (in_class && c == ']')
      in_class = false;
    o[k++] = pat[i++];
  }
  o[k] = '\0';
  *out = o;
  return GT_SUCCESS;
}

/* Compile a pre-tokenizer regex (or, literal, a string to split at). */
static int gt_bpe_regex(gt_bpe *b, const char *pat, size_t n, bool literal, const char *path,
                        const char *name)
{
  GT_CHECK(b->nregex < GT_BPE_MAX_REGEX, GT_ERR_INPUT,
           "%s: %s: more than %d Split steps in the pre-tokenizer", name, path,
           GT_BPE_MAX_REGEX - 1);
  char *spelled = NULL;
  if (!literal)
    GT_CALL(gt_bpe_spaces_spelled(pat, n, &spelled));
  int err = 0;
  PCRE2_SIZE at = 0;
  /* ^ and $ are line anchors in Ruby's syntax, as PCRE2's MULTILINE makes them */
  const uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pat : spelled),
                                 literal ? n : PCRE2_ZERO_TERMINATED, opts, &err, &at, NULL);
  free(spelled);
  if (!re) {
    PCRE2_UCHAR msg[256];
    if (pcre2_get_error_message(err, msg, sizeof msg) < 0)
      snprintf((char *)msg, sizeof msg, "PCRE2 error %d", err);
    return GT_ERROR(GT_ERR_INPUT, "%s: %s does not compile with PCRE2: %s", name, path,
                    (const char *)msg);
  }
  b->re[b->nregex] = re;
  b->md[b->nregex] = pcre2_match_data_create_from_pattern(re, NULL);
  GT_CHECK_ALLOC(b->md[b->nregex++], sizeof(void *));
  (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter matches without it */
  return GT_SUCCESS;
}

/* A ByteLevel step of the pre-tokenizer (path says where). */
static int gt_bpe_pre_bytelevel(gt_bpe *b, json_object *p, const char *path, const char *name)
{
  bool prefix = false, use_regex = true;
  GT_CALL(gt_bpe_bool(p, path, "add_prefix_space", false, name, &prefix));
  GT_CHECK(!prefix, GT_ERR_INPUT,
           "%s: %s.add_prefix_space is true; gridtrain's byte-level BPE takes false (as GPT-2 "
           "and Llama 3): a space before every piece would not come back when decoding",
           name, path);
  GT_CALL(gt_bpe_bool(p, path, "use_regex", true, name, &use_regex));
  if (use_regex)
    GT_CALL(gt_bpe_regex(b, gt_bpe_gpt2_regex, sizeof gt_bpe_gpt2_regex - 1, false, path, name));
  return GT_SUCCESS;
}

/* A Split step: pattern {"Regex": ...} or {"String": ...}, behavior
 * Isolated, invert false. */
static int gt_bpe_pre_split(gt_bpe *b, json_object *p, const char *path, const char *name)
{
  const char *behavior = NULL;
  bool invert = false;
  GT_CALL(gt_bpe_str(p, path, "behavior", name, &behavior));
  GT_CHECK(behavior && strcmp(behavior, "Isolated") == 0, GT_ERR_INPUT,
           "%s: %s.behavior is %s%s%s; gridtrain's byte-level BPE takes Isolated (each match "
           "its own piece)", name, path, behavior ? "\"" : "", behavior ? behavior : "missing",
           behavior ? "\"" : "");
  GT_CALL(gt_bpe_bool(p, path, "invert", false, name, &invert));
  GT_CHECK(!invert, GT_ERR_INPUT, "%s: %s.invert is true; gridtrain's byte-level BPE takes false",
           name, path);
  json_object *pat = gt_bpe_get(p, "pattern"), *re = gt_bpe_get(pat, "Regex"),
              *str = gt_bpe_get(pat, "String");
  json_object *v = re ? re : str;
  GT_CHECK(v && json_object_is_type(v, json_type_string), GT_ERR_INPUT,
           "%s: %s.pattern is not {\"Regex\": \"...\"} or {\"String\": \"...\"}", name, path);
  char where[128];
  snprintf(where, sizeof where, "%s.pattern.%s", path, re ? "Regex" : "String");
  GT_CALL(gt_bpe_regex(b, json_object_get_string(v), (size_t)json_object_get_string_len(v), !re,
                       where, name));
  return GT_SUCCESS;
}

static int gt_bpe_pre(gt_bpe *b, json_object *root, const char *name)
{
  json_object *pre = gt_bpe_get(root, "pre_tokenizer");
  const char *type = NULL;
  GT_CHECK(pre, GT_ERR_INPUT, "%s: pre_tokenizer is null; a byte-level BPE needs a ByteLevel "
           "pre-tokenizer", name);
  GT_CALL(gt_bpe_str(pre, "pre_tokenizer", "type", name, &type));
  if (type && strcmp(type, "ByteLevel") == 0)
    return gt_bpe_pre_bytelevel(b, pre, "pre_tokenizer", name);
  GT_CHECK(type && strcmp(type, "Sequence") == 0, GT_ERR_INPUT,
           "%s: pre_tokenizer.type is \"%s\"; gridtrain's byte-level BPE takes ByteLevel, or a "
           "Sequence of Split steps and ByteLevel", name, type ? type : "missing");
  json_object *steps = gt_bpe_get(pre, "pretokenizers");
  GT_CHECK(steps && json_object_is_type(steps, json_type_array), GT_ERR_INPUT,
           "%s: pre_tokenizer.pretokenizers is %s, not an array", name,
           gt_bpe_json_type(steps));
  const size_t n = json_object_array_length(steps);
  bool byte_level = false;
  for (size_t i = 0; i < n; i++) {
    json_object *p = json_object_array_get_idx(steps, i);
    char path[64];
    snprintf(path, sizeof path, "pre_tokenizer.pretokenizers[%zu]", i);
    GT_CALL(gt_bpe_str(p, path, "type", name, &type));
    GT_CHECK(!byte_level, GT_ERR_INPUT, "%s: %s comes after ByteLevel; gridtrain's byte-level "
             "BPE takes ByteLevel as the last step", name, path);
    if (type && strcmp(type, "Split") == 0) {
      GT_CALL(gt_bpe_pre_split(b, p, path, name));
    } else if (type && strcmp(type, "ByteLevel") == 0) {
      GT_CALL(gt_bpe_pre_bytelevel(b, p, path, name));
      byte_level = true;
    } else {
      return GT_ERROR(GT_ERR_INPUT, "%s: %s.type is \"%s\"; gridtrain's byte-level BPE takes "
                      "Split and ByteLevel steps", name, path, type ? type : "missing");
    }
  }
  GT_CHECK(byte_level, GT_ERR_INPUT, "%s: pre_tokenizer has no ByteLevel step; not a byte-level "
           "BPE", name);
  return GT_SUCCESS;
}

/* normalizer: none (null, or an empty Sequence); decoder: ByteLevel;
 * post_processor: one that only adds tokens around a text or trims offsets
 * (gridtrain adds none, as encode(text, add_special_tokens=False)). */
static int gt_bpe_steps(json_object *root, const char *name)
{
  json_object *norm = gt_bpe_get(root, "normalizer");
  const char *type = NULL;
  if (norm) {
    GT_CALL(gt_bpe_str(norm, "normalizer", "type", name, &type));
    json_object *list = gt_bpe_get(norm, "normalizers");
    const bool empty = type && strcmp(type, "Sequence") == 0 && list &&
                       json_object_is_type(list, json_type_array) &&
                       json_object_array_length(list) == 0;
    GT_CHECK(empty, GT_ERR_INPUT, "%s: normalizer is %s%s%s, which changes the text; "
             "gridtrain's byte-level BPE takes a tokenizer without one (normalizer null)", name,
             type ? "\"" : "", type ? type : "not null", type ? "\"" : "");
  }
  json_object *dec = gt_bpe_get(root, "decoder");
  GT_CALL(gt_bpe_str(dec, "decoder", "type", name, &type));
  if (type && strcmp(type, "Sequence") == 0) { /* [ByteLevel] */
    json_object *list = gt_bpe_get(dec, "decoders");
    json_object *one = list && json_object_is_type(list, json_type_array) &&
                               json_object_array_length(list) == 1
                           ? json_object_array_get_idx(list, 0)
                           : NULL;
    GT_CALL(gt_bpe_str(one, "decoder.decoders[0]", "type", name, &type));
  }
  GT_CHECK(type && strcmp(type, "ByteLevel") == 0, GT_ERR_INPUT,
           "%s: decoder is %s%s%s; gridtrain's byte-level BPE decodes as the ByteLevel decoder "
           "and takes only that one", name, type ? "\"" : "", type ? type : "null",
           type ? "\"" : "");
  static const char *const post_ok[] = {"ByteLevel", "TemplateProcessing", "RobertaProcessing",
                                        "BertProcessing", "Sequence"};
  const size_t nok = sizeof post_ok / sizeof post_ok[0];
  json_object *post = gt_bpe_get(root, "post_processor");
  json_object *list = gt_bpe_get(post, "processors");
  const size_t n = list && json_object_is_type(list, json_type_array)
                       ? json_object_array_length(list) : 0;
  for (size_t i = 0; post && i <= n; i++) {
    json_object *p = i == 0 ? post : json_object_array_get_idx(list, i - 1);
    char path[64];
    snprintf(path, sizeof path, i == 0 ? "post_processor" : "post_processor.processors[%zu]",
             i - 1);
    GT_CALL(gt_bpe_str(p, path, "type", name, &type));
    bool known = false;
    for (size_t k = 0; type && k < nok; k++) /* a Sequence only at the top */
      known |= strcmp(type, post_ok[k]) == 0 && (i == 0 || k + 1 < nok);
    GT_CHECK(known, GT_ERR_INPUT, "%s: %s.type is \"%s\"; gridtrain takes ByteLevel, "
             "TemplateProcessing, RobertaProcessing, BertProcessing or a Sequence of them (and "
             "adds no tokens around a text)", name, path, type ? type : "missing");
  }
  return GT_SUCCESS;
}

/* The keys of model that gridtrain runs as they are: dropout null (or 0),
 * byte_fallback false, no continuing_subword_prefix or end_of_word_suffix;
 * unk_token, fuse_unk and ignore_merges as given. */
static int gt_bpe_model_keys(gt_bpe *b, json_object *model, json_object *vocab, const char *name)
{
  json_object *dropout = gt_bpe_get(model, "dropout");
  GT_CHECK(!dropout || ((json_object_is_type(dropout, json_type_double) ||
                         json_object_is_type(dropout, json_type_int)) &&
                        json_object_get_double(dropout) == 0.0),
           GT_ERR_INPUT, "%s: model.dropout is %s; gridtrain encodes without BPE dropout (null)",
           name, json_object_to_json_string(dropout));
  bool fallback = false;
  GT_CALL(gt_bpe_bool(model, "model", "byte_fallback", false, name, &fallback));
  GT_CHECK(!fallback, GT_ERR_INPUT, "%s: model.byte_fallback is true; that is SentencePiece-style "
           "BPE, not byte-level (give it as sentencepiece:MODEL)", name);
  static const char *const affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const char *s = NULL;
    GT_CALL(gt_bpe_str(model, "model", affix[i], name, &s));
    GT_CHECK(!s || !*s, GT_ERR_INPUT, "%s: model.%s is \"%s\"; gridtrain's byte-level BPE takes "
             "none (null)", name, affix[i], s);
  }
  GT_CALL(gt_bpe_bool(model, "model", "fuse_unk", false, name, &b->fuse_unk));
  GT_CALL(gt_bpe_bool(model, "model", "ignore_merges", false, name, &b->ignore_merges));
  const char *unk = NULL;
  GT_CALL(gt_bpe_str(model, "model", "unk_token", name, &unk));
  b->unk = -1;
  if (unk) {
    json_object *v = gt_bpe_get(vocab, unk);
    GT_CHECK(v, GT_ERR_INPUT, "%s: model.unk_token \"%s\" is not in model.vocab", name, unk);
    uint32_t id;
    GT_CALL(gt_bpe_id(v, "model.unk_token's id", name, &id));
    b->unk = (int32_t)id;
  }
  return GT_SUCCESS;
}

/* The bytes each id decodes to: from model.vocab, then the added tokens
 * (which win for an id in both, as `tokenizers` looks them up first). */
static int gt_bpe_decoding(gt_bpe *b, json_object *vocab, json_object *added,
                           const gt_bpe_bytemap *map, const char *name)
{
  size_t bytes = 0;
  json_object_object_foreach(vocab, key, val) {
    (void)val;
    bytes += strlen(key);
  }
  const size_t nadded = added ? json_object_array_length(added) : 0;
  for (size_t i = 0; i < nadded; i++)
    bytes += (size_t)json_object_get_string_len(
        gt_bpe_get(json_object_array_get_idx(added, i), "content"));
  GT_CHECK(bytes < UINT32_MAX, GT_ERR_INPUT, "%s: the tokens' text exceeds 4 GiB", name);
  const size_t v = (size_t)b->vocab;
  b->dec_off = calloc(v, sizeof *b->dec_off);
  b->dec_len = calloc(v, sizeof *b->dec_len);
  b->dec = malloc(bytes + 1);
  GT_CHECK_ALLOC(b->dec_off && b->dec_len && b->dec ? b->dec : NULL, bytes + 8 * v);
  size_t at = 0;
  json_object_object_foreach(vocab, k2, v2) {
    const uint32_t id = (uint32_t)json_object_get_int64(v2);
    size_t len;
    bool mapped;
    gt_bpe_unmap(map, k2, strlen(k2), b->dec + at, &len, &mapped);
    b->dec_off[id] = (uint32_t)at, b->dec_len[id] = (uint32_t)len;
    if (mapped && len == 1)
      b->byte_id[(unsigned char)b->dec[at]] = (int32_t)id;
    if (mapped && b->ignore_merges && len > 0) {
      const unsigned char *w = (const unsigned char *)b->dec + at;
      uint32_t old;
      const uint64_t h = gt_bpe_hash(w, len);
      if (!gt_bpe_words_get(&b->words, w, len, h, &old))
        GT_CALL(gt_bpe_words_put(&b->words, w, len, h, id));
    }
    at += len;
  }
  for (size_t i = 0; i < nadded; i++) {
    json_object *t = json_object_array_get_idx(added, i);
    json_object *c = gt_bpe_get(t, "content");
    const uint32_t id = (uint32_t)json_object_get_int64(gt_bpe_get(t, "id"));
    size_t len;
    bool mapped;
    gt_bpe_unmap(map, json_object_get_string(c), (size_t)json_object_get_string_len(c),
                 b->dec + at, &len, &mapped);
    b->dec_off[id] = (uint32_t)at, b->dec_len[id] = (uint32_t)len;
    at += len;
  }
  return GT_SUCCESS;
}

/* The largest id of model.vocab (checking each) and whether ids repeat. */
static int gt_bpe_vocab_ids(json_object *vocab, const char *label, const char *name,
                            uint32_t *max)
{
  GT_CHECK(vocab && json_object_is_type(vocab, json_type_object), GT_ERR_INPUT,
           "%s: %s is %s, not an object of token -> id", name, label,
           gt_bpe_json_type(vocab));
  const int n = json_object_object_length(vocab);
  GT_CHECK(n > 0, GT_ERR_INPUT, "%s: %s is empty", name, label);
  *max = 0;
  json_object_object_foreach(vocab, key, val) {
    char what[96];
    snprintf(what, sizeof what, "%s[\"%.40s\"]", label, key);
    uint32_t id;
    GT_CALL(gt_bpe_id(val, what, name, &id));
    *max = id > *max ? id : *max;
  }
  unsigned char *seen = calloc((size_t)*max + 1, 1);
  GT_CHECK_ALLOC(seen, (size_t)*max + 1);
  int status = GT_SUCCESS;
  json_object_object_foreach(vocab, k2, v2) {
    const uint32_t id = (uint32_t)json_object_get_int64(v2);
    if (seen[id]++ && status == GT_SUCCESS)
      status = GT_ERROR(GT_ERR_INPUT, "%s: %s gives id %u to two tokens (one is \"%.40s\")",
                        name, label, id, k2);
  }
  free(seen);
  return status;
}

/* added_tokens: each {id, content, special, normalized, lstrip, rstrip,
 * single_word (false)}; their largest id in *max (kept when smaller). */
static int gt_bpe_added_check(json_object *added, const char *name, uint32_t *max)
{
  if (!added)
    return GT_SUCCESS;
  GT_CHECK(json_object_is_type(added, json_type_array), GT_ERR_INPUT,
           "%s: added_tokens is %s, not an array", name, gt_bpe_json_type(added));
  const size_t n = json_object_array_length(added);
  for (size_t i = 0; i < n; i++) {
    json_object *t = json_object_array_get_idx(added, i);
    char path[48], what[64];
    snprintf(path, sizeof path, "added_tokens[%zu]", i);
    snprintf(what, sizeof what, "%s.id", path);
    uint32_t id;
    GT_CALL(gt_bpe_id(gt_bpe_get(t, "id"), what, name, &id));
    *max = id > *max ? id : *max;
    const char *content = NULL;
    GT_CALL(gt_bpe_str(t, path, "content", name, &content));
    GT_CHECK(content && *content, GT_ERR_INPUT, "%s: %s.content is %s", name, path,
             content ? "empty" : "missing");
    bool single = false;
    GT_CALL(gt_bpe_bool(t, path, "single_word", false, name, &single));
    GT_CHECK(!single, GT_ERR_INPUT, "%s: %s.single_word is true (\"%s\"); gridtrain matches "
             "added tokens anywhere (single_word false)", name, path, content);
  }
  return GT_SUCCESS;
}

static int gt_bpe_added_cmp(const void *pa, const void *pb)
{
  const gt_bpe_added *a = pa, *b = pb;
  const unsigned ca = (unsigned char)a->text[0], cb = (unsigned char)b->text[0];
  if (ca != cb)
    return ca < cb ? -1 : 1;
  return a->len > b->len ? -1 : a->len < b->len ? 1 : 0;
}

/* The two sets of added tokens (checked by gt_bpe_added_check). */
static int gt_bpe_added_sets(gt_bpe *b, json_object *added, const char *name)
{
  const size_t n = added ? json_object_array_length(added) : 0;
  for (int pass = 0; pass < 2; pass++) {
    gt_bpe_added_set *s = &b->added[pass];
    s->tok = calloc(n ? n : 1, sizeof *s->tok);
    GT_CHECK_ALLOC(s->tok, n * sizeof *s->tok);
    for (size_t i = 0; i < n; i++) {
      json_object *t = json_object_array_get_idx(added, i);
      bool special = false, normalized = false, lstrip = false, rstrip = false;
      char path[48];
      snprintf(path, sizeof path, "added_tokens[%zu]", i);
      GT_CALL(gt_bpe_bool(t, path, "special", false, name, &special));
      GT_CALL(gt_bpe_bool(t, path, "normalized", !special, name, &normalized));
      GT_CALL(gt_bpe_bool(t, path, "lstrip", false, name, &lstrip));
      GT_CALL(gt_bpe_bool(t, path, "rstrip", false, name, &rstrip));
      if (normalized != (pass == 1))
        continue;
      json_object *c = gt_bpe_get(t, "content");
      gt_bpe_added *a = &s->tok[s->n++];
      a->len = (size_t)json_object_get_string_len(c);
      a->text = malloc(a->len);
      GT_CHECK_ALLOC(a->text, a->len);
      memcpy(a->text, json_object_get_string(c), a->len);
      a->id = (uint32_t)json_object_get_int64(gt_bpe_get(t, "id"));
      a->lstrip = lstrip, a->rstrip = rstrip;
      b->added_max = a->len > b->added_max ? a->len : b->added_max;
    }
    qsort(s->tok, (size_t)s->n, sizeof *s->tok, gt_bpe_added_cmp);
    int k = 0;
    for (unsigned c = 0; c <= 256; c++) {
      while (k < s->n && (unsigned char)s->tok[k].text[0] < c)
        k++;
      s->first[c] = (uint32_t)k;
    }
  }
  return GT_SUCCESS;
}

/* One merge, "A B" or ["A", "B"], as its two tokens (NUL-terminated in buf). */
static int gt_bpe_merge_parts(json_object *m, size_t r, const char *name, char **buf,
                              size_t *cap, const char **a, const char **b2)
{
  const char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  if (json_object_is_type(m, json_type_string)) {
    const char *s = json_object_get_string(m);
    const char *sp = strchr(s, ' ');
    if (sp && !strchr(sp + 1, ' '))
      x = s, nx = (size_t)(sp - s), y = sp + 1, ny = strlen(sp + 1);
  } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2 &&
             json_object_is_type(json_object_array_get_idx(m, 0), json_type_string) &&
             json_object_is_type(json_object_array_get_idx(m, 1), json_type_string)) {
    json_object *p = json_object_array_get_idx(m, 0), *q = json_object_array_get_idx(m, 1);
    x = json_object_get_string(p), nx = (size_t)json_object_get_string_len(p);
    y = json_object_get_string(q), ny = (size_t)json_object_get_string_len(q);
  }
  GT_CHECK(x && nx > 0 && ny > 0, GT_ERR_INPUT, "%s: model.merges[%zu] is %s, not \"A B\" or "
           "[\"A\", \"B\"]", name, r, json_object_to_json_string(m));
  if (2 * (nx + ny) + 3 > *cap) {
    const size_t want = 2 * (nx + ny) + 64;
    char *grown = realloc(*buf, want);
    GT_CHECK_ALLOC(grown, want);
    *buf = grown, *cap = want;
  }
  char *o = *buf; /* "A\0B\0AB\0" */
  memcpy(o, x, nx), o[nx] = '\0';
  memcpy(o + nx + 1, y, ny), o[nx + 1 + ny] = '\0';
  memcpy(o + nx + ny + 2, x, nx), memcpy(o + 2 * nx + ny + 2, y, ny);
  o[2 * (nx + ny) + 2] = '\0';
  *a = o, *b2 = o + nx + 1;
  return GT_SUCCESS;
}

static int gt_bpe_merges(gt_bpe *b, json_object *model, json_object *vocab, const char *name)
{
  json_object *merges = gt_bpe_get(model, "merges");
  GT_CHECK(merges && json_object_is_type(merges, json_type_array), GT_ERR_INPUT,
           "%s: model.merges is %s, not an array", name, gt_bpe_json_type(merges));
  const size_t n = json_object_array_length(merges);
  GT_CALL(gt_bpe_pairs_init(&b->merges, n));
  char *buf = NULL;
  size_t cap = 0;
  int status = GT_SUCCESS;
  for (size_t r = 0; r < n && status == GT_SUCCESS; r++) {
    const char *x = NULL, *y = NULL;
    status = gt_bpe_merge_parts(json_object_array_get_idx(merges, r), r, name, &buf, &cap, &x, &y);
    const char *parts[3] = {x, y, y ? y + strlen(y) + 1 : NULL};
    uint32_t id[3] = {0, 0, 0};
    for (int k = 0; k < 3 && status == GT_SUCCESS; k++) {
      json_object *v = gt_bpe_get(vocab, parts[k]);
      status = v ? GT_SUCCESS
                 : GT_ERROR(GT_ERR_INPUT, "%s: model.merges[%zu] (\"%s %s\") %s \"%s\", which is "
                            "not in model.vocab", name, r, x, y, k < 2 ? "names" : "makes",
                            parts[k]);
      if (status == GT_SUCCESS)
        id[k] = (uint32_t)json_object_get_int64(v);
    }
    if (status == GT_SUCCESS)
      gt_bpe_pairs_put(&b->merges, id[0], id[1], (uint32_t)r, id[2]);
  }
  free(buf);
  return status;
}

static int gt_bpe_load_in(gt_bpe *b, json_object *root, const char *name)
{
  GT_CHECK(json_object_is_type(root, json_type_object), GT_ERR_INPUT,
           "%s: the JSON is %s, not a tokenizer.json object", name, gt_bpe_json_type(root));
  json_object *model = gt_bpe_get(root, "model");
  GT_CHECK(model && json_object_is_type(model, json_type_object), GT_ERR_INPUT,
           "%s: model is %s, not an object; give a Hugging Face tokenizer.json", name,
           gt_bpe_json_type(model));
  const char *type = NULL;
  GT_CALL(gt_bpe_str(model, "model", "type", name, &type));
  GT_CHECK(!type || strcmp(type, "BPE") == 0, GT_ERR_INPUT,
           "%s: model.type is \"%s\"; gridtrain reads byte-level BPE tokenizers (model.type "
           "\"BPE\")", name, type);
  json_object *vocab = gt_bpe_get(model, "vocab");
  uint32_t max = 0;
  GT_CALL(gt_bpe_vocab_ids(vocab, "model.vocab", name, &max));
  GT_CALL(gt_bpe_model_keys(b, model, vocab, name));
  GT_CALL(gt_bpe_steps(root, name));
  GT_CALL(gt_bpe_pre(b, root, name));
  json_object *added = gt_bpe_get(root, "added_tokens");
  GT_CALL(gt_bpe_added_check(added, name, &max));
  b->vocab = (int)max + 1;
  for (int i = 0; i < 256; i++)
    b->byte_id[i] = -1;
  gt_bpe_bytemap map;
  gt_bpe_bytemap_init(&map);
  GT_CALL(gt_bpe_decoding(b, vocab, added, &map, name));
  GT_CALL(gt_bpe_added_sets(b, added, name));
  GT_CALL(gt_bpe_merges(b, model, vocab, name));
  b->mctx = pcre2_match_context_create(NULL);
  b->jit = pcre2_jit_stack_create(32 * 1024, GT_BPE_JIT_STACK, NULL);
  GT_CHECK_ALLOC(b->mctx, sizeof(void *));
  if (b->jit) /* NULL without JIT support: the interpreter matches */
    pcre2_jit_stack_assign(b->mctx, NULL, b->jit);
  return GT_SUCCESS;
}

int gt_bpe_load(const char *json, size_t size, const char *name, gt_bpe **out, int *vocab)
{
  *out = NULL;
  *vocab = 0;
  json_object *root = NULL;
  GT_CALL(gt_bpe_parse(json, size, name, &root));
  gt_bpe *b = calloc(1, sizeof *b);
  int status = b ? gt_bpe_load_in(b, root, name)
                 : GT_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", sizeof *b);
  json_object_put(root);
  if (status != GT_SUCCESS) {
    gt_bpe_free(b);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *out = b;
  *vocab = b->vocab;
  return GT_SUCCESS;
}

// ---- encoding --------------------------------------------------------------------------------

/* Room for k more ids in b->out. */
static int gt_bpe_reserve(gt_bpe *b, size_t k)
{
  if (b->nout + k <= b->out_cap)
    return GT_SUCCESS;
  size_t cap = b->out_cap ? b->out_cap : 4096;
  while (cap < b->nout + k)
    cap *= 2;
  uint32_t *grown = realloc(b->out, cap * sizeof *grown);
  GT_CHECK_ALLOC(grown, cap * sizeof *grown);
  b->out = grown, b->out_cap = cap;
  return GT_SUCCESS;
}

static void gt_bpe_heap_push(gt_bpe_merge *h, size_t *n, gt_bpe_merge m)
{
  size_t i = (*n)++;
  while (i > 0) {
    const size_t up = (i - 1) / 2;
    if (h[up].rank < m.rank || (h[up].rank == m.rank && h[up].pos <= m.pos))
      break;
    h[i] = h[up];
    i = up;
  }
  h[i] = m;
}

static gt_bpe_merge gt_bpe_heap_pop(gt_bpe_merge *h, size_t *n)
{
  const gt_bpe_merge top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n)
      break;
    if (c + 1 < *n && (h[c + 1].rank < h[c].rank ||
                       (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
      c++;
    if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos <= h[c].pos))
      break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0)
    h[i] = last;
  return top;
}

/* The pair at symbol i and its right neighbour into the heap, if it merges. */
static void gt_bpe_offer(const gt_bpe *b, gt_bpe_merge *heap, size_t *nheap, int32_t i)
{
  if (i < 0 || b->sym[i].next < 0)
    return;
  const int32_t j = b->sym[i].next;
  const gt_bpe_pair *p = gt_bpe_pairs_get(&b->merges, b->sym[i].id, b->sym[j].id);
  if (p)
    gt_bpe_heap_push(heap, nheap, (gt_bpe_merge){p->rank, (uint32_t)i, p->id});
}

/* The symbols of a word's bytes (unknown bytes as model.unk_token, fused
 * when fuse_unk, or dropped without one, as `tokenizers`); *m of them. */
static void gt_bpe_symbols(gt_bpe *b, const unsigned char *w, size_t n, size_t *m)
{
  size_t k = 0;
  bool unk_open = false;
  for (size_t i = 0; i < n; i++) {
    const int32_t id = b->byte_id[w[i]];
    if (id >= 0) {
      b->sym[k++].id = (uint32_t)id;
      unk_open = false;
    } else if (b->unk >= 0 && !(unk_open && b->fuse_unk)) {
      b->sym[k++].id = (uint32_t)b->unk;
      unk_open = true;
    }
  }
  for (size_t i = 0; i < k; i++) {
    b->sym[i].prev = (int32_t)i - 1;
    b->sym[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
    b->sym[i].gone = false;
  }
  *m = k;
}

/* BPE on one word: merges by rank, leftmost first among equal ranks; the
 * ids appended to b->out (room reserved). Then the word in the cache. */
static int gt_bpe_merge_word(gt_bpe *b, const unsigned char *w, size_t n, uint64_t h)
{
  if (n > b->sym_cap) {
    size_t cap = b->sym_cap ? b->sym_cap : 64;
    while (cap < n)
      cap *= 2;
    free(b->sym);
    free(b->heap);
    b->sym = malloc(cap * sizeof *b->sym);
    b->heap = malloc(3 * cap * sizeof *b->heap); /* the first pairs, then 2 a merge */
    b->sym_cap = b->sym && b->heap ? cap : 0;
    GT_CHECK_ALLOC(b->sym_cap ? b->sym : NULL, cap * (sizeof *b->sym + 3 * sizeof *b->heap));
  }
  size_t m, nheap = 0;
  gt_bpe_symbols(b, w, n, &m);
  if (m == 0)
    return GT_SUCCESS;
  for (size_t i = 0; i + 1 < m; i++)
    gt_bpe_offer(b, b->heap, &nheap, (int32_t)i);
  while (nheap > 0) {
    const gt_bpe_merge top = gt_bpe_heap_pop(b->heap, &nheap);
    gt_bpe_sym *s = &b->sym[top.pos];
    if (s->gone || s->next < 0)
      continue;
    gt_bpe_sym *r = &b->sym[s->next];
    const gt_bpe_pair *p = gt_bpe_pairs_get(&b->merges, s->id, r->id);
    if (!p || p->id != top.id) /* the pair changed since it was offered */
      continue;
    s->id = top.id;
    r->gone = true;
    s->next = r->next;
    if (r->next >= 0)
      b->sym[r->next].prev = (int32_t)top.pos;
    gt_bpe_offer(b, b->heap, &nheap, s->prev);
    gt_bpe_offer(b, b->heap, &nheap, (int32_t)top.pos);
  }
  const size_t first = b->nout;
  for (int32_t i = 0; i >= 0; i = b->sym[i].next)
    b->out[b->nout++] = b->sym[i].id;
  const size_t count = b->nout - first;
  if (n > GT_BPE_CACHE_WORD)
    return GT_SUCCESS;
  if (b->cache_n + count + 1 > GT_BPE_CACHE_IDS) {
    gt_bpe_words_clear(&b->cache);
    b->cache_n = 0;
  }
  if (!b->cache_ids) {
    b->cache_ids = malloc(GT_BPE_CACHE_IDS * sizeof *b->cache_ids);
    GT_CHECK_ALLOC(b->cache_ids, GT_BPE_CACHE_IDS * sizeof *b->cache_ids);
  }
  GT_CALL(gt_bpe_words_put(&b->cache, w, n, h, (uint32_t)b->cache_n));
  b->cache_ids[b->cache_n++] = (uint32_t)count;
  memcpy(b->cache_ids + b->cache_n, b->out + first, count * sizeof *b->out);
  b->cache_n += count;
  return GT_SUCCESS;
}

/* One word (a piece of the last pre-tokenizer step) to its ids. */
static int gt_bpe_word(gt_bpe *b, const unsigned char *w, size_t n)
{
  GT_CALL(gt_bpe_reserve(b, n));
  if (n == 1 && b->byte_id[w[0]] >= 0) {
    b->out[b->nout++] = (uint32_t)b->byte_id[w[0]];
    return GT_SUCCESS;
  }
  const uint64_t h = gt_bpe_hash(w, n);
  uint32_t v;
  if (b->ignore_merges && gt_bpe_words_get(&b->words, w, n, h, &v)) {
    b->out[b->nout++] = v;
    return GT_SUCCESS;
  }
  if (n <= GT_BPE_CACHE_WORD && gt_bpe_words_get(&b->cache, w, n, h, &v)) {
    const uint32_t count = b->cache_ids[v];
    memcpy(b->out + b->nout, b->cache_ids + v + 1, count * sizeof *b->out);
    b->nout += count;
    return GT_SUCCESS;
  }
  GT_CALL(gt_bpe_merge_word(b, w, n, h));
  return GT_SUCCESS;
}

/* One encoding: the text, and the top-level piece not encoded yet (the
 * last one seen: it may grow with the text that follows). */
typedef struct {
  gt_bpe *b;
  const unsigned char *text;
  size_t len, limit;  /* pieces that start after limit are left for later */
  bool last, stop;
  bool pending;
  size_t p_start, p_end;
  int64_t p_id;       /* an added token's id, or -1 for text */
} gt_bpe_run;

static int gt_bpe_split(gt_bpe_run *r, int stage, size_t s, size_t e);

/* A piece found by regex `stage`: the top-level ones wait their turn, the
 * others go to the next regex or, after the last, to BPE. */
static int gt_bpe_emit(gt_bpe_run *r, int stage, size_t s, size_t e);

/* A top-level piece [s, e) (an added token when id >= 0) encoded. */
static int gt_bpe_piece(gt_bpe_run *r, size_t s, size_t e, int64_t id)
{
  if (id >= 0) {
    GT_CALL(gt_bpe_reserve(r->b, 1));
    r->b->out[r->b->nout++] = (uint32_t)id;
    return GT_SUCCESS;
  }
  if (r->b->nregex > 1)
    return gt_bpe_split(r, 1, s, e);
  return gt_bpe_word(r->b, r->text + s, e - s);
}

/* The next top-level piece: the one before it is now complete. */
static int gt_bpe_top(gt_bpe_run *r, size_t s, size_t e, int64_t id)
{
  if (!r->last && s > r->limit) {
    r->stop = true;
    return GT_SUCCESS;
  }
  if (r->pending)
    GT_CALL(gt_bpe_piece(r, r->p_start, r->p_end, r->p_id));
  r->pending = true;
  r->p_start = s, r->p_end = e, r->p_id = id;
  return GT_SUCCESS;
}

static int gt_bpe_emit(gt_bpe_run *r, int stage, size_t s, size_t e)
{
  if (stage == 0)
    return gt_bpe_top(r, s, e, -1);
  if (stage + 1 < r->b->nregex)
    return gt_bpe_split(r, stage + 1, s, e);
  return gt_bpe_word(r->b, r->text + s, e - s);
}

/* [s, e) split by regex `stage`: every match and every gap a piece (empty
 * matches skip a character, as Oniguruma's iterator). */
static int gt_bpe_split(gt_bpe_run *r, int stage, size_t s, size_t e)
{
  gt_bpe *b = r->b;
  const PCRE2_SPTR subject = (PCRE2_SPTR)(r->text + s);
  const size_t n = e - s;
  size_t at = 0, prev = 0;
  while (at <= n && !r->stop) {
    int rc = pcre2_match(b->re[stage], subject, n, at, PCRE2_NO_UTF_CHECK, b->md[stage], b->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(b->re[stage], subject, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       b->md[stage], b->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      if (pcre2_get_error_message(rc, msg, sizeof msg) < 0)
        snprintf((char *)msg, sizeof msg, "PCRE2 error %d", rc);
      return GT_ERROR(GT_ERR_INPUT, "the pre-tokenizer's regex %d cannot match the text at "
                      "byte %zu: %s", stage + 1, s + at, (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md[stage]);
    const size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* empty: no piece; on past the character */
      at = me + 1;
      while (at < n && (subject[at] & 0xc0) == 0x80)
        at++;
      continue;
    }
    if (ms > prev)
      GT_CALL(gt_bpe_emit(r, stage, s + prev, s + ms));
    if (!r->stop)
      GT_CALL(gt_bpe_emit(r, stage, s + ms, s + me));
    prev = at = me;
  }
  if (!r->stop && prev < n)
    GT_CALL(gt_bpe_emit(r, stage, s + prev, e));
  return GT_SUCCESS;
}

/* Text between added tokens. */
static int gt_bpe_gap(gt_bpe_run *r, size_t s, size_t e)
{
  if (r->b->nregex == 0)
    return gt_bpe_top(r, s, e, -1);
  return gt_bpe_split(r, 0, s, e);
}

/* Bytes of white space that end at text[at] (going back to from) or
 * start there (going on to to). */
static size_t gt_bpe_space_before(const unsigned char *t, size_t from, size_t at)
{
  size_t i = at;
  while (i > from) {
    size_t k = i - 1;
    while (k > from && (t[k] & 0xc0) == 0x80)
      k--;
    size_t j = k;
    if (!gt_bpe_is_space(gt_bpe_utf8_next(t, at, &j)))
      break;
    i = k;
  }
  return at - i;
}

static size_t gt_bpe_space_after(const unsigned char *t, size_t at, size_t to)
{
  size_t i = at;
  while (i < to) {
    size_t j = i;
    if (!gt_bpe_is_space(gt_bpe_utf8_next(t, to, &j)))
      break;
    i = j;
  }
  return i - at;
}

/* Added tokens of set `pass` cut out of [s, e), leftmost-longest; the text
 * between them goes to the next pass, after the last to the regexes. */
static int gt_bpe_added_split(gt_bpe_run *r, int pass, size_t s, size_t e)
{
  const gt_bpe_added_set *set = &r->b->added[pass];
  const unsigned char *t = r->text;
  size_t from = s;
  for (size_t j = s; j < e && set->n > 0 && !r->stop; j++) {
    const unsigned c = t[j];
    const gt_bpe_added *hit = NULL;
    for (uint32_t k = set->first[c]; k < set->first[c + 1] && !hit; k++)
      if (set->tok[k].len <= e - j && memcmp(set->tok[k].text, t + j, set->tok[k].len) == 0)
        hit = &set->tok[k];
    if (!hit)
      continue;
    size_t ms = j, me = j + hit->len;
    if (hit->lstrip)
      ms -= gt_bpe_space_before(t, from, ms);
    if (hit->rstrip)
      me += gt_bpe_space_after(t, me, e);
    if (ms > from)
      GT_CALL(pass == 0 ? gt_bpe_added_split(r, 1, from, ms) : gt_bpe_gap(r, from, ms));
    if (!r->stop)
      GT_CALL(gt_bpe_top(r, ms, me, hit->id));
    from = me;
    j = me - 1;
  }
  if (!r->stop && from < e)
    GT_CALL(pass == 0 ? gt_bpe_added_split(r, 1, from, e) : gt_bpe_gap(r, from, e));
  return GT_SUCCESS;
}

int gt_bpe_encode(gt_bpe *b, const char *text, size_t len, bool last, uint32_t **ids,
                  size_t *n, size_t *used)
{
  *ids = NULL, *n = 0, *used = 0;
  const size_t valid = gt_utf8_prefix(text, len);
  GT_CHECK(valid == len, GT_ERR_INPUT,
           "the text is not UTF-8 at byte %zu (0x%02x); byte-level BPE takes UTF-8 text", valid,
           (unsigned char)text[valid]);
  if (len == 0)
    return GT_SUCCESS;
  b->nout = 0;
  gt_bpe_run r = {.b = b, .text = (const unsigned char *)text, .len = len, .last = last};
  r.limit = len > b->added_max ? len - b->added_max : 0;
  GT_CALL(gt_bpe_added_split(&r, 0, 0, len));
  size_t cut = len;
  if (!last && r.pending && r.p_start > 0) {
    cut = r.p_start; /* the last piece waits for the text after it */
  } else if (!last) { /* one piece (or none) in all: the whole text, as if it were the end */
    b->nout = 0;
    return gt_bpe_encode(b, text, len, true, ids, n, used);
  } else if (r.pending) {
    GT_CALL(gt_bpe_piece(&r, r.p_start, r.p_end, r.p_id));
  }
  *used = cut;
  if (b->nout == 0)
    return GT_SUCCESS;
  *ids = malloc(b->nout * sizeof **ids);
  GT_CHECK_ALLOC(*ids, b->nout * sizeof **ids);
  memcpy(*ids, b->out, b->nout * sizeof **ids);
  *n = b->nout;
  return GT_SUCCESS;
}

// ---- decoding --------------------------------------------------------------------------------

int gt_bpe_decode(const gt_bpe *b, const uint32_t *ids, size_t n, char **text, size_t *len)
{
  *text = NULL, *len = 0;
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += b->dec_len[ids[i]];
  char *out = malloc(total + 1);
  GT_CHECK_ALLOC(out, total + 1);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    memcpy(out + at, b->dec + b->dec_off[ids[i]], b->dec_len[ids[i]]);
    at += b->dec_len[ids[i]];
  }
  out[at] = '\0';
  *text = out, *len = at;
  return GT_SUCCESS;
}

int gt_bpe_added_id(const gt_bpe *b, const char *content)
{
  const size_t n = strlen(content);
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < b->added[pass].n; k++)
      if (b->added[pass].tok[k].len == n && memcmp(b->added[pass].tok[k].text, content, n) == 0)
        return (int)b->added[pass].tok[k].id;
  return -1;
}

// ---- GPT-2's vocab.json + merges.txt -----------------------------------------------------

/* A text of one character of the byte-to-character map. */
static bool gt_bpe_one_byte(const gt_bpe_bytemap *map, const char *s, size_t n)
{
  size_t i = 0;
  const long cp = gt_bpe_utf8_next((const unsigned char *)s, n, &i);
  return i == n && cp >= 0 && cp < 324 && map->byte[cp] >= 0;
}

/* merges.txt -> model.merges (an array of "A B"); each result "AB" into
 * `made` (an object used as a set). */
static int gt_bpe_merges_txt(const char *txt, size_t size, const char *name, json_object *merges,
                             json_object *made)
{
  size_t line = 0;
  for (size_t at = 0; at < size;) {
    const char *nl = memchr(txt + at, '\n', size - at);
    const size_t end = nl ? (size_t)(nl - txt) : size;
    size_t n = end - at;
    line++;
    if (n > 0 && txt[at + n - 1] == '\r')
      n--;
    const char *s = txt + at;
    at = end + 1;
    if (n >= 8 && memcmp(s, "#version", 8) == 0)
      continue;
    const char *sp = memchr(s, ' ', n);
    const size_t after = sp ? (size_t)(s + n - sp - 1) : 0; /* bytes after the space */
    const bool two = sp && sp > s && after > 0 && !memchr(sp + 1, ' ', after);
    GT_CHECK(two && !memchr(s, '\0', n), GT_ERR_INPUT,
             "%s: merges.txt line %zu is \"%.*s\", not two tokens \"A B\"", name, line,
             (int)(n < 60 ? n : 60), s);
    json_object *m = json_object_new_string_len(s, (int)n);
    GT_CHECK_ALLOC(m, n);
    if (json_object_array_add(merges, m) != 0) {
      json_object_put(m);
      return GT_ERROR(GT_ERR_SYSTEM, "out of memory adding a merge");
    }
    char *ab = malloc(n);
    GT_CHECK_ALLOC(ab, n);
    const size_t na = (size_t)(sp - s);
    memcpy(ab, s, na);
    memcpy(ab + na, sp + 1, n - na - 1);
    ab[n - 1] = '\0';
    const int rc = json_object_object_add(made, ab, NULL);
    free(ab);
    GT_CHECK(rc == 0, GT_ERR_SYSTEM, "out of memory adding a merge");
  }
  return GT_SUCCESS;
}

typedef struct {
  uint32_t id;
  const char *text;
} gt_bpe_special;

static int gt_bpe_special_cmp(const void *pa, const void *pb)
{
  const gt_bpe_special *a = pa, *b = pb;
  return a->id < b->id ? -1 : a->id > b->id;
}

/* Add key -> value to obj (value may be NULL: a JSON null). */
static int gt_bpe_add(json_object *obj, const char *key, json_object *value)
{
  GT_CHECK(json_object_object_add(obj, key, value) == 0, GT_ERR_SYSTEM,
           "out of memory building a tokenizer.json");
  return GT_SUCCESS;
}

/* A ByteLevel step as GPT-2's tokenizer.json writes it. */
static json_object *gt_bpe_bytelevel(bool prefix, bool trim)
{
  json_object *o = json_object_new_object();
  if (o) {
    json_object_object_add(o, "type", json_object_new_string("ByteLevel"));
    json_object_object_add(o, "add_prefix_space", json_object_new_boolean(prefix));
    json_object_object_add(o, "trim_offsets", json_object_new_boolean(trim));
    json_object_object_add(o, "use_regex", json_object_new_boolean(1));
  }
  return o;
}

/* The added tokens: entries of vocab that are neither one byte's character
 * nor made by a merge. */
static int gt_bpe_gpt2_specials(json_object *vocab, json_object *made, json_object *list)
{
  gt_bpe_bytemap map;
  gt_bpe_bytemap_init(&map);
  const int n = json_object_object_length(vocab);
  gt_bpe_special *sp = malloc((size_t)(n > 0 ? n : 1) * sizeof *sp);
  GT_CHECK_ALLOC(sp, (size_t)n * sizeof *sp);
  size_t k = 0;
  json_object_object_foreach(vocab, key, val) {
    if (gt_bpe_one_byte(&map, key, strlen(key)) || json_object_object_get_ex(made, key, NULL))
      continue;
    sp[k++] = (gt_bpe_special){(uint32_t)json_object_get_int64(val), key};
  }
  qsort(sp, k, sizeof *sp, gt_bpe_special_cmp);
  int status = GT_SUCCESS;
  for (size_t i = 0; i < k && status == GT_SUCCESS; i++) {
    json_object *t = json_object_new_object();
    if (!t || json_object_array_add(list, t) != 0) {
      json_object_put(t);
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory building a tokenizer.json");
      break;
    }
    json_object_object_add(t, "id", json_object_new_int64(sp[i].id));
    json_object_object_add(t, "content", json_object_new_string(sp[i].text));
    json_object_object_add(t, "single_word", json_object_new_boolean(0));
    json_object_object_add(t, "lstrip", json_object_new_boolean(0));
    json_object_object_add(t, "rstrip", json_object_new_boolean(0));
    json_object_object_add(t, "normalized", json_object_new_boolean(0));
    json_object_object_add(t, "special", json_object_new_boolean(1));
  }
  free(sp);
  return status;
}

static int gt_bpe_gpt2_json(json_object *root, json_object *vocab, const char *merges,
                            size_t merges_size, const char *name)
{
  json_object *model = json_object_new_object(), *list = json_object_new_array(),
              *made = json_object_new_object(), *added = json_object_new_array();
  int status = model && list && made && added ? GT_SUCCESS
                                              : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  if (status == GT_SUCCESS)
    status = gt_bpe_merges_txt(merges, merges_size, name, list, made);
  if (status == GT_SUCCESS)
    status = gt_bpe_gpt2_specials(vocab, made, added);
  json_object_put(made);
  if (status != GT_SUCCESS) {
    json_object_put(model);
    json_object_put(list);
    json_object_put(added);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  GT_CALL(gt_bpe_add(model, "type", json_object_new_string("BPE")));
  GT_CALL(gt_bpe_add(model, "dropout", NULL));
  GT_CALL(gt_bpe_add(model, "unk_token", NULL));
  GT_CALL(gt_bpe_add(model, "continuing_subword_prefix", NULL));
  GT_CALL(gt_bpe_add(model, "end_of_word_suffix", NULL));
  GT_CALL(gt_bpe_add(model, "fuse_unk", json_object_new_boolean(0)));
  GT_CALL(gt_bpe_add(model, "byte_fallback", json_object_new_boolean(0)));
  GT_CALL(gt_bpe_add(model, "vocab", json_object_get(vocab)));
  GT_CALL(gt_bpe_add(model, "merges", list));
  GT_CALL(gt_bpe_add(root, "version", json_object_new_string("1.0")));
  GT_CALL(gt_bpe_add(root, "truncation", NULL));
  GT_CALL(gt_bpe_add(root, "padding", NULL));
  GT_CALL(gt_bpe_add(root, "added_tokens", added));
  GT_CALL(gt_bpe_add(root, "normalizer", NULL));
  GT_CALL(gt_bpe_add(root, "pre_tokenizer", gt_bpe_bytelevel(false, true)));
  GT_CALL(gt_bpe_add(root, "post_processor", gt_bpe_bytelevel(true, false)));
  GT_CALL(gt_bpe_add(root, "decoder", gt_bpe_bytelevel(true, true)));
  GT_CALL(gt_bpe_add(root, "model", model));
  return GT_SUCCESS;
}

int gt_bpe_json_from_files(const char *vocab_json, size_t vocab_size, const char *merges,
                           size_t merges_size, const char *name, char **json, size_t *size)
{
  *json = NULL, *size = 0;
  char what[4200];
  snprintf(what, sizeof what, "%s: vocab.json", name);
  json_object *vocab = NULL;
  GT_CALL(gt_bpe_parse(vocab_json, vocab_size, what, &vocab));
  uint32_t max = 0;
  int status = gt_bpe_vocab_ids(vocab, "vocab.json", name, &max);
  json_object *root = json_object_new_object();
  if (status == GT_SUCCESS)
    status = root ? gt_bpe_gpt2_json(root, vocab, merges, merges_size, name)
                  : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  if (status == GT_SUCCESS) {
    size_t n = 0;
    const char *s = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    *json = s ? malloc(n) : NULL;
    if (*json) {
      memcpy(*json, s, n);
      *size = n;
    } else {
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory writing a tokenizer.json of %zu bytes", n);
    }
  }
  json_object_put(root);
  json_object_put(vocab);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ----------------------------------------------------------------------------------------------

void gt_bpe_free(gt_bpe *b)
{
  if (!b)
    return;
  free(b->dec_off);
  free(b->dec_len);
  free(b->dec);
  free(b->merges.slot);
  gt_bpe_words_free(&b->words);
  for (int i = 0; i < b->nregex; i++) {
    pcre2_match_data_free(b->md[i]);
    pcre2_code_free(b->re[i]);
  }
  pcre2_match_context_free(b->mctx);
  pcre2_jit_stack_free(b->jit);
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < b->added[pass].n; k++)
      free(b->added[pass].tok[k].text);
    free(b->added[pass].tok);
  }
  gt_bpe_words_free(&b->cache);
  free(b->cache_ids);
  free(b->sym);
  free(b->heap);
  free(b->out);
  free(b);
}
