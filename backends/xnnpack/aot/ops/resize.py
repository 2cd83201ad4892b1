"""Bilinear upsampling (`F.interpolate(mode="bilinear")`) as XNNPACK's StaticResizeBilinear2D, NHWC inside.

XNNPACK maps output pixel i to input coordinate (i + 0.5) · in / out − 0.5 (torch's
`align_corners=False`), or i · (in − 1) / (out − 1) with ALIGN_CORNERS (torch's
`align_corners=True`). torch computes with the scale factor it was given instead of in / out
when the output size came from one, so a call with scale factors is taken only when
in · scale is exactly its output size.
"""

from __future__ import annotations

from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.emitter import Emitter
from etbuild.backends.xnnpack.aot.ops.base import Checker, arg, aten, rule, shape_of
from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.nodes import ALIGN_CORNERS


def _check_resize(node: Node, c: Checker) -> str | None:
    x, out = shape_of(node.args[0]), shape_of(node)
    if len(x) != 4:
        return f"a {len(x)}-D input (bilinear resize takes [N, C, H, W])"
    scales = arg(node, 3, "scale_factors") if arg(node, 1, "output_size") is None else None
    if scales is not None and any(float(s) * size != new for s, size, new in zip(scales, x[2:], out[2:])):
        return "scale factors whose output size is not input size × scale (torch maps with the scale given)"
    return None


@rule(aten.upsample_bilinear2d.vec, check=_check_resize)
def emit_upsample_bilinear(node: Node, e: Emitter) -> None:
    x = node.args[0]
    perm = lay.nhwc(4)
    new_height, new_width = e.shape(node)[2:]
    flags = ALIGN_CORNERS if arg(node, 2, "align_corners") else 0
    xid = e.get(x, perm)
    out = e.b.tensor(lay.permuted(e.shape(node), perm))
    e.node(g.StaticResizeBilinear2D(new_height, new_width, xid, out, flags), out)
    e.put(node, out, perm)
