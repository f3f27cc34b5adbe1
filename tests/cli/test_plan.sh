#!/bin/sh
# test_plan.sh - `gridtrain plan` with a cluster: the ranking table, the
# CSV of every layout, one layout with --evaluate, pinned choices, the
# published-results check, --memory still working, and bad input (a missing
# cluster file, an unknown key, a bad value, bad options): exit status 2
# and one "gridtrain: error:" line, also on 2 ranks.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

deck="$GT_SRCDIR/inputs/default.in"
tiny="$GT_SRCDIR/tests/decks/tiny.in"
cpu="$GT_SRCDIR/inputs/clusters/this-machine.in"
a100="$GT_SRCDIR/inputs/clusters/a100-80gb-selene.in"

"$GT_BIN" plan --help >"$GT_TMP/help" 2>&1 && grep -q -- "--cluster FILE" "$GT_TMP/help" &&
  grep -q -- "--evaluate" "$GT_TMP/help" && grep -q -- "--memory" "$GT_TMP/help" &&
  grep -q -- "--ranks N" "$GT_TMP/help"
ok $? "plan --help documents --cluster, --evaluate, --memory and --ranks"

# ---- the search on the CPU cluster: 8 ranks, the top 5, the CSV
"$GT_BIN" plan "$deck" --cluster "$cpu" --ranks 8 --top 5 --csv "$GT_TMP/all.csv" \
  >"$GT_TMP/top" 2>"$GT_TMP/top.err"
ok $? "plan DECK --cluster this-machine --ranks 8 exits 0"
[ "$(grep -c '^ *[0-9]' "$GT_TMP/top")" -eq 5 ]
ok $? "--top 5 prints 5 ranked layouts"
grep -q '^# rank *dp *pp *tp *mbs *m *schedule *zero *recmp *sp *prec *step *tok/s *MFU *compute *tp comm *pp comm *bubble *dp exp *optim *memory *fits$' "$GT_TMP/top"
ok $? "the table's columns: layout, step, tok/s, MFU, the time split, memory, fits"
"$PYTHON_REF" - "$GT_TMP/all.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) > 100, len(rows)
need = {"rank", "dp", "pp", "tp", "mbs", "micro", "schedule", "zero", "recompute", "seq_par",
        "precision", "step_s", "tokens_per_s", "compute_s", "tp_comm_s", "pp_comm_s",
        "bubble_s", "dp_exposed_s", "optimizer_s", "memory_bytes", "fits"}
assert need <= set(rows[0]), need - set(rows[0])
for r in rows:
    assert int(r["dp"]) * int(r["pp"]) * int(r["tp"]) == 8, r
    assert int(r["dp"]) * int(r["mbs"]) * int(r["micro"]) == 32, r
    parts = sum(float(r[k]) for k in ("compute_s", "tp_comm_s", "pp_comm_s", "bubble_s",
                                       "dp_exposed_s", "optimizer_s"))
    assert abs(parts - float(r["step_s"])) <= 1e-4 * float(r["step_s"]), r
fit = [float(r["tokens_per_s"]) for r in rows if r["fits"] == "yes"]
assert fit == sorted(fit, reverse=True), "not sorted"
assert [r["rank"] for r in rows] == [str(i + 1) for i in range(len(rows))]
scheds = {r["schedule"] for r in rows}
assert {"gpipe", "1f1b"} <= scheds and any(s.startswith("interleaved:") for s in scheds), scheds
assert {r["recompute"] for r in rows} == {"none", "attention", "block"}
assert {r["zero"] for r in rows} == {"0", "1", "2", "3"}
PY
ok $? "the CSV: every layout makes 8 ranks and 32 sequences, parts add up, ranked, all choices"

# ---- pinned choices and one layout
"$GT_BIN" plan "$deck" --cluster "$cpu" --ranks 8 --csv "$GT_TMP/pin.csv" grid.tp=2 \
  model.recompute=block parallel.schedule=interleaved:2 >/dev/null 2>"$GT_TMP/pin.err"
