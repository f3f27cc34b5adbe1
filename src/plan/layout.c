/*
 * layout.c - the one resolver of a configuration on a number of ranks
 * (layout.h): sizes, the checks against the model and the batch, the
 * schedule, and what applies of ZeRO and sequence parallelism.
 */
#include "gridtrain/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"
#include "gridtrain/gpt.h"
#include "gridtrain/rope.h"

/* The sizes (0 = auto) on world_size ranks into sizes[3] = {dp, pp, tp}. */
static int gt_layout_sizes(const gt_config *cfg, int world_size, int sizes[3])
{
  const long req[3] = {cfg->grid.dp, cfg->grid.pp, cfg->grid.tp};
  static const char *names[3] = {"dp", "pp", "tp"};
  long fixed = 1;
  int first_auto = -1;
  for (int i = 0; i < 3; i++) {
    GT_CHECK(req[i] >= 0, GT_ERR_INPUT, "[grid] %s = %ld: a size is a count >= 1, or 0 for auto",
             names[i], req[i]);
    if (req[i] == 0) {
      if (first_auto < 0)
        first_auto = i;
    } else {
      fixed *= req[i];
    }
  }
  char layout[96];
  size_t len = 0;
  for (int i = 0; i < 3; i++)
    len += (size_t)(req[i] ? snprintf(layout + len, sizeof layout - len, "%s%s=%ld",
                                      i ? " x " : "", names[i], req[i])
                           : snprintf(layout + len, sizeof layout - len, "%s%s=auto",
                                      i ? " x " : "", names[i]));
  if (first_auto < 0) {
    GT_CHECK(fixed == world_size, GT_ERR_INPUT,
             "layout %s needs %ld ranks but the job has %d; launch %ld ranks "
             "or set one of [grid] dp, pp, tp to auto",
             layout, fixed, world_size, fixed);
  } else {
    GT_CHECK(world_size % fixed == 0, GT_ERR_INPUT,
             "layout %s: the fixed sizes multiply to %ld, which does not divide "
             "the %d ranks of the job",
             layout, fixed, world_size);
  }
  for (int i = 0; i < 3; i++)
    sizes[i] = req[i] ? (int)req[i] : (i == first_auto ? (int)(world_size / fixed) : 1);
  return GT_SUCCESS;
}

/* "{1, 2, 4}": the divisors of n, for messages. */
static void gt_divisors(long n, char *buf, size_t size)
{
  size_t len = 0;
  buf[0] = '\0';
  for (long d = 1; d <= n && len + 16 < size; d++)
    if (n % d == 0)
      len += (size_t)snprintf(buf + len, size - len, "%s%ld", len ? ", " : "{", d);
  snprintf(buf + len, size - len, "}");
}

/* ", rope_factor = 8, ...": the rope keys that cfg's rope_scaling reads. */
static const char *gt_layout_rope_keys(const gt_config *cfg, char *buf, size_t size)
{
  buf[0] = '\0';
  if (cfg->model.rope_scaling == GT_ROPE_SCALING_LINEAR)
    snprintf(buf, size, ", rope_factor = %g", cfg->model.rope_factor);
  else if (cfg->model.rope_scaling == GT_ROPE_SCALING_LLAMA3)
    snprintf(buf, size,
             ", rope_factor = %g, rope_low_freq_factor = %g, rope_high_freq_factor = %g, "
             "rope_original_seq_len = %ld",
             cfg->model.rope_factor, cfg->model.rope_low_freq_factor,
             cfg->model.rope_high_freq_factor, cfg->model.rope_original_seq_len);
  return buf;
}

