#!/bin/sh
# tests/gpu/test_run_dry.sh - tests/gpu/run.sh, the script of a GPU machine's
# one short run, checked where there is no GPU, so that a change elsewhere
# (an option, a test program, the command line) cannot break it unseen:
# 1. its dry run (GT_GPU_RUN_DEVICE=cpu: every step on the cpu backend) with
#    this build's binaries (GT_GPU_BUILD, nothing rebuilt), shortened through
#    the variables only a dry run sets (40-step curves, two layouts of 10
#    steps; every step's code still runs): every step passes, and the report
#    and the log archive are complete;
# 2. the deadline: with 60 s, the device step (limit 20 s) runs and the ops
#    (120 s) and curves (90 s) steps are reported "skipped (deadline)";
#    GT_GPU_ONLY runs only the steps named;
# 3. failures: with a fake build whose op test fails, whose training test
#    hangs ignoring SIGTERM, and a fake compute-sanitizer that finds errors,
#    the report names each failure: the not ok line with its diagnostics and
#    the TAP summary, the hang ended, the sanitizer's summary. The benchmark's
#    code runs too (GT_GPU_DRY_EXTRAS), on a tiny model on the cpu, its
#    PyTorch parts with $PYTHON_REF: whether torch runs there or fails, the
#    step passes on gridtrain's numbers and reports torch's; and on a tiny
#    Llama (grouped-query attention), gridtrain alone.
# About a minute on 2 cores.
# shellcheck disable=SC1091
# gt-test: tier=full
. "$GT_SRCDIR/tests/lib.sh"

run=$GT_SRCDIR/tests/gpu/run.sh
if [ ! -x "$GT_BUILDDIR/tests/gpu/test_cuda_ops" ] || [ ! -x "$GT_BUILDDIR/tests/gpu/test_cuda_train" ]; then
  bail "tests/gpu/test_cuda_ops and test_cuda_train are not built"
fi

