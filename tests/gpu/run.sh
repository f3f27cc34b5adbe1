#!/bin/sh
# tests/gpu/run.sh - the one script to run on a lent GPU machine: the GPU
# tests, cuda layout parity, a checkpoint round trip, and the GPT-2 step
# benchmark against PyTorch, in under 8 minutes; a report in $OUT/report.txt
# (or ./gpu-report.txt).
#
# On this machine first:   tests/gpu/pack.sh        (makes gpu-pack/gpu-pack.tar.xz)
# then on the GPU machine (the device tool, from the repository root, carrying gpu-pack):
#   run(command="sh tests/gpu/run.sh", carry=["gpu-pack"], timeout_s=540)
#
# The GPU machine has CUDA but no MPI, HDF5, OpenBLAS or inih (PLATFORM.md):
# the pack brings them, built here; cuBLAS, cuDNN and cudart come from that
# machine (its toolkit or the pip nvidia-* packages), found below. Each step
# has its own time limit, and a failed step is reported and does not stop
# the others. Exit status: 0 when every step passed.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$src}
report=$out/report.txt
[ -n "${OUT:-}" ] || report=$src/gpu-report.txt
self=$src/tests/gpu/run.sh
# a step (run.sh --step ...) works in the directory of the run that started it
work=${GT_GPU_WORK:-$(mktemp -d /tmp/gt-gpu.XXXXXX)}
gt=$work/bin/gridtrain
deck=$src/tests/decks/tiny.in
# GT_GPU_RUN_DEVICE=cpu runs the steps on the CPU instead, to check this
# script's own logic where there is no GPU (the benchmark is then left out)
dev=${GT_GPU_RUN_DEVICE:-cuda}
export GT_GPU_RUN_DEVICE="$dev"
[ "$dev" = cuda ] || { GT_GPU_TEST_BACKEND=$dev; export GT_GPU_TEST_BACKEND; }
t_start=$(date +%s)
failed=0

say() { printf '%s\n' "$*" | tee -a "$report"; }
# step NAME LIMIT CMD...: run with a time limit; output to the report
step() {
  name=$1 limit=$2
  shift 2
  # GT_GPU_ONLY="name ...": run only these steps (a rerun of what failed)
  case " ${GT_GPU_ONLY:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  say "## $name (limit ${limit}s, at $(($(date +%s) - t_start))s)"
  GT_GPU_WORK=$work timeout "$limit" sh "$self" --step "$@" >"$work/$name.log" 2>&1
  rc=$?
  tail -n 60 "$work/$name.log" >>"$report"
  if [ $rc -eq 0 ]; then say "== $name: PASS"
  elif [ $rc -eq 77 ]; then say "== $name: SKIP"
  else say "== $name: FAIL (exit $rc$([ $rc -eq 124 ] && echo ', timed out'))"; failed=$((failed + 1))
  fi
}

# ---- the steps (functions, so that step can run each under a time limit)

parity() {
  # parity TAG RANKS PRECISION OVERRIDES...: losses of every step to TAG.jsonl
  tag=$1 n=$2 prec=$3
  shift 3
  mpiexec -n "$n" "$gt" train "$deck" data.train="$work/g.h5" data.val= run.eval_every=0 \
    backend.device="$dev" backend.precision="$prec" checkpoint.dir= checkpoint.resume=never \
    run.steps=20 run.metrics="$work/$tag.jsonl" "$@"
}

