#!/usr/bin/env python3
"""PyTorch baseline for the GPU step benchmark (tests/gpu/run.sh).

usage: python3 benchmarks/bench_gpu_torch.py --layers 12 --dim 768 --heads 12
           --seq 1024 --vocab 50304 --batch 8 [--steps 10] [--warmup 3]
           [--compile] [--gemm-ceiling]

GPT-2 (pre-LN, GELU tanh, tied head, AdamW fused, bf16 autocast, causal
F.scaled_dot_product_attention) trained on random tokens: one JSON line with
the median step ms, tokens/s and peak device memory. --gemm-ceiling instead
times one 8192^3 bf16 torch.matmul (cuBLAS) and prints its TFLOP/s.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def gemm_ceiling():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"gemm_tflops": 2 * n ** 3 / best / 1e12, "n": n}))


def main():
    ap = argparse.ArgumentParser()
    for k, d in (("layers", 12), ("dim", 768), ("heads", 12), ("seq", 1024),
                 ("vocab", 50304), ("batch", 8), ("steps", 10), ("warmup", 3)):
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--gemm-ceiling", action="store_true")
    a = ap.parse_args()
    if a.gemm_ceiling:
        return gemm_ceiling()
    torch.manual_seed(0)
    model = GPT(a.layers, a.dim, a.heads, a.seq, a.vocab).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), fused=True)
    step_model = torch.compile(model) if a.compile else model
    times = []
    torch.cuda.reset_peak_memory_stats()
    for i in range(a.warmup + a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    print(json.dumps({"impl": "torch.compile" if a.compile else "torch eager",
                      "torch": torch.__version__, "ms": ms,
                      "tok_s": a.batch * a.seq / (ms / 1e3),
                      "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30}))


if __name__ == "__main__":
    main()
