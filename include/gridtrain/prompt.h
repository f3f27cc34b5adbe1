/*
 * gridtrain/prompt.h - the text around generated tokens: a prompt encoded
 * with the tokenizer a dataset carries (tokenizer.h), read by rank 0 and
 * shared with every rank, and token ids decoded back to text. Generation
 * itself (sample.h) works on token ids only; the commands that generate
 * (`gridtrain sample`, [run] sample_every) call these around it.
 */
#ifndef GRIDTRAIN_PROMPT_H
#define GRIDTRAIN_PROMPT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "gridtrain/tokenizer.h"

/* Collective on comm: rank 0 reads the tokenizer of the dataset file
 * data_path (tokenizer.h) and encodes text; every rank gets the prompt
 * (*ids, *n >= 1 tokens, malloc'd) and *vocab_limit, the tokenizer's
 * vocabulary (the ids that can be decoded). Rank 0 keeps the tokenizer in
 * *tok (NULL elsewhere; free with gt_tokenizer_free). GT_ERR_INPUT, the
 * same on every rank, when the file has no usable tokenizer, its vocabulary
 * is larger than model_vocab, or the text encodes to no token. */
int gt_prompt_encode(const char *data_path, const char *text, int model_vocab, MPI_Comm comm,
                     gt_tokenizer **tok, int32_t **ids, int *n, int *vocab_limit);

/* ids -> *text (*len bytes, malloc'd, NUL-terminated) with tok. Not
 * collective. */
int gt_prompt_decode(gt_tokenizer *tok, const int32_t *ids, int n, char **text, size_t *len);

#endif /* GRIDTRAIN_PROMPT_H */
