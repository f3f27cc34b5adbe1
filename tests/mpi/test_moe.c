/*
 * test_moe.c - mixture-of-experts models train to the single-rank numbers
 * in every kind of layout.
 *
 * The router's losses and an expert's capacity are per micro-batch, so a
 * layout equals one rank with the same micro-batch size (batch / (dp x
 * microbatches)), not any one rank: every case here has micro-batches of 2
 * sequences, and its reference is one rank with 4 micro-batches of the
 * global batch of 8 (rank r of dp takes the r-th of each step's dp pieces
 * of the batch, and cuts it into micro-batches in order, so its
 * micro-batches are the reference's r m .. r m + m - 1).
 *
 * Three models, each with its one-rank reference:
 *   gpt      4 blocks, experts in blocks 0 and 2 (moe_every 2): 4 experts
 *            of 64 units, top 2, dropless, load-balancing loss 0.01 and
 *            z-loss 0.001;
 *   gpt-cap  the same with capacity_factor 1: an expert keeps 2 N / 4
 *            pairs of a micro-batch of N tokens, and the later ones drop
 *            (the references check that some do);
 *   llama    4 blocks, all with experts: 4 SwiGLU experts of 32 units, top
 *            2, one shared expert, grouped-query attention (2 key/value
 *            heads), untied head; fp32 and bf16;
 *   gpt-2bw  the gpt under pipedream-2bw, whose update rule is its own:
 *            its reference is one rank of it (the routing counts of each
 *            step are its own batch's, though the next batch's first
 *            forwards run in the step's call).
 * Each case: the loss of each of 10 steps and every final parameter tensor
 * within 1e-5 (fp32) of its reference, or test_precision.c's bounds (bf16:
 * losses 1e-3, tensors 5e-2 of max(max|b|, lr * steps)); tensor, pipeline
 * and data parallelism, ZeRO 1-3, recomputation, GPipe, 1F1B and the
 * interleaved schedule; and in fp32 the same routing as the reference: as
 * many pairs dropped over the run, and each step's busiest expert as busy
 * (bf16's layouts may tip a near-tie of the router another way).
 *
 * Then checkpoints (test_checkpoints): the llama with experts resumes bit
 * for bit, and its checkpoint loads bitwise into other layouts.
 *
 * Under a test mode of the CPU backend (tests/modes/async-moe.sh,
 * guard-moe.sh) six of the layouts run (cases[].modes), and the
 * checkpoints.
 *
 * gt-test: ranks=4 tier=quick
 */
#include <stdio.h>

#include "train_run.h"
#include "gridtrain/gpt.h"
#include "gridtrain/trainer.h"

#define STEPS 10
#define TOL 1e-5

typedef enum { M_GPT, M_GPT_CAP, M_LLAMA, M_GPT_2BW, M_COUNT } model_kind;
static const char *const model_names[M_COUNT] = {"gpt", "gpt-cap", "llama", "gpt-2bw"};

typedef struct moe_case {
  model_kind model;
  int dp, pp, tp;
  const char *schedule;
  int zero;
  const char *recompute;
  const char *prec;
  bool modes; /* also under a test mode of the CPU backend (tests/modes/) */
} moe_case;

/* Under a test mode (GT_CPU_MODE = async or guard) the cases marked run:
 * data, tensor and pipeline parallelism, ZeRO 3's gathers and recompute
 * block once each on the asynchronous device, not the numbers again. */
static const moe_case cases[] = {
    {M_GPT, 2, 1, 1, "gpipe", 0, "none", "fp32", false},
    {M_GPT, 1, 1, 2, "1f1b", 0, "none", "fp32", true},
    {M_GPT, 1, 2, 1, "1f1b", 0, "none", "fp32", false},
    {M_GPT, 2, 2, 1, "1f1b", 1, "none", "fp32", true},
    {M_GPT, 2, 1, 2, "1f1b", 2, "none", "fp32", false},
    {M_GPT, 4, 1, 1, "gpipe", 3, "none", "fp32", true},
    {M_GPT, 1, 2, 2, "interleaved:2", 0, "none", "fp32", false},
    {M_GPT, 2, 2, 1, "1f1b", 0, "block", "fp32", true},
    {M_GPT, 2, 1, 1, "gpipe", 0, "attention", "fp32", false},
    {M_GPT_CAP, 2, 1, 2, "1f1b", 1, "none", "fp32", false},
    {M_GPT_CAP, 1, 4, 1, "gpipe", 0, "none", "fp32", true},
    {M_LLAMA, 1, 1, 2, "1f1b", 0, "none", "fp32", false},
    {M_LLAMA, 2, 2, 1, "1f1b", 1, "none", "fp32", false},
    {M_LLAMA, 2, 1, 2, "gpipe", 3, "none", "fp32", true},
    {M_LLAMA, 1, 2, 2, "1f1b", 0, "none", "bf16", false},
    {M_GPT_2BW, 1, 2, 1, "pipedream-2bw", 0, "none", "fp32", true},
    {M_GPT_2BW, 2, 2, 1, "pipedream-2bw", 1, "none", "fp32", false},
};

