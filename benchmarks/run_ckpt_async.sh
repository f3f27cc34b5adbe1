#!/bin/sh
# benchmarks/run_ckpt_async.sh - how long a checkpoint blocks training,
# [checkpoint] async = off against on, and how much the steps that run
# while a background write is in flight slow down; with dd's write of the
# same bytes to the same directory in the same run.
#
# For every rank count and each mode, R times: `gridtrain train` of the
# 124M deck (inputs/gpt2-124m.in: GPT-2 124M, seq_len 64, batch 4) for
# --steps steps with a checkpoint every --every steps (and the last), each
# run in a fresh directory. From rank 0's log:
#   blocked   what the step waited for a periodic checkpoint (not the last,
#             which a run always waits for): sync, its whole write
#             ("written in X s"); async, the copy to host memory and the
#             file's creation, any wait for the write before, and the
#             finish at a later step boundary ("the step waited X s"; a write
#             that the run's last checkpoint waited for is left out). The
#             first checkpoint of a run (async: it allocates and first
#             touches the host copy) is reported apart from the later ones.
#   steps     step times (ms, from the step lines) of the steps logged while
#             an async write was in flight ("overlapping") against the
#             steps of the same run with no write in flight, the first two
#             steps left out (slowdown: median over median, per run).
# dd writes the checkpoint's size (conv=fsync, and oflag=direct) R times in
# the same directory, between the runs. One table of min / median at the
# end (also OUT/ckpt_async.txt; every run's log in OUT).
#
# usage: benchmarks/run_ckpt_async.sh [options]
#   --builddir DIR   built tree (default: the one holding this script's Makefile)
#   --out DIR        results (default BUILDDIR/runs/ckpt-async-DATE)
#   --data FILE.h5   token file (default BUILDDIR/data/kjv.h5, else Genesis ingested)
#   --ranks LIST     rank counts (default 1,2,4; dp = ranks)
#   --repeats R      runs per rank count and mode (default 2)
#   --steps N        steps per run (default 10)
#   --every N        checkpoint every N steps (default 4)
#   --mpiexec CMD    launcher (default $MPIEXEC, else mpiexec)
# Ranks beyond the cores run in yield mode ([parallel] wait = yield).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
builddir= out= data= ranks=1,2,4 repeats=2 steps=10 every=4
launcher=${MPIEXEC:-mpiexec}
while [ $# -gt 0 ]; do
  case $1 in
    --builddir) builddir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --mpiexec) launcher=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "run_ckpt_async.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$builddir" ]; then
  if [ -f "$here/../Makefile" ]; then builddir=$here/..; else builddir=$(pwd); fi
fi
builddir=$(cd "$builddir" && pwd) || exit 2
gt=$builddir/gridtrain
[ -x "$gt" ] || { echo "run_ckpt_async.sh: $gt is missing (make)" >&2; exit 2; }
[ -n "$out" ] || out=$builddir/runs/ckpt-async-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
log=$out/ckpt_async.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }
if [ -z "$data" ]; then
  data=$builddir/data/kjv.h5
  if [ ! -f "$data" ]; then
    data=$out/genesis.h5
    "$gt" ingest text "$src/tests/data/genesis.txt" -o "$data" --val-fraction 0 >/dev/null ||
      { echo "run_ckpt_async.sh: ingest failed; pass --data" >&2; exit 1; }
  fi
fi
LC_ALL=C; export LC_ALL
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
say "# run_ckpt_async.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname), $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
say "# directory $out on $(df -PT "$out" | awk 'NR == 2 { print $1 " (" $2 ")" }'); deck inputs/gpt2-124m.in, $steps steps, a checkpoint every $every; $repeats runs per row"

