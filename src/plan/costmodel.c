/*
 * costmodel.c - the time of one training step of a layout on a cluster
 * (costmodel.h, docs/planning.md): a roofline per kernel, alpha-beta
 * collectives placed by the rank order, the pipeline bubble per schedule,
 * the data-parallel reduction's exposed part, and the memory account of
 * memory.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/costmodel.h"
#include "gridtrain/coll_algos.h"
#include "gridtrain/error.h"
#include "gridtrain/grad_shards.h"
#include "gridtrain/memory.h"
#include "gridtrain/param_gather.h"
#include "gridtrain/schedule.h"

// ---- kernels ------------------------------------------------------------------

static gt_kernel gt_k_gemm(const char *name, double M, double N, double K, double E,
                           double batch)
{
  gt_kernel k = {name, 0, 0, 0, 0, 2, false, true, M, N, K};
  k.flops = 2.0 * M * N * K * batch;
  k.bytes = E * (M * K + K * N + M * N) * batch;
  k.bwd_flops = 2.0 * k.flops; /* data gradient + weight gradient */
  k.bwd_bytes = 2.0 * k.bytes;
  return k;
}

/* A memory-bound kernel: fwd_bytes forward, bwd_bytes backward (one kernel). */
static gt_kernel gt_k_mem(const char *name, double flops, double fwd_bytes, double bwd_bytes)
{
  gt_kernel k = {name, flops, fwd_bytes, 2.0 * flops, bwd_bytes, 1, false, false, 0, 0, 0};
  return k;
}

/* LayerNorm over rows x C: reads x, writes y (forward); reads x and dy,
 * writes dx (backward). */
static gt_kernel gt_k_ln(const char *name, double rows, double C, double E)
{
  return gt_k_mem(name, 8.0 * rows * C, 2.0 * E * rows * C, 3.0 * E * rows * C);
}

/* bias + residual add (+ dropout, its 1-byte mask) over rows x C. Backward:
 * the bias gradient reads dy (and with dropout, dy and the mask into dx). */
static gt_kernel gt_k_resid(const char *name, double rows, double C, double E, bool dropout)
{
  const double n = rows * C;
  return gt_k_mem(name, 2.0 * n, dropout ? (3.0 * E + 1.0) * n : 3.0 * E * n,
                  dropout ? (2.0 * E + 1.0) * n : E * n);
}

/* A kernel's work times w (the share of the blocks that run it). */
static void gt_k_scale(gt_kernel *k, double w)
{
  k->flops *= w;
  k->bytes *= w;
  k->bwd_flops *= w;
  k->bwd_bytes *= w;
}

/* An MLP of F units (this rank's) over `rows` rows: fc (gate and up in
 * one product with SwiGLU), the activation, the projection, each weighted
 * by w; appended to k from n, returns the new count. */
static int gt_cost_mlp_kernels(gt_kernel *k, int n, double rows, double F, double C, double E,
                               bool llama, const char *fc, const char *proj, double w)
{
  const int first = n;
  if (llama) { /* gate and up in one product; silu(gate) * up reads both */
    k[n++] = gt_k_gemm(fc, rows, 2.0 * F, C, E, 1);
    k[n++] = gt_k_mem("swiglu", 8.0 * rows * F, 3.0 * E * rows * F, 5.0 * E * rows * F);
  } else {
    k[n++] = gt_k_gemm(fc, rows, F, C, E, 1);
    k[n++] = gt_k_mem("gelu", 10.0 * rows * F, 2.0 * E * rows * F, 3.0 * E * rows * F);
  }
  k[n++] = gt_k_gemm(proj, rows, C, F, E, 1);
  for (int i = first; i < n; i++)
    gt_k_scale(&k[i], w);
  return n;
}

