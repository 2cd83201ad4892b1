"""`etbuild profile`: where a method's time goes, per instruction and per delegate node (torch-free).

The method is loaded once and called `calls` times after a warm-up call. Each instruction's
step is wrapped from outside (etbuild.devtools.instrument) to record its wall time; so is each node of
a delegate whose handle exposes its bound steps as `steps` with their names in `step_names`
(the XNNPACK runtime does): the handle's class is swapped for a subclass whose `steps` are
re-wrapped whenever the handle binds them again (a call with new arrays), so nothing in the
runtime or the backend changes and neither the normal path nor a trimmed runtime carries the
profiler. A delegate without those attributes is timed as one instruction.

An instruction's time in one call is the sum over its executions (loops run it several times);
each figure reported is the median over the calls. The instrumented calls run slower than plain
ones by the wrappers' cost (about a microsecond a step); the plain median is measured first and
reported beside them.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from etbuild.devtools import instrument
from etbuild.runtime.format import program as fb
from etbuild.runtime.program import Method

Key = tuple[int, int]  # (instruction, delegate node or -1 for the instruction itself)
INSTRUCTION = -1
_NODE = re.compile(r"node \d+(?:-\d+)? \((\w+)\)(?: \+ node \d+ \((\w+)\))?$")  # a node, two bound as one
# step, or a run of elementwise nodes (`node 0-3 (Elementwise)`)


@dataclass(frozen=True)
class Entry:
    """One instruction or delegate node: what it is, and its median time per call."""

    instruction: int
    node: int  # the delegate node's position in its bound steps, or -1 for an instruction
    name: str  # `aten::convolution.out`, or `node 3 (XNNConv2d)` inside a delegate
    operator: str  # the group it counts in: the operator, or `XnnpackBackend:XNNConv2d`
    median_us: float
    runs: float  # executions per call (median)
    inputs: list[list[int]] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class Event:
    """One execution of a step, for the trace: microseconds since the first timed call began."""

    key: Key
    start_us: float
    dur_us: float


@dataclass(frozen=True)
class Profile:
    """A method's profile: entries, the calls' medians and every timed execution."""

    method: str
    calls: int
    plain_call_us: float  # median of plain calls (no wrappers)
    call_us: float  # median of the instrumented calls
    entries: list[Entry]
    events: list[Event]
    call_spans: list[tuple[float, float]]  # (start, duration) of each timed call, µs


class Recorder:
    """Wall times of the steps of the current call, and every execution as an event."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.current: dict[Key, list[float]] = {}
        self.per_call: list[dict[Key, list[float]]] = []
        self.events: list[Event] = []

    def wrap(self, key: Key, step: instrument.Step) -> instrument.Step:
        clock, events, origin = time.perf_counter, self.events, self.origin

        def timed() -> Any:
            start = clock()
            result = step()
            end = clock()
            self.current.setdefault(key, []).append(end - start)
            events.append(Event(key, (start - origin) * 1e6, (end - start) * 1e6))
            return result

        return timed

    def end_call(self) -> None:
        self.per_call.append(self.current)
        self.current = {}


def profile_method(method: Method, inputs: list[Any], calls: int = 10) -> Profile:
    """Call the method once to warm up, `calls` times plainly, then `calls` times with every step timed."""
    calls = max(1, calls)
    method(*inputs)
    plain = [_timed_call(method, inputs) for _ in range(calls)]
    rec = Recorder()
    instrument.wrap_steps(method, lambda k, step: rec.wrap((k, INSTRUCTION), step))
    names = _watch_delegates(method, rec)
    spans = []
    for _ in range(calls):
        start = time.perf_counter()
        method(*inputs)
        spans.append(((start - rec.origin) * 1e6, (time.perf_counter() - start) * 1e6))
        rec.end_call()
    return Profile(
        method.name, calls, statistics.median(plain) * 1e6, statistics.median(s[1] for s in spans),
        _entries(method, rec, names), rec.events, spans,
    )


def _timed_call(method: Method, inputs: list[Any]) -> float:
    start = time.perf_counter()
    method(*inputs)
    return time.perf_counter() - start


def _entries(method: Method, rec: Recorder, names: dict[Key, tuple[str, str]]) -> list[Entry]:
    plan, objects = method.plan, method.values.objects
    ins = instrument.instructions(method)
    keys = sorted({k for call in rec.per_call for k in call})
    entries = []
    for key in keys:
        totals = [sum(call.get(key, [])) for call in rec.per_call]
        runs = [len(call.get(key, [])) for call in rec.per_call]
        k, node = key
        if node == INSTRUCTION:
            name = group = instrument.label(plan, ins[k])
            shapes = (instrument.shapes(objects, instrument.read(method, ins[k])),
                      instrument.shapes(objects, instrument.written(method, ins[k])))
        else:
            (name, group), shapes = names[key], ([], [])
        entries.append(Entry(k, node, name, group, statistics.median(totals) * 1e6, statistics.median(runs), *shapes))
    return entries


def _watch_delegates(method: Method, rec: Recorder) -> dict[Key, tuple[str, str]]:
    """Time the nodes of every delegate that exposes its bound steps; their (name, group) by key."""
    names: dict[Key, tuple[str, str]] = {}
    for k, ins in enumerate(instrument.instructions(method)):
        a = ins.instr_args
        handle = method.delegates.get(a.delegate_index) if isinstance(a, fb.DelegateCall) else None
        if handle is None or not hasattr(handle, "step_names") or not hasattr(handle, "__dict__"):
            continue
        backend = method.plan.delegates[a.delegate_index].id or "delegate"
        _rewrap_on_bind(handle, _node_wrapper(rec, names, handle, k, backend))
    return names


def _node_wrapper(rec: Recorder, names: dict[Key, tuple[str, str]], handle: Any, k: int, backend: str
                  ) -> Callable[[int, instrument.Step], instrument.Step]:
    """What wraps node j of the delegate called by instruction k, noting the node's name and group."""

    def wrap(j: int, step: instrument.Step) -> instrument.Step:
        step_names = handle.step_names
        name = step_names[j] if j < len(step_names) else f"step {j}"
        names[(k, j)] = (name, f"{backend}:{node_kind(name) or name.split(' ', 1)[0]}")
        return rec.wrap((k, j), step)

    return wrap


def node_kind(name: str) -> str | None:
    """`Conv2d` for our step `node 3 (Conv2d)`, `FullyConnected+Gelu` for two nodes bound as one step,
    `Elementwise` for a run `node 0-3 (Elementwise)`; None for another name."""
    m = _NODE.match(name)
    return "+".join(filter(None, m.groups())) if m else None


def _rewrap_on_bind(handle: Any, wrap: Callable[[int, instrument.Step], instrument.Step]) -> None:
    """Make `handle.steps` read as the wrapped steps, re-wrapped whenever the handle assigns new ones."""
    base = type(handle)

    def get(self: Any) -> list[instrument.Step]:
        d = self.__dict__
        if d.get("_profiled_from") is not d["_raw_steps"]:
            d["_profiled"] = [wrap(j, s) for j, s in enumerate(d["_raw_steps"])]
            d["_profiled_from"] = d["_raw_steps"]
        return d["_profiled"]

    def put(self: Any, steps: list[instrument.Step]) -> None:
        self.__dict__["_raw_steps"] = steps

    watched = type(f"Profiled{base.__name__}", (base,), {"steps": property(get, put)})
    raw = handle.__dict__.pop("steps")
    handle.__class__ = watched
    handle.steps = raw
