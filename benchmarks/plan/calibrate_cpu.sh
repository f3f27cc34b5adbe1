#!/bin/sh
# benchmarks/plan/calibrate_cpu.sh - measure this machine for the planner and
# write its cluster description (docs/planning.md):
#
#   benchmarks/plan/calibrate_cpu.sh [OUT.in]     (default inputs/clusters/this-machine.in)
#
# Run from the build directory after `make bench`; it waits for an idle machine
# before each measurement (GT_IDLE_WAIT seconds at most, 0: no wait) and
# takes the fastest of repeated rounds.
#   - [compute] peak_fp32: the sgemm rate of gridtrain's own linear kernel
#     (OpenBLAS) on a 2048^3 product with all cores; memory_bw: a 256 MiB
#     copy through the backend; memory: MemTotal.
#   - [calibration] eff_matmul, eff_attention, eff_mem, kernel_overhead: one
#     least-squares fit of t = flops / (peak x share x eff) + overhead over
#     gridtrain's block kernels (benchmarks/plan/bench_kernels: the four
#     products forward and backward, flash attention, LayerNorm and GELU) at
#     the default deck's shapes (dim 128, seq 128, heads 4) for 128 to 2048
#     tokens, on 1 thread (share 1/2) and 2 threads (share 1).
#   - [network]: alpha, beta and gamma of MPI's all-reduce on 2 ranks from
#     benchmarks/results/coll-table.txt (benchmarks/run_coll.sh);
#     oversub_alpha: half the scheduler's time slice, what a message to a
#     descheduled peer waits on average when ranks outnumber the cores (the
#     table's 4- and 8-rank latencies were measured with idle peers and
#     miss it).
# The fit and the raw rows go to benchmarks/results/plan-calibration.txt.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${GT_BUILDDIR:-$(pwd)}
out=${1:-$src/inputs/clusters/this-machine.in}
bench=$build/benchmarks/plan/bench_kernels
[ -x "$bench" ] || { echo "calibrate_cpu.sh: $bench is missing; run 'make bench'" >&2; exit 2; }
table=$src/benchmarks/results/coll-table.txt
[ -f "$table" ] || { echo "calibrate_cpu.sh: $table is missing; run benchmarks/run_coll.sh" >&2; exit 2; }
py=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/benchmarks/wait_idle.sh"
unset OMP_NUM_THREADS
cores=$(nproc)
for t in 1 "$cores"; do
  wait_idle
  OMP_NUM_THREADS=$t "$bench" "$t" 128 128 4 128 256 512 1024 2048 >"$tmp/k$t.csv"
done
log=$src/benchmarks/results/plan-calibration.txt
"$py" - "$tmp" "$cores" "$table" "$out" "$log" <<'PY'
import csv, datetime, glob, os, sys
import numpy as np
tmp, cores, table, out, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = []
for f in sorted(glob.glob(os.path.join(tmp, "k*.csv"))):
    rows += list(csv.DictReader(l for l in open(f) if not l.startswith("#")))
for r in rows:
    for k in ("threads", "tokens"):
        r[k] = int(r[k])
    for k in ("flops", "bytes", "seconds"):
        r[k] = float(r[k])
full = [r for r in rows if r["threads"] == cores]
peak = max(r["flops"] / r["seconds"] for r in full if r["kind"] == "peak")
bw = max(r["bytes"] / r["seconds"] for r in full if r["kind"] == "copy")
fit = [r for r in rows if r["kind"] in ("gemm", "attn", "mem")]
# t = x0 f/(peak s) [gemm] + x1 f/(peak s) [attn] + x2 b/(bw s) [mem] + nk x3, weighted by
# 1/t; other work on the machine only slows a kernel down, so rows measured more than 1.3
# times their fit are taken as disturbed and left out, and the fit repeated
def solve(rs):
    A, y = [], []
    for r in rs:
        s = r["threads"] / cores
        # a product's backward is two kernels (data and weight gradient), as the planner counts it
        nk = 2.0 if r["kind"] == "gemm" and r["name"].endswith(".bwd") else 1.0
        r["nk"] = nk
        a = [0.0, 0.0, 0.0, nk]
        if r["kind"] == "gemm":
            a[0] = r["flops"] / (peak * s)
        elif r["kind"] == "attn":
            a[1] = r["flops"] / (peak * s)
        else:
            a[2] = r["bytes"] / (bw * s)
        w = 1.0 / r["seconds"]
        A.append([v * w for v in a])
        y.append(1.0)
    x, *_ = np.linalg.lstsq(np.array(A), np.array(y), rcond=None)
    return 1 / x[0], 1 / x[1], 1 / x[2], max(0.0, x[3])
def model(r, e):
    s = r["threads"] / cores
    eff = {"gemm": e[0], "attn": e[1], "mem": e[2]}[r["kind"]]
    t = r["bytes"] / (bw * s * eff) if r["kind"] == "mem" else r["flops"] / (peak * s * eff)
    return t + r["nk"] * e[3]
used = fit
for _ in range(4):
    e = solve(used)
    kept = [r for r in fit if r["seconds"] <= 1.3 * model(r, e)]
    if len(kept) == len(used):
        break
    used = kept
