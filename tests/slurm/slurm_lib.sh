# tests/slurm/slurm_lib.sh - a private Slurm cluster on this machine: munged,
# slurmctld and slurmd as root with their own key, socket, ports, state and
# logs under one directory, nothing of the machine's own Slurm or munge used.
# POSIX sh, sourced by
#   tests/slurm/test_slurm.sh            . "$GT_SRCDIR/tests/slurm/slurm_lib.sh"
#   tests/slurm/test_slurm_multinode.sh  (all three after tests/lib.sh)
#   tests/slurm/test_slurm_elastic.sh
#   benchmarks/scaling/local_cluster.sh  . "$(dirname "$0")/../../tests/slurm/slurm_lib.sh"
# It provides the steps they share: the command check, the clean
# environment, the cluster directory, ports, munged, slurm.conf, the
# single-node daemons, the waits for them, the tear-down by PID, and the
# job helpers of the tests (job_field, wait_job, job_diag); and, at the
# end, the cluster of network namespaces of the two multi-node tests
# (ns_init, ns_network, ns_slurm_conf, ns_start_daemons, ns_cleanup), whose
# daemons start inside the namespaces and whose clients run there.
#
# The caller sets, after sourcing:
#   cl_dir    the cluster directory (cluster_dirs sets it): state/, spool/,
#             log/, munge/, slurm.conf;
#   cl_in     a command prefix for the Slurm clients (sinfo, squeue, scontrol,
#             scancel): empty runs them here, the multi-node test gives
#             in_ctl (inside the controller's namespace);
#   cl_nodes  the node names when every slurmd has files of its own
#             (slurmd-NODE.log, spool/NODE: the multi-node test); empty for
#             one slurmd (slurmd.log, spool/);
#   up_title  (tests) the TAP title of the "cluster comes up" point.
# The lib sets, for the waits and the tear-down: munged_pid, sock (munged's
# socket) and sockdir (a /tmp dir of it, to remove, or empty) in
# start_munged; slurmctld_pid and slurmd_pids in start_daemons (the
# multi-node test sets these two itself). A step that fails returns 1 and
# says why in up_err.
# Variables of its own carry a prefix of their function (wj_, sc_, ...), so
# that the callers' loop variables (i, n, p) are left alone.

# shellcheck disable=SC2034 # slurm_cmds, up_err, ...: read by the sourcing scripts

# The daemons and mungekey live in sbin, which a non-login root shell may lack.
PATH=$PATH:/usr/sbin:/sbin

# What a cluster needs; the callers add their own (the multi-node test: ip, ...).
slurm_cmds="munged mungekey slurmctld slurmd sbatch srun scontrol squeue sinfo scancel"

cl_dir=""
cl_in=""
cl_nodes=""
up_title=""
up_err=""
munged_pid=""
slurmctld_pid=""
slurmd_pids=""
sock=""
sockdir=""

# ---- set-up -------------------------------------------------------------------
# missing_cmd CMD...: print the first CMD that is not on PATH and succeed;
# fail when all are there.
missing_cmd() {
  for mc_cmd in "$@"; do
    if ! command -v "$mc_cmd" >/dev/null 2>&1; then
      echo "$mc_cmd"
      return 0
    fi
  done
  return 1
}

# drop_slurm_env: nothing of an outer Slurm job (when make check itself runs
# under Slurm) may leak into ours: unset the SLURM_*, SBATCH_*, SRUN_* and
# SALLOC_* variables. The caller sets SLURM_CONF afterwards.
drop_slurm_env() {
  for de_v in $(env | sed -n -E 's/^((SLURM|SBATCH|SRUN|SALLOC)_[A-Za-z0-9_]*)=.*/\1/p'); do
    unset "$de_v"
  done
}