/* Whether case i runs: every case, or under a test mode the marked ones. */
static bool case_runs(size_t i)
{
  const char *mode = getenv("GT_CPU_MODE");
  return !(mode && mode[0]) || cases[i].modes;
}

/* One run's results on rank 0 of its communicator. */
typedef struct outcome {
  double loss[STEPS];
  float *final;
  size_t numel;
  int64_t dropped; /* pairs dropped over the run (the steps' stats) */
  int64_t most[STEPS]; /* each step's most pairs an expert of a block got */
} outcome;

/* Collective on comm: STEPS steps of cfg. */
static int train(const gt_config *cfg, MPI_Comm comm, outcome *out)
{
  int rank;
  MPI_Comm_rank(comm, &rank);
  memset(out, 0, sizeof *out);
  gt_trainer *tr = NULL;
  int st = gt_trainer_create(cfg, comm, true, &tr);
  if (st == GT_SUCCESS && rank == 0) {
    const gt_gpt_shape shape = gt_gpt_shape_config(cfg);
    out->numel = gt_gpt_param_count(&shape);
    out->final = tu_alloc(out->numel);
  }
  for (int s = 0; s <= STEPS && st == GT_SUCCESS; s++) {
    gt_step_stats stats[2];
    int n = 0;
    st = s < STEPS ? gt_trainer_advance(tr, false, stats, &n) : gt_trainer_settle(tr, stats, &n);
    for (int i = 0; i < n; i++)
      if (stats[i].step >= 0 && stats[i].step < STEPS) {
        out->loss[stats[i].step] = stats[i].loss;
        out->dropped += stats[i].moe.dropped;
        out->most[stats[i].step] = stats[i].moe.tokens_max;
      }
  }
  if (st == GT_SUCCESS)
    st = gt_trainer_gather_params(tr, rank == 0 ? out->final : NULL);
  gt_trainer_destroy(&tr);
  return st;
}

static gt_config model_config(const gt_config *base, model_kind k, const char *prec)
{
  gt_config c = *base;
  if (k == M_LLAMA) {
    tu_config_set(&c, "model.type=llama");
    tu_config_set(&c, "model.kv_heads=2");
    tu_config_set(&c, "model.ffn_dim=48");
    tu_config_set(&c, "model.moe_every=1");
    tu_config_set(&c, "model.expert_ffn_dim=32");
    tu_config_set(&c, "model.shared_experts=1");
  }
  if (k == M_GPT_CAP)
    tu_config_set(&c, "model.capacity_factor=1");
  if (k == M_GPT_2BW) /* its own update rule: its reference is one rank of it */
    tu_config_set(&c, "parallel.schedule=pipedream-2bw");
  tu_config_set(&c, "backend.precision=%s", prec);
  c.grid.dp = c.grid.pp = c.grid.tp = 1;
  c.data.microbatches = 4;
  return c;
}

// ---- checkpoints: bitwise resume and resharding ----

#define N_CK 4

/* The llama with experts (3-D expert tensors split over tp along their
 * units, the gate and up halves apart) at (2,1,2) with ZeRO 1: 2 N_CK
 * steps uninterrupted; N_CK steps and a checkpoint, then N_CK more after
 * resume = auto, bit for bit the same; the checkpoint loads bitwise into
 * (1,2,1) and (4,1,1) with ZeRO 3. Collective on the world. */
