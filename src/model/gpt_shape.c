/*
 * gpt_shape.c - the model's shape: what a configuration describes, and the
 * resolved fields of the two architectures (gpt.h).
 */
#include <stdio.h>

#include "gridtrain/config.h"
#include "gridtrain/gpt.h"

gt_gpt_shape gt_gpt_shape_config(const gt_config *cfg)
{
  gt_gpt_shape s = {.layers = (int)cfg->model.layers,
                    .heads = (int)cfg->model.heads,
                    .dim = (int)cfg->model.dim,
                    .max_seq = (int)cfg->model.seq_len,
                    .vocab = (int)cfg->model.vocab};
  s.arch = cfg->model.type;
  s.kv_heads = (int)cfg->model.kv_heads;
  s.ffn_dim = (int)cfg->model.ffn_dim;
  s.tie = cfg->model.tie_embeddings;
  s.norm_eps = (float)cfg->model.norm_eps;
  s.rope_theta = cfg->model.rope_theta;
  s.rope = (gt_rope_scaling){.type = (gt_rope_type)cfg->model.rope_scaling,
                             .factor = cfg->model.rope_factor,
                             .low_freq_factor = cfg->model.rope_low_freq_factor,
                             .high_freq_factor = cfg->model.rope_high_freq_factor,
                             .original_max_position_embeddings = cfg->model.rope_original_seq_len};
  s.experts = (int)cfg->model.experts;
  s.top_k = (int)cfg->model.top_k;
  s.moe_every = (int)cfg->model.moe_every;
  s.expert_ffn = (int)cfg->model.expert_ffn_dim;
  s.shared_experts = (int)cfg->model.shared_experts;
  s.capacity_factor = cfg->model.capacity_factor;
  s.aux_loss = cfg->model.aux_loss;
  s.z_loss = cfg->model.z_loss;
  return s;
}

bool gt_gpt_shape_moe_block(const gt_gpt_shape *s, int layer)
{
  return s->experts > 0 && layer % (s->moe_every > 0 ? s->moe_every : 1) == 0;
}

int gt_gpt_shape_expert_ffn(const gt_gpt_shape *s)
{
  return s->expert_ffn > 0 ? s->expert_ffn : gt_gpt_shape_ffn(s);
}

int gt_gpt_shape_shared_ffn(const gt_gpt_shape *s)
{
  return s->shared_experts * gt_gpt_shape_expert_ffn(s);
}

bool gt_gpt_shape_llama(const gt_gpt_shape *s) { return s->arch == GT_MODEL_LLAMA; }

int gt_gpt_shape_kv_heads(const gt_gpt_shape *s)
{
  return s->kv_heads > 0 ? s->kv_heads : s->heads;
}

int gt_gpt_shape_ffn(const gt_gpt_shape *s)
{
  if (s->ffn_dim > 0)
    return s->ffn_dim;
  if (!gt_gpt_shape_llama(s))
    return 4 * s->dim;
  /* Meta's Llama: int(2/3 * 4 dim) rounded up to a multiple of 256 */
  const long hidden = 8L * s->dim / 3, multiple = 256;
  return (int)((hidden + multiple - 1) / multiple * multiple);
}

bool gt_gpt_shape_tied(const gt_gpt_shape *s)
{
  return s->tie == GT_TRI_AUTO ? !gt_gpt_shape_llama(s) : s->tie == GT_TRI_ON;
}

int gt_gpt_shape_head_size(const gt_gpt_shape *s) { return s->dim / s->heads; }

float gt_gpt_shape_norm_eps(const gt_gpt_shape *s)
{
  return s->norm_eps > 0.0f ? s->norm_eps : 1e-5f;
}

bool gt_gpt_shape_differ(const gt_gpt_shape *a, const gt_gpt_shape *b, bool weights_only,
                         gt_gpt_shape_field *f)
{
  const bool llama = gt_gpt_shape_llama(a) && gt_gpt_shape_llama(b);
  const struct {
    const char *key;
    double va, vb;
    bool applies;
  } k[] = {
    {"type", a->arch, b->arch, true},
    {"layers", a->layers, b->layers, true},
    {"heads", a->heads, b->heads, true},
    {"dim", a->dim, b->dim, true},
    {"seq_len", a->max_seq, b->max_seq, !llama || !weights_only}, /* gpt: wpe's rows */
    {"vocab", a->vocab, b->vocab, true},
    {"kv_heads", gt_gpt_shape_kv_heads(a), gt_gpt_shape_kv_heads(b), true},
    {"ffn_dim", gt_gpt_shape_ffn(a), gt_gpt_shape_ffn(b), true},
    {"tie_embeddings", gt_gpt_shape_tied(a), gt_gpt_shape_tied(b), true},
    {"norm_eps", gt_gpt_shape_norm_eps(a), gt_gpt_shape_norm_eps(b), llama && !weights_only},
    {"rope_theta", a->rope_theta, b->rope_theta, llama && !weights_only},
    {"rope_scaling", a->rope.type, b->rope.type, llama && !weights_only},
    {"experts", a->experts, b->experts, true},
    {"top_k", a->experts ? a->top_k : 0, b->experts ? b->top_k : 0, !weights_only},
    {"moe_every", a->experts ? (a->moe_every > 0 ? a->moe_every : 1) : 0,
     b->experts ? (b->moe_every > 0 ? b->moe_every : 1) : 0, true},
    {"expert_ffn_dim", a->experts ? gt_gpt_shape_expert_ffn(a) : 0,
     b->experts ? gt_gpt_shape_expert_ffn(b) : 0, true},
    {"shared_experts", a->experts ? a->shared_experts : 0,
     b->experts ? b->shared_experts : 0, true},
    {"capacity_factor", a->capacity_factor, b->capacity_factor, !weights_only},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (!k[i].applies || k[i].va == k[i].vb)
      continue;
    f->key = k[i].key;
    if (i == 0) {
      snprintf(f->a, sizeof f->a, "%s", gt_model_type_names[a->arch]);
      snprintf(f->b, sizeof f->b, "%s", gt_model_type_names[b->arch]);
    } else if (i == 8) {
      snprintf(f->a, sizeof f->a, "%s", k[i].va ? "on" : "off");
      snprintf(f->b, sizeof f->b, "%s", k[i].vb ? "on" : "off");
    } else if (i == 11) {
      snprintf(f->a, sizeof f->a, "%s", gt_rope_scaling_names[a->rope.type]);
      snprintf(f->b, sizeof f->b, "%s", gt_rope_scaling_names[b->rope.type]);
    } else {
      snprintf(f->a, sizeof f->a, "%.10g", k[i].va);
      snprintf(f->b, sizeof f->b, "%.10g", k[i].vb);
    }
    return true;
  }
  return false;
}
