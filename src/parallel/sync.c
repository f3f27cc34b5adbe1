/*
 * sync.c - local SGD, DiLoCo, elastic averaging and bounded staleness over
 * the data-parallel replicas (see sync.h). Every vector operation is a
 * backend op on the compute stream (copy, axpby) or a group all-reduce of
 * collectives.h, so the modes run on either backend.
 */
#include "gridtrain/sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/error.h"

int gt_sync_parse(const char *text, gt_sync_spec *spec)
{
  *spec = (gt_sync_spec){GT_SYNC_EVERY, 1, 0.0, 0};
  if (strcmp(text, "every_step") == 0)
    return GT_SUCCESS;
  static const struct {
    const char *prefix;
    gt_sync_kind kind;
  } forms[] = {{"local:", GT_SYNC_LOCAL},
               {"diloco:", GT_SYNC_DILOCO},
               {"easgd:", GT_SYNC_EASGD},
               {"stale:", GT_SYNC_STALE}};
  for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
    const size_t len = strlen(forms[f].prefix);
    if (strncmp(text, forms[f].prefix, len) != 0)
      continue;
    const char *at = text + len;
    char *end = NULL;
    errno = 0;
    const long v = strtol(at, &end, 10);
    const bool stale = forms[f].kind == GT_SYNC_STALE;
    bool good = end != at && errno == 0 && v >= (stale ? 0 : 1) && v <= 1000000;
    double alpha = 0;
    if (good && forms[f].kind == GT_SYNC_EASGD) {
      good = *end == ',';
      if (good) {
        const char *a = end + 1;
        alpha = strtod(a, &end);
        good = end != a && alpha > 0 && alpha < 1;
      }
    }
    if (good && *end == '\0') {
      spec->kind = forms[f].kind;
      if (stale)
        spec->s = v;
      else
        spec->k = v;
      spec->alpha = alpha;
      return GT_SUCCESS;
    }
    break;
  }
  return GT_ERROR(GT_ERR_INPUT, "[parallel] sync = '%s': expected every_step, local:K, "
                  "diloco:K, easgd:K,ALPHA (K >= 1 steps, 0 < ALPHA < 1) or stale:S (S >= 0 "
                  "steps)", text);
}

void gt_sync_format(const gt_sync_spec *spec, char *out, size_t size)
{
  switch (spec->kind) {
  case GT_SYNC_LOCAL: snprintf(out, size, "local:%ld", spec->k); break;
  case GT_SYNC_DILOCO: snprintf(out, size, "diloco:%ld", spec->k); break;
  case GT_SYNC_EASGD: snprintf(out, size, "easgd:%ld,%g", spec->k, spec->alpha); break;
  case GT_SYNC_STALE: snprintf(out, size, "stale:%ld", spec->s); break;
  default: snprintf(out, size, "every_step"); break;
  }
}

struct gt_sync {
  gt_sync_spec spec;
  gt_params *params;
  float *m, *v;
  gt_group dp;
  double outer_lr, outer_momentum;
  gt_backend *be;
  size_t n;
  float *a, *b; /* diloco: anchor, outer momentum; easgd: centre (a) */
  float *tmp;   /* diloco, easgd: the replicas' sum */
  /* stale: S + 1 slots of summed gradients and their requests */
  float **ring;
  gt_xfer **xfer;
  long slots;
  long first; /* stale: the first step whose gradients are in the ring */
};

const gt_sync_spec *gt_sync_get_spec(const gt_sync *s) { return &s->spec; }

static int gt_sync_alloc(gt_sync *s, float **p)
{
  return s->be->ops->alloc(s->be, (s->n ? s->n : 1) * sizeof(float), (void **)p);
}

