#!/usr/bin/env python3
"""comm_modes_report.py - the table and loss plot of run_comm_modes.sh.

For every mode: bytes rank 0 sent per step (mean), the exposed data-parallel
time per step (mean dp_exposed_ms of rank 0), tokens/s (median step), the
final training loss (mean of the last tenth of the steps) and the validation
loss at the end, each against the synchronous fp32 run; a mode "reaches" the
synchronous loss when its final validation loss is within 2% of it.
"""
import argparse
import csv
import json
import os
import statistics


def load(path):
    steps, summary = [], None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("summary"):
                summary = r
            else:
                steps.append(r)
    return steps, summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("modes", nargs="+")
    a = ap.parse_args()
    rows = []
    curves = {}
    for mode in a.modes:
        tag = mode.replace(":", "_").replace("=", "_").replace(",", "_")
        steps, summary = load(os.path.join(a.out, f"{a.name}-{tag}.jsonl"))
        tail = steps[-max(1, len(steps) // 10):]
        val = [r["val_loss"] for r in steps if "val_loss" in r]
        rows.append({
            "mode": mode,
            "steps": len(steps),
            "bytes_per_step": statistics.mean(r["comm_bytes"] for r in steps),
            "dp_exposed_ms": statistics.mean(r["dp_exposed_ms"] for r in steps),
            "step_ms": statistics.median(r["step_ms"] for r in steps),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps),
            "train_loss": statistics.mean(r["loss"] for r in tail),
            "val_loss": val[-1] if val else float("nan"),
        })
        curves[mode] = [(r["step"], r["loss"]) for r in steps]
    base = rows[0]
    for r in rows:
        r["bytes_vs_sync"] = r["bytes_per_step"] / base["bytes_per_step"]
        r["val_vs_sync"] = r["val_loss"] / base["val_loss"] - 1
        r["within_2pct"] = abs(r["val_vs_sync"]) <= 0.02
    path = os.path.join(a.out, f"{a.name}-modes.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"# {a.name}: {base['steps']} steps per mode; against {base['mode']}")
    print(f"# {'mode':22s} {'bytes/step':>12s} {'x sync':>7s} {'dp exp ms':>9s} "
          f"{'tok/s':>8s} {'train':>7s} {'val':>7s} {'val vs':>7s}  within 2%")
    for r in rows:
        print(f"  {r['mode']:22s} {r['bytes_per_step']:12.0f} {r['bytes_vs_sync']:7.3f} "
              f"{r['dp_exposed_ms']:9.2f} {r['tokens_per_s']:8.0f} {r['train_loss']:7.4f} "
              f"{r['val_loss']:7.4f} {100 * r['val_vs_sync']:+6.2f}%  "
              f"{'yes' if r['within_2pct'] else 'no'}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for mode, pts in curves.items():
        k = 10  # a moving mean: the modes differ by less than a step's noise
        xs = [s for s, _ in pts][k - 1:]
        ys = [statistics.mean(l for _, l in pts[i - k + 1:i + 1]) for i in range(k - 1, len(pts))]
        ax.plot(xs, ys, label=mode, lw=2 if mode == rows[0]["mode"] else 1)
    ax.set_xlabel("step (the same tokens per step for every mode)")
    ax.set_ylabel("training loss (moving mean of 10 steps)")
    ax.set_title(f"{a.name}: compression and sync modes against synchronous fp32")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, f"{a.name}-loss.png"), dpi=110)
    print(f"# wrote {path} and {a.name}-loss.png")


if __name__ == "__main__":
    main()
