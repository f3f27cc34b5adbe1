#!/bin/sh
# test_pace.sh - what a run says about its pace, and the terminal: MFU in
# the JSON records and the log line against a hand computation (the model's
# FLOPs from the deck's shape, the given [run] peak_tflops, the measured step
# time); the ETA within the bounds the step times set; the CPU peak measured
# once and then read from the cache; peak_tflops validation; [data]
# prefetch on and off give the same losses (1 rank, and dp = 2 x pp = 2 with
# evaluation); progress bars (ingest, checkpoint writes, ckpt convert) only
# on a terminal.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

deck="$GT_SRCDIR/tests/decks/tiny.in"
data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.1 || bail "cannot make the dataset"
cr=$(printf '\r')

# ---- MFU and ETA: 2 ranks (dp = 2), the peak given
run_mpi 2 300 "$GT_BIN" train "$deck" data.train="$data" run.steps=8 run.log_every=1 \
  run.peak_tflops=0.02 run.metrics="$GT_TMP/mfu.jsonl" >"$GT_TMP/mfu.out" 2>&1
ok $? "a 2-rank run with [run] peak_tflops = 0.02 exits 0"
grep -q "^gridtrain: MFU against a peak of 0.04 TFLOP/s: 0.02 per rank (\[run\] peak_tflops) x 2 ranks$" \
  "$GT_TMP/mfu.out"
ok $? "rank 0 names the peak: 2 ranks x 0.02 TFLOP/s"
"$PYTHON_REF" - "$deck" "$GT_TMP/mfu.jsonl" "$GT_TMP/mfu.out" <<'PY'
import configparser, json, re, sys
deck = configparser.ConfigParser(inline_comment_prefixes=(";",))
deck.read(sys.argv[1])
L, C, V, T = (deck.getint("model", k) for k in ("layers", "dim", "vocab", "seq_len"))
B = deck.getint("data", "batch")
# 6 FLOPs per matrix parameter and token (forward and backward), plus the
# attention scores and their use: 12 L C T per token
per_token = 6 * (L * 12 * C * C + V * C) + 12 * L * C * T
per_step = per_token * B * T
peak = 2 * 0.02e12
rows = [json.loads(l) for l in open(sys.argv[2])]
steps = [r for r in rows if not r.get("summary")]
(summary,) = [r for r in rows if r.get("summary")]
assert len(steps) == 8
for r in steps:
    want = per_step / (r["step_ms"] / 1e3) / peak
    assert abs(r["mfu"] - want) <= 1e-6 * want, (r["step"], r["mfu"], want)
assert abs(summary["peak_tflops"] - 0.04) <= 1e-12, summary
model = per_step * 8 / summary["seconds"] / 1e12
assert abs(summary["model_tflops"] - model) <= 1e-6 * model, (summary, model)
assert abs(summary["mfu"] - model / 0.04) <= 1e-6 * model / 0.04, summary
# the log line shows the step's MFU in percent
line = [l for l in open(sys.argv[3]) if l.startswith("step 5/8 ")][0]
shown = float(re.search(r"\| MFU ([0-9.]+)% \|", line).group(1))
assert abs(shown - 100 * steps[5]["mfu"]) <= 0.051, (shown, steps[5]["mfu"])
PY
ok $? "MFU of each step (JSON and log line) and of the run = model FLOPs (from the deck) / time / peak"
"$PYTHON_REF" - "$GT_TMP/mfu.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' not in l]
n = 8
for k, r in enumerate(steps):
    left = n - 1 - k
    # a weighted mean of the step times so far, the first one (warm-up)
    # left out once a later one exists
    seen = [s["step_ms"] for s in steps[1:k + 1]] or [steps[0]["step_ms"]]
    lo, hi = left * min(seen) / 1e3, left * max(seen) / 1e3
    # the JSON holds 9 significant digits of eta_s and of each step_ms
    # (5e-9 relative each): a band of 1e-9 failed on one step seen
    assert lo * (1 - 1e-7) <= r["eta_s"] <= hi * (1 + 1e-7), (k, r["eta_s"], lo, hi)
