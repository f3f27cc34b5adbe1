/*
 * local_resume.c - the resume side of the trainer's node-local tier
 * (local_tier.h): at start-up with resume = auto, every rank's parts are
 * found (own and partner copies), the newest complete state among them and
 * the global checkpoint is chosen and verified, and its flat ranges are
 * redistributed point to point over this run's data-parallel width or, at
 * another pp or tp, tensor by tensor through the parts' parameter tables
 * (docs/checkpoints.md, "Node-local and partner copies"). Files:
 * src/io/ckpt_local.c.
 */
#include "local_tier.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"
#include "gridtrain/path.h"
#include "gridtrain/timer.h"

// ---- resuming -------------------------------------------------------------------------------

/* A part that some rank can read: its header (when ok), where it is. */
typedef struct gt_local_entry {
  gt_local_header h;
  int32_t holder;  /* world rank that reads it */
  int32_t kind;    /* gt_local_kind */
  int32_t owner;   /* from the file name */
  int32_t ok;      /* the header is readable */
  int64_t step;    /* from the directory name */
  int32_t marked;  /* the step directory has a done_ marker */
  int32_t pad_;
} gt_local_entry;

/* What a rank of this run needs. */
typedef struct gt_local_need {
  int32_t dp_rank, pp_rank, tp_rank, nparams;
  uint64_t vlo, vhi, mlo, mhi, rank_n, layout_hash;
} gt_local_need;

/* This rank's share of the parts on its node: the files whose owner is
 * its node rank modulo the node's ranks. */
static int gt_local_scan(gt_trainer *tr, gt_local_entry **out, int *n, gt_local_param **tabs,
                         size_t *ntabs)
{
  *tabs = NULL;
  *ntabs = 0;
  size_t tcap = 0;
  const gt_grid *g = tr->grid;
  struct gt_local_state *ls = tr->local;
  *out = NULL;
  *n = 0;
  long *steps = NULL, *marked = NULL;
  int nsteps = 0, nmarked = 0, cap = 0;
  GT_CALL(gt_local_all_steps(ls->dir, &steps, &nsteps));
  int status = gt_local_steps(ls->dir, &marked, &nmarked);
  for (int s = 0; status == GT_SUCCESS && s < nsteps; s++) {
    int *owners = NULL, np = 0;
    gt_local_kind *kinds = NULL;
    status = gt_local_parts(ls->dir, steps[s], &owners, &kinds, &np);
    bool mk = false;
    for (int j = 0; j < nmarked; j++)
      mk = mk || marked[j] == steps[s];
    for (int i = 0; status == GT_SUCCESS && i < np; i++) {
      if (owners[i] % g->node_size != g->node_rank)
        continue;
      if (*n == cap) {
        cap = cap ? 2 * cap : 8;
        gt_local_entry *more = realloc(*out, (size_t)cap * sizeof *more);
        if (!more) {
          status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
          break;
        }
        *out = more;
      }
      gt_local_entry *e = &(*out)[(*n)++];
      memset(e, 0, sizeof *e);
      e->holder = g->world_rank;
      e->kind = kinds[i];
      e->owner = owners[i];
      e->step = steps[s];
      e->marked = mk;
      char path[GT_PATH_MAX + 64];
      status = gt_local_part_path(ls->dir, steps[s], kinds[i], owners[i], path, sizeof path);
      if (status == GT_SUCCESS) {
        e->ok = gt_local_part_header(path, &e->h) == GT_SUCCESS && e->h.owner == e->owner &&
                e->h.step == e->step;
        if (e->ok && *ntabs + e->h.nparams > tcap) {
          tcap = 2 * (*ntabs + e->h.nparams) + 64;
          gt_local_param *more = realloc(*tabs, tcap * sizeof *more);
          e->ok = more != NULL;
          if (more)
            *tabs = more;
        }
        e->ok = e->ok && gt_local_part_table(path, &e->h, *tabs + *ntabs) == GT_SUCCESS;
        if (e->ok)
          *ntabs += e->h.nparams;
        gt_error_clear();
      }
    }
    free(owners);
    free(kinds);
  }
  free(steps);
  free(marked);
  if (status != GT_SUCCESS) {
    free(*out);
    *out = NULL;
    *n = 0;
    free(*tabs);
    *tabs = NULL;
    *ntabs = 0;
  }
  GT_CALL(status);
  return GT_SUCCESS;
}

/* A transfer of the plan: len floats of entry e's payload from src to
 * needer's section sec (0 values, 1 m, 2 v, 3 rank state) at flat index x
 * (sec 3: at index x of the rank state); e -1: zeros. */
typedef struct gt_local_move {
  int e, needer, sec;
  size_t src, x, len;
} gt_local_move;

typedef struct gt_local_plan {
  gt_local_move *moves;
  int n, cap;
} gt_local_plan;

static int gt_local_plan_add(gt_local_plan *pl, gt_local_move mv)
{
  if (pl->n == pl->cap) {
    pl->cap = pl->cap ? 2 * pl->cap : 64;
    gt_local_move *more = realloc(pl->moves, (size_t)pl->cap * sizeof *more);
    GT_CHECK_ALLOC(more, (size_t)pl->cap * sizeof *more);
    pl->moves = more;
  }
  pl->moves[pl->n++] = mv;
  return GT_SUCCESS;
}

/* The moves that fill needer's flat range [a, b) of section sec (0 values,
 * 1 m, 2 v) from the chosen entries src[0..ns), in order of preference. */
