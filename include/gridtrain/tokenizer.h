/*
 * gridtrain/tokenizer.h - text <-> token ids, and the tokenizer a dataset
 * carries with it.
 *
 * Three kinds:
 *   bytes          every byte of the UTF-8 text is one token (vocabulary 256);
 *                  needs nothing stored;
 *   sentencepiece  a SentencePiece model (BPE or unigram), held as its
 *                  serialized ModelProto (the bytes of a `.model` file);
 *   bpe            byte-level BPE as GPT-2 and Llama 3 use it, held as the
 *                  text of a Hugging Face tokenizer.json and run as the
 *                  `tokenizers` package runs it (gt_tokenizer_bpe).
 *
 * A dataset names its tokenizer in the string attribute `tokenizer` on its
 * root group ("bytes", "sentencepiece" or "bpe"; a file without it is
 * "bytes" when its vocab_size is 256). A SentencePiece or BPE dataset also
 * holds its model as the 1-D uint8 dataset /tokenizer/model (the .model
 * file, or the tokenizer.json text), so that it is self-describing:
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

typedef enum {
  GT_TOKENIZER_BYTES = 0,
  GT_TOKENIZER_SENTENCEPIECE,
  GT_TOKENIZER_BPE
} gt_tokenizer_kind;

typedef struct gt_tokenizer gt_tokenizer;

/* The byte tokenizer. */
int gt_tokenizer_bytes(gt_tokenizer **out);

/* A SentencePiece model from its serialized bytes (a `.model` file's
 * content), or from a file. GT_ERR_INPUT for bytes that are not a model, or
 * when gridtrain was built without SentencePiece. */
int gt_tokenizer_sentencepiece(const void *model, size_t size, gt_tokenizer **out);
int gt_tokenizer_load(const char *model_path, gt_tokenizer **out);

/* A byte-level BPE from the text of a Hugging Face tokenizer.json (size
 * bytes, copied; it is the model gt_tokenizer_model gives back). `name`
 * says in messages where the text came from ("'dir/tokenizer.json'").
 *
 * Taken: model.type "BPE" with its vocab and merges ("A B" strings or
 * ["A", "B"] pairs; a later merge of the same pair wins), unk_token,
 * fuse_unk and ignore_merges; normalizer null; pre_tokenizer ByteLevel
 * (use_regex: GPT-2's regex, or none) or a Sequence of Split steps (a
 * "Regex" or "String" pattern, behavior Isolated, invert false) ending in
 * ByteLevel; decoder ByteLevel; post_processor ByteLevel,
 * TemplateProcessing, RobertaProcessing, BertProcessing or a Sequence of
 * them, none of whose tokens are added (as encode(text,
 * add_special_tokens=False)); added_tokens, matched literally in the text
 * before pre-tokenization, leftmost-longest, first those with normalized
 * false, then those with normalized true in the text between, lstrip and
 * rstrip taking the white space beside them. The regexes run in PCRE2 with
 * UTF and UCP (JIT-compiled where PCRE2 can), read as Oniguruma's Ruby
 * syntax that `tokenizers` compiles them in: \s and \S are Unicode's
 * White_Space, \h a hexadecimal digit, ^ and $ anchor at line ends.
 *
 * Refused with GT_ERR_INPUT, one line naming the key: text that is not JSON;
 * another model type; dropout above 0; byte_fallback;
 * continuing_subword_prefix or end_of_word_suffix; a normalizer that is
 * there; ByteLevel's add_prefix_space true; a pre-tokenizer step other than
 * Split and ByteLevel, or none that is ByteLevel; another Split behavior or
 * invert; a regex PCRE2 does not compile; a decoder other than ByteLevel;
 * another post_processor; an added token with single_word true; a merge of
 * tokens not in the vocabulary (or whose result is not); an id outside
 * [0, 2^24) or given to two tokens of the vocabulary.
 *
 * The vocabulary is the largest id + 1 (of model.vocab and the added
 * tokens); an id between that names no token decodes to nothing. A byte
 * whose character is not in the vocabulary becomes unk_token (or is dropped
 * without one), as in `tokenizers`: decode(encode(text)) == text when the
 * vocabulary has all 256 byte characters (GPT-2's, Llama 3's, and any
 * trained with the ByteLevel alphabet). */
