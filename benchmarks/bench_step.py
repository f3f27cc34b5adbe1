#!/usr/bin/python3
"""Training-step benchmark: gridtrain vs PyTorch on the CPU, per precision.

usage: /usr/bin/python3 benchmarks/bench_step.py [--gridtrain PATH]
           [--steps N] [--warmup W] [--threads T] [--shapes default,small,124m,llama-small,llama-100m]
           [--precisions fp32,bf16,fp16] [--csv FILE] [--no-torch]
           [--no-gridtrain] [--openblas-both]

For every shape and precision both implementations run W + N full training
steps (forward, backward, global-norm clip 1.0, AdamW) on one MPI rank with
T threads; the median step time over the last N steps is reported together
with tokens/s, GFLOP/s (same FLOP formula for both), GFLOP/s as a share of
the fp32 sgemm peak measured in the same run, and the gridtrain/torch
speed-up against the 2x target. gridtrain bf16 runs twice: with its default
bf16 GEMM (oneDNN where built) and with GT_CPU_BF16_GEMM=sgemm (convert to
fp32, OpenBLAS sgemm). PyTorch bf16 runs under torch.autocast("cpu"); fp16
is n/a where CPU autocast does not support it. See benchmarks/README.md.

PyTorch runs in a subprocess of /usr/bin/python3 (this file with
--torch-worker), so that OMP_NUM_THREADS / OMP_WAIT_POLICY are in the
environment before torch is imported. Only the standard library is used in
the driver itself.
"""

import argparse
import configparser
import csv
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
REF_DIR = os.path.join(REPO, "tests", "ref")
TORCH_PYTHON = "/usr/bin/python3"   # Debian's interpreter sees python3-torch
TARGET_SPEEDUP = 2.0
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

# Fixed shapes; "default" is read from inputs/default.in at run time.
# The llama shapes (docs/models.md): grouped-query attention, SwiGLU MLP,
# untied head; PyTorch runs transformers' LlamaForCausalLM on them.
SHAPES = {
    "small": dict(layers=4, dim=256, heads=4, seq_len=128, vocab=256, batch=16),
    "124m": dict(layers=12, dim=768, heads=12, seq_len=64, vocab=50304, batch=4),
    "llama-small": dict(arch="llama", layers=4, dim=256, heads=4, kv_heads=2, ffn_dim=688,
                        seq_len=128, vocab=256, batch=16),
    "llama-100m": dict(arch="llama", layers=12, dim=768, heads=12, kv_heads=4, ffn_dim=2048,
                       seq_len=64, vocab=32000, batch=4),
}

FLOP_FORMULA = ("flops/step = 6*N*B*T + 12*L*C*T*B*T, N = the matrix and norm "
                "parameters with the head: GPT 12*L*C^2 + 13*L*C + V*C, llama "
                "L*(C*(H+2K)*C/H + C^2 + 3*C*F + 2*C) + 2*V*C")


def is_llama(s):
    return s.get("arch") == "llama"


