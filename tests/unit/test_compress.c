/*
 * test_compress.c - the gradient compressors of compress.h on 4 ranks (and
 * on a group of 3):
 *   - top-k selection equals a reference that sorts by magnitude (ties: the
 *     lower index first), on data with many ties;
 *   - top-k error feedback: after a reduction, what each member sent plus
 *     its residual is exactly its gradient plus its old residual, and the
 *     result is exactly the sum of what the members sent (in member order);
 *     with R = 1 the result equals the sum in member order bit for bit and
 *     the residual is zero;
 *   - PowerSGD orthonormalisation against a float64 modified Gram-Schmidt;
 *   - PowerSGD at full rank gives the sum within rounding, vectors exactly,
 *     and at low rank the residual bookkeeping: sum of residuals = sum of
 *     inputs - result;
 *   - bf16 and fp16 payloads: the sum within the format's rounding, the
 *     same bits on every member;
 *   - the spec parser.
 *
 * gt-test: ranks=4 tier=quick
 */
#include <math.h>
#include <stdio.h>

#include "../test_util.h"
#include "gridtrain/comm.h"
#include "gridtrain/compress.h"

static int all_ok(int ok, MPI_Comm comm)
{
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, comm);
  return all;
}

static int run(gt_compressor *c, float *buf)
{
  GT_CALL(gt_compressor_start(c, buf));
  for (;;) {
    bool done = false;
    GT_CALL(gt_compressor_test(c, &done));
    if (done)
      return GT_SUCCESS;
    gt_comm_pause();
  }
}

/* ---- top-k selection ---- */
typedef struct {
  float mag;
  uint32_t i;
} mag_idx;

static int cmp_mag(const void *a, const void *b)
{
  const mag_idx *x = a, *y = b;
  if (x->mag != y->mag)
    return x->mag > y->mag ? -1 : 1;
  return x->i < y->i ? -1 : 1;
}
static int cmp_u32(const void *a, const void *b)
{
  const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static void test_topk_select(void)
{
  const size_t n = 5000;
  float *a = malloc(n * sizeof *a), *scratch = malloc(n * sizeof *a);
  mag_idx *ref = malloc(n * sizeof *ref);
  uint32_t *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
  tu_fill(a, n, 3, -1, 1);
  for (size_t i = 0; i < n; i++) /* many ties: a few distinct magnitudes, both signs */
    a[i] = (float)((int)(a[i] * 8)) / 8.0f;
  int bad = 0;
  const size_t ks[] = {1, 2, 17, 625, 2500, 4999, 5000};
  for (size_t q = 0; q < sizeof ks / sizeof *ks; q++) {
    const size_t k = ks[q];
    for (size_t i = 0; i < n; i++)
      ref[i] = (mag_idx){fabsf(a[i]), (uint32_t)i};
    qsort(ref, n, sizeof *ref, cmp_mag);
    for (size_t j = 0; j < k; j++)
      want[j] = ref[j].i;
    qsort(want, k, sizeof *want, cmp_u32);
    gt_topk_select(a, n, k, scratch, got);
    bad += memcmp(got, want, k * sizeof *got) != 0;
  }
  tap_ok(bad == 0, "top-k selection equals sorting by magnitude, ties to the lower index "
         "(k = 1 .. n, %d of 7 differ)", bad);
  free(a);
  free(scratch);
  free(ref);
  free(got);
  free(want);
}

/* ---- orthonormalisation ---- */
static void test_orthonormalize(void)
{
  const size_t rows = 50, r = 6;
  float *P = malloc(rows * r * sizeof *P);
  double *D = malloc(rows * r * sizeof *D);
  tu_fill(P, rows * r, 11, -1, 1);
  float noise[50];
  tu_fill(noise, rows, 12, -1, 1);
  for (size_t i = 0; i < rows; i++) { /* column 3 nearly, column 5 exactly in the others' span */
    P[i * r + 3] = P[i * r + 2] + 1e-2f * noise[i];
    P[i * r + 5] = P[i * r + 4] + 0.5f * P[i * r + 0];
  }
  for (size_t e = 0; e < rows * r; e++)
    D[e] = P[e];
  for (size_t j = 0; j < r; j++) { /* float64 modified Gram-Schmidt */
    for (size_t q = 0; q < j; q++) {
      double dot = 0;
      for (size_t i = 0; i < rows; i++)
        dot += D[i * r + j] * D[i * r + q];
      for (size_t i = 0; i < rows; i++)
        D[i * r + j] -= dot * D[i * r + q];
    }
    double nrm = 0;
    for (size_t i = 0; i < rows; i++)
      nrm += D[i * r + j] * D[i * r + j];
    for (size_t i = 0; i < rows; i++)
      D[i * r + j] /= sqrt(nrm);
  }
  gt_orthonormalize(P, rows, r);
  double worst = 0, ortho = 0, dropped = 0;
  for (size_t j = 0; j < 3; j++) /* the well-conditioned columns */
    for (size_t i = 0; i < rows; i++)
      worst = fmax(worst, fabs(P[i * r + j] - D[i * r + j]));
  for (size_t i = 0; i < rows; i++)
    dropped = fmax(dropped, fabs(P[i * r + 5]));
  for (size_t a = 0; a < 5; a++)
    for (size_t b = 0; b < 5; b++) {
      double dot = 0;
      for (size_t i = 0; i < rows; i++)
        dot += (double)P[i * r + a] * P[i * r + b];
      ortho = fmax(ortho, fabs(dot - (a == b)));
    }
  tap_ok(worst < 1e-5 && ortho < 1e-5 && dropped == 0,
         "orthonormalisation matches float64 Gram-Schmidt (max diff %.2e), P^T P = I (max off "
         "%.2e, a nearly dependent column included), a dependent column dropped (%.1e)",
         worst, ortho, dropped);
  free(P);
  free(D);
}

/* ---- reductions on a group ---- */
static void test_topk_reduce(MPI_Comm comm, size_t n, double ratio)
{
  int me, p;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &p);
  gt_compress_spec spec = {GT_COMPRESS_TOPK, ratio, 0};
  gt_compressor *c = NULL;
  int ok = gt_compressor_create(&spec, comm, n, NULL, 0, GT_ALGO_MPI, 1, &c) == GT_SUCCESS;
  float *g = malloc(n * sizeof *g), *buf = malloc(n * sizeof *g), *old = malloc(n * sizeof *g);
  float *sent = malloc(n * sizeof *g), *allsent = malloc(n * (size_t)p * sizeof *g);
  for (int step = 0; step < 3 && ok; step++) {
    tu_fill(g, n, 100u * (unsigned)step + (unsigned)me, -1, 1);
    memcpy(buf, g, n * sizeof *g);
    memcpy(old, gt_compressor_state(c), n * sizeof *g);
    ok &= run(c, buf) == GT_SUCCESS;
    const float *res = gt_compressor_state(c);
    size_t nsent = 0;
    for (size_t i = 0; i < n; i++) { /* sent = (g + old) - residual: exact for the sent ones */
      const float a = g[i] + old[i];
      sent[i] = res[i] == 0.0f ? a : 0.0f;
      nsent += res[i] == 0.0f;
      ok &= res[i] == 0.0f || res[i] == a;
    }
    ok &= nsent >= (size_t)ceil(ratio * (double)n);
    MPI_Allgather(sent, (int)n, MPI_FLOAT, allsent, (int)n, MPI_FLOAT, comm);
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int r = 0; r < p; r++)
        want += allsent[(size_t)r * n + i];
      ok &= buf[i] == want;
    }
  }
  tap_ok(all_ok(ok, comm), "p = %d topk:%g on %zu entries, 3 steps: sent + residual = gradient "
         "+ old residual exactly, result = sum of what was sent in member order", p, ratio, n);
  gt_compressor_destroy(&c);
  free(g);
  free(buf);
  free(old);
  free(sent);
  free(allsent);
}

