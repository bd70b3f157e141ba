#!/usr/bin/env python3
"""Draws one training step of a `mini_train --trace` file as an SVG timeline, one lane per rank.

    scripts/trace_to_svg.py trace.json -o step.svg [--step N] [--title TEXT]

Each rank's lane has a compute row (forward, the backward nodes, the optimizer, and DDP's finalize
wait) and a row per DDP bucket. A bucket's row shows it queued (ready, but waiting for a lower-index
bucket), then its all-reduce from launch to done, split at the moment backward stopped computing
(the start of the finalize wait): the part before ran while backward computed (overlapped), the
part after kept the rank waiting (exposed). An arrow runs from the gradient that completed the
bucket (its AccumulateGrad) to the all-reduce's start. Times are rank 0's clock, from the earliest
rank's step start.

Python 3 standard library only. The file format is Chrome's trace-event JSON ("traceEvents"); the
events this reads are the ones trace/tracer.h, distributed/ddp/detail/ddp_trace.h and mini_train write.
"""

import argparse
import json
import math
import os
import sys
from xml.sax.saxutils import escape

WIDTH = 960          # the time axis, in pixels
LEFT = 150           # labels
ROW = 18             # one row's height
GAP = 14             # between lanes
COLORS = {
    "forward": "#9ecae1", "optimizer": "#c7b9e3", "data": "#e0e0e0",
    "node": "#6baed6", "accumulate": "#2171b5", "finalize": "#fdd0a2",
    "queued": "#d9d9d9", "overlapped": "#41ab5d", "exposed": "#e6550d",
}


class TraceError(Exception):
    """A problem with the input or the output, reported as one line (main)."""


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}")
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: not JSON ({e})")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f'{path}: no "traceEvents" list, so not a Chrome trace (mini_train --trace writes one)')
    return [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") != "M"]


def pick_step(events, wanted):
    """The step to draw: `wanted`, or the last step every rank recorded."""
    steps = {}
    for e in events:
        if e["ph"] == "X" and e["name"] == "step" and e["tid"] == 0:
            steps.setdefault(e["args"]["step"], {})[e["pid"]] = e
    ranks = {e["pid"] for e in events}
    complete = sorted(s for s, by_rank in steps.items() if set(by_rank) == ranks)
    if not complete:
        raise TraceError("no step that every rank recorded (the trace has no 'step' spans)")
    step = complete[-1] if wanted is None else wanted
    if step not in complete:
        raise TraceError(f"step {step} is not in the trace on every rank; it has {complete}")
    return step, steps[step]


def within(e, begin, end):
    return e["ts"] >= begin - 1e-3 and e["ts"] + e.get("dur", 0) <= end + 1e-3


def rank_view(events, rank, step_span):
    """What to draw of one rank: compute spans, finalize start, buckets, flows."""
    begin, end = step_span["ts"], step_span["ts"] + step_span["dur"]
    mine = [e for e in events if e["pid"] == rank and within(e, begin, end)]
    view = {"phases": [], "nodes": [], "finalize": None, "buckets": {}, "flows": {}}
    for e in mine:
        if e["ph"] == "X" and e["tid"] == 0:
            if e["name"] in ("forward", "optimizer"):
                view["phases"].append(e)
            elif e["name"] == "DDP finalize wait":
                view["finalize"] = e
            elif e["name"] not in ("step", "backward", "data", "checkpoint"):
                view["nodes"].append(e)
        elif e["ph"] == "X" and e["tid"] > 0:
            b = view["buckets"].setdefault(e["tid"] - 1, {})
            b["queued" if e["name"] == "queued" else "allreduce"] = e
        elif e["ph"] in ("s", "f"):
            view["flows"].setdefault(e["id"], {})[e["ph"]] = e
    return view


def nice_tick(span_us):
    """A round tick interval giving 5-10 ticks over span_us."""
    raw = span_us / 8
    p = 10 ** math.floor(math.log10(raw))
    return next(m * p for m in (1, 2, 5, 10) if m * p >= raw)


class Svg:
    def __init__(self):
        self.parts = []

    def rect(self, x, y, w, h, color, title=None, cls=None):
        t = f"<title>{escape(title)}</title>" if title else ""
        c = f' class="{cls}"' if cls else ""
        self.parts.append(f'<rect{c} x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.6):.1f}" height="{h:.1f}" '
                          f'fill="{color}">{t}</rect>')

    def text(self, x, y, s, size=11, anchor="start", color="#222"):
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                          f'fill="{color}">{escape(s)}</text>')

    def line(self, x1, y1, x2, y2, color="#444", dash=None, arrow=False):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        a = ' marker-end="url(#arrow)"' if arrow else ""
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                          f'stroke-width="1"{d}{a}/>')


