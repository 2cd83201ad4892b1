"""Reading the quantize/dequantize calls of a pt2e-converted graph as XNNPACK's quantized values.

torchao's pt2e flow leaves `quantized_decomposed` calls around each quantized operator:
dequantize(int8 weight) and dequantize(quantize(activation)) feed it, quantize(result) follows
it. XNNPACK runs the operator on the int8 values themselves: weights qcint8 (one scale per
output channel, zero point 0), activations qint8 (one scale and zero point), biases qcint32
(scale = input scale × weight scale), or, for dynamic quantization, qdint8 rows quantized at
run time. Here: finding the int8 weight behind a weight argument, the quantization of an
operator's result, and the XNNPACK values for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines torch's quantized_decomposed ops)
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.builder import GraphBuilder
from etbuild.backends.xnnpack.aot.known import Known
from etbuild.backends.xnnpack.format import graph as g

qd = torch.ops.quantized_decomposed
aten = torch.ops.aten
CLAMPS = (aten.relu.default, aten.hardtanh.default, aten.clamp.default)
VIEWS = (
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.squeeze.dims, aten.squeeze.dim,
    aten.squeeze.default, aten.unsqueeze.default, aten.view_copy.default, aten.squeeze_copy.dims,
    aten.unsqueeze_copy.default,
)
"""Calls that only reshape a value: the backend relabels how it is held (an int8 value stays int8)."""
STATIC_Q = qd.quantize_per_tensor.default
INT32_RANGE = (-(2**31), 2**31 - 1)
INT4_RANGE = (-8, 7)
WEIGHT_DEQUANTIZE = (qd.dequantize_per_channel.default, qd.dequantize_per_tensor.default,
                     qd.dequantize_per_channel_group.default)


@dataclass(frozen=True)
class QWeight:
    """An int8 weight as an operator reads it (after the permutes on its way), one scale per channel of `axis`."""

    values: torch.Tensor
    scales: torch.Tensor  # one per channel of `axis`; int4 groups: [channels, groups]
    axis: int
    group_size: int = 0  # int4 groups of the other dim (of a 2-D weight); 0: int8 per channel


def _per_group(dq: Node, q: torch.Tensor, known: Known) -> tuple[torch.Tensor, torch.Tensor, int, int] | None:
    """An int4 weight [rows, columns] in groups along its columns, symmetric (XNNPACK's qbint4 range)."""
    zero = dq.args[2]
    if q.dim() != 2 or tuple(dq.args[3:5]) != INT4_RANGE or (zero is not None and bool(known.value(zero).any())):
        return None
    scales, group = known.value(dq.args[1]).to(torch.float32), int(dq.args[6])
    if group <= 0 or q.shape[1] % group or tuple(scales.shape) != (q.shape[0], q.shape[1] // group):
        return None
    return q, scales, 0, group


def _per_channel(dq: Node, known: Known) -> tuple[torch.Tensor, torch.Tensor, int, int] | None:
    q = known.value(dq.args[0])
    if q.dtype != torch.int8:
        return None
    if dq.target is qd.dequantize_per_channel_group.default:
        return _per_group(dq, q, known)
    if dq.target is qd.dequantize_per_channel.default:
        zero = dq.args[2]
        if zero is not None and bool(known.value(zero).any()):
            return None
        return q, known.value(dq.args[1]).to(torch.float32), int(dq.args[3]) % q.dim(), 0
    if dq.target is qd.dequantize_per_tensor.default and dq.args[2] == 0 and q.dim() >= 1:
        return q, torch.full((q.shape[0],), float(dq.args[1])), 0, 0
    return None


def quantized_weight(arg: Any, known: Known) -> QWeight | None:
    """The int8 weight (zero points 0) behind a weight argument, through permutes; None when there is none."""
    perms: list[list[int]] = []
    node = arg
    while isinstance(node, Node) and node.target in (aten.permute.default, aten.permute_copy.default):
        perms.append([int(d) for d in node.args[1]])
        node = node.args[0]
    if not isinstance(node, Node) or node not in known or node.op != "call_function" or not node.all_input_nodes:
        return None
    if node.target not in WEIGHT_DEQUANTIZE:
        return None
    found = _per_channel(node, known)
    if found is None:
        return None
    values, scales, axis, group = found
    for perm in reversed(perms):
        perm = [d % values.dim() for d in perm]
        values, axis = values.permute(perm), perm.index(axis)
    return QWeight(values.contiguous(), scales, axis, group)


def result_quant(node: Node) -> lay.Quant | None:
    """The static int8 quantization of an operator's result: the quantize call that alone reads it
    through clamps (which then fuse into the operator), then reshapes (a Linear on a 3-D or 4-D
    input is view → addmm → view: the int8 result is reshaped as it is), or None."""
    reshaped = False
    while len(node.users) == 1:
        user = next(iter(node.users))
        if user.target is STATIC_Q and user.args[5] == torch.int8:
            return lay.Quant(float(user.args[1]), int(user.args[2]))
        if user.target in VIEWS:
            reshaped = True
        elif user.target not in CLAMPS or reshaped:
            return None
        node = user
    return None


def static(held: lay.Held) -> lay.Quant | None:
    """The quantization of a value held as static int8, or None."""
    return held.quant if held.quant is not None and held.quant.scale is not None else None


def per_tensor(quant: lay.Quant) -> g.PerTensorQuant:
    return g.PerTensorQuant(scale=float(np.float32(quant.scale)), zero_point=quant.zero_point)


def per_channel(b: GraphBuilder, scales: torch.Tensor, channel_dim: int) -> g.PerChannelQuant:
    """Per-channel quantization whose scales are named data `scale_<sha256>` (as ExecuTorch stores them)."""
    data = scales.detach().to(torch.float32).contiguous().numpy()
    index = b.constant_data(data.tobytes(), prefix="scale_")
    return g.PerChannelQuant(scale=[], channel_dim=channel_dim, scale_buffer_idx=index, num_scales=len(data))


def filter_value(b: GraphBuilder, values: torch.Tensor, scales: torch.Tensor, channel_dim: int) -> int:
    """A qcint8 filter (its int8 values already in XNNPACK's layout)."""
    quant = per_channel(b, scales, channel_dim)
    return b.constant(values.contiguous().numpy(), g.XNNDatatype.QCINT8, quant)


def blockwise_filter(b: GraphBuilder, values: torch.Tensor, scales: torch.Tensor, group_size: int) -> int:
    """A qbint4 filter [out, in] in groups of `group_size` along `in`: two values per byte (value + 8,
    the even index in the low nibble), one bf16 scale per group as named data `scale_<sha256>`."""
    out, inp = values.shape
    nibbles = (values.to(torch.int16) + 8).to(torch.uint8).reshape(-1)
    packed = (nibbles[1::2] << 4 | nibbles[0::2]).reshape(out, inp // 2)
    bf16 = scales.to(torch.bfloat16).contiguous().view(torch.int16).numpy()
    index = b.constant_data(bf16.tobytes(), prefix="scale_")
    quant = g.PerChannelGroupQuant(scale=[], channel_dim=0, group_size=group_size, scale_buffer_idx=index,
                                   num_scales=scales.numel())
    return b.constant(packed.numpy(), g.XNNDatatype.QBINT4, quant, dims=(out, inp))


def bias_value(b: GraphBuilder, bias: torch.Tensor, input_scale: float, scales: torch.Tensor) -> int:
    """A qcint32 bias: round(bias / (input scale × weight scale)) per channel."""
    bias_scales = (float(np.float32(input_scale)) * scales.to(torch.float64)).to(torch.float32)
    q = torch.round(bias.to(torch.float64) / bias_scales.to(torch.float64)).clamp(*INT32_RANGE).to(torch.int32)
    return b.constant(q.numpy(), g.XNNDatatype.QCINT32, per_channel(b, bias_scales, 0))
