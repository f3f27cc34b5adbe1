/*
 * fuzz_util.c - set-up, scratch directories, the property check, the input
 * reader and the HDF5 edits the fuzz harnesses share (fuzz_util.h).
 */
#define _GNU_SOURCE
#include "fuzz_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"

#define GT_FUZZ_DIRS_MAX 8

static char gt_fuzz_dirs[GT_FUZZ_DIRS_MAX][256];
static int gt_fuzz_ndirs;

/* Memory that MPI, HDF5 and the BLAS keep for the life of the process is
 * not ours to free: LeakSanitizer (libFuzzer's leak check) ignores it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
  return "leak:libmpi\nleak:libhdf5\nleak:libopenblas\nleak:libgomp\nleak:libcuda\n"
         "leak:libcudart\nleak:libnccl\nleak:libdnnl\nleak:libhwloc\nleak:libucs\n";
}

/* A damaged file can make HDF5 ask for an absurd amount of memory, which
 * outside the sanitizers is a failed malloc that HDF5 reports as an error:
 * let ASan return NULL as well (libFuzzer's -malloc_limit_mb still reports
 * allocations above its limit that succeed). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

// ---- set-up and scratch directories ----------------------------------------------

static int gt_fuzz_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
  (void)sb, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

void gt_fuzz_remove(const char *path)
{
  struct stat sb;
  if (lstat(path, &sb) != 0)
    return;
  if (S_ISDIR(sb.st_mode))
    nftw(path, gt_fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
  else
    unlink(path);
}

static void gt_fuzz_atexit(void)
{
  for (int i = 0; i < gt_fuzz_ndirs; i++)
    gt_fuzz_remove(gt_fuzz_dirs[i]);
  int init = 0, done = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&done);
  if (init && !done)
    MPI_Finalize();
}

void gt_fuzz_setup(void)
{
  static bool once;
  if (once)
    return;
  once = true;
  unsetenv("GT_FAULT"); /* no test faults: a kill switch would end the fuzzer */
  int init = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&init);
  if (!init && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "fuzz: MPI_Init_thread failed\n");
    abort();
  }
  if (init)
    MPI_Query_thread(&provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  gt_log_init(0);
  gt_comm_set_threads(provided);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  atexit(gt_fuzz_atexit);
}

void gt_fuzz_tmpdir(const char *name, char *dir, size_t size)
{
  const char *roots[2] = {"/dev/shm", "/tmp"};
  for (int i = 0; i < 2; i++) {
    snprintf(dir, size, "%s/gt_fuzz_%s.XXXXXX", roots[i], name);
    if (mkdtemp(dir)) {
      if (gt_fuzz_ndirs < GT_FUZZ_DIRS_MAX)
        snprintf(gt_fuzz_dirs[gt_fuzz_ndirs++], sizeof gt_fuzz_dirs[0], "%s", dir);
      return;
    }
  }
  fprintf(stderr, "fuzz: cannot make a scratch directory\n");
  abort();
}

bool gt_fuzz_write(const char *path, const void *data, size_t size)
{
  FILE *f = fopen(path, "wb");
  if (!f)
    return false;
  bool ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok;
}

void gt_fuzz_write_seeds(const char *dir, const gt_fuzz_seed *seeds, size_t n)
{
  char path[512];
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, seeds[i].name);
    gt_fuzz_write(path, seeds[i].bytes, seeds[i].n);
  }
}

void gt_fuzz_write_raw_seed(const char *dir, const char *name, const uint8_t *head,
                            size_t hsize, const uint8_t *file, size_t fsize)
{
  char path[512];
  uint8_t *buf = malloc(hsize + fsize);
  if (!buf)
    return;
  memcpy(buf, head, hsize);
  memcpy(buf + hsize, file, fsize);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  gt_fuzz_write(path, buf, hsize + fsize);
  free(buf);
}

