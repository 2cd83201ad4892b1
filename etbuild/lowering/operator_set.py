"""The operators a lowered program may call: those ExecuTorch's runtime registers and ours has a kernel for.

`executorch_operators.txt` beside this file lists ExecuTorch 1.5.1's operator names (portable
kernels, prim ops, quantized kernels), generated from the oracle by
`python -m etbuild.verify.oracle operators etbuild/lowering/executorch_operators.txt`: a fact about
that release, checked in so that lowering targets it without ExecuTorch installed. A test
compares it with the installed oracle and every emitted program with it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch
from torch._ops import OpOverload

from etbuild.errors import StageError
from etbuild.lowering.out_variants import copy_variant, operator_name, out_schema
from etbuild.runtime.kernel_registry import canonical_name, load_all

EXECUTORCH_OPERATORS = Path(__file__).with_name("executorch_operators.txt")
EXECUTORCH_VERSION = "1.5.1"


@cache
def executorch_operators() -> frozenset[str]:
    """The operator names ExecuTorch's runtime registers (from the checked-in list)."""
    lines = EXECUTORCH_OPERATORS.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


@cache
def target_operators() -> frozenset[str]:
    """What lowering may emit: ExecuTorch's operators that etbuild's runtime has a kernel for too."""
    return executorch_operators() & frozenset(load_all())


_SCALAR_TYPES = (torch._C.IntType, torch._C.FloatType, torch._C.BoolType, torch._C.NumberType,
                 torch._C.SymIntType, torch._C.SymBoolType)


def returns_scalar(op: OpOverload) -> bool:
    """Whether every result of `op` is a scalar (`sym_size.int`, `_local_scalar_dense`): the program
    calls such an operator itself, with a scalar value for its result, not an out-variant."""
    returns = op._schema.returns
    return bool(returns) and all(isinstance(r.type, _SCALAR_TYPES) for r in returns)


@cache
def program_operator(op: OpOverload) -> str | None:
    """The operator a call of `op` becomes in the program (`aten::addmm.out`), or None if it has none."""
    if returns_scalar(op):
        return canonical_name(*operator_name(op))
    try:
        schema = out_schema(copy_variant(op))
        return canonical_name(schema.name, schema.overload_name)
    except StageError:
        return None


def available(op: OpOverload) -> bool:
    """Whether the program can call `op` as it is (its program operator is a target operator)."""
    return program_operator(op) in target_operators()
