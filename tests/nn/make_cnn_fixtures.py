#!/usr/bin/env python3
"""Writes the PyTorch reference values that tests/nn/test_cnn.cpp compares minitrain's CNN layers with.

Usage: /usr/bin/python3 tests/nn/make_cnn_fixtures.py [OUT_DIR]   (default: tests/nn/fixtures)

Run with Debian's python3-torch (1.13; scripts/install-deps.sh --bench installs it). Seeds are fixed, so
a rerun writes the same values; the files are committed, so the C++ tests need no Python. Each file is
a safetensors file (float32; indices and counters int64) written by the small writer below, with
json + numpy only, so it depends on no safetensors package. Names are "<case>.<what>":
  conv2d.safetensors     Conv2d over stride/padding/dilation/groups, and a 3x3 layer that minitrain runs by
                         Winograd: x, weight, bias, y = conv(x),
                         and grad_x, grad_weight, grad_bias of the loss sum(y * gy)
  pooling.safetensors    MaxPool2d (values and indices), AvgPool2d with and without count_include_pad,
                         AdaptiveAvgPool2d to 1x1 and to sizes that do not divide the input
  batchnorm.safetensors  BatchNorm1d/2d: outputs and running statistics over two training steps, eval,
                         momentum=None, track_running_stats=False, and grad_x of sum(y * gy)
  cnn.safetensors        conv -> BatchNorm2d -> ReLU -> MaxPool2d -> Flatten -> Linear: the state dict
                         under PyTorch's names, a training-mode forward, the state after it, an eval forward
"""
import json
import os
import struct
import sys

import numpy as np
import torch
from torch import nn

DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64"}


