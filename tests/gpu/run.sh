#!/bin/sh
# tests/gpu/run.sh - the one script to run on a lent GPU machine (an H100 80 GB
# or an H200): the GPU tests, cuda layout parity, checkpoints, a signal,
# compute-sanitizer and the GPT-2 benchmark against PyTorch, under one
# deadline, with a report that says what failed: $OUT/report.txt and every log
# in $OUT/logs.tar.gz, both rewritten as each step ends.
#
# Here first (a CUDA build in gpu-build/, packed with the libraries the GPU
# machine lacks; ~5 min on 2 cores the first time):
#   sh tests/gpu/pack.sh                      -> gpu-pack/gpu-pack.tar.xz
# then there, with the device tool, from the repository root:
#   run(command="sh tests/gpu/run.sh", carry=["gpu-pack"], timeout_s=600)
# A rerun of what failed, with the time it needs:
#   run(command="GT_GPU_ONLY='ops layouts-bf16' GT_GPU_DEADLINE=240 sh tests/gpu/run.sh",
#       carry=["gpu-pack"], timeout_s=300)
# The dry run (no GPU: every step on the cpu backend; no sanitizer, no benchmark):
#   GT_GPU_RUN_DEVICE=cpu sh tests/gpu/run.sh          (after pack.sh), or
#   GT_GPU_RUN_DEVICE=cpu GT_GPU_BUILD=. sh tests/gpu/run.sh   (this build's binaries)
#
# The report: line 1 `gpu-run: N passed, N failed, N skipped` (steps), line 2
# the device (name, memory, driver) and the seconds so far; then each step's
# result, every `not ok` / `Bail out!` line of a failed step with its `#`
# lines and the TAP `# failed N of M checks` summary, the machine, the CUDA
# libraries found and those loaded, compute-sanitizer's findings, the
# benchmark, and the last lines of each step.
#
# Settings (environment):
#   OUT                 where the report and the log archive go (the device tool
#                       sets it); else GT_GPU_OUT, default gpu-pack/report/
#   GT_GPU_RUN_DEVICE   cuda (default) or cpu: the dry run
#   GT_GPU_DEADLINE     seconds for the whole script (default 540); a step whose
#                       limit does not fit in what is left is skipped (deadline)
#   GT_GPU_ONLY         "step ...": run only these steps (setup always runs)
#   GT_GPU_BUILD        take the binaries of this build directory, not the pack
#   GT_GPU_PACK         the pack (default gpu-pack/gpu-pack.tar.xz)
#   GT_GPU_LIMIT_SCALE  percent applied to every step's limit (default 100)
#   GT_GPU_LIBDIRS      directories put before the CUDA libraries found
#   GT_GPU_PYTHON       the Python with torch (default /opt/torch/.venv's, or python3)
#   GT_GPU_SANITIZER    compute-sanitizer to use (default: PATH, /usr/local/cuda*)
# and, to shorten the dry run only (the GPU run keeps the defaults):
#   GT_GPU_CURVE_STEPS (200; 40 in the dry run), GT_GPU_LAYOUTS (all seven),
#   GT_GPU_PARITY_STEPS (20).
# Exit status: 0 when no step failed.
# shellcheck disable=SC2031 # orig_env's subshell changes PATH and LD_LIBRARY_PATH on purpose
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
dev=${GT_GPU_RUN_DEVICE:-cuda}
deck=$src/tests/decks/tiny.in

# ---- helpers ------------------------------------------------------------------------------------

now() { date +%s; }
# sh_quote VALUE: VALUE as one single-quoted shell word
sh_quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
# model_kv [KV_HEADS]: the overrides of a Llama with KV_HEADS key/value heads (none: GPT-2)
model_kv() { [ -z "${1:-}" ] || echo "model.type=llama model.kv_heads=$1"; }
# keep NAME...: write the variables to env.sh, which each step's process reads
keep() {
  for k_name in "$@"; do
    k_val=
    eval "k_val=\${$k_name-}"
    printf '%s=%s\n' "$k_name" "$(sh_quote "$k_val")" >>"$work/env.sh"
  done
}
# orig_env CMD...: run CMD with the environment this script started with (the
# Python steps: the pack's libraries must not reach PyTorch)
# shellcheck disable=SC2030
orig_env() {
  (
    if [ "$orig_ld_set" = yes ]; then LD_LIBRARY_PATH=$orig_ld && export LD_LIBRARY_PATH
    else unset LD_LIBRARY_PATH; fi
    PATH=$orig_path
    # shellcheck disable=SC2086
    [ -z "$orig_unset" ] || unset $orig_unset
    exec "$@"
  )
}
# left_s: seconds left before the end of the current step (GT_GPU_STEP_END)
left_s() { echo $((GT_GPU_STEP_END - $(now))); }
# cap LIMIT: LIMIT, or less to end 3 s before the current step's end (at least 1)
cap() {
  c_l=$(($(left_s) - 3))
  [ "$c_l" -lt 1 ] && c_l=1
  [ "$1" -lt "$c_l" ] && echo "$1" || echo "$c_l"
}
# rank_pids TEXT: the gridtrain processes whose command line holds TEXT (/proc:
# the machine may have no pgrep)
rank_pids() {
  for r_d in /proc/[0-9]*; do
    [ "$(cat "$r_d/comm" 2>/dev/null)" = gridtrain ] || continue
    tr '\0' ' ' <"$r_d/cmdline" 2>/dev/null | grep -qF -- "$1" && echo "${r_d#/proc/}"
  done
}

# ---- the steps (each runs in a process of its own: run.sh --step FUNCTION ARGS) --------------

# the test programs, run directly (one rank, MPI singleton) from the source tree
tap_prog() {
  t_prog=$1
  shift
  cd "$src" && GT_SRCDIR=$src GT_BUILDDIR=$work/tb "$tdir/$t_prog" "$@"
}

# curves MODEL STEPS: test_cuda_train's loss curves of MODEL (gpt, llama); their gaps
# to the cpu fp32 curve as results
curves() {
  v_tap=$logs/curves-$1.tap
  tap_prog test_cuda_train --curves --model "$1" --steps "$2" >"$v_tap" 2>&1
  v_rc=$?
  cat "$v_tap"
  grep -E '^(not )?ok .*(tracks|at every step|skips no step)' "$v_tap" |
    sed 's/^ok [0-9]* - /result: curves: /; s/^not ok [0-9]* - /result: curves: FAIL: /'
  return $v_rc
}

# device: what the machine and the backend say, and two steps of a run on the device
device_query() {
  if [ "$dev" = cuda ]; then
    if command -v nvidia-smi >/dev/null; then
      timeout 10 nvidia-smi
      timeout 10 nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,compute_cap,clocks.max.sm,power.limit --format=csv
    else
      echo "nvidia-smi: not found"
    fi
  fi
  "$gt" --version
  echo "result: device: gridtrain says: $("$gt" --version 2>&1 | grep -E '^ *CUDA *:' | sed 's/^ *CUDA *: *//')"
  timeout -k 5 "$(cap 60)" "$mpx" -n 1 "$gt" train "$deck" data.train="$work/g.h5" data.val= run.eval_every=0 \
    grid.dp=1 grid.pp=1 grid.tp=1 backend.device="$dev" checkpoint.dir= checkpoint.resume=never \
    run.steps=2 run.metrics="$logs/device.jsonl"
}

# parity_run TAG RANKS PRECISION OVERRIDES...: losses of every step to TAG.jsonl
parity_run() {
  p_tag=$1 p_n=$2 p_prec=$3
  shift 3
  rm -f "$logs/$p_tag.jsonl"
  # 30 s a run at most: a hang in one layout leaves time for the others
  timeout -k 5 "$(cap 30)" "$mpx" -n "$p_n" "$gt" train "$deck" data.train="$work/g.h5" data.val= \
    run.eval_every=0 backend.device="$dev" backend.precision="$p_prec" checkpoint.dir= \
    checkpoint.resume=never run.steps="$parity_steps" run.metrics="$logs/$p_tag.jsonl" "$@"
}