# now, elapsed_since T: a time stamp; the seconds since one (one decimal).
now() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# slurm_test_begin WHY [CMD...]: the start of a Slurm test: skip (a TAP
# plan of 0, exit 0) where Slurm, munge or a CMD is missing, or when not root
# (WHY: the skip message); drop_slurm_env; deck (tests/decks/tiny.in), jobs
# (jobscripts/), tmp ($GT_TMP, absolute) and C ($tmp/cluster, its
# directories made: cluster_dirs).
slurm_test_begin() {
  stb_why=$1
  shift
  # shellcheck disable=SC2086 # one command a word
  if stb_cmd=$(missing_cmd $slurm_cmds "$@"); then
    echo "1..0 # SKIP $stb_cmd is missing (apt-get install slurmctld slurmd slurm-client munge iproute2)"
    exit 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "1..0 # SKIP $stb_why"
    exit 0
  fi
  drop_slurm_env
  deck="$GT_SRCDIR/tests/decks/tiny.in"
  jobs="$GT_SRCDIR/jobscripts"
  tmp=$(cd "$GT_TMP" && pwd) || bail "no $GT_TMP"
  C="$tmp/cluster"
  cluster_dirs "$C" || bail "cannot create $C"
}

# cluster_dirs DIR: make DIR's state/, spool/, log/ and munge/; cl_dir
# becomes DIR's absolute path (slurm.conf wants absolute paths).
cluster_dirs() {
  mkdir -p "$1/state" "$1/spool" "$1/log" "$1/munge" || return 1
  cl_dir=$(cd "$1" && pwd)
}

# free_ports PYTHON: two free TCP ports (for slurmctld and slurmd), away from
# Slurm's 6817/6818 (a site's own daemons) and from the ephemeral range.
free_ports() {
  "$1" -c '
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
print(*found)'
}