static void test_checkpoints(const gt_config *base, const char *dir, int rank)
{
  gt_config cfg = model_config(base, M_LLAMA, "fp32");
  tu_config_set(&cfg, "model.capacity_factor=1.5");
  cfg.grid.dp = 2, cfg.grid.tp = 2;
  cfg.data.microbatches = 2;
  cfg.parallel.zero = 1;
  const gt_gpt_shape shape = gt_gpt_shape_config(&cfg);
  const size_t numel = gt_gpt_param_count(&shape);
  char ckdir[900];
  snprintf(ckdir, sizeof ckdir, "%s/ck_moe", dir);
  snprintf(cfg.checkpoint.dir, sizeof cfg.checkpoint.dir, "%s", ckdir);
  tu_outcome ref, first, second;
  tu_ok_status(tu_train(&cfg, MPI_COMM_WORLD, 2 * N_CK, NULL, numel, &ref),
               "moe checkpoint: the uninterrupted run");
  tu_ok_status(tu_train(&cfg, MPI_COMM_WORLD, N_CK, ckdir, numel, &first),
               "moe checkpoint: N steps and a checkpoint");
  MPI_Bcast(first.saved, sizeof first.saved, MPI_CHAR, 0, MPI_COMM_WORLD);
  gt_config resumed = cfg;
  snprintf(resumed.checkpoint.resume, sizeof resumed.checkpoint.resume, "auto");
  tu_ok_status(tu_train(&resumed, MPI_COMM_WORLD, N_CK, NULL, numel, &second),
               "moe checkpoint: resume = auto");
  if (rank == 0)
    tap_ok(second.start == N_CK && tu_same_bits(second.loaded, first.final, numel) &&
               memcmp(second.loss, ref.loss + N_CK, N_CK * sizeof(double)) == 0 &&
               tu_same_bits(second.final, ref.final, numel),
           "moe (2,1,2) zero 1: resumed at step %ld, the losses and final parameters bit for "
           "bit the uninterrupted run's",
           second.start);
  static const struct {
    int dp, pp, tp, zero;
  } others[] = {{1, 2, 1, 0}, {4, 1, 1, 3}};
  for (int i = 0; i < 2; i++) {
    gt_config c = cfg;
    c.grid.dp = others[i].dp, c.grid.pp = others[i].pp, c.grid.tp = others[i].tp;
    c.parallel.zero = others[i].zero;
    c.data.microbatches = 4 / others[i].dp;
    snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", first.saved);
    const int size = c.grid.dp * c.grid.pp * c.grid.tp;
    MPI_Comm comm = tu_first_ranks(size);
    tu_outcome got;
    memset(&got, 0, sizeof got);
    int st = GT_SUCCESS;
    if (comm != MPI_COMM_NULL) {
      st = tu_train(&c, comm, 0, NULL, numel, &got);
      MPI_Comm_free(&comm);
    }
    tu_sleepy_barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      if (st != GT_SUCCESS)
        tap_diag("load: %s", gt_error_message());
      tap_ok(st == GT_SUCCESS && got.start == N_CK &&
                 tu_same_bits(got.loaded, first.final, numel),
             "moe: the (2,1,2) zero 1 checkpoint loads bitwise into (%d,%d,%d) zero %d",
             others[i].dp, others[i].pp, others[i].tp, others[i].zero);
    }
    tu_free_outcome(&got);
  }
  tu_free_outcome(&ref);
  tu_free_outcome(&first);
  tu_free_outcome(&second);
}

