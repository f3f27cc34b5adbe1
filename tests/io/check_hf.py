#!/usr/bin/python3
"""Check a Hugging Face GPT-2 directory that `gridtrain ckpt convert --format hf`
wrote, with the safetensors package, h5py and PyTorch, against what the deck
says (independently of gridtrain's code).

usage: check_hf.py JOB [-- JOB ...]   (one Python start-up for many checks)
  JOB: check OUT_DIR CKPT.h5 layers=L heads=H dim=C seq_len=T vocab=V
             [dtype=fp32|bf16|fp16] [tokenizer=bytes|none|sentencepiece|bpe]
             [data=DATA.h5 val_loss=X batches=N batch=B]
     | same OUT_DIR_A OUT_DIR_B
Prints what it checked as "# " lines and, for each job K (from 1), a line
"job K: ok" or "job K: FAILED".

check:
  1. model.safetensors: the file's layout by hand (8-byte length, JSON header
     padded with spaces to 8 bytes, tensors back to back), then loaded with
     safetensors: the names and shapes GPT-2 has for (L, H, C, T, V), the
     dtype, metadata format = pt, no lm_head.weight;
  2. config.json: GPT2LMHeadModel's fields against the deck and gridtrain's
     numerics (tanh GELU, LayerNorm eps 1e-5, no dropout, tied head);
  3. the tensors mapped back to gridtrain's names (Conv1D weights transposed)
     against the checkpoint's /model datasets read with h5py: bit for bit in
     fp32, and equal to torch's round-to-nearest-even rounding in bf16/fp16;
     wte cut to V rows;
  4. logits: an independent forward written the way Hugging Face's GPT-2 computes
     (Conv1D x @ W + b, split heads, the settings of config.json) on the
     exported tensors, against tests/ref/torch_gpt.py on the checkpoint's
     tensors (its first V logits), float64, within 1e-5 (fp32 export);
  5. with data=: the mean validation loss of the exported model on the first
     batches*batch sequences of DATA.h5:/val/tokens is gridtrain's val_loss
     (within 1e-5 relative; only meaningful when nothing was cut).
same: every tensor of A's model.safetensors is bit for bit B's, and the
  config.json files are equal.
Exit status: 0 every job ok, 1 a check failed, 2 usage, 3 a package is missing.
"""

import json
import math
import os
import struct
import sys

try:
    import h5py
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception:  # ImportError, or a broken install
    print("check_hf.py: needs python3-torch, python3-h5py, python3-numpy", file=sys.stderr)
    sys.exit(3)
try:
    from safetensors import safe_open
    from safetensors.torch import load_file
except Exception:
    print("check_hf.py: needs the safetensors package: "
          "pip install --break-system-packages safetensors", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import torch_gpt  # noqa: E402

TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ST_DTYPE = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}
CONFIG_NAME = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
RENAMED = {"attn.c_attn.": "attn.qkv.", "attn.c_proj.": "attn.proj.",
           "mlp.c_fc.": "mlp.fc.", "mlp.c_proj.": "mlp.proj."}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"# FAILED: {what}")
    return cond


