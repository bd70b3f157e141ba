#!/usr/bin/env python3
"""One DDP step on paper: measured compute per bucket, an alpha-beta cost per all-reduce, and the
bucket launch rule, put together into a predicted step time at any world size.

    scripts/scaling_model.py calibrate BENCH.txt
    scripts/scaling_model.py check --bench BENCH.txt --backend gloo --profile TRACE2.json TRACE1.json TRACE2.json ...
    scripts/scaling_model.py plot -o docs/img/ddp_scaling.svg [--profile TRACE.json]

BENCH.txt is what `build/bench/bench_allreduce W` (Gloo) and `mpirun -np W build/bench/bench_allreduce`
(MPI) print for W = 2..8, concatenated: `minitrain [mpi_]allreduce_<floats>[_<W>ranks]_us <median us>`.
A TRACE is a `mini_train --trace` file (trace/tracer.h): the profile comes from one run with buckets
(world >= 2), and `check` compares the model with the median step time of each other trace.

The model (docs/ddp.md, "The step at scale, on paper"):
  step = data + forward + backward computing + exposed communication + optimizer
Bucket b becomes ready at r_b (its last gradient, measured from the start of backward); its
all-reduce starts when it is ready and the previous bucket's has finished (one collective at a time,
in bucket order: Note [Bucket launch order]) and takes T(bytes_b, world); what is still running when
backward has computed everything is exposed. T is an alpha-beta cost (alpha per message step, beta
per byte), with one of the algorithms below.

What it leaves out, on purpose: stragglers and jitter between ranks, communication slowing down
compute (and the reverse) when they share cores or memory bandwidth, the optimizer's own
collectives (none for plain DDP), congestion in the network beyond one link per rank.

Python 3 standard library only.
"""

import argparse
import json
import math
import re
import statistics
import sys
from xml.sax.saxutils import escape

# ---------------------------------------------------------------------------------------------
# All-reduce costs: alpha (seconds per message step), beta (seconds per byte), p ranks, n bytes.
# Ring and recursive halving-doubling are the classic pair (Thakur, Rabenseifner and Gropp,
# "Optimization of collective communication operations in MPICH", IJHPCA 2005).


def ring_s(n, p, alpha, beta):
    """Ring: reduce-scatter then all-gather, 2(p-1) steps of n/p bytes each."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta


def tree_s(n, p, alpha, beta):
    """Tree: recursive halving (reduce-scatter) then doubling (all-gather), 2·log2(p) steps, the
    ring's bytes. Gloo's large all-reduce here; NCCL's double binary tree has the same log2(p)
    latency term and close to the ring's bandwidth term."""
    if p <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(p)) * alpha + 2 * (p - 1) / p * n * beta


def gather_s(n, p, alpha, beta):
    """Every rank's buffer gathered to every rank, then added in rank order (Gloo's small all-reduce
    here, Note [Allreduce algorithm]): a ring all-gather of n bytes per rank, p-1 steps."""
    if p <= 1:
        return 0.0
    return (p - 1) * (alpha + n * beta)


GLOO_GATHER_MAX_BYTES = 128 * 1024  # kGatherMaxBytes in distributed/process_group/gloo/process_group_gloo.cpp


def gloo_s(n, p, alpha, beta):
    return (gather_s if n <= GLOO_GATHER_MAX_BYTES else tree_s)(n, p, alpha, beta)


ALGORITHMS = {"ring": ring_s, "tree": tree_s, "gloo": gloo_s}


def hierarchical_s(n, p, per_node, inner, outer, algorithm):
    """p ranks, per_node of them per node on link `inner`, nodes joined by `outer` ((alpha, beta)
    each; one network link per rank, as in a DGX-class node with one NIC per GPU): reduce-scatter
    inside the node, all-reduce of each rank's 1/per_node across the nodes, all-gather inside."""
    if p <= per_node:
        return ALGORITHMS[algorithm](n, p, *inner)
    k, nodes = per_node, math.ceil(p / per_node)
    a, b = inner
    inside = 2 * ((k - 1) * a + (k - 1) / k * n * b)  # ring reduce-scatter + all-gather
    return inside + ALGORITHMS[algorithm](n / k, nodes, *outer)


