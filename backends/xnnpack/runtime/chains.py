"""Runs of elementwise nodes bound as one step: one compiled call for the run instead of one call per node.

A decode step of a language model runs a few hundred small nodes (RMSNorm's add, rsqrt and multiplies, RoPE's
multiplies, adds and subtracts, SwiGLU's sigmoid and multiplies, the residual adds), each a numpy call that costs
more than its work on a row of 512 numbers. Consecutive nodes of the kinds `chain_loops` computes (Add, Subtract,
Multiply, Divide, Square, Negate; ReciprocalSquareRoot, Sigmoid, Sin and Cos in XNNPACK's bits) whose outputs
need no rounding are bound as one step running `chain_loops.run` over a table of the nodes, their arrays given by
address. The nodes still run one after another, each writing its own output array, with the operations the
single nodes run, so results and memory are what the nodes bound one by one give. It applies where
`loops.exact()` is on (numba, AVX512F) and every array of the run is float32, its output contiguous and each
input whole, one number, or a contiguous row the output repeats (a RoPE table against its heads).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from etbuild.backends.xnnpack.runtime import loops
from etbuild.backends.xnnpack.runtime.ops import elementwise, layout
from etbuild.backends.xnnpack.runtime.ops.base import Op
from etbuild.runtime.steps import Step

MIN_RUN = 2  # a run of one node keeps its own step


@dataclass
class Bound:
    """One node as bound by the delegate: its op, arrays, step, name and the roundings after it."""

    op: Op
    ins: Sequence[np.ndarray]
    outs: Sequence[np.ndarray]
    step: Step
    name: str
    rounded: list[tuple[Any, np.ndarray]]  # (rounding, array) of its outputs that round: none for a plain node


def module() -> ModuleType | None:
    """chain_loops, or None without numba's loops or AVX512F (then nothing is joined)."""
    return _module() if loops.exact() is not None else None


@functools.cache
def _module() -> ModuleType | None:
    try:
        return importlib.import_module("etbuild.backends.xnnpack.runtime.chain_loops")
    except ImportError:
        return None


def join(nodes: list[Bound]) -> tuple[list[Step], list[str]]:
    """The steps and names of the nodes, each run of at least MIN_RUN joinable nodes as one step."""
    fused = module()
    steps: list[Step] = []
    names: list[str] = []
    run: list[tuple[Bound, list[list[object]]]] = []

    def flush() -> None:
        if len(run) >= MIN_RUN or any(r[0] == fused.CONVERT_QD8 for _, rows in run for r in rows):  # 2 calls -> 1
            steps.append(_step(fused, run))
            names.append(_name([b.name for b, _ in run]))
        else:
            steps.extend(b.step for b, _ in run)
            names.extend(b.name for b, _ in run)
        run.clear()

    for b in nodes:
        rows = _rows(fused, b) if fused is not None else None
        if rows is None:
            flush()
            steps.append(b.step)
            names.append(b.name)
        else:
            run.append((b, rows))
    flush()
    return steps, names


def _name(names: list[str]) -> str:
    """`node 0-3 (Elementwise)` for nodes 0 to 3 (what the profiler groups by); a lone node keeps its name."""
    if len(names) == 1:
        return names[0]
    first, last = names[0].split()[1], names[-1].split()[1]
    return f"node {first}-{last} (Elementwise)"


def _rows(fused: ModuleType, b: Bound) -> list[list[object]] | None:
    """The node's rows of the table, arrays in place of indices (see chain_loops), or None when it cannot join."""
    op, out = b.op, b.outs[0] if len(b.outs) == 1 else None
    if out is None or out.dtype != np.float32 or not out.flags.c_contiguous or out.size == 0:
        return None
    if b.rounded:
        row = _convert_row(fused, b, out)
        return None if row is None else [row]
    if isinstance(op, (layout.StaticSlice, layout.Concatenate, layout.StaticReshape, elementwise.Move)):
        return _copy_rows(fused, op, b.ins, out)
    row = _row(fused, b, out)
    return None if row is None else [row]


def _row(fused: ModuleType, b: Bound, out: np.ndarray) -> list[object] | None:
    """The row of an elementwise node, or None when it cannot join."""
    op, n = b.op, out.size
    if isinstance(op, elementwise.Binary):
        kind = {np.add: fused.ADD, np.subtract: fused.SUBTRACT, np.multiply: fused.MULTIPLY,
                np.divide: fused.DIVIDE}.get(op.fn)  # type: ignore[call-overload]
        a, b_ = (_mode(fused, x, out.shape) for x in b.ins)
        if kind is None or a is None or b_ is None:
            return None
        periods = {len(x) for x, m in (a, b_) if m == fused.PERIODIC}
        if len(periods) > 1:
            return None
        period = periods.pop() if periods else n
        return [kind, out, n, a[0], a[1], a[0].size, b_[0], b_[1], b_[0].size, period]
    unary = {elementwise._rsqrt: fused.RSQRT, elementwise._sigmoid: fused.SIGMOID, np.square: fused.SQUARE,
             np.negative: fused.NEGATE, np.sin: fused.SIN, np.cos: fused.COS}
    if type(op) is elementwise.Unary and op.fn in unary:  # type: ignore[attr-defined]
        x = _mode(fused, b.ins[0], out.shape)
        if x is None or x[1] != fused.FULL:
            return None
        return [unary[op.fn], out, n, x[0], x[1], n, x[0], x[1], n, n]  # type: ignore[attr-defined]
    return None