int gt_tokenizer_bpe(const void *json, size_t size, const char *name, gt_tokenizer **out);

/* A byte-level BPE from the files of a Hugging Face tokenizer (`ingest
 * --tokenizer hf:PATH`): PATH a tokenizer.json, or a directory that holds
 * tokenizer.json or else GPT-2's vocab.json and merges.txt. From the two
 * GPT-2 files an equivalent tokenizer.json is made (GPT-2's ByteLevel
 * pre-tokenizer, post-processor and decoder; as special added tokens the
 * entries of vocab.json that no merge makes and that are not one byte's
 * character, such as <|endoftext|>, as transformers' GPT2TokenizerFast
 * treats them), and that text is the tokenizer's model. GT_ERR_INPUT
 * naming the file for a path that is none of these or files that are not
 * (gt_tokenizer_bpe). */
int gt_tokenizer_load_hf(const char *path, gt_tokenizer **out);

/* The id of the added token (added_tokens of a BPE) whose text is
 * `content`, or -1 (always for bytes and SentencePiece). */
int gt_tokenizer_added_id(const gt_tokenizer *tok, const char *content);

gt_tokenizer_kind gt_tokenizer_kind_of(const gt_tokenizer *tok);
/* "bytes", "sentencepiece" or "bpe": the value of the dataset attribute. */
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
 * byte for byte.
 *
 * BPE takes UTF-8 only too, and encodes the text as one, as `tokenizers`'
 * encode(text, add_special_tokens=False) does. */
int gt_tokenizer_encode(gt_tokenizer *tok, const char *text, size_t len, uint32_t **ids,
                        size_t *n);

/* Encode the head of a text that goes on after len bytes (the rest not
 * read yet), so that the heads of successive calls, each call's text
 * starting where the last one's head ended, encode as the whole text does:
 * *used bytes of text (in (0, len] for len > 0) gave *ids (*n of them,
 * malloc'd). last: text is all that is left, encode all of it. Otherwise
 * bytes: all of it; SentencePiece: whole segments (gt_tokenizer_line_head);
 * BPE: up to where its last pre-tokenizer piece (or added token) begins
 * that starts at least the longest added token's length before len, the
 * rest waiting for the text after it (all of it when the text is one
 * piece). text must end at a character boundary for SentencePiece and BPE.
 * GT_ERR_INPUT as gt_tokenizer_encode. */
int gt_tokenizer_encode_head(gt_tokenizer *tok, const char *text, size_t len, bool last,
                             uint32_t **ids, size_t *n, size_t *used);

/* The length of the first segment of text (len > 0): a line with its '\n';
 * a longer line than GT_TOKENIZER_SEGMENT bytes is cut before its last
 * space within that many bytes, or, without one, at the last character
 * boundary. In (0, len]. */
#define GT_TOKENIZER_SEGMENT 2048
size_t gt_tokenizer_segment(const char *text, size_t len);

/* The length of the longest head of text (len bytes of a longer text) made
 * of whole segments: up to and with its last '\n'; without one, the
 * segments of a long line up to where less than GT_TOKENIZER_SEGMENT bytes
 * are left (0 when len is at most that). In [0, len]. */
size_t gt_tokenizer_line_head(const char *text, size_t len);

/* The length of the longest prefix of text that is valid UTF-8 (len when
 * all of it is). */
size_t gt_utf8_prefix(const char *text, size_t len);

/* ids -> *text (*len bytes, malloc'd and NUL-terminated). GT_ERR_INPUT for
 * an id outside the vocabulary. The byte tokenizer returns the bytes as they
 * are, which need not be valid UTF-8 (a cut multi-byte character); so does
 * BPE (the ByteLevel decoder's bytes, without the replacement characters
 * `tokenizers` puts for bytes that are not UTF-8). */
int gt_tokenizer_decode(gt_tokenizer *tok, const uint32_t *ids, size_t n, char **text,
                        size_t *len);

/* The serialized model: SentencePiece's ModelProto, BPE's tokenizer.json
 * text (*size 0 and *model NULL for bytes). The pointer stays owned by
 * tok. */
void gt_tokenizer_model(const gt_tokenizer *tok, const void **model, size_t *size);

/* Store tok in an HDF5 file open for writing (serial or MPI-IO): the root
 * attribute `tokenizer` and, for SentencePiece and BPE, /tokenizer/model. Not
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