/* The architecture's keys against each other (docs/models.md). */
static int gt_layout_check_arch(const gt_config *cfg)
{
  char divs[256];
  const gt_gpt_shape s = gt_gpt_shape_config(cfg);
  const long heads = cfg->model.heads, kv = gt_gpt_shape_kv_heads(&s);
  const long ffn = gt_gpt_shape_ffn(&s);
  if (!gt_gpt_shape_llama(&s)) {
    GT_CHECK(kv == heads, GT_ERR_INPUT,
             "[model] kv_heads=%ld: type = gpt (GPT-2) has as many key/value heads as heads "
             "(%ld); grouped-query attention is type = llama",
             kv, heads);
    GT_CHECK(ffn == 4 * cfg->model.dim, GT_ERR_INPUT,
             "[model] ffn_dim=%ld: type = gpt (GPT-2) has an MLP of 4 dim = %ld; other widths "
             "are type = llama",
             ffn, 4 * cfg->model.dim);
    return GT_SUCCESS;
  }
  if (heads % kv != 0) {
    gt_divisors(heads, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "[model] kv_heads=%ld does not divide heads=%ld (each key/value head serves "
                    "a group of query heads); choose kv_heads in %s",
                    kv, heads, divs);
  }
  const long hs = cfg->model.dim / heads;
  GT_CHECK(hs % 2 == 0, GT_ERR_INPUT,
           "[model] dim / heads = %ld: rotary position embedding (type = llama) needs an even "
           "head size",
           hs);
  /* the rope keys: gt_rope_inv_freq checks them, naming the one out of range */
  float *inv_freq = malloc((size_t)hs / 2 * sizeof *inv_freq);
  GT_CHECK_ALLOC(inv_freq, (size_t)hs / 2 * sizeof *inv_freq);
  const int status = gt_rope_inv_freq(hs, s.rope_theta, &s.rope, inv_freq);
  free(inv_freq);
  if (status != GT_SUCCESS) /* its message speaks transformers' names: say the deck's */
    return gt_error_wrap(status, __FILE__, __LINE__, __func__,
                         "[model] rope_theta = %g, rope_scaling = %s%s", cfg->model.rope_theta,
                         gt_rope_scaling_names[cfg->model.rope_scaling],
                         gt_layout_rope_keys(cfg, divs, sizeof divs));
  return GT_SUCCESS;
}

/* The sizes against the model and the batch. */
static int gt_layout_check_model(const gt_config *cfg, int dp, int pp, int tp)
{
  char divs[256];
  if (cfg->model.dim % cfg->model.heads != 0) {
    gt_divisors(cfg->model.dim, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "[model] heads=%ld does not divide dim=%ld; choose heads in %s",
                    cfg->model.heads, cfg->model.dim, divs);
  }
  GT_CALL(gt_layout_check_arch(cfg));
  if (cfg->model.heads % tp != 0) {
    gt_divisors(cfg->model.heads, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "tp=%d does not divide [model] heads=%ld; choose tp in %s", tp,
                    cfg->model.heads, divs);
  }
  const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
  const long kv = gt_gpt_shape_kv_heads(&shape), ffn = gt_gpt_shape_ffn(&shape);
  if (kv % tp != 0) {
    gt_divisors(kv, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "tp=%d does not divide [model] kv_heads=%ld: each tensor-parallel rank "
                    "holds whole key/value heads; choose tp in %s (or more kv_heads)",
                    tp, kv, divs);
  }
  if (ffn % tp != 0) {
    gt_divisors(ffn, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "tp=%d does not divide [model] ffn_dim=%ld (the MLP's units split over "
                    "tp); choose tp in %s or another ffn_dim",
                    tp, ffn, divs);
  }
  GT_CHECK(cfg->model.layers >= pp, GT_ERR_INPUT,
           "pp=%d pipeline stages need at least %d layers but [model] layers=%ld; "
           "choose pp <= %ld",
           pp, pp, cfg->model.layers, cfg->model.layers);
  const long per = (long)dp * cfg->data.microbatches;
  GT_CHECK(cfg->data.batch % per == 0, GT_ERR_INPUT,
           "[data] batch=%ld does not split over dp=%d x microbatches=%ld; choose "
           "batch as a multiple of %ld",
           cfg->data.batch, dp, cfg->data.microbatches, per);
  const long tokens = cfg->data.batch / per * cfg->model.seq_len; /* per micro-batch */
  GT_CHECK(!cfg->parallel.sequence_parallel || tokens % tp == 0, GT_ERR_INPUT,
           "[parallel] sequence_parallel = on: a micro-batch's %ld tokens ([data] batch / "
           "(dp x microbatches) x [model] seq_len) do not split over tp=%d; choose a seq_len "
           "that is a multiple of %d",
           tokens, tp, tp);
  /* The vocabulary is split into tp pieces of ceil(vocab / tp) rows (the
   * last padded); every piece must hold at least one real row. */
  const long piece = (cfg->model.vocab + tp - 1) / tp;
  GT_CHECK((long)(tp - 1) * piece < cfg->model.vocab, GT_ERR_INPUT,
           "tp=%d leaves a tensor-parallel rank without vocabulary rows ([model] vocab=%ld); "
           "choose a smaller tp",
           tp, cfg->model.vocab);
  return GT_SUCCESS;
}

