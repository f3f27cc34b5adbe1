#!/bin/sh
# test_cli.sh - the command line: help and version texts, and real 4-rank
# training runs (dp = 4, and pp = 2 x tp = 2) whose console lines, tables
# and JSON-lines metrics carry what the README promises.
# gt-test: tier=quick
. "$GT_SRCDIR/tests/lib.sh"

"$GT_BIN" --help >"$GT_TMP/help" 2>&1
ok $? "gridtrain --help exits 0"
grep -q "train DECK" "$GT_TMP/help" && grep -q "ingest text" "$GT_TMP/help" &&
  grep -q "ckpt info|verify|convert" "$GT_TMP/help" && grep -q "3 stopped by SIGUSR1/SIGTERM" "$GT_TMP/help" &&
  grep -q "plan --memory DECK" "$GT_TMP/help"
ok $? "--help lists the train, ingest, ckpt and plan commands and the exit statuses"

"$GT_BIN" --version >"$GT_TMP/version" 2>&1
ok $? "gridtrain --version exits 0"
grep -q "^gridtrain [0-9]" "$GT_TMP/version" && grep -q "MPI" "$GT_TMP/version" &&
  grep -q "HDF5" "$GT_TMP/version" && grep -q "BLAS" "$GT_TMP/version" && grep -q "CUDA" "$GT_TMP/version"
ok $? "--version names the version, MPI, HDF5, BLAS and CUDA"

"$GT_BIN" train --help >"$GT_TMP/train-help" 2>&1
ok $? "gridtrain train --help exits 0"
missing=""
for key in run.steps run.seed run.log_every run.metrics grid.dp grid.pp grid.tp model.type \
  model.layers model.heads model.dim model.seq_len model.vocab data.train data.val data.batch \
  data.microbatches optim.lr optim.min_lr optim.warmup optim.weight_decay optim.beta1 \
  optim.beta2 optim.grad_clip backend.device backend.threads backend.precision \
  backend.mpi_device backend.loss_scale backend.loss_scale_interval backend.loss_scale_factor \
  backend.loss_scale_min parallel.wait parallel.schedule \
  parallel.stages parallel.bucket_mb parallel.dp_overlap parallel.zero model.recompute \
  checkpoint.dir checkpoint.every \
  checkpoint.keep checkpoint.resume run.peak_tflops data.prefetch; do
  grep -q "^    $key " "$GT_TMP/train-help" || missing="$missing $key"
done
[ -z "$missing" ]
ok $? "train --help documents every deck key${missing:+ (missing:$missing)}"

"$GT_BIN" ingest --help >"$GT_TMP/ingest-help" 2>&1 && grep -q -- "--val-fraction" "$GT_TMP/ingest-help"
ok $? "gridtrain ingest --help exits 0 and documents --val-fraction"

"$GT_BIN" plan --help >"$GT_TMP/plan-help" 2>&1 && grep -q -- "--ranks N" "$GT_TMP/plan-help"
ok $? "gridtrain plan --help exits 0 and documents --memory and --ranks"

"$GT_BIN" ckpt --help >"$GT_TMP/ckpt-help" 2>&1 && grep -q "^  verify" "$GT_TMP/ckpt-help" &&
  grep -q "^  convert" "$GT_TMP/ckpt-help" && grep -q "^  info" "$GT_TMP/ckpt-help"
ok $? "gridtrain ckpt --help exits 0 and documents info, verify and convert"
"$GT_BIN" ckpt bogus x >/dev/null 2>"$GT_TMP/ckpt-bad"
[ $? -eq 2 ] && grep -q "^gridtrain: error: ckpt: bad arguments" "$GT_TMP/ckpt-bad"
ok $? "gridtrain ckpt with bad arguments: exit 2 and one usage error"

"$GT_BIN" >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "no command: exit status 2"

# ---- a real run: 4 ranks (oversubscribed here), dp = 4, with evaluation
data="$GT_TMP/genesis.h5"
make_dataset "$data" 0.1 || bail "cannot make the dataset"
run_mpi 4 300 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" \
  data.val="$data" run.eval_every=5 run.steps=10 run.log_every=5 \
  run.metrics="$GT_TMP/m.jsonl" >"$GT_TMP/run.out" 2>"$GT_TMP/run.err"
