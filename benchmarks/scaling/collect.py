#!/usr/bin/env python3
"""collect.py - the CSV, table and plots of a scaling sweep
(benchmarks/scaling/gen_points.py + jobscripts/scaling.sbatch).

    collect.py SWEEP.tsv OUTDIR [OUTDIR...] [--name NAME] [--results DIR]
    collect.py --fit "1:1 2:1.82 4:3.08"     # only the Amdahl fit of N:S pairs

For each point it reads OUTDIR/NAME.jsonl (gridtrain's [run] metrics) and
NAME.status, leaves out the first --warmup steps (default: the sweep's) and
takes the median over the rest of the step time, tokens/s and rank 0's split
of the step (compute, comm, bubble, data; other = the step less those four).
Rank 0 is DP 0, stage 0, TP 0: the split is the first stage's view. With
several OUTDIRs (the same sweep run more than once) each point's fastest run
counts (best of k; `runs` and `step_ms_worst` in the CSV show the spread).

  strong  speedup S = T1 / TN, efficiency S / N, where T1 is the step time
          of the fastest 1-rank point of the same mode;
  weak    efficiency (tokens/s / N) / (tokens/s at 1 rank), and the scaled
          speedup tokens/s / tokens/s at 1 rank.

A sweep line of mode strong+weak (the same run in both sweeps) gives a row
in each. The best point at a rank count is the one with the most tokens/s. Amdahl's
law S(N) = 1 / (s + (1 - s) / N) is fitted to the best strong point of each
rank count by least squares on S (Gauss-Newton in s from the linear estimate
on 1/S), and s printed; the Karp-Flatt serial fraction of each point,
(1/S - 1/N) / (1 - 1/N), is in the CSV.

Writes RESULTS/scaling-NAME.csv, scaling-NAME-throughput.png (tokens/s,
speedup and efficiency against ranks, with the fitted law) and
scaling-NAME-split.png (the step split as stacked bars, one per point).
Needs numpy and matplotlib (Debian: python3-numpy python3-matplotlib; run
with /usr/bin/python3).
"""
import argparse
import csv
import json
import math
import os
import socket
import statistics
import sys
import textwrap

CSV_COLUMNS = ["name", "mode", "ranks", "dp", "pp", "tp", "microbatches", "schedule", "zero",
               "batch", "status", "timed_steps", "step_ms", "tokens_per_s",
               "tokens_per_s_per_rank", "compute_ms", "comm_ms", "bubble_ms", "data_ms",
               "other_ms", "compute_pct", "comm_pct", "bubble_pct", "data_pct", "other_pct",
               "speedup", "efficiency", "karp_flatt", "best", "runs", "step_ms_worst",
               "load_start", "load_end", "wall_s", "cpu_s", "cores_used"]
SPLIT = ("compute", "comm", "bubble", "data", "other")


