/*
 * gridtrain/hf_import.h - a Hugging Face model directory as a gridtrain
 * checkpoint (`gridtrain ckpt import HF_DIR -o OUT.h5`, `[checkpoint] init =
 * HF_DIR`; docs/checkpoints.md "Hugging Face").
 *
 * Read: config.json (GPT2LMHeadModel / model_type gpt2, or LlamaForCausalLM
 * / model_type llama), the weights from model.safetensors or the shards that
 * model.safetensors.index.json names (F32, BF16 or F16, converted to fp32
 * exactly), and the tokenizer: tokenizer.model (SentencePiece, Llama 2),
 * else tokenizer.json, or GPT-2's vocab.json and merges.txt (tokenizer.h).
 *
 * Written: a checkpoint of format GT_CKPT_FORMAT at step 0 (layout 1x1x1,
 * precision fp32, loss NaN) whose deck holds the [model] section config.json
 * describes, whose /model holds the weights under gridtrain's names
 * (gt_gpt_logical_param), whose moments are zero, and which stores the
 * tokenizer as a dataset does (root attribute `tokenizer`, /tokenizer/model),
 * so that `ckpt convert --format hf` and gt_tokenizer_from_file(OUT.h5) find
 * it. One tensor is in memory at a time (with its pieces: q, k and v).
 *
 * Refused with GT_ERR_INPUT, one line naming the key and its value: another
 * architecture or model_type; llama: hidden_act other than silu,
 * attention_bias or mlp_bias true, a sliding window, head_dim other than
 * hidden_size / num_attention_heads, rope_scaling other than linear or
 * llama3; gpt2: activation_function other than gelu_new, layer_norm_epsilon
 * other than 1e-5, n_inner other than 4 n_embd, scale_attn_by_inverse_layer_idx;
 * a tensor missing or of another shape or type; a damaged safetensors file
 * (safetensors.h). Not collective.
 */
#ifndef GRIDTRAIN_HF_IMPORT_H
#define GRIDTRAIN_HF_IMPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "gridtrain/config.h"
#include "gridtrain/gpt.h"
#include "gridtrain/params.h"
#include "gridtrain/tensor.h"

/* Not collective: set the [model] keys of cfg (type, layers, heads, dim,
 * seq_len, vocab, kv_heads, ffn_dim, tie_embeddings, norm_eps, rope_*) from
 * dir/config.json; the other keys are left as they are. GT_ERR_INPUT as
 * above. */
int gt_hf_config_read(const char *dir, gt_config *cfg);

/* Not collective: whether dir is a Hugging Face model directory (holds a
 * config.json). */
bool gt_hf_is_model_dir(const char *dir);

/* Not collective: the deck's [model] (cfg) must be the one dir/config.json
 * describes: GT_ERR_INPUT naming the first key that differs and both
 * values ("[model] kv_heads = 4 but dir/config.json has num_key_value_heads
 * = 2"). */
int gt_hf_check_model(const char *dir, const gt_config *cfg);

typedef struct gt_hf_import_summary {
  char arch[32];       /* "GPT2LMHeadModel" or "LlamaForCausalLM" */
  int tensors;         /* written to /model */
  int files;           /* safetensors files read */
  char dtype[8];       /* of the weights read ("F32", "BF16", "F16", "mixed") */
  char tokenizer[16];  /* "bpe" or "none" */
  char tokenizer_note[256]; /* why none ("" when stored) */
  size_t largest;      /* bytes of fp32 of the largest tensor: the memory it needs */
} gt_hf_import_summary;

/* Not collective: import dir into the checkpoint out (written as out.tmp and
 * renamed; an existing out is replaced). sum may be NULL. */
int gt_hf_import(const char *dir, const char *out, gt_hf_import_summary *sum);

/* Not collective: the tokenizer of dir: tokenizer.model (SentencePiece,
 * Llama 2) when there is one, else tokenizer.json or GPT-2's vocab.json and
 * merges.txt (byte-level BPE); GT_ERR_INPUT when there is none. */
struct gt_tokenizer;
int gt_hf_load_tokenizer(const char *dir, struct gt_tokenizer **tok);

/* Not collective: this rank's parameters (the part of the model a
 * gt_params set holds: any stages, tp pieces or ZeRO piece of the master)
 * from the weights of dir, each tensor read from its safetensors file(s),
 * assembled in fp32 and cut to the rank's part, one tensor in memory at a
 * time (gt_params_fill); then the compute copy. The model the params
 * describe must be dir's (gt_hf_check_model). GT_ERR_INPUT as above. */
int gt_hf_load_params(const char *dir, gt_params *params);

#endif /* GRIDTRAIN_HF_IMPORT_H */
