/*
 * hf_names.h - which Hugging Face tensors make each of gridtrain's tensors
 * (internal to src/io; hf_import.c owns it, hf_export.c uses it): GPT-2's
 * Conv1D weights transposed, Llama's q/k/v and gate/up concatenated by rows,
 * Mixtral's experts stacked.
 */
#ifndef GT_IO_HF_NAMES_H
#define GT_IO_HF_NAMES_H

#include <stdbool.h>

#include "gridtrain/gpt.h"

#define GT_HF_NAME_MAX 128
#define GT_HF_PIECES_MAX 3

/* The HF tensors of gridtrain's tensor `name`: n pieces, stacked by rows
 * (rows[k] of them each; 1-D tensors: entries; a tensor of more dimensions
 * as rows of its last one), or one transposed piece (GPT-2's Conv1D (in,
 * out) of our (out, in)). An experts' tensor (E, ...) is `groups` = E such
 * stacks one after the other, expert `group`'s pieces given by the call
 * with that group (Mixtral's w1 and w3 of each expert); groups is 1 for
 * the others. GT_ERR_INTERNAL for a name that is not one of
 * gt_gpt_logical_param's; GT_ERR_INPUT for a tensor that no Hugging Face
 * model of the architecture has (a gpt block's experts). */
typedef struct gt_hf_pieces {
  int n, groups;
  char name[GT_HF_PIECES_MAX][GT_HF_NAME_MAX];
  long rows[GT_HF_PIECES_MAX];
  bool transpose;
} gt_hf_pieces;

int gt_hf_pieces_of(const gt_gpt_shape *s, const char *name, int ndim, const long *dims,
                    int group, gt_hf_pieces *p);

#endif
