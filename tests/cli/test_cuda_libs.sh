#!/bin/sh
# test_cuda_libs.sh - the CUDA libraries are loaded only when a run asks
# for them (src/backend/cuda/cuda_dl.c): gridtrain links none of them, a CPU
# run loads none, and a library that is too old or of another major version
# is one clear error naming it, exit 2 - checked against fake libraries put
# first on LD_LIBRARY_PATH. Loading the real ones is tests/unit/test_cuda_dl.
# docs/errors.md row: E-CUDA-01
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.05 || bail "cannot make the dataset"
deck="$GT_SRCDIR/tests/decks/tiny.in"
cuda_libs='libcudart|libcublas|libcudnn|libnccl|libcuda\.so'

linked=$(ldd "$GT_BIN" | grep -E "$cuda_libs")
[ -z "$linked" ]
ok $? "gridtrain links no CUDA library${linked:+ (it does: $(echo $linked))}"

# LD_DEBUG=files: every object the loader maps, dlopen'd ones included
env LD_DEBUG=files timeout -k 5 120 "$MPIEXEC" -n 1 "$GT_BIN" train "$deck" \
  data.train="$data" data.val= run.eval_every=0 checkpoint.dir= checkpoint.resume=never \
  run.steps=2 >"$GT_TMP/cpu.out" 2>&1
rc=$?
loaded=$(grep -E "file=[^ ]*($cuda_libs)" "$GT_TMP/cpu.out" | sed 's/.*file=\([^ ]*\).*/\1/' |
  sort -u)
[ $rc -eq 0 ] && grep -q 'file=.*libmpich' "$GT_TMP/cpu.out" && [ -z "$loaded" ]
ok $? "a CPU run loads no CUDA library (status $rc${loaded:+; loaded: $(echo $loaded)})"

if ! grep -q '^#define GT_HAVE_CUDA 1' "$GT_BUILDDIR/build_config.h" 2>/dev/null; then
  skip 4 "this gridtrain is built without CUDA"
  done_testing
fi

# device = cuda loads cuBLASLt before it looks for a GPU: on this machine it
# then stops with "no GPU is visible" (exit 2); on a GPU machine it trains
# run_cuda [VAR=VALUE...]: that run, with the variables set for the rank
run_cuda() {
  env "$@" timeout -k 5 120 "$MPIEXEC" -n 1 "$GT_BIN" train "$deck" data.train="$data" \
    data.val= run.eval_every=0 checkpoint.dir= checkpoint.resume=never run.steps=2 \
    backend.device=cuda
}
run_cuda >"$GT_TMP/cuda.out" 2>&1
rc=$?
grep -q '^gridtrain: cuda library: libcublasLt\.so\.[0-9]* [0-9]*\.[0-9]*\.[0-9]* /' \
  "$GT_TMP/cuda.out" && { [ $rc -eq 0 ] || { [ $rc -eq 2 ] &&
  grep -q 'no GPU is visible' "$GT_TMP/cuda.out"; }; }
ok $? "device = cuda loads cuBLASLt and says which (status $rc)"
[ $rc -eq 0 ] || sed 's/^/#   /' "$GT_TMP/cuda.out" | tail -n 3

# fake libcublasLt.so.MAJOR: one with only cublasLtGetVersion, one of
# another major version with every function the backend looks up
major=$(sed -n 's/^gridtrain: cuda library: libcublasLt\.so\.\([0-9]*\) .*/\1/p' \
  "$GT_TMP/cuda.out" | head -n 1)
[ -n "$major" ] || major=13
fake() {
  mkdir -p "$GT_TMP/$1"
  printf '%s\n' "$2" >"$GT_TMP/$1/fake.c"
  ${CC:-cc} -shared -fPIC -o "$GT_TMP/$1/libcublasLt.so.$major" "$GT_TMP/$1/fake.c"
}
fake old 'unsigned long cublasLtGetVersion(void) { return 130000; }' ||
  bail "cannot build a shared library with ${CC:-cc}"
funcs="cublasLtCreate cublasLtDestroy cublasLtGetStatusName cublasLtGetStatusString
  cublasLtMatmul cublasLtMatmulAlgoGetHeuristic cublasLtMatmulDescCreate
  cublasLtMatmulDescDestroy cublasLtMatmulDescSetAttribute cublasLtMatmulPreferenceCreate
  cublasLtMatmulPreferenceDestroy cublasLtMatmulPreferenceSetAttribute
  cublasLtMatrixLayoutCreate cublasLtMatrixLayoutDestroy"
src="unsigned long cublasLtGetVersion(void) { return $(((major - 1) * 10000 + 500)); }"
for f in $funcs; do src="$src
int $f(void) { return 0; }"; done
fake wrong "$src" || bail "cannot build a shared library with ${CC:-cc}"

run_cuda LD_LIBRARY_PATH="$GT_TMP/old${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" >"$GT_TMP/old.out" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c '^gridtrain: error:' "$GT_TMP/old.out")" -eq 1 ] &&
  grep -q "^gridtrain: error: command line: \[backend\] device = cuda: libcublasLt\.so\.$major has no cublasLtCreate: too old a cuBLASLt; install .* LD_LIBRARY_PATH" \
    "$GT_TMP/old.out"
ok $? "a libcublasLt.so.$major without cublasLtCreate: one error naming it, exit 2 (status $rc)"
[ $rc -eq 2 ] || tail -n 3 "$GT_TMP/old.out" | sed 's/^/#   /'

run_cuda LD_LIBRARY_PATH="$GT_TMP/wrong${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" >"$GT_TMP/wrong.out" 2>&1
rc=$?
[ $rc -eq 2 ] &&
  grep -q "^gridtrain: error: command line: \[backend\] device = cuda: libcublasLt\.so\.$major is cuBLASLt $((major - 1))\.5\.0; gridtrain needs cuBLASLt $major\.x" \
    "$GT_TMP/wrong.out"
ok $? "a libcublasLt.so.$major of version $((major - 1)).5.0: one error naming both versions, exit 2 (status $rc)"
[ $rc -eq 2 ] || tail -n 3 "$GT_TMP/wrong.out" | sed 's/^/#   /'

# the same loader behind NCCL and cuDNN; their fakes would need a GPU to be
# reached (the backend loads them after picking the device)
grep -q 'cuda library' "$GT_TMP/old.out"
[ $? -ne 0 ]
ok $? "a library that failed to load is not reported as loaded"

done_testing
