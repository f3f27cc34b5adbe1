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

static inline void tap_init(bool print) { tap_print = print; }

__attribute__((format(printf, 2, 3))) static inline bool tap_ok(bool cond, const char *fmt, ...)
{
  tap_count++;
  if (!cond)
    tap_failures++;
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
    printf("1..%d\n", tap_count);
    fflush(stdout);
  }
  return tap_failures ? 1 : 0;
}

#endif /* GT_TESTS_TAP_H */
