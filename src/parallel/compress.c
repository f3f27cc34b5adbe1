/*
 * compress.c - bf16 / fp16 payloads, top-k with error feedback and PowerSGD
 * for a bucket's data-parallel reduction (see compress.h).
 *
 * A reduction runs in phases, each one non-blocking collective on the
 * compressor's own communicator:
 *   bf16/fp16  convert, all-reduce the 16-bit payload, convert back;
 *   topk       select, all-gather the (index, value) pairs, sum them;
 *   powersgd   P = M Q for every matrix, all-reduce [P..., vectors...];
 *              orthonormalise, Q = M^T P, all-reduce [Q...]; rebuild.
 * Everything a member computes after an all-reduce or all-gather comes
 * from the same data in the same order on every member, so every member
 * ends with the same bits.
 */
#include "gridtrain/compress.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gridtrain/coll_algos.h"
#include "gridtrain/comm.h"
#include "gridtrain/error.h"
#include "gridtrain/half.h"
#include "gridtrain/rng.h"

int gt_compress_parse(const char *text, gt_compress_spec *spec)
{
  *spec = (gt_compress_spec){GT_COMPRESS_NONE, 1.0, 0};
  char *end = NULL;
  if (strcmp(text, "none") == 0)
    return GT_SUCCESS;
  if (strcmp(text, "bf16") == 0 || strcmp(text, "fp16") == 0) {
    spec->kind = text[0] == 'b' ? GT_COMPRESS_BF16 : GT_COMPRESS_FP16;
    return GT_SUCCESS;
  }
  if (strncmp(text, "topk:", 5) == 0) {
    errno = 0;
    double r = strtod(text + 5, &end);
    if (end != text + 5 && !*end && errno == 0 && r > 0 && r <= 1) {
      spec->kind = GT_COMPRESS_TOPK;
      spec->ratio = r;
      return GT_SUCCESS;
    }
  } else if (strncmp(text, "powersgd:", 9) == 0) {
    errno = 0;
    long k = strtol(text + 9, &end, 10);
    if (end != text + 9 && !*end && errno == 0 && k >= 1 && k <= 65536) {
      spec->kind = GT_COMPRESS_POWERSGD;
      spec->rank = (int)k;
      return GT_SUCCESS;
    }
  }
  return GT_ERROR(GT_ERR_INPUT, "[parallel] compress = '%s': expected none, bf16, fp16, "
                  "topk:R (0 < R <= 1, the fraction of entries sent) or powersgd:K (the "
                  "rank, 1 to 65536)", text);
}

void gt_compress_format(const gt_compress_spec *spec, char *out, size_t size)
{
  switch (spec->kind) {
  case GT_COMPRESS_BF16: snprintf(out, size, "bf16"); break;
  case GT_COMPRESS_FP16: snprintf(out, size, "fp16"); break;
  case GT_COMPRESS_TOPK: snprintf(out, size, "topk:%g", spec->ratio); break;
  case GT_COMPRESS_POWERSGD: snprintf(out, size, "powersgd:%d", spec->rank); break;
  default: snprintf(out, size, "none"); break;
  }
}

// ---- kernels ---------------------------------------------------------------------------

/* The k-th largest of x[0..n) (1 <= k <= n), by quickselect (Hoare's
 * partition around a median of three); x is reordered. */
static float gt_kth_largest(float *x, size_t n, size_t k)
{
  long long lo = 0, hi = (long long)n - 1;
  const long long want = (long long)k - 1; /* its place in descending order */
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    const float a = x[lo], b = x[mid], c = x[hi];
    const float pivot = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
    long long i = lo, j = hi;
    while (i <= j) {
      while (x[i] > pivot)
        i++;
      while (x[j] < pivot)
        j--;
      if (i <= j) {
        const float t = x[i];
        x[i++] = x[j];
        x[j--] = t;
      }
    }
    /* [lo, j] >= pivot >= [i, hi]; anything between equals the pivot */
    if (want <= j)
      hi = j;
    else if (want >= i)
      lo = i;
    else
      return x[want];
  }
  return x[lo];
}