def merged(nodes, x_of, kind_of):
    """Node spans as runs: neighbours of one kind less than half a pixel apart become one rect."""
    runs = []
    for e in sorted(nodes, key=lambda e: e["ts"]):
        x0, x1, kind = x_of(e["ts"]), x_of(e["ts"] + e["dur"]), kind_of(e)
        if runs and runs[-1][2] == kind and x0 - runs[-1][1] < 0.5:
            runs[-1][1] = max(runs[-1][1], x1)
            runs[-1][3].append(e["name"])
        else:
            runs.append([x0, x1, kind, [e["name"]]])
    return runs


def draw(events, step, step_spans, title):
    t0 = min(s["ts"] for s in step_spans.values())
    t1 = max(s["ts"] + s["dur"] for s in step_spans.values())
    scale = WIDTH / max(t1 - t0, 1e-3)

    def x_of(ts):
        return LEFT + (ts - t0) * scale

    svg = Svg()
    y = 40
    svg.text(LEFT, 20, title or f"one DDP step (step {step}) across {len(step_spans)} ranks", size=14)
    for rank in sorted(step_spans):
        view = rank_view(events, rank, step_spans[rank])
        fin = view["finalize"]
        compute_end = fin["ts"] if fin else step_spans[rank]["ts"] + step_spans[rank]["dur"]
        buckets = sorted(view["buckets"])
        height = ROW * (1 + len(buckets)) + 20
        svg.parts.append(f'<g class="rank" id="rank-{rank}">')
        svg.rect(LEFT - 140, y - 4, WIDTH + 140, height, "#f7f7f7")
        svg.text(LEFT - 135, y + 10, f"rank {rank}", size=12)
        svg.text(LEFT - 70, y + 12, "compute", size=10, color="#555")
        for e in view["phases"]:
            svg.rect(x_of(e["ts"]), y, e["dur"] * scale, ROW - 4, COLORS[e["name"]], f'{e["name"]} {e["dur"]:.0f} us')
            if e["dur"] * scale > 40:
                svg.text(x_of(e["ts"]) + 2, y + 11, e["name"], size=9)
        kind = lambda e: "accumulate" if e["name"].startswith("AccumulateGrad") else "node"
        for x0, x1, k, names in merged(view["nodes"], x_of, kind):
            label = names[0] if len(names) == 1 else f"{len(names)} nodes: {', '.join(names[:4])}..."
            svg.rect(x0, y, x1 - x0, ROW - 4, COLORS[k], label)
        if fin:
            svg.rect(x_of(fin["ts"]), y, fin["dur"] * scale, ROW - 4, COLORS["finalize"],
                     f'DDP finalize wait {fin["dur"]:.0f} us')
        overlapped = exposed = 0.0
        for i, b in enumerate(buckets):
            by = y + ROW * (i + 1)
            svg.text(LEFT - 70, by + 12, f"bucket {b}", size=10, color="#555")
            parts = view["buckets"][b]
            if "queued" in parts:
                q = parts["queued"]
                svg.rect(x_of(q["ts"]), by, q["dur"] * scale, ROW - 4, COLORS["queued"],
                         f"bucket {b} queued behind a lower-index bucket {q['dur']:.0f} us")
            a = parts.get("allreduce")
            if not a:
                continue
            start, end = a["ts"], a["ts"] + a["dur"]
            split = min(max(compute_end, start), end)
            overlapped += split - start
            exposed += end - split
            svg.rect(x_of(start), by, (split - start) * scale, ROW - 4, COLORS["overlapped"],
                     f"bucket {b} all-reduce, overlapped with backward {split - start:.0f} us")
            svg.rect(x_of(split), by, (end - split) * scale, ROW - 4, COLORS["exposed"],
                     f"bucket {b} all-reduce, exposed {end - split:.0f} us")
            svg.line(x_of(start), by - 2, x_of(start), by + ROW - 2, color="#000")  # launch
            label = f"b{b} {a['args'].get('elements', 0) * 4 / 1024:.0f} KiB"
            if x_of(start) + 70 > LEFT + WIDTH:  # no room after the launch: the label goes before it
                svg.text(x_of(start) - 3, by + 11, label, size=9, anchor="end")
            else:
                svg.text(x_of(start) + 3, by + 11, label, size=9, color="#fff" if (end - start) * scale > 60 else "#000")
        for flow in view["flows"].values():
            if "s" in flow and "f" in flow:
                b = flow["f"]["tid"] - 1
                if b in buckets:
                    svg.line(x_of(flow["s"]["ts"]), y + ROW - 4, x_of(flow["f"]["ts"]),
                             y + ROW * (buckets.index(b) + 1), color="#333", arrow=True)
        svg.text(LEFT + WIDTH, y + height - 8, f"all-reduces {(overlapped + exposed) / 1000:.1f} ms: "
                 f"{overlapped / 1000:.1f} overlapped, {exposed / 1000:.1f} exposed", size=10, anchor="end",
                 color="#333")
        svg.parts.append("</g>")
        y += height + GAP
    # The time axis.
    tick = nice_tick(t1 - t0)
    svg.line(LEFT, y, LEFT + WIDTH, y)
    k = 0
    while k * tick <= t1 - t0 + 1e-9:
        x = LEFT + k * tick * scale
        svg.line(x, y, x, y + 4)
        svg.text(x, y + 15, f"{k * tick / 1000:g} ms", size=9, anchor="middle")
        k += 1
    y += 30
    legend = [("forward", "forward"), ("node", "backward node"), ("accumulate", "AccumulateGrad (hooks run here)"),
              ("finalize", "finalize: waiting for all-reduces"), ("queued", "bucket queued"),
              ("overlapped", "all-reduce overlapped"), ("exposed", "all-reduce exposed"),
              ("optimizer", "optimizer")]
    x = LEFT - 140
    for key, label in legend:
        svg.rect(x, y, 10, 10, COLORS[key])
        svg.text(x + 14, y + 9, label, size=10)
        x += 24 + 6.2 * len(label)
    height = y + 24
    total = LEFT + WIDTH + 10
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="{height:.0f}" '
            f'viewBox="0 0 {total} {height:.0f}" font-family="sans-serif">'
            '<defs><marker id="arrow" markerWidth="6" markerHeight="6" refX="5" refY="3" orient="auto">'
            '<path d="M0,0 L6,3 L0,6 z" fill="#333"/></marker></defs>'
            f'<rect width="{total}" height="{height:.0f}" fill="#fff"/>')
    return head + "\n".join(svg.parts) + "</svg>\n"


