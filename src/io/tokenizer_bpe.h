/*
 * tokenizer_bpe.h - byte-level BPE (GPT-2, Llama 3) as the `tokenizers`
 * package of Hugging Face runs it, for tokenizer.c (internal to src/io).
 *
 * A gt_bpe is read from the text of a tokenizer.json: model BPE, no
 * normalizer, a ByteLevel pre-tokenizer (alone, GPT-2's regex, or after
 * Split steps with their own regexes, Llama 3), the added tokens matched
 * literally. What it accepts and refuses is listed in tokenizer.h
 * (gt_tokenizer_bpe). Every function returns a gt status (error.h) with a
 * one-line message; buffers returned are malloc'd and owned by the caller.
 * Not collective; a gt_bpe is not thread-safe (encode keeps a cache of
 * words and scratch space in it).
 */
#ifndef GT_IO_TOKENIZER_BPE_H
#define GT_IO_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gt_bpe gt_bpe;

/* The tokenizer of a tokenizer.json's text (size bytes, not NUL-terminated).
 * name says in messages where the text came from ("'dir/tokenizer.json'").
 * *vocab: the largest id + 1. GT_ERR_INPUT, naming the key, for text that
 * is not JSON or not a tokenizer gridtrain runs as `tokenizers` does. */
int gt_bpe_load(const char *json, size_t size, const char *name, gt_bpe **out, int *vocab);

/* GPT-2's two files, vocab.json (token -> id) and merges.txt (a
 * "#version" line, then one merge "A B" a line), as the text of an
 * equivalent tokenizer.json (*json, *size bytes, malloc'd): ByteLevel
 * pre-tokenizer with GPT-2's regex, ByteLevel decoder, and as special added
 * tokens the entries of vocab.json that BPE cannot make (neither one byte's
 * character nor the result of a merge; GPT-2's <|endoftext|>), as
 * transformers' GPT2TokenizerFast treats them. GT_ERR_INPUT naming the file
 * and line for what is not in these formats. */
int gt_bpe_json_from_files(const char *vocab_json, size_t vocab_size, const char *merges,
                           size_t merges_size, const char *name, char **json, size_t *size);

/* Encode text (len bytes of UTF-8). last: the text is whole, encode all of
 * it (*used = len). Otherwise more of the same text follows: encode the
 * head that ends where the last pre-tokenizer piece (or added token) that
 * starts at least the longest added token's length before len begins, so
 * that the rest, carried over by the caller, encodes with what follows as
 * it would in the whole text; *used is that head's length (all of text
 * when it is one piece). *ids: *n ids (malloc'd; NULL when *n = 0).
 * GT_ERR_INPUT for text that is not UTF-8, naming the byte. */
int gt_bpe_encode(gt_bpe *bpe, const char *text, size_t len, bool last, uint32_t **ids,
                  size_t *n, size_t *used);

/* ids (each below the vocabulary: the caller checks) -> *text, *len bytes
 * (malloc'd, NUL-terminated): each token's bytes through the inverse of the
 * byte-to-character map (a token with a character outside that map, such
 * as an added token "<|begin▁of▁sentence|>", as its UTF-8 text; an id that
 * names no token as nothing), as the ByteLevel decoder, without replacing
 * bytes that are not UTF-8. */
int gt_bpe_decode(const gt_bpe *bpe, const uint32_t *ids, size_t n, char **text, size_t *len);

/* The id of the added token whose text is `content`, or -1. */
int gt_bpe_added_id(const gt_bpe *bpe, const char *content);

void gt_bpe_free(gt_bpe *bpe);

#endif /* GT_IO_TOKENIZER_BPE_H */
