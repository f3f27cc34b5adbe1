#!/usr/bin/python3
"""Hugging Face transformers' own results for gridtrain's Llama ops test.

usage: llama_ops_ref.py IN.h5 OUT.h5

IN.h5 (written by tests/ref/test_llama_ops.c):
  /rope/<k>         groups, one per rotary configuration, attributes
                    hs, max_pos (int), theta (double), rope_type
                    (0 default, 1 linear, 2 llama3), factor, low_freq_factor,
                    high_freq_factor (double), original_max_position_embeddings
                    (int)
  /rms/x (N,C), /rms/w (C) float32, attribute eps (double)
  /apply/x (B,T,S,hs) float32: S = H + 2 Hkv head slots (q, k, v), with
                    attributes H, Hkv, pos0 (int) and case (the /rope/<k>
                    whose configuration gives the angles)
  /swiglu/h (N,2F) float32: gate then up

OUT.h5 (float32, what transformers 4.44 computes in fp32 on the CPU):
  /rope/<k>/inv_freq (hs/2)     ROPE_INIT_FUNCTIONS[rope_type](config)
  /rope/<k>/cos, /rope/<k>/sin  (max_pos, hs): LlamaRotaryEmbedding(config)
                                at positions 0..max_pos-1
  /rms/out (N,C)                LlamaRMSNorm(C, eps) with weight w
  /apply/out (B,T,S,hs)         x with its q and k heads replaced by
                                apply_rotary_pos_emb at positions pos0 + t
  /swiglu/out (N,F)             ACT2FN[hidden_act](gate) * up, LlamaMLP's
                                product without its projections

Exit status: 0 ok, 1 failure, 2 usage, 3 torch, h5py or transformers missing.
"""

import sys

PROG = "llama_ops_ref.py"

try:
    import h5py
    import torch
    from transformers import LlamaConfig
    from transformers.activations import ACT2FN
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import (LlamaRMSNorm, LlamaRotaryEmbedding,
                                                          apply_rotary_pos_emb)
except Exception as e:  # ImportError, or a broken install
    print(f"{PROG}: {e}; needs python3-torch, python3-h5py and transformers "
          "(pip install transformers==4.44.2)", file=sys.stderr)
    sys.exit(3)

ROPE_TYPES = ("default", "linear", "llama3")


def llama_config(a):
    """A LlamaConfig whose heads have size hs and whose rope settings are a's."""
    hs, max_pos = int(a["hs"]), int(a["max_pos"])
    rope_type = ROPE_TYPES[int(a["rope_type"])]
    orig = int(a["original_max_position_embeddings"])
    scaling = None
    if rope_type == "linear":
        scaling = {"rope_type": "linear", "factor": float(a["factor"])}
    elif rope_type == "llama3":
        scaling = {"rope_type": "llama3", "factor": float(a["factor"]),
                   "low_freq_factor": float(a["low_freq_factor"]),
                   "high_freq_factor": float(a["high_freq_factor"]),
                   "original_max_position_embeddings": orig}
    return rope_type, LlamaConfig(hidden_size=2 * hs, num_attention_heads=2,
                                  num_key_value_heads=2, rope_theta=float(a["theta"]),
                                  max_position_embeddings=max(max_pos, orig + 1),
                                  rope_scaling=scaling)


def angles(cfg, positions):
    """cos, sin (B, T, hs) of LlamaRotaryEmbedding at positions (B, T)."""
    emb = LlamaRotaryEmbedding(config=cfg)
    x = torch.zeros(1, dtype=torch.float32)
    return emb(x, positions)


def main(argv):
    if len(argv) != 3:
        print(f"usage: {PROG} IN.h5 OUT.h5", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    with h5py.File(argv[1], "r") as fin, h5py.File(argv[2], "w") as fout:
        configs = {}
        for k, g in fin["rope"].items():
            rope_type, cfg = llama_config(g.attrs)
            configs[k] = cfg
            inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu")
            if attention_factor != 1.0:
                raise ValueError(f"rope case {k}: attention factor {attention_factor}")
            max_pos = int(g.attrs["max_pos"])
            cos, sin = angles(cfg, torch.arange(max_pos)[None, :])
            o = fout.create_group(f"rope/{k}")
            o["inv_freq"] = inv_freq.to(torch.float32).numpy()
            o["cos"] = cos[0].numpy()
            o["sin"] = sin[0].numpy()

        x = torch.from_numpy(fin["rms/x"][...])
        norm = LlamaRMSNorm(x.shape[1], eps=float(fin["rms"].attrs["eps"]))
        with torch.no_grad():
            norm.weight.copy_(torch.from_numpy(fin["rms/w"][...]))
            fout["rms/out"] = norm(x).numpy()

        a = fin["apply"].attrs
        H, Hkv, pos0 = int(a["H"]), int(a["Hkv"]), int(a["pos0"])
        x = torch.from_numpy(fin["apply/x"][...])  # (B, T, S, hs)
        B, T = x.shape[0], x.shape[1]
        positions = (pos0 + torch.arange(T))[None, :].expand(B, T)
        cos, sin = angles(configs[str(a["case"])], positions)
        q = x[:, :, :H].transpose(1, 2)          # (B, H, T, hs), transformers' layout
        k = x[:, :, H:H + Hkv].transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = x.clone()
        out[:, :, :H] = q.transpose(1, 2)
        out[:, :, H:H + Hkv] = k.transpose(1, 2)
        fout["apply/out"] = out.numpy()

        h = torch.from_numpy(fin["swiglu/h"][...])
        F = h.shape[1] // 2
        act = ACT2FN[LlamaConfig().hidden_act]
        fout["swiglu/out"] = (act(h[:, :F]) * h[:, F:]).numpy()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Exception as e:  # a one-line message for the C test's log
        print(f"{PROG}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
