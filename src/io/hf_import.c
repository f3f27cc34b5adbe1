/*
 * hf_import.c - a Hugging Face GPT-2 or Llama directory as a gridtrain
 * checkpoint (hf_import.h): config.json to the deck's [model], the
 * safetensors tensors (one file or an index of shards) renamed, transposed
 * (GPT-2) or stacked (Llama's q/k/v, gate/up) one gridtrain tensor at a time
 * into a gt_ckpt_stream, and the tokenizer stored beside them.
 */
#include "gridtrain/hf_import.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <json.h>

#include "gridtrain/checkpoint.h"
#include "gridtrain/config_enums.h"
#include "gridtrain/error.h"
#include "gridtrain/safetensors.h"
#include "gridtrain/tokenizer.h"
#include "gridtrain/version.h"
#include "ckpt_internal.h"
#include "hf_names.h"

// ---- the tensors ------------------------------------------------------------------------


static void gt_hf_piece(gt_hf_pieces *p, long rows, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void gt_hf_piece(gt_hf_pieces *p, long rows, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->name[p->n], GT_HF_NAME_MAX, fmt, ap);
  va_end(ap);
  p->rows[p->n++] = rows;
}

/* GPT-2's renamed (and transposed: weights) tensors inside a block. */
static const char *const gt_hf_gpt2_renames[][2] = {
    {"attn.qkv.", "attn.c_attn."},
    {"attn.proj.", "attn.c_proj."},
    {"mlp.fc.", "mlp.c_fc."},
    {"mlp.proj.", "mlp.c_proj."},
};

