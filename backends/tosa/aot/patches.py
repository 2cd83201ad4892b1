"""Convolutions whose windows tile the image (stride = kernel, no padding or dilation: a vision
transformer's patch embedding) as one TRANSPOSE and a 1×1 CONV2D over the patches.

Vela runs a convolution with a stride over 3 as many small ones (an 8×8 stride-8 patch embedding of a
32×32 image: 16 convolutions, ~90k cycles on U85), and U55 takes none with a stride other than 1 or 2.
Each patch's kh·kw·C values become the channels of one pixel instead (space to depth):
[N, H, W, C] → [N, H/kh, kh, W/kw, kw·C] → [N, H/kh, W/kw, kh, kw·C] (a 4-D TRANSPOSE) → [N, H/kh,
W/kw, kh·kw·C], and the weight [O, C, kh, kw] becomes [O, 1, 1, kh·kw·C] in the same order. A PyTorch-order
input is first made channels-last, as for any convolution.
"""

from __future__ import annotations

import numpy as np
from torch.fx import Node

from etbuild.backends.tosa.aot import compute
from etbuild.backends.tosa.aot.quant import bias_of, weight_of
from etbuild.backends.tosa.aot.values import CHANNELS_LAST, Context, Value, in_layout, transpose


def is_patch(node: Node) -> bool:
    """Whether a 2-D convolution's windows tile its input exactly (stride = kernel > 1, groups 1)."""
    stride, padding, dilation, transposed, _, groups = node.args[3:9]
    kernel = tuple(node.args[1].meta["val"].shape[2:])
    shape = tuple(node.args[0].meta["val"].shape)
    return (len(kernel) == 2 and tuple(stride) == kernel and max(kernel) > 1 and not any(padding) and groups == 1
            and all(d == 1 for d in dilation) and not transposed and shape[2] % kernel[0] == 0
            and shape[3] % kernel[1] == 0)


def convolution(lw: Context, node: Node) -> Value:
    """aten.convolution: a patch embedding here, any other in compute.convolution."""
    if not is_patch(node):
        return compute.convolution(lw, node)
    b = lw.b
    x = in_layout(b, lw.value(node.args[0]), CHANNELS_LAST)
    weight = weight_of(node.args[1], lw.constants)
    o, c, kh, kw = weight.values.shape
    n, h, w = x.shape[0], x.shape[2] // kh, x.shape[3] // kw
    split = (n, h, kh, w, kw * c)  # [N, H, W, C] with each patch's rows and columns apart
    moved = transpose(b, x.tensor, split, [0, 1, 3, 2, 4], np.int8)
    pixels = (n, h, w, kh * kw * c)
    source = b.op("RESHAPE", [moved, b.shape(pixels)], pixels, np.int8, "ReshapeAttribute")
    kernel = weight.values.transpose(0, 2, 3, 1).reshape(o, 1, 1, kh * kw * c)
    scales = x.params.scale * weight.scales
    inputs = [source, b.const(np.ascontiguousarray(kernel), "weight"),
              b.const(bias_of(node.args[2], lw.constants, scales), "bias"),
              b.zero_point(x.params.zero_point, np.int8), b.zero_point(0, np.int8)]
    acc = b.op("CONV2D", inputs, (n, h, w, o), np.int32, "Conv2dAttribute", [0, 0, 0, 0], [1, 1], [1, 1], False,
               b.ts.DType.INT32)
    return Value(acc, (n, o, h, w), CHANNELS_LAST, scales=scales)