# layout_args LAYOUT: its rank count and overrides
layout_args() {
  case $1 in
    one) echo "1 grid.dp=1 grid.pp=1 grid.tp=1" ;;
    dp2) echo "2 grid.dp=2 grid.pp=1 grid.tp=1" ;;
    tp2) echo "2 grid.dp=1 grid.pp=1 grid.tp=2" ;;
    pp2) echo "2 grid.dp=1 grid.pp=2 grid.tp=1 parallel.schedule=gpipe" ;;
    pp2-1f1b) echo "2 grid.dp=1 grid.pp=2 grid.tp=1 parallel.schedule=1f1b" ;;
    pp2-zb) echo "2 grid.dp=1 grid.pp=2 grid.tp=1 parallel.schedule=zb-h1" ;;
    3d) echo "8 grid.dp=2 grid.pp=2 grid.tp=2" ;;
    staged) echo "4 grid.dp=2 grid.pp=1 grid.tp=2 backend.mpi_device=off" ;;
  esac
}

# layouts PRECISION: each layout (2-8 ranks sharing the device) against one rank;
# every layout runs even when another failed
layouts() {
  l_prec=$1 l_bad=0
  for l_tag in one $layout_list; do
    l_args=$(layout_args "$l_tag")
    if [ -z "$l_args" ]; then
      echo "unknown layout $l_tag (GT_GPU_LAYOUTS)"
      l_bad=1
      continue
    fi
    # shellcheck disable=SC2086
    set -- $l_args
    l_n=$1
    shift
    parity_run "$l_tag-$l_prec" "$l_n" "$l_prec" "$@"
    l_rc=$?
    echo "layout $l_tag on $l_n ranks: exit $l_rc"
    [ $l_rc -eq 0 ] || l_bad=1
  done
  l_bound=$([ "$l_prec" = fp32 ] && echo 1e-4 || echo 2e-2)
  # shellcheck disable=SC2086
  orig_env "$py" - "$logs" "$l_prec" "$l_bound" $layout_list <<'PY' || l_bad=1
import json, sys
logs, prec, bound, tags = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
def losses(tag):
    try:
        return [json.loads(l)["loss"] for l in open(f"{logs}/{tag}-{prec}.jsonl") if '"step"' in l]
    except OSError:
        return []
ref = losses("one")
bad = 0
for tag in tags:
    got = losses(tag)
    if not ref or len(got) != len(ref):
        print(f"result: {prec} {tag:9s} FAIL: {len(got)} losses against {len(ref)} of one rank (a run failed)")
        bad += 1
        continue
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    ok = worst <= bound
    bad += not ok
    print(f"result: {prec} {tag:9s} worst relative loss gap {worst:.2e} over {len(ref)} steps "
          f"(bound {bound:g}): {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
PY
  return $l_bad
}

# NCCL: two ranks of a group on one GPU are refused with one clear error (exit
# 2). With one GPU, NCCL parity itself (a GPU per rank) cannot run here.
nccl_shared() {
  timeout -k 5 "$(cap 60)" "$mpx" -n 2 "$gt" train "$deck" data.train="$work/g.h5" data.val= \
    run.eval_every=0 backend.device="$dev" grid.dp=1 grid.pp=1 grid.tp=2 parallel.collectives=nccl \
    checkpoint.dir= checkpoint.resume=never run.steps=2 2>"$logs/nccl.err"
  n_rc=$?
  cat "$logs/nccl.err"
  echo "result: nccl-shared-gpu: exit $n_rc (want 2 and 'share one GPU')"
  [ $n_rc -eq 2 ] && grep -q "share one GPU" "$logs/nccl.err"
}

# checkpoints: resume from step 10 bit for bit; the device's checkpoint continued
# on the cpu, and the cpu's on the device
ckpt() {
  c=$work/ck/ckpt
  rm -rf "$c" "$c.b" "$c.c" "$c.d"
  set -- "$deck" data.train="$work/g.h5" data.val= run.eval_every=0 grid.dp=1 grid.pp=1 grid.tp=1
  timeout -k 5 "$(cap 60)" "$mpx" -n 1 "$gt" train "$@" run.steps=20 backend.device="$dev" \
    checkpoint.dir="$c" checkpoint.every=10 checkpoint.keep=5 checkpoint.resume=never \
    run.metrics="$logs/ckpt-full.jsonl"
  echo "full run: exit $?"
  timeout -k 5 "$(cap 60)" "$mpx" -n 1 "$gt" train "$@" run.steps=20 backend.device="$dev" \
    checkpoint.dir="$c.b" checkpoint.resume="$c/step_00000010.h5" run.metrics="$logs/ckpt-b.jsonl"
  echo "resumed at 10 on $dev: exit $?"
  timeout -k 5 "$(cap 60)" "$mpx" -n 1 "$gt" train "$@" run.steps=25 backend.device=cpu \
    checkpoint.dir="$c.c" checkpoint.resume="$c/step_00000020.h5" run.metrics="$logs/ckpt-c.jsonl"
  echo "$dev step 20 continued on cpu: exit $?"
  timeout -k 5 "$(cap 60)" "$mpx" -n 1 "$gt" train "$@" run.steps=30 backend.device="$dev" \
    checkpoint.dir="$c.d" checkpoint.resume="$c.c/step_00000025.h5" run.metrics="$logs/ckpt-d.jsonl"
  echo "cpu step 25 continued on $dev: exit $?"
  orig_env "$py" - "$logs" "$dev" <<'PY'
import json, sys
logs, dev = sys.argv[1], sys.argv[2]
def rec(f):
    try:
        return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{logs}/ckpt-{f}.jsonl") if '"step"' in l}
    except OSError:
        return {}
full, b, c, d = rec("full"), rec("b"), rec("c"), rec("d")
same = sorted(b) == list(range(10, 20)) and all(full.get(s) == b[s] for s in b)
oc, od = sorted(c) == list(range(20, 25)), sorted(d) == list(range(25, 30))
print(f"result: checkpoint: resumed at step 10 on {dev}, bit for bit to step 20: {'ok' if same else 'FAIL'} "
      f"(steps {sorted(b)})")
print(f"result: checkpoint: {dev} step 20 continued on cpu: {'ok' if oc else 'FAIL'} "
      f"(steps {sorted(c)}, losses {[round(c[s], 4) for s in sorted(c)]})")
print(f"result: checkpoint: cpu step 25 continued on {dev}: {'ok' if od else 'FAIL'} "
      f"(steps {sorted(d)}, losses {[round(d[s], 4) for s in sorted(d)]})")
sys.exit(0 if same and oc and od else 1)
PY
}

# signal: SIGUSR1 to the rank of a run on the device: a checkpoint, exit 3. On the
# way, the CUDA libraries the running rank has mapped (its /proc/PID/maps).
sig() {
  s_dir=$work/ck/sig
  rm -rf "$s_dir" "$logs/sig.jsonl"
  "$mpx" -n 1 "$gt" train "$deck" data.train="$work/g.h5" data.val= run.eval_every=0 grid.dp=1 \
    grid.pp=1 grid.tp=1 backend.device="$dev" run.steps=100000 checkpoint.dir="$s_dir" \
    checkpoint.resume=never run.metrics="$logs/sig.jsonl" &
  s_job=$!
  s_until=$(($(now) + $(left_s) - 12))
  while [ "$(now)" -lt "$s_until" ] && kill -0 "$s_job" 2>/dev/null; do # until 5 steps have run
    [ -f "$logs/sig.jsonl" ] && [ "$(grep -c '"step"' "$logs/sig.jsonl")" -ge 5 ] && break
    sleep 0.2
  done
  s_pids=$(rank_pids "checkpoint.dir=$s_dir") # the rank, not mpiexec
  echo "steps seen: $(grep -c '"step"' "$logs/sig.jsonl" 2>/dev/null); rank: ${s_pids:-none found}"
  for p in $s_pids; do
    awk '$6 ~ /\/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[a-z-]*|nvJitLink|nvidia-[a-z-]*)\.so/ {print $6}' \
      "/proc/$p/maps" 2>/dev/null | sort -u | sed 's/^/maps: /'
    kill -USR1 "$p"
  done
  [ -n "$s_pids" ] || kill "$s_job" 2>/dev/null
  wait "$s_job"
  s_rc=$?
  echo "result: signal: exit status $s_rc (want 3); checkpoints: $(find "$s_dir" -name 'step_*.h5' 2>/dev/null | sed 's|.*/||' | tr '\n' ' ')"
  [ $s_rc -eq 3 ] && ls "$s_dir"/step_*.h5 >/dev/null 2>&1
}

# sanitize TOOL full|smoke: the op test under compute-sanitizer; its own log in TOOL.san.txt
sanitize() {
  z_tool=$1 z_mode=$2
  z_args=
  [ "$z_mode" = smoke ] && z_args=--smoke
  # API errors inside cuDNN's and cuBLAS's own probing are not ours: count memory errors
  z_api=
  [ "$z_tool" = memcheck ] && "$sanitizer" --help 2>&1 | grep -q -- '--report-api-errors' &&
    z_api="--report-api-errors no"
  "$sanitizer" --version 2>&1 | tail -n 1
  echo "$sanitizer --tool $z_tool --error-exitcode 86 --print-limit 100 $z_api test_cuda_ops $z_args"
  # shellcheck disable=SC2086
  (cd "$src" && GT_SRCDIR=$src GT_BUILDDIR=$work/tb "$sanitizer" --tool "$z_tool" --error-exitcode 86 \
    --print-limit 100 $z_api --log-file "$logs/$z_tool.san.txt" "$tdir/test_cuda_ops" $z_args)
  z_rc=$?
  echo "compute-sanitizer $z_tool: exit $z_rc (86: it found errors)"
  grep -E 'SUMMARY' "$logs/$z_tool.san.txt" 2>/dev/null
  return $z_rc
}

# bench NAME LAYERS DIM HEADS BATCH [KV_HEADS]: GPT-2 NAME in bf16 at T = seq, one
# GPU: gridtrain, PyTorch eager and torch.compile, each under its own time limit;
# the step fails only when gridtrain's run does (a torch failure is reported).
# With KV_HEADS: a Llama of that shape (model.type = llama, grouped-query
# attention with KV_HEADS key/value heads, SwiGLU of the default width), gridtrain
# alone (bench_gpu_torch.py builds GPT-2 only): ms/step, tok/s, MFU by 6N + 12LCT
bench() {
  b_name=$1 b_L=$2 b_C=$3 b_H=$4 b_B=$5 b_KV=${6:-}
  b_py=$src/benchmarks/bench_gpu_torch.py
  b_dev=cuda
  [ "$dev" = cuda ] || b_dev=cpu # the dry run's own check of this code (GT_GPU_DRY_EXTRAS)
  # part NAME LIMIT [orig_env] CMD...: one part under its own limit; output to
  # NAME.json, NAME.err (orig_env: CMD in the environment run.sh started with)
  part() {
    q_name=$1 q_lim=$(cap "$2")
    shift 2
    if [ "$q_lim" -lt 10 ]; then
      echo "bench: $q_name: not run, $q_lim s left in the step" | tee "$logs/$q_name.err"
      return 0
    fi
    q_t=$(now)
    q_env=
    [ "$1" = orig_env ] && q_env=orig_env && shift
    $q_env timeout -k 5 "$q_lim" "$@" >"$logs/$q_name.json" 2>"$logs/$q_name.err"
    q_rc=$?
    echo "part $q_name: exit $q_rc after $(($(now) - q_t)) s (limit $q_lim s)" | tee -a "$logs/$q_name.err"
    return $q_rc
  }
  [ -s "$logs/ceiling.json" ] || part ceiling 60 orig_env "$py" "$b_py" --gemm-ceiling --device "$b_dev"
  # shellcheck disable=SC2046 # model_kv prints whole words
  part "gridtrain-$b_name" 120 "$mpx" -n 1 "$gt" train "$src/inputs/default.in" data.train="$work/g.h5" \
    data.val= run.eval_every=0 grid.dp=1 grid.pp=1 grid.tp=1 backend.device="$dev" \
    backend.precision=bf16 model.layers="$b_L" model.dim="$b_C" model.heads="$b_H" $(model_kv "$b_KV") \
    model.seq_len="$bench_seq" model.vocab=50304 data.batch="$b_B" data.microbatches=1 run.steps=13 \
    run.log_every=1 checkpoint.dir= checkpoint.resume=never run.metrics="$logs/bench-$b_name.jsonl"
  b_rc=$?
  cat "$logs/gridtrain-$b_name.json" "$logs/gridtrain-$b_name.err" | tail -n 30
  if [ -z "$b_KV" ]; then
    set -- --layers "$b_L" --dim "$b_C" --heads "$b_H" --seq "$bench_seq" --batch "$b_B" --device "$b_dev"
    part "eager-$b_name" 120 orig_env "$py" "$b_py" "$@"
    part "compile-$b_name" 300 orig_env "$py" "$b_py" "$@" --compile
  fi
  orig_env "$py" - "$logs" "$b_name" "$b_L" "$b_C" "$b_B" "$bench_seq" "$bench_sized" "$b_H" "$b_KV" <<'PY'
import json, statistics, sys
logs, name, L, C, B, T, sized = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
H, KV = int(sys.argv[8]), int(sys.argv[9] or 0)
V = 50304
def last_json(f):
    try:
        lines = [l for l in open(f"{logs}/{f}") if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None
def why(part):
    try:
        lines = [l.strip() for l in open(f"{logs}/{part}.err") if l.strip()]
    except OSError:
        return "not run"
    err = [l for l in lines if not l.startswith("part ")]
    status = [l for l in lines if l.startswith("part ")]
    return "; ".join(status[-1:] + err[-1:])[:400] or "no output"
N = 12 * L * C * C + 13 * L * C + V * C
if KV:  # llama: q, o (C x C), k, v (C x KV*hs), SwiGLU 3 C F, two norms; wte and an untied head
    F = -(-(8 * C // 3) // 256) * 256
    N = L * (2 * C * C + 2 * C * (C // H) * KV + 3 * C * F + 2 * C) + C + 2 * V * C
flops = 6 * N + 12 * L * C * T          # per token, attention included
ceil = last_json("ceiling.json")
ceiling = ceil.get("gemm_tflops", 0) if ceil else 0
print(f"bench: {name} (L={L} C={C}" + (f", llama, {H} heads over {KV} kv heads" if KV else "") + f") bf16 B={B} T={T}; {sized}")
print(f"bench: bf16 GEMM ceiling " + (f"{ceiling:.3g} TFLOP/s ({ceil.get('n')}^3, torch {ceil.get('torch')})"
      if ceiling else f"not measured: {why('ceiling')}"))
try:
    recs = [json.loads(l) for l in open(f"{logs}/bench-{name}.jsonl") if '"step"' in l]
    summ = [json.loads(l) for l in open(f"{logs}/bench-{name}.jsonl") if '"summary"' in l]
except (OSError, ValueError):
    recs, summ = [], []
tok = 0
if len(recs) >= 4:
    timed = recs[3:]
    ms = statistics.median(r["step_ms"] for r in timed)
    tok = B * T / (ms / 1e3)
    split = " ".join("%s %.0f%%" % (k[:-3], 100 * statistics.median(r.get(k, 0) / r["step_ms"] for r in timed))
                     for k in ("compute_ms", "comm_ms", "bubble_ms"))
    peak = summ[-1].get("device_peak_bytes", 0) / 2 ** 30 if summ else 0
    vs = f", {100 * tok * flops / ceiling / 1e12:.1f}% of the {ceiling:.3g} TFLOP/s GEMM ceiling" if ceiling else ""
    print(f"bench: gridtrain {ms:.1f} ms/step {tok:.0f} tok/s, MFU {100 * tok * flops / 989e12:.1f}% of "
          f"989 TFLOP/s{vs}; {split}; device memory peak {peak:.1f} GiB (median of steps 3-{len(recs) - 1})")
else:
    print(f"bench: gridtrain FAILED ({len(recs)} steps logged): {why('gridtrain-' + name)}")
for part, label in () if KV else (("eager", "torch eager"), ("compile", "torch.compile")):
    t = last_json(f"{part}-{name}.json")
    if t and t.get("tok_s"):
        rel = f" (gridtrain {tok / t['tok_s']:.2f}x)" if tok else ""
        print(f"bench: {label} {t['ms']:.1f} ms/step {t['tok_s']:.0f} tok/s, MFU {100 * t['tok_s'] * flops / 989e12:.1f}%"
              f"{rel}; peak {t.get('peak_gib', 0):.1f} GiB" + (f"; compile {t['compile_s']:.0f} s" if t.get("compile_s") else ""))
    else:
        print(f"bench: {label} failed: {(t or {}).get('error') or why(part + '-' + name)}")
PY
  return $b_rc
}

# ---- a step's process: run.sh --step FUNCTION ARGS (so that step can put a time
# ---- limit on a shell function) ------------------------------------------------------------------
if [ "${1:-}" = --step ]; then
  work=$GT_GPU_WORK
  # shellcheck disable=SC1091
  . "$work/env.sh"
  shift
  "$@"
  exit $?
fi

# ---- the report ---------------------------------------------------------------------------------

t0=$(now)
deadline=${GT_GPU_DEADLINE:-540}
scale=${GT_GPU_LIMIT_SCALE:-100}
grace=5   # timeout -k: SIGKILL this long after SIGTERM (a rank may trap SIGTERM)
reserve=8 # kept at the end for the report and the archive
out=${OUT:-${GT_GPU_OUT:-$src/gpu-pack/report}}
if ! mkdir -p "$out" || ! out=$(cd "$out" && pwd); then echo "run.sh: cannot make $out" >&2; exit 1; fi
report=$out/report.txt
work=$(mktemp -d /tmp/gt-gpu.XXXXXX) || exit 1
logs=$work/logs
rep=$work/rep
mkdir -p "$logs" "$rep" "$work/tb" "$work/ck"
: >"$work/env.sh"
: >"$rep/steps"
running=
device_line="$([ "$dev" = cuda ] && echo "cuda: not queried yet" || echo "cpu (dry run)")"

elapsed() { echo $(($(now) - t0)); }
scaled() { s_v=$(($1 * scale / 100)); [ "$s_v" -lt 1 ] && s_v=1; echo "$s_v"; }
selected() { case " ${GT_GPU_ONLY:-$1} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# record NAME PASS|FAIL|SKIP SECONDS LIMIT NOTE: a step's result
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$rep/steps"; }
count() { awk -F'\t' -v s="$1" '$2 == s' "$rep/steps" | wc -l | tr -d ' '; }
# progress TEXT: a line on stdout, from a subshell: if stdout goes away (a closed
# pipe), the subshell dies of SIGPIPE, not the script
progress() { (printf '[%4d s] %s\n' "$(elapsed)" "$*") 2>/dev/null; }

# failures NAME LOG: the lines of LOG that say what failed
failures() {
  # the TAP summary ("# failed N of M checks:" and its lines) first ...
  awk '/^# failed [0-9]+ of [0-9]+/ {on = 1; print; next} on && /^#/ {print; next} {on = 0}' "$2"
  # ... then every not ok / Bail out! with the # lines that follow it
  awk '/^not ok / || /^Bail out!/ {on = 1; print; next} /^# failed [0-9]+ of/ {on = 0; next}
       on && /^#/ {print; next} {on = 0}' "$2" >"$rep/tap.tmp"
  f_n=$(wc -l <"$rep/tap.tmp")
  head -n 150 "$rep/tap.tmp"
  [ "$f_n" -le 150 ] || echo "... $((f_n - 150)) more lines in logs/$1.log"
  # other lines that name an error (gridtrain, MPI, the loader, the shell)
  grep -v -E '^(not ok|ok|#|Bail out!|result: |bench: |part )' "$2" |
    grep -E -i 'error|fail|cannot|not found|assert|segmentation|core dumped|killed|abort|bad termination|timed out' |
    grep -v -E '^ +[a-z_]+\.[a-z_0-9]+ ' | head -n 30 # (not the configuration table's rows)
  echo "-- last lines:"
  tail -n 12 "$2"
}

# the CUDA libraries loaded: gridtrain's own lines, and the signal step's rank's maps
libraries() {
  l_lines=$(cat "$logs"/*.log 2>/dev/null | grep -a -o 'gridtrain: cuda library: .*' | sort -u)
  if [ -n "$l_lines" ]; then
    echo "loaded (gridtrain's lines, all steps): $(echo "$l_lines" | awk '$4 ~ /^libcudnn/ {printf "cuDNN runtime %s; ", $5}')"
    echo "$l_lines" | sed 's/^gridtrain: cuda library: /  /'
  else
    echo "loaded: no 'gridtrain: cuda library:' line in any log yet"
  fi
  l_maps=$(grep -a -h '^maps: ' "$logs"/*.log 2>/dev/null | sort -u)
  [ -z "$l_maps" ] || { echo "mapped by the signal step's running rank (/proc/PID/maps):"; echo "$l_maps" | sed 's/^maps: /  /'; }
  cat "$rep/libs" 2>/dev/null
}

# section TITLE FILE EMPTY: "# TITLE", then FILE, or EMPTY where it is empty
section() {
  echo "# $1"
  if [ -s "$2" ]; then cat "$2"; elif [ -n "$3" ]; then echo "$3"; fi
  echo
}

write_report() {
  w_head="gpu-run: $(count PASS) passed, $(count FAIL) failed, $(count SKIP) skipped"
  [ -z "$running" ] || w_head="$w_head; incomplete: $running was running at $(elapsed) s"
  {
    echo "$w_head"
    echo "$device_line; $(elapsed) s so far (deadline $deadline s)"
    echo "# gridtrain GPU run $(date -u -d "@$t0" '+%Y-%m-%d %H:%M:%S UTC' 2>/dev/null); pack: $(cat "$rep/pack" 2>/dev/null)"
    [ -z "${GT_GPU_ONLY:-}" ] || echo "# GT_GPU_ONLY=\"$GT_GPU_ONLY\": only these steps (and setup)"
    echo
    echo "# steps: result, seconds, limit (every log in logs.tar.gz)"
    awk -F'\t' '{printf "%-16s %-4s %5s s  limit %4s s  %s\n", $1, $2, $3, $4, $5}' "$rep/steps"
    [ -z "$running" ] || echo "$running: running"
    echo
    section "failures: each failed step's not ok / Bail out! lines with their diagnostics" \
      "$rep/failures" none
    section results "$rep/results" ""
    echo "# CUDA libraries"
    libraries
    echo
    section compute-sanitizer "$rep/sanitizer" "not run"
    section benchmark "$rep/bench" "not run"
    section machine "$rep/machine" ""
    section "last lines of each step" "$rep/tails" ""
  } >"$report.tmp" 2>&1
  mv "$report.tmp" "$report"
  archive
}

# archive: every log in $out/logs.tar.gz (under 16 MiB: what comes back from the
# device tool); huge logs are cut to their head and tail
archive() {
  a_base=$work
  for a_cut in 0 2097152 262144; do
    if [ "$a_cut" -gt 0 ]; then
      a_base=$work/cut
      rm -rf "$a_base"
      mkdir -p "$a_base/logs"
      for a_f in "$logs"/*; do
        [ -f "$a_f" ] || continue
        a_sz=$(wc -c <"$a_f")
        if [ "$a_sz" -gt "$a_cut" ]; then
          { head -c $((a_cut / 4)) "$a_f"
            printf '\n[... %d bytes cut by run.sh to keep the archive under 16 MiB ...]\n' "$a_sz"
            tail -c $((a_cut / 2)) "$a_f"; } >"$a_base/logs/${a_f##*/}"
        else
          cp "$a_f" "$a_base/logs/"
        fi
      done
    fi
    if tar -C "$a_base" -czf "$out/logs.tar.gz.tmp" logs 2>/dev/null &&
       [ "$(wc -c <"$out/logs.tar.gz.tmp")" -lt 16000000 ]; then
      mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
      return 0
    fi
  done
  rm -f "$out/logs.tar.gz.tmp"
}

# step NAME LIMIT[:MIN] FUNCTION ARGS...: run FUNCTION ARGS in a process of its own
# under timeout -k, output to logs/NAME.log. A step whose limit does not fit in the
# time left is skipped; with MIN, it runs on what is left when that is MIN or more.
step() {
  s_name=$1 s_lim=$(scaled "${2%%:*}") s_min=$(scaled "${2#*:}")
  shift 2
  selected "$s_name" || return 0
  s_left=$((deadline - $(elapsed) - reserve - grace))
  s_note=
  if [ "$s_lim" -gt "$s_left" ]; then
    if [ "$s_min" -le "$s_left" ]; then
      s_note="limit cut from $s_lim s by the deadline; "
      s_lim=$s_left
    else
      record "$s_name" SKIP - "$s_lim" "skipped (deadline): needs $s_lim s, $s_left s left"
      progress "$s_name: skipped (deadline)"
      write_report
      return 0
    fi
  fi
  running=$s_name
  write_report
  progress "$s_name: running (limit $s_lim s)"
  s_t=$(now)
  GT_GPU_STEP=$work:$s_name GT_GPU_WORK=$work GT_GPU_STEP_END=$((s_t + s_lim)) \
    timeout -k "$grace" "$s_lim" sh "$self" --step "$@" >"$logs/$s_name.log" 2>&1 </dev/null &
  s_pid=$!
  wait "$s_pid"
  s_rc=$?
  s_sec=$(($(now) - s_t))
  running=
  s_reaped=$(reap "$work:$s_name")
  s_ok=$(grep -c '^ok ' "$logs/$s_name.log")
  s_nok=$(grep -c '^not ok ' "$logs/$s_name.log")
  [ $((s_ok + s_nok)) -eq 0 ] || s_note="$s_note$s_ok ok, $s_nok not ok; "
  grep -q '^Bail out!' "$logs/$s_name.log" && s_note="${s_note}Bail out!; "
  case $s_rc in
    0) s_res=PASS ;;
    77) if [ "$dev" = cuda ]; then s_res=FAIL s_note="${s_note}exit 77: no CUDA device seen; "
        else s_res=SKIP s_note="${s_note}exit 77 (skipped); "; fi ;;
    124) s_res=FAIL s_note="${s_note}timed out after $s_lim s; " ;;
    137) s_res=FAIL s_note="${s_note}killed (SIGKILL: ignored SIGTERM at its limit, or out of memory); " ;;
    *) s_res=FAIL s_note="${s_note}exit $s_rc; " ;;
  esac
  [ -z "$s_reaped" ] || s_note="${s_note}ended $s_reaped; "
  s_note=${s_note%; }
  record "$s_name" "$s_res" "$s_sec" "$s_lim" "$s_note"
  if [ "$s_res" = FAIL ]; then
    { echo "## $s_name: FAIL after $s_sec s ($s_note)"; failures "$s_name" "$logs/$s_name.log"; echo; } >>"$rep/failures"
  fi
  grep -a '^result: ' "$logs/$s_name.log" | sed 's/^result: //' >>"$rep/results"
  # the tail, without gridtrain's tables of events and memory
  { echo "## $s_name: $s_res, $s_sec s"
    grep -a -v -E '^ +[a-z_.]+ +(data|compute|comm|idle|other) |^# (time by event|event |peak activations|memory per rank|rank )|^ +(stage +)?[0-9]+ +[0-9.]+ ' \
      "$logs/$s_name.log" | tail -n 15
    echo; } >>"$rep/tails"
  progress "$s_name: $s_res after $s_sec s${s_note:+ ($s_note)}"
  write_report
}

# reap TAG: end the processes a step left behind: MPICH's proxies and ranks run in
# sessions of their own, out of reach of timeout's signals to its process group,
# and a rank that traps SIGTERM (to checkpoint) can outlive mpiexec. They are
# found by the GT_GPU_STEP=TAG in their environment, get SIGTERM, and SIGKILL
# $grace s later. Prints what it ended.
stragglers() {
  grep -l -s -z -x -F "GT_GPU_STEP=$1" /proc/[0-9]*/environ 2>/dev/null | sed 's|/proc/||; s|/environ||' |
    grep -v -x "$$"
}
reap() {
  r_p=$(stragglers "$1")
  [ -n "$r_p" ] || return 0
  r_what=$(for r_q in $r_p; do cat "/proc/$r_q/comm" 2>/dev/null; done | sort | uniq -c | awk '{printf "%s%s x%d", (NR > 1 ? ", " : ""), $2, $1}')
  # shellcheck disable=SC2086
  kill -TERM $r_p 2>/dev/null
  r_i=0
  while [ $r_i -lt $((grace * 5)) ] && [ -n "$(stragglers "$1")" ]; do sleep 0.2; r_i=$((r_i + 1)); done
  r_p=$(stragglers "$1")
  # shellcheck disable=SC2086
  [ -z "$r_p" ] || kill -KILL $r_p 2>/dev/null
  echo "the processes it left behind ($r_what)$([ -n "$r_p" ] && echo ', with SIGKILL')"
}

# skip_step NAME REASON: a step that cannot run here
skip_step() {
  selected "$1" || return 0
  record "$1" SKIP - - "$2"
  case $2 in skipped*) progress "$1: $2" ;; *) progress "$1: skipped ($2)" ;; esac
}