/* The mixture-of-experts keys against each other and the layout (docs/models.md). */
static int gt_layout_check_moe(const gt_config *cfg, const gt_layout *l, bool splits)
{
  char divs[256];
  const long E = cfg->model.experts;
  if (E == 0) {
    GT_CHECK(cfg->model.shared_experts == 0, GT_ERR_INPUT,
             "[model] shared_experts=%ld needs routed experts too ([model] experts > 0); a "
             "dense model's MLP width is ffn_dim",
             cfg->model.shared_experts);
    return GT_SUCCESS;
  }
  GT_CHECK(cfg->model.top_k <= E, GT_ERR_INPUT,
           "[model] top_k=%ld is more than [model] experts=%ld; choose top_k in 1..%ld",
           cfg->model.top_k, E, E);
  const gt_gpt_shape s = gt_gpt_shape_config(cfg);
  const long fe = gt_gpt_shape_expert_ffn(&s), fs = gt_gpt_shape_shared_ffn(&s);
  if (fe % l->tp != 0 || fs % l->tp != 0) {
    gt_divisors(fe, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "tp=%d does not divide [model] expert_ffn_dim=%ld (each expert's units "
                    "split over tp as the dense MLP's); choose tp in %s or another "
                    "expert_ffn_dim",
                    l->tp, fe, divs);
  }
  GT_CHECK(!l->seq_par, GT_ERR_INPUT,
           "[parallel] sequence_parallel = on does not take [model] experts yet; turn it off");
  GT_CHECK(!splits, GT_ERR_INPUT,
           "[parallel] schedule = %s does not take [model] experts yet (its split backward "
           "has no experts); use schedule = 1f1b",
           gt_schedule_name(&l->schedule));
  return GT_SUCCESS;
}

