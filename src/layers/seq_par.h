/*
 * seq_par.h - sequence parallelism helpers shared by the layers (internal;
 * the contract is in gridtrain/layers.h).
 */
#ifndef GT_SEQ_PAR_H
#define GT_SEQ_PAR_H

#include "gridtrain/layers.h"

/* Is sequence parallelism on (sp given, tp of more than one rank)? Then
 * this rank holds *ns of the N rows, from row *r0 (else all N from 0). */
bool gt_sp_on(const gt_group *tp, const gt_seq_par *sp, int64_t N, int64_t *r0, int64_t *ns);

#endif /* GT_SEQ_PAR_H */
