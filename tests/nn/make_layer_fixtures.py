#!/usr/bin/env python3
"""Writes the PyTorch reference values that tests/nn/test_torch_layers.cpp compares minitrain's norm
layers, masked attention, embedding padding_idx, sort/topk and repeat with (issue 40): float64, so the
C++ side can ask for agreement to 1e-9.

Usage: /usr/bin/python3 tests/nn/make_layer_fixtures.py [OUT_DIR]   (default: tests/nn/fixtures)

Run with Debian's python3-torch (1.13). The seed is fixed and the file is committed, so the C++ tests
need no Python. One file, layers.safetensors (the writer of make_cnn_fixtures.py, float64 kept). Every
case is "<case>.<what>": its inputs under their names, y = f(inputs), gy (a random output gradient)
and grad_<input>, the gradient of sum(y * gy) in each differentiable input; other values (masks,
indices, running statistics) under their own names. A case whose name ends in "_t" applies f to x.t()
(a non-contiguous view), as the C++ test does too. Booleans are written as int64 0/1 (minitrain has no
bool dtype).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_cnn_fixtures import save  # noqa: E402

f64 = torch.float64


def case(out, name, f, inputs, **extra):
    """Adds f(**inputs), the gradient of sum(y * gy) in each floating input, and `extra` to out."""
    leaves = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    args = {k: (v.t() if k == "x" and name.endswith("_t") else v) for k, v in leaves.items()}
    y = f(**args)
    gy = torch.randn(y.shape, dtype=f64)
    (y * gy).sum().backward()
    out.update({f"{name}.{k}": v for k, v in leaves.items()})
    out.update({f"{name}.y": y, f"{name}.gy": gy})
    out.update({f"{name}.grad_{k}": v.grad for k, v in leaves.items() if v.grad is not None})
    out.update({f"{name}.{k}": v for k, v in extra.items()})


def norm_cases(out):
    w45, b45 = torch.randn(4, 5, dtype=f64), torch.randn(4, 5, dtype=f64)
    case(out, "ln_2dims", lambda x, w, b: F.layer_norm(x, (4, 5), w, b), dict(x=torch.randn(3, 4, 5, dtype=f64) * 2 + 1,
                                                                            w=w45, b=b45))
    case(out, "ln_3dims_noaffine", lambda x: F.layer_norm(x, (3, 4, 5)), dict(x=torch.randn(2, 3, 4, 5, dtype=f64)))
    case(out, "ln_noaffine_t", lambda x: F.layer_norm(x, (6,)), dict(x=torch.randn(6, 4, dtype=f64)))
    case(out, "ln_2dims_t", lambda x, w, b: F.layer_norm(x, (6, 4), w, b),
         dict(x=torch.randn(4, 6, dtype=f64), w=torch.randn(6, 4, dtype=f64), b=torch.randn(6, 4, dtype=f64)))

    c6 = dict(w=torch.randn(6, dtype=f64), b=torch.randn(6, dtype=f64))
    case(out, "gn", lambda x, w, b: F.group_norm(x, 3, w, b), dict(x=torch.randn(2, 6, 3, 4, dtype=f64) * 3, **c6))
    case(out, "gn_noaffine", lambda x: F.group_norm(x, 2), dict(x=torch.randn(3, 4, 5, dtype=f64)))
    case(out, "gn_2d_groups3", lambda x, w, b: F.group_norm(x, 3, w, b), dict(x=torch.randn(5, 6, dtype=f64), **c6))
    case(out, "gn_one_group", lambda x: F.group_norm(x, 1), dict(x=torch.randn(2, 4, 3, 3, dtype=f64)))

    case(out, "in", lambda x: F.instance_norm(x), dict(x=torch.randn(2, 3, 4, 5, dtype=f64) * 2 - 1))
    c3 = dict(w=torch.randn(3, dtype=f64), b=torch.randn(3, dtype=f64))
    case(out, "in_affine", lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
         dict(x=torch.randn(2, 3, 4, 5, dtype=f64), **c3))
    # The module with running statistics: two training steps, then eval.
    m = torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3).double()
    with torch.no_grad():
        m.weight.copy_(c3["w"]), m.bias.copy_(c3["b"])
    xs = [torch.randn(2, 3, 4, 5, dtype=f64) * (i + 1) + i for i in range(3)]
    m.train()
    m(xs[0]), m(xs[1])
    m.eval()
    case(out, "in_running_eval", lambda x: m(x), dict(x=xs[2]), x0=xs[0], x1=xs[1], w=c3["w"], b=c3["b"],
         running_mean=m.running_mean.clone(), running_var=m.running_var.clone())
    case(out, "in_unbatched", lambda x: torch.nn.InstanceNorm2d(3)(x), dict(x=torch.randn(3, 4, 4, dtype=f64)))


def attention_cases(out):
    def sdpa(q, k, v, mask=None, additive=None, causal=False):
        s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if causal:
            s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        if additive is not None:
            s = s + additive
        return s.softmax(-1) @ v

    def qkv(b, h, tq, tk, d, dv):
        lead = (b, h) if b else (h,)
        return dict(q=torch.randn(*lead, tq, d, dtype=f64), k=torch.randn(*lead, tk, d, dtype=f64),
                    v=torch.randn(*lead, tk, dv, dtype=f64))

    keep = torch.rand(4, 6) > 0.4
    keep[:, 0] = True  # every query sees a key: no row is all -inf
    inputs = qkv(2, 3, 4, 6, 8, 8)
    # PyTorch 1.13's own attention (True = take part) agrees with the composition below.
    ref = F._scaled_dot_product_attention(*inputs.values(), keep, 0.0, False, False)[0]
    assert torch.allclose(ref, sdpa(*inputs.values(), mask=keep), rtol=1e-12, atol=1e-12)
    case(out, "sdpa_bool", lambda q, k, v: sdpa(q, k, v, mask=keep), inputs, mask=keep.to(torch.int64))
    bias = torch.randn(2, 1, 4, 6, dtype=f64)
    case(out, "sdpa_float_dv5", lambda q, k, v: sdpa(q, k, v, additive=bias), qkv(2, 3, 4, 6, 8, 5), mask=bias)
    case(out, "sdpa_dv3", lambda q, k, v: sdpa(q, k, v), qkv(1, 2, 5, 7, 4, 3))
    case(out, "sdpa_3d", lambda q, k, v: sdpa(q, k, v), qkv(0, 3, 4, 5, 6, 6))
    pad = torch.ones(3, 1, 5, dtype=torch.bool)
    pad[1, 0, 3:] = False
    case(out, "sdpa_3d_bool_causal", lambda q, k, v: sdpa(q, k, v, mask=pad, causal=True), qkv(0, 3, 5, 5, 4, 2),
         mask=pad.to(torch.int64))

    # nn.MultiheadAttention, batch_first, with a key padding mask (True = ignore) and a float attn_mask.
    torch.manual_seed(41)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    x = torch.randn(2, 5, 8, dtype=f64)
    kpm = torch.zeros(2, 5, dtype=torch.bool)
    kpm[0, 4], kpm[1, 2:] = True, True
    am = torch.randn(5, 5, dtype=f64)
    params = dict(x=x, in_w=mha.in_proj_weight.detach(), in_b=mha.in_proj_bias.detach(),
                  out_w=mha.out_proj.weight.detach(), out_b=mha.out_proj.bias.detach())

    def run(x, in_w, in_b, out_w, out_b, key_padding_mask, attn_mask):
        return F.multi_head_attention_forward(
            x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), 8, 2, in_w, in_b, None, None, False, 0.0, out_w,
            out_b, training=True, key_padding_mask=key_padding_mask, need_weights=False,
            attn_mask=attn_mask)[0].transpose(0, 1)

    with torch.no_grad():
        module_y = mha(x, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=False)[0]
        assert torch.allclose(module_y, run(**params, key_padding_mask=kpm, attn_mask=am), rtol=1e-12, atol=1e-12)
    case(out, "mha_masks", lambda **p: run(**p, key_padding_mask=kpm, attn_mask=am), params,
         key_padding_mask=kpm.to(torch.int64), attn_mask=am)
    causal_bool = ~torch.ones(5, 5, dtype=torch.bool).tril()  # True = not allowed, MHA's convention
    case(out, "mha_bool_attn_mask", lambda **p: run(**p, key_padding_mask=None, attn_mask=causal_bool), params,
         attn_mask=causal_bool.to(torch.int64))


def embedding_cases(out):
    idx = torch.tensor([[0, 2, 5, 2], [3, 2, 1, 0], [2, 4, 4, 5]])
    case(out, "embedding_padding_idx", lambda w: F.embedding(idx, w, padding_idx=2),
         dict(w=torch.randn(6, 4, dtype=f64)), indices=idx)
    case(out, "embedding_padding_idx_negative", lambda w: F.embedding(idx, w, padding_idx=-1),
         dict(w=torch.randn(6, 4, dtype=f64)), indices=idx)


def sort_cases(out):
    x = torch.randn(4, 7, dtype=f64)
    ties = torch.randint(0, 3, (5, 8)).to(f64)  # stable order among equal values
    for name, f, inp in [
        ("sort_dim1", lambda x: torch.sort(x, 1), x),
        ("sort_dim0_descending", lambda x: torch.sort(x, 0, descending=True), x),
        ("sort_stable_ties", lambda x: torch.sort(x, dim=1, stable=True), ties),
        ("sort_stable_ties_descending", lambda x: torch.sort(x, dim=0, descending=True, stable=True), ties),
        ("sort_t", lambda x: torch.sort(x, -1), x),
        ("topk3", lambda x: torch.topk(x, 3), x),
        ("topk2_smallest_dim0", lambda x: torch.topk(x, 2, 0, largest=False), x),
        ("topk4_t", lambda x: torch.topk(x, 4, 0), x),
    ]:
        indices = {}

        def values(x, f=f, indices=indices):
            v, i = f(x)
            indices["i"] = i
            return v

        case(out, name, values, dict(x=inp))
        out[f"{name}.indices"] = indices["i"]
    out["argsort_descending.x"] = x
    out["argsort_descending.indices"] = torch.argsort(x, 1, descending=True)
    nan = torch.tensor([[3.0, float("nan"), -1.0, float("inf"), 0.0, float("-inf")]], dtype=f64)
    out["sort_nan.x"] = nan
    out["sort_nan.indices"] = torch.sort(nan, dim=1, stable=True)[1]
    out["sort_nan_descending.indices"] = torch.sort(nan, dim=1, descending=True, stable=True)[1]


def repeat_cases(out):
    case(out, "repeat_same_dims", lambda x: x.repeat(2, 3), dict(x=torch.randn(2, 3, dtype=f64)))
    case(out, "repeat_new_dims", lambda x: x.repeat(2, 1, 3, 2), dict(x=torch.randn(3, 2, dtype=f64)))
    case(out, "repeat_t", lambda x: x.repeat(3, 2), dict(x=torch.randn(2, 4, dtype=f64)))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(40)
    out = {}
    norm_cases(out)
    attention_cases(out)
    embedding_cases(out)
    sort_cases(out)
    repeat_cases(out)
    save(os.path.join(out_dir, "layers.safetensors"), out, keep_float64=True)


if __name__ == "__main__":
    main()