def expected_hf(L, C, T, V):
    """GPT-2's names and (in, out) shapes, written out from its modeling code."""
    out = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
    for l in range(L):
        p = f"transformer.h.{l}."
        out.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,),
        })
    out.update({"transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)})
    return out


def to_gridtrain(hf):
    """HF tensors -> gridtrain's names, (out, in) weights."""
    out = {}
    for name, t in hf.items():
        g = name[len("transformer."):]
        if g in ("wte.weight", "wpe.weight"):
            out[g[:3]] = t
            continue
        transpose = False
        for new, old in RENAMED.items():
            if new in g:
                g = g.replace(new, old)
                transpose = g.endswith(".weight")
        out[g] = t.t().contiguous() if transpose else t
    return out


def check_layout(path, names):
    """The file's bytes as the format describes them."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + n]
    check((8 + n) % 8 == 0, f"data starts at byte {8 + n}, not on an 8-byte boundary")
    check(header[:1] == b"{", "the header does not start with '{'")
    text = header.decode("utf-8")
    check(text.rstrip(" ").endswith("}") and len(text) - len(text.rstrip(" ")) < 8,
          "the header is not padded with fewer than 8 spaces")
    h = json.loads(text)
    spans = sorted(tuple(v["data_offsets"]) for k, v in h.items() if k != "__metadata__")
    pos = 0
    for a, b in spans:
        check(a == pos, f"tensor bytes at {a}, expected {pos} (gap or overlap)")
        pos = b
    check(8 + n + pos == len(raw), f"file has {len(raw)} bytes, header says {8 + n + pos}")
    check(set(h) - {"__metadata__"} == set(names), "header names differ from the file's")
    return h.get("__metadata__", {})


def hf_forward(hf, cfg, tokens):
    """Logits as transformers' GPT2LMHeadModel computes them (eager attention),
    from the config's settings; float64."""
    acts = {"gelu_new": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu}
    act = acts[cfg["activation_function"]]
    eps, H = cfg["layer_norm_epsilon"], cfg["n_head"]
    w = {k: v.to(torch.float64) for k, v in hf.items()}
    B, T = tokens.shape
    C = cfg["n_embd"]
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][torch.arange(T)]
    conv1d = lambda h, p: h @ w[p + ".weight"] + w[p + ".bias"]  # noqa: E731
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = conv1d(h, p + "attn.c_attn").split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).permute(0, 2, 1, 3) for t in (q, k, v))
        a = q @ k.transpose(-1, -2)
        if cfg["scale_attn_weights"]:
            a = a / math.sqrt(C // H)
        a = a.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (a.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + conv1d(y, p + "attn.c_proj")
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        x = x + conv1d(act(conv1d(h, p + "mlp.c_fc")), p + "mlp.c_proj")
    x = F.layer_norm(x, (C,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["transformer.wte.weight"].t()  # tie_word_embeddings


def cmd_check(out, ckpt, args):
    L, H, C, T, V = (int(args[k]) for k in ("layers", "heads", "dim", "seq_len", "vocab"))
    dtype = args.get("dtype", "fp32")
    st = os.path.join(out, "model.safetensors")
    hf = load_file(st)
    with safe_open(st, framework="pt") as f:
        meta = f.metadata() or {}
    want = expected_hf(L, C, T, V)
    check(set(hf) == set(want), f"names: extra {sorted(set(hf) - set(want))[:3]}, "
          f"missing {sorted(set(want) - set(hf))[:3]}")
    for name, shape in want.items():
        if name in hf:
            check(tuple(hf[name].shape) == shape,
                  f"{name}: shape {tuple(hf[name].shape)}, expected {shape}")
            check(hf[name].dtype == TORCH_DTYPE[dtype], f"{name}: dtype {hf[name].dtype}")
    layout_meta = check_layout(st, list(hf))
    check(meta == layout_meta and meta.get("format") == "pt",
          f"metadata {meta} lacks format = pt (transformers refuses the file without it)")
    print(f"# {len(hf)} tensors, {os.path.getsize(st)} bytes, metadata {meta}")

    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    want_cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
                "n_positions": T, "n_embd": C, "n_layer": L, "n_head": H,
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                "tie_word_embeddings": True, "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False, "resid_pdrop": 0.0,
                "embd_pdrop": 0.0, "attn_pdrop": 0.0, "torch_dtype": CONFIG_NAME[dtype]}
    for k, v in want_cfg.items():
        check(cfg.get(k) == v, f"config.json {k} = {cfg.get(k)!r}, expected {v!r}")
    check(cfg.get("n_inner") in (None, 4 * C), f"config.json n_inner = {cfg.get('n_inner')}")
    if args.get("tokenizer", "bytes") == "bytes":
        check(cfg.get("bos_token_id") is None and cfg.get("eos_token_id") is None,
              "bytes have no special tokens, but config.json names some")
        check(not os.path.exists(os.path.join(out, "tokenizer.model")),
              "a tokenizer.model for byte-level data")
    if args.get("tokenizer") == "bpe":  # the tokenizers package reads it: V ids
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        check(tok.get_vocab_size(with_added_tokens=True) == V,
              f"tokenizer.json has {tok.get_vocab_size(with_added_tokens=True)} ids, not {V}")
        with open(os.path.join(out, "tokenizer_config.json")) as f:
            tc = json.load(f)
        check(tc.get("tokenizer_class") == "PreTrainedTokenizerFast" and
              tc.get("model_max_length") == T and tc.get("clean_up_tokenization_spaces") is False,
              f"tokenizer_config.json: {tc}")
        check(not os.path.exists(os.path.join(out, "tokenizer.model")),
              "a tokenizer.model beside tokenizer.json")

    with h5py.File(ckpt, "r") as f:
        ck = {n: torch.from_numpy(np.asarray(f["model"][n], dtype=np.float32))
              for n in f["model"]}
    got = to_gridtrain(hf)
    check(set(got) == set(ck), "names mapped back differ from the checkpoint's")
    exact = 0
    for name, t in ck.items():
        ref = (t[:V] if name == "wte" else t).to(TORCH_DTYPE[dtype])
        g = got.get(name)
        if g is not None and check(g.shape == ref.shape, f"{name}: shape {tuple(g.shape)}"):
            exact += check(torch.equal(g.view(-1).view(torch.int16 if dtype != "fp32" else
                                                      torch.int32),
                                       ref.reshape(-1).view(torch.int16 if dtype != "fp32"
                                                            else torch.int32)),
                           f"{name}: not bit for bit the checkpoint's ({dtype})")
    print(f"# {exact} of {len(ck)} tensors bit for bit the checkpoint's ({dtype}); wte cut "
          f"from {ck['wte'].shape[0]} to {V} rows")

    if dtype == "fp32":
        g = torch.Generator().manual_seed(5)
        tokens = torch.randint(0, V, (3, T), generator=g)
        ours = hf_forward(hf, cfg, tokens)
        ref = torch_gpt.forward({k: v.to(torch.float64) for k, v in ck.items()}, tokens, H)
        diff = float((ours - ref[..., :V]).abs().max())
        check(ours.shape == (3, T, V) and diff <= 1e-5,
              f"logits differ from torch_gpt on the checkpoint by {diff:.3g}")
        back = torch_gpt.forward({k: v.to(torch.float64) for k, v in got.items()}, tokens, H)
        diff2 = float((back - ref[..., :V]).abs().max())
        check(diff2 <= 1e-5, f"torch_gpt on the mapped-back tensors differs by {diff2:.3g}")
        print(f"# logits (3 x {T} x {V}): Hugging Face forward vs torch_gpt on the checkpoint: "
              f"max |diff| {diff:.3g}; torch_gpt on the mapped-back tensors: {diff2:.3g}")

    if "data" in args:
        batches, batch = int(args["batches"]), int(args["batch"])
        with h5py.File(args["data"], "r") as f:
            toks = np.asarray(f["/val/tokens"], dtype=np.int64)
        nseq = (len(toks) - 1) // T
        seqs = torch.from_numpy(np.stack([toks[(s % nseq) * T:(s % nseq) * T + T + 1]
                                          for s in range(batches * batch)]))
        logits = hf_forward({k: v.float() for k, v in hf.items()}, cfg, seqs[:, :T])
        loss = float(F.cross_entropy(logits.reshape(-1, V), seqs[:, 1:].reshape(-1)))
        want_loss = float(args["val_loss"])
        check(abs(loss - want_loss) <= 1e-5 * abs(want_loss),
              f"validation loss {loss:.8f}, gridtrain's {want_loss:.8f}")
        print(f"# validation loss of the export {loss:.8f}, gridtrain's {want_loss:.8f}")


def cmd_same(a, b):
    ta = load_file(os.path.join(a, "model.safetensors"))
    tb = load_file(os.path.join(b, "model.safetensors"))
    check(set(ta) == set(tb), "different tensor names")
    same = sum(1 for n in ta if n in tb and ta[n].shape == tb[n].shape and ta[n].dtype ==
               tb[n].dtype and torch.equal(ta[n], tb[n]))
    check(same == len(ta), f"{len(ta) - same} tensors differ")
    with open(os.path.join(a, "config.json")) as fa, open(os.path.join(b, "config.json")) as fb:
        check(json.load(fa) == json.load(fb), "config.json differs")
    print(f"# {same} of {len(ta)} tensors bit for bit equal")


def run_job(args):
    if len(args) >= 3 and args[0] == "check":
        cmd_check(args[1], args[2], dict(a.split("=", 1) for a in args[3:]))
    elif len(args) == 3 and args[0] == "same":
        cmd_same(args[1], args[2])
    else:
        raise SystemExit(f"check_hf.py: bad job {args}\n{__doc__}")


def main(argv):
    jobs, job = [], []
    for a in argv[1:] + ["--"]:
        if a == "--":
            jobs.append(job)
            job = []
        else:
            job.append(a)
    if not all(jobs):
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    for k, args in enumerate(jobs, 1):
        before = len(failures)
        print(f"# job {k}: {' '.join(args)}")
        try:
            run_job(args)
        except SystemExit:
            raise
        except Exception as e:  # a file that cannot be read is a failed check
            check(False, f"{type(e).__name__}: {e}")
        ok = len(failures) == before
        bad += not ok
        print(f"job {k}: {'ok' if ok else 'FAILED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