def flops_per_step(s):
    """Training FLOPs of one step (forward + backward), see FLOP_FORMULA."""
    L, C, V, T, B = s["layers"], s["dim"], s["vocab"], s["seq_len"], s["batch"]
    if is_llama(s):
        H, K, F = s["heads"], s["kv_heads"], s["ffn_dim"]
        n = L * (C * (H + 2 * K) * (C // H) + C * C + 3 * C * F + 2 * C) + 2 * V * C
    else:
        n = 12 * L * C * C + 13 * L * C + V * C
    return 6 * n * B * T + 12 * L * C * T * B * T


def torch_llama(s):
    """transformers' LlamaForCausalLM of shape s (fp32, eager attention), its
    loss function of (tokens, targets) and its parameter list."""
    import torch
    import transformers as tf
    torch.manual_seed(1234)
    cfg = tf.LlamaConfig(vocab_size=s["vocab"], hidden_size=s["dim"],
                         intermediate_size=s["ffn_dim"], num_hidden_layers=s["layers"],
                         num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                         max_position_embeddings=s["seq_len"], tie_word_embeddings=False,
                         attn_implementation="eager", use_cache=False)
    model = tf.LlamaForCausalLM(cfg)
    V = s["vocab"]

    def loss_fn(tokens, targets):
        logits = model(tokens).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    return loss_fn, list(model.parameters())


# ------------------------------------------------------------ torch worker

def torch_info():
    """Torch version and BLAS description; call only inside the worker."""
    import ctypes
    import torch
    a = torch.randn(64, 64)
    _ = a @ a                           # make sure the BLAS library is mapped
    build = []
    for part in torch.__config__.show().replace("\n", ",").split(","):
        for key in ("BLAS_INFO=", "LAPACK_INFO="):
            if key in part:
                build.append(part[part.index(key):].strip())
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "blas" in os.path.basename(path).lower() and path.startswith("/"):
                libs.add(path)
    blas = "unknown"
    for path in sorted(libs):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_corename.restype = ctypes.c_char_p
            blas = (f"{lib.openblas_get_config().decode()} "
                    f"core={lib.openblas_get_corename().decode()} ({path})")
            break
        except (OSError, AttributeError):
            continue
    else:
        if libs:
            blas = " ".join(sorted(libs))
    return {"torch": torch.__version__, "build": " ".join(build), "blas": blas,
            "threads": torch.get_num_threads()}


def torch_autocast(precision):
    """(context manager factory, None) for a precision, or (None, reason)."""
    import contextlib
    import warnings
    import torch
    if precision == "fp32":
        return contextlib.nullcontext, None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    why = "autocast stays disabled"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # some versions warn and disable
            with torch.autocast("cpu", dtype=dtype):
                ok = torch.is_autocast_cpu_enabled()
    except RuntimeError as e:            # others refuse (torch 1.13)
        ok, why = False, str(e).strip().splitlines()[0]
    if not ok:
        return None, (f"torch {torch.__version__} has no CPU autocast for "
                      f"{precision}: {why}")
    return (lambda: torch.autocast("cpu", dtype=dtype)), None


def sgemm_peak_worker(spec):
    """Best GFLOP/s of torch.mm on n x n float32 matrices (the system BLAS,
    with this process's OpenBLAS environment); prints one JSON line."""
    import torch
    torch.set_num_threads(spec["threads"])
    n = spec["n"]
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    c = torch.empty(n, n)
    best = float("inf")
    for i in range(spec["reps"] + 2):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        dt = time.perf_counter() - t0
        if i >= 2:
            best = min(best, dt)
    print(json.dumps({"gflops": 2.0 * n ** 3 / best / 1e9, "n": n,
                      "reps": spec["reps"], **torch_info()}))


def torch_worker(spec):
    """Run W + N training steps; print one JSON line with the step times."""
    import torch
    torch.set_num_threads(spec["threads"])
    sys.path.insert(0, REF_DIR)
    import torch_gpt

    autocast, why = torch_autocast(spec.get("precision", "fp32"))
    if autocast is None:
        print(json.dumps({"unsupported": why}))
        return

    s = spec["shape"]
    if is_llama(s):
        loss_of, plist = torch_llama(s)
        opt = torch.optim.AdamW(plist, lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1)
    else:
        params = torch_gpt.init_params(s["layers"], s["heads"], s["dim"],
                                       s["seq_len"], s["vocab"],
                                       dtype=torch.float32, seed=1234)
        opt = torch_gpt.make_adamw(params, lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                   weight_decay=0.1)
        plist = list(params.values())

        def loss_of(tokens, targets):
            return torch_gpt.loss_fn(params, tokens, targets, s["heads"])
    gen = torch.Generator().manual_seed(42)
    B, T, V = s["batch"], s["seq_len"], s["vocab"]
    times, losses = [], []
    for _ in range(spec["warmup"] + spec["steps"]):
        tokens = torch.randint(0, V, (B, T), generator=gen)
        targets = torch.randint(0, V, (B, T), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_of(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss))
    info = torch_info()
    print(json.dumps({"step_ms": times, "loss": losses, **info}))


# ------------------------------------------------------------ helpers

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:]).rstrip()
    except OSError:
        return ""


