#!/bin/sh
# tests/gpu/pack.sh - make what tests/gpu/run.sh needs on a GPU machine that has
# CUDA but no package registry (no MPI, HDF5, OpenBLAS or inih; see
# ../shared/PLATFORM.md): a CUDA build of gridtrain and of the GPU tests, made
# here, plus the shared libraries they load that such a machine lacks, and
# MPICH's launcher, in one xz tarball under DIR (default gpu-pack/, which git
# ignores, so it travels as a carried path; the build itself is in gpu-build/).
#
# usage: tests/gpu/pack.sh [DIR]      (from a git checkout; ~5 min on 2 cores
#                                      the first time, then only what changed)
#
# Left out of the tarball's lib/ on purpose:
# - the C library and loader: the target's are used. The binaries need a glibc
#   at least as new as the newest GLIBC_ symbol version they and the packed
#   libraries use; that version is written to `needs` and run.sh checks it.
# - libstdc++ and libgcc_s: on the library path they would shadow the ones
#   PyTorch was built against. They go to lib-compat/ instead, which run.sh
#   puts on gridtrain's path only when the target's libstdc++ lacks a
#   GLIBCXX version the pack needs (also written to `needs`).
# - the CUDA libraries (cudart, cuBLAS(Lt), cuDNN, NCCL, NVRTC): hundreds of
#   MiB, and the target has them (toolkit or pip wheels); run.sh finds them.
# xz, not gzip: 31 MiB against about 45, and the limit of what travels is
# 64 MiB with the source tree. run.sh unpacks it with Python's lzma where the
# target has no xz program.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$src/gpu-pack}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
build=${GT_PACK_BUILD:-$src/gpu-build}  # a copy of the working tree, built there (not carried)
stage=$dir/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/lib-compat" "$stage/tests" "$build"

# Not -march=native: the GPU machine's CPU is another one. x86-64-v3 (AVX2,
# FMA, F16C) runs on every x86 host of a current GPU. cp -p keeps the files'
# times, so that a second pack rebuilds only what changed.
(cd "$src" && git ls-files -co --exclude-standard -z) | (cd "$src" && xargs -0 cp -p --parents -t "$build")
if [ ! -f "$build/Makefile" ]; then
  (cd "$build" && autoreconf -fi && ./configure --with-cuda=/usr/local/cuda --disable-native \
     CFLAGS="-g -O3 -march=x86-64-v3") >"$build/pack-configure.log" 2>&1 ||
    { echo "$0: configure failed, see $build/pack-configure.log" >&2; exit 1; }
fi
grep -q '^#define GT_HAVE_CUDA 1' "$build/build_config.h" ||
  { echo "$0: the copy was configured without CUDA (see $build/pack-configure.log)" >&2; exit 1; }
progs="tests/gpu/test_cuda_ops tests/gpu/test_cuda_train"
# shellcheck disable=SC2086
make -C "$build" -j"$(nproc)" gridtrain $progs >"$build/pack-make.log" 2>&1 ||
  { echo "$0: build failed, see $build/pack-make.log" >&2; tail -20 "$build/pack-make.log" >&2; exit 1; }

cp "$build/gridtrain" "$stage/bin/"
for p in $progs; do cp "$build/$p" "$stage/tests/"; done
cp "$(command -v mpiexec.hydra)" "$stage/bin/mpiexec"
cp "$(command -v hydra_pmi_proxy)" "$stage/bin/"

# the shared libraries, minus glibc's and CUDA's own; the C++ runtime apart
for f in "$stage/bin/"* "$stage/tests/"*; do ldd "$f" 2>/dev/null; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so|/libcuda\.so|/libcudart|/libcublas|/libcudnn|/libnccl|/libnvrtc|/libnvJitLink' |
  while read -r lib; do
    case $lib in
      */libstdc++.so* | */libgcc_s.so*) cp -L "$lib" "$stage/lib-compat/" ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
cp "$src/tests/data/genesis.txt" "$stage/"
# UCX's CMA transport (a plugin that UCX loads from its module directory, which
# the GPU machine lacks): without it MPICH 4.0.2 over UCX 1.13 hung now and
# then at the end of a 2-4 rank run here (3 runs of 6); run.sh points
# UCX_MODULE_DIR at ucx/. Not ib or rdmacm: they need libibverbs.
ucx=$(for f in "$stage/bin/"*; do ldd "$f" 2>/dev/null; done | awk '$1 == "libuct.so.0" {print $3; exit}')
if [ -n "$ucx" ] && [ -f "$(dirname "$(readlink -f "$ucx")")/ucx/libuct_cma.so.0" ]; then
  mkdir -p "$stage/ucx"
  cp -L "$(dirname "$(readlink -f "$ucx")")/ucx/libuct_cma.so.0" "$stage/ucx/"
fi

# what the target must have: the newest GLIBC_ and GLIBCXX_ symbol versions used
# (lib-compat's own glibc need apart: it matters only where lib-compat is used)
newest() { p=$1; shift; objdump -T "$@" 2>/dev/null | grep -o "${p}_[0-9][0-9.]*" | sed "s/${p}_//" | sort -u -V | tail -n 1; }
{
  echo "glibc $(newest GLIBC "$stage"/bin/* "$stage"/tests/* "$stage"/lib/*)"
  echo "glibcxx $(newest GLIBCXX "$stage"/bin/* "$stage"/tests/* "$stage"/lib/*)"
  echo "glibc-compat $(newest GLIBC "$stage"/lib-compat/*)"
} >"$stage/needs"
{
  getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version | head -n 1
  # shellcheck disable=SC1091
  (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
} >"$stage/glibc-built-with"
c=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
d=$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
[ "$d" -eq 0 ] || c="$c + $d changed files"
echo "$c, packed $(date -u '+%Y-%m-%d %H:%M UTC')" >"$stage/commit"
(cd "$stage" && find . -type f -exec ls -l {} + | awk '{printf "%10d %s\n", $5, $9}' | sort -k2) >"$stage/manifest"
tar -C "$stage" -cJf "$dir/gpu-pack.tar.xz.tmp" .
mv "$dir/gpu-pack.tar.xz.tmp" "$dir/gpu-pack.tar.xz"
needs=$(tr '\n' ' ' <"$stage/needs")
rm -rf "$stage"
echo "$0: $(du -h "$dir/gpu-pack.tar.xz" | cut -f1) in $dir/gpu-pack.tar.xz; the target needs $needs"