secs() { sed -n 's/.* copied, \([0-9.e+-]*\) s,.*/\1/p' | tail -n 1; }
status=0
for n in $(echo "$ranks" | tr ',' ' '); do
  wait=busy threads=$((cores / n))
  [ "$n" -gt "$cores" ] && wait=yield
  [ "$threads" -ge 1 ] || threads=1
  r=1
  while [ "$r" -le "$repeats" ]; do
    for mode in off on; do
      name=r$n-$mode-$r
      rm -rf "$out/ck-$name"
      say "== $n rank(s), async = $mode, run $r"
      OMP_NUM_THREADS=$threads timeout -k 5 1800 $launcher -n "$n" "$gt" train "$src/inputs/gpt2-124m.in" \
        data.train="$data" run.steps="$steps" run.metrics= run.log_every=1 \
        checkpoint.dir="$out/ck-$name" checkpoint.every="$every" checkpoint.keep=1 \
        checkpoint.async=$mode parallel.wait=$wait backend.threads=$threads \
        >"$out/$name.log" 2>&1 || { say "run_ckpt_async.sh: $name failed (see $out/$name.log)"; status=1; }
      grep "checkpoint .* written" "$out/$name.log" | sed 's/^/#   /' | tee -a "$log"
      f=$(ls "$out/ck-$name"/step_*.h5 2>/dev/null | tail -n 1)
      [ -n "$f" ] && stat -c %s "$f" >"$out/size"
      rm -rf "$out/ck-$name"
    done
    # dd: the same bytes, same directory, between the runs
    size=$(cat "$out/size" 2>/dev/null || echo 1500000000)
    ws=$(dd if=/dev/zero of="$out/ddtest" bs=8M count="$size" iflag=count_bytes conv=fsync 2>&1 | secs)
    rm -f "$out/ddtest"
    dws=$(dd if=/dev/zero of="$out/ddtest" bs=8M count="$size" iflag=count_bytes oflag=direct conv=fsync 2>&1 | secs)
    rm -f "$out/ddtest"
    say "#   dd $size bytes: write ${ws:-nan} s, O_DIRECT ${dws:-nan} s"
    echo "$n ${ws:-nan} ${dws:-nan}" >>"$out/dd.txt"
    r=$((r + 1))
  done
done
rm -f "$out/size"

python3 - "$out" "$ranks" "$repeats" "$every" "$steps" <<'PY' | tee -a "$log"
import glob, os, re, statistics as S, sys
out, ranks, repeats, every, steps = (sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]),
                                     int(sys.argv[4]), int(sys.argv[5]))
def mm(v): return f"{min(v):.2f} / {S.median(v):.2f}" if v else "-"
dd = {}
for line in open(os.path.join(out, "dd.txt")):
    n, w, d = line.split(); dd.setdefault(n, ([], []))
    if w != "nan": dd[n][0].append(float(w))
    if d != "nan": dd[n][1].append(float(d))
step_re = re.compile(r"^step (\d+)/\d+ .*\| ([0-9.]+) ms \|")
rows = []
for n in ranks:
    res = {}
    for mode in ("off", "on"):
        first, later, lap, base, ratio = [], [], [], [], []
        for r in range(1, repeats + 1):
            p = os.path.join(out, f"r{n}-{mode}-{r}.log")
            if not os.path.exists(p): continue
            nlap, nbase = len(lap), len(base)
            inflight, k, ended = False, 0, False
            for line in open(p):
                m = step_re.match(line)
                if m:
                    s, ms = int(m.group(1)), float(m.group(2))
                    ended = s == steps - 1
                    if s >= 2: (lap if inflight else base).append(ms)
                    if mode == "on" and (s + 1) % every == 0: inflight = True
                    continue
                w = re.search(r"checkpoint \S+/step_(\d+)\.h5 written in ([0-9.]+) s"
                              r"(?: \(the step waited ([0-9.]+) s(?:: [0-9.]+ to copy and create, "
                              r"([0-9.]+) for the writer)?)?", line)
                if w:
                    b = float(w.group(3) if w.group(3) else w.group(2))
                    # not the last one, nor one that only the last one waited
                    # for: the run waits for those at its end anyway
                    waited = float(w.group(4)) if w.group(4) else 1.0
                    if int(w.group(1)) != steps and not (ended and waited > 0.01):
                        (first if k == 0 else later).append(b); k += 1
                    inflight = False
            if len(lap) > nlap and len(base) > nbase:  # within the run: the load drifts
                ratio.append(S.median(lap[nlap:]) / S.median(base[nbase:]) - 1)
        res[mode] = (first, later, lap, base, ratio)
    rows.append((n, res))
print()
print(f"# blocked: seconds the step waited for a checkpoint, min / median over {repeats} runs "
      "(first: a run's first checkpoint; later: the others); dd: write of the same bytes, min / median")
print("| ranks | dd write s | dd O_DIRECT s | sync blocked first | sync blocked later | async blocked first | async blocked later | async later / sync later | steps overlapping a write ms | steps without ms | slowdown (per run) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n, res in rows:
    f0, l0, _, _, _ = res["off"]; f1, l1, lap, base, per = res["on"]
    ratio = f"{S.median(l1) / S.median(l0):.3f}" if l0 and l1 else "-"
    slow = f"{min(per):+.1%} / {S.median(per):+.1%}" if per else "-"
    w, d = dd.get(n, ([], []))
    print(f"| {n} | {mm(w)} | {mm(d)} | {mm(f0)} | {mm(l0)} | {mm(f1)} | {mm(l1)} | {ratio} | "
          f"{mm(lap)} (n={len(lap)}) | {mm(base)} (n={len(base)}) | {slow} |")
PY
exit $status
