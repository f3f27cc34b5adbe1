#!/usr/bin/env python3
"""PyTorch baseline for pipedream-2bw's update rule (docs/parallelism.md).

Trains tests/ref/torch_gpt.py's GPT (the default deck's shape: 4 layers,
4 heads, dim 128, T 128, byte vocabulary) on random windows of the KJV
token file with AdamW, gridtrain's schedule (linear warm-up, cosine to
lr/10), global-norm clipping at 1.0, and either the usual update (delay 0)
or PipeDream-2BW's, W(t+1) = W(t) - lr * grad f(W(t-1)) (delay 1): the
gradient of each batch taken at the weights one update behind, applied to
the newest. It is independent of gridtrain's code, so the gap between the
two curves it prints is what the update rule costs, to set beside
gridtrain's own 1f1b / pipedream-2bw runs.

    /usr/bin/python3 benchmarks/stale_update_torch.py --lr 2e-3   # both rules
"""

import argparse
import math
import os
import sys

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import torch_gpt as G  # noqa: E402


def lr_at(step, peak, steps, warmup):
    low = peak / 10
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return low + 0.5 * (peak - low) * (1 + math.cos(math.pi * t))


def train(a, delay, toks):
    """The loss of every --every-th step of one run (same data, same init)."""
    rng = np.random.default_rng(0)
    params = G.init_params(4, 4, 128, 128, 256, seed=1)
    opt = G.make_adamw(params, a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    behind = {k: v.detach().clone() for k, v in params.items()}
    out = {}
    for s in range(a.steps):
        start = rng.integers(0, len(toks) - 129, 32)
        b = torch.tensor(np.stack([toks[i:i + 129] for i in start]))
        x, y = b[:, :-1], b[:, 1:]
        for g in opt.param_groups:
            g["lr"] = lr_at(s, a.lr, a.steps, a.warmup)
        if delay:
            q = {k: v.detach().clone().requires_grad_(True) for k, v in behind.items()}
            loss = G.loss_fn(q, x, y, 4)
            loss.backward()
            behind = {k: v.detach().clone() for k, v in params.items()}
            for k in params:
                params[k].grad = q[k].grad
            G.clip_grads(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss = float(loss)
        else:
            loss, _ = G.train_step(params, opt, x, y, 4, 1.0)
        if (s + 1) % a.every == 0 or s + 1 == a.steps:
            out[s] = loss
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "..", "data", "kjv.h5"))
    ap.add_argument("--delay", type=int, choices=(0, 1), default=None,
                    help="run one rule only (default: both, side by side)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--every", type=int, default=50, help="print the loss every N steps")
    a = ap.parse_args()
    torch.set_num_threads(1)
    with h5py.File(a.data, "r") as f:
        toks = np.asarray(f["/train/tokens"][:], dtype=np.int64)
    delays = (0, 1) if a.delay is None else (a.delay,)
    runs = {d: train(a, d, toks) for d in delays}
    print(f"# stale_update_torch: lr {a.lr:g}, {a.steps} steps, warm-up {a.warmup}; "
          "loss of the batch at each step")
    print("# step  " + "  ".join(f"delay {d}" for d in delays) +
          ("   delay 1 / delay 0" if len(delays) == 2 else ""))
    for s in sorted(runs[delays[0]]):
        row = "  ".join(f"{runs[d][s]:7.4f}" for d in delays)
        ratio = f"   {runs[1][s] / runs[0][s]:.3f}" if len(delays) == 2 else ""
        print(f"{s:6d}  {row}{ratio}", flush=True)


if __name__ == "__main__":
    main()
