#!/usr/bin/env python3
"""scripts/scaling_model.py on a recorded input: a 2-rank trace of the GPT preset (4 buckets, Gloo,
trimmed to the events the model reads) and bench_allreduce's output at 2 to 8 ranks, both from the
2-core machine docs/ddp.md describes. Checks the cost formulas on known values, that the fit recovers
known alpha and beta, the model's invariants (no step beats perfect overlap or is slower than no
overlap, efficiency never above 1), the GPT shapes against their known sizes, and that every command
runs. Exits non-zero on the first failure."""

import io
import math
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import scaling_model as m  # noqa: E402

TRACE = os.path.join(HERE, "fixtures", "gpt_gloo_2ranks.trace.json")
BENCH = os.path.join(HERE, "fixtures", "bench_allreduce_2to8.txt")


def near(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def test_costs():
    # ring: 2(p-1)·alpha + 2(p-1)/p·n·beta; p = 4, n = 1 MB, alpha 10 us, beta 1 ns/byte
    assert near(m.ring_s(1e6, 4, 1e-5, 1e-9), 6e-5 + 1.5e-3)
    # tree: 2·ceil(log2 p)·alpha + the ring's bytes; p = 8 -> 6 steps, 7/4 of n
    assert near(m.tree_s(1e6, 8, 1e-5, 1e-9), 6e-5 + 1.75e-3)
    assert near(m.tree_s(1e6, 5, 1e-5, 0.0), 6e-5)  # ceil(log2 5) = 3
    # Gloo: gathered up to 128 KiB (p-1 steps of the whole buffer), halving-doubling above
    assert near(m.gloo_s(1000, 3, 1e-5, 1e-9), 2 * (1e-5 + 1e-6))
    assert near(m.gloo_s(1 << 20, 4, 1e-5, 1e-9), m.tree_s(1 << 20, 4, 1e-5, 1e-9))
    for cost in (m.ring_s, m.tree_s, m.gather_s):
        assert cost(1e6, 1, 1.0, 1.0) == 0.0  # one rank sends nothing
    # the ring's latency grows with p, the tree's with log p; both move the same bytes
    assert m.ring_s(0, 1024, 1e-6, 0) > 100 * m.tree_s(0, 1024, 1e-6, 0)
    # hierarchical: inside one node it is the flat algorithm
    inner, outer = (1e-6, 1e-11), (5e-6, 1e-10)
    assert near(m.hierarchical_s(1e8, 8, 8, inner, outer, "ring"), m.ring_s(1e8, 8, *inner))
    assert m.hierarchical_s(1e8, 64, 8, inner, outer, "ring") < m.ring_s(1e8, 64, *outer)


def test_fit_recovers_known_values():
    alpha, beta = 30e-6, 0.5e-9
    points = [(p, n, m.gloo_s(n, p, alpha, beta)) for p in range(2, 9) for n in (44, 4000, 65536, 814120)]
    a, b, err = m.fit(points, m.gloo_s)
    assert near(a, alpha, 1e-9) and near(b, beta, 1e-9) and err < 1e-12, (a, b, err)


def test_recorded_calibration():
    with open(BENCH) as f:
        points = m.read_bench(f.read())
    assert sorted(points) == ["gloo", "mpi"] and len(points["gloo"]) == 28 and len(points["mpi"]) == 28
    fits = m.calibrate(points, cores=2)
    algorithm, alpha, beta, err = fits["gloo"]
    assert algorithm == "gloo" and alpha > 0 and beta > 0
    assert err < 0.15, f"Gloo's recorded all-reduces fit within {100 * err:.0f} %, expected < 15 %"


def test_profile_and_step_invariants():
    profile = m.profile_from_trace(m.read_trace(TRACE))
    assert profile["world"] == 2 and len(profile["buckets"]) == 4
    # the GPT preset's buckets at --bucket-cap-mb 1: 198656, 198272, 198272 and 239104 floats
    assert [n for n, _ in profile["buckets"]] == [794624, 793088, 793088, 956416]
    readies = [r for _, r in profile["buckets"]]
    assert readies == sorted(readies) and 0 < readies[0] and readies[-1] <= profile["backward"] + 1e-3
    compute_only = m.simulate(profile, 1, lambda n, p: 0.0)["step"]
    for alpha, beta in ((1e-5, 1e-10), (1e-4, 1e-9), (1e-3, 1e-7)):
        for world in (2, 3, 8, 64):
            cost = lambda n, p: m.ring_s(n, p, alpha, beta)  # noqa: E731
            step = m.simulate(profile, world, cost)
            comm = sum(cost(n, world) for n, _ in profile["buckets"])
            fixed = compute_only - profile["backward"]
            # perfect overlap: never faster than the compute, nor than the first launch plus every all-reduce
            assert step["step"] >= compute_only - 1e-12
            assert step["step"] >= fixed + readies[0] + comm - 1e-12
            assert step["step"] <= m.no_overlap_step(profile, world, cost) + 1e-12
            assert 0 < m.efficiency(profile, world, cost) <= 1.0
    # with free communication the step is the compute alone
    assert near(m.simulate(profile, 8, lambda n, p: 0.0)["step"], compute_only)


def test_gpt_shapes_and_efficiency():
    preset = m.gpt_parameters(4, 128, 256, 64)
    gpt2 = m.gpt_parameters(12, 768, 50257, 1024)
    assert sum(n for _, n in preset) == 834304  # docs/ddp.md: the GPT preset's parameters
    assert sum(n for _, n in gpt2) == 124439808  # GPT-2 small with its head tied to the embedding
    for params in (preset, gpt2):
        buckets = m.buckets_of(params, 1 << 20, 25 << 20)
        assert sum(n for b in buckets for _, n in b) == sum(n for _, n in params)
        assert buckets[0][0][0] == "ln_f.bias"  # reverse registration order
        profile = m.gpu_profile(params, 2048, 1e14)
        assert profile["buckets"][-1][1] == profile["backward"]  # the tied embedding is ready last
    # Note [Last bucket]: the preset's embeddings share a small last bucket with block 0's end, the
    # bytes `mini_train --model gpt --nproc 2 --ddp-stats` reports for its three buckets.
    preset_buckets = m.buckets_of(preset, 1 << 20, 25 << 20)
    assert [4 * sum(n for _, n in b) for b in preset_buckets] == [794624, 1584640, 957952]
    assert preset_buckets[-1][-1][0] == "tok_emb.weight"
    assert len(m.buckets_of(preset, 1 << 20, 25 << 20, last_cap=25 << 20)) == 2  # the cap covers it all: no cut
    worlds = [2 ** k for k in range(11)]
    curves = m.scale_curves(worlds)
    assert len(curves) == 6
    for values in curves.values():
        assert values[0] == 1.0 and all(0 < v <= 1.0 for v in values)
    flat = curves[("GPT-2 124M", "flat ring, all NVLink")]
    assert all(a >= b for a, b in zip(flat, flat[1:])), "a flat ring only gets slower with more ranks"


def test_commands_run():
    with tempfile.TemporaryDirectory() as tmp:
        out = io.StringIO()
        with redirect_stdout(out):
            m.main(["calibrate", BENCH])
            m.main(["check", "--bench", BENCH, "--backend", "gloo", "--profile", TRACE, TRACE])
            m.main(["plot", "-o", os.path.join(tmp, "scaling.svg")])
        text = out.getvalue()
        assert "gloo: gloo all-reduce, alpha" in text and "mpi: " in text
        row = next(line.split() for line in text.splitlines() if line.strip().startswith("2 "))
        measured, predicted = float(row[1]), float(row[2])
        assert measured > 0 and abs(predicted - measured) / measured < 0.2, row
        svg = ET.parse(os.path.join(tmp, "scaling.svg")).getroot()
        lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
        assert len(lines) == 6
        for line in lines:
            ys = [float(p.split(",")[1]) for p in line.get("points").split()]
            assert len(ys) == 11 and all(not math.isnan(y) for y in ys)


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print("ok", name)
