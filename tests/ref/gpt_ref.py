#!/usr/bin/python3
"""Float64 reference for gridtrain's GPT forward/backward and AdamW step.

usage: gpt_ref.py IN.h5 OUT.h5
       gpt_ref.py --selftest

IN.h5 (written by the C test):
  root attributes  layers heads dim seq_len vocab (int),
                   lr beta1 beta2 eps weight_decay grad_clip (double)
  /params/<name>   float32, one dataset per parameter (torch_gpt.param_shapes)
  /batch/tokens, /batch/targets   int32 (B, T), T <= seq_len

OUT.h5 (all float64):
  /loss, /grad_norm               scalars (grad_norm is the pre-clip norm)
  /grads/<name>                   raw (unclipped) gradients of the mean loss
  /params_after/<name>            parameters after one AdamW step (step 1)

Exit status: 0 ok, 1 bad input / failure, 2 usage, 3 torch or h5py missing.
"""

import importlib
import math
import os
import sys

PROG = "gpt_ref.py"

try:
    import torch
except Exception:  # ImportError, or a broken install
    print(f"{PROG}: python3-torch is missing; "
          "apt-get install python3-torch python3-h5py", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402

INT_ATTRS = ("layers", "heads", "dim", "seq_len", "vocab")
FLOAT_ATTRS = ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")


class RefError(Exception):
    """A problem to report as a one-line message."""


def reference(params32, tokens, targets, cfg):
    """Loss, grads, pre-clip norm and params after one AdamW step, float64.

    params32: dict name -> array-like (any float dtype), tokens/targets (B,T).
    cfg: dict with heads, lr, beta1, beta2, eps, weight_decay, grad_clip.
    """
    params = {n: torch.as_tensor(v).to(torch.float64).clone().requires_grad_(True)
              for n, v in params32.items()}
    tokens = torch.as_tensor(tokens).long()
    targets = torch.as_tensor(targets).long()
    loss = torch_gpt.loss_fn(params, tokens, targets, cfg["heads"])
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in params.items()}
    opt = torch_gpt.make_adamw(params, cfg["lr"], (cfg["beta1"], cfg["beta2"]),
                               cfg["eps"], cfg["weight_decay"])
    norm = torch_gpt.clip_grads(params, cfg["grad_clip"])
    opt.step()
    after = {n: p.detach().clone() for n, p in params.items()}
    return float(loss), norm, grads, after


# --------------------------------------------------------------------- I/O

def _scalar(attrs, key, kind):
    if key not in attrs:
        raise RefError(f"missing root attribute '{key}'")
    import numpy as np
    v = np.asarray(attrs[key]).reshape(-1)
    if v.size != 1:
        raise RefError(f"attribute '{key}' must be a scalar, has {v.size} values")
    v = v[0]
    if kind is int:
        if not np.issubdtype(v.dtype, np.integer):
            raise RefError(f"attribute '{key}' must be an integer")
        return int(v)
    if not (np.issubdtype(v.dtype, np.floating) or np.issubdtype(v.dtype, np.integer)):
        raise RefError(f"attribute '{key}' must be a number")
    return float(v)