static int gt_local_plan_range(gt_local_plan *pl, const gt_local_entry *ents, const int *src,
                               int ns, int needer, int sec, size_t a, size_t b, size_t data_end)
{
  size_t x = a;
  while (x < b) {
    int best = -1;
    size_t end = b;
    for (int i = 0; i < ns && best < 0; i++) {
      const gt_local_header *h = &ents[src[i]].h;
      const size_t lo = sec == 0 ? h->vlo : h->mlo, hi = sec == 0 ? h->vhi : h->mhi;
      if (lo <= x && x < hi) {
        best = src[i];
        end = hi < b ? hi : b;
      }
    }
    if (best < 0) { /* nobody holds it: padding past the last tensor, else a hole */
      GT_CHECK(x >= data_end, GT_ERR_INPUT,
               "the node-local parts do not hold the flat entries from %zu on", x);
      for (int i = 0; i < ns; i++) { /* up to where some part starts */
        const gt_local_header *h = &ents[src[i]].h;
        const size_t lo = sec == 0 ? h->vlo : h->mlo;
        if (lo > x && lo < end)
          end = lo;
      }
      GT_CALL(gt_local_plan_add(pl, (gt_local_move){-1, needer, sec, 0, x, end - x}));
      x = end;
      continue;
    }
    const gt_local_header *h = &ents[best].h;
    const size_t nv = h->vhi - h->vlo, nm = h->mhi - h->mlo;
    const size_t off = sec == 0 ? x - h->vlo : (sec == 1 ? nv : nv + nm) + (x - h->mlo);
    GT_CALL(gt_local_plan_add(pl, (gt_local_move){best, needer, sec, off, x, end - x}));
    x = end;
  }
  return GT_SUCCESS;
}

/* One candidate step: everything every rank knows about it. */
typedef struct gt_local_try {
  long step;
  int world, dp, pp, tp;
  int *chosen;       /* per owner: the entry used */
  bool same_layout;  /* written at this run's dp, pp, tp */
  bool logical;      /* another pp or tp: moved tensor by tensor (gt_local_load_logical) */
} gt_local_try;

/* Whether the parts of step t->step make a complete state this run can
 * load: every owner has a readable header, all from one run, the model
 * and the split of pp and tp this run's. why: what is wrong. fallback:
 * the layout differs (no other step will do better). */
static bool gt_local_usable(gt_trainer *tr, const gt_local_entry *ents, int ne,
                            const gt_local_need *needs, gt_local_try *t, char *why,
                            size_t wsize, bool *fallback)
{
  const gt_grid *g = tr->grid;
  *fallback = false;
  const gt_local_header *first = NULL;
  bool marked = false;
  for (int i = 0; i < ne; i++)
    if (ents[i].step == t->step) {
      marked = marked || ents[i].marked;
      if (ents[i].ok && !first)
        first = &ents[i].h;
    }
  if (!first || !marked) {
    snprintf(why, wsize, "it is not complete (no rank marked it written)");
    return false;
  }
  t->world = first->world;
  t->dp = first->dp;
  t->pp = first->pp;
  t->tp = first->tp;
  for (int i = 0; i < ne; i++) {
    const gt_local_header *h = &ents[i].h;
    if (ents[i].step != t->step || !ents[i].ok)
      continue;
    if (h->world != first->world || h->dp != first->dp || h->pp != first->pp ||
        h->tp != first->tp || h->samples != first->samples || h->seed != first->seed ||
        memcmp(h->shape, first->shape, sizeof h->shape) != 0 || h->owner >= h->world) {
      snprintf(why, wsize, "its parts come from different runs (rank %d's part disagrees)",
               h->owner);
      return false;
    }
  }
  gt_gpt_shape have;
  memcpy(&have, first->shape, sizeof have);
  gt_gpt_shape_field f;
  if (first->shape_bytes != (int32_t)sizeof have ||
      gt_gpt_shape_differ(&have, &tr->shape, false, &f)) {
    snprintf(why, wsize, "it holds a model with %s = %s where the deck has %s",
             first->shape_bytes == (int32_t)sizeof have ? f.key : "another shape",
             first->shape_bytes == (int32_t)sizeof have ? f.a : "?",
             first->shape_bytes == (int32_t)sizeof have ? f.b : "this one");
    *fallback = true;
    return false;
  }
  for (int o = 0; o < t->world; o++) {
    bool any = false;
    for (int i = 0; i < ne && !any; i++)
      any = ents[i].step == t->step && ents[i].ok && ents[i].owner == o;
    if (!any) {
      snprintf(why, wsize, "the part of rank %d is missing (no own or partner copy is left)",
               o);
      return false;
    }
  }
  /* the same flat buffers, or else the tensors by name (another pp or tp) */
  t->logical = t->pp != g->pp_size || t->tp != g->tp_size;
  for (int r = 0; r < g->world_size && !t->logical; r++)
    for (int i = 0; i < ne && !t->logical; i++) {
      const gt_local_header *h = &ents[i].h;
      t->logical = ents[i].step == t->step && ents[i].ok && h->pp_rank == needs[r].pp_rank &&
                   h->tp_rank == needs[r].tp_rank && h->layout_hash != needs[r].layout_hash;
    }
  t->same_layout = t->world == g->world_size && t->dp == g->dp_size && !t->logical;
  return true;
}

/* Read and verify this rank's entries of step t->step into bufs; then
 * every rank learns which entries verified (bad[i]), and rank 0 the first
 * failure's message (warned). Collective on world. */
