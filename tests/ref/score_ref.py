#!/usr/bin/python3
"""The mean cross-entropy `gridtrain score` must print, computed
independently: the weights read with h5py straight from the checkpoint's
/model group, the reference GPT of tests/ref/torch_gpt.py in float64, and
the windows of the files as `gridtrain score --help` defines them
(tests/cli/test_score.sh).

usage: score_ref.py CHECKPOINT.h5 FILE...
Each FILE is byte-tokenized text (the byte tokenizer of the test dataset).
Each file is cut into windows of seq_len predictions that do not overlap:
inputs ids[t:t+L], targets ids[t+1:t+L+1], L = min(seq_len, n - 1 - t);
the losses of all windows of all files are summed and divided by their
count. Prints "TOKENS LOSS".
Exit status: 0 ok, 1 a problem with a file, 3 torch or h5py missing.
"""

import os
import sys

try:
    import h5py
    import numpy as np
    import torch
    import torch.nn.functional as F
except Exception:  # ImportError, or a broken install
    print("score_ref.py: needs python3-torch, python3-h5py, python3-numpy", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 1
    with h5py.File(argv[1], "r") as f:
        # model_shape: layers, heads, dim, seq_len, vocab (docs/checkpoints.md)
        shape = dict(zip(("layers", "heads", "dim", "seq_len", "vocab"),
                         (int(v) for v in f.attrs["model_shape"])))
        params = {n: torch.from_numpy(np.asarray(f["model"][n], dtype=np.float64))
                  for n in f["model"].keys()}
    expected = dict(torch_gpt.param_shapes(**shape))
    if set(params) != set(expected):
        print(f"score_ref.py: {argv[1]}: not the tensors of the model", file=sys.stderr)
        return 1
    T, heads = shape["seq_len"], shape["heads"]
    total, count = 0.0, 0
    for path in argv[2:]:
        with open(path, "rb") as f:
            ids = list(f.read())
        for t in range(0, max(len(ids) - 1, 0), T):
            L = min(T, len(ids) - 1 - t)
            x = torch.tensor([ids[t:t + L]], dtype=torch.long)
            y = torch.tensor(ids[t + 1:t + L + 1], dtype=torch.long)
            with torch.no_grad():
                logits = torch_gpt.forward(params, x, heads)[0]
            total += float(F.cross_entropy(logits, y, reduction="sum"))
            count += L
    print(count, repr(total / count))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