def read_input(path):
    import h5py
    import numpy as np
    if not os.path.exists(path):
        raise RefError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise RefError(f"{path}: cannot open as HDF5 ({e})") from None
    with f:
        cfg = {k: _scalar(f.attrs, k, int) for k in INT_ATTRS}
        cfg.update({k: _scalar(f.attrs, k, float) for k in FLOAT_ATTRS})
        for k in INT_ATTRS:
            if cfg[k] <= 0:
                raise RefError(f"attribute '{k}' must be positive, got {cfg[k]}")
        if cfg["dim"] % cfg["heads"]:
            raise RefError(f"dim {cfg['dim']} not divisible by heads {cfg['heads']}")
        shapes = torch_gpt.param_shapes(*(cfg[k] for k in INT_ATTRS))
        if "params" not in f or not isinstance(f["params"], h5py.Group):
            raise RefError("missing group /params")
        g = f["params"]
        params = {}
        for name, shape in shapes:
            if name not in g:
                raise RefError(f"missing dataset /params/{name}")
            d = g[name]
            if not isinstance(d, h5py.Dataset) or d.dtype.kind != "f":
                raise RefError(f"/params/{name} must be a float dataset")
            if tuple(d.shape) != tuple(shape):
                raise RefError(f"/params/{name} has shape {tuple(d.shape)}, "
                               f"expected {tuple(shape)}")
            params[name] = np.asarray(d[()], dtype=np.float64)
        extra = sorted(set(g.keys()) - set(params))
        if extra:
            raise RefError(f"unexpected dataset /params/{extra[0]}")
        batch = {}
        for key in ("tokens", "targets"):
            full = f"batch/{key}"
            if full not in f:
                raise RefError(f"missing dataset /{full}")
            d = f[full]
            if d.dtype.kind not in "iu" or len(d.shape) != 2:
                raise RefError(f"/{full} must be a 2-D integer dataset")
            batch[key] = np.asarray(d[()], dtype=np.int64)
    tok, tgt = batch["tokens"], batch["targets"]
    if tok.shape != tgt.shape:
        raise RefError(f"/batch/tokens {tok.shape} and /batch/targets "
                       f"{tgt.shape} differ in shape")
    if tok.shape[0] < 1 or tok.shape[1] < 1:
        raise RefError(f"empty batch {tok.shape}")
    if tok.shape[1] > cfg["seq_len"]:
        raise RefError(f"batch T={tok.shape[1]} > seq_len={cfg['seq_len']}")
    for key, a in (("tokens", tok), ("targets", tgt)):
        if a.min() < 0 or a.max() >= cfg["vocab"]:
            raise RefError(f"/batch/{key} has ids outside [0, {cfg['vocab']})")
    return cfg, params, tok, tgt


def write_output(path, loss, norm, grads, after):
    import h5py
    import numpy as np
    with h5py.File(path, "w") as f:
        f.create_dataset("loss", data=np.float64(loss))
        f.create_dataset("grad_norm", data=np.float64(norm))
        for group, tensors in (("grads", grads), ("params_after", after)):
            g = f.create_group(group)
            for name, t in tensors.items():
                g.create_dataset(name, data=t.numpy().astype(np.float64))


def run(in_path, out_path):
    cfg, params, tok, tgt = read_input(in_path)
    loss, norm, grads, after = reference(params, tok, tgt, cfg)
    write_output(out_path, loss, norm, grads, after)


# ---------------------------------------------------------------- selftest

def _adamw_by_hand(p, g, lr, b1, b2, eps, wd):
    """Textbook AdamW (decoupled decay), first step from zero moments."""
    m = (1 - b1) * g
    v = (1 - b2) * g * g
    m_hat = m / (1 - b1)
    v_hat = v / (1 - b2)
    return p * (1 - lr * wd) - lr * m_hat / (v_hat.sqrt() + eps)


