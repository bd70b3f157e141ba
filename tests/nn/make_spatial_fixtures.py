#!/usr/bin/env python3
"""Writes the PyTorch reference values that tests/nn/test_torch_spatial.cpp compares minitrain's
spatial ops with (issue 40): pad, unbatched conv2d and pooling, padding modes and padding="same",
pooling ceil_mode, adaptive max pooling, conv1d, interpolate and conv_transpose2d. float64, so the
C++ side can ask for agreement to 1e-9.

Usage: /usr/bin/python3 tests/nn/make_spatial_fixtures.py [OUT_DIR]   (default: tests/nn/fixtures)

Run with Debian's python3-torch (1.13). The seed is fixed and the file is committed, so the C++ tests
need no Python. One file, spatial.safetensors (the writer of make_cnn_fixtures.py, float64 kept).
Every case is "<case>.<what>": its inputs under their names (x, and w, b for convolutions), y = f(...),
gy (a random output gradient) and grad_<input>, the gradient of sum(y * gy) in each floating input;
other outputs (indices) under their own names. A case whose name ends in "_t" gives f x transposed
in its last two dims (a non-contiguous view), as the C++ test does too.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_cnn_fixtures import save  # noqa: E402

f64 = torch.float64


def rnd(*shape):
    return torch.randn(*shape, dtype=f64)


def case(out, name, f, **inputs):
    """Adds f(**inputs) (x transposed in its last two dims when the name ends in _t), the gradients
    of sum(y * gy) in every input, and the inputs to out. f may return (y, extra dict)."""
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    args = dict(leaves)
    if name.endswith("_t"):
        args["x"] = args["x"].transpose(-1, -2)
    r = f(**args)
    y, extra = r if isinstance(r, tuple) else (r, {})
    gy = torch.randn(y.shape, dtype=f64)
    (y * gy).sum().backward()
    out.update({f"{name}.{k}": v for k, v in leaves.items()})
    out.update({f"{name}.y": y, f"{name}.gy": gy})
    out.update({f"{name}.grad_{k}": v.grad for k, v in leaves.items()})
    out.update({f"{name}.{k}": v for k, v in extra.items()})


def pad_cases(out):
    case(out, "pad_constant", lambda x: F.pad(x, (1, 2, 0, 3), value=0.5), x=rnd(2, 3, 4, 5))
    case(out, "pad_constant_crop", lambda x: F.pad(x, (-1, 2, 1, -2)), x=rnd(2, 3, 4, 5))
    case(out, "pad_constant_3dims", lambda x: F.pad(x, (1, 0, 0, 2, 1, 1), value=-1.0), x=rnd(2, 3, 4))
    for mode in ["reflect", "replicate", "circular"]:
        case(out, f"pad_{mode}_1d", lambda x: F.pad(x, (2, 3), mode=mode), x=rnd(2, 3, 6))
        case(out, f"pad_{mode}_2d", lambda x: F.pad(x, (1, 2, 3, 0), mode=mode), x=rnd(2, 3, 5, 6))
        if mode != "circular":  # 1.13 pads circularly only with a batch dim (later versions without too)
            case(out, f"pad_{mode}_1d_unbatched", lambda x: F.pad(x, (3, 1), mode=mode), x=rnd(3, 5))
            case(out, f"pad_{mode}_2d_unbatched_t", lambda x: F.pad(x, (2, 2, 1, 3), mode=mode), x=rnd(3, 6, 4))
    case(out, "pad_circular_whole", lambda x: F.pad(x, (4, 4, 0, 3), mode="circular"), x=rnd(1, 2, 3, 4))


def conv_module(cls, x, w, b, **kw):
    """A layer of class cls (nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d) whose weight and bias are w and b."""
    groups = kw.get("groups", 1)
    if cls is nn.ConvTranspose2d:  # weight (in, out/groups, kh, kw)
        channels = (w.shape[0], w.shape[1] * groups)
    else:  # weight (out, in/groups, ...)
        channels = (w.shape[1] * groups, w.shape[0])
    m = cls(*channels, tuple(w.shape[2:]), bias=b is not None, **kw).double()
    # w and b themselves (not copies) as the layer's weight and bias, so their gradients land on them
    del m._parameters["weight"], m._parameters["bias"]
    m.weight, m.bias = w, b
    return m


def conv_cases(out):
    case(out, "conv2d_unbatched", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
         x=rnd(3, 7, 6), w=rnd(4, 3, 3, 3), b=rnd(4))
    case(out, "max_pool2d_unbatched", lambda x: F.max_pool2d(x, 3, 2, 1), x=rnd(3, 7, 6))
    case(out, "avg_pool2d_unbatched", lambda x: F.avg_pool2d(x, 2), x=rnd(3, 7, 6))
    case(out, "adaptive_avg_pool2d_unbatched", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), x=rnd(3, 7, 6))
    # padding modes of the layer, and "same" (an even kernel and dilation: uneven sides) and "valid"
    for mode in ["zeros", "reflect", "replicate", "circular"]:
        def layer(x, w, b, mode=mode, **kw):
            return conv_module(nn.Conv2d, x, w, b, padding_mode=mode, **kw)(x)
        case(out, f"conv2d_{mode}", lambda x, w, b: layer(x, w, b, padding=(1, 2), stride=(2, 1)),
             x=rnd(2, 3, 6, 7), w=rnd(4, 3, 3, 2), b=rnd(4))
        case(out, f"conv2d_{mode}_same", lambda x, w, b: layer(x, w, b, padding="same", dilation=(1, 2)),
             x=rnd(2, 2, 6, 7), w=rnd(4, 2, 4, 3), b=rnd(4))
        if mode != "circular":
            case(out, f"conv2d_{mode}_unbatched_t", lambda x, w: layer(x, w, None, padding=1, groups=2),
                 x=rnd(4, 5, 6), w=rnd(2, 2, 3, 3))
    case(out, "F_conv2d_same", lambda x, w: F.conv2d(x, w, padding="same", dilation=2), x=rnd(2, 3, 7, 6),
         w=rnd(2, 3, 2, 3))
    case(out, "F_conv2d_valid", lambda x, w, b: F.conv2d(x, w, b, padding="valid"), x=rnd(1, 3, 5, 6),
         w=rnd(2, 3, 3, 2), b=rnd(2))


def ceil_cases(out):
    mp = F.max_pool2d
    case(out, "max_pool2d_ceil", lambda x: mp(x, 3, 2, 1, ceil_mode=True), x=rnd(2, 3, 6, 8))  # 4x5, not 3x4
    case(out, "max_pool2d_ceil_dropped", lambda x: mp(x, 2, 2, 1, ceil_mode=True), x=rnd(2, 2, 5, 7))
    case(out, "max_pool2d_ceil_plain_t", lambda x: mp(x, (2, 3), (2, 2), ceil_mode=True), x=rnd(2, 3, 8, 7))
    for include in [True, False]:
        tag = "include" if include else "exclude"
        case(out, f"avg_pool2d_ceil_{tag}", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=include),
             x=rnd(2, 3, 6, 8))
        case(out, f"avg_pool2d_ceil_dropped_{tag}",
             lambda x: F.avg_pool2d(x, 2, 2, 1, ceil_mode=True, count_include_pad=include), x=rnd(2, 2, 5, 7))
        case(out, f"avg_pool2d_pad_{tag}_t",
             lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 1), count_include_pad=include), x=rnd(2, 3, 7, 6))
    case(out, "avg_pool2d_ceil_plain", lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True), x=rnd(1, 2, 8, 7))


def adaptive_max_cases(out):
    for name, shape, size in [("adaptive_max_3x4", (2, 3, 7, 9), (3, 4)), ("adaptive_max_global", (2, 3, 5, 4), (1, 1)),
                              ("adaptive_max_up", (1, 2, 4, 5), (6, 7)), ("adaptive_max_unbatched_t", (3, 8, 6), (4, 3))]:
        def f(x, size=size):
            y, idx = F.adaptive_max_pool2d(x, size, return_indices=True)
            return y, {"indices": idx}
        case(out, name, f, x=rnd(*shape))


def conv1d_cases(out):
    case(out, "conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
         x=rnd(2, 4, 11), w=rnd(6, 2, 3), b=rnd(6))
    case(out, "conv1d_unbatched", lambda x, w: F.conv1d(x, w), x=rnd(3, 9), w=rnd(2, 3, 4))
    case(out, "conv1d_same", lambda x, w, b: F.conv1d(x, w, b, padding="same"), x=rnd(2, 3, 8), w=rnd(4, 3, 4), b=rnd(4))
    for mode in ["zeros", "reflect", "circular"]:
        case(out, f"Conv1d_{mode}_same", lambda x, w, b, mode=mode: conv_module(
            nn.Conv1d, x, w, b, padding="same", dilation=2, padding_mode=mode)(x), x=rnd(2, 3, 9), w=rnd(2, 3, 4), b=rnd(2))
    case(out, "Conv1d_replicate_t", lambda x, w, b: conv_module(nn.Conv1d, x, w, b, padding=2, stride=3,
                                                                 padding_mode="replicate")(x),
         x=rnd(2, 10, 3), w=rnd(5, 3, 3), b=rnd(5))


def interpolate_cases(out):
    x = rnd(2, 3, 4, 6)
    case(out, "nearest_size", lambda x: F.interpolate(x, size=(7, 5)), x=x)
    case(out, "nearest_scale2", lambda x: F.interpolate(x, scale_factor=2), x=x)
    case(out, "nearest_scale_1_7", lambda x: F.interpolate(x, scale_factor=(1.7, 0.6)), x=x)
    for ac in [False, True]:
        tag = "ac" if ac else "noac"
        case(out, f"bilinear_size_{tag}", lambda x, ac=ac: F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=ac),
             x=x)
        case(out, f"bilinear_down_{tag}_t", lambda x, ac=ac: F.interpolate(x, size=(3, 2), mode="bilinear",
                                                                            align_corners=ac), x=rnd(1, 2, 5, 4))
        case(out, f"bilinear_scale_{tag}", lambda x, ac=ac: F.interpolate(x, scale_factor=(2.5, 1.5), mode="bilinear",
                                                                           align_corners=ac), x=x)


def conv_transpose_cases(out):
    ct = F.conv_transpose2d
    case(out, "conv_transpose2d", lambda x, w, b: ct(x, w, b, stride=2, padding=1, output_padding=1),
         x=rnd(2, 4, 5, 6), w=rnd(4, 3, 3, 3), b=rnd(3))
    case(out, "conv_transpose2d_groups", lambda x, w: ct(x, w, stride=(2, 3), padding=(0, 2), output_padding=(1, 2),
                                                          groups=2, dilation=(2, 1)),
         x=rnd(1, 4, 4, 5), w=rnd(4, 3, 2, 4))
    case(out, "conv_transpose2d_unbatched_t", lambda x, w, b: ct(x, w, b), x=rnd(3, 4, 5), w=rnd(3, 2, 2, 3), b=rnd(2))
    case(out, "ConvTranspose2d_winograd", lambda x, w, b: conv_module(nn.ConvTranspose2d, x, w, b, padding=1)(x),
         x=rnd(1, 16, 5, 4), w=rnd(16, 16, 3, 3), b=rnd(16))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(40)
    out = {}
    pad_cases(out)
    conv_cases(out)
    ceil_cases(out)
    adaptive_max_cases(out)
    conv1d_cases(out)
    interpolate_cases(out)
    conv_transpose_cases(out)
    save(os.path.join(out_dir, "spatial.safetensors"), out, keep_float64=True)


if __name__ == "__main__":
    main()
