/*
 * test_dp_replicas.c - data parallelism keeps every replica bitwise equal:
 * after steps of training at dp=4 (all ranks) and at dp=3 (a non-power of
 * two, on a communicator of 3 of the 4 ranks), rank 0 gathers every DP
 * rank's parameters and compares them byte for byte, and checks that they
 * moved from their initial values. Also with gridtrain's own all-reduce
 * algorithms ([parallel] allreduce = ring, tree, halving; zero 0 and 1, in
 * small segments and buckets).
 *
 * gt-test: ranks=4 tier=quick
 */
#include <stdio.h>
#include <sys/stat.h>

#include "../../src/train/trainer_impl.h" /* the collectives context, to see our algorithms ran */
#include "train_run.h"
#include "gridtrain/ingest.h"
#include "gridtrain/trainer.h"

static char dataset[1024];

/* extra: "" or overrides of [parallel], space-separated */
static void check_replicas(MPI_Comm comm, int dp, int steps, int microbatches, const char *extra)
{
  int rank;
  MPI_Comm_rank(comm, &rank);
  char data_kv[1100], dp_kv[32], mb_kv[32], steps_kv[32];
  snprintf(data_kv, sizeof data_kv, "data.train=%s", dataset);
  snprintf(dp_kv, sizeof dp_kv, "grid.dp=%d", dp);
  snprintf(mb_kv, sizeof mb_kv, "data.microbatches=%d", microbatches);
  snprintf(steps_kv, sizeof steps_kv, "run.steps=%d", steps);
  char *over[8] = {data_kv, dp_kv, mb_kv, steps_kv};
  int nover = 4;
  char extra_copy[256];
  snprintf(extra_copy, sizeof extra_copy, "%s", extra);
  for (char *tok = strtok(extra_copy, " "); tok && nover < 8; tok = strtok(NULL, " "))
    over[nover++] = tok;
  char deck[1100];
  snprintf(deck, sizeof deck, "%s/tests/decks/tiny.in", getenv("GT_SRCDIR"));
  gt_config cfg;
  gt_trainer *tr = NULL;
  int st = gt_config_load(&cfg, deck, nover, over, comm);
  if (st == GT_SUCCESS)
    st = gt_trainer_create(&cfg, comm, true, &tr);
  if (!tu_ok_status(st, "trainer set-up"))
    return;
  gt_params *p = gt_trainer_params(tr);
  size_t bytes = p->numel * sizeof(float);
  float *initial = tu_fetch(p->be, p->values, p->numel);
  gt_step_stats stats;
  for (int s = 0; s < steps && st == GT_SUCCESS; s++)
    st = gt_trainer_step(tr, &stats);
  tu_ok_status(st, "training steps");
  if (strstr(extra, "allreduce=")) {
    int used = gt_coll_algo_bytes(tr->coll) > 0, all = 0;
    MPI_Allreduce(&used, &all, 1, MPI_INT, MPI_LAND, comm);
    tap_ok(all, "dp=%d, %s: the data-parallel reductions ran on our algorithm", dp, extra);
  }
  float *all = rank == 0 ? malloc(bytes * (size_t)dp) : NULL;
  float *mine = tu_fetch(p->be, p->values, p->numel);
  MPI_Gather(mine, (int)p->numel, MPI_FLOAT, all, (int)p->numel, MPI_FLOAT, 0, comm);
  free(mine);
  if (rank == 0) {
    int differing = 0;
    for (int r = 1; r < dp; r++)
      differing += memcmp(all, all + (size_t)r * p->numel, bytes) != 0;
    tap_ok(differing == 0,
           "dp=%d, %d micro-batch%s%s%s: parameters bitwise identical on all %d replicas after "
           "%d steps (%d differ)",
           dp, microbatches, microbatches == 1 ? "" : "es", *extra ? ", " : "", extra, dp,
           steps, differing);
    tap_ok(memcmp(all, initial, bytes) != 0 && isfinite(stats.loss),
           "dp=%d: the parameters did change (loss %.4f)", dp, stats.loss);
  }
  free(all);
  free(initial);
  gt_trainer_destroy(&tr);
}

int main(int argc, char **argv)
{
  tu_scratch scratch;
  const int rank = tu_mpi_start(&argc, &argv, "test_dp_replicas", 4, &scratch);
  if (rank < 0)
    return 1;
  snprintf(dataset, sizeof dataset, "%s", scratch.dataset);

  check_replicas(MPI_COMM_WORLD, 4, 6, 1, "");
  check_replicas(MPI_COMM_WORLD, 4, 3, 3, "");
  /* our algorithms, with small segments so that buckets take many */
  static const char *const algos[] = {"ring", "tree", "halving"};
  char extra[200];
  for (int a = 0; a < 3; a++) {
    snprintf(extra, sizeof extra, "parallel.allreduce=%s parallel.coll_segment_kb=4 "
             "parallel.bucket_mb=0.05", algos[a]);
    check_replicas(MPI_COMM_WORLD, 4, 3, 1, extra);
    snprintf(extra, sizeof extra, "parallel.allreduce=%s parallel.zero=1 "
             "parallel.coll_segment_kb=2 parallel.coll_window=2", algos[a]);
    check_replicas(MPI_COMM_WORLD, 4, 3, 3, extra);
  }
  /* dp = 3 on ranks 0..2; rank 3 sits out */
  MPI_Comm three;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 3 ? 0 : MPI_UNDEFINED, rank, &three);
  if (three != MPI_COMM_NULL) {
    check_replicas(three, 3, 6, 2, "");
    for (int a = 0; a < 3; a++) {
      snprintf(extra, sizeof extra, "parallel.allreduce=%s parallel.coll_segment_kb=4",
               algos[a]);
      check_replicas(three, 3, 3, 1, extra);
      snprintf(extra, sizeof extra, "parallel.allreduce=%s parallel.zero=1", algos[a]);
      check_replicas(three, 3, 3, 1, extra);
    }
    MPI_Comm_free(&three);
  }
  int rc = tap_done();
  MPI_Finalize();
  return rc;
}