layouts() {
  prec=$1
  parity "one-$prec" 1 "$prec" grid.dp=1 grid.pp=1 grid.tp=1 || return 1
  for l in "dp2 2 grid.dp=2 grid.pp=1 grid.tp=1" "tp2 2 grid.dp=1 grid.pp=1 grid.tp=2" \
           "pp2 2 grid.dp=1 grid.pp=2 grid.tp=1 parallel.schedule=gpipe" \
           "pp2-1f1b 2 grid.dp=1 grid.pp=2 grid.tp=1 parallel.schedule=1f1b" \
           "3d 8 grid.dp=2 grid.pp=2 grid.tp=2" "staged 4 grid.dp=2 grid.pp=1 grid.tp=2 backend.mpi_device=off"; do
    set -- $l
    tag=$1 n=$2
    shift 2
    parity "$tag-$prec" "$n" "$prec" "$@" || return 1
  done
  bound=$([ "$prec" = fp32 ] && echo 1e-4 || echo 2e-2)
  python3 - "$work" "$prec" "$bound" <<'PY'
import json, sys
work, prec, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
def losses(tag):
    return [json.loads(l)["loss"] for l in open(f"{work}/{tag}-{prec}.jsonl") if '"step"' in l]
ref = losses("one")
bad = 0
for tag in ("dp2", "tp2", "pp2", "pp2-1f1b", "3d", "staged"):
    got = losses(tag)
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    ok = len(got) == len(ref) and worst <= bound
    bad += not ok
    print(f"{prec} {tag:9s} worst relative loss gap {worst:.2e} (bound {bound:g}): {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
PY
}

# NCCL: two ranks of a group on one GPU are refused with one clear error
# (exit 2). With one GPU, NCCL parity itself (a GPU per rank) cannot run here:
# the layout parity below is MPI's, direct or staged.
nccl_shared() {
  mpiexec -n 2 "$gt" train "$deck" data.train="$work/g.h5" data.val= run.eval_every=0 \
    backend.device="$dev" grid.dp=1 grid.pp=1 grid.tp=2 parallel.collectives=nccl \
    checkpoint.dir= checkpoint.resume=never run.steps=2 2>"$work/nccl.err"
  rc=$?
  cat "$work/nccl.err"
  [ $rc -eq 2 ] && grep -q "share one GPU" "$work/nccl.err"
}

# shellcheck disable=SC2086
ckpt() {
  c=$work/ckpt
  rm -rf "$c" "$c.b" "$c.c" "$c.d"
  common="data.train=$work/g.h5 data.val= run.eval_every=0 grid.dp=1 grid.pp=1 grid.tp=1 run.steps=20"
  # 20 steps with checkpoints at 10 and 20; then from step 10 again to 20
  mpiexec -n 1 "$gt" train "$deck" $common backend.device="$dev" checkpoint.dir="$c" \
    checkpoint.every=10 checkpoint.keep=5 checkpoint.resume=never run.metrics="$work/full.jsonl" &&
  mpiexec -n 1 "$gt" train "$deck" $common backend.device="$dev" checkpoint.dir="$c.b" \
    checkpoint.resume="$c/step_00000010.h5" run.metrics="$work/b.jsonl" &&
  # the device's step-20 checkpoint continues on the cpu, and the cpu's on the device
  mpiexec -n 1 "$gt" train "$deck" $common run.steps=25 backend.device=cpu checkpoint.dir="$c.c" \
    checkpoint.resume="$c/step_00000020.h5" run.metrics="$work/c.jsonl" &&
  mpiexec -n 1 "$gt" train "$deck" $common run.steps=30 backend.device="$dev" checkpoint.dir="$c.d" \
    checkpoint.resume="$c.c/step_00000025.h5" run.metrics="$work/d.jsonl" || return 1
  python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def rec(f):
    return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{w}/{f}") if '"step"' in l}
full, b, c, d = rec("full.jsonl"), rec("b.jsonl"), rec("c.jsonl"), rec("d.jsonl")
same = bool(b) and all(full[s] == b[s] for s in b)
print("resume bit for bit (steps %s): %s" % (sorted(b), same))
print("device checkpoint continued on cpu: steps %s, losses %s" % (sorted(c), [round(c[s], 4) for s in sorted(c)]))
print("cpu checkpoint continued on the device: steps %s, losses %s" % (sorted(d), [round(d[s], 4) for s in sorted(d)]))
sys.exit(0 if same and sorted(c) == list(range(20, 25)) and sorted(d) == list(range(25, 30)) else 1)
PY
}

sig() {
  mpiexec -n 1 "$gt" train "$deck" data.train="$work/g.h5" data.val= run.eval_every=0 grid.dp=1 \
    grid.pp=1 grid.tp=1 backend.device="$dev" run.steps=100000 checkpoint.dir="$work/sig" \
    checkpoint.resume=never run.metrics="$work/sig.jsonl" &
  job=$!
  for _ in $(seq 300); do # until 5 steps have run
    [ -f "$work/sig.jsonl" ] && [ "$(grep -c '"step"' "$work/sig.jsonl")" -ge 5 ] && break
    sleep 0.1
  done
  for p in $(pgrep -f "checkpoint.dir=$work/sig"); do # the rank, not mpiexec
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gridtrain ] && kill -USR1 "$p"
  done
  wait $job
  rc=$?
  echo "exit status $rc (want 3); checkpoints: $(ls "$work/sig" 2>/dev/null | tr '\n' ' ')"
  [ $rc -eq 3 ]
}