void gt_topk_select(const float *a, size_t n, size_t k, float *scratch, uint32_t *idx)
{
  if (k >= n) {
    for (size_t i = 0; i < n; i++)
      idx[i] = (uint32_t)i;
    return;
  }
  if (k == 0)
    return;
  for (size_t i = 0; i < n; i++)
    scratch[i] = fabsf(a[i]);
  const float thr = gt_kth_largest(scratch, n, k);
  size_t above = 0;
  for (size_t i = 0; i < n; i++)
    above += fabsf(a[i]) > thr;
  size_t ties = k - above, got = 0; /* entries equal to the threshold: the first ones */
  for (size_t i = 0; i < n && got < k; i++) {
    const float m = fabsf(a[i]);
    if (m > thr || (m == thr && ties > 0)) {
      if (m == thr)
        ties--;
      idx[got++] = (uint32_t)i;
    }
  }
}

void gt_orthonormalize(float *P, size_t rows, size_t r)
{
  for (size_t j = 0; j < r; j++) {
    double norm0 = 0;
    for (size_t i = 0; i < rows; i++)
      norm0 += (double)P[i * r + j] * P[i * r + j];
    /* subtract the projections on the earlier columns, twice ("twice is
     * enough": one pass leaves a column that was nearly in their span far
     * from orthogonal to them) */
    for (int pass = 0; pass < 2; pass++)
      for (size_t q = 0; q < j; q++) {
        double dot = 0;
        for (size_t i = 0; i < rows; i++)
          dot += (double)P[i * r + j] * P[i * r + q];
        for (size_t i = 0; i < rows; i++)
          P[i * r + j] -= (float)dot * P[i * r + q];
      }
    double norm = 0;
    for (size_t i = 0; i < rows; i++)
      norm += (double)P[i * r + j] * P[i * r + j];
    /* what is left of a column in the span of the others is rounding:
     * drop it (the direction is in the others already) */
    const bool keep = norm > 1e-30 && norm > 1e-10 * norm0;
    const float scale = keep ? (float)(1.0 / sqrt(norm)) : 0.0f;
    for (size_t i = 0; i < rows; i++)
      P[i * r + j] *= scale;
  }
}

// ---- the compressor --------------------------------------------------------------------------

typedef struct {
  size_t offset, rows, cols, r;
  size_t p_off, q_off; /* in pbuf / qbuf (and q_off in the warm starts) */
} gt_pmat;

struct gt_compressor {
  gt_compress_spec spec;
  MPI_Comm comm;
  int p, me;
  size_t n;
  gt_algo algo;
  gt_algo_comm *algo_comm; /* bf16, fp16 on our algorithms (coll_algos.h): their communicator */
  gt_algo_req *algo_req;   /* ... and request; NULL: MPI reduces */
  MPI_Op op16;
  /* state */
  float *state; /* residual (n), then powersgd's warm starts (nq) */
  size_t nstate;
  /* topk */
  size_t k;
  uint32_t *pairs, *gathered; /* (index, value bits) x k, and x p */
  uint32_t *idx;
  float *scratch;
  /* powersgd */
  gt_pmat *mats;
  int nmats;
  size_t *vec_off, *vec_len; /* the entries outside every matrix */
  int nvec;
  size_t np, nq, nvec_total;
  float *pbuf, *qbuf;
  /* 16-bit payload */
  uint16_t *half;
  /* in flight */
  float *buf;
  int phase; /* 0 idle, 1 first collective, 2 second */
  MPI_Request req;
  bool via_algo;
  double last, sent_before;
};

/* powersgd: the matrices (each r = min(rank, rows, cols)) and the vector
 * ranges between them. */
