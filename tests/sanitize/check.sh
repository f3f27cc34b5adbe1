#!/bin/sh
# tests/sanitize/check.sh SRCDIR BUILDDIR TESTS... - `make check-sanitize`.
#
# Builds a copy of the source tree in BUILDDIR with AddressSanitizer and
# UndefinedBehaviorSanitizer (./configure --enable-sanitizers) and runs the
# named tests there under them (tests/sanitize/README.md). A copy, because
# automake refuses a second build of a tree that is configured in place. The
# copy takes the working files that git knows of (tracked or not ignored), or
# `make distdir` where the tree is no git checkout, plus what autoreconf made.
set -eu
src=$1
build=$2
shift 2
[ $# -gt 0 ] || { echo "check-sanitize: no tests named" >&2; exit 2; }

rm -rf "$build"
mkdir -p "$build"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z -co --exclude-standard | xargs -0 cp -p --parents -t "$build")
else
  make -C "$src" distdir distdir="$build/dist" >/dev/null
  (cd "$build/dist" && tar -cf - .) | (cd "$build" && tar -xpf -)
  rm -rf "$build/dist"
fi
# autoreconf's output, with its times, so that make does not run it again
(cd "$src" && cp -p --parents configure aclocal.m4 Makefile.in build_config.h.in build-aux/* \
  "$build")

cd "$build"
# CUDA, cuDNN and NCCL are left out: there is no device to run their code on
# here, and nvcc's device code is not instrumented.
./configure -q --enable-sanitizers --with-cuda=no \
  CFLAGS="${GT_SANITIZE_CFLAGS:--g -O2}"
make -j"$(nproc)" >make.log 2>&1 || { cat make.log; exit 1; }
grep -E '(warning|error):' make.log || true

# Halt at the first report, with a stack; leaks are reports too, except those
# of the libraries listed with their reasons in lsan.supp. Reports go to
# files, one per process, that the last test (test_reports.sh) shows: a test
# that only greps a run's output, or expects it to fail, would miss them.
logs=$build/sanitizer-reports
mkdir -p "$logs"
GT_SANITIZER_LOGS=$logs
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:check_initialization_order=1:strict_init_order=1:log_path=$logs/asan}
LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/tests/sanitize/lsan.supp:print_suppressions=0}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan}
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS GT_SANITIZER_LOGS
exec make check TESTS="$* tests/sanitize/test_reports.sh"
