/*
 * tests/fd_check.h - central finite-difference checks of backward passes,
 * shared by the gradient tests.
 *
 * For an op y = f(x1, x2, ...) the scalar L = sum(y * r) (r random, fixed)
 * has dL/dy = r, so backward with dout = r gives dL/dx. Finite differences
 * take L from the reference backend's forward (double accumulation inside),
 * perturbing sampled entries by +-FD_H and dividing by the perturbation
 * actually applied after rounding to float. Error per input tensor:
 * ||fd - analytic|| / ||fd|| over the sampled entries (the norm floored so
 * that an all-but-zero gradient can neither pass by luck nor fail on noise).
 */
#ifndef GT_TESTS_FD_CHECK_H
#define GT_TESTS_FD_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/backend.h"
#include "tap.h"

#define FD_H 1e-2
#define FD_SAMPLES 24
#define FD_TOL 2e-3

/* An op under test: inputs it perturbs, its loss and its gradients. */
typedef struct fd_case fd_case;
struct fd_case {
  const char *name;
  int ninputs;
  float *x[4];       /* inputs (perturbed in place) */
  size_t n[4];
  const char *xname[4];
  float *grad[4];    /* analytical gradients, filled by grads() */
  double (*loss)(fd_case *c, gt_backend *be);
  void (*grads)(fd_case *c, gt_backend *be);
  void *ctx;
};

static inline double dot_r(const float *y, const float *r, size_t n)
{
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)y[i] * r[i];
  return s;
}

/* Gradients from be, finite differences from ref; one TAP line per input. */
static inline void fd_run(fd_case *c, gt_backend *be, gt_backend *ref)
{
  c->grads(c, be);
  for (int k = 0; k < c->ninputs; k++) {
    double num = 0, den = 0;
    uint64_t s = 1234 + (uint64_t)k;
    for (int j = 0; j < FD_SAMPLES; j++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t i = (size_t)((s >> 33) % c->n[k]);
      float x0 = c->x[k][i];
      float xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
      c->x[k][i] = xp;
      double lp = c->loss(c, ref);
      c->x[k][i] = xm;
      double lm = c->loss(c, ref);
      c->x[k][i] = x0;
      double fd = (lp - lm) / ((double)xp - (double)xm);
      double an = c->grad[k][i];
      num += (fd - an) * (fd - an);
      den += fd * fd;
    }
    double err = sqrt(num) / fmax(sqrt(den), 1e-4);
    if (!tap_ok(err <= FD_TOL, "%s [%s] d/d%s vs finite differences (err %.2e)", c->name,
                be->name, c->xname[k], err))
      tap_diag("%s d/d%s: error %.3e > %.1e", c->name, c->xname[k], err, FD_TOL);
  }
}

#endif /* GT_TESTS_FD_CHECK_H */
