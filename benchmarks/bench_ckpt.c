/*
 * bench_ckpt.c - checkpoint write and read time and MB/s.
 *
 *   mpiexec -n N benchmarks/bench_ckpt [options]    (default layout dp=1 pp=1 tp=N)
 *
 * For every layout a trainer of the GPT-2 124M shape (12 blocks, dim 768,
 * 12 heads, vocabulary 50304, 1024 positions) is built in-program (quiet)
 * with one sequence per data-parallel rank. Then, R times:
 *   write  gt_trainer_save into a fresh directory (HDF5 through MPI-IO,
 *          closed, fsync'ed, renamed, `latest` replaced): wall time from a
 *          barrier to a barrier, slowest rank;
 *          then the parameters are zeroed (untimed) and, as --cache says,
 *          the file is put out of the page cache (untimed);
 *   read   gt_trainer_load of that file, timed the same way; then every rank
 *          compares its parameters bit for bit with those saved.
 * Rank 0 reports the file size (stat), the median write and read times,
 * MB/s = file size / time (MB = 10^6 bytes), how much of the file was in
 * the page cache just before the read, and VALID when every load restored
 * the parameters and the step. benchmarks/run_ckpt.sh sets these numbers
 * next to dd's raw sequential write and read of the same disk. See
 * benchmarks/README.md.
 */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>

#include "bench_util.h"
#include "gridtrain/comm.h"
#include "gridtrain/gpt.h"
#include "gridtrain/grid.h"
#include "gridtrain/params.h"
#include "gridtrain/trainer.h"

typedef enum { CACHE_WARM = 0, CACHE_FADVISE, CACHE_DROP } bench_cache;
static const char *const bench_cache_names[] = {"warm", "fadvise", "drop"};

typedef struct {
  bench_common c;           /* c.steps: timed rounds; c.warmup: untimed rounds first */
  const char *dir;          /* the checkpoints go into a fresh directory made here */
  char layouts[BENCH_LIST_MAX][32];
  int nlayouts;
  int train_steps;          /* optimizer steps before the first save */
  double max_time;          /* no timed round starts after this many seconds of them (0: no limit) */
  bench_cache cache;
  bool keep;
} bench_opts;

/* What rank 0 knows about one layout. */
typedef struct {
  int dp, pp, tp;
  int rounds; /* timed rounds done */
  double file_bytes, payload_bytes;
  double write_med, write_min, write_max, read_med, read_min, read_max;
  double cached_max; /* largest fraction of the file in the page cache before a read */
  bool ok;
} bench_row;

static void bench_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: mpiexec -n N bench_ckpt [options]\n"
         "\n"
         "  --data FILE.h5     token file (default data/kjv.h5; 'make data' makes it)\n"
         "  --csv FILE         rows as CSV (default bench_ckpt.csv)\n"
         "  --append           add rows to an existing CSV instead of overwriting it\n"
         "  --dir DIR          make the checkpoint directory (bench_ckpt.XXXXXX) in DIR\n"
         "                     (default .); it is removed at the end\n"
         "  --layouts LIST     layouts, comma-separated: tp, pp, dp (all N ranks on that\n"
         "                     axis) or DxPxT (dp x pp x tp = N); default tp\n"
         "  --repeats R        timed write + read rounds per layout (default 3; --steps too)\n"
         "  --warmup W         untimed rounds first (default 0)\n"
         "  --max-time S       start no further timed round of a layout once its timed\n"
         "                     rounds took S seconds (default 0: always R rounds)\n"
         "  --cache MODE       before each read: fadvise (default: posix_fadvise DONTNEED\n"
         "                     on the file, so the read comes from the disk), drop (sync\n"
         "                     and echo 3 > /proc/sys/vm/drop_caches: root only), warm\n"
         "                     (read what the write left in the page cache)\n"
         "  --train-steps N    optimizer steps before the first save (default 0: initial\n"
         "                     weights, zero AdamW moments; the file size is the same)\n"
         "  --keep-files       keep the checkpoint directory\n"
         "  --seq-len T        positions (default 1024: wpe at its real 1024 x 768)\n"
         "  --layers L --dim C --heads H --vocab V   model (default 12 768 12 50304)\n"
         "  --set KEY=VALUE    any other gridtrain key (section.key=value), repeatable\n"
         "\n"
         "One sequence per data-parallel rank, one micro-batch, one thread per rank,\n"
         "[checkpoint] resume = never.\n");
}