on_signal() {
  [ -n "${s_pid:-}" ] && kill -TERM "$s_pid" 2>/dev/null
  [ -z "$running" ] || reap "$work:$running" >/dev/null
  running="${running:-the script} (interrupted by SIG$1)"
  write_report
  [ "${GT_GPU_KEEP:-0}" = 1 ] || rm -rf "$work"
  exit 1
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP

# ---- setup: what the machine has, the binaries, the libraries -----------------------------------

# the environment this script started with, for the Python steps
if [ -n "${LD_LIBRARY_PATH+x}" ]; then orig_ld_set=yes; else orig_ld_set=no; fi
orig_ld=${LD_LIBRARY_PATH:-}
orig_path=$PATH
orig_unset= # the variables this script sets that were not set
for v in OPENBLAS_CORETYPE OMP_WAIT_POLICY HYDRA_LAUNCHER UCX_MODULE_DIR UCX_RNDV_THRESH UCX_WARN_UNUSED_ENV_VARS; do
  eval "[ -n \"\${$v+x}\" ]" || orig_unset="$orig_unset $v"
done
py=${GT_GPU_PYTHON:-}
[ -n "$py" ] || { [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3; } || py=python3
[ "$dev" = cuda ] || { GT_GPU_TEST_BACKEND=$dev && export GT_GPU_TEST_BACKEND; }
[ "$dev" = cuda ] && unset GT_GPU_TEST_BACKEND
# the dry run's cpu runs share the cores with whatever else runs (make check -j):
# OpenMP threads that spin while they wait made a 40-step curve 10x slower
[ "$dev" = cuda ] || { : "${OMP_WAIT_POLICY:=PASSIVE}" && export OMP_WAIT_POLICY; }
HYDRA_LAUNCHER=fork # the GPU machine's Hydra has no ssh
export HYDRA_LAUNCHER
keep src self dev deck py orig_ld_set orig_ld orig_path orig_unset logs

setup_t=$(now)
setup_fail=
running=setup
write_report
M=$rep/machine
{
  # shellcheck disable=SC1091
  echo "host: $(uname -srm); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"); $(nproc) cores; $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "cpu: $(grep -m 1 'model name' /proc/cpuinfo | sed 's/.*: //'); family $(grep -m 1 'cpu family' /proc/cpuinfo | sed 's/.*: //') model $(grep -m 1 '^model[[:space:]]*:' /proc/cpuinfo | sed 's/.*: //'); $(grep -m 1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' | tr '\n' ' ')"
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>&1 | head -n 1)"
  echo "tools: $(for t in nvidia-smi xz gzip pgrep compute-sanitizer nvcc python3; do printf '%s=%s ' "${t##*/}" "$(command -v "$t" >/dev/null && echo yes || echo no)"; done)"
  echo "cuda dirs: $(echo /usr/local/cuda*); in /usr/local/cuda/lib64: $(cd /usr/local/cuda/lib64 2>/dev/null && echo ./*.so.[0-9] ./*.so.[0-9][0-9] | sed 's|\./||g')"
  echo "ldconfig -p (CUDA, MPI, HDF5, BLAS, C++):"
  ldconfig -p 2>/dev/null | grep -E '(libcuda\.so\.1|libcudart\.so\.13|libcublasLt\.so\.13|libcudnn\.so\.9|libnccl\.so\.2|libnvrtc\.so\.13|libmpich\.so\.12|libhdf5_mpich\.so\.[0-9]+|libopenblas\.so\.0|libstdc\+\+\.so\.6) \(libc6,x86-64' | sed 's/^[[:space:]]*/  /' | head -n 25
  [ "$dev" != cuda ] && echo "python: $py (the dry run does not ask for torch)" ||
  echo "python: $py: $(orig_env timeout 45 "$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no device")' 2>&1 | tail -n 1)"
} >"$M" 2>&1

# the device (line 2 of the report; the benchmark's size)
mem_mib=0
if [ "$dev" = cuda ]; then
  q=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits 2>/dev/null | head -n 1)
  if [ -n "$q" ]; then
    mem_mib=$(echo "$q" | awk -F', *' '{print int($2)}')
    device_line=$(echo "$q" | awk -F', *' '{printf "%s, %.1f GiB, driver %s", $1, $2 / 1024, $3}')
  else
    device_line="cuda: nvidia-smi gave nothing"
  fi