int gt_cost_block_kernels(const gt_gpt_shape *shape, int mbs, int seq, int tp, bool seq_par,
                          gt_dtype dt, const gt_cluster *c, gt_kernel *k)
{
  const double E = (double)gt_dtype_size(dt), T = seq, C = shape->dim;
  const double N = (double)mbs * T, Nr = seq_par && tp > 1 ? N / tp : N;
  const bool llama = gt_gpt_shape_llama(shape);
  const double Cl = C / tp, F = (double)gt_gpt_shape_ffn(shape) / tp;
  const double Hl = (double)shape->heads / tp;
  const double hs = C / shape->heads, Kl = (double)gt_gpt_shape_kv_heads(shape) / tp * hs;
  /* the norms: LayerNorm, or RMSNorm (no mean, no bias: about 3/4 the work) */
  const double norm = llama ? 0.75 : 1.0;
  int n = 0;
  k[n++] = gt_k_ln("ln_1", Nr, C, E);
  k[n - 1].flops *= norm;
  k[n++] = gt_k_gemm("qkv", N, Cl + 2.0 * Kl, C, E, 1);
  if (llama) /* rope on q and k in place: read and write them, forward and backward */
    k[n++] = gt_k_mem("rope", 6.0 * N * (Cl + Kl), 2.0 * E * N * (Cl + Kl),
                      2.0 * E * N * (Cl + Kl));
  if (c->flash) {
    /* causal: each query meets on average T/2 keys; q.k and p.v; grouped-
     * query attention reads Kl wide keys and values */
    gt_kernel a = gt_k_mem("attention", 2.0 * N * T * Cl, E * (2.0 * N * Cl + 2.0 * N * Kl) +
                                                              4.0 * N * Hl,
                           E * (4.0 * N * Cl + 4.0 * N * Kl) + 4.0 * N * Hl);
    a.bwd_flops = 2.5 * a.flops; /* rebuilds the probabilities; dq, dk, dv, dp */
    a.attn_core = true;
    k[n++] = a;
  } else {
    const double S2 = (double)mbs * Hl * T * T; /* score elements */
    gt_kernel s = gt_k_gemm("scores", T, T, hs, E, (double)mbs * Hl);
    s.bytes = E * (2.0 * N * Cl + S2), s.bwd_bytes = 2.0 * s.bytes;
    s.attn_core = true;
    k[n++] = s;
    gt_kernel sm = gt_k_mem("softmax", 5.0 * S2, 2.0 * E * S2, 3.0 * E * S2);
    sm.attn_core = true;
    k[n++] = sm;
    if (c->dropout) {
      gt_kernel d = gt_k_mem("attn_dropout", S2, (2.0 * E + 1.0) * S2, (2.0 * E + 1.0) * S2);
      d.attn_core = true;
      k[n++] = d;
    }
    gt_kernel pv = gt_k_gemm("pv", T, hs, T, E, (double)mbs * Hl);
    pv.bytes = E * (S2 + 2.0 * N * Cl), pv.bwd_bytes = 2.0 * pv.bytes;
    pv.attn_core = true;
    k[n++] = pv;
  }
  k[n++] = gt_k_gemm("attn_proj", N, C, Cl, E, 1);
  k[n++] = gt_k_resid("resid_1", Nr, C, E, c->dropout);
  k[n++] = gt_k_ln("ln_2", Nr, C, E);
  k[n - 1].flops *= norm;
  /* with experts every moe_every blocks, a block's MLP is the mean of the
   * two kinds: each kind's kernels weighted by its share of the blocks */
  double moe_share = 0.0;
  for (int l = 0; l < shape->layers; l++)
    moe_share += gt_gpt_shape_moe_block(shape, l) ? 1.0 : 0.0;
  moe_share = shape->layers > 0 ? moe_share / shape->layers : 0.0;
  if (moe_share < 1.0)
    n = gt_cost_mlp_kernels(k, n, N, F, C, E, llama, "fc", "fc_proj", 1.0 - moe_share);
  if (moe_share > 0.0) {
    const double X = shape->experts, K = shape->top_k, R = N * K;
    const double Fe = (double)gt_gpt_shape_expert_ffn(shape) / tp;
    const double Fs = (double)gt_gpt_shape_shared_ffn(shape) / tp;
    const int first = n;
    /* the router in fp32 (its input cast), its softmax and top-k, the
     * rows into expert order and back (each read and written once) */
    k[n++] = gt_k_gemm("router", N, X, C, 4.0, 1);
    k[n++] = gt_k_mem("route", 8.0 * N * X, 4.0 * N * X + E * N * C, 8.0 * N * X);
    k[n++] = gt_k_mem("dispatch", 0.0, 2.0 * E * R * C, 2.0 * E * R * C);
    for (int i = first; i < n; i++)
      gt_k_scale(&k[i], moe_share);
    n = gt_cost_mlp_kernels(k, n, R, Fe, C, E, llama, "expert_fc", "expert_proj", moe_share);
    const int comb = n;
    k[n++] = gt_k_mem("combine", 2.0 * R * C, E * (R + N) * C, E * (2.0 * R + N) * C);
    gt_k_scale(&k[comb], moe_share);
    if (Fs > 0)
      n = gt_cost_mlp_kernels(k, n, N, Fs, C, E, llama, "shared_fc", "shared_proj", moe_share);
  }
  k[n++] = gt_k_resid("resid_2", Nr, C, E, c->dropout);
  return n;
}

