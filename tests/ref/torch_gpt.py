"""Independent reference GPT-2 model in plain PyTorch for gridtrain tests.

Parameters are plain tensors in a dict keyed by gridtrain's parameter names
(see param_shapes); weights are stored (out, in) like torch.nn.Linear.
Everything works in the dtype of the parameters (float32 or float64).

Used by tests/ref/gpt_ref.py (float64 gradients / AdamW reference for the C
tests) and benchmarks/bench_step.py (float32 CPU step timing).
"""

import math

import torch
import torch.nn.functional as F

LN_EPS = 1e-5
CLIP_EPS = 1e-6  # same as torch.nn.utils.clip_grad_norm_


def param_shapes(layers, heads, dim, seq_len, vocab):
    """Ordered list of (name, shape): gridtrain's canonical parameter order."""
    if dim % heads != 0:
        raise ValueError(f"dim {dim} is not divisible by heads {heads}")
    C = dim
    out = [("wte", (vocab, C)), ("wpe", (seq_len, C))]
    for l in range(layers):
        p = f"h.{l}."
        out += [
            (p + "ln_1.weight", (C,)),
            (p + "ln_1.bias", (C,)),
            (p + "attn.qkv.weight", (3 * C, C)),
            (p + "attn.qkv.bias", (3 * C,)),
            (p + "attn.proj.weight", (C, C)),
            (p + "attn.proj.bias", (C,)),
            (p + "ln_2.weight", (C,)),
            (p + "ln_2.bias", (C,)),
            (p + "mlp.fc.weight", (4 * C, C)),
            (p + "mlp.fc.bias", (4 * C,)),
            (p + "mlp.proj.weight", (C, 4 * C)),
            (p + "mlp.proj.bias", (C,)),
        ]
    out += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return out


def num_layers(params):
    """Number of transformer blocks present in a parameter dict."""
    n = 0
    while f"h.{n}.ln_1.weight" in params:
        n += 1
    return n


def init_params(layers, heads, dim, seq_len, vocab, dtype=torch.float32,
                seed=1234, requires_grad=True):
    """GPT-2 style init: N(0, 0.02); residual projections (attn.proj.weight,
    mlp.proj.weight) N(0, 0.02/sqrt(2L)); biases 0; LayerNorm weight 1."""
    gen = torch.Generator().manual_seed(seed)
    resid_std = 0.02 / math.sqrt(2 * layers)
    params = {}
    for name, shape in param_shapes(layers, heads, dim, seq_len, vocab):
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                or name == "ln_f.weight":
            t = torch.ones(shape, dtype=dtype)
        elif len(shape) == 1:  # biases (incl. LayerNorm bias)
            t = torch.zeros(shape, dtype=dtype)
        else:
            std = resid_std if name.endswith(".proj.weight") else 0.02
            t = torch.randn(shape, generator=gen, dtype=dtype) * std
        params[name] = t.requires_grad_(requires_grad)
    return params


def _attention(x, w_qkv, b_qkv, w_proj, b_proj, heads):
    """Causal multi-head self-attention, written out explicitly."""
    B, T, C = x.shape
    hs = C // heads
    qkv = F.linear(x, w_qkv, b_qkv)                 # (B, T, 3C)
    q, k, v = qkv.split(C, dim=2)                   # rows [0,C), [C,2C), [2C,3C)

    def to_heads(t):                                # (B, T, C) -> (B, H, T, hs)
        return t.view(B, T, heads, hs).transpose(1, 2)

    q, k, v = to_heads(q), to_heads(k), to_heads(v)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))   # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
    att = att.masked_fill(future, float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return F.linear(y, w_proj, b_proj)


def forward(params, tokens, heads):
    """Logits (B, T, V) for int tokens (B, T), T <= max positions."""
    tokens = tokens.long()
    B, T = tokens.shape
    wte, wpe = params["wte"], params["wpe"]
    C = wte.shape[1]
    if T > wpe.shape[0]:
        raise ValueError(f"sequence length {T} > max positions {wpe.shape[0]}")
    x = wte[tokens] + wpe[:T].unsqueeze(0)
    for l in range(num_layers(params)):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), params[p + "ln_1.weight"],
                         params[p + "ln_1.bias"], LN_EPS)
        x = x + _attention(h, params[p + "attn.qkv.weight"],
                           params[p + "attn.qkv.bias"],
                           params[p + "attn.proj.weight"],
                           params[p + "attn.proj.bias"], heads)
        h = F.layer_norm(x, (C,), params[p + "ln_2.weight"],
                         params[p + "ln_2.bias"], LN_EPS)
        h = F.linear(h, params[p + "mlp.fc.weight"], params[p + "mlp.fc.bias"])
        h = F.gelu(h, approximate="tanh")
        x = x + F.linear(h, params[p + "mlp.proj.weight"],
                         params[p + "mlp.proj.bias"])
    x = F.layer_norm(x, (C,), params["ln_f.weight"], params["ln_f.bias"], LN_EPS)
    return x @ wte.t()                              # tied LM head


def loss_fn(params, tokens, targets, heads):
    """Mean cross-entropy over all B*T positions."""
    logits = forward(params, tokens, heads)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.long().reshape(-1))


def decay_groups(params, weight_decay):
    """AdamW param groups: decay on tensors with dim >= 2, none on the rest
    (biases, LayerNorm). Keeps the canonical order within each group."""
    decay = [t for t in params.values() if t.dim() >= 2]
    no_decay = [t for t in params.values() if t.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_adamw(params, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    """torch.optim.AdamW with gridtrain's two parameter groups."""
    return torch.optim.AdamW(decay_groups(params, weight_decay), lr=lr,
                             betas=betas, eps=eps)


def global_grad_norm(params):
    """L2 norm over all gradients (computed in the gradients' dtype)."""
    sq = [p.grad.pow(2).sum() for p in params.values() if p.grad is not None]
    return torch.stack(sq).sum().sqrt()


def clip_grads(params, clip):
    """Global-norm clipping as torch.nn.utils.clip_grad_norm_ does it:
    scale = min(1, clip / (norm + 1e-6)); clip <= 0 disables clipping.
    Returns the pre-clip norm as a Python float."""
    norm = global_grad_norm(params)
    if clip > 0:
        scale = torch.clamp(clip / (norm + CLIP_EPS), max=1.0)
        for p in params.values():
            if p.grad is not None:
                p.grad.mul_(scale)
    return float(norm)


def train_step(params, optimizer, tokens, targets, heads, clip):
    """One full step: zero grads, forward, backward, clip, AdamW.
    Returns (loss, pre-clip grad norm) as floats."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(params, tokens, targets, heads)
    loss.backward()
    norm = clip_grads(params, clip)
    optimizer.step()
    return float(loss), norm


def load_exported(path, dtype):
    """The weights `gridtrain ckpt convert` exported to the HDF5 file path:
    (shape, params) with shape the model's keys and params name -> tensor of
    dtype (a NumPy dtype). ValueError when the names are not the model's."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        shape = {k: int(f.attrs[k]) for k in ("layers", "heads", "dim", "seq_len", "vocab")}
        params = {name: torch.from_numpy(np.asarray(f[name], dtype=dtype)) for name in f.keys()}
    expected = dict(param_shapes(**shape))
    if set(params) != set(expected):
        raise ValueError(f"parameter names differ: extra {sorted(set(params) - set(expected))}, "
                         f"missing {sorted(set(expected) - set(params))}")
    return shape, params
