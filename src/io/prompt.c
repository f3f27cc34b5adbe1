/*
 * prompt.c - a prompt encoded with a dataset's tokenizer, shared by rank 0
 * with every rank, and token ids decoded back to text (prompt.h).
 */
#include "gridtrain/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"

/* Rank 0's part of gt_prompt_encode: *head = {n, vocab_limit}. */
static int gt_prompt_read(const char *data_path, const char *text, int model_vocab,
                          gt_tokenizer **tok, uint32_t **raw, int head[2])
{
  GT_CALL(gt_tokenizer_from_file(data_path, tok));
  const int vocab = gt_tokenizer_vocab(*tok);
  GT_CHECK(vocab <= model_vocab, GT_ERR_INPUT,
           "the tokenizer of %s has %d tokens, more than the model's vocabulary of %d: it is "
           "not the data the model was trained on",
           data_path, vocab, model_vocab);
  size_t n = 0;
  GT_CALL(gt_tokenizer_encode(*tok, text, strlen(text), raw, &n));
  GT_CHECK(n >= 1, GT_ERR_INPUT,
           "the prompt encodes to no token with the %s tokenizer of %s; give a prompt with "
           "text in it", gt_tokenizer_name(*tok), data_path);
  GT_CHECK(n <= (size_t)1 << 30, GT_ERR_INPUT, "the prompt is %zu tokens: too long", n);
  head[0] = (int)n;
  head[1] = vocab;
  return GT_SUCCESS;
}

int gt_prompt_encode(const char *data_path, const char *text, int model_vocab, MPI_Comm comm,
                     gt_tokenizer **tok, int32_t **ids, int *n, int *vocab_limit)
{
  int rank;
  GT_CALL_MPI(MPI_Comm_rank(comm, &rank));
  *tok = NULL;
  *ids = NULL;
  uint32_t *raw = NULL;
  int head[2] = {0, 0};
  int status = rank == 0 ? gt_prompt_read(data_path, text, model_vocab, tok, &raw, head)
                         : GT_SUCCESS;
  status = gt_error_agree(status, comm);
  if (status == GT_SUCCESS)
    status = gt_bcast_bytes(head, sizeof head, 0, comm);
  if (status == GT_SUCCESS) {
    *ids = malloc(sizeof(int32_t) * (size_t)head[0]);
    status = gt_error_agree(*ids ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory"), comm);
  }
  if (status == GT_SUCCESS && rank == 0)
    for (int i = 0; i < head[0]; i++)
      (*ids)[i] = (int32_t)raw[i];
  if (status == GT_SUCCESS)
    status = gt_bcast_bytes(*ids, sizeof(int32_t) * (size_t)head[0], 0, comm);
  free(raw);
  if (status != GT_SUCCESS) {
    free(*ids);
    *ids = NULL;
    gt_tokenizer_free(*tok);
    *tok = NULL;
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *n = head[0];
  *vocab_limit = head[1];
  return GT_SUCCESS;
}

int gt_prompt_decode(gt_tokenizer *tok, const int32_t *ids, int n, char **text, size_t *len)
{
  uint32_t *raw = malloc(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
  GT_CHECK_ALLOC(raw, sizeof(uint32_t) * (size_t)n);
  for (int i = 0; i < n; i++)
    raw[i] = (uint32_t)ids[i];
  int status = gt_tokenizer_decode(tok, raw, (size_t)n, text, len);
  free(raw);
  GT_CALL(status);
  return GT_SUCCESS;
}