eff_mm, eff_att, eff_mem, over = e
dropped = len(fit) - len(used)
pred = [model(r, e) for r in fit]
errs = [abs(p - r["seconds"]) / r["seconds"] for p, r in zip(pred, fit) if r in used]
# network: MPI's all-reduce on 2 ranks; the latency added per message at 4 and 8 ranks
net = {}
for line in open(table):
    f = line.split()
    if len(f) >= 6 and f[0] == "allreduce" and f[1] == "mpi":
        net[int(f[2])] = [float(v) for v in f[3:6]]
alpha, beta, gamma = net[2]
# ranks beyond the cores: a message to a descheduled peer waits until the scheduler
# runs it, half a time slice on average: the kernel's base slice (EEVDF), read from
# debugfs where mounted, else its default 0.75 ms x (1 + log2(min(cores, 8)))
try:
    base = int(open("/sys/kernel/debug/sched/base_slice_ns").read()) * 1e-9
except OSError:
    base = 0.75e-3 * (1 + int(np.log2(min(cores, 8))))
oversub = base / 2
mem = int(open("/proc/meminfo").read().split("MemTotal:")[1].split()[0]) * 1024
model = open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip()
now = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
with open(out, "w") as f:
    f.write(f"""; inputs/clusters/this-machine.in - this build machine ({model}, {cores} cores) and
; gridtrain's CPU backend, for `gridtrain plan DECK --cluster inputs/clusters/this-machine.in
; --ranks N`. Written by benchmarks/plan/calibrate_cpu.sh on {now}; the raw
; measurements and the fit are in benchmarks/results/plan-calibration.txt.
; Ranks beyond the cores take turns on them (processor sharing): each computes
; and copies at cores/ranks of a core, and every message waits for a descheduled peer.

[cluster]
name = this-machine
nodes = 1
; the MPI tests run up to 8 ranks here
ranks_per_node = 8
cores_per_node = {cores}

[compute]
; gridtrain's linear kernel (OpenBLAS sgemm), 2048^3, {cores} threads
peak_fp32 = {peak:.4g}
; bf16 (oneDNN) is not calibrated here: 0 keeps it out of the search
peak_bf16 = 0
peak_fp16 = 0
; RAM of the node, shared by its ranks
memory = {mem}
; a 256 MiB copy through the backend, {cores} threads (read + write)
memory_bw = {bw:.4g}

[network]
; MPI's all-reduce on {cores} ranks of shared memory (benchmarks/results/coll-table.txt)
intra_alpha = {alpha:.4g}
intra_beta = {beta:.4g}
gamma = {gamma:.4g}

[calibration]
; gridtrain's block kernels at 128-2048 tokens of dim 128 on 1 and {cores} threads:
; products, flash attention and memory-bound kernels against the peaks above
eff_matmul = {eff_mm:.3f}
eff_attention = {eff_att:.3f}
eff_mem = {eff_mem:.3f}
kernel_overhead = {over:.3g}
; the bandwidth is the measured one (beta), nothing to scale
eff_net = 1
; ranks beyond the cores: each message waits half a scheduler slice for its
; descheduled peer (the kernel's base slice {base*1e3:.2f} ms / 2)
oversub_alpha = {oversub:.3g}
p2p_overhead = 0
step_overhead = 0

[software]
attention = flash
dropout = off
pp_scatter_gather = off
sp_gather_overlap = off
stage_split = balanced
grad_bytes = 4
""")
with open(log, "w") as f:
    f.write(f"# benchmarks/plan/calibrate_cpu.sh, {now}, {model}, {cores} cores\n")
    f.write(f"# peak_fp32 {peak:.4g} FLOP/s, memory_bw {bw:.4g} B/s\n")
    f.write(f"# fit: eff_matmul {eff_mm:.3f}, eff_attention {eff_att:.3f}, eff_mem {eff_mem:.3f}, "
            f"kernel_overhead {over:.3g} s; median error {100*sorted(errs)[len(errs)//2]:.1f}%, "
            f"largest {100*max(errs):.1f}% over {len(used)} rows ({dropped} disturbed rows, "
            f"measured > 1.3 x the fit, left out: marked *)\n")
    f.write(f"# network (2 ranks): alpha {alpha:.4g} beta {beta:.4g} gamma {gamma:.4g}; "
            f"oversub_alpha {oversub:.3g} (half the scheduler's base slice {base*1e3:.2f} ms)\n")
    f.write(f"# {'kind':5} {'kernel':20} {'thr':>3} {'tokens':>6} {'measured':>10} {'fit':>10} {'error':>7}\n")
    for r, p in zip(fit, pred):
        f.write(f"{' ' if r in used else '*'} {r['kind']:5} {r['name']:20} {r['threads']:3d} {r['tokens']:6d} "
                f"{r['seconds']*1e6:8.1f}us {p*1e6:8.1f}us {100*(p-r['seconds'])/r['seconds']:+6.1f}%\n")
print(open(log).read())
print(f"wrote {out}")
PY