def _convert_row(fused: ModuleType, b: Bound, out: np.ndarray) -> list[object] | None:
    """The row of a Convert (or Copy) onto a qdint8 row that keeps its codes for the products reading them (the rounding
    bound as compiled.snap_row_qdint8_codes on the whole output), else None."""
    if not (isinstance(b.op, elementwise.Move) and len(b.rounded) == 1):  # Convert or Copy: a copy, then rounded
        return None
    snap, array = b.rounded[0]
    bind = getattr(snap, "bind", None)
    bound = bind(array) if bind is not None and array is out else None
    x = _mode(fused, b.ins[0], out.shape)
    if not isinstance(bound, functools.partial) or bound.func is not fused.compiled.snap_row_qdint8_codes \
            or x is None or x[1] != fused.FULL:
        return None
    _, codes, params = bound.args
    return [fused.CONVERT_QD8, out, out.size, x[0], x[1], out.size, codes, params, 0, out.size]


def _copy_rows(fused: ModuleType, op: Op, ins: Sequence[np.ndarray], out: np.ndarray) -> list[list[object]] | None:
    """A slice, a concatenation or a reshape's (or Copy's) copy as COPY rows (chain_loops.WIDTH): one per input, or
    None unless every input is float32, C-contiguous and apart from out, and a slice cuts at most one dim."""
    if any(x.dtype != np.float32 or not x.flags.c_contiguous or np.may_share_memory(x, out) for x in ins):
        return None
    x = ins[0]
    if isinstance(op, layout.Concatenate):
        axis, at, rows = op.axis, 0, []
        inner = math.prod(out.shape[axis + 1:])
        for part in ins:
            width = part.shape[axis] * inner
            rows.append(_copy(fused, out, part, 0, width, math.prod(out.shape[:axis]), width, at,
                              out.shape[axis] * inner))
            at += width
        return rows
    if isinstance(op, layout.StaticSlice):
        cut = [(d, a, z) for d, (a, z) in enumerate(op._bounds(x.shape)) if (a, z) != (0, x.shape[d])]
        if len(cut) > 1:
            return None
        if cut:
            (d, start, stop), inner = cut[0], math.prod(x.shape[cut[0][0] + 1:])
            return [_copy(fused, out, x, start * inner, (stop - start) * inner, math.prod(x.shape[:d]),
                          x.shape[d] * inner, 0, (stop - start) * inner)]
    if x.size != out.size:
        return None
    return [_copy(fused, out, x, 0, x.size, 1, 0, 0, 0)]


def _copy(fused: ModuleType, out: np.ndarray, x: np.ndarray, source: int, width: int, count: int, stride: int,
          target: int, step: int) -> list[object]:
    return [fused.COPY, out, out.size, x, source, x.size, width, count, stride, target, step]


def _mode(fused: ModuleType, x: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, int] | None:
    """x as a flat float32 array and how the output reads it: whole, one number, or a row repeated."""
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    flat = x.reshape(-1)
    size = int(np.prod(shape))
    if x.size == size and _trimmed(x.shape) == _trimmed(shape):
        return flat, fused.FULL
    if x.size == 1:
        return flat, fused.SCALAR
    tail = _trimmed(x.shape)
    if tail and len(tail) <= len(shape) and tuple(shape[len(shape) - len(tail):]) == tail:
        return flat, fused.PERIODIC
    return None


def _trimmed(shape: Sequence[int]) -> tuple[int, ...]:
    """The shape without its leading ones."""
    k = 0
    while k < len(shape) and shape[k] == 1:
        k += 1
    return tuple(shape[k:])


def _step(fused: ModuleType, run: list[tuple[Bound, list[list[object]]]]) -> Step:
    """One step running the rows of a run: arrays numbered in order of appearance, held by the step."""
    arrays: list[np.ndarray] = []
    index: dict[int, int] = {}

    def number(x: np.ndarray) -> int:
        address = x.ctypes.data
        if address not in index:
            index[address] = len(arrays)
            arrays.append(x)
        return index[address]

    table = [row for _, rows in run for row in rows]
    code = np.zeros((len(table), fused.WIDTH), np.int64)
    for r, row in enumerate(table):
        code[r, : len(row)] = [number(v) if isinstance(v, np.ndarray) else int(v) for v in row]  # type: ignore[call-overload]
    addresses = np.array([x.ctypes.data for x in arrays], np.int64)
    longest = max(int(row[2]) for row in table)  # type: ignore[call-overload]
    scratch = np.empty(longest, np.float32)
    step = functools.partial(fused.run, code, addresses, fused.exact.EXP2_TABLE, scratch)
    step.held = arrays  # type: ignore[attr-defined]  # the arrays stay alive while the step does
    return step