status=$?
ok $status "4-rank training run exits 0"
[ $status -eq 0 ] || sed 's/^/# /' "$GT_TMP/run.err"
grep -q "^  model.layers  *2  *deck" "$GT_TMP/run.out" &&
  grep -q "^  data.train .*command line" "$GT_TMP/run.out"
ok $? "rank 0 prints the resolved configuration with the origin of each value"
grep -q "^  layout  *dp=4 x pp=1 x tp=1  *resolved" "$GT_TMP/run.out" &&
  grep -q "^  ranks  *4 (4 per node" "$GT_TMP/run.out"
ok $? "rank 0 prints the layout in the same table"
[ "$(grep '^step ' "$GT_TMP/run.out" | cut -d' ' -f2 | tr '\n' ' ')" = "0/10 4/10 5/10 9/10 " ]
ok $? "log lines at steps 0 and 5 (log_every), 4 and 9 (evaluations), 9 (last)"
grep -E -q '^step 4/10 \(50%\) \| loss [0-9.]+ \| val [0-9.]+ \| lr [0-9.e+-]+ \| gnorm [0-9.]+ \| [0-9.]+ ms \| [0-9]+ tok/s \| MFU [0-9.]+% \| compute [0-9]+% comm [0-9]+% bubble [0-9]+% data [0-9]+% \| ETA [0-9hms]+$' "$GT_TMP/run.out"
ok $? "log line format: step, progress, loss, val, lr, gnorm, ms, tok/s, MFU, time split, ETA"
grep -q "^gridtrain: done: 10 steps" "$GT_TMP/run.out" && grep -q "dp.exposed" "$GT_TMP/run.out"
ok $? "final summary line and the timing table"
"$PYTHON_REF" - "$GT_TMP/m.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if not r.get("summary")]
summary = [r for r in rows if r.get("summary")]
need = {"step", "loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "compute_ms", "comm_ms", "data_ms",
        "mfu", "eta_s"}
assert len(steps) == 10, len(steps)
assert [r["step"] for r in steps] == list(range(10))
for r in steps:
    assert need <= r.keys(), need - r.keys()
    assert all(math.isfinite(r[k]) for k in need)
    assert r["step_ms"] > 0 and r["tokens_per_s"] > 0
assert [("val_loss" in r) for r in steps] == [False] * 4 + [True] + [False] * 4 + [True]
assert len(summary) == 1 and summary[0]["steps"] == 10
PY
ok $? "metrics file: 10 step records with every key, val_loss at steps 4 and 9, one summary"
grep -q "^  precision  *fp32 compute  *resolved" "$GT_TMP/run.out" &&
  grep -q "^  mpi and device memory  *MPI on device buffers (host-visible device memory)" "$GT_TMP/run.out"
ok $? "the start-up table shows the precision and how MPI meets device memory"
grep -q "^# memory per rank, expected (fp32 compute, zero 0 over dp=4, recompute none" "$GT_TMP/run.out" &&
  [ "$(grep -c -E '^  [0-3]( +[0-9.]+ [KMG]?i?B){5} +[0-9]+( +[0-9.]+ [KMG]?i?B){4}$' "$GT_TMP/run.out")" -eq 4 ]
ok $? "an expected-memory table with one row per rank: 5 byte columns, micro-batches in flight, 4 byte columns (act total, comm, gather, total)"

# ---- precisions and test modes on the command line
run_mpi 2 300 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" grid.pp=2 \
  backend.precision=fp16 backend.loss_scale=1e12 run.steps=4 run.log_every=1 \
  run.metrics="$GT_TMP/m16.jsonl" >"$GT_TMP/run16.out" 2>"$GT_TMP/run16.err"
ok $? "an fp16 run on 2 ranks (pp = 2) with a loss scale of 1e12 exits 0"
grep -E -q '^step 0/4 .* \| scale 1e\+12 \(1 skipped\), skipped \|' "$GT_TMP/run16.out" &&
  grep -E -q '^step 1/4 .* \| scale 5e\+11 \(2 skipped\), skipped \|' "$GT_TMP/run16.out"
