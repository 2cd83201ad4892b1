"""The handle of one initialised XNNPACK delegate: bind once, then run a flat list of steps.

`execute(args)` takes the DelegateCall's arrays (argument k is the value with external id k).
The first call, and any call whose arrays are not the very objects of the previous one, nor views
of the same memory at the same shape and strides (checked one by one, or at once when the call
passes the very tuple of the previous call), prepares: it infers every value's shape from the
input shapes (the caller may pass inputs smaller than the blob's bound: the shapes propagate
as in XNNPACK's reshape), resizes the outputs, lays the values out in the arena (re-planning it
only when a shape outgrows its slot) and binds each node to its arrays. Every call then runs the bound steps and returns
the output arrays (new views when an output's shape changed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from etbuild.backends.xnnpack.runtime import boundary, chains
from etbuild.backends.xnnpack.runtime.compile import Compiled
from etbuild.backends.xnnpack.runtime.memory import Interval, place
from etbuild.backends.xnnpack.runtime.ops.base import Shape, reshaped
from etbuild.errors import InvalidProgram, KernelError
from etbuild.runtime import threads
from etbuild.runtime.steps import Step
from etbuild.runtime.tensor import resize


class XnnpackDelegate:
    """A compiled delegate graph and its current binding."""

    def __init__(self, compiled: Compiled) -> None:
        self.graph = compiled
        self.arg_count = compiled.arg_count
        self.output_positions = tuple(compiled.positions[v.id] for v in compiled.outputs)
        self._lives = self._lifetimes()
        shapes = self._infer([v.dims for v in compiled.inputs])
        _check_sizes(compiled, shapes)
        self._plan(shapes)
        self.quiet = any(op.special for op in compiled.ops)  # its nodes compute with floating-point warnings off
        self._args: list[Any] | None = None
        self._frozen: tuple[Any, ...] | None = None
        self.steps: list[Step] = []  # the bound steps, and what each does (profilers time them one by one)
        self.step_names: list[str] = []
        self._results: list[np.ndarray] = []
        self.options = threads.current()  # the program's numerics options: its steps bind with them, call by call
        self.hold_blas = False  # a step runs numpy's BLAS at a size it would thread: hold it at one thread
        self._constants: dict[int, np.ndarray] = {}  # the constants nodes read as inputs, in working form

    # ------------------------------------------------------------------ calls

    def execute(self, args: Sequence[Any]) -> list[np.ndarray]:
        """Run the graph on the call's arrays (inputs read, outputs written); returns the output arrays."""
        if args is not self._frozen:  # the very tuple of the last call holds the very same arrays
            if self._args is None or len(args) != len(self._args) or not all(map(_same, args, self._args)):
                self._prepare(list(args))
            else:
                self._args = list(args)
            self._frozen = args if type(args) is tuple else None
        if self.hold_blas:
            with threads.single_threaded:
                self._run_all()
        else:
            self._run_all()
        return self._results

    def _run_all(self) -> None:
        if self.quiet:
            with np.errstate(all="ignore"):
                for step in self.steps:
                    step()
        else:
            for step in self.steps:
                step()

    def steady(self, args: Sequence[Any]) -> Step | None:
        """What runs a call with exactly this tuple of arrays again, the tuple of the last call: the bound steps
        alone, to be run under `np.errstate(all="ignore")` when `quiet`. None for another tuple."""
        return self._run_steps if args is self._frozen else None

    def _run_steps(self) -> None:
        if self.hold_blas:
            with threads.single_threaded:
                for step in self.steps:  # read each call: a profiler may wrap them
                    step()
            return
        for step in self.steps:
            step()

    def _prepare(self, args: list[Any]) -> None:
        if len(args) != self.arg_count:
            raise KernelError(f"XNNPACK delegate takes {self.arg_count} arguments, got {len(args)}")
        g = self.graph
        ins = [_physical(args[g.positions[v.id]], v.storage, v.describe()) for v in g.inputs]
        in_shapes = [_fit(a.shape, v.dims) for a, v in zip(ins, g.inputs)]
        if in_shapes != self._in_shapes:
            try:
                shapes = self._infer(in_shapes)
            except InvalidProgram as exc:
                raise KernelError(f"XNNPACK delegate: inputs {in_shapes}: {exc}") from None
            if any(self._bytes(r, shapes) > self._capacity[r] for r in self._lives):
                self._plan(shapes)
            self._shapes, self._in_shapes = shapes, in_shapes
        outs, self._results = self._outputs(args)
        self._bind([a.reshape(s) for a, s in zip(ins, in_shapes)], outs)
        self._args = args

    def _outputs(self, args: list[Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The arrays to write each output into, and the arrays to return (the caller's, resized)."""
        writes, results = [], []
        for v in self.graph.outputs:
            shape, arg = self._shapes[v.id], args[self.graph.positions[v.id]]
            result, physical = arg, _physical(arg, v.storage, v.describe())
            if physical.shape != shape:
                if physical.ndim != len(shape) and physical.size == math.prod(shape):
                    physical = physical.reshape(shape)  # a 0-d program tensor for a [1] value, or the reverse
                else:
                    result = resize(arg, shape)  # a dynamic shape: a view of the caller's bounded array
                    physical = result
            results.append(result)
            writes.append(physical)
        return writes, results

    # ------------------------------------------------------------------ shapes and memory

    def _infer(self, in_shapes: Sequence[Shape]) -> dict[int, Shape]:
        """Every value's shape, propagated from the input shapes node by node.

        As in XNNPACK, the blob's dims of computed values are not used: ExecuTorch writes some
        in the program's layout (NCHW) where the graph computes NHWC.
        """
        g = self.graph
        shapes: dict[int, Shape] = {v.id: tuple(s) for v, s in zip(g.inputs, in_shapes)}
        for v in g.values.values():
            if v.is_constant:
                shapes[v.id] = v.dims
        for op in g.ops:
            results = op.infer([shapes[i] for i in op.inputs])
            for o, shape in zip(op.outputs, results):
                shapes[o] = shape
        return shapes

    def _lifetimes(self) -> dict[int, Interval]:
        """The lifetime of each storage group (root value id) over steps -1 (prologue) .. len(ops) (epilogue)."""
        g = self.graph
        span: dict[int, tuple[int, int]] = {}

        def touch(vid: int, step: int) -> None:
            if g.values[vid].is_constant:
                return
            r = g.root.get(vid, vid)
            if not g.values[r].is_constant:
                lo, hi = span.get(r, (step, step))
                span[r] = (min(lo, step), max(hi, step))

        for v in g.inputs:
            touch(v.id, -1)
        for k, op in enumerate(g.ops):
            for i in (*op.inputs, *op.outputs):
                touch(i, k)
        for v in g.outputs:
            touch(v.id, len(g.ops))
        return {r: Interval(*s) for r, s in span.items()}

    @property
    def planned_bytes(self) -> int:
        """The bytes of its arena (what the method's memory limit counts)."""
        return self._arena.nbytes

    def _bytes(self, root: int, shapes: dict[int, Shape]) -> int:
        return math.prod(shapes[root]) * self.graph.values[root].working.itemsize

    def _plan(self, shapes: dict[int, Shape]) -> None:
        """A new arena with a slot for each storage group at these shapes."""
        sizes = {r: self._bytes(r, shapes) for r in self._lives}
        offsets, total = place({r: (life, sizes[r]) for r, life in self._lives.items()})
        self._arena = np.zeros(total, np.uint8)
        self._offsets, self._capacity = offsets, sizes
        self._shapes, self._in_shapes = shapes, [shapes[v.id] for v in self.graph.inputs]

    def _slot(self, root: int) -> np.ndarray:
        shape = self._shapes[root]
        dtype = self.graph.values[root].working
        start = self._offsets[root]
        flat = self._arena[start : start + math.prod(shape) * dtype.itemsize]
        return flat.view(dtype).reshape(shape)

    # ------------------------------------------------------------------ binding

    def _bind(self, ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        g = self.graph
        read = {i for op in g.ops for i in op.inputs if g.values[i].is_constant}  # constants a node reads as an input
        arrays: dict[int, np.ndarray] = {i: self._constant(i) for i in read}
        prologue, epilogue, names, stores = [], [], [], []
        for v, arr in zip(g.inputs, ins):
            if boundary.direct(v, arr) and not any(np.may_share_memory(arr, o) for o in outs):
                arrays[v.id] = arr
            else:
                arrays[v.id] = self._slot(v.id)
                prologue.append(boundary.loader(v, arr, arrays[v.id], v.grid.snapper()))
                names.append(f"load {v.describe()}")
        for v, arr in zip(g.outputs, outs):
            if boundary.direct(v, arr):
                arrays[v.id] = arr
            else:
                arrays[v.id] = self._slot(v.id)
                epilogue.append(boundary.storer(v, arrays[v.id], arr))
                stores.append(f"store {v.describe()}")
        with threads.use(self.options) as binding:
            steps, node_names = self._node_steps(arrays)
        self.hold_blas = binding.numpy_blas
        self.steps = prologue + steps + epilogue
        self.step_names = names + node_names + stores

    def _constant(self, vid: int) -> np.ndarray:
        """A constant a node reads as an input, made once (a quantized weight's float form is made on demand)."""
        if vid not in self._constants:
            self._constants[vid] = self.graph.values[vid].constant  # type: ignore[assignment]
        return self._constants[vid]

    def _node_steps(self, arrays: dict[int, np.ndarray]) -> tuple[list[Step], list[str]]:
        """Each node (but views) bound to its arrays, with its output rounding; and the nodes' names."""
        g = self.graph
        nodes = []
        for op, snaps in zip(g.ops, g.snaps):
            for o in op.outputs:
                if o not in arrays:
                    r = g.root[o]
                    arrays[o] = self._slot(o) if r == o else reshaped(arrays[r], self._shapes[o])
            if any(g.root.get(o, o) != o for o in op.outputs):
                continue  # a view: its output already is its input
            ins, outs = [arrays[i] for i in op.inputs], [arrays[o] for o in op.outputs]
            rounded = [(s, arrays[o]) for s, o in zip(snaps, op.outputs) if s is not None]
            nodes.append(chains.Bound(op, ins, outs, _with_snaps(op.bind(ins, outs), rounded), op.name, rounded))
        return chains.join(nodes)  # runs of elementwise nodes as one compiled step each


def _same(a: Any, b: Any) -> bool:
    """Whether a and b are the same array, or views of the same memory with the same shape, strides and dtype (a
    method's et_view makes a new view of one buffer every call: the binding to the old view still holds)."""
    if a is b:
        return True
    return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and a.strides == b.strides
            and a.dtype == b.dtype and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _check_sizes(compiled: Compiled, shapes: dict[int, Shape]) -> None:
    """At the blob's input dims, each output has as many elements as its dims say, and no computed
    value more: node parameters that blow a value up (a huge padding) are refused before running."""
    for v in compiled.values.values():
        if not v.is_constant and v.id in shapes:
            n, declared = math.prod(shapes[v.id]), math.prod(v.dims)
            if n > declared or (v.is_output and n != declared):
                raise InvalidProgram(f"{v.describe()}: the graph computes it as {list(shapes[v.id])}")


def _with_snaps(step: Step, snaps: list[tuple[Callable[[np.ndarray], None], np.ndarray]]) -> Step:
    if not snaps:
        return step
    if len(snaps) == 1:
        snap, out = snaps[0]
        bind = getattr(snap, "bind", None)  # a rounding that can fix its array ahead (grids.dynamic_snapper)
        bound = bind(out) if bind is not None else None
        if bound is not None:

            def step_and_bound() -> None:
                step()
                bound()

            return step_and_bound

        def step_and_snap() -> None:
            step()
            snap(out)

        return step_and_snap

    def step_and_snaps() -> None:
        step()
        for s, o in snaps:
            s(o)

    return step_and_snaps


def _physical(arr: Any, storage: np.dtype, what: str) -> np.ndarray:
    """The array in memory order (a channels-last tensor as its NHWC view), as XNNPACK reads it."""
    if not isinstance(arr, np.ndarray):
        raise KernelError(f"XNNPACK delegate: {what} needs an array, got {type(arr).__name__}")
    if arr.dtype != storage:
        raise KernelError(f"XNNPACK delegate: {what} is stored as {storage}, the program passes {arr.dtype}")
    if arr.flags.c_contiguous or arr.ndim < 2:
        return arr
    view = arr.transpose(np.argsort([-s for s in arr.strides], kind="stable"))
    return view if view.flags.c_contiguous else arr  # other strides: copied in and out by a step


def _fit(shape: Shape, dims: Shape) -> Shape:
    """The caller's shape, or the blob's dims when only the rank differs (0-d program tensor for [1])."""
    if len(shape) != len(dims) and math.prod(shape) == math.prod(dims):
        return dims
    return tuple(shape)