static int gt_sync_create_in(gt_sync *s)
{
  gt_backend *be = s->be;
  const size_t bytes = s->n * sizeof(float);
  if (s->spec.kind == GT_SYNC_DILOCO || s->spec.kind == GT_SYNC_EASGD) {
    GT_CALL(gt_sync_alloc(s, &s->a));
    GT_CALL(gt_sync_alloc(s, &s->tmp));
    GT_CALL(be->ops->copy(be, s->a, s->params->values, bytes, NULL));
  }
  if (s->spec.kind == GT_SYNC_DILOCO) {
    GT_CALL(gt_sync_alloc(s, &s->b));
    GT_CALL(be->ops->zero(be, s->b, bytes));
  }
  if (s->spec.kind == GT_SYNC_STALE) {
    s->slots = s->spec.s + 1;
    s->ring = calloc((size_t)s->slots, sizeof *s->ring);
    s->xfer = calloc((size_t)s->slots, sizeof *s->xfer);
    GT_CHECK(s->ring && s->xfer, GT_ERR_SYSTEM, "out of memory for the staleness ring");
    for (long i = 0; i < s->slots; i++) {
      GT_CALL(gt_sync_alloc(s, &s->ring[i]));
      if (s->dp.size > 1)
        GT_CALL(gt_xfer_create(s->dp.coll, bytes, &s->xfer[i]));
    }
  }
  return GT_SUCCESS;
}