int gt_hf_pieces_of(const gt_gpt_shape *s, const char *name, int ndim, const long *dims,
                    int group, gt_hf_pieces *p)
{
  *p = (gt_hf_pieces){.groups = 1};
  const long rows = dims[0];
  (void)ndim;
  const bool llama = gt_gpt_shape_llama(s);
  if (strcmp(name, "lm_head.weight") == 0) {
    gt_hf_piece(p, rows, "lm_head.weight");
    return GT_SUCCESS;
  }
  if (strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0) {
    if (llama && name[1] == 't')
      gt_hf_piece(p, rows, "model.embed_tokens.weight");
    else if (!llama)
      gt_hf_piece(p, rows, "transformer.%s.weight", name);
    GT_CHECK(p->n, GT_ERR_INTERNAL, "a llama model has no tensor %s", name);
    return GT_SUCCESS;
  }
  if (strncmp(name, "ln_f.", 5) == 0) {
    if (llama)
      gt_hf_piece(p, rows, "model.norm.%s", name + 5);
    else
      gt_hf_piece(p, rows, "transformer.%s", name);
    return GT_SUCCESS;
  }
  int layer, used = 0;
  GT_CHECK(sscanf(name, "h.%d.%n", &layer, &used) == 1 && used > 0, GT_ERR_INTERNAL,
           "the model has a tensor %s that the Hugging Face mapping does not know", name);
  const char *rest = name + used;
  GT_CHECK(strncmp(rest, "moe.", 4) != 0 || (llama && s->shared_experts == 0), GT_ERR_INPUT,
           "%s: no Hugging Face model has %s; Mixtral's experts are a llama's without shared "
           "experts",
           name, llama ? "shared experts beside routed ones" : "a GPT-2 block with experts");
  if (!llama) {
    const char *renamed = NULL;
    for (size_t k = 0; k < sizeof gt_hf_gpt2_renames / sizeof gt_hf_gpt2_renames[0]; k++) {
      const size_t len = strlen(gt_hf_gpt2_renames[k][0]);
      if (strncmp(rest, gt_hf_gpt2_renames[k][0], len) == 0) {
        renamed = gt_hf_gpt2_renames[k][1];
        p->transpose = strcmp(rest + len, "weight") == 0;
        rest += len;
        break;
      }
    }
    GT_CHECK(renamed || strncmp(rest, "ln_", 3) == 0, GT_ERR_INTERNAL,
             "the model has a tensor %s that the Hugging Face mapping does not know", name);
    gt_hf_piece(p, rows, "transformer.h.%d.%s%s", layer, renamed ? renamed : "", rest);
    return GT_SUCCESS;
  }
  const long hs = gt_gpt_shape_head_size(s), F = gt_gpt_shape_ffn(s);
  const long q = s->heads * hs, kv = gt_gpt_shape_kv_heads(s) * hs;
  if (strcmp(rest, "ln_1.weight") == 0) {
    gt_hf_piece(p, rows, "model.layers.%d.input_layernorm.weight", layer);
  } else if (strcmp(rest, "ln_2.weight") == 0) {
    gt_hf_piece(p, rows, "model.layers.%d.post_attention_layernorm.weight", layer);
  } else if (strcmp(rest, "attn.qkv.weight") == 0) {
    gt_hf_piece(p, q, "model.layers.%d.self_attn.q_proj.weight", layer);
    gt_hf_piece(p, kv, "model.layers.%d.self_attn.k_proj.weight", layer);
    gt_hf_piece(p, kv, "model.layers.%d.self_attn.v_proj.weight", layer);
  } else if (strcmp(rest, "attn.proj.weight") == 0) {
    gt_hf_piece(p, rows, "model.layers.%d.self_attn.o_proj.weight", layer);
  } else if (strcmp(rest, "mlp.fc.weight") == 0) {
    gt_hf_piece(p, F, "model.layers.%d.mlp.gate_proj.weight", layer);
    gt_hf_piece(p, F, "model.layers.%d.mlp.up_proj.weight", layer);
  } else if (strcmp(rest, "mlp.proj.weight") == 0) {
    gt_hf_piece(p, rows, "model.layers.%d.mlp.down_proj.weight", layer);
  } else if (strcmp(rest, "moe.router.weight") == 0) { /* Mixtral */
    gt_hf_piece(p, rows, "model.layers.%d.block_sparse_moe.gate.weight", layer);
  } else if (strcmp(rest, "moe.experts.fc.weight") == 0) {
    const long Fe = gt_gpt_shape_expert_ffn(s);
    p->groups = s->experts;
    gt_hf_piece(p, Fe, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", layer, group);
    gt_hf_piece(p, Fe, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", layer, group);
  } else if (strcmp(rest, "moe.experts.proj.weight") == 0) {
    p->groups = s->experts;
    gt_hf_piece(p, s->dim, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", layer,
                group);
  } else {
    return GT_ERROR(GT_ERR_INTERNAL,
                    "the model has a tensor %s that the Hugging Face mapping does not know",
                    name);
  }
  return GT_SUCCESS;
}

// ---- config.json ------------------------------------------------------------------------

static int gt_hf_join(const char *dir, const char *name, char *path, size_t size)
{
  const int n = snprintf(path, size, "%s/%s", dir, name);
  GT_CHECK(n > 0 && (size_t)n < size, GT_ERR_INPUT, "the directory name %s is too long", dir);
  return GT_SUCCESS;
}

static bool gt_hf_exists(const char *dir, const char *name)
{
  char path[GT_PATH_MAX];
  struct stat sb;
  return gt_hf_join(dir, name, path, sizeof path) == GT_SUCCESS && stat(path, &sb) == 0;
}

bool gt_hf_is_model_dir(const char *dir)
{
  bool yes = gt_hf_exists(dir, "config.json");
  gt_error_clear();
  return yes;
}

/* The JSON object of file dir/name (json_object_put it). */
static int gt_hf_json_file(const char *dir, const char *name, json_object **out)
{
  char path[GT_PATH_MAX];
  GT_CALL(gt_hf_join(dir, name, path, sizeof path));
  *out = json_object_from_file(path);
  GT_CHECK(*out, GT_ERR_INPUT, "cannot read %s as JSON: %s", path, json_util_get_last_err());
  if (!json_object_is_type(*out, json_type_object)) {
    json_object_put(*out);
    *out = NULL;
    return GT_ERROR(GT_ERR_INPUT, "%s is not a JSON object", path);
  }
  return GT_SUCCESS;
}

typedef struct {
  const char *file; /* "DIR/config.json" for messages */
  json_object *o;
} gt_hf_cfg;

static json_object *gt_hf_get(const gt_hf_cfg *c, const char *key)
{
  json_object *v = NULL;
  return json_object_object_get_ex(c->o, key, &v) ? v : NULL; /* null: NULL too */
}

/* A required positive integer. */
static int gt_hf_int(const gt_hf_cfg *c, const char *key, long *v)
{
  json_object *o = gt_hf_get(c, key);
  GT_CHECK(o && json_object_is_type(o, json_type_int) && json_object_get_int64(o) > 0,
           GT_ERR_INPUT, "%s: %s is %s; a positive integer is needed", c->file, key,
           o ? json_object_to_json_string(o) : "missing");
  *v = (long)json_object_get_int64(o);
  return GT_SUCCESS;
}

/* An optional number (def when missing or null). */
static int gt_hf_num(const gt_hf_cfg *c, const char *key, double def, double *v)
{
  json_object *o = gt_hf_get(c, key);
  *v = def;
  if (!o)
    return GT_SUCCESS;
  GT_CHECK(json_object_is_type(o, json_type_int) || json_object_is_type(o, json_type_double),
           GT_ERR_INPUT, "%s: %s is %s; a number is needed", c->file, key,
           json_object_to_json_string(o));
  *v = json_object_get_double(o);
  return GT_SUCCESS;
}

static int gt_hf_bool(const gt_hf_cfg *c, const char *key, bool def, bool *v)
{
  json_object *o = gt_hf_get(c, key);
  *v = def;
  if (!o)
    return GT_SUCCESS;
  GT_CHECK(json_object_is_type(o, json_type_boolean), GT_ERR_INPUT,
           "%s: %s is %s; true or false is needed", c->file, key, json_object_to_json_string(o));
  *v = json_object_get_boolean(o);
  return GT_SUCCESS;
}

static const char *gt_hf_str(const gt_hf_cfg *c, const char *key)
{
  json_object *o = gt_hf_get(c, key);
  return o && json_object_is_type(o, json_type_string) ? json_object_get_string(o) : NULL;
}

/* A key gridtrain has no way to honour, unless it has its neutral value. */
#define GT_HF_UNSUPPORTED(c, key, ok, what)                                                   \
  GT_CHECK(ok, GT_ERR_INPUT, "%s: %s = %s is not supported: %s", (c)->file, key,              \
           gt_hf_get(c, key) ? json_object_to_json_string(gt_hf_get(c, key)) : "null", what)

static int gt_hf_arch(const gt_hf_cfg *c, bool *llama, bool *mixtral)
{
  const char *type = gt_hf_str(c, "model_type");
  json_object *archs = gt_hf_get(c, "architectures");
  const char *arch = archs && json_object_is_type(archs, json_type_array) &&
                             json_object_array_length(archs) == 1
                         ? json_object_get_string(json_object_array_get_idx(archs, 0))
                         : NULL;
  GT_CHECK(type && (strcmp(type, "gpt2") == 0 || strcmp(type, "llama") == 0 ||
                    strcmp(type, "mixtral") == 0),
           GT_ERR_INPUT,
           "%s: model_type = %s is not supported: gridtrain imports gpt2 (GPT2LMHeadModel), "
           "llama (LlamaForCausalLM) and mixtral (MixtralForCausalLM)",
           c->file, type ? type : "missing");
  *mixtral = strcmp(type, "mixtral") == 0;
  *llama = *mixtral || strcmp(type, "llama") == 0;
  const char *want = *mixtral ? "MixtralForCausalLM"
                     : *llama ? "LlamaForCausalLM"
                              : "GPT2LMHeadModel";
  GT_CHECK(!archs || (arch && strcmp(arch, want) == 0), GT_ERR_INPUT,
           "%s: architectures = %s is not supported: model_type %s imports as [\"%s\"]",
           c->file, json_object_to_json_string(archs), type, want);
  return GT_SUCCESS;
}

static int gt_hf_config_gpt2(const gt_hf_cfg *c, gt_config *cfg)
{
  long dim, layers, heads, seq, vocab;
  GT_CALL(gt_hf_int(c, "n_embd", &dim));
  GT_CALL(gt_hf_int(c, "n_layer", &layers));
  GT_CALL(gt_hf_int(c, "n_head", &heads));
  GT_CALL(gt_hf_int(c, "n_positions", &seq));
  GT_CALL(gt_hf_int(c, "vocab_size", &vocab));
  const char *act = gt_hf_str(c, "activation_function");
  GT_HF_UNSUPPORTED(c, "activation_function", !act || strcmp(act, "gelu_new") == 0,
                    "gridtrain's GPT-2 uses the tanh GELU, gelu_new");
  double eps, inner;
  GT_CALL(gt_hf_num(c, "layer_norm_epsilon", 1e-5, &eps));
  GT_HF_UNSUPPORTED(c, "layer_norm_epsilon", eps == 1e-5, "gridtrain's LayerNorm uses 1e-5");
  GT_CALL(gt_hf_num(c, "n_inner", 4.0 * (double)dim, &inner));
  GT_HF_UNSUPPORTED(c, "n_inner", inner == 4.0 * (double)dim,
                    "gridtrain's GPT-2 MLP is 4 n_embd wide");
  bool by_layer, scale, tie;
  GT_CALL(gt_hf_bool(c, "scale_attn_by_inverse_layer_idx", false, &by_layer));
  GT_HF_UNSUPPORTED(c, "scale_attn_by_inverse_layer_idx", !by_layer,
                    "gridtrain scales attention by 1/sqrt(head size) only");
  GT_CALL(gt_hf_bool(c, "scale_attn_weights", true, &scale));
  GT_HF_UNSUPPORTED(c, "scale_attn_weights", scale,
                    "gridtrain scales attention by 1/sqrt(head size)");
  GT_CALL(gt_hf_bool(c, "tie_word_embeddings", true, &tie));
  GT_CHECK(dim % heads == 0, GT_ERR_INPUT, "%s: n_embd = %ld is not a multiple of n_head = %ld",
           c->file, dim, heads);
  GT_CALL(gt_config_set(cfg, "model.type=gpt"));
  GT_CALL(gt_config_set(cfg, "model.layers=%ld", layers));
  GT_CALL(gt_config_set(cfg, "model.heads=%ld", heads));
  GT_CALL(gt_config_set(cfg, "model.dim=%ld", dim));
  GT_CALL(gt_config_set(cfg, "model.seq_len=%ld", seq));
  GT_CALL(gt_config_set(cfg, "model.vocab=%ld", vocab));
  GT_CALL(gt_config_set(cfg, "model.kv_heads=auto"));
  GT_CALL(gt_config_set(cfg, "model.ffn_dim=auto"));
  GT_CALL(gt_config_set(cfg, "model.tie_embeddings=%s", tie ? "on" : "off"));
  return GT_SUCCESS;
}

/* rope_scaling: null, or {rope_type (or type): default | linear | llama3, ...}. */
static int gt_hf_rope(const gt_hf_cfg *c, gt_config *cfg, long seq)
{
  json_object *r = gt_hf_get(c, "rope_scaling");
  GT_CALL(gt_config_set(cfg, "model.rope_scaling=none"));
  if (!r)
    return GT_SUCCESS;
  GT_CHECK(json_object_is_type(r, json_type_object), GT_ERR_INPUT,
           "%s: rope_scaling = %s is not an object", c->file, json_object_to_json_string(r));
  gt_hf_cfg rc = {c->file, r};
  const char *type = gt_hf_str(&rc, "rope_type");
  type = type ? type : gt_hf_str(&rc, "type");
  GT_CHECK(type && (strcmp(type, "default") == 0 || strcmp(type, "linear") == 0 ||
                    strcmp(type, "llama3") == 0),
           GT_ERR_INPUT,
           "%s: rope_scaling.rope_type = %s is not supported: gridtrain has linear and llama3 "
           "(and none)", c->file, type ? type : "missing");
  if (strcmp(type, "default") == 0)
    return GT_SUCCESS;
  double factor, low, high, orig;
  GT_CALL(gt_hf_num(&rc, "factor", NAN, &factor));
  GT_CHECK(isfinite(factor) && factor > 0, GT_ERR_INPUT,
           "%s: rope_scaling.factor is missing or not positive", c->file);
  GT_CALL(gt_config_set(cfg, "model.rope_scaling=%s", type));
  GT_CALL(gt_config_set(cfg, "model.rope_factor=%.17g", factor));
  if (strcmp(type, "llama3") != 0)
    return GT_SUCCESS;
  GT_CALL(gt_hf_num(&rc, "low_freq_factor", NAN, &low));
  GT_CALL(gt_hf_num(&rc, "high_freq_factor", NAN, &high));
  GT_CALL(gt_hf_num(&rc, "original_max_position_embeddings", NAN, &orig));
  GT_CHECK(isfinite(low) && isfinite(high) && isfinite(orig) && orig >= 1 &&
               orig == floor(orig),
           GT_ERR_INPUT, "%s: rope_scaling llama3 needs low_freq_factor, high_freq_factor and "
           "an integer original_max_position_embeddings", c->file);
  GT_CALL(gt_config_set(cfg, "model.rope_low_freq_factor=%.17g", low));
  GT_CALL(gt_config_set(cfg, "model.rope_high_freq_factor=%.17g", high));
  GT_CALL(gt_config_set(cfg, "model.rope_original_seq_len=%ld", (long)orig));
  (void)seq;
  return GT_SUCCESS;
}

static int gt_hf_config_llama(const gt_hf_cfg *c, gt_config *cfg)
{
  long dim, layers, heads, kv, ffn, seq, vocab;
  GT_CALL(gt_hf_int(c, "hidden_size", &dim));
  GT_CALL(gt_hf_int(c, "num_hidden_layers", &layers));
  GT_CALL(gt_hf_int(c, "num_attention_heads", &heads));
  kv = heads;
  if (gt_hf_get(c, "num_key_value_heads"))
    GT_CALL(gt_hf_int(c, "num_key_value_heads", &kv));
  GT_CALL(gt_hf_int(c, "intermediate_size", &ffn));
  GT_CALL(gt_hf_int(c, "max_position_embeddings", &seq));
  GT_CALL(gt_hf_int(c, "vocab_size", &vocab));
  const char *act = gt_hf_str(c, "hidden_act");
  GT_HF_UNSUPPORTED(c, "hidden_act", act && strcmp(act, "silu") == 0,
                    "gridtrain's Llama MLP is SwiGLU (silu)");
  bool abias, mbias, tie;
  GT_CALL(gt_hf_bool(c, "attention_bias", false, &abias));
  GT_HF_UNSUPPORTED(c, "attention_bias", !abias, "gridtrain's Llama has no biases");
  GT_CALL(gt_hf_bool(c, "mlp_bias", false, &mbias));
  GT_HF_UNSUPPORTED(c, "mlp_bias", !mbias, "gridtrain's Llama has no biases");
  GT_HF_UNSUPPORTED(c, "sliding_window", !gt_hf_get(c, "sliding_window"),
                    "gridtrain's attention is full causal attention");
  GT_HF_UNSUPPORTED(c, "use_sliding_window",
                    !gt_hf_get(c, "use_sliding_window") ||
                        !json_object_get_boolean(gt_hf_get(c, "use_sliding_window")),
                    "gridtrain's attention is full causal attention");
  GT_CHECK(dim % heads == 0, GT_ERR_INPUT,
           "%s: hidden_size = %ld is not a multiple of num_attention_heads = %ld", c->file, dim,
           heads);
  if (gt_hf_get(c, "head_dim")) {
    long hd;
    GT_CALL(gt_hf_int(c, "head_dim", &hd));
    GT_HF_UNSUPPORTED(c, "head_dim", hd == dim / heads,
                      "gridtrain's head size is hidden_size / num_attention_heads");
  }
  GT_CHECK(heads % kv == 0, GT_ERR_INPUT,
           "%s: num_attention_heads = %ld is not a multiple of num_key_value_heads = %ld",
           c->file, heads, kv);
  double eps, theta;
  GT_CALL(gt_hf_num(c, "rms_norm_eps", 1e-6, &eps));
  GT_CALL(gt_hf_num(c, "rope_theta", 10000.0, &theta));
  GT_CALL(gt_hf_bool(c, "tie_word_embeddings", false, &tie));
  GT_CALL(gt_config_set(cfg, "model.type=llama"));
  GT_CALL(gt_config_set(cfg, "model.layers=%ld", layers));
  GT_CALL(gt_config_set(cfg, "model.heads=%ld", heads));
  GT_CALL(gt_config_set(cfg, "model.dim=%ld", dim));
  GT_CALL(gt_config_set(cfg, "model.seq_len=%ld", seq));
  GT_CALL(gt_config_set(cfg, "model.vocab=%ld", vocab));
  GT_CALL(gt_config_set(cfg, "model.kv_heads=%ld", kv));
  GT_CALL(gt_config_set(cfg, "model.ffn_dim=%ld", ffn));
  GT_CALL(gt_config_set(cfg, "model.tie_embeddings=%s", tie ? "on" : "off"));
  GT_CALL(gt_config_set(cfg, "model.norm_eps=%.17g", eps));
  GT_CALL(gt_config_set(cfg, "model.rope_theta=%.17g", theta));
  GT_CALL(gt_hf_rope(c, cfg, seq));
  return GT_SUCCESS;
}

/* Mixtral's experts on top of its Llama keys: every block routes to
 * num_experts_per_tok of num_local_experts SwiGLU experts of
 * intermediate_size units, Mixtral's routing (softmax, top k,
 * renormalised), dropless; its router_aux_loss_coef as the load-balancing
 * loss's coefficient (docs/models.md: per block, Megatron's form, where
 * transformers takes one loss over all blocks' tokens at once). */
static int gt_hf_config_mixtral(const gt_hf_cfg *c, gt_config *cfg)
{
  long experts, top_k, ffn;
  GT_CALL(gt_hf_int(c, "num_local_experts", &experts));
  GT_CALL(gt_hf_int(c, "num_experts_per_tok", &top_k));
  GT_CALL(gt_hf_int(c, "intermediate_size", &ffn));
  GT_CHECK(experts >= 1 && top_k >= 1 && top_k <= experts, GT_ERR_INPUT,
           "%s: num_experts_per_tok = %ld of num_local_experts = %ld experts", c->file, top_k,
           experts);
  double jitter, coef;
  GT_CALL(gt_hf_num(c, "router_jitter_noise", 0.0, &jitter));
  GT_HF_UNSUPPORTED(c, "router_jitter_noise", jitter == 0.0,
                    "gridtrain's routing is deterministic");
  GT_CALL(gt_hf_num(c, "router_aux_loss_coef", 0.001, &coef));
  GT_CALL(gt_config_set(cfg, "model.experts=%ld", experts));
  GT_CALL(gt_config_set(cfg, "model.top_k=%ld", top_k));
  GT_CALL(gt_config_set(cfg, "model.moe_every=1"));
  GT_CALL(gt_config_set(cfg, "model.expert_ffn_dim=%ld", ffn));
  GT_CALL(gt_config_set(cfg, "model.shared_experts=0"));
  GT_CALL(gt_config_set(cfg, "model.capacity_factor=0"));
  GT_CALL(gt_config_set(cfg, "model.aux_loss=%.17g", coef));
  return GT_SUCCESS;
}

int gt_hf_config_read(const char *dir, gt_config *cfg)
{
  char file[GT_PATH_MAX];
  GT_CALL(gt_hf_join(dir, "config.json", file, sizeof file));
  gt_hf_cfg c = {file, NULL};
  GT_CALL(gt_hf_json_file(dir, "config.json", &c.o));
  bool llama = false, mixtral = false;
  int status = gt_hf_arch(&c, &llama, &mixtral);
  if (status == GT_SUCCESS)
    status = llama ? gt_hf_config_llama(&c, cfg) : gt_hf_config_gpt2(&c, cfg);
  if (status == GT_SUCCESS && mixtral)
    status = gt_hf_config_mixtral(&c, cfg);
  json_object_put(c.o);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_hf_check_model(const char *dir, const gt_config *deck)
{
  gt_config *hf = malloc(sizeof *hf);
  GT_CHECK_ALLOC(hf, sizeof *hf);
  gt_config_defaults(hf);
  int status = gt_hf_config_read(dir, hf);
  if (status != GT_SUCCESS) {
    free(hf);
    return status;
  }
  const gt_gpt_shape a = gt_gpt_shape_config(deck), b = gt_gpt_shape_config(hf);
  const bool llama = gt_gpt_shape_llama(&b);
  free(hf);
  const bool scaled = b.rope.type != GT_ROPE_DEFAULT, l3 = b.rope.type == GT_ROPE_LLAMA3;
  const struct {
    const char *key, *hf_key;
    double have, want;
    bool used;
  } keys[] = {
      {"type", "model_type", a.arch, b.arch, true},
      {"layers", llama ? "num_hidden_layers" : "n_layer", a.layers, b.layers, true},
      {"heads", llama ? "num_attention_heads" : "n_head", a.heads, b.heads, true},
      {"dim", llama ? "hidden_size" : "n_embd", a.dim, b.dim, true},
      /* gpt: wpe's rows; a llama takes any context up to the one it was made for */
      {"seq_len", "n_positions", a.max_seq, b.max_seq, !llama},
      {"vocab", "vocab_size", a.vocab, b.vocab, true},
      {"kv_heads", "num_key_value_heads", gt_gpt_shape_kv_heads(&a), gt_gpt_shape_kv_heads(&b),
       llama},
      {"ffn_dim", llama ? "intermediate_size" : "n_inner", gt_gpt_shape_ffn(&a),
       gt_gpt_shape_ffn(&b), true},
      {"tie_embeddings", "tie_word_embeddings", gt_gpt_shape_tied(&a), gt_gpt_shape_tied(&b),
       true},
      {"experts", "num_local_experts", a.experts, b.experts, true},
      {"top_k", "num_experts_per_tok", a.top_k, b.top_k, b.experts > 0},
      {"moe_every", "(every block)", a.moe_every > 0 ? a.moe_every : 1, 1, b.experts > 0},
      {"expert_ffn_dim", "intermediate_size", gt_gpt_shape_expert_ffn(&a),
       gt_gpt_shape_expert_ffn(&b), b.experts > 0},
      {"shared_experts", "(none)", a.shared_experts, 0, b.experts > 0},
      {"norm_eps", "rms_norm_eps", a.norm_eps, b.norm_eps, llama},
      {"rope_theta", "rope_theta", a.rope_theta, b.rope_theta, llama},
      {"rope_scaling", "rope_scaling.rope_type", a.rope.type, b.rope.type, llama},
      {"rope_factor", "rope_scaling.factor", a.rope.factor, b.rope.factor, llama && scaled},
      {"rope_low_freq_factor", "rope_scaling.low_freq_factor", a.rope.low_freq_factor,
       b.rope.low_freq_factor, l3},
      {"rope_high_freq_factor", "rope_scaling.high_freq_factor", a.rope.high_freq_factor,
       b.rope.high_freq_factor, l3},
      {"rope_original_seq_len", "rope_scaling.original_max_position_embeddings",
       a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings, l3},
  };
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    if (!keys[k].used || keys[k].have == keys[k].want)
      continue;
    char have[64], want[64];
    if (k == 0 || k == 16) {
      const char *const *names = k == 0 ? gt_model_type_names : gt_rope_scaling_names;
      snprintf(have, sizeof have, "%s", names[(int)keys[k].have]);
      snprintf(want, sizeof want, "%s",
               k == 0 ? (b.experts > 0 ? "mixtral" : llama ? "llama" : "gpt2")
                      : names[(int)keys[k].want]);
    } else if (k == 8) {
      snprintf(have, sizeof have, "%s", keys[k].have ? "on" : "off");
      snprintf(want, sizeof want, "%s", keys[k].want ? "true" : "false");
    } else {
      snprintf(have, sizeof have, "%.9g", keys[k].have);
      snprintf(want, sizeof want, "%.9g", keys[k].want);
    }
    return GT_ERROR(GT_ERR_INPUT,
                    "[model] %s = %s but %s/config.json has %s = %s; the deck's [model] must "
                    "describe the Hugging Face model it starts from",
                    keys[k].key, have, dir, keys[k].hf_key, want);
  }
  GT_CHECK(!llama || a.max_seq <= b.max_seq, GT_ERR_INPUT,
           "[model] seq_len = %d but %s/config.json has max_position_embeddings = %d; choose a "
           "seq_len of at most %d",
           a.max_seq, dir, b.max_seq, b.max_seq);
  return GT_SUCCESS;
}

// ---- the safetensors files --------------------------------------------------------------

typedef struct {
  const char *dir;
  int nfiles;
  char (*names)[GT_PATH_MAX];
  gt_st_file **files;
  json_object *map; /* the index's weight_map (owned by index), or NULL */
  json_object *index;
  float *scratch;   /* a transposed tensor's HF layout */
  size_t cap;
  char dtype[8];
} gt_hf_src;

static void gt_hf_src_free(gt_hf_src *s)
{
  for (int i = 0; i < s->nfiles; i++)
    gt_safetensors_close(&s->files[i]);
  free(s->files);
  free(s->names);
  json_object_put(s->index);
  free(s->scratch);
}

static int gt_hf_src_add(gt_hf_src *s, const char *file)
{
  for (int i = 0; i < s->nfiles; i++)
    if (strcmp(s->names[i], file) == 0)
      return GT_SUCCESS;
  void *n = realloc(s->names, sizeof *s->names * (size_t)(s->nfiles + 1));
  GT_CHECK_ALLOC(n, sizeof *s->names);
  s->names = n;
  void *f = realloc(s->files, sizeof *s->files * (size_t)(s->nfiles + 1));
  GT_CHECK_ALLOC(f, sizeof *s->files);
  s->files = f;
  GT_CHECK(strchr(file, '/') == NULL, GT_ERR_INPUT,
           "%s/model.safetensors.index.json names the file %s outside the directory", s->dir,
           file);
  GT_CALL(gt_hf_join(s->dir, file, s->names[s->nfiles], GT_PATH_MAX));
  s->files[s->nfiles] = NULL;
  GT_CALL(gt_safetensors_open(s->names[s->nfiles], &s->files[s->nfiles]));
  snprintf(s->names[s->nfiles], GT_PATH_MAX, "%s", file);
  s->nfiles++;
  return GT_SUCCESS;
}

static int gt_hf_src_open(const char *dir, gt_hf_src *s)
{
  s->dir = dir;
  if (gt_hf_exists(dir, "model.safetensors.index.json")) {
    GT_CALL(gt_hf_json_file(dir, "model.safetensors.index.json", &s->index));
    GT_CHECK(json_object_object_get_ex(s->index, "weight_map", &s->map) &&
                 json_object_is_type(s->map, json_type_object),
             GT_ERR_INPUT, "%s/model.safetensors.index.json has no weight_map object", dir);
    json_object_object_foreach(s->map, key, val) {
      GT_CHECK(json_object_is_type(val, json_type_string), GT_ERR_INPUT,
               "%s/model.safetensors.index.json: weight_map %s is not a file name", dir, key);
      GT_CALL(gt_hf_src_add(s, json_object_get_string(val)));
    }
    return GT_SUCCESS;
  }
  GT_CHECK(gt_hf_exists(dir, "model.safetensors"), GT_ERR_INPUT,
           "%s has neither model.safetensors nor model.safetensors.index.json; gridtrain "
           "imports safetensors weights (save with safe_serialization=True)", dir);
  GT_CALL(gt_hf_src_add(s, "model.safetensors"));
  return GT_SUCCESS;
}

/* The file and index of HF tensor name (GPT-2's may lack "transformer."). */
static int gt_hf_src_find(gt_hf_src *s, const char *name, int *file, int *idx)
{
  const char *alt = strncmp(name, "transformer.", 12) == 0 ? name + 12 : NULL;
  for (int pass = 0; pass < (alt ? 2 : 1); pass++) {
    const char *n = pass ? alt : name;
    for (int f = 0; f < s->nfiles; f++) {
      json_object *v = NULL;
      if (s->map && (!json_object_object_get_ex(s->map, n, &v) ||
                     strcmp(json_object_get_string(v), s->names[f]) != 0))
        continue;
      *idx = gt_safetensors_find(s->files[f], n);
      if (*idx >= 0) {
        *file = f;
        return GT_SUCCESS;
      }
    }
  }
  return GT_ERROR(GT_ERR_INPUT, "%s: the tensor %s is missing from %s", s->dir, name,
                  s->map ? "the files model.safetensors.index.json names"
                         : "model.safetensors");
}

/* Gridtrain's tensor into out (its logical shape), from its HF pieces. */
/* One stack of pieces (gt_hf_pieces) into out from row *row on, rows of
 * cols entries (ndim: the gridtrain tensor's; each piece is 2-D, or 1-D
 * for a 1-D tensor). */
static int gt_hf_src_read_stack(gt_hf_src *s, const char *name, int ndim, long cols,
                                const gt_hf_pieces *p, float *out, long *rowp)
{
  long row = *rowp;
  ndim = ndim >= 2 ? 2 : 1;
  for (int k = 0; k < p->n; k++) {
    int f = 0, i = 0;
    GT_CALL(gt_hf_src_find(s, p->name[k], &f, &i));
    const gt_st_info *t = gt_safetensors_info(s->files[f], i);
    long want[2] = {p->rows[k], cols};
    if (p->transpose) {
      want[0] = cols;
      want[1] = p->rows[k];
    }
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
      same = t->dims[d] == want[d];
    char have_s[64] = "(", want_s[64];
    for (int d = 0; d < t->ndim && d < 4; d++)
      snprintf(have_s + strlen(have_s), sizeof have_s - strlen(have_s), "%s%ld", d ? ", " : "",
               t->dims[d]);
    snprintf(have_s + strlen(have_s), sizeof have_s - strlen(have_s), ")");
    if (ndim == 2)
      snprintf(want_s, sizeof want_s, "(%ld, %ld)", want[0], want[1]);
    else
      snprintf(want_s, sizeof want_s, "(%ld)", want[0]);
    GT_CHECK(same, GT_ERR_INPUT,
             "%s/%s: tensor %s has the shape %s; config.json makes it %s (gridtrain's %s)",
             s->dir, s->names[f], p->name[k], have_s, want_s, name);
    GT_CHECK(t->dtype >= 0, GT_ERR_INPUT, "%s/%s: tensor %s is %s; F32, BF16 and F16 are "
             "imported", s->dir, s->names[f], p->name[k], t->type_name);
    if (!s->dtype[0])
      snprintf(s->dtype, sizeof s->dtype, "%s", t->type_name);
    else if (strcmp(s->dtype, t->type_name) != 0)
      snprintf(s->dtype, sizeof s->dtype, "mixed");
    if (!p->transpose) {
      GT_CALL(gt_safetensors_read_f32(s->files[f], i, out + (size_t)row * (size_t)cols));
    } else {
      const size_t rows = (size_t)p->rows[k], c = (size_t)cols;
      GT_CALL(gt_ckpt_grow((void **)&s->scratch, &s->cap, rows * c, sizeof(float)));
      GT_CALL(gt_safetensors_read_f32(s->files[f], i, s->scratch));
      for (size_t r = 0; r < c; r++) /* HF (cols, rows) -> ours (rows, cols) */
        for (size_t q = 0; q < rows; q++)
          out[q * c + r] = s->scratch[r * rows + q];
    }
    row += p->rows[k];
  }
  *rowp = row;
  return GT_SUCCESS;
}

/* gridtrain's tensor `name` (ndim, dims) of the model `shape` into out,
 * from its Hugging Face pieces. */
static int gt_hf_src_read(gt_hf_src *s, const gt_gpt_shape *shape, const char *name, int ndim,
                          const long *dims, float *out)
{
  const long cols = ndim >= 2 ? dims[ndim - 1] : 1;
  long numel = 1;
  for (int d = 0; d < ndim; d++)
    numel *= dims[d];
  long row = 0;
  for (int g = 0, groups = 1; g < groups; g++) {
    gt_hf_pieces p;
    GT_CALL(gt_hf_pieces_of(shape, name, ndim, dims, g, &p));
    groups = p.groups;
    GT_CALL(gt_hf_src_read_stack(s, name, ndim, cols, &p, out, &row));
  }
  GT_ASSERT(row * cols == numel);
  return GT_SUCCESS;
}

// ---- the tokenizer ----------------------------------------------------------------------

/* The directory's tokenizer (tokenizer.json, or GPT-2's vocab.json and
 * merges.txt), or NULL with the reason in note. */
static int gt_hf_tokenizer(const char *dir, long vocab, gt_tokenizer **tok, char *note,
                           size_t size)
{
  *tok = NULL;
  if (gt_hf_exists(dir, "tokenizer.model")) {
    /* SentencePiece (Llama 2 and others of its time): its own model file,
     * which its tokenizer.json only mirrors (Metaspace, not byte-level) */
    char path[GT_PATH_MAX];
    GT_CALL(gt_hf_join(dir, "tokenizer.model", path, sizeof path));
    GT_CALL(gt_tokenizer_load(path, tok));
  } else if (!gt_hf_exists(dir, "tokenizer.json") && !gt_hf_exists(dir, "vocab.json")) {
    snprintf(note, size, "%s has no tokenizer.model, tokenizer.json (nor vocab.json and "
             "merges.txt)", dir);
    return GT_SUCCESS;
  } else {
    GT_CALL(gt_tokenizer_load_hf(dir, tok));
  }
  GT_CHECK(gt_tokenizer_vocab(*tok) <= vocab, GT_ERR_INPUT,
           "%s: the tokenizer has %d ids but config.json's vocab_size is %ld", dir,
           gt_tokenizer_vocab(*tok), vocab);
  return GT_SUCCESS;
}

int gt_hf_load_tokenizer(const char *dir, gt_tokenizer **tok)
{
  char note[GT_PATH_MAX + 96] = "";
  GT_CALL(gt_hf_tokenizer(dir, INT32_MAX, tok, note, sizeof note));
  GT_CHECK(*tok != NULL, GT_ERR_INPUT, "%s", note);
  return GT_SUCCESS;
}

// ---- the import -------------------------------------------------------------------------

typedef struct {
  gt_config *cfg;
  char *deck;
  gt_ckpt_tensor *tensors;
  gt_hf_src src;
  gt_tokenizer *tok;
  gt_ckpt_stream *out;
  float *values;
  size_t cap;
} gt_hf_import_state;

static int gt_hf_import_in(const char *dir, const char *out, gt_hf_import_state *st,
                           gt_hf_import_summary *sum)
{
  struct stat sb;
  GT_CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), GT_ERR_INPUT,
           "%s is not a directory; ckpt import reads a Hugging Face model directory", dir);
  GT_CHECK(gt_hf_exists(dir, "config.json"), GT_ERR_INPUT,
           "%s has no config.json; it is not a Hugging Face model directory", dir);
  st->cfg = malloc(sizeof *st->cfg);
  GT_CHECK_ALLOC(st->cfg, sizeof *st->cfg);
  gt_config_defaults(st->cfg);
  GT_CALL(gt_hf_config_read(dir, st->cfg));
  const gt_gpt_shape shape = gt_gpt_shape_config(st->cfg);
  snprintf(sum->arch, sizeof sum->arch, "%s",
           shape.experts > 0            ? "MixtralForCausalLM"
           : gt_gpt_shape_llama(&shape) ? "LlamaForCausalLM"
                                        : "GPT2LMHeadModel");
  const int n = gt_gpt_logical_count(&shape);
  st->tensors = calloc((size_t)n, sizeof *st->tensors);
  GT_CHECK_ALLOC(st->tensors, sizeof *st->tensors * (size_t)n);
  for (int i = 0; i < n; i++) {
    gt_ckpt_tensor *t = &st->tensors[i];
    gt_gpt_logical_param(&shape, i, t->name, &t->ndim, t->dims);
    sum->largest = gt_ckpt_tensor_numel(t) * sizeof(float) > sum->largest
                       ? gt_ckpt_tensor_numel(t) * sizeof(float)
                       : sum->largest;
  }
  GT_CALL(gt_hf_src_open(dir, &st->src));
  GT_CALL(gt_hf_tokenizer(dir, shape.vocab, &st->tok, sum->tokenizer_note,
                          sizeof sum->tokenizer_note));
  snprintf(sum->tokenizer, sizeof sum->tokenizer, "%s",
           st->tok ? gt_tokenizer_name(st->tok) : "none");
  const int len = gt_config_to_ini(st->cfg, NULL, 0);
  st->deck = malloc((size_t)len + 1);
  GT_CHECK_ALLOC(st->deck, (size_t)len + 1);
  gt_config_to_ini(st->cfg, st->deck, (size_t)len + 1);
  gt_ckpt_meta meta = {.format = GT_CKPT_FORMAT, .seed = st->cfg->run.seed, .loss_scale = 1.0,
                       .loss = NAN, .dp = 1, .pp = 1, .tp = 1, .layers = shape.layers,
                       .heads = shape.heads, .dim = shape.dim, .seq_len = shape.max_seq,
                       .vocab = shape.vocab, .batch = st->cfg->data.batch, .deck = st->deck};
  snprintf(meta.precision, sizeof meta.precision, "fp32");
  snprintf(meta.code_version, sizeof meta.code_version, "%s", gt_version());
  const time_t now = time(NULL);
  struct tm utc;
  gmtime_r(&now, &utc);
  strftime(meta.created, sizeof meta.created, "%Y-%m-%dT%H:%M:%SZ", &utc);
  GT_CALL(gt_ckpt_stream_open(out, &meta, n, st->tensors, st->tok, &st->out));
  for (int i = 0; i < n; i++) {
    const gt_ckpt_tensor *t = &st->tensors[i];
    GT_CALL(gt_ckpt_grow((void **)&st->values, &st->cap, gt_ckpt_tensor_numel(t),
                         sizeof(float)));
    GT_CALL(gt_hf_src_read(&st->src, &shape, t->name, t->ndim, t->dims, st->values));
    GT_CALL(gt_ckpt_stream_put(st->out, i, st->values));
  }
  sum->tensors = n;
  sum->files = st->src.nfiles;
  snprintf(sum->dtype, sizeof sum->dtype, "%s", st->src.dtype);
  GT_CALL(gt_ckpt_stream_close(&st->out, true));
  return GT_SUCCESS;
}