int gt_cost_head_kernels(const gt_gpt_shape *shape, int mbs, int seq, int tp, bool seq_par,
                         gt_dtype dt, const gt_cluster *c, gt_kernel *k)
{
  (void)c;
  const double E = (double)gt_dtype_size(dt), C = shape->dim;
  const double N = (double)mbs * seq, Nr = seq_par && tp > 1 ? N / tp : N;
  const double Vl = (double)((shape->vocab + tp - 1) / tp);
  int n = 0;
  k[n++] = gt_k_ln("ln_f", Nr, C, E);
  k[n++] = gt_k_gemm("logits", N, Vl, C, E, 1);
  k[n++] = gt_k_mem("cross_entropy", 5.0 * N * Vl, 2.0 * E * N * Vl, 2.0 * E * N * Vl);
  return n;
}

int gt_cost_embed_kernels(const gt_gpt_shape *shape, int mbs, int seq, int tp, bool seq_par,
                          gt_dtype dt, const gt_cluster *c, gt_kernel *k)
{
  (void)c;
  const double E = (double)gt_dtype_size(dt), C = shape->dim;
  const double N = (double)mbs * seq, Nr = seq_par && tp > 1 ? N / tp : N;
  (void)Nr;
  k[0] = gt_k_mem("embedding", N * C, 3.0 * E * N * C, (E + 8.0) * N * C);
  return 1;
}

// ---- rooflines and collectives ----------------------------------------------------

static double gt_peak_of(const gt_cluster *c, gt_dtype dt)
{
  switch (dt) {
  case GT_BF16:
    return c->peak[GT_PEAK_BF16];
  case GT_F16:
    return c->peak[GT_PEAK_FP16];
  default:
    return c->fp32_tf32 ? c->peak[GT_PEAK_TF32] : c->peak[GT_PEAK_FP32];
  }
}

/* A kernel's roofline with the matrix efficiency eff. */
static double gt_roofline(const gt_cluster *c, gt_dtype dt, double flops, double bytes,
                          double share, double eff)
{
  const double peak = gt_peak_of(c, dt) * share * eff;
  const double bw = c->memory_bw * share * c->eff_mem;
  const double tf = peak > 0 ? flops / peak : INFINITY, tm = bytes / bw;
  return (tf > tm ? tf : tm) + c->kernel_overhead;
}

double gt_cost_kernel_time(const gt_cluster *c, gt_dtype dt, double flops, double bytes,
                           double share)
{
  return gt_roofline(c, dt, flops, bytes, share, c->eff_matmul);
}

/* The ring's alpha-beta-gamma time (coll_algos.h: the model the runtime's
 * auto choice evaluates too). */
static double gt_cost_ring(gt_coll_op op, int n, double bytes, double alpha, double beta,
                           double gamma, double eff)
{
  return gt_algo_time(GT_ALGO_RING, op, n, bytes, 0, (const double[3]){alpha, beta, gamma}, eff);
}

double gt_cost_allreduce(int n, double bytes, double alpha, double beta, double gamma,
                         double eff)
{
  return gt_cost_ring(GT_COLL_ALLREDUCE, n, bytes, alpha, beta, gamma, eff);
}

double gt_cost_reduce_scatter(int n, double bytes, double alpha, double beta, double gamma,
                              double eff)
{
  return gt_cost_ring(GT_COLL_REDUCE_SCATTER, n, bytes, alpha, beta, gamma, eff);
}

double gt_cost_allgather(int n, double bytes, double alpha, double beta, double eff)
{
  return gt_cost_ring(GT_COLL_ALLGATHER, n, bytes, alpha, beta, 0.0, eff);
}

