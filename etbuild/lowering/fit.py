"""Decomposes every call the target runtime cannot make into calls it can (the fit-operator-set step).

After torch's core-ATen decomposition some calls remain whose out-variant ExecuTorch's kernel
library lacks (`linalg_vector_norm`, 3-D pooling, `sort`, …; `operator_set.target_operators`).
Each is decomposed with etbuild's decomposition of it, else torch's, and the graph is traced
again; a decomposition may itself call an operator that needs decomposing, so this repeats
until every call is available. A call with no decomposition fails here, naming the operator,
where the model makes it and what the user can do, before any later step tries to emit it.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from torch._ops import OpOverload
from torch.export import ExportedProgram
from torch.fx import Node

from etbuild.errors import StageError
from etbuild.lowering.assertions import is_assertion
from etbuild.lowering.decompositions import Decomposition, decomposition_of, exclusion
from etbuild.lowering.forms import GraphMethod, GraphProgram
from etbuild.lowering.operator_set import EXECUTORCH_VERSION, available, program_operator
from etbuild.lowering.partition import backend_operators
from etbuild.lowering.steps import at_node, each_method

MAX_ROUNDS = 8


def fit_program(program: GraphProgram) -> GraphProgram:
    """Every method fitted, keeping the operators a backend of the recipe may take whole: the
    partition step after this one decides which calls it does take (XNNPACK runs int4 weights'
    dequantization, which ExecuTorch's kernels lack)."""
    keep = backend_operators(program.backends)
    return each_method(lambda method: fit_operator_set(method, keep))(program)


def fit_operator_set(method: GraphMethod, keep: AbstractSet[Any] = frozenset()) -> GraphMethod:
    """The method with every call one the target runtime has or `keep` names (decomposing the others)."""
    exported = method.exported
    tried: set[OpOverload] = set()
    for _ in range(MAX_ROUNDS):
        missing = {op: node for op, node in unavailable_calls(exported).items() if op not in keep}
        if not missing:
            return replace(method, exported=exported)
        exported = exported.run_decompositions(_table(missing, tried))
    raise StageError(f"decomposing the calls ExecuTorch's runtime lacks did not end after {MAX_ROUNDS} rounds")


def unavailable_calls(exported: ExportedProgram) -> dict[OpOverload, Node]:
    """Each operator the graph calls that the target runtime lacks, with its first call.

    Assertions are left to the drop-assertions step, which checks them once constants are known.
    """
    missing: dict[OpOverload, Node] = {}
    for node in exported.graph.nodes:
        op = node.target
        if node.op == "call_function" and isinstance(op, OpOverload) and not (available(op) or is_assertion(op)):
            missing.setdefault(op, node)
    return missing


def _table(missing: dict[OpOverload, Node], tried: set[OpOverload]) -> dict[OpOverload, Decomposition]:
    """The decompositions of the missing operators; an operator decomposed before and back is an error."""
    table = {}
    for op, node in missing.items():
        with at_node(node):
            if op in tried:
                raise StageError(f"{op} is still called after its decomposition; {_advice(op)}")
            table[op] = decomposition_of(op) or _no_decomposition(op, node)
            tried.add(op)
    return table


def _no_decomposition(op: OpOverload, node: Node) -> Decomposition:
    """Raise: `op` cannot be called and has no decomposition; name the operator the user's model called."""
    reason = exclusion(op)
    why = f" ({reason})" if reason else ""
    called = node.meta.get("original_aten")
    if isinstance(called, OpOverload) and str(called) != str(op):
        why += f"; torch's decomposition of {called}, which the model calls, calls it"
        op = called
    raise StageError(f"{_lacks(node.target)}, and neither etbuild nor torch has a decomposition of it{why}; "
                     f"{_advice(op)}")


def _lacks(op: OpOverload) -> str:
    name = program_operator(op)
    if name is None:
        return f"operator {op} has no out-variant to call (ExecuTorch's runtime calls only out-variants)"
    return f"ExecuTorch {EXECUTORCH_VERSION}'s runtime has no {name} (what {op} becomes)"


def _advice(op: OpOverload) -> str:
    return (f"to build this model, express {op} with operators ExecuTorch has (in the model, or as a decomposition "
            "in etbuild/lowering/decompositions.py), or leave it to a backend that runs it")
