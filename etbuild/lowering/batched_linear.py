"""A linear layer torch decomposed into a batch of products gets its folded form back (the fold-linear step).

torch decomposes `linear`/`matmul` of an N-D input by a 2-D weight into one matrix product
over all rows (`view → mm/addmm → view`) only when the input is contiguous in eager; after a
transpose (token-mixing MLPs, channel-last attention) it takes the other path: the weight
broadcast over the batch (`expand`), one `bmm`, then the bias `add`. In a program every tensor
is dense, so the flattening view is always valid, and the folded form is the one kernels and
backends know as a linear layer: XNNPACK's fully-connected node with its weight stored once
(int8 when quantized) instead of a batched product reading a broadcast copy of a float weight.

Here `bmm(x, view?(expand(W, [b, k, n])))` with a 2-D `W` becomes `view(mm(view(x, [b·m, k]),
W), [b, m, n])`, and an `add` of a 1-D bias of `n` values to its result becomes `addmm`. An
`expand` to its input's own shape, which the same decomposition leaves before the `bmm`, is
dropped.
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.steps import at_node

aten = torch.ops.aten
_VIEWS = (aten.view.default, aten._unsafe_view.default)


def fold_batched_linears(method: GraphMethod) -> GraphMethod:
    """The method with each batched product by a broadcast 2-D weight folded into one matrix product."""
    graph = method.exported.graph
    for node in list(graph.nodes):
        if node.target is aten.expand.default and _same_shape(node, node.args[0]) and not _is_output(node):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    for node in list(graph.nodes):
        if (node.target is aten.bmm.default and _static(node.args[0])
                and (weight := _broadcast_weight(node.args[1])) is not None):
            with at_node(node):
                _fold(graph, node, weight)
    return method


def _val(node: object) -> torch.Tensor | None:
    return node.meta.get("val") if isinstance(node, Node) else None


def _same_shape(node: Node, source: object) -> bool:
    out, inp = _val(node), _val(source)
    return isinstance(out, torch.Tensor) and isinstance(inp, torch.Tensor) and tuple(out.shape) == tuple(inp.shape)


def _static(node: object) -> bool:
    """Whether the node's shape is known at build time (a dynamic one would need size calls to view)."""
    val = _val(node)
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape)


def _is_output(node: Node) -> bool:
    return any(user.op == "output" for user in node.users)


def _broadcast_weight(operand: object) -> Node | None:
    """The 2-D `W` when `operand`, `[b, k, n]`, is `W` expanded over leading dimensions (through views
    that keep the last two)."""
    shape = _val(operand).shape if _val(operand) is not None else ()
    while isinstance(operand, Node) and operand.target in _VIEWS:
        operand = operand.args[0]
    if not (isinstance(operand, Node) and operand.target is aten.expand.default):
        return None
    weight, expanded = operand.args[0], _val(operand)
    value = _val(weight)
    if value is None or value.dim() != 2 or expanded is None:
        return None
    return weight if tuple(expanded.shape[-2:]) == tuple(value.shape) == tuple(shape[1:]) else None


def _fold(graph: Graph, bmm: Node, weight: Node) -> None:
    """bmm(x, expand(W)) → view(mm(view(x), W)), or view(addmm(bias, view(x), W)) absorbing a bias add."""
    x = bmm.args[0]
    batch, rows, inner = _val(x).shape
    cols = _val(weight).shape[1]
    bias, add = _bias_add(bmm, cols)
    with graph.inserting_before(bmm):
        flat = graph.call_function(aten.view.default, (x, [batch * rows, inner]))
        flat.meta = {**bmm.meta, "val": _val(x).contiguous().view(batch * rows, inner)}
        if bias is None:
            product = graph.call_function(aten.mm.default, (flat, weight))
            product.meta = {**bmm.meta, "val": flat.meta["val"] @ _val(weight)}
        else:
            product = graph.call_function(aten.addmm.default, (bias, flat, weight))
            product.meta = {**bmm.meta, "val": torch.addmm(_val(bias), flat.meta["val"], _val(weight))}
        shape = list(_val(add if add is not None else bmm).shape)
        result = graph.call_function(aten.view.default, (product, shape))
        result.meta = {**bmm.meta, "val": product.meta["val"].view(shape)}
    (add or bmm).replace_all_uses_with(result)
    _erase_unused(graph, [add, *_chain(bmm)] if add is not None else _chain(bmm))


def _chain(bmm: Node) -> list[Node]:
    """The views after `bmm` up to its bias add, `bmm` itself, and the views and expand of its weight operand."""
    after, node = [], bmm
    while len(node.users) == 1 and (user := next(iter(node.users))).target in _VIEWS:
        after.append(user)
        node = user
    before, node = [], bmm.args[1]
    while isinstance(node, Node) and node.target in (*_VIEWS, aten.expand.default):
        before.append(node)
        node = node.args[0]
    return [*reversed(after), bmm, *before]


def _erase_unused(graph: Graph, nodes: list[Node]) -> None:
    """Erase each of `nodes`, users first, that nothing reads any more."""
    for node in nodes:
        if not node.users:
            graph.erase_node(node)


def _bias_add(bmm: Node, cols: int) -> tuple[Node | None, Node | None]:
    """(bias, add) when the product's only use is, through views that keep its last dimension,
    `add(product, bias)` of a 1-D bias of `cols` values; (None, None) otherwise."""
    node = bmm
    while len(node.users) == 1 and (user := next(iter(node.users))).target in _VIEWS and _val(user).shape[-1] == cols:
        node = user
    if len(node.users) != 1:
        return None, None
    add = next(iter(node.users))
    if add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs.get("alpha", 1) != 1:
        return None, None
    bias = add.args[1] if add.args[0] is node else add.args[0]
    value = _val(bias)
    if value is None or value.dim() != 1 or value.shape[0] != cols or value.dtype != _val(bmm).dtype:
        return None, None
    if tuple(_val(add).shape) != tuple(_val(node).shape):
        return None, None
    return bias, add
