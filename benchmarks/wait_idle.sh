# benchmarks/wait_idle.sh - sourced by the benchmark scripts that time
# kernels or whole runs on this machine (benchmarks/plan/*.sh).
#
# wait_idle: return once the machine is nearly idle (>= 90% idle over 2 s),
# or after GT_IDLE_WAIT seconds (default 3600) with a warning on stderr:
# other jobs running beside a measurement would make it theirs.
# GT_IDLE_WAIT=0 skips the wait.
wait_idle() {
  waited=0
  while [ "$waited" -lt "${GT_IDLE_WAIT:-3600}" ]; do
    a=$(awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8, $5+$6}' /proc/stat)
    sleep 2
    b=$(awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8, $5+$6}' /proc/stat)
    echo "$a $b" | awk '{ exit !(($4 - $2) >= 0.9 * ($3 - $1)) }' && return 0
    waited=$((waited + 2))
  done
  [ "${GT_IDLE_WAIT:-3600}" -gt 0 ] &&
    echo "$(basename "$0"): the machine did not become idle; measuring anyway" >&2
  return 0
}
