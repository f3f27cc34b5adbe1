/*
 * test_memory.c - the memory account (memory.h) against the ZeRO formulas,
 * against what the trainer allocates, against the backend allocator's
 * measured peak, and against `gridtrain plan --memory`'s computation.
 *
 * 1. Formulas: for psi parameter elements and N = dp, the model-state bytes
 *    are, with 4-byte (fp32) gradients and a c-byte compute copy (c = 2 in
 *    bf16/fp16; 0 in fp32, whose compute weights are the master):
 *      zero 0: (c + 16) psi
 *      zero 1: (c + 4) psi + 12 psi / N       fp32: 8 psi + 8 psi / N
 *      zero 2: c psi + 16 psi / N             fp32: 4 psi + 12 psi / N
 *      zero 3: (c + 16) psi / N
 *    (the paper's 16, 4 + 12/N, 2 + 14/N, 16/N with 2-byte gradients, and
 *    exactly those for fp32 at zero 0 and 3), for every precision, stage and
 *    N in {1, 2, 3, 4, 8}.
 * 2. Allocations: in each run below, the trainer's buffers - master,
 *    compute copy, gradients, moments - have exactly the account's sizes.
 * 3. The allocator: after 3 steps the backend allocator's high-water mark
 *    is within [1, 1.001] of the account's total (what the account leaves out
 *    is the trainer's few device scalars).
 * 4. Planning: gt_mem_plan, which computes without a backend or MPI, gives
 *    every rank's stage the trainer's account, term by term.
 * Runs: zero 0, 1, 2 and 3 in fp32 and bf16 at (4,1,1), (2,2,1) and (1,2,2),
 * recompute none, attention and block; and zb-h1 at (2,2,1) and (1,2,2)
 * (the sets of projection output gradients its W waits for), and
 * pipedream-2bw there (its older weight version; at zero 0, (1,2,2), its
 * second gradient buffer), in fp32 and bf16; and mixtures of experts (gpt
 * with experts every other block at zero 3; llama with experts in every
 * block, recompute block in bf16, and a shared expert with recompute
 * attention).
 *
 * gt-test: ranks=4 tier=quick
 */
#include <stdio.h>

#include "train_run.h"
#include "gridtrain/memory.h"

static double formula(double psi, gt_dtype dt, int zero, int n)
{
  const double c = dt == GT_F32 ? 0 : 2;
  switch (zero) {
  case 0: return (c + 16) * psi;
  case 1: return dt == GT_F32 ? 8 * psi + 8 * psi / n : (c + 4) * psi + 12 * psi / n;
  case 2: return dt == GT_F32 ? 4 * psi + 12 * psi / n : c * psi + 16 * psi / n;
  default: return (c + 16) * psi / n;
  }
}

static void check_formulas(void)
{
  static const gt_dtype types[] = {GT_F32, GT_BF16, GT_F16};
  static const int dps[] = {1, 2, 3, 4, 8};
  const double psi = 1234560; /* a multiple of 16 x every N: pieces are exact */
  int bad = 0, total = 0;
  for (int t = 0; t < 3; t++)
    for (int z = 0; z <= 3; z++)
      for (int d = 0; d < 5; d++) {
        gt_mem_account a = {0};
        gt_mem_model_state(psi, types[t], z, dps[d], &a);
        const double want = formula(psi, types[t], z, dps[d]);
        const double got = gt_mem_model_total(&a);
        total++;
        if (fabs(got - want) > 1e-9 * want) {
          bad++;
          tap_diag("%s zero %d dp %d: %.0f bytes, formula %.0f", gt_dtype_name(types[t]), z,
                   dps[d], got, want);
        }
      }
  tap_ok(bad == 0, "model state by the ZeRO formulas in %d of %d cases (3 precisions, "
         "zero 0-3, dp 1-8)", total - bad, total);
  gt_mem_account a = {0};
  gt_mem_model_state(psi, GT_F32, 0, 4, &a);
  tap_ok(gt_mem_model_total(&a) == 16 * psi, "fp32 zero 0: 16 psi");
  gt_mem_model_state(psi, GT_F32, 3, 4, &a);
  tap_ok(gt_mem_model_total(&a) == 16 * psi / 4, "fp32 zero 3: 16 psi / N");
}

