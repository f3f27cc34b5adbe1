/*
 * safetensors.c - the safetensors writer (safetensors.h): the JSON header,
 * padded to 8 bytes, then each tensor's bytes as the caller fills them, into
 * PATH.tmp, synced and renamed.
 */
#include "gridtrain/safetensors.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
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