def _numpy_loss(params, tokens, targets, heads):
    """Second, loop-based NumPy forward written from the formulas (no torch),
    to check the conventions of torch_gpt.forward (mask, GELU, LN, tying)."""
    import numpy as np
    P = {n: t.detach().numpy() for n, t in params.items()}
    B, T = tokens.shape
    V, C = P["wte"].shape
    hs = C // heads

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * w + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    total = 0.0
    for b in range(B):
        x = P["wte"][tokens[b]] + P["wpe"][:T]
        for l in range(torch_gpt.num_layers(params)):
            p = f"h.{l}."
            a = ln(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
            qkv = a @ P[p + "attn.qkv.weight"].T + P[p + "attn.qkv.bias"]
            y = np.zeros((T, C))
            for hd in range(heads):
                q = qkv[:, hd * hs:(hd + 1) * hs]
                k = qkv[:, C + hd * hs:C + (hd + 1) * hs]
                v = qkv[:, 2 * C + hd * hs:2 * C + (hd + 1) * hs]
                for t in range(T):  # position t sees positions 0..t
                    s = k[:t + 1] @ q[t] / math.sqrt(hs)
                    w = np.exp(s - s.max())
                    y[t, hd * hs:(hd + 1) * hs] = (w / w.sum()) @ v[:t + 1]
            x = x + y @ P[p + "attn.proj.weight"].T + P[p + "attn.proj.bias"]
            a = ln(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
            a = gelu(a @ P[p + "mlp.fc.weight"].T + P[p + "mlp.fc.bias"])
            x = x + a @ P[p + "mlp.proj.weight"].T + P[p + "mlp.proj.bias"]
        x = ln(x, P["ln_f.weight"], P["ln_f.bias"])
        logits = x @ P["wte"].T
        for t in range(T):
            z = logits[t] - logits[t].max()
            total += math.log(np.exp(z).sum()) - z[targets[b, t]]
    return total / (B * T)


def selftest():
    """NumPy forward vs torch, finite differences vs autograd, clipping + AdamW vs a hand formula,
    on a tiny float64 model; then an HDF5 round trip through run()."""
    import tempfile
    import h5py
    import numpy as np

    torch.manual_seed(0)
    L, C, H, V, T, B = 2, 16, 2, 32, 8, 2
    shapes = torch_gpt.param_shapes(L, H, C, T, V)
    # Random (not GPT-2 init) values so LayerNorm/bias paths are exercised.
    base = {}
    for name, shape in shapes:
        t = torch.randn(shape, dtype=torch.float64) * 0.3
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            t = 1.0 + t
        base[name] = t
    tokens = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))

    # 0. forward conventions vs an independent NumPy implementation.
    want = _numpy_loss(base, tokens.numpy(), targets.numpy(), H)
    got = float(torch_gpt.loss_fn(base, tokens, targets, H))
    if abs(got - want) > 1e-12 * abs(want):
        raise RefError(f"selftest: loss {got!r} != NumPy loss {want!r}")
    print(f"selftest: forward loss {got:.12f} matches loop-based NumPy "
          f"forward (diff {abs(got - want):.1e})")

    # 1. autograd vs central finite differences, 4 entries of every tensor.
    params = {n: t.clone().requires_grad_(True) for n, t in base.items()}
    loss = torch_gpt.loss_fn(params, tokens, targets, H)
    loss.backward()
    h = 1e-5
    worst = 0.0
    checked = 0
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, _ in shapes:
            p = params[name]
            flat = p.view(-1)
            for idx in torch.randint(0, flat.numel(), (4,), generator=gen).tolist():
                old = float(flat[idx])
                flat[idx] = old + h
                lp = float(torch_gpt.loss_fn(params, tokens, targets, H))
                flat[idx] = old - h
                lm = float(torch_gpt.loss_fn(params, tokens, targets, H))
                flat[idx] = old
                fd = (lp - lm) / (2 * h)
                ag = float(p.grad.view(-1)[idx])
                err = abs(fd - ag) / max(1e-4, abs(fd) + abs(ag))
                worst = max(worst, err)
                checked += 1
                if err > 1e-5:
                    raise RefError(f"selftest: grad mismatch {name}[{idx}] "
                                   f"autograd {ag:.10g} fd {fd:.10g}")
    print(f"selftest: loss {float(loss):.6f}; {checked} gradient entries in "
          f"{len(shapes)} tensors match finite differences "
          f"(worst rel err {worst:.2e})")

    # 2. clipping + AdamW vs hand formula, for an active and an off clip.
    cfg = dict(heads=H, lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8,
               weight_decay=0.1)
    grads = {n: params[n].grad.detach() for n in base}
    raw_norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    for clip in (0.5 * raw_norm, 0.0, 10 * raw_norm):
        loss2, norm, g2, after = reference(base, tokens, targets,
                                           dict(cfg, grad_clip=clip))
        if abs(norm - raw_norm) > 1e-12 * raw_norm or abs(loss2 - float(loss)) > 1e-12:
            raise RefError("selftest: loss/grad norm differ between runs")
        scale = min(1.0, clip / (raw_norm + 1e-6)) if clip > 0 else 1.0
        worst = 0.0
        for name, p0 in base.items():
            wd = cfg["weight_decay"] if p0.dim() >= 2 else 0.0
            want = _adamw_by_hand(p0, grads[name] * scale, cfg["lr"],
                                  cfg["beta1"], cfg["beta2"], cfg["eps"], wd)
            worst = max(worst, float((after[name] - want).abs().max()))
            if not torch.equal(g2[name], grads[name]):
                raise RefError(f"selftest: returned grads of {name} are clipped")
        if worst > 1e-12:
            raise RefError(f"selftest: AdamW mismatch (max abs {worst:.3e}) "
                           f"at clip {clip}")
        print(f"selftest: clip {clip:.4g} (norm {raw_norm:.4g}, scale "
              f"{scale:.4f}): AdamW step matches hand formula "
              f"(max abs diff {worst:.1e})")

    # clip_grads agrees with torch.nn.utils.clip_grad_norm_.
    a = [g.clone() for g in grads.values()]
    b = {n: torch.zeros_like(g, requires_grad=True) for n, g in grads.items()}
    ta = [torch.zeros_like(g, requires_grad=True) for g in a]
    for t, g in zip(ta, a):
        t.grad = g.clone()
    for n in b:
        b[n].grad = grads[n].clone()
    n1 = float(torch.nn.utils.clip_grad_norm_(ta, 0.5 * raw_norm))
    n2 = torch_gpt.clip_grads(b, 0.5 * raw_norm)
    diff = max(float((x.grad - y.grad).abs().max()) for x, y in zip(ta, b.values()))
    if abs(n1 - n2) > 1e-12 * n1 or diff > 1e-15:
        raise RefError("selftest: clip_grads differs from clip_grad_norm_")
    print("selftest: clip_grads matches torch.nn.utils.clip_grad_norm_")

    # 3. HDF5 round trip in the C test's format (float32 params, T < seq_len).
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.h5"), os.path.join(tmp, "out.h5")
        Tb = T - 2
        with h5py.File(inp, "w") as f:
            for k, v in dict(layers=L, heads=H, dim=C, seq_len=T, vocab=V).items():
                f.attrs[k] = np.int64(v)
            for k in FLOAT_ATTRS:
                f.attrs[k] = np.float64(dict(cfg, grad_clip=1.0)[k])
            g = f.create_group("params")
            for name, _ in shapes:
                g.create_dataset(name, data=base[name].numpy().astype(np.float32))
            f.create_dataset("batch/tokens", data=tokens[:, :Tb].numpy().astype(np.int32))
            f.create_dataset("batch/targets", data=targets[:, :Tb].numpy().astype(np.int32))
        run(inp, out)
        p32 = {n: torch.from_numpy(t.numpy().astype(np.float32)) for n, t in base.items()}
        want = reference(p32, tokens[:, :Tb], targets[:, :Tb], dict(cfg, grad_clip=1.0))
        with h5py.File(out, "r") as f:
            ok = (f["loss"].shape == () and f["loss"].dtype == np.float64
                  and float(f["loss"][()]) == want[0]
                  and float(f["grad_norm"][()]) == want[1])
            for name, shape in shapes:
                for grp, ref in (("grads", want[2]), ("params_after", want[3])):
                    d = f[grp][name]
                    ok = ok and d.dtype == np.float64 and d.shape == tuple(shape) \
                        and np.array_equal(d[()], ref[name].numpy())
        if not ok:
            raise RefError("selftest: HDF5 round trip mismatch")
        print(f"selftest: HDF5 round trip ok (B={B}, T={Tb} < seq_len={T}, "
              f"loss {want[0]:.6f}, grad_norm {want[1]:.6f})")
    print("selftest: PASS")


def main(argv):
    selftest_mode = len(argv) == 2 and argv[1] == "--selftest"
    if not selftest_mode and (len(argv) != 3 or argv[1].startswith("-")):
        print(f"usage: {PROG} IN.h5 OUT.h5 | --selftest", file=sys.stderr)
        return 2
    try:
        importlib.import_module("h5py")  # used by the I/O and the selftest
    except Exception:
        print(f"{PROG}: python3-h5py is missing; apt-get install python3-h5py",
              file=sys.stderr)
        return 3
    if selftest_mode:
        selftest()
    else:
        run(argv[1], argv[2])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except RefError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # anything unexpected still gives one line
        msg = " ".join(str(e).split()) or type(e).__name__
        print(f"{PROG}: {type(e).__name__}: {msg}", file=sys.stderr)
        sys.exit(1)
