"""Compile a decoded delegate graph once: checked values, one Op per node, order, externals, views.

A node that repeats an earlier one (same kind, inputs and parameters, its output on the same grid and not
external) is not built: its readers read the earlier node's output (export_llm's q, k and v products each
quantize the same normalised row with a Convert of their own).

The result (`Compiled`) is what a delegate handle binds to arrays: the ops in execution order
with each output's rounding (grid and fused clamp), the external inputs and outputs by
argument position, and for every computed value the value whose storage it shares (a
reshape or a copy without rounding is a view of its input).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.format.nodes import CLAMPED
from etbuild.backends.xnnpack.runtime.grids import CodesBank, RowCodes, Snap
from etbuild.backends.xnnpack.runtime.ops import BUILDERS, Context, Op, epilogue, softmax, transposes
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.errors import InvalidProgram


@dataclass
class Compiled:
    """A checked graph ready to bind."""

    values: dict[int, Value]
    ops: list[Op]
    snaps: list[list[Snap | None]]  # per op, per output: the in-place rounding (None: nothing to do)
    inputs: list[Value]  # by argument position
    outputs: list[Value]
    positions: dict[int, int] = field(default_factory=dict)  # external value id -> argument position
    root: dict[int, int] = field(default_factory=dict)  # value id -> id of the value whose storage it uses

    @property
    def arg_count(self) -> int:
        return len(self.inputs) + len(self.outputs)


def compile_graph(graph: g.XNNGraph, values: dict[int, Value]) -> Compiled:
    """Build every node's Op, check the graph's order and externals, and find the views."""
    built = [_build(xnode, k, values) for k, xnode in distinct_nodes(graph.xnodes, values)]
    ops = [op for op, _ in built]
    codes = _row_codes(ops, values)
    snaps = [[_snap(op, values[o], values, lo, hi, codes.get(o)) for o in op.outputs] for op, (lo, hi) in built]
    _hand_codes(ops, snaps, codes)
    ops, snaps = _fuse_epilogues(ops, snaps, values)
    ops, snaps = transposes.fold(ops, snaps, values)  # transposes composed or written by their products
    _check_order(ops, values)
    inputs, outputs, positions = _externals(graph, values)
    compiled = Compiled(values, ops, snaps, inputs, outputs, positions)
    compiled.root = _roots(compiled)
    return compiled


def distinct_nodes(xnodes: list[g.XNode], values: dict[int, Value]) -> list[tuple[int, g.XNode]]:
    """The nodes (with their index) but those repeating an earlier node, later inputs renamed to the kept outputs.

    Values are written once, so two nodes of one kind reading the same inputs with the same parameters compute
    the same numbers; a repeat is dropped only when its output and the kept one are computed, not external,
    and of the same datatype, dims and grid.
    """
    writes = Counter(v for x in xnodes if x.node is not None for v in _outputs(x.node))
    alias: dict[int, int] = {}
    first: dict[tuple[object, ...], int] = {}
    kept: list[tuple[int, g.XNode]] = []
    for k, xnode in enumerate(xnodes):
        if alias and xnode.node is not None:
            xnode = dataclasses.replace(xnode, node=_renamed(xnode.node, alias))
        key = _node_key(xnode, values)
        if key is not None and writes[xnode.node.output_id] == 1:  # type: ignore[union-attr]
            out = xnode.node.output_id  # type: ignore[union-attr]
            earlier = first.setdefault(key, out)
            if earlier != out:
                alias[out] = earlier
                continue
        kept.append((k, xnode))
    return kept


def _node_key(xnode: g.XNode, values: dict[int, Value]) -> tuple[object, ...] | None:
    """What makes a node's output what it is: kind, fields but the output id, clamp, output value; None when
    the node may not be merged (no single output id, or an output that is external, constant or unknown)."""
    body = xnode.node
    out = values.get(getattr(body, "output_id", None))  # type: ignore[arg-type]
    if body is None or out is None or out.external_id is not None or out.is_constant:
        return None
    fields = tuple((f.name, _frozen(getattr(body, f.name))) for f in dataclasses.fields(body) if f.name != "output_id")
    mm = xnode.output_min_max
    clamp = None if mm is None else (mm.output_min, mm.output_max)
    return type(body).__name__, fields, clamp, out.datatype, out.dims, out.grid, out.flags


def _outputs(body: g.NodeBody) -> list[int]:
    return [getattr(body, f.name) for f in dataclasses.fields(body) if f.name.startswith("output")]


def _frozen(field_value: object) -> object:
    return tuple(field_value) if isinstance(field_value, list) else field_value


def _renamed(body: g.NodeBody, alias: dict[int, int]) -> g.NodeBody:
    """The node body with each input id that names a dropped output replaced by the kept one."""
    changes = {f.name: alias[v] for f in dataclasses.fields(body)
               if f.name.endswith("_id") and not f.name.startswith("output")
               and (v := getattr(body, f.name)) in alias}
    return dataclasses.replace(body, **changes) if changes else body


def _build(xnode: g.XNode, k: int, values: dict[int, Value]) -> tuple[Op, tuple[float, float]]:
    body = xnode.node
    member = type(body).__name__ if body is not None else "none"
    where = f"node {k} ({member})"
    builder = BUILDERS.get(member)
    if builder is None:
        raise InvalidProgram(f"{where}: this runtime has no {member} node (ExecuTorch's XNNPACK runtime neither)"
                             if body is not None else f"{where}: the node has no body")
    op = builder(body, Context(values, where))
    op.name = where
    lo, hi = _bounds(xnode, member, where)
    if (lo, hi) != (-math.inf, math.inf) and all(values[o].grid.snapper() is None for o in op.outputs) \
            and op.fuse_clamp(lo, hi):
        lo, hi = -math.inf, math.inf  # the op clamps its output itself
    return op, (lo, hi)


def _bounds(xnode: g.XNode, member: str, where: str) -> tuple[float, float]:
    """The fused clamp of a node that honours output_min_max; (-inf, inf) otherwise."""
    mm = xnode.output_min_max
    if mm is None or member not in CLAMPED:
        return -math.inf, math.inf
    if math.isnan(mm.output_min) or math.isnan(mm.output_max) or mm.output_min > mm.output_max:
        raise InvalidProgram(f"{where}: output_min {mm.output_min} exceeds output_max {mm.output_max}")
    return mm.output_min, mm.output_max


def _snap(op: Op, out: Value, values: dict[int, Value], lo: float, hi: float,
          codes: RowCodes | None = None) -> Snap | None:
    unclamped = lo == -math.inf and hi == math.inf
    if op.same_grid and unclamped and all(values[i].grid == out.grid for i in op.inputs):
        return None
    if out.working.kind != "f":
        return None
    return out.grid.snapper(lo, hi, codes)


def _row_codes(ops: list[Op], values: dict[int, Value]) -> dict[int, RowCodes]:
    """A RowCodes for each computed qdint8 value (rows of one dim) that an op can read as codes, all its
    readers agreeing on the row length. Values whose codes live apart in time (from the node writing the value to
    its last codes reader) share a bank for their codes of several rows: a prefill's codes take the largest such
    value's bytes, not the sum."""
    lengths: dict[int, set[int]] = {}
    span: dict[int, list[int]] = {}
    writer = {o: k for k, op in enumerate(ops) for o in op.outputs}
    for k, op in enumerate(ops):
        v = values.get(op.codes_input) if op.codes_input is not None else None
        if v is not None and v.grid.datatype == DT.QDINT8 and v.grid.row_dims == 1 and not v.is_input:
            lengths.setdefault(v.id, set()).add(op.codes_length)
            span.setdefault(v.id, [writer.get(v.id, k), k])[1] = k
    banks: list[tuple[int, CodesBank]] = []  # (the step its last reader runs at, the bank)
    codes: dict[int, RowCodes] = {}
    for vid in sorted((v for v, k in lengths.items() if len(k) == 1), key=lambda v: span[v][0]):
        first, last = span[vid]
        free = next((i for i, (end, _) in enumerate(banks) if end < first), None)
        bank = CodesBank() if free is None else banks[free][1]
        if free is None:
            banks.append((last, bank))
        else:
            banks[free] = (last, bank)
        codes[vid] = RowCodes.of_length(lengths[vid].pop(), bank)
    return codes


