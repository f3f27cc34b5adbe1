#!/usr/bin/python3
"""PyTorch's results for gridtrain's mixture-of-experts ops test.

usage: moe_ops_ref.py IN.h5 OUT.h5

IN.h5 (written by tests/ref/test_moe_ops.c), attribute sentinel (double) at
the root, and per case a group /case/<i> with attributes N, E, k, C,
capacity (int), aux_scale, z_scale (double) and float32 datasets
  logits (N,E)     the router's input
  dgate (N,k)      the gates' gradient fed to moe_route_backward
  gate (N,k)       the gates fed to moe_combine and moe_combine_backward
  extra (N,C)      the fp32 term of moe_permute_backward
  <dt>/x, dx, base, dout (N,C) and <dt>/dxp, y (R,C), R = N k + 1, for dt in
                   f32, bf16, f16: values that dt holds exactly

OUT.h5, per case /case/<i>: float64 results of torch in float64 (fp32
outputs not rounded; dt outputs rounded as the backends round them, to fp32
and then to dt) and int32 indices:
  probs (N,E), lse (N), sel (N,k), gate (N,k)    torch.softmax, logsumexp,
                   topk (sorted), the top k's probabilities over their sum
  pos (N,k), load (E), kept (E)                  the pairs sorted by (expert,
                   n k + j), each expert keeping its first `capacity` (all
                   when capacity < 0): a sort, where the backend counts
  dlogits (N,E)    torch.autograd of sum(dgate * gate) + aux_scale L_aux +
                   z_scale L_z w.r.t. logits, with sel and load constant
  <dt>/xp (R,C)    the sentinel, and x[n] in row pos[n,j] of every kept pair
  <dt>/dx_plain, <dt>/dx_extra (N,C)   dx + the kept pairs' dxp rows, and
                   that plus extra
  <dt>/out, <dt>/out_base (N,C)        the kept pairs' gate y rows, and that
                   plus base
  <dt>/dy (R,C)    the sentinel, and gate dout[n] in row pos[n,j] of every
                   kept pair
  <dt>/dgate (N,k) dout[n] . y[pos[n,j]], 0 for a dropped pair

The inputs come from pos of this script's own assignment (the C test feeds
the same pos to the backend), so that each op is checked on its own.

Exit status: 0 ok, 1 failure (also: logits whose top k is a near tie, which
the test's inputs must avoid), 2 usage, 3 torch, numpy or h5py missing.
"""

import sys

PROG = "moe_ops_ref.py"

try:
    import h5py
    import numpy as np
    import torch
except Exception as e:  # ImportError, or a broken install
    print(f"{PROG}: {e}; needs python3-torch, python3-numpy and python3-h5py", file=sys.stderr)
    sys.exit(3)

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def stored(t, dt):
    """A float64 result as a backend stores it in dt: rounded to fp32 (its
    working precision), then to dt."""
    return t.to(torch.float32).to(DTYPES[dt]).to(torch.float64)


def route(logits, k):
    """probs, lse, sel, gate of the router, in float64."""
    probs = torch.softmax(logits, dim=1)
    lse = torch.logsumexp(logits, dim=1)
    top, sel = torch.topk(probs, k, dim=1, largest=True, sorted=True)
    # The order of the top k, and the k-th against the next, must not hang on
    # a rounding (fp32 tells probabilities apart from a relative 2.4e-7 on)
    # nor on a tie (which topk breaks in no documented way).
    ranked = torch.sort(probs, dim=1, descending=True).values[:, :min(k + 1, probs.shape[1])]
    if ranked.shape[1] > 1:
        gap = (ranked[:, :-1] - ranked[:, 1:]) / ranked[:, :-1]
        if bool((gap < 1e-6).any()):
            raise ValueError(f"near tie in a top {k} (relative gap {float(gap.min()):.1e})")
    gate = top / top.sum(dim=1, keepdim=True)
    return probs, lse, sel, gate


