#!/usr/bin/env python3
"""PyTorch baseline for the GPU step benchmark (tests/gpu/run.sh).

usage: python3 benchmarks/bench_gpu_torch.py --layers 12 --dim 768 --heads 12
           --seq 1024 --vocab 50304 --batch 8 [--steps 10] [--warmup 3]
           [--compile] [--gemm-ceiling] [--device cuda|cpu]

GPT-2 (pre-LN, GELU tanh, tied head, AdamW fused, bf16 autocast, causal
F.scaled_dot_product_attention) trained on random tokens: one JSON line with
the median step ms, tokens/s and peak device memory. --gemm-ceiling instead
times one 8192^3 bf16 torch.matmul (cuBLAS) and prints its TFLOP/s.

Whatever happens, the last line of stdout is one JSON object: on a failure
(torch.compile's included) it holds "error" with the exception's last line,
the traceback goes to stderr, and the exit status is 1. run.sh puts each run
under its own time limit and reports a failure without failing the step.
--device cpu (a tiny model, --seq 64) checks this script where there is no GPU.
"""
import argparse
import json
import math
import statistics
import sys
import time
import traceback


def build(torch, nn, F, a):
    class Block(nn.Module):
        def __init__(self, C, H):
            super().__init__()
            self.H = H
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self, L, C, H, T, V):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList(Block(C, H) for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            for n, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    return GPT(a.layers, a.dim, a.heads, a.seq, a.vocab)


def sync(torch, dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def gemm_ceiling(torch, dev):
    n = 8192 if dev == "cuda" else 512
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(torch, dev)
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        sync(torch, dev)
        best = min(best, time.perf_counter() - t0)
    out = {"gemm_tflops": 2 * n ** 3 / best / 1e12, "n": n, "torch": torch.__version__}
    if dev == "cuda":
        out["device"] = torch.cuda.get_device_name(0)
    return out


def train(torch, nn, F, a):
    dev = a.device
    torch.manual_seed(0)
    model = build(torch, nn, F, a).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), **({"fused": True} if dev == "cuda" else {}))
    step_model = torch.compile(model) if a.compile else model
    times = []
    first = None
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(a.warmup + a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
        sync(torch, dev)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync(torch, dev)
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt  # with --compile: the compilation, mostly
            print(f"# step 0: {dt:.1f} s, loss {loss.item():.4f}", file=sys.stderr, flush=True)
        if i >= a.warmup:
            times.append(dt * 1e3)
    ms = statistics.median(times)
    out = {"impl": "torch.compile" if a.compile else "torch eager", "torch": torch.__version__,
           "ms": ms, "tok_s": a.batch * a.seq / (ms / 1e3), "batch": a.batch, "seq": a.seq,
           "loss": loss.item()}
    if a.compile:
        out["compile_s"] = first
    if dev == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    return out


def main():
    ap = argparse.ArgumentParser()
    for k, d in (("layers", 12), ("dim", 768), ("heads", 12), ("seq", 1024),
                 ("vocab", 50304), ("batch", 8), ("steps", 10), ("warmup", 3)):
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--gemm-ceiling", action="store_true")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()
    what = "gemm ceiling" if a.gemm_ceiling else "torch.compile" if a.compile else "torch eager"
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        if a.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        out = gemm_ceiling(torch, a.device) if a.gemm_ceiling else train(torch, nn, F, a)
    except BaseException as e:  # noqa: BLE001 - one JSON line whatever failed, then the status
        traceback.print_exc()
        msg = (str(e).strip().splitlines() or [""])[-1][:300]
        print(json.dumps({"impl": what, "error": f"{type(e).__name__}: {msg}"}), flush=True)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
