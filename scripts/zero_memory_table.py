#!/usr/bin/env python3
"""docs/ddp.md's ZeRO memory table: what each rank holds at its peak under each ZeRO stage and world
size, measured by mini_train's --ddp-stats (the CPU allocator's counts at the peak, by kind: Note
[Memory kinds] in tensor/memory.h), with the bytes each rank sends per step beside it.

    scripts/zero_memory_table.py [--mini-train build/mini_train] [--stages 0,1,2] [--worlds 1,2,4]

Runs, for each world W and stage S (at W = 1 only stage 0: one process has no ranks to shard over),

    mini_train --model gpt --layers 8 --dim 512 --heads 8 --context 64 --optimizer adamw
               --nproc W --backend mpi --threads 1 --max-steps 2 --batch-size 2 --ddp-stats --zero S

and prints two markdown tables: memory (the rank with the largest peak; MiB) and communication per
step. A stage is one more entry in --stages. Python 3 standard library only.

Communication (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020, section 7): for P parameters of 4 bytes, a ring all-reduce sends (and receives)
2(N-1)/N x 4P bytes per rank; ZeRO-1 and -2 replace it by a reduce-scatter of the gradients and an
all-gather of the updated parameters, (N-1)/N x 4P each: the same bytes; ZeRO-3 all-gathers the
parameters twice (before forward and again before backward) and reduce-scatters the gradients once:
3(N-1)/N x 4P, 1.5 times as much.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

MIB = 1 << 20
MODEL = ["--model", "gpt", "--layers", "8", "--dim", "512", "--heads", "8", "--context", "64",
         "--optimizer", "adamw", "--backend", "mpi", "--threads", "1", "--max-steps", "2", "--batch-size", "2",
         "--ddp-stats"]
COMM_FACTOR = {0: 2, 1: 2, 2: 2, 3: 3}  # multiples of (N-1)/N x 4P bytes sent per rank and step
PEAK = re.compile(r"^memory: peak ([0-9.]+) MiB of CPU tensors on rank (\d+): parameters ([0-9.]+), gradients "
                  r"([0-9.]+), optimizer state ([0-9.]+), activations and the rest ([0-9.]+) MiB")
PARAMETERS = re.compile(r"^  model .*\((\d+) parameters\)")


def run(mini_train, world, stage, work):
    """Returns (parameter count, [(peak, params, grads, optimizer, rest) per rank]) of one run."""
    cmd = [mini_train, *MODEL, "--nproc", str(world), "--save", os.path.join(work, "m.safetensors")]
    if stage:
        cmd += ["--zero", str(stage)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"zero_memory_table.py: {' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    ranks, count = {}, None
    for line in out.stdout.splitlines():
        if m := PEAK.match(line):
            ranks[int(m.group(2))] = tuple(float(m.group(i)) for i in (1, 3, 4, 5, 6))
        elif m := PARAMETERS.match(line):
            count = int(m.group(1))
    if len(ranks) != world or count is None:
        sys.exit(f"zero_memory_table.py: no memory line for every rank in the output of {' '.join(cmd)}:\n{out.stdout}")
    return count, [ranks[r] for r in range(world)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mini-train", default=os.path.join(os.path.dirname(__file__), "..", "build", "mini_train"))
    parser.add_argument("--stages", default="0,1,2", help="comma-separated ZeRO stages (0: plain DDP)")
    parser.add_argument("--worlds", default="1,2,4", help="comma-separated process counts")
    args = parser.parse_args()
    stages = [int(s) for s in args.stages.split(",")]
    worlds = [int(w) for w in args.worlds.split(",")]
    rows, count = [], None
    with tempfile.TemporaryDirectory() as work:
        for world in worlds:
            plain = None
            for stage in stages if world > 1 else [0]:
                print(f"zero_memory_table.py: world {world}, stage {stage}", file=sys.stderr)
                count, ranks = run(args.mini_train, world, stage, work)
                peak, params, grads, optimizer, rest = max(ranks)  # the rank with the largest peak
                spread = max(r[0] for r in ranks) - min(r[0] for r in ranks)
                plain = peak if stage == 0 else plain
                rows.append((world, stage, params, grads, optimizer, rest, peak, spread, plain))

    print(f"GPT, 8 layers, dim 512, AdamW, {count:,} parameters ({4 * count / MIB:.1f} MiB of float32); "
          "batch 2 x 64 tokens per rank; MiB per rank at its peak (the rank with the largest peak)\n")
    print("| world | stage | parameters | gradients | optimizer state | activations and the rest | peak | "
          "peak / plain DDP's |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for world, stage, params, grads, optimizer, rest, peak, spread, plain in rows:
        name = "plain" if stage == 0 else f"ZeRO-{stage}"
        ratio = f"{peak / plain:.2f}" if plain else "-"
        spread_note = f" (ranks within {spread:.1f})" if spread >= 0.05 else ""
        print(f"| {world} | {name} | {params:.1f} | {grads:.1f} | {optimizer:.1f} | {rest:.1f} | {peak:.1f}{spread_note} "
              f"| {ratio} |")

    print("\nBytes each rank sends (and receives) per step, ring algorithms (Rajbhandari et al. 2020, section 7):\n")
    print("| stage | per step | " + " | ".join(f"N = {w}" for w in worlds if w > 1) + " |")
    print("|---|---|" + "---:|" * sum(1 for w in worlds if w > 1))
    what = {0: "all-reduce: 2(N-1)/N x 4P", 1: "reduce-scatter + all-gather: 2(N-1)/N x 4P",
            2: "reduce-scatter + all-gather: 2(N-1)/N x 4P", 3: "2 all-gathers + reduce-scatter: 3(N-1)/N x 4P"}
    for stage in stages:
        cells = [f"{COMM_FACTOR[stage] * (w - 1) / w * 4 * count / MIB:.1f} MiB" for w in worlds if w > 1]
        print(f"| {'plain' if stage == 0 else f'ZeRO-{stage}'} | {what[stage]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