ok $? "fp16: the log line shows the loss scale, the skipped steps and that a step was skipped"
"$PYTHON_REF" - "$GT_TMP/m16.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' not in l]
assert [r["loss_scale"] for r in steps[:2]] == [1e12, 5e11], steps
assert steps[0]["skipped"] is True and steps[0]["skipped_steps"] == 1
PY
ok $? "fp16: loss_scale, skipped and skipped_steps in the JSON records"
run_mpi 2 300 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" grid.pp=2 \
  backend.precision=fp16 backend.loss_scale=1e12 backend.loss_scale_min=4e11 run.steps=4 \
  >"$GT_TMP/min.out" 2>"$GT_TMP/min.err"
status=$?
[ $status -eq 1 ] && [ "$(grep -c . "$GT_TMP/min.err")" -eq 1 ] &&
  grep -q "^gridtrain: error: fp16 gradients overflow at step 1 even with loss scale 5e+11: the scale would fall to 2.5e+11, below \[backend\] loss_scale_min = 4e+11" "$GT_TMP/min.err"
ok $? "a loss scale below loss_scale_min: exit 1 and one error naming the step (got $status)"
"$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" backend.precision=bf16 \
  run.steps=0 >"$GT_TMP/zero.out" 2>&1
[ $? -eq 0 ] && grep -q "^# memory per rank, expected (bf16 compute" "$GT_TMP/zero.out" &&
  grep -q "nothing to do" "$GT_TMP/zero.out" && ! grep -q "^step " "$GT_TMP/zero.out"
ok $? "run.steps=0 prints the tables and stops"
run_mpi 2 300 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" grid.tp=2 \
  backend.device=cpu-guard run.steps=2 >"$GT_TMP/guard.out" 2>"$GT_TMP/guard.err"
ok $? "backend.device = cpu-guard trains on 2 ranks (tp = 2)"
grep -q "^  mpi and device memory  *staged through pinned host buffers (device memory is not host-visible)" "$GT_TMP/guard.out"
ok $? "cpu-guard: MPI is staged through pinned host buffers"
run_mpi 2 300 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" \
  backend.device=cpu-guard backend.mpi_device=on run.steps=2 >/dev/null 2>"$GT_TMP/on.err"
[ $? -eq 2 ] && grep -q "mpi_device = on: MPI cannot take the device pointers of backend cpu-guard" "$GT_TMP/on.err"
ok $? "mpi_device = on with cpu-guard: exit 2 and why"
# (a warning about the BLAS kernels may appear on machines OpenBLAS misdetects)
[ -z "$(grep -v -e '^$' -e '^gridtrain: warning: OpenBLAS' "$GT_TMP/run.err")" ]
ok $? "nothing else on stderr"

# ---- a 3D run on 4 ranks: pp = 2 x tp = 2 (1f1b, 4 micro-batches, eval), with
# an empty cache: the first run on a machine measures the CPU peak through the
# backend, and the memory table below must not count that measurement
mkdir -p "$GT_TMP/empty-cache"
(XDG_CACHE_HOME="$GT_TMP/empty-cache"; export XDG_CACHE_HOME
  run_mpi 4 300 "$GT_BIN" train "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" \
    data.val="$data" grid.dp=1 grid.pp=2 grid.tp=2 data.microbatches=4 run.eval_every=5 \
    run.steps=6 run.log_every=5 run.metrics="$GT_TMP/m3.jsonl" >"$GT_TMP/run3.out" \
    2>"$GT_TMP/run3.err")
status=$?
ok $status "pp=2 x tp=2 training run exits 0"
[ $status -eq 0 ] || sed 's/^/# /' "$GT_TMP/run3.err"
grep -q "^  layout  *dp=1 x pp=2 x tp=2  *resolved" "$GT_TMP/run3.out" &&
  grep -q "^  pipeline stages  *blocks 0-0, 1-1; 1f1b schedule  *resolved" "$GT_TMP/run3.out"
ok $? "the start-up table shows the layout, the stage split and the schedule"
missing=""
for ev in forward backward tp.comm pp.comm pp.bubble dp.exposed tied.allreduce optimizer data; do
  grep -q "^  $ev  " "$GT_TMP/run3.out" || missing="$missing $ev"
done
[ -z "$missing" ]
ok $? "the timing table has every named event${missing:+ (missing:$missing)}"
grep -q "^# peak activations per pipeline stage (1f1b, 4 micro-batches)" "$GT_TMP/run3.out" &&
  grep -q "^  stage 0  *2 micro-batches" "$GT_TMP/run3.out" &&
  grep -q "^  stage 1  *1 micro-batches" "$GT_TMP/run3.out"
