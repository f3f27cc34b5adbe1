/*
 * ckpt_local.c - the node-local tier's files: a part (header, block
 * checksums, payload), its write through a temporary name, its verified
 * read, the done markers and the listing of a local directory
 * (gridtrain/ckpt_local.h).
 */
#include "gridtrain/ckpt_local.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "gridtrain/error.h"
#include "gridtrain/path.h"

#define GT_LOCAL_BLOCK_FLOATS (GT_LOCAL_BLOCK_BYTES / sizeof(float))

uint64_t gt_local_payload_len(const gt_local_header *h)
{
  return (h->vhi - h->vlo) + 2 * (h->mhi - h->mlo) + h->rank_n;
}

int gt_local_step_dir(const char *dir, long step, char *out, size_t size)
{
  const int n = snprintf(out, size, "%s/step_%08ld", dir, step);
  GT_CHECK(n > 0 && (size_t)n < size, GT_ERR_INPUT, "[checkpoint] local_dir %s: path too long",
           dir);
  return GT_SUCCESS;
}

int gt_local_part_path(const char *dir, long step, gt_local_kind kind, int owner, char *out,
                       size_t size)
{
  const int n = snprintf(out, size, "%s/step_%08ld/%s_%05d.gtl", dir, step,
                         kind == GT_LOCAL_OWN ? "own" : "partner", owner);
  GT_CHECK(n > 0 && (size_t)n < size, GT_ERR_INPUT, "[checkpoint] local_dir %s: path too long",
           dir);
  return GT_SUCCESS;
}

// ---- checksums ------------------------------------------------------------------------------

/* Fletcher-32 of n bytes (a multiple of 4: the header, the sums table). */
static uint32_t gt_local_sum_bytes(const void *p, size_t n)
{
  uint64_t sum[2] = {0, 0};
  gt_fletcher_add(sum, n / sizeof(float), (const float *)p, 0, n / sizeof(float));
  return gt_fletcher_value(sum);
}

static uint32_t gt_local_header_sum(const gt_local_header *h)
{
  gt_local_header c = *h;
  c.header_sum = 0;
  return gt_local_sum_bytes(&c, sizeof c);
}

static uint32_t gt_local_block_sum(const float *payload, uint64_t total, uint64_t b)
{
  const uint64_t lo = b * GT_LOCAL_BLOCK_FLOATS;
  const uint64_t len = total - lo < GT_LOCAL_BLOCK_FLOATS ? total - lo : GT_LOCAL_BLOCK_FLOATS;
  uint64_t sum[2] = {0, 0};
  gt_fletcher_add(sum, len, payload + lo, 0, len);
  return gt_fletcher_value(sum);
}

_Static_assert(sizeof(gt_local_header) % sizeof(float) == 0, "header of whole words");
_Static_assert(sizeof(gt_local_param) % sizeof(float) == 0, "table of whole words");

// ---- write ----------------------------------------------------------------------------------

typedef struct {
  const gt_local_header *h;
  const gt_local_param *table;
  const uint32_t *sums;
  const float *payload;
} gt_local_writing;

static int gt_local_write_fd(void *ctx, int fd, const char *tmp)
{
  const gt_local_writing *w = ctx;
  GT_CALL(gt_path_write_all(fd, w->h, sizeof *w->h, tmp));
  GT_CALL(gt_path_write_all(fd, w->table, w->h->nparams * sizeof *w->table, tmp));
  GT_CALL(gt_path_write_all(fd, w->sums, w->h->nblocks * sizeof(uint32_t), tmp));
  GT_CALL(gt_path_write_all(fd, w->payload, w->h->payload * sizeof(float), tmp));
  return GT_SUCCESS;
}