double gt_cost_bubble_fraction(gt_schedule_kind s, int pp, int micro, int chunks, int zero)
{
  if (pp <= 1 || micro <= 0)
    return 0;
  if (s == GT_SCHEDULE_ZBH1) /* a forward's time per stage ramp: a third of a step unit */
    return (double)(pp - 1) / (3.0 * micro);
  if (s == GT_SCHEDULE_2BW) /* no ramp; updated in the next step at stage 0, else the step's
                               reductions wait for the first stage's last backwards: two
                               thirds of a step unit per stage */
    return zero == 0 ? 0.0 : 2.0 * (pp - 1) / (3.0 * micro);
  return (double)(pp - 1) / ((s == GT_SCHEDULE_INTERLEAVED ? chunks : 1) * (double)micro);
}

/* The link of a group of n members `stride` ranks apart (rank order TP
 * fastest, then DP, then PP; nodes hold consecutive ranks): inside a node,
 * or across nodes with k members of the group on each node sharing its
 * NICs (one per rank). */
typedef struct {
  double alpha, beta, gamma;
} gt_link;

static gt_link gt_group_link(const gt_cluster *c, int ranks, int stride, int n)
{
  const int rpn = c->ranks_per_node;
  gt_link l = {c->intra_alpha, c->intra_beta, c->gamma};
  if ((long)stride * n > rpn && ranks > rpn) {
    const int k = stride < rpn ? rpn / stride : 1;
    const double inter = c->inter_beta > 0 ? c->inter_beta / k : c->intra_beta;
    l.alpha = c->inter_alpha > 0 ? c->inter_alpha : c->intra_alpha;
    l.beta = inter > c->intra_beta ? inter : c->intra_beta;
  }
  /* more ranks than cores: a message step waits for its peer's turn on a
   * core (oversub_alpha: half a scheduler slice), and the copies and sums
   * (CPU work) take their turn on the cores */
  const int R = ranks < rpn ? ranks : rpn, P = c->cores_per_node;
  if (P > 0 && R > P) {
    l.alpha += c->oversub_alpha;
    l.beta *= (double)R / P, l.gamma *= (double)R / P;
  }
  return l;
}

// ---- memory -----------------------------------------------------------------------

/* The memory account of a layout is gt_mem_plan's (memory.h). What makes
 * the planner's use of it fast: a stage's parameter terms depend only on the
 * model, the split and (dp, tp, zero, precision), not on the micro-batches,
 * recomputation or sequence parallelism, so they are kept in this store,
 * keyed by those, for as long as the model stays the same. */
typedef struct {
  unsigned long long key;
  gt_mem_params p;
} gt_psi_entry;

static struct {
  gt_gpt_shape shape;
  char spec[GT_PATH_MAX];
  gt_psi_entry *e;
  size_t cap, n;
} gt_psi_cache;

static unsigned long long gt_psi_key(const int sizes[3], int chunks, int zero, gt_dtype dt, int s)
{
  unsigned long long k = (unsigned long long)sizes[0];
  k = k * 131071ULL + (unsigned long long)sizes[1];
  k = k * 8191ULL + (unsigned long long)sizes[2];
  k = k * 127ULL + (unsigned long long)chunks;
  k = k * 7ULL + (unsigned long long)zero;
  k = k * 5ULL + (unsigned long long)dt;
  k = k * 1048573ULL + (unsigned long long)s;
  return k + 1; /* 0: an empty slot */
}

static size_t gt_psi_slot(unsigned long long key, size_t cap)
{
  return (size_t)(key * 0x9E3779B97F4A7C15ULL >> 20) % cap;
}