# start_munged: munge with its own key, socket, pid file and seed under
# $cl_dir/munge (root's munged refuses the packaged set-up), in the
# foreground (-F) so that we hold its PID (munged_pid); it then logs to
# stderr, into log/munged.log. A socket path must fit in 108 bytes: under
# a long cl_dir the socket goes to a new /tmp dir (sockdir), opened to all
# (munged refuses a socket dir without execute permission for all: "Socket
# is inaccessible"; mktemp makes it 0700). A key left by an earlier start in
# the same dir is replaced (mungekey does not overwrite).
start_munged() {
  sock="$cl_dir/munge/munge.sock"
  if [ ${#sock} -gt 100 ]; then
    sockdir=$(mktemp -d /tmp/gt-munge.XXXXXX) || {
      up_err="mktemp failed"
      return 1
    }
    chmod 755 "$sockdir"
    sock="$sockdir/munge.sock"
  fi
  rm -f "$cl_dir/munge/munge.key"
  if ! mungekey --create --keyfile="$cl_dir/munge/munge.key" >"$cl_dir/log/mungekey.log" 2>&1; then
    up_err="mungekey failed: $(cat "$cl_dir/log/mungekey.log")"
    return 1
  fi
  chmod 600 "$cl_dir/munge/munge.key"
  munged -F --socket="$sock" --pid-file="$cl_dir/munge/munged.pid" \
    --seed-file="$cl_dir/munge/munged.seed" --key-file="$cl_dir/munge/munge.key" \
    >"$cl_dir/log/munged.log" 2>&1 </dev/null &
  munged_pid=$!
}

# wait_munged: wait (10 s at most) for munged's socket; 1 when munged ended
# or the time ran out.
wait_munged() {
  wm_i=0
  while [ ! -S "$sock" ]; do
    if ! kill -0 "$munged_pid" 2>/dev/null; then
      up_err="munged exited"
      return 1
    fi
    if [ $wm_i -ge 20 ]; then
      up_err="no munge socket after 10 s"
      return 1
    fi
    sleep 0.5
    wm_i=$((wm_i + 1))
  done
}

# slurm_conf NAME CTLD_HOST CTLD_PORT SLURMD_PORT: the slurm.conf lines
# every private cluster shares, to stdout; the caller adds its own after
# them (nodes, partition, what its jobs need). Why these (measured with
# Debian's Slurm 22.05, /work/shared/PLATFORM.md): root daemons; munge at
# our socket; state, spool, pid and log files in cl_dir (per node, %n, when
# cl_nodes is set); no cgroups (proctrack/linuxproc, task/none) and no
# accounting daemon (finished jobs go to jobcomp.txt, and stay visible to
# `scontrol show job` for an hour: MinJobAge); CPUs as cores, with the
# node's CPU count taken from slurm.conf, not from the machine
# (config_overrides: 8 CPUs on 2 cores); srun --mpi=pmi2 for Debian's
# MPICH; a node that was down comes back when its slurmd registers.
slurm_conf() {
  if [ -n "$cl_nodes" ]; then
    sc_spool=/%n sc_node=-%n
  else
    sc_spool="" sc_node=""
  fi
  cat <<EOF
ClusterName=$1
SlurmctldHost=$2
SlurmctldPort=$3
SlurmdPort=$4
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$cl_dir/state
SlurmdSpoolDir=$cl_dir/spool$sc_spool
SlurmctldPidFile=$cl_dir/slurmctld.pid
SlurmdPidFile=$cl_dir/slurmd$sc_node.pid
SlurmctldLogFile=$cl_dir/log/slurmctld.log
SlurmdLogFile=$cl_dir/log/slurmd$sc_node.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$cl_dir/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=pmi2
ReturnToService=2
MinJobAge=3600
EOF
}

# slurm_conf_node NODE CPUS: the slurm.conf lines of a single-node cluster
# on 127.0.0.1: the node, claiming CPUS CPUs, and its one partition.
slurm_conf_node() {
  echo "NodeName=$1 NodeAddr=127.0.0.1 CPUs=$2 RealMemory=16000 State=UNKNOWN"
  echo "PartitionName=debug Nodes=$1 Default=YES MaxTime=INFINITE State=UP"
}

# start_daemons NODE: slurmctld and slurmd (as NODE) of a single-node
# cluster, in the foreground (-D) so that we hold their PIDs; slurmctld
# starts clean (-c: no state of an earlier run). Their stderr goes to
# log/slurmctld.stderr and log/slurmd.stderr (what they say before their
# log files open). SLURM_CONF is set.
start_daemons() {
  slurmctld -D -c -f "$SLURM_CONF" >"$cl_dir/log/slurmctld.stderr" 2>&1 </dev/null &
  slurmctld_pid=$!
  slurmd -D -f "$SLURM_CONF" -N "$1" >"$cl_dir/log/slurmd.stderr" 2>&1 </dev/null &
  slurmd_pids=$!
}

# wait_idle N: wait (30 s at most) until N nodes are idle; 1 when slurmctld
# or a slurmd (slurmd_pids) ended, or with up_err empty when the time ran
# out: the caller then says what the nodes look like.
wait_idle() {
  wi_i=0
  up_err=""
  while [ "$($cl_in sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" -ne "$1" ]; do
    if ! kill -0 "$slurmctld_pid" 2>/dev/null; then
      up_err="slurmctld exited"
      return 1
    fi
    for wi_p in $slurmd_pids; do
      if ! kill -0 "$wi_p" 2>/dev/null; then
        case $slurmd_pids in
          *[0-9]' '*[0-9]*) up_err="a slurmd exited" ;;
          *) up_err="slurmd exited" ;;
        esac
        return 1
      fi
    done
    [ $wi_i -ge 60 ] && return 1
    sleep 0.5
    wi_i=$((wi_i + 1))
  done
}

# ---- tear-down ----------------------------------------------------------------
# stop_pid PID: TERM, up to 10 s to end, then KILL (and reap it when it is
# our child).
stop_pid() {
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || return 0
  sp_i=0
  while kill -0 "$1" 2>/dev/null && [ $sp_i -lt 20 ]; do
    sleep 0.5
    sp_i=$((sp_i + 1))
  done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  return 0
}

