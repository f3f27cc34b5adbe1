/*
 * safetensors.c - the safetensors writer and reader (safetensors.h). Writer:
 * the JSON header, padded to 8 bytes, then each tensor's bytes as the caller
 * fills them, into PATH.tmp, synced and renamed. Reader: the header parsed
 * with json-c and checked against the file's size, then one tensor at a time
 * with pread, converted to fp32.
 */
#include "gridtrain/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json.h>

#include "gridtrain/config.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"
#include "gridtrain/path.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian: this writer copies host bytes");

#define GT_ST_ALIGN 8
#define GT_ST_HEADER_MAX ((size_t)100 << 20) /* the Rust reader's limit */

const char *gt_safetensors_dtype(gt_dtype t)
{
  switch (t) {
  case GT_F32: return "F32";
  case GT_BF16: return "BF16";
  case GT_F16: return "F16";
  default: return NULL;
  }
}

// ---- the JSON header --------------------------------------------------------------------

typedef struct {
  char *s;
  size_t len, cap;
} gt_strbuf;

static int gt_sb_grow(gt_strbuf *b, size_t more)
{
  if (b->len + more + 1 <= b->cap)
    return GT_SUCCESS;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + more + 1)
    cap *= 2;
  char *s = realloc(b->s, cap);
  GT_CHECK_ALLOC(s, cap);
  b->s = s;
  b->cap = cap;
  return GT_SUCCESS;
}

static int gt_sb_printf(gt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int gt_sb_printf(gt_strbuf *b, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  GT_ASSERT(n >= 0);
  GT_CALL(gt_sb_grow(b, (size_t)n));
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return GT_SUCCESS;
}

/* s as a JSON string: quotes, backslashes and control characters escaped;
 * other bytes (UTF-8) as they are. */
static int gt_sb_json_string(gt_strbuf *b, const char *s)
{
  GT_CALL(gt_sb_printf(b, "\""));
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      GT_CALL(gt_sb_printf(b, "\\%c", *p));
    else if (*p < 0x20)
      GT_CALL(gt_sb_printf(b, "\\u%04x", *p));
    else
      GT_CALL(gt_sb_printf(b, "%c", *p));
  }
  GT_CALL(gt_sb_printf(b, "\""));
  return GT_SUCCESS;
}

/* Bytes of tensor t; GT_ERR_INPUT for a bad dtype or shape. */
static int gt_st_bytes(const char *path, const gt_st_tensor *t, size_t *bytes)
{
  GT_CHECK(t->name && t->name[0], GT_ERR_INPUT, "safetensors %s: a tensor without a name",
           path);
  GT_CHECK(gt_safetensors_dtype(t->dtype), GT_ERR_INPUT,
           "safetensors %s: tensor %s has the type %s; F32, BF16 and F16 are written", path,
           t->name, gt_dtype_name(t->dtype));
  GT_CHECK(t->ndim >= 0 && t->ndim <= GT_TENSOR_MAX_DIMS, GT_ERR_INPUT,
           "safetensors %s: tensor %s has %d dimensions", path, t->name, t->ndim);
  size_t n = gt_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++) {
    GT_CHECK(t->dims[d] >= 0, GT_ERR_INPUT, "safetensors %s: tensor %s has dimension %ld",
             path, t->name, t->dims[d]);
    GT_CHECK(t->dims[d] == 0 || n <= SIZE_MAX / (size_t)t->dims[d], GT_ERR_INPUT,
             "safetensors %s: tensor %s is too large", path, t->name);
    n *= (size_t)t->dims[d];
  }
  *bytes = n;
  return GT_SUCCESS;
}

/* The header (padded with spaces to make 8 + length a multiple of 8) and the
 * size of the data that follows it. */
