/*
 * tests/compare.h - comparing a fast kernel's output with the reference's,
 * shared by the kernel tests.
 *
 * fp32: norm-wise relative error <= TU_TOL32 (both accumulate in fp32 or
 * better; only the order differs). bf16 / fp16: both sides round the same
 * fp32-or-double value once, so they can differ only where the two values
 * straddle a rounding boundary: every element within 1 ulp of the format
 * plus TU_ULP_SLACK * max|ref| (cancellation leaves near-zero outputs with
 * accumulation noise), at most 2 + n/32 elements differing by more than
 * that slack, and norm-wise u/8 (u = 2^-8 bf16, 2^-11 fp16; u for n < 256).
 */
#ifndef GT_TESTS_COMPARE_H
#define GT_TESTS_COMPARE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/tensor.h"
#include "tap.h"

#define TU_TOL32 2e-6
#define TU_ULP_SLACK 1e-5

/* One unit in the last place of x in format t (the subnormal step below the
 * normal range). */
static inline double tu_ulp_of(gt_dtype t, double x)
{
  const int p = t == GT_BF16 ? 8 : t == GT_F16 ? 11 : 24; /* significant bits */
  const int emin = t == GT_BF16 ? -133 : t == GT_F16 ? -24 : -149;
  int e;
  frexp(fabs(x), &e);
  return x == 0 || e - p < emin ? ldexp(1, emin) : ldexp(1, e - p);
}

/* What the rule found for a (fast) against b (reference), n decoded values
 * of type t. */
typedef struct tu_close_result {
  bool ok, finite;
  double rel;                 /* norm-wise relative error */
  double worst;               /* bf16 / fp16: the worst element, in ulps (with the slack) */
  size_t at, differ;          /* ... where; elements beyond the slack */
  double norm_tol;            /* bf16 / fp16: the norm-wise bound */
  size_t max_differ;          /* ... and the elements that may differ */
} tu_close_result;

/* The rule above, without a TAP line. nonfinite_ok: inf/NaN must only sit
 * in the same places in both; otherwise every value must be finite. */
static inline tu_close_result tu_close(gt_dtype t, const float *a, const float *b, size_t n,
                                       bool nonfinite_ok)
{
  tu_close_result r = {.finite = true};
  double num = 0, den = 0, inf = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - b[i];
    if (isfinite(d)) {
      num += d * d;
      den += (double)b[i] * b[i];
      inf = fmax(inf, fabs(b[i]));
    }
    r.finite = r.finite && (nonfinite_ok ? isfinite(a[i]) == isfinite(b[i])
                                         : isfinite(a[i]) && isfinite(b[i]));
  }
  r.rel = sqrt(num) / fmax(sqrt(den), 1e-30);
  if (t == GT_F32) {
    r.ok = r.finite && r.rel <= TU_TOL32;
    return r;
  }
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(b[i]))
      continue;
    const double d = fabs((double)a[i] - b[i]), slack = TU_ULP_SLACK * inf;
    r.differ += d > slack;
    const double q = d / (tu_ulp_of(t, b[i]) + slack);
    if (q > r.worst) {
      r.worst = q;
      r.at = i;
    }
  }
  const double u = t == GT_BF16 ? 0x1p-8 : 0x1p-11;
  r.norm_tol = n >= 256 ? u / 8 : u;
  r.max_differ = 2 + n / 32;
  r.ok = r.finite && r.worst <= 1.0 && r.differ <= r.max_differ && r.rel <= r.norm_tol;
  return r;
}

/* tu_close with one TAP line (and a diagnostic when it fails). */
static inline bool tu_check_close(gt_dtype t, const char *what, const float *a, const float *b,
                                  size_t n, bool nonfinite_ok)
{
  const tu_close_result r = tu_close(t, a, b, n, nonfinite_ok);
  if (t == GT_F32) {
    if (!tap_ok(r.ok, "%s (rel err %.2e)", what, r.rel))
      tap_diag("%s: relative error %.3e > %.1e%s", what, r.rel, TU_TOL32,
               r.finite ? "" : " (or not finite)");
    return r.ok;
  }
  if (!tap_ok(r.ok, "%s (worst %.2f ulp, rel err %.2e, %zu of %zu differ)", what, r.worst,
              r.rel, r.differ, n))
    tap_diag("%s: element %zu: %.9g vs %.9g (bound 1 ulp + %.0e max|ref|); rel err %.3e "
             "(bound %.2e); %zu elements differ (bound %zu)%s",
             what, r.at, a[r.at], b[r.at], TU_ULP_SLACK, r.rel, r.norm_tol, r.differ,
             r.max_differ, r.finite ? "" : "; not finite");
  return r.ok;
}

#endif /* GT_TESTS_COMPARE_H */