def save(path, tensors, keep_float64=False):
    """safetensors: u64 header length, JSON header padded to 8 bytes, then the raw little-endian data.
    float64 is written as float32 unless keep_float64 (tests/nn/make_ops_fixtures.py keeps it)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().cpu().numpy().copy(order="C")  # (ascontiguousarray would make a 0-dim array 1-D)
        if a.dtype == np.float64 and not keep_float64:
            a = a.astype(np.float32)
        data = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def conv_cases():
    out = {}
    cases = {
        "plain": ((2, 2, 5, 5), dict(in_channels=2, out_channels=3, kernel_size=3)),
        "strided": ((1, 3, 7, 6), dict(in_channels=3, out_channels=4, kernel_size=(3, 2), stride=2, padding=1)),
        "dilated": ((1, 2, 7, 6), dict(in_channels=2, out_channels=3, kernel_size=3, stride=(1, 2), padding=(2, 1),
                                       dilation=2)),
        "grouped": ((1, 4, 5, 5), dict(in_channels=4, out_channels=4, kernel_size=3, padding=1, groups=2, bias=False)),
        # 3x3, stride 1, 16 channels: minitrain takes Winograd F(2x2, 3x3) here (odd sizes: partial tiles)
        "winograd": ((1, 16, 3, 5), dict(in_channels=16, out_channels=16, kernel_size=3, padding=1)),
    }
    for name, (shape, kwargs) in cases.items():
        conv = nn.Conv2d(**kwargs)
        x = torch.randn(shape, requires_grad=True)
        y = conv(x)
        gy = torch.randn(y.shape)
        (y * gy).sum().backward()
        out.update({f"{name}.x": x, f"{name}.weight": conv.weight, f"{name}.y": y, f"{name}.gy": gy,
                    f"{name}.grad_x": x.grad, f"{name}.grad_weight": conv.weight.grad})
        if conv.bias is not None:
            out.update({f"{name}.bias": conv.bias, f"{name}.grad_bias": conv.bias.grad})
    return out


def pooling_cases():
    x = torch.randn(2, 3, 7, 6)
    y, idx = nn.MaxPool2d(3, stride=2, padding=1, return_indices=True)(x)
    y2, idx2 = nn.MaxPool2d((2, 3), stride=1, dilation=(2, 1), return_indices=True)(x)
    return {
        "x": x,
        "max_k3s2p1.y": y, "max_k3s2p1.indices": idx,
        "max_dilated.y": y2, "max_dilated.indices": idx2,
        "max_k2.y": nn.MaxPool2d(2)(x),
        "avg_k3s2p1.y": nn.AvgPool2d(3, stride=2, padding=1)(x),
        "avg_k3s2p1_exclude_pad.y": nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)(x),
        "avg_k2.y": nn.AvgPool2d(2)(x),
        "adaptive_1.y": nn.AdaptiveAvgPool2d(1)(x),
        "adaptive_3x2.y": nn.AdaptiveAvgPool2d((3, 2))(x),
        "adaptive_4x4.y": nn.AdaptiveAvgPool2d((4, 4))(x),
    }


def batchnorm_cases():
    out = {}
    # BatchNorm2d, momentum 0.1: two training steps, then eval; random affine parameters.
    bn = nn.BatchNorm2d(3)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    out.update({"bn2d.weight": bn.weight, "bn2d.bias": bn.bias})
    x1 = (torch.randn(4, 3, 3, 3) * 2 + 1).requires_grad_()
    y1 = bn(x1)
    gy = torch.randn(y1.shape)
    (y1 * gy).sum().backward()
    out.update({"bn2d.x1": x1, "bn2d.y1": y1, "bn2d.gy": gy, "bn2d.grad_x1": x1.grad,
                "bn2d.grad_weight": bn.weight.grad, "bn2d.grad_bias": bn.bias.grad,
                "bn2d.running_mean1": bn.running_mean.clone(), "bn2d.running_var1": bn.running_var.clone()})
    x2 = torch.randn(4, 3, 3, 3) - 0.5
    out.update({"bn2d.x2": x2, "bn2d.y2": bn(x2), "bn2d.running_mean2": bn.running_mean,
                "bn2d.running_var2": bn.running_var, "bn2d.num_batches_tracked": bn.num_batches_tracked})
    bn.eval()
    x3 = torch.randn(2, 3, 3, 3)
    out.update({"bn2d.x3": x3, "bn2d.y3": bn(x3)})
    # BatchNorm1d on (N, C) with momentum=None: the cumulative average of the batches seen.
    cma = nn.BatchNorm1d(4, momentum=None)
    a1, a2 = torch.randn(5, 4) * 3, torch.randn(6, 4) + 2
    cma(a1)
    out.update({"cma.x1": a1, "cma.x2": a2, "cma.y2": cma(a2), "cma.running_mean": cma.running_mean,
                "cma.running_var": cma.running_var})
    # BatchNorm1d on (N, C, L).
    b3 = nn.BatchNorm1d(2)
    x = torch.randn(3, 2, 4)
    out.update({"bn1d_ncl.x": x, "bn1d_ncl.y": b3(x), "bn1d_ncl.running_mean": b3.running_mean,
                "bn1d_ncl.running_var": b3.running_var})
    # No running statistics: eval mode normalises with the batch's own.
    untracked = nn.BatchNorm2d(3, affine=False, track_running_stats=False).eval()
    out.update({"untracked.x": x3, "untracked.y": untracked(x3)})
    return out


def cnn_case():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 3 * 3, 5))
    out = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 1, 6, 6)
    out.update({"x": x, "y_train": model(x)})
    out.update({f"after.{k}": v for k, v in model.state_dict().items() if k.startswith("1.")})
    model.eval()
    out["y_eval"] = model(x)
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    for name, make in [("conv2d", conv_cases), ("pooling", pooling_cases), ("batchnorm", batchnorm_cases),
                       ("cnn", cnn_case)]:
        torch.manual_seed(12)
        save(os.path.join(out_dir, f"{name}.safetensors"), make())


if __name__ == "__main__":
    main()
