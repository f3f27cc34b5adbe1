"""The Hugging Face side of tests/ref/test_hf_parity: hf_parity_ref.py OUT KIND...

For each KIND (tests/io/make_hf.py's: gpt2, gpt2-untied, llama, llama-tied, mixtral) it
saves the random model to OUT/KIND (safetensors, as `gridtrain ckpt import`
and `[checkpoint] init` read it) and computes with transformers, in float64
on one fixed batch, what gridtrain must reproduce:
  OUT/KIND/ref.h5  /tokens, /targets (B, T) int32
                   /loss              mean cross-entropy over the B*T targets
                   /logits (T, V)     of sequence 0 (decoding compares them)
                   /grads/NAME        d loss / d parameter under gridtrain's name
                                      and layout (docs/models.md): GPT-2's
                                      Conv1D weights transposed, Llama's q, k, v
                                      and gate, up stacked by rows, Mixtral's
                                      experts stacked (E, 2F, C) and (E, C, F).
The names are mapped here, independently of the C importer.
"""
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io"))
import make_hf  # noqa: E402

B, T = 2, 24


def gpt2_grads(model):
    t = model.transformer
    g = {"wte": t.wte.weight.grad, "wpe": t.wpe.weight.grad,
         "ln_f.weight": t.ln_f.weight.grad, "ln_f.bias": t.ln_f.bias.grad}
    if not model.config.tie_word_embeddings:
        g["lm_head.weight"] = model.lm_head.weight.grad
    for i, blk in enumerate(t.h):
        pre = "h.%d." % i
        g[pre + "ln_1.weight"] = blk.ln_1.weight.grad
        g[pre + "ln_1.bias"] = blk.ln_1.bias.grad
        g[pre + "ln_2.weight"] = blk.ln_2.weight.grad
        g[pre + "ln_2.bias"] = blk.ln_2.bias.grad
        for ours, theirs in (("attn.qkv", blk.attn.c_attn), ("attn.proj", blk.attn.c_proj),
                             ("mlp.fc", blk.mlp.c_fc), ("mlp.proj", blk.mlp.c_proj)):
            g[pre + ours + ".weight"] = theirs.weight.grad.t()  # Conv1D is (in, out)
            g[pre + ours + ".bias"] = theirs.bias.grad
    return g


def llama_grads(model):
    m = model.model
    g = {"wte": m.embed_tokens.weight.grad, "ln_f.weight": m.norm.weight.grad}
    if not model.config.tie_word_embeddings:
        g["lm_head.weight"] = model.lm_head.weight.grad
    for i, blk in enumerate(m.layers):
        pre = "h.%d." % i
        a, f = blk.self_attn, blk.mlp
        g[pre + "ln_1.weight"] = blk.input_layernorm.weight.grad
        g[pre + "ln_2.weight"] = blk.post_attention_layernorm.weight.grad
        g[pre + "attn.qkv.weight"] = torch.cat(
            [a.q_proj.weight.grad, a.k_proj.weight.grad, a.v_proj.weight.grad], 0)
        g[pre + "attn.proj.weight"] = a.o_proj.weight.grad
        g[pre + "mlp.fc.weight"] = torch.cat([f.gate_proj.weight.grad, f.up_proj.weight.grad], 0)
        g[pre + "mlp.proj.weight"] = f.down_proj.weight.grad
    return g


def mixtral_grads(model):
    """Mixtral's: a llama's attention and norms, the router, and the experts stacked as
    gridtrain's (E, 2F, C) gate-then-up rows and (E, C, F) down; an expert no token chose
    has no gradient in torch (zeros here)."""
    m = model.model
    g = {"wte": m.embed_tokens.weight.grad, "ln_f.weight": m.norm.weight.grad,
         "lm_head.weight": model.lm_head.weight.grad}

    def grad(p):
        return p.grad if p.grad is not None else torch.zeros_like(p)

    for i, blk in enumerate(m.layers):
        pre = "h.%d." % i
        a, moe = blk.self_attn, blk.block_sparse_moe
        g[pre + "ln_1.weight"] = blk.input_layernorm.weight.grad
        g[pre + "ln_2.weight"] = blk.post_attention_layernorm.weight.grad
        g[pre + "attn.qkv.weight"] = torch.cat(
            [a.q_proj.weight.grad, a.k_proj.weight.grad, a.v_proj.weight.grad], 0)
        g[pre + "attn.proj.weight"] = a.o_proj.weight.grad
        g[pre + "moe.router.weight"] = moe.gate.weight.grad
        g[pre + "moe.experts.fc.weight"] = torch.stack(
            [torch.cat([grad(e.w1.weight), grad(e.w3.weight)], 0) for e in moe.experts])
        g[pre + "moe.experts.proj.weight"] = torch.stack([grad(e.w2.weight) for e in moe.experts])
    return g


def main():
    out = sys.argv[1]
    for kind in sys.argv[2:]:
        d = os.path.join(out, kind)
        model = make_hf.make(kind, d).double().eval()  # eval: no dropout (GPT-2 has some)
        model.config.use_cache = False
        vocab = model.config.vocab_size
        rng = np.random.default_rng(99)
        ids = rng.integers(0, vocab, size=(B, T + 1)).astype(np.int32)
        tokens, targets = ids[:, :T], ids[:, 1:]
        logits = model(torch.from_numpy(tokens).long()).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, vocab),
                                                 torch.from_numpy(targets).long().reshape(-1))
        loss.backward()
        grads = (gpt2_grads(model) if kind.startswith("gpt2")
                 else mixtral_grads(model) if kind == "mixtral" else llama_grads(model))
        with h5py.File(os.path.join(d, "ref.h5"), "w") as f:
            f["tokens"] = tokens
            f["targets"] = targets
            f["loss"] = loss.item()
            f["logits"] = logits[0].detach().numpy()
            for name, v in grads.items():
                f["grads/" + name] = v.detach().numpy()


if __name__ == "__main__":
    main()
