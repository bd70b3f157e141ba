#!/usr/bin/env python3
"""PyTorch's side of bench/rss.sh's seed job: the loop mini_train runs by default, in PyTorch.

Linear(10, 1) on 1000x10 random inputs with noisy linear targets, batch 32 shuffled, SGD lr 0.01,
MSE loss, 5 epochs, one thread; prints `Epoch [e/5], Loss: x` and saves the weights, as mini_train
does. Measured for its peak resident memory (/usr/bin/time -v), not its time.
  OMP_NUM_THREADS=1 /usr/bin/python3 bench/seed_torch.py OUT.pt
"""
import sys

import torch


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "seed.pt"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    w_true = torch.randn(1, 10)
    x = torch.randn(1000, 10)
    y = x @ w_true.T + 0.5 + 0.1 * torch.randn(1000, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32, shuffle=True)
    model = torch.nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(5):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"Epoch [{epoch + 1}/5], Loss: {loss.item():.4f}")
    torch.save(model.state_dict(), out)


if __name__ == "__main__":
    main()
