"""Fuses a quantized embedding table into ExecuTorch's `embedding_byte` / `embedding_4bit` (the
quantized-embeddings step).

The quantize stage stores a table as `dequantize_per_channel_group(W_int8, scales, None, qmin,
qmax, int8, group, float32)` → `embedding(·, indices)`. ExecuTorch's portable runtime has no
kernel for that dequantize; it has `quantized_decomposed::embedding_byte.out` (int8 values) and
`embedding_4bit.out` (two values per byte: element 2j in the high nibble and 2j+1 in the low
one, each stored plus 8), which look rows up and dequantize only them. Both take the scales as
(rows, groups); the group length is the row length over the groups. The pair becomes one
call, its weight a constant (packed for 4 bits).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch.fx import Node

from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.quantized_ops import ProgramOp
from etbuild.lowering.steps import at_node

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
EMBEDDING_OPS = {
    (-128, 127): "quantized_decomposed::embedding_byte.out",
    (-8, 7): "quantized_decomposed::embedding_4bit.out",
}


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """int8 values in [-8, 7], shape (rows, 2k) → uint8 (rows, k): (v[2j] + 8) << 4 | (v[2j + 1] + 8)."""
    shifted = (values.to(torch.int16) + 8).to(torch.uint8)
    return (shifted[:, 0::2] << 4) | shifted[:, 1::2]


def fuse_quantized_embeddings(method: GraphMethod) -> GraphMethod:
    """The method with each embedding of a dequantized constant table as one quantized lookup."""
    constants = dict(method.constants)
    graph = method.exported.graph
    for node in list(graph.nodes):
        dq = node.args[0] if node.target is aten.embedding.default else None
        if isinstance(dq, Node) and _fusable(dq, constants):
            with at_node(node):
                _fuse(node, dq, constants)
    return replace(method, constants=constants)


def _fusable(dq: Node, constants: dict[Node, torch.Tensor]) -> bool:
    if dq.target is not qd.dequantize_per_channel_group.default or len(dq.users) != 1:
        return False
    weight, scales, zero_points, qmin, qmax = dq.args[:5]
    return weight in constants and scales in constants and zero_points is None and (qmin, qmax) in EMBEDDING_OPS


def _fuse(embedding: Node, dq: Node, constants: dict[Node, torch.Tensor]) -> None:
    weight, scales, _, qmin, qmax = dq.args[:5]
    graph = embedding.graph
    if (qmin, qmax) == (-8, 7):
        with graph.inserting_before(embedding):
            packed = graph.call_function(pack_int4, (weight,))
        constants[packed] = pack_int4(constants[weight])
        packed.meta["val"] = constants[packed]
        weight = packed
    with graph.inserting_before(embedding):
        fused = graph.call_function(ProgramOp(EMBEDDING_OPS[qmin, qmax]), (weight, scales, None, qmin, qmax,
                                                                          embedding.args[1]))
    fused.meta = dict(embedding.meta)
    embedding.replace_all_uses_with(fused)
    graph.erase_node(embedding)
    graph.erase_node(dq)