fi

# the binaries: the pack (unpacked here), or a build directory (GT_GPU_BUILD)
if [ -n "${GT_GPU_BUILD:-}" ]; then
  b=$(cd "$GT_GPU_BUILD" && pwd)
  gt=$b/gridtrain tdir=$b/tests/gpu mpx=${MPIEXEC:-mpiexec}
  echo "build $b (GT_GPU_BUILD), not a pack" >"$rep/pack"
  libdirs=
else
  pack=${GT_GPU_PACK:-$src/gpu-pack/gpu-pack.tar.xz}
  mkdir -p "$work/pack"
  if [ ! -f "$pack" ]; then
    setup_fail="no $pack: run tests/gpu/pack.sh here and carry gpu-pack"
  elif command -v xz >/dev/null; then
    timeout 120 tar -C "$work/pack" -xJf "$pack" || setup_fail="cannot unpack $pack with tar and xz"
  else # no xz program there: Python's lzma
    orig_env timeout 120 "$py" -c 'import sys, tarfile
tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' \
      "$pack" "$work/pack" || setup_fail="cannot unpack $pack with Python's tarfile (no xz program)"
  fi
  gt=$work/pack/bin/gridtrain tdir=$work/pack/tests mpx=$work/pack/bin/mpiexec
  libdirs=$work/pack/lib
  # MPICH's transport, the pack's UCX: its plugins from the pack (CMA; no others
  # of another UCX version), and no rendezvous protocol: without CMA (a plugin
  # that did not load, or a ptrace restriction there), MPICH 4.0.2 over UCX 1.13
  # hung now and then at the end of 2-4 rank runs here; eager messages did not
  mkdir -p "$work/pack/ucx"
  UCX_MODULE_DIR=$work/pack/ucx
  UCX_RNDV_THRESH=${UCX_RNDV_THRESH:-inf}
  UCX_WARN_UNUSED_ENV_VARS=n
  export UCX_MODULE_DIR UCX_RNDV_THRESH UCX_WARN_UNUSED_ENV_VARS
  echo "UCX: plugins $(cd "$UCX_MODULE_DIR" && echo ./*.so* | sed 's|\./||g') (UCX_MODULE_DIR), UCX_RNDV_THRESH=$UCX_RNDV_THRESH" >>"$M"
  [ -n "$setup_fail" ] || echo "$(cat "$work/pack/commit" 2>/dev/null); built on $(tr '\n' ' ' <"$work/pack/glibc-built-with" 2>/dev/null)" >"$rep/pack"
  PATH=$work/pack/bin:$PATH
