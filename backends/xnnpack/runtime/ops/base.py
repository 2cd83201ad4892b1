"""What every compiled node is: an `Op` with shape inference and binding, built once per node.

A builder (registered with `@builds("Add", ...)` under the node's union member names) turns
one XNode into an Op at init: it checks ids, datatypes and parameters and pre-packs
constant operands. The planner then calls `infer` with the input shapes (at init with the
blob's shapes, again whenever the caller's input shapes change) and `bind` with arrays for
the inputs and outputs: `bind` returns the step that computes the outputs from the inputs,
with everything it needs (views, scratch buffers, packed weights) captured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime.grids import RowCodes
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.errors import InternalError, InvalidProgram
from etbuild.runtime.steps import Step

Shape = tuple[int, ...]


class Op:
    """One compiled node. Subclasses set `inputs` and `outputs` (value ids) and implement infer/bind.

    `same_grid` says the op only moves or copies numbers (its output needs no rounding when
    input and output share a grid); `view` says its output may share the input's storage;
    `special` says ordinary inputs can give IEEE special results (x/0, log 0, exp overflow),
    which XNNPACK returns silently: the delegate then runs with numpy's warnings off.
    `codes_input` names an input (value id) whose qdint8 codes the op can read for a single row of
    `codes_length` numbers; the compiled graph then hands it the value's RowCodes (`take_codes`).
    """

    name = ""
    same_grid = False
    view = False
    special = False
    codes_input: int | None = None
    codes_length = 0

    def __init__(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        """The output shapes for these input shapes; InvalidProgram when they do not fit the node."""
        raise NotImplementedError

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        """The step computing outs from ins (contiguous arrays of the inferred shapes)."""
        raise NotImplementedError

    def take_codes(self, codes: RowCodes) -> None:
        """Read `codes_input` as the codes the value's rounding leaves in `codes` (one row)."""

    def fuse_clamp(self, lo: float, hi: float) -> bool:
        """Take over the node's fused output clamp [lo, hi] (its output is plain float32): True when the op's
        steps will clamp their output themselves, so the compiled graph adds no clamp pass after them."""
        return False


@dataclass
class Context:
    """What a builder sees: the checked values and where the node is (for messages)."""

    values: dict[int, Value]
    where: str

    def value(self, vid: int, role: str = "input") -> Value:
        """The value a node names; InvalidProgram when there is none."""
        v = self.values.get(vid)
        if v is None:
            raise InvalidProgram(f"{self.where}: {role} id {vid} names no value")
        return v

    def optional(self, vid: int, role: str) -> Value | None:
        return None if vid == g.NO_ID else self.value(vid, role)

    def fail(self, message: str) -> InvalidProgram:
        return InvalidProgram(f"{self.where}: {message}")

    def check_flags(self, flags: int, allowed: int = 0) -> None:
        if flags & ~allowed:
            raise self.fail(f"flags {flags:#x} are not supported")


Builder = Callable[[Any, Context], Op]  # a function or an Op class taking (node body, context)
BUILDERS: dict[str, Builder] = {}


def builds(*members: str) -> Callable[[Builder], Builder]:
    """Register a builder for the named NodeUnion members; a duplicate is an error."""

    def register(fn: Builder) -> Builder:
        for member in members:
            if member in BUILDERS:
                raise ValueError(f"node {member} already has a builder")
            BUILDERS[member] = fn
        return fn

    return register


def fail(op: Op, message: str) -> InvalidProgram:
    return InvalidProgram(f"{op.name}: {message}")


def broadcast(a: Shape, b: Shape, op: Op) -> Shape:
    """NumPy broadcasting of two shapes, as XNNPACK's binary nodes do."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise fail(op, f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


MAX_SCRATCH = 1 << 28  # elements of one node's scratch buffer


def scratch(shape: Sequence[int], fill: float | None = None) -> np.ndarray:
    """A float32 work buffer of a node, bounded so a hostile blob cannot make it huge."""
    if math.prod(shape) > MAX_SCRATCH:
        raise InvalidProgram(f"a node needs a {list(shape)} work buffer, more than {MAX_SCRATCH} elements")
    return np.empty(shape, np.float32) if fill is None else np.full(shape, fill, np.float32)


def reshaped(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A view of `a` with another shape: never a copy (a step must write into the planned memory)."""
    view = a.view()
    try:
        view.shape = tuple(shape)
    except AttributeError:
        raise InternalError(f"an array of shape {list(a.shape)} cannot be viewed as {list(shape)}") from None
    return view


def flat2d(a: np.ndarray, cols: int) -> np.ndarray:
    """A (rows, cols) view of a contiguous array."""
    return reshaped(a, (math.prod(a.shape) // cols if cols else 0, cols))


def then(first: Step, second: Step) -> Step:
    """One step running first, then second."""

    def both() -> None:
        first()
        second()

    return both
