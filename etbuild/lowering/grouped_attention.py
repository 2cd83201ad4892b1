"""One token's grouped-query attention as one `custom_sdpa` call over the heads as rows (the grouped-attention step).

ExecuTorch's `llama::custom_sdpa` kernel multiplies the keys by one query head at a time: for one new token, `H`
matrix-vector products per layer. With grouped-query attention (`G` query heads per cache head; query head
`h * G + g` reads cache head `h`), the heads reordered `g * H_kv + h` make one token's queries `[1, G, H_kv, D]`:
`G` rows for each cache head, so `H_kv` products of `G` rows. The kernel takes rows as consecutive positions, so
that call is made without the causal mask and with `start_pos = start - (G - 1)`: the keys it attends,
`start_pos + G` of them, are positions `0 … start`.

This step puts each plain causal call over a KV cache (no mask, grouped heads, a cache of static length, its
position read from a tensor) in a `torch.cond`, built here rather than traced at export (tracing the branches
costs export and the decompositions about 0.7 s a layer):
- the predicate is `n == 1 and start >= G - 1`, as one comparison of the program's scalar operators
  (`start - (n - 1) * max_context >= G - 1`: they have no `and`), made once for the calls that share it;
- the one-token branch reorders the heads (`index_select`), views them as rows, calls `custom_sdpa` as above
  and puts the heads back; so `start_pos` is never negative, which the kernel does not document;
- the other branch is the call as it was: a prompt's chunk costs what it did.
A forward whose token count is static and above one has no one-token call and is left as it is. to-program
inlines the branches between two `JumpFalseCall`s (as for any `torch.cond`).
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.steps import at_node

aten = torch.ops.aten
SDPA = "llama.custom_sdpa.default"
_ITEM = aten._local_scalar_dense.default


def head_order(heads: int, groups: int) -> torch.Tensor:
    """Index of the head at each place of the rows' order: place `g * H_kv + h` holds head `h * G + g`."""
    kv_heads = heads // groups
    return torch.tensor([h * groups + g for g in range(groups) for h in range(kv_heads)])


def head_places(heads: int, groups: int) -> torch.Tensor:
    """The inverse of `head_order`: the place of each head in the rows' order."""
    return torch.argsort(head_order(heads, groups))


def grouped_attention(method: GraphMethod) -> GraphMethod:
    """The method with each eligible `custom_sdpa` call (see the module docstring) in a `torch.cond`."""
    calls = [n for n in method.exported.graph.nodes if _eligible(n)]
    if not calls:
        return method
    gm = method.exported.graph_module
    constants = dict(method.constants)
    shared: dict[Any, Node] = {}  # predicates and head-order constants, one each for the calls that share them
    for index, call in enumerate(calls):
        with at_node(call):
            _regroup(gm, call, index, constants, shared)
    gm.recompile()
    return replace(method, constants=constants)


def _args(call: Node) -> dict[str, Any]:
    """The call's arguments by the operator's schema names, defaults filled in."""
    schema = call.target._schema
    bound = {a.name: a.default_value if a.has_default_value() else None for a in schema.arguments}
    bound.update(zip([a.name for a in schema.arguments], call.args))
    bound.update(call.kwargs)
    return bound


def _eligible(node: Node) -> bool:
    if node.op != "call_function" or str(node.target) != SDPA:
        return False
    a = _args(node)
    start, q, k = a["start_pos"], a["query"].meta.get("val"), a["key"].meta.get("val")
    if a["attn_mask"] is not None or not a["is_causal"] or q is None or k is None:
        return False
    if not (isinstance(start, Node) and start.target is _ITEM and start.args[0].meta["val"].numel() == 1):
        return False
    heads, kv_heads, length, n = q.shape[2], k.shape[2], k.shape[1], q.shape[1]
    grouped = isinstance(heads, int) and isinstance(kv_heads, int) and heads > kv_heads and heads % kv_heads == 0
    return grouped and q.shape[0] == 1 and isinstance(length, int) and (not isinstance(n, int) or n == 1)