def run_logged(cmd, env, cwd, log_prefix, timeout):
    """Run cmd with stdout/stderr to files; returns (rc, stdout_path, stderr_path)."""
    out, err = log_prefix + ".out", log_prefix + ".err"
    with open(out, "w") as fo, open(err, "w") as fe:
        try:
            rc = subprocess.run(cmd, env=env, cwd=cwd, stdout=fo, stderr=fe,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            fe.write(f"\nbench_step.py: timed out after {timeout} s\n")
            rc = 124
        except OSError as e:
            fe.write(f"\nbench_step.py: cannot run {cmd[0]}: {e}\n")
            rc = 127
    return rc, out, err


def read_deck_shape(deck):
    """Model/batch of the 'default' shape from the input deck."""
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    if not cp.read(deck):
        raise ValueError(f"cannot read {deck}")
    shape = {}
    for sec, key, name in (("model", "layers", "layers"), ("model", "heads", "heads"),
                           ("model", "dim", "dim"), ("model", "seq_len", "seq_len"),
                           ("model", "vocab", "vocab"), ("data", "batch", "batch")):
        try:
            shape[name] = int(cp.get(sec, key))
        except (configparser.Error, ValueError) as e:
            raise ValueError(f"{deck}: [{sec}] {key}: {e}") from None
    return shape


def median_after_warmup(records, warmup):
    """Median step_ms of metrics records with step >= warmup."""
    ms = [float(r["step_ms"]) for r in records
          if isinstance(r, dict) and "step" in r and "step_ms" in r
          and int(r["step"]) >= warmup]
    return (statistics.median(ms), len(ms)) if ms else (None, 0)


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="gt-bench-")
        self.data = None          # resolved lazily (may need an ingest)
        self.data_error = None
        self.mpiexec = shlex.split(args.mpiexec)
        self.failures = 0
        self._mpi_prefix = None

    # ---- gridtrain side
    def gridtrain_data(self, env):
        """data/kjv.h5 if present, else ingest tests/data/genesis.txt once."""
        if self.data or self.data_error:
            return self.data
        if self.args.data:
            self.data = os.path.abspath(self.args.data)
            return self.data
        gt_dir = os.path.dirname(os.path.abspath(self.args.gridtrain))
        for d in (os.getcwd(), gt_dir, REPO):
            cand = os.path.join(d, "data", "kjv.h5")
            if os.path.isfile(cand):
                self.data = cand
                return cand
        out = os.path.join(self.tmp, "bench.h5")
        cmd = [self.args.gridtrain, "ingest", "text",
               os.path.join(REPO, "tests", "data", "genesis.txt"),
               "-o", out, "--val-fraction", "0"]
        rc, _, err = run_logged(cmd, env, self.tmp,
                                os.path.join(self.tmp, "ingest"), 600)
        if rc != 0 or not os.path.isfile(out):
            self.data_error = (f"ingest failed (rc {rc}): {shlex.join(cmd)}\n"
                               f"{tail(err)}")
            return None
        self.data = out
        return out

    def mpi_prefix(self, env):
        """mpiexec -n 1, plus --bind-to none for Open MPI (which would
        otherwise bind the single rank to one core)."""
        if self._mpi_prefix is not None:
            return list(self._mpi_prefix)
        cmd = self.mpiexec + ["-n", "1"]
        try:
            ver = subprocess.run(self.mpiexec + ["--version"], env=env,
                                 capture_output=True, text=True, timeout=30)
            if "Open MPI" in ver.stdout + ver.stderr or "OpenRTE" in ver.stdout:
                cmd += ["--bind-to", "none"]
        except (OSError, subprocess.TimeoutExpired):
            pass
        self._mpi_prefix = cmd
        return list(cmd)

    def run_gridtrain(self, name, s, env, label, precision):
        a = self.args
        if not (os.path.isfile(a.gridtrain) and os.access(a.gridtrain, os.X_OK)):
            return {"error": f"{a.gridtrain}: not found or not executable "
                             "(build it, or pass --gridtrain PATH)"}
        data = self.gridtrain_data(env)
        if data is None:
            return {"error": self.data_error}
        metrics = os.path.join(self.tmp, f"{name}-{label}.jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        cmd = self.mpi_prefix(env) + [
            a.gridtrain, "train", a.deck,
            f"model.layers={s['layers']}", f"model.heads={s['heads']}",
            f"model.dim={s['dim']}", f"model.seq_len={s['seq_len']}",
            f"model.vocab={s['vocab']}", f"data.batch={s['batch']}",
            f"model.type={s.get('arch', 'gpt')}"] + (
            [f"model.kv_heads={s['kv_heads']}", f"model.ffn_dim={s['ffn_dim']}",
             "model.tie_embeddings=off"] if is_llama(s) else []) + [
            "data.microbatches=1", f"data.train={data}", "data.val=",
            f"run.steps={a.warmup + a.steps}", "run.log_every=1000",
            "run.eval_every=0", f"run.metrics={metrics}",
            f"backend.threads={a.threads}", f"backend.precision={precision}",
            "grid.dp=1", "grid.pp=1", "grid.tp=1",
            # never the default run's checkpoints: neither resume nor write them
            "checkpoint.dir=", "checkpoint.resume=never"] + a.set
        rc, _, err = run_logged(cmd, env, self.tmp,
                                os.path.join(self.tmp, f"gt-{name}-{label}"),
                                a.timeout)
        if rc != 0:
            return {"error": f"gridtrain rc {rc}: {shlex.join(cmd)}\n{tail(err)}"}
        records = []
        try:
            with open(metrics) as f:
                for line in f:
                    if line.strip():
                        records.append(json.loads(line))
        except (OSError, ValueError) as e:
            return {"error": f"cannot read metrics {metrics}: {e}"}
        ms, n = median_after_warmup(records, a.warmup)
        if ms is None:
            return {"error": f"no step records with step >= {a.warmup} in {metrics}"}
        losses = [r.get("loss") for r in records if "step" in r]
        return {"ms": ms, "n": n, "loss_first": losses[0], "loss_last": losses[-1]}

    # ---- torch side
    def torch_env(self, env):
        e = dict(env)
        e["OMP_WAIT_POLICY"] = "PASSIVE"
        e["OMP_NUM_THREADS"] = str(self.args.threads)
        return e

    def run_torch(self, name, s, env, label, precision):
        a = self.args
        spec = {"shape": s, "threads": a.threads, "steps": a.steps,
                "warmup": a.warmup, "precision": precision}
        cmd = [TORCH_PYTHON, os.path.abspath(__file__), "--torch-worker",
               json.dumps(spec)]
        rc, out, err = run_logged(cmd, self.torch_env(env), self.tmp,
                                  os.path.join(self.tmp, f"torch-{name}-{label}"),
                                  a.timeout)
        if rc != 0:
            return {"error": f"torch worker rc {rc}\n{tail(err)}"}
        try:
            with open(out) as f:
                res = json.loads(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError) as e:
            return {"error": f"bad torch worker output: {e}"}
        if "unsupported" in res:
            return {"na": res["unsupported"]}
        times = res["step_ms"][a.warmup:]
        return {"ms": statistics.median(times), "n": len(times),
                "loss_first": res["loss"][0], "loss_last": res["loss"][-1],
                "info": res}

    def sgemm_peak(self, env, label):
        """fp32 sgemm GFLOP/s of this machine now (torch.mm, T threads), or
        None with the reason printed; the denominator of %peak."""
        a = self.args
        spec = {"threads": a.threads, "n": a.peak_n, "reps": 10}
        cmd = [TORCH_PYTHON, os.path.abspath(__file__), "--sgemm-peak",
               json.dumps(spec)]
        rc, out, err = run_logged(cmd, self.torch_env(env), self.tmp,
                                  os.path.join(self.tmp, f"peak-{label}"),
                                  a.timeout)
        try:
            with open(out) as f:
                res = json.loads(f.read().strip().splitlines()[-1])
            return res["gflops"], res
        except (OSError, ValueError, IndexError, KeyError) as e:
            return None, {"error": f"sgemm peak rc {rc}: {e}\n{tail(err)}"}

    def torch_header(self, env):
        cmd = [TORCH_PYTHON, os.path.abspath(__file__), "--torch-info"]
        try:
            p = subprocess.run(cmd, env=self.torch_env(env), capture_output=True,
                               text=True, timeout=300)
            info = json.loads(p.stdout.strip().splitlines()[-1])
            return (f"# torch {info['torch']} ({info['build']}), "
                    f"torch threads {info['threads']}\n# BLAS: {info['blas']}")
        except (OSError, ValueError, IndexError, KeyError,
                subprocess.TimeoutExpired) as e:
            return f"# torch: unavailable ({e})"


