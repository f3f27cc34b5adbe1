/*
 * tests/tap.h - Test Anything Protocol output for the C tests.
 *
 * Only the rank that called tap_init with print=true writes (rank 0 in MPI
 * tests); checks should be evaluated there on reduced results. The plan
 * ("1..N") is printed at the end by tap_done, which returns the exit status.
 */
#ifndef GT_TESTS_TAP_H
#define GT_TESTS_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int tap_count, tap_failures;
static bool tap_print = true;

/* The failed checks, repeated by tap_done at the end of the output, where
 * the tail of a long log (a GPU run's report, CI's last lines) still shows
 * them: the first TAP_FAILED_KEEP, each cut to TAP_FAILED_TEXT bytes. */
#define TAP_FAILED_KEEP 40
#define TAP_FAILED_TEXT 200
static char tap_failed[TAP_FAILED_KEEP][TAP_FAILED_TEXT];

static inline void tap_init(bool print) { tap_print = print; }

__attribute__((format(printf, 2, 3))) static inline bool tap_ok(bool cond, const char *fmt, ...)
{
  tap_count++;
  if (!cond) {
    if (tap_failures < TAP_FAILED_KEEP) {
      char *line = tap_failed[tap_failures];
      const int len = snprintf(line, TAP_FAILED_TEXT, "not ok %d - ", tap_count);
      va_list ap;
      va_start(ap, fmt);
      if (len > 0 && len < TAP_FAILED_TEXT)
        vsnprintf(line + len, (size_t)(TAP_FAILED_TEXT - len), fmt, ap);
      va_end(ap);
    }
    tap_failures++;
  }
  if (tap_print) {
    va_list ap;
    va_start(ap, fmt);
    printf("%sok %d - ", cond ? "" : "not ", tap_count);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
  }
  return cond;
}

__attribute__((format(printf, 1, 2))) static inline void tap_diag(const char *fmt, ...)
{
  if (!tap_print)
    return;
  va_list ap;
  va_start(ap, fmt);
  printf("# ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

/* |a - b| <= tol * max(|b|, floor): relative with an absolute floor. */
static inline bool tap_close(double a, double b, double tol, double floor)
{
  double scale = fabs(b) > floor ? fabs(b) : floor;
  return isfinite(a) && fabs(a - b) <= tol * scale;
}

/* Bail out: the rest of the test cannot run. */
__attribute__((format(printf, 1, 2))) static inline int tap_bail(const char *fmt, ...)
{
  if (tap_print) {
    va_list ap;
    va_start(ap, fmt);
    printf("Bail out! ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
  }
  return 1;
}

static inline int tap_done(void)
{
  if (tap_print) {
    if (tap_failures > 0) {
      printf("# failed %d of %d checks:\n", tap_failures, tap_count);
      for (int i = 0; i < tap_failures && i < TAP_FAILED_KEEP; i++)
        printf("#   %s\n", tap_failed[i]);
      if (tap_failures > TAP_FAILED_KEEP)
        printf("#   ... and %d more\n", tap_failures - TAP_FAILED_KEEP);
    }
    printf("1..%d\n", tap_count);
    fflush(stdout);
  }
  return tap_failures ? 1 : 0;
}

#endif /* GT_TESTS_TAP_H */
