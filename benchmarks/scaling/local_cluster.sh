#!/bin/sh
# benchmarks/scaling/local_cluster.sh - a private single-node Slurm cluster on
# this machine, for running the scaling job array where no site Slurm exists:
# munged, slurmctld and slurmd on 127.0.0.1 with their own key, free ports,
# state and logs under DIR; the node claims CPUS CPUs whatever the machine
# has (SlurmdParameters=config_overrides), so a 2-core machine can run an
# 8-rank point. The set-up is tests/slurm/slurm_lib.sh's, the same as
# tests/slurm/test_slurm.sh's (see /work/shared/PLATFORM.md for why each
# slurm.conf line is there).
#
#   local_cluster.sh start DIR [CPUS]   start it (CPUS default 8); then
#                                       . DIR/env.sh  (exports SLURM_CONF)
#   local_cluster.sh stop DIR           cancel its jobs, stop the daemons
#                                       by the PIDs recorded in DIR/pids
#
# Needs root (slurmd) and Debian's slurmctld, slurmd, slurm-client and munge.
# Exit status: 0, 1 when the cluster does not come up (the daemons' logs
# are printed and what started is stopped), 2 for bad usage.
set -u
# shellcheck source=tests/slurm/slurm_lib.sh
. "$(dirname "$0")/../../tests/slurm/slurm_lib.sh"
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: local_cluster.sh start DIR [CPUS] | stop DIR" >&2
  exit 2
fi

# stop: the cluster of DIR, by what DIR/pids and DIR/sockdir recorded (a
# later run of this script, or start's own failure); slurm_lib.sh's
# stop_cluster cancels the jobs left and stops the daemons by PID.
stop() {
  [ -f "$dir/pids" ] || return 0
  SLURM_CONF="$dir/slurm.conf"
  export SLURM_CONF
  slurmd_pids=$(sed -n 's/^slurmd=//p' "$dir/pids")
  slurmctld_pid=$(sed -n 's/^slurmctld=//p' "$dir/pids")
  munged_pid=$(sed -n 's/^munged=//p' "$dir/pids")
  [ -f "$dir/sockdir" ] && sockdir=$(cat "$dir/sockdir")
  stop_cluster
  rm -f "$dir/pids" "$dir/sockdir"
  return 0
}

case $cmd in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "local_cluster.sh: unknown command '$cmd' (start or stop)" >&2; exit 2 ;;
esac

cpus=${3:-8}
# shellcheck disable=SC2086 # one command a word
if missing=$(missing_cmd $slurm_cmds); then
  echo "local_cluster.sh: '$missing' is missing (apt-get install slurmctld slurmd slurm-client munge)" >&2
  exit 1
fi
[ "$(id -u)" -eq 0 ] || { echo "local_cluster.sh: slurmd needs root" >&2; exit 1; }
[ -f "$dir/pids" ] && { echo "local_cluster.sh: $dir/pids exists: stop that cluster first" >&2; exit 1; }
cluster_dirs "$dir" || exit 1
dir=$cl_dir
node=$(hostname -s)
: >"$dir/pids"

fail() {
  echo "local_cluster.sh: the cluster did not come up: $*" >&2
  for f in munged.log slurmctld.log slurmctld.stderr slurmd.log slurmd.stderr; do
    [ -f "$dir/log/$f" ] && { echo "---- $dir/log/$f" >&2; tail -n 15 "$dir/log/$f" >&2; }
  done
  stop
  exit 1
}

# Each daemon's PID goes to DIR/pids as soon as it is known, and munge's
# socket dir in /tmp (made when DIR is too long a path for a socket) to
# DIR/sockdir, for stop. When start_munged itself fails, the socket dir is
# only in $sockdir, which fail's stop (the same shell) still removes.
ports=$(free_ports /usr/bin/python3) || fail "cannot pick ports"
start_munged || fail "$up_err"
[ -n "$sockdir" ] && echo "$sockdir" >"$dir/sockdir"
echo "munged=$munged_pid" >>"$dir/pids"

{
  echo "# a private single-node cluster (benchmarks/scaling/local_cluster.sh)"
  slurm_conf gtscaling "$node(127.0.0.1)" "${ports% *}" "${ports#* }"
  echo "MaxArraySize=10001"
  slurm_conf_node "$node" "$cpus"
} >"$dir/slurm.conf"
echo "export SLURM_CONF='$dir/slurm.conf'" >"$dir/env.sh"
SLURM_CONF="$dir/slurm.conf"
export SLURM_CONF

wait_munged || fail "$up_err"
start_daemons "$node"
echo "slurmctld=$slurmctld_pid" >>"$dir/pids"
echo "slurmd=$slurmd_pids" >>"$dir/pids"
wait_idle 1 || fail "${up_err:-node $node not idle after 30 s: $(sinfo -h -n "$node" -o %T 2>&1)}"
echo "local_cluster.sh: node $node idle with $cpus CPUs; . $dir/env.sh to use it," \
  "local_cluster.sh stop $dir to end it"
