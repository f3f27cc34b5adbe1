/*
 * test_sizes.c - sizes that real runs reach, without allocating them:
 * counts past 2^31 elements through the message chunking, the parameter
 * shapes and shards, the checkpoint selections and the activation plan.
 *
 * Every number is checked against a value computed here by hand in 64-bit
 * arithmetic (not by the code under test).
 *
 * gt-test: ranks=1 tier=quick
 */
#include <hdf5.h>
#include <limits.h>
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/checkpoint.h"
#include "gridtrain/collectives.h"
#include "gridtrain/gpt.h"
#include "gridtrain/params.h"

/* Pieces of n elements of at most max: they tile [0, n) in order, each fits
 * an int. */
static void test_chunks(size_t n, size_t max)
{
  const size_t count = gt_chunk_count(n, max);
  const size_t want = n == 0 ? 0 : (n + max - 1) / max;
  size_t next = 0, longest = 0;
  bool tiled = count == want;
  for (size_t i = 0; i < count && tiled; i++) {
    size_t off, len;
    gt_chunk_at(n, max, i, &off, &len);
    tiled = off == next && len >= 1 && len <= max;
    next = off + len;
    longest = len > longest ? len : longest;
  }
  tap_ok(tiled && next == n && longest <= (size_t)INT_MAX,
         "%zu elements in pieces of %zu: %zu pieces tile them, each fits an int", n, max, count);
}