def die(msg):
    print(f"collect.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ---- Amdahl's law ----------------------------------------------------------------
def amdahl(n, s):
    return 1.0 / (s + (1.0 - s) / n)


def amdahl_fit(ns, speedups):
    """Least-squares serial fraction s of S(N) = 1/(s + (1-s)/N).

    Returns (s, rms residual of S), or (None, None) with fewer than one
    point at N > 1. s may come out negative (superlinear speedup) but stays
    above -1/(Nmax-1), where the law has its pole.
    """
    pts = [(float(n), float(sp)) for n, sp in zip(ns, speedups) if n > 1 and sp > 0]
    if not pts:
        return None, None
    # Linear estimate: 1/S = 1/N + s (1 - 1/N).
    num = sum((1 / sp - 1 / n) * (1 - 1 / n) for n, sp in pts)
    den = sum((1 - 1 / n) ** 2 for n, _ in pts)
    lower = max(-1.0 / (n - 1) for n, _ in pts) * (1 - 1e-9)
    s = min(max(num / den, lower * 0.5), 1.0)

    def cost(x):
        return sum((sp - amdahl(n, x)) ** 2 for n, sp in pts)

    f = cost(s)
    for _ in range(200):
        jr = jj = 0.0
        for n, sp in pts:
            a = amdahl(n, s)
            j = -(1 - 1 / n) * a * a  # dS/ds
            jr += j * (sp - a)
            jj += j * j
        if jj == 0:
            break
        step = jr / jj
        while True:
            cand = min(max(s + step, lower), 1.0)
            fc = cost(cand)
            if fc <= f or abs(step) < 1e-18:
                break
            step /= 2
        done = abs(cand - s) <= 1e-15 * max(1.0, abs(s))
        s, f = cand, min(f, fc)
        if done:
            break
    return s, math.sqrt(f / len(pts))


def parse_pairs(text):
    ns, ss = [], []
    for item in text.replace(",", " ").split():
        try:
            n, sp = item.split(":")
            ns.append(float(n))
            ss.append(float(sp))
        except ValueError:
            die(f"--fit: '{item}' is not N:SPEEDUP")
    return ns, ss


# ---- reading the sweep ------------------------------------------------------------
def read_sweep(path):
    meta, points, header = {}, [], None
    try:
        f = open(path)
    except OSError as e:
        die(f"cannot read the sweep file: {e}")
    with f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("#"):
                key, _, val = line[1:].partition("\t")
                if val:
                    meta[key] = val
                continue
            fields = line.split("\t")
            if header is None:
                header = fields
                continue
            p = dict(zip(header, fields))
            for k in ("index", "ranks", "dp", "pp", "tp", "microbatches", "zero", "batch"):
                p[k] = int(p[k])
            # a strong+weak line is one run that counts in both sweeps
            for mode in p["mode"].split("+"):
                points.append(dict(p, mode=mode))
    if not points:
        die(f"'{path}' has no points")
    return meta, points


def read_status(path):
    st = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                st[k] = v
    except OSError:
        pass
    return st


def load_point(outdir, p, warmup):
    """Adds the medians of the timed steps to p; p['status'] says what happened."""
    st = read_status(os.path.join(outdir, p["name"] + ".status"))
    p["_status"] = st
    recs = []
    try:
        with open(os.path.join(outdir, p["name"] + ".jsonl")) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "step" in r and not r.get("summary"):
                    recs.append(r)
    except OSError:
        pass
    if not st and not recs:
        p["status"] = "missing"
        return
    for k in ("load_start", "load_end", "wall_s"):
        if st.get(k):
            p[k] = st[k]
    # NAME.cpu: "wall user system" seconds of each rank (GNU time)
    walls, cpu = [], 0.0
    try:
        with open(os.path.join(outdir, p["name"] + ".cpu")) as f:
            for line in f:
                parts = line.split()
                try:
                    w, u, s = (float(x) for x in parts)
                except ValueError:
                    continue  # "Command exited with non-zero status", etc.
                walls.append(w)
                cpu += u + s
    except OSError:
        pass
    if walls and max(walls) > 0:
        p["cpu_s"] = cpu
        p["cores_used"] = cpu / max(walls)
    if st.get("rc", "0") != "0":
        p["status"] = f"failed rc={st.get('rc')}"
        return
    timed = [r for r in recs if r["step"] >= warmup and r.get("step_ms")]
    if not timed:
        p["status"] = "no timed steps"
        return
    p["status"] = "ok"
    p["timed_steps"] = len(timed)

    def med(key):
        vals = [r[key] for r in timed if isinstance(r.get(key), (int, float))]
        return statistics.median(vals) if vals else 0.0

    p["step_ms"] = med("step_ms")
    p["tokens_per_s"] = med("tokens_per_s")
    p["tokens_per_s_per_rank"] = p["tokens_per_s"] / p["ranks"]
    for k in SPLIT[:-1]:
        p[f"{k}_ms"] = med(f"{k}_ms")
    p["other_ms"] = max(0.0, p["step_ms"] - sum(p[f"{k}_ms"] for k in SPLIT[:-1]))
    for k in SPLIT:
        p[f"{k}_pct"] = 100 * p[f"{k}_ms"] / p["step_ms"] if p["step_ms"] > 0 else 0.0


def load_best(outdirs, p, warmup):
    """load_point from each results directory (repeats of the sweep); keeps
    the run with the shortest median step, the usual best-of-k on a shared
    machine, and notes how many ran and the slowest of them."""
    runs = []
    for d in outdirs:
        q = dict(p)
        load_point(d, q, warmup)
        runs.append(q)
    ok = [q for q in runs if q["status"] == "ok"]
    pick = min(ok, key=lambda q: q["step_ms"]) if ok else runs[0]
    p.clear()
    p.update(pick)
    p["runs"] = len(ok)
    if ok:
        p["step_ms_worst"] = max(q["step_ms"] for q in ok)


def derive(points):
    """Speedup, efficiency, Karp-Flatt and the best point per (mode, ranks)."""
    ok = [p for p in points if p["status"] == "ok"]
    best = {}
    for p in ok:
        key = (p["mode"], p["ranks"])
        if key not in best or p["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = p
    for p in points:
        p["best"] = 1 if best.get((p["mode"], p["ranks"])) is p else 0
    for p in ok:
        ref = best.get((p["mode"], 1))
        if not ref:
            continue
        n = p["ranks"]
        if p["mode"] == "strong":
            p["speedup"] = ref["step_ms"] / p["step_ms"]
        else:
            p["speedup"] = p["tokens_per_s"] / ref["tokens_per_s"]
        p["efficiency"] = p["speedup"] / n
        if n > 1 and p["speedup"] > 0:
            p["karp_flatt"] = (1 / p["speedup"] - 1 / n) / (1 - 1 / n)
    return best


def fmt(v):
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.6f}" if abs(v) < 1e6 else f"{v:.1f}"
    return str(v)


def write_csv(path, points):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for p in points:
            w.writerow([fmt(p.get(c, "")) for c in CSV_COLUMNS])


def layout_label(p):
    lab = f"{p['dp']}x{p['pp']}x{p['tp']}"
    if p["pp"] > 1:
        lab += f" m{p['microbatches']} {p['schedule']}"
    if p["dp"] > 1 and p["zero"]:
        lab += f" z{p['zero']}"
    return lab


def print_table(points, best, fit, meta, cores, strong_best):
    print(f"# gridtrain scaling sweep: {meta.get('deck', '?')} ({meta.get('shape', '?')})")
    print(f"# {meta.get('batch', '')}; warm-up steps left out: {meta.get('warmup', '?')}; "
          f"cores {cores} (ranks beyond share them)")
    print("# layout DPxPPxTP [micro-batches schedule] [zero]; ms and tok/s: medians of the "
          "timed steps; split: rank 0's compute/comm/bubble/data/other %")
    print("# load: 1-minute load average before the point; cores: CPU seconds of its ranks / "
          "their wall time (whole run, start-up included)")
    print(f"{'mode':6} {'N':>2} {'layout':22} {'ms/step':>9} {'tok/s':>9} {'speedup':>7} "
          f"{'eff':>6}  {'compute/comm/bubble/data/other %':32} {'load':>5} {'cores':>5} best")
    for p in points:
        if p["status"] != "ok":
            print(f"{p['mode']:6} {p['ranks']:2d} {layout_label(p):22} {p['status']}")
            continue
        split = "/".join(f"{p[k + '_pct']:.0f}" for k in SPLIT)
        sp = f"{p['speedup']:7.2f}" if "speedup" in p else f"{'':7}"
        ef = f"{p['efficiency']:6.2f}" if "efficiency" in p else f"{'':6}"
        print(f"{p['mode']:6} {p['ranks']:2d} {layout_label(p):22} {p['step_ms']:9.1f} "
              f"{p['tokens_per_s']:9.0f} {sp} {ef}  {split:32} {p.get('load_start', ''):>5} "
              f"{format(p['cores_used'], '5.2f') if 'cores_used' in p else '    -'} "
              f"{'*' if p['best'] else ''}")
    s, rms = fit
    if s is not None:
        print(f"# Amdahl fit (best strong point per rank count): serial fraction s = {s:.4f} "
              f"(max speedup 1/s = {1 / s:.1f}), rms residual of S {rms:.3f}"
              if s > 0 else
              f"# Amdahl fit (best strong point per rank count): serial fraction s = {s:.4f} "
              f"(no serial bound), rms residual of S {rms:.3f}")
        print(f"amdahl_s={s:.12g}")
        within = [p for p in strong_best if 1 < p["ranks"] <= cores]
        if cores and within and len(within) < len(strong_best) - 1:
            sc, _ = amdahl_fit([1] + [p["ranks"] for p in within],
                               [1] + [p["speedup"] for p in within])
            print(f"# the same fit over N <= {cores} (the cores) only: s = {sc:.4f}; beyond the "
                  "cores the speedup is capped by them, which the law then reads as serial work")
    else:
        print("# Amdahl fit: needs a strong 1-rank point and one at N > 1")


# ---- plots ------------------------------------------------------------------------------
def plots(points, best, fit, meta, cores, title, out_tp, out_split):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.transforms
    import numpy as np

    ok = [p for p in points if p["status"] == "ok"]
    modes = [m for m in ("strong", "weak") if any(p["mode"] == m for p in ok)]
    colours = {"strong": "tab:blue", "weak": "tab:orange"}
    marks = {"strong": "o", "weak": "^"}
    maxn = max(p["ranks"] for p in points)
    nn = np.linspace(1, maxn, 200)
    s, _ = fit

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    ax_t, ax_s, ax_e = axes
    for ax in axes:
        if cores and cores < maxn:
            ax.axvspan(cores + 0.5, maxn + 0.5, color="0.92", zorder=0)
        ax.set_xlabel("MPI ranks N")
        ax.set_xticks(range(1, maxn + 1))
        ax.set_xlim(0.5, maxn + 0.5)
        ax.grid(True, alpha=0.3)
    for m in modes:
        pts = [p for p in ok if p["mode"] == m]
        b = sorted((v for k, v in best.items() if k[0] == m), key=lambda p: p["ranks"])
        ax_t.scatter([p["ranks"] for p in pts], [p["tokens_per_s"] for p in pts],
                     s=14, color=colours[m], alpha=0.3, marker=marks[m],
                     label=f"{m}: every layout")
        ax_t.plot([p["ranks"] for p in b], [p["tokens_per_s"] for p in b], "-" + marks[m],
                  color=colours[m], label=f"{m}: best layout")
        with_eff = [p for p in pts if "efficiency" in p]
        bw = [p for p in b if "efficiency" in p]
        ax_e.scatter([p["ranks"] for p in with_eff], [p["efficiency"] for p in with_eff],
                     s=14, color=colours[m], alpha=0.3, marker=marks[m])
        ax_e.plot([p["ranks"] for p in bw], [p["efficiency"] for p in bw], "-" + marks[m],
                  color=colours[m],
                  label=f"{m}: " + ("T1/(N TN)" if m == "strong" else "(tok/s/N)/tok/s(1)"))
        if m == "strong":
            ax_s.scatter([p["ranks"] for p in with_eff], [p["speedup"] for p in with_eff],
                         s=14, color=colours[m], alpha=0.3, marker=marks[m],
                         label="strong: every layout")
            ax_s.plot([p["ranks"] for p in bw], [p["speedup"] for p in bw], "-" + marks[m],
                      color=colours[m], label="strong: best layout")
            ref = best.get(("strong", 1))
            if ref:
                ax_t.plot(nn, ref["tokens_per_s"] * nn, ":", color="0.5", lw=1,
                          label="ideal (strong)")
                if s is not None:
                    ax_t.plot(nn, ref["tokens_per_s"] * amdahl(nn, s), "--", color="tab:red",
                              label=f"Amdahl fit, s = {s:.3f}")
    ax_s.plot(nn, nn, ":", color="0.5", lw=1, label="ideal S = N")
    ax_e.axhline(1.0, ls=":", color="0.5", lw=1, label="ideal")
    if s is not None:
        ax_s.plot(nn, amdahl(nn, s), "--", color="tab:red",
                  label=f"Amdahl fit: S = 1/(s + (1-s)/N), s = {s:.3f}")
        ax_e.plot(nn, amdahl(nn, s) / nn, "--", color="tab:red", label=f"Amdahl, s = {s:.3f}")
    ax_t.set_ylabel("tokens/s (median step)")
    ax_t.set_title("throughput")
    ax_s.set_ylabel("speedup T1 / TN (fixed global batch)")
    ax_s.set_title("strong scaling: speedup")
    ax_e.set_ylabel("parallel efficiency")
    ax_e.set_title("efficiency")
    top = max([1.1] + [p["efficiency"] for p in ok if "efficiency" in p])
    ax_e.set_ylim(0, top * 1.05)
    ax_t.set_ylim(bottom=0)
    ax_s.set_ylim(0, maxn + 0.5)
    for ax in axes:
        if cores and cores < maxn:
            ax.text(cores + 0.6, 0.015, f"grey: ranks > {cores} cores, oversubscribed",
                    transform=matplotlib.transforms.blended_transform_factory(ax.transData,
                                                                               ax.transAxes),
                    va="bottom", fontsize=7.5, color="0.35")
    ax_t.legend(fontsize=7.5, loc="upper left")
    ax_s.legend(fontsize=7.5, loc="upper left")
    ax_e.legend(fontsize=7.5, loc="upper right")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out_tp, dpi=110)
    plt.close(fig)

    # The split: one stacked bar per point, grouped by mode, sorted by ranks.
    colours_split = {"compute": "tab:green", "comm": "tab:blue", "bubble": "tab:orange",
                     "data": "tab:purple", "other": "0.7"}
    fig, axes = plt.subplots(len(modes), 1, squeeze=False,
                             figsize=(max(10, 0.3 * max(sum(p["mode"] == m for p in ok)
                                                        for m in modes) + 3),
                                      5.2 * len(modes)))
    for ax, m in zip(axes[:, 0], modes):
        pts = sorted((p for p in ok if p["mode"] == m),
                     key=lambda p: (p["ranks"], p["step_ms"]))
        x = np.arange(len(pts))
        bottom = np.zeros(len(pts))
        for k in SPLIT:
            vals = np.array([p[f"{k}_ms"] for p in pts])
            ax.bar(x, vals, bottom=bottom, color=colours_split[k], width=0.8, label=k)
            bottom += vals
        ax.set_xlim(-0.6, len(pts) - 0.4)
        ax.set_xticks(x)
        ax.set_xticklabels([f"N={p['ranks']} {layout_label(p)}" + (" *" if p["best"] else "")
                            for p in pts], rotation=90, fontsize=7)
        for i, p in enumerate(pts):
            if i and p["ranks"] != pts[i - 1]["ranks"]:
                ax.axvline(i - 0.5, color="0.3", lw=0.6)
        ax.set_ylabel("ms per step (rank 0, medians)")
        batch = [b.strip() for b in meta.get("batch", "").split(";") if b.strip().startswith(m)]
        ax.set_title(f"{m} scaling ({batch[0] if batch else ''}): where rank 0's step goes, "
                     f"layout DPxPPxTP, * best at its N", fontsize=9)
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_ylim(0, max(bottom) * 1.08 if len(bottom) else 1)
    width = fig.get_size_inches()[0]
    fig.suptitle(textwrap.fill(title, int(width * 11)), fontsize=11)
    fig.tight_layout()
    fig.savefig(out_split, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("sweep", nargs="?", help="the sweep file (gen_points.py)")
    ap.add_argument("outdir", nargs="*", help="the points' results (scaling.sbatch); several: "
                    "repeats of the sweep, the fastest run of each point counts")
    ap.add_argument("--name", help="results are scaling-NAME.*; default the sweep's base name")
    ap.add_argument("--results", default=".", help="directory for the CSV and PNGs (default .)")
    ap.add_argument("--warmup", type=int, help="steps left out (default: the sweep's #warmup)")
    ap.add_argument("--title", help="title of the plots")
    ap.add_argument("--cores", type=int, help="cores of the node (default: from the points)")
    ap.add_argument("--no-plots", action="store_true", help="CSV and table only")
    ap.add_argument("--fit", metavar="PAIRS",
                    help="only fit Amdahl's law to 'N:S N:S ...' and print s")
    args = ap.parse_args()

    if args.fit is not None:
        ns, ss = parse_pairs(args.fit)
        s, rms = amdahl_fit(ns, ss)
        if s is None:
            die("--fit needs a speedup at some N > 1")
        print(f"amdahl_s={s:.12g}")
        print(f"rms={rms:.6g}")
        return 0
    if not args.sweep or not args.outdir:
        ap.error("SWEEP and OUTDIR are required (or --fit)")
    for d in args.outdir:
        if not os.path.isdir(d):
            die(f"no results directory '{d}'")
    meta, points = read_sweep(args.sweep)
    warmup = args.warmup if args.warmup is not None else int(meta.get("warmup", "0"))
    for p in points:
        load_best(args.outdir, p, warmup)
    best = derive(points)
    strong_best = sorted((v for k, v in best.items() if k[0] == "strong" and "speedup" in v),
                         key=lambda p: p["ranks"])
    fit = amdahl_fit([p["ranks"] for p in strong_best], [p["speedup"] for p in strong_best])
    cores = args.cores
    if not cores:
        cs = [int(p["_status"]["cores"]) for p in points if p["_status"].get("cores", "").isdigit()]
        cores = max(cs) if cs else os.cpu_count()
    name = args.name or os.path.splitext(os.path.basename(args.sweep))[0]
    os.makedirs(args.results, exist_ok=True)
    stem = os.path.join(args.results, f"scaling-{name}")
    write_csv(stem + ".csv", points)
    print_table(points, best, fit, meta, cores, strong_best)
    hosts = sorted({p["_status"].get("host") for p in points if p["_status"].get("host")})
    launchers = sorted({p["_status"].get("launcher") for p in points
                        if p["_status"].get("launcher")})
    title = args.title or (f"gridtrain scaling, {name}: {meta.get('shape', '')}, "
                           f"{meta.get('batch', '')}; {', '.join(hosts) or socket.gethostname()} "
                           f"({cores} cores), {'/'.join(launchers)}")
    written = [stem + ".csv"]
    if not args.no_plots:
        plots(points, best, fit, meta, cores, title, stem + "-throughput.png", stem + "-split.png")
        written += [stem + "-throughput.png", stem + "-split.png"]
    print("# wrote " + " ".join(written))
    bad = [p for p in points if p["status"] != "ok"]
    if bad:
        print(f"# {len(bad)} of {len(points)} points have no result: " +
              ", ".join(f"{p['name']} ({p['status']})" for p in bad[:5]), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
