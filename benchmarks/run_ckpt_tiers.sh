#!/bin/sh
# benchmarks/run_ckpt_tiers.sh - what each tier of the training state costs
# the step, and how long a recovery from it takes, with dd's write and read
# of the same bytes in the same run (docs/checkpoints.md, docs/reliability.md).
#
# For every rank count (dp = ranks), R times, on the 124M deck
# (inputs/gpt2-124m.in: GPT-2 124M, seq_len 64, batch 4):
#   run "sync"    [checkpoint] async = off, every E steps, and the node-local
#                 tier every E steps without partner copies (local_keep = 1:
#                 without ZeRO every rank's part is its whole replica, and
#                 /dev/shm is memory: 124M at 2 ranks with partner copies and
#                 local_keep = 2 held 12 GB and a rank was killed for memory)
#   run "async"   async = on, and the node-local tier with partner = on
# From rank 0's log, the seconds the step waited (a run's first and last
# writes left out: the first allocates, the last is waited for anyway):
#   global sync     "checkpoint ... written in T s"
#   global async    "(the step waited B s ...)"
#   local, local + partner   "node-local state of step N written in T s"
# Then two recoveries of the "async" run's state, each a run of one more
# step with resume = auto: from the node-local state (local_dir kept), and
# from the global checkpoint (local_dir removed). Recovery: seconds from the
# launch to the first step line (start-up, read, checks, the step), and the
# read itself where the log says it ("read X of parts in T s").
# dd writes the global file's size to the checkpoint directory (conv=fsync,
# and oflag=direct) and reads it back after dropping it from the page cache
# where it can (echo 1 > /proc/sys/vm/drop_caches as root), R times.
#
# usage: benchmarks/run_ckpt_tiers.sh [options]
#   --builddir DIR   built tree (default: the one holding this script's Makefile)
#   --out DIR        results and the global checkpoints (default BUILDDIR/runs/ckpt-tiers-DATE)
#   --local DIR      node-local directory (default /dev/shm/gt-tiers-PID)
#   --data FILE.h5   token file (default BUILDDIR/data/kjv.h5, else Genesis ingested)
#   --ranks LIST     rank counts (default 1,2,4)
#   --repeats R      runs per rank count (default 2)
#   --steps N        steps per run (default 9)
#   --every E        both tiers every E steps (default 3)
#   --mpiexec CMD    launcher (default $MPIEXEC, else mpiexec)
# Ranks beyond the cores run in yield mode ([parallel] wait = yield).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
builddir= out= data= ranks=1,2,4 repeats=2 steps=9 every=3 localdir=/dev/shm/gt-tiers-$$
launcher=${MPIEXEC:-mpiexec}
while [ $# -gt 0 ]; do
  case $1 in
    --builddir) builddir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --local) localdir=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --mpiexec) launcher=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "run_ckpt_tiers.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$builddir" ]; then
  if [ -f "$here/../Makefile" ]; then builddir=$here/..; else builddir=$(pwd); fi
fi
builddir=$(cd "$builddir" && pwd) || exit 2
gt=$builddir/gridtrain
[ -x "$gt" ] || { echo "run_ckpt_tiers.sh: $gt is missing (make)" >&2; exit 2; }
[ -n "$out" ] || out=$builddir/runs/ckpt-tiers-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" "$localdir" && out=$(cd "$out" && pwd) || exit 1
trap 'rm -rf "$localdir"' EXIT
trap 'exit 130' INT TERM
log=$out/ckpt_tiers.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }
if [ -z "$data" ]; then
  data=$builddir/data/kjv.h5
  if [ ! -f "$data" ]; then
    data=$out/genesis.h5
    "$gt" ingest text "$src/tests/data/genesis.txt" -o "$data" --val-fraction 0 >/dev/null ||
      { echo "run_ckpt_tiers.sh: ingest failed; pass --data" >&2; exit 1; }
  fi
