#!/usr/bin/python3
"""Mixture-of-experts step benchmark: a Mixtral-style llama against the dense
llama of the same active parameters, gridtrain and PyTorch, on the CPU.

usage: /usr/bin/python3 benchmarks/bench_moe.py [--gridtrain PATH]
           [--steps N] [--warmup W] [--threads T] [--experts E] [--top-k K]
           [--expert-ffn F] [--layers L] [--dim C] [--heads H] [--kv-heads K]
           [--batch B] [--seq T] [--vocab V] [--precision fp32|bf16|fp16]
           [--aux-loss A] [--csv FILE] [--no-torch] [--no-gridtrain]

Four rows, one after the other in the same run: gridtrain's llama with E
experts (top K, SwiGLU experts of F units, dropless, load-balancing loss A),
gridtrain's dense llama with ffn_dim = K * F (a token meets the same matrix
parameters, the router aside), transformers' MixtralForCausalLM of the MoE
shape (output_router_logits, router_aux_loss_coef = A) and its
LlamaForCausalLM of the dense shape. Each runs W + N full training steps
(forward, backward, global-norm clip 1.0, AdamW) on one MPI rank / one
process with T threads; the median of the last N step times gives ms/step,
tokens/s and MFU against the fp32 sgemm peak measured in the same run. See
benchmarks/README.md.

The plumbing is bench_step.py's (imported): the launcher, the token file,
the metrics file, the sgemm peak, the PyTorch subprocess of /usr/bin/python3
(this file with --torch-worker) with OMP_NUM_THREADS set before torch is
imported. The driver uses only the standard library.
"""

import argparse
import csv
import datetime
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_step as bs  # noqa: E402  (standard library only at import)

REPO = bs.REPO
FLOP_FORMULA = ("flops/token = 6*N + 12*L*C*T, N = the active matrix parameters: "
                "L*(q,k,v,o + router E*C + K experts * 3*C*F) + head V*C "
                "(dense: L*(q,k,v,o + 3*C*K*F) + V*C)")


# ------------------------------------------------------------ shapes, FLOPs

def shapes(a, vocab):
    """(moe, dense) shape dicts in bench_step's form (arch llama)."""
    base = dict(arch="llama", layers=a.layers, dim=a.dim, heads=a.heads,
                kv_heads=a.kv_heads, seq_len=a.seq, vocab=vocab, batch=a.batch,
                ffn_dim=a.top_k * a.expert_ffn)
    moe = dict(base, experts=a.experts, top_k=a.top_k, expert_ffn_dim=a.expert_ffn,
               aux_loss=a.aux_loss)
    return moe, dict(base, experts=0)


