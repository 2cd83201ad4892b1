"""Load-time checks of what instructions pass around: each kernel gets the kinds of values it
declares, every tensor an instruction touches has memory, moves keep a value's type.

A kernel's parameter kinds come from its annotations (etbuild.runtime.kernel_registry), one letter
per parameter; the value types are the format's EValue union members, compared by name so
that a trimmed runtime whose schema lacks a type (no lists, say) needs no class for it.
Everything here runs once per `load_method`; nothing runs per call.
"""

from __future__ import annotations

from typing import Any

from etbuild.errors import InvalidProgram, KernelError
from etbuild.runtime import features
from etbuild.runtime.format import program as fb
from etbuild.runtime.values import is_constant

# Kind letter (etbuild.runtime.kernel_registry.ANNOTATION_KINDS) -> the value types it admits.
KIND_TYPES = {
    "T": "Tensor", "t": "Tensor Null", "i": "Int", "j": "Int Null", "f": "Double Int Bool",
    "g": "Double Int Bool Null", "b": "Bool", "c": "Bool Null", "z": "String", "y": "String Null",
    "L": "IntList", "M": "IntList Null", "D": "DoubleList Null", "X": "TensorList", "Y": "OptionalTensorList",
    "P": "IntList", "N": "IntList", "p": "Int",
}
BOUNDS = {"P": 1, "N": 0, "p": 1}  # the least value of each item of a bounded kind
_ADMITS = {k: set(v.replace("Null", "Null NoneType").split()) for k, v in KIND_TYPES.items()}  # by type name


def type_name(plan: fb.ExecutionPlan, i: int) -> str:
    """The EValue type of value i (an absent union member counts as Null)."""
    v = plan.values[i].val
    return "Null" if v is None else type(v).__name__


def varying(plan: fb.ExecutionPlan, rebound: set[int]) -> set[int]:
    """The values not known at load: scalars rebound at run time and the IntLists holding them
    (tensors are known: they exist at load, at their planned shapes)."""
    out = {i for i in rebound if not isinstance(plan.values[i].val, fb.Tensor)}
    if features.VALUE_LISTS and out:
        for i, ev in enumerate(plan.values):
            if isinstance(ev.val, fb.IntList) and not out.isdisjoint(ev.val.items):
                out.add(i)
    return out


def kernel_call(
    plan: fb.ExecutionPlan, kernel: Any, args: list[int], objects: list[Any], unknown: set[int], where: str
) -> None:
    """Check a call to `kernel` (a KernelInfo) at load: each argument has a type its parameter
    admits, and the result slot a writable one; arguments known at load (not in `unknown`)
    keep their kinds' bounds and pass the kernel's own check."""
    params, _, result = kernel.kinds.partition(">")
    values = plan.values
    for k, (kind, i) in enumerate(zip(params, args)):
        got = type(values[i].val).__name__
        if got not in _ADMITS[kind]:
            raise InvalidProgram(
                f"{where}: argument {_param_name(kernel.fn, k)} of {kernel.name} is value {i}, a {got}; "
                f"expected {KIND_TYPES[kind]}"
            )
        if kind in BOUNDS and i not in unknown and _below(objects[i], BOUNDS[kind]):
            raise InvalidProgram(
                f"{where}: argument {_param_name(kernel.fn, k)} of {kernel.name} is {objects[i]}; "
                f"each must be at least {BOUNDS[kind]}"
            )
    ret = values[args[-1]].val if len(args) > len(params) else None
    if ret is not None and (type(ret).__name__ not in _ADMITS[result] or is_constant(ret)):
        raise InvalidProgram(
            f"{where}: the result of {kernel.name}, value {args[-1]}, is not a writable {KIND_TYPES[result]}"
        )
    if kernel.check is not None:
        known = [objects[i] for i in args[: len(params)] if i not in unknown]
        if len(known) == len(params) and all(obj is not None for obj in known):
            try:
                kernel.check(*known)
            except KernelError as exc:
                raise InvalidProgram(f"{where}: {kernel.name}: {exc}") from None


def _below(value: Any, bound: int) -> bool:
    """Whether an Int, or an item of an IntList, is below bound."""
    return min(value, default=bound) < bound if isinstance(value, list) else value < bound


def _param_name(fn: Any, k: int) -> str:
    """The name of a kernel's parameter k (through decorators)."""
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn.__code__.co_varnames[k]


def touched(plan: fb.ExecutionPlan, a: Any) -> list[int]:
    """The values whose storage an instruction reads or writes (list arguments: their items)."""
    if isinstance(a, fb.KernelCall) or (features.DELEGATES and isinstance(a, fb.DelegateCall)):
        indices = list(a.args)
    elif features.CONTROL_FLOW and isinstance(a, fb.MoveCall):
        indices = [a.move_from]
    elif features.CONTROL_FLOW and isinstance(a, fb.JumpFalseCall):
        indices = [a.cond_value_index]
    else:
        return []
    if features.VALUE_LISTS:
        for i in list(indices):
            v = plan.values[i].val
            if isinstance(v, (fb.TensorList, fb.OptionalTensorList)):
                indices.extend(j for j in v.items if j >= 0)
    return indices


def storage(plan: fb.ExecutionPlan, instructions: list[fb.Instruction], objects: list[Any]) -> None:
    """Every tensor an instruction uses has memory: planned, constant, or a method input.

    A tensor with neither allocation_info nor data_buffer_idx gets its data at run time, which
    only a method input does (outputs the plan leaves unplanned get memory at load); any other
    is a program whose memory was never planned.
    """
    values = plan.values
    missing = {i for i, obj in enumerate(objects) if obj is None and isinstance(values[i].val, fb.Tensor)}
    missing -= set(plan.inputs)
    if not missing:  # the common case: nothing to look for
        return
    for pc, ins in enumerate(instructions):
        for i in touched(plan, ins.instr_args):
            if i in missing:
                raise InvalidProgram(
                    f"instruction {pc}: tensor value {i} has no memory plan (no allocation_info, no "
                    "data_buffer_idx), which only method inputs and outputs may lack"
                )


def move(plan: fb.ExecutionPlan, call: Any, where: str) -> None:
    """A MoveCall copies a value into a slot of the same type."""
    src, dst = type_name(plan, call.move_from), type_name(plan, call.move_to)
    if src != dst:
        raise InvalidProgram(f"{where}: moves value {call.move_from}, a {src}, into value {call.move_to}, a {dst}")


def condition(plan: fb.ExecutionPlan, call: Any, where: str) -> None:
    """A JumpFalseCall's condition is a Bool or a bool tensor."""
    v = plan.values[call.cond_value_index].val
    if not (isinstance(v, fb.Bool) or (isinstance(v, fb.Tensor) and v.scalar_type == fb.ScalarType.BOOL)):
        got = type_name(plan, call.cond_value_index)
        raise InvalidProgram(f"{where}: jump condition value {call.cond_value_index} is a {got}, expected a Bool")