fi

# glibc (and the C++ runtime): the target's must be at least what the pack needs
if [ -z "$setup_fail" ] && [ -f "$work/pack/needs" ]; then
  need=$(awk '$1 == "glibc" {print $2}' "$work/pack/needs")
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  [ -n "$have" ] || have=$(ldd --version 2>&1 | head -n 1 | grep -o '[0-9][0-9]*\.[0-9][0-9]*$')
  if [ -n "$need" ] && [ -n "$have" ] &&
     [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
    setup_fail="glibc $have here, but the pack needs $need (built on $(head -n 1 "$work/pack/glibc-built-with")): build the pack on an older system"
  fi
  echo "glibc: here $have, the pack needs $need" >>"$M"
  needxx=$(awk '$1 == "glibcxx" {print $2}' "$work/pack/needs")
  cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  havexx=
  [ -z "$cxx" ] || havexx=$(orig_env "$py" -c 'import re, sys; print(sorted(set(re.findall(rb"GLIBCXX_([0-9.]+[0-9])", open(sys.argv[1], "rb").read())), key=lambda v: [int(x) for x in v.split(b".")])[-1].decode())' "$cxx" 2>/dev/null)
  if [ -n "$needxx" ] && { [ -z "$havexx" ] ||
     [ "$(printf '%s\n%s\n' "$needxx" "$havexx" | sort -V | head -n 1)" != "$needxx" ]; }; then
    libdirs=$libdirs:$work/pack/lib-compat
    echo "libstdc++: here ${cxx:-none} (GLIBCXX ${havexx:-?}), the pack needs $needxx: the pack's lib-compat/ goes on gridtrain's path" >>"$M"
    needc=$(awk '$1 == "glibc-compat" {print $2}' "$work/pack/needs")
    if [ -n "$needc" ] && [ -n "$have" ] &&
       [ "$(printf '%s\n%s\n' "$needc" "$have" | sort -V | head -n 1)" != "$needc" ]; then
      setup_fail="libstdc++ here lacks GLIBCXX_$needxx, and the pack's own needs glibc $needc (here $have): build the pack on an older system"
    fi
  else
    echo "libstdc++: here $cxx (GLIBCXX $havexx), the pack needs ${needxx:-?}" >>"$M"
  fi
fi

# the CUDA libraries: the pip wheels (namespace packages: walk nvidia.__path__),
# then the toolkit, then a search of site-packages and /usr
if [ "$dev" = cuda ] && [ -z "$setup_fail" ]; then
  orig_env timeout 60 "$py" - >"$rep/libfind" 2>&1 <<'PY'
import glob, os, site, sys, time
want = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9", "libnccl.so.2",
        "libnvrtc.so.13", "libnvJitLink.so.13"]