static int gt_compressor_plan_powersgd(gt_compressor *c, const gt_cmat *mats, int nmats)
{
  c->mats = calloc((size_t)(nmats > 0 ? nmats : 1), sizeof *c->mats);
  c->vec_off = calloc((size_t)nmats + 1, sizeof *c->vec_off);
  c->vec_len = calloc((size_t)nmats + 1, sizeof *c->vec_len);
  GT_CHECK(c->mats && c->vec_off && c->vec_len, GT_ERR_SYSTEM, "out of memory for PowerSGD");
  size_t at = 0, np = 0, nq = 0;
  for (int i = 0; i < nmats; i++) {
    const gt_cmat *m = &mats[i];
    GT_CHECK(m->offset >= at && m->offset + m->rows * m->cols <= c->n, GT_ERR_INTERNAL,
             "internal error: PowerSGD matrices out of order or past the bucket");
    if (m->offset > at) {
      c->vec_off[c->nvec] = at;
      c->vec_len[c->nvec++] = m->offset - at;
    }
    size_t r = (size_t)c->spec.rank;
    r = r < m->rows ? r : m->rows;
    r = r < m->cols ? r : m->cols;
    c->mats[c->nmats++] = (gt_pmat){m->offset, m->rows, m->cols, r, np, nq};
    np += m->rows * r;
    nq += m->cols * r;
    at = m->offset + m->rows * m->cols;
  }
  if (at < c->n) {
    c->vec_off[c->nvec] = at;
    c->vec_len[c->nvec++] = c->n - at;
  }
  for (int v = 0; v < c->nvec; v++)
    c->nvec_total += c->vec_len[v];
  c->np = np;
  c->nq = nq;
  return GT_SUCCESS;
}

static int gt_compressor_create_in(gt_compressor *c, const gt_compress_spec *spec, MPI_Comm dp,
                                   size_t n, const gt_cmat *mats, int nmats, gt_algo algo,
                                   uint64_t seed)
{
  c->spec = *spec;
  c->n = n;
  c->algo = algo;
  MPI_Request req = MPI_REQUEST_NULL;
  GT_CALL_MPI(MPI_Comm_idup(dp, &c->comm, &req));
  GT_CALL(gt_comm_wait(&req));
  GT_CALL_MPI(MPI_Comm_rank(c->comm, &c->me));
  GT_CALL_MPI(MPI_Comm_size(c->comm, &c->p));
  switch (spec->kind) {
  case GT_COMPRESS_BF16:
  case GT_COMPRESS_FP16:
    c->half = malloc(n * sizeof *c->half + 1);
    GT_CHECK_ALLOC(c->half, n * sizeof *c->half);
    if (algo != GT_ALGO_MPI) {
      GT_CALL(gt_algo_comm_create(c->comm, &c->algo_comm));
      GT_CALL(gt_algo_req_create(0, 0, &c->algo_req));
    } else {
      GT_CALL_MPI(MPI_Op_create(spec->kind == GT_COMPRESS_BF16 ? gt_algo_sum_bf16
                                                               : gt_algo_sum_f16,
                                1, &c->op16));
    }
    break;
  case GT_COMPRESS_TOPK: {
    c->k = (size_t)ceil(spec->ratio * (double)n);
    c->k = c->k < 1 ? 1 : c->k > n ? n : c->k;
    c->nstate = n;
    c->pairs = malloc(2 * c->k * sizeof *c->pairs);
    c->gathered = malloc(2 * c->k * (size_t)c->p * sizeof *c->gathered);
    c->idx = malloc(c->k * sizeof *c->idx);
    c->scratch = malloc(n * sizeof *c->scratch + 1);
    GT_CHECK(c->pairs && c->gathered && c->idx && c->scratch, GT_ERR_SYSTEM,
             "out of memory for top-k of %zu entries", n);
    GT_CHECK(2 * c->k * (size_t)c->p <= (size_t)INT32_MAX, GT_ERR_INPUT,
             "topk: %zu pairs from %d members is too much for one message", c->k, c->p);
    break;
  }
  case GT_COMPRESS_POWERSGD:
    GT_CALL(gt_compressor_plan_powersgd(c, mats, nmats));
    c->nstate = n + c->nq;
    c->pbuf = malloc((c->np + c->nvec_total + 1) * sizeof *c->pbuf);
    c->qbuf = malloc((c->nq + 1) * sizeof *c->qbuf);
    GT_CHECK(c->pbuf && c->qbuf, GT_ERR_SYSTEM, "out of memory for PowerSGD buffers");
    break;
  default: return GT_ERROR(GT_ERR_INTERNAL, "internal error: compressor of kind none");
  }
  if (c->nstate) {
    c->state = calloc(c->nstate, sizeof *c->state);
    GT_CHECK_ALLOC(c->state, c->nstate * sizeof *c->state);
  }
  /* powersgd's first warm start: the same normal draws on every member */
  for (int i = 0; i < c->nmats; i++) {
    char name[64];
    snprintf(name, sizeof name, "powersgd.q.%d", i);
    gt_rng_normal_fill(c->state + n + c->mats[i].q_off, c->mats[i].cols * c->mats[i].r,
                       gt_rng_stream(seed, name), 0, 1.0f);
  }
  return GT_SUCCESS;
}

