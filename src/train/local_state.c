/*
 * local_state.c - the trainer's node-local tier ([checkpoint] local_dir,
 * local_every, local_keep, partner): what goes in a rank's part, when it is
 * written, the partner copies on another node, and at start-up the choice
 * between the node-local states and the global checkpoint, with the
 * redistribution of the parts' flat ranges over another data-parallel width
 * or, at another pp or tp, tensor by tensor through the parts' parameter
 * tables (docs/checkpoints.md, "Node-local and partner copies"). Files:
 * src/io/ckpt_local.c; the resume side: local_resume.c.
 */
#include "local_tier.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/ckpt_local.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/path.h"
#include "gridtrain/timer.h"
#include "gridtrain/version.h"

_Static_assert(GT_TENSOR_MAX_DIMS <= 4 && GT_SHARD_MAX_BLOCKS <= 4, "gt_local_param's arrays");

/* The parameter table of a flat buffer (malloc'ed). */
int gt_local_table_of(const gt_params *p, gt_local_param **out)
{
  gt_local_param *tab = calloc((size_t)p->count + 1, sizeof *tab);
  GT_CHECK_ALLOC(tab, ((size_t)p->count + 1) * sizeof *tab);
  for (int i = 0; i < p->count; i++) {
    const gt_param *t = &p->list[i];
    gt_local_param *e = &tab[i];
    snprintf(e->name, sizeof e->name, "%s", t->name);
    e->ndim = t->ndim;
    e->axis = t->shard.axis;
    e->blocks = t->shard.blocks;
    e->parts = t->shard.parts;
    e->index = t->shard.index;
    for (int k = 0; k < GT_SHARD_MAX_BLOCKS; k++)
      e->units[k] = t->shard.units[k];
    for (int k = 0; k < t->ndim; k++)
      e->full_shape[k] = t->full_shape[k];
    e->offset = t->offset;
    e->numel = t->numel;
  }
  *out = tab;
  return GT_SUCCESS;
}

// ---- identity of a part ---------------------------------------------------------------------