static int gt_local_read_step(gt_trainer *tr, const gt_local_entry *ents, int ne,
                              const gt_local_try *t, const float **bufs, gt_local_map *maps,
                              double *bytes, double *seconds, int *bad)
{
  const gt_grid *g = tr->grid;
  struct gt_local_state *ls = tr->local;
  int mine = GT_SUCCESS;
  double t0 = gt_now();
  *bytes = 0;
  for (int i = 0; i < ne; i++) {
    bad[i] = ents[i].step == t->step && !ents[i].ok;
    if (ents[i].step != t->step || ents[i].holder != g->world_rank || !ents[i].ok)
      continue;
    char path[GT_PATH_MAX + 64];
    double b = 0;
    int st = gt_local_part_path(ls->dir, t->step, (gt_local_kind)ents[i].kind, ents[i].owner,
                                path, sizeof path);
    if (st == GT_SUCCESS)
      st = gt_local_part_map(path, &ents[i].h, &bufs[i], &maps[i], &b);
    *bytes += b;
    if (st != GT_SUCCESS) {
      bad[i] = 1;
      if (mine == GT_SUCCESS)
        mine = st; /* the message stays for the agreement below */
    }
  }
  *seconds = gt_now() - t0;
  GT_CALL(gt_allreduce_int(bad, ne, MPI_MAX, g->world));
  /* the first damaged part, named on rank 0 (not an error: another copy,
   * or another state, may do; the lowest failing rank's message) */
  const int agreed = gt_error_agree(mine, g->world);
  if (agreed != GT_SUCCESS) {
    if (agreed == GT_ERR_MPI || agreed == GT_ERR_SYSTEM)
      return agreed;
    gt_warn("%s", gt_error_message());
    gt_error_clear();
  }
  return GT_SUCCESS;
}

/* Choose a verified copy of every owner's part (own before partner, then
 * the lowest holder): false when some owner has none (why says which). */
static bool gt_local_choose(const gt_local_entry *ents, int ne, const int *bad, gt_local_try *t,
                            char *why, size_t wsize)
{
  for (int o = 0; o < t->world; o++) {
    int best = -1;
    for (int i = 0; i < ne; i++) {
      if (ents[i].step != t->step || ents[i].owner != o || bad[i])
        continue;
      if (best < 0 || ents[i].kind < ents[best].kind ||
          (ents[i].kind == ents[best].kind && ents[i].holder < ents[best].holder))
        best = i;
    }
    if (best < 0) {
      snprintf(why, wsize, "no copy of rank %d's part verifies", o);
      return false;
    }
    t->chosen[o] = best;
  }
  return true;
}

/* Where move mv lands on this rank: device memory of section 0-2, or the
 * host rank state. */
static void *gt_local_dest(gt_trainer *tr, const gt_local_need *me, float *rank_state,
                           const gt_local_move *mv)
{
  float *m, *v;
  gt_adamw_moments(tr->opt, &m, &v);
  switch (mv->sec) {
  case 0: return gt_params_master(gt_gpt_params(tr->model), mv->x);
  case 1: return m + (mv->x - me->mlo);
  case 2: return v + (mv->x - me->mlo);
  default: return rank_state + mv->x;
  }
}

/* Fill this rank's state from the chosen entries: plan the moves of every
 * rank, send what this rank holds, receive what it needs; what it holds
 * itself goes from the mapped file to the device directly. */