int gt_compressor_create(const gt_compress_spec *spec, MPI_Comm dp, size_t n,
                         const gt_cmat *mats, int nmats, gt_algo algo, uint64_t seed,
                         gt_compressor **cp)
{
  GT_CHECK(algo != GT_ALGO_AUTO, GT_ERR_INTERNAL, "internal error: a compressor with auto");
  GT_CHECK(n <= (size_t)INT32_MAX / 2, GT_ERR_INPUT,
           "a compressed bucket of %zu entries is too large; lower [parallel] bucket_mb", n);
  gt_compressor *c = calloc(1, sizeof *c);
  GT_CHECK_ALLOC(c, sizeof *c);
  c->comm = MPI_COMM_NULL;
  c->op16 = MPI_OP_NULL;
  c->req = MPI_REQUEST_NULL;
  int status = gt_compressor_create_in(c, spec, dp, n, mats, nmats, algo, seed);
  if (status != GT_SUCCESS) {
    gt_compressor_destroy(&c);
    return gt_error_push(status, __FILE__, __LINE__, __func__);
  }
  *cp = c;
  return GT_SUCCESS;
}

int gt_compressor_destroy(gt_compressor **cp)
{
  gt_compressor *c = *cp;
  if (!c)
    return GT_SUCCESS;
  int status = GT_SUCCESS;
  if (c->req != MPI_REQUEST_NULL) {
    MPI_Cancel(&c->req);
    MPI_Request_free(&c->req);
  }
  gt_algo_req_destroy(&c->algo_req);
  gt_algo_comm_destroy(&c->algo_comm);
  if (c->op16 != MPI_OP_NULL)
    MPI_Op_free(&c->op16);
  if (c->comm != MPI_COMM_NULL && MPI_Comm_free(&c->comm) != MPI_SUCCESS)
    status = GT_ERROR(GT_ERR_MPI, "MPI_Comm_free of a compressor's communicator failed");
  free(c->state);
  free(c->pairs);
  free(c->gathered);
  free(c->idx);
  free(c->scratch);
  free(c->mats);
  free(c->vec_off);
  free(c->vec_len);
  free(c->pbuf);
  free(c->qbuf);
  free(c->half);
  free(c);
  *cp = NULL;
  return status;
}

size_t gt_compressor_state_len(const gt_compressor *c) { return c->nstate; }
float *gt_compressor_state(gt_compressor *c) { return c->state; }
double gt_compressor_last_bytes(const gt_compressor *c) { return c->last; }

/* What a bandwidth-optimal all-reduce of `bytes` sends per member. */
static double gt_allreduce_share(const gt_compressor *c, double bytes)
{
  return gt_algo_ring_bytes(GT_COLL_ALLREDUCE, c->p, bytes);
}

static int gt_allreduce_f32_start(gt_compressor *c, float *buf, size_t n)
{
  c->last += gt_allreduce_share(c, (double)n * sizeof(float));
  GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->comm, &c->req));
  return GT_SUCCESS;
}

/* powersgd, phase 1: M = gradient + residual (kept in the residual), P = M
 * Q for every matrix, the vectors alongside. */
