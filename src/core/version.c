/*
 * version.c - version and build information (see version.h).
 */
#include "gridtrain/version.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "build_config.h"
#include "gridtrain/backend.h"
#include "gridtrain/cuda_info.h"

const char *gt_version(void) { return PACKAGE_VERSION; }

void gt_build_info(char *buf, unsigned long size)
{
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  if (MPI_Get_library_version(mpi, &len) != MPI_SUCCESS)
    snprintf(mpi, sizeof mpi, "unknown (MPI_Get_library_version failed)");
  char *nl = strchr(mpi, '\n');
  if (nl)
    *nl = '\0';
  for (char *p = mpi; *p; p++)
    if (*p == '\t')
      *p = ' ';
  char cuda[256];
  gt_cuda_describe(cuda, sizeof cuda);
#ifdef GT_HAVE_SENTENCEPIECE
  const char *tokens = "bytes, SentencePiece " GT_BUILD_SPM " (BPE, unigram)";
#else
  const char *tokens = "bytes (built without SentencePiece)";
#endif
  snprintf(buf, size,
           "  MPI   : %s\n"
           "  HDF5  : %s (parallel)\n"
           "  BLAS  : %s\n"
           "  CUDA  : %s\n"
           "  TOKENS: %s\n",
           mpi, GT_BUILD_HDF5, gt_backend_blas_info(), cuda, tokens);
}