int gt_hf_import(const char *dir, const char *out, gt_hf_import_summary *sum)
{
  gt_hf_import_summary local;
  sum = sum ? sum : &local;
  *sum = (gt_hf_import_summary){0};
  gt_hf_import_state st = {0};
  const int status = gt_hf_import_in(dir, out, &st, sum);
  gt_ckpt_stream_close(&st.out, false);
  gt_hf_src_free(&st.src);
  gt_tokenizer_free(st.tok);
  free(st.values);
  free(st.tensors);
  free(st.deck);
  free(st.cfg);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- straight into a model's parameters ([checkpoint] init, score) -------------------------

typedef struct {
  gt_gpt_shape shape;
  gt_hf_src src;
} gt_hf_fill_ctx;

static int gt_hf_fill(void *ctx, const gt_param *t, float *full)
{
  gt_hf_fill_ctx *c = ctx;
  GT_CALL(gt_hf_src_read(&c->src, &c->shape, t->name, t->ndim, t->full_shape, full));
  return GT_SUCCESS;
}

int gt_hf_load_params(const char *dir, gt_params *params)
{
  gt_config *cfg = malloc(sizeof *cfg);
  GT_CHECK_ALLOC(cfg, sizeof *cfg);
  gt_config_defaults(cfg);
  gt_hf_fill_ctx c = {0};
  int status = gt_hf_config_read(dir, cfg);
  if (status == GT_SUCCESS) {
    c.shape = gt_gpt_shape_config(cfg);
    status = gt_hf_src_open(dir, &c.src);
  }
  if (status == GT_SUCCESS)
    status = gt_params_fill(params, gt_hf_fill, &c);
  gt_hf_src_free(&c.src);
  free(cfg);
  GT_CALL(status);
  return GT_SUCCESS;
}
