#!/bin/sh
# tests/cli/test_plot.sh - `gridtrain plot`: a PNG of the promised size from
# two runs (the metrics of a real 6-step run and a hand-written file with
# val_loss, nulls, mfu and a summary), checked by its signature and IHDR
# header (read here, not by matplotlib); "$" and "_" in a title or file name
# are text; a file still being written (its last line cut short) plots with
# a warning; under mpiexec -n 2 one rank plots;
# every bad input (a missing, empty or malformed file, no step records, a
# value that is not a number, bad options, no matplotlib: E-PLOT-03) is
# status 2 and one error line. Skipped without matplotlib. About 15 s.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

PY=/usr/bin/python3
if ! $PY -c 'import matplotlib, numpy' 2>/dev/null; then
  echo "1..0 # SKIP $PY lacks matplotlib or numpy (apt-get install python3-matplotlib)"
  exit 0
fi
T=$(cd "$GT_TMP" && pwd)
deck="$GT_SRCDIR/tests/decks/tiny.in"
make_dataset "$T/data.h5" 0.1 || bail "cannot make the dataset"

# ---- the inputs ------------------------------------------------------------------
"$GT_BIN" train "$deck" data.train="$T/data.h5" data.val="$T/data.h5" run.steps=6 \
  run.eval_every=2 run.metrics="$T/real.jsonl" >"$T/real.out" 2>&1 || bail "cannot train"
$PY - "$T" <<'EOF' || bail "cannot write the JSON lines"
import json, math, sys
t = sys.argv[1]
with open(f"{t}/synthetic.jsonl", "w") as f:
    for s in range(40):
        rec = {"step": s, "loss": 5.5 * math.exp(-s / 15) + 1, "lr": 1e-3, "step_ms": 20.0,
               "tokens_per_s": 384 / 0.02, "compute_ms": 12.0, "comm_ms": 5.0,
               "data_ms": 1.0, "bubble_ms": None if s == 3 else 1.0, "mfu": 0.25}
        if s % 10 == 9:
            rec["val_loss"] = rec["loss"] + 0.1
        f.write(json.dumps(rec) + "\n")
    f.write(json.dumps({"summary": True, "steps": 40, "tokens": 40 * 384,
                        "final_loss": 1.4, "final_val_loss": 1.5}) + "\n")
lines = open(f"{t}/synthetic.jsonl").read().splitlines()
open(f"{t}/live.jsonl", "w").write("\n".join(lines[:10]) + "\n" + lines[10][:25])
def write(name, text):
    open(f"{t}/{name}", "w").write(text)
write("empty.jsonl", "\n\n")
write("middle.jsonl", lines[0] + "\n" + lines[1][:30] + "\n" + lines[2] + "\n")
write("array.jsonl", lines[0] + "\n[1, 2]\n")
write("nosteps.jsonl", json.dumps({"summary": True, "steps": 0}) + "\n")
write("string.jsonl", lines[0] + "\n" + lines[1].replace('"loss": ', '"loss": "x", "l": ') + "\n")
write("noloss.jsonl", json.dumps({"step": 0, "lr": 1e-3}) + "\n")
EOF

# png_size FILE: "W H" from the PNG's IHDR chunk; fails for a file that is not a PNG
png_size() {
  $PY -c '
import struct, sys
b = open(sys.argv[1], "rb").read(33)
if len(b) < 24 or b[:8] != b"\x89PNG\r\n\x1a\n" or b[12:16] != b"IHDR":
    sys.exit(1)
print(*struct.unpack(">II", b[16:24]))' "$1"
}

# ---- pictures -----------------------------------------------------------------------
"$GT_BIN" plot "$T/real.jsonl" "$T/synthetic.jsonl" -o "$T/two.png" >"$T/two.out" 2>&1
rc=$?
size=$(png_size "$T/two.png")
[ $rc -eq 0 ] && [ "$size" = "1600 1000" ]
ok $? "two runs: exit $rc, a PNG of 1600 x 1000 pixels (got '$size')"
[ $rc -eq 0 ] || sed 's/^/#   /' "$T/two.out"
"$GT_BIN" plot "$T/synthetic.jsonl" -o "$T/small.png" --size 800x600 --title "t" >"$T/small.out" 2>&1
size=$(png_size "$T/small.png")
[ $? -eq 0 ] && [ "$size" = "800 600" ]
ok $? "--size 800x600: a PNG of 800 x 600 pixels (got '$size')"
"$GT_BIN" plot "$T/live.jsonl" -o "$T/live.png" >"$T/live.out" 2>&1 &&
  png_size "$T/live.png" >/dev/null &&
  grep -q "^gridtrain-plot: warning: .*live.jsonl:11: skipping the unfinished last line" "$T/live.out"
