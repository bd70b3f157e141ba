#!/usr/bin/env python3
"""Issue 39's end-to-end check of mixed precision: the same run in float32 and in low precision,
from the same seed, and the final scores side by side.

    scripts/precision_check.py [--mini-train build/mini_train] [--runs gpt,cnn] [--threads 1] [--cnn-epochs E]

  gpt   mini_train --model gpt --eval --precision fp32|bf16   (1,000 steps on Debian's fortunes;
        target: bf16's test loss within 1 % of fp32's)
  cnn   mini_train --model cnn --eval --precision fp32|fp16   (the CNN preset on Fashion-MNIST;
        target: fp16's test accuracy within 0.005 of fp32's; fp16 trains with a GradScaler;
        --cnn-epochs E trains E epochs instead of the preset's 5)

Each pair runs one after the other at --threads (the scores do not depend on the thread count:
Note [Fixed chunks]). Prints a markdown table and exits 1 where a target is missed. Python 3
standard library only. The figures README.md quotes ("Mixed precision") come from this script.
"""

import argparse
import re
import subprocess
import sys
import time

RUNS = {
    # name: (flags, (reference precision, low precision), score regex, what the target compares)
    "gpt": (["--model", "gpt", "--eval"], ("fp32", "bf16"), r"^Test loss: ([0-9.]+) nats per byte", "loss"),
    "cnn": (["--model", "cnn", "--eval"], ("fp32", "fp16"), r"^Test accuracy: ([0-9.]+)$", "accuracy"),
}


def run(binary, flags, precision, threads, pattern):
    cmd = [binary, *flags, "--precision", precision, "--threads", str(threads)]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if out.returncode != 0:
        sys.exit(f"precision_check: {' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    match = re.search(pattern, out.stdout, re.MULTILINE)
    if not match:
        sys.exit(f"precision_check: no score in the output of {' '.join(cmd)}")
    skipped = re.search(r"^fp16: (\d+) steps? skipped", out.stdout, re.MULTILINE)
    return float(match.group(1)), seconds, skipped.group(1) if skipped else ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mini-train", default="build/mini_train")
    parser.add_argument("--runs", default="gpt,cnn")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cnn-epochs", type=int, default=0, help="0: the preset's")
    args = parser.parse_args()
    if args.cnn_epochs > 0:
        RUNS["cnn"][0].extend(["--epochs", str(args.cnn_epochs)])
    print("| run | score | reference | low precision | difference | target | met | seconds (ref, low) | fp16 skipped steps |")
    print("|---|---|---:|---:|---:|---|---|---|---:|")
    missed = False
    for name in args.runs.split(","):
        if name not in RUNS:
            sys.exit(f"precision_check: unknown run '{name}' (gpt, cnn)")
        flags, (ref, low), pattern, what = RUNS[name]
        a, ta, _ = run(args.mini_train, flags, ref, args.threads, pattern)
        b, tb, skipped = run(args.mini_train, flags, low, args.threads, pattern)
        if what == "loss":
            diff, target, met = (b - a) / a, "within 1 %", abs(b - a) <= 0.01 * a
            shown = f"{100 * diff:+.2f} %"
        else:
            diff, target, met = b - a, "within 0.005", abs(b - a) <= 0.005
            shown = f"{diff:+.4f}"
        missed |= not met
        print(f"| {name} | test {what} | {ref} {a:.4f} | {low} {b:.4f} | {shown} | {target} | "
              f"{'yes' if met else 'no'} | {ta:.0f}, {tb:.0f} | {skipped} |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