assert steps[-1]["eta_s"] == 0
PY
ok $? "eta_s of each step lies between steps left x the fastest and the slowest step so far; 0 at the end"
grep -q '^step 1/8 (25%) | .* | ETA [0-9hms]*$' "$GT_TMP/mfu.out" &&
  grep -q '^step 7/8 (100%) | .* | ETA 0s$' "$GT_TMP/mfu.out"
ok $? "log lines show the progress (step 1/8 25%, step 7/8 100%) and the ETA"

# ---- the CPU peak: measured once per machine, then read from the cache
cache="$GT_TMP/cache"
env XDG_CACHE_HOME="$cache" "$GT_BIN" train "$deck" data.train="$data" run.steps=2 \
  run.metrics="$GT_TMP/cal1.jsonl" >"$GT_TMP/cal1.out" 2>&1 &&
  run_mpi 2 300 env XDG_CACHE_HOME="$cache" "$GT_BIN" train "$deck" data.train="$data" \
    run.steps=2 run.metrics="$GT_TMP/cal2.jsonl" >"$GT_TMP/cal2.out" 2>&1
ok $? "two runs without peak_tflops exit 0"
grep -q "^gridtrain: MFU against a peak of .* per rank (sgemm with 1 thread, measured) x 1 rank$" \
  "$GT_TMP/cal1.out" &&
  grep -q "^gridtrain: MFU against a peak of .* per rank (sgemm with 1 thread, cached) x 2 ranks$" \
    "$GT_TMP/cal2.out" &&
  [ "$(grep -c "threads=1" "$cache/gridtrain/cpu-peak")" -eq 1 ]
ok $? "the first run measures the CPU peak, the second (2 ranks) reads the one cache line"
"$PYTHON_REF" - "$GT_TMP/cal1.jsonl" "$GT_TMP/cal2.jsonl" "$cache/gridtrain/cpu-peak" <<'PY'
import json, sys
flops = float(open(sys.argv[3]).read().split("\t")[1])
for path, ranks in ((sys.argv[1], 1), (sys.argv[2], 2)):
    (s,) = [json.loads(l) for l in open(path) if '"summary"' in l]
    assert abs(s["peak_tflops"] - ranks * flops / 1e12) <= 1e-7 * s["peak_tflops"], (s, flops)
    assert 0 < s["mfu"] < 1.5, s
PY
ok $? "the run's peak is the cached per-rank peak x ranks; MFU in the summary"

# ---- peak_tflops: bad values
for bad in -1 fast 2e6; do
  "$GT_BIN" train "$deck" data.train="$data" run.steps=1 run.peak_tflops=$bad \
    >"$GT_TMP/bad.out" 2>"$GT_TMP/bad.err"
  status=$?
  [ $status -eq 2 ] && [ "$(grep -c . "$GT_TMP/bad.err")" -eq 1 ] &&
    grep -q "^gridtrain: error: command line: \[run\] peak_tflops = '$bad' is not valid; expected a number in \[0, 1e+06\]" "$GT_TMP/bad.err"
  ok $? "run.peak_tflops=$bad: exit 2 and one error naming the key and the range (got $status)"
done

# ---- read-ahead: the same training with and without it
same_losses() {
  "$PYTHON_REF" - "$1" "$2" <<'PY'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if '"summary"' not in l]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
keys = ("loss", "grad_norm", "val_loss")
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert all(x.get(k) == y.get(k) for k in keys), (x, y)
assert any("val_loss" in x for x in a)
PY
}
for p in on off; do
  "$GT_BIN" train "$deck" data.train="$data" data.val="$data" run.eval_every=4 run.steps=8 \
    run.peak_tflops=1 data.prefetch=$p run.metrics="$GT_TMP/one-$p.jsonl" >"$GT_TMP/one-$p.out" 2>&1 &&
    run_mpi 4 300 "$GT_BIN" train "$deck" data.train="$data" data.val="$data" run.eval_every=4 \
      run.steps=8 grid.pp=2 data.microbatches=2 run.peak_tflops=1 data.prefetch=$p \
      run.metrics="$GT_TMP/four-$p.jsonl" >"$GT_TMP/four-$p.out" 2>&1
  ok $? "data.prefetch=$p: runs on 1 rank and on 4 (dp = 2 x pp = 2, 2 micro-batches) exit 0"