fi
LC_ALL=C; export LC_ALL
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
say "# run_ckpt_tiers.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname), $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
say "# global: $out on $(df -PT "$out" | awk 'NR == 2 { print $1 " (" $2 ")" }'); local: $localdir on $(df -PT "$localdir" | awk 'NR == 2 { print $1 " (" $2 ")" }')"
say "# deck inputs/gpt2-124m.in, $steps steps, both tiers every $every; $repeats runs per row"

now() { date +%s.%N; }
secs() { sed -n 's/.* copied, \([0-9.e+-]*\) s,.*/\1/p' | tail -n 1; }
# run NAME N STEPS KEY=VALUE...: one training run, its log OUT/NAME.log; the
# seconds from its launch to its first step line in OUT/NAME.first
run() {
  rn=$1 rranks=$2 nsteps=$3
  shift 3
  wait=busy threads=$((cores / rranks))
  [ "$rranks" -gt "$cores" ] && wait=yield
  [ "$threads" -ge 1 ] || threads=1
  : >"$out/$rn.log"
  t0=$(now)
  OMP_NUM_THREADS=$threads timeout -k 5 1800 $launcher -n "$rranks" "$gt" train "$src/inputs/gpt2-124m.in" \
    data.train="$data" run.steps="$nsteps" run.metrics= run.log_every=1 parallel.wait=$wait \
    backend.threads=$threads "$@" >"$out/$rn.log" 2>&1 &
  pid=$!
  first=""
  while kill -0 "$pid" 2>/dev/null; do
    if [ -z "$first" ] && grep -q '^step [0-9]*/' "$out/$rn.log"; then
      first=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
    fi
    sleep 0.05
  done
  wait "$pid" || { say "run_ckpt_tiers.sh: $rn failed (see $out/$rn.log)"; status=1; }
  echo "${first:-nan}" >"$out/$rn.first"
}
status=0
for n in $(echo "$ranks" | tr ',' ' '); do
  r=1
  while [ "$r" -le "$repeats" ]; do
    for mode in sync async; do
      name=r$n-$mode-$r
      rm -rf "$out/ck-$name" "$localdir/$name"
      partner=off async=off
      [ "$mode" = async ] && partner=on async=on
      say "== $n rank(s), $mode, run $r"
      run "$name" "$n" "$steps" checkpoint.dir="$out/ck-$name" checkpoint.every="$every" \
        checkpoint.keep=1 checkpoint.async=$async checkpoint.local_dir="$localdir/$name" \
        checkpoint.local_every="$every" checkpoint.local_keep=1 checkpoint.partner=$partner
      grep "checkpoint .* written\|node-local state of step .* written" "$out/$name.log" |
        sed 's/^/#   /' | tee -a "$log"
      f=$(ls "$out/ck-$name"/step_*.h5 2>/dev/null | tail -n 1)
      [ -n "$f" ] && stat -c %s "$f" >"$out/size"
      if [ "$mode" = async ]; then
        # recoveries: one more step, from the node-local state, then from the global file
        # (its own global directory: the global recovery after it must not
        # find this run's last checkpoint)
        run "$name-rl" "$n" $((steps + 1)) checkpoint.dir="$out/ck-$name-rl" checkpoint.keep=1 \
          checkpoint.local_dir="$localdir/$name" checkpoint.local_every="$every"
        rm -rf "$out/ck-$name-rl"
        grep "^gridtrain: resumed" "$out/$name-rl.log" | sed 's/^/#   /' | tee -a "$log"
        rm -rf "$localdir/$name"
        sync
        [ -w /proc/sys/vm/drop_caches ] && echo 1 >/proc/sys/vm/drop_caches
        run "$name-rg" "$n" $((steps + 1)) checkpoint.dir="$out/ck-$name" checkpoint.keep=1
        grep "^gridtrain: resumed" "$out/$name-rg.log" | sed 's/^/#   /' | tee -a "$log"
        say "#   launch to first step: local $(cat "$out/$name-rl.first") s, global $(cat "$out/$name-rg.first") s"
      fi
      rm -rf "$out/ck-$name" "$localdir/$name"
    done
    size=$(cat "$out/size" 2>/dev/null || echo 1500000000)
    ws=$(dd if=/dev/zero of="$out/ddtest" bs=8M count="$size" iflag=count_bytes conv=fsync 2>&1 | secs)
    rm -f "$out/ddtest"
    dws=$(dd if=/dev/zero of="$out/ddtest" bs=8M count="$size" iflag=count_bytes oflag=direct conv=fsync 2>&1 | secs)
    sync
    [ -w /proc/sys/vm/drop_caches ] && echo 1 >/proc/sys/vm/drop_caches
    rs=$(dd if="$out/ddtest" of=/dev/null bs=8M 2>&1 | secs)
    rm -f "$out/ddtest"
    say "#   dd $size bytes: write ${ws:-nan} s, O_DIRECT ${dws:-nan} s, read (cold) ${rs:-nan} s"
    echo "$n ${ws:-nan} ${dws:-nan} ${rs:-nan}" >>"$out/dd.txt"
    r=$((r + 1))
  done