def write_svg(path, text):
    """Writes `text` where `path` leads (through a symlink), replacing a regular file atomically; a
    device, FIFO or folder is refused (the project's output rule, Note [Output files])."""
    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        raise TraceError(f"{path}: not a regular file (a device, FIFO or folder); give a file path for the SVG")
    temp = f"{target}.tmp.{os.getpid()}"
    try:
        with open(temp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temp, target)
    except OSError as e:
        if os.path.exists(temp):
            os.unlink(temp)
        raise TraceError(f"{path}: {e.strerror}")


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (its default is the usage, then the error)."""

    def error(self, message):
        self.exit(2, f"trace_to_svg: {message} (--help lists the options)\n")


def main():
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", help="a mini_train --trace file")
    p.add_argument("-o", "--output", required=True, help="the SVG to write")
    p.add_argument("--step", type=int, help="the step to draw (default: the last one every rank recorded)")
    p.add_argument("--title", help="the heading")
    a = p.parse_args()
    # Every problem is one line and exit code 1: a traceback helps no one who gave a wrong file.
    try:
        events = load(a.trace)
        step, spans = pick_step(events, a.step)
        svg = draw(events, step, spans, a.title)
    except TraceError as e:
        sys.exit(f"trace_to_svg: {e}")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        sys.exit(f"trace_to_svg: {a.trace}: an event is not what mini_train --trace writes "
                 f"({e.__class__.__name__}: {e})")
    try:
        write_svg(a.output, svg)
    except TraceError as e:
        sys.exit(f"trace_to_svg: {e}")


if __name__ == "__main__":
    main()
