/*
 * rng.c - counter-based normal and uniform numbers (see rng.h).
 */
#include "gridtrain/rng.h"

#include <math.h>

uint64_t gt_hash64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t gt_rng_stream(uint64_t seed, const char *name)
{
  /* FNV-1a over the name, then mixed with the seed. */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 0x100000001b3ULL;
  return gt_hash64(gt_hash64(seed) ^ h);
}

double gt_rng_uniform(uint64_t stream, uint64_t counter)
{
  uint64_t bits = gt_hash64(stream ^ gt_hash64(counter));
  return (double)((bits >> 11) + 1) * 0x1.0p-53;
}

void gt_rng_normal_fill(float *out, size_t n, uint64_t stream, uint64_t first, float std)
{
  const double two_pi = 6.283185307179586476925;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    uint64_t c = 2 * (first + i);
    double u1 = gt_rng_uniform(stream, c);
    double u2 = gt_rng_uniform(stream, c + 1);
    out[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
  }
}