static int bench_parse(int argc, char **argv, bench_opts *o)
{
  *o = (bench_opts){.c = {.data = "data/kjv.h5", .csv = "bench_ckpt.csv", .warmup = 0,
                          .steps = 3, .layers = 12, .dim = 768, .heads = 12, .vocab = 50304,
                          .seq = 1024},
                    .dir = ".", .nlayouts = 1, .layouts = {"tp"}, .cache = CACHE_FADVISE};
  static const char *const known[] = {"--dir",         "--layouts",  "--repeats", "--cache",
                                      "--train-steps", "--max-time", NULL};
  for (int i = 1; i < argc && !o->c.help; i++) {
    bool common;
    GT_CALL(bench_parse_common(argc, argv, &i, &o->c, &common));
    if (common)
      continue;
    const char *a = argv[i], *v = NULL;
    if (strcmp(a, "--keep-files") == 0) {
      o->keep = true;
      continue;
    }
    GT_CALL(bench_value(argc, argv, &i, known, &v));
    if (strcmp(a, "--dir") == 0)
      o->dir = v;
    else if (strcmp(a, "--repeats") == 0)
      GT_CALL(bench_parse_int(a, v, 1, 100000, &o->c.steps));
    else if (strcmp(a, "--train-steps") == 0)
      GT_CALL(bench_parse_int(a, v, 0, 100000, &o->train_steps));
    else if (strcmp(a, "--max-time") == 0)
      GT_CALL(bench_parse_real(a, v, &o->max_time));
    else if (strcmp(a, "--cache") == 0) {
      int k = 0;
      while (k < 3 && strcmp(v, bench_cache_names[k]) != 0)
        k++;
      if (k == 3)
        return BENCH_INPUT_ERROR("--cache '%s': expected fadvise, drop or warm", v);
      o->cache = (bench_cache)k;
    } else { /* --layouts */
      char buf[256];
      snprintf(buf, sizeof buf, "%s", v);
      o->nlayouts = 0;
      for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nlayouts == BENCH_LIST_MAX || strlen(t) >= sizeof o->layouts[0])
          return BENCH_INPUT_ERROR("--layouts '%s': at most %d layouts", v, BENCH_LIST_MAX);
        snprintf(o->layouts[o->nlayouts++], sizeof o->layouts[0], "%s", t);
      }
      if (o->nlayouts == 0)
        return BENCH_INPUT_ERROR("--layouts: empty list");
    }
  }
  return GT_SUCCESS;
}

/* "tp" | "pp" | "dp" | "DxPxT" on n ranks into {dp, pp, tp}. */
static int bench_layout(const char *spec, int n, int sizes[3])
{
  if (strcmp(spec, "dp") == 0 || strcmp(spec, "pp") == 0 || strcmp(spec, "tp") == 0) {
    sizes[0] = sizes[1] = sizes[2] = 1;
    sizes[spec[0] == 'd' ? 0 : spec[0] == 'p' ? 1 : 2] = n;
    return GT_SUCCESS;
  }
  char tail;
  if (sscanf(spec, "%dx%dx%d%c", &sizes[0], &sizes[1], &sizes[2], &tail) != 3 || sizes[0] < 1 ||
      sizes[1] < 1 || sizes[2] < 1)
    return BENCH_INPUT_ERROR("--layouts: '%s' is not a layout; expected tp, pp, dp or DxPxT "
                             "(dp x pp x tp, e.g. 1x2x2)",
                             spec);
  if ((long)sizes[0] * sizes[1] * sizes[2] != n)
    return BENCH_INPUT_ERROR("--layouts: %s is %d ranks, but the job has %d", spec,
                             sizes[0] * sizes[1] * sizes[2], n);
  return GT_SUCCESS;
}

