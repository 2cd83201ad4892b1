"""Folds an inference BatchNorm into the convolution before it, at build time.

`convolution(x, W, b)` followed by `_native_batch_norm_legit_no_training(·, γ, β, μ, σ², eps)`
becomes one convolution with W' = W·s and b' = (b − μ)·s + β, where s = γ / sqrt(σ² + eps)
per output channel — when W, b and the statistics are all constants and the convolution
feeds only the BatchNorm. The program then has no BatchNorm call at all.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph, Node

aten = torch.ops.aten


def _foldable(bn: Node, consts: dict[Node, torch.Tensor]) -> bool:
    conv = bn.args[0]
    if not isinstance(conv, Node) or conv.target is not aten.convolution.default or len(conv.users) != 1:
        return False
    weight, bias = conv.args[1], conv.args[2]
    stats = [a for a in bn.args[1:5] if a is not None]
    transposed = conv.args[6]
    return not transposed and weight in consts and (bias is None or bias in consts) and all(s in consts for s in stats)


def _folded(bn: Node, consts: dict[Node, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    conv = bn.args[0]
    weight = consts[conv.args[1]]
    out_channels = weight.shape[0]
    gamma, beta, mean, var = (consts[a] if a is not None else None for a in bn.args[1:5])
    eps = bn.args[6]
    scale = (gamma if gamma is not None else torch.ones(out_channels)) / torch.sqrt(var + eps)
    bias = consts[conv.args[2]] if conv.args[2] is not None else torch.zeros(out_channels)
    shift = beta if beta is not None else torch.zeros(out_channels)
    new_weight = weight * scale.reshape(-1, *([1] * (weight.dim() - 1)))
    return new_weight.to(weight.dtype).contiguous(), ((bias - mean) * scale + shift).to(weight.dtype)


def fuse_batch_norm(graph: Graph, consts: dict[Node, torch.Tensor]) -> int:
    """Fold every foldable conv → BatchNorm pair in place; returns how many were folded."""
    folded = 0
    for bn in list(graph.nodes):
        if bn.target is not aten._native_batch_norm_legit_no_training.default or not _foldable(bn, consts):
            continue
        users = list(bn.users)
        if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in users):
            continue
        conv = bn.args[0]
        weight, bias = _folded(bn, consts)
        with graph.inserting_before(conv):
            w_node = graph.create_node("get_attr", f"_folded_bn_weight_{folded}")
            b_node = graph.create_node("get_attr", f"_folded_bn_bias_{folded}")
        consts[w_node], consts[b_node] = weight, bias
        w_node.meta["val"], b_node.meta["val"] = weight, bias
        conv.args = (conv.args[0], w_node, b_node, *conv.args[3:])
        for u in users:
            if u.args[1] == 0:
                u.replace_all_uses_with(conv)
            graph.erase_node(u)
        graph.erase_node(bn)
        folded += 1
    return folded