dirs, found = [], {}
def add(d):
    d = os.path.realpath(d)
    if d not in dirs:
        dirs.append(d)
    for w in want:
        if w not in found and os.path.exists(os.path.join(d, w)):
            found[w] = os.path.join(d, w)
try:
    from importlib import metadata
    print("wheels:", ", ".join(sorted(f"{d.metadata['Name']} {d.version}" for d in metadata.distributions()
                                      if (d.metadata["Name"] or "").lower().startswith(("nvidia", "torch", "triton")))))
except Exception as e:
    print("wheels: cannot list:", e)
try:
    import nvidia
    roots = list(nvidia.__path__)
    print("nvidia.__path__:", " ".join(roots))
except Exception as e:
    roots = []
    print("no nvidia package:", e)
for r in roots:  # nvidia/*/lib (and nvidia/cu13/lib): any lib folder holding a .so
    for base, sub, files in os.walk(r):
        if base[len(r):].count(os.sep) >= 3:
            sub[:] = []
        if os.path.basename(base) in ("lib", "lib64") and any(".so" in f for f in files):
            add(base)
for d in sorted(glob.glob("/usr/local/cuda/lib64")) + sorted(glob.glob("/usr/local/cuda/targets/x86_64-linux/lib")) + \
         sorted(glob.glob("/usr/local/cuda-*/lib64")) + sorted(glob.glob("/usr/local/cuda-*/targets/x86_64-linux/lib")):
    add(d)
