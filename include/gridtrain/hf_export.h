/*
 * gridtrain/hf_export.h - a checkpoint's model as a Hugging Face GPT-2
 * directory (`gridtrain ckpt convert FILE --format hf OUT_DIR`,
 * docs/checkpoints.md "Hugging Face"):
 *
 *   config.json        GPT2LMHeadModel / model_type gpt2 with gridtrain's
 *                      shape and numerics (pre-LN, tanh GELU "gelu_new",
 *                      LayerNorm eps 1e-5, 1/sqrt(head size) attention
 *                      scaling, biases everywhere, tied LM head, no dropout)
 *   model.safetensors  the weights under GPT-2's names (transformer.wte.weight,
 *                      transformer.h.{l}.attn.c_attn.weight, ...), the four
 *                      linear layers' weights transposed to Conv1D's
 *                      (in, out); wte cut to the true vocabulary; no
 *                      lm_head.weight (tied to wte)
 *   tokenizer.model    the SentencePiece model of a SentencePiece dataset
 *   tokenizer.json     the tokenizer.json of a byte-level BPE dataset (its
 *                      /tokenizer/model as it is), with
 *   tokenizer_config.json  PreTrainedTokenizerFast, no clean-up of spaces,
 *                      bos and eos (also in config.json): the added tokens
 *                      <|begin_of_text|> / <|end_of_text|> (Llama 3) or
 *                      <|endoftext|> (GPT-2) when there, else null
 *   README.txt         where it came from, the tokenizer, what was cut
 *
 * The true vocabulary is the tokenizer's (bytes: 256; SentencePiece: its
 * pieces; BPE: its largest id + 1) or, for data without a tokenizer, the
 * dataset's vocab_size: the
 * rows of wte past it (the deck's [model] vocab may be larger; tensor
 * parallelism's padding is never in a checkpoint) are cut off.
 *
 * Every file is written as NAME.tmp and renamed; config.json comes last, so
 * a directory with a config.json has the files that go with it. Not
 * collective (one rank; serial HDF5).
 */
#ifndef GRIDTRAIN_HF_EXPORT_H
#define GRIDTRAIN_HF_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/config.h"
#include "gridtrain/tensor.h"

typedef struct gt_hf_options {
  gt_dtype dtype;   /* of the weights: GT_F32 (default), GT_BF16 or GT_F16 */
  const char *data; /* the dataset ("FILE.h5" or "FILE.h5:/path") that gives the
                       vocabulary and tokenizer; NULL: [data] train of the
                       checkpoint's deck */
  bool force;       /* write into an out_dir that is not empty */
} gt_hf_options;

typedef struct gt_hf_summary {
  int vocab;               /* rows of wte written (the true vocabulary) */
  int model_vocab;         /* rows of wte in the checkpoint */
  char tokenizer[16];      /* "bytes", "sentencepiece", "bpe" or "none" */
  int tensors;             /* in model.safetensors */
  size_t bytes;            /* size of model.safetensors */
  char data[GT_PATH_MAX];  /* the dataset read */
} gt_hf_summary;

/* Export checkpoint `ckpt` into out_dir (created if missing; its parent must
 * exist). GT_ERR_INPUT: the checkpoint or dataset is missing or unreadable,
 * the dataset's vocabulary is larger than the model's, out_dir is not a
 * directory, cannot be written to, or holds files and opt->force is false,
 * or a weight does not fit fp16 (--dtype fp16). GT_ERR_HDF5: a damaged
 * tensor. sum may be NULL. Not collective. */
int gt_hf_export(const char *ckpt, const char *out_dir, const gt_hf_options *opt,
                 gt_hf_summary *sum);

/* The special tokens a SentencePiece model declares in its trainer spec
 * (ModelProto.trainer_spec: unk_id, bos_id, eos_id, pad_id; -1: none;
 * absent fields take SentencePiece's defaults 0, 1, 2, -1). GT_ERR_INPUT for
 * bytes that are not a serialized ModelProto. Not collective. */
typedef struct gt_spm_special {
  int unk, bos, eos, pad;
} gt_spm_special;
int gt_hf_spm_special(const void *model, size_t size, gt_spm_special *ids);

#endif /* GRIDTRAIN_HF_EXPORT_H */