def assign(sel, E, capacity):
    """pos, load, kept by sorting the pairs on (expert, n k + j)."""
    N, k = sel.shape
    pairs = sorted((int(sel[n, j]), n * k + j) for n in range(N) for j in range(k))
    load = [0] * E
    for e, _ in pairs:
        load[e] += 1
    kept = [l if capacity < 0 else min(l, capacity) for l in load]
    first = [sum(kept[:e]) for e in range(E)]
    pos = np.full((N, k), -1, dtype=np.int32)
    rank = [0] * E
    for e, i in pairs:
        if rank[e] < kept[e]:
            pos[i // k, i % k] = first[e] + rank[e]
        rank[e] += 1
    return pos, np.array(load, dtype=np.int32), np.array(kept, dtype=np.int32)


def route_grad(logits, sel, load, dgate, aux_scale, z_scale):
    """d(loss)/d(logits) by autograd, with backend.h's losses written out."""
    N, E = logits.shape
    k = sel.shape[1]
    lg = logits.clone().requires_grad_(True)
    probs = torch.softmax(lg, dim=1)
    lse = torch.logsumexp(lg, dim=1)
    top = probs.gather(1, sel)
    gate = top / top.sum(dim=1, keepdim=True)
    load_t = torch.tensor(load, dtype=torch.float64)
    l_aux = E * torch.sum(load_t / (N * k) * probs.mean(dim=0))
    l_z = torch.mean(lse ** 2)
    loss = torch.sum(dgate * gate) + aux_scale * l_aux + z_scale * l_z
    loss.backward()
    return lg.grad


def tensor(g, name):
    return torch.from_numpy(g[name][...]).to(torch.float64)


def main(argv):
    if len(argv) != 3:
        print(f"usage: {PROG} IN.h5 OUT.h5", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    with h5py.File(argv[1], "r") as fin, h5py.File(argv[2], "w") as fout:
        sentinel = float(fin.attrs["sentinel"])
        for name, g in fin["case"].items():
            a = g.attrs
            N, E, k, C, capacity = (int(a[x]) for x in ("N", "E", "k", "C", "capacity"))
            o = fout.create_group(f"case/{name}")
            logits = tensor(g, "logits")
            probs, lse, sel, gate = route(logits, k)
            o["probs"], o["lse"], o["gate"] = probs.numpy(), lse.numpy(), gate.numpy()
            o["sel"] = sel.to(torch.int32).numpy()
            pos, load, kept = assign(sel.numpy(), E, capacity)
            o["pos"], o["load"], o["kept"] = pos, load, kept
            o["dlogits"] = route_grad(logits, sel, load, tensor(g, "dgate"),
                                      float(a["aux_scale"]), float(a["z_scale"])).numpy()

            R = N * k + 1
            gin, extra = tensor(g, "gate"), tensor(g, "extra")
            kept_pairs = [(n, j, int(pos[n, j])) for n in range(N) for j in range(k)
                          if pos[n, j] >= 0]
            for dt in DTYPES:
                d = g[dt]
                x, dx, base, dout = (tensor(d, s) for s in ("x", "dx", "base", "dout"))
                dxp, y = tensor(d, "dxp"), tensor(d, "y")
                xp = torch.full((R, C), sentinel, dtype=torch.float64)
                dy = torch.full((R, C), sentinel, dtype=torch.float64)
                gathered = torch.zeros(N, C, dtype=torch.float64)
                mixed = torch.zeros(N, C, dtype=torch.float64)
                dgate = torch.zeros(N, k, dtype=torch.float64)
                for n, j, p in kept_pairs:
                    xp[p] = x[n]
                    gathered[n] += dxp[p]
                    mixed[n] += gin[n, j] * y[p]
                    dy[p] = stored(gin[n, j] * dout[n], dt)
                    dgate[n, j] = torch.dot(dout[n], y[p])
                od = o.create_group(dt)
                od["xp"] = xp.numpy()
                od["dx_plain"] = stored(dx + gathered, dt).numpy()
                od["dx_extra"] = stored(dx + extra + gathered, dt).numpy()
                od["out"] = stored(mixed, dt).numpy()
                od["out_base"] = stored(base + mixed, dt).numpy()
                od["dy"] = dy.numpy()
                od["dgate"] = dgate.numpy()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Exception as e:  # a one-line message for the C test's log
        print(f"{PROG}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