static int gt_st_header(const char *path, int n, const gt_st_tensor *t, int nmeta,
                        const char *const meta[][2], gt_strbuf *b, size_t *data_bytes)
{
  GT_CALL(gt_sb_printf(b, "{"));
  if (nmeta > 0) {
    GT_CALL(gt_sb_printf(b, "\"__metadata__\":{"));
    for (int k = 0; k < nmeta; k++) {
      GT_CALL(gt_sb_printf(b, "%s", k ? "," : ""));
      GT_CALL(gt_sb_json_string(b, meta[k][0]));
      GT_CALL(gt_sb_printf(b, ":"));
      GT_CALL(gt_sb_json_string(b, meta[k][1]));
    }
    GT_CALL(gt_sb_printf(b, "}"));
  }
  size_t offset = 0;
  for (int i = 0; i < n; i++) {
    size_t bytes;
    GT_CALL(gt_st_bytes(path, &t[i], &bytes));
    GT_CHECK(strcmp(t[i].name, "__metadata__") != 0, GT_ERR_INPUT,
             "safetensors %s: __metadata__ is not a tensor name", path);
    for (int j = 0; j < i; j++)
      GT_CHECK(strcmp(t[i].name, t[j].name) != 0, GT_ERR_INPUT,
               "safetensors %s: tensor %s is given twice", path, t[i].name);
    GT_CALL(gt_sb_printf(b, "%s", nmeta > 0 || i ? "," : ""));
    GT_CALL(gt_sb_json_string(b, t[i].name));
    GT_CALL(gt_sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", gt_safetensors_dtype(t[i].dtype)));
    for (int d = 0; d < t[i].ndim; d++)
      GT_CALL(gt_sb_printf(b, "%s%ld", d ? "," : "", t[i].dims[d]));
    GT_CALL(gt_sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", offset, offset + bytes));
    offset += bytes;
  }
  GT_CALL(gt_sb_printf(b, "}"));
  while ((8 + b->len) % GT_ST_ALIGN != 0)
    GT_CALL(gt_sb_printf(b, " "));
  GT_CHECK(b->len <= GT_ST_HEADER_MAX, GT_ERR_INPUT,
           "safetensors %s: the header is %zu bytes; readers take at most %zu", path, b->len,
           GT_ST_HEADER_MAX);
  *data_bytes = offset;
  return GT_SUCCESS;
}

// ---- the file ---------------------------------------------------------------------------

typedef struct {
  const gt_strbuf *header;
  int n;
  const gt_st_tensor *t;
  gt_st_fill_fn fill;
  void *ctx;
} gt_st_job;

/* The whole file into the open descriptor of tmp (a gt_path_writer). */
static int gt_st_write_fd(void *arg, int fd, const char *tmp)
{
  const gt_st_job *job = arg;
  unsigned char len[8];
  for (int k = 0; k < 8; k++)
    len[k] = (unsigned char)((uint64_t)job->header->len >> (8 * k));
  GT_CALL(gt_path_write_all(fd, len, sizeof len, tmp));
  GT_CALL(gt_path_write_all(fd, job->header->s, job->header->len, tmp));
  void *buf = NULL;
  size_t cap = 0;
  int status = GT_SUCCESS;
  for (int i = 0; i < job->n && status == GT_SUCCESS; i++) {
    size_t bytes = 0;
    status = gt_st_bytes(tmp, &job->t[i], &bytes);
    if (status == GT_SUCCESS && bytes > cap) {
      void *bigger = realloc(buf, bytes);
      if (!bigger) {
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory (%zu bytes for tensor %s)", bytes,
                          job->t[i].name);
      } else {
        buf = bigger;
        cap = bytes;
      }
    }
    if (status == GT_SUCCESS)
      status = job->fill(job->ctx, i, buf, bytes);
    if (status == GT_SUCCESS)
      status = gt_path_write_all(fd, buf, bytes, tmp);
  }
  free(buf);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_safetensors_write(const char *path, int n, const gt_st_tensor *t, int nmeta,
                         const char *const meta[][2], gt_st_fill_fn fill, void *ctx,
                         size_t *total)
{
  GT_ASSERT(path && n >= 0 && nmeta >= 0 && (n == 0 || (t && fill)));
  gt_strbuf h = {0};
  size_t data_bytes = 0;
  int status = gt_st_header(path, n, t, nmeta, meta, &h, &data_bytes);
  gt_st_job job = {&h, n, t, fill, ctx};
  if (status == GT_SUCCESS)
    status = gt_path_replace(path, gt_st_write_fd, &job);
  if (status == GT_SUCCESS && total)
    *total = 8 + h.len + data_bytes;
  free(h.s);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- reading: the header ----------------------------------------------------------------

struct gt_st_file {
  char path[GT_PATH_MAX];
  int fd;
  size_t data_start, data_bytes; /* the data: bytes [data_start, data_start + data_bytes) */
  int n;
  gt_st_info *t;
  char **names;
  json_object *meta; /* __metadata__ (owned by root) */
  json_object *root;
  void *scratch;     /* a bf16/fp16 tensor's bytes */
  size_t cap;
};

/* The safetensors dtypes: name, element size, and ours (-1: not read). */
static const struct {
  const char *name;
  size_t size;
  int dtype;
} gt_st_types[] = {
    {"F32", 4, GT_F32}, {"BF16", 2, GT_BF16}, {"F16", 2, GT_F16}, {"F64", 8, -1},
    {"I64", 8, -1},     {"U64", 8, -1},       {"I32", 4, -1},     {"U32", 4, -1},
    {"I16", 2, -1},     {"U16", 2, -1},       {"I8", 1, -1},      {"U8", 1, -1},
    {"BOOL", 1, -1},    {"F8_E4M3", 1, -1},   {"F8_E5M2", 1, -1},
};

#define GT_ST_BAD(f, ...) GT_ERROR(GT_ERR_INPUT, "safetensors " f, __VA_ARGS__)

/* A JSON integer >= 0 (json-c gives int64). */
static bool gt_st_uint(json_object *o, uint64_t *v)
{
  if (!o || !json_object_is_type(o, json_type_int))
    return false;
  const int64_t x = json_object_get_int64(o);
  if (x < 0)
    return false;
  *v = (uint64_t)x;
  return true;
}

static int gt_st_entry(gt_st_file *f, const char *name, json_object *o, gt_st_info *t)
{
  const char *p = f->path;
  GT_CHECK(json_object_is_type(o, json_type_object), GT_ERR_INPUT,
           "safetensors %s: tensor %s: its entry is not a JSON object", p, name);
  json_object *dt = NULL, *shape = NULL, *off = NULL;
  GT_CHECK(json_object_object_get_ex(o, "dtype", &dt) && json_object_is_type(dt, json_type_string),
           GT_ERR_INPUT, "safetensors %s: tensor %s: no \"dtype\" string", p, name);
  GT_CHECK(json_object_object_get_ex(o, "shape", &shape) &&
               json_object_is_type(shape, json_type_array),
           GT_ERR_INPUT, "safetensors %s: tensor %s: no \"shape\" array", p, name);
  GT_CHECK(json_object_object_get_ex(o, "data_offsets", &off) &&
               json_object_is_type(off, json_type_array) && json_object_array_length(off) == 2,
           GT_ERR_INPUT, "safetensors %s: tensor %s: no \"data_offsets\" pair", p, name);
  const char *type = json_object_get_string(dt);
  size_t size = 0;
  t->dtype = -1;
  t->type_name = NULL;
  for (size_t k = 0; k < sizeof gt_st_types / sizeof gt_st_types[0]; k++)
    if (strcmp(type, gt_st_types[k].name) == 0) {
      size = gt_st_types[k].size;
      t->dtype = gt_st_types[k].dtype;
      t->type_name = gt_st_types[k].name;
    }
  GT_CHECK(t->type_name, GT_ERR_INPUT, "safetensors %s: tensor %s: unknown dtype \"%.32s\"", p,
           name, type);
  const size_t nd = json_object_array_length(shape);
  GT_CHECK(nd <= GT_TENSOR_MAX_DIMS, GT_ERR_INPUT,
           "safetensors %s: tensor %s: %zu dimensions; at most %d are read", p, name, nd,
           GT_TENSOR_MAX_DIMS);
  t->ndim = (int)nd;
  size_t numel = 1;
  for (size_t d = 0; d < nd; d++) {
    uint64_t v;
    GT_CHECK(gt_st_uint(json_object_array_get_idx(shape, d), &v) && v <= (uint64_t)LONG_MAX,
             GT_ERR_INPUT, "safetensors %s: tensor %s: shape[%zu] is not a non-negative integer",
             p, name, d);
    GT_CHECK(v == 0 || numel <= SIZE_MAX / 8 / v, GT_ERR_INPUT,
             "safetensors %s: tensor %s: the shape is too large", p, name);
    t->dims[d] = (long)v;
    numel *= (size_t)v;
  }
  uint64_t b, e;
  GT_CHECK(gt_st_uint(json_object_array_get_idx(off, 0), &b) &&
               gt_st_uint(json_object_array_get_idx(off, 1), &e) && b <= e,
           GT_ERR_INPUT, "safetensors %s: tensor %s: data_offsets are not [begin, end] with "
           "0 <= begin <= end", p, name);
  GT_CHECK(e <= f->data_bytes, GT_ERR_INPUT,
           "safetensors %s: tensor %s: data_offsets [%llu, %llu) end past the data (%zu bytes); "
           "the file is cut short or damaged", p, name, (unsigned long long)b,
           (unsigned long long)e, f->data_bytes);
  GT_CHECK(e - b == numel * size, GT_ERR_INPUT,
           "safetensors %s: tensor %s: data_offsets hold %llu bytes but its %s shape needs %zu", p,
           name, (unsigned long long)(e - b), t->type_name, numel * size);
  t->numel = numel;
  t->bytes = (size_t)(e - b);
  t->offset = f->data_start + (size_t)b;
  return GT_SUCCESS;
}

static int gt_st_cmp_offset(const void *a, const void *b)
{
  const gt_st_info *x = *(const gt_st_info *const *)a, *y = *(const gt_st_info *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Ranges sorted by their start; each starts at or after the previous end
 * (empty tensors take no bytes and overlap nothing). */
static int gt_st_no_overlap(gt_st_file *f)
{
  const gt_st_info **order = malloc(sizeof *order * ((size_t)f->n + 1));
  GT_CHECK_ALLOC(order, sizeof *order * ((size_t)f->n + 1));
  int m = 0;
  for (int i = 0; i < f->n; i++)
    if (f->t[i].bytes > 0)
      order[m++] = &f->t[i];
  qsort(order, (size_t)m, sizeof *order, gt_st_cmp_offset);
  int status = GT_SUCCESS;
  for (int i = 1; i < m && status == GT_SUCCESS; i++)
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->bytes)
      status = GT_ST_BAD("%s: tensors %s and %s overlap in the data; the file is damaged",
                         f->path, order[i - 1]->name, order[i]->name);
  free(order);
  GT_CALL(status);
  return GT_SUCCESS;
}

static int gt_st_parse(gt_st_file *f, const char *text, size_t len)
{
  json_tokener *tk = json_tokener_new();
  GT_CHECK_ALLOC(tk, sizeof(void *));
  json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
  /* the header may be padded with spaces after the object */
  size_t end = len;
  while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\0'))
    end--;
  f->root = end > 0 ? json_tokener_parse_ex(tk, text, (int)end) : NULL;
  const enum json_tokener_error err = json_tokener_get_error(tk);
  const size_t used = json_tokener_get_parse_end(tk);
  json_tokener_free(tk);
  GT_CHECK(f->root && err == json_tokener_success && used == end, GT_ERR_INPUT,
           "safetensors %s: the header is not JSON (%s); the file is damaged or not a "
           "safetensors file", f->path,
           !f->root && err == json_tokener_success ? "empty"
           : err == json_tokener_continue ? "it ends inside a value"
           : err != json_tokener_success  ? json_tokener_error_desc(err)
                                          : "text after the object");
  GT_CHECK(json_object_is_type(f->root, json_type_object), GT_ERR_INPUT,
           "safetensors %s: the header is not a JSON object", f->path);
  const int entries = json_object_object_length(f->root);
  f->t = calloc((size_t)entries + 1, sizeof *f->t);
  GT_CHECK_ALLOC(f->t, sizeof *f->t * ((size_t)entries + 1));
  json_object_object_foreach(f->root, key, val) {
    if (strcmp(key, "__metadata__") == 0) {
      GT_CHECK(json_object_is_type(val, json_type_object), GT_ERR_INPUT,
               "safetensors %s: __metadata__ is not a JSON object", f->path);
      json_object_object_foreach(val, mk, mv) {
        GT_CHECK(json_object_is_type(mv, json_type_string), GT_ERR_INPUT,
                 "safetensors %s: __metadata__ %s is not a string", f->path, mk);
      }
      f->meta = val;
      continue;
    }
    gt_st_info *t = &f->t[f->n];
    t->name = key; /* json-c keeps the keys while root lives */
    GT_CALL(gt_st_entry(f, key, val, t));
    f->n++;
  }
  GT_CALL(gt_st_no_overlap(f));
  return GT_SUCCESS;
}

static int gt_st_open_in(const char *path, gt_st_file *f)
{
  const int n = snprintf(f->path, sizeof f->path, "%s", path);
  GT_CHECK(n > 0 && (size_t)n < sizeof f->path, GT_ERR_INPUT, "the path '%s' is too long",
           path);
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  GT_CHECK(f->fd >= 0, GT_ERR_INPUT, "cannot open the safetensors file %s: %s", path,
           strerror(errno));
  struct stat sb;
  GT_CHECK(fstat(f->fd, &sb) == 0 && S_ISREG(sb.st_mode), GT_ERR_INPUT,
           "safetensors %s is not a regular file", path);
  const size_t size = (size_t)sb.st_size;
  unsigned char len8[8];
  GT_CHECK(size >= 8 && pread(f->fd, len8, 8, 0) == 8, GT_ERR_INPUT,
           "safetensors %s: %zu bytes, shorter than its header length; the file is damaged",
           path, size);
  uint64_t hlen = 0;
  for (int k = 0; k < 8; k++)
    hlen |= (uint64_t)len8[k] << (8 * k);
  GT_CHECK(hlen <= GT_ST_HEADER_MAX && hlen <= size - 8, GT_ERR_INPUT,
           "safetensors %s: the header length %llu is past %s (%zu bytes); the file is damaged "
           "or not a safetensors file", path, (unsigned long long)hlen,
           hlen > GT_ST_HEADER_MAX ? "the 100 MiB limit" : "the file's end", size);
  char *text = malloc((size_t)hlen + 1);
  GT_CHECK_ALLOC(text, (size_t)hlen + 1);
  const ssize_t got = pread(f->fd, text, (size_t)hlen, 8);
  int status = got == (ssize_t)hlen
                   ? GT_SUCCESS
                   : GT_ST_BAD("%s: cannot read its %llu-byte header", path,
                               (unsigned long long)hlen);
  f->data_start = 8 + (size_t)hlen;
  f->data_bytes = size - f->data_start;
  if (status == GT_SUCCESS)
    status = gt_st_parse(f, text, (size_t)hlen);
  free(text);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_safetensors_open(const char *path, gt_st_file **out)
{
  *out = NULL;
  gt_st_file *f = calloc(1, sizeof *f);
  GT_CHECK_ALLOC(f, sizeof *f);
  f->fd = -1;
  const int status = gt_st_open_in(path, f);
  if (status != GT_SUCCESS) {
    gt_safetensors_close(&f);
    return status;
  }
  *out = f;
  return GT_SUCCESS;
}

int gt_safetensors_count(const gt_st_file *f) { return f->n; }

const gt_st_info *gt_safetensors_info(const gt_st_file *f, int i)
{
  return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

int gt_safetensors_find(const gt_st_file *f, const char *name)
{
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0)
      return i;
  return -1;
}

const char *gt_safetensors_meta(const gt_st_file *f, const char *key)
{
  json_object *v = NULL;
  return f->meta && json_object_object_get_ex(f->meta, key, &v) ? json_object_get_string(v)
                                                                 : NULL;
}

// ---- reading: the data ------------------------------------------------------------------

static int gt_st_pread(gt_st_file *f, const gt_st_info *t, void *buf)
{
  size_t done = 0;
  while (done < t->bytes) {
    const ssize_t got = pread(f->fd, (char *)buf + done, t->bytes - done,
                              (off_t)(t->offset + done));
    if (got < 0 && errno == EINTR)
      continue;
    GT_CHECK(got >= 0, GT_ERR_SYSTEM, "safetensors %s: reading tensor %s failed: %s", f->path,
             t->name, strerror(errno));
    GT_CHECK(got > 0, GT_ERR_INPUT,
             "safetensors %s: tensor %s is cut short (the file changed while it was read)",
             f->path, t->name);
    done += (size_t)got;
  }
  return GT_SUCCESS;
}

int gt_safetensors_read_f32(gt_st_file *f, int i, float *out)
{
  GT_ASSERT(f && i >= 0 && i < f->n && (out || f->t[i].numel == 0));
  const gt_st_info *t = &f->t[i];
  GT_CHECK(t->dtype >= 0, GT_ERR_INPUT,
           "safetensors %s: tensor %s is %s; only F32, BF16 and F16 tensors are read", f->path,
           t->name, t->type_name);
  if (t->dtype == GT_F32) {
    GT_CALL(gt_st_pread(f, t, out));
    return GT_SUCCESS;
  }
  if (t->bytes > f->cap) {
    void *p = realloc(f->scratch, t->bytes);
    GT_CHECK_ALLOC(p, t->bytes);
    f->scratch = p;
    f->cap = t->bytes;
  }
  GT_CALL(gt_st_pread(f, t, f->scratch));
  gt_to_f32((gt_dtype)t->dtype, out, f->scratch, t->numel);
  return GT_SUCCESS;
}

void gt_safetensors_close(gt_st_file **f)
{
  if (!f || !*f)
    return;
  if ((*f)->fd >= 0)
    close((*f)->fd);
  json_object_put((*f)->root);
  free((*f)->t);
  free((*f)->scratch);
  free(*f);
  *f = NULL;
}