int main(int argc, char **argv)
{
  tu_mpi_init(&argc, &argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

  // ---- chunking of messages past 2^31 elements
  const size_t piece = (size_t)4 << 20; /* the collectives' 16 MiB fp32 pieces */
  test_chunks(0, piece);
  test_chunks(1, piece);
  test_chunks(piece, piece);
  test_chunks(piece + 1, piece);
  test_chunks((size_t)5000000000ULL, piece);        /* 5e9: 20 GB of fp32 */
  test_chunks((size_t)INT_MAX + 1, (size_t)INT_MAX); /* one past int */

  // ---- parameters whose element counts do not fit an int
  gt_params *p;
  if (gt_params_create(NULL, GT_BF16, &p) != GT_SUCCESS)
    return tap_bail("%s", gt_error_message());
  const long big[2] = {65536, 65537};       /* 4.29e9 + 65536 entries */
  const long wte[2] = {16777216, 12288};    /* a 16M vocabulary of width 12288 */
  const long qkv[2] = {3L * 49152, 49152};  /* q, k, v of width 49152, split in 3 */
  gt_params_add(p, "big", 2, big, GT_SHARD_NONE, true, GT_INIT_ZEROS, 0, true);
  gt_params_add(p, "wte", 2, wte, (gt_shard){0, 1, 3, 2, {0}}, true, GT_INIT_NORMAL, 0.02f, true);
  gt_params_add(p, "qkv", 2, qkv, (gt_shard){0, 3, 7, 6, {0}}, true, GT_INIT_NORMAL, 0.02f, true);
  const gt_param *pb = gt_params_find(p, "big"), *pw = gt_params_find(p, "wte"),
                 *pq = gt_params_find(p, "qkv");
  tap_ok(pb && pb->numel == 65536ULL * 65537ULL && gt_param_full_numel(pb) == pb->numel,
         "a 65536 x 65537 tensor has %zu elements (past 2^32)", pb ? pb->numel : 0);
  /* 16777216 rows over 3 shards: pieces of 5592406 rows, the last one 2
   * short (padding) */
  tap_ok(pw && pw->value.shape[0] == 5592406 && pw->numel == 5592406ULL * 12288ULL &&
             gt_param_full_numel(pw) == 16777216ULL * 12288ULL,
         "a 16M x 12288 vocabulary on shard 3 of 3: %ld rows, %zu local elements",
         pw ? pw->value.shape[0] : 0, pw ? pw->numel : 0);
  /* 49152 rows per block over 7 shards: ceil = 7022 per piece, 3 blocks */
  tap_ok(pq && pq->value.shape[0] == 3 * 7022 && pq->numel == 3ULL * 7022ULL * 49152ULL,
         "q, k, v of width 49152 over 7 shards: %ld local rows", pq ? pq->value.shape[0] : 0);

  // ---- checkpoint selections of those shards: 64-bit counts, no data
  long long fpts = -1, mpts = -1;
  int st = pw ? gt_ckpt_selection_size(pw, &fpts, &mpts) : GT_ERR_INTERNAL;
  /* shard 2 holds rows [11184812, 16777216): 5592404 real rows */
  const long long want_w = 5592404LL * 12288LL;
  tap_ok(st == GT_SUCCESS && fpts == want_w && mpts == want_w,
         "checkpoint selection of the last vocabulary shard: %lld entries (want %lld)", fpts,
         want_w);
  st = pq ? gt_ckpt_selection_size(pq, &fpts, &mpts) : GT_ERR_INTERNAL;
  /* piece 6 of 7 of each 49152-row block: rows [42132, 49152) = 7020 real rows */
  const long long want_q = 3LL * 7020LL * 49152LL;
  tap_ok(st == GT_SUCCESS && fpts == want_q && mpts == want_q,
         "checkpoint selection of q, k, v piece 7 of 7: %lld entries (want %lld)", fpts, want_q);
  st = pb ? gt_ckpt_selection_size(pb, &fpts, &mpts) : GT_ERR_INTERNAL;
  tap_ok(st == GT_SUCCESS && fpts == 65536LL * 65537LL && mpts == fpts,
         "checkpoint selection of a replicated 4.3e9-entry tensor: %lld entries", fpts);
  gt_params_destroy(&p);

  // ---- the activation plan of a micro-batch whose logits pass 2^31 entries
  const gt_gpt_shape shape = {2, 16, 2048, 8192, 50304, .arch = GT_MODEL_GPT};
  gt_gpt_part part = gt_gpt_whole(&shape);
  size_t act = 0, slot = 0;
  st = gt_gpt_plan(&shape, &part, GT_BF16, 8, 8192, 1, &act, &slot);
  const unsigned long long logits = 8ULL * 8192ULL * 50304ULL; /* 3.3e9 entries */
  tap_ok(st == GT_SUCCESS && slot > 2 * logits && act > slot,
         "bf16 plan of B=8, T=8192, V=50304: a slot holds %zu bytes (> the %llu-entry logits "
         "at 2 bytes)", slot, logits);
  size_t act32 = 0, slot32 = 0;
  st = gt_gpt_plan(&shape, &part, GT_F32, 8, 8192, 1, &act32, &slot32);
  tap_ok(st == GT_SUCCESS && slot32 > 4 * logits && slot32 > slot && slot32 <= 2 * slot,
         "fp32 plan of the same: %zu bytes a slot, at most twice the bf16 one", slot32);
  tap_ok(gt_gpt_param_count(&(gt_gpt_shape){96, 96, 12288, 2048, 16777216, .arch = GT_MODEL_GPT}) ==
             16777216ULL * 12288ULL + 2048ULL * 12288ULL +
                 96ULL * (12ULL * 12288ULL * 12288ULL + 13ULL * 12288ULL) + 2ULL * 12288ULL,
         "parameter count of a 16M-vocabulary, 96-layer, width-12288 model in 64 bits");
  /* Meta's published counts: Llama 3 8B 8,030,261,248 (untied), Llama 3.2
   * 1B 1,235,814,400 (tied head) */
  const gt_gpt_shape l3 = {32, 32, 4096, 8192, 128256, .arch = GT_MODEL_LLAMA, .kv_heads = 8,
                           .ffn_dim = 14336, .tie = GT_TRI_OFF};
  const gt_gpt_shape l32 = {16, 32, 2048, 8192, 128256, .arch = GT_MODEL_LLAMA, .kv_heads = 8,
                            .ffn_dim = 8192, .tie = GT_TRI_ON};
  tap_ok(gt_gpt_param_count(&l3) == 8030261248ULL, "Llama 3 8B: %zu parameters (8030261248)",
         gt_gpt_param_count(&l3));
  tap_ok(gt_gpt_param_count(&l32) == 1235814400ULL,
         "Llama 3.2 1B with its tied head: %zu parameters (1235814400)", gt_gpt_param_count(&l32));
  /* Mistral's published count for Mixtral 8x7B: 46,702,792,704 (8 SwiGLU
   * experts of 14336 units in each of 32 blocks, top 2, untied, vocabulary
   * 32000); its active parameters, 12.9B, are what MFU counts */
  const gt_gpt_shape mx = {32, 32, 4096, 32768, 32000, .arch = GT_MODEL_LLAMA, .kv_heads = 8,
                           .ffn_dim = 14336, .tie = GT_TRI_OFF, .experts = 8, .top_k = 2,
                           .moe_every = 1};
  tap_ok(gt_gpt_param_count(&mx) == 46702792704ULL,
         "Mixtral 8x7B: %zu parameters (46702792704)", gt_gpt_param_count(&mx));
  /* 6 x the active matrices: per block the attention's 4096 (48 + 32) 128,
   * the router's 8 x 4096 and 2 experts' 3 x 4096 x 14336, and the head */
  const double active = 32.0 * (4096.0 * 80 * 128 + 8 * 4096.0 + 2 * 3 * 4096.0 * 14336) +
                        32000.0 * 4096;
  tap_ok(fabs(gt_gpt_flops_per_token(&mx, 1) - (6 * active + 12.0 * 32 * 4096)) < 1.0,
         "Mixtral 8x7B: MFU counts the active parameters (%.4g per token at T = 1)",
         gt_gpt_flops_per_token(&mx, 1));
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
