"""Observe a loaded method instruction by instruction, from outside the runtime (torch-free).

A loaded `Method` runs `method.steps`, one pre-bound callable per instruction (see
etbuild.runtime.binding). `wrap_steps` replaces that list with wrappers, so a profiler can
time each step and a debugger can copy what each one wrote; the runtime itself has no hook,
so neither its normal path nor a trimmed runtime carries any of this. The helpers below say
what an instruction is (`label`) and which values it reads and writes, for reports, and
`generated_inputs` gives a method seeded inputs from its metadata when a caller has none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from etbuild.errors import MethodInputError
from etbuild.runtime.format import program as fb
from etbuild.runtime.kernel_registry import canonical_name
from etbuild.runtime.program import Method
from etbuild.runtime.steps import Step
from etbuild.runtime.tensor import numpy_dtype


def wrap_steps(method: Method, wrap: Callable[[int, Step], Step]) -> None:
    """Replace each step k of the method by `wrap(k, step)` (which must return what step returns)."""
    method.steps = [wrap(k, step) for k, step in enumerate(method.steps)]


def instructions(method: Method) -> list[fb.Instruction]:
    return list(method.plan.chains[0].instructions)


def label(plan: fb.ExecutionPlan, ins: fb.Instruction) -> str:
    """`aten::convolution.out`, `delegate XnnpackBackend`, `move`, `jump_false` or `free`."""
    a = ins.instr_args
    if isinstance(a, fb.KernelCall) and 0 <= a.op_index < len(plan.operators):
        op = plan.operators[a.op_index]
        return canonical_name(op.name or "", op.overload or "")
    if isinstance(a, fb.DelegateCall) and 0 <= a.delegate_index < len(plan.delegates):
        return f"delegate {plan.delegates[a.delegate_index].id}"
    names = {fb.MoveCall: "move", fb.JumpFalseCall: "jump_false", fb.FreeCall: "free"}
    return names.get(type(a), type(a).__name__)


def written(method: Method, ins: fb.Instruction) -> list[int]:
    """The values an instruction writes: a kernel call's result (a list result: its items), a
    delegate call's outputs, a move's target."""
    plan, a = method.plan, ins.instr_args
    if isinstance(a, fb.KernelCall) and a.args:
        return _items(plan, a.args[-1])
    if isinstance(a, fb.DelegateCall) and a.delegate_index in method.delegates:
        positions = method.delegates[a.delegate_index].output_positions
        return [a.args[p] for p in positions if p < len(a.args)]
    if isinstance(a, fb.MoveCall):
        return [a.move_to]
    return []


def read(method: Method, ins: fb.Instruction) -> list[int]:
    """The values an instruction reads (its arguments that are not results; list arguments: their items)."""
    a = ins.instr_args
    args = list(a.args) if isinstance(a, (fb.KernelCall, fb.DelegateCall)) else []
    out = set(written(method, ins))
    return [i for j in args for i in _items(method.plan, j) if i not in out]


def _items(plan: fb.ExecutionPlan, i: int) -> list[int]:
    if not 0 <= i < len(plan.values):
        return []
    v = plan.values[i].val
    if isinstance(v, (fb.TensorList, fb.OptionalTensorList)):
        return [j for j in v.items if 0 <= j < len(plan.values)]
    return [i]


def shapes(objects: list[Any], indices: list[int]) -> list[list[int]]:
    """The shapes of the arrays among the given values (other values are left out)."""
    return [list(objects[i].shape) for i in indices if isinstance(objects[i], np.ndarray)]


def generated_inputs(method: Method, seed: int = 0) -> list[Any]:
    """Inputs from the method's metadata: tensors at their (upper-bound) shape, seeded.

    Floats are standard normal, integers 0 or 1 (safe as indices), bools random; Int, Double
    and Bool inputs are 1, 1.0 and True.
    """
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for k, i in enumerate(method.plan.inputs):
        v = method.plan.values[i].val
        if isinstance(v, fb.Tensor):
            out.append(_random(rng, numpy_dtype(v.scalar_type), tuple(v.sizes)))
        elif isinstance(v, (fb.Int, fb.Double, fb.Bool)):
            out.append({fb.Int: 1, fb.Double: 1.0, fb.Bool: True}[type(v)])
        else:
            raise MethodInputError(f"input {k}: cannot generate a {type(v).__name__}; pass --inputs")
    return out


def _random(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 2, shape).astype(dtype)