static int gt_local_load(gt_trainer *tr, const gt_local_entry *ents, const float **bufs,
                         const gt_local_need *needs, const gt_local_try *t, bool *rank_loaded)
{
  const gt_grid *g = tr->grid;
  const int W = g->world_size;
  gt_backend *be = tr->be;
  gt_local_plan pl = {0};
  int *src = malloc((size_t)t->world * sizeof *src);
  int status = src ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  /* the rank state comes over only into the same layout with the same tag */
  bool tags = t->same_layout;
  char tag[GT_LOCAL_TAG_BYTES];
  gt_trainer_rank_tag(tr, tag, sizeof tag);
  for (int o = 0; tags && o < t->world; o++) {
    const gt_local_header *h = &ents[t->chosen[o]].h;
    tags = strcmp(h->rank_tag, tag) == 0 && h->rank_n == needs[o].rank_n;
  }
  int tagged = tags;
  GT_CALL(gt_allreduce_int(&tagged, 1, MPI_MIN, g->world));
  *rank_loaded = tagged;
  for (int n = 0; status == GT_SUCCESS && n < W; n++) {
    const gt_local_need *nd = &needs[n];
    /* candidates: the chosen parts of this coordinate by dp rank, its own
     * dp rank's first in the same layout (replicas that may differ) */
    int ns = 0;
    for (int o = 0; o < t->world; o++) {
      const gt_local_header *h = &ents[t->chosen[o]].h;
      if (h->pp_rank == nd->pp_rank && h->tp_rank == nd->tp_rank)
        src[ns++] = t->chosen[o];
    }
    for (int i = 1; i < ns; i++) /* insertion sort by dp rank */
      for (int j = i; j > 0 && ents[src[j]].h.dp_rank < ents[src[j - 1]].h.dp_rank; j--) {
        const int x = src[j];
        src[j] = src[j - 1];
        src[j - 1] = x;
      }
    for (int i = 0; t->same_layout && i < ns; i++)
      if (ents[src[i]].h.dp_rank == nd->dp_rank) {
        const int x = src[i];
        memmove(src + 1, src, (size_t)i * sizeof *src);
        src[0] = x;
      }
    const size_t end = ns ? ents[src[0]].h.data_end : 0;
    status = gt_local_plan_range(&pl, ents, src, ns, n, 0, nd->vlo, nd->vhi, end);
    if (status == GT_SUCCESS)
      status = gt_local_plan_range(&pl, ents, src, ns, n, 1, nd->mlo, nd->mhi, end);
    if (status == GT_SUCCESS)
      status = gt_local_plan_range(&pl, ents, src, ns, n, 2, nd->mlo, nd->mhi, end);
    if (status == GT_SUCCESS && tagged && nd->rank_n) {
      const int e = t->chosen[n];
      const gt_local_header *h = &ents[e].h;
      status = gt_local_plan_add(
          &pl, (gt_local_move){e, n, 3, gt_local_payload_len(h) - h->rank_n, 0, nd->rank_n});
    }
  }
  const gt_local_need *me = &needs[g->world_rank];
  /* staging: what comes from other ranks, and the rank state */
  size_t nstage = me->rank_n;
  for (int k = 0; k < pl.n; k++) {
    const gt_local_move *mv = &pl.moves[k];
    if (mv->needer == g->world_rank && mv->e >= 0 && ents[mv->e].holder != g->world_rank &&
        mv->sec < 3)
      nstage += mv->len;
  }
  float *stage = status == GT_SUCCESS ? malloc((nstage + 1) * sizeof *stage) : NULL;
  gt_p2p *ops = status == GT_SUCCESS ? calloc((size_t)pl.n + 1, sizeof *ops) : NULL;
  size_t *at = status == GT_SUCCESS ? calloc((size_t)pl.n + 1, sizeof *at) : NULL;
  if (status == GT_SUCCESS && (!stage || !ops || !at))
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory (%zu floats)", nstage);
  /* every rank posts its part of the plan, or none does */
  status = gt_error_agree(status, g->world);
  float *rank_state = stage;
  size_t used = me->rank_n;
  int nops = 0;
  for (int k = 0; status == GT_SUCCESS && k < pl.n; k++) {
    const gt_local_move *mv = &pl.moves[k];
    const int holder = mv->e >= 0 ? ents[mv->e].holder : -1;
    if (mv->needer == g->world_rank && holder == g->world_rank) {
      void *dst = gt_local_dest(tr, me, rank_state, mv);
      if (mv->sec == 3)
        memcpy(dst, bufs[mv->e] + mv->src, mv->len * sizeof(float));
      else
        status = be->ops->upload(be, dst, bufs[mv->e] + mv->src, mv->len * sizeof(float), NULL);
    } else if (mv->needer == g->world_rank && holder < 0) {
      status = be->ops->zero(be, gt_local_dest(tr, me, rank_state, mv), mv->len * sizeof(float));
    } else if (mv->needer == g->world_rank) {
      at[k] = mv->sec == 3 ? (size_t)(rank_state - stage) : used;
      if (mv->sec < 3)
        used += mv->len;
      status = gt_p2p_recv(stage + at[k], mv->len * sizeof(float), holder, GT_LOCAL_TAG,
                           g->world, &ops[nops++]);
    } else if (holder == g->world_rank) {
      status = gt_p2p_send(bufs[mv->e] + mv->src, mv->len * sizeof(float), mv->needer,
                           GT_LOCAL_TAG, g->world, &ops[nops++]);
    }
  }
  const int wst = gt_p2p_waitall(nops, ops);
  status = status == GT_SUCCESS ? wst : status;
  for (int k = 0; status == GT_SUCCESS && k < pl.n; k++) { /* what came over, to the device */
    const gt_local_move *mv = &pl.moves[k];
    if (mv->needer != g->world_rank || mv->e < 0 || ents[mv->e].holder == g->world_rank ||
        mv->sec == 3)
      continue;
    status = be->ops->upload(be, gt_local_dest(tr, me, rank_state, mv), stage + at[k],
                             mv->len * sizeof(float), NULL);
  }
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  status = gt_error_agree(status, g->world);
  gt_params *p = gt_gpt_params(tr->model);
  if (status == GT_SUCCESS)
    status = gt_dp_state_restore(tr->dp, t->step, rank_state, tagged);
  if (status == GT_SUCCESS)
    status = gt_params_refresh_compute(p);
  status = gt_error_agree(status, g->world);
  if (status == GT_SUCCESS) /* zero: the other pieces of the compute copy */
    status = gt_error_agree(gt_dp_gather_compute(tr->dp), g->world);
  free(stage);
  free(ops);
  free(at);
  free(pl.moves);
  free(src);
  GT_CALL(status);
  return GT_SUCCESS;
}

// ---- another pp or tp: tensor by tensor ------------------------------------------------------

/* A run of a rank's tensor: len entries from local index local are the
 * logical entries from logical on (row-major). */
typedef struct gt_local_run {
  size_t local, logical, len;
} gt_local_run;

/* The runs of t's real entries (padding left out), by logical index. */
static int gt_local_runs(const gt_local_param *t, gt_local_run **runs, size_t *n)
{
  *runs = NULL;
  *n = 0;
  if (t->axis < 0) {
    *runs = malloc(sizeof **runs);
    GT_CHECK_ALLOC(*runs, sizeof **runs);
    (*runs)[0] = (gt_local_run){0, 0, t->numel};
    *n = 1;
    return GT_SUCCESS;
  }
  gt_shard sh = {t->axis, t->blocks, t->parts, t->index, {0}};
  for (int k = 0; k < GT_SHARD_MAX_BLOCKS; k++)
    sh.units[k] = t->units[k];
  size_t outer = 1, inner = 1;
  for (int i = 0; i < t->axis; i++)
    outer *= (size_t)t->full_shape[i];
  for (int i = t->axis + 1; i < t->ndim; i++)
    inner *= (size_t)t->full_shape[i];
  const long full_len = t->full_shape[t->axis], local_len = gt_shard_extent(&sh, full_len);
  *runs = malloc(outer * (size_t)t->blocks * sizeof **runs + 1);
  GT_CHECK_ALLOC(*runs, outer * (size_t)t->blocks * sizeof **runs);
  for (size_t o = 0; o < outer; o++)
    for (int b = 0; b < t->blocks; b++) {
      const gt_shard_block bk = gt_shard_block_of(&sh, full_len, b);
      const long start = (long)t->index * bk.piece;
      long valid = bk.len - start;
      valid = valid < 0 ? 0 : valid > bk.piece ? bk.piece : valid;
      if (valid > 0)
        (*runs)[(*n)++] = (gt_local_run){(o * (size_t)local_len + (size_t)bk.lfirst) * inner,
                                         (o * (size_t)full_len + (size_t)(bk.first + start)) *
                                             inner,
                                         (size_t)valid * inner};
    }
  return GT_SUCCESS;
}

/* needer's flat entries [fn, fn + len) are source coordinate's flat entries
 * [fs, fs + len): the moves of each section that this rank takes part in,
 * split over the parts (chosen entries src[0..ns)) that hold them. */
