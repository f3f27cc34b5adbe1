/*
 * gridtrain/ingest.h - turn raw text into an HDF5 token dataset.
 *
 * Byte-level tokenizer: every byte of the UTF-8 input is one token
 * (vocab_size 256, stored as uint8). The output file has
 *   /train/tokens, /val/tokens   1-D uint8, chunked, Fletcher32 checksums
 *   attributes on / and on both datasets: vocab_size, tokenizer = "bytes"
 *   attributes on /: sources (file names), source_bytes (bytes per file),
 *   val_fraction, train_tokens, val_tokens, created_by
 * Of each input file, the last val_fraction of its bytes go to /val/tokens
 * and the rest to /train/tokens, so both splits see every source.
 */
#ifndef GRIDTRAIN_INGEST_H
#define GRIDTRAIN_INGEST_H

/* Tokens written to each split. */
typedef struct gt_ingest_counts {
  long long train_tokens, val_tokens;
} gt_ingest_counts;

/* Not collective (run by one process). Writes out_path atomically (to a
 * temporary name, then renamed) and, when counts is not NULL, reports the
 * tokens of each split. GT_ERR_INPUT for a missing, unreadable or empty
 * input, a val_fraction outside [0, 0.5], or an output that cannot be
 * created. */
int gt_ingest_text(int nfiles, char *const files[], const char *out_path,
                   double val_fraction, gt_ingest_counts *counts);

#endif /* GRIDTRAIN_INGEST_H */