status=$?
[ $status -eq 0 ] && awk -F, 'NR > 1 && ($4 != 2 || $9 != "block" || $7 != "interleaved:2") { bad = 1 }
  END { exit bad }' "$GT_TMP/pin.csv" && [ "$(wc -l <"$GT_TMP/pin.csv")" -gt 1 ]
ok $? "grid.tp=2 model.recompute=block parallel.schedule=interleaved:2 pin those choices"
"$GT_BIN" plan "$deck" --cluster "$cpu" --evaluate --ranks 8 >"$GT_TMP/eval" 2>&1 &&
  grep -q '^predicted_step_s [0-9.e+-]*$' "$GT_TMP/eval" &&
  grep -q '^ *1 *2 *2 *2 *4 *4 *1f1b ' "$GT_TMP/eval"
ok $? "--evaluate predicts the deck's own layout (dp 2 x pp 2 x tp 2, 4 micro-batches of 4)"

# ---- a GPU cluster: the selene file, 2 nodes, the GPT-2 124M shape
"$GT_BIN" plan "$GT_SRCDIR/inputs/gpt2-124m.in" --cluster "$a100" --nodes 2 \
  --global-batch 512 --seq 1024 --top 3 >"$GT_TMP/gpu" 2>&1 &&
  grep -q 'on 16 ranks' "$GT_TMP/gpu" && [ "$(grep -c '^ *[0-9]' "$GT_TMP/gpu")" -eq 3 ]
ok $? "the A100 cluster at --nodes 2: 16 ranks, the top 3"

# ---- the published results
"$GT_BIN" plan --validate "$GT_SRCDIR/benchmarks/plan/published.tsv" --cluster "$a100" \
  --cluster "$GT_SRCDIR/benchmarks/plan/megatron.in" >"$GT_TMP/pub" 2>&1 &&
  [ "$(grep -c '^ *[15] ' "$GT_TMP/pub")" -eq 18 ] &&
  grep -q '^# table 1: 10 rows, mean absolute error' "$GT_TMP/pub"
ok $? "--validate prints the 18 published rows and the errors per table"

# ---- --memory still works, now without [data] train in the deck
"$GT_BIN" plan --memory "$tiny" --ranks 2 >"$GT_TMP/mem" 2>&1 &&
  grep -q '^# memory per rank, expected' "$GT_TMP/mem"
ok $? "plan --memory works (a deck without [data] train is planned)"

# ---- a mixture of experts: Mixtral 8x7B's shape, the experts in the header, no sequence
# parallelism or zb-h1 among the layouts (not yet with experts), and its memory account
h100="$GT_SRCDIR/inputs/clusters/h100-sxm.in"
"$GT_BIN" plan "$GT_SRCDIR/inputs/mixtral-8x7b.in" --cluster "$h100" --nodes 32 \
  --csv "$GT_TMP/moe.csv" --top 3 >"$GT_TMP/moe" 2>&1 &&
  grep -q '^# plan: Llama L32 H32 KV8 C4096 F14336 E8 top2 Fe14336 every1 V32000' "$GT_TMP/moe" &&
  [ "$(grep -c '^ *[0-9]' "$GT_TMP/moe")" -eq 3 ] &&
  ! grep -qi 'zb-h1' "$GT_TMP/moe.csv" &&
  "$PYTHON_REF" - "$GT_TMP/moe.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sp = [k for k in rows[0] if k.lower() in ("sp", "seq_par", "sequence_parallel")]
assert rows and sp, rows[0].keys()
assert all(r[sp[0]] in ("off", "0", "false", "False") for r in rows), "sequence parallel with experts"
PY
ok $? "Mixtral 8x7B on 32 H100 nodes: the experts in the header, no zb-h1 or sequence parallelism"
"$GT_BIN" plan --memory "$GT_SRCDIR/inputs/mixtral-8x7b.in" --ranks 256 >"$GT_TMP/moemem" 2>&1 &&
  [ "$(grep -c '^  [0-7]  ' "$GT_TMP/moemem")" -eq 8 ] &&
  "$GT_BIN" plan --memory "$GT_SRCDIR/inputs/moe-tiny.in" --ranks 4 >>"$GT_TMP/moemem" 2>&1
