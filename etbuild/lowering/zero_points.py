"""Drops the zero points of symmetric per-channel weights (the drop-zero-points step).

pt2e gives every per-channel dequantize of a weight its zero points: an int64 per output
channel, all zero for the symmetric weights etbuild's schemes use. `dequantize_per_channel`
takes them as optional (`Tensor? zero_points`, None meaning zero), so a constant all-zero
tensor becomes None: the program stores 8 bytes less per channel and the call does no
subtraction. ExecuTorch's kernel reads None the same way.
"""

from __future__ import annotations

import torch

from etbuild.lowering import quantized_ops  # noqa: F401  (torch's quantized_decomposed ops)
from etbuild.lowering.forms import GraphMethod
from etbuild.lowering.steps import at_node

qd = torch.ops.quantized_decomposed
_ZERO_POINTS = 2  # dequantize_per_channel(input, scales, zero_points, axis, ...)


def drop_zero_points(method: GraphMethod) -> GraphMethod:
    """The method with each all-zero constant zero-point argument of `dequantize_per_channel` as None."""
    for node in method.exported.graph.nodes:
        if node.target is not qd.dequantize_per_channel.default:
            continue
        zeros = node.args[_ZERO_POINTS]
        value = method.constants.get(zeros) if zeros is not None else None
        if value is not None and not value.is_floating_point() and not bool(value.any()):
            with at_node(node):
                args = list(node.args)
                args[_ZERO_POINTS] = None
                node.args = tuple(args)
    return method
