/*
 * benchmarks/plan/bench_kernels.c - times gridtrain's own CPU kernels (the
 * backend's linear, LayerNorm, GELU, attention and copy ops) at the shapes
 * of a GPT block, for the planner's calibration of this machine
 * (benchmarks/plan/calibrate_cpu.sh, docs/planning.md).
 *
 *   bench_kernels THREADS DIM SEQ HEADS TOKENS...
 *
 * prints a '#' header and one CSV row per kernel and size:
 *   kind,name,threads,tokens,flops,bytes,seconds
 * kind: gemm (a product's forward, or its backward: data and weight
 * gradients, two products of the forward's size),
 * attn (causal flash attention, forward or backward), mem (memory-bound),
 * peak (a 2048^3 product: the sgemm rate), copy (a 256 MiB copy: the
 * memory bandwidth). FLOPs and bytes are counted as the planner counts
 * them (costmodel.c); the block's kernels rotate their operands through
 * ROTATE copies (a training step's kernels find their inputs in the shared
 * cache, not their core's). Each time is the fastest of 7 rounds of at
 * least 20 ms.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gridtrain/backend.h"
#include "gridtrain/error.h"
#include "gridtrain/log.h"

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef enum { K_FWD, K_BWD, K_LN, K_LNB, K_GELU, K_GELUB, K_ATT, K_ATTB, K_COPY } kid;

typedef struct {
  gt_backend *be;
  float *a, *b, *c, *d, *w, *dw, *mean, *rstd;
  int64_t N, C, OC, T, H;
  kid k;
  size_t region; /* floats: the operands rotate through ROTATE regions this far apart */
  bool resid;    /* linear forward adds a residual (attn_proj, fc_proj) */
} job;

/* A training step's kernels read what other kernels wrote: the operands
 * rotate through ROTATE copies, so that a kernel finds them in the shared
 * last-level cache rather than in its core's own caches. */
#define ROTATE 8

static int run_at(const job *j0, int r)
{
  job jj = *j0;
  const job *j = &jj;
  const size_t o = (size_t)r * j0->region;
  jj.a += o, jj.b += o, jj.c += o, jj.d += o, jj.w += o, jj.dw += o;
  const gt_backend_ops *op = j->be->ops;
  switch (j->k) {
  case K_FWD: /* with the bias, and the residual where the block adds one */
    return op->linear_forward(j->be, GT_F32, j->c, j->a, j->w, j->region ? j->d : NULL,
                              j->resid ? j->b : NULL, j->N, j->C, j->OC);
  case K_BWD: /* the data gradient, the weight gradient and the bias gradient */
    return op->linear_backward(j->be, GT_F32, j->a, j->dw, j->region ? j->mean : NULL, j->c,
                               j->b, j->w, j->N, j->C, j->OC);
  case K_LN:
    return op->layernorm_forward(j->be, GT_F32, j->c, j->mean, j->rstd, j->a, j->w, j->d,
                                 j->N, j->C);
  case K_LNB:
    return op->layernorm_backward(j->be, GT_F32, j->b, j->dw, j->dw + j->C, j->c, j->a, j->w,
                                  j->mean, j->rstd, j->N, j->C);
  case K_GELU:
    return op->gelu_forward(j->be, GT_F32, j->c, j->a, (size_t)(j->N * j->C));
  case K_GELUB:
    return op->gelu_backward(j->be, GT_F32, j->b, j->a, j->c, (size_t)(j->N * j->C));
  case K_ATT:
    return op->attention_forward(j->be, GT_F32, j->c, j->mean, j->a, j->N / j->T, j->T, j->H,
                                 j->H, j->C / j->H);
  case K_ATTB:
    return op->attention_backward(j->be, GT_F32, j->b, j->d, j->a, j->c, j->mean, j->N / j->T,
                                  j->T, j->H, j->H, j->C / j->H);
  case K_COPY:
    return op->copy(j->be, j->c, j->a, (size_t)(j->N * j->C) * sizeof(float), NULL);
  }
  return GT_ERR_INTERNAL;
}

