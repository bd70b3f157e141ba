"""gpt_step_torch.py: the PyTorch (Python) side of bench/gpt.sh, the step of bench/bench_gpt.cpp:
  gpt_step_ms  one training step of the GPT preset (gpt_torch.py's model: vocab 256, context 64,
               dim 128, 4 layers, 4 heads, tied head), batch 32 of random bytes, float32:
               zero_grad, forward, cross-entropy, backward, clip_grad_norm_ to 1.0, AdamW (lr 1e-3,
               betas (0.9, 0.95), weight decay 0.1 on tensors with >= 2 dims only)
timed with bench_torch.py's method (bench/timing.h's, in Python: 1 s repetitions, 5 of them, the
median), single-threaded (MT_BENCH_THREADS: more). Like the C++ sides it checks that the loss
falls, so a broken step cannot pass for a fast one. Run from bench/ (gpt.sh does) with a Python that has torch:
  cd bench && OMP_NUM_THREADS=1 /usr/bin/python3 gpt_step_torch.py
"""
import sys

import torch
import torch.nn.functional as F

from bench_torch import report, time_per_call, totals, threads
from gpt_torch import GPT

VOCAB, CONTEXT, DIM, LAYERS, HEADS, BATCH = 256, 64, 128, 4, 4, 32


def main():
    torch.set_num_threads(threads())
    torch.manual_seed(1)
    model = GPT(VOCAB, CONTEXT, DIM, LAYERS, HEADS)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))
    idx, targets = torch.randint(VOCAB, (BATCH, CONTEXT)), torch.randint(VOCAB, (BATCH, CONTEXT))
    losses = []

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(idx).reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())

    t = time_per_call(step, 1.0, 5)
    if not losses[-1] < losses[0]:
        sys.exit(f"gpt_step_torch.py: the loss did not fall ({losses[0]:g} -> {losses[-1]:g})")
    report("gpt_step_ms", lambda s: s * 1e3, t)
    print(f"pytorch cpu_share {totals['cpu'] / totals['wall']:.3f}")


if __name__ == "__main__":
    main()
