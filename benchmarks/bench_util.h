/*
 * benchmarks/bench_util.h - what the C benchmarks share: option values,
 * the options they all take and the configuration made of them, medians,
 * the dataset check, the '#' header, CSV files, and main's error exit
 * (the same rule as src/cli/main.c: a collective error is printed by rank 0
 * and every rank exits; a rank-local one is printed and aborts the job so
 * that no rank hangs).
 *
 * Header-only (static functions); each benchmark is one translation unit.
 */
#ifndef GT_BENCH_UTIL_H
#define GT_BENCH_UTIL_H

#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <malloc.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "build_config.h"
#include "gridtrain/backend.h"
#include "gridtrain/config.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"

#define BENCH_LIST_MAX 16
#define BENCH_SET_MAX 32

// ---- errors ------------------------------------------------------------------------------

/* A user mistake known identically on every rank (options are parsed the
 * same everywhere): record it as a collective GT_ERR_INPUT. */
#define BENCH_INPUT_ERROR(...)                                                     \
  (gt_error_set(GT_ERR_INPUT, __FILE__, __LINE__, __func__, __VA_ARGS__),          \
   gt_error_set_collective(true), GT_ERR_INPUT)

/* Set-up as in gridtrain's main: MPI errors return, large buffers stay
 * mapped, HDF5 keeps quiet. Returns the world rank. */
static inline int bench_mpi_init(int *argc, char ***argv)
{
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  int provided, rank = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "bench: error: MPI_Init_thread failed\n");
    exit(1);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  gt_log_init(rank);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5 errors come back through GT_CALL_HDF5 */
  return rank;
}

// ---- option values -------------------------------------------------------------------------

/* text as an integer in [lo, hi] into *v; false (and *v untouched) if not. */
static inline bool bench_int_in(const char *text, long lo, long hi, int *v)
{
  char *end;
  errno = 0;
  long x = strtol(text, &end, 10);
  if (*end || end == text || errno || x < lo || x > hi)
    return false;
  *v = (int)x;
  return true;
}

/* text as a non-negative real into *v; false (and *v untouched) if not. */
static inline bool bench_real_in(const char *text, double *v)
{
  char *end;
  double x = strtod(text, &end);
  if (*end || end == text || !(x >= 0))
    return false;
  *v = x;
  return true;
}

/* "a,b,c" of at most BENCH_LIST_MAX positive integers into ints, or (ints
 * NULL) of non-negative reals into reals; *n items. */
static inline int bench_parse_list(const char *opt, const char *text, int *ints, double *reals,
                                   int *n)
{
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (*n == BENCH_LIST_MAX || !(ints ? bench_int_in(tok, 1, INT_MAX, &ints[*n])
                                       : bench_real_in(tok, &reals[*n])))
      return BENCH_INPUT_ERROR("%s '%s': expected up to %d %s separated by commas, e.g. %s", opt,
                               text, BENCH_LIST_MAX,
                               ints ? "positive integers" : "non-negative numbers",
                               ints ? "1,2,4" : "1,4,25");
    (*n)++;
  }
  if (*n == 0)
    return BENCH_INPUT_ERROR("%s: empty list", opt);
  return GT_SUCCESS;
}

static inline int bench_parse_ints(const char *opt, const char *text, int *list, int *n)
{
  return bench_parse_list(opt, text, list, NULL, n);
}

static inline int bench_parse_reals(const char *opt, const char *text, double *list, int *n)
{
  return bench_parse_list(opt, text, NULL, list, n);
}

static inline int bench_parse_int(const char *opt, const char *text, long lo, long hi, int *v)
{
  if (!bench_int_in(text, lo, hi, v))
    return BENCH_INPUT_ERROR("%s '%s': expected an integer in [%ld, %ld]", opt, text, lo, hi);
  return GT_SUCCESS;
}

/* "x" of a non-negative real. */
static inline int bench_parse_real(const char *opt, const char *text, double *v)
{
  if (!bench_real_in(text, v))
    return BENCH_INPUT_ERROR("%s '%s': expected a non-negative number", opt, text);
  return GT_SUCCESS;
}

/* Whether opt is one of known (NULL-terminated). */
static inline bool bench_known(const char *opt, const char *const *known)
{
  for (int k = 0; known[k]; k++)
    if (strcmp(opt, known[k]) == 0)
      return true;
  return false;
}

