"""PyTorch's side of bench/fashion.sh: mini_train's Fashion-MNIST preset in PyTorch, same recipe.

The model is mini_train's --model mlp (MLP 784-512-256-10 with ReLU, the default) or --model cnn
(conv(1->32, 3x3, pad 1) -> BatchNorm2d -> ReLU -> MaxPool2d(2) -> conv(32->64) -> BatchNorm2d -> ReLU
-> MaxPool2d(2) -> flatten -> Linear(3136, 128) -> ReLU -> Linear(128, 10), on 1x28x28 images); Adam
lr 1e-3 with cosine decay per step, batch 64, inputs standardised with the training split's mean and
standard deviation, 5 epochs, one thread; the test accuracy in eval mode. Reads the IDX files of
Debian's dataset-fashion-mnist with gzip + numpy only. Prints `pytorch fashion_seconds S` and
`pytorch fashion_accuracy A` (test split).
Usage: fashion_torch.py [DATA_DIR] [EPOCHS] [mlp|cnn]
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

    nn = torch.nn
    if len(sys.argv) > 3 and sys.argv[3] == "cnn":
        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        model = nn.Sequential(nn.Unflatten(1, (1, 28, 28)), *block(1, 32), *block(32, 64), nn.Flatten(),
                              nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
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
    model.eval()
    with torch.no_grad():  # in batches of 1000: the CNN's activations for all 10,000 at once take GBs
        correct = sum((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum().item()
                      for i in range(0, len(x_test), 1000))
    accuracy = correct / len(x_test)
    print(f"pytorch fashion_seconds {seconds:.2f}")
    print(f"pytorch fashion_accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
