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

/* a (fast) against b (reference), n decoded values of type t, as above; one
 * TAP line. nonfinite_ok: inf/NaN must only sit in the same places in both;
 * otherwise every value must be finite. */
static inline bool tu_check_close(gt_dtype t, const char *what, const float *a, const float *b,
                                  size_t n, bool nonfinite_ok)
{
  double num = 0, den = 0, inf = 0;
  bool finite = true;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - b[i];
    if (isfinite(d)) {
      num += d * d;
      den += (double)b[i] * b[i];
      inf = fmax(inf, fabs(b[i]));
    }
    finite = finite && (nonfinite_ok ? isfinite(a[i]) == isfinite(b[i])
                                     : isfinite(a[i]) && isfinite(b[i]));
  }
  const double rel = sqrt(num) / fmax(sqrt(den), 1e-30);
  if (t == GT_F32) {
    const bool ok = finite && rel <= TU_TOL32;
    if (!tap_ok(ok, "%s (rel err %.2e)", what, rel))
      tap_diag("%s: relative error %.3e > %.1e%s", what, rel, TU_TOL32,
               finite ? "" : " (or not finite)");
    return ok;
  }
  double worst = 0;
  size_t at = 0, differ = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(b[i]))
      continue;
    const double d = fabs((double)a[i] - b[i]), slack = TU_ULP_SLACK * inf;
    differ += d > slack;
    const double r = d / (tu_ulp_of(t, b[i]) + slack);
    if (r > worst) {
      worst = r;
      at = i;
    }
  }
  const double u = t == GT_BF16 ? 0x1p-8 : 0x1p-11, norm_tol = n >= 256 ? u / 8 : u;
  const size_t max_differ = 2 + n / 32;
  const bool ok = finite && worst <= 1.0 && differ <= max_differ && rel <= norm_tol;
  if (!tap_ok(ok, "%s (worst %.2f ulp, rel err %.2e, %zu of %zu differ)", what, worst, rel,
              differ, n))
    tap_diag("%s: element %zu: %.9g vs %.9g (bound 1 ulp + %.0e max|ref|); rel err %.3e "
             "(bound %.2e); %zu elements differ (bound %zu)%s",
             what, at, a[at], b[at], TU_ULP_SLACK, rel, norm_tol, differ, max_differ,
             finite ? "" : "; not finite");
  return ok;
}

#endif /* GT_TESTS_COMPARE_H */