/* Collective on comm: create, run 3 steps, compare. Rank 0 reports. */
static void check_run(const gt_config *cfg, MPI_Comm comm, const char *what)
{
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  gt_trainer *tr = NULL;
  int st = gt_trainer_create(cfg, comm, true, &tr);
  for (int s = 0; s < 3 && st == GT_SUCCESS; s++) {
    gt_step_stats stats;
    st = gt_trainer_step(tr, &stats);
  }
  int bad[4] = {st != GT_SUCCESS, 0, 0, 0};
  double ratio = 0;
  if (st == GT_SUCCESS) {
    const gt_grid *g = gt_trainer_grid(tr);
    gt_params *p = gt_trainer_params(tr);
    gt_mem_account a;
    gt_trainer_memory(tr, &a);
    /* 2. the real buffers */
    const double moments = 8.0 * (double)(p->shard_size > 1 ? p->shard_n : p->numel);
    const double compute = (double)gt_params_compute_bytes(p);
    /* (pipedream-2bw at zero 0: a second buffer, its update deferred) */
    const double grads =
        4.0 * (double)(p->grads_sharded ? p->shard_n : p->numel) * (p->grads_other ? 2 : 1);
    bad[1] = a.master != (double)gt_params_master_bytes(p) || a.compute != compute ||
             a.grads != grads || a.moments != moments;
    if (bad[1])
      tap_diag("%s rank %d: master %.0f/%zu compute %.0f/%.0f grads %.0f/%.0f moments %.0f/%.0f",
               what, rank, a.master, gt_params_master_bytes(p), a.compute, compute, a.grads,
               grads, a.moments, moments);
    /* 3. the allocator's peak */
    size_t in_use, peak;
    gt_backend_device_memory(p->be, &in_use, &peak);
    ratio = (double)peak / gt_mem_total(&a);
    bad[2] = !(ratio >= 1.0 && ratio <= 1.001);
    /* 4. the plan of the same configuration */
    gt_mem_account *stages = calloc((size_t)g->pp_size, sizeof *stages);
    gt_layout l;
    if (!stages || gt_layout_resolve(cfg, size, &l) != GT_SUCCESS ||
        gt_mem_plan(cfg, &l, false, stages, g->pp_size) != GT_SUCCESS) {
      bad[3] = 1;
      tap_diag("%s: gt_mem_plan: %s", what, gt_error_message());
    } else {
      const gt_mem_account *b = &stages[g->pp_rank];
      bad[3] = b->psi != a.psi || b->compute != a.compute || b->master != a.master ||
               b->grads != a.grads || b->moments != a.moments || b->act_slot != a.act_slot ||
               b->in_flight != a.in_flight || b->act_shared != a.act_shared ||
               b->comm != a.comm || b->grad_bufs != a.grad_bufs ||
               b->gather_bufs != a.gather_bufs;
      if (bad[3])
        tap_diag("%s rank %d: plan total %.0f, trainer %.0f", what, rank, gt_mem_total(b),
                 gt_mem_total(&a));
    }
    free(stages);
  }
  gt_trainer_destroy(&tr);
  int any[4];
  double worst_ratio = 0, best_ratio = 0;
  MPI_Allreduce(bad, any, 4, MPI_INT, MPI_MAX, comm);
  MPI_Allreduce(&ratio, &worst_ratio, 1, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(&ratio, &best_ratio, 1, MPI_DOUBLE, MPI_MIN, comm);
  if (rank != 0)
    return;
  if (any[0]) {
    tap_ok(false, "%s: trains (%s)", what, gt_error_message());
    return;
  }
  tap_ok(!any[1], "%s: the trainer's buffers have the account's sizes on every rank", what);
  tap_ok(!any[2], "%s: allocator peak / expected total in [%.4f, %.4f], within [1, 1.001]",
         what, best_ratio, worst_ratio);
  tap_ok(!any[3], "%s: gt_mem_plan gives every rank the trainer's account", what);
}

int main(int argc, char **argv)
{
  tu_scratch scratch;
  if (tu_mpi_start(&argc, &argv, "test_memory", 4, &scratch) < 0)
    return 1;
  check_formulas();
  gt_config cfg;
  tu_deck(&cfg, "test_memory",
          "[run]\nsteps = 3\nseed = 3\n"
          "[model]\nlayers = 4\nheads = 4\ndim = 32\nseq_len = 16\nvocab = 256\n"
          "[data]\ntrain = %s\nbatch = 16\nmicrobatches = 2\n"
          "[backend]\nthreads = 1\n"
          "[parallel]\nwait = yield\nbucket_mb = 0.01\n",
          scratch.dataset);
  static const int layouts[][3] = {{4, 1, 1}, {2, 2, 1}, {1, 2, 2}};
  static const char *precisions[] = {"fp32", "bf16"};
  static const char *recompute[] = {"none", "attention", "block"};
  for (int l = 0; l < 3; l++)
    for (int p = 0; p < 2; p++)
      for (int z = 0; z < 4; z++) {
        gt_config c = cfg;
        c.grid.dp = layouts[l][0];
        c.grid.pp = layouts[l][1];
        c.grid.tp = layouts[l][2];
        c.parallel.zero = z;
        tu_config_set(&c, "backend.precision=%s", precisions[p]);
        const int r = (l + p + z) % 3; /* every mode in every layout */
        tu_config_set(&c, "model.recompute=%s", recompute[r]);
        char what[128];
        snprintf(what, sizeof what, "(dp,pp,tp)=(%d,%d,%d) %s zero %d recompute %s",
                 layouts[l][0], layouts[l][1], layouts[l][2], precisions[p], z, recompute[r]);
        check_run(&c, MPI_COMM_WORLD, what);
      }
  /* zb-h1: its sets of projection output gradients kept from B to W;
   * pipedream-2bw: its older weight version, a whole compute copy, and at
   * zero 0 a second gradient buffer */
  static const char *const extra[][2] = {{"zb-h1", "fp32"}, {"zb-h1", "fp32"},
                                         {"pipedream-2bw", "fp32"}, {"pipedream-2bw", "bf16"}};
  for (int k = 0; k < 4; k++) {
    const int l = 1 + k % 2;
    gt_config c = cfg;
    c.grid.dp = layouts[l][0];
    c.grid.pp = layouts[l][1];
    c.grid.tp = layouts[l][2];
    c.parallel.zero = 1;
    c.data.microbatches = 4;
    tu_config_set(&c, "parallel.schedule=%s", extra[k][0]);
    tu_config_set(&c, "backend.precision=%s", extra[k][1]);
    char what[128];
    snprintf(what, sizeof what, "(dp,pp,tp)=(%d,%d,%d) %s m 4 zero 1 %s", layouts[l][0],
             layouts[l][1], layouts[l][2], extra[k][0], extra[k][1]);
    check_run(&c, MPI_COMM_WORLD, what);
  }
  /* mixtures of experts: the experts' weights, their N top_k-row
   * activations and the shared scratch of the MoE blocks */
  static const char *const moe[][3] = {{"gpt", "none", "fp32"},
                                       {"llama", "block", "bf16"},
                                       {"llama", "attention", "fp32"}};
  for (int k = 0; k < 3; k++) {
    const int l = k;
    gt_config c = cfg;
    c.grid.dp = layouts[l][0];
    c.grid.pp = layouts[l][1];
    c.grid.tp = layouts[l][2];
    c.parallel.zero = k == 0 ? 3 : 1;
    tu_config_set(&c, "model.type=%s", moe[k][0]);
    tu_config_set(&c, "model.experts=4");
    tu_config_set(&c, "model.top_k=2");
    tu_config_set(&c, "model.moe_every=%d", k == 0 ? 2 : 1);
    tu_config_set(&c, "model.expert_ffn_dim=48");
    tu_config_set(&c, "model.shared_experts=%d", k == 2 ? 1 : 0);
    tu_config_set(&c, "model.recompute=%s", moe[k][1]);
    tu_config_set(&c, "backend.precision=%s", moe[k][2]);
    char what[160];
    snprintf(what, sizeof what, "(dp,pp,tp)=(%d,%d,%d) %s with experts, zero %d recompute %s %s",
             layouts[l][0], layouts[l][1], layouts[l][2], moe[k][0], (int)c.parallel.zero, moe[k][1],
             moe[k][2]);
    check_run(&c, MPI_COMM_WORLD, what);
  }
  return tu_mpi_finish();
}
