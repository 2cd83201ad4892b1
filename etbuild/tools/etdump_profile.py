"""A profile as an ETDump and an ETDump as a profile (torch-free): `etbuild profile --etdump` and `--from`.

Writing: each timed call of `etbuild profile` becomes one `Execute` run, as ExecuTorch's runtime
writes it: a `Method::execute` event spanning the call, an `OPERATOR_CALL` or `DELEGATE_CALL`
event per instruction executed (chain 0, its instruction id) and, inside a delegate, one event
per node executed, named by `delegate_debug_id_str` (`node 3 (XNNConv2d)`). Times are
nanoseconds since the first timed call began.

Reading: the `Execute` runs of an ETDump (one per call) become the same `Profile` our own profile
gives, so the table and the Perfetto trace are the same views. Instruction events are matched to
the method's instructions by id, and refused (`InvalidETDump`) when they do not fit the program:
an id beyond its instructions, a chain other than 0, an `OPERATOR_CALL` that is not a kernel
call or a `DELEGATE_CALL` that is not a delegate call, or a kernel event (`native_call_<op>`)
naming another operator than the instruction's. With the build's debug map (`lowered.debug.json`
beside the `.pte`) a kernel call's row also names the user's module it computes. ExecuTorch's
own nested kernel events and its
load-time run (`Default`) are left out of the view, and so are runs without profile events (the
intermediate outputs' run that `--intermediates` adds).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from etbuild.devtools import etdump_format as ed
from etbuild.devtools import instrument
from etbuild.errors import InvalidETDump, InvalidETRecord, printable
from etbuild.runtime.format import program as fb
from etbuild.tools.profile import INSTRUCTION, Entry, Event, Key, Profile, node_kind

OPERATOR_CALL, DELEGATE_CALL, METHOD_EXECUTE = "OPERATOR_CALL", "DELEGATE_CALL", "Method::execute"
_KERNEL = re.compile(r"native_call_(.+)$")
_INDEX = re.compile(r" #\d+$")  # XNNPACK's operator names end in their index: `… GEMM #3`


def to_etdump(p: Profile, plan: fb.ExecutionPlan) -> ed.ETDump:
    """The profile's timed calls as ExecuTorch's runtime would record them (module docstring)."""
    by_key = {(e.instruction, e.node): e for e in p.entries}
    kinds = [DELEGATE_CALL if isinstance(i.instr_args, fb.DelegateCall) else OPERATOR_CALL
             for i in plan.chains[0].instructions]
    runs = []
    for start, dur in p.call_spans:
        events = [_profile_event(METHOD_EXECUTE, -1, 0, start, dur)]
        for ev in p.events:
            if start <= ev.start_us <= start + dur:
                k, node = ev.key
                if node == INSTRUCTION:
                    events.append(_profile_event(kinds[k], 0, k, ev.start_us, ev.dur_us))
                else:
                    events.append(_profile_event(None, 0, k, ev.start_us, ev.dur_us, by_key[ev.key].name))
        runs.append(ed.RunData("Execute", -1, [], events))
    return ed.ETDump(ed.VERSION, runs)


def _profile_event(name: str | None, chain: int, instruction: int, start_us: float, dur_us: float,
                   node: str | None = None) -> ed.Event:
    start = round(start_us * 1000)
    return ed.Event(ed.ProfileEvent(name, chain, instruction, -1, node, b"", start, start + round(dur_us * 1000)))


@dataclass
class _Calls:
    """What the ETDump's runs say, per call: each key's durations, and every event."""

    spans: list[tuple[float, float]] = field(default_factory=list)
    per_call: list[dict[Key, list[float]]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    nodes: dict[Key, str] = field(default_factory=dict)


def from_etdump(dump: ed.ETDump, plan: fb.ExecutionPlan, source: str, modules: Mapping[int, str] | None = None,
                instruction_modules: Mapping[int, list[str]] | None = None,
                node_modules: Mapping[tuple[int, str], list[str]] | None = None) -> Profile:
    """The `Execute` runs of `dump` as a profile of method `plan` (checked against it: module docstring);
    with `modules` (value index → module path, `module_paths`) each kernel call's row names the
    module of the value it writes; with `instruction_modules` (instruction → module paths, from the
    build's ETRecord: `etrecord_modules`) each instruction's row names its modules, a delegate
    call's too; with `node_modules` ((instruction, node id) → module paths, `etrecord_node_modules`)
    each delegate node's row names the modules of the calls it lowers."""
    runs = [r for r in dump.run_data if r.name == "Execute" and any(e.profile_event for e in r.events)]
    if not runs:
        raise InvalidETDump(f"{source}: no Execute run with profile events: the ETDump times no call of a method")
    checker = _Fit(plan, source)
    starts = [e.profile_event.start_time for r in runs for e in r.events if e.profile_event]
    origin = min(starts, default=0)
    calls = _Calls()
    for r in runs:
        _read_run(r, checker, origin, calls)
    plain = statistics.median(d for _, d in calls.spans) if calls.spans else 0.0
    entries = _entries(plan, calls, modules or {}, instruction_modules or {}, node_modules or {})
    return Profile(plan.name or "", len(runs), plain, plain, entries, calls.events, calls.spans)


def _read_run(run: ed.RunData, checker: _Fit, origin: int, calls: _Calls) -> None:
    current: dict[Key, list[float]] = defaultdict(list)
    span: tuple[float, float] | None = None
    lo, hi = float("inf"), 0.0
    for e in (e.profile_event for e in run.events if e.profile_event):
        start, dur = (e.start_time - origin) / 1000, (e.end_time - e.start_time) / 1000
        if e.name == METHOD_EXECUTE:
            span = (start, dur)
        key = checker.key(e)
        if key is None:
            continue
        lo, hi = min(lo, start), max(hi, start + dur)
        if key[1] != INSTRUCTION:
            calls.nodes[key] = node_name(e)
        current[key].append(dur)
        calls.events.append(Event(key, start, dur))
    calls.spans.append(span or (lo if hi else 0.0, max(hi - lo, 0.0)))
    calls.per_call.append(dict(current))


def node_name(e: ed.ProfileEvent) -> str:
    """A delegate node's name: its string id, or `node <int id>`."""
    return e.delegate_debug_id_str or f"node {e.delegate_debug_id_int}"


class _Fit:
    """Maps an ETDump's profile events to (instruction, node) keys of one method; refuses what does not fit."""

    def __init__(self, plan: fb.ExecutionPlan, source: str) -> None:
        self.plan, self.source = plan, source
        self.instructions = plan.chains[0].instructions if plan.chains else []
        self.node_ids: dict[tuple[int, str], int] = {}

    def key(self, e: ed.ProfileEvent) -> Key | None:
        """The event's key; None for events that are not an instruction's or a node's."""
        if e.chain_index == -1 or e.instruction_id == -1:
            return None
        k = e.instruction_id
        if e.chain_index != 0 or not 0 <= k < len(self.instructions):
            self._refuse(e, f"instruction {k} of chain {e.chain_index}, but the method has one chain of "
                            f"{len(self.instructions)} instructions")
        args = self.instructions[k].instr_args
        if e.delegate_debug_id_int != -1 or e.delegate_debug_id_str:
            if not isinstance(args, fb.DelegateCall):
                self._refuse(e, f"a delegate node at instruction {k}, which is {self._what(k)}")
            return k, self.node_ids.setdefault((k, node_name(e)), len(self.node_ids))
        wanted = {OPERATOR_CALL: fb.KernelCall, DELEGATE_CALL: fb.DelegateCall}.get(e.name or "")
        if wanted is not None and not isinstance(args, wanted):
            self._refuse(e, f"{e.name} at instruction {k}, which is {self._what(k)}")
        kernel = _KERNEL.match(e.name or "")
        if kernel and not self._same_operator(k, kernel.group(1)):
            self._refuse(e, f"kernel {kernel.group(1)} at instruction {k}, which is {self._what(k)}")
        return (k, INSTRUCTION) if wanted is not None else None

    def _same_operator(self, k: int, name: str) -> bool:
        """Whether `addmm.out` (ExecuTorch's kernel event name) is instruction k's operator."""
        label = instrument.label(self.plan, self.instructions[k])
        return label.split("::", 1)[-1] == name or label == name

    def _what(self, k: int) -> str:
        return instrument.label(self.plan, self.instructions[k])

    def _refuse(self, e: ed.ProfileEvent, problem: str) -> None:
        raise InvalidETDump(f"{self.source}: an event ({printable(e.name or node_name(e))}) records {problem}: "
                            f"the ETDump is not of this program's method {printable(self.plan.name or '')!r}")


def _entries(plan: fb.ExecutionPlan, calls: _Calls, modules: Mapping[int, str],
             by_instruction: Mapping[int, list[str]], by_node: Mapping[tuple[int, str], list[str]]) -> list[Entry]:
    instructions = plan.chains[0].instructions
    entries = []
    for key in sorted({k for call in calls.per_call for k in call}):
        totals = [sum(call.get(key, [])) for call in calls.per_call]
        runs = [len(call.get(key, [])) for call in calls.per_call]
        k, node = key
        if node == INSTRUCTION:
            name = group = instrument.label(plan, instructions[k])
            paths = by_instruction.get(k) or sorted({modules[i] for i in _results(plan, instructions[k])
                                                     if modules.get(i)})
            name += f" ({module_summary(paths)})" if paths else ""
        else:
            name, group = calls.nodes[key], node_group(plan, instructions[k], calls.nodes[key])
            paths = by_node.get((k, name))
            name += f" ({module_summary(paths)})" if paths else ""
        entries.append(Entry(k, node, name, group, statistics.median(totals), statistics.median(runs),
                             *_declared_shapes(plan, instructions[k])))
    return entries


def module_summary(paths: list[str], most: int = 3) -> str:
    """`0.attention, 0.ffn`; beyond `most` paths the first and last and how many (a delegate's partition)."""
    if len(paths) <= most:
        return ", ".join(paths)
    return f"{paths[0]} … {paths[-1]}: {len(paths)} modules"


def node_group(plan: fb.ExecutionPlan, ins: fb.Instruction, name: str) -> str:
    """`XnnpackBackend:XNNConv2d` for our node names, `XnnpackBackend:Convolution (NHWC, F32)` for XNNPACK's own."""
    backend = instrument.label(plan, ins).removeprefix("delegate ")
    return f"{backend}:{node_kind(name) or _INDEX.sub('', name)}"


def _results(plan: fb.ExecutionPlan, ins: fb.Instruction) -> list[int]:
    """The values a kernel call writes (a list result: its items)."""
    a = ins.instr_args
    return _items(plan, a.args[-1]) if isinstance(a, fb.KernelCall) and a.args else []


def _items(plan: fb.ExecutionPlan, i: int) -> list[int]:
    v = plan.values[i].val if 0 <= i < len(plan.values) else None
    return [j for j in v.items if 0 <= j < len(plan.values)] if isinstance(v, fb.TensorList) else [i]


def _declared_shapes(plan: fb.ExecutionPlan, ins: fb.Instruction) -> tuple[list[list[int]], list[list[int]]]:
    """The shapes the program declares (upper bounds when dynamic) of a kernel call's inputs and results,
    as our profile lists them (a list result: its items)."""
    a = ins.instr_args
    if not isinstance(a, fb.KernelCall) or not a.args:
        return [], []

    def sizes(indices: list[int]) -> list[list[int]]:
        vals = [plan.values[i].val for i in indices]
        return [list(v.sizes) for v in vals if isinstance(v, fb.Tensor)]

    out = _results(plan, ins)
    return sizes([i for j in a.args for i in _items(plan, j) if i not in out]), sizes(out)


def module_paths(debug_map: Path, method: str) -> dict[int, str]:
    """Value index → the user's module path (`encoder.layer.3.attention`) from the lower stage's
    `lowered.debug.json` (etbuild.lowering.debug_map, read here without torch); {} when the file
    is absent or not one."""
    try:
        values = json.loads(debug_map.read_text())["methods"][method]
        return {int(i): str(v["module"]) for i, v in values.items() if v.get("module")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def etrecord_modules(etrecord: Path, plan: fb.ExecutionPlan) -> dict[int, list[str]] | None:
    """Instruction → module paths from the build's ETRecord (etbuild.devtools.etrecord_format), None when
    there is no file; InvalidETRecord when it is malformed, foreign, or of another program."""
    from etbuild.devtools.etrecord_format import instruction_modules, read_etrecord

    if not etrecord.exists():
        return None
    record = read_etrecord(etrecord).get(plan.name or "")
    if record is None:
        raise InvalidETRecord(f"{etrecord}: the ETRecord records no method {printable(plan.name or '')!r}")
    count = len(plan.chains[0].instructions) if plan.chains else 0
    return instruction_modules(record, count, str(etrecord))


def etrecord_node_modules(etrecord: Path, plan: fb.ExecutionPlan) -> dict[tuple[int, str], list[str]]:
    """(Delegate call's instruction, node id) → module paths from the build's ETRecord's delegate
    map; {} when there is no file or it records no such method (etrecord_modules says why)."""
    from etbuild.devtools.etrecord_format import delegate_node_modules, read_etrecord

    if not etrecord.exists():
        return {}
    record = read_etrecord(etrecord).get(plan.name or "")
    return {} if record is None else delegate_node_modules(record, str(etrecord))
