"""PyTorch's side of bench/bench_gpu.cpp: the same workloads on the same GPU, printed as the same
"key value" lines, so that scripts/gpu-check.sh can set them side by side. Timing as bench_gpu.cpp:
warm up, then 5 loops with torch.cuda.synchronize() at each end; the median loop.
Usage: python3 bench/gpu_torch.py   (exits 77 without a GPU)."""
import os
import sys
import tempfile
import time

import torch


def time_per_call(fn, iters, reps=5, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    loops = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        loops.append((time.perf_counter() - t0) / iters)
    return sorted(loops)[len(loops) // 2]


def report(key, value):
    print(f"{key} {value:.4g}", flush=True)


def step_time(model, x, y, iters):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mse = torch.nn.MSELoss()

    def step():
        opt.zero_grad()
        mse(model(x), y).backward()
        opt.step()

    return time_per_call(step, iters)


def main():
    if not (hasattr(torch, "cuda") and torch.cuda.is_available()):
        print("SKIPPED: no CUDA GPU is visible to PyTorch")
        return 77
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    n = 4096
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        s = time_per_call(lambda: torch.matmul(a, b), 20)
        report("gemm_tf32_tflops" if tf32 else "gemm_fp32_tflops", 2 * n**3 / s / 1e12)
    torch.backends.cuda.matmul.allow_tf32 = False
    a16, b16 = a.bfloat16(), b.bfloat16()
    bf16 = 2 * n**3 / time_per_call(lambda: torch.matmul(a16, b16), 20) / 1e12
    report("gemm_bf16_tflops", bf16)
    # The measured peak minitrain's bf16 GEMM is judged against: PyTorch's best of 4096^3 and
    # 8192^3 (larger tiles keep more of the GPU busy).
    big = 8192
    a16, b16 = torch.randn(big, big, device=dev, dtype=torch.bfloat16), torch.randn(big, big, device=dev, dtype=torch.bfloat16)
    report("gemm_bf16_peak_tflops", max(bf16, 2 * big**3 / time_per_call(lambda: torch.matmul(a16, b16), 5) / 1e12))
    del a16, b16

    m = 64 << 20
    x, y = torch.randn(m, device=dev), torch.randn(m, device=dev)
    report("add_gbps", 3 * m * 4 / time_per_call(lambda: torch.add(x, y), 20) / 1e9)
    c = torch.empty_like(x)
    report("memcpy_gbps", 2 * m * 4 / time_per_call(lambda: c.copy_(x), 20) / 1e9)
    del x, y, c

    # Causal attention, B 4, H 12, context 1024, head size 64: forward and backward.
    q, k, v = (torch.randn(4, 12, 1024, 64, device=dev, requires_grad=True) for _ in range(3))
    dout = torch.randn(4, 12, 1024, 64, device=dev)
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)  # PyTorch >= 2.0

    def attention():
        if sdpa is not None:
            out = sdpa(q, k, v, is_causal=True)
        else:  # the unfused formula
            s = (q @ k.transpose(-2, -1)) / 8.0
            s = s.masked_fill(torch.ones(1024, 1024, device=dev, dtype=torch.bool).triu(1), float("-inf"))
            out = torch.softmax(s, dim=-1) @ v
        torch.autograd.grad(out, (q, k, v), dout)

    report("attention_ms", 1e3 * time_per_call(attention, 10))
    del q, k, v, dout

    layers = []
    for i in range(4):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(4096, 4096))
    mlp = torch.nn.Sequential(*layers).to(dev)
    bx, by = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
    report("mlp_step_ms", 1e3 * step_time(mlp, bx, by, 10))
    seed = torch.nn.Linear(10, 1).to(dev)
    report("seed_step_us", 1e6 * step_time(seed, torch.randn(32, 10, device=dev), torch.randn(32, 1, device=dev), 2000))

    import torch.distributed as dist
    store_file = tempfile.NamedTemporaryFile(delete=False).name
    dist.init_process_group("nccl", init_method=f"file://{store_file}", rank=0, world_size=1)
    small = torch.ones(1, device=dev)
    report("nccl_small_us", 1e6 * time_per_call(lambda: dist.all_reduce(small), 1000))
    large = torch.ones(64 << 20, device=dev)
    report("nccl_large_gbps", large.numel() * 4 / time_per_call(lambda: dist.all_reduce(large), 20) / 1e9)
    dist.destroy_process_group()
    os.unlink(store_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