int main(int argc, char **argv)
{
  tu_scratch scratch;
  const int nranks = tu_test_ranks(4);
  const int rank = tu_mpi_start(&argc, &argv, "test_moe", nranks, &scratch);
  if (rank < 0)
    return 1;
  char deck[1600];
  snprintf(deck, sizeof deck,
           "[run]\nsteps = %d\nseed = 11\n"
           "[model]\nlayers = 4\nheads = 4\ndim = 32\nseq_len = 16\nvocab = 256\n"
           "experts = 4\ntop_k = 2\nmoe_every = 2\nexpert_ffn_dim = 64\n"
           "aux_loss = 0.01\nz_loss = 0.001\n"
           "[data]\ntrain = %s\nbatch = 8\nmicrobatches = 4\n"
           "[optim]\nlr = 1e-3\nmin_lr = 1e-4\nwarmup = 3\neps = 1e-4\n"
           "[backend]\nthreads = 1\n"
           "[parallel]\nwait = yield\n",
           STEPS, scratch.dataset);
  gt_config base;
  gt_config_defaults(&base);
  if (gt_config_parse(&base, deck, "test_moe", 0, NULL) != GT_SUCCESS)
    return tap_bail("deck: %s", gt_error_message());

  /* the references: one rank per model and precision that a case uses */
  const char *precs[2] = {"fp32", "bf16"};
  outcome refs[M_COUNT][2];
  memset(refs, 0, sizeof refs);
  int st = GT_SUCCESS;
  if (rank == 0)
    for (int k = 0; k < M_COUNT; k++)
      for (int p = 0; p < 2; p++) {
        bool used = false;
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
          used |= case_runs(i) && cases[i].model == (model_kind)k &&
                  strcmp(cases[i].prec, precs[p]) == 0;
        if (!used || st != GT_SUCCESS)
          continue;
        const gt_config one = model_config(&base, (model_kind)k, precs[p]);
        st = train(&one, MPI_COMM_SELF, &refs[k][p]);
        if (st != GT_SUCCESS)
          tap_diag("%s %s reference: %s", model_names[k], precs[p], gt_error_message());
      }
  tu_sleepy_barrier(MPI_COMM_WORLD);
  MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (st != GT_SUCCESS) {
    tap_bail("a single-rank reference failed");
    MPI_Finalize();
    return 1;
  }
  if (rank == 0) {
    for (int k = 0; k < M_COUNT; k++)
      tap_ok(refs[k][0].final && refs[k][0].loss[STEPS - 1] < refs[k][0].loss[0] - 0.3,
             "%s: the one-rank reference learns (loss %.4f -> %.4f, %lld pairs dropped)",
             model_names[k], refs[k][0].loss[0], refs[k][0].loss[STEPS - 1],
             (long long)refs[k][0].dropped);
    tap_ok(refs[M_GPT][0].dropped == 0 && refs[M_LLAMA][0].dropped == 0,
           "dropless models drop no pair");
    tap_ok(refs[M_GPT_CAP][0].dropped > 0,
           "capacity_factor 1 drops pairs (%lld over %d steps)",
           (long long)refs[M_GPT_CAP][0].dropped, STEPS);
  }

  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const moe_case *mc = &cases[i];
    if (!case_runs(i))
      continue;
    const int size = mc->dp * mc->pp * mc->tp;
    const int p = strcmp(mc->prec, "fp32") == 0 ? 0 : 1;
    char run[200];
    snprintf(run, sizeof run, "%s %s (dp,pp,tp)=(%d,%d,%d) %s zero %d recompute %s",
             model_names[mc->model], mc->prec, mc->dp, mc->pp, mc->tp, mc->schedule, mc->zero,
             mc->recompute);
    if (!tu_fits_world(size, run))
      continue;
    gt_config c = model_config(&base, mc->model, mc->prec);
    c.grid.dp = mc->dp, c.grid.pp = mc->pp, c.grid.tp = mc->tp;
    c.data.microbatches = 4 / mc->dp;
    snprintf(c.parallel.schedule, sizeof c.parallel.schedule, "%s", mc->schedule);
    c.parallel.zero = mc->zero;
    tu_config_set(&c, "model.recompute=%s", mc->recompute);
    MPI_Comm comm = tu_first_ranks(size);
    outcome got = {0};
    int rs = GT_SUCCESS;
    if (comm != MPI_COMM_NULL) {
      rs = train(&c, comm, &got);
      MPI_Comm_free(&comm);
    }
    tu_sleepy_barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      const outcome *ref = &refs[mc->model][p];
      const bool fp32 = p == 0;
      const double ltol = fp32 ? TOL : 1e-3, ptol = fp32 ? TOL : 5e-2;
      const double floor = fp32 ? 0.0 : 1e-3 * STEPS;
      if (rs != GT_SUCCESS)
        tap_diag("%s: %s", run, gt_error_message());
      const gt_gpt_shape shape = gt_gpt_shape_config(&c);
      const double le = rs == GT_SUCCESS ? tu_loss_err(got.loss, ref->loss, STEPS) : INFINITY;
      const double pe = rs == GT_SUCCESS && got.numel == ref->numel
                            ? tu_param_err_at(&shape, got.final, ref->final, floor, ptol)
                            : INFINITY;
      tap_ok(le <= ltol, "%s: loss of each of %d steps within %.0e (worst %.2e)", run, STEPS,
             ltol, le);
      tap_ok(pe <= ptol, "%s: final parameters within %.0e (worst %.2e)", run, ptol, pe);
      /* in bf16 the layouts' different sums may tip a near-tie of the
       * router's probabilities another way: the routing is compared in fp32 */
      if (fp32)
        tap_ok(rs == GT_SUCCESS && got.dropped == ref->dropped &&
                   memcmp(got.most, ref->most, sizeof got.most) == 0,
               "%s: the same pairs dropped (%lld, the reference %lld), each step's busiest "
               "expert as busy",
               run, (long long)got.dropped, (long long)ref->dropped);
    }
    free(got.final);
  }
  for (int k = 0; k < M_COUNT; k++)
    for (int p = 0; p < 2; p++)
      free(refs[k][p].final);
  if (nranks >= 4)
    test_checkpoints(&base, scratch.dir, rank);
  return tu_mpi_finish();
}
