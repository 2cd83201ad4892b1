"""Decomposes the calls left outside every delegate that ExecuTorch's kernels lack (the decompose-outside step).

Takes and gives: core-ATen graphs with delegates. The decompose step keeps whole the operators a
backend takes as one node (`core_aten.kept_whole`); a call of one that no delegate took (a module
the recipe excludes, a group below `min_nodes`) runs on the kernels, so it is replaced here, in
place, by its decomposition traced on the call's example values (the graph holds delegate calls
now, so it cannot be exported again).
"""

from __future__ import annotations

import torch
from torch._ops import OpOverload
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import Node
from torch.fx.experimental.proxy_tensor import make_fx

from etbuild.errors import InternalError
from etbuild.lowering.assertions import is_assertion
from etbuild.lowering.decompositions import decomposition_of
from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.operator_set import available
from etbuild.lowering.steps import at_node, each_method


def decompose_outside_calls(method: GraphMethod) -> GraphMethod:
    """The method with its unavailable calls outside delegates decomposed (in place)."""
    graph = method.exported.graph
    calls = [n for n in graph.nodes if n.op == "call_function" and isinstance(n.target, OpOverload)
             and not available(n.target) and not is_assertion(n.target) and n not in method.constants]
    for node in calls:
        with at_node(node):
            _inline(node)
    if calls:
        graph.lint()
        method.exported.graph_module.recompile()
    return method


decompose_outside = each_method(decompose_outside_calls)


def _inline(node: Node) -> None:
    """Replace `node` by the calls of its decomposition, each with its example value."""
    fn = decomposition_of(node.target)  # type: ignore[arg-type]
    if fn is None or node.kwargs:
        raise InternalError(f"{node.target} was kept whole for a backend but has no decomposition to fall back to")
    tensors = [a for a in node.args if isinstance(a, Node)]
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fakes = [mode.from_tensor(torch.empty(a.meta["val"].shape, dtype=a.meta["val"].dtype)) for a in tensors]

        def call(*xs: torch.Tensor) -> torch.Tensor:
            values = iter(xs)
            return fn(*[next(values) if isinstance(a, Node) else a for a in node.args])

        traced = make_fx(call, tracing_mode="fake")(*fakes)
    graph = node.graph
    placeholders = [p for p in traced.graph.nodes if p.op == "placeholder"]
    with graph.inserting_before(node):
        result = graph.graph_copy(traced.graph, dict(zip(placeholders, tensors)))
    if not isinstance(result, Node):
        raise InternalError(f"the decomposition of {node.target} gave {type(result).__name__}, not one value")
    node.replace_all_uses_with(result)
    graph.erase_node(node)
