"""The tiny GPT's parameters that make_transformer_fixtures.py and make_autocast_fixtures.py share.

Vocab 64, context 8, dim 16, 2 layers, 2 heads, under the names of minitrain's nn::GPT state dict
(nn/transformer.h). Drawn in a fixed order from the caller's randn(*shape, scale=...), so each
script's seed and dtype give its own values.
"""
V, T, C, L, H = 64, 8, 16, 2, 2


def gpt_parameters(randn):
    params = {"tok_emb.weight": randn(V, C, scale=0.3), "pos_emb.weight": randn(T, C, scale=0.3)}
    for l in range(L):
        p = f"blocks.{l}."
        for ln in ("ln1", "ln2"):
            params[p + ln + ".weight"] = 1 + randn(C, scale=0.1)
            params[p + ln + ".bias"] = randn(C, scale=0.1)
        for name, (o, i) in {"attn.qkv": (3 * C, C), "attn.proj": (C, C), "fc1": (4 * C, C), "fc2": (C, 4 * C)}.items():
            params[p + name + ".weight"] = randn(o, i, scale=0.2)
            params[p + name + ".bias"] = randn(o, scale=0.1)
    params["ln_f.weight"] = 1 + randn(C, scale=0.1)
    params["ln_f.bias"] = randn(C, scale=0.1)
    return params