static int gt_powersgd_p(gt_compressor *c)
{
  float *buf = c->buf, *res = c->state, *q = c->state + c->n;
  for (size_t i = 0; i < c->n; i++)
    res[i] += buf[i];
  for (int i = 0; i < c->nmats; i++) {
    const gt_pmat *m = &c->mats[i];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m->rows, (int)m->r, (int)m->cols,
                1.0f, res + m->offset, (int)m->cols, q + m->q_off, (int)m->r, 0.0f,
                c->pbuf + m->p_off, (int)m->r);
  }
  size_t at = c->np;
  for (int v = 0; v < c->nvec; v++) { /* vectors go as they are: no residual */
    memcpy(c->pbuf + at, buf + c->vec_off[v], c->vec_len[v] * sizeof(float));
    memset(res + c->vec_off[v], 0, c->vec_len[v] * sizeof(float));
    at += c->vec_len[v];
  }
  return gt_allreduce_f32_start(c, c->pbuf, c->np + c->nvec_total);
}

/* phase 2: orthonormalise each P, Q = M^T P. */
static int gt_powersgd_q(gt_compressor *c)
{
  const float *res = c->state;
  for (int i = 0; i < c->nmats; i++) {
    const gt_pmat *m = &c->mats[i];
    gt_orthonormalize(c->pbuf + m->p_off, m->rows, m->r);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m->cols, (int)m->r, (int)m->rows,
                1.0f, res + m->offset, (int)m->cols, c->pbuf + m->p_off, (int)m->r, 0.0f,
                c->qbuf + m->q_off, (int)m->r);
  }
  size_t at = c->np;
  for (int v = 0; v < c->nvec; v++) {
    memcpy(c->buf + c->vec_off[v], c->pbuf + at, c->vec_len[v] * sizeof(float));
    at += c->vec_len[v];
  }
  return gt_allreduce_f32_start(c, c->qbuf, c->nq);
}

/* phase 3: the result P Q^T; the residual M - result / p; Q the next warm
 * start. */
static void gt_powersgd_done(gt_compressor *c)
{
  float *res = c->state, *q = c->state + c->n;
  const float inv_p = 1.0f / (float)c->p;
  for (int i = 0; i < c->nmats; i++) {
    const gt_pmat *m = &c->mats[i];
    float *out = c->buf + m->offset;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m->rows, (int)m->cols, (int)m->r,
                1.0f, c->pbuf + m->p_off, (int)m->r, c->qbuf + m->q_off, (int)m->r, 0.0f, out,
                (int)m->cols);
    float *rm = res + m->offset;
    for (size_t e = 0; e < m->rows * m->cols; e++)
      rm[e] -= out[e] * inv_p;
  }
  memcpy(q, c->qbuf, c->nq * sizeof(float));
}

static int gt_topk_start(gt_compressor *c)
{
  float *a = c->state; /* gradient + residual */
  for (size_t i = 0; i < c->n; i++)
    a[i] += c->buf[i];
  gt_topk_select(a, c->n, c->k, c->scratch, c->idx);
  for (size_t j = 0; j < c->k; j++) {
    const uint32_t i = c->idx[j];
    c->pairs[2 * j] = i;
    memcpy(&c->pairs[2 * j + 1], &a[i], sizeof(float));
    a[i] = 0.0f; /* sent: out of the residual */
  }
  c->last += (double)(c->p - 1) * (double)c->k * 8.0;
  GT_CALL_MPI(MPI_Iallgather(c->pairs, (int)(2 * c->k), MPI_UINT32_T, c->gathered,
                             (int)(2 * c->k), MPI_UINT32_T, c->comm, &c->req));
  return GT_SUCCESS;
}

static void gt_topk_done(gt_compressor *c)
{
  memset(c->buf, 0, c->n * sizeof(float));
  for (int r = 0; r < c->p; r++) { /* member order: the same bits everywhere */
    const uint32_t *pr = c->gathered + (size_t)r * 2 * c->k;
    for (size_t j = 0; j < c->k; j++) {
      float v;
      memcpy(&v, &pr[2 * j + 1], sizeof v);
      c->buf[pr[2 * j]] += v;
    }
  }
}

