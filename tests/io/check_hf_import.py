"""Checks of tests/io/test_hf_import.sh.

  check_hf_import.py tensors HF_DIR CKPT.h5
      every /model tensor of the checkpoint equals, bit for bit in fp32, the
      Hugging Face tensors it is made of (GPT-2: Conv1D weights transposed;
      Llama: q/k/v and gate/up stacked by rows; Mixtral: each expert's w1, w3 and
      w2 stacked as gridtrain's (E, ...) tensors), and every HF weight is used.
  check_hf_import.py same HF_DIR OUT_DIR
      transformers loads OUT_DIR (an export of the import) and its state_dict
      equals HF_DIR's, bit for bit, in the original dtype.
  check_hf_import.py damage IN.safetensors OUT.safetensors
      OUT is IN with its header cut in the middle of the JSON.
"""
import json
import os
import sys

import h5py
import numpy as np
import torch
import transformers as tf
from safetensors.torch import load_file


def hf_tensors(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(load_file(os.path.join(d, f)))
    return {k: v.float().numpy() for k, v in out.items()}


def expected(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    hf = hf_tensors(d)
    want = {}
    if cfg["model_type"] == "gpt2":
        for k, v in hf.items():
            if ".attn.bias" in k or ".attn.masked_bias" in k:
                continue
            name = k[len("transformer."):] if k.startswith("transformer.") else k
            name = name.replace("wte.weight", "wte").replace("wpe.weight", "wpe")
            for a, b in [("c_attn", "qkv"), ("c_proj", "proj"), ("c_fc", "fc")]:
                name = name.replace("." + a + ".", "." + b + ".")
            if name.endswith(("qkv.weight", "proj.weight", "fc.weight")) and name.startswith("h."):
                v = v.T
            if name == "lm_head.weight" and cfg.get("tie_word_embeddings", True):
                continue
            want[name] = v
        return want
    L = cfg["num_hidden_layers"]
    want["wte"] = hf.pop("model.embed_tokens.weight")
    want["ln_f.weight"] = hf.pop("model.norm.weight")
    if "lm_head.weight" in hf:
        head = hf.pop("lm_head.weight")
        if not cfg.get("tie_word_embeddings", False):
            want["lm_head.weight"] = head
    for l in range(L):
        p = "model.layers.%d." % l
        want["h.%d.ln_1.weight" % l] = hf.pop(p + "input_layernorm.weight")
        want["h.%d.ln_2.weight" % l] = hf.pop(p + "post_attention_layernorm.weight")
        want["h.%d.attn.qkv.weight" % l] = np.concatenate(
            [hf.pop(p + "self_attn.%s_proj.weight" % x) for x in "qkv"])
        want["h.%d.attn.proj.weight" % l] = hf.pop(p + "self_attn.o_proj.weight")
        if cfg["model_type"] == "mixtral":  # the router, and each expert's w1, w3 / w2 stacked
            m, E = p + "block_sparse_moe.", cfg["num_local_experts"]
            want["h.%d.moe.router.weight" % l] = hf.pop(m + "gate.weight")
            want["h.%d.moe.experts.fc.weight" % l] = np.stack([np.concatenate(
                [hf.pop(m + "experts.%d.%s.weight" % (e, w)) for w in ("w1", "w3")])
                for e in range(E)])
            want["h.%d.moe.experts.proj.weight" % l] = np.stack(
                [hf.pop(m + "experts.%d.w2.weight" % e) for e in range(E)])
            continue
        want["h.%d.mlp.fc.weight" % l] = np.concatenate(
            [hf.pop(p + "mlp.%s_proj.weight" % x) for x in ("gate", "up")])
        want["h.%d.mlp.proj.weight" % l] = hf.pop(p + "mlp.down_proj.weight")
    assert not hf, "HF tensors not used: %s" % sorted(hf)
    return want


def main():
    what = sys.argv[1]
    if what == "tensors":
        want = expected(sys.argv[2])
        with h5py.File(sys.argv[3], "r") as f:
            have = set(f["model"].keys())
            assert have == set(want), "names differ: %s" % sorted(have ^ set(want))
            for k, v in want.items():
                got = f["model"][k][...]
                assert got.dtype == np.float32 and got.shape == v.shape, (k, got.shape, v.shape)
                assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(v).view(np.uint32)), k
                assert not f["optim/m"][k][...].any() and not f["optim/v"][k][...].any(), k
        print("ok: %d tensors equal" % len(want))
    elif what == "same":
        a = tf.AutoModelForCausalLM.from_pretrained(sys.argv[2]).state_dict()
        b = tf.AutoModelForCausalLM.from_pretrained(sys.argv[3]).state_dict()
        assert set(a) == set(b), sorted(set(a) ^ set(b))
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        print("ok: %d tensors identical" % len(a))
    elif what == "damage":
        raw = open(sys.argv[2], "rb").read()
        n = int.from_bytes(raw[:8], "little")
        open(sys.argv[3], "wb").write(raw[:8] + raw[8:8 + n // 2] + b"\x00" * (n - n // 2) + raw[8 + n:])
    else:
        sys.exit("unknown check " + what)


main()
