"""Convolutions (1-D as 2-D of width 1), plain, depthwise and transposed, NHWC inside.

A 1-D convolution over [N, C, L] runs as a 2-D one over [N, L, 1, C] (its length on the height
axis, a K×1 kernel), as ExecuTorch lowers it: XNNPACK runs a 1×K kernel over one row of width L
several times slower (3.3× on a wav2letter-sized stack, one thread); both hold the same bytes.

Filters go into XNNPACK's layouts at build time: Conv2d OHWI, DepthwiseConv2d 1HWO,
ConvTranspose2d [groups * out per group, H, W, in per group]. A BatchNorm after the
convolution was folded into its weights by the fuse-batch-norm lowering step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.emitter import Emitter, as_float32
from etbuild.backends.xnnpack.aot.ops.base import Checker, aten, rule, shape_of
from etbuild.backends.xnnpack.aot.quant import (
    QWeight,
    bias_value,
    filter_value,
    per_tensor,
    quantized_weight,
    result_quant,
    static,
)
from etbuild.backends.xnnpack.format import graph as g


@dataclass(frozen=True)
class ConvArgs:
    """aten.convolution's arguments, as 2-D (a 1-D convolution gets width 1)."""

    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    transposed: bool
    output_padding: tuple[int, int]
    groups: int
    one_d: bool

    @classmethod
    def of(cls, node: Node) -> ConvArgs:
        stride, padding, dilation, transposed, output_padding, groups = node.args[3:9]
        one_d = len(shape_of(node.args[0])) == 3

        def pair(v: list[int], fill: int) -> tuple[int, int]:
            return (int(v[0]), fill) if one_d else (int(v[0]), int(v[1]))

        return cls(pair(stride, 1), pair(padding, 0), pair(dilation, 1), bool(transposed),
                   pair(output_padding, 0), int(groups), one_d)


def _check_conv(node: Node, c: Checker) -> str | None:
    rank = len(shape_of(node.args[0]))
    if rank not in (3, 4):
        return f"a {rank - 2}-D convolution (1-D and 2-D are taken)"
    if not c.is_constant(node.args[1]):
        return "a filter computed at run time"
    if node.args[2] is not None and not c.is_constant(node.args[2]):
        return "a bias computed at run time"
    return None