bench() {
  name=$1 L=$2 C=$3 H=$4 B=$5
  mpiexec -n 1 "$gt" train "$src/inputs/default.in" data.train="$work/g.h5" data.val= \
    run.eval_every=0 grid.dp=1 grid.pp=1 grid.tp=1 backend.device="$dev" backend.precision=bf16 \
    model.layers="$L" model.dim="$C" model.heads="$H" model.seq_len=1024 model.vocab=50304 \
    data.batch="$B" data.microbatches=1 run.steps=13 run.log_every=1 checkpoint.dir= \
    checkpoint.resume=never run.metrics="$work/bench-$name.jsonl" || return 1
  python3 "$src/benchmarks/bench_gpu_torch.py" --layers "$L" --dim "$C" --heads "$H" \
    --batch "$B" >"$work/torch-$name.json" || echo '{"tok_s": 0}' >"$work/torch-$name.json"
  python3 "$src/benchmarks/bench_gpu_torch.py" --layers "$L" --dim "$C" --heads "$H" \
    --batch "$B" --compile >"$work/compile-$name.json" || echo '{"tok_s": 0}' >"$work/compile-$name.json"
  python3 - "$work" "$name" "$L" "$C" "$B" <<'PY'
import json, statistics, sys
w, name, L, C, B = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
T, V = 1024, 50304
recs = [json.loads(l) for l in open(f"{w}/bench-{name}.jsonl") if '"step"' in l]
ms = statistics.median(r["step_ms"] for r in recs[3:])
tok = B * T / (ms / 1e3)
N = 12 * L * C * C + 13 * L * C + V * C
flops = 6 * N + 12 * L * C * T          # per token, attention included
ceiling = max(json.loads(open(f"{w}/ceiling.json").read().strip().splitlines()[-1])["gemm_tflops"], 1e-9)
t = json.loads(open(f"{w}/torch-{name}.json").read().strip().splitlines()[-1])
c = json.loads(open(f"{w}/compile-{name}.json").read().strip().splitlines()[-1])
last = recs[-1]
split = "compute %.0f%% comm %.0f%% bubble %.0f%%" % tuple(
    100 * statistics.median(r[k] / r["step_ms"] for r in recs[3:])
    for k in ("compute_ms", "comm_ms", "bubble_ms"))
summ = [json.loads(l) for l in open(f"{w}/bench-{name}.jsonl") if '"summary"' in l]
peak = summ[-1].get("device_peak_bytes", 0) / 2 ** 30 if summ else 0
print(f"{name}: B={B} T={T} gridtrain {ms:.1f} ms/step {tok:.0f} tok/s, "
      f"MFU {100 * tok * flops / 989e12:.1f}% of 989 TFLOP/s, {100 * tok * flops / ceiling / 1e12:.1f}% of the "
      f"{ceiling:.0f} TFLOP/s GEMM ceiling; {split}; device memory peak {peak:.1f} GiB; "
      f"torch eager {t.get('tok_s', 0):.0f} tok/s ({tok / max(t.get('tok_s', 0), 1e-9):.2f}x), "
      f"torch.compile {c.get('tok_s', 0):.0f} tok/s ({tok / max(c.get('tok_s', 0), 1e-9):.2f}x); "
      f"torch peak {t.get('peak_gib', 0):.1f} GiB")
PY
}

