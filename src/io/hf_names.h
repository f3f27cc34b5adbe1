/*
 * hf_names.h - which Hugging Face tensors make each of gridtrain's tensors
 * (internal to src/io; hf_import.c owns it, hf_export.c uses it): GPT-2's
 * Conv1D weights transposed, Llama's q/k/v and gate/up concatenated by rows.
 */
#ifndef GT_IO_HF_NAMES_H
#define GT_IO_HF_NAMES_H

#include <stdbool.h>

#include "gridtrain/gpt.h"

#define GT_HF_NAME_MAX 128
#define GT_HF_PIECES_MAX 3

/* The HF tensors of gridtrain's tensor `name`: n pieces, stacked by rows
 * (rows[k] of them each; 1-D tensors: entries), or one transposed piece
 * (GPT-2's Conv1D (in, out) of our (out, in)). GT_ERR_INTERNAL for a name
 * that is not one of gt_gpt_logical_param's. */
typedef struct gt_hf_pieces {
  int n;
  char name[GT_HF_PIECES_MAX][GT_HF_NAME_MAX];
  long rows[GT_HF_PIECES_MAX];
  bool transpose;
} gt_hf_pieces;

int gt_hf_pieces_of(const gt_gpt_shape *s, const char *name, int ndim, const long *dims,
                    gt_hf_pieces *p);

#endif
