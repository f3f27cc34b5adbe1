/*
 * version.c - the version (see version.h).
 */
#include "gridtrain/version.h"

#include "build_config.h"

const char *gt_version(void) { return PACKAGE_VERSION; }