# gone PID: no such process, or a zombie (SIGKILLed, its parent gone)
gone() { [ ! -r "/proc/$1/stat" ] || [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d ' ' -f 1)" = Z ]; }
# result STEP FILE: the step's result in the report's table (PASS, FAIL, SKIP)
result() { awk -v s="$1" '$1 == s && NF >= 2 {print $2; exit}' "$2"; }
# has FILE TEXT: the report holds TEXT (a fixed string)
has() { grep -q -F -- "$2" "$1"; }
# dry OUT ARGS...: the dry run with the current build, report in OUT
dry() {
  d_out=$1
  shift
  env GT_GPU_RUN_DEVICE=cpu GT_GPU_BUILD="$GT_BUILDDIR" OUT="$d_out" "$@" \
    timeout -k 10 300 sh "$run" >"$d_out.stdout" 2>&1
}

# ---- 1. the dry run ---------------------------------------------------------------------------
t=$(date +%s)
dry "$GT_TMP/a" GT_GPU_CURVE_STEPS=40 GT_GPU_LAYOUTS="tp2 3d" GT_GPU_PARITY_STEPS=10
rc=$?
r=$GT_TMP/a/report.txt
ok $rc "the dry run passes (exit $rc, $(($(date +%s) - t)) s)"
[ $rc -eq 0 ] || diag "$(head -n 40 "$r" 2>/dev/null || tail -n 20 "$GT_TMP/a.stdout")"
ok "$([ "$(head -n 1 "$r")" = "gpu-run: 11 passed, 0 failed, 6 skipped" ]; echo $?)" \
  "the report's first line: '$(head -n 1 "$r")'"
ok "$(sed -n 2p "$r" | grep -q -E '^cpu \(dry run\); [0-9]+ s so far \(deadline 540 s\)$'; echo $?)" \
  "its second line: '$(sed -n 2p "$r")'"
bad=
for s in setup device ops-smoke train-one-step ops curves layouts-fp32 layouts-bf16 checkpoint signal \
         curves-llama; do
  [ "$(result "$s" "$r")" = PASS ] || bad="$bad $s"
done
ok "$([ -z "$bad" ]; echo $?)" "every step passed${bad:+; not:$bad}"
bad=
for s in nccl-shared-gpu memcheck racecheck bench-124m bench-llama-350m bench-350m; do
  [ "$(result "$s" "$r")" = SKIP ] && grep -q "^$s .*dry run" "$r" || bad="$bad $s"
done
ok "$([ -z "$bad" ]; echo $?)" "the GPU-only steps are skipped with the reason${bad:+; not:$bad}"
has "$r" "fp32 tp2       worst relative loss gap" && has "$r" "bf16 3d        worst relative loss gap" &&
  has "$r" "bit for bit to step 20: ok" && has "$r" "signal: exit status 3 (want 3)" &&
  has "$r" "curves: gpt cpu bf16 tracks cpu fp32 over the last 10 steps" &&
  has "$r" "curves: llama cpu bf16 tracks cpu fp32 over the last 10 steps"
ok $? "the results: parity per layout and precision, checkpoints, the signal, the curves"
has "$r" "# failures: " && has "$r" "# machine" && has "$r" "## signal: PASS" && ! has "$r" "incomplete"
ok $? "the report is complete"
tar -tzf "$GT_TMP/a/logs.tar.gz" >"$GT_TMP/a.list" 2>/dev/null &&
  grep -q '^logs/ops.log$' "$GT_TMP/a.list" && grep -q '^logs/curves.log$' "$GT_TMP/a.list" &&
  grep -q '^logs/3d-bf16.jsonl$' "$GT_TMP/a.list" && [ "$(wc -c <"$GT_TMP/a/logs.tar.gz")" -lt 16000000 ]
ok $? "every log in logs.tar.gz ($(wc -l <"$GT_TMP/a.list" 2>/dev/null) files, $(wc -c <"$GT_TMP/a/logs.tar.gz" 2>/dev/null) bytes)"
[ "$(find "$GT_TMP/a" -type f | wc -l)" -le 8 ]
ok $? "at most 8 files in OUT ($(find "$GT_TMP/a" -type f | tr '\n' ' '))"

# ---- 2. the deadline, and GT_GPU_ONLY ---------------------------------------------------------
dry "$GT_TMP/b" GT_GPU_DEADLINE=60 GT_GPU_ONLY="device ops curves"
rc=$?
r=$GT_TMP/b/report.txt
ok "$([ $rc -eq 0 ] && [ "$(head -n 1 "$r")" = "gpu-run: 2 passed, 0 failed, 2 skipped" ]; echo $?)" \
  "deadline 60 s: exit $rc, '$(head -n 1 "$r")'"
[ "$(result device "$r")" = PASS ] && grep -q '^ops .*skipped (deadline): needs 120 s' "$r" &&
  grep -q '^curves .*skipped (deadline): needs 90 s' "$r" && ! grep -q '^checkpoint ' "$r"
ok $? "device ran; ops and curves skipped (deadline); the steps not named did not run"
has "$r" "# machine" && has "$r" "## device: PASS" && ! has "$r" "incomplete"
ok $? "the report is complete"

# ---- 3. failures ------------------------------------------------------------------------------
fake=$GT_TMP/fake
mkdir -p "$fake/tests/gpu"
ln -s "$GT_BIN" "$fake/gridtrain"
cat >"$fake/tests/gpu/test_cuda_ops" <<'EOF'
#!/bin/sh
echo "ok 1 - cast fp32 -> bf16"
echo "not ok 2 - linear_forward 257x96x200 [bf16] (rel err 3.1e-02)"
echo "#   worst element 17: 0.5 against 0.25"
echo "ok 3 - gelu"
echo "# failed 1 of 3 checks:"
echo "#   not ok 2 - linear_forward 257x96x200 [bf16] (rel err 3.1e-02)"
echo "1..3"
exit 1
EOF
cat >"$fake/tests/gpu/test_cuda_train" <<EOF
#!/bin/sh
trap '' TERM
echo "# a rank that ignores SIGTERM"
echo \$\$ >"$GT_TMP/hang.pid"
exec sleep 299
EOF
cat >"$fake/compute-sanitizer" <<'EOF'
#!/bin/sh
log=
while [ $# -gt 0 ]; do [ "$1" = --log-file ] && log=$2; shift; done
printf '%s\n' "========= COMPUTE-SANITIZER" "========= Invalid __global__ read of size 4 bytes" \
  "=========     at gt_gelu_forward+0x90" "========= ERROR SUMMARY: 2 errors" >"$log"
exit 86
EOF
chmod +x "$fake/tests/gpu/test_cuda_ops" "$fake/tests/gpu/test_cuda_train" "$fake/compute-sanitizer"
t=$(date +%s)
env GT_GPU_RUN_DEVICE=cpu GT_GPU_BUILD="$fake" OUT="$GT_TMP/c" GT_GPU_LIMIT_SCALE=20 \
  GT_GPU_ONLY="ops-smoke train-one-step memcheck bench-tiny bench-tinyllama" GT_GPU_DRY_EXTRAS=1 \
  GT_GPU_SANITIZER="$fake/compute-sanitizer" GT_GPU_PYTHON="$PYTHON_REF" \
  GT_GPU_BENCH_MODELS="tiny:2:64:4 tinyllama:2:64:4:2" GT_GPU_BENCH_SEQ=64 GT_GPU_BENCH_BATCH=4 \
  timeout -k 10 150 sh "$run" >"$GT_TMP/c.stdout" 2>&1
rc=$?
took=$(($(date +%s) - t))
r=$GT_TMP/c/report.txt
ok "$([ $rc -eq 1 ] && [ "$(head -n 1 "$r")" = "gpu-run: 3 passed, 3 failed, 0 skipped" ]; echo $?)" \
  "failures: exit $rc, '$(head -n 1 "$r")'"
sed -n '/^# failures/,/^# results/p' "$r" >"$GT_TMP/c.failures"
has "$GT_TMP/c.failures" "## ops-smoke: FAIL" &&
  grep -A 1 '^not ok 2 - linear_forward' "$GT_TMP/c.failures" | grep -q '^#   worst element 17' &&
  has "$GT_TMP/c.failures" "# failed 1 of 3 checks:"
ok $? "the failed check, its diagnostics and the TAP summary are in the report"
grep -q '^train-one-step .*FAIL .*timed out after 5 s; ended the processes it left behind (sleep x1), with SIGKILL' "$r" &&
  [ "$took" -lt 90 ] && [ -s "$GT_TMP/hang.pid" ] && gone "$(cat "$GT_TMP/hang.pid")"
ok $? "a hang that ignores SIGTERM is ended at its limit (5 s) + 5 s with SIGKILL ($took s in all)"
grep -q '^memcheck .*FAIL .*exit 86' "$r" && has "$r" "ERROR SUMMARY: 2 errors" &&
  has "$r" "Invalid __global__ read of size 4 bytes"
ok $? "compute-sanitizer's findings are in the report"
[ "$(result bench-tiny "$r")" = PASS ] && grep -q -E '^bench: gridtrain [0-9.]+ ms/step [0-9]+ tok/s, MFU' "$r" &&
  grep -q -E '^bench: torch eager ([0-9.]+ ms/step|failed: .)' "$r" &&
  grep -q -E '^bench: torch.compile ([0-9.]+ ms/step|failed: .)' "$r"
ok $? "the benchmark: $(sed -n '/^# benchmark/,/^# machine/p' "$r" | grep -E '^bench: (gridtrain|torch)' | cut -c 1-90 | tr '\n' '|')"
sed -n '/^# benchmark/,/^# machine/p' "$r" >"$GT_TMP/c.bench"
[ "$(result bench-tinyllama "$r")" = PASS ] &&
  grep -q -E '^bench: tinyllama \(L=2 C=64, llama, 4 heads over 2 kv heads\)' "$GT_TMP/c.bench" &&
  [ "$(grep -c -E '^bench: gridtrain [0-9.]+ ms/step [0-9]+ tok/s, MFU' "$GT_TMP/c.bench")" -eq 2 ] &&
  [ "$(grep -c -E '^bench: torch eager' "$GT_TMP/c.bench")" -eq 1 ]
ok $? "the Llama benchmark: gridtrain alone ($(grep -c '^bench: gridtrain' "$GT_TMP/c.bench") gridtrain lines, $(grep -c '^bench: torch eager' "$GT_TMP/c.bench") torch eager in the section)"

done_testing
