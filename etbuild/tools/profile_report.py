"""A profile as text (top-N tables) and as a Chrome trace (Trace Event Format, opens in Perfetto).

The trace holds one complete event (`"ph": "X"`, `ts`/`dur` in µs) per timed call, per
instruction execution and per delegate node execution, all on one thread, so a delegate's
nodes nest under its instruction and the instructions under their call. Event names are the
operators; `args` carry the instruction index, the delegate node and the tensor shapes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from etbuild.fsutil import atomic_path
from etbuild.tools.profile import INSTRUCTION, Entry, Profile

PID, TID = 1, 1


def _inner(p: Profile) -> dict[int, float]:
    """Per instruction with timed delegate nodes: the sum of its nodes' medians."""
    inner: dict[int, float] = defaultdict(float)
    for e in p.entries:
        if e.node != INSTRUCTION:
            inner[e.instruction] += e.median_us
    return dict(inner)


def _groups(p: Profile) -> list[tuple[str, int, float]]:
    """(operator, how many instructions or nodes, median µs per call summed), slowest first.

    An instruction whose delegate nodes are timed counts only its time outside them, as
    `delegate <id> (outside its nodes)`, so no time is counted twice.
    """
    inner = _inner(p)
    totals: dict[str, list[float]] = defaultdict(list)
    for e in p.entries:
        if e.node == INSTRUCTION and e.instruction in inner:
            totals[f"{e.operator} (outside its nodes)"].append(max(e.median_us - inner[e.instruction], 0.0))
        else:
            totals[e.operator].append(e.median_us)
    rows = [(op, len(ts), sum(ts)) for op, ts in totals.items()]
    return sorted(rows, key=lambda r: -r[2])


def format_table(p: Profile, top: int = 20) -> str:
    """The slowest operators and the slowest instructions and delegate nodes."""
    lines = [
        f"method {p.method!r}: {p.calls} calls, median {p.plain_call_us:,.1f} µs per call "
        f"({p.call_us:,.1f} µs with every step timed)",
        "",
        f"{'operator':<48} {'count':>5} {'µs/call':>10} {'share':>6}",
    ]
    groups = _groups(p)
    whole = sum(r[2] for r in groups) or 1.0
    for op, count, us in groups[:top]:
        lines.append(f"{op[:48]:<48} {count:>5} {us:>10,.1f} {us / whole:>6.1%}")
    lines += ["", f"{'instruction':>11} {'operator / node':<44} {'µs/call':>10}  shapes (inputs -> outputs)"]
    inner = _inner(p)
    rows = [e for e in p.entries if e.node != INSTRUCTION or e.instruction not in inner]
    slowest = sorted(rows, key=lambda e: -e.median_us)[:top]
    for e in slowest:
        where = f"{e.instruction}" if e.node == INSTRUCTION else f"{e.instruction}:{e.node}"
        lines.append(f"{where:>11} {e.name[:44]:<44} {e.median_us:>10,.1f}  {_shapes(e)}")
    return "\n".join(lines)


def _shapes(e: Entry) -> str:
    if not e.inputs and not e.outputs:
        return ""
    return f"{_list(e.inputs)} -> {_list(e.outputs)}"


def _list(shapes: list[list[int]]) -> str:
    return ", ".join("[" + "x".join(map(str, s)) + "]" for s in shapes) or "-"


def chrome_trace(p: Profile, source: str) -> dict[str, Any]:
    """The profile in the Chrome Trace Event Format (JSON object form)."""
    by_key = {(e.instruction, e.node): e for e in p.entries}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": TID, "args": {"name": f"etbuild {source}"}},
        {"name": "thread_name", "ph": "M", "pid": PID, "tid": TID, "args": {"name": f"method {p.method}"}},
    ]
    for c, (start, dur) in enumerate(p.call_spans):
        events.append({"name": f"{p.method} call {c}", "cat": "call", "ph": "X", "ts": round(start, 3),
                       "dur": round(dur, 3), "pid": PID, "tid": TID, "args": {"call": c}})
    for ev in p.events:
        e = by_key[ev.key]
        args: dict[str, Any] = {"instruction": e.instruction}
        if e.node != INSTRUCTION:
            args["node"] = e.name
        else:
            args.update(inputs=e.inputs, outputs=e.outputs)
        cat = "instruction" if e.node == INSTRUCTION else "delegate node"
        events.append({"name": e.operator, "cat": cat, "ph": "X", "ts": round(ev.start_us, 3),
                       "dur": round(ev.dur_us, 3), "pid": PID, "tid": TID, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": source, "method": p.method, "calls": p.calls}}


def write_trace(path: str | Path, p: Profile, source: str) -> None:
    """Write the Chrome trace atomically (compact JSON: a trace has an event per step executed)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(chrome_trace(p, source), separators=(",", ":")))