def active_matrix_params(s):
    """Matrix parameters one token meets (see FLOP_FORMULA)."""
    L, C, H, K, V = s["layers"], s["dim"], s["heads"], s["kv_heads"], s["vocab"]
    attn = 2 * C * C + 2 * C * K * (C // H)
    if s.get("experts"):
        mlp = s["experts"] * C + s["top_k"] * 3 * C * s["expert_ffn_dim"]
    else:
        mlp = 3 * C * s["ffn_dim"]
    return L * (attn + mlp) + V * C


def flops_per_token(s):
    return 6 * active_matrix_params(s) + 12 * s["layers"] * s["dim"] * s["seq_len"]


def gridtrain_moe_overrides(s):
    """The [model] keys of the MoE run (all of them, whatever the deck says)."""
    if not s.get("experts"):
        return ["model.experts=0"]
    return [f"model.experts={s['experts']}", f"model.top_k={s['top_k']}",
            "model.moe_every=1", f"model.expert_ffn_dim={s['expert_ffn_dim']}",
            "model.shared_experts=0", "model.capacity_factor=0",
            f"model.aux_loss={s['aux_loss']}", "model.z_loss=0"]


def data_vocab(path):
    """The vocab_size attribute of an HDF5 token file (h5dump, else h5py
    under /usr/bin/python3), or None."""
    try:
        p = subprocess.run(["h5dump", "-a", "/vocab_size", path], capture_output=True,
                           text=True, timeout=60)
        m = re.search(r"\(0\):\s*(\d+)", p.stdout)
        if p.returncode == 0 and m:
            return int(m.group(1))
    except (OSError, subprocess.TimeoutExpired):
        pass
    code = ("import sys, h5py\nwith h5py.File(sys.argv[1], 'r') as f:\n"
            "    print(int(f.attrs['vocab_size']))")
    try:
        p = subprocess.run([bs.TORCH_PYTHON, "-c", code, path], capture_output=True,
                           text=True, timeout=120)
        return int(p.stdout.strip()) if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


# ------------------------------------------------------------ torch worker

def torch_mixtral(s):
    """transformers' MixtralForCausalLM of shape s (fp32, eager attention, the
    router's logits out so that its load-balancing loss is computed); its
    loss function (total, cross-entropy) and its parameter list."""
    import torch
    import transformers as tf
    torch.manual_seed(1234)
    cfg = tf.MixtralConfig(vocab_size=s["vocab"], hidden_size=s["dim"],
                           intermediate_size=s["expert_ffn_dim"],
                           num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                           num_key_value_heads=s["kv_heads"],
                           max_position_embeddings=s["seq_len"], tie_word_embeddings=False,
                           num_local_experts=s["experts"], num_experts_per_tok=s["top_k"],
                           output_router_logits=True, router_aux_loss_coef=s["aux_loss"],
                           router_jitter_noise=0.0, sliding_window=None,
                           attn_implementation="eager", use_cache=False)
    model = tf.MixtralForCausalLM(cfg)
    V, coef = s["vocab"], s["aux_loss"]

    def loss_fn(tokens, targets):
        out = model(tokens)
        ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, V),
                                               targets.reshape(-1))
        return ce + coef * out.aux_loss, ce
    return loss_fn, list(model.parameters())