// ---- files and the page cache --------------------------------------------------------------

/* Rank 0: remove every plain file in dir (the checkpoint, `latest`, leftovers). */
static void bench_clear_dir(const char *dir)
{
  DIR *d = opendir(dir);
  if (!d)
    return;
  char path[GT_PATH_MAX + 300];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
}

/* Fraction of path's pages in the page cache (mincore over a mapping that
 * is never touched); -1 when it cannot be told. */
static double bench_cached_fraction(const char *path)
{
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return -1;
  struct stat sb;
  double frac = -1;
  if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (size_t)sb.st_size;
    const size_t pages = (len + page - 1) / page;
    unsigned char *vec = malloc(pages);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (vec && map != MAP_FAILED && mincore(map, len, vec) == 0) {
      size_t in = 0;
      for (size_t i = 0; i < pages; i++)
        in += vec[i] & 1;
      frac = (double)in / (double)pages;
    }
    if (map != MAP_FAILED)
      munmap(map, len);
    free(vec);
  }
  close(fd);
  return frac;
}

/* Collective on world: put path out of the page cache as o->cache says.
 * node: the ranks of this node (its rank 0 drops the caches). */
static int bench_evict(const bench_opts *o, const char *path, MPI_Comm world, MPI_Comm node)
{
  int status = GT_SUCCESS, node_rank;
  GT_CALL_MPI(MPI_Comm_rank(node, &node_rank));
  if (o->cache == CACHE_FADVISE) { /* every rank: cheap, and right on any number of nodes */
    int fd = open(path, O_RDONLY);
    int rc = fd < 0 ? errno : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (fd >= 0)
      close(fd);
    if (rc != 0)
      status = GT_ERROR(GT_ERR_SYSTEM, "posix_fadvise(%s): %s", path, strerror(rc));
  } else if (o->cache == CACHE_DROP && node_rank == 0) {
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    bool ok = f && fputs("3\n", f) >= 0;
    int err = errno;
    if (f && fclose(f) != 0) { /* the write happens here */
      ok = false;
      err = errno;
    }
    if (!ok)
      status = GT_ERROR(GT_ERR_SYSTEM, "cannot drop the page cache (/proc/sys/vm/drop_caches): "
                        "%s; run as root or use --cache fadvise",
                        strerror(err));
  }
  GT_CALL(gt_error_agree(status, world));
  return GT_SUCCESS;
}

/* Collective on world: with --cache drop, every node's rank 0 must be able
 * to write /proc/sys/vm/drop_caches (checked before any output). */
static int bench_check_cache(const bench_opts *o, MPI_Comm world, MPI_Comm node)
{
  int status = GT_SUCCESS, node_rank;
  GT_CALL_MPI(MPI_Comm_rank(node, &node_rank));
  if (o->cache == CACHE_DROP && node_rank == 0) {
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0)
      status = GT_ERROR(GT_ERR_INPUT, "--cache drop: cannot write /proc/sys/vm/drop_caches (%s); "
                        "run as root or use --cache fadvise",
                        strerror(errno));
    else
      close(fd);
  }
  GT_CALL(gt_error_agree(status, world));
  return GT_SUCCESS;
}

// ---- one layout ------------------------------------------------------------------------------

