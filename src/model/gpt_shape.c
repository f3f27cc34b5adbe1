/*
 * gpt_shape.c - the model's shape: what a configuration describes, and the
 * resolved fields of the two architectures (gpt.h).
 */
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
  return s;
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
