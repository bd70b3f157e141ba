#!/usr/bin/env python3
"""Writes the PyTorch reference values that tests/nn/test_torch_ops.cpp compares minitrain's activations,
losses and tensor ops with (issue 40): float64, so the C++ side can ask for agreement to 1e-9.

Usage: /usr/bin/python3 tests/nn/make_ops_fixtures.py [OUT_DIR]   (default: tests/nn/fixtures)

Run with Debian's python3-torch (1.13). The seed is fixed and the file is committed, so the C++ tests
need no Python. One file, ops.safetensors (the writer of make_cnn_fixtures.py, float64 kept). Every
case is "<case>.<what>": x (the input), y = f(x), gy (a random output gradient) and grad_x, the
gradient of sum(y * gy) in x; a case's other inputs (target, weight, ...) under their own names.
A case whose name ends in "_t" applies f to x.t() (a non-contiguous view), as the C++ test does too.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_cnn_fixtures import save  # noqa: E402

f64 = torch.float64


def case(out, name, f, x, **extra):
    """Adds f(x) (x.t() when the name ends in _t), its input gradient, and `extra` to out."""
    x = x.clone().requires_grad_()
    y = f(x.t() if name.endswith("_t") else x)
    gy = torch.randn(y.shape, dtype=f64)
    (y * gy).sum().backward()
    out.update({f"{name}.x": x, f"{name}.y": y, f"{name}.gy": gy, f"{name}.grad_x": x.grad})
    out.update({f"{name}.{k}": v for k, v in extra.items()})


def activation_cases(out):
    x = torch.randn(5, 6, dtype=f64) * 3
    case(out, "silu", F.silu, x)
    case(out, "silu_t", F.silu, x)
    case(out, "leaky_relu", lambda v: F.leaky_relu(v, 0.2), x)
    case(out, "elu", lambda v: F.elu(v, alpha=1.5), x)
    case(out, "elu_t", lambda v: F.elu(v, alpha=1.5), x)
    case(out, "softplus", F.softplus, x * 10)  # past the default threshold 20 too
    case(out, "softplus_beta2_thr5", lambda v: F.softplus(v, beta=2.0, threshold=5.0), x)
    case(out, "mish", F.mish, x)
    case(out, "mish_t", F.mish, x * 10)
    case(out, "hardswish", F.hardswish, x)


def loss_cases(out):
    logits = torch.randn(7, 4, dtype=f64) * 2
    target = torch.tensor([0, 3, 1, 1, 2, 3, 0])
    ignored = torch.tensor([0, -100, 1, 1, 2, -100, 0])
    weight = torch.tensor([0.5, 2.0, 1.0, 0.25], dtype=f64)
    case(out, "ce_weight", lambda v: F.cross_entropy(v, target, weight=weight), logits, target=target, weight=weight)
    case(out, "ce_ignore", lambda v: F.cross_entropy(v, ignored), logits, target=ignored)
    case(out, "ce_smooth", lambda v: F.cross_entropy(v, ignored, label_smoothing=0.2), logits, target=ignored)
    for red in ["mean", "sum", "none"]:
        # ignore_index a valid class (1), with weights and smoothing together
        case(out, f"ce_all_{red}", lambda v: F.cross_entropy(v, target, weight=weight, ignore_index=1,
                                                            label_smoothing=0.1, reduction=red),
             logits, target=target, weight=weight)
    case(out, "nll_weight_ignore", lambda v: F.nll_loss(v.log_softmax(1), ignored, weight=weight), logits,
         target=ignored, weight=weight)

    p = torch.rand(6, 4, dtype=f64) * 0.98 + 0.01
    t = torch.rand(6, 4, dtype=f64)
    w4 = torch.rand(4, dtype=f64) + 0.5
    case(out, "bce", lambda v: F.binary_cross_entropy(v, t), p, target=t)
    case(out, "bce_weight_sum", lambda v: F.binary_cross_entropy(v, t, weight=w4, reduction="sum"), p,
         target=t, weight=w4)
    z = torch.randn(6, 4, dtype=f64) * 5
    z[0, 0], z[0, 1], z[0, 2] = 800.0, -800.0, 0.0  # far past exp's range, and the kink of max(-x, 0)
    pos = torch.tensor([3.0, 0.5, 1.0, 2.0], dtype=f64)
    case(out, "bce_logits", lambda v: F.binary_cross_entropy_with_logits(v, t), z, target=t)
    case(out, "bce_logits_pos_weight", lambda v: F.binary_cross_entropy_with_logits(
        v, t, weight=w4, pos_weight=pos, reduction="none"), z, target=t, weight=w4, pos_weight=pos)

    logq = torch.randn(5, 6, dtype=f64).log_softmax(1)
    pt = torch.randn(5, 6, dtype=f64).softmax(1)
    pt[1, 2], pt[3, 0] = 0.0, 0.0  # t = 0: the term is 0
    case(out, "kl_batchmean", lambda v: F.kl_div(v, pt, reduction="batchmean"), logq, target=pt)
    case(out, "kl_mean", lambda v: F.kl_div(v, pt, reduction="mean"), logq, target=pt)
    logt = torch.randn(5, 6, dtype=f64).log_softmax(1)
    case(out, "kl_log_target_sum", lambda v: F.kl_div(v, logt, reduction="sum", log_target=True), logq, target=logt)

    a = torch.randn(6, 5, dtype=f64) * 2
    b = torch.randn(6, 5, dtype=f64)
    case(out, "smooth_l1", lambda v: F.smooth_l1_loss(v, b, beta=0.5), a, target=b)
    case(out, "smooth_l1_none", lambda v: F.smooth_l1_loss(v, b, reduction="none"), a, target=b)
    case(out, "huber_sum", lambda v: F.huber_loss(v, b, delta=0.7, reduction="sum"), a, target=b)
    case(out, "huber_none", lambda v: F.huber_loss(v, b, delta=1.5, reduction="none"), a, target=b)


def tensor_cases(out):
    x = torch.randn(3, 4, 5, dtype=f64)
    case(out, "logsumexp_dim1", lambda v: torch.logsumexp(v, 1), x)
    case(out, "logsumexp_dims02_keepdim", lambda v: torch.logsumexp(v, (0, 2), keepdim=True), x * 400 + 1000)
    m = torch.randn(6, 9, dtype=f64)
    case(out, "logsumexp_t", lambda v: torch.logsumexp(v, -1), m * 300)
    case(out, "cumsum_dim1", lambda v: torch.cumsum(v, 1), x)
    case(out, "cumsum_t", lambda v: torch.cumsum(v, 1), m)
    case(out, "flip_dims02", lambda v: torch.flip(v, (0, 2)), x)
    case(out, "flip_t", lambda v: torch.flip(v, (1,)), m)
    case(out, "roll_dims", lambda v: torch.roll(v, (2, -1), (0, 2)), x)
    case(out, "roll_flat", lambda v: torch.roll(v, 7), x)
    case(out, "roll_t", lambda v: torch.roll(v, -4, 0), m)
    mask = (torch.randn(3, 4, 5) > 0)
    case(out, "where_scalar_right", lambda v: torch.where(mask, v, 0.5), x, cond=mask.to(torch.int64))
    case(out, "where_scalar_left", lambda v: torch.where(mask, -2.0, v), x, cond=mask.to(torch.int64))
    idx = torch.tensor([[0, 3, 2], [1, 1, 4]])
    out.update({"one_hot.indices": idx, "one_hot.y": F.one_hot(idx), "one_hot6.y": F.one_hot(idx, 6)})


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(40)
    out = {}
    activation_cases(out)
    loss_cases(out)
    tensor_cases(out)
    save(os.path.join(out_dir, "ops.safetensors"), out, keep_float64=True)


if __name__ == "__main__":
    main()