# ------------------------------------------------------------ driver

COLS = [("shape", 8, "s"), ("L", 3, "d"), ("C", 5, "d"), ("H", 3, "d"),
        ("T", 5, "d"), ("V", 6, "d"), ("B", 4, "d"), ("prec", 5, "s"),
        ("impl", 22, "s"), ("ms/step(median)", 16, "s"), ("tok/s", 10, "s"),
        ("GFLOP/s", 9, "s"), ("%peak", 6, "s"), ("verdict", 30, "s")]
LEFT = ("shape", "prec", "impl", "verdict")
PRECISIONS = ("fp32", "bf16", "fp16")


def fmt_row(values):
    out = []
    for (name, width, kind), v in zip(COLS, values):
        text = str(v)
        out.append(text.ljust(width) if name in LEFT else text.rjust(width))
    return "  ".join(out).rstrip()


def impl_runs(a, precision):
    """(impl name, kind, extra environment) to time for one precision."""
    runs = []
    if not a.no_gridtrain:
        runs.append(("gridtrain", "gridtrain", {}))
        if precision == "bf16" and not a.no_sgemm_row:
            runs.append(("gridtrain(bf16 as sgemm)", "gridtrain",
                         {"GT_CPU_BF16_GEMM": "sgemm"}))
    if not a.no_torch:
        runs.append(("torch", "torch", {}))
    return runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gridtrain", default=os.path.join(REPO, "gridtrain"),
                    help="gridtrain binary (default: REPO/gridtrain)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed first steps (2)")
    ap.add_argument("--threads", type=int, default=2, help="threads per impl (2)")
    ap.add_argument("--shapes", default="default,small,124m,llama-small,llama-100m",
                    help="comma list of default,small,124m")
    ap.add_argument("--precisions", default=",".join(PRECISIONS),
                    help="comma list of fp32,bf16,fp16 (all three)")
    ap.add_argument("--no-sgemm-row", action="store_true",
                    help="skip the gridtrain bf16 run with GT_CPU_BF16_GEMM=sgemm")
    ap.add_argument("--peak-n", type=int, default=2048,
                    help="matrix size of the sgemm peak measurement (2048)")
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    ap.add_argument("--no-gridtrain", action="store_true", help="skip gridtrain")
    ap.add_argument("--openblas-both", action="store_true",
                    help="run everything twice: environment as is, and without "
                         + " / ".join(OPENBLAS_VARS))
    ap.add_argument("--deck", default=os.path.join(REPO, "inputs", "default.in"),
                    help="input deck for gridtrain and the 'default' shape")
    ap.add_argument("--data", help="token file for gridtrain (default: data/kjv.h5 "
                                   "or an ingest of tests/data/genesis.txt)")
    ap.add_argument("--mpiexec", default="mpiexec",
                    help="MPI launcher command (default: mpiexec)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VAL",
                    help="extra gridtrain override (repeatable)")
    ap.add_argument("--timeout", type=int, default=3600,
                    help="seconds per run (3600)")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    ap.add_argument("--torch-info", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sgemm-peak", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.torch_worker:
        torch_worker(json.loads(a.torch_worker))
        return 0
    if a.sgemm_peak:
        sgemm_peak_worker(json.loads(a.sgemm_peak))
        return 0
    if a.torch_info:
        import torch
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        print(json.dumps(torch_info()))
        return 0
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--steps >= 1, --warmup >= 0 and --threads >= 1 are required")
    a.gridtrain = os.path.abspath(a.gridtrain)
    a.deck = os.path.abspath(a.deck)

    precisions = [p.strip() for p in a.precisions.split(",") if p.strip()]
    for p in precisions:
        if p not in PRECISIONS:
            ap.error(f"unknown precision '{p}' ({', '.join(PRECISIONS)})")
    precisions = [p for p in PRECISIONS if p in precisions]  # fp32 first
    names = [n.strip() for n in a.shapes.split(",") if n.strip()]
    for n in names:
        if n != "default" and n not in SHAPES:
            ap.error(f"unknown shape '{n}' (default, {', '.join(SHAPES)})")

    bench = Bench(a)
    base_env = dict(os.environ)
    variants = [("", base_env)]
    if a.openblas_both:
        stripped = {k: v for k, v in base_env.items() if k not in OPENBLAS_VARS}
        variants = [("[env]", base_env), ("[noOB]", stripped)]

    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    ncpu = os.cpu_count()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else ncpu
    print(f"# gridtrain step benchmark, {now}")
    print(f"# machine: {cpu_model()}; cores: {ncpu} logical "
          f"({affinity} usable); threads T={a.threads}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}; "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', 'unset')}")
    try:
        print("# load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
              + " (other jobs on the machine distort the timings)")
    except OSError:
        pass
    if a.openblas_both:
        print(f"# [env] = environment as is; [noOB] = without {', '.join(OPENBLAS_VARS)}")
    if not a.no_torch:
        print(bench.torch_header(base_env))
    if not a.no_gridtrain:
        print(f"# gridtrain: {shlex.join(bench.mpi_prefix(base_env) + [a.gridtrain])}"
              f" train {a.deck} (backend.threads={a.threads})")
    print(f"# {FLOP_FORMULA}; GFLOP/s = flops/step / median step time")
    print(f"# %peak = GFLOP/s / fp32 sgemm peak (torch.mm {a.peak_n}^3, "
          f"T threads, best of 10, measured below in this run)")
    print(f"# median over {a.steps} steps after {a.warmup} warmup; "
          f"tok/s = B*T / median step time; target: gridtrain >= "
          f"{TARGET_SPEEDUP:g}x torch tokens/s of the same precision")

    peaks = {}
    for label, env in variants:
        peak, res = (None, {"error": "--no-torch"}) if a.no_torch else \
            bench.sgemm_peak(env, label.strip("[]") or "env")
        peaks[label] = peak
        if peak is None:
            print(f"# sgemm peak{' ' + label if label else ''}: unavailable, "
                  f"%peak left empty ({res['error'].splitlines()[0]})")
        else:
            print(f"# sgemm peak{' ' + label if label else ''}: {peak:.1f} GFLOP/s")
    print(fmt_row([c[0] for c in COLS]))
    sys.stdout.flush()

    rows = []
    for name in names:
        if name == "default":
            try:
                s = read_deck_shape(a.deck)
            except ValueError as e:
                print(f"# shape default skipped: {e}")
                bench.failures += 1
                continue
        else:
            s = SHAPES[name]
        if s["dim"] % s["heads"]:
            print(f"# shape {name} skipped: dim {s['dim']} not divisible by heads")
            bench.failures += 1
            continue
        flops = flops_per_step(s)
        tokens = s["batch"] * s["seq_len"]
        for label, env in variants:
            tag = label.strip("[]") or "env"
            peak = peaks[label]
            torch_fp32_ms = None
            for prec in precisions:
                results = {}
                runs = impl_runs(a, prec)
                for impl, kind, extra in runs:
                    e = dict(env, **extra)
                    tag_i = f"{tag}-{prec}-{len(results)}"
                    if kind == "gridtrain":
                        results[impl] = bench.run_gridtrain(name, s, e, tag_i, prec)
                    else:
                        results[impl] = bench.run_torch(name, s, e, tag_i, prec)
                t_ms = results.get("torch", {}).get("ms")
                if prec == "fp32" and t_ms:
                    torch_fp32_ms = t_ms
                vs = ""
                if t_ms is None and "na" in results.get("torch", {}) and torch_fp32_ms:
                    t_ms, vs = torch_fp32_ms, " (vs torch fp32)"
                for impl, kind, extra in runs:
                    r = results[impl]
                    base = [name, s["layers"], s["dim"], s["heads"], s["seq_len"],
                            s["vocab"], s["batch"], prec, impl + label]
                    csv_base = base + [tag, a.threads]
                    peak_csv = f"{peak:.3f}" if peak else ""
                    if "na" in r:
                        print(fmt_row(base + ["n/a", "-", "-", "-", "-"]))
                        print(f"#   {r['na']}")
                        rows.append(csv_base + ["", "", "", peak_csv, "", 0, "", "", "n/a"])
                        continue
                    if "error" in r:
                        bench.failures += 1
                        print(fmt_row(base + ["FAILED", "-", "-", "-", "-"]))
                        for line in r["error"].splitlines():
                            print(f"#   {line}")
                        rows.append(csv_base + ["", "", "", peak_csv, "", 0, "", "",
                                                "failed"])
                        continue
                    sec = r["ms"] / 1e3
                    gflops = flops / sec / 1e9
                    pct = f"{100 * gflops / peak:.0f}%" if peak else ""
                    speedup = t_ms / r["ms"] if t_ms and kind == "gridtrain" else None
                    verdict = "-"
                    if speedup is not None:
                        verdict = (f"{speedup:.2f}x: MET" if speedup >= TARGET_SPEEDUP
                                   else f"{speedup:.2f}x: NOT MET") + vs
                    print(fmt_row(base + [f"{r['ms']:.1f}", f"{tokens / sec:.0f}",
                                          f"{gflops:.2f}", pct, verdict]))
                    rows.append(csv_base + [f"{r['ms']:.3f}", f"{tokens / sec:.1f}",
                                            f"{gflops:.3f}", peak_csv,
                                            pct.rstrip("%"), r["n"],
                                            f"{speedup:.4f}" if speedup else "",
                                            verdict if speedup else "", "ok"])
                sys.stdout.flush()

    try:
        print("# load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    except OSError:
        pass
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["shape", "L", "C", "H", "T", "V", "B", "precision",
                        "impl", "env", "threads", "ms_per_step_median",
                        "tok_per_s", "gflop_per_s", "sgemm_peak_gflops",
                        "pct_of_sgemm_peak",
                        "steps_measured", "speedup_gt_over_torch", "verdict",
                        "status"])

            w.writerows(rows)
    if a.keep:
        print(f"# logs and metrics kept in {bench.tmp}")
    else:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
