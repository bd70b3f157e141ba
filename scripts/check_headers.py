#!/usr/bin/env python3
"""Every public header compiles on its own, and minitrain.h reaches every one of them.

A public header is one that `cmake --install` puts in front of users (cmake/Install.cmake): a header
of a library folder, outside the detail/ folders and the backends' own folders tensor/cpu/ and
tensor/cuda/, which only the library's sources include (docs/design.md, "Public headers";
scripts/check_layers.py fails when a public header includes one of those). A
user who writes `#include "nn/linear.h"` alone must get a program that compiles, and one who writes
`#include "minitrain.h"` must get all of the API. Run from anywhere:

    python3 scripts/check_headers.py [CXX]     # exit 0, or one line per problem and exit 1

CXX defaults to $CXX, else c++. Each header is compiled for syntax only, two at a time.
"""
import concurrent.futures
import os
import subprocess
import sys

from check_layers import INCLUDE, is_private  # one rule for what is private, and one include pattern

LIBRARY_FOLDERS = ["tensor", "trace", "autograd", "nn", "optim", "data", "distributed"]


def public_headers(root):
    headers = []
    for folder in LIBRARY_FOLDERS:
        for here, _, names in os.walk(os.path.join(root, folder)):
            for name in names:
                path = os.path.relpath(os.path.join(here, name), root)
                if name.endswith(".h") and not is_private(path):
                    headers.append(path)
    return sorted(headers)


def reached_from(root, start):
    """Every project header `start` includes, directly or through others."""
    seen, stack = set(), [start]
    while stack:
        path = stack.pop()
        full = os.path.join(root, path)
        if path in seen or not os.path.isfile(full):
            continue
        seen.add(path)
        with open(full, encoding="utf-8") as f:
            stack += INCLUDE.findall(f.read())
    return seen


def compiles_alone(root, cxx, header):
    source = f'#include "{header}"\nint main() {{ return 0; }}\n'
    done = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-I", root, "-x", "c++", "-"], input=source,
                          capture_output=True, text=True)
    if done.returncode == 0:
        return None
    first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:200])
    return f"{header}: does not compile on its own: {first}"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cxx = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CXX", "c++")
    headers = public_headers(root)
    reached = reached_from(root, "minitrain.h")
    problems = [f"{h}: minitrain.h does not include it (directly or through another header)"
                for h in headers if h not in reached]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        problems += [p for p in pool.map(lambda h: compiles_alone(root, cxx, h), headers) if p]
    for line in problems:
        print(line)
    if problems:
        print(f"check_headers: {len(problems)} problem(s) in {len(headers)} public headers")
        return 1
    print(f"check_headers: {len(headers)} public headers, each compiles alone, all reached from minitrain.h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