done
same_losses "$GT_TMP/one-on.jsonl" "$GT_TMP/one-off.jsonl"
ok $? "1 rank: the same losses, gradient norms and validation losses with and without read-ahead"
same_losses "$GT_TMP/four-on.jsonl" "$GT_TMP/four-off.jsonl"
ok $? "dp = 2 x pp = 2: the same losses, gradient norms and validation losses with and without read-ahead"

# ---- progress bars: never in a file, on a terminal (script makes one)
"$GT_BIN" ingest text "$GT_SRCDIR/tests/data/genesis.txt" -o "$GT_TMP/plain.h5" \
  >"$GT_TMP/plain-ingest.out" 2>&1 &&
  "$GT_BIN" train "$deck" data.train="$data" run.steps=2 run.peak_tflops=1 \
    checkpoint.dir="$GT_TMP/ck" >"$GT_TMP/plain-train.out" 2>&1 &&
  "$GT_BIN" ckpt convert "$GT_TMP/ck/step_00000002.h5" "$GT_TMP/w.h5" \
    >"$GT_TMP/plain-convert.out" 2>&1
ok $? "ingest, a run that writes a checkpoint, and ckpt convert exit 0 with their output in files"
! grep -q "$cr" "$GT_TMP/plain-ingest.out" "$GT_TMP/plain-train.out" "$GT_TMP/plain-convert.out" &&
  ! grep -q '\] *[0-9]*%  ' "$GT_TMP/plain-ingest.out" "$GT_TMP/plain-train.out" "$GT_TMP/plain-convert.out"
ok $? "no carriage return and no bar in output that goes to a file"
if command -v script >/dev/null 2>&1; then
  script -qc "'$GT_BIN' ingest text '$GT_SRCDIR/tests/data/genesis.txt' -o '$GT_TMP/tty.h5'" \
    /dev/null </dev/null >"$GT_TMP/tty-ingest.out" 2>&1
  grep -a -q "${cr}ingest  \[[#.]*\] *[0-9]*%  [0-9.]*/[0-9.]* MiB" "$GT_TMP/tty-ingest.out" &&
    grep -a -q "ingest: wrote" "$GT_TMP/tty-ingest.out"
  ok $? "ingest on a terminal: a progress bar in MiB, then the summary line"
  script -qc "'$GT_BIN' train '$deck' data.train='$data' run.steps=2 run.peak_tflops=1 checkpoint.dir='$GT_TMP/ck-tty'" \
    /dev/null </dev/null >"$GT_TMP/tty-train.out" 2>&1
  grep -a -q "${cr}step_00000002.h5  \[[#.]*\] *[0-9]*%  [0-9]*/[0-9]*" "$GT_TMP/tty-train.out" &&
    grep -a -q "${cr}gridtrain: checkpoint .*step_00000002.h5 written" "$GT_TMP/tty-train.out"
  ok $? "a checkpoint write on a terminal: a bar over the tensors, wiped for the written line"
  script -qc "'$GT_BIN' ckpt convert '$GT_TMP/ck-tty/step_00000002.h5' '$GT_TMP/w-tty.h5'" \
    /dev/null </dev/null >"$GT_TMP/tty-convert.out" 2>&1
  grep -a -q "${cr}ckpt verify  \[[#.]*\]" "$GT_TMP/tty-convert.out" &&
    grep -a -q "${cr}ckpt convert  \[[#.]*\]" "$GT_TMP/tty-convert.out" &&
    grep -a -q "model weights written to" "$GT_TMP/tty-convert.out"
  ok $? "ckpt convert on a terminal: bars for the verification and the export"
else
  skip 3 "no script command (util-linux) to make a terminal"
fi

done_testing