ok $? "plan --memory of inputs/mixtral-8x7b.in (8 stages) and inputs/moe-tiny.in" ||
  sed 's/^/#   /' "$GT_TMP/moemem"

# ---- bad input: exit 2, one error line
expect() {
  desc=$1
  needle=$2
  shift 2
  "$GT_BIN" "$@" >"$GT_TMP/out" 2>"$GT_TMP/err"
  status=$?
  lines=$(grep -c '^gridtrain: error:' "$GT_TMP/err")
  found=$(grep '^gridtrain: error:' "$GT_TMP/err" | grep -cF -- "$needle")
  if [ $status -eq 2 ] && [ "$lines" -eq 1 ] && [ "$found" -eq 1 ] &&
    [ "$(wc -l <"$GT_TMP/err")" -eq 1 ]; then
    ok 0 "$desc"
  else
    ok 1 "$desc"
    diag "exit status $status (want 2), $lines error lines (want 1), wanted: $needle"
    sed 's/^/# stderr: /' "$GT_TMP/err" | head -n 5
  fi
}
printf '[compute]\nflops = 3\n' >"$GT_TMP/badkey.in"
printf '[cluster]\nranks_per_node = many\n' >"$GT_TMP/badval.in"
printf '[cluster]\nranks_per_node = 8\n' >"$GT_TMP/partial.in"
expect "missing cluster file" "cannot open cluster file '$GT_TMP/none.in'" \
  plan "$deck" --cluster "$GT_TMP/none.in" --ranks 8
expect "unknown key in the cluster file" "badkey.in:2: unknown key 'flops' in [compute]" \
  plan "$deck" --cluster "$GT_TMP/badkey.in" --ranks 8
expect "bad value in the cluster file" "ranks_per_node = 'many' is not valid" \
  plan "$deck" --cluster "$GT_TMP/badval.in" --ranks 8
expect "a required key missing" "[compute] peak_fp32 is required" \
  plan "$deck" --cluster "$GT_TMP/partial.in" --ranks 8
expect "no cluster file" "give a cluster description with --cluster FILE" plan "$deck" --ranks 8
expect "bad --nodes" "--nodes needs a positive integer" plan "$deck" --cluster "$cpu" --nodes x
expect "--nodes and --ranks" "give --nodes or --ranks, not both" \
  plan "$deck" --cluster "$cpu" --nodes 1 --ranks 8
expect "unknown option" "unknown option '--fast'" plan "$deck" --cluster "$cpu" --fast
expect "bad deck key" "unknown key 'wide' in [model]" \
  plan "$deck" --cluster "$cpu" --ranks 8 model.wide=3
expect "bad schedule" "interleaved:x" \
  plan "$deck" --cluster "$cpu" --ranks 8 parallel.schedule=interleaved:x
expect "no layout with the pins" "no valid layout" \
  plan "$deck" --cluster "$cpu" --ranks 8 grid.tp=3
expect "unwritable CSV" "cannot write the CSV" \
  plan "$deck" --cluster "$cpu" --ranks 8 --csv "$GT_TMP/no/dir/x.csv"

# the same on 2 ranks: one message, exit 2, no hang
run_mpi 2 60 "$GT_BIN" plan "$deck" --cluster "$GT_TMP/badkey.in" --ranks 8 \
  >"$GT_TMP/out2" 2>"$GT_TMP/err2"
status=$?
[ $status -eq 2 ] && [ "$(grep -c '^gridtrain: error:' "$GT_TMP/err2")" -eq 1 ]
ok $? "on 2 ranks: exit 2 and one error line (status $status)"

done_testing