ok $? "peak activations: 1F1B holds pp - s micro-batches on stage s"
"$PYTHON_REF" - "$GT_TMP/m3.jsonl" <<'PY'
import json, math, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in steps if not r.get("summary")]
need = {"forward_ms", "backward_ms", "tp_comm_ms", "pp_comm_ms", "bubble_ms",
        "dp_exposed_ms", "optimizer_ms", "data_ms"}
assert len(steps) == 6, len(steps)
for r in steps:
    assert need <= r.keys(), need - r.keys()
    assert all(math.isfinite(r[k]) and r[k] >= 0 for k in need)
    assert r["forward_ms"] > 0 and r["backward_ms"] > 0 and r["tp_comm_ms"] > 0
    assert r["forward_ms"] + r["backward_ms"] + r["tp_comm_ms"] + r["bubble_ms"] <= r["step_ms"] * 1.01
PY
ok $? "metrics: the per-step split (forward, backward, tp/pp comm, bubble, ...) within the step"

# ---- the memory account: measured against expected, and the plan without training
grep -A5 "^# memory per rank, measured" "$GT_TMP/run3.out" | awk '/^  [0-9]/ { n++; if ($6 != "1.000") bad++ }
  END { exit !(n == 4 && !bad) }'
ok $? "the measured table: every rank's allocator peak is 1.000 of its expected total"
grep -q "^gridtrain: MFU against a peak of .*(sgemm with 1 thread, measured)" "$GT_TMP/run3.out"
ok $? "that run measured the CPU peak (its cache was empty), and the table leaves it out"
"$GT_BIN" plan --memory "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" data.val="$data" \
  grid.dp=1 grid.pp=2 grid.tp=2 data.microbatches=4 >"$GT_TMP/plan.out" 2>"$GT_TMP/plan.err"
ok $? "gridtrain plan --memory exits 0 without mpiexec"
# rank r of (1,2,2) is stage r / 2: the plan's stage rows are the training's rank rows
awk '/^# memory per rank, expected/ { on = 1; next } on && /^  [0-9]/ { $1 = ""; print } on && !/^[ #]/ { on = 0 }' \
  "$GT_TMP/run3.out" | awk 'NR % 2 == 1' >"$GT_TMP/train-rows"
awk '/^# memory per rank, expected/ { on = 1; next } on && /^  [0-9]/ { $1 = ""; print }' \
  "$GT_TMP/plan.out" >"$GT_TMP/plan-rows"
[ -s "$GT_TMP/plan-rows" ] && cmp -s "$GT_TMP/train-rows" "$GT_TMP/plan-rows"
ok $? "plan --memory prints, stage by stage, the expected bytes of the training's start-up table"
[ $? -eq 0 ] || { sed 's/^/# train: /' "$GT_TMP/train-rows"; sed 's/^/# plan: /' "$GT_TMP/plan-rows"; }
"$GT_BIN" plan --memory "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" grid.dp=auto \
  >/dev/null 2>"$GT_TMP/plan2.err"
[ $? -eq 2 ] && grep -q "give the job's rank count with --ranks N" "$GT_TMP/plan2.err"
ok $? "plan --memory with an auto layout and no --ranks: exit 2 and why"
"$GT_BIN" plan --memory "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" --ranks 8 \
  grid.dp=auto grid.pp=2 grid.tp=1 parallel.zero=1 backend.precision=bf16 >"$GT_TMP/plan3.out" 2>&1
grep -q "zero 1 over dp=4" "$GT_TMP/plan3.out" && [ "$(grep -c '^  [0-9]' "$GT_TMP/plan3.out")" -eq 2 ]
ok $? "plan --memory --ranks 8 resolves dp=auto to 4 and prints both stages"
"$GT_BIN" plan --memory "$GT_SRCDIR/tests/decks/tiny.in" data.train="$data" --ranks 8 \
  grid.dp=4 grid.pp=2 grid.tp=1 parallel.zero=3 >"$GT_TMP/plan4.out" 2>&1
[ $? -eq 0 ] && grep -q "zero 3 over dp=4" "$GT_TMP/plan4.out" &&
  grep -q "^# stage .* gather  *total$" "$GT_TMP/plan4.out"
ok $? "plan --memory accounts zero 3 with its gather buffers"
[ $? -eq 0 ] || sed 's/^/# /' "$GT_TMP/plan4.out"

done_testing