static void test_powersgd(MPI_Comm comm, int rank_k, bool full)
{
  int me, p;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &p);
  /* a vector, a tall matrix, a vector, a wide matrix, a vector */
  const gt_cmat mats[2] = {{5, 40, 12}, {5 + 480 + 7, 9, 30}};
  const size_t n = 5 + 480 + 7 + 270 + 3;
  gt_compress_spec spec = {GT_COMPRESS_POWERSGD, 1, rank_k};
  gt_compressor *c = NULL;
  int ok = gt_compressor_create(&spec, comm, n, mats, 2, GT_ALGO_MPI, 5, &c) == GT_SUCCESS;
  float *buf = malloc(n * sizeof *buf), *all = malloc(n * (size_t)p * sizeof *buf);
  float *res_all = malloc(n * (size_t)p * sizeof *buf), *old_all = malloc(n * (size_t)p * 4);
  double worst = 0, vec_worst = 0, book = 0;
  for (int step = 0; step < 3 && ok; step++) {
    tu_fill(buf, n, 7u + 10u * (unsigned)step + (unsigned)me, -1, 1);
    MPI_Allgather(buf, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, comm);
    MPI_Allgather(gt_compressor_state(c), (int)n, MPI_FLOAT, old_all, (int)n, MPI_FLOAT, comm);
    ok &= run(c, buf) == GT_SUCCESS;
    MPI_Allgather(gt_compressor_state(c), (int)n, MPI_FLOAT, res_all, (int)n, MPI_FLOAT, comm);
    for (size_t i = 0; i < n; i++) {
      double in = 0, res = 0;
      for (int r = 0; r < p; r++) {
        in += (double)all[(size_t)r * n + i] + old_all[(size_t)r * n + i];
        res += res_all[(size_t)r * n + i];
      }
      const bool vec = i < 5 || (i >= 485 && i < 492) || i >= 762;
      if (vec)
        vec_worst = fmax(vec_worst, fabs(buf[i] - in));
      else if (full)
        worst = fmax(worst, fabs(buf[i] - in));
      book = fmax(book, fabs(in - buf[i] - res)); /* residuals hold what was not sent */
    }
  }
  if (full)
    tap_ok(all_ok(ok && worst < 1e-4 && vec_worst < 1e-5 && book < 1e-4, comm),
           "p = %d powersgd:%d (full rank): the sum within rounding (%.1e), vectors %.1e, "
           "residuals %.1e", p, rank_k, worst, vec_worst, book);
  else
    tap_ok(all_ok(ok && vec_worst < 1e-5 && book < 1e-4, comm),
           "p = %d powersgd:%d: vectors summed (%.1e); sum of residuals = inputs - result (%.1e)",
           p, rank_k, vec_worst, book);
  gt_compressor_destroy(&c);
  free(buf);
  free(all);
  free(res_all);
  free(old_all);
}

