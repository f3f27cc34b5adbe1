#!/usr/bin/env python3
"""gen_points.py - the points of a scaling sweep, one line each, for
jobscripts/scaling.sbatch (a Slurm job array, one array task per point) and
benchmarks/scaling/collect.py.

    gen_points.py --deck inputs/default.in --max-ranks 8 -o sweep.tsv
    gen_points.py --deck inputs/gpt2-124m.in --ranks 1,2,4,8 --mode strong \\
        --batch 8 --max-tp 4 --set model.seq_len=64 -o sweep-124m.tsv

Two kinds of sweep (--mode, default both):

  strong  the global batch is fixed (--batch, default the deck's
          [data] batch): more ranks share the same work;
  weak    the batch per rank is fixed (--batch-per-rank, default
          batch / max ranks): N ranks train batch-per-rank x N sequences
          a step, so each rank's share of the FLOPs stays the same whatever
          the layout (dp splits the batch, pp x tp the model).

For every rank count N (--ranks, default 1..--max-ranks) every factorisation
N = dp x pp x tp that the deck's model admits (tp divides heads and leaves
every TP rank a vocabulary row, pp <= layers, batch a multiple of
dp x micro-batches; --max-pp / --max-tp / --layouts narrow it), crossed with

  micro-batches  --microbatches LIST, or auto: 1 when pp = 1; with pp > 1
                 the smallest valid count >= pp (the bubble (pp-1)/(m+pp-1)
                 is large) and the smallest >= 4 pp (the rule of thumb of
                 docs/input-deck.md);
  schedules      --schedules (1f1b,gpipe; also interleaved:V where the
                 build has it, kept to layers >= pp x V and micro-batches a
                 multiple of pp), only where pp > 1;
  ZeRO stages    --zero (0,1), only where dp > 1.

At rank counts not in --full-at (default: the largest) only the first
schedule and ZeRO stage of the lists and the largest auto micro-batch count
run: the full cross product at every rank count is more points than a
2-core machine can time in a sitting.

A weak point that is the same run as a strong one (the largest rank count
with the default batch per rank) is one line of mode strong+weak.

The sweep file is tab-separated text: '#key<TAB>value' lines carry what
every point shares (deck, overrides, warm-up steps), a header line names
the columns, then one line per point. index counts from 0 and is the Slurm
array task id. Prints the number of points and the sbatch command line.
"""
import argparse
import configparser
import os
import sys

COLUMNS = ("index", "name", "mode", "ranks", "dp", "pp", "tp", "microbatches",
           "schedule", "zero", "batch")


def die(msg):
    print(f"gen_points.py: {msg}", file=sys.stderr)
    sys.exit(2)


def int_list(text, what):
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            try:
                out.extend(range(int(lo), int(hi) + 1))
            except ValueError:
                die(f"{what}: '{part}' is not a range like 1-8")
            continue
        try:
            out.append(int(part))
        except ValueError:
            die(f"{what}: '{part}' is not an integer")
    if not out or any(v < 0 for v in out):
        die(f"{what}: expected non-negative integers, got '{text}'")
    return out


def read_deck(path, sets):
    """The model and data keys the layout rules need, deck then --set."""
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"),
                                   comment_prefixes=(";", "#"), interpolation=None,
                                   strict=False)
    try:
        with open(path) as f:
            cp.read_file(f)
    except OSError as e:
        die(f"cannot read the deck '{path}': {e}")
    defaults = {"model.layers": "4", "model.heads": "4", "model.dim": "128",
                "model.seq_len": "128", "model.vocab": "256", "data.batch": "16",
                "data.microbatches": "1"}
    val = dict(defaults)
    for key in defaults:
        sec, k = key.split(".")
        if cp.has_option(sec, k) and cp.get(sec, k).strip():
            val[key] = cp.get(sec, k).strip()
    for s in sets:
        k, _, v = s.partition("=")
        if k in val:
            val[k] = v
    try:
        return {k: int(v) for k, v in val.items()}
    except ValueError as e:
        die(f"deck '{path}': {e}")