int gt_sync_create(const gt_sync_spec *spec, gt_params *params, float *m, float *v,
                   const gt_group *dp, double outer_lr, double outer_momentum, gt_sync **sp)
{
  GT_CHECK(params->shard_size == 1, GT_ERR_INPUT,
           "[parallel] sync other than every_step needs zero = 0: a replica that steps on its "
           "own needs its whole optimizer state");
  if (spec->kind == GT_SYNC_EASGD)
    GT_CHECK(spec->alpha * dp->size <= 1.0, GT_ERR_INPUT,
             "[parallel] sync = easgd:%ld,%g: the centre moves by ALPHA x dp = %g of the "
             "replicas' spread a step, more than all of it; choose ALPHA <= %g",
             spec->k, spec->alpha, spec->alpha * dp->size, 1.0 / dp->size);
  gt_sync *s = calloc(1, sizeof *s);
  GT_CHECK_ALLOC(s, sizeof *s);
  s->spec = *spec;
  s->params = params;
  s->m = m;
  s->v = v;
  s->dp = *dp;
  s->outer_lr = outer_lr;
  s->outer_momentum = outer_momentum;
  s->be = params->be;
  s->n = params->numel;
  int status = gt_sync_create_in(s);
  if (status != GT_SUCCESS) {
    gt_sync_destroy(&s);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *sp = s;
  return GT_SUCCESS;
}

int gt_sync_destroy(gt_sync **sp)
{
  gt_sync *s = *sp;
  if (!s)
    return GT_SUCCESS;
  gt_backend *be = s->be;
  int status = GT_SUCCESS;
  for (long i = 0; i < s->slots; i++) {
    if (s->xfer && s->xfer[i]) {
      int st = gt_xfer_destroy(&s->xfer[i]);
      status = status != GT_SUCCESS ? status : st;
    }
    if (s->ring && s->ring[i])
      be->ops->free(be, s->ring[i]);
  }
  free(s->ring);
  free(s->xfer);
  float *bufs[3] = {s->a, s->b, s->tmp};
  for (int i = 0; i < 3; i++)
    if (bufs[i])
      be->ops->free(be, bufs[i]);
  free(s);
  *sp = NULL;
  return status;
}

/* Synchronous steps of local:K: step + 1 a multiple of K. */
static bool gt_sync_at(const gt_sync *s, long step) { return (step + 1) % s->spec.k == 0; }

bool gt_sync_reduces_grads(const gt_sync *s, long step)
{
  return s->spec.kind == GT_SYNC_EVERY || (s->spec.kind == GT_SYNC_LOCAL && gt_sync_at(s, step));
}

bool gt_sync_diverged(const gt_sync *s, long step)
{
  switch (s->spec.kind) {
  case GT_SYNC_LOCAL:
  case GT_SYNC_DILOCO: return !gt_sync_at(s, step);
  case GT_SYNC_EASGD: return true; /* pulled together, never equal */
  default: return false;
  }
}

/* buf = the mean of buf over dp. */
static int gt_sync_mean(gt_sync *s, float *buf)
{
  GT_CALL(gt_group_allreduce_sum(&s->dp, buf, s->n, GT_F32));
  GT_CALL(s->be->ops->axpby(s->be, buf, 1.0f / (float)s->dp.size, buf, 0.0f, s->n));
  return GT_SUCCESS;
}

int gt_sync_before_update(gt_sync *s, long step)
{
  if (s->spec.kind != GT_SYNC_LOCAL || s->spec.k == 1 || !gt_sync_at(s, step) || s->dp.size == 1)
    return GT_SUCCESS;
  GT_CALL(gt_sync_mean(s, s->params->values));
  GT_CALL(gt_sync_mean(s, s->m));
  GT_CALL(gt_sync_mean(s, s->v));
  return gt_params_refresh_compute(s->params); /* the update may be skipped (fp16) */
}

int gt_sync_after_update(gt_sync *s, long step, bool *synced)
{
  *synced = s->spec.kind == GT_SYNC_EVERY || s->spec.kind == GT_SYNC_STALE ||
            (s->spec.kind == GT_SYNC_LOCAL && gt_sync_at(s, step));
  if ((s->spec.kind != GT_SYNC_DILOCO && s->spec.kind != GT_SYNC_EASGD) ||
      (step + 1) % s->spec.k != 0)
    return GT_SUCCESS;
  *synced = true;
  gt_backend *be = s->be;
  float *theta = s->params->values;
  const size_t bytes = s->n * sizeof(float);
  GT_CALL(be->ops->copy(be, s->tmp, theta, bytes, NULL));
  GT_CALL(gt_group_allreduce_sum(&s->dp, s->tmp, s->n, GT_F32)); /* the replicas' sum */
  const float p = (float)s->dp.size;
  if (s->spec.kind == GT_SYNC_DILOCO) {
    /* delta = anchor - mean; b = mu b + delta; anchor -= lr (delta + mu b) */
    const float mu = (float)s->outer_momentum, lr = (float)s->outer_lr;
    GT_CALL(be->ops->axpby(be, s->tmp, 1.0f, s->a, -1.0f / p, s->n));
    GT_CALL(be->ops->axpby(be, s->b, 1.0f, s->tmp, mu, s->n));
    GT_CALL(be->ops->axpby(be, s->tmp, mu, s->b, 1.0f, s->n));
    GT_CALL(be->ops->axpby(be, s->a, -lr, s->tmp, 1.0f, s->n));
    GT_CALL(be->ops->copy(be, theta, s->a, bytes, NULL));
  } else {
    /* x -= alpha (x - c); c += alpha (sum x - p c), with the old x and c */
    const float alpha = (float)s->spec.alpha;
    GT_CALL(be->ops->axpby(be, theta, alpha, s->a, 1.0f - alpha, s->n));
    GT_CALL(be->ops->axpby(be, s->a, alpha, s->tmp, 1.0f - p * alpha, s->n));
  }
  GT_CALL(gt_params_refresh_compute(s->params));
  return GT_SUCCESS;
}

int gt_sync_stale_exchange(gt_sync *s, long step, bool *have)
{
  GT_CHECK(s->spec.kind == GT_SYNC_STALE, GT_ERR_INTERNAL, "internal error: not stale");
  gt_backend *be = s->be;
  const size_t bytes = s->n * sizeof(float);
  const long slot = step % s->slots;
  GT_CALL(be->ops->copy(be, s->ring[slot], s->params->grads, bytes, NULL));
  if (s->xfer[slot])
    GT_CALL(gt_xfer_allreduce(s->xfer[slot], s->ring[slot], s->n, s->dp.comm));
  *have = step - s->spec.s >= s->first;
  if (!*have)
    return GT_SUCCESS;
  const long old = (step - s->spec.s) % s->slots;
  if (s->xfer[old])
    GT_CALL(gt_xfer_wait(s->xfer[old]));
  GT_CALL(be->ops->copy(be, s->params->grads, s->ring[old], bytes, NULL));
  return GT_SUCCESS;
}

size_t gt_sync_state_len(const gt_sync *s)
{
  switch (s->spec.kind) {
  case GT_SYNC_LOCAL: return 3 * s->n;
  case GT_SYNC_DILOCO: return 5 * s->n;
  case GT_SYNC_EASGD: return 4 * s->n;
  case GT_SYNC_STALE: return (size_t)s->spec.s * s->n + 2; /* and the first step, in 2 floats */
  default: return 0;
  }
}

/* The device buffers of the state, in order: *n of them. For stale, the
 * slots of the sums not applied before step `step` (steps step - S ..
 * step - 1, oldest first; those before step 0 are unused). */
static void gt_sync_state_bufs(gt_sync *s, long step, float **bufs, int *n)
{
  *n = 0;
  if (s->spec.kind == GT_SYNC_STALE) {
    for (long i = 0; i < s->spec.s; i++) {
      const long t = step - s->spec.s + i;
      bufs[(*n)++] = t >= s->first ? s->ring[t % s->slots] : NULL;
    }
    return;
  }
  if (s->spec.kind == GT_SYNC_EVERY)
    return;
  bufs[(*n)++] = s->params->values;
  bufs[(*n)++] = s->m;
  bufs[(*n)++] = s->v;
  if (s->a)
    bufs[(*n)++] = s->a;
  if (s->b)
    bufs[(*n)++] = s->b;
}

int gt_sync_state_save(gt_sync *s, long step, float *host)
{
  const long nb = s->spec.kind == GT_SYNC_STALE ? s->spec.s : 5;
  float **bufs = calloc((size_t)(nb > 0 ? nb : 1), sizeof *bufs);
  GT_CHECK_ALLOC(bufs, sizeof *bufs * (size_t)(nb > 0 ? nb : 1));
  int n = 0, status = GT_SUCCESS;
  gt_sync_state_bufs(s, step, bufs, &n);
  for (long i = 0; i < s->slots && status == GT_SUCCESS; i++) /* the sums in flight land */
    if (s->xfer[i])
      status = gt_xfer_wait(s->xfer[i]);
  if (s->spec.kind == GT_SYNC_STALE) { /* exact in floats: 24 bits each */
    host[0] = (float)(s->first & 0xffffff);
    host[1] = (float)(s->first >> 24);
    host += 2;
  }
  for (int i = 0; i < n && status == GT_SUCCESS; i++) {
    float *at = host + (size_t)i * s->n;
    if (bufs[i])
      status = s->be->ops->download(s->be, at, bufs[i], s->n * sizeof(float), NULL);
    else
      memset(at, 0, s->n * sizeof(float));
  }
  if (status == GT_SUCCESS)
    status = s->be->ops->sync(s->be);
  free(bufs);
  GT_CALL(status);
  return GT_SUCCESS;
}

int gt_sync_reset(gt_sync *s, long step)
{
  gt_backend *be = s->be;
  s->first = step;
  if (s->a)
    GT_CALL(be->ops->copy(be, s->a, s->params->values, s->n * sizeof(float), NULL));
  if (s->b)
    GT_CALL(be->ops->zero(be, s->b, s->n * sizeof(float)));
  return GT_SUCCESS;
}

int gt_sync_state_load(gt_sync *s, long step, const float *host)
{
  if (s->spec.kind == GT_SYNC_STALE) { /* the ring as saved: from its first step on */
    s->first = (long)host[0] | ((long)host[1] << 24);
    host += 2;
  }
  const long nb = s->spec.kind == GT_SYNC_STALE ? s->spec.s : 5;
  float **bufs = calloc((size_t)(nb > 0 ? nb : 1), sizeof *bufs);
  GT_CHECK_ALLOC(bufs, sizeof *bufs * (size_t)(nb > 0 ? nb : 1));
  int n = 0, status = GT_SUCCESS;
  gt_sync_state_bufs(s, step, bufs, &n);
  for (int i = 0; i < n && status == GT_SUCCESS; i++)
    if (bufs[i])
      status = s->be->ops->upload(s->be, bufs[i], host + (size_t)i * s->n,
                                  s->n * sizeof(float), NULL);
  if (status == GT_SUCCESS)
    status = s->be->ops->sync(s->be);
  free(bufs);
  GT_CALL(status);
  return GT_SUCCESS;
}