# ---------------------------------------------------------------------------------------------
# Calibration: least squares of T = a(p, n)·alpha + b(p, n)·beta on relative error, so that the
# 11-float and the 800 KB all-reduces count alike.

LINE = re.compile(r"minitrain (mpi_)?allreduce_(\d+)(?:_(\d+)ranks)?_us ([0-9.e+]+)")


def read_bench(text):
    """{backend: [(world, bytes, seconds)]} from bench_allreduce's output lines."""
    points = {}
    for m in LINE.finditer(text):
        backend = "mpi" if m.group(1) else "gloo"
        world = int(m.group(3) or 2)
        points.setdefault(backend, []).append((world, int(m.group(2)) * 4, float(m.group(4)) * 1e-6))
    return points


def fit(points, cost):
    """(alpha, beta, median relative error) of cost(n, p, alpha, beta) fitted to points."""
    rows = [(cost(n, p, 1.0, 0.0) / t, cost(n, p, 0.0, 1.0) / t) for p, n, t in points]
    saa = sum(a * a for a, _ in rows)
    sab = sum(a * b for a, b in rows)
    sbb = sum(b * b for _, b in rows)
    sa, sb = sum(a for a, _ in rows), sum(b for _, b in rows)  # right-hand side: every ratio is 1
    det = saa * sbb - sab * sab
    alpha, beta = (sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det
    if alpha < 0 or beta < 0:  # clamp to the physical side and refit the other alone
        alpha, beta = (0.0, sb / sbb) if alpha < 0 else (sa / saa, 0.0)
    errors = [abs(cost(n, p, alpha, beta) - t) / t for p, n, t in points]
    return alpha, beta, statistics.median(errors)


def oversubscribed(algorithm, cores):
    """algorithm's cost on a machine where p ranks share `cores` cores: every message step waits for
    its receiver to be scheduled, so past one rank per core the whole collective stretches by
    p / cores (the measured all-reduces here follow this within their noise; cores=inf: a cluster)."""
    cost = ALGORITHMS[algorithm]
    return lambda n, p, alpha, beta: max(1.0, p / cores) * cost(n, p, alpha, beta)


def calibrate(points, cores=math.inf):
    """{backend: (algorithm, alpha, beta, error)}: Gloo with its own switch, MPI with whichever of
    ring and tree fits better (OpenMPI picks its algorithm per size; we do not model its tuning)."""
    out = {}
    for backend, pts in points.items():
        names = ["gloo"] if backend == "gloo" else ["ring", "tree"]
        best = min((fit(pts, oversubscribed(a, cores)) + (a,) for a in names), key=lambda f: f[2])
        out[backend] = (best[3], best[0], best[1], best[2])
    return out


# ---------------------------------------------------------------------------------------------
# The profile: what one step computes, from a trace (medians over its steps, rank 0).


def read_trace(path):
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") != "M"]


def step_times(events, rank=0):
    """Durations (seconds) of rank's traced steps."""
    return [e["dur"] * 1e-6 for e in events
            if e["ph"] == "X" and e["name"] == "step" and e["pid"] == rank and e["tid"] == 0]


def world_of(events):
    return len({e["pid"] for e in events})


def profile_from_trace(events, rank=0):
    """{world, data, forward, backward, optimizer, buckets: [(bytes, ready)]} in seconds, medians
    over the traced steps. backward is the computing part (to the finalize wait); a bucket's ready
    time is its 'bucket b ready' flow, from the start of backward."""
    mine = sorted((e for e in events if e["pid"] == rank), key=lambda e: e["ts"])
    steps = [e for e in mine if e["ph"] == "X" and e["name"] == "step" and e["tid"] == 0]
    if not steps:
        sys.exit("scaling_model: the trace has no 'step' spans (record it with mini_train --trace)")
    per = {k: [] for k in ("data", "forward", "backward", "optimizer")}
    ready, elements = {}, {}
    for s in steps:
        inside = [e for e in mine if s["ts"] - 1e3 <= e["ts"] <= s["ts"] + s["dur"]]
        span = {e["name"]: e for e in inside if e["ph"] == "X" and e["tid"] == 0}
        back = span.get("backward")
        if back is None:
            continue
        wait = span.get("DDP finalize wait")
        per["backward"].append(((wait["ts"] if wait else back["ts"] + back["dur"]) - back["ts"]) * 1e-6)
        for k in ("data", "forward", "optimizer"):
            per[k].append(span[k]["dur"] * 1e-6 if k in span else 0.0)
        for e in inside:
            m = re.fullmatch(r"bucket (\d+) ready", e["name"])
            if m and e["ph"] == "s":
                ready.setdefault(int(m.group(1)), []).append((e["ts"] - back["ts"]) * 1e-6)
            if e["ph"] == "X" and e["tid"] > 0 and e["name"].startswith("allreduce bucket"):
                elements[e["args"]["bucket"]] = e["args"]["elements"]
    profile = {k: statistics.median(v) for k, v in per.items() if v}
    profile["world"] = world_of(events)
    profile["buckets"] = [(elements[b] * 4, statistics.median(ready[b])) for b in sorted(ready) if b in elements]
    return profile


# ---------------------------------------------------------------------------------------------
# One step.


def simulate(profile, world, allreduce_s, compute_scale=1.0):
    """{step, exposed, comm_end} (seconds) of one step at `world` ranks. allreduce_s(bytes, world)
    is the cost of one bucket's all-reduce; compute_scale stretches every compute phase (ranks
    sharing cores). A world of one communicates nothing."""
    s = compute_scale
    backward = profile["backward"] * s
    done = 0.0
    if world > 1:
        for nbytes, ready in profile["buckets"]:
            start = max(ready * s, done)  # ready, and the previous bucket's all-reduce finished
            done = start + allreduce_s(nbytes, world)
    exposed = max(0.0, done - backward)
    step = profile.get("data", 0.0) + (profile["forward"] + profile.get("optimizer", 0.0)) * s + backward + exposed
    return {"step": step, "exposed": exposed, "comm_end": done}


def no_overlap_step(profile, world, allreduce_s):
    """The same step with every all-reduce after backward: the upper bound overlap improves on."""
    comm = sum(allreduce_s(n, world) for n, _ in profile["buckets"]) if world > 1 else 0.0
    return simulate(profile, 1, allreduce_s)["step"] + comm


def efficiency(profile, world, allreduce_s):
    """Weak scaling (the same batch per rank): the one-rank step over the world's step."""
    return simulate(profile, 1, allreduce_s)["step"] / simulate(profile, world, allreduce_s)["step"]


def compute_of(profile):
    return profile["forward"] + profile["backward"] + profile.get("optimizer", 0.0)


def oversubscription(world, threads, cores):
    """How much slower each rank computes when world·threads threads share `cores` cores."""
    return max(1.0, world * threads / cores)


# ---------------------------------------------------------------------------------------------
# At scale: GPT-shaped models on GPUs, whose compute we cannot measure here, so it is counted:
# 6 FLOPs per parameter per token for a training step (2 forward, 4 backward; Kaplan et al. 2020),
# at an assumed achieved rate. The bucket ready times follow the backward's FLOPs in reverse
# registration order; the tied token embedding is ready last (its second use, the lookup, is the
# first layer), as in the GPT preset's trace (docs/ddp.md).


def gpt_parameters(layers, dim, vocab, context):
    """[(name, elements)] in registration order, as nn's GPT registers them (head tied to tok_emb)."""
    params = [("tok_emb.weight", vocab * dim), ("pos_emb.weight", context * dim)]
    for i in range(layers):
        b = f"blocks.{i}."
        params += [(b + "ln1.weight", dim), (b + "ln1.bias", dim),
                   (b + "attn.qkv.weight", 3 * dim * dim), (b + "attn.qkv.bias", 3 * dim),
                   (b + "attn.proj.weight", dim * dim), (b + "attn.proj.bias", dim),
                   (b + "ln2.weight", dim), (b + "ln2.bias", dim),
                   (b + "fc1.weight", 4 * dim * dim), (b + "fc1.bias", 4 * dim),
                   (b + "fc2.weight", 4 * dim * dim), (b + "fc2.bias", dim)]
    return params + [("ln_f.weight", dim), ("ln_f.bias", dim)]


def buckets_of(params, first_cap, cap, last_cap=1 << 20):
    """Reverse registration order, small first and last buckets (Note [Buckets], Note [Last bucket]):
    [[(name, elements)]]."""
    order = list(reversed(params))
    last_start, after = len(order) - 1, 0  # the last bucket: the last slots that fit in last_cap, at least one
    for i in range(len(order) - 1, -1, -1):
        after += 4 * order[i][1]
        if after <= last_cap:
            last_start = i
    buckets, current, size = [], [], 0
    for i, (name, n) in enumerate(order):
        limit = first_cap if not buckets else cap
        if current and (i == last_start or size + 4 * n > limit):
            buckets.append(current)
            current, size = [], 0
        current.append((name, n))
        size += 4 * n
    return buckets + [current] if current else buckets


def gpu_profile(params, tokens, flops_per_s, first_cap=1 << 20, cap=25 << 20):
    """A profile as profile_from_trace returns, counted: backward's time spread over the parameters
    by their elements (the head's matmul, the tied embedding's size, first), gradients ready in
    reverse registration order, the tied embedding at the end."""
    total = sum(n for _, n in params)
    step = 6 * total * tokens / flops_per_s
    backward = step * 4 / 6
    order = [p for p in reversed(params) if p[0] != "tok_emb.weight"]
    tied = dict(params)["tok_emb.weight"]
    t = backward * tied / total  # the output head's backward comes first
    ready = {}
    for name, n in order:
        t += backward * n / total
        ready[name] = t
    ready["tok_emb.weight"] = backward
    buckets = [(4 * sum(n for _, n in b), max(ready[name] for name, _ in b)) for b in buckets_of(params, first_cap, cap)]
    return {"world": 1, "data": 0.0, "forward": step * 2 / 6, "backward": backward, "optimizer": 0.0, "buckets": buckets}


# Links, per rank and direction, with the sources of the figures. Bandwidths are nominal, times
# LINK_EFFICIENCY for what a collective achieves of them; alphas are per message step.
LINK_EFFICIENCY = 0.8
LINKS = {
    # H100 SXM: NVLink 4, 900 GB/s per GPU both directions together (NVIDIA H100 datasheet).
    "NVLink": {"bytes_per_s": 450e9, "alpha": 2e-6},
    # InfiniBand NDR: 400 Gb/s per port, one ConnectX-7 NIC per GPU (NVIDIA DGX H100 user guide).
    "InfiniBand": {"bytes_per_s": 50e9, "alpha": 5e-6},
}
# Alphas: the order of NCCL's own tuning model (src/graph/tuning.cc: per-hop latencies of about
# 0.5 to 3.4 us over NVLink, more over the network, and a few us of base latency per collective).
GPU_FLOPS = 989e12          # H100 SXM dense bf16 (datasheet)
MODELS = {
    # name: (layers, dim, vocab, context, tokens per GPU per step, achieved share of GPU_FLOPS)
    "GPT preset (0.83 M)": (4, 128, 256, 64, 32 * 64, 0.05),
    "GPT-2 124M": (12, 768, 50257, 1024, 16 * 1024, 0.40),
}
GPUS_PER_NODE = 8


def link(name):
    spec = LINKS[name]
    return spec["alpha"], 1.0 / (spec["bytes_per_s"] * LINK_EFFICIENCY)


def scale_curves(worlds):
    """{(model, label): [efficiency per world]} for the plot."""
    curves = {}
    for model, (layers, dim, vocab, context, tokens, share) in MODELS.items():
        profile = gpu_profile(gpt_parameters(layers, dim, vocab, context), tokens, GPU_FLOPS * share)
        for label, cost in (
                ("flat ring, all NVLink", lambda n, p: ring_s(n, p, *link("NVLink"))),
                ("ring, NVLink in a node of 8 + InfiniBand", lambda n, p: hierarchical_s(
                    n, p, GPUS_PER_NODE, link("NVLink"), link("InfiniBand"), "ring")),
                ("tree, NVLink in a node of 8 + InfiniBand", lambda n, p: hierarchical_s(
                    n, p, GPUS_PER_NODE, link("NVLink"), link("InfiniBand"), "tree"))):
            curves[(model, label)] = [efficiency(profile, w, cost) for w in worlds]
    return curves


# ---------------------------------------------------------------------------------------------
# The plot: plain SVG, efficiency against log2(world).


def svg_plot(worlds, curves, title, notes):
    width, height, left, top, right, bottom = 760, 470, 60, 40, 20, 130
    pw, ph = width - left - right, height - top - bottom
    lo, hi = math.log2(worlds[0]), math.log2(worlds[-1])

    def x(w):
        return left + (math.log2(w) - lo) / (hi - lo) * pw

    def y(e):
        return top + (1 - e) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>']
    for e in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{left}" y1="{y(e):.1f}" x2="{left + pw}" y2="{y(e):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(e) + 4:.1f}" text-anchor="end">{e:.2f}</text>')
    for w in worlds:
        out.append(f'<line x1="{x(w):.1f}" y1="{top}" x2="{x(w):.1f}" y2="{top + ph}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{x(w):.1f}" y="{top + ph + 14}" text-anchor="middle">{w}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 30}" text-anchor="middle">GPUs (same batch per GPU)</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" text-anchor="middle">'
               'scaling efficiency: step(1) / step(N)</text>')
    colors = ["#2171b5", "#e6550d"]
    dashes = ["", "6,3", "2,2"]
    models = list(dict.fromkeys(m for m, _ in curves))
    labels = list(dict.fromkeys(lab for _, lab in curves))
    for (model, label), values in curves.items():
        c, d = colors[models.index(model) % 2], dashes[labels.index(label) % 3]
        pts = " ".join(f"{x(w):.1f},{y(v):.1f}" for w, v in zip(worlds, values))
        dash = f' stroke-dasharray="{d}"' if d else ""
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{pts}">'
                   f'<title>{escape(model + ", " + label)}</title></polyline>')
    ly = top + ph + 48
    for i, model in enumerate(models):
        out.append(f'<line x1="{left}" y1="{ly + 14 * i - 4}" x2="{left + 24}" y2="{ly + 14 * i - 4}" '
                   f'stroke="{colors[i % 2]}" stroke-width="2"/><text x="{left + 30}" y="{ly + 14 * i}">{escape(model)}</text>')
    for i, label in enumerate(labels):
        d = dashes[i % 3]
        dash = f' stroke-dasharray="{d}"' if d else ""
        out.append(f'<line x1="{left + 260}" y1="{ly + 14 * i - 4}" x2="{left + 284}" y2="{ly + 14 * i - 4}" '
                   f'stroke="#444" stroke-width="2"{dash}/><text x="{left + 290}" y="{ly + 14 * i}">{escape(label)}</text>')
    for i, note in enumerate(notes):
        out.append(f'<text x="{left}" y="{ly + 14 * max(len(models), len(labels)) + 6 + 13 * i}" fill="#555" '
                   f'font-size="10">{escape(note)}</text>')
    return "\n".join(out + ["</svg>", ""])