def _hand_codes(ops: list[Op], snaps: list[list[Snap | None]], codes: dict[int, RowCodes]) -> None:
    """Each codes reader gets its input's RowCodes when a node's rounding of that value fills them (a value
    that is a view of another, not rounded itself, keeps no codes)."""
    rounded = {o for op, s in zip(ops, snaps) for o, snap in zip(op.outputs, s) if snap is not None}
    for op in ops:
        if op.codes_input in codes and op.codes_input in rounded:
            op.take_codes(codes[op.codes_input])


FUSERS = (epilogue.fuse, softmax.fuse_scale)


def _fuse_epilogues(ops: list[Op], snaps: list[list[Snap | None]], values: dict[int, Value]
                    ) -> tuple[list[Op], list[list[Snap | None]]]:
    """Each node whose one output only the next node reads, neither output rounded, joined with that node where a
    fuser has a fused form: a FullyConnected and its Gelu or residual Add (ops/epilogue.py), a Multiply by a scalar
    and its Softmax (ops/softmax.py)."""
    readers = Counter(i for op in ops for i in op.inputs)
    fused_ops: list[Op] = []
    fused_snaps: list[list[Snap | None]] = []
    k = 0
    while k < len(ops):
        op, joined = ops[k], None
        if k + 1 < len(ops) and len(op.outputs) == 1 and not any(snaps[k]) and not any(snaps[k + 1]):
            mid = op.outputs[0]
            if readers[mid] == 1 and mid in ops[k + 1].inputs and not values[mid].is_output:
                joined = next((j for j in (f(op, ops[k + 1], values) for f in FUSERS) if j is not None), None)
        fused_ops.append(joined or op)
        fused_snaps.append(snaps[k + 1] if joined else snaps[k])
        k += 2 if joined else 1
    return fused_ops, fused_snaps


