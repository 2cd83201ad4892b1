"""Moves a permute of a dequantized constant weight onto the int8 weight (the quantized-weights step).

Decomposing a quantized linear gives `permute(dequantize(W_int8), [1, 0])` → `addmm`: without
this step the program would dequantize and then transpose the float weight on every call.
Here the permute moves before the dequantize, `dequantize(permute(W_int8), axis')` with the
per-channel axis renumbered (`axis' = dims.index(axis)`), so fold-constants stores the int8
weight already transposed and the call does no transposing. Applies to
`dequantize_per_channel` and `dequantize_per_tensor` of a constant whose only user is the
permute. A backend partitioner that wants pt2e's own form (dq → permute → linear) runs before
this step.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from etbuild.lowering import quantized_ops  # noqa: F401  (torch's quantized_decomposed ops)
from etbuild.lowering.fold_constants import constant_inputs
from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.steps import at_node

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
_DEQUANTIZE = (qd.dequantize_per_channel.default, qd.dequantize_per_tensor.default)
_AXIS = 3  # dequantize_per_channel(input, scales, zero_points, axis, ...)


def move_weight_permutes(method: GraphMethod) -> GraphMethod:
    """The method with each permute of a dequantized constant moved onto the quantized constant."""
    graph = method.exported.graph
    constants = constant_inputs(method.exported)
    for node in list(graph.nodes):
        dq = node.args[0] if node.target is aten.permute.default else None
        if isinstance(dq, Node) and dq.target in _DEQUANTIZE and len(dq.users) == 1 and dq.args[0] in constants:
            with at_node(node):
                _swap(node, dq)
    return method


def _swap(permute: Node, dq: Node) -> None:
    """permute(dq(w, …), dims) → dq(permute(w, dims), …) with the channel axis renumbered."""
    dims = [int(d) for d in permute.args[1]]
    weight = dq.args[0]
    with permute.graph.inserting_before(dq):
        moved = permute.graph.call_function(aten.permute.default, (weight, dims))
    moved.meta = {**permute.meta, "val": weight.meta["val"].permute(dims)}
    args = list(dq.args)
    args[0] = moved
    if dq.target is qd.dequantize_per_channel.default:
        axis = int(args[_AXIS]) % len(dims)
        args[_AXIS] = dims.index(axis)
    dq.args = tuple(args)
    dq.meta["val"] = permute.meta["val"]
    permute.replace_all_uses_with(dq)
    permute.graph.erase_node(permute)