def _regroup(gm: GraphModule, call: Node, index: int, constants: dict[Node, torch.Tensor],
             shared: dict[Any, Node]) -> None:
    a = _args(call)
    query, key, value, start = a["query"], a["key"], a["value"], a["start_pos"]
    q = query.meta["val"]
    heads, groups, length = q.shape[2], q.shape[2] // key.meta["val"].shape[2], key.meta["val"].shape[1]
    graph = call.graph
    order = _constant(graph, call, constants, head_order, heads, groups, shared)
    places = _constant(graph, call, constants, head_places, heads, groups, shared)
    predicate = _predicate(graph, call, query, start, groups, length, shared)
    position = start.args[0]
    operands = (query, key, value, position, order, places)
    true_gm = _branch(gm, f"_grouped_rows_{index}", operands, start, a["scale"], groups, rows=True)
    false_gm = _branch(gm, f"_grouped_plain_{index}", operands, start, a["scale"], groups, rows=False)
    with graph.inserting_before(call):
        cond = graph.call_function(torch.ops.higher_order.cond,
                                   (predicate, graph.get_attr(true_gm), graph.get_attr(false_gm), operands))
        result = graph.call_function(operator.getitem, (cond, 0))
    cond.meta = {**call.meta, "val": (call.meta["val"],)}
    result.meta = dict(call.meta)
    call.replace_all_uses_with(result)
    graph.erase_node(call)


def _constant(graph: Graph, call: Node, constants: dict[Node, torch.Tensor], make: Any, heads: int, groups: int,
              shared: dict[Any, Node]) -> Node:
    """A node whose value, `make(heads, groups)`, is known at build time; one for the calls that share it."""
    if (make, heads, groups) not in shared:
        with graph.inserting_before(call):
            node = graph.call_function(make, (heads, groups))
        constants[node] = node.meta["val"] = make(heads, groups)
        shared[make, heads, groups] = node
    return shared[make, heads, groups]


def _predicate(graph: Graph, call: Node, query: Node, start: Node, groups: int, length: int,
               predicates: dict[Any, Node]) -> Node:
    """`start - (n - 1) * length >= G - 1` (n the query's token count), made once per start, n and G."""
    n = query.meta["val"].shape[1]
    key = (start, str(n), groups)
    if key in predicates:
        return predicates[key]
    with graph.inserting_before(call):
        if isinstance(n, int):
            left = start
        else:
            size = _node(graph, aten.sym_size.int, (query, 1), n)
            less = _node(graph, operator.sub, (size, 1), n - 1)
            span = _node(graph, operator.mul, (less, length), (n - 1) * length)
            left = _node(graph, operator.sub, (start, span), start.meta["val"] - (n - 1) * length)
        predicate = _node(graph, operator.ge, (left, groups - 1), left.meta["val"] >= groups - 1)
    predicates[key] = predicate
    return predicate


def _node(graph: Graph, target: Any, args: tuple[Any, ...], val: Any) -> Node:
    """A call of `target` on `args` whose traced value is `val`."""
    node = graph.call_function(target, args)
    node.meta["val"] = val
    return node


def _branch(gm: GraphModule, name: str, operands: tuple[Node, ...], start: Node, scale: Any, groups: int,
            rows: bool) -> str:
    """A branch of the condition as a graph module registered on `gm` under `name` (its get_attr target)."""
    graph = Graph()
    inputs = [graph.placeholder(f"arg{i}") for i in range(len(operands))]
    for node, operand in zip(inputs, operands):
        node.meta["val"] = operand.meta["val"]
    query, key, value, position, order, places = inputs
    q = query.meta["val"]
    _, n, heads, dim = q.shape
    kv_heads = heads // groups
    at = _node(graph, _ITEM, (position,), start.meta["val"])
    if rows:
        reordered = _node(graph, aten.index_select.default, (query, 2, order), q)
        if isinstance(n, int):
            size, count = n, n * groups
        else:
            size = _node(graph, aten.sym_size.int, (query, 1), n)
            count = _node(graph, operator.mul, (size, groups), n * groups)
        shape = (1, n * groups, kv_heads, dim)
        viewed = _node(graph, aten.view.default, (reordered, [1, count, kv_heads, dim]), q.new_empty(shape))
        first = _node(graph, operator.sub, (at, groups - 1), start.meta["val"] - (groups - 1))
        out = _node(graph, torch.ops.llama.custom_sdpa.default,
                    (viewed, key, value, first, None, 0.0, False, scale), q.new_empty(shape))
        back = _node(graph, aten.view.default, (out, [1, size, heads, dim]), q.new_empty(q.shape))
        result = _node(graph, aten.index_select.default, (back, 2, places), q.new_empty(q.shape))
    else:
        result = _node(graph, torch.ops.llama.custom_sdpa.default,
                       (query, key, value, at, None, 0.0, True, scale), q.new_empty(q.shape))
    graph.output((result,))
    gm.register_module(name, GraphModule(torch.nn.Module(), graph))
    return name
