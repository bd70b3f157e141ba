"""The safetensors writer of make_transformer_fixtures.py and make_autocast_fixtures.py.

Each tensor is written in its own dtype (float64, float32, bfloat16 as its raw 16-bit patterns, int64),
little-endian, after the header: a u64 length, then JSON padded with spaces to 8 bytes, whose
__metadata__ names the script that wrote the file and the PyTorch that computed it. json, struct and
numpy only: no safetensors package is needed.
"""
import json
import struct

import torch

# torch dtype -> (safetensors dtype, the dtype its bytes are written as, and the numpy form of those)
FORMATS = {torch.float64: ("F64", None, "<f8"), torch.float32: ("F32", None, "<f4"),
           torch.bfloat16: ("BF16", torch.int16, "<i2"), torch.int64: ("I64", None, "<i8")}


def save_safetensors(path, tensors, generator):
    """Writes tensors (name -> tensor, in that order) to path; generator: the script, repo-relative."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        dtype, bits, numpy_form = FORMATS[t.dtype]
        data = (t.view(bits) if bits else t).numpy().astype(numpy_form).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header["__metadata__"] = {"generator": generator, "torch": torch.__version__}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