/* argv[*i] must be one of the options in known (NULL-terminated), all of
 * which take a value: *value = argv[*i + 1], *i advances past it. */
static inline int bench_value(int argc, char **argv, int *i, const char *const *known,
                              const char **value)
{
  if (!bench_known(argv[*i], known))
    return BENCH_INPUT_ERROR("unknown option '%s'; see --help", argv[*i]);
  if (*i + 1 >= argc)
    return BENCH_INPUT_ERROR("option %s needs a value; see --help", argv[*i]);
  *value = argv[++*i];
  return GT_SUCCESS;
}

// ---- options every benchmark takes ---------------------------------------------------------

/* A benchmark's options struct embeds this as its member c and fills in
 * its own defaults before parsing. */
typedef struct {
  const char *data, *csv;             /* --data, --csv */
  bool append, help;                  /* --append; --help or -h */
  int warmup, steps;                  /* --warmup, --steps */
  int layers, dim, heads, vocab, seq; /* --layers --dim --heads --vocab --seq-len */
  int nset;
  char *set[BENCH_SET_MAX]; /* --set KEY=VALUE, in order */
} bench_common;

/* If argv[*i] is an option of bench_common, parse it into c (*i advances
 * past its value) and set *handled; otherwise *handled = false and argv[*i]
 * is left to the benchmark's own options. */
static inline int bench_parse_common(int argc, char **argv, int *i, bench_common *c,
                                     bool *handled)
{
  static const char *const known[] = {"--data",   "--csv", "--steps", "--warmup", "--seq-len",
                                      "--layers", "--dim", "--heads", "--vocab",  "--set",
                                      NULL};
  const char *a = argv[*i], *v = NULL;
  *handled = true;
  if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
    c->help = true;
  else if (strcmp(a, "--append") == 0)
    c->append = true;
  else if (!bench_known(a, known))
    *handled = false;
  else {
    GT_CALL(bench_value(argc, argv, i, known, &v));
    if (strcmp(a, "--data") == 0)
      c->data = v;
    else if (strcmp(a, "--csv") == 0)
      c->csv = v;
    else if (strcmp(a, "--steps") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 100000, &c->steps));
    else if (strcmp(a, "--warmup") == 0)
      GT_CALL(bench_parse_int(a, v, 0, 100000, &c->warmup));
    else if (strcmp(a, "--seq-len") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 1 << 20, &c->seq));
    else if (strcmp(a, "--layers") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 1024, &c->layers));
    else if (strcmp(a, "--dim") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 65536, &c->dim));
    else if (strcmp(a, "--heads") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 1024, &c->heads));
    else if (strcmp(a, "--vocab") == 0)
      GT_CALL(bench_parse_int(a, v, 2, 1 << 24, &c->vocab));
    else { /* --set */
      if (c->nset == BENCH_SET_MAX)
        return BENCH_INPUT_ERROR("at most %d --set options", BENCH_SET_MAX);
      c->set[c->nset++] = argv[*i];
    }
  }
  return GT_SUCCESS;
}

// ---- statistics ------------------------------------------------------------------------------

static inline int bench_cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of x[0..n) (x is sorted in place); 0 for n = 0. */
static inline double bench_median(double *x, int n)
{
  if (n <= 0)
    return 0;
  qsort(x, (size_t)n, sizeof *x, bench_cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// ---- data, header, CSV ---------------------------------------------------------------------

/* Collective on comm: the token file must exist (rank 0 looks; "FILE.h5" or
 * "FILE.h5:/dataset"). */
static inline int bench_check_dataset(const char *path, MPI_Comm comm)
{
  int rank, ok = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    char file[GT_PATH_MAX];
    snprintf(file, sizeof file, "%s", path);
    char *colon = strstr(file, ".h5:");
    if (colon)
      colon[3] = '\0';
    ok = access(file, R_OK) == 0;
  }
  GT_CALL_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, comm));
  if (!ok)
    return BENCH_INPUT_ERROR("dataset '%s' not found: run 'make data' in the build directory "
                             "(makes data/kjv.h5 from Debian's bible-kjv) or pass --data "
                             "FILE.h5 (e.g. one made by 'gridtrain ingest text')",
                             path);
  return GT_SUCCESS;
}

