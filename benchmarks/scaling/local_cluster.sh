#!/bin/sh
# benchmarks/scaling/local_cluster.sh - a private single-node Slurm cluster on
# this machine, for running the scaling job array where no site Slurm exists:
# munged, slurmctld and slurmd on 127.0.0.1 with their own key, free ports,
# state and logs under DIR; the node claims CPUS CPUs whatever the machine
# has (SlurmdParameters=config_overrides), so a 2-core machine can run an
# 8-rank point. The same set-up as tests/slurm/test_slurm.sh (see
# /work/shared/PLATFORM.md for why each slurm.conf line is there).
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
PATH=$PATH:/usr/sbin:/sbin
cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: local_cluster.sh start DIR [CPUS] | stop DIR" >&2
  exit 2
fi

stop_pid() { # PID: TERM, up to 10 s to end, then KILL
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || return 0
  i=0
  while kill -0 "$1" 2>/dev/null && [ $i -lt 20 ]; do
    sleep 0.5
    i=$((i + 1))
  done
  kill -9 "$1" 2>/dev/null
  return 0
}

stop() {
  [ -f "$dir/pids" ] || return 0
  if [ -f "$dir/slurm.conf" ]; then
    SLURM_CONF="$dir/slurm.conf"
    export SLURM_CONF
    left=$(squeue -h -o %A 2>/dev/null)
    if [ -n "$left" ]; then
      # shellcheck disable=SC2086 # one job id a word
      scancel $left 2>/dev/null
      i=0
      while [ -n "$(squeue -h -o %A 2>/dev/null)" ] && [ $i -lt 30 ]; do
        sleep 0.5
        i=$((i + 1))
      done
    fi
  fi
  # slurmd first, munged last (the others talk to it on the way out)
  for d in slurmd slurmctld munged; do
    stop_pid "$(sed -n "s/^$d=//p" "$dir/pids")"
  done
  rm -f "$dir/pids"
  [ -f "$dir/sockdir" ] && rm -rf "$(cat "$dir/sockdir")" "$dir/sockdir"
  return 0
}

case $cmd in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "local_cluster.sh: unknown command '$cmd' (start or stop)" >&2; exit 2 ;;
esac

cpus=${3:-8}
for c in munged mungekey slurmctld slurmd sbatch srun squeue sinfo scancel; do
  command -v "$c" >/dev/null 2>&1 || {
    echo "local_cluster.sh: '$c' is missing (apt-get install slurmctld slurmd slurm-client munge)" >&2
    exit 1
  }
done
[ "$(id -u)" -eq 0 ] || { echo "local_cluster.sh: slurmd needs root" >&2; exit 1; }
[ -f "$dir/pids" ] && { echo "local_cluster.sh: $dir/pids exists: stop that cluster first" >&2; exit 1; }
mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge" || exit 1
dir=$(cd "$dir" && pwd)
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

# Two free TCP ports away from Slurm's 6817/6818 and the ephemeral range.
ports=$(/usr/bin/python3 -c '
import random, socket
found = []
while len(found) < 2:
    p = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("", p))
    except OSError:
        continue
    finally:
        s.close()
    if p not in found:
        found.append(p)
print(*found)') || fail "cannot pick ports"

# munge: its own key, socket, pid file and seed (root's munged refuses the
# packaged set-up), in the foreground (-F) so that its PID is ours. A socket
# path must fit in 108 bytes.
sock="$dir/munge/munge.sock"
if [ ${#sock} -gt 100 ]; then
  sockdir=$(mktemp -d /tmp/gt-munge.XXXXXX) || fail "mktemp failed"
  echo "$sockdir" >"$dir/sockdir"
  sock="$sockdir/munge.sock"
fi
rm -f "$dir/munge/munge.key"
mungekey --create --keyfile="$dir/munge/munge.key" >"$dir/log/mungekey.log" 2>&1 ||
  fail "mungekey: $(cat "$dir/log/mungekey.log")"
chmod 600 "$dir/munge/munge.key"
munged -F --socket="$sock" --pid-file="$dir/munge/munged.pid" \
  --seed-file="$dir/munge/munged.seed" --key-file="$dir/munge/munge.key" \
  >"$dir/log/munged.log" 2>&1 </dev/null &
echo "munged=$!" >>"$dir/pids"

cat >"$dir/slurm.conf" <<EOF
# a private single-node cluster (benchmarks/scaling/local_cluster.sh)
ClusterName=gtscaling
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${ports% *}
SlurmdPort=${ports#* }
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=pmi2
ReturnToService=2
MinJobAge=3600
MaxArraySize=10001
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=16000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
echo "export SLURM_CONF='$dir/slurm.conf'" >"$dir/env.sh"
SLURM_CONF="$dir/slurm.conf"
export SLURM_CONF

i=0
while [ ! -S "$sock" ]; do
  [ $i -ge 20 ] && fail "no munge socket after 10 s"
  sleep 0.5
  i=$((i + 1))
done
slurmctld -D -c -f "$SLURM_CONF" >"$dir/log/slurmctld.stderr" 2>&1 </dev/null &
echo "slurmctld=$!" >>"$dir/pids"
slurmd -D -f "$SLURM_CONF" -N "$node" >"$dir/log/slurmd.stderr" 2>&1 </dev/null &
echo "slurmd=$!" >>"$dir/pids"
i=0
while [ "$(sinfo -h -n "$node" -o %T 2>/dev/null)" != idle ]; do
  [ $i -ge 60 ] && fail "node $node not idle after 30 s: $(sinfo -h -n "$node" -o %T 2>&1)"
  sleep 0.5
  i=$((i + 1))
done
echo "local_cluster.sh: node $node idle with $cpus CPUs; . $dir/env.sh to use it," \
  "local_cluster.sh stop $dir to end it"