static uint64_t gt_fnv(uint64_t h, const void *p, size_t n)
{
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

/* The flat buffer of this rank's (pp, tp) coordinate: which tensor is where
 * and which part of it. Equal hashes: a flat range means the same entries. */
static uint64_t gt_local_layout_hash(const gt_params *p, size_t *data_end)
{
  uint64_t h = 1469598103934665603ull;
  *data_end = 0;
  for (int i = 0; i < p->count; i++) {
    const gt_param *t = &p->list[i];
    h = gt_fnv(h, t->name, strlen(t->name) + 1);
    h = gt_fnv(h, &t->ndim, sizeof t->ndim);
    h = gt_fnv(h, t->full_shape, sizeof t->full_shape[0] * (size_t)t->ndim);
    h = gt_fnv(h, &t->shard, sizeof t->shard);
    h = gt_fnv(h, &t->offset, sizeof t->offset);
    h = gt_fnv(h, &t->numel, sizeof t->numel);
    if (t->offset + t->numel > *data_end)
      *data_end = t->offset + t->numel;
  }
  return h;
}

/* The flat ranges values [vlo, vhi), moments [mlo, mhi): with `share`,
 * what this rank's part keeps: its share while the replicas are equal
 * (ZeRO or not: every entry once, a part 1/dp of the state), else all it
 * holds (the sync modes' replicas differ: each is kept); without, all it
 * holds (what a resume fills). */
static void gt_local_ranges(gt_trainer *tr, gt_local_header *h, bool share)
{
  gt_params *p = gt_gpt_params(tr->model);
  size_t lo, hi;
  if (share && (p->shard_size > 1 || !gt_dp_diverged(tr->dp, tr->step - 1))) {
    gt_trainer_share(tr, &lo, &hi);
    h->vlo = h->mlo = lo;
    h->vhi = h->mhi = hi;
  } else {
    gt_params_master_range(p, &lo, &hi);
    h->vlo = lo;
    h->vhi = hi;
    gt_adamw_range(tr->opt, &lo, &hi);
    h->mlo = lo;
    h->mhi = hi;
  }
  h->rank_n = gt_dp_state_len(tr->dp);
  size_t end;
  h->layout_hash = gt_local_layout_hash(p, &end);
  h->data_end = end;
  h->numel = p->numel;
}

/* The header of this rank's part at the current step (share: gt_local_ranges). */
void gt_local_header_fill(gt_trainer *tr, gt_local_header *h, bool share)
{
  const gt_grid *g = tr->grid;
  memset(h, 0, sizeof *h);
  h->step = tr->step;
  h->samples = tr->samples;
  h->scale_good = tr->scaler.good;
  h->skipped = tr->scaler.skipped;
  h->batch = tr->B;
  h->seed = tr->cfg.run.seed;
  h->loss_scale = tr->scaler.scale;
  h->loss = tr->last_loss;
  h->owner = g->world_rank;
  h->world = g->world_size;
  h->dp = g->dp_size;
  h->pp = g->pp_size;
  h->tp = g->tp_size;
  h->dp_rank = g->dp_rank;
  h->pp_rank = g->pp_rank;
  h->tp_rank = g->tp_rank;
  h->zero = (int32_t)tr->cfg.parallel.zero;
  h->shape_bytes = (int32_t)sizeof tr->shape;
  memcpy(h->shape, &tr->shape, sizeof tr->shape);
  snprintf(h->precision, sizeof h->precision, "%s", gt_dtype_name(tr->layout.dtype));
  snprintf(h->code_version, sizeof h->code_version, "%s", gt_version());
  gt_local_ranges(tr, h, share);
  gt_trainer_rank_tag(tr, h->rank_tag, sizeof h->rank_tag);
}

// ---- set-up: the directory and the partners -------------------------------------------------

/* The expanded local_dir, made on every node. Collective on world. */
int gt_local_open(gt_trainer *tr)
{
  if (tr->local)
    return GT_SUCCESS;
  const gt_grid *g = tr->grid;
  struct gt_local_state *ls = calloc(1, sizeof *ls);
  int status = ls ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  char why[128], failed[GT_PATH_MAX];
  if (status == GT_SUCCESS &&
      gt_path_expand_env(tr->cfg.checkpoint.local_dir, ls->dir, sizeof ls->dir, why,
                         sizeof why) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "[checkpoint] local_dir = %s: %s on rank %d",
                      tr->cfg.checkpoint.local_dir, why, g->world_rank);
  int err;
  if (status == GT_SUCCESS && (err = gt_path_mkdirs(ls->dir, failed, sizeof failed)) != 0)
    status = GT_ERROR(GT_ERR_INPUT, "[checkpoint] local_dir: cannot create %s: %s", failed,
                      strerror(err));
  status = gt_error_agree(status, g->world);
  if (status != GT_SUCCESS) {
    free(ls);
    GT_CALL(status);
  }
  ls->partner = -1;
  tr->local = ls;
  return GT_SUCCESS;
}

/* Partners: the rank a node's worth of ranks ahead (cyclic), moved on to
 * the next rank of another node when that one shares this rank's node.
 * Collective on world. */
static int gt_local_map_partners(gt_trainer *tr)
{
  struct gt_local_state *ls = tr->local;
  const gt_grid *g = tr->grid;
  if (ls->mapped)
    return GT_SUCCESS;
  const int W = g->world_size;
  int leader = g->world_rank;
  GT_CALL(gt_bcast_bytes(&leader, sizeof leader, 0, g->node));
  void *all;
  size_t *counts;
  GT_CALL(gt_allgatherv_bytes(&leader, sizeof leader, &all, &counts, g->world));
  free(counts);
  const int *node = all;
  int *partner = calloc((size_t)W, sizeof *partner);
  ls->senders = malloc((size_t)W * sizeof *ls->senders);
  int status = partner && ls->senders ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  bool one_node = true;
  for (int r = 0; status == GT_SUCCESS && r < W; r++) {
    int per_node = 0;
    for (int q = 0; q < W; q++)
      per_node += node[q] == node[r];
    partner[r] = -1;
    for (int k = 0; k < W - 1 && partner[r] < 0; k++) {
      const int c = (r + per_node + k) % W;
      if (c != r && node[c] != node[r])
        partner[r] = c;
    }
    if (partner[r] < 0 && W > 1)
      partner[r] = (r + 1) % W; /* every rank on one node */
    else if (partner[r] >= 0)
      one_node = false;
  }
  if (status == GT_SUCCESS) {
    ls->partner = partner[g->world_rank];
    ls->nsenders = 0;
    for (int r = 0; r < W; r++)
      if (partner[r] == g->world_rank)
        ls->senders[ls->nsenders++] = r;
    ls->mapped = true;
    if (g->world_rank == 0 && W > 1 && one_node)
      gt_info("gridtrain: [checkpoint] partner = on with every rank on one node: the partner "
              "copies protect against a lost rank, not a lost node\n");
    else if (g->world_rank == 0 && W == 1)
      gt_info("gridtrain: [checkpoint] partner = on with one rank: no partner copies\n");
  }
  free(partner);
  free(all);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_local_state_settle(gt_trainer *tr)
{
  const gt_grid *g = tr->grid;
  if (!tr->cfg.checkpoint.local_dir[0])
    return GT_SUCCESS;
  GT_CALL(gt_local_open(tr));
  long *all = NULL;
  int n = 0, status = GT_SUCCESS;
  if (g->node_rank == 0) {
    status = gt_local_all_steps(tr->local->dir, &all, &n);
    for (int i = 0; status == GT_SUCCESS && i < n; i++)
      if (all[i] > tr->step)
        status = gt_local_remove(tr->local->dir, all[i]);
    free(all);
  }
  GT_CALL(gt_error_agree(status, g->world));
  return GT_SUCCESS;
}

void gt_local_state_free(gt_trainer *tr)
{
  if (!tr->local)
    return;
  free(tr->local->buf);
  free(tr->local->senders);
  free(tr->local->table);
  free(tr->local);
  tr->local = NULL;
}

// ---- writing --------------------------------------------------------------------------------

/* Make ls->buf hold n floats. */
static int gt_local_reserve(float **buf, size_t *cap, size_t n)
{
  if (n <= *cap && *buf)
    return GT_SUCCESS;
  float *more = realloc(*buf, (n ? n : 1) * sizeof *more);
  GT_CHECK_ALLOC(more, n * sizeof *more);
  *buf = more;
  *cap = n;
  return GT_SUCCESS;
}

/* This rank's part into ls->buf (header h). dp state: collective on dp. */
static int gt_local_fill(gt_trainer *tr, gt_local_header *h)
{
  struct gt_local_state *ls = tr->local;
  gt_params *p = gt_gpt_params(tr->model);
  gt_local_header_fill(tr, h, true);
  const size_t nv = h->vhi - h->vlo, nm = h->mhi - h->mlo;
  int status = ls->table ? GT_SUCCESS : gt_local_table_of(p, &ls->table);
  h->nparams = (uint64_t)p->count;
  if (status == GT_SUCCESS)
    status = gt_local_reserve(&ls->buf, &ls->cap, gt_local_payload_len(h));
  if (h->rank_n) { /* collective on dp: every member enters it, or none */
    status = gt_error_agree(status, tr->grid->dp);
    if (status == GT_SUCCESS)
      status = gt_dp_state_save(tr->dp, tr->step, ls->buf + nv + 2 * nm);
  }
  gt_backend *be = tr->be;
  float *m, *v; /* this rank's moments, from gt_adamw_range's lo on */
  gt_adamw_moments(tr->opt, &m, &v);
  size_t mlo, mhi;
  gt_adamw_range(tr->opt, &mlo, &mhi);
  m += h->mlo - mlo;
  v += h->mlo - mlo;
  if (status == GT_SUCCESS && nv)
    status = be->ops->download(be, ls->buf, gt_params_master(p, h->vlo), nv * sizeof(float),
                               NULL);
  if (status == GT_SUCCESS && nm)
    status = be->ops->download(be, ls->buf + nv, m, nm * sizeof(float), NULL);
  if (status == GT_SUCCESS && nm)
    status = be->ops->download(be, ls->buf + nv + nm, v, nm * sizeof(float), NULL);
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* Partner copies: send this rank's part to its partner, receive and write
 * the parts of the ranks whose partner it is. */
static int gt_local_partner_copies(gt_trainer *tr, const gt_local_header *mine)
{
  struct gt_local_state *ls = tr->local;
  const gt_grid *g = tr->grid;
  const int ns = ls->nsenders;
  gt_local_header *hs = calloc((size_t)ns + 1, sizeof *hs);
  float **bufs = calloc((size_t)ns + 1, sizeof *bufs);
  gt_local_param **tabs = calloc((size_t)ns + 1, sizeof *tabs);
  gt_p2p *ops = calloc(2 * (size_t)ns + 2, sizeof *ops);
  int status = hs && bufs && tabs && ops ? GT_SUCCESS
                                         : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  int nops = 0;
  for (int i = 0; status == GT_SUCCESS && i < ns; i++)
    status = gt_p2p_recv(&hs[i], sizeof hs[i], ls->senders[i], GT_LOCAL_TAG, g->world,
                         &ops[nops++]);
  if (status == GT_SUCCESS && ls->partner >= 0)
    status = gt_p2p_send(mine, sizeof *mine, ls->partner, GT_LOCAL_TAG, g->world, &ops[nops++]);
  int wst = gt_p2p_waitall(nops, ops);
  status = status == GT_SUCCESS ? wst : status;
  nops = 0;
  for (int i = 0; status == GT_SUCCESS && i < ns; i++) {
    const size_t n = gt_local_payload_len(&hs[i]), np = hs[i].nparams;
    bufs[i] = malloc((n ? n : 1) * sizeof(float));
    tabs[i] = malloc((np ? np : 1) * sizeof(gt_local_param));
    if (!bufs[i] || !tabs[i]) {
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory (%zu floats)", n);
      break;
    }
    status = gt_p2p_recv(tabs[i], np * sizeof(gt_local_param), ls->senders[i], GT_LOCAL_TAG,
                         g->world, &ops[nops++]);
    if (status == GT_SUCCESS)
      status = gt_p2p_recv(bufs[i], n * sizeof(float), ls->senders[i], GT_LOCAL_TAG, g->world,
                           &ops[nops++]);
  }
  if (status == GT_SUCCESS && ls->partner >= 0)
    status = gt_p2p_send(ls->table ? (const void *)ls->table : (const void *)mine,
                         mine->nparams * sizeof(gt_local_param), ls->partner, GT_LOCAL_TAG,
                         g->world, &ops[nops++]);
  if (status == GT_SUCCESS && ls->partner >= 0)
    status = gt_p2p_send(ls->buf ? (const void *)ls->buf : (const void *)mine,
                         gt_local_payload_len(mine) * sizeof(float), ls->partner,
                         GT_LOCAL_TAG, g->world, &ops[nops++]);
  wst = gt_p2p_waitall(nops, ops);
  status = status == GT_SUCCESS ? wst : status;
  char path[GT_PATH_MAX + 64];
  for (int i = 0; status == GT_SUCCESS && i < ns; i++) {
    if (hs[i].owner < 0) { /* its owner failed before it could send it */
      status = GT_ERROR(GT_ERR_SYSTEM, "rank %d sent no part to keep", ls->senders[i]);
      break;
    }
    status = gt_local_part_path(ls->dir, mine->step, GT_LOCAL_PARTNER, hs[i].owner, path,
                                sizeof path);
    if (status == GT_SUCCESS)
      status = gt_local_part_write(path, &hs[i], tabs[i], bufs[i]);
  }
  for (int i = 0; bufs && tabs && i < ns; i++) {
    free(bufs[i]);
    free(tabs[i]);
  }
  free(bufs);
  free(tabs);
  free(hs);
  free(ops);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* One rank of each node deletes the step directories beyond the newest
 * local_keep complete ones up to step (step kept), and every other one
 * (incomplete, or from a later step of an abandoned run). */
static int gt_local_prune(gt_trainer *tr, long step)
{
  struct gt_local_state *ls = tr->local;
  if (tr->grid->node_rank != 0)
    return GT_SUCCESS;
  long *all = NULL, *done = NULL;
  int nall = 0, ndone = 0;
  int status = gt_local_all_steps(ls->dir, &all, &nall);
  if (status == GT_SUCCESS)
    status = gt_local_steps(ls->dir, &done, &ndone);
  long kept = 0;
  for (int i = 0; status == GT_SUCCESS && i < nall; i++) {
    bool keep = false;
    if (all[i] <= step && kept < tr->cfg.checkpoint.local_keep)
      for (int j = 0; j < ndone && !keep; j++)
        keep = done[j] == all[i];
    if (keep)
      kept++;
    else
      status = gt_local_remove(ls->dir, all[i]);
  }
  free(all);
  free(done);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_local_state_save(gt_trainer *tr)
{
  const gt_config *cfg = &tr->cfg;
  const gt_grid *g = tr->grid;
  if (!cfg->checkpoint.local_dir[0] || cfg->checkpoint.local_every <= 0 ||
      tr->step % cfg->checkpoint.local_every != 0)
    return GT_SUCCESS;
  GT_CALL(gt_local_open(tr));
  if (cfg->checkpoint.partner)
    GT_CALL(gt_local_map_partners(tr));
  struct gt_local_state *ls = tr->local;
  const double t0 = gt_now();
  gt_local_header h;
  int status = gt_local_fill(tr, &h);
  char path[GT_PATH_MAX + 64], failed[GT_PATH_MAX];
  if (status == GT_SUCCESS)
    status = gt_local_step_dir(ls->dir, tr->step, path, sizeof path);
  int err;
  if (status == GT_SUCCESS && (err = gt_path_mkdirs(path, failed, sizeof failed)) != 0)
    status = GT_ERROR(GT_ERR_SYSTEM, "cannot create %s: %s", failed, strerror(err));
  if (status == GT_SUCCESS)
    status = gt_local_part_path(ls->dir, tr->step, GT_LOCAL_OWN, g->world_rank, path,
                                sizeof path);
  if (status == GT_SUCCESS)
    status = gt_local_part_write(path, &h, ls->table, ls->buf);
  if (cfg->checkpoint.partner) { /* every rank takes part, failed or not */
    if (status != GT_SUCCESS) { /* nothing to send: an empty part of no owner */
      memset(&h, 0, sizeof h);
      h.owner = -1;
    }
    const int pst = gt_local_partner_copies(tr, &h);
    status = status == GT_SUCCESS ? pst : status;
  }
  /* the one agreement: every part of this step is written */
  status = gt_error_agree(status, g->world);
  if (status == GT_ERR_MPI)
    GT_CALL(status);
  if (status != GT_SUCCESS) {
    gt_warn("the node-local state of step %ld was not written: %s; training goes on",
            tr->step, gt_error_message());
    gt_error_clear();
    if (g->node_rank == 0)
      (void)gt_local_remove(ls->dir, tr->step);
    return GT_SUCCESS;
  }
  status = gt_local_mark(ls->dir, tr->step, g->world_rank);
  if (status == GT_SUCCESS)
    status = gt_local_prune(tr, tr->step);
  if (status != GT_SUCCESS) { /* the state is written; a marker or pruning is not */
    fprintf(stderr, "gridtrain: warning: rank %d: %s\n", g->world_rank, gt_error_message());
    gt_error_clear();
  }
  if (g->world_rank == 0 && cfg->run.log_every > 0 && tr->step % cfg->run.log_every == 0)
    gt_info("gridtrain: node-local state of step %ld written in %.3f s\n", tr->step,
            gt_now() - t0);
  return GT_SUCCESS;
}
