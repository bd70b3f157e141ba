#!/usr/bin/env python3
"""Two training runs agree: their --log-json losses, and every tensor of their saved models, within a
relative tolerance. Json and struct only (no numpy), so it runs wherever python3 does.

    compare_runs.py RTOL A.jsonl B.jsonl [A.safetensors B.safetensors]

A loss agrees when |a - b| <= RTOL * max(|a|, |b|). A tensor agrees when its largest elementwise
difference is at most RTOL times its own largest magnitude (max |b|), so a weight near zero is not
held to a relative error of its own. Prints the largest relative difference of each kind; exits 1
when one exceeds RTOL, naming it.
"""
import json
import struct
import sys

FORMATS = {"F32": ("f", 4), "F64": ("d", 8), "I64": ("q", 8)}


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if line.strip()]


def tensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        code, size = FORMATS[t["dtype"]]
        begin, end = t["data_offsets"]
        out[name] = struct.unpack("<%d%s" % ((end - begin) // size, code), raw[8 + n + begin:8 + n + end])
    return out


def main():
    rtol = float(sys.argv[1])
    failed = False
    la, lb = losses(sys.argv[2]), losses(sys.argv[3])
    if len(la) != len(lb) or not la:
        print("the logs have %d and %d epochs" % (len(la), len(lb)))
        return 1
    worst = max(abs(a - b) / max(abs(a), abs(b)) for a, b in zip(la, lb))
    print("losses: %s vs %s, largest relative difference %.3g" % (la, lb, worst))
    failed |= worst > rtol
    if len(sys.argv) > 5:
        ta, tb = tensors(sys.argv[4]), tensors(sys.argv[5])
        if ta.keys() != tb.keys():
            print("the models have different tensors: %s vs %s" % (sorted(ta), sorted(tb)))
            return 1
        for name in sorted(ta):
            a, b = ta[name], tb[name]
            scale = max(max(abs(v) for v in b), 1e-30)
            rel = max(abs(x - y) for x, y in zip(a, b)) / scale
            print("%s: largest difference %.3g of its largest magnitude" % (name, rel))
            failed |= rel > rtol or len(a) != len(b)
    if failed:
        print("FAIL: differences beyond the tolerance %g" % rtol)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