static int gt_local_logical_segment(gt_local_plan *pl, const gt_local_entry *ents, const int *src,
                                    int ns, int needer, const gt_local_need *nd, size_t fn,
                                    size_t fs, size_t len, int me)
{
  for (int sec = 0; sec < 3; sec++) {
    const size_t lo = sec == 0 ? nd->vlo : nd->mlo, hi = sec == 0 ? nd->vhi : nd->mhi;
    size_t a = fn > lo ? fn : lo;
    const size_t b = fn + len < hi ? fn + len : hi;
    while (a < b) {
      const size_t x = fs + (a - fn); /* source flat index */
      int best = -1;
      size_t end = b;
      for (int i = 0; i < ns && best < 0; i++) {
        const gt_local_header *h = &ents[src[i]].h;
        const size_t slo = sec == 0 ? h->vlo : h->mlo, shi = sec == 0 ? h->vhi : h->mhi;
        if (slo <= x && x < shi) {
          best = src[i];
          if (a + (shi - x) < end)
            end = a + (shi - x);
        }
      }
      GT_CHECK(best >= 0, GT_ERR_INPUT,
               "the node-local parts do not hold flat entry %zu of pp rank %d, tp rank %d", x,
               ents[src[0]].h.pp_rank, ents[src[0]].h.tp_rank);
      const gt_local_header *h = &ents[best].h;
      const size_t nv = h->vhi - h->vlo, nm = h->mhi - h->mlo;
      const size_t off = sec == 0 ? x - h->vlo : (sec == 1 ? nv : nv + nm) + (x - h->mlo);
      if (needer == me || ents[best].holder == me)
        GT_CALL(gt_local_plan_add(pl, (gt_local_move){best, needer, sec, off, a, end - a}));
      a = end;
    }
  }
  return GT_SUCCESS;
}

/* Load a state written at another pp or tp: every tensor of every rank is
 * matched by name with the tensors of the written coordinates, their
 * logical entries intersected, and the moves packed into one message per
 * pair of ranks. Collective on world. */