def torch_worker(spec):
    """W + N training steps of one model; prints one JSON line."""
    import torch
    torch.set_num_threads(spec["threads"])
    autocast, why = bs.torch_autocast(spec["precision"])
    if autocast is None:
        print(json.dumps({"unsupported": why}))
        return
    s = spec["shape"]
    if s.get("experts"):
        loss_of, plist = torch_mixtral(s)
    else:
        ce_of, plist = bs.torch_llama(s)

        def loss_of(tokens, targets):
            ce = ce_of(tokens, targets)
            return ce, ce
    opt = torch.optim.AdamW(plist, lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    gen = torch.Generator().manual_seed(42)
    B, T, V = s["batch"], s["seq_len"], s["vocab"]
    times, losses = [], []
    for _ in range(spec["warmup"] + spec["steps"]):
        tokens = torch.randint(0, V, (B, T), generator=gen)
        targets = torch.randint(0, V, (B, T), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss, ce = loss_of(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(ce))
    print(json.dumps({"step_ms": times, "loss": losses}))


# ------------------------------------------------------------ the runs

class MoeBench(bs.Bench):
    """bench_step's Bench with the MoE keys, the BPE token file first, the
    routing read back from the metrics and this file's torch worker."""

    def gridtrain_data(self, env):
        if not (self.data or self.data_error or self.args.data):
            gt_dir = os.path.dirname(os.path.abspath(self.args.gridtrain))
            for d in (os.getcwd(), gt_dir, REPO):
                cand = os.path.join(d, "data", "kjv-bpe.h5")
                if os.path.isfile(cand):
                    self.data = cand
                    return cand
        return super().gridtrain_data(env)   # --data, data/kjv.h5 or an ingest

    def run_gridtrain(self, name, s, env, label, precision):
        user_set = self.args.set
        self.args.set = gridtrain_moe_overrides(s) + user_set   # --set wins
        try:
            r = super().run_gridtrain(name, s, env, label, precision)
        finally:
            self.args.set = user_set
        if "error" in r or not s.get("experts"):
            return r
        # the routing of the last step (bench_step's metrics file name)
        last = None
        try:
            with open(os.path.join(self.tmp, f"{name}-{label}.jsonl")) as f:
                for line in f:
                    rec = json.loads(line) if line.strip() else {}
                    if "step" in rec and "moe_pairs" in rec:
                        last = rec
        except (OSError, ValueError):
            pass
        if last:
            r["imbalance"] = float(last["moe_imbalance"])
            r["pairs"] = int(last["moe_pairs"])
            r["dropped_pct"] = 100.0 * int(last["moe_dropped"]) / max(1, r["pairs"])
        return r

    def run_torch(self, name, s, env, label, precision):
        a = self.args
        spec = {"shape": s, "threads": a.threads, "steps": a.steps,
                "warmup": a.warmup, "precision": precision}
        cmd = [bs.TORCH_PYTHON, os.path.abspath(__file__), "--torch-worker",
               json.dumps(spec)]
        rc, out, err = bs.run_logged(cmd, self.torch_env(env), self.tmp,
                                     os.path.join(self.tmp, f"torch-{name}-{label}"),
                                     a.timeout)
        if rc != 0:
            return {"error": f"torch worker rc {rc}: {shlex.join(cmd[:3])} ...\n"
                             f"{bs.tail(err)}"}
        try:
            with open(out) as f:
                res = json.loads(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError) as e:
            return {"error": f"bad torch worker output: {e}\n{bs.tail(err)}"}
        if "unsupported" in res:
            return {"na": res["unsupported"]}
        times = res["step_ms"][a.warmup:]
        return {"ms": statistics.median(times), "n": len(times),
                "loss_first": res["loss"][0], "loss_last": res["loss"][-1]}


def check(r, s):
    """'ok', or what makes a timed row invalid: a non-finite loss, or (for
    gridtrain's MoE row) a routing that did not count L*B*T*K pairs."""
    if not all(math.isfinite(float(r[k])) for k in ("loss_first", "loss_last")):
        return "INVALID: loss not finite"
    if "pairs" in r:
        want = s["layers"] * s["batch"] * s["seq_len"] * s["top_k"]
        if r["pairs"] != want:
            return f"INVALID: {r['pairs']} pairs, not {want}"
    return "ok"


# ------------------------------------------------------------ driver

COLS = [("impl", 9, "s"), ("model", 16, "s"), ("active", 7, "s"),
        ("ms/step", 8, "s"), ("tok/s", 7, "s"), ("MFU", 6, "s"),
        ("MoE/dense", 9, "s"), ("gt/torch", 8, "s"), ("imbal", 6, "s"),
        ("drop%", 6, "s"), ("loss", 11, "s"), ("check", 5, "s")]
LEFT = ("impl", "model", "check")


def fmt_row(values):
    out = []
    for (name, width, _), v in zip(COLS, values):
        text = str(v)
        out.append(text.ljust(width) if name in LEFT else text.rjust(width))
    return "  ".join(out).rstrip()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gridtrain", default=os.path.join(REPO, "gridtrain"),
                    help="gridtrain binary (default: REPO/gridtrain)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed first steps (2)")
    ap.add_argument("--threads", type=int, default=2, help="threads per impl (2)")
    ap.add_argument("--experts", type=int, default=8, help="routed experts E (8)")
    ap.add_argument("--top-k", type=int, default=2, help="experts per token K (2)")
    ap.add_argument("--expert-ffn", type=int, default=256,
                    help="units F of one expert (256); the dense ffn_dim is K*F")
    ap.add_argument("--layers", type=int, default=4, help="blocks L (4)")
    ap.add_argument("--dim", type=int, default=256, help="model width C (256)")
    ap.add_argument("--heads", type=int, default=4, help="query heads H (4)")
    ap.add_argument("--kv-heads", type=int, default=2, help="key/value heads (2)")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step B (16)")
    ap.add_argument("--seq", type=int, default=128, help="sequence length T (128)")
    ap.add_argument("--vocab", type=int,
                    help="vocabulary V (default: the token file's vocab_size)")
    ap.add_argument("--aux-loss", type=float, default=0.01,
                    help="load-balancing loss coefficient, gridtrain's aux_loss and "
                         "transformers' router_aux_loss_coef (0.01)")
    ap.add_argument("--precision", default="fp32", choices=bs.PRECISIONS,
                    help="backend.precision, torch autocast for bf16 (fp32)")
    ap.add_argument("--peak-n", type=int, default=2048,
                    help="matrix size of the sgemm peak measurement (2048)")
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    ap.add_argument("--no-gridtrain", action="store_true", help="skip gridtrain")
    ap.add_argument("--deck", default=os.path.join(REPO, "inputs", "default.in"),
                    help="input deck gridtrain runs under the overrides")
    ap.add_argument("--data", help="token file for gridtrain (default: data/kjv-bpe.h5, "
                                   "data/kjv.h5 or an ingest of tests/data/genesis.txt)")
    ap.add_argument("--mpiexec", default="mpiexec",
                    help="MPI launcher command (default: mpiexec)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VAL",
                    help="extra gridtrain override for both gridtrain runs (repeatable)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per run (3600)")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.torch_worker:
        torch_worker(json.loads(a.torch_worker))
        return 0
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--steps >= 1, --warmup >= 0 and --threads >= 1 are required")
    if a.experts < 1 or not 1 <= a.top_k <= a.experts:
        ap.error(f"--experts >= 1 and 1 <= --top-k <= --experts are required "
                 f"(got experts {a.experts}, top-k {a.top_k})")
    if a.dim % a.heads or a.heads % a.kv_heads:
        ap.error(f"--heads must divide --dim and --kv-heads must divide --heads "
                 f"(got dim {a.dim}, heads {a.heads}, kv-heads {a.kv_heads})")
    a.gridtrain = os.path.abspath(a.gridtrain)
    a.deck = os.path.abspath(a.deck)

    bench = MoeBench(a)
    env = dict(os.environ)

    # the vocabulary: the token file's, which gridtrain requires of model.vocab
    data, vocab = None, a.vocab
    if not a.no_gridtrain:
        data = bench.gridtrain_data(env)
        if data is None:
            print(f"# no token file: {bench.data_error}")
            return 1
        dv = data_vocab(data)
        if vocab is None:
            vocab = dv
        if vocab is None:
            print(f"# cannot read vocab_size of {data} (no h5dump, no h5py); pass --vocab")
            return 1
    if vocab is None:
        vocab = 4096
    moe, dense = shapes(a, vocab)

    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    ncpu = os.cpu_count()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else ncpu
    print(f"# gridtrain mixture-of-experts benchmark, {now}")
    print(f"# machine: {bs.cpu_model()}; cores: {ncpu} logical ({affinity} usable); "
          f"threads T={a.threads}; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}")
    try:
        print("# load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
              + " (other jobs on the machine distort the timings)")
    except OSError:
        pass
    print(f"# shape: llama L={a.layers} C={a.dim} H={a.heads} kv_heads={a.kv_heads} "
          f"T={a.seq} V={vocab} B={a.batch} {a.precision}; MoE: E={a.experts} top_k={a.top_k} "
          f"expert_ffn_dim={a.expert_ffn} (dropless, aux_loss {a.aux_loss:g}); "
          f"dense: ffn_dim={a.top_k * a.expert_ffn}")
    if not a.no_torch:
        print(bench.torch_header(env))
    if not a.no_gridtrain:
        print(f"# gridtrain: {shlex.join(bench.mpi_prefix(env) + [a.gridtrain])} train "
              f"{a.deck} (backend.threads={a.threads}), data {data}")
    print(f"# {FLOP_FORMULA}")
    print(f"# MFU = flops/token * tok/s / fp32 sgemm peak (torch.mm {a.peak_n}^3, "
          f"T threads, best of 10, measured below in this run)")
    print(f"# median over {a.steps} steps after {a.warmup} warm-up; tok/s = B*T / median; "
          f"active = N in millions; MoE/dense = tok/s of the MoE row / its dense row; "
          f"gt/torch = gridtrain tok/s / torch tok/s of the same model; imbal, drop% = "
          f"gridtrain's routing in the last step; loss = cross-entropy first -> last step")
    peak, res = (None, {"error": "--no-torch"}) if a.no_torch else bench.sgemm_peak(env, "env")
    if peak is None:
        print(f"# sgemm peak: unavailable, MFU left empty ({res['error'].splitlines()[0]})")
    else:
        print(f"# sgemm peak: {peak:.1f} GFLOP/s")
    print(fmt_row([c[0] for c in COLS]))
    sys.stdout.flush()

    plan = []   # (impl, model name, shape)
    if not a.no_gridtrain:
        plan += [("gridtrain", "llama MoE", moe), ("gridtrain", "llama dense", dense)]
    if not a.no_torch:
        plan += [("torch", "Mixtral", moe), ("torch", "Llama dense", dense)]
    results = {}
    for i, (impl, model, s) in enumerate(plan):
        kind = "moe" if s.get("experts") else "dense"
        run = bench.run_gridtrain if impl == "gridtrain" else bench.run_torch
        results[(impl, kind)] = run(kind, s, env, f"{impl}-{a.precision}-{i}", a.precision)

    rows = []
    tokens = a.batch * a.seq
    for impl, model, s in plan:
        kind = "moe" if s.get("experts") else "dense"
        r = results[(impl, kind)]
        n_act = active_matrix_params(s)
        base = [impl, model, f"{n_act / 1e6:.2f}M"]
        if "na" in r or "error" in r:
            status = "n/a" if "na" in r else "FAILED"
            bench.failures += status == "FAILED"
            print(fmt_row(base + [status] + ["-"] * 8))
            for line in r.get("na", r.get("error", "")).splitlines():
                print(f"#   {line}")
            rows.append([impl, kind, n_act] + [""] * 9 + [status.lower()])
            continue
        tps = tokens / (r["ms"] / 1e3)
        mfu = flops_per_token(s) * tps / (peak * 1e9) if peak else None
        ratio = ""
        dense_r = results.get((impl, "dense"))
        if kind == "moe" and dense_r and "ms" in dense_r:
            ratio = f"{dense_r['ms'] / r['ms']:.2f}x"
        vs = ""
        torch_r = results.get(("torch", kind))
        if impl == "gridtrain" and torch_r and "ms" in torch_r:
            vs = f"{torch_r['ms'] / r['ms']:.2f}x"
        ok = check(r, s)
        if ok != "ok":
            bench.failures += 1
        imbal = f"{r['imbalance']:.2f}" if "imbalance" in r else "-"
        drop = f"{r['dropped_pct']:.1f}" if "dropped_pct" in r else "-"
        print(fmt_row(base + [f"{r['ms']:.1f}", f"{tps:.0f}",
                              f"{100 * mfu:.1f}%" if mfu is not None else "",
                              ratio or "-", vs or "-", imbal, drop,
                              f"{r['loss_first']:.2f}->{r['loss_last']:.2f}", ok]))
        rows.append([impl, kind, n_act, f"{r['ms']:.3f}", f"{tps:.1f}",
                     f"{mfu:.4f}" if mfu is not None else "", f"{peak:.3f}" if peak else "",
                     ratio.rstrip("x"), vs.rstrip("x"), r.get("imbalance", ""),
                     f"{r['dropped_pct']:.3f}" if "dropped_pct" in r else "",
                     r["n"], ok])
    try:
        print("# load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    except OSError:
        pass
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["impl", "model", "active_params", "ms_per_step_median", "tok_per_s",
                        "mfu", "sgemm_peak_gflops", "moe_over_dense", "gt_over_torch",
                        "moe_imbalance", "moe_dropped_pct", "steps_measured", "status"])
            w.writerows(rows)
    if a.keep:
        print(f"# logs and metrics kept in {bench.tmp}")
    else:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
