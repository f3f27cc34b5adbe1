#!/bin/sh
# tests/fuzz/run.sh NAME SECONDS SRCDIR [LIBFUZZER-FLAG...] - one harness of
# `make fuzz`, run from the build directory after tests/fuzz/bin/fuzz_NAME is
# built.
#
# Runs the harness in libFuzzer's fork mode for SECONDS on a copy of
# corpus/NAME and on regress/NAME, going on past crashes, hangs and
# out-of-memory inputs, so that every harness gets its whole time. Then each
# input that stopped a run is replayed alone and triaged by the first frame
# of its stack that is not the sanitizers' runtime, libFuzzer or the C
# library:
#  - in libhdf5: a bug of HDF5 itself on a damaged file (README.md, "Known
#    crashes in HDF5"): listed with its stack, not a failure;
#  - anywhere else (gridtrain's code, the harness's own property checks), or
#    no stack at all: a failure.
# An input that does not stop the replay is listed; a crash that does not
# reproduce alone is a failure too (state that leaks from input to input).
# Prints one summary line; exits 1 on a failure.
set -u
name=$1
secs=$2
src=$3
shift 3
bin=../bin/fuzz_$name
cd tests/fuzz/run || exit 1
rm -rf "$name" "$name.art"
mkdir -p "$name.art"
cp -r "$src/tests/fuzz/corpus/$name" "$name" && chmod -R u+w "$name" || exit 1
regress=
[ -d "$src/tests/fuzz/regress/$name" ] && regress=$src/tests/fuzz/regress/$name

"$bin" -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 -max_total_time="$secs" \
  "$@" -artifact_prefix="$name.art/" "$name" $regress >"$name.log" 2>&1
# the fork mode's status lines: "#EXECS: cov: ... exec/s RATE ... time: Ts ..."
execs=$(sed -n 's/^#\([0-9][0-9]*\): cov:.*/\1/p' "$name.log" | tail -n 1)
rate=$(sed -n 's/^#[0-9][0-9]*: cov:.* exec\/s \([0-9][0-9]*\).*/\1/p' "$name.log" | tail -n 1)

# where FILE's stack points: "hdf5", "ours: FRAME", or "none"
whose() {
  sed -n 's/^ *#[0-9][0-9]* 0x[0-9a-f]* //p' "$1" |
    grep -v -E '__sanitizer|__asan|__ubsan|__lsan|__interceptor|compiler-rt|libclang_rt|fuzzer::|libc\.so|/nptl/|sysdeps/|/stdlib/|/string/|/csu/|(^| )in (malloc|calloc|realloc|free|memcpy|memmove|memset|strlen|strdup|abort|raise)[ (]' |
    head -n 1 | {
    read -r frame || { echo none; return; }
    case $frame in
    *libhdf5*) echo hdf5 ;;
    *) echo "ours: $frame" ;;
    esac
  }
}

fails=0 hdf5=0 gone=0
for art in "$name.art"/*; do
  [ -f "$art" ] || continue
  case $art in *.replay) continue ;; esac
  "$bin" "$@" "$art" >"$art.replay" 2>&1
  if [ $? -eq 0 ]; then
    case $(basename "$art") in
    crash-*) echo "fuzz_$name: $art crashed in the run but not alone: a failure"; fails=$((fails + 1)) ;;
    *) echo "fuzz_$name: $art (a slow or large input in the run) passes alone"; gone=$((gone + 1)) ;;
    esac
    continue
  fi
  w=$(whose "$art.replay")
  case $w in
  hdf5)
    hdf5=$((hdf5 + 1))
    echo "fuzz_$name: $art stops inside HDF5 (a known class: README.md):"
    grep -m 1 -E '^==[0-9]+==.*(ERROR|WARNING)|^SUMMARY' "$art.replay" | sed 's/^/    /'
    ;;
  *)
    fails=$((fails + 1))
    echo "fuzz_$name: FAILED: $art stops in gridtrain's code or the harness's checks ($w):"
    grep -E '^fuzz_|^==[0-9]+==|^ *#[0-9]+ |^SUMMARY' "$art.replay" | head -n 25 | sed 's/^/    /'
    ;;
  esac
done
echo "fuzz_$name: ${execs:-0} executions in $secs s (${rate:-0} exec/s); stopped by gridtrain's" \
  "code: $fails, inside HDF5: $hdf5, not alone: $gone (tests/fuzz/run/$name.log, $name.art/)"
[ "$fails" -eq 0 ] && [ -n "$execs" ]