static int bench_create(const bench_opts *o, MPI_Comm world, const int sizes[3], gt_trainer **tr)
{
  gt_config cfg;
  GT_CALL(bench_config_base(&o->c, &cfg));
  /* a checkpoint directory of the deck's defaults must not be loaded at
   * create, unless the user asked for it with --set */
  bool user_resume = false;
  for (int i = 0; i < o->c.nset; i++)
    user_resume = user_resume || strncmp(o->c.set[i], "checkpoint.resume=", 18) == 0;
  if (!user_resume) {
    char never[] = "checkpoint.resume=never";
    char *overrides[] = {never};
    int status = gt_config_parse(&cfg, NULL, "bench_ckpt", 1, overrides);
    if (status != GT_SUCCESS)
      gt_error_set_collective(true);
    GT_CALL(status);
  }
  cfg.grid.dp = sizes[0];
  cfg.grid.pp = sizes[1];
  cfg.grid.tp = sizes[2];
  cfg.data.batch = sizes[0]; /* one sequence per data-parallel rank */
  cfg.data.microbatches = 1;
  cfg.run.steps = o->train_steps > 0 ? o->train_steps : 1;
  GT_CALL(gt_trainer_create(&cfg, world, true, tr));
  return GT_SUCCESS;
}

/* Collective on world: wall time of the slowest rank, barrier to barrier. */
static int bench_time_save(gt_trainer *tr, const char *dir, char *path, size_t size,
                           MPI_Comm world, double *seconds)
{
  GT_CALL(gt_barrier(world));
  double t0 = MPI_Wtime();
  GT_CALL(gt_trainer_save(tr, dir, path, size));
  GT_CALL(gt_barrier(world));
  double dt = MPI_Wtime() - t0;
  GT_CALL_MPI(MPI_Allreduce(&dt, seconds, 1, MPI_DOUBLE, MPI_MAX, world));
  return GT_SUCCESS;
}

static int bench_time_load(gt_trainer *tr, const char *path, MPI_Comm world, double *seconds)
{
  GT_CALL(gt_barrier(world));
  double t0 = MPI_Wtime();
  GT_CALL(gt_trainer_load(tr, path));
  GT_CALL(gt_barrier(world));
  double dt = MPI_Wtime() - t0;
  GT_CALL_MPI(MPI_Allreduce(&dt, seconds, 1, MPI_DOUBLE, MPI_MAX, world));
  return GT_SUCCESS;
}

#define BENCH_CHUNK ((size_t)4 << 20) /* floats compared at a time */

/* This rank's parameter values equal ref (bitwise)? buf: BENCH_CHUNK floats. */
/* Whether the `held` master values this rank holds equal ref. */
static int bench_same_values(gt_params *p, size_t held, const float *ref, float *buf,
                             bool *same)
{
  *same = true;
  for (size_t at = 0; at < held; at += BENCH_CHUNK) {
    size_t n = held - at < BENCH_CHUNK ? held - at : BENCH_CHUNK;
    GT_CALL(p->be->ops->download(p->be, buf, p->values + at, n * sizeof(float), NULL));
    GT_CALL(p->be->ops->sync(p->be));
    if (memcmp(buf, ref + at, n * sizeof(float)) != 0) {
      *same = false;
      return GT_SUCCESS;
    }
  }
  return GT_SUCCESS;
}

