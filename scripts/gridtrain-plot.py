#!/usr/bin/python3
"""gridtrain-plot.py - one PNG of one or more training runs from their
JSON-lines metrics ([run] metrics), run by `gridtrain plot`.

  gridtrain plot RUN.jsonl... -o OUT.png [--size WxH] [--title TEXT]

Panels: training loss (thin: every step; thick: a moving average) and
validation loss (dots) against tokens seen; tokens/s against tokens, with
MFU on a second axis when the records carry "mfu"; and, one panel per run,
rank 0's step time split into compute, comm, bubble, data and the rest
(step_ms minus those four) as stacked areas against the step. Several runs
are overlaid in the top panels, one colour each, named by their file names.

Tokens seen after step s are (s + 1) x the tokens of a step, and the tokens
of a step are tokens_per_s x step_ms / 1000 (the global batch: both come
from the same step time). A record's "tokens" (cumulative), when present,
is used as it is.

Errors (a missing file, an empty file, a line that is not a JSON object, a
file without step records, no matplotlib) are one line on standard error,
"gridtrain-plot: error: ...", and exit status 2. A last line without its
newline that does not parse (a run still writing) is skipped with a warning.

Needs Python 3 with matplotlib and numpy (Debian: python3-matplotlib).
"""
import argparse
import json
import math
import os
import sys

PROG = "gridtrain-plot"
# rank 0's split of a step by kind (metrics.h); "other" is the rest of step_ms
SPLIT = ("compute", "comm", "bubble", "data")
SPLIT_COLOURS = {"compute": "tab:green", "comm": "tab:blue", "bubble": "tab:orange",
                 "data": "tab:purple", "other": "0.75"}


class PlotError(Exception):
    """Bad input: reported as one line, exit status 2."""


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


# ---- reading ----------------------------------------------------------------------
def number(rec, key, where):
    """The record's value of key as a float; NaN when absent or null."""
    v = rec.get(key)
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PlotError(f"{where}: \"{key}\" is {json.dumps(v)[:40]}, not a number")
    return float(v)


def read_run(path):
    """The step records (dicts of floats, one per step, the last record of a
    step winning: a resumed run appends) and the last summary of a file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PlotError(f"cannot read {path}: {e.strerror}") from None
    if not data.strip():
        raise PlotError(f"{path} is empty (no JSON lines)")
    lines = data.split(b"\n")
    partial = not data.endswith(b"\n")
    steps, summary = {}, None
    keys = ("loss", "val_loss", "tokens_per_s", "step_ms", "tokens", "mfu") + \
        tuple(k + "_ms" for k in SPLIT)
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{path}:{i}"
        try:
            rec = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            if partial and i == len(lines):
                warn(f"{where}: skipping the unfinished last line (a run still writing?)")
                continue
            raise PlotError(f"{where}: not JSON ({str(e).split(':')[0]})") from None
        if not isinstance(rec, dict):
            raise PlotError(f"{where}: not a JSON object")
        if rec.get("summary") is True:
            summary = rec
            continue
        if "step" not in rec:
            continue  # a record of another kind: not ours to plot
        step = rec["step"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise PlotError(f"{where}: \"step\" is {json.dumps(step)[:40]}, "
                            "not a step number")
        if "loss" not in rec:
            raise PlotError(f"{where}: a step record without \"loss\"")
        steps[step] = dict({k: number(rec, k, where) for k in keys}, step=step)
    if not steps:
        raise PlotError(f"{path} has no step records (is it a gridtrain [run] metrics file?)")
    return [steps[s] for s in sorted(steps)], summary


def run_names(paths):
    """Legend names: the file names without .jsonl, or the paths where those clash."""
    stems = [os.path.basename(p)[:-6] if p.endswith(".jsonl") else os.path.basename(p)
             for p in paths]
    names = [p if stems.count(s) > 1 else s for p, s in zip(paths, stems)]
    # matplotlib leaves labels that start with "_" out of legends
    return ["\u200b" + n if n.startswith("_") else n for n in names]


# ---- numbers ----------------------------------------------------------------------
def column(np, recs, key):
    return np.array([r[key] for r in recs], dtype=float)


def tokens_seen(np, recs):
    """Tokens after each step record, or None when the records cannot say."""
    tok = column(np, recs, "tokens")
    if np.all(np.isfinite(tok)):
        return tok
    per = column(np, recs, "tokens_per_s") * column(np, recs, "step_ms") / 1e3
    per = per[np.isfinite(per) & (per > 0)]
    if not len(per):
        return None
    return (column(np, recs, "step") + 1) * float(np.round(np.median(per)))


def smooth(np, y, width):
    """Centred moving average over width points, ignoring NaNs; the window
    narrows towards the ends so that it stays centred (the first point is
    itself, not the mean of the next width/2)."""
    n = len(y)
    if width <= 1 or n < 3:
        return y
    ok = np.isfinite(y)
    csum = np.concatenate(([0.0], np.cumsum(np.where(ok, y, 0.0))))
    ccnt = np.concatenate(([0], np.cumsum(ok)))
    i = np.arange(n)
    half = np.minimum(np.minimum(i, n - 1 - i), width // 2)
    lo, hi = i - half, i + half + 1
    cnt = ccnt[hi] - ccnt[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, (csum[hi] - csum[lo]) / cnt, np.nan)


def window(n):
    return max(1, int(round(n / 40)))


def human(x, _pos=None):
    """Axis labels in k/M/G."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