/* gt_mem_params_find over the open-addressing table above */
static gt_mem_params *gt_psi_find(void *ctx, const int sizes[3], int chunks, int zero,
                                  gt_dtype dt, int s, bool *found)
{
  (void)ctx;
  const unsigned long long key = gt_psi_key(sizes, chunks, zero, dt, s);
  if (gt_psi_cache.n * 2 >= gt_psi_cache.cap) { /* grow and rehash */
    size_t cap = gt_psi_cache.cap ? 2 * gt_psi_cache.cap : 4096;
    gt_psi_entry *e = calloc(cap, sizeof *e);
    if (!e)
      return NULL;
    for (size_t i = 0; i < gt_psi_cache.cap; i++) {
      if (!gt_psi_cache.e[i].key)
        continue;
      size_t j = gt_psi_slot(gt_psi_cache.e[i].key, cap);
      while (e[j].key)
        j = (j + 1) % cap;
      e[j] = gt_psi_cache.e[i];
    }
    free(gt_psi_cache.e);
    gt_psi_cache.e = e, gt_psi_cache.cap = cap;
  }
  size_t j = gt_psi_slot(key, gt_psi_cache.cap);
  while (gt_psi_cache.e[j].key && gt_psi_cache.e[j].key != key)
    j = (j + 1) % gt_psi_cache.cap;
  /* a stage always has parameters: psi = 0 is an entry whose filling failed */
  *found = gt_psi_cache.e[j].key == key && gt_psi_cache.e[j].p.psi > 0;
  if (gt_psi_cache.e[j].key != key) { /* the caller fills it */
    gt_psi_cache.e[j].key = key;
    gt_psi_cache.n++;
  }
  return &gt_psi_cache.e[j].p;
}

/* Forget the store when cfg is another model or split. */
static void gt_psi_check_model(const gt_config *cfg)
{
  const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
  if (memcmp(&shape, &gt_psi_cache.shape, sizeof shape) != 0 ||
      strcmp(cfg->parallel.stages, gt_psi_cache.spec) != 0) {
    free(gt_psi_cache.e);
    memset(&gt_psi_cache, 0, sizeof gt_psi_cache);
    gt_psi_cache.shape = shape;
    snprintf(gt_psi_cache.spec, sizeof gt_psi_cache.spec, "%s", cfg->parallel.stages);
  }
}

/* The memory account of the layout: gt_mem_plan's (acc: l->pp entries). */
static int gt_cost_memory(const gt_config *cfg, const gt_layout *l, gt_mem_account *acc,
                          double *worst, double *psi_max)
{
  gt_psi_check_model(cfg);
  GT_CALL(gt_mem_plan_cached(cfg, l, gt_mem_staged(cfg), acc, l->pp, gt_psi_find, NULL));
  *worst = 0, *psi_max = 0;
  for (int s = 0; s < l->pp; s++) {
    const double t = gt_mem_total(&acc[s]);
    if (t > *worst)
      *worst = t;
    if (acc[s].psi > *psi_max)
      *psi_max = acc[s].psi;
  }
  return GT_SUCCESS;
}

/* Blocks per rank (blocks[s], s < pp; the embedding is on rank 0, the head
 * on rank pp - 1): the trainer's split (balanced by cost, or the deck's
 * [parallel] stages; interleaved: of the pp V virtual stages, rank s
 * holding s, pp + s, ...) or, with stage_split = uniform, layers / (pp V)
 * per virtual stage. */
static int gt_cost_blocks(const gt_config *cfg, const gt_gpt_shape *shape, const gt_layout *l,
                          const gt_cluster *c, int *blocks)
{
  const int pp = l->pp, V = l->schedule.chunks;
  const int nv = pp * V, L = shape->layers;
  int *first = malloc(sizeof *first * ((size_t)nv + 1));
  GT_CHECK_ALLOC(first, sizeof *first * ((size_t)nv + 1));
  int status = GT_SUCCESS;
  if (c->uniform_split) {
    for (int v = 0; v <= nv; v++) /* earlier virtual stages take the remainder */
      first[v] = v * (L / nv) + (v < L % nv ? v : L % nv);
  } else {
    double block_cost, head_cost;
    gt_gpt_stage_costs(shape, shape->max_seq, &block_cost, &head_cost);
    status = gt_pipeline_split(L, nv, block_cost, head_cost,
                               V > 1 ? "" : cfg->parallel.stages, first);
  }
  for (int s = 0; s < pp; s++)
    blocks[s] = 0;
  for (int v = 0; status == GT_SUCCESS && v < nv; v++)
    blocks[v % pp] += first[v + 1] - first[v];
  free(first);
  return status;
}

/* Time of a kernel list: forward, backward, attention-core forward. */
typedef struct {
  double fwd, bwd, core;
} gt_ktimes;

