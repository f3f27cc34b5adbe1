/*
 * gridtrain/rng.h - counter-based random numbers.
 *
 * Values are pure functions of (stream, index): element i of a tensor gets
 * the same number whichever rank generates it and whatever part of the tensor
 * that rank holds. This is what lets every parallel layout start from the
 * same weights as a single rank.
 */
#ifndef GRIDTRAIN_RNG_H
#define GRIDTRAIN_RNG_H

#include <stddef.h>
#include <stdint.h>

/* A strong 64-bit mix (splitmix64 finaliser). */
uint64_t gt_hash64(uint64_t x);

/* The stream of a named tensor under a seed. */
uint64_t gt_rng_stream(uint64_t seed, const char *name);

/* Uniform double in (0, 1] for (stream, counter). */
double gt_rng_uniform(uint64_t stream, uint64_t counter);

/* out[i] = std * z(first + i), z standard normal (Box-Muller on two
 * uniforms per element), for i in [0, n). Uses OpenMP threads. */
void gt_rng_normal_fill(float *out, size_t n, uint64_t stream, uint64_t first, float std);

#endif /* GRIDTRAIN_RNG_H */
