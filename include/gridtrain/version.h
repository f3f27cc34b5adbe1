/*
 * gridtrain/version.h - the version (the build summary of --version is
 * the command line's, src/cli/dispatch.c).
 */
#ifndef GRIDTRAIN_VERSION_H
#define GRIDTRAIN_VERSION_H

/* "0.1.0" */
const char *gt_version(void);

#endif /* GRIDTRAIN_VERSION_H */
