/*
 * test_layouts6.c - the layout parity test of test_layouts.c on 6 ranks:
 * (dp,pp,tp) = (1,1,6), (2,3,1) on all of them and (3,1,1), (1,3,1), (1,1,3)
 * on ranks 0..2, each against one rank.
 *
 * gt-test: ranks=6 tier=full
 */
#define LAYOUTS_RANKS 6
#include "test_layouts.c"
