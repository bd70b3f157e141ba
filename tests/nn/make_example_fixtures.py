#!/usr/bin/env python3
"""Writes PyTorch's run of the model of examples/padded_sequences.cpp (examples/padded_sequences.h):
three SGD steps from fixed weights on fixed padded batches, in float64, which
tests/nn/test_torch_examples.cpp repeats in minitrain and compares to 1e-9. The model: Embedding with
padding_idx 0, GPT-2-layout self-attention (one qkv projection, 4 heads) with a key padding mask, a
residual add, a mean over the real positions, a Linear head; the loss: cross-entropy with
ignore_index -100 and label smoothing 0.1.

Usage: /usr/bin/python3 tests/nn/make_example_fixtures.py [OUT_DIR]   (default: tests/nn/fixtures)

One file, examples.safetensors: the starting parameters under minitrain's names ("embed.weight",
"attn.qkv.weight", ...) prefixed "init.", each step's batch ("step<i>.tokens", ".padding", ".labels",
int64) and loss ("step<i>.loss"), and the parameters after the last step ("final.<name>").
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_cnn_fixtures import save  # noqa: E402

f64 = torch.float64
TOKENS, DIM, HEADS, CLASSES, MAX_LEN, BATCH, STEPS, LR = 4, 32, 4, 3, 16, 12, 3, 0.5


def forward(p, tokens, padding):
    e = F.embedding(tokens, p["embed.weight"], padding_idx=0)
    b, t, _ = e.shape
    q, k, v = F.linear(e, p["attn.qkv.weight"], p["attn.qkv.bias"]).split(DIM, -1)
    heads = lambda x: x.view(b, t, HEADS, DIM // HEADS).transpose(1, 2)  # noqa: E731
    s = heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(DIM // HEADS)
    s = s.masked_fill(padding.bool()[:, None, None, :], -math.inf)
    a = (torch.softmax(s, -1) @ heads(v)).transpose(1, 2).reshape(b, t, DIM)
    h = e + F.linear(a, p["attn.proj.weight"], p["attn.proj.bias"])
    real = (1 - padding.to(f64)).unsqueeze(2)
    return F.linear((h * real).sum(1) / real.sum(1), p["head.weight"], p["head.bias"])


def batch():
    lengths = torch.randint(1, MAX_LEN + 1, (BATCH,))
    positions = torch.arange(MAX_LEN)[None, :]
    padding = (positions >= lengths[:, None]).to(torch.int64)
    tokens = torch.randint(1, TOKENS, (BATCH, MAX_LEN)) * (1 - padding)
    labels = torch.randint(0, CLASSES, (BATCH,))
    labels[::4] = -100
    return tokens, padding, labels


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(40)
    p = {"embed.weight": torch.randn(TOKENS, DIM, dtype=f64), "attn.qkv.weight": torch.randn(3 * DIM, DIM, dtype=f64) / 6,
         "attn.qkv.bias": torch.randn(3 * DIM, dtype=f64) / 6, "attn.proj.weight": torch.randn(DIM, DIM, dtype=f64) / 6,
         "attn.proj.bias": torch.randn(DIM, dtype=f64) / 6, "head.weight": torch.randn(CLASSES, DIM, dtype=f64) / 6,
         "head.bias": torch.randn(CLASSES, dtype=f64) / 6}
    p["embed.weight"][0] = 0  # the padding row, as nn.Embedding(padding_idx=0) starts it
    out = {f"init.{k}": v.clone() for k, v in p.items()}
    for v in p.values():
        v.requires_grad_()
    for step in range(STEPS):
        tokens, padding, labels = batch()
        loss = F.cross_entropy(forward(p, tokens, padding), labels, ignore_index=-100, label_smoothing=0.1)
        for v in p.values():
            v.grad = None
        loss.backward()
        with torch.no_grad():
            for v in p.values():
                v -= LR * v.grad
        out.update({f"step{step}.tokens": tokens, f"step{step}.padding": padding, f"step{step}.labels": labels,
                    f"step{step}.loss": loss.detach()})
    out.update({f"final.{k}": v.detach() for k, v in p.items()})
    save(os.path.join(out_dir, "examples.safetensors"), out, keep_float64=True)


if __name__ == "__main__":
    main()
