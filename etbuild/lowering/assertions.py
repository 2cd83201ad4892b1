"""Checks torch.export's assertions at build time where it can, then drops them (the drop-assertions step).

torch.export puts calls in an inference graph that compute nothing: `_assert_tensor_metadata`
around dtype conversions, `_assert_scalar` and `sym_constrain_range*` on symbolic sizes,
`_assert_async` on data, `_print`. The class is taken from torch's schemas, not listed: an
operator that returns nothing and writes no argument cannot change a value of the program.
Their functional forms (`_functional_assert_async`, `_functional_sym_constrain_range`, …)
return only a dependency token, and belong to the class too.

A call whose arguments are all known at build time (literals and constants) runs once, so a
failing check fails the build naming the node. The others are dropped, as ExecuTorch drops
them: torch.export checked them on the traced shapes, and records those on symbolic sizes in
the program's range constraints, which the recipe's dynamic bounds satisfy. Whatever only fed
them goes with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any

import torch
from torch._ops import OpOverload
from torch.fx import Node

from etbuild.errors import StageError
from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.steps import at_node

_FUNCTIONAL = "_functional_"


@cache
def is_assertion(op: OpOverload) -> bool:
    """Whether `op` computes nothing: it returns nothing and writes nothing, or is the functional
    form of such an operator (`_functional_assert_async` of `_assert_async`), returning a token."""
    schema = op._schema
    if not schema.returns and not schema.is_mutable:
        return True
    name = schema.name.split("::")[1]
    if not name.startswith(_FUNCTIONAL):
        return False
    stem = name[len(_FUNCTIONAL) - 1:]  # `_assert_async`, `_sym_constrain_range`
    bases = [getattr(torch.ops.aten, n, None) for n in (stem, stem.lstrip("_"))]
    return any(is_assertion(getattr(b, o)) for b in bases if b is not None for o in b.overloads())


def drop_assertions(method: GraphMethod) -> GraphMethod:
    """The method without assertion calls (each checked first when it can be) and what only fed them,
    in its graph and in the graphs of its `torch.cond` branches."""
    modules = [m for m in method.exported.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    dropped = [module for module in modules if _drop_from(module.graph, method.constants)]
    if not dropped:
        return method
    for module in dropped:
        module.graph.eliminate_dead_code()
        module.recompile()
    live = set(method.exported.graph.nodes)
    return replace(method, constants={n: t for n, t in method.constants.items() if n in live})


def _drop_from(graph: torch.fx.Graph, constants: Mapping[Node, torch.Tensor]) -> bool:
    """Drop the graph's assertion calls, each checked first when it can be; whether there were any."""
    dropped = False
    for node in list(graph.nodes):
        if node.op == "call_function" and isinstance(node.target, OpOverload) and is_assertion(node.target):
            with at_node(node):
                _check(node, node.target, constants)
                node.replace_all_uses_with(_bind(node).get("dep_token"))
                graph.erase_node(node)
            dropped = True
    return dropped


def _bind(node: Node) -> dict[str, Any]:
    """The node's arguments by schema name."""
    bound = dict(zip([a.name for a in node.target._schema.arguments], node.args))
    bound.update(node.kwargs)
    return bound


def _check(node: Node, op: OpOverload, constants: Mapping[Node, torch.Tensor]) -> None:
    """Run the assertion when every argument is known at build time."""
    if not all(n in constants for n in node.all_input_nodes):
        return
    args = torch.fx.node.map_arg(node.args, constants.__getitem__)
    kwargs = torch.fx.node.map_arg(node.kwargs, constants.__getitem__)
    try:
        op(*args, **kwargs)
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise StageError(f"{op} fails at build time: {str(exc).splitlines()[0]}") from exc