static int cmp(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* the fastest of 7 rounds of the mean time of a call, each round >= 20 ms
 * (other work on the machine only slows a round down) */
static int timeit(const job *j, double *sec)
{
  const int nrot = j->region ? ROTATE : 1;
  int rot = 0;
  GT_CALL(run_at(j, rot));
  GT_CALL(j->be->ops->sync(j->be));
  double t[7];
  for (int r = 0; r < 7; r++) {
    int n = 0;
    double t0 = now(), t1;
    do {
      rot = (rot + 1) % nrot;
      GT_CALL(run_at(j, rot));
      GT_CALL(j->be->ops->sync(j->be));
      n++;
      t1 = now();
    } while (t1 - t0 < 0.02);
    t[r] = (t1 - t0) / n;
  }
  qsort(t, 7, sizeof *t, cmp);
  *sec = t[0];
  return GT_SUCCESS;
}

static int bench(gt_backend *be, int threads, int64_t C, int64_t T, int64_t H,
                 const long *tokens, int ntok)
{
  int64_t maxN = 0;
  for (int i = 0; i < ntok; i++)
    maxN = tokens[i] > maxN ? tokens[i] : maxN;
  const size_t big = (size_t)(maxN * 4 * C > 2048 * 2048 ? maxN * 4 * C : 2048 * 2048);
  size_t nbuf = big > (size_t)64 << 20 ? big : (size_t)64 << 20; /* copy: 256 MiB */
  if (nbuf < ((size_t)maxN * 4 * C + 4096) * (ROTATE + 1))
    nbuf = ((size_t)maxN * 4 * C + 4096) * (ROTATE + 1);
  job j;
  memset(&j, 0, sizeof j);
  j.be = be;
  const size_t region = (size_t)maxN * 4 * C + 4096; /* the largest operand of the block */
  float **bufs[] = {&j.a, &j.b, &j.c, &j.d, &j.w, &j.dw};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
    GT_CALL(be->ops->alloc(be, nbuf * sizeof(float), (void **)bufs[i]));
    GT_CALL(be->ops->zero(be, *bufs[i], nbuf * sizeof(float)));
  }
  GT_CALL(be->ops->alloc(be, (size_t)maxN * H * 4 * sizeof(float) + 4096, (void **)&j.mean));
  GT_CALL(be->ops->alloc(be, (size_t)maxN * 4 * sizeof(float) + 4096, (void **)&j.rstd));
  GT_CALL(be->ops->zero(be, j.mean, (size_t)maxN * H * 4 * sizeof(float)));
  double s;
  /* the sgemm rate and the memory bandwidth */
  j.k = K_FWD, j.N = j.C = j.OC = 2048;
  GT_CALL(timeit(&j, &s));
  printf("peak,sgemm2048,%d,2048,%.6g,%.6g,%.6g\n", threads, 2.0 * 2048 * 2048 * 2048,
         4.0 * 3 * 2048 * 2048, s);
  j.k = K_COPY, j.N = (int64_t)(nbuf / 1024), j.C = 1024;
  GT_CALL(timeit(&j, &s));
  printf("copy,copy256M,%d,0,0,%.6g,%.6g\n", threads, 2.0 * 4 * (double)nbuf, s);
  j.region = region; /* the block's kernels rotate their operands */
  for (int i = 0; i < ntok; i++) {
    const int64_t N = tokens[i];
    const int64_t shapes[4][3] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    const char *names[4] = {"qkv", "attn_proj", "fc", "fc_proj"};
    for (int g = 0; g < 4; g++) {
      const int64_t K = shapes[g][0], O = shapes[g][1];
      const double fl = 2.0 * N * K * O, by = 4.0 * (N * K + K * O + N * O);
      const kid ks[2] = {K_FWD, K_BWD};
      const char *part[2] = {"fwd", "bwd"};
      for (int p = 0; p < 2; p++) { /* backward: two products of the forward's size */
        j.k = ks[p], j.N = N, j.C = K, j.OC = O, j.resid = g == 1 || g == 3;
        GT_CALL(timeit(&j, &s));
        printf("gemm,%s.%s,%d,%ld,%.6g,%.6g,%.6g\n", names[g], part[p], threads, (long)N,
               (p + 1) * fl, (p + 1) * by, s);
      }
    }
    j.N = N, j.C = C, j.T = T, j.H = H, j.resid = false;
    j.k = K_ATT;
    GT_CALL(timeit(&j, &s));
    printf("attn,attention.fwd,%d,%ld,%.6g,%.6g,%.6g\n", threads, (long)N, 2.0 * N * T * C,
           4.0 * 4 * N * C, s);
    j.k = K_ATTB;
    GT_CALL(timeit(&j, &s));
    printf("attn,attention.bwd,%d,%ld,%.6g,%.6g,%.6g\n", threads, (long)N, 5.0 * N * T * C,
           4.0 * 8 * N * C, s);
    j.k = K_LN;
    GT_CALL(timeit(&j, &s));
    printf("mem,layernorm.fwd,%d,%ld,0,%.6g,%.6g\n", threads, (long)N, 2.0 * 4 * N * C, s);
    j.k = K_LNB;
    GT_CALL(timeit(&j, &s));
    printf("mem,layernorm.bwd,%d,%ld,0,%.6g,%.6g\n", threads, (long)N, 3.0 * 4 * N * C, s);
    j.C = 4 * C;
    j.k = K_GELU;
    GT_CALL(timeit(&j, &s));
    printf("mem,gelu.fwd,%d,%ld,0,%.6g,%.6g\n", threads, (long)N, 2.0 * 4 * N * 4 * C, s);
    j.k = K_GELUB;
    GT_CALL(timeit(&j, &s));
    printf("mem,gelu.bwd,%d,%ld,0,%.6g,%.6g\n", threads, (long)N, 3.0 * 4 * N * 4 * C, s);
    fflush(stdout);
  }
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    GT_CALL(be->ops->free(be, *bufs[i]));
  GT_CALL(be->ops->free(be, j.mean));
  GT_CALL(be->ops->free(be, j.rstd));
  return GT_SUCCESS;
}

