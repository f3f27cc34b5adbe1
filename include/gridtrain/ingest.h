/*
 * gridtrain/ingest.h - build an HDF5 token dataset from raw text (with a
 * tokenizer) or from the token files of other trainers.
 *
 * The output file has
 *   /train/tokens, /val/tokens   1-D unsigned integers, chunked (64 Ki
 *                                tokens), Fletcher32 checksums: uint8 for a
 *                                vocabulary of at most 256, uint16 up to
 *                                65536, uint32 above
 *   attributes on / and on both datasets: vocab_size, and tokenizer when
 *                                the tokenizer is known (tokenizer.h)
 *   /tokenizer/model             the SentencePiece model, when it is one
 *   attributes on /: sources (file names), source_bytes (bytes per file),
 *   val_fraction, train_tokens, val_tokens, created_by; text adds
 *   tokenizer_spec (the --tokenizer given), tokens adds source_formats.
 * It is written as OUT.tmp and renamed to OUT when complete; on an error
 * nothing is left. Inputs are streamed in blocks: the memory does not grow
 * with their size.
 *
 * Not collective (run by one process). Errors are GT_ERR_INPUT with one
 * line naming the file (and the byte or token position) for bad input.
 */
#ifndef GRIDTRAIN_INGEST_H
#define GRIDTRAIN_INGEST_H

#include <stdint.h>

/* What was written, for the summary line. */
typedef struct gt_ingest_counts {
  long long train_tokens, val_tokens;
  long long vocab;        /* vocab_size */
  const char *dtype;      /* "uint8", "uint16", "uint32" (a static string) */
  const char *format;     /* tokens: "nanogpt", "llmc", "npy" or "mixed" (static) */
  long long bytes;        /* input bytes read */
  double train_seconds;   /* training the tokenizer (0: none trained) */
  double encode_seconds;  /* reading, tokenizing and writing */
} gt_ingest_counts;

typedef struct gt_ingest_opts {
  double val_fraction; /* of each input, the last share goes to /val/tokens; [0, 0.5] */
  /* text: "bytes" (also NULL), "sentencepiece:MODEL" (a .model file),
   * "train:bpe:N" or "train:unigram:N" (a SentencePiece model of N pieces
   * trained on the training text of the inputs, at most GT_INGEST_TRAIN_LINES
   * lines of it sampled uniformly);
   * tokens: NULL (none stored), "bytes" or "sentencepiece:MODEL", the
   * tokenizer that wrote the files, stored with the tokens; its vocabulary is
   * the dataset's (vocab 0 takes it, another value is an error) */
  const char *tokenizer;
  /* tokens: "auto" (also NULL), "nanogpt", "llmc" or "npy" */
  const char *format;
  long long vocab;        /* tokens: the vocabulary, in [1, 2^31 - 1] (0: the tokenizer's);
                           * every token is below it */
  int nval;               /* tokens: files that go wholly to /val/tokens */
  char *const *val_files;
} gt_ingest_opts;

#define GT_INGEST_TRAIN_LINES 300000

/* Text with the byte tokenizer: every byte of an input is one token
 * (vocab_size 256, uint8); of each input the last val_fraction of its bytes
 * go to /val/tokens and the rest to /train/tokens, so both splits see every
 * source. When counts is not NULL it reports the tokens of each split.
 * GT_ERR_INPUT for a missing, unreadable or empty input, a val_fraction
 * outside [0, 0.5], or an output that cannot be created. */
int gt_ingest_text(int nfiles, char *const files[], const char *out_path,
                   double val_fraction, gt_ingest_counts *counts);

/* Text with the tokenizer o->tokenizer. The byte tokenizer splits as
 * gt_ingest_text. A SentencePiece one splits each input at the start of the
 * line after its last val_fraction of bytes begins (an input whose tail has
 * no line break goes wholly to training), encodes line by line
 * (gt_tokenizer_encode) and needs UTF-8: another byte is an error naming the
 * file and its offset. A model given or trained is stored in the file. */
int gt_ingest_text_opts(int nfiles, char *const files[], const char *out_path,
                        const gt_ingest_opts *o, gt_ingest_counts *counts);

/* Token files of other trainers:
 *   nanogpt  raw little-endian uint16 (nanoGPT's train.bin, val.bin);
 *   llmc     llm.c's .bin: a header of 256 little-endian int32 (magic
 *            20240520 and version 1 for uint16 tokens, or magic 20240801
 *            and version 7 for uint32; [2] the token count, which must
 *            match the file's size), then the tokens;
 *   npy      a NumPy .npy file (format version 1, 2 or 3) of a 1-D array of
 *            little-endian integers: u1 i1 u2 i2 u4 i4 u8 i8;
 *   auto     npy by its magic, llmc by its magic number, else nanogpt.
 * Of each file the last val_fraction of its tokens go to /val/tokens; the
 * val_files go wholly there. Every token must be in [0, o->vocab): one
 * outside is an error naming the file, the position and the value. The
 * files do not say their tokenizer: o->tokenizer names it, and is stored as
 * text ingest stores its own (tokenizer.h); without it the dataset has no
 * tokenizer attribute and generation prints ids (gridtrain sample --ids). */
int gt_ingest_tokens(int nfiles, char *const files[], const char *out_path,
                     const gt_ingest_opts *o, gt_ingest_counts *counts);

/* One token file (a format of gt_ingest_tokens, or "auto"; NULL: auto)
 * read whole into *ids (*n >= 1 tokens, malloc'd), every token checked to
 * be in [0, vocab) (1 <= vocab < 2^31): one outside is GT_ERR_INPUT naming
 * the file, the position and the value, its message ended by hint (NULL:
 * nothing; "; ..." says what to do). A missing, empty or damaged file is
 * GT_ERR_INPUT naming it. For `gridtrain score --tokens`. Not collective. */
int gt_tokens_read_file(const char *path, const char *format, long long vocab, const char *hint,
                        uint32_t **ids, long long *n);

#endif /* GRIDTRAIN_INGEST_H */