# run.sh --step FUNCTION ARGS...: one step, in a process of its own (how step
# puts a time limit on a shell function)
if [ "${1:-}" = --step ]; then
  shift
  "$@"
  exit $?
fi

# ---- main
: >"$report"
say "# gridtrain GPU run, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"

# ---- what the machine has
{
  echo "## machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | head -5
  ldd --version 2>&1 | head -n 1
  echo "cuda dir: $(ls -d /usr/local/cuda* 2>/dev/null | tr '\n' ' ')"
  ldconfig -p 2>/dev/null | grep -E 'libcudart|libcublasLt|libcudnn\.|libnccl|libmpi|libhdf5|libopenblas' | head -20
  python3 -c 'import nvidia, os; print("pip nvidia:", os.path.dirname(nvidia.__file__))' 2>&1 | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1 | tail -1
  nproc
} >>"$report" 2>&1

# ---- the pack
pack=$src/gpu-pack/gpu-pack.tar.xz
if [ ! -f "$pack" ]; then
  say "no $pack: run tests/gpu/pack.sh on the build machine and carry gpu-pack"
  exit 1
fi
tar -C "$work" -xJf "$pack" || { say "cannot unpack $pack"; exit 1; }
say "pack: commit $(cat "$work/commit"), built with $(cat "$work/glibc-built-with")"
libdirs=$work/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libdirs=$libdirs:$d
done
nv=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null || true)
if [ -n "$nv" ]; then
  for d in "$nv"/*/lib; do [ -d "$d" ] && libdirs=$libdirs:$d; done
fi
LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PATH=$work/bin:$PATH
export LD_LIBRARY_PATH PATH
missing=$(ldd "$work/bin/gridtrain" | grep 'not found' || true)
if [ -n "$missing" ]; then
  say "gridtrain cannot load: $missing"
  exit 1
fi
say "$("$gt" --version 2>&1 | tr '\n' ';')"
"$gt" ingest text "$work/genesis.txt" -o "$work/g.h5" --val-fraction 0.05 >/dev/null 2>&1 ||
  say "ingest failed"

# ---- kernels and graphs against the CPU reference; one GPT step; bf16 curve
step ops 150 "$work/tests/test_cuda_ops"
step train 150 "$work/tests/test_cuda_train"

# ---- layout parity on cuda: 2-8 ranks sharing the GPU reproduce 1 rank
[ "$dev" = cuda ] && step nccl-shared-gpu 60 nccl_shared
step layouts-fp32 120 layouts fp32
step layouts-bf16 90 layouts bf16

# ---- checkpoints: resume bit for bit on cuda; cuda -> cpu and back
step checkpoint 90 ckpt

# ---- a signal during a GPU run: checkpoint, exit 3
step signal 60 sig

# ---- benchmark: GPT-2 124M and 350M, bf16, T = 1024, one GPU, against PyTorch
if [ "$dev" = cuda ]; then
  python3 "$src/benchmarks/bench_gpu_torch.py" --gemm-ceiling >"$work/ceiling.json" 2>&1 ||
    echo '{"gemm_tflops": 0}' >"$work/ceiling.json"
  say "bf16 GEMM ceiling: $(cat "$work/ceiling.json")"
  step bench-124m 120 bench 124m 12 768 12 32
  step bench-350m 120 bench 350m 24 1024 16 16
fi

say "# done in $(($(date +%s) - t_start)) s, $failed step(s) failed"
rm -rf "$work"
[ $failed -eq 0 ]
