"""How each arithmetic call of an int8 partition becomes TOSA operators (TOSA-1.0+INT).

One function per operator, `(lowering, node) -> Value`: convolutions and linear layers accumulate in
int32 (RESCALE follows at the quantize), adds rescale both sides to a shared int32 scale first, pools and
clamps stay int8. Shape-only calls are in shape.py; the walk that calls these is lower.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from torch.fx import Node

from etbuild.backends.tosa.aot.quant import QParams, activation_params, bias_of, weight_of
from etbuild.backends.tosa.aot.values import CHANNELS_LAST, TORCH, Context, Value, in_layout, reshape
from etbuild.backends.tosa.rescale import keeps_int8, multipliers_shifts

ADD_SHIFT = 20
"""Bits an int8 addend is shifted up by in int32 before the add (as TFLite's and ExecuTorch's int8 add)."""


def _int8(b: Any, v: int) -> list[int]:
    return list(np.array([v], dtype=np.int8).tobytes())


def rescale(lw: Context, value: Value, factors: np.ndarray, out_zp: int, dtype: type) -> str:
    """RESCALE the value's stored tensor by `factors` (one, or one per last-dim channel) to `dtype`. Channels
    whose fixed-point factors all agree (a layer norm's γ of equal magnitudes) take one: the same values, and
    Vela folds a per-tensor RESCALE into an element-wise operator before it, never a per-channel one."""
    b = lw.b
    multipliers, shifts = multipliers_shifts(np.atleast_1d(factors))
    if (multipliers == multipliers[0]).all() and (shifts == shifts[0]).all():
        multipliers, shifts = multipliers[:1], shifts[:1]
    in_zp = 0 if value.scales is not None else value.params.zero_point
    inputs = [value.tensor, b.const(multipliers, "multiplier"), b.const(shifts, "shift"),
              b.zero_point(in_zp, value.dtype), b.zero_point(out_zp, dtype)]
    return b.op("RESCALE", inputs, value.stored, dtype, "RescaleAttribute", True,
                b.ts.RoundingMode.SINGLE_ROUND, len(multipliers) > 1, False, False)


def clamp_int8(lw: Context, tensor: str, shape: tuple[int, ...], low: int, high: int) -> str:
    if (low, high) == (-128, 127):
        return tensor
    b = lw.b
    return b.op("CLAMP", [tensor], shape, np.int8, "ClampAttribute", _int8(b, low), _int8(b, high),
                b.ts.NanPropagationMode.PROPAGATE)


def same_steps(value: Value, params: QParams) -> bool:
    """Whether an int8 value already holds its codes under `params`: the same zero point, and a scale so close
    that a RESCALE to it would give every value back unchanged (an observer's float32 rounding apart)."""
    p = value.params
    return p == params or (p.zero_point == params.zero_point and keeps_int8(p.scale / params.scale))


def requantize(lw: Context, value: Value, params: QParams) -> Value:
    """An int8 value with other parameters: one RESCALE (none when it would change no value)."""
    if same_steps(value, params):
        return replace(value, params=params)
    factor = np.array([value.params.scale / params.scale])
    return Value(rescale(lw, value, factor, params.zero_point, np.int8), value.shape, value.layout, params)


def quantize(lw: Context, node: Node) -> Value:
    """An int8 quantize of a computed value: a RESCALE to its parameters (none when they are the value's
    own), then the clamp a fused ReLU or hardtanh left."""
    value, params = lw.value(node.args[0]), activation_params(node)
    if value.scales is None and value.clamp is None and same_steps(value, params):
        return replace(value, params=params)
    if value.scales is not None:
        tensor = rescale(lw, value, value.scales / params.scale, params.zero_point, np.int8)
    else:
        tensor = rescale(lw, value, np.array([value.params.scale / params.scale]), params.zero_point, np.int8)
    low, high = value.clamp or (-np.inf, np.inf)
    tensor = clamp_int8(lw, tensor, value.stored, params.quantize(low), params.quantize(high))
    return Value(tensor, value.shape, value.layout, params)


def dequantize(lw: Context, node: Node) -> Value | None:
    """An activation's dequantize: its int8 value with its parameters; of an int8 constant quantized as an
    activation (a position table), that constant (a weight's: nothing, its user reads it)."""
    params, source = activation_params(node), node.args[0]
    if params is None:
        return None
    if source in lw.constants:
        values = lw.constants[source]
        if str(values.dtype) != "torch.int8":
            return None
        return Value(lw.b.const(values.numpy(), "constant"), tuple(values.shape), params=params)
    return replace(lw.value(source), params=params)


def clamp(lw: Context, node: Node) -> Value:
    """relu, hardtanh, clamp: on an accumulator, kept for its quantize; on int8, a CLAMP."""
    value = lw.value(node.args[0])
    low, high = clamp_bounds(node)
    if value.scales is not None:
        old_low, old_high = value.clamp or (-np.inf, np.inf)
        return replace(value, clamp=(max(low, old_low), min(high, old_high)))
    p = value.params
    return replace(value, tensor=clamp_int8(lw, value.tensor, value.stored, p.quantize(low), p.quantize(high)))


def clamp_bounds(node: Node) -> tuple[float, float]:
    name = node.target.__name__.split(".")[0]
    if name == "relu":
        return 0.0, np.inf
    low, high = (list(node.args[1:3]) + [None, None])[:2]
    if name == "hardtanh":
        low, high = (-1.0 if low is None else low), (1.0 if high is None else high)
    return (-np.inf if low is None else float(low)), (np.inf if high is None else float(high))


def convolution(lw: Context, node: Node) -> Value:
    """aten.convolution (1-D or 2-D, groups 1 or depthwise) → CONV2D / DEPTHWISE_CONV2D into int32."""
    x = in_layout(lw.b, lw.value(node.args[0]), CHANNELS_LAST)
    weight = weight_of(node.args[1], lw.constants)
    stride, padding, dilation, _, _, groups = node.args[3:9]
    one_d = len(x.shape) == 3
    values = weight.values[:, :, None, :] if one_d else weight.values  # OIHW
    stride, dilation = ([1, *stride], [1, *dilation]) if one_d else (list(stride), list(dilation))
    pads = [0, 0, padding[0], padding[0]] if one_d else [padding[0], padding[0], padding[1], padding[1]]
    n, c = x.shape[0], x.shape[1]
    source = reshape(lw.b, x, (n, 1, x.shape[2], c)) if one_d else x.tensor
    out_shape = tuple(node.meta["val"].shape)
    out_stored = (out_shape[0], 1, out_shape[2], out_shape[1]) if one_d else (
        out_shape[0], out_shape[2], out_shape[3], out_shape[1])
    scales = x.params.scale * weight.scales
    bias = bias_of(node.args[2], lw.constants, scales)
    b = lw.b
    if groups == 1:
        op, kernel, attribute = "CONV2D", values.transpose(0, 2, 3, 1), "Conv2dAttribute"
    else:  # depthwise: [C*M, 1, KH, KW] → [KH, KW, C, M]
        m = values.shape[0] // c
        op, attribute = "DEPTHWISE_CONV2D", "DepthwiseConv2dAttribute"
        kernel = values.reshape(c, m, *values.shape[2:]).transpose(2, 3, 0, 1)
    reach = [(k - 1) * d + 1 for k, d in zip(values.shape[2:], dilation)]
    source, pads = exact_window(lw, source, (n, *(x.stored[1:-1] if not one_d else (1, x.shape[2])), c), reach,
                                stride, pads)
    inputs = [source, b.const(np.ascontiguousarray(kernel), "weight"), b.const(bias, "bias"),
              b.zero_point(x.params.zero_point, np.int8), b.zero_point(0, np.int8)]
    acc = b.op(op, inputs, out_stored, np.int32, attribute, pads, stride, dilation, False, b.ts.DType.INT32)
    out = Value(acc, out_shape, CHANNELS_LAST, scales=scales)
    return replace(out, tensor=reshape(b, replace(out, tensor=acc, shape=(n, out_shape[1], 1, out_shape[2])),
                                       out.stored)) if one_d else out


def linear(lw: Context, node: Node) -> Value:
    """addmm(bias, x, wᵀ), mm(x, wᵀ), linear(x, w, bias) on a 2-D [N, K] input → a 1×1 CONV2D over a
    [1, 1, N, K] image into int32 (the rows along W: Vela's estimate for a [1, N, 1, K] column was higher,
    and a table after it, gelu's, ran as an operator of its own instead of with the convolution)."""
    name = node.target.__name__.split(".")[0]
    x_node, w_node, b_node = {"addmm": (1, 2, 0), "mm": (0, 1, None), "linear": (0, 1, 2)}[name]
    x = lw.value(node.args[x_node])
    weight = weight_of(node.args[w_node], lw.constants, transposed=name != "linear")
    bias_node = node.args[b_node] if b_node is not None and len(node.args) > b_node else None
    n, k = x.shape
    o = weight.values.shape[0]
    scales = x.params.scale * weight.scales
    b = lw.b
    inputs = [reshape(b, x, (1, 1, n, k)), b.const(weight.values.reshape(o, 1, 1, k), "weight"),
              b.const(bias_of(bias_node, lw.constants, scales), "bias"), b.zero_point(x.params.zero_point, np.int8),
              b.zero_point(0, np.int8)]
    acc = b.op("CONV2D", inputs, (1, 1, n, o), np.int32, "Conv2dAttribute", [0, 0, 0, 0], [1, 1], [1, 1], False,
               b.ts.DType.INT32)  # the rows as one row of an image: Vela runs a batch of N as N convolutions
    held = Value(acc, (1, o, 1, n), CHANNELS_LAST, scales=scales)
    return Value(reshape(b, held, (n, o)), (n, o), scales=scales)


def add(lw: Context, node: Node) -> Value:
    """int8 + int8: each rescaled to int32 at a shared scale (shifted up ADD_SHIFT bits), one ADD."""
    a, c = _operands(lw, node)
    twice = 2 * max(a.params.scale, c.params.scale)
    left = rescale(lw, a, np.array([a.params.scale / twice * (1 << ADD_SHIFT)]), 0, np.int32)
    right = rescale(lw, c, np.array([c.params.scale / twice * (1 << ADD_SHIFT)]), 0, np.int32)
    out = Value("", tuple(node.meta["val"].shape), a.layout, scales=np.array([twice / (1 << ADD_SHIFT)]))
    return replace(out, tensor=lw.b.op("ADD", [left, right], out.stored, np.int32, "AddAttribute"))


def _operands(lw: Context, node: Node) -> tuple[Value, Value]:
    """The two values of an element-wise call in one layout; one of fewer dims gets leading size-1 dims."""
    a, c = lw.value(node.args[0]), lw.value(node.args[1])
    if len(a.shape) != len(c.shape):
        a, c = in_layout(lw.b, a, TORCH), in_layout(lw.b, c, TORCH)
        rank = max(len(a.shape), len(c.shape))
        a, c = (v if len(v.shape) == rank else
                replace(v, tensor=reshape(lw.b, v, (1,) * (rank - len(v.shape)) + v.shape),
                        shape=(1,) * (rank - len(v.shape)) + v.shape) for v in (a, c))
    layout = CHANNELS_LAST if CHANNELS_LAST in (a.layout, c.layout) else a.layout
    return in_layout(lw.b, a, layout), in_layout(lw.b, c, layout)


def mul(lw: Context, node: Node) -> Value:
    """int8 × int8 (broadcasting over size-1 dims): both to int32 without their zero points, one MUL into
    an int32 accumulator at the product of their scales."""
    a, c = _operands(lw, node)
    layout = a.layout
    left = rescale(lw, a, np.array([1.0]), 0, np.int32)
    right = rescale(lw, c, np.array([1.0]), 0, np.int32)
    shape = tuple(node.meta["val"].shape)
    out = Value("", shape, layout, scales=np.array([a.params.scale * c.params.scale]))
    shift = lw.b.const(np.array([0], dtype=np.int8), "shift")
    return replace(out, tensor=lw.b.op("MUL", [left, right, shift], out.stored, np.int32, "MulAttribute"))


def max_pool(lw: Context, node: Node) -> Value:
    """max_pool2d(_with_indices) → MAX_POOL2D (its first result; the indices are never read)."""
    x = in_layout(lw.b, lw.value(node.args[0]), CHANNELS_LAST)
    kernel, stride, padding = _pool_args(node)
    out_shape = tuple(node.meta["val"][0].shape if isinstance(node.meta["val"], tuple) else node.meta["val"].shape)
    out = replace(x, shape=out_shape)
    for axis in range(2):  # ceil_mode: the last window reaches into end padding (MAX_POOL2D pads with -inf)
        reach = (out_shape[2 + axis] - 1) * stride[axis] + kernel[axis] - x.stored[1 + axis] - padding[2 * axis]
        padding[2 * axis + 1] = max(padding[2 * axis + 1], reach)
    b = lw.b
    source, padding = exact_window(lw, x.tensor, x.stored, kernel, stride, padding)
    tensor = b.op("MAX_POOL2D", [source], out.stored, np.int8, "MaxPool2dAttribute", kernel, stride, padding,
                  b.ts.NanPropagationMode.PROPAGATE)
    return replace(out, tensor=tensor)


def exact_window(lw: Context, tensor: str, stored: tuple[int, ...], kernel: list[int], stride: list[int],
                 padding: list[int], dtype: type = np.int8) -> tuple[str, list[int]]:
    """The input and padding of a pool whose windows end exactly at the padded edge, as TOSA requires:
    PyTorch's floor mode drops the rows and columns no window reaches; here the end padding shrinks, or
    a SLICE cuts them off."""
    n, h, w, c = stored
    pads, size = list(padding), [h, w]
    for axis in range(2):
        extra = (size[axis] + pads[2 * axis] + pads[2 * axis + 1] - kernel[axis]) % stride[axis]
        cut = max(0, extra - pads[2 * axis + 1])
        pads[2 * axis + 1] = max(0, pads[2 * axis + 1] - extra)
        size[axis] -= cut
    if size == [h, w]:
        return tensor, pads
    b = lw.b
    cut = b.op("SLICE", [tensor, b.shape([0, 0, 0, 0]), b.shape([n, size[0], size[1], c])], (n, *size, c),
               dtype, "SliceAttribute")
    return cut, pads


def _pool_args(node: Node) -> tuple[list[int], list[int], list[int]]:
    kernel = list(node.args[1])
    stride = list(node.args[2]) if len(node.args) > 2 and node.args[2] else kernel
    padding = list(node.args[3]) if len(node.args) > 3 else [0, 0]
    return kernel, stride, [padding[0], padding[0], padding[1], padding[1]]


def avg_pool(lw: Context, node: Node) -> Value:
    """avg_pool2d without padding → AVG_POOL2D, int8 in and out with the input's parameters."""
    x = in_layout(lw.b, lw.value(node.args[0]), CHANNELS_LAST)
    kernel, stride, padding = _pool_args(node)
    return _average(lw, x, tuple(node.meta["val"].shape), x.stored, kernel, stride, padding)


def mean(lw: Context, node: Node) -> Value:
    """mean over the spatial dims of a 3-D or 4-D value → one AVG_POOL2D over them."""
    x = in_layout(lw.b, lw.value(node.args[0]), CHANNELS_LAST)
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    h, w = (spatial[0], spatial[1]) if len(spatial) == 2 else (1, spatial[0])
    return _average(lw, x, tuple(node.meta["val"].shape), (n, h, w, c), [h, w], [1, 1], [0, 0, 0, 0])


def _average(lw: Context, x: Value, out_shape: tuple[int, ...], source: tuple[int, ...], kernel: list[int],
             stride: list[int], padding: list[int]) -> Value:
    b = lw.b
    n, h, w, c = source
    oh = (h + padding[0] + padding[1] - kernel[0]) // stride[0] + 1
    ow = (w + padding[2] + padding[3] - kernel[1]) // stride[1] + 1
    zp = x.params.zero_point
    x = replace(x, tensor=reshape(b, x, source), shape=(n, c, h, w))
    window, padding = exact_window(lw, x.tensor, x.stored, kernel, stride, padding)
    pooled = b.op("AVG_POOL2D", [window, b.zero_point(zp, np.int8), b.zero_point(zp, np.int8)],
                  (n, oh, ow, c), np.int8, "AvgPool2dAttribute", kernel, stride, padding, b.ts.DType.INT32)
    held = Value(pooled, (n, c, oh, ow), CHANNELS_LAST, x.params)
    out = Value(pooled, out_shape, CHANNELS_LAST, x.params)
    return replace(out, tensor=reshape(b, held, out.stored))
