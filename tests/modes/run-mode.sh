# tests/modes/run-mode.sh - run one C test program under a test mode of the
# CPU backend: sourced by the tests/modes/*.sh scripts as
#   . "$GT_SRCDIR/tests/modes/run-mode.sh" MODE tests/mpi/test_layouts
# MODE is async (cpu-async: every backend op runs later, in order, on a
# worker thread, after a delay; a missing wait reads stale data or races)
# or guard (cpu-guard: device memory is unreachable from the host outside
# the backend's ops; a touch faults with a message naming the address).
# The program runs through tests/run-test at the rank count it declares.
: "${GT_SRCDIR:?run through make check (GT_SRCDIR unset)}"
: "${GT_BUILDDIR:?run through make check (GT_BUILDDIR unset)}"
GT_CPU_MODE=$1
export GT_CPU_MODE
exec "${SHELL:-/bin/sh}" "$GT_SRCDIR/tests/run-test" "$GT_BUILDDIR/$2"