uint8_t *gt_fuzz_read(const char *path, size_t *size)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  uint8_t *buf = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
      fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *size = buf ? (size_t)n : 0;
  return buf;
}

/* Where the harnesses report: stderr as it was before gt_fuzz_quiet. */
static FILE *gt_fuzz_log_file;

FILE *gt_fuzz_log(void) { return gt_fuzz_log_file ? gt_fuzz_log_file : stderr; }

void gt_fuzz_quiet(void)
{
  if (getenv("GT_FUZZ_VERBOSE") || gt_fuzz_log_file)
    return;
  fflush(stdout);
  fflush(stderr);
  gt_fuzz_log_file = stderr;
  FILE *devnull = fopen("/dev/null", "w");
  if (!devnull || !freopen("/dev/null", "w", stdout))
    return;
  stderr = devnull;
}

void gt_fuzz_expect_codes(const char *harness, const char *call, int status,
                          unsigned allowed)
{
  if (status == GT_SUCCESS)
    return;
  const char *msg = gt_error_message();
  if (status > 0 && status < 32 && (allowed & 1u << status) && msg[0] != '\0')
    return;
  fprintf(gt_fuzz_log(), "fuzz_%s: %s returned %d (%s) with message '%s' [at %s]\n", harness,
          call, status, gt_error_name(status), msg, gt_error_origin());
  abort();
}

void gt_fuzz_expect(const char *harness, const char *call, int status)
{
  gt_fuzz_expect_codes(harness, call, status, 1u << GT_ERR_INPUT | 1u << GT_ERR_HDF5);
}

static const H5I_type_t gt_fuzz_kinds[4] = {H5I_DATASPACE, H5I_DATATYPE, H5I_GENPROP_LST,
                                             H5I_ATTR};
static hsize_t gt_fuzz_open[4];

void gt_fuzz_baseline(void)
{
  for (int k = 0; k < 4; k++)
    H5Inmembers(gt_fuzz_kinds[k], &gt_fuzz_open[k]);
}

void gt_fuzz_expect_closed(const char *harness)
{
  for (int k = 0; k < 4; k++) {
    hsize_t now = 0;
    H5Inmembers(gt_fuzz_kinds[k], &now);
    if (now > gt_fuzz_open[k]) {
      fprintf(gt_fuzz_log(), "fuzz_%s: %llu HDF5 objects of type %d left open after the input\n",
              harness, (unsigned long long)(now - gt_fuzz_open[k]), (int)gt_fuzz_kinds[k]);
      abort();
    }
  }
  const ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (n <= 0)
    return;
  hid_t ids[16];
  const ssize_t listed = H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_ALL, 16, ids);
  fprintf(gt_fuzz_log(), "fuzz_%s: %zd HDF5 objects left open after the input:", harness, n);
  for (ssize_t i = 0; i < listed; i++) {
    char name[256] = "?";
    H5Iget_name(ids[i], name, sizeof name);
    fprintf(gt_fuzz_log(), " %s (type %d)", name, (int)H5Iget_type(ids[i]));
  }
  fprintf(gt_fuzz_log(), "\n");
  abort();
}

// ---- the input ------------------------------------------------------------------

uint8_t gt_fuzz_u8(gt_fuzz_in *in) { return in->at < in->n ? in->p[in->at++] : 0; }

uint16_t gt_fuzz_u16(gt_fuzz_in *in)
{
  uint16_t lo = gt_fuzz_u8(in);
  return (uint16_t)(lo | (uint16_t)gt_fuzz_u8(in) << 8);
}

uint32_t gt_fuzz_u32(gt_fuzz_in *in)
{
  uint32_t lo = gt_fuzz_u16(in);
  return lo | (uint32_t)gt_fuzz_u16(in) << 16;
}

uint64_t gt_fuzz_u64(gt_fuzz_in *in)
{
  uint64_t lo = gt_fuzz_u32(in);
  return lo | (uint64_t)gt_fuzz_u32(in) << 32;
}

