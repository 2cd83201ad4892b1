"""The quantize/dequantize calls of a pt2e-converted graph, read as TOSA's integer values.

An activation is int8 per tensor, affine (scale, zero point); a weight int8 per output channel (or per
tensor), symmetric; a bias int32 per channel (the `npu-int8` quantizer mode) or float (then rounded here to
the same int32 values: scale = input scale × weight scale).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines torch's quantized_decomposed ops)
from torch.fx import Node

qd = torch.ops.quantized_decomposed
Q = qd.quantize_per_tensor.default
DQ = qd.dequantize_per_tensor.default
WEIGHT_DQ = (qd.dequantize_per_channel.default, qd.dequantize_per_tensor.default)
INT8_RANGE = (-128, 127)


@dataclass(frozen=True)
class QParams:
    """One int8 activation's parameters: real = scale × (q − zero_point)."""

    scale: float
    zero_point: int

    def quantize(self, real: float) -> int:
        """The int8 value nearest `real`, saturated (±inf: the range's ends)."""
        return int(np.clip(np.round(real / self.scale) + self.zero_point, *INT8_RANGE))


def activation_params(node: Node) -> QParams | None:
    """The parameters of an int8 per-tensor quantize or dequantize call (None: another call or range)."""
    if node.op != "call_function" or node.target not in (Q, DQ):
        return None
    scale, zero, low, high, dtype = node.args[1:6]
    if dtype is not torch.int8 or (low, high) != INT8_RANGE or isinstance(scale, Node) or isinstance(zero, Node):
        return None
    return QParams(float(scale), int(zero))


@dataclass(frozen=True)
class QWeight:
    """An int8 weight in its operator's layout (output channels first) and one scale per output channel."""

    values: np.ndarray
    scales: np.ndarray


def weight_of(node: Node, constants: Mapping[Node, torch.Tensor], transposed: bool = False) -> QWeight | None:
    """The int8 constant weight a weighted call reads through a dequantize (None: not such a weight).
    `transposed`: the call reads it as [in, out] (mm/addmm), its scales along axis 1."""
    if not isinstance(node, Node) or node.target not in WEIGHT_DQ or node.args[0] not in constants:
        return None
    values = constants[node.args[0]]
    scales = constants.get(node.args[1], node.args[1]) if isinstance(node.args[1], Node) else node.args[1]
    if values.dtype is not torch.int8:
        return None
    if node.target is WEIGHT_DQ[0]:
        axis, zeros = node.args[3], node.args[2]
        if (axis != (1 if transposed else 0)) or (zeros is not None and bool(constants[zeros].any())):
            return None
        scale = torch.as_tensor(scales, dtype=torch.float64).numpy()
    else:
        if int(node.args[2]) != 0:
            return None
        channels = values.shape[1 if transposed else 0]
        scale = np.full(channels, float(scales), dtype=np.float64)
    array = values.numpy()
    return QWeight(array.T.copy() if transposed else array, scale)


def bias_of(node: Node | None, constants: Mapping[Node, torch.Tensor], scales: np.ndarray) -> np.ndarray | None:
    """The int32 bias of a weighted call whose accumulator has per-channel `scales` (None: not a constant)."""
    if node is None:
        return np.zeros(len(scales), dtype=np.int32)
    if node in constants:
        real = constants[node].to(torch.float64).numpy()
        return np.clip(np.round(real / scales), -(2**31 - 1), 2**31 - 1).astype(np.int32)
    if node.target in WEIGHT_DQ and node.args[0] in constants and constants[node.args[0]].dtype is torch.int32:
        stored = constants[node.args[0]].numpy().astype(np.int64)
        given = torch.as_tensor(constants.get(node.args[1], node.args[1]) if isinstance(node.args[1], Node)
                                else node.args[1], dtype=torch.float64).numpy()
        real = stored * given  # its own scale: equal to `scales` up to float rounding in the quantizer mode
        return np.clip(np.round(real / scales), -(2**31 - 1), 2**31 - 1).astype(np.int32)
    return None
