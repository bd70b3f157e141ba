"""bench_torch.py: the PyTorch (Python) side of the minitrain-vs-PyTorch comparison.

The same three workloads as bench/bench_core.cpp, timed the same way as bench/timing.h (warm-up,
repetitions of a timed loop, median; wall clock and the thread's CPU time), printing
`pytorch <metric> <value>` and `pytorch <metric>:cpu <value>` lines for bench/run.sh:
  tiny_add_us      a + b on two 16-float tensors, no grad
  gemm1024_gflops  torch.matmul of two 1024x1024 float32 matrices
  seed_*_us        forward + backward of ((x @ w.T + b) - y).pow(2).mean(), x: (32, 10)  w: (1, 10)
                   b: (1)  y: (32, 1), with F.linear and with matmul + add
The figures include the Python interpreter's share of each call: that is what a PyTorch user pays.
Single-threaded (torch.set_num_threads(1), or MT_BENCH_THREADS' count; run.sh also sets
OMP_NUM_THREADS=1). Run with a Python that has torch, e.g. Debian's /usr/bin/python3 (python3-torch).
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

WARMUP_SECONDS = 0.2
totals = {"wall": 0.0, "cpu": 0.0}  # over every timed loop, for cpu_share


def time_per_call(fn, rep_seconds=0.25, reps=7):
    """Wall and CPU seconds per call, like bench/timing.h: dict with median, min, max (wall),
    cpu (median CPU time of this thread), iters, reps."""
    clock = time.perf_counter  # monotonic, like std::chrono::steady_clock
    warm = 0
    w0 = clock()
    while warm < 3 or clock() - w0 < WARMUP_SECONDS:
        fn()
        warm += 1
    estimate = (clock() - w0) / warm
    iters = max(1, int(rep_seconds / estimate))
    wall, cpu = [], []
    for _ in range(reps):
        c0 = time.thread_time()  # CLOCK_THREAD_CPUTIME_ID
        t0 = clock()
        for _ in range(iters):
            fn()
        w, c = clock() - t0, time.thread_time() - c0
        wall.append(w / iters)
        cpu.append(c / iters)
        totals["wall"] += w
        totals["cpu"] += c
    wall.sort()
    cpu.sort()
    return {"median": wall[len(wall) // 2], "min": wall[0], "max": wall[-1], "cpu": cpu[len(cpu) // 2],
            "iters": iters, "reps": reps}


def threads():
    """The count for torch.set_num_threads: MT_BENCH_THREADS (bench/threads.sh runs 1 and 2), else 1."""
    return max(1, int(os.environ.get("MT_BENCH_THREADS", "1")))


def report(metric, value, t):
    """`pytorch <metric> <value>` (wall clock) and `pytorch <metric>:cpu <value>` on stdout;
    value turns seconds per call into the metric. The spread goes to stderr."""
    print(f"pytorch {metric} {value(t['median']):.4g}\npytorch {metric}:cpu {value(t['cpu']):.4g}", flush=True)
    # One write() per line: run.sh appends stdout and stderr to the same log.
    sys.stderr.write(f"# {'pytorch':<9} {metric:<16} {value(t['median']):9.4g} (cpu {value(t['cpu']):9.4g})   "
                     f"wall per call: median {t['median'] * 1e6:.4g} us, min {t['min'] * 1e6:.4g}, "
                     f"max {t['max'] * 1e6:.4g}; {t['reps']} reps x {t['iters']}\n")
    sys.stderr.flush()


def micros(seconds):
    return seconds * 1e6


def bench_tiny_add():
    a, b = torch.randn(16), torch.randn(16)  # no requires_grad
    report("tiny_add_us", micros, time_per_call(lambda: a + b))


def bench_gemm():
    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    t = time_per_call(lambda: torch.matmul(a, b), 1.0, 5)
    report("gemm1024_gflops", lambda seconds: 2.0 * n**3 / seconds * 1e-9, t)


def bench_seed():
    x = torch.randn(32, 10)  # x: (B=32, in=10)
    y = torch.randn(32, 1)  # y: (B, out=1)
    w = torch.randn(1, 10, requires_grad=True)  # w: (out, in)
    b = torch.zeros(1, requires_grad=True)  # b: (out)

    def step(forward):
        def run():
            w.grad = None
            b.grad = None
            loss = (forward() - y).pow(2).mean()
            loss.backward()
        return run

    report("seed_linear_us", micros, time_per_call(step(lambda: F.linear(x, w, b))))
    report("seed_matmul_us", micros, time_per_call(step(lambda: torch.matmul(x, w.t()) + b)))


def bench_train_steps():
    """Whole training steps, as bench_core's d.: zero_grad, forward, loss, backward, SGD update."""
    torch.manual_seed(4)

    def step(model, opt, loss_fn, x, y):
        def run():
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        return run

    x, y = torch.randn(32, 10), torch.randn(32, 1)  # x: (32, 10)  y: (32, 1)
    model = torch.nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    report("seed_step_us", micros, time_per_call(step(model, opt, F.mse_loss, x, y)))

    x, y = torch.randn(128, 784), torch.arange(128) % 10  # x: (128, 784)  labels: (128) int64
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    report("mlp_step_ms", lambda s: s * 1e3, time_per_call(step(model, opt, F.cross_entropy, x, y), 0.5, 7))


def main():
    torch.set_num_threads(threads())
    torch.manual_seed(0)
    print(f"# pytorch {torch.__version__} (Python {sys.version.split()[0]}), "
          f"{torch.get_num_threads()} thread(s)", file=sys.stderr)
    bench_tiny_add()
    bench_gemm()
    bench_seed()
    bench_train_steps()
    print(f"pytorch cpu_share {totals['cpu'] / totals['wall']:.3f}")


if __name__ == "__main__":
    main()