def _filter(conv: ConvArgs, w: torch.Tensor, depthwise: bool) -> torch.Tensor:
    """The torch filter in XNNPACK's layout for this kind of convolution."""
    if conv.one_d:
        w = w.unsqueeze(3)
    if conv.transposed:  # [in, out/g, kh, kw] -> [g * out/g, kh, kw, in/g]
        cin, gout, kh, kw = w.shape
        w = w.reshape(conv.groups, cin // conv.groups, gout, kh, kw).permute(0, 2, 3, 4, 1)
        return w.reshape(conv.groups * gout, kh, kw, cin // conv.groups)
    return w.permute(1, 2, 3, 0) if depthwise else w.permute(0, 2, 3, 1)


@dataclass(frozen=True)
class ConvShapes:
    """A convolution's NHWC input and output dims (a 1-D one with width 1) and its filter facts."""

    conv: ConvArgs
    input_dims: tuple[int, ...]
    output_dims: tuple[int, ...]
    kernel: tuple[int, int]
    depthwise: bool

    @classmethod
    def of(cls, node: Node, weight_shape: tuple[int, ...]) -> ConvShapes:
        conv = ConvArgs.of(node)
        x, out = shape_of(node.args[0]), shape_of(node)
        spatial_in = (x[2], 1) if conv.one_d else x[2:]
        spatial_out = (out[2], 1) if conv.one_d else out[2:]
        kernel = (weight_shape[2], 1) if conv.one_d else tuple(weight_shape[2:4])
        depthwise = not conv.transposed and conv.groups > 1 and weight_shape[1] == 1
        return cls(conv, (x[0], *spatial_in, x[1]), (out[0], *spatial_out, out[1]), kernel, depthwise)  # type: ignore[arg-type]

    @property
    def kind(self) -> str:
        return "ConvTranspose2d" if self.conv.transposed else "DepthwiseConv2d" if self.depthwise else "Conv2d"

    def body(self, xid: int, fid: int, bid: int, out: int) -> g.NodeBody:
        conv, cin, cout = self.conv, self.input_dims[-1], self.output_dims[-1]
        return g.MEMBER_TYPES[self.kind](
            padding_top=conv.padding[0], padding_right=conv.padding[1], padding_bottom=conv.padding[0],
            padding_left=conv.padding[1], kernel_height=self.kernel[0], kernel_width=self.kernel[1],
            subsampling_height=conv.stride[0], subsampling_width=conv.stride[1], dilation_height=conv.dilation[0],
            dilation_width=conv.dilation[1], group_input_channels=cin // conv.groups,
            group_output_channels=cout // conv.groups, groups=conv.groups,
            adjustment_height=conv.output_padding[0], adjustment_width=conv.output_padding[1],
            input1_id=xid, filter_id=fid, bias_id=bid, output_id=out, flags=0,
        )


def _dynamic(e: Emitter, node: Node, perm: lay.Perm, qw: QWeight) -> bool:
    """The convolution on its input quantized at run time, one set of parameters per image
    (qdint8 over H, W and C: the converted model's per-tensor parameters for a batch of one),
    int8 per-channel filter, float bias and result."""
    bias = node.args[2]
    shapes = ConvShapes.of(node, tuple(qw.values.shape))
    xid = e.dynamic(e.get(node.args[0], perm, shapes.input_dims), 3)
    fid = filter_value(e.b, _filter(shapes.conv, qw.values, False), qw.scales, 0)
    bid = g.NO_ID if bias is None else e.b.constant(as_float32(e.constant(bias)))
    out = e.b.tensor(shapes.output_dims)
    e.node(shapes.body(xid, fid, bid, out), out)
    e.put(node, out, perm)
    return True


@rule(aten.convolution.default, check=_check_conv)
def emit_convolution(node: Node, e: Emitter) -> None:
    x, bias = node.args[0], node.args[2]
    perm = lay.nhwc(len(e.shape(x)))
    if _quantized(e, node, perm):
        return
    weight = e.constant(node.args[1])
    shapes = ConvShapes.of(node, tuple(weight.shape))
    xid = e.get(x, perm, shapes.input_dims)
    fid = e.b.constant(as_float32(_filter(shapes.conv, weight, shapes.depthwise)))
    bid = g.NO_ID if bias is None else e.b.constant(as_float32(e.constant(bias)))
    out = e.b.tensor(shapes.output_dims)
    e.node(shapes.body(xid, fid, bid, out), out)
    e.put(node, out, perm)


def dynamic_input_ok(node: Node) -> bool:
    """Whether XNNPACK runs this convolution on an input quantized at run time (qd8 × qc8 → f32):
    a plain (not transposed, not grouped) one."""
    conv = ConvArgs.of(node)
    return not conv.transposed and conv.groups == 1


def _quantized(e: Emitter, node: Node, perm: lay.Perm) -> bool:
    """Emit the int8 convolution if the graph quantizes this one (statically, or its input at
    run time); False when it does not."""
    x, bias = node.args[0], node.args[2]
    qw = quantized_weight(node.args[1], e.known)
    held = e.raw(x) if x in e.env else None
    if qw is not None and qw.axis == 0 and held is not None and held.quant is not None and held.quant.scale is None:
        return _dynamic(e, node, perm, qw) if dynamic_input_ok(node) else False
    quant = static(held) if held is not None else None
    out_quant = result_quant(node)
    if qw is None or qw.axis != 0 or quant is None or out_quant is None or ConvArgs.of(node).transposed:
        return False
    shapes = ConvShapes.of(node, tuple(qw.values.shape))
    xid = e.quantized(x, perm, shapes.input_dims)
    fid = filter_value(e.b, _filter(shapes.conv, qw.values, shapes.depthwise), qw.scales, 3 if shapes.depthwise else 0)
    bid = g.NO_ID if bias is None else bias_value(e.b, e.constant(bias), quant.scale, qw.scales)  # type: ignore[arg-type]
    out = e.b.tensor(shapes.output_dims, g.XNNDatatype.QINT8, per_tensor(out_quant))
    e.node(shapes.body(xid, fid, bid, out), out)
    e.put(node, out, perm, out_quant)
    return True