def factorisations(n):
    for dp in range(1, n + 1):
        if n % dp:
            continue
        for pp in range(1, n // dp + 1):
            if (n // dp) % pp:
                continue
            yield dp, pp, n // (dp * pp)


def layout_ok(model, dp, pp, tp):
    if model["model.heads"] % tp:
        return False
    per = -(-model["model.vocab"] // tp)  # rows of a TP piece, ceil
    if (tp - 1) * per >= model["model.vocab"]:
        return False  # the last TP rank would hold padding only
    return pp <= model["model.layers"]


def chunks(schedule):
    """V of interleaved:V (model chunks per rank), 1 for 1f1b and gpipe, 0 if malformed."""
    if not schedule.startswith("interleaved:"):
        return 1
    v = schedule.split(":", 1)[1]
    return int(v) if v.isdigit() else 0


def micro_counts(spec, pp, per_replica, full):
    """Micro-batch counts for one layout; per_replica = batch / dp."""
    valid = [m for m in range(1, per_replica + 1) if per_replica % m == 0]
    if spec != "auto":
        return [m for m in spec if m in valid]
    if pp == 1:
        return [1]
    picks = []
    for target in (pp, 4 * pp):
        above = [m for m in valid if m >= target]
        picks.append(above[0] if above else valid[-1])
    picks = sorted(set(picks))
    return picks if full else picks[-1:]


def points(args, model):
    modes = args.mode.split(",")
    for mode in modes:
        if mode not in ("strong", "weak"):
            die(f"--mode: '{mode}' is not strong or weak")
    max_n = max(args.ranks)
    bpr = args.batch_per_rank or max(1, args.batch // max_n)
    wanted = None
    if args.layouts:
        wanted = set()
        for item in args.layouts.split(","):
            try:
                wanted.add(tuple(int(x) for x in item.lower().split("x")))
            except ValueError:
                die(f"--layouts: '{item}' is not DPxPPxTP")
    out, skipped = [], []
    for mode in modes:
        for n in args.ranks:
            batch = args.batch if mode == "strong" else bpr * n
            full = n in args.full_at
            found = 0
            for dp, pp, tp in factorisations(n):
                if not layout_ok(model, dp, pp, tp) or pp > args.max_pp or tp > args.max_tp:
                    continue
                if wanted is not None and (dp, pp, tp) not in wanted:
                    continue
                if batch % dp:
                    continue
                scheds = args.schedules if pp > 1 else args.schedules[:1]
                zeros = args.zero if dp > 1 else [0]
                if not full:
                    scheds, zeros = scheds[:1], zeros[:1]
                for m in micro_counts(args.microbatches, pp, batch // dp, full):
                    for sched in scheds:
                        v = chunks(sched)
                        # interleaved:V: pp x V chunks of at least one block,
                        # micro-batches in groups of pp (docs/parallelism.md)
                        if v > 1 and (model["model.layers"] < pp * v or m % pp):
                            continue
                        for z in zeros:
                            tag = sched.replace("interleaved:", "il")
                            name = f"{mode}-n{n}-dp{dp}-pp{pp}-tp{tp}-m{m}-{tag}-z{z}"
                            out.append((name, mode, n, dp, pp, tp, m, sched, z, batch))
                            found += 1
            if not found:
                skipped.append(f"{mode} N={n} (batch {batch})")
    # A weak point with the strong point's batch (at N = batch / batch per
    # rank) is the same run: one line, mode strong+weak, run once.
    merged, seen = [], {}
    for p in out:
        key = p[2:]
        if key in seen:
            i = seen[key]
            q = merged[i]
            mode = "strong+weak"
            merged[i] = (f"{mode}-" + q[0].split("-", 1)[1], mode) + q[2:]
            continue
        seen[key] = len(merged)
        merged.append(p)
    return merged, skipped, bpr


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--deck", required=True, help="input deck every point runs")
    ap.add_argument("--max-ranks", type=int, default=8, help="largest rank count (default 8)")
    ap.add_argument("--ranks", help="rank counts, e.g. 1,2,4,8 or 1-8 (default 1..max-ranks)")
    ap.add_argument("--mode", default="strong,weak", help="strong, weak or strong,weak")
    ap.add_argument("--batch", type=int, help="strong: global batch (default: the deck's)")
    ap.add_argument("--batch-per-rank", type=int, default=0,
                    help="weak: sequences per rank and step (default batch / max ranks)")
    ap.add_argument("--microbatches", default="auto", help="auto or a list, e.g. 1,4,8")
    ap.add_argument("--schedules", default="1f1b,gpipe",
                    help="pipeline schedules (pp > 1): 1f1b, gpipe, interleaved:V")
    ap.add_argument("--zero", default="0,1", help="ZeRO stages (dp > 1)")
    ap.add_argument("--max-pp", type=int, default=1 << 30, help="largest pipeline size")
    ap.add_argument("--max-tp", type=int, default=1 << 30, help="largest tensor-parallel size")
    ap.add_argument("--layouts", help="only these layouts, e.g. 1x1x1,2x1x1,2x2x2 (DPxPPxTP)")
    ap.add_argument("--full-at", help="rank counts with every schedule, ZeRO stage and "
                    "micro-batch count (default: the largest rank count)")
    ap.add_argument("--steps", type=int, default=6, help="steps per point (default 6)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="first steps left out of the timings (default 2)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override for every point (repeatable), e.g. data.train=FILE.h5")
    ap.add_argument("-o", "--output", required=True, help="sweep file to write")
    args = ap.parse_args()

    if not os.path.isfile(args.deck):
        die(f"no deck '{args.deck}'")
    for s in args.set:
        if "=" not in s or s.startswith("=") or any(c.isspace() for c in s):
            die(f"--set '{s}': expected section.key=value without blanks")
    if args.steps <= args.warmup:
        die(f"--steps {args.steps} leaves no timed step after --warmup {args.warmup}")
    model = read_deck(args.deck, args.set)
    args.ranks = int_list(args.ranks, "--ranks") if args.ranks else \
        list(range(1, args.max_ranks + 1))
    if 0 in args.ranks:
        die("--ranks: 0 ranks")
    args.batch = args.batch or model["data.batch"]
    args.microbatches = "auto" if args.microbatches == "auto" else \
        int_list(args.microbatches, "--microbatches")
    args.schedules = [s for s in args.schedules.split(",") if s]
    for s in args.schedules:
        if s not in ("1f1b", "gpipe") and chunks(s) < 2:
            die(f"--schedules: '{s}' is not 1f1b, gpipe or interleaved:V (V >= 2)")
    args.zero = int_list(args.zero, "--zero")
    if any(z > 3 for z in args.zero):
        die("--zero: stages are 0-3")
    args.full_at = int_list(args.full_at, "--full-at") if args.full_at else [max(args.ranks)]

    pts, skipped, bpr = points(args, model)
    if not pts:
        die("no valid point: " + "; ".join(skipped))
    # Every point runs without checkpoints, evaluation or resumption, and
    # logs each step; the caller's --set come last and win.
    common = [f"run.steps={args.steps}", "run.log_every=1", "run.eval_every=0", "data.val=",
              "checkpoint.dir=", "checkpoint.resume=never"] + args.set
    with open(args.output, "w") as f:
        f.write("# gridtrain scaling sweep: gen_points.py " +
                " ".join(a if a and not any(c.isspace() for c in a) else repr(a)
                         for a in sys.argv[1:]) + "\n")
        f.write(f"#deck\t{args.deck}\n")
        f.write(f"#set\t{' '.join(common)}\n")
        f.write(f"#warmup\t{args.warmup}\n")
        f.write(f"#shape\tlayers={model['model.layers']} heads={model['model.heads']} "
                f"dim={model['model.dim']} seq_len={model['model.seq_len']} "
                f"vocab={model['model.vocab']}\n")
        modes = args.mode.split(",")
        f.write("#batch\t" + "; ".join(
            (f"strong: global batch {args.batch}" if m == "strong" else
             f"weak: {bpr} sequences per rank") for m in modes) + "\n")
        f.write("\t".join(COLUMNS) + "\n")
        for i, p in enumerate(pts):
            f.write("\t".join(str(x) for x in (i,) + p) + "\n")
    by_mode = {}
    for p in pts:
        for m in p[1].split("+"):
            by_mode[m] = by_mode.get(m, 0) + 1
    print(f"gen_points.py: {len(pts)} points (" +
          ", ".join(f"{k} {v}" for k, v in by_mode.items()) +
          (", some both" if sum(by_mode.values()) > len(pts) else "") + f") in {args.output}")
    for s in skipped:
        print(f"gen_points.py: no valid layout for {s}")
    print(f"  sbatch --array=0-{len(pts) - 1}%1 --ntasks={max(args.ranks)} "
          f"jobscripts/scaling.sbatch {args.output} OUTDIR")
    print(f"  jobscripts/scaling.sbatch {args.output} OUTDIR      # without Slurm")


if __name__ == "__main__":
    main()