# ---- drawing ----------------------------------------------------------------------
def draw(runs, out, size, title):
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # "$" in a file name or title is text
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    w_px, h_px = size
    dpi = 100
    fig = plt.figure(figsize=(w_px / dpi, h_px / dpi), dpi=dpi)
    n = len(runs)
    split_cols = min(n, 4)
    split_rows = (n + split_cols - 1) // split_cols
    outer = fig.add_gridspec(2, 1, height_ratios=[1.25, split_rows], hspace=0.28,
                             left=0.06, right=0.94, top=0.92, bottom=0.09)
    top = outer[0].subgridspec(1, 2, wspace=0.22)
    ax_loss = fig.add_subplot(top[0])
    ax_tput = fig.add_subplot(top[1])
    bottom = outer[1].subgridspec(split_rows, split_cols, wspace=0.16, hspace=0.45)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    ax_mfu = None
    any_val = False
    split_handles = None
    for i, run in enumerate(runs):
        c = colours[i % len(colours)]
        recs, x = run["recs"], run["x"]
        wdw = window(len(recs))
        loss = column(np, recs, "loss")
        label = run["name"]
        s = run["summary"]
        if s and isinstance(s.get("final_loss"), (int, float)):
            label += f" (final {s['final_loss']:.3f}"
            if isinstance(s.get("final_val_loss"), (int, float)):
                label += f", val {s['final_val_loss']:.3f}"
            label += ")"
        ax_loss.plot(x, loss, color=c, lw=0.6, alpha=0.35)
        ax_loss.plot(x, smooth(np, loss, wdw), color=c, lw=1.8, label=label)
        val = column(np, recs, "val_loss")
        vm = np.isfinite(val)
        if vm.any():
            any_val = True
            ax_loss.plot(x[vm], val[vm], "o--", color=c, ms=5, lw=1, mec="k", mew=0.5)

        tps = column(np, recs, "tokens_per_s")
        ax_tput.plot(x, tps, color=c, lw=0.6, alpha=0.35)
        ax_tput.plot(x, smooth(np, tps, wdw), color=c, lw=1.8,
                     label=f"{run['name']}: median {human(np.nanmedian(tps))} tok/s")
        mfu = column(np, recs, "mfu")
        if np.isfinite(mfu).any():
            if ax_mfu is None:
                ax_mfu = ax_tput.twinx()
            # a fraction of the peak (0-1), shown in percent
            pct = mfu * 100 if np.nanmax(mfu) <= 1.5 else mfu
            ax_mfu.plot(x, smooth(np, pct, wdw), "--", color=c, lw=1.4,
                        label=f"{run['name']}: MFU")

        ax = fig.add_subplot(bottom[i // split_cols, i % split_cols])
        step = column(np, recs, "step")
        parts = [np.nan_to_num(smooth(np, column(np, recs, k + "_ms"), wdw)) for k in SPLIT]
        total = smooth(np, column(np, recs, "step_ms"), wdw)
        other = np.clip(np.nan_to_num(total) - sum(parts), 0, None)
        split_handles = ax.stackplot(step, *parts, other,
                                     colors=[SPLIT_COLOURS[k] for k in SPLIT + ("other",)],
                                     labels=SPLIT + ("other",), alpha=0.9, lw=0)
        raw = column(np, recs, "step_ms")
        mean = {k: np.nanmean(column(np, recs, k + "_ms")) for k in SPLIT}
        mstep = np.nanmean(raw)
        share = " ".join(f"{k} {100 * mean[k] / mstep:.0f}%" for k in SPLIT) if mstep > 0 else ""
        avg = f", lines: mean of {wdw} steps" if wdw > 1 else ""
        ax.set_title(f"{run['name']}: step {mstep:.1f} ms (mean){avg}\n{share}", fontsize=9.5,
                     color=c)
        finite = np.nan_to_num(total)
        if len(finite) and finite.max() > 0:
            ax.set_ylim(0, 1.1 * np.percentile(finite, 99))
        ax.set_xlim(step[0], step[-1] if step[-1] > step[0] else step[0] + 1)
        ax.set_xlabel("step")
        if i % split_cols == 0:
            ax.set_ylabel("ms per step, rank 0")
        ax.grid(True, alpha=0.3)

    xs = [r["x_kind"] for r in runs]
    xlabel = "tokens" if all(k == "tokens" for k in xs) else \
        "tokens (steps for " + ", ".join(r["name"] for r in runs if r["x_kind"] != "tokens") + ")"
    for ax in (ax_loss, ax_tput):
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_formatter(FuncFormatter(human))
        ax.grid(True, alpha=0.3)
    ax_loss.set_ylabel("loss (nats per token)")
    ax_loss.set_title("loss: training (every step, and its moving average) and validation")
    handles, labels = ax_loss.get_legend_handles_labels()
    if any_val:
        handles.append(Line2D([], [], ls="--", marker="o", color="0.4", mec="k", mew=0.5))
        labels.append("validation (dots)")
    ax_loss.legend(handles, labels, fontsize=8.5, loc="upper right")
    ax_tput.set_ylabel("tokens/s (all ranks)")
    ax_tput.yaxis.set_major_formatter(FuncFormatter(human))
    ax_tput.set_ylim(bottom=0)
    handles, labels = ax_tput.get_legend_handles_labels()
    if ax_mfu is not None:
        ax_mfu.set_ylabel("MFU (% of peak, dashed)")
        ax_mfu.set_ylim(bottom=0)
        h2, l2 = ax_mfu.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
        ax_tput.set_title("throughput and model FLOPs utilisation")
    else:
        ax_tput.set_title("throughput (no \"mfu\" in the metrics)")
    ax_tput.legend(handles, labels, fontsize=8.5, loc="lower right")
    fig.legend(split_handles, ["rank 0's step: " + SPLIT[0]] + list(SPLIT[1:]) + ["other"],
               loc="lower center", ncol=5, fontsize=9, frameon=False)
    fig.suptitle(title or "gridtrain: " + ", ".join(r["name"] for r in runs), fontsize=13)
    fig.savefig(out, dpi=dpi, format="png")
    plt.close(fig)


# ---- the command line ---------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise PlotError(message + f"; see '{self.prog} --help'")


def parse_size(text):
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not WIDTHxHEIGHT in pixels") from None
    if not (200 <= w <= 10000 and 200 <= h <= 10000):
        raise argparse.ArgumentTypeError(f"'{text}': each side must be 200 to 10000 pixels")
    return w, h


def main(argv):
    ap = Parser(prog="gridtrain plot", description=__doc__.split("\n\n")[1],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="[run] metrics files")
    ap.add_argument("-o", "--output", required=True, metavar="OUT.png", help="the picture")
    ap.add_argument("--size", type=parse_size, default=(1600, 1000), metavar="WxH",
                    help="size in pixels (default 1600x1000)")
    ap.add_argument("--title", default=None, help="title (default: the run names)")
    args = ap.parse_args(argv)
    if not args.output.lower().endswith(".png"):
        raise PlotError(f"the output '{args.output}' must end in .png")
    try:
        import matplotlib  # noqa: F401
        import numpy as np
    except ImportError as e:
        raise PlotError(f"{e.name or 'matplotlib'} is missing for {sys.executable} "
                        "(Debian: apt-get install python3-matplotlib)") from None
    runs = []
    for path, name in zip(args.runs, run_names(args.runs)):
        recs, summary = read_run(path)
        x = tokens_seen(np, recs)
        kind = "tokens"
        if x is None:
            x, kind = column(np, recs, "step"), "steps"
        runs.append({"name": name, "recs": recs, "summary": summary, "x": x, "x_kind": kind})
    try:
        draw(runs, args.output, args.size, args.title)
    except OSError as e:
        raise PlotError(f"cannot write {args.output}: {e.strerror or e}") from None
    print(f"{PROG}: wrote {args.output} ({args.size[0]}x{args.size[1]}, "
          f"{len(runs)} run{'s' if len(runs) > 1 else ''})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PlotError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(2)