def _check_order(ops: list[Op], values: dict[int, Value]) -> None:
    """Each node reads values that exist before it and writes values nothing else writes."""
    ready = {v.id for v in values.values() if v.is_constant or v.is_input}
    for op in ops:
        for i in op.inputs:
            if i not in ready:
                raise InvalidProgram(f"{op.name}: input value {i} is not computed before it")
        for o in op.outputs:
            v = values[o]
            if o in ready or v.is_constant:
                raise InvalidProgram(f"{op.name}: output {v.describe()} is an input, a constant or computed twice")
            ready.add(o)
    for v in values.values():
        if v.is_output and v.id not in ready:
            raise InvalidProgram(f"{v.describe()} is an external output that no node computes")


def _externals(graph: g.XNNGraph, values: dict[int, Value]) -> tuple[list[Value], list[Value], dict[int, int]]:
    """External values by argument position (their external id): positions must be 0..n-1."""
    externals = sorted((v for v in values.values() if v.external_id is not None), key=lambda v: v.external_id)
    if [v.external_id for v in externals] != list(range(len(externals))):
        ids = [v.external_id for v in externals]
        raise InvalidProgram(f"external ids {ids} are not 0..{len(externals) - 1}")
    inputs = [v for v in externals if v.is_input]
    outputs = [v for v in externals if v.is_output]
    for listed, found, what in ((graph.input_ids, inputs, "input_ids"), (graph.output_ids, outputs, "output_ids")):
        if sorted(listed) != sorted(v.id for v in found):
            raise InvalidProgram(f"{what} {list(listed)} do not match the values flagged external")
    return inputs, outputs, {v.id: v.external_id for v in externals}


def _roots(compiled: Compiled) -> dict[int, int]:
    """For each computed value, the value whose storage holds it: itself, or the input of a view op."""
    root: dict[int, int] = {}
    values = compiled.values
    for op, snaps in zip(compiled.ops, compiled.snaps):
        for o in op.outputs:
            root[o] = o
        if op.view and snaps[0] is None and not values[op.outputs[0]].is_output:
            src = op.inputs[0]
            if values[src].working == values[op.outputs[0]].working:
                root[op.outputs[0]] = root.get(src, src)
    return root