/* Build the trainer of one layout, take the rounds, fill row (rank 0). */
static int bench_run_layout(const bench_opts *o, MPI_Comm world, MPI_Comm node, const char *dir,
                            const int sizes[3], bench_row *row)
{
  int rank, size;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  gt_trainer *tr = NULL;
  double t0 = MPI_Wtime();
  GT_CALL(bench_create(o, world, sizes, &tr));
  for (int s = 0; s < o->train_steps; s++) {
    gt_step_stats st;
    GT_CALL(gt_trainer_step(tr, &st));
  }
  if (rank == 0) {
    printf("#   %dx%dx%d: trainer built%s in %.1f s\n", sizes[0], sizes[1], sizes[2],
           o->train_steps ? " and trained" : "", MPI_Wtime() - t0);
    fflush(stdout);
  }
  const long step = gt_trainer_step_index(tr);
  gt_params *p = gt_trainer_params(tr);
  size_t lo, hi; /* under ZeRO the master holds only this rank's piece */
  gt_params_master_range(p, &lo, &hi);
  const size_t held = hi - lo, bytes = held * sizeof(float);
  float *ref = malloc(bytes ? bytes : 1), *buf = malloc(BENCH_CHUNK * sizeof(float));
  GT_CHECK(ref && buf, GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
           bytes + BENCH_CHUNK * sizeof(float));
  GT_CALL(p->be->ops->download(p->be, ref, p->values, bytes, NULL));
  GT_CALL(p->be->ops->sync(p->be));

  const int rounds = o->c.warmup + o->c.steps;
  double *w = calloc((size_t)o->c.steps, sizeof(double));
  double *r = calloc((size_t)o->c.steps, sizeof(double));
  GT_CHECK(w && r, GT_ERR_SYSTEM, "out of memory");
  *row = (bench_row){.dp = sizes[0], .pp = sizes[1], .tp = sizes[2], .ok = true};
  double timed_start = 0;
  for (int k = 0; k < rounds; k++) {
    const bool timed = k >= o->c.warmup;
    if (k == o->c.warmup)
      timed_start = MPI_Wtime();
    else if (timed && o->max_time > 0) { /* rank 0's clock decides for all */
      int stop = rank == 0 && MPI_Wtime() - timed_start >= o->max_time;
      GT_CALL_MPI(MPI_Bcast(&stop, 1, MPI_INT, 0, world));
      if (stop)
        break;
    }
    char path[GT_PATH_MAX];
    if (rank == 0)
      bench_clear_dir(dir);
    double ws, rs;
    GT_CALL(bench_time_save(tr, dir, path, sizeof path, world, &ws));
    GT_CALL_MPI(MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, world));
    double cached_after_write = rank == 0 ? bench_cached_fraction(path) : 0;
    GT_CALL(p->be->ops->zero(p->be, p->values, bytes)); /* the load must bring them back */
    GT_CALL(bench_evict(o, path, world, node));
    double cached = rank == 0 ? bench_cached_fraction(path) : 0;
    GT_CALL(bench_time_load(tr, path, world, &rs));
    bool same;
    GT_CALL(bench_same_values(p, held, ref, buf, &same));
    int ok = same && gt_trainer_step_index(tr) == step, all_ok;
    GT_CALL_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world));
    if (rank == 0) {
      struct stat sb;
      double fb = stat(path, &sb) == 0 ? (double)sb.st_size : 0;
      printf("#     %s %d: write %.3f s (%.1f MB/s), read %.3f s (%.1f MB/s); in page cache "
             "after write %.0f%%, before read %.0f%%; %s\n",
             timed ? "round" : "warm-up", timed ? k - o->c.warmup + 1 : k + 1, ws,
             fb / ws / 1e6, rs, fb / rs / 1e6, 100 * cached_after_write, 100 * cached,
             all_ok ? "restored" : "NOT RESTORED");
      fflush(stdout);
      row->file_bytes = fb;
      if (timed) {
        row->rounds++;
        w[k - o->c.warmup] = ws;
        r[k - o->c.warmup] = rs;
        row->cached_max = fmax(row->cached_max, cached);
      }
    }
    row->ok = row->ok && all_ok;
  }
  if (rank == 0) {
    const int n = row->rounds;
    row->write_med = bench_median(w, n); /* sorts */
    row->write_min = w[0];
    row->write_max = w[n - 1];
    row->read_med = bench_median(r, n);
    row->read_min = r[0];
    row->read_max = r[n - 1];
    gt_gpt_shape shape = {.layers = o->c.layers, .heads = o->c.heads, .dim = o->c.dim,
                          .max_seq = o->c.seq, .vocab = o->c.vocab};
    row->payload_bytes = 3.0 * sizeof(float) * (double)gt_gpt_param_count(&shape);
    if (!o->keep)
      bench_clear_dir(dir);
  }
  free(w);
  free(r);
  free(ref);
  free(buf);
  GT_CALL(gt_trainer_destroy(&tr));
  return GT_SUCCESS;
}

// ---- main --------------------------------------------------------------------------------------

