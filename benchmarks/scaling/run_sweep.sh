#!/bin/sh
# benchmarks/scaling/run_sweep.sh - a whole scaling sweep: make the points
# (gen_points.py), run them (jobscripts/scaling.sbatch: a Slurm job array on
# a private single-node cluster with --slurm, else one after the other with
# mpiexec), and collect the CSV and plots (collect.py).
#
#   benchmarks/scaling/run_sweep.sh [options] -- [gen_points.py options]
#     --deck DECK       input deck (default inputs/default.in)
#     --name NAME       results are RESULTS/scaling-NAME.{csv,-throughput.png,-split.png}
#                       (default: the deck's base name)
#     --out DIR         the sweep file and each point's metrics, console and
#                       status (default runs/scaling-NAME)
#     --results DIR     where the CSV and PNGs go (default benchmarks/results)
#     --slurm           run the points as a job array on a private Slurm
#                       cluster (local_cluster.sh; root, Debian's Slurm and munge)
#     --repeats K       run the sweep K times (DIR, DIR/repeat-2, ...); each
#                       point counts its fastest run (default 1)
#     --gridtrain BIN   the binary (default ./gridtrain); it is copied into
#                       DIR first, so that a rebuild during the sweep cannot
#                       mix two builds in one sweep
#
# Run from the build directory. Example (the default deck, 1-8 ranks, 6 steps
# of which the first 2 are left out):
#   benchmarks/scaling/run_sweep.sh --slurm --name default -- --max-ranks 8
# Exit status: 0 when every point ran and was collected, 1 otherwise, 2 for
# bad usage.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
py=${PYTHON:-/usr/bin/python3}
deck=inputs/default.in
name=
out=
results=$src/benchmarks/results
slurm=0
repeats=1
gridtrain=./gridtrain
while [ $# -gt 0 ]; do
  case $1 in
    --deck | --name | --out | --results | --gridtrain | --repeats)
      [ $# -ge 2 ] || { echo "run_sweep.sh: $1 needs a value" >&2; exit 2; } ;;
  esac
  case $1 in
    --deck) deck=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --gridtrain) gridtrain=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --slurm) slurm=1; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    --) shift; break ;;
    *) echo "run_sweep.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $repeats in '' | *[!0-9]* | 0) echo "run_sweep.sh: --repeats needs a count >= 1" >&2; exit 2 ;; esac
[ -f "$deck" ] || deck=$src/$deck
[ -f "$deck" ] || { echo "run_sweep.sh: no deck '$deck'" >&2; exit 2; }
[ -n "$name" ] || name=$(basename "$deck" .in)
[ -n "$out" ] || out=runs/scaling-$name
[ -x "$gridtrain" ] || { echo "run_sweep.sh: no gridtrain at '$gridtrain'" >&2; exit 2; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
cp "$gridtrain" "$out/gridtrain" || exit 1
GRIDTRAIN=$out/gridtrain
export GRIDTRAIN

echo "== points"
"$py" "$here/gen_points.py" --deck "$deck" -o "$out/sweep.tsv" "$@" || exit 2
npoints=$(awk -F '\t' '!/^#/ && $1 != "index" && NF > 1 { n++ } END { print n + 0 }' "$out/sweep.tsv")
maxranks=$(awk -F '\t' '!/^#/ && $1 != "index" && NF > 1 && $4 > m { m = $4 } END { print m + 0 }' "$out/sweep.tsv")
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host=$(hostname -s)"
  echo "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  echo "cores=$(nproc --all)"
  echo "load=$(cut -d ' ' -f 1-3 /proc/loadavg)"
  "$GRIDTRAIN" --version 2>&1 | head -n 3 | sed 's/^/version: /'
} >"$out/env.txt"
cat "$out/env.txt"

rc=0
dirs=$out
k=2
while [ "$k" -le "$repeats" ]; do
  dirs="$dirs $out/repeat-$k"
  k=$((k + 1))
done
if [ "$slurm" = 1 ]; then
  cluster=$out/cluster
  "$here/local_cluster.sh" stop "$cluster"
  trap '"$here/local_cluster.sh" stop "$cluster"' EXIT
  trap 'exit 1' HUP INT TERM
  "$here/local_cluster.sh" start "$cluster" "$maxranks" || exit 1
  # shellcheck disable=SC1091 # written by local_cluster.sh
  . "$cluster/env.sh"
fi
for dir in $dirs; do
  mkdir -p "$dir" || exit 1
  if [ "$slurm" = 0 ]; then
    echo "== $npoints points with ${MPIEXEC:-mpiexec}, one after the other, into $dir"
    "$src/jobscripts/scaling.sbatch" "$out/sweep.tsv" "$dir" || rc=1
    continue
  fi
  echo "== $npoints points as a Slurm job array (private cluster in $cluster), into $dir"
  job=$(sbatch --parsable --array=0-$((npoints - 1))%1 --ntasks="$maxranks" \
    --time=01:00:00 -o "$dir/slurm-%A_%a.out" "$src/jobscripts/scaling.sbatch" \
    "$out/sweep.tsv" "$dir") || { echo "run_sweep.sh: sbatch failed" >&2; exit 1; }
  job=${job%%;*}
  echo "job array $job: sbatch --array=0-$((npoints - 1))%1 --ntasks=$maxranks" \
    "jobscripts/scaling.sbatch $out/sweep.tsv $dir"
  t0=$(date +%s)
  last=
  while [ -n "$(squeue -h -j "$job" -o %i 2>/dev/null)" ]; do
    now=$(find "$dir" -maxdepth 1 -name '*.status' | wc -l)
    [ "$now" != "$last" ] && echo "  $(($(date +%s) - t0)) s: $now of $npoints points done" && last=$now
    sleep 2
  done
  echo "job array $job ended after $(($(date +%s) - t0)) s"
done

echo "== results"
# shellcheck disable=SC2086 # $dirs: one directory a word
"$py" "$here/collect.py" "$out/sweep.tsv" $dirs --name "$name" --results "$results" || rc=1
exit $rc
