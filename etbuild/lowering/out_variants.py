"""Maps core-ATen functional ops to the out-variants the program calls.

View ops first become their `*_copy` counterparts (the program format has no aliasing
views); each functional overload then maps to the overload of the same operator whose
schema takes the same arguments plus `out` tensors, found from torch's own schemas, or, for
`quantized_decomposed` ops, from the table of the out-variants ExecuTorch registers
(`quantized_ops`), which torch knows only when executorch is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import torch
from torch._ops import OpOverload

from etbuild.errors import StageError
from etbuild.lowering.quantized_ops import ProgramOp, table_out_schema

aten = torch.ops.aten

# Ops whose copy counterpart does not follow the `<name>_copy` rule.
_VIEW_RENAMES = {aten._unsafe_view.default: aten.view_copy.default}


@cache
def copy_variant(op: OpOverload) -> OpOverload:
    """`aten.view.default` -> `aten.view_copy.default`; ops that are not views map to themselves."""
    if op in _VIEW_RENAMES:
        return _VIEW_RENAMES[op]
    schema = op._schema
    returns_alias = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    if not returns_alias:
        return op
    packet_name = schema.name.split("::")[1] + "_copy"
    packet = getattr(aten, packet_name, None)
    overload = op._overloadname
    if packet is None or overload not in packet.overloads():
        raise StageError(f"view operator {schema.name}.{overload} has no copy variant {packet_name}")
    return getattr(packet, overload)


# Arguments an out-variant may drop: the out tensor already carries what they say.
_CARRIED_BY_OUT = frozenset({"dtype", "layout", "device", "pin_memory", "memory_format"})


def _functional_args(schema: torch._C.FunctionSchema) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]


def _matches(candidate: list[tuple[str, str]], want: list[tuple[str, str]]) -> bool:
    """Whether `candidate` is `want` with none, some or all of the out-carried arguments left out."""
    kept = [a for a in want if a in candidate]
    return kept == candidate and all(a[0] in _CARRIED_BY_OUT for a in want if a not in candidate)


@cache
def out_variant(op: OpOverload) -> OpOverload:
    """The overload of op's operator that writes into `out` tensors; StageError if none.

    The out-variant takes the same arguments plus `out`, or the same without some of those
    the out tensor carries (`full_like.out` has no dtype/layout/device/pin_memory but keeps
    memory_format); to-program checks that each value left out is the one `out` carries.
    """
    schema = op._schema
    if any(a.is_out for a in schema.arguments):
        return op
    packet = op.overloadpacket
    preferred = "out" if op._overloadname == "default" else f"{op._overloadname}_out"
    names = sorted(packet.overloads(), key=lambda n: n != preferred)
    want = _functional_args(schema)
    for name in names:
        cand = getattr(packet, name)
        cand_schema = cand._schema
        if any(a.is_out for a in cand_schema.arguments) and _matches(_functional_args(cand_schema), want):
            return cand
    raise StageError(f"operator {schema.name}.{op._overloadname} has no out-variant to call")


def out_schema(op: OpOverload | ProgramOp) -> torch._C.FunctionSchema:
    """The schema of the out-variant a call to `op` becomes (from the quantized table first)."""
    if isinstance(op, ProgramOp):
        return op.schema
    return table_out_schema(op) or out_variant(op)._schema


def operator_name(op: OpOverload) -> tuple[str, str]:
    """The (name, overload) pair the program's operator table stores, e.g. ('aten::addmm', 'out')."""
    return op._schema.name, op._schema.overload_name


def check_carried(args: Mapping[str, Any], schema: torch._C.FunctionSchema, result: Any) -> None:
    """Check that the arguments the out-variant `schema` leaves out say what its out tensor carries.

    `args` are the functional call's arguments by name and `result` its value (fake tensor):
    a dtype must be the result's, a layout strided, a device the CPU, memory pinning off and a
    memory format contiguous or preserved; otherwise the out-variant would compute something else.
    """
    kept = {a.name for a in schema.arguments}
    for name, value in args.items():
        if name in kept or value is None:
            continue
        if not _carried(name, value, result):
            where = f"{schema.name}.{schema.overload_name}"
            raise StageError(f"argument {name}={value} cannot be left to the out tensor of {where}: "
                             f"the program's tensors are {_CARRIED_DEFAULTS} "
                             f"(the result is {getattr(result, 'dtype', type(result).__name__)})")


_CARRIED_DEFAULTS = "strided, on the CPU, contiguous and unpinned"


def _carried(name: str, value: Any, result: Any) -> bool:
    if name == "dtype":
        return isinstance(result, torch.Tensor) and value == result.dtype
    if name == "layout":
        return value == torch.strided
    if name == "device":
        return torch.device(value).type == "cpu"
    if name == "pin_memory":
        return value is False
    return value in (torch.contiguous_format, torch.preserve_format)