static void test_half(MPI_Comm comm, gt_compress_kind kind, gt_algo algo)
{
  int me, p;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &p);
  const size_t n = 3000;
  gt_compress_spec spec = {kind, 1, 0};
  gt_compressor *c = NULL;
  int ok = gt_compressor_create(&spec, comm, n, NULL, 0, algo, 1, &c) == GT_SUCCESS;
  float *buf = malloc(n * sizeof *buf), *all = malloc(n * (size_t)p * sizeof *buf);
  tu_fill(buf, n, 40u + (unsigned)me, -1, 1);
  MPI_Allgather(buf, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, comm);
  ok &= run(c, buf) == GT_SUCCESS;
  const double tol = (kind == GT_COMPRESS_BF16 ? 0x1p-8 : 0x1p-11) * 2.0 * p;
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double want = 0;
    for (int r = 0; r < p; r++)
      want += all[(size_t)r * n + i];
    worst = fmax(worst, fabs(buf[i] - want));
  }
  float *first = malloc(n * sizeof *first);
  memcpy(first, buf, n * sizeof *buf);
  MPI_Bcast(first, (int)n, MPI_FLOAT, 0, comm);
  ok &= memcmp(first, buf, n * sizeof *buf) == 0 && worst <= tol;
  ok &= gt_compressor_last_bytes(c) > 0 && gt_compressor_last_bytes(c) <= 2.0 * (double)n * 2;
  tap_ok(all_ok(ok, comm), "p = %d %s over %s: the sum within %.1e (worst %.1e), the same bits "
         "on every member, half the bytes", p, kind == GT_COMPRESS_BF16 ? "bf16" : "fp16",
         gt_algo_name(algo), tol, worst);
  gt_compressor_destroy(&c);
  free(buf);
  free(all);
  free(first);
}

static void test_parse(void)
{
  gt_compress_spec s;
  int good = gt_compress_parse("topk:0.01", &s) == GT_SUCCESS && s.kind == GT_COMPRESS_TOPK &&
             s.ratio == 0.01 && gt_compress_parse("powersgd:4", &s) == GT_SUCCESS &&
             s.rank == 4 && gt_compress_parse("bf16", &s) == GT_SUCCESS &&
             gt_compress_parse("none", &s) == GT_SUCCESS && s.kind == GT_COMPRESS_NONE;
  const char *bad[] = {"topk:0", "topk:1.5", "topk:", "powersgd:0", "powersgd:x", "zip"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    gt_error_clear();
    good &= gt_compress_parse(bad[i], &s) == GT_ERR_INPUT &&
            strstr(gt_error_message(), "expected none, bf16") != NULL;
  }
  tap_ok(good, "compress specs parse; bad ones are refused with the forms expected");
}

int main(int argc, char **argv)
{
  int rank = tu_mpi_init(&argc, &argv);
  gt_comm_set_wait_mode(GT_WAIT_YIELD);
  if (rank == 0) {
    test_topk_select();
    test_orthonormalize();
    test_parse();
  }
  MPI_Comm three;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 3 ? 0 : MPI_UNDEFINED, rank, &three);
  MPI_Comm groups[2] = {MPI_COMM_WORLD, three};
  for (int gi = 0; gi < 2; gi++) {
    if (groups[gi] == MPI_COMM_NULL)
      continue;
    test_topk_reduce(groups[gi], 1000, 0.05);
    test_topk_reduce(groups[gi], 997, 1.0);
    test_powersgd(groups[gi], 64, true);
    test_powersgd(groups[gi], 2, false);
    test_half(groups[gi], GT_COMPRESS_BF16, GT_ALGO_MPI);
    test_half(groups[gi], GT_COMPRESS_FP16, GT_ALGO_MPI);
    test_half(groups[gi], GT_COMPRESS_BF16, GT_ALGO_RING);
  }
  if (three != MPI_COMM_NULL)
    MPI_Comm_free(&three);
  int status = tap_done();
  MPI_Finalize();
  return status;
}
