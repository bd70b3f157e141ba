#!/usr/bin/env python3
"""Writes PyTorch's bfloat16 and float16 CPU results that tests/tensor/test_lowp_torch.cpp compares
minitrain's low-precision dtypes with (issue 39): conversions, elementwise ops, reductions, matmul and
their gradients.

Usage: /usr/bin/python3 tests/nn/make_lowp_fixtures.py [OUT_DIR]   (default: tests/nn/fixtures)

Run with Debian's python3-torch (1.13). The seed is fixed and the file is committed, so the C++ tests
need no Python. One file, lowp.safetensors, whose BF16 and F16 tensors are stored as themselves (the
bits PyTorch produced), F32 ones as float32, checksums as I64. Names:
  widen.<bf16|f16>.checksum    Σ bits(float32(h))·(2h+1) mod 2^64 over all 65,536 patterns h: every
                               widening at once (a single wrong element always changes it)
  narrow.x, narrow.<bf16|f16>  tricky float32 values (ties, subnormals, overflow, NaN, inf, random
                               bit patterns) and PyTorch's rounding of them
  <dt>.x, <dt>.y, <dt>.b, <dt>.col, <dt>.pos, <dt>.y32   inputs: x, y (7, 33), b (33), col (7, 1),
                               pos = |x| + 0.1, y32 a float32 (7, 33)
  <dt>.<op>                    PyTorch's result of the op on them; GEMM inputs come from pattern()

A second file, lowp_nn.safetensors (tests/nn/test_lowp_nn.cpp), holds the network ops: for each op
<dt>.<op>.in<k> (its inputs), <dt>.<op>.gy (the output gradient), <dt>.<op>.out and
<dt>.<op>.grad<k> (the inputs' gradients). Where PyTorch 1.13's CPU has no kernel for the dtype
(every op but embedding in float16; attention in both, since 1.13 has no fused attention), the
reference is the op in float32 on the same 16-bit values, each result rounded once: what the
low-precision rule (compute in float32, round on the store) gives.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int64: "I64",
          torch.bool: "BOOL"}
NAMES = {torch.bfloat16: "bf16", torch.float16: "f16"}


def save(path, tensors):
    """safetensors, each tensor in its own dtype (bfloat16 and float16 as their raw 16-bit patterns)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t
        data = raw.numpy().astype(raw.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def widen_checksum(dtype):
    h = np.arange(65536, dtype=np.uint32)
    wide = torch.from_numpy(h.astype(np.uint16).view(np.int16)).view(dtype).float()
    bits = wide.numpy().view(np.uint32).astype(np.uint64)
    s = int(np.sum(bits * (2 * h.astype(np.uint64) + 1), dtype=np.uint64))  # wraps mod 2^64
    return torch.tensor([s - (1 << 64) if s >= 1 << 63 else s], dtype=torch.int64)


def tricky_floats():
    """float32 values where rounding to 16 bits is easy to get wrong."""
    v = []
    for e in range(-30, 20):  # exact ties and near-ties for both formats, around many exponents
        for m in (1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8 + 2 ** -20,
                  1 + 2 ** -11 - 2 ** -22, 2 - 2 ** -9, 2 - 2 ** -12):
            v += [m * 2.0 ** e, -m * 2.0 ** e]
    v += [2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 2.0 ** -126, 2.0 ** -149,
          2.0 ** -133 * 1.5, 65504.0, 65519.99, 65520.0, 65536.0, 3.3895314e38, 3.39e38, 3.4028235e38, 0.0, -0.0,
          float("inf"), float("-inf"), float("nan"), -float("nan"), 0.1, -2.5, 1000.1, 3e-8]
    x = torch.tensor(v, dtype=torch.float64).float()
    g = torch.Generator().manual_seed(39)
    rnd = torch.randint(-(2 ** 31), 2 ** 31, (4096,), generator=g, dtype=torch.int64).to(torch.int32)
    return torch.cat([x, rnd.view(torch.float32)])


def pattern(shape, seed):
    """Deterministic GEMM inputs that the C++ test makes the same way (lowp_pattern there), so the
    file need not hold them: element i is ((i·7919 + seed·104729) mod 1999 − 999) / 512, exact in
    double and float32, rounded once to the 16-bit dtype."""
    i = torch.arange(int(np.prod(shape)), dtype=torch.int64)
    return (((i * 7919 + seed * 104729) % 1999 - 999).double() / 512).float().reshape(shape)


def op_cases(out, dtype):
    n = NAMES[dtype]
    g = torch.Generator().manual_seed(3900 + len(n))
    x = (torch.randn(7, 33, generator=g) * 3).to(dtype)
    y = (torch.randn(7, 33, generator=g) * 2).to(dtype)
    b = torch.randn(33, generator=g).to(dtype)
    col = torch.randn(7, 1, generator=g).to(dtype)
    pos = (x.float().abs() + 0.1).to(dtype)
    y32 = torch.randn(7, 33, generator=g)
    out.update({f"{n}.x": x, f"{n}.y": y, f"{n}.b": b, f"{n}.col": col, f"{n}.pos": pos, f"{n}.y32": y32})
    cases = {
        "neg": lambda x, y, b, col, pos: -x, "exp": lambda x, y, b, col, pos: x.exp(),
        "log": lambda x, y, b, col, pos: pos.log(), "sqrt": lambda x, y, b, col, pos: pos.sqrt(),
        "tanh": lambda x, y, b, col, pos: x.tanh(), "sigmoid": lambda x, y, b, col, pos: x.sigmoid(),
        "relu": lambda x, y, b, col, pos: x.relu(), "abs": lambda x, y, b, col, pos: x.abs(),
        "erf": lambda x, y, b, col, pos: x.erf(), "expm1": lambda x, y, b, col, pos: x.expm1(),
        "log1p": lambda x, y, b, col, pos: pos.log1p(), "square": lambda x, y, b, col, pos: x.pow(2),
        "cube": lambda x, y, b, col, pos: x.pow(3.0), "rsqrt_pow": lambda x, y, b, col, pos: pos.pow(-0.5),
        "add_scalar": lambda x, y, b, col, pos: x + 0.1, "mul_scalar": lambda x, y, b, col, pos: x * 0.3,
        "add": lambda x, y, b, col, pos: x + y, "sub": lambda x, y, b, col, pos: x - y,
        "mul": lambda x, y, b, col, pos: x * y, "div": lambda x, y, b, col, pos: x / y,
        "maximum": lambda x, y, b, col, pos: torch.maximum(x, y),
        "minimum": lambda x, y, b, col, pos: torch.minimum(x, y),
        "add_row": lambda x, y, b, col, pos: x + b, "mul_col": lambda x, y, b, col, pos: x * col,
        "div_col_t": lambda x, y, b, col, pos: x.t() / col.t(),
        "lt": lambda x, y, b, col, pos: (x < y).to(x.dtype), "eq_b": lambda x, y, b, col, pos: (x == b).to(x.dtype),
        "sum": lambda x, y, b, col, pos: x.sum(), "sum0": lambda x, y, b, col, pos: x.sum(0),
        "sum1": lambda x, y, b, col, pos: x.sum(1), "sum_t1": lambda x, y, b, col, pos: x.t().sum(1),
        "mean1": lambda x, y, b, col, pos: x.mean(1), "max1": lambda x, y, b, col, pos: x.max(1).values,
        "min0": lambda x, y, b, col, pos: x.min(0).values, "amax": lambda x, y, b, col, pos: x.amax(),
        "var1": lambda x, y, b, col, pos: x.var(1), "var": lambda x, y, b, col, pos: x.var(),
        "matmul_small": lambda x, y, b, col, pos: x @ y.t(),
    }
    # PyTorch 1.13's CPU has no float16 kernel for many ops ("exp_vml_cpu" not implemented for 'Half').
    # For those the reference is what its bfloat16 kernels do, and what a float16 kernel there would
    # do: the op on the float32 values, rounded once.
    inputs = (x, y, b, col, pos)
    for k, f in cases.items():
        try:
            out[f"{n}.{k}"] = f(*inputs)
        except RuntimeError:
            out[f"{n}.{k}"] = f(*(t.float() for t in inputs)).to(dtype)
            print(f"{n}.{k}: float32 rounded once")
    out[f"{n}.add_f32"] = x + y32  # promotes to float32
    inplace = x.clone()
    inplace.add_(y)
    out[f"{n}.add_inplace"] = inplace
    inplace = x.clone()
    inplace.add_(y32)  # computed in float32, rounded into x once
    out[f"{n}.add_f32_inplace"] = inplace

    # A GEMM past minitrain's tiles (Note [Low-precision GEMM in tiles]): M = 260 and K = 272 cross a
    # 256 tile and panel. Inputs from pattern(), not stored. float16 as above (no addmm for 'Half').
    a, w = pattern((260, 272), 1).to(dtype), pattern((65, 272), 2).to(dtype)
    ba, bb = pattern((3, 20, 40), 3).to(dtype), pattern((3, 40, 17), 4).to(dtype)
    la, lw, lb, gy = pattern((20, 40), 5).to(dtype), pattern((17, 40), 6).to(dtype), pattern((17,), 7).to(dtype), \
        pattern((20, 17), 8).to(dtype)
    try:
        out[f"{n}.matmul"], out[f"{n}.bmm"] = a @ w.t(), ba @ bb
    except RuntimeError:
        out[f"{n}.matmul"], out[f"{n}.bmm"] = (a.float() @ w.float().t()).to(dtype), (ba.float() @ bb.float()).to(dtype)
        print(f"{n}.matmul, bmm: float32 rounded once")
    # Gradients in the tensors' own dtype: loss = sum(relu(la·lwᵀ + lb) * gy)
    grads = [t.clone().requires_grad_() for t in (la, lw, lb)]
    try:
        y_lin = torch.nn.functional.linear(*grads)
        (y_lin.relu() * gy).sum().backward()
    except RuntimeError:
        grads = [t.float().clone().requires_grad_() for t in (la, lw, lb)]
        y_lin = torch.nn.functional.linear(*grads)
        (y_lin.relu() * gy.float()).sum().backward()
        print(f"{n}.linear and gradients: float32 rounded once")
    out[f"{n}.linear"] = y_lin.detach().to(dtype)
    out.update({f"{n}.grad_{k}": t.grad.to(dtype) for k, t in zip(("a", "w", "bias"), grads)})


def run_op(out, dtype, name, fn, inputs, grad_inputs):
    """fn(*inputs) and the gradients of the first grad_inputs inputs for out.backward(gy), stored
    under <dt>.<name>.*: in dtype where PyTorch's CPU runs it, else in float32, rounded once."""
    n = NAMES[dtype]
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    for k, t in enumerate(inputs):
        out[f"{n}.{name}.in{k}"] = t
    try:
        ins = [t.clone().requires_grad_(k < grad_inputs) for k, t in enumerate(inputs)]
        y = fn(*ins)
        gy = torch.randn(y.shape, generator=g).to(dtype)
        y.backward(gy)
    except RuntimeError:
        ins = [(t.float() if t.is_floating_point() else t).clone().requires_grad_(k < grad_inputs)
               for k, t in enumerate(inputs)]
        y = fn(*ins)
        gy = torch.randn(y.shape, generator=g).to(dtype)
        y.backward(gy.float())
        print(f"{n}.{name}: float32 rounded once")
    out[f"{n}.{name}.gy"] = gy
    out[f"{n}.{name}.out"] = y.detach().to(dtype)
    for k in range(grad_inputs):
        out[f"{n}.{name}.grad{k}"] = ins[k].grad.to(dtype)


def attention(q, k, v):
    """softmax(q·kᵀ/√d, causal)·v composed, as PyTorch 1.13 has no fused attention."""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    t = s.shape[-1]
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def nn_cases(out, dtype):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(3939 + len(NAMES[dtype]))

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    # conv: 4 channels (im2col); conv16: 16 channels, 3x3 stride 1 (the float32 path's Winograd shape)
    run_op(out, dtype, "conv", lambda x, w, b: F.conv2d(x, w, b, padding=1), (r(2, 4, 7, 7), r(6, 4, 3, 3, scale=0.3),
                                                                              r(6)), 3)
    run_op(out, dtype, "conv16", lambda x, w: F.conv2d(x, w, padding=1), (r(2, 16, 5, 5), r(16, 16, 3, 3, scale=0.1)), 2)
    run_op(out, dtype, "conv_s2g2", lambda x, w: F.conv2d(x, w, stride=2, groups=2), (r(2, 4, 9, 9), r(6, 2, 3, 3)), 2)
    # attention's reference is always float32 on the 16-bit values (no fused kernel in 1.13)
    qkv = (r(2, 3, 20, 8), r(2, 3, 20, 8), r(2, 3, 20, 8))
    run_op(out, dtype, "attention", lambda q, k, v: attention(q.float(), k.float(), v.float()), qkv, 3)
    run_op(out, dtype, "softmax", lambda x: F.softmax(x, -1), (r(6, 37, scale=3),), 1)
    run_op(out, dtype, "log_softmax", lambda x: F.log_softmax(x, -1), (r(6, 37, scale=3),), 1)
    run_op(out, dtype, "layer_norm", lambda x, w, b: F.layer_norm(x, (37,), w, b, 1e-5),
           (r(6, 37, scale=2) + 1, r(37), r(37)), 3)
    run_op(out, dtype, "gelu", lambda x: F.gelu(x), (r(6, 37, scale=3),), 1)
    run_op(out, dtype, "gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), (r(6, 37, scale=3),), 1)
    run_op(out, dtype, "batch_norm", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-5),
           (r(4, 3, 5, 5, scale=2) + 1, r(3), r(3)), 3)
    run_op(out, dtype, "group_norm", lambda x, w, b: F.group_norm(x, 2, w, b, 1e-5), (r(2, 4, 3, 3), r(4), r(4)), 3)
    idx = torch.tensor([[1, 3, 0], [9, 3, 3]])
    run_op(out, dtype, "embedding", lambda w, i: F.embedding(i, w), (r(10, 6), idx), 1)
    run_op(out, dtype, "max_pool", lambda x: F.max_pool2d(x, 2), (r(2, 3, 6, 6),), 1)
    run_op(out, dtype, "avg_pool", lambda x: F.avg_pool2d(x, 2), (r(2, 3, 6, 6),), 1)
    target = torch.tensor([1, 0, 10, 4, 4, 7])
    run_op(out, dtype, "cross_entropy", lambda x, t: F.cross_entropy(x, t), (r(6, 11, scale=2), target), 1)
    run_op(out, dtype, "nll", lambda x, t: F.nll_loss(x, t), (r(6, 11), target), 1)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    out = {"widen.bf16.checksum": widen_checksum(torch.bfloat16), "widen.f16.checksum": widen_checksum(torch.float16)}
    x = tricky_floats()
    out.update({"narrow.x": x, "narrow.bf16": x.to(torch.bfloat16), "narrow.f16": x.to(torch.float16)})
    for dtype in (torch.bfloat16, torch.float16):
        op_cases(out, dtype)
    save(os.path.join(out_dir, "lowp.safetensors"), out)
    out = {}
    for dtype in (torch.bfloat16, torch.float16):
        nn_cases(out, dtype)
    save(os.path.join(out_dir, "lowp_nn.safetensors"), out)


if __name__ == "__main__":
    main()