static int gt_local_load_logical(gt_trainer *tr, const gt_local_entry *ents,
                                 const gt_local_param *const *etab, const float **bufs,
                                 const gt_local_need *needs, const gt_local_param *const *ntab,
                                 const gt_local_try *t)
{
  const gt_grid *g = tr->grid;
  const int W = g->world_size, me = g->world_rank;
  gt_backend *be = tr->be;
  gt_local_plan pl = {0};
  /* the written coordinates, in (pp, tp) order, each with its chosen parts by dp rank */
  const int ncoord = t->pp * t->tp;
  int *src = malloc(((size_t)t->world + 1) * sizeof *src);
  int *nsrc = calloc((size_t)ncoord + 1, sizeof *nsrc);
  int status = src && nsrc ? GT_SUCCESS : GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  int at = 0;
  for (int c = 0; status == GT_SUCCESS && c < ncoord; c++)
    for (int dpr = 0; dpr < t->dp; dpr++)
      for (int o = 0; o < t->world; o++) {
        const gt_local_header *h = &ents[t->chosen[o]].h;
        if (h->pp_rank * t->tp + h->tp_rank == c && h->dp_rank == dpr) {
          src[at++] = t->chosen[o];
          nsrc[c]++;
        }
      }
  for (int n = 0; status == GT_SUCCESS && n < W; n++) {
    const gt_local_need *nd = &needs[n];
    for (int k = 0; status == GT_SUCCESS && k < nd->nparams; k++) {
      const gt_local_param *tn = &ntab[n][k];
      gt_local_run *rn = NULL;
      size_t nrn = 0, want = 0, covered = 0;
      status = gt_local_runs(tn, &rn, &nrn);
      for (size_t i = 0; i < nrn; i++)
        want += rn[i].len;
      int first = 0;
      for (int c = 0; status == GT_SUCCESS && c < ncoord && covered < want; first += nsrc[c++]) {
        if (!nsrc[c])
          continue;
        const int e0 = src[first];
        const gt_local_param *ts = NULL;
        for (uint64_t j = 0; j < ents[e0].h.nparams && !ts; j++)
          if (strcmp(etab[e0][j].name, tn->name) == 0)
            ts = &etab[e0][j];
        if (!ts)
          continue;
        gt_local_run *rs = NULL;
        size_t nrs = 0;
        status = gt_local_runs(ts, &rs, &nrs);
        for (size_t i = 0, j = 0; status == GT_SUCCESS && i < nrn && j < nrs;) {
          const size_t a = rn[i].logical > rs[j].logical ? rn[i].logical : rs[j].logical;
          const size_t ea = rn[i].logical + rn[i].len, eb = rs[j].logical + rs[j].len;
          const size_t b = ea < eb ? ea : eb;
          if (a < b) {
            covered += b - a;
            status = gt_local_logical_segment(
                &pl, ents, src + first, nsrc[c], n, nd,
                tn->offset + rn[i].local + (a - rn[i].logical),
                ts->offset + rs[j].local + (a - rs[j].logical), b - a, me);
          }
          if (ea <= eb)
            i++;
          else
            j++;
        }
        free(rs);
      }
      free(rn);
      if (status == GT_SUCCESS && covered != want)
        status = GT_ERROR(GT_ERR_INPUT,
                          "the node-local parts hold %zu of the %zu entries of %s for rank %d",
                          covered, want, tn->name, n);
    }
  }
  /* this rank's staging buffer, and one message per peer each way */
  const gt_local_need *mine = &needs[me];
  const size_t nv = mine->vhi - mine->vlo, nm = mine->mhi - mine->mlo;
  float *stage = status == GT_SUCCESS ? calloc(nv + 2 * nm + 1, sizeof *stage) : NULL;
  size_t *sendn = calloc((size_t)W, sizeof *sendn), *recvn = calloc((size_t)W, sizeof *recvn);
  float **sendb = calloc((size_t)W, sizeof *sendb), **recvb = calloc((size_t)W, sizeof *recvb);
  gt_p2p *ops = calloc(2 * (size_t)W + 1, sizeof *ops);
  if (status == GT_SUCCESS && (!stage || !sendn || !recvn || !sendb || !recvb || !ops))
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory (%zu floats)", nv + 2 * nm);
  for (int k = 0; status == GT_SUCCESS && k < pl.n; k++) {
    const gt_local_move *mv = &pl.moves[k];
    const int holder = ents[mv->e].holder;
    if (holder == me && mv->needer != me)
      sendn[mv->needer] += mv->len;
    else if (holder != me && mv->needer == me)
      recvn[holder] += mv->len;
  }
  for (int r = 0; status == GT_SUCCESS && r < W; r++) {
    sendb[r] = sendn[r] ? malloc(sendn[r] * sizeof(float)) : NULL;
    recvb[r] = recvn[r] ? malloc(recvn[r] * sizeof(float)) : NULL;
    if ((sendn[r] && !sendb[r]) || (recvn[r] && !recvb[r]))
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  }
  status = gt_error_agree(status, g->world); /* every rank posts its messages, or none */
  size_t *fill = status == GT_SUCCESS ? calloc((size_t)W, sizeof *fill) : NULL;
  if (status == GT_SUCCESS && !fill)
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  const size_t base[3] = {0, nv, nv + nm};
  for (int k = 0; status == GT_SUCCESS && k < pl.n; k++) { /* pack, and what stays here */
    const gt_local_move *mv = &pl.moves[k];
    const int holder = ents[mv->e].holder;
    const size_t lo = mv->sec == 0 ? mine->vlo : mine->mlo;
    if (holder == me && mv->needer == me)
      memcpy(stage + base[mv->sec] + (mv->x - lo), bufs[mv->e] + mv->src,
             mv->len * sizeof(float));
    else if (holder == me) {
      memcpy(sendb[mv->needer] + fill[mv->needer], bufs[mv->e] + mv->src,
             mv->len * sizeof(float));
      fill[mv->needer] += mv->len;
    }
  }
  int nops = 0;
  for (int r = 0; status == GT_SUCCESS && r < W; r++) {
    if (recvn[r])
      status = gt_p2p_recv(recvb[r], recvn[r] * sizeof(float), r, GT_LOCAL_TAG, g->world,
                           &ops[nops++]);
    if (status == GT_SUCCESS && sendn[r])
      status = gt_p2p_send(sendb[r], sendn[r] * sizeof(float), r, GT_LOCAL_TAG, g->world,
                           &ops[nops++]);
  }
  const int wst = gt_p2p_waitall(nops, ops);
  status = status == GT_SUCCESS ? wst : status;
  if (fill)
    memset(fill, 0, (size_t)W * sizeof *fill);
  for (int k = 0; status == GT_SUCCESS && k < pl.n; k++) { /* unpack */
    const gt_local_move *mv = &pl.moves[k];
    const int holder = ents[mv->e].holder;
    if (holder == me || mv->needer != me)
      continue;
    const size_t lo = mv->sec == 0 ? mine->vlo : mine->mlo;
    memcpy(stage + base[mv->sec] + (mv->x - lo), recvb[holder] + fill[holder],
           mv->len * sizeof(float));
    fill[holder] += mv->len;
  }
  gt_params *p = gt_gpt_params(tr->model);
  float *m, *v;
  gt_adamw_moments(tr->opt, &m, &v);
  if (status == GT_SUCCESS && nv)
    status = be->ops->upload(be, gt_params_master(p, mine->vlo), stage, nv * sizeof(float), NULL);
  if (status == GT_SUCCESS && nm)
    status = be->ops->upload(be, m, stage + nv, nm * sizeof(float), NULL);
  if (status == GT_SUCCESS && nm)
    status = be->ops->upload(be, v, stage + nv + nm, nm * sizeof(float), NULL);
  if (status == GT_SUCCESS)
    status = be->ops->sync(be);
  status = gt_error_agree(status, g->world);
  if (status == GT_SUCCESS)
    status = gt_dp_state_restore(tr->dp, t->step, stage, false);
  if (status == GT_SUCCESS)
    status = gt_params_refresh_compute(p);
  status = gt_error_agree(status, g->world);
  if (status == GT_SUCCESS) /* zero: the other pieces of the compute copy */
    status = gt_error_agree(gt_dp_gather_compute(tr->dp), g->world);
  for (int r = 0; sendb && recvb && r < W; r++) {
    free(sendb[r]);
    free(recvb[r]);
  }
  free(sendb);
  free(recvb);
  free(sendn);
  free(recvn);
  free(fill);
  free(ops);
  free(stage);
  free(pl.moves);
  free(src);
  free(nsrc);
  GT_CALL(status);
  return GT_SUCCESS;
}

/* The run's scalars from a part's header (the scaler as gt_trainer_load
 * restores it). */
static void gt_local_restore_run(gt_trainer *tr, const gt_local_header *h, bool rank_loaded)
{
  tr->step = h->step;
  tr->samples = h->samples;
  tr->last_loss = h->loss;
  const bool zero = tr->grid->world_rank == 0;
  if (strcmp(h->precision, gt_dtype_name(tr->layout.dtype)) == 0) {
    tr->scaler.scale = tr->scaler.dynamic ? h->loss_scale : 1.0;
    tr->scaler.good = (long)h->scale_good;
    tr->scaler.skipped = (long)h->skipped;
  } else if (zero) {
    gt_info("gridtrain: the node-local state was written in %s; continuing in %s from its "
            "fp32 master weights\n",
            h->precision, gt_dtype_name(tr->layout.dtype));
  }
  if (zero && !rank_loaded && gt_dp_compress_state_len(tr->dp))
    gt_warn("the node-local state holds no compression state for this run (another layout "
            "or [parallel] compress): the error-feedback residuals start at zero");
  if (zero && !rank_loaded && gt_dp_sync_spec(tr->dp))
    gt_warn("the node-local state holds no [parallel] sync state for this run (another "
            "layout or sync mode): the mode starts afresh");
  if (h->seed != tr->cfg.run.seed)
    gt_warn("the node-local state was written with [run] seed = %llu, the deck has %llu: the "
            "data order from here on follows the deck",
            (unsigned long long)h->seed, tr->cfg.run.seed);
}