bool gt_fuzz_more(const gt_fuzz_in *in) { return in->at < in->n; }

// ---- edits through the HDF5 API ------------------------------------------------------

/* Open path (a group, a dataset, or "/") as an object; invalid when missing. */
static hid_t gt_fuzz_h5_open(hid_t file, const char *path)
{
  hid_t obj = H5Oopen(file, path, H5P_DEFAULT);
  if (obj < 0)
    H5Eclear2(H5E_DEFAULT);
  return obj;
}

void gt_fuzz_h5_del_attr(hid_t file, const char *obj, const char *name)
{
  hid_t o = gt_fuzz_h5_open(file, obj);
  if (o < 0)
    return;
  H5Adelete(o, name);
  H5Oclose(o);
  H5Eclear2(H5E_DEFAULT);
}

void gt_fuzz_h5_set_attr(hid_t file, const char *obj, const char *name, unsigned kind,
                         uint64_t value)
{
  hid_t o = gt_fuzz_h5_open(file, obj);
  if (o < 0)
    return;
  if (H5Aexists(o, name) > 0)
    H5Adelete(o, name);
  hid_t type = H5I_INVALID_HID, mtype, space;
  hsize_t dims[2] = {1 + value % 6, 2};
  const char *text = (const char *)&value;
  char fixed[9] = {0};
  memcpy(fixed, &value, 8);
  const void *buf = &value;
  switch (kind % 8) {
  case 0:
    type = H5Tcopy(H5T_STD_I64LE);
    mtype = H5T_NATIVE_LLONG;
    space = H5Screate(H5S_SCALAR);
    break;
  case 1:
    type = H5Tcopy(H5T_STD_U8LE);
    mtype = H5T_NATIVE_UCHAR;
    space = H5Screate(H5S_SCALAR);
    break;
  case 2: /* 1 to 6 big-endian int32 */
    type = H5Tcopy(H5T_STD_I32BE);
    mtype = H5T_NATIVE_LLONG;
    space = H5Screate_simple(1, dims, NULL);
    break;
  case 3:
    type = H5Tcopy(H5T_IEEE_F64LE);
    mtype = H5T_NATIVE_LLONG;
    space = H5Screate(H5S_SCALAR);
    break;
  case 4: /* a variable-length string of the value's bytes */
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    mtype = type;
    space = H5Screate(H5S_SCALAR);
    text = fixed;
    buf = &text;
    break;
  case 5: /* a fixed-length one */
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 1 + value % 8);
    mtype = type;
    space = H5Screate(H5S_SCALAR);
    buf = fixed;
    break;
  case 6: /* no value at all */
    type = H5Tcopy(H5T_STD_I64LE);
    mtype = H5T_NATIVE_LLONG;
    space = H5Screate(H5S_NULL);
    break;
  default: /* 1 x 1 or 1 x 2 uint16 */
    type = H5Tcopy(H5T_STD_U16LE);
    mtype = H5T_NATIVE_LLONG;
    dims[0] = 1;
    dims[1] = 1 + value % 2;
    space = H5Screate_simple(2, dims, NULL);
    break;
  }
  long long values[6];
  for (int i = 0; i < 6; i++)
    values[i] = (long long)value;
  if (mtype == H5T_NATIVE_LLONG)
    buf = values;
  hid_t attr = H5Acreate2(o, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr >= 0) {
    if (kind % 8 != 6)
      H5Awrite(attr, mtype, buf);
    H5Aclose(attr);
  }
  H5Tclose(type);
  H5Sclose(space);
  H5Oclose(o);
  H5Eclear2(H5E_DEFAULT);
}