missing = [w for w in want if w not in found]
if missing:  # a search: site-packages, then /usr (at most 30 s)
    tops = [p for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path if "-packages" in p]
    t0 = time.time()
    for top in dict.fromkeys(tops + ["/usr/lib", "/usr/lib64", "/usr/local", "/usr"]):
        if not missing or time.time() - t0 > 30:
            break
        for base, sub, files in os.walk(top):
            sub[:] = [s for s in sub if s not in ("share", "include", "src", "doc", "man", "__pycache__")]
            hit = [w for w in missing if w in files]
            if hit:
                add(base)
                missing = [w for w in want if w not in found]
            if not missing or time.time() - t0 > 30:
                break
for d in dirs:
    print("dir", d)
for w in want:
    print("lib", w, found.get(w, "NOT FOUND"))
PY
  dirs=$(awk '$1 == "dir" {print $2}' "$rep/libfind" | tr '\n' ':')
  libdirs=$libdirs${GT_GPU_LIBDIRS:+:$GT_GPU_LIBDIRS}:${dirs%:}
  {
    echo "found (run.sh's search; the path order is the loader's):"
    grep -v -E '^(dir|lib) ' "$rep/libfind" | sed 's/^/  /'
    awk '$1 == "lib" {printf "  %-20s %s\n", $2, $3}' "$rep/libfind"
  } >"$rep/libs"
fi
# no empty entries (one would mean the working directory), each directory once
LD_LIBRARY_PATH=$(printf '%s' "$libdirs:${LD_LIBRARY_PATH:-}" | tr ':' '\n' | awk 'NF && !seen[$0]++' | paste -s -d : -)
export LD_LIBRARY_PATH PATH
echo "gridtrain's LD_LIBRARY_PATH: $LD_LIBRARY_PATH" >>"$M"

# the binaries load (CUDA's libraries are opened when used: ldd need not show them)
if [ -z "$setup_fail" ]; then
  for f in "$gt" "$tdir/test_cuda_ops" "$tdir/test_cuda_train"; do
    miss=$(ldd "$f" 2>&1 | grep 'not found' | grep -v -E 'libcuda|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink' | tr -s ' \t\n' ' ')
    [ -z "$miss" ] || setup_fail="${f##*/} cannot load: $miss"
    ldd "$f" 2>&1 | grep -E 'not found|libcu|libnccl' | sed "s|^|ldd ${f##*/}: |" >>"$M"
  done
  [ -x "$mpx" ] || command -v "$mpx" >/dev/null || setup_fail="no mpiexec ($mpx)"
fi

# OpenBLAS 0.3.21 falls back to slow Prescott kernels on CPUs it does not know:
# the cpu reference runs then get a core chosen by the CPU's flags
if [ -z "$setup_fail" ]; then
  blas=$("$gt" --version 2>&1 | grep -E '^ *BLAS' | sed 's/^ *BLAS *: *//')
  core=$(echo "$blas" | sed -n 's/.*core \([A-Za-z0-9_]*\).*/\1/p')
  if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    echo "OpenBLAS: $blas (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE was set)" >>"$M"
  elif [ -z "$core" ] || [ "$core" = Prescott ] || [ "$core" = Unknown ]; then
    fl=$(grep -m 1 '^flags' /proc/cpuinfo)
    t=
    case " $fl " in *" avx2 "*) t=Haswell ;; esac
    case " $fl " in *" avx512f "*) case " $fl " in *" avx512bw "*) case " $fl " in *" avx512vl "*) t=SkylakeX ;; esac ;; esac ;; esac
    if [ -n "$t" ]; then
      OPENBLAS_CORETYPE=$t
      export OPENBLAS_CORETYPE
      echo "OpenBLAS: $blas: set OPENBLAS_CORETYPE=$t (by the CPU's flags) for gridtrain's cpu runs" >>"$M"
    else
      echo "OpenBLAS: $blas (no AVX2: left as it is)" >>"$M"
    fi
  else
    echo "OpenBLAS: $blas" >>"$M"
  fi
  "$gt" --version >>"$M" 2>&1
fi
keep gt tdir mpx
[ "$dev" != cuda ] || [ "$mem_mib" -gt 0 ] || [ -z "${blas:-}" ] ||
  device_line="$("$gt" --version 2>&1 | grep -E '^ *CUDA' | sed 's/^ *CUDA *: *//') (no nvidia-smi)"

# the data set, and the benchmark's size from the device found
if [ -z "$setup_fail" ]; then
  timeout 60 "$gt" ingest text "$src/tests/data/genesis.txt" -o "$work/g.h5" --val-fraction 0.05 \
    >"$logs/setup-ingest.log" 2>&1 || setup_fail="gridtrain ingest failed: $(tail -n 2 "$logs/setup-ingest.log" | tr '\n' ' ')"
