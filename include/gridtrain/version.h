/*
 * gridtrain/version.h - version and build information.
 */
#ifndef GRIDTRAIN_VERSION_H
#define GRIDTRAIN_VERSION_H

/* "0.1.0" */
const char *gt_version(void);

/* Multi-line description of the build: MPI library, HDF5, BLAS, CUDA,
 * tokenizers. */
void gt_build_info(char *buf, unsigned long size);

#endif /* GRIDTRAIN_VERSION_H */
