"""Constant folding: computations on constants alone run once, at build time.

A node is folded when every tensor it reads is a constant (a parameter, a buffer that is
never mutated, a lifted constant, or an earlier folded node), its op is deterministic and
its result is no larger than what it reads (folding must not grow the file: an `expand`
of a bias stays a runtime op). The transpose of a Linear weight is the case that matters:
the stored constant becomes the transposed weight, and the call does no transposing.

Nor may folding store a value twice: when every constant a folded node reads is stored anyway
(a runtime op reads it too), or its value is larger than the constants folding it lets the
program drop (equal bytes count once: the constant pool stores them once), the node is computed
at run time instead — two attention layers gathering a relative-position bias by the same index
keep the index once and gather at run time, as ExecuTorch's program does. An output projection
tied to the input embedding keeps one table: the embedding reads it, the projection
transposes it at run time, as ExecuTorch's program does.

A factory call (`arange`, `full`, `zeros`, ... : no tensor inputs) is folded when it is deterministic,
its arguments are all build-time values and its result has a static shape of at most FACTORY_BYTES;
like any folded node, it stays folded only where something folded reads it (a factory read at run
time frees nothing). Position ids `arange(T)` gathering from a position table become the rows they
gather. A size computed at run time (a symbolic shape) is a graph node, never a build-time value.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import torch
from torch._ops import OpOverload
from torch.export import ExportedProgram
from torch.fx import Node

from etbuild.lowering.assertions import is_assertion
from etbuild.lowering.forms import GraphMethod, GraphProgram
from etbuild.lowering.steps import at_node, in_method

SLACK_BYTES = 64
FACTORIES = frozenset({"arange", "full", "zeros", "ones", "scalar_tensor", "eye", "linspace", "logspace"})
"""Calls that make a tensor from their arguments alone, the same one every time (not `empty`: its
values are whatever the memory held)."""
FACTORY_BYTES = 1 << 20
"""The largest factory result computed at build time (folding keeps it only if it frees as much)."""


def constant_inputs(ep: ExportedProgram, state: frozenset[str] = frozenset()) -> dict[Node, torch.Tensor]:
    """The placeholder nodes that hold parameters, unmutated buffers and lifted constants.

    `state`: buffers another method of the program mutates; they are state here too, not constants.
    """
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values()) | state
    names: dict[str, torch.Tensor] = {}
    for node_name, target in sig.inputs_to_parameters.items():
        names[node_name] = ep.state_dict[target]
    for node_name, target in sig.inputs_to_buffers.items():
        if target not in mutated:
            names[node_name] = ep.state_dict[target] if target in ep.state_dict else ep.constants[target]
    for node_name, target in sig.inputs_to_lifted_tensor_constants.items():
        names[node_name] = ep.constants[target]
    return {n: names[n.name].detach() for n in ep.graph.nodes if n.op == "placeholder" and n.name in names}


def fold_constants(program: GraphProgram) -> GraphProgram:
    """Every method folded. A buffer one method mutates is state in all: a method that only reads
    it reads what the others wrote (the plan stage shares it between them), not its initial value."""
    state = frozenset(v for m in program.methods for v in m.exported.graph_signature.buffers_to_mutate.values())
    methods = []
    for method in program.methods:
        with in_method(method.name):
            methods.append(fold_method(method, state))
    return replace(program, methods=tuple(methods))


def fold_method(method: GraphMethod, state: frozenset[str] = frozenset()) -> GraphMethod:
    """The method with every node whose value is known at build time, and that value, as constants."""
    consts = constant_inputs(method.exported, state)
    for node in method.exported.graph.nodes:
        op = node.target
        if node.op == "call_function" and isinstance(op, OpOverload) and _foldable(node, op, consts):
            with at_node(node):
                result = _evaluate(node, op, consts)
            if result is not None:
                consts[node] = result
    _store_once(consts)
    return replace(method, constants=consts)


def _store_once(consts: dict[Node, torch.Tensor]) -> None:
    """Unfold each stored folded node whose inputs are all stored anyway, or whose value takes more
    bytes than folding it saves, until none is left. Folding saves the constants it is computed
    from (through folded nodes nothing else reads) that nothing else keeps in the program; the
    constant pool stores equal bytes once, so a constant whose bytes are stored anyway saves nothing."""
    contents = {node: _content(value) for node, value in consts.items()}  # hashed once: unfolding changes no value
    changed = True
    while changed:
        changed = False
        stored = {contents[n] for n in consts if _stored(n, consts)}
        for node in [n for n in consts if n.op == "call_function" and _stored(n, consts)]:
            freed = sum(_nbytes(consts[source]) for source in _sources(node, consts)
                        if contents[source] not in stored or contents[source] == contents[node])
            inputs_stored = all(_stored(i, consts, besides=node) for i in node.all_input_nodes)
            if inputs_stored or _nbytes(consts[node]) > freed + SLACK_BYTES:
                del consts[node]
                changed = True
                break


def _sources(node: Node, consts: dict[Node, torch.Tensor]) -> set[Node]:
    """The constants `node` is computed from that would no longer be stored were it unfolded: its
    inputs, and through the folded calls only it reads, theirs."""
    found: set[Node] = set()
    stack = list(node.all_input_nodes)
    while stack:
        source = stack.pop()
        if source in found or source not in consts or _stored(source, consts):
            continue  # a value computed at run time (an unfolded call) is no constant folding drops
        if source.op == "call_function" and len(source.users) == 1:  # a step of node's own computation
            stack.extend(source.all_input_nodes)
        else:
            found.add(source)
    return found


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _content(t: torch.Tensor) -> bytes:
    """What makes two constants one entry of the constant pool: their bytes."""
    data = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
    return hashlib.sha256(data).digest() + data.nbytes.to_bytes(8, "little")


def _stored(node: Node, consts: dict[Node, torch.Tensor], besides: Node | None = None) -> bool:
    """Whether a constant node ends up in the program: a node computed at run time reads it."""
    return node in consts and any(u not in consts and u is not besides for u in node.users)


def _foldable(node: Node, op: OpOverload, consts: dict[Node, torch.Tensor]) -> bool:
    if torch.Tag.nondeterministic_seeded in op.tags or op._schema.is_mutable or is_assertion(op):
        return False
    inputs = node.all_input_nodes
    return all(n in consts for n in inputs) if inputs else _factory(node, op)


def _factory(node: Node, op: OpOverload) -> bool:
    """A deterministic factory call with a static result of at most FACTORY_BYTES (its arguments are
    build-time values: it reads no node, and a symbolic size would be one)."""
    val = node.meta.get("val")
    if op._schema.name.split("::")[-1] not in FACTORIES or not isinstance(val, torch.Tensor):
        return False
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    if any(isinstance(a, symbolic) for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs))):
        return False
    return all(isinstance(d, int) for d in val.shape) and val.numel() * val.element_size() <= FACTORY_BYTES


def _evaluate(node: Node, op: OpOverload, consts: dict[Node, torch.Tensor]) -> torch.Tensor | None:
    def resolve(a: Any) -> Any:
        return consts[a] if isinstance(a, Node) else a

    args = torch.fx.node.map_aggregate(node.args, resolve)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, resolve)
    with torch.no_grad():
        result = op(*args, **kwargs)
    if not isinstance(result, torch.Tensor):
        return None
    read = sum(consts[n].numel() * consts[n].element_size() for n in node.all_input_nodes)
    if node.all_input_nodes and result.numel() * result.element_size() > read + SLACK_BYTES:
        return None
    return result.contiguous()
