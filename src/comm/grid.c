/*
 * grid.c - layout resolution and validation, and the communicator split.
 */
#define _GNU_SOURCE
#include "gridtrain/grid.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/flight.h"

int gt_grid_resolve(long dp, long pp, long tp, int world_size, int sizes[3])
{
  long req[3] = {dp, pp, tp};
  static const char *names[3] = {"dp", "pp", "tp"};
  long fixed = 1;
  int first_auto = -1;
  for (int i = 0; i < 3; i++) {
    if (req[i] == 0) {
      if (first_auto < 0)
        first_auto = i;
    } else {
      fixed *= req[i];
    }
  }
  char layout[96];
  char *p = layout;
  for (int i = 0; i < 3; i++) {
    int n = req[i] ? snprintf(p, 32, "%s%s=%ld", i ? " x " : "", names[i], req[i])
                   : snprintf(p, 32, "%s%s=auto", i ? " x " : "", names[i]);
    p += n;
  }
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

int gt_grid_check_model(const gt_config *cfg, const int sizes[3])
{
  const int dp = sizes[0], pp = sizes[1], tp = sizes[2];
  char divs[256];
  if (cfg->model.dim % cfg->model.heads != 0) {
    gt_divisors(cfg->model.dim, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "[model] heads=%ld does not divide dim=%ld; choose heads in %s",
                    cfg->model.heads, cfg->model.dim, divs);
  }
  if (cfg->model.heads % tp != 0) {
    gt_divisors(cfg->model.heads, divs, sizeof divs);
    return GT_ERROR(GT_ERR_INPUT,
                    "tp=%d does not divide [model] heads=%ld; choose tp in %s", tp,
                    cfg->model.heads, divs);
  }
  GT_CHECK(cfg->model.layers >= pp, GT_ERR_INPUT,
           "pp=%d pipeline stages need at least %d layers but [model] layers=%ld; "
           "choose pp <= %ld",
           pp, pp, cfg->model.layers, cfg->model.layers);
  long per = (long)dp * cfg->data.microbatches;
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
  long piece = (cfg->model.vocab + tp - 1) / tp;
  GT_CHECK((long)(tp - 1) * piece < cfg->model.vocab, GT_ERR_INPUT,
           "tp=%d leaves a tensor-parallel rank without vocabulary rows ([model] vocab=%ld); "
           "choose a smaller tp",
           tp, cfg->model.vocab);
  return GT_SUCCESS;
}

// ---- communicators ----------------------------------------------------------

static int gt_comm_split_checked(MPI_Comm parent, int color, int key, MPI_Comm *out)
{
  GT_CALL_MPI(MPI_Comm_split(parent, color, key, out));
  GT_CALL_MPI(MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN));
  return GT_SUCCESS;
}

/* CPUs of this node that its ranks may run on: the union of their affinity
 * masks (a rank bound to one core sees one; an unbound rank sees all). */
static int gt_node_cores(MPI_Comm node, int *cores)
{
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++)
      CPU_SET(i, &mask);
  }
  cpu_set_t all;
  GT_CALL_MPI(MPI_Allreduce(&mask, &all, (int)sizeof mask, MPI_BYTE, MPI_BOR, node));
  *cores = CPU_COUNT(&all);
  if (*cores < 1)
    *cores = 1;
  return GT_SUCCESS;
}

