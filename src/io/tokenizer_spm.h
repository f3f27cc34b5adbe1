/*
 * tokenizer_spm.h - the C face of libsentencepiece (C++), for tokenizer.c.
 * Built only when configure found the library (GT_HAVE_SENTENCEPIECE).
 *
 * Every function returns a gt status (error.h) and records its message with
 * gt_error_set; no C++ exception leaves them. Buffers they return are
 * malloc'd and owned by the caller. Not collective; one gt_spm is not
 * thread-safe for training, but encode and decode only read it.
 */
#ifndef GT_IO_TOKENIZER_SPM_H
#define GT_IO_TOKENIZER_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_spm gt_spm;

/* A processor for the serialized ModelProto `model` (size bytes; copied).
 * GT_ERR_INPUT when the bytes are not a SentencePiece model. *vocab: its
 * piece count. */
int gt_spm_load(const void *model, size_t size, gt_spm **out, int *vocab);

/* text (len bytes, UTF-8) as one input to SentencePiece's Encode -> *ids
 * (*n of them, malloc'd; NULL when *n = 0). */
int gt_spm_encode(gt_spm *spm, const char *text, size_t len, uint32_t **ids, size_t *n);

/* ids (each < the vocabulary: the caller checks) -> *text (*len bytes,
 * malloc'd, NUL-terminated). */
int gt_spm_decode(gt_spm *spm, const uint32_t *ids, size_t n, char **text, size_t *len);

void gt_spm_free(gt_spm *spm);

/* The next training sentence: *line, *len (valid until the next call), or
 * *done = 1 at the end. Returns a gt status; an error stops the training
 * and is returned by gt_spm_train as it is. */
typedef int (*gt_spm_next_fn)(void *ctx, const char **line, size_t *len, int *done);

/* Train a model: type "bpe" or "unigram", vocab pieces, sentences from
 * next (SentencePiece keeps a reservoir sample of at most max_sentences of
 * them), each at most max_sentence_bytes long. The model is lossless on
 * UTF-8 text: identity normalization, no dummy prefix, whitespace kept,
 * byte fallback on; deterministic (SentencePiece's fixed sampling seed, one
 * thread). *model: the serialized ModelProto (malloc'd, *size bytes).
 * GT_ERR_INPUT with SentencePiece's reason when it cannot train (too few
 * characters for the vocabulary, no text). */
int gt_spm_train(const char *type, int vocab, long long max_sentences, int max_sentence_bytes,
                 gt_spm_next_fn next, void *ctx, void **model, size_t *size);

#ifdef __cplusplus
}
#endif

#endif /* GT_IO_TOKENIZER_SPM_H */
