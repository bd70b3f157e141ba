"""Writes tests/nn/fixtures/transformer.safetensors: PyTorch's values for the transformer tests.

Run with Debian's python3-torch (1.13 was used):  /usr/bin/python3 tests/nn/make_transformer_fixtures.py
Everything is float64 and seeded, so a rerun writes the same file. tests/nn/test_transformer.cpp
reads it and compares minitrain's LayerNorm, GELU, attention and a tiny GPT (forward, loss and every
parameter's gradient) with these numbers.

The GPT here is written out with torch.nn.functional, parameter by parameter, under the names of
minitrain's nn::GPT state dict (nn/transformer.h), so the two models are the same function of the
same tensors: pre-LayerNorm blocks, a fused qkv projection, causal attention, GELU (exact erf), and
the output head tied to the token embedding.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_file import save_safetensors  # noqa: E402
from tiny_gpt import C, H, L, T, V, gpt_parameters  # noqa: E402

torch.manual_seed(1234)
D = torch.float64
out = {}


def randn(*shape, scale=1.0):
    return torch.randn(*shape, dtype=D) * scale


def grads_of(y, inputs, prefix):
    """Gradients of sum(w·y) for a fixed random w, stored under prefix + input name."""
    w = randn(*y.shape)
    out[prefix + "w"] = w
    gs = torch.autograd.grad((y * w).sum(), [t for _, t in inputs])
    for (name, _), g in zip(inputs, gs):
        out[prefix + "d" + name] = g


# ---- layer norm: x (2, 3, 8), weight and bias (8) --------------------------------------------------
x = randn(2, 3, 8, scale=2.0).requires_grad_()
w = (1 + randn(8, scale=0.5)).requires_grad_()
b = randn(8, scale=0.5).requires_grad_()
y = F.layer_norm(x, (8,), w, b, eps=1e-5)
out.update({"ln.x": x.detach(), "ln.weight": w.detach(), "ln.bias": b.detach(), "ln.y": y.detach()})
grads_of(y, [("x", x), ("weight", w), ("bias", b)], "ln.")

# ---- GELU, both forms: x (24) in [-6, 6) -----------------------------------------------------------
x = (torch.rand(24, dtype=D) * 12 - 6).requires_grad_()
out["gelu.x"] = x.detach()
for form in ("none", "tanh"):
    y = F.gelu(x, approximate=form)
    out["gelu." + form + ".y"] = y.detach()
    grads_of(y, [("x", x)], "gelu." + form + ".")

# ---- attention: q, k, v (2, 2, 5, 4), causal and not -----------------------------------------------
q, k, v = (randn(2, 2, 5, 4).requires_grad_() for _ in range(3))
out.update({"attn.q": q.detach(), "attn.k": k.detach(), "attn.v": v.detach()})
for causal in (False, True):
    s = (q @ k.transpose(-1, -2)) / math.sqrt(4)
    if causal:
        s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).tril().logical_not(), float("-inf"))
    y = torch.softmax(s, -1) @ v
    tag = "attn.causal." if causal else "attn.full."
    out[tag + "y"] = y.detach()
    grads_of(y, [("q", q), ("k", k), ("v", v)], tag)

# ---- a tiny GPT: vocab 64, context 8, dim 16, 2 layers, 2 heads -------------------------------------
params = gpt_parameters(randn)
for t in params.values():
    t.requires_grad_()


def gpt(idx):
    P = params
    B = idx.shape[0]
    h = P["tok_emb.weight"][idx] + P["pos_emb.weight"][: idx.shape[1]]
    for l in range(L):
        p = f"blocks.{l}."
        a = F.layer_norm(h, (C,), P[p + "ln1.weight"], P[p + "ln1.bias"])
        qkv = F.linear(a, P[p + "attn.qkv.weight"], P[p + "attn.qkv.bias"])
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).tril().logical_not(), float("-inf"))
        a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, C)
        h = h + F.linear(a, P[p + "attn.proj.weight"], P[p + "attn.proj.bias"])
        m = F.layer_norm(h, (C,), P[p + "ln2.weight"], P[p + "ln2.bias"])
        h = h + F.linear(F.gelu(F.linear(m, P[p + "fc1.weight"], P[p + "fc1.bias"])), P[p + "fc2.weight"],
                         P[p + "fc2.bias"])
    h = F.layer_norm(h, (C,), P["ln_f.weight"], P["ln_f.bias"])
    return F.linear(h, P["tok_emb.weight"])  # the tied head


idx = torch.randint(0, V, (2, T))
idx[0, :3] = 7  # a repeated token: its embedding row's gradient sums three positions (and the head's)
targets = torch.randint(0, V, (2, T))
logits = gpt(idx)
loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
loss.backward()
out.update({"gpt.idx": idx, "gpt.targets": targets, "gpt.logits": logits.detach(), "gpt.loss": loss.detach()})
for name, t in params.items():
    out["gpt.param." + name] = t.detach()
    out["gpt.grad." + name] = t.grad

# ---- float32 accuracy, against float64 (after the GPT, so the values above keep their seeds) --------
# Inputs are float32 numbers (stored as float64), and PyTorch's own float32 results are stored beside
# the float64 reference, so a test can hold minitrain's float32 error against PyTorch's.
# GELU (exact form) in its negative tail, x (1024) in [-6, -3]: 1 + erf(x/√2) cancels there.
x = torch.linspace(-6, -3, 1024, dtype=D).float()
for dtype, tag in ((D, "ref"), (torch.float32, "torch32")):
    xt = x.to(dtype).clone().requires_grad_()
    y = F.gelu(xt)
    (dydx,) = torch.autograd.grad(y.sum(), xt)
    out["f32.gelu." + tag + ".y"] = y.detach().double()
    out["f32.gelu." + tag + ".dydx"] = dydx.double()
out["f32.gelu.x"] = x.double()
# Layer norm over a last dim of 2, no affine part, x (512, 2) = 10 + N(0, 1): x̂ = ±1 nearly exactly, so
# dx is all cancellation (Note [Layer norm rows that do not sum to 0] in tensor/cpu/cpu_layer_norm.cpp).
x = (10 + randn(512, 2)).float()
w = randn(512, 2)
for dtype, tag in ((D, "ref"), (torch.float32, "torch32")):
    xt = x.to(dtype).clone().requires_grad_()
    y = F.layer_norm(xt, (2,))
    (dx,) = torch.autograd.grad((y * w.to(dtype)).sum(), xt)
    out["f32.ln." + tag + ".y"] = y.detach().double()
    out["f32.ln." + tag + ".dx"] = dx.double()
out.update({"f32.ln.x": x.double(), "f32.ln.w": w})


here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "fixtures", "transformer.safetensors")
save_safetensors(path, out, "tests/nn/make_transformer_fixtures.py")
print(f"wrote {os.path.relpath(path)}: {len(out)} tensors, {os.path.getsize(path)} bytes, loss {loss.item():.6f}")