fi
curve_steps=${GT_GPU_CURVE_STEPS:-$([ "$dev" = cuda ] && echo 200 || echo 40)}
layout_list=${GT_GPU_LAYOUTS:-dp2 tp2 pp2 pp2-1f1b pp2-zb 3d staged}
parity_steps=${GT_GPU_PARITY_STEPS:-20}
bench_seq=${GT_GPU_BENCH_SEQ:-1024}
# NAME:LAYERS:DIM:HEADS[:KV_HEADS] (KV_HEADS: a Llama with grouped-query attention)
bench_models=${GT_GPU_BENCH_MODELS:-124m:12:768:12 llama-350m:24:1024:16:4 350m:24:1024:16}
# the batch: the largest of 64, 32, 16, 8 whose planned peak (gridtrain plan
# --memory) is at most 30% of the device's memory, so that PyTorch eager, which
# keeps more, fits too: 32 and 16 (124M, 350M) on an H100 80 GB, 64 and 32 on an H200
# batch_for LAYERS DIM HEADS [KV_HEADS]
batch_for() {
  [ -n "${GT_GPU_BENCH_BATCH:-}" ] && { echo "$GT_GPU_BENCH_BATCH"; return; }
  for bf_b in 64 32 16 8; do
    # shellcheck disable=SC2046 # model_kv prints whole words
    bf_p=$(timeout 30 "$gt" plan --memory "$src/inputs/default.in" --ranks 1 grid.dp=1 grid.pp=1 grid.tp=1 \
      model.layers="$1" model.dim="$2" model.heads="$3" $(model_kv "${4:-}") model.seq_len="$bench_seq" model.vocab=50304 \
      data.batch="$bf_b" data.microbatches=1 backend.precision=bf16 backend.device="$dev" 2>/dev/null |
      awk '/^ *[0-9]+ / {v = $(NF - 1); u = $NF; m = u == "GiB" ? 1024 : u == "MiB" ? 1 : u == "KiB" ? 1 / 1024 : 1 / 1048576; t = v * m} END {print int(t)}')
    { [ -n "$bf_p" ] && [ "$bf_p" -gt 0 ]; } || break
    [ $((bf_p * 100)) -le $((mem_mib * 30)) ] && { echo "$bf_b"; return; }
  done
  # no plan: by the memory alone (an H200 has 139 GiB, an H100 80 GB)
  if [ "$mem_mib" -ge 120000 ]; then echo 64; elif [ "$mem_mib" -ge 70000 ]; then echo 32; else echo 8; fi
}
if [ "$mem_mib" -ge 120000 ]; then bench_sized="sized for an H200-class device ($((mem_mib / 1024)) GiB)"
elif [ "$mem_mib" -gt 0 ]; then bench_sized="sized for an H100-class device ($((mem_mib / 1024)) GiB)"
else bench_sized="the device's memory unknown"; fi
keep curve_steps layout_list parity_steps bench_seq bench_sized
printf 'setup: %s\n' "${setup_fail:-ok}" >>"$M"
running=
record setup "$([ -z "$setup_fail" ] && echo PASS || echo FAIL)" $(($(now) - setup_t)) - "${setup_fail:-}"
[ -z "$setup_fail" ] || printf '## setup: FAIL\n%s\n\n' "$setup_fail" >>"$rep/failures"
progress "setup: ${setup_fail:-ok}"

# ---- the steps, the most basic first -----------------------------------------------------------

sanitizer=${GT_GPU_SANITIZER:-}
if [ -z "$sanitizer" ]; then
  for f in "$(command -v compute-sanitizer)" /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
           /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
    [ -n "$f" ] && [ -x "$f" ] && { sanitizer=$f; break; }
  done
fi
keep sanitizer
# the dry run leaves the sanitizer and the benchmark out (GT_GPU_DRY_EXTRAS=1 runs
# them anyway, the benchmark's torch on the cpu: a check of this script's own code)
extras=$([ "$dev" = cuda ] || [ "${GT_GPU_DRY_EXTRAS:-0}" = 1 ] && echo yes || echo no)
if [ -n "$setup_fail" ]; then
  for s in device ops-smoke train-one-step ops curves nccl-shared-gpu layouts-fp32 layouts-bf16 \
           checkpoint signal curves-llama memcheck racecheck; do skip_step "$s" "setup failed"; done
  for m in $bench_models; do skip_step "bench-${m%%:*}" "setup failed"; done
else
  # the first minute: the device, one GEMM per precision and one attention against
  # the cpu reference, one training step
  # (the limits of these ten add up to 525 s: with setup, every one of them gets
  # its chance within the default deadline even if each ran to its limit)
  step device 20 device_query
  step ops-smoke 45 tap_prog test_cuda_ops --smoke
  step train-one-step 25 tap_prog test_cuda_train --one-step
  # then everything else
  step ops 120 tap_prog test_cuda_ops
  step curves 90 curves gpt "$curve_steps"
  if [ "$dev" = cuda ]; then step nccl-shared-gpu 20 nccl_shared
  else skip_step nccl-shared-gpu "dry run: needs a GPU"; fi
  step layouts-fp32 60 layouts fp32
  step layouts-bf16 75 layouts bf16
  step checkpoint 40 ckpt
  step signal 30 sig
  # Llama's curves (cuDNN's grouped-query attention in training) after the ten
  # above, so that they cannot take those steps' time: run when the deadline
  # leaves room, else reported skipped (deadline)
  step curves-llama 60 curves llama "$curve_steps"

  # compute-sanitizer on the op test: the full one where the deadline allows it
  # and still leaves the benchmark its time, else --smoke
  bench_keep=0
  for m in $bench_models; do
    [ "$extras" = yes ] && selected "bench-${m%%:*}" && bench_keep=$(scaled 150)
  done
  for tool in memcheck racecheck; do
    selected "$tool" || continue
    if [ "$extras" = no ]; then skip_step "$tool" "dry run: no GPU"
    elif [ -z "$sanitizer" ] || [ ! -x "$sanitizer" ]; then
      skip_step "$tool" "no compute-sanitizer (PATH, /usr/local/cuda*/bin)"
    else
      left=$((deadline - $(elapsed) - reserve - grace - bench_keep))
      mode=smoke lim=90
      [ "$(scaled 240)" -le "$left" ] && mode=full lim=240
      if [ "$(scaled $lim)" -gt "$left" ]; then
        skip_step "$tool" "skipped (deadline): $left s left after keeping $bench_keep s for the benchmark"
      else
        step "$tool" "$lim" sanitize "$tool" "$mode"
        {
          echo "## $tool on test_cuda_ops $([ "$mode" = smoke ] && echo --smoke): $(awk -F'\t' -v s="$tool" '$1 == s {r = $2 " " $3 " s " $5} END {print r}' "$rep/steps")"
          grep -a -E 'SUMMARY' "$logs/$tool.san.txt" 2>/dev/null
          grep -a -v -E 'COMPUTE-SANITIZER|SUMMARY|^========= *$' "$logs/$tool.san.txt" 2>/dev/null | head -n 40
          echo
        } >>"$rep/sanitizer"
        write_report
      fi
    fi
  done

  # the benchmark, last: GPT-2 124M and 350M, bf16, T = 1024, against PyTorch
  for m in $bench_models; do
    IFS=: read -r b_name b_L b_C b_H b_KV <<EOF
$m
EOF
    selected "bench-$b_name" || continue
    if [ "$extras" = no ]; then skip_step "bench-$b_name" "dry run: no GPU"; continue; fi
    b_B=$(batch_for "$b_L" "$b_C" "$b_H" "$b_KV")
    if [ -n "${GT_GPU_BENCH_BATCH:-}" ]; then echo "bench: $b_name at batch $b_B (GT_GPU_BENCH_BATCH)"
    else echo "bench: $b_name at batch $b_B, $bench_sized: the largest of 64/32/16/8 whose peak by gridtrain plan --memory is <= 30% of the device's memory"
    fi >>"$rep/bench"
    step "bench-$b_name" 300:60 bench "$b_name" "$b_L" "$b_C" "$b_H" "$b_B" "$b_KV"
    grep -a '^bench: ' "$logs/bench-$b_name.log" 2>/dev/null >>"$rep/bench"
    echo >>"$rep/bench"
    write_report
  done
fi

write_report
progress "done: $(head -n 1 "$report")"
(echo "report: $report (and $out/logs.tar.gz); its top:"
 awk '/^# machine/ {exit} {n += length($0) + 1; if (n > 9000) exit; print}' "$report") 2>/dev/null
nfail=$(count FAIL)
if [ "${GT_GPU_KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
[ "$nfail" -eq 0 ]
