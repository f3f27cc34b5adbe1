#!/usr/bin/python3
"""Load the weights `gridtrain ckpt convert` exported and evaluate them with an
independent PyTorch GPT (tests/ref/torch_gpt.py), the way a Python user would.

usage: check_weights.py WEIGHTS.h5 DATA.h5 BATCHES BATCH
Prints the mean validation loss over the first BATCHES*BATCH sequences of
DATA.h5:/val/tokens in order (what gridtrain's evaluation reads), one number.
Exit status: 0 ok, 1 a problem with the file, 3 torch or h5py missing.
"""

import os
import sys

try:
    import h5py
    import numpy as np
    import torch
except Exception:  # ImportError, or a broken install
    print("check_weights.py: needs python3-torch, python3-h5py, python3-numpy",
          file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import torch_gpt  # noqa: E402


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 1
    weights, data, batches, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    try:
        shape, params = torch_gpt.load_exported(weights, np.float32)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    expected = dict(torch_gpt.param_shapes(**shape))
    for name, t in params.items():
        if tuple(t.shape) != tuple(expected[name]):
            print(f"{name}: shape {tuple(t.shape)}, expected {expected[name]}", file=sys.stderr)
            return 1
    T = shape["seq_len"]
    with h5py.File(data, "r") as f:
        tokens = np.asarray(f["/val/tokens"], dtype=np.int64)
    nseq = (len(tokens) - 1) // T
    seqs = np.stack([tokens[(g % nseq) * T:(g % nseq) * T + T + 1]
                     for g in range(batches * batch)])
    x = torch.from_numpy(seqs[:, :T])
    y = torch.from_numpy(seqs[:, 1:])
    with torch.no_grad():
        loss = torch_gpt.loss_fn(params, x, y, shape["heads"])
    print(f"{loss.item():.8f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