static const char *bench_csv_header =
    "ranks,dp,pp,tp,layers,dim,heads,vocab,seq_len,params,payload_bytes,file_bytes,train_steps,"
    "cache,rounds,write_s_median,write_s_min,write_s_max,write_MBps,read_s_median,read_s_min,"
    "read_s_max,read_MBps,cached_before_read_max,oversubscribed,check";

static void bench_print_row(FILE *out, int ranks, const bench_row *r)
{
  char layout[48];
  snprintf(layout, sizeof layout, "%dx%dx%d", r->dp, r->pp, r->tp);
  fprintf(out, "%5d  %-9s %9.1f %7.2f %3d %8.3f %10.1f %8.3f %10.1f %7.0f%%  %s\n", ranks,
          layout, r->file_bytes / 1e6, 100 * (r->file_bytes / r->payload_bytes - 1), r->rounds,
          r->write_med,
          r->file_bytes / r->write_med / 1e6, r->read_med, r->file_bytes / r->read_med / 1e6,
          100 * r->cached_max, r->ok ? "VALID" : "INVALID");
  fflush(out);
}

static void bench_csv_row(FILE *csv, const bench_opts *o, int ranks, bool over, const bench_row *r)
{
  fprintf(csv,
          "%d,%d,%d,%d,%d,%d,%d,%d,%d,%.0f,%.0f,%.0f,%d,%s,%d,%.4f,%.4f,%.4f,%.2f,%.4f,%.4f,"
          "%.4f,%.2f,%.4f,%d,%s\n",
          ranks, r->dp, r->pp, r->tp, o->c.layers, o->c.dim, o->c.heads, o->c.vocab, o->c.seq,
          r->payload_bytes / 12, r->payload_bytes, r->file_bytes, o->train_steps,
          bench_cache_names[o->cache], r->rounds, r->write_med, r->write_min, r->write_max,
          r->file_bytes / r->write_med / 1e6, r->read_med, r->read_min, r->read_max,
          r->file_bytes / r->read_med / 1e6, r->cached_max, over ? 1 : 0,
          r->ok ? "VALID" : "INVALID");
  fflush(csv);
}

/* Collective: rank 0 makes DIR/bench_ckpt.XXXXXX and tells every rank. */
static int bench_make_dir(const bench_opts *o, MPI_Comm world, char *dir, size_t size)
{
  int rank, status = GT_SUCCESS;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  if (rank == 0) {
    snprintf(dir, size, "%s/bench_ckpt.XXXXXX", o->dir);
    if (!mkdtemp(dir))
      status = GT_ERROR(GT_ERR_INPUT, "--dir %s: cannot make a directory there: %s", o->dir,
                        strerror(errno));
  }
  GT_CALL(gt_error_agree(status, world));
  GT_CALL_MPI(MPI_Bcast(dir, (int)size, MPI_CHAR, 0, world));
  return GT_SUCCESS;
}

