"""ddp_torch.py: PyTorch DistributedDataParallel with Gloo, world size 2 on this machine, timed the way
bench/bench_allreduce_mpi.cpp times minitrain's DDP, for bench/ddp.sh.

Two workloads, one training step = zero_grad, forward, loss, backward (all-reduce inside), SGD step:
  ddp_seed_step_us   Linear(10, 1), batch 32 per rank, MSE, SGD lr 0.01 (the seed job)
  ddp_mlp_step_us    Linear(784, 256) ReLU Linear(256, 10), batch 128 per rank, cross-entropy,
                     SGD lr 0.01 momentum 0.9
DDP with PyTorch's defaults (25 MiB buckets, 1 MiB first bucket, gradient_as_bucket_view off).
Each rank is one process with one thread (torch.set_num_threads(1)), like minitrain's ranks. Both
ranks run the same number of steps (rank 0 decides from a warm-up and broadcasts it), repeated 7
times; rank 0 prints the median per step as `pytorch <metric> <value>` and the spread on stderr.
Run with a Python that has torch, e.g. Debian's /usr/bin/python3 (python3-torch).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

REPS = 7
REP_SECONDS = 0.4


def workload(name, rank):
    g = torch.Generator().manual_seed(1 + rank)
    if name == "seed":
        model = nn.Linear(10, 1)
        x, y = torch.randn(32, 10, generator=g), torch.randn(32, 1, generator=g)
        return model, lambda out: F.mse_loss(out, y), x, 0.0
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    x, y = torch.randn(128, 784, generator=g), torch.randint(0, 10, (128,), generator=g)
    return model, lambda out: F.cross_entropy(out, y), x, 0.9


def time_steps(name, rank):
    model, loss_fn, x, momentum = workload(name, rank)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=momentum)

    def steps(n):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            loss_fn(ddp(x)).backward()
            opt.step()
        return (time.perf_counter() - t0) / n

    warm = steps(20)
    n = torch.tensor([max(1, int(REP_SECONDS / warm))])
    dist.broadcast(n, 0)  # both ranks must run the same number of steps
    per_step = sorted(steps(int(n)) for _ in range(REPS))
    return per_step, int(n)


def run(rank, port):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    for name, metric, scale in (("seed", "ddp_seed_step_us", 1e6), ("mlp", "ddp_mlp_step_us", 1e6)):
        per_step, n = time_steps(name, rank)
        if rank == 0:
            median = per_step[REPS // 2]
            print(f"pytorch {metric} {median * scale:.4g}", flush=True)
            sys.stderr.write(f"# pytorch {metric}: median {median * scale:.4g}, min {per_step[0] * scale:.4g}, "
                             f"max {per_step[-1] * scale:.4g}; {REPS} reps x {n} steps, 2 ranks, gloo\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free_port = s.getsockname()[1]
    mp.spawn(run, args=(free_port,), nprocs=2)
