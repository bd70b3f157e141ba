"""PyTorch's side of bench/fashion.sh: mini_train's Fashion-MNIST preset in PyTorch, same recipe.

MLP 784-512-256-10 with ReLU, Adam lr 1e-3 with cosine decay per step, batch 64, inputs standardised
with the training split's mean and standard deviation, 5 epochs, one thread. Reads the IDX files of
Debian's dataset-fashion-mnist with gzip + numpy only. Prints `pytorch fashion_seconds S` and
`pytorch fashion_accuracy A` (test split).
Usage: fashion_torch.py [DATA_DIR] [EPOCHS]
"""
import gzip
import os
import sys
import time

import numpy as np
import torch


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(folder, prefix):
    def find(name):
        for candidate in (name, name + ".gz"):
            if os.path.exists(os.path.join(folder, candidate)):
                return os.path.join(folder, candidate)
        sys.exit(f"fashion_torch.py: {name} not found in {folder}")
    x = read_idx(find(f"{prefix}-images-idx3-ubyte")).reshape(-1, 784).astype(np.float32) / 255.0
    y = read_idx(find(f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x_train, y_train = load(folder, "train")
    x_test, y_test = load(folder, "t10k")
    mean, std = x_train.mean(), x_train.std()
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std

    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = 64
    steps = (len(x_train) + batch - 1) // batch
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps)
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(x_train))
        for i in range(steps):
            idx = order[i * batch:(i + 1) * batch]
            loss = torch.nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"pytorch fashion_seconds {seconds:.2f}")
    print(f"pytorch fashion_accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
