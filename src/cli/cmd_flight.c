/*
 * cmd_flight.c - `gridtrain flight FILES...`: merge the watchdog's
 * flight-rank<R>.txt dumps (flight.h) into one timeline.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"
#include "gridtrain/log.h"

static void gt_flight_usage(void)
{
  if (gt_log_rank() != 0)
    return;
  printf("usage: gridtrain flight [--last N] FILE...\n"
         "\n"
         "Merge the flight records that the hang watchdog dumps ([run] hang_timeout;\n"
         "RUNDIR/flight-rank<R>.txt, one file per rank) into one timeline, oldest first:\n"
         "seconds since the first record, rank, communicator, operation, sequence\n"
         "number, peer and tag of a send or receive, bytes, step, pipeline slot, and\n"
         "how long it took (OPEN: it never ended). The operations still open come\n"
         "last, with the diagnosis line when RUNDIR/flight-diagnosis.txt is there.\n"
         "\n"
         "Options:\n"
         "  --last N   only the last N records of the merged timeline\n");
}

static int gt_cmp_t0(const void *a, const void *b)
{
  const gt_flight_line *x = a, *y = b;
  if (x->t0 != y->t0)
    return x->t0 < y->t0 ? -1 : 1;
  return x->rank - y->rank;
}

/* Append the records of path to *recs. */
static int gt_flight_read(const char *path, gt_flight_line **recs, size_t *n, size_t *cap)
{
  FILE *f = fopen(path, "r");
  GT_CHECK(f, GT_ERR_INPUT, "flight: cannot open %s: %s", path, strerror(errno));
  char line[512];
  bool header = false;
  int status = GT_SUCCESS;
  while (status == GT_SUCCESS && fgets(line, sizeof line, f)) {
    if (strncmp(line, "# gridtrain flight records", 26) == 0)
      header = true;
    gt_flight_line r;
    if (!gt_flight_parse(line, &r))
      continue;
    if (*n == *cap) {
      const size_t c = *cap ? 2 * *cap : 1024;
      gt_flight_line *more = realloc(*recs, c * sizeof *more);
      if (!more) {
        status = GT_ERROR(GT_ERR_SYSTEM, "out of memory for the flight records");
        break;
      }
      *recs = more;
      *cap = c;
    }
    (*recs)[(*n)++] = r;
  }
  fclose(f);
  GT_CALL(status);
  GT_CHECK(header, GT_ERR_INPUT,
           "flight: %s is not a flight record dump (no '# gridtrain flight records' header)",
           path);
  return GT_SUCCESS;
}

static void gt_flight_print(const gt_flight_line *r, double t_first)
{
  char peer[32] = "-", took[24] = "OPEN";
  if (r->peer >= 0)
    snprintf(peer, sizeof peer, "%d/%d", r->peer, r->tag);
  if (r->t1 > 0)
    snprintf(took, sizeof took, "%.6f", r->t1 - r->t0);
  printf("%12.6f %5d %-6s %-15s %8ld %8s %12.0f %7ld %5s %12s\n", r->t0 - t_first, r->rank,
         r->comm, r->op, r->seq, peer, r->bytes, r->step, r->slot, took);
}

static int gt_cmd_flight_in(int argc, char **argv, gt_flight_line **recs, size_t *n,
                            long *last, int *files, const char **first)
{
  size_t cap = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--last") == 0) {
      char *end = NULL;
      GT_CHECK(i + 1 < argc, GT_ERR_INPUT, "flight: --last needs a count");
      *last = strtol(argv[i + 1], &end, 10);
      GT_CHECK(end && *end == '\0' && *last > 0, GT_ERR_INPUT,
               "flight: --last takes a positive count, not '%s'", argv[i + 1]);
      i++;
      continue;
    }
    GT_CHECK(argv[i][0] != '-', GT_ERR_INPUT,
             "flight: unknown option '%s'; see 'gridtrain flight --help'", argv[i]);
    GT_CALL(gt_flight_read(argv[i], recs, n, &cap));
    if (!*first)
      *first = argv[i];
    (*files)++;
  }
  GT_CHECK(*files > 0, GT_ERR_INPUT,
           "flight: no files; usage: gridtrain flight [--last N] RUNDIR/flight-rank*.txt");
  return GT_SUCCESS;
}

int gt_cmd_flight(int argc, char **argv, MPI_Comm world)
{
  (void)world;
  if (gt_cli_wants_help(argc, argv)) {
    gt_flight_usage();
    return GT_SUCCESS;
  }
  /* every rank reads (the same files, the same errors); rank 0 prints */
  gt_flight_line *recs = NULL;
  size_t n = 0;
  long last = -1;
  int files = 0;
  const char *first = NULL;
  const int status = gt_cmd_flight_in(argc, argv, &recs, &n, &last, &files, &first);
  if (status != GT_SUCCESS || gt_log_rank() != 0) {
    free(recs);
    if (status != GT_SUCCESS)
      gt_error_set_collective(true);
    return status;
  }
  qsort(recs, n, sizeof *recs, gt_cmp_t0);
  const double t_first = n ? recs[0].t0 : 0;
  const size_t from = last > 0 && (size_t)last < n ? n - (size_t)last : 0;
  printf("# %zu records from %d file(s); times in seconds since the first record\n", n, files);
  printf("# %10s %5s %-6s %-15s %8s %8s %12s %7s %5s %12s\n", "t", "rank", "comm", "op", "seq",
         "peer/tag", "bytes", "step", "slot", "took");
  for (size_t i = from; i < n; i++)
    gt_flight_print(&recs[i], t_first);
  size_t open = 0;
  for (size_t i = 0; i < n; i++)
    open += recs[i].t1 <= 0;
  printf("# %zu operation(s) never ended:\n", open);
  for (size_t i = 0; i < n; i++)
    if (recs[i].t1 <= 0)
      gt_flight_print(&recs[i], t_first);
  /* the diagnosis, next to the first file */
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", first);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  char path[1100], line[2100];
  snprintf(path, sizeof path, "%s/flight-diagnosis.txt", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fgets(line, sizeof line, f))
      printf("# diagnosis: %s", line);
    fclose(f);
  }
  free(recs);
  return GT_SUCCESS;
}
