"""Convolutions (1-D as 2-D of height 1), plain, depthwise and transposed, NHWC inside.

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
from etbuild.backends.xnnpack.format import graph as g


@dataclass(frozen=True)
class ConvArgs:
    """aten.convolution's arguments, as 2-D (a 1-D convolution gets height 1)."""

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
            return (fill, int(v[0])) if one_d else (int(v[0]), int(v[1]))

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
        w = w.unsqueeze(2)
    if conv.transposed:  # [in, out/g, kh, kw] -> [g * out/g, kh, kw, in/g]
        cin, gout, kh, kw = w.shape
        w = w.reshape(conv.groups, cin // conv.groups, gout, kh, kw).permute(0, 2, 3, 4, 1)
        return w.reshape(conv.groups * gout, kh, kw, cin // conv.groups)
    return w.permute(1, 2, 3, 0) if depthwise else w.permute(0, 2, 3, 1)


@rule(aten.convolution.default, check=_check_conv)
def emit_convolution(node: Node, e: Emitter) -> None:
    conv = ConvArgs.of(node)
    x, weight = node.args[0], e.constant(node.args[1])
    in_shape, out_shape = e.shape(x), e.shape(node)
    rank = len(in_shape)
    perm = lay.nhwc(rank)
    cin, cout = in_shape[1], out_shape[1]
    n = in_shape[0]
    spatial_in = (1, in_shape[2]) if conv.one_d else in_shape[2:]
    spatial_out = (1, out_shape[2]) if conv.one_d else out_shape[2:]
    xid = e.get(x, perm, (n, *spatial_in, cin))
    depthwise = not conv.transposed and conv.groups > 1 and weight.shape[1] == 1
    fid = e.b.constant(as_float32(_filter(conv, weight, depthwise)))
    bias = node.args[2]
    bid = g.NO_ID if bias is None else e.b.constant(as_float32(e.constant(bias)))
    out = e.b.tensor((n, *spatial_out, cout))
    kind = "ConvTranspose2d" if conv.transposed else "DepthwiseConv2d" if depthwise else "Conv2d"
    kh, kw = (1, weight.shape[2]) if conv.one_d else weight.shape[2:]
    gin = cin // conv.groups
    gout = cout // conv.groups
    body = g.MEMBER_TYPES[kind](
        padding_top=conv.padding[0], padding_right=conv.padding[1], padding_bottom=conv.padding[0],
        padding_left=conv.padding[1], kernel_height=kh, kernel_width=kw, subsampling_height=conv.stride[0],
        subsampling_width=conv.stride[1], dilation_height=conv.dilation[0], dilation_width=conv.dilation[1],
        group_input_channels=gin, group_output_channels=gout, groups=conv.groups,
        adjustment_height=conv.output_padding[0], adjustment_width=conv.output_padding[1],
        input1_id=xid, filter_id=fid, bias_id=bid, output_id=out, flags=0,
    )
    e.node(body, out)
    e.put(node, out, perm)
