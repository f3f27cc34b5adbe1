#!/usr/bin/env python3
"""coll_fit.py - fit the collective cost model to bench_coll's CSV rows.

For every algorithm and rank count it fits alpha (s per message), beta (s
per byte on the link) and gamma (s per byte reduced) of

    t = alpha * c_alpha + beta * c_beta + gamma * c_gamma

where the c are the model's coefficients of each row (gt_algo_cost, written
by bench_coll), over the rows of all four operations at once (an
all-reduce's link and reduction terms are proportional to each other, so
only the all-gather and broadcast rows, which reduce nothing, tell beta from
gamma), minimising the relative error, with all three kept >= 0. Rank counts
are fitted apart: ranks that share cores (np > cores here) are another
machine than ranks that do not. It writes the table that
[parallel] allreduce = auto and the planner read, a PNG of bus bandwidth
against size, and a summary of our best algorithm against MPI's own.

usage: coll_fit.py CSV... [--table FILE] [--plot FILE.png] [--min-bytes B]
"""
import argparse
import csv
import math
import sys
from collections import defaultdict

import numpy as np

OPS = ["allreduce", "reduce_scatter", "allgather", "bcast"]
ALGOS = ["mpi", "ring", "tree", "halving"]


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for r in csv.DictReader(f):
                for k in ("np", "iters", "window", "seg_bytes"):
                    r[k] = int(r[k])
                for k in ("bytes", "seconds", "algbw_GBs", "busbw_GBs", "c_alpha", "c_beta",
                          "c_gamma"):
                    r[k] = float(r[k])
                rows.append(r)
    return rows


def nnls_rel(A, t):
    """min ||(A x - t) / t|| with x >= 0, by dropping negative terms."""
    W = A / t[:, None]
    b = np.ones(len(t))
    active = [j for j in range(A.shape[1]) if np.any(A[:, j] != 0)]
    while True:
        x = np.zeros(A.shape[1])
        if active:
            sol, *_ = np.linalg.lstsq(W[:, active], b, rcond=None)
            x[active] = sol
        neg = [j for j in active if x[j] < 0]
        if not neg:
            return x
        active.remove(min(neg, key=lambda j: x[j]))


def fit(rows, min_bytes):
    """{(algo, np): (x, {op: (median, worst, rows)})}"""
    groups = defaultdict(list)
    for r in rows:
        if r["bytes"] >= min_bytes:
            groups[(r["algo"], r["np"])].append(r)
    out = {}
    for key, rs in groups.items():
        A = np.array([[r["c_alpha"], r["c_beta"], r["c_gamma"]] for r in rs])
        t = np.array([r["seconds"] for r in rs])
        x = nnls_rel(A, t)
        rel = np.abs(A @ x - t) / t
        per_op = {}
        for op in OPS:
            sel = np.array([r["op"] == op for r in rs])
            if sel.any():
                per_op[op] = (float(np.median(rel[sel])), float(np.max(rel[sel])), int(sel.sum()))
        out[key] = (x, per_op)
    return out


def write_table(path, fits, rows):
    with open(path, "w") as f:
        f.write("# gridtrain collective cost model: OP ALGO NP ALPHA BETA GAMMA\n")
        f.write("# seconds per message, per byte on the link, per byte reduced; fitted by\n")
        f.write("# benchmarks/coll_fit.py to bench_coll rows, per algorithm and rank count\n")
        for (algo, p) in sorted(fits, key=lambda k: (k[1], ALGOS.index(k[0]))):
            x, per_op = fits[(algo, p)]
            for op, (med, worst, n) in per_op.items():
                f.write(f"{op} {algo} {p} {x[0]:.6e} {x[1]:.6e} {x[2]:.6e}"
                        f"  # {n} rows, median error {100 * med:.0f}%, worst {100 * worst:.0f}%\n")


def plot(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    nps = sorted({r["np"] for r in rows})
    fig, axes = plt.subplots(len(OPS), len(nps), figsize=(4.2 * len(nps), 3.2 * len(OPS)),
                             squeeze=False)
    for i, op in enumerate(OPS):
        for j, p in enumerate(nps):
            ax = axes[i][j]
            for algo in ALGOS:
                pts = sorted((r["bytes"], r["busbw_GBs"]) for r in rows
                             if r["op"] == op and r["np"] == p and r["algo"] == algo)
                if pts:
                    ax.plot([a for a, _ in pts], [b for _, b in pts], marker=".",
                            label=algo if algo != "mpi" else "MPI (MPICH)")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{op}, np = {p}", fontsize=9)
            ax.set_xlabel("bytes")
            ax.set_ylabel("bus bandwidth, GB/s")
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summary(rows):
    """Our best algorithm against MPI's own, per operation and rank count."""
    by = defaultdict(dict)
    for r in rows:
        by[(r["op"], r["np"], r["bytes"])][r["algo"]] = r["busbw_GBs"]
    print("# op             np      bytes   MPI GB/s  best ours        GB/s   ratio")
    for (op, p, b) in sorted(by, key=lambda k: (OPS.index(k[0]), k[1], k[2])):
        d = by[(op, p, b)]
        ours = {a: v for a, v in d.items() if a != "mpi"}
        if "mpi" not in d or not ours or b < 1 << 20:
            continue
        best = max(ours, key=ours.get)
        print(f"  {op:14s} {p:3d} {b:10.0f} {d['mpi']:10.3f}  {best:9s} {ours[best]:10.3f} "
              f"{ours[best] / d['mpi']:7.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--table")
    ap.add_argument("--plot")
    ap.add_argument("--min-bytes", type=float, default=0)
    a = ap.parse_args()
    rows = load(a.csv)
    if not rows:
        sys.exit("coll_fit.py: no rows")
    fits = fit(rows, a.min_bytes)
    for (algo, p), (x, per_op) in sorted(fits.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        errs = " ".join(f"{op} {100 * m:.0f}%" for op, (m, _, _) in per_op.items())
        print(f"# fit np={p} {algo:8s} alpha {x[0] * 1e6:8.2f} us  beta {x[1] * 1e9:7.4f} ns/B "
              f"({1 / x[1] / 1e9 if x[1] > 0 else math.inf:6.2f} GB/s)  gamma {x[2] * 1e9:7.4f} "
              f"ns/B  median errors: {errs}")
    if a.table:
        write_table(a.table, fits, rows)
    if a.plot:
        plot(a.plot, rows)
    summary(rows)


if __name__ == "__main__":
    main()