# stop_cluster: while slurmctld runs, cancel the jobs left (a failed test)
# and give them 15 s to end, so that no slurmstepd or gridtrain outlives
# the daemons; then stop the daemons by PID, the slurmds first and munged
# last (the others talk to it on their way out), and remove sockdir.
stop_cluster() {
  if [ -n "$slurmctld_pid" ] && kill -0 "$slurmctld_pid" 2>/dev/null; then
    sc_left=$($cl_in squeue -h -o %A 2>/dev/null)
    if [ -n "$sc_left" ]; then
      # shellcheck disable=SC2086 # one job id a word
      $cl_in scancel $sc_left 2>/dev/null
      sc_i=0
      while [ -n "$($cl_in squeue -h -o %A 2>/dev/null)" ] && [ $sc_i -lt 30 ]; do
        sleep 0.5
        sc_i=$((sc_i + 1))
      done
    fi
  fi
  for sc_p in $slurmd_pids; do stop_pid "$sc_p"; done
  stop_pid "$slurmctld_pid"
  stop_pid "$munged_pid"
  [ -n "$sockdir" ] && rm -rf "$sockdir"
  return 0
}

# ---- TAP diagnostics and jobs (the tests) ----------------------------------------
# tail_log FILE [N]: the last N lines of a file as TAP comments.
tail_log() {
  [ -f "$1" ] || return 0
  echo "# ---- $1 (last ${2:-20} lines)"
  tail -n "${2:-20}" "$1" | sed 's/^/#   /'
}

# daemon_logs: the ends of the daemons' logs (a slurmd's less of each when
# there are several).
daemon_logs() {
  tail_log "$cl_dir/log/munged.log" 10
  tail_log "$cl_dir/log/slurmctld.log" 25
  tail_log "$cl_dir/log/slurmctld.stderr" 10
  if [ -z "$cl_nodes" ]; then
    tail_log "$cl_dir/log/slurmd.log" 25
    tail_log "$cl_dir/log/slurmd.stderr" 10
  fi
  for dl_node in $cl_nodes; do
    tail_log "$cl_dir/log/slurmd-$dl_node.log" 15
    tail_log "$cl_dir/log/slurmd-$dl_node.stderr" 10
  done
}

# up_fail WHAT: the cluster did not come up (WHAT: why): point 1 fails,
# titled up_title, with the daemons' logs, and the test ends (ok and
# done_testing come from tests/lib.sh).
up_fail() {
  ok 1 "$up_title ($1)"
  daemon_logs
  done_testing
}

