#!/usr/bin/python3
"""Greedy decoding in PyTorch of the weights `gridtrain ckpt convert` exported,
with the independent reference GPT of tests/ref/torch_gpt.py and no cache:
every new token recomputes the whole sequence, so it checks gridtrain's
key/value cache (tests/ref/test_sample.sh).

usage: sample_ref.py WEIGHTS.h5 VOCAB N PROMPT...
       sample_ref.py --logits LOGITS.npy WEIGHTS.h5 PROMPT IDS
The first form: for each PROMPT (UTF-8 text, byte tokens), prints one line:
the ids of up to N new tokens, each the argmax (the lower id on ties) of the
logits of the first VOCAB ids, stopping when the prompt and the new tokens
reach seq_len. On stderr: the smallest gap between the two largest logits met
(how close the run came to a tie).
The second form: the logits `gridtrain sample --logits` wrote for the new
tokens IDS (one string of ids) after PROMPT, against those of one forward
pass over the prompt and IDS; prints the largest difference relative to
max(1, max |logit|) and fails above 1e-4 (fp32 against float64: ~1e-6).
Computes in float64.
Exit status: 0 ok, 1 a problem with the file or a difference, 3 torch or
h5py missing.
"""

import os
import sys

try:
    import h5py
    import numpy as np
    import torch
except Exception:  # ImportError, or a broken install
    print("sample_ref.py: needs python3-torch, python3-h5py, python3-numpy", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402


def greedy(params, heads, seq_len, vocab, prompt, n):
    tokens = list(prompt)
    out, gap = [], float("inf")
    while len(out) < n and len(tokens) < seq_len:
        x = torch.tensor([tokens], dtype=torch.long)
        with torch.no_grad():
            logits = torch_gpt.forward(params, x, heads)[0, -1, :vocab]
        top2 = torch.topk(logits, 2).values
        gap = min(gap, float(top2[0] - top2[1]))
        best = int(torch.argmax(logits))  # the first maximum: the lower id
        out.append(best)
        tokens.append(best)
    return out, gap


def load(weights):
    return torch_gpt.load_exported(weights, np.float64)


def check_logits(path, weights, text, ids):
    shape, params = load(weights)
    got = np.load(path)
    prompt = list(text.encode("utf-8"))
    ids = [int(i) for i in ids.split()]
    if got.shape != (len(ids), shape["vocab"]):
        print(f"{path}: shape {got.shape}, expected {(len(ids), shape['vocab'])}", file=sys.stderr)
        return 1
    seq = torch.tensor([prompt + ids[:-1]], dtype=torch.long)
    with torch.no_grad():
        want = torch_gpt.forward(params, seq, shape["heads"])[0, len(prompt) - 1:].numpy()
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    print(f"{err:.3g}")
    return 0 if err <= 1e-4 else 1


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--logits":
        return check_logits(*sys.argv[2:])
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 1
    weights, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    shape, params = load(weights)
    worst = float("inf")
    for text in sys.argv[4:]:
        ids, gap = greedy(params, shape["heads"], shape["seq_len"], vocab,
                          text.encode("utf-8"), n)
        worst = min(worst, gap)
        print(" ".join(str(i) for i in ids))
    print(f"smallest top-2 logit gap {worst:.3g}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
