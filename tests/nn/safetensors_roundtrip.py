#!/usr/bin/env python3
"""Checks that minitrain's safetensors files and Python's agree, in both directions.

Usage: safetensors_roundtrip.py TEST_BINARY WORK_DIR

TEST_BINARY is the doctest binary that holds tests/nn/test_safetensors.cpp. The script
  1. runs its "safetensors interop: write for python" case, which writes WORK_DIR/from_cpp.safetensors,
  2. reads that file with its own reader below and checks every value,
  3. writes WORK_DIR/from_python.safetensors with its own writer,
  4. runs the "read from python" case, which checks it and leaves WORK_DIR/from_python.ok behind.

It parses the format by hand (json + struct + numpy) rather than importing the safetensors package,
so it depends on nothing but numpy, and so it is a second, independent reading of the spec.
Exit codes: 0 passed, 1 failed, 77 skipped (numpy is not installed; CTest's SKIP_RETURN_CODE).
"""
import json
import os
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print(f"SKIP: numpy is not installed for {sys.executable} (Debian: python3-numpy)")
    sys.exit(77)

DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I64": np.dtype("<i8")}


def read_safetensors(path):
    """Returns ({name: array}, metadata) after checking the layout the spec requires."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, f"header length {n} is not padded to a multiple of 8"
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    metadata = header.pop("__metadata__", {})
    arrays, covered = {}, 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = e["data_offsets"]
        assert begin == covered, f"{name}: data starts at {begin}, expected {covered}"
        dtype = DTYPES[e["dtype"]]
        assert begin % dtype.itemsize == 0, f"{name}: data at {begin} is not aligned"
        count = int(np.prod(e["shape"], dtype=np.int64))
        assert end - begin == count * dtype.itemsize, f"{name}: wrong byte count"
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=begin).reshape(e["shape"])
        covered = end
    assert covered == len(data), f"data section has {len(data) - covered} bytes that belong to no tensor"
    return arrays, metadata


def write_safetensors(path, arrays, metadata):
    """Writes `arrays` in the order given, padding the header with spaces like the reference writer."""
    names = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<i8"): "I64"}
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name, a in arrays.items():
        b = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    # Keys sorted: the header lists tensors in another order than their data, as other writers may.
    text = json.dumps(header, sort_keys=True).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def run_case(binary, work_dir, case):
    env = dict(os.environ, MT_SAFETENSORS_INTEROP_DIR=work_dir)
    cmd = [binary, "--no-skip", f"--test-case={case}"]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env).returncode == 0


def crc32c(data):
    """CRC32C from its definition, one bit at a time: a second reading of nn/crc32c.h."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def check_from_cpp(path):
    arrays, metadata = read_safetensors(path)
    # Note [Tensor checksums] (nn/safetensors.cpp): "mt.crc32c.<name>" holds each tensor's CRC32C.
    prefix = "mt.crc32c."
    checksums = {k[len(prefix) :]: v for k, v in metadata.items() if k.startswith(prefix)}
    metadata = {k: v for k, v in metadata.items() if not k.startswith(prefix)}
    assert crc32c(b"123456789") == 0xE3069283
    assert sorted(checksums) == sorted(arrays), sorted(checksums)
    for name, a in arrays.items():
        assert checksums[name] == f"{crc32c(a.tobytes()):08x}", f"{name}: checksum {checksums[name]}"
    assert metadata == {"producer": "minitrain", "note": "h\u00e9llo"}, metadata
    assert sorted(arrays) == ["d", "e", "i", "s", "w", "w_t"], sorted(arrays)
    w = np.array([[-1, -0.5, 0], [0.5, 1, 1.5]], dtype=np.float32)
    expected = {
        "w": w,
        "w_t": w.T,
        "d": np.array([0.1, -2.5, 1e300]),
        "i": np.array([-3, 2**53 + 1], dtype=np.int64),
        "s": np.array(7.25, dtype=np.float32),
        "e": np.zeros((0, 4), dtype=np.float32),
    }
    for name, want in expected.items():
        got = arrays[name]
        assert got.dtype == want.dtype and got.shape == want.shape, f"{name}: {got.dtype}{got.shape}"
        assert np.array_equal(got, want), f"{name}: {got} != {want}"


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    binary, work_dir = sys.argv[1], sys.argv[2]
    os.makedirs(work_dir, exist_ok=True)
    for stale in ("from_cpp.safetensors", "from_python.safetensors", "from_python.ok"):
        if os.path.exists(os.path.join(work_dir, stale)):
            os.remove(os.path.join(work_dir, stale))

    from_cpp = os.path.join(work_dir, "from_cpp.safetensors")
    if not run_case(binary, work_dir, "safetensors interop: write for python") or not os.path.exists(from_cpp):
        print(f"FAIL: the C++ side did not write {from_cpp}")
        return 1
    check_from_cpp(from_cpp)
    print("C++ -> Python: ok")

    write_safetensors(
        os.path.join(work_dir, "from_python.safetensors"),
        {
            "z": np.array(2.5),
            "y": np.array([-1, 0, 2**62], dtype=np.int64),
            "x": np.array([[1, 2], [3, 4]], dtype=np.float32),
            "empty": np.zeros(0, dtype=np.float32),
        },
        {"producer": "numpy"},
    )
    ok = os.path.join(work_dir, "from_python.ok")
    if not run_case(binary, work_dir, "safetensors interop: read from python") or not os.path.exists(ok):
        print("FAIL: the C++ side did not accept from_python.safetensors")
        return 1
    print("Python -> C++: ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print(f"FAIL: {e}")
        sys.exit(1)