ok $? "a file still being written: plotted, the cut last line skipped with a warning"
# "$" and a leading "_" are text: no mathtext (a crash on '$\frac{x$'), no hidden legend entry
cp "$T/synthetic.jsonl" "$T/_x\$y.jsonl"
"$GT_BIN" plot "$T/_x\$y.jsonl" -o "$T/dollar.png" --title 'a $\frac{x$' >"$T/dollar.out" 2>&1 &&
  png_size "$T/dollar.png" >/dev/null
ok $? "a title and a file name with \$ and _ are drawn as text"
run_mpi 2 120 "$GT_BIN" plot "$T/real.jsonl" -o "$T/mpi.png" >"$T/mpi.out" 2>&1 &&
  [ "$(grep -c '^gridtrain-plot: wrote' "$T/mpi.out")" -eq 1 ] && png_size "$T/mpi.png" >/dev/null
ok $? "under mpiexec -n 2: one rank plots, exit 0"

# ---- bad input: status 2, one line ------------------------------------------------------
# bad NAME MESSAGE-START ARGS...: gridtrain plot ARGS exits 2 with exactly one
# line on standard error, "gridtrain: error: plot: MESSAGE-START..."
bad() {
  name=$1 want=$2
  shift 2
  "$GT_BIN" plot "$@" >"$T/$name.out" 2>"$T/$name.err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$T/$name.err")" -eq 1 ] &&
    grep -qF -- "gridtrain: error: plot: $want" "$T/$name.err" && [ ! -e "$T/$name.png" ]
  ok $? "$name: status $rc, one line: $(head -c 150 "$T/$name.err")"
}
bad missing "cannot read $T/nope.jsonl: No such file" "$T/nope.jsonl" -o "$T/missing.png"
bad empty "$T/empty.jsonl is empty" "$T/synthetic.jsonl" "$T/empty.jsonl" -o "$T/empty.png"
bad middle "$T/middle.jsonl:2: not JSON" "$T/middle.jsonl" -o "$T/middle.png"
bad array "$T/array.jsonl:2: not a JSON object" "$T/array.jsonl" -o "$T/array.png"
bad nosteps "$T/nosteps.jsonl has no step records" "$T/nosteps.jsonl" -o "$T/nosteps.png"
bad string "$T/string.jsonl:2: \"loss\" is \"x\", not a number" "$T/string.jsonl" -o "$T/string.png"
bad noloss "$T/noloss.jsonl:1: a step record without \"loss\"" "$T/noloss.jsonl" -o "$T/noloss.png"
bad noout "the following arguments are required: -o/--output" "$T/real.jsonl"
bad size "argument --size: '3x4': each side must be 200 to 10000 pixels" "$T/real.jsonl" \
  -o "$T/size.png" --size 3x4
bad notpng "the output '$T/real.jsonl' must end in .png" "$T/synthetic.jsonl" -o "$T/real.jsonl"
# E-PLOT-03: a matplotlib that cannot be imported, ahead on the Python path
mkdir -p "$T/nompl/matplotlib"
echo 'raise ImportError("test shim", name="matplotlib")' >"$T/nompl/matplotlib/__init__.py"
export PYTHONPATH="$T/nompl"
bad nompl "matplotlib is missing for $PY (Debian: apt-get install python3-matplotlib)" \
  "$T/real.jsonl" -o "$T/nompl.png"
unset PYTHONPATH

# ---- make run's picture: the rule plots what the default deck writes -------------------
grep -q 'gridtrain$(EXEEXT) plot runs/default.jsonl -o runs/default.png' "$GT_SRCDIR/Makefile.am" &&
  grep -q '^metrics = runs/default.jsonl' "$GT_SRCDIR/inputs/default.in"
ok $? "make run plots runs/default.jsonl, the default deck's [run] metrics, to runs/default.png"

done_testing