# job_field JOBID FIELD: a field of `scontrol show job -o`.
job_field() {
  $cl_in scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# wait_job JOBID LIMIT_S: wait until the job has ended; prints its final
# state (or WAIT-TIMEOUT).
# A requeued job waits PENDING for 120 s (Slurm's fixed begin delay after a
# requeue). The wait cuts that short with `scontrol update JobId=X
# StartTime=now` (which also makes slurmctld schedule at once), but only
# 2 s after it saw the requeue: a job started again within the second of
# its requeue fails ("Killing non-startable batch JobId=X: Job credential
# revoked": slurmd still holds the revoked credential of the run before),
# which is what the delay is for.
wait_job() {
  wj_start=$(date +%s)
  wj_moved=""
  wj_seen=""
  while :; do
    wj_line=$($cl_in scontrol show job -o "$1" 2>/dev/null)
    wj_state=$(printf '%s\n' "$wj_line" | tr ' ' '\n' | sed -n 's/^JobState=//p')
    case $wj_state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        echo "$wj_state"
        return 0
        ;;
      PENDING)
        wj_restarts=$(printf '%s\n' "$wj_line" | tr ' ' '\n' | sed -n 's/^Restarts=//p')
        case $wj_line in
          *Reason=BeginTime*)
            if [ "$wj_restarts" != "$wj_moved" ]; then
              # first sight of this requeue: note the time; 2 s later, start it
              if [ "${wj_seen%:*}" != "$wj_restarts" ]; then
                wj_seen="$wj_restarts:$(date +%s)"
              elif [ $(($(date +%s) - ${wj_seen#*:})) -ge 2 ]; then
                $cl_in scontrol update JobId="$1" StartTime=now >/dev/null 2>&1 &&
                  wj_moved=$wj_restarts
              fi
            fi
            ;;
        esac
        ;;
    esac
    if [ $(($(date +%s) - wj_start)) -ge "$2" ]; then
      echo "WAIT-TIMEOUT($wj_state)"
      return 1
    fi
    sleep 0.5
  done
}

# job_diag JOBID OUTPUT: the job's record and output, and the end of
# slurmctld's log (and of each node's slurmd log, with cl_nodes), as TAP
# comments.
job_diag() {
  echo "# ---- scontrol show job $1"
  $cl_in scontrol show job "$1" 2>&1 | sed 's/^/#   /'
  tail_log "$2" 60
  tail_log "$cl_dir/log/slurmctld.log" 15
  for jd_node in $cl_nodes; do tail_log "$cl_dir/log/slurmd-$jd_node.log" 10; done
}

# ---- a cluster of network namespaces (the multi-node tests) ------------------------
# Used by tests/slurm/test_slurm_multinode.sh and test_slurm_elastic.sh (their
# headers say why namespaces): one namespace per node, each with its own
# slurmd, address on a private bridge and host name, and one more that
# holds the bridge and slurmctld:
#
#   namespace gt$$-ctl   bridge gtbr0 10.77.0.1/24, slurmctld; veth gtn1..N
#   namespace gt$$-nI    veth gtnet0 10.77.0.1I/24, slurmd -N gtnI, host gtnI
#
# ns_init N: names for N nodes (N <= 9): ns_nodes ("1 2 3"), ns_ctl, net,
# ctl_addr, cl_nodes (gtn1 ...), cl_in=in_ctl; made_ns (the namespaces made
# so far, for ns_cleanup) empty.
ns_init() {
  ns_nodes=$(seq -s ' ' 1 "$1")
  ns_ctl="gt$$-ctl"
  net=10.77.0
  ctl_addr=$net.1
  made_ns=""
  cl_nodes=""
  for ni_n in $ns_nodes; do cl_nodes="$cl_nodes gtn$ni_n"; done
  cl_in=in_ctl
}

# ns_test_begin N [CMD...]: slurm_test_begin for a test on N namespace
# nodes (iproute2 and the CMDs needed too), then ns_init N.
ns_test_begin() {
  ntb_n=$1
  shift
  slurm_test_begin "the multi-node Slurm test makes network namespaces and runs slurmd: needs root" \
    ip unshare nsenter hostname timeout "$@"
  ns_init "$ntb_n"
}

# in_ctl CMD...: a Slurm client (or anything) inside the controller's
# namespace, with a time limit; the lib's clients run so.
in_ctl() { timeout -k 5 30 ip netns exec "$ns_ctl" "$@"; }

# ns_cleanup: the jobs left cancelled and the daemons stopped by PID
# (stop_cluster); whatever still runs in our namespaces (a slurmstepd, a
# rank) was started by the test: killed by PID; then the namespaces are
# deleted, which removes their links (veths, bridge) with them.
ns_cleanup() {
  stop_cluster
  for nc_ns in $made_ns; do
    for nc_p in $(ip netns pids "$nc_ns" 2>/dev/null); do kill -9 "$nc_p" 2>/dev/null; done
  done
  for nc_ns in $made_ns; do ip netns del "$nc_ns" 2>/dev/null; done
  return 0
}

# make_ns NAME: a namespace with its loopback up.
make_ns() {
  ip netns add "$1" 2>"$cl_dir/log/netns.err" || return 1
  made_ns="$made_ns $1"
  ip -n "$1" link set lo up
}

# ns_network: the namespaces, the bridge and a veth per node. Returns 1 with
# ns_skip set to the TAP skip reason when the machine cannot make them.
# Nothing is added to the host's own network: the addresses exist only
# inside the namespaces, so parallel runs cannot clash (their namespace
# names carry the PID).
ns_network() {
  ns_skip=""
  if ! make_ns "$ns_ctl"; then
    ns_skip="network namespaces are not available: $(head -n 1 "$cl_dir/log/netns.err")"
    return 1
  fi
  nn_err=""
  {
    ip -n "$ns_ctl" link add gtbr0 type bridge &&
      ip -n "$ns_ctl" addr add "$ctl_addr/24" dev gtbr0 &&
      ip -n "$ns_ctl" link set gtbr0 up
  } 2>>"$cl_dir/log/netns.err" || nn_err="bridge"
  for nn_n in $ns_nodes; do
    [ -n "$nn_err" ] && break
    nn_ns="gt$$-n$nn_n"
    make_ns "$nn_ns" || { nn_err="namespace $nn_ns"; break; }
    # One end on the bridge (gtnN), the other in the node (gtnet0 in every
    # node: UCX_NET_DEVICES names it once for all); made in place, so that no
    # link ever appears in the host's namespace.
    {
      ip -n "$ns_ctl" link add "gtn$nn_n" type veth peer name gtnet0 netns "$nn_ns" &&
        ip -n "$ns_ctl" link set "gtn$nn_n" master gtbr0 up &&
        ip -n "$nn_ns" addr add "$net.1$nn_n/24" dev gtnet0 &&
        ip -n "$nn_ns" link set gtnet0 up
    } 2>>"$cl_dir/log/netns.err" || nn_err="veth to $nn_ns"
  done
  if [ -n "$nn_err" ]; then
    ns_skip="cannot make the test network ($nn_err): $(tail -n 1 "$cl_dir/log/netns.err")"
    return 1
  fi
}

# ns_slurm_conf NAME COMMENT: slurm.conf of the namespace cluster to stdout
# (the lines every private cluster shares, then the nodes and the
# partition); the caller adds its own lines after them. The namespaces are
# private: the default ports cannot clash. slurmd's spool, pid and log
# paths carry the node name (%n, as cl_nodes is set): one set per slurmd.
ns_slurm_conf() {
  echo "# $2"
  slurm_conf "$1" "gtctl($ctl_addr)" 6817 6818
  for nsc_n in $ns_nodes; do
    echo "NodeName=gtn$nsc_n NodeAddr=$net.1$nsc_n CPUs=8 RealMemory=16000 State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=gtn[1-${ns_nodes##* }] Default=YES MaxTime=INFINITE State=UP"
}

# ns_start_daemons: slurmctld in the controller's namespace and a slurmd in
# each node's (slurmctld_pid; slurmd_pids in node order), with SLURM_CONF.
# `ip netns exec`, `nsenter` and `unshare` exec their command: $! is the
# daemon's PID. Each daemon gets a UTS namespace of its own with the node's
# host name. A node's processes need a /sys of their namespace (UCX lists
# its TCP devices from /sys/class/net) but also the cgroup tree under it
# (slurmd 22.05 does not start without one, even with proctrack/linuxproc
# and task/none: "No filesystem mounted on /sys/fs/cgroup", which is what
# `ip netns exec` gives). So slurmd enters the network namespace with
# nsenter, makes a mount namespace of its own, and in it sets this
# machine's cgroup tree aside, mounts the namespace's sysfs on /sys and
# moves the cgroup tree back in place; nothing of it reaches the host.
ns_start_daemons() {
  # shellcheck disable=SC2016 # $1, $2: the inner sh's arguments
  ip netns exec "$ns_ctl" unshare --uts sh -c 'hostname gtctl && exec slurmctld -D -c -f "$1"' \
    sh "$SLURM_CONF" >"$cl_dir/log/slurmctld.stderr" 2>&1 &
  slurmctld_pid=$!
  slurmd_pids=""
  for nd_n in $ns_nodes; do
    mkdir -p "$cl_dir/spool/gtn$nd_n" "$cl_dir/cgroup-gtn$nd_n"
    # shellcheck disable=SC2016
    nsenter --net="/run/netns/gt$$-n$nd_n" unshare --mount --uts --propagation slave sh -c '
      hostname "$1" && mount --rbind /sys/fs/cgroup "$3" && mount -t sysfs gtsys /sys &&
        mount --move "$3" /sys/fs/cgroup && exec slurmd -D -f "$2" -N "$1"' \
      sh "gtn$nd_n" "$SLURM_CONF" "$cl_dir/cgroup-gtn$nd_n" >"$cl_dir/log/slurmd-gtn$nd_n.stderr" 2>&1 &
    slurmd_pids="$slurmd_pids $!"
  done
}
