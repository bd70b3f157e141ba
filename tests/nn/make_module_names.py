#!/usr/bin/env python3
"""Writes the names PyTorch gives the parameters, buffers, state-dict entries and modules of the
module tree that tests/nn/test_module_tree.cpp builds with minitrain (the same tree in torch.nn).

Usage: /usr/bin/python3 tests/nn/make_module_names.py [OUT]   (default: tests/nn/fixtures/module_names.txt)

Run with Debian's python3-torch (1.13). The file is committed, so the C++ test needs no Python. One
line per list: the list's name, then its entries in PyTorch's order, separated by spaces; the module
itself is named "" by named_modules(), written as "<self>"; parameter_count is the number of elements.
"""
import sys

from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)) for _ in range(2)])
        self.norm = nn.BatchNorm1d(8)
        self.heads = nn.ModuleDict({"cls": nn.Linear(8, 3), "reg": nn.Linear(8, 1, bias=False)})
        self.tied = self.heads["cls"]  # one module under two names: listed once, under the first


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/nn/fixtures/module_names.txt"
    net = Net()
    lists = {
        "named_parameters": [n for n, _ in net.named_parameters()],
        "named_buffers": [n for n, _ in net.named_buffers()],
        "state_dict": list(net.state_dict().keys()),
        "named_modules": [n or "<self>" for n, _ in net.named_modules()],
        "parameter_count": [str(sum(p.numel() for p in net.parameters()))],
    }
    with open(out, "w") as f:
        f.write("# PyTorch's names for the tree in tests/nn/make_module_names.py (torch 1.13)\n")
        for key, names in lists.items():
            f.write(" ".join([key] + names) + "\n")


if __name__ == "__main__":
    main()