int gt_layout_resolve(const gt_config *cfg, int ranks, gt_layout *l)
{
  memset(l, 0, sizeof *l);
  int sizes[3];
  GT_CALL(gt_layout_sizes(cfg, ranks, sizes));
  const int dp = sizes[0], pp = sizes[1], tp = sizes[2];
  GT_CALL(gt_layout_check_model(cfg, dp, pp, tp));
  l->dp = dp, l->pp = pp, l->tp = tp;
  l->micro = (int)cfg->data.microbatches;
  l->mbs = (int)(cfg->data.batch / ((long)dp * l->micro));
  GT_CALL(gt_schedule_parse(cfg->parallel.schedule, &l->schedule));
  GT_CALL(gt_schedule_check(&l->schedule, pp, l->micro, (int)cfg->model.layers));
  l->zero = dp > 1 ? (int)cfg->parallel.zero : 0;
  l->recompute = cfg->model.recompute;
  l->seq_par = tp > 1 && cfg->parallel.sequence_parallel;
  const bool splits = gt_schedule_splits(&l->schedule);
  const bool streams = gt_schedule_streams(&l->schedule);
  GT_CHECK(!(splits || streams) || l->zero <= 1, GT_ERR_INPUT,
           "[parallel] schedule = %s takes [parallel] zero = 0 or 1 (not %s%d: %s); use "
           "zero = 1 or schedule = 1f1b",
           gt_schedule_name(&l->schedule), splits ? "yet " : "", l->zero,
           splits ? "its gradient and weight shards follow the joint backward"
                  : "a micro-batch of the next step would gather weights the update has not "
                    "made yet");
  if (splits) { /* what the split backward does not take yet */
    GT_CHECK(!l->seq_par, GT_ERR_INPUT,
             "[parallel] schedule = %s does not take [parallel] sequence_parallel = on yet; "
             "turn it off or use schedule = 1f1b",
             gt_schedule_name(&l->schedule));
    GT_CHECK(l->recompute == GT_RECOMPUTE_NONE, GT_ERR_INPUT,
             "[parallel] schedule = %s does not take [model] recompute = %s yet (its W needs "
             "the activations kept); use recompute = none or schedule = 1f1b",
             gt_schedule_name(&l->schedule), gt_recompute_names[l->recompute]);
  }
  GT_CALL(gt_layout_check_moe(cfg, l, splits));
  if (streams) { /* what the two weight versions take */
    GT_CHECK(dp == 1 || strcmp(cfg->parallel.sync, "every_step") == 0, GT_ERR_INPUT,
             "[parallel] schedule = %s takes [parallel] sync = every_step only (not '%s': its "
             "weight versions are those of the synchronous update); use sync = every_step "
             "or schedule = 1f1b",
             gt_schedule_name(&l->schedule), cfg->parallel.sync);
    GT_CHECK(cfg->checkpoint.local_every == 0, GT_ERR_INPUT,
             "[parallel] schedule = %s does not take [checkpoint] local_every yet (the "
             "node-local states do not hold its older weight version); use the global "
             "checkpoints ([checkpoint] every) or schedule = 1f1b",
             gt_schedule_name(&l->schedule));
  }
  l->dtype = cfg->backend.precision;
  l->dp_overlap = cfg->parallel.dp_overlap;
  return GT_SUCCESS;
}

void gt_layout_to_config(const gt_layout *l, gt_config *cfg)
{
  cfg->grid.dp = l->dp, cfg->grid.pp = l->pp, cfg->grid.tp = l->tp;
  cfg->data.microbatches = l->micro;
  cfg->data.batch = (long)l->dp * l->mbs * l->micro;
  snprintf(cfg->parallel.schedule, sizeof cfg->parallel.schedule, "%s",
           gt_schedule_name(&l->schedule));
  cfg->parallel.zero = l->zero;
  cfg->parallel.sequence_parallel = l->seq_par;
  cfg->parallel.dp_overlap = l->dp_overlap;
  cfg->model.recompute = l->recompute;
  cfg->backend.precision = l->dtype;
}

bool gt_layout_equal(const gt_layout *a, const gt_layout *b)
{
  return a->dp == b->dp && a->pp == b->pp && a->tp == b->tp && a->mbs == b->mbs &&
         a->micro == b->micro && a->schedule.kind == b->schedule.kind &&
         a->schedule.chunks == b->schedule.chunks && a->zero == b->zero &&
         a->recompute == b->recompute && a->seq_par == b->seq_par && a->dtype == b->dtype &&
         a->dp_overlap == b->dp_overlap;
}

void gt_layout_describe(const gt_layout *l, char *buf, size_t size)
{
  snprintf(buf, size, "%s compute, zero %d over dp=%d, recompute %s, %s schedule%s",
           gt_dtype_name(l->dtype), l->zero, l->dp, gt_recompute_names[l->recompute],
           gt_schedule_name(&l->schedule), l->seq_par ? ", sequence parallel over tp" : "");
}
