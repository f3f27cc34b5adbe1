#!/bin/sh
# benchmarks/run_parallel.sh - build and run the parallel benchmarks:
#   bench_pipeline   at pp=2 and pp=4 (GPipe, 1F1B and interleaved bubble, activation memory)
#   bench_dp_overlap at dp=2          (how much of the DP all-reduce backward hides)
# Tables go to the terminal and to OUT/*.txt, rows to OUT/*.csv.
#
# usage: benchmarks/run_parallel.sh [options] [-- extra options for both benchmarks]
#   --builddir DIR   configured build directory (default: the one holding this
#                    script's Makefile, else the current directory)
#   --out DIR        results directory (default BUILDDIR/runs/bench-DATE)
#   --mpiexec CMD    launcher (default $MPIEXEC, else mpiexec)
#   --data FILE.h5   token file (default BUILDDIR/data/kjv.h5, made with `make data`)
#   --only WHAT      pipeline | dp (default both)
#   --quick          few steps: a smoke test, not a measurement
#   -h, --help       this text
#
# One thread per rank (the benchmarks set backend.threads=1); OMP_NUM_THREADS=1;
# OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs unless set (as `make run` does).
# Exit status: 0 when every run worked and every row is VALID, 1 otherwise.
set -u

here=$(cd "$(dirname "$0")" && pwd)
builddir=
out=
launcher=${MPIEXEC:-mpiexec}
data=
only=all
quick=0
need() { # OPTION ARGS...: the option needs a value
  [ $# -ge 2 ] || { echo "run_parallel.sh: option $1 needs a value (see --help)" >&2; exit 2; }
}
while [ $# -gt 0 ]; do
  case $1 in
    --builddir|--out|--mpiexec|--data|--only) need "$@" ;;
  esac
  case $1 in
    --builddir) builddir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --mpiexec) launcher=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "run_parallel.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $only in all|pipeline|dp) ;; *) echo "run_parallel.sh: --only pipeline|dp" >&2; exit 2 ;; esac

if [ -z "$builddir" ]; then
  if [ -f "$here/../Makefile" ]; then builddir=$here/..; else builddir=$(pwd); fi
fi
builddir=$(cd "$builddir" && pwd) || exit 2
case $out in ""|/*) ;; *) out=$(pwd)/$out ;; esac
case $data in ""|/*) ;; *) data=$(pwd)/$data ;; esac
[ -f "$builddir/Makefile" ] || {
  echo "run_parallel.sh: $builddir has no Makefile; run configure first or pass --builddir" >&2
  exit 2
}
cd "$builddir" || exit 2

echo "== make bench"
make -j2 bench || { echo "run_parallel.sh: 'make bench' failed" >&2; exit 1; }
if [ -z "$data" ]; then
  data=data/kjv.h5
  if [ ! -f "$data" ]; then
    echo "== make data ($data is missing)"
    make data || { echo "run_parallel.sh: 'make data' failed; pass --data FILE.h5" >&2; exit 1; }
  fi
fi

[ -n "$out" ] || out=runs/bench-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)

OMP_NUM_THREADS=1; export OMP_NUM_THREADS
if [ -z "${OPENBLAS_CORETYPE+set}" ] && grep -q avx512f /proc/cpuinfo 2>/dev/null; then
  OPENBLAS_CORETYPE=SkylakeX; export OPENBLAS_CORETYPE
fi

cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
# Open MPI refuses more ranks than cores without --oversubscribe; MPICH's
# Hydra just starts them.
ompi=0
$launcher --version 2>&1 | grep -q "Open MPI" && ompi=1
launch() { # RANKS PROGRAM ARGS...
  n=$1; shift
  extra=
  [ $ompi = 1 ] && [ "$n" -gt "$cores" ] && extra=--oversubscribe
  echo "+ $launcher -n $n${extra:+ $extra} $*"
  $launcher -n "$n" $extra "$@"
}

if [ $quick = 1 ]; then
  pipe_opts="--steps 2 --warmup 1 --microbatches 1,4"
  dp_opts="--steps 2 --warmup 1 --bucket-mb 1,25"
else
  pipe_opts="--steps 10 --warmup 2"
  dp_opts="--steps 20 --warmup 2"
fi

status=0
run() { # LOG RANKS PROGRAM ARGS...
  log=$1; shift
  # keep the benchmark's exit status through the pipe into tee
  { launch "$@"; echo $? > "$out/.rc"; } 2>&1 | tee -a "$log"
  rc=$(cat "$out/.rc"); rm -f "$out/.rc"
  [ "$rc" = 0 ] || { echo "run_parallel.sh: exit status $rc" | tee -a "$log"; status=1; }
}

if [ $only != dp ]; then
  echo "== bench_pipeline: pp=2 (2 ranks), then pp=4 (4 ranks; oversubscribed on $cores cores)"
  : > "$out/pipeline.txt"
  run "$out/pipeline.txt" 2 benchmarks/bench_pipeline --data "$data" --csv "$out/pipeline.csv" \
    $pipe_opts "$@"
  run "$out/pipeline.txt" 4 benchmarks/bench_pipeline --data "$data" --csv "$out/pipeline.csv" \
    --append $pipe_opts "$@"
fi
if [ $only != pipeline ]; then
  echo "== bench_dp_overlap: dp=2 (2 ranks)"
  : > "$out/dp_overlap.txt"
  run "$out/dp_overlap.txt" 2 benchmarks/bench_dp_overlap --data "$data" \
    --csv "$out/dp_overlap.csv" $dp_opts "$@"
fi
echo "== results in $out (*.txt tables, *.csv rows)"
exit $status
