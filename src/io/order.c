/*
 * order.c - the order in which training visits sequences.
 *
 * Epoch e = g / nseq visits every sequence once, in the order given by a
 * keyed pseudo-random permutation of [0, nseq): a Feistel network on the
 * smallest power-of-two domain 2^b >= nseq (b >= 2), split into a high half
 * of ceil(b/2) bits and a low half of floor(b/2) bits that take turns being
 * XORed with a keyed hash of the other. Each round is invertible, so the
 * network is a bijection on [0, 2^b); cycle walking (apply it again while the
 * result is >= nseq) restricts it to a bijection on [0, nseq). The domain is
 * less than 2 nseq, so fewer than 2 walks are needed on average. O(1) memory,
 * no state: the position of sample g is a pure function of (seed, nseq, g).
 */
#include <stdint.h>

#include "gridtrain/data.h"

#define GT_ORDER_ROUNDS 8

// ----------------------------------------------------------------------------

/* splitmix64's finaliser: a bijective 64-bit mixer with full avalanche. */
static inline uint64_t gt_mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

long long gt_order_sequence(unsigned long long seed, long long nseq, long long g)
{
  /* nseq >= 1 and g >= 0 by contract; stay in range otherwise. */
  if (nseq <= 1 || g < 0)
    return 0;
  const uint64_t n = (uint64_t)nseq;
  const uint64_t epoch = (uint64_t)g / n;
  uint64_t x = (uint64_t)g % n;

  int bits = 64 - __builtin_clzll(n - 1); /* ceil(log2(n)) for n >= 2 */
  if (bits < 2)
    bits = 2;
  const int lo_bits = bits / 2;
  const uint64_t lo_mask = (UINT64_C(1) << lo_bits) - 1;
  const uint64_t hi_mask = (UINT64_C(1) << (bits - lo_bits)) - 1;

  /* Round keys from (seed, epoch). */
  uint64_t key[GT_ORDER_ROUNDS];
  const uint64_t base =
      gt_mix64(gt_mix64(seed ^ 0x6a09e667f3bcc908ULL) + epoch * 0x9e3779b97f4a7c15ULL);
  for (int r = 0; r < GT_ORDER_ROUNDS; r++)
    key[r] = gt_mix64(base + (uint64_t)(r + 1) * 0xd1b54a32d192ed03ULL);

  do {
    uint64_t hi = x >> lo_bits, lo = x & lo_mask;
    for (int r = 0; r < GT_ORDER_ROUNDS; r += 2) {
      hi ^= gt_mix64(lo ^ key[r]) & hi_mask;
      lo ^= gt_mix64(hi ^ key[r + 1]) & lo_mask;
    }
    x = (hi << lo_bits) | lo;
  } while (x >= n);
  return (long long)x;
}
