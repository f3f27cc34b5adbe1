#!/bin/sh
# tests/gpu/pack.sh - make what tests/gpu/run.sh needs on a GPU machine that has
# CUDA but no package registry (no MPI, HDF5, OpenBLAS or inih; see
# ../shared/PLATFORM.md): a CUDA build of gridtrain and of the GPU tests, made
# here, plus the shared libraries they load that such a machine lacks, and
# MPICH's launcher, in one xz tarball under DIR (default gpu-pack/, which git
# ignores, so it travels as a carried path; the build itself is in gpu-build/).
#
# usage: tests/gpu/pack.sh [DIR]      (from a git checkout; ~5 min on 2 cores)
#
# Left out of the tarball on purpose: the C library and loader (the target's
# are used; the binaries need glibc >= this machine's, which run.sh checks),
# and the CUDA libraries (cudart is the target's own toolkit's, cuBLAS(Lt),
# cuDNN and NCCL too: they are hundreds of MiB, and run.sh finds them there).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$src/gpu-pack}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
build=${GT_PACK_BUILD:-$src/gpu-build}  # a copy of the working tree, built there (not carried)
stage=$dir/stage
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/tests" "$build"

# Not -march=native: the GPU machine's CPU is another one. x86-64-v3 (AVX2,
# FMA, F16C) runs on every x86 host of a current GPU.
(cd "$src" && git ls-files -co --exclude-standard -z) | (cd "$src" && xargs -0 cp --parents -t "$build")
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

# the shared libraries, minus glibc's and CUDA's own
for f in "$stage/bin/"* "$stage/tests/"*; do ldd "$f" 2>/dev/null; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so|/libcuda\.so|/libcudart|/libcublas|/libcudnn|/libnccl|/libnvrtc|/libnvJitLink' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
cp "$src/tests/data/genesis.txt" "$stage/"
ldd --version | head -n 1 >"$stage/glibc-built-with"
git -C "$src" rev-parse HEAD >"$stage/commit" 2>/dev/null || echo unknown >"$stage/commit"
tar -C "$stage" -cJf "$dir/gpu-pack.tar.xz" .
rm -rf "$stage"
echo "$0: $(du -h "$dir/gpu-pack.tar.xz" | cut -f1) in $dir/gpu-pack.tar.xz"
