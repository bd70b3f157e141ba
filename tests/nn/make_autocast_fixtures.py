"""Writes tests/nn/fixtures/autocast.safetensors: PyTorch's CPU autocast on a tiny GPT and a small CNN.

Run with Debian's python3-torch (1.13 was used):  /usr/bin/python3 tests/nn/make_autocast_fixtures.py
Seeded, so a rerun writes the same file. tests/nn/test_autocast_torch.cpp reads it.

Both models are float32 (master weights) and run forward, loss and backward under
torch.autocast("cpu", dtype=torch.bfloat16). The file keeps, for each op of one GPT block and of the CNN,
its input and its output *in the dtype autocast gave it* (BF16 or F32 in the file), so the test can
check which op ran in which dtype and feed minitrain's op the same input; and the logits, the loss and
every parameter's gradient (float32). The same models' float32 results without autocast are stored
beside them (".f32"), so a test can hold minitrain's bfloat16 error against PyTorch's own.

The GPT is the one of make_transformer_fixtures.py (vocab 64, context 8, dim 16, 2 layers, 2 heads,
the head tied to the token embedding), written with torch.nn.functional under minitrain's nn::GPT
parameter names. The CNN is mini_train's image CNN in small (nn/networks.cpp, add_conv_block): two
blocks of conv 3x3 pad 1 -> BatchNorm2d (training) -> ReLU -> MaxPool2d(2), then Linear -> ReLU ->
Linear, on 8x8 images, as an nn::Sequential names it (0.weight, 1.weight, ...).
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_file import save_safetensors  # noqa: E402
from tiny_gpt import C, H, L, T, V, gpt_parameters  # noqa: E402

torch.manual_seed(4321)
out = {}


def randn(*shape, scale=1.0):
    return torch.randn(*shape) * scale


def record(name, t):
    out[name] = t.detach().clone()
    return t


# ---- the tiny GPT -----------------------------------------------------------------------------------
gpt_params = gpt_parameters(randn)


def attention(qkv, B):
    """Causal attention as composed ops, (B, T, 3C) -> (B, T, C); torch 1.13 has no fused one."""
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).tril().logical_not(), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, C)


def gpt(P, idx, tag):
    """Forward; tag names the ops of block 0 in the file ("" records nothing)."""
    rec = (lambda name, t: record(tag + name, t)) if tag else (lambda name, t: t)
    B = idx.shape[0]
    h = rec("emb", P["tok_emb.weight"][idx] + P["pos_emb.weight"][:T])
    for l in range(L):
        p = f"blocks.{l}."
        r = rec if l == 0 else (lambda name, t: t)
        a = r("ln1", F.layer_norm(h, (C,), P[p + "ln1.weight"], P[p + "ln1.bias"]))
        qkv = r("qkv", F.linear(a, P[p + "attn.qkv.weight"], P[p + "attn.qkv.bias"]))
        a = r("attn", attention(qkv, B))
        h = r("res1", h + r("proj", F.linear(a, P[p + "attn.proj.weight"], P[p + "attn.proj.bias"])))
        m = r("ln2", F.layer_norm(h, (C,), P[p + "ln2.weight"], P[p + "ln2.bias"]))
        f = r("gelu", F.gelu(r("fc1", F.linear(m, P[p + "fc1.weight"], P[p + "fc1.bias"]))))
        h = r("res2", h + r("fc2", F.linear(f, P[p + "fc2.weight"], P[p + "fc2.bias"])))
    h = rec("ln_f", F.layer_norm(h, (C,), P["ln_f.weight"], P["ln_f.bias"]))
    return rec("head", F.linear(h, P["tok_emb.weight"]))  # the tied head


idx = torch.randint(0, V, (2, T))
idx[0, :3] = 7  # a repeated token: its embedding row's gradient sums three positions (and the head's)
targets = torch.randint(0, V, (2, T))
out.update({"gpt.idx": idx, "gpt.targets": targets})
for name, t in gpt_params.items():
    out["gpt.param." + name] = t
for autocast_on, suffix in ((True, ""), (False, ".f32")):
    P = {name: t.clone().requires_grad_() for name, t in gpt_params.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_on):
        logits = gpt(P, idx, "gpt.op." if autocast_on else "")
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    out["gpt.logits" + suffix] = logits.detach()
    out["gpt.loss" + suffix] = loss.detach()
    for name, t in P.items():
        out["gpt.grad." + name + suffix] = t.grad

# ---- the small CNN ----------------------------------------------------------------------------------
N, S, classes = 4, 8, 10
cnn_params = {}
for i, (conv, bn, cin, cout) in enumerate(((0, 1, 1, 4), (4, 5, 4, 8))):
    bound = 1 / math.sqrt(cin * 9)
    cnn_params[f"{conv}.weight"] = (torch.rand(cout, cin, 3, 3) * 2 - 1) * bound
    cnn_params[f"{conv}.bias"] = (torch.rand(cout) * 2 - 1) * bound
    cnn_params[f"{bn}.weight"] = 1 + randn(cout, scale=0.1)
    cnn_params[f"{bn}.bias"] = randn(cout, scale=0.1)
for name, (o, i) in {"9": (16, 8 * 2 * 2), "11": (classes, 16)}.items():
    bound = 1 / math.sqrt(i)
    cnn_params[name + ".weight"] = (torch.rand(o, i) * 2 - 1) * bound
    cnn_params[name + ".bias"] = (torch.rand(o) * 2 - 1) * bound


def cnn(P, x, tag):
    rec = (lambda name, t: record(tag + name, t)) if tag else (lambda name, t: t)
    for conv, bn in (("0", "1"), ("4", "5")):
        x = rec(conv + ".conv", F.conv2d(x, P[conv + ".weight"], P[conv + ".bias"], padding=1))
        x = rec(bn + ".bn", F.batch_norm(x, None, None, P[bn + ".weight"], P[bn + ".bias"], training=True))
        x = rec(bn + ".pool", F.max_pool2d(F.relu(x), 2))
    x = rec("9.fc", F.linear(x.flatten(1), P["9.weight"], P["9.bias"]))
    return rec("11.fc", F.linear(F.relu(x), P["11.weight"], P["11.bias"]))


images = torch.randn(N, 1, S, S)
labels = torch.randint(0, classes, (N,))
out.update({"cnn.x": images, "cnn.labels": labels})
for name, t in cnn_params.items():
    out["cnn.param." + name] = t
for autocast_on, suffix in ((True, ""), (False, ".f32")):
    P = {name: t.clone().requires_grad_() for name, t in cnn_params.items()}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_on):
        logits = cnn(P, images, "cnn.op." if autocast_on else "")
        loss = F.cross_entropy(logits, labels)
    loss.backward()
    out["cnn.logits" + suffix] = logits.detach()
    out["cnn.loss" + suffix] = loss.detach()
    for name, t in P.items():
        out["cnn.grad." + name + suffix] = t.grad


# ---- the file: each tensor in its own dtype ---------------------------------------------------------
here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "fixtures", "autocast.safetensors")
save_safetensors(path, out, "tests/nn/make_autocast_fixtures.py")
dtypes = {name[len("gpt.op."):]: str(t.dtype)[6:] for name, t in out.items() if name.startswith("gpt.op.")}
dtypes.update({name[len("cnn.op."):]: str(t.dtype)[6:] for name, t in out.items() if name.startswith("cnn.op.")})
print(f"wrote {os.path.relpath(path)}: {len(out)} tensors, {os.path.getsize(path)} bytes")
print("op dtypes under autocast:", dtypes)
