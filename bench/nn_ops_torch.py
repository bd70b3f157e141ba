"""nn_ops_torch.py: the PyTorch (Python) side of bench/nn_ops.sh, the ops of bench/bench_nn_ops.cpp at
its shapes, forward + sum(y * w).backward(), float32, one `<op>_us` metric each, timed with
bench_torch.py's method (bench/timing.h's, in Python), single-threaded (MT_BENCH_THREADS: more).
masked_attention is matmul, masked_fill(-inf), softmax, matmul: PyTorch 1.13 has no public fused
scaled_dot_product_attention.
"""
import math

import torch
import torch.nn.functional as F

from bench_torch import micros, report, threads, time_per_call, totals


def time_step(metric, f, *inputs):
    w = torch.randn(f(*inputs).shape)

    def step():
        for x in inputs:
            x.grad = None
        (f(*inputs) * w).sum().backward()
    report(metric, micros, time_per_call(step))


def leaf(*shape):
    return torch.randn(*shape, requires_grad=True)


def main():
    torch.set_num_threads(threads())
    torch.manual_seed(1)
    time_step("conv1d_us", lambda x, w, b: F.conv1d(x, w, b, padding=2), leaf(32, 64, 256), leaf(64, 64, 5), leaf(64))
    time_step("conv_transpose2d_us", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1),
              leaf(16, 32, 16, 16), leaf(32, 16, 4, 4), leaf(16))
    time_step("pad_reflect_us", lambda x: F.pad(x, (2, 2, 2, 2), mode="reflect"), leaf(16, 32, 32, 32))
    time_step("interpolate_nearest_us", lambda x: F.interpolate(x, scale_factor=2), leaf(16, 32, 32, 32))
    time_step("interpolate_bilinear_us", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
              leaf(16, 32, 32, 32))
    time_step("adaptive_max_pool2d_us", lambda x: F.adaptive_max_pool2d(x, 7), leaf(16, 32, 28, 28))
    time_step("group_norm_us", lambda x, w, b: F.group_norm(x, 8, w, b), leaf(16, 64, 28, 28), leaf(64), leaf(64))
    time_step("silu_us", F.silu, leaf(64, 4096))
    time_step("mish_us", F.mish, leaf(64, 4096))
    target = torch.randint(0, 1000, (512,))
    target[::10] = -100
    time_step("cross_entropy_us", lambda x: F.cross_entropy(x, target, label_smoothing=0.1), leaf(512, 1000))
    padded = torch.zeros(32, 1, 1, 64, dtype=torch.bool)
    for b in range(1, 32):
        padded[b, ..., 64 - b:] = True  # row b: b padded keys
    time_step("masked_attention_us", lambda q, k, v: torch.matmul(
        torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(32)).masked_fill(padded, -math.inf), -1), v),
        leaf(32, 4, 64, 32), leaf(32, 4, 64, 32), leaf(32, 4, 64, 32))
    time_step("logsumexp_us", lambda x: torch.logsumexp(x, 1), leaf(512, 1000))
    time_step("cumsum_us", lambda x: torch.cumsum(x, 1), leaf(512, 1000))
    time_step("topk_us", lambda x: torch.topk(x, 10, 1)[0], leaf(512, 1000))
    time_step("sort_us", lambda x: torch.sort(x, 1)[0], leaf(512, 1000))
    print(f"pytorch cpu_share {totals['cpu'] / totals['wall'] if totals['wall'] else 0:.3f}")


if __name__ == "__main__":
    main()
