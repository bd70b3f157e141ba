#!/usr/bin/env python3
"""The GPT preset of `mini_train --model gpt`, trained in PyTorch with the same recipe on the same
corpus, for comparing test losses (bench/README.md, "GPT test loss").

Same as apps/mini_train/model_gpt.h and nn/transformer.h: byte vocabulary (256), context 64,
dim 128, 4 pre-LayerNorm blocks with 4 causal heads (fused qkv projection with bias, exact GELU,
MLP 4*dim), token embedding tied to the output head, GPT-2 initialisation (N(0, 0.02), residual
projections N(0, 0.02/sqrt(2*layers)), zero biases); AdamW lr 1e-3, betas (0.9, 0.95), weight
decay 0.1 on tensors with >= 2 dims only, 100 linear warm-up steps then cosine to lr/10 at the last
step, gradients clipped to global norm 1.0, batch 32. Data: the corpus's regular files (not
symlinks, not *.dat) concatenated in name order; the last 10 % (at least one window) validates.
Each epoch draws the training windows (every start position) in a seeded random order, as
minitrain's shuffling sampler does; the random streams differ from minitrain's.

Prints `Test loss: X nats per byte (Y bits per byte)` over the non-overlapping validation windows.
  OMP_NUM_THREADS=1 /usr/bin/python3 bench/gpt_torch.py --steps 1000 --seed 0
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_corpus(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if not n.endswith(".dat") and os.path.isfile(os.path.join(path, n))
                       and not os.path.islink(os.path.join(path, n)))
        return b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    return open(path, "rb").read()


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        y = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, layers, heads):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                residual = name.endswith("proj.weight") or name.endswith("fc2.weight")
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if residual else 0.02)

    def forward(self, idx):
        h = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))
        return self.ln_f(self.blocks(h)) @ self.tok_emb.weight.t()  # tied head


def lr_factor(t, total, warmup=100, final=0.1):
    if t < warmup:
        return (t + 1) / warmup
    progress = min(1.0, (t - warmup) / max(total - warmup, 1))
    return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * progress))


def windows(data, starts, context):
    rows = torch.stack([data[s:s + context + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    raw = torch.tensor(list(read_corpus(a.text)), dtype=torch.long)
    n, window = len(raw), a.context + 1
    n_val = max((n + 9) // 10, window)
    train, val = raw[:n - n_val], raw[n - n_val:]

    model = GPT(256, a.context, a.dim, a.layers, a.heads)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: lr_factor(t, a.steps))

    starts_per_epoch = len(train) - window + 1
    order, used = torch.randperm(starts_per_epoch), 0
    start = time.time()
    for step in range(a.steps):
        if used + a.batch_size > starts_per_epoch:  # a new epoch: a new order (the last short batch dropped)
            order, used = torch.randperm(starts_per_epoch), 0
        x, y = windows(train, order[used:used + a.batch_size], a.context)
        used += a.batch_size
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if (step + 1) % 100 == 0:
            print(f"step {step + 1}, loss {loss.item():.4f}, {time.time() - start:.1f} s", flush=True)

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        val_starts = torch.arange(0, len(val) - window + 1, a.context)
        for chunk in val_starts.split(64):
            x, y = windows(val, chunk, a.context)
            total += F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1), reduction="sum").item()
            count += y.numel()
    nats = total / count
    print(f"Test loss: {nats:.6f} nats per byte ({nats / math.log(2):.4f} bits per byte)")


if __name__ == "__main__":
    main()