static long gt_local_global_step(const char *global)
{
  if (!global)
    return -1;
  const char *base = strrchr(global, '/');
  base = base ? base + 1 : global;
  long step;
  return sscanf(base, "step_%ld.h5", &step) == 1 ? step : -1;
}

/* Every rank's entries (all-gathered): *ents, *ne, and their parameter
 * tables (*tabs, the entries' ok ones in order: entry i's at tabof[i]).
 * Collective on world. */
static int gt_local_gather(gt_trainer *tr, gt_local_entry **ents, int *ne, gt_local_param **tabs,
                           const gt_local_param ***tabof)
{
  const gt_grid *g = tr->grid;
  gt_local_entry *mine = NULL;
  gt_local_param *mytabs = NULL;
  int nmine = 0;
  size_t nmytabs = 0;
  *ents = NULL;
  *ne = 0;
  *tabs = NULL;
  *tabof = NULL;
  GT_CALL(gt_error_agree(gt_local_scan(tr, &mine, &nmine, &mytabs, &nmytabs), g->world));
  void *all = NULL, *alltabs = NULL;
  size_t *counts = NULL, *tcounts = NULL;
  int status =
      gt_allgatherv_bytes(mine, (size_t)nmine * sizeof *mine, &all, &counts, g->world);
  if (status == GT_SUCCESS)
    status = gt_allgatherv_bytes(mytabs, nmytabs * sizeof *mytabs, &alltabs, &tcounts, g->world);
  free(mine);
  free(mytabs);
  size_t bytes = 0;
  for (int r = 0; status == GT_SUCCESS && r < g->world_size; r++)
    bytes += counts[r];
  free(counts);
  free(tcounts);
  *ents = all;
  *tabs = alltabs;
  *ne = status == GT_SUCCESS ? (int)(bytes / sizeof **ents) : 0;
  if (status == GT_SUCCESS) {
    *tabof = calloc((size_t)*ne + 1, sizeof **tabof);
    if (!*tabof)
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  }
  size_t at = 0;
  for (int i = 0; status == GT_SUCCESS && i < *ne; i++)
    if ((*ents)[i].ok) {
      (*tabof)[i] = *tabs + at;
      at += (*ents)[i].h.nparams;
    }
  GT_CALL(status);
  return GT_SUCCESS;
}

/* Every rank's needs and parameter tables (all-gathered; *needs, *tabs
 * malloc'ed, rank r's table at tabof[r]). Collective on world. */
