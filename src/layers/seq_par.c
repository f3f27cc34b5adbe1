/*
 * seq_par.c - the pieces of sequence parallelism (layers.h) that the block,
 * the embedding and the head share.
 */
#include "seq_par.h"

#include "gridtrain/error.h"

/* Sequence parallelism on (layers.h)? Then ns rows from row r0 are here. */
bool gt_sp_on(const gt_group *tp, const gt_seq_par *sp, int64_t N, int64_t *r0,
                     int64_t *ns)
{
  const bool on = sp && tp && tp->size > 1;
  *ns = on ? N / tp->size : N;
  *r0 = on ? (int64_t)tp->rank * *ns : 0;
  return on;
}