int main(int argc, char **argv)
{
  MPI_Init(&argc, &argv);
  gt_log_init(0);
  if (argc < 6) {
    fprintf(stderr, "usage: bench_kernels THREADS DIM SEQ HEADS TOKENS...\n");
    MPI_Finalize();
    return 2;
  }
  const int threads = atoi(argv[1]);
  const long C = atol(argv[2]), T = atol(argv[3]), H = atol(argv[4]);
  long tokens[16];
  int ntok = 0;
  for (int i = 5; i < argc && ntok < 16; i++)
    tokens[ntok++] = atol(argv[i]);
  int status = GT_SUCCESS;
  for (int i = 0; i < ntok; i++)
    if (tokens[i] < T || tokens[i] % T)
      status = GT_ERROR(GT_ERR_INPUT, "TOKENS %ld: a multiple of SEQ %ld", tokens[i], T);
  if (threads < 1 || C < 1 || T < 1 || H < 1 || C % H)
    status = GT_ERROR(GT_ERR_INPUT, "THREADS, DIM, SEQ, HEADS must be positive, HEADS | DIM");
  gt_backend *be = NULL;
  if (status == GT_SUCCESS)
    status = gt_backend_create("cpu", threads, &be);
  if (status == GT_SUCCESS) {
    printf("# gridtrain CPU kernels, %d threads, dim %ld, seq %ld, heads %ld (%s)\n", threads, C,
           T, H, gt_backend_describe(be));
    printf("kind,name,threads,tokens,flops,bytes,seconds\n");
    status = bench(be, threads, C, T, H, tokens, ntok);
  }
  if (be)
    gt_backend_destroy(&be);
  if (status != GT_SUCCESS)
    gt_error_print(-1);
  MPI_Finalize();
  return status == GT_SUCCESS ? 0 : gt_error_exit_code(status);
}