void gt_fuzz_h5_delete(hid_t file, const char *path)
{
  H5Ldelete(file, path, H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
}

/* Make the groups above path (best effort). */
static void gt_fuzz_h5_parents(hid_t file, const char *path)
{
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (H5Lexists(file, buf, H5P_DEFAULT) <= 0) {
      hid_t g = H5Gcreate2(file, buf, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (g >= 0)
        H5Gclose(g);
    }
    *p = '/';
  }
  H5Eclear2(H5E_DEFAULT);
}

void gt_fuzz_h5_new_dataset(hid_t file, const char *path, gt_fuzz_in *in)
{
  static const hid_t *const types[] = {&H5T_STD_U8LE_g,   &H5T_STD_I8LE_g,
                                       &H5T_STD_U16LE_g,  &H5T_STD_I32LE_g,
                                       &H5T_STD_U32BE_g,  &H5T_STD_I64LE_g,
                                       &H5T_STD_U64LE_g,  &H5T_IEEE_F32LE_g,
                                       &H5T_IEEE_F64BE_g, &H5T_C_S1_g};
  const unsigned t = gt_fuzz_u8(in) % (sizeof types / sizeof types[0]);
  const int rank = 1 + gt_fuzz_u8(in) % 3;
  const uint8_t shape = gt_fuzz_u8(in), layout = gt_fuzz_u8(in);
  const bool huge = shape & 0x80;
  /* small enough to write at once in few chunks, or huge and never written */
  hsize_t dims[3], maxdims[3], chunk[3], total = 1, nchunks = 1;
  for (int d = 0; d < rank; d++) {
    dims[d] = huge && d == 0 ? (hsize_t)1 << (20 + gt_fuzz_u8(in) % 24)
                             : gt_fuzz_u16(in) % (rank == 1 ? 4096 : 64);
    maxdims[d] = layout & 0x40 ? H5S_UNLIMITED : dims[d];
    chunk[d] = 1 + (dims[d] ? (hsize_t)gt_fuzz_u8(in) % dims[d] : 0);
    total *= dims[d];
    nchunks *= (dims[d] + chunk[d] - 1) / chunk[d];
  }
  if (nchunks > 256)
    for (int d = 0; d < rank; d++)
      chunk[d] = dims[d] > 0 && dims[d] < ((hsize_t)1 << 20) ? dims[d] : (hsize_t)1 << 20;
  for (int d = 0; d < rank; d++) { /* and at most 2^20 elements a chunk */
    hsize_t rest = 1;
    for (int e = d + 1; e < rank; e++)
      rest *= chunk[e];
    while (chunk[d] > 1 && chunk[d] * rest > (hsize_t)1 << 20)
      chunk[d] = (chunk[d] + 1) / 2;
  }
  const uint64_t ramp = gt_fuzz_u64(in);
  gt_fuzz_h5_delete(file, path);
  gt_fuzz_h5_parents(file, path);
  hid_t type = H5Tcopy(*types[t]);
  hid_t space = H5Screate_simple(rank, dims, maxdims);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const unsigned lay = layout & 7;
  if ((lay >= 2 && lay <= 6) || (layout & 0x40)) {
    H5Pset_chunk(dcpl, rank, chunk);
    if (lay == 3)
      H5Pset_deflate(dcpl, 1);
    if (lay == 4)
      H5Pset_fletcher32(dcpl);
    if (lay == 5)
      H5Pset_shuffle(dcpl);
    if (lay == 6) {
      H5Pset_shuffle(dcpl);
      H5Pset_fletcher32(dcpl);
    }
  } else if (lay == 1 && total * 8 < 30000) {
    H5Pset_layout(dcpl, H5D_COMPACT);
  }
  if (layout & 0x80) {
    const long long fill = (long long)ramp;
    H5Pset_fill_value(dcpl, H5T_NATIVE_LLONG, &fill);
  }
  hid_t dset = H5Dcreate2(file, path, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dset >= 0 && !huge && total > 0 && t != 9) {
    long long *v = malloc(total * sizeof *v);
    for (hsize_t i = 0; v && i < total; i++)
      v[i] = (long long)((ramp & 0xffff) * i + (ramp >> 16));
    if (v)
      H5Dwrite(dset, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
  }
  if (dset >= 0)
    H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Tclose(type);
  H5Eclear2(H5E_DEFAULT);
}

void gt_fuzz_h5_poke(hid_t file, const char *path, uint64_t index, uint64_t value,
                     bool as_double)
{
  hid_t dset = H5Dopen2(file, path, H5P_DEFAULT);
  if (dset < 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  hid_t space = H5Dget_space(dset);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n > 0 && n <= (hssize_t)1 << 22) { /* a huge one would be filled whole first */
    /* the coordinates of flat element index, row-major */
    hsize_t dims[H5S_MAX_RANK], at[H5S_MAX_RANK], one = 1, flat = index % (hsize_t)n;
    const int nd = H5Sget_simple_extent_dims(space, dims, NULL);
    for (int d = nd - 1; d >= 0; d--) {
      at[d] = dims[d] ? flat % dims[d] : 0;
      flat = dims[d] ? flat / dims[d] : 0;
    }
    hid_t mspace = H5Screate_simple(1, &one, NULL);
    if (nd > 0)
      H5Sselect_elements(space, H5S_SELECT_SET, 1, at);
    double d;
    memcpy(&d, &value, sizeof d);
    const long long ll = (long long)value;
    H5Dwrite(dset, as_double ? H5T_NATIVE_DOUBLE : H5T_NATIVE_LLONG, mspace, space,
             H5P_DEFAULT, as_double ? (const void *)&d : (const void *)&ll);
    H5Sclose(mspace);
  }
  H5Sclose(space);
  H5Dclose(dset);
  H5Eclear2(H5E_DEFAULT);
}

void gt_fuzz_h5_group(hid_t file, const char *path)
{
  gt_fuzz_h5_delete(file, path);
  gt_fuzz_h5_parents(file, path);
  hid_t g = H5Gcreate2(file, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g >= 0)
    H5Gclose(g);
  H5Eclear2(H5E_DEFAULT);
}

void gt_fuzz_h5_softlink(hid_t file, const char *path, const char *target)
{
  gt_fuzz_h5_delete(file, path);
  gt_fuzz_h5_parents(file, path);
  H5Lcreate_soft(target, file, path, H5P_DEFAULT, H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
}

// ---- byte edits -------------------------------------------------------------------------

static off_t gt_fuzz_size(const char *path)
{
  struct stat sb;
  return stat(path, &sb) == 0 ? sb.st_size : 0;
}

void gt_fuzz_truncate(const char *path, uint64_t at)
{
  const off_t size = gt_fuzz_size(path);
  if (size > 0 && truncate(path, (off_t)(at % (uint64_t)size)) != 0)
    perror("fuzz: truncate");
}

void gt_fuzz_flip(const char *path, uint64_t at, uint8_t mask)
{
  const off_t size = gt_fuzz_size(path);
  int fd = size > 0 ? open(path, O_RDWR) : -1;
  if (fd < 0)
    return;
  const off_t where = (off_t)(at % (uint64_t)size);
  uint8_t b;
  if (pread(fd, &b, 1, where) == 1) {
    b ^= mask ? mask : 0xff;
    if (pwrite(fd, &b, 1, where) != 1)
      perror("fuzz: pwrite");
  }
  close(fd);
}

void gt_fuzz_overwrite(const char *path, uint64_t at, gt_fuzz_in *in)
{
  const off_t size = gt_fuzz_size(path);
  uint8_t bytes[16];
  const size_t n = 1 + gt_fuzz_u8(in) % sizeof bytes;
  for (size_t i = 0; i < n; i++)
    bytes[i] = gt_fuzz_u8(in);
  int fd = size > 0 ? open(path, O_RDWR) : -1;
  if (fd < 0)
    return;
  if (pwrite(fd, bytes, n, (off_t)(at % (uint64_t)size)) < 0)
    perror("fuzz: pwrite");
  close(fd);
}