done
rm -f "$out/size"

python3 - "$out" "$ranks" "$repeats" "$steps" "$every" <<'PY' | tee -a "$log"
import os, re, statistics as S, sys
out, ranks, repeats, steps, every = (sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]),
                                     int(sys.argv[4]), int(sys.argv[5]))
def mm(v): return f"{min(v):.3f} / {S.median(v):.3f}" if v else "-"
def num(path):
    try: return float(open(path).read())
    except (OSError, ValueError): return None
dd = {}
for line in open(os.path.join(out, "dd.txt")):
    n, *vals = line.split()
    row = dd.setdefault(n, ([], [], []))
    for lst, v in zip(row, vals):
        if v != "nan": lst.append(float(v))
glob_re = re.compile(r"checkpoint \S+/step_(\d+)\.h5 written in ([0-9.]+) s(?: \(the step waited ([0-9.]+) s)?")
loc_re = re.compile(r"node-local state of step (\d+) written in ([0-9.]+) s")
read_re = re.compile(r"read .* in ([0-9.]+) s")
print()
print(f"# seconds the step waited for each tier, min / median over {repeats} runs (a run's first "
      "and last writes left out); recovery: launch to the first step of a resumed run, and the "
      "read alone where logged; dd: the global file's bytes")
print("| ranks | global sync | global async | local | local + partner | dd write | dd O_DIRECT write | "
      "recovery, local (read) | recovery, global | dd cold read |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n in ranks:
    got = {k: [] for k in ("sync", "async", "local", "partner", "rl", "rlread", "rg")}
    for r in range(1, repeats + 1):
        for mode in ("sync", "async"):
            p = os.path.join(out, f"r{n}-{mode}-{r}.log")
            if not os.path.exists(p): continue
            for line in open(p):
                m = glob_re.search(line)
                if m and int(m.group(1)) not in (every, steps):
                    got[mode].append(float(m.group(3) or m.group(2)))
                m = loc_re.search(line)
                if m and int(m.group(1)) not in (every, steps):
                    got["local" if mode == "sync" else "partner"].append(float(m.group(2)))
        for k, suffix in (("rl", "rl"), ("rg", "rg")):
            v = num(os.path.join(out, f"r{n}-async-{r}-{suffix}.first"))
            if v is not None: got[k].append(v)
        p = os.path.join(out, f"r{n}-async-{r}-rl.log")
        if os.path.exists(p):
            for line in open(p):
                if line.startswith("gridtrain: resumed") and read_re.search(line):
                    got["rlread"].append(float(read_re.search(line).group(1)))
    w, d, rd = dd.get(n, ([], [], []))
    print(f"| {n} | {mm(got['sync'])} | {mm(got['async'])} | {mm(got['local'])} | "
          f"{mm(got['partner'])} | {mm(w)} | {mm(d)} | {mm(got['rl'])} ({mm(got['rlread'])}) | "
          f"{mm(got['rg'])} | {mm(rd)} |")
PY
exit $status