/* Rank 0: the common '#' lines: what, when, where, with what. */
static inline void bench_print_header(FILE *out, const char *title)
{
  char date[64], host[128] = "?", mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
  gethostname(host, sizeof host - 1);
  int len = 0, world = 0;
  MPI_Get_library_version(mpi, &len);
  char *nl = strchr(mpi, '\n');
  if (nl)
    *nl = '\0';
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  double load[3] = {0, 0, 0};
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
      load[0] = load[1] = load[2] = 0;
    fclose(f);
  }
  const char *ct = getenv("OPENBLAS_CORETYPE");
  fprintf(out, "# %s, gridtrain %s, %s\n", title, PACKAGE_VERSION, date);
  fprintf(out, "# host %s: %ld online cores; %d MPI ranks; load average %.2f %.2f %.2f\n", host,
          sysconf(_SC_NPROCESSORS_ONLN), world, load[0], load[1], load[2]);
  fprintf(out, "# MPI: %s\n", mpi);
  fprintf(out, "# BLAS: %s; OPENBLAS_CORETYPE=%s\n", gt_backend_blas_info(), ct ? ct : "(unset)");
  if (gt_backend_blas_warning())
    fprintf(out, "# WARNING: %s\n", gt_backend_blas_warning());
}

/* Rank 0: open path for the rows, writing header (one line) when the file
 * is new or empty or append is false. */
static inline int bench_csv_open(const char *path, bool append, const char *header, FILE **fp)
{
  struct stat sb;
  bool fresh = !append || stat(path, &sb) != 0 || sb.st_size == 0;
  *fp = fopen(path, fresh ? "w" : "a");
  GT_CHECK(*fp != NULL, GT_ERR_INPUT, "cannot write the CSV file '%s': %s; choose another --csv",
           path, strerror(errno));
  if (fresh)
    fprintf(*fp, "%s\n", header);
  return GT_SUCCESS;
}

/* A benchmark's configuration: defaults, then the user's --set overrides
 * (validated like the command line of gridtrain train), then the model,
 * data and step count of c, and what every benchmark fixes: no
 * validation, no metrics file, one thread per rank, wait = auto. The grid
 * and the batch are the caller's. */
static inline int bench_config_base(const bench_common *c, gt_config *cfg)
{
  gt_config_defaults(cfg);
  int status = gt_config_parse(cfg, NULL, "bench --set", c->nset, c->set);
  if (status != GT_SUCCESS)
    gt_error_set_collective(true); /* same options on every rank */
  GT_CALL(status);
  cfg->model.layers = c->layers;
  cfg->model.dim = c->dim;
  cfg->model.heads = c->heads;
  cfg->model.vocab = c->vocab;
  cfg->model.seq_len = c->seq;
  snprintf(cfg->data.train, sizeof cfg->data.train, "%s", c->data);
  cfg->data.val[0] = '\0';
  cfg->run.steps = c->warmup + c->steps;
  cfg->run.eval_every = 0;
  cfg->run.metrics[0] = '\0';
  cfg->backend.threads = 1;
  cfg->parallel.wait = GT_WAIT_SETTING_AUTO;
  return GT_SUCCESS;
}

/* Collective on world: the checks before a benchmark's first output (the
 * --set options of c, the dataset), then rank 0 opens c's CSV file with
 * header into *csv (NULL on the other ranks). */
static inline int bench_start(const bench_common *c, MPI_Comm world, const char *header,
                              FILE **csv)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  gt_config probe; /* --set mistakes before any output */
  GT_CALL(bench_config_base(c, &probe));
  GT_CALL(bench_check_dataset(c->data, world));
  *csv = NULL;
  int status = rank == 0 ? bench_csv_open(c->csv, c->append, header, csv) : GT_SUCCESS;
  GT_CALL(gt_error_agree(status, world));
  return GT_SUCCESS;
}

/* A benchmark's main: set-up, body on MPI_COMM_WORLD (*invalid: how many
 * rows are INVALID, the same on every rank), then gridtrain's one end for
 * errors. The exit status: the error's, else 1 when a row is INVALID. */
static inline int bench_run(int argc, char **argv,
                            int (*body)(int argc, char **argv, MPI_Comm world, int *invalid))
{
  bench_mpi_init(&argc, &argv);
  int invalid = 0;
  int status = body(argc, argv, MPI_COMM_WORLD, &invalid);
  int rc = gt_comm_finish(status);
  return rc ? rc : (invalid ? 1 : 0);
}

#endif /* GT_BENCH_UTIL_H */
