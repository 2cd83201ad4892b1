"""Scaled dot-product attention written out as its matmuls and softmax before annotation (the `npu-int8`
mode), so that each step gets its own int8 parameters, as an NPU computes it: ExecuTorch's Arm quantizer
decomposes it the same way before annotating.

    scaled_dot_product_attention(q, k, v, scale=σ) = softmax(q @ kᵀ × σ, -1) @ v   (σ = 1/√E by default)

Only attention without a mask, dropout, causality or grouped heads is rewritten; any other stays one call.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default


def _plain(node: Node) -> bool:
    args = list(node.args[3:]) + [None] * 5
    mask, dropout, causal = args[0], args[1] or 0.0, args[2] or False
    mask = node.kwargs.get("attn_mask", mask)
    dropout = node.kwargs.get("dropout_p", dropout)
    causal = node.kwargs.get("is_causal", causal)
    return mask is None and not dropout and not causal and not node.kwargs.get("enable_gqa", False)


def _call(model: GraphModule, target: object, *args: object) -> Node:
    created = model.graph.call_function(target, args)
    values = [a.meta["val"] if isinstance(a, Node) else a for a in args]
    created.meta["val"] = target(*values)
    return created


def decompose_attention(model: GraphModule) -> GraphModule:
    """`model` with each plain scaled_dot_product_attention call replaced by its matmuls and softmax."""
    for node in [n for n in model.graph.nodes if n.op == "call_function" and n.target is SDPA and _plain(n)]:
        query, key, value = node.args[:3]
        scale = node.kwargs.get("scale", node.args[6] if len(node.args) > 6 else None)
        scale = 1 / math.sqrt(query.meta["val"].shape[-1]) if scale is None else float(scale)
        with model.graph.inserting_before(node):
            scores = _call(model, aten.matmul.default, query, _call(model, aten.transpose.int, key, -2, -1))
            weights = _call(model, aten.softmax.int, _call(model, aten.mul.Tensor, scores, scale), -1)
            out = _call(model, aten.matmul.default, weights, value)
        for created in (scores, weights, out):
            created.meta.setdefault("nn_module_stack", node.meta.get("nn_module_stack", {}))
        node.replace_all_uses_with(out)
        model.graph.erase_node(node)
    model.recompile()
    return model