# ---------------------------------------------------------------------------------------------
# Commands.


def cmd_calibrate(args):
    with open(args.bench) as f:
        fits = calibrate(read_bench(f.read()), args.cores)
    for backend, (algorithm, alpha, beta, error) in sorted(fits.items()):
        print(f"{backend}: {algorithm} all-reduce, alpha {alpha * 1e6:.1f} us, beta {beta * 1e9:.3f} ns/byte "
              f"({1 / beta / 1e9 if beta else float('inf'):.2f} GB/s), median error {100 * error:.0f} %")


def cmd_check(args):
    with open(args.bench) as f:
        algorithm, alpha, beta, error = calibrate(read_bench(f.read()), args.bench_cores)[args.backend]
    cost = oversubscribed(algorithm, args.bench_cores)
    profile = profile_from_trace(read_trace(args.profile))
    p0 = profile["world"]
    if args.solo:  # the cores the ranks really had: p0 ranks each computed c_p0 where one alone took c_1
        solo = profile_from_trace(read_trace(args.solo))
        args.cores = p0 * compute_of(solo) / compute_of(profile)
    print(f"# {args.backend}: {algorithm}, alpha {alpha * 1e6:.1f} us, beta {beta * 1e9:.3f} ns/byte "
          f"(fit error {100 * error:.0f} %); profile from {p0} ranks: forward {profile['forward'] * 1e3:.1f} ms, "
          f"backward {profile['backward'] * 1e3:.1f} ms, {len(profile['buckets'])} buckets; {args.cores:.2f} cores, "
          f"{args.threads} thread(s) per rank")
    print("world  measured_ms  predicted_ms  error_pct  exposed_ms  no_overlap_ms")
    for path in args.traces:
        events = read_trace(path)
        world = world_of(events)
        scale = oversubscription(world, args.threads, args.cores) / oversubscription(p0, args.threads, args.cores)
        comm = lambda n, p: cost(n, p, alpha, beta)  # noqa: E731
        got = simulate(profile, world, comm, scale)
        measured = statistics.median(step_times(events))
        print(f"{world:5d}  {measured * 1e3:11.1f}  {got['step'] * 1e3:12.1f}  "
              f"{100 * (got['step'] - measured) / measured:+9.1f}  {got['exposed'] * 1e3:10.1f}  "
              f"{no_overlap_step(profile, world, comm) * scale * 1e3:13.1f}")


