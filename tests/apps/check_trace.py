#!/usr/bin/env python3
"""Checks a mini_train --trace file against the trace-event format's rules, and what it must hold.

    check_trace.py TRACE.json RANKS [NAME...]

Format (Chrome's "Trace Event Format", what chrome://tracing and ui.perfetto.dev load): a JSON object
with a "traceEvents" array; every event has name, ph, ts, pid, tid; 'X' spans have a dur >= 0 and
nest on their track (a span that starts inside another ends inside it); flow events 's'/'f' come in
pairs by id, the start no later than the end, each inside a span of its track; times never go back
on a track. Content: pids are exactly 0..RANKS-1, each named; every NAME (a prefix) occurs on
every rank; same-host clock estimates lie within half their round trip of zero (Note [Aligning the
ranks' clocks]). Exit status 0 when all hold; otherwise the first broken rule is printed.
"""

import json
import sys
from collections import defaultdict

EPS = 0.002  # ts and dur are rounded to 1 ns separately: allow two roundings


def fail(msg):
    sys.exit(f"check_trace: {msg}")


def main():
    path, ranks, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    with open(path) as f:
        trace = json.load(f)
    events = trace.get("traceEvents")
    if not isinstance(events, list) or not events:
        fail("no traceEvents array")
    tracks = defaultdict(list)
    named = set()
    for e in events:
        for key in ("name", "ph", "ts", "pid", "tid"):
            if key not in e:
                fail(f"event without {key}: {e}")
        if e["ph"] == "M":
            if e["name"] == "process_name":
                named.add(e["pid"])
            continue
        if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            fail(f"span without a dur >= 0: {e}")
        tracks[(e["pid"], e["tid"])].append(e)
    pids = sorted({pid for pid, _ in tracks})
    if pids != list(range(ranks)):
        fail(f"expected one process per rank 0..{ranks - 1}, found pids {pids}")
    if named != set(pids):
        fail(f"processes without a process_name: {set(pids) - named}")

    flows = defaultdict(dict)
    for (pid, tid), evs in tracks.items():
        last = -float("inf")
        stack = []  # open spans: (begin, end)
        for e in evs:
            ts = e["ts"]
            if ts < last - EPS:
                fail(f"time goes back on track pid {pid} tid {tid}: {e['name']} at {ts} after {last}")
            last = ts
            while stack and ts >= stack[-1][1] - EPS:
                stack.pop()
            if e["ph"] == "X":
                end = ts + e["dur"]
                if stack and end > stack[-1][1] + EPS:
                    fail(f"{e['name']} [{ts}, {end}] on pid {pid} tid {tid} overlaps its parent ending at "
                         f"{stack[-1][1]} without nesting")
                stack.append((ts, end))
            elif e["ph"] in ("s", "f"):
                if "id" not in e or "cat" not in e:
                    fail(f"flow event without id/cat: {e}")
                if e["ph"] in flows[e["id"]]:
                    fail(f"flow id {e['id']} has two '{e['ph']}' events")
                if not stack and e["ph"] == "s":
                    fail(f"flow start {e['name']} at {ts} on pid {pid} tid {tid} is inside no span")
                flows[e["id"]][e["ph"]] = e
            elif e["ph"] not in ("i", "I"):
                fail(f"unexpected phase {e['ph']}: {e}")
    for fid, pair in flows.items():
        if set(pair) != {"s", "f"}:
            fail(f"flow id {fid} is not paired: {sorted(pair)}")
        if pair["s"]["ts"] > pair["f"]["ts"] + EPS:
            fail(f"flow id {fid} ends before it starts")

    for name in names:
        for pid in pids:
            if not any(e["name"].startswith(name) for (p, _), evs in tracks.items() if p == pid for e in evs):
                fail(f"rank {pid} has no '{name}' event")
    clocks = trace.get("otherData", {}).get("clocks", [])
    if len(clocks) != ranks:
        fail(f"otherData.clocks has {len(clocks)} entries for {ranks} ranks")
    for c in clocks:
        if c["host"] == clocks[0]["host"] and abs(c["estimate_us"]) > c["round_trip_us"] / 2 + 0.01:
            fail(f"rank {c['rank']}'s clock estimate {c['estimate_us']} us is further from 0 than half its round "
                 f"trip ({c['round_trip_us']} us), on the host of rank 0")
    print(f"check_trace: {path}: {len(events)} events, {len(tracks)} tracks, {len(flows)} flows: ok")


if __name__ == "__main__":
    main()
