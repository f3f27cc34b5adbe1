/*
 * gridtrain/tokenizer.h - text <-> token ids, and the tokenizer a dataset
 * carries with it.
 *
 * Two kinds:
 *   bytes          every byte of the UTF-8 text is one token (vocabulary 256);
 *                  needs nothing stored;
 *   sentencepiece  a SentencePiece model (BPE or unigram), held as its
 *                  serialized ModelProto (the bytes of a `.model` file).
 *
 * A dataset names its tokenizer in the string attribute `tokenizer` on its
 * root group ("bytes" or "sentencepiece"; a file without it is "bytes" when
 * its vocab_size is 256). A SentencePiece dataset also holds the model as
 * the 1-D uint8 dataset /tokenizer/model, so that it is self-describing:
 * `gridtrain sample` and `ckpt convert --format hf` decode with it without
 * a separate file.
 *
 * Ownership: a gt_tokenizer is owned by whoever created it and freed with
 * gt_tokenizer_free; the id and text buffers the calls return are malloc'd
 * and owned by the caller. Not collective; not thread-safe on one object.
 */
#ifndef GRIDTRAIN_TOKENIZER_H
#define GRIDTRAIN_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

typedef enum { GT_TOKENIZER_BYTES = 0, GT_TOKENIZER_SENTENCEPIECE } gt_tokenizer_kind;

typedef struct gt_tokenizer gt_tokenizer;

/* The byte tokenizer. */
int gt_tokenizer_bytes(gt_tokenizer **out);

/* A SentencePiece model from its serialized bytes (a `.model` file's
 * content), or from a file. GT_ERR_INPUT for bytes that are not a model, or
 * when gridtrain was built without SentencePiece. */
int gt_tokenizer_sentencepiece(const void *model, size_t size, gt_tokenizer **out);
int gt_tokenizer_load(const char *model_path, gt_tokenizer **out);

gt_tokenizer_kind gt_tokenizer_kind_of(const gt_tokenizer *tok);
/* "bytes" or "sentencepiece": the value of the dataset attribute. */
const char *gt_tokenizer_name(const gt_tokenizer *tok);
/* Token ids are in [0, vocab). */
int gt_tokenizer_vocab(const gt_tokenizer *tok);

/* text (len bytes, not NUL-terminated) -> *ids (*n of them, malloc'd;
 * NULL when *n = 0).
 *
 * SentencePiece takes UTF-8 only: GT_ERR_INPUT naming the first byte that
 * is not. It encodes the text segment by segment (gt_tokenizer_segment), as
 * SentencePiece is trained and used, one sentence a line; this also keeps
 * the time linear in the length. For the models gridtrain trains
 * (gt_tokenizer_train) that is the same as encoding the text at once, and
 * decode(encode(text)) == text for every UTF-8 text. A model trained
 * elsewhere keeps its own rules: one that normalizes (nmt_nfkc) or adds a
 * dummy prefix does so to every segment and does not give the text back
 * byte for byte. */
int gt_tokenizer_encode(gt_tokenizer *tok, const char *text, size_t len, uint32_t **ids,
                        size_t *n);

/* The length of the first segment of text (len > 0): a line with its '\n';
 * a longer line than GT_TOKENIZER_SEGMENT bytes is cut before its last
 * space within that many bytes, or, without one, at the last character
 * boundary. In (0, len]. */
#define GT_TOKENIZER_SEGMENT 2048
size_t gt_tokenizer_segment(const char *text, size_t len);

/* The length of the longest prefix of text that is valid UTF-8 (len when
 * all of it is). */
size_t gt_utf8_prefix(const char *text, size_t len);

/* ids -> *text (*len bytes, malloc'd and NUL-terminated). GT_ERR_INPUT for
 * an id outside the vocabulary. The byte tokenizer returns the bytes as they
 * are, which need not be valid UTF-8 (a cut multi-byte character). */
int gt_tokenizer_decode(gt_tokenizer *tok, const uint32_t *ids, size_t n, char **text,
                        size_t *len);

/* The serialized model (*size 0 and *model NULL for bytes). The pointer
 * stays owned by tok. */
void gt_tokenizer_model(const gt_tokenizer *tok, const void **model, size_t *size);

/* Store tok in an HDF5 file open for writing (serial or MPI-IO): the root
 * attribute `tokenizer` and, for SentencePiece, /tokenizer/model. Not
 * collective on its own; with MPI-IO every rank must call it. */
int gt_tokenizer_h5_write(hid_t file, const gt_tokenizer *tok);

/* The tokenizer of the dataset file `path` (a file name; an ":/dataset"
 * suffix is ignored), read with serial HDF5. GT_ERR_INPUT naming the file
 * when it cannot be read, names an unknown tokenizer, or its vocab_size
 * does not match its tokenizer. */
int gt_tokenizer_from_file(const char *path, gt_tokenizer **out);

/* The next line of training text (without its '\n'): *line and *len, valid
 * until the next call, or *done = true after the last. Returns a gt status;
 * an error stops the training and is returned as it is. */
typedef int (*gt_tokenizer_lines_fn)(void *ctx, const char **line, size_t *len, bool *done);

/* Train a SentencePiece model of `vocab` pieces, type "bpe" or "unigram",
 * on the lines next gives (each at most GT_TOKENIZER_SEGMENT bytes: longer
 * ones are skipped by SentencePiece; cut them with gt_tokenizer_segment).
 * SentencePiece keeps a uniform sample of at most max_lines of them, so the
 * memory is bounded whatever the text's size. The model is lossless on
 * UTF-8 (identity normalization, no dummy prefix, every space kept, byte
 * fallback: any text encodes), with the pieces <unk>, <s>, </s> as ids 0,
 * 1, 2 and the 256 bytes after them; the same lines give the same model.
 * GT_ERR_INPUT for a vocab below 260 or above 1<<24, a type not known, or
 * with SentencePiece's reason when it cannot train (no text; a vocabulary
 * larger than the text supports, or too small for its characters). */
int gt_tokenizer_train(const char *type, int vocab, long long max_lines,
                       gt_tokenizer_lines_fn next, void *ctx, gt_tokenizer **out);

void gt_tokenizer_free(gt_tokenizer *tok);

#endif /* GRIDTRAIN_TOKENIZER_H */