int gt_local_part_write(const char *path, gt_local_header *h, const gt_local_param *table,
                        const float *payload)
{
  memcpy(h->magic, GT_LOCAL_MAGIC, sizeof h->magic);
  h->version = GT_LOCAL_FORMAT;
  h->header_bytes = sizeof *h;
  h->payload = gt_local_payload_len(h);
  h->nblocks = (h->payload + GT_LOCAL_BLOCK_FLOATS - 1) / GT_LOCAL_BLOCK_FLOATS;
  uint32_t *sums = malloc((h->nblocks + 1) * sizeof *sums);
  GT_CHECK_ALLOC(sums, (h->nblocks + 1) * sizeof *sums);
  for (uint64_t b = 0; b < h->nblocks; b++)
    sums[b] = gt_local_block_sum(payload, h->payload, b);
  h->sums_sum = gt_local_sum_bytes(sums, h->nblocks * sizeof *sums);
  h->table_sum = gt_local_sum_bytes(table, h->nparams * sizeof *table);
  h->header_sum = gt_local_header_sum(h);
  gt_local_writing w = {h, table, sums, payload};
  const int status = gt_path_replace(path, gt_local_write_fd, &w);
  free(sums);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- read -----------------------------------------------------------------------------------

/* Read n bytes at offset off of fd (the header). */
static int gt_local_pread(int fd, void *buf, size_t n, off_t off, const char *path)
{
  size_t done = 0;
  while (done < n) {
    const size_t want = n - done < ((size_t)1 << 30) ? n - done : ((size_t)1 << 30);
    const ssize_t r = pread(fd, (char *)buf + done, want, off + (off_t)done);
    if (r < 0 && errno == EINTR)
      continue;
    GT_CHECK(r >= 0, GT_ERR_INPUT, "node-local part %s: read failed: %s", path,
             strerror(errno));
    GT_CHECK(r > 0, GT_ERR_INPUT, "node-local part %s is truncated (%zu bytes at %lld missing)",
             path, n - done, (long long)(off + (off_t)done));
    done += (size_t)r;
  }
  return GT_SUCCESS;
}

int gt_local_part_header(const char *path, gt_local_header *h)
{
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  GT_CHECK(fd >= 0, GT_ERR_INPUT, "cannot open node-local part %s: %s", path, strerror(errno));
  const int status = gt_local_pread(fd, h, sizeof *h, 0, path);
  close(fd);
  GT_CALL(status);
  GT_CHECK(memcmp(h->magic, GT_LOCAL_MAGIC, sizeof h->magic) == 0 &&
               h->version == GT_LOCAL_FORMAT && h->header_bytes == sizeof *h,
           GT_ERR_INPUT, "%s is not a node-local part of format %d", path, GT_LOCAL_FORMAT);
  const uint32_t have = gt_local_header_sum(h);
  GT_CHECK(have == h->header_sum, GT_ERR_INPUT,
           "node-local part %s is damaged: the checksum of its header fails (Fletcher-32 %08x, "
           "stored %08x)",
           path, (unsigned)have, (unsigned)h->header_sum);
  GT_CHECK(h->nparams < (1u << 20) && h->payload == gt_local_payload_len(h) &&
               h->nblocks == (h->payload + GT_LOCAL_BLOCK_FLOATS - 1) / GT_LOCAL_BLOCK_FLOATS,
           GT_ERR_INPUT, "node-local part %s is damaged: its header does not add up", path);
  return GT_SUCCESS;
}

int gt_local_part_table(const char *path, const gt_local_header *h, gt_local_param *table)
{
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  GT_CHECK(fd >= 0, GT_ERR_INPUT, "cannot open node-local part %s: %s", path, strerror(errno));
  const size_t n = h->nparams * sizeof *table;
  const int status = gt_local_pread(fd, table, n, (off_t)sizeof *h, path);
  close(fd);
  GT_CALL(status);
  GT_CHECK(gt_local_sum_bytes(table, n) == h->table_sum, GT_ERR_INPUT,
           "node-local part %s is damaged: the checksum of its parameter table fails", path);
  return GT_SUCCESS;
}

int gt_local_part_map(const char *path, const gt_local_header *h, const float **payload,
                      gt_local_map *map, double *bytes)
{
  *bytes = 0;
  *payload = NULL;
  map->addr = NULL;
  map->len = 0;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  GT_CHECK(fd >= 0, GT_ERR_INPUT, "cannot open node-local part %s: %s", path, strerror(errno));
  struct stat sb;
  const size_t nsums = h->nblocks * sizeof(uint32_t), data = h->payload * sizeof(float);
  const size_t ntab = h->nparams * sizeof(gt_local_param);
  const size_t expect = sizeof *h + ntab + nsums + data;
  int status = GT_SUCCESS;
  if (fstat(fd, &sb) != 0)
    status = GT_ERROR(GT_ERR_SYSTEM, "cannot stat %s: %s", path, strerror(errno));
  else if ((size_t)sb.st_size != expect)
    status = GT_ERROR(GT_ERR_INPUT,
                      "node-local part %s has %lld bytes where its header says %zu", path,
                      (long long)sb.st_size, expect);
  void *addr = MAP_FAILED;
  if (status == GT_SUCCESS) {
    addr = mmap(NULL, expect, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (addr == MAP_FAILED)
      status = GT_ERROR(GT_ERR_SYSTEM, "cannot map %s: %s", path, strerror(errno));
  }
  close(fd);
  GT_CALL(status);
  const uint32_t *sums = (const uint32_t *)((const char *)addr + sizeof *h + ntab);
  const float *pay = (const float *)((const char *)addr + sizeof *h + ntab + nsums);
  if (memcmp(addr, h, sizeof *h) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "node-local part %s changed while it was read", path);
  else if (gt_local_sum_bytes(sums, nsums) != h->sums_sum)
    status = GT_ERROR(GT_ERR_INPUT,
                      "node-local part %s is damaged: the checksum of its block table fails",
                      path);
  for (uint64_t b = 0; status == GT_SUCCESS && b < h->nblocks; b++) {
    const uint32_t have = gt_local_block_sum(pay, h->payload, b);
    if (have != sums[b]) {
      const uint64_t lo = sizeof *h + ntab + nsums + b * GT_LOCAL_BLOCK_BYTES;
      const uint64_t len = b + 1 < h->nblocks ? GT_LOCAL_BLOCK_BYTES
                                              : data - b * GT_LOCAL_BLOCK_BYTES;
      status = GT_ERROR(GT_ERR_INPUT,
                        "node-local part %s is damaged: the checksum of its bytes %llu-%llu "
                        "(block %llu of %llu) fails (Fletcher-32 %08x, stored %08x)",
                        path, (unsigned long long)lo, (unsigned long long)(lo + len - 1),
                        (unsigned long long)b + 1, (unsigned long long)h->nblocks,
                        (unsigned)have, (unsigned)sums[b]);
    }
  }
  if (status != GT_SUCCESS) {
    munmap(addr, expect);
    GT_CALL(status);
  }
  map->addr = addr;
  map->len = expect;
  *payload = pay;
  *bytes = (double)expect;
  return GT_SUCCESS;
}

void gt_local_part_unmap(gt_local_map *map)
{
  if (map->addr)
    munmap(map->addr, map->len);
  map->addr = NULL;
  map->len = 0;
}

// ---- markers and listing --------------------------------------------------------------------

int gt_local_mark(const char *dir, long step, int rank)
{
  char path[GT_PATH_MAX + 64];
  const int n = snprintf(path, sizeof path, "%s/step_%08ld/done_%05d", dir, step, rank);
  GT_CHECK(n > 0 && (size_t)n < sizeof path, GT_ERR_INPUT,
           "[checkpoint] local_dir %s: path too long", dir);
  char line[64];
  const int len = snprintf(line, sizeof line, "%ld\n", step);
  GT_CALL(gt_path_replace_bytes(path, line, (size_t)len));
  return GT_SUCCESS;
}

static int gt_local_cmp_desc(const void *a, const void *b)
{
  const long x = *(const long *)a, y = *(const long *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Does DIR/NAME (a step directory) hold a done_ marker? */
static bool gt_local_has_marker(const char *dir, const char *name)
{
  char path[GT_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  DIR *d = opendir(path);
  if (!d)
    return false;
  bool found = false;
  for (struct dirent *e; !found && (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    found = strncmp(e->d_name, "done_", 5) == 0 && len > 5 &&
            strstr(e->d_name, ".tmp") == NULL;
  }
  closedir(d);
  return found;
}

/* The steps of the step_N directories of dir (all, or with a marker). */
static int gt_local_list_steps(const char *dir, bool marked, long **steps, int *n)
{
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return GT_SUCCESS; /* no directory: no state */
  int cap = 0;
  int status = GT_SUCCESS;
  for (struct dirent *e; status == GT_SUCCESS && (e = readdir(d));) {
    long step;
    char tail;
    if (sscanf(e->d_name, "step_%ld%c", &step, &tail) != 1 || step < 0)
      continue;
    if (marked && !gt_local_has_marker(dir, e->d_name))
      continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      long *more = realloc(*steps, (size_t)cap * sizeof *more);
      if (!more) {
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
        break;
      }
      *steps = more;
    }
    (*steps)[(*n)++] = step;
  }
  closedir(d);
  if (status != GT_SUCCESS) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    GT_CALL(status);
  }
  if (*n > 1)
    qsort(*steps, (size_t)*n, sizeof **steps, gt_local_cmp_desc);
  return GT_SUCCESS;
}

int gt_local_steps(const char *dir, long **steps, int *n)
{
  GT_CALL(gt_local_list_steps(dir, true, steps, n));
  return GT_SUCCESS;
}

int gt_local_all_steps(const char *dir, long **steps, int *n)
{
  GT_CALL(gt_local_list_steps(dir, false, steps, n));
  return GT_SUCCESS;
}

int gt_local_parts(const char *dir, long step, int **owners, gt_local_kind **kinds, int *n)
{
  *owners = NULL;
  *kinds = NULL;
  *n = 0;
  char path[GT_PATH_MAX + 32];
  GT_CALL(gt_local_step_dir(dir, step, path, sizeof path));
  DIR *d = opendir(path);
  if (!d)
    return GT_SUCCESS;
  int cap = 0, status = GT_SUCCESS;
  for (struct dirent *e; (e = readdir(d));) {
    int owner, len = 0;
    gt_local_kind kind;
    if (sscanf(e->d_name, "own_%d.gtl%n", &owner, &len) == 1 && e->d_name[len] == '\0')
      kind = GT_LOCAL_OWN;
    else if (sscanf(e->d_name, "partner_%d.gtl%n", &owner, &len) == 1 && e->d_name[len] == '\0')
      kind = GT_LOCAL_PARTNER;
    else
      continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      int *o = realloc(*owners, (size_t)cap * sizeof *o);
      if (o)
        *owners = o;
      gt_local_kind *k = o ? realloc(*kinds, (size_t)cap * sizeof *k) : NULL;
      if (!k) {
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
        break;
      }
      *kinds = k;
    }
    (*owners)[*n] = owner;
    (*kinds)[(*n)++] = kind;
  }
  closedir(d);
  if (status != GT_SUCCESS) {
    free(*owners);
    free(*kinds);
    *owners = NULL;
    *kinds = NULL;
    *n = 0;
    GT_CALL(status);
  }
  return GT_SUCCESS;
}

int gt_local_remove(const char *dir, long step)
{
  char path[GT_PATH_MAX + 32], file[GT_PATH_MAX + 320];
  GT_CALL(gt_local_step_dir(dir, step, path, sizeof path));
  DIR *d = opendir(path);
  if (!d && errno == ENOENT)
    return GT_SUCCESS;
  GT_CHECK(d != NULL, GT_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
  int status = GT_SUCCESS;
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    if (unlink(file) != 0 && errno != ENOENT && status == GT_SUCCESS)
      status = GT_ERROR(GT_ERR_SYSTEM, "cannot delete %s: %s", file, strerror(errno));
  }
  closedir(d);
  if (status == GT_SUCCESS && rmdir(path) != 0 && errno != ENOENT)
    status = GT_ERROR(GT_ERR_SYSTEM, "cannot delete %s: %s", path, strerror(errno));
  GT_CALL(status);
  return GT_SUCCESS;
}
