#!/bin/bash
# jobscripts/chain.sh - submit a chain of K Slurm jobs that continue one
# training run: each job starts after the one before it has ended
# (--dependency=afterany:PREV) and resumes from its checkpoint.
#
#   jobscripts/chain.sh [-n K] [-s JOBSCRIPT] [-J NAME] [SBATCH_OPTION ...] \
#     [-- [DECK] [section.key=value ...]]
#
#   -n K           number of jobs (default 3)
#   -s JOBSCRIPT   the job script (default train.sbatch next to this file;
#                  train-requeue.sbatch and train-multinode.sbatch work too)
#   -J NAME        job name of every job in the chain (default gridtrain-chain);
#                  it names the checkpoint folder runs/ckpt-NAME they share
#   SBATCH_OPTION  anything else before "--" goes to sbatch as it is,
#                  e.g. --time=04:00:00 --ntasks=16
#   DECK ...       after "--": the job script's arguments
#
# Example: three 4-hour jobs of the default deck, 20000 steps in all:
#   jobscripts/chain.sh -n 3 -J kjv-long --time=04:00:00 -- inputs/default.in run.steps=20000
#
# Every job gets the same deck and overrides. A job that reaches its time
# limit gets SIGTERM from Slurm; gridtrain writes a checkpoint into
# runs/ckpt-NAME and exits (status 3), and the next job of the chain
# resumes from runs/ckpt-NAME/latest ([checkpoint] resume = auto). Once the
# run has reached its [run] steps the remaining jobs end at once. afterany
# (not afterok) lets the chain go on after a job that ended with status 3
# or was killed; a job that fails outright (bad deck, missing data) makes
# the rest fail the same way, quickly.
#
# Prints one line per job: "chain: job I/K: JOBID [after PREV]". Cancel the
# whole chain with: scancel --name=NAME
set -euo pipefail

count=3
jobscript="$(dirname "$0")/train.sbatch"
name=gridtrain-chain
sbatch_opts=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) count=$2; shift 2 ;;
    -s) jobscript=$2; shift 2 ;;
    -J) name=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) sbatch_opts+=("$1"); shift ;;
  esac
done
case $count in
  '' | *[!0-9]* | 0) echo "chain.sh: -n needs a positive number, not '$count'" >&2; exit 2 ;;
esac
[ -f "$jobscript" ] || { echo "chain.sh: no job script $jobscript" >&2; exit 2; }

prev=""
for i in $(seq 1 "$count"); do
  dep=()
  [ -n "$prev" ] && dep=(--dependency="afterany:$prev")
  # --parsable prints "JOBID" or "JOBID;CLUSTER"
  id=$(sbatch --parsable --job-name="$name" "${dep[@]}" "${sbatch_opts[@]}" "$jobscript" "$@")
  id=${id%%;*}
  echo "chain: job $i/$count: $id${prev:+ after $prev}"
  prev=$id
done