static gt_ktimes gt_kernels_time(const gt_cluster *c, gt_dtype dt, const gt_kernel *k, int n,
                                 double share)
{
  gt_ktimes t = {0, 0, 0};
  for (int i = 0; i < n; i++) {
    /* flash attention is one fused kernel with its own efficiency */
    const double eff = k[i].attn_core && !k[i].gemm && c->flash && c->eff_attention > 0
                           ? c->eff_attention
                           : c->eff_matmul;
    const double f = gt_roofline(c, dt, k[i].flops, k[i].bytes, share, eff);
    t.fwd += f;
    if (k[i].attn_core)
      t.core += f;
    t.bwd += k[i].nbwd * gt_roofline(c, dt, k[i].bwd_flops / k[i].nbwd,
                                     k[i].bwd_bytes / k[i].nbwd, share, eff);
  }
  return t;
}

/* The step's times at a rank's device share `share` (out's timing fields);
 * *busy: the fraction of the step a mean rank computes. */
static int gt_cost_timing(const gt_config *cfg, const gt_layout *l, int ranks,
                          const gt_cluster *c, double share, double psi, gt_cost *out,
                          double *busy)
{
  const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
  const int dp = l->dp, pp = l->pp, tp = l->tp, m = l->micro, T = shape.max_seq;
  const int V = l->schedule.chunks;
  const int R = ranks < c->ranks_per_node ? ranks : c->ranks_per_node;
  const int P = c->cores_per_node;
  int status = GT_SUCCESS;
  const gt_dtype dt = l->dtype;
  const double E = (double)gt_dtype_size(dt), C = shape.dim;
  const double X = (double)l->mbs * T * C * E; /* a micro-batch's (N, C) activation */
  gt_kernel kb[GT_COST_MAX_KERNELS], kh[GT_COST_MAX_KERNELS], ke[GT_COST_MAX_KERNELS];
  const int nb = gt_cost_block_kernels(&shape, l->mbs, T, tp, l->seq_par, dt, c, kb);
  const int nh = gt_cost_head_kernels(&shape, l->mbs, T, tp, l->seq_par, dt, c, kh);
  const int ne = gt_cost_embed_kernels(&shape, l->mbs, T, tp, l->seq_par, dt, c, ke);
  const gt_ktimes tb = gt_kernels_time(c, dt, kb, nb, share);
  const gt_ktimes th = gt_kernels_time(c, dt, kh, nh, share);
  const gt_ktimes te = gt_kernels_time(c, dt, ke, ne, share);
  const double rerun =
      l->recompute == GT_RECOMPUTE_BLOCK ? tb.fwd
      : l->recompute == GT_RECOMPUTE_ATTENTION ? tb.core : 0;
  /* tensor-parallel collectives of a block, the embedding and the head */
  const gt_link lt = gt_group_link(c, ranks, 1, tp);
  const double ar = gt_cost_allreduce(tp, X, lt.alpha, lt.beta, lt.gamma, c->eff_net);
  const double rs = gt_cost_reduce_scatter(tp, X, lt.alpha, lt.beta, lt.gamma, c->eff_net);
  const double ag = gt_cost_allgather(tp, X, lt.alpha, lt.beta, c->eff_net);
  double tp_block, tp_embed, tp_head;
  if (!l->seq_par) {
    tp_block = (4 + (l->recompute == GT_RECOMPUTE_BLOCK ? 2 : 0)) * ar;
    tp_embed = ar;
    tp_head = ar;
  } else {
    tp_block = 4 * (ag + rs) + (c->sp_gather_overlap ? 0 : 2 * ag) +
               (l->recompute == GT_RECOMPUTE_BLOCK ? 2 * (ag + rs) : 0);
    tp_embed = rs;
    tp_head = ag + rs;
  }
  tp_head += gt_cost_allgather(tp, 12.0 * l->mbs * T, lt.alpha, lt.beta, c->eff_net);
  /* pipeline transfers: per micro-batch and chunk, an activation forward and
   * a gradient backward */
  double pp_mb = 0;
  if (pp > 1) {
    const gt_link lp = gt_group_link(c, ranks, dp * tp, pp);
    const bool split = l->seq_par || (c->pp_scatter_gather && tp > 1);
    double msg = lp.alpha + (split ? X / tp : X) * lp.beta / c->eff_net + c->p2p_overhead;
    if (split && !l->seq_par)
      msg += ag;
    pp_mb = 2.0 * V * msg;
  }
  /* stages */
  int *nblocks = malloc(sizeof *nblocks * (size_t)pp);
  GT_CHECK_ALLOC(nblocks, sizeof *nblocks * (size_t)pp);
  status = gt_cost_blocks(cfg, &shape, l, c, nblocks);
  if (status != GT_SUCCESS) {
    free(nblocks);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  double t_max = -1, t_sum = 0, comp_sum = 0, bwd_slow = 0, fwd_slow = 0;
  double comp_slow = 0, tp_slow = 0, rec_slow = 0;
  for (int s = 0; s < pp; s++) {
    const double blocks = nblocks[s];
    double comp = blocks * (tb.fwd + tb.bwd + rerun), tpc = tp > 1 ? blocks * tp_block : 0;
    double fwd = blocks * tb.fwd, bwd = blocks * (tb.bwd + rerun);
    if (s == 0) {
      comp += te.fwd + te.bwd, fwd += te.fwd, bwd += te.bwd;
      tpc += tp > 1 ? tp_embed : 0;
    }
    if (s == pp - 1) {
      comp += th.fwd + th.bwd, fwd += th.fwd, bwd += th.bwd;
      tpc += tp > 1 ? tp_head : 0;
    }
    const double t = comp + tpc + pp_mb;
    t_sum += t, comp_sum += comp;
    if (t > t_max) {
      t_max = t, bwd_slow = bwd, fwd_slow = fwd;
      comp_slow = comp, tp_slow = tpc, rec_slow = blocks * rerun;
    }
  }
  free(nblocks);
  const double t_mean = t_sum / pp;
  out->stage_max = t_max, out->stage_mean = t_mean;
  out->compute = m * comp_slow;
  out->recompute = m * rec_slow;
  out->tp_comm = m * tp_slow;
  out->pp_comm = m * pp_mb;
  const double fill = t_mean;
  out->bubble = gt_cost_bubble_fraction(l->schedule.kind, pp, m, V, l->zero) * m * fill;
  const double pipe = m * t_max + out->bubble;
  /* data parallelism and ZeRO */
  double dp_raw = 0, dp_exposed = 0;
  if (dp > 1) {
    const gt_link ld = gt_group_link(c, ranks, tp, dp);
    const double G = psi * c->grad_bytes, W = psi * (dt == GT_F32 ? 4.0 : E);
    const double red = gt_cost_allreduce(dp, G, ld.alpha, ld.beta, ld.gamma, c->eff_net);
    const double rsg = gt_cost_reduce_scatter(dp, G, ld.alpha, ld.beta, ld.gamma, c->eff_net);
    const double agw = gt_cost_allgather(dp, W, ld.alpha, ld.beta, c->eff_net);
    const double bwd_mb = bwd_slow, fwd_mb = fwd_slow;
    /* CPU ranks beyond the cores: a collective moves only while its rank
     * polls, and each message step waits for a descheduled peer, so those
     * waits are not hidden behind backward */
    const double waits = P > 0 && R > P ? 2.0 * (dp - 1) * c->oversub_alpha : 0.0;
    switch (l->zero) {
    case 0:
      dp_raw = red;
      dp_exposed = l->dp_overlap ? fmax(waits, red - bwd_mb) : red;
      break;
    case 1:
      dp_raw = rsg + agw;
      dp_exposed = (l->dp_overlap ? fmax(waits / 2, rsg - bwd_mb) : rsg) + agw;
      break;
    case 2:
      dp_raw = m * rsg + agw;
      dp_exposed = m * fmax(waits / 2, rsg - bwd_mb) + agw;
      break;
    default:
      dp_raw = m * (rsg + 2.0 * agw);
      dp_exposed = m * (fmax(waits / 2, agw - fwd_mb) + fmax(waits, agw + rsg - bwd_mb));
      break;
    }
  }
  if (pp > 1) { /* the tied embedding's gradient, summed over first and last stage */
    const gt_link le = gt_group_link(c, ranks, dp * tp * (pp - 1), 2);
    const double tied = (double)((shape.vocab + tp - 1) / tp) * C * 4.0;
    const double t = gt_cost_allreduce(2, tied, le.alpha, le.beta, le.gamma, c->eff_net);
    dp_raw += t, dp_exposed += t;
  }
  out->dp_total = dp_raw, out->dp_comm = dp_exposed;
  /* AdamW on the rank's piece: master, gradient, two moments read; master
   * and moments written; the compute copy written; the clip's norm */
  const double piece = l->zero >= 1 ? psi / dp : psi;
  out->optimizer = gt_cost_kernel_time(c, dt, 0, piece * (44.0 + (dt == GT_F32 ? 0.0 : E)),
                                       share) + c->step_overhead;
  out->step = pipe + out->dp_comm + out->optimizer;
  *busy = out->step > 0 ? m * comp_sum / pp / out->step : 1.0;
  const double tokens = (double)dp * l->mbs * m * T;
  out->tokens_per_s = tokens / out->step;
  out->model_flops = gt_gpt_flops_per_token(&shape, T) * tokens;
  const double peak = gt_peak_of(c, dt) * (P > 0 ? (double)((ranks + R - 1) / R) : ranks);
  out->mfu = out->model_flops / (out->step * peak);
  return GT_SUCCESS;
}

int gt_cost_evaluate(const gt_config *cfg, const gt_layout *l, int ranks, const gt_cluster *c,
                     gt_cost *out)
{
  memset(out, 0, sizeof *out);
  const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
  const int dp = l->dp, pp = l->pp, tp = l->tp, m = l->micro;
  const int V = l->schedule.chunks;
  GT_CHECK(dp >= 1 && pp >= 1 && tp >= 1 && (long)dp * pp * tp == ranks, GT_ERR_INPUT,
           "layout dp=%d x pp=%d x tp=%d does not make %d ranks", dp, pp, tp, ranks);
  GT_CHECK(l->mbs >= 1 && m >= 1, GT_ERR_INPUT, "micro-batch size %d and count %d must be >= 1",
           l->mbs, m);
  GT_CHECK(gt_peak_of(c, l->dtype) > 0, GT_ERR_INPUT,
           "%s: the cluster has no peak for %s products ([compute] peak_%s)", c->source,
           gt_dtype_name(l->dtype), l->dtype == GT_F32 ? "fp32" : gt_dtype_name(l->dtype));
  GT_CHECK(l->schedule.kind != GT_SCHEDULE_INTERLEAVED || !c->uniform_split ||
               shape.layers % (pp * V) == 0,
           GT_ERR_INPUT,
           "%s: stage_split = uniform with interleaved:%d needs layers=%d a multiple of pp x "
           "V = %d x %d",
           c->source, V, shape.layers, pp, V);
  gt_mem_account *acc = malloc(sizeof *acc * (size_t)pp);
  GT_CHECK_ALLOC(acc, sizeof *acc * (size_t)pp);
  double psi = 0;
  int status = gt_cost_memory(cfg, l, acc, &out->memory, &psi);
  free(acc);
  GT_CALL(status);
  const int R = ranks < c->ranks_per_node ? ranks : c->ranks_per_node; /* ranks on a node */
  const int P = c->cores_per_node;
  const double limit = P > 0 ? c->memory / R : c->memory;
  out->fits = out->memory <= limit;
  /* a rank's share of its device: CPU ranks split the node's cores (threads =
   * [backend] threads, auto: cores / ranks); beyond the cores they take
   * turns (below) */
  double share = 1.0;
  bool over = false;
  if (P > 0) {
    const int threads = cfg->backend.threads > 0 ? (int)cfg->backend.threads : P / R;
    over = R * (threads > 0 ? threads : 1) > P;
    share = over ? 1.0 / R : (double)threads / P;
  }
  /* beyond the cores, the ranks that compute compete for them, and a rank
   * that waits polls (MPI_Test and 10 us naps: gt_comm_wait) and takes
   * about half the turns of a computing one. With a fraction u of the step
   * computing, R (1 + u) / 2 ranks share the cores: share = 1 / max(cores,
   * R (1 + u) / 2), solved by (damped) iteration */
  double busy = 1.0;
  GT_CALL(gt_cost_timing(cfg, l, ranks, c, share, psi, out, &busy));
  for (int it = 0; over && it < 12; it++) {
    const double want = 1.0 / fmax((double)P, 0.5 * (1.0 + busy) * R);
    share = sqrt(share * want);
    GT_CALL(gt_cost_timing(cfg, l, ranks, c, share, psi, out, &busy));
  }
  return GT_SUCCESS;
}

