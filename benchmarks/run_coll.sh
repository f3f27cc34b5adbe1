#!/bin/sh
# run_coll.sh - the collectives benchmark at np = 2, 4 and 8: MPI's own
# all-reduce, reduce-scatter, all-gather and broadcast against gridtrain's
# ring, tree and recursive halving, 4 B to 256 MiB, in the same run; then the
# alpha-beta-gamma fit, the table [parallel] allreduce = auto reads, and a
# PNG of bus bandwidth (python3 with numpy and matplotlib: Debian's
# python3-numpy, python3-matplotlib).
#
#   sh benchmarks/run_coll.sh [--out DIR] [--nps "2 4 8"] [-- BENCH_COLL_OPTIONS]
#
# Writes DIR/coll-npN.csv, DIR/coll-table.txt, DIR/coll.png (DIR: the
# current directory). Run from the build directory (make bench first).
set -e
out=.
nps="2 4 8"
while [ $# -gt 0 ]; do
  case $1 in
  --out) out=$2; shift 2 ;;
  --nps) nps=$2; shift 2 ;;
  --) shift; break ;;
  *) echo "run_coll.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
bench=./benchmarks/bench_coll
[ -x "$bench" ] || { echo "run_coll.sh: $bench is missing: run 'make bench' here first" >&2; exit 1; }
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out"
csvs=
for np in $nps; do
  ${MPIEXEC:-mpiexec} -n "$np" "$bench" --csv "$out/coll-np$np.csv" "$@"
  csvs="$csvs $out/coll-np$np.csv"
done
# the fit leaves out the smallest sizes, where waiting (not the link) is all there is
"$py" "$here/coll_fit.py" $csvs --table "$out/coll-table.txt" --plot "$out/coll.png" \
  --min-bytes 4096
echo "run_coll.sh: wrote $out/coll-table.txt and $out/coll.png"