def cmd_plot(args):
    worlds = [2 ** k for k in range(11)]
    curves = scale_curves(worlds)
    for (model, label), values in curves.items():
        print(f"{model}, {label}: " + " ".join(f"{w}:{v:.2f}" for w, v in zip(worlds, values)))
    notes = [f"compute: 6 FLOPs/parameter/token at {GPU_FLOPS / 1e12:.0f} TFLOP/s (H100 bf16) x "
             + ", ".join(f"{100 * m[5]:.0f} % ({name}, {m[4]} tokens/GPU)" for name, m in MODELS.items()),
             f"links at {100 * LINK_EFFICIENCY:.0f} % of nominal: NVLink 450 GB/s, alpha 2 us; InfiniBand NDR "
             "50 GB/s per GPU, alpha 5 us; fp32 gradients, buckets of 25 MiB, the first and the last 1 MiB",
             "scripts/scaling_model.py plot; assumptions in docs/ddp.md"]
    with open(args.output, "w") as f:
        f.write(svg_plot(worlds, curves, "Predicted DDP scaling efficiency (weak scaling), alpha-beta model", notes))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="fit alpha and beta to bench_allreduce's output")
    c.add_argument("bench")
    c.add_argument("--cores", type=float, default=2, help="cores the benchmark's ranks shared (default 2)")
    c.set_defaults(run=cmd_calibrate)
    k = sub.add_parser("check", help="predicted against measured step times")
    k.add_argument("--bench", required=True)
    k.add_argument("--backend", choices=["gloo", "mpi"], required=True)
    k.add_argument("--profile", required=True, help="a trace with buckets (2 or more ranks)")
    k.add_argument("--cores", type=float, default=2, help="cores the ranks share (default 2)")
    k.add_argument("--bench-cores", type=float, default=2, help="cores the benchmark's ranks shared (default 2)")
    k.add_argument("--threads", type=float, default=1, help="threads per rank (mini_train --threads)")
    k.add_argument("--solo", help="a one-rank trace of the same run: --cores becomes the cores the profile's "
                   "ranks really had (its ranks' compute against this one's), for a machine shared with other work")
    k.add_argument("traces", nargs="+")
    k.set_defaults(run=cmd_check)
    p = sub.add_parser("plot", help="the predicted efficiency to 1,024 GPUs as an SVG")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(run=cmd_plot)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
