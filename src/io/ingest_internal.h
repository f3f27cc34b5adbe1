/*
 * ingest_internal.h - what the text (ingest.c) and token-file
 * (ingest_tokens.c) ingests share (internal to src/io): the inputs' checks
 * and the writer of the dataset file (ingest_out.c), which takes token ids
 * in blocks and appends them to /train/tokens or /val/tokens. Not
 * collective; one process writes.
 */
#ifndef GT_IO_INGEST_INTERNAL_H
#define GT_IO_INGEST_INTERNAL_H

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>

#include "gridtrain/ingest.h"
#include "gridtrain/tokenizer.h"

#define GT_INGEST_BLOCK ((size_t)4 << 20) /* bytes read at a time */

enum { GT_SPLIT_TRAIN = 0, GT_SPLIT_VAL = 1 };

/* One input: its name, its size in bytes, and its train/val split (in bytes
 * for text, in tokens for token files). */
typedef struct gt_ingest_source {
  const char *path;
  long long size, train, val;
  const char *format; /* token files: the format found */
} gt_ingest_source;

/* What --tokenizer asks for. */
typedef struct {
  enum { GT_TOK_BYTES, GT_TOK_MODEL, GT_TOK_HF, GT_TOK_TRAIN } kind;
  const char *model;  /* GT_TOK_MODEL: the .model file; GT_TOK_HF: the tokenizer.json or
                         its directory (points into the spec) */
  char type[16];      /* GT_TOK_TRAIN: bpe or unigram */
  int vocab;          /* GT_TOK_TRAIN */
} gt_tok_spec;

#define GT_TOK_SPEC_HELP \
  "give bytes, sentencepiece:MODEL, hf:PATH, train:bpe:N or train:unigram:N"

/* Parses a --tokenizer value (NULL: bytes); GT_ERR_INPUT naming it when it
 * is none of the forms of GT_TOK_SPEC_HELP. */
int gt_tok_spec_parse(const char *spec, gt_tok_spec *t);

/* The tokenizer a spec of kind bytes, sentencepiece:MODEL or hf:PATH names
 * (not one to train). */
int gt_tok_spec_load(const gt_tok_spec *t, gt_tokenizer **tok);

/* The arguments every ingest takes: at least one input (`what` files), an
 * output name, a val_fraction in [0, 0.5]. */
int gt_ingest_check_args(int nfiles, const char *out_path, double val_fraction,
                         const char *what);

/* path exists, is a regular file and is not empty: s->path and s->size. */
int gt_ingest_stat(gt_ingest_source *s, const char *path);

/* The dataset file being written. */
typedef struct gt_ingest_out {
  const char *path;
  char *tmp;          /* OUT.tmp, malloc'd */
  long long vocab;
  const char *dtype;  /* "uint8", "uint16", "uint32" */
  hid_t file, dset[2];
  long long n[2];     /* tokens written to each split */
} gt_ingest_out;

/* Make sure OUT.tmp can be created (a clear message naming OUT) before any
 * long work; o->tmp is set. */
int gt_ingest_out_probe(gt_ingest_out *o, const char *path);

/* Create the file (o->tmp) with both datasets, growing, for a vocabulary of
 * vocab ids (the type follows from it), tagged with vocab_size and, when tok
 * is not NULL, the tokenizer (on / and on both datasets; SentencePiece's
 * model in /tokenizer/model). */
int gt_ingest_out_create(gt_ingest_out *o, long long vocab, const gt_tokenizer *tok);

/* Append n ids (each < vocab: the caller checks) to a split. */
int gt_ingest_out_append(gt_ingest_out *o, int split, const uint32_t *ids, size_t n);

/* The root attributes every dataset has: sources, source_bytes,
 * val_fraction, train_tokens, val_tokens, created_by. */
int gt_ingest_out_attrs(gt_ingest_out *o, int n, const gt_ingest_source *src,
                        double val_fraction);

/* Close the file; with status GT_SUCCESS rename OUT.tmp to OUT, otherwise
 * remove OUT.tmp. Frees o->tmp. Returns status, or the first error of its
 * own when status was GT_SUCCESS. */
int gt_ingest_out_finish(gt_ingest_out *o, int status);

#endif /* GT_IO_INGEST_INTERNAL_H */
