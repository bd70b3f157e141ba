"""conv_torch.py: the PyTorch (Python) side of bench/conv.sh, the workload of bench/bench_conv.cpp:
  conv3x3_fwd_ms      y = F.conv2d(x, w, b, padding=1)   x: (64, 64, 28, 28)  w: (64, 64, 3, 3)  b: (64)
  conv3x3_fwd_gflops  the same as a rate (3.7 GFLOP per call)
  conv3x3_fwd_bwd_ms  the same plus y.backward(dy): dx, dw and db
  cnn_step_ms         one training step of bench_conv.cpp's CNN (Adam 1e-3, batch 64, random data)
timed with bench_torch.py's method (bench/timing.h's, in Python), single-threaded (MT_BENCH_THREADS:
more). `conv_torch.py cnn` times only the CNN step (bench/steps.sh).
"""
import sys

import torch
import torch.nn.functional as F

from bench_torch import report, time_per_call, totals, threads

N, C, O, H, W = 64, 64, 64, 28, 28
FORWARD_FLOP = 2.0 * N * O * C * 9 * H * W


def main():
    if sys.argv[1:] not in ([], ["cnn"]):
        sys.exit("usage: conv_torch.py [cnn]   (cnn: the CNN step only)")
    torch.set_num_threads(threads())
    if not sys.argv[1:]:
        bench_conv()
    bench_cnn_step()
    print(f"pytorch cpu_share {totals['cpu'] / totals['wall']:.3f}")


def bench_conv():
    torch.manual_seed(1)
    x = torch.randn(N, C, H, W, requires_grad=True)
    w = (torch.randn(O, C, 3, 3) * 0.05).requires_grad_()
    b = torch.randn(O, requires_grad=True)
    dy = torch.randn(N, O, H, W)
    with torch.no_grad():
        t = time_per_call(lambda: F.conv2d(x, w, b, padding=1), 0.5, 5)
    report("conv3x3_fwd_ms", lambda s: s * 1e3, t)
    report("conv3x3_fwd_gflops", lambda s: FORWARD_FLOP / s * 1e-9, t)

    def step():
        x.grad = w.grad = b.grad = None
        F.conv2d(x, w, b, padding=1).backward(dy)

    report("conv3x3_fwd_bwd_ms", lambda s: s * 1e3, time_per_call(step, 0.5, 5))


def bench_cnn_step():
    torch.manual_seed(2)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(3136, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = torch.randn(64, 1, 28, 28), torch.arange(64) % 10

    def cnn_step():
        opt.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        opt.step()

    report("cnn_step_ms", lambda s: s * 1e3, time_per_call(cnn_step, 0.5, 5))


if __name__ == "__main__":
    main()