static int gt_grid_split(gt_grid *g, MPI_Comm world, const int sizes[3])
{
  GT_CALL_MPI(MPI_Comm_dup(world, &g->world));
  GT_CALL_MPI(MPI_Comm_set_errhandler(g->world, MPI_ERRORS_RETURN));
  GT_CALL_MPI(MPI_Comm_rank(g->world, &g->world_rank));
  GT_CALL_MPI(MPI_Comm_size(g->world, &g->world_size));
  g->dp_size = sizes[0];
  g->pp_size = sizes[1];
  g->tp_size = sizes[2];
  const int r = g->world_rank;
  g->tp_rank = r % g->tp_size;
  g->dp_rank = (r / g->tp_size) % g->dp_size;
  g->pp_rank = r / (g->tp_size * g->dp_size);
  GT_CALL(gt_comm_split_checked(g->world, g->pp_rank * g->dp_size + g->dp_rank,
                                g->tp_rank, &g->tp));
  GT_CALL(gt_comm_split_checked(g->world, g->pp_rank * g->tp_size + g->tp_rank,
                                g->dp_rank, &g->dp));
  GT_CALL(gt_comm_split_checked(g->world, g->dp_rank * g->tp_size + g->tp_rank,
                                g->pp_rank, &g->pp));
  /* First and last stage of the same (dp, tp): the tied embedding. */
  const bool ends = g->pp_size > 1 && (g->pp_rank == 0 || g->pp_rank == g->pp_size - 1);
  GT_CALL_MPI(MPI_Comm_split(g->world, ends ? g->dp_rank * g->tp_size + g->tp_rank
                                            : MPI_UNDEFINED,
                             g->pp_rank, &g->embed));
  if (g->embed != MPI_COMM_NULL)
    GT_CALL_MPI(MPI_Comm_set_errhandler(g->embed, MPI_ERRORS_RETURN));
  GT_CALL_MPI(MPI_Comm_split_type(g->world, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL,
                                  &g->node));
  GT_CALL_MPI(MPI_Comm_set_errhandler(g->node, MPI_ERRORS_RETURN));
  GT_CALL_MPI(MPI_Comm_rank(g->node, &g->node_rank));
  GT_CALL_MPI(MPI_Comm_size(g->node, &g->node_size));
  GT_CALL(gt_node_cores(g->node, &g->node_cores));
  /* The split must reproduce the rank order; anything else is a bug. */
  int check;
  GT_CALL_MPI(MPI_Comm_rank(g->dp, &check));
  GT_ASSERT(check == g->dp_rank);
  GT_CALL_MPI(MPI_Comm_rank(g->pp, &check));
  GT_ASSERT(check == g->pp_rank);
  GT_CALL_MPI(MPI_Comm_rank(g->tp, &check));
  GT_ASSERT(check == g->tp_rank);
  /* The flight recorder's names (flight.h) */
  const MPI_Comm comms[] = {g->world, g->dp, g->pp, g->tp, g->embed, g->node};
  const char *names[] = {"world", "dp", "pp", "tp", "embed", "node"};
  for (int i = 0; i < 6; i++)
    GT_CALL(gt_flight_name(comms[i], names[i]));
  return GT_SUCCESS;
}

int gt_grid_create(const gt_config *cfg, MPI_Comm world, gt_grid **grid)
{
  int world_size;
  GT_CALL_MPI(MPI_Comm_size(world, &world_size));
  int sizes[3];
  /* Every rank evaluates the same checks on the same configuration. */
  int status = gt_grid_resolve(cfg->grid.dp, cfg->grid.pp, cfg->grid.tp, world_size, sizes);
  if (status == GT_SUCCESS)
    status = gt_grid_check_model(cfg, sizes);
  if (status != GT_SUCCESS) {
    gt_error_set_collective(true);
    return status;
  }
  gt_grid *g = calloc(1, sizeof *g);
  GT_CHECK_ALLOC(g, sizeof *g);
  g->world = g->dp = g->pp = g->tp = g->embed = g->node = MPI_COMM_NULL;
  status = gt_grid_split(g, world, sizes);
  if (status != GT_SUCCESS) {
    gt_grid_destroy(&g);
    return status;
  }
  *grid = g;
  return GT_SUCCESS;
}

int gt_grid_destroy(gt_grid **grid)
{
  gt_grid *g = *grid;
  if (!g)
    return GT_SUCCESS;
  MPI_Comm *comms[] = {&g->tp, &g->dp, &g->pp, &g->embed, &g->node, &g->world};
  int first_error = MPI_SUCCESS;
  for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++)
    if (*comms[i] != MPI_COMM_NULL) {
      gt_flight_forget(*comms[i]);
      int rc = MPI_Comm_free(comms[i]); /* free them all, report the first failure */
      if (rc != MPI_SUCCESS && first_error == MPI_SUCCESS)
        first_error = rc;
    }
  free(g);
  *grid = NULL;
  GT_CALL_MPI(first_error);
  return GT_SUCCESS;
}
