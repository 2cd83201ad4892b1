"""Folds an inference BatchNorm into the convolution before it, at build time.

`convolution(x, W, b)` followed by `_native_batch_norm_legit_no_training(·, γ, β, μ, σ², eps)`
becomes one convolution with W' = W·s and b' = (b − μ)·s + β, where s = γ / sqrt(σ² + eps)
per output channel — when W, b and the statistics are all constants and the convolution
feeds only the BatchNorm. The program then has no BatchNorm call at all.
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any, NamedTuple

import torch
from torch.fx import Graph, Node

from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.steps import at_node

aten = torch.ops.aten


def _const(arg: Any, consts: dict[Node, torch.Tensor]) -> torch.Tensor | None:
    """The constant an argument names (None for an absent optional); KeyError if not constant."""
    if arg is None:
        return None
    if not isinstance(arg, Node):
        raise KeyError(arg)
    return consts[arg]


class _Fold(NamedTuple):
    conv: Node
    weight: torch.Tensor
    eps: float


def _conv_feeding(bn: Node, consts: dict[Node, torch.Tensor]) -> _Fold | None:
    """The convolution a BatchNorm can be folded into (with its weight and eps), or None."""
    conv, eps = bn.args[0], bn.args[6]
    if not isinstance(conv, Node) or conv.target is not aten.convolution.default or len(conv.users) != 1:
        return None
    if conv.args[6] or not isinstance(eps, (int, float)):  # transposed convolutions keep their BatchNorm
        return None
    try:
        weight = _const(conv.args[1], consts)
        for arg in (conv.args[2], *bn.args[1:5]):
            _const(arg, consts)
    except KeyError:
        return None
    return _Fold(conv, weight, float(eps)) if weight is not None else None


def _folded(fold: _Fold, bn: Node, consts: dict[Node, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    conv, weight = fold.conv, fold.weight
    ones, zeros = torch.ones(weight.shape[0]), torch.zeros(weight.shape[0])
    gamma, beta, mean, var = (_const(a, consts) for a in bn.args[1:5])
    scale = (gamma if gamma is not None else ones) / torch.sqrt((var if var is not None else ones) + fold.eps)
    bias = _const(conv.args[2], consts)
    shift = ((bias if bias is not None else zeros) - (mean if mean is not None else zeros)) * scale
    shift = shift + (beta if beta is not None else zeros)
    new_weight = weight * scale.reshape(-1, *([1] * (weight.dim() - 1)))
    return new_weight.to(weight.dtype).contiguous(), shift.to(weight.dtype)


def fuse_batch_norm(method: GraphMethod) -> GraphMethod:
    """Fold every foldable conv → BatchNorm pair of the method's graph (edited in place)."""
    graph, consts = method.exported.graph, dict(method.constants)
    folded = 0
    for bn in list(graph.nodes):
        if bn.target is aten._native_batch_norm_legit_no_training.default:
            with at_node(bn):
                folded += _fold_into_conv(graph, bn, consts, folded)
    return replace(method, constants=consts)


def _fold_into_conv(graph: Graph, bn: Node, consts: dict[Node, torch.Tensor], index: int) -> int:
    """Fold one BatchNorm into its convolution if it can be (1), else leave it (0)."""
    fold = _conv_feeding(bn, consts)
    users = list(bn.users)
    if fold is None or any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in users):
        return 0
    conv = fold.conv
    weight, bias = _folded(fold, bn, consts)
    with graph.inserting_before(conv):
        w_node = graph.create_node("get_attr", f"_folded_bn_weight_{index}")
        b_node = graph.create_node("get_attr", f"_folded_bn_bias_{index}")
    consts[w_node], consts[b_node] = weight, bias
    w_node.meta["val"], b_node.meta["val"] = weight, bias
    conv.args = (conv.args[0], w_node, b_node, *conv.args[3:])
    for u in users:
        if u.args[1] == 0:
            u.replace_all_uses_with(conv)
        graph.erase_node(u)
    graph.erase_node(bn)
    return 1