static int gt_local_needs(gt_trainer *tr, gt_local_need **needs, gt_local_param **tabs,
                          const gt_local_param ***tabof)
{
  const gt_grid *g = tr->grid;
  gt_params *p = gt_gpt_params(tr->model);
  gt_local_header h;
  gt_local_header_fill(tr, &h, false);
  gt_local_need need = {.dp_rank = g->dp_rank, .pp_rank = g->pp_rank, .tp_rank = g->tp_rank,
                        .nparams = p->count, .vlo = h.vlo, .vhi = h.vhi, .mlo = h.mlo,
                        .mhi = h.mhi, .rank_n = h.rank_n, .layout_hash = h.layout_hash};
  void *all = NULL, *alltabs = NULL;
  size_t *counts = NULL;
  gt_local_param *mytab = NULL;
  *needs = NULL;
  *tabs = NULL;
  *tabof = NULL;
  GT_CALL(gt_local_table_of(p, &mytab));
  int status = gt_allgatherv_bytes(&need, sizeof need, &all, &counts, g->world);
  free(counts);
  counts = NULL;
  if (status == GT_SUCCESS)
    status = gt_allgatherv_bytes(mytab, (size_t)p->count * sizeof *mytab, &alltabs, &counts,
                                 g->world);
  free(counts);
  free(mytab);
  *needs = all;
  *tabs = alltabs;
  if (status == GT_SUCCESS) {
    *tabof = calloc((size_t)g->world_size, sizeof **tabof);
    if (!*tabof)
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  }
  size_t at = 0;
  for (int r = 0; status == GT_SUCCESS && r < g->world_size; r++) {
    (*tabof)[r] = *tabs + at;
    at += (size_t)(*needs)[r].nparams;
  }
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_local_state_resume(gt_trainer *tr, const char *global, bool quiet, bool *resumed)
{
  const gt_grid *g = tr->grid;
  const bool say = !quiet && g->world_rank == 0;
  *resumed = false;
  if (!tr->cfg.checkpoint.local_dir[0])
    return GT_SUCCESS;
  GT_CALL(gt_local_open(tr));
  const long gstep = gt_local_global_step(global);
  char gsay[96];
  if (gstep >= 0)
    snprintf(gsay, sizeof gsay, "global checkpoint: step %ld", gstep);
  else
    snprintf(gsay, sizeof gsay, "%s", global ? "global checkpoint: step ?" : "no global checkpoint");
  gt_local_entry *ents = NULL;
  gt_local_need *needs = NULL;
  int ne = 0;
  gt_local_param *etabs = NULL, *ntabs = NULL;
  const gt_local_param **etab = NULL, **ntab = NULL;
  int status = gt_local_gather(tr, &ents, &ne, &etabs, &etab);
  if (status == GT_SUCCESS)
    status = gt_local_needs(tr, &needs, &ntabs, &ntab);
  /* the candidate steps, newest first (the same list on every rank) */
  long *steps = status == GT_SUCCESS ? malloc(((size_t)ne + 1) * sizeof *steps) : NULL;
  int *bad = status == GT_SUCCESS ? calloc((size_t)ne + 1, sizeof *bad) : NULL;
  const float **bufs = status == GT_SUCCESS ? calloc((size_t)ne + 1, sizeof *bufs) : NULL;
  gt_local_map *maps = status == GT_SUCCESS ? calloc((size_t)ne + 1, sizeof *maps) : NULL;
  if (status == GT_SUCCESS && (!steps || !bad || !bufs || !maps))
    status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
  int nsteps = 0;
  for (int i = 0; status == GT_SUCCESS && i < ne; i++) {
    bool seen = false;
    for (int j = 0; j < nsteps && !seen; j++)
      seen = steps[j] == ents[i].step;
    if (!seen)
      steps[nsteps++] = ents[i].step;
  }
  for (int i = 1; i < nsteps; i++)
    for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
      const long x = steps[j];
      steps[j] = steps[j - 1];
      steps[j - 1] = x;
    }
  gt_local_try t = {0};
  for (int k = 0; status == GT_SUCCESS && k < nsteps && !*resumed; k++) {
    t.step = steps[k];
    if (t.step < gstep) {
      if (say)
        gt_info("gridtrain: the node-local state of step %ld is older than the global "
                "checkpoint (step %ld): resuming from the global checkpoint\n",
                t.step, gstep);
      break;
    }
    char why[256] = "";
    bool fallback = false;
    free(t.chosen);
    t.chosen = NULL;
    if (!gt_local_usable(tr, ents, ne, needs, &t, why, sizeof why, &fallback)) {
      if (say)
        gt_info("gridtrain: the node-local state of step %ld is not used: %s; %s\n", t.step, why,
                fallback ? "falling back to the global checkpoint"
                         : "trying an older state");
      if (fallback)
        break;
      continue;
    }
    t.chosen = malloc((size_t)t.world * sizeof *t.chosen);
    if (!t.chosen) {
      status = GT_ERROR(GT_ERR_SYSTEM, "out of memory");
      break;
    }
    double bytes = 0, seconds = 0;
    status = gt_local_read_step(tr, ents, ne, &t, bufs, maps, &bytes, &seconds, bad);
    bool ok = status == GT_SUCCESS && gt_local_choose(ents, ne, bad, &t, why, sizeof why);
    if (status == GT_SUCCESS && !ok && say)
      gt_info("gridtrain: the node-local state of step %ld is not used: %s; trying an older "
              "state\n",
              t.step, why);
    bool rank_loaded = false;
    double load_t0 = gt_now();
    if (ok)
      status = t.logical ? gt_local_load_logical(tr, ents, etab, bufs, needs, ntab, &t)
                         : gt_local_load(tr, ents, bufs, needs, &t, &rank_loaded);
    const double load_s = gt_now() - load_t0;
    for (int i = 0; i < ne; i++) {
      gt_local_part_unmap(&maps[i]);
      bufs[i] = NULL;
    }
    if (ok && status == GT_ERR_INPUT && gt_error_is_collective()) {
      if (say) /* the parts do not add up: every range is loaded again from what comes next */
        gt_info("gridtrain: the node-local state of step %ld is not used: %s; trying an older "
                "state\n",
                t.step, gt_error_message());
      gt_error_clear();
      status = GT_SUCCESS;
      continue;
    }
    if (!ok || status != GT_SUCCESS)
      continue;
    /* the read speed: every rank's bytes over the slowest reader's time */
    double sums[2] = {bytes, 0}, slow = seconds;
    if (status == GT_SUCCESS)
      status = gt_allreduce_f64(sums, 1, MPI_SUM, g->world);
    if (status == GT_SUCCESS)
      status = gt_allreduce_f64(&slow, 1, MPI_MAX, g->world);
    if (status != GT_SUCCESS)
      break;
    gt_local_restore_run(tr, &ents[t.chosen[0]].h, rank_loaded);
    *resumed = true;
    int partners = 0;
    for (int o = 0; o < t.world; o++)
      partners += ents[t.chosen[o]].kind == GT_LOCAL_PARTNER;
    char from[160] = "";
    if (partners)
      snprintf(from, sizeof from, "; %d of its %d parts from partner copies", partners,
               t.world);
    char layout[160] = "";
    if (t.logical)
      snprintf(layout, sizeof layout, "; written at dp=%d x pp=%d x tp=%d, redistributed to "
               "dp=%d x pp=%d x tp=%d tensor by tensor", t.dp, t.pp, t.tp, g->dp_size,
               g->pp_size, g->tp_size);
    else if (!t.same_layout)
      snprintf(layout, sizeof layout, "; written at dp=%d x pp=%d x tp=%d, redistributed to "
               "dp=%d", t.dp, t.pp, t.tp, g->dp_size);
    char b[32];
    gt_format_bytes(sums[0], b, sizeof b);
    if (say)
      gt_info("gridtrain: resumed from the node-local state of step %ld (%s)%s%s; read %s of "
              "parts in %.3f s (%.2f GB/s), placed in %.3f s\n",
              t.step, gsay, from, layout, b, slow, slow > 0 ? sums[0] / slow / 1e9 : 0.0,
              load_s);
  }
  free(t.chosen);
  for (int i = 0; maps && i < ne; i++)
    gt_local_part_unmap(&maps[i]);
  free(maps);
  free(bufs);
  free(bad);
  free(steps);
  free(needs);
  free(ents);
  free(etabs);
  free(etab);
  free(ntabs);
  free(ntab);
  GT_CALL(status);
  return GT_SUCCESS;
}