int gt_compressor_start(gt_compressor *c, float *buf)
{
  GT_CHECK(c->phase == 0, GT_ERR_INTERNAL, "internal error: a compressor started twice");
  c->buf = buf;
  c->last = 0;
  c->phase = 1;
  switch (c->spec.kind) {
  case GT_COMPRESS_BF16:
  case GT_COMPRESS_FP16: {
    const bool fp16 = c->spec.kind == GT_COMPRESS_FP16;
    for (size_t i = 0; i < c->n; i++)
      c->half[i] = fp16 ? gt_f32_to_f16(buf[i]) : gt_f32_to_bf16(buf[i]);
    if (c->algo_req) {
      c->sent_before = gt_algo_req_sent(c->algo_req);
      GT_CALL(gt_algo_start(c->algo_req, c->algo_comm, c->algo, GT_COLL_ALLREDUCE, c->half, c->n,
                            fp16 ? GT_F16 : GT_BF16, NULL, 0));
    } else {
      c->last += gt_allreduce_share(c, (double)c->n * 2.0);
      GT_CALL_MPI(MPI_Iallreduce(MPI_IN_PLACE, c->half, (int)c->n, MPI_UINT16_T, c->op16,
                                 c->comm, &c->req));
    }
    return GT_SUCCESS;
  }
  case GT_COMPRESS_TOPK: return gt_topk_start(c);
  case GT_COMPRESS_POWERSGD: return gt_powersgd_p(c);
  default: return GT_ERROR(GT_ERR_INTERNAL, "internal error: compressor of kind none");
  }
}

int gt_compressor_test(gt_compressor *c, bool *done)
{
  *done = c->phase == 0;
  if (c->phase == 0)
    return GT_SUCCESS;
  int flag = 0;
  if (c->algo_req && (c->spec.kind == GT_COMPRESS_BF16 || c->spec.kind == GT_COMPRESS_FP16)) {
    bool d = false;
    GT_CALL(gt_algo_test(c->algo_req, &d));
    flag = d;
  } else {
    GT_CALL_MPI(MPI_Test(&c->req, &flag, MPI_STATUS_IGNORE));
  }
  if (!flag)
    return GT_SUCCESS;
  switch (c->spec.kind) {
  case GT_COMPRESS_BF16:
  case GT_COMPRESS_FP16: {
    const bool fp16 = c->spec.kind == GT_COMPRESS_FP16;
    for (size_t i = 0; i < c->n; i++)
      c->buf[i] = fp16 ? gt_f16_to_f32(c->half[i]) : gt_bf16_to_f32(c->half[i]);
    if (c->algo_req)
      c->last += gt_algo_req_sent(c->algo_req) - c->sent_before;
    break;
  }
  case GT_COMPRESS_TOPK: gt_topk_done(c); break;
  case GT_COMPRESS_POWERSGD:
    if (c->phase == 1) {
      GT_CALL(gt_powersgd_q(c));
      c->phase = 2;
      return GT_SUCCESS;
    }
    gt_powersgd_done(c);
    break;
  default: break;
  }
  c->phase = 0;
  *done = true;
  return GT_SUCCESS;
}

static int gt_reducer_start(void *ctx, float *buf, size_t n)
{
  gt_compressor *c = ctx;
  GT_CHECK(n == c->n, GT_ERR_INTERNAL, "internal error: a compressor of %zu entries given %zu",
           c->n, n);
  return gt_compressor_start(c, buf);
}
static int gt_reducer_test(void *ctx, bool *done) { return gt_compressor_test(ctx, done); }
static double gt_reducer_bytes(const void *ctx) { return gt_compressor_last_bytes(ctx); }

gt_xfer_reducer gt_compressor_reducer(gt_compressor *c)
{
  return (gt_xfer_reducer){gt_reducer_start, gt_reducer_test, gt_reducer_bytes, c};
}