static int bench_main(int argc, char **argv, MPI_Comm world, int *invalid)
{
  int rank, size;
  GT_CALL_MPI(MPI_Comm_rank(world, &rank));
  GT_CALL_MPI(MPI_Comm_size(world, &size));
  bench_opts o;
  GT_CALL(bench_parse(argc, argv, &o));
  if (o.c.help) {
    bench_usage();
    return GT_SUCCESS;
  }
  int sizes[BENCH_LIST_MAX][3], nl = 0;
  for (int i = 0; i < o.nlayouts; i++) { /* resolved, without repeats (tp = pp = dp on 1 rank) */
    GT_CALL(bench_layout(o.layouts[i], size, sizes[nl]));
    bool seen = false;
    for (int j = 0; j < nl; j++)
      seen = seen || memcmp(sizes[j], sizes[nl], sizeof sizes[j]) == 0;
    nl += !seen;
  }
  MPI_Comm node;
  GT_CALL_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  GT_CALL(bench_check_cache(&o, world, node));
  FILE *csv = NULL;
  GT_CALL(bench_start(&o.c, world, bench_csv_header, &csv));
  char dir[GT_PATH_MAX];
  GT_CALL(bench_make_dir(&o, world, dir, sizeof dir));

  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const bool over = size > cores;
  if (rank == 0) {
    gt_gpt_shape shape = {.layers = o.c.layers, .heads = o.c.heads, .dim = o.c.dim,
                          .max_seq = o.c.seq, .vocab = o.c.vocab};
    const double np = (double)gt_gpt_param_count(&shape);
    bench_print_header(stdout, "gridtrain checkpoint I/O benchmark (bench_ckpt)");
    printf("# model L=%d C=%d H=%d V=%d T=%d: %.0f parameters; payload 3 x 4 B x params = "
           "%.1f MB (values, AdamW m and v)\n",
           o.c.layers, o.c.dim, o.c.heads, o.c.vocab, o.c.seq, np, 12 * np / 1e6);
    printf("# batch: 1 sequence per dp rank, 1 micro-batch; %d optimizer step(s) before the "
           "first save; data %s\n",
           o.train_steps, o.c.data);
    printf("# checkpoints in %s (removed at the end%s)\n", dir,
           o.keep ? ": no, --keep-files" : "");
    printf("# write = gt_trainer_save (HDF5 through MPI-IO, closed, fsync'ed, renamed, latest "
           "replaced), into an emptied directory;\n"
           "# read = gt_trainer_load, after the parameters are zeroed; both wall time between "
           "barriers, slowest rank; median of %d round(s) after %d untimed\n",
           o.c.steps, o.c.warmup);
    if (o.max_time > 0)
      printf("# --max-time %g: no further round of a layout after %g s of its rounds "
             "(column n: rounds done)\n",
             o.max_time, o.max_time);
    printf("# before each read (--cache %s): %s\n", bench_cache_names[o.cache],
           o.cache == CACHE_FADVISE ? "posix_fadvise(DONTNEED) on the file: read from the disk"
           : o.cache == CACHE_DROP  ? "sync; echo 3 > /proc/sys/vm/drop_caches: read from the disk"
                                    : "nothing: the read is served from the page cache");
    printf("# size_MB = file size (stat), MB = 10^6 bytes; ovh = file size / payload - 1 (HDF5 "
           "metadata, chunk index, attributes, deck); MB/s = file size / median time;\n"
           "# cached = most of the file in the page cache just before a read (mincore); "
           "check = VALID when every load restored every rank's parameters bit for bit and "
           "the step\n");
    if (over)
      printf("# NOTE: %d ranks on %ld cores: oversubscribed, the ranks take turns on the "
             "cores\n",
             size, cores);
    printf("%-5s  %-9s %9s %7s %3s %8s %10s %8s %10s %8s  %s\n", "#rank", "dpxppxtp",
           "size_MB", "ovh%", "n", "write_s", "write_MB/s", "read_s", "read_MB/s", "cached",
           "check");
    fflush(stdout);
  }
  *invalid = 0;
  int status = GT_SUCCESS;
  for (int i = 0; i < nl && status == GT_SUCCESS; i++) {
    bench_row row = {.ok = false};
    status = bench_run_layout(&o, world, node, dir, sizes[i], &row);
    if (status == GT_SUCCESS && rank == 0) {
      bench_print_row(stdout, size, &row);
      bench_csv_row(csv, &o, size, over, &row);
      *invalid += !row.ok;
    }
  }
  if (rank == 0) { /* also after an error: leave no 1.5 GB files behind */
    if (!o.keep) {
      bench_clear_dir(dir);
      rmdir(dir);
    }
    if (status == GT_SUCCESS)
      printf("# %s; rows written to %s\n", *invalid ? "some rows INVALID" : "all rows valid",
             o.c.csv);
    fclose(csv);
  }
  GT_CALL(status);
  MPI_Comm_free(&node);
  GT_CALL_MPI(MPI_Bcast(invalid, 1, MPI_INT, 0, world));
  return GT_SUCCESS;
}

int main(int argc, char **argv)
{
  return bench_run(argc, argv, bench_main);
}
