"""Matrix products: addmm and mm → FullyConnected, bmm → BatchMatrixMultiply.

Lowering folds a Linear weight's transpose into the stored constant ([in, out]); the filter
goes back to XNNPACK's [out, in] at build time. FullyConnected reads any rows of `in`
elements, so the views around a Linear on a 3-D input cost nothing.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot.emitter import Emitter, as_float32
from etbuild.backends.xnnpack.aot.ops.base import Checker, arg, aten, rule, shape_of
from etbuild.backends.xnnpack.aot.quant import (
    bias_value,
    blockwise_filter,
    filter_value,
    per_tensor,
    quantized_weight,
    result_quant,
)
from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.nodes import TRANSPOSE_WEIGHTS

BLOCK_MULTIPLE = 32  # XNNPACK's blockwise (qbint4) filters take groups of a multiple of 32 inputs


def _check_addmm(node: Node, c: Checker) -> str | None:
    beta, alpha = arg(node, 3, "beta", 1), arg(node, 4, "alpha", 1)
    if beta != 1 or alpha != 1:
        return f"beta={beta}, alpha={alpha}"
    bias, n = node.args[0], shape_of(node)[-1]
    if not c.is_constant(bias):
        return "a bias computed at run time"
    if shape_of(bias) not in ((n,), (1, n)):
        return f"a bias of shape {list(shape_of(bias))} (one value per output is taken)"
    return None


def fully_connected(e: Emitter, node: Node, x: Node, weight: Node, bias: torch.Tensor | None) -> None:
    """out = x @ weight (+ bias): weight [in, out] as the program holds it; on int8 values when
    the weight is int8 and x quantized (statically, with an int8 result, or dynamically)."""
    if _quantized(e, node, x, weight, bias):
        return
    k, n = shape_of(weight)
    xid = e.rows(x, k)
    flags = 0
    if e.is_constant(weight):
        wid = e.b.constant(as_float32(e.constant(weight).t()))
    else:
        wid, flags = e.get(weight), TRANSPOSE_WEIGHTS
    bid = g.NO_ID if bias is None else e.b.constant(as_float32(bias.reshape(n)))
    out = e.b.tensor((*e.b.dims(xid)[:-1], n))
    e.node(g.FullyConnected(xid, wid, bid, out, flags), out)
    e.put(node, out)


def _quantized(e: Emitter, node: Node, x: Node, weight: Node, bias: torch.Tensor | None) -> bool:
    """Emit the int8 FullyConnected if the graph quantizes this product; False when it does not."""
    qw = quantized_weight(weight, e.known)
    held = e.raw(x) if isinstance(x, Node) and x in e.env else None
    if qw is None or qw.axis != 1 or held is None or held.quant is None:
        return False
    k, n = shape_of(weight)
    out_quant = result_quant(node) if held.quant.scale is not None else None
    if held.quant.scale is not None and out_quant is None:
        return False
    if qw.group_size:  # int4 groups: XNNPACK takes them with rows quantized at run time, groups of 32·m
        if held.quant.scale is not None or qw.group_size % BLOCK_MULTIPLE:
            return False
        fid = blockwise_filter(e.b, qw.values.t(), qw.scales, qw.group_size)
    else:
        fid = filter_value(e.b, qw.values.t(), qw.scales, 0)
    if out_quant is None:  # dynamic: rows quantized at run time, float bias and result
        xid = e.dynamic_rows(x, k)
        bid = g.NO_ID if bias is None else e.b.constant(as_float32(bias.reshape(n)))
        out = e.b.tensor((*e.b.dims(xid)[:-1], n))
    else:
        xid = e.rows(x, k, quantized=True)
        bid = g.NO_ID if bias is None else bias_value(e.b, bias.reshape(n), held.quant.scale, qw.scales)
        out = e.b.tensor((*e.b.dims(xid)[:-1], n), g.XNNDatatype.QINT8, per_tensor(out_quant))
    e.node(g.FullyConnected(xid, fid, bid, out, 0), out)
    e.put(node, out, quant=out_quant)
    return True


@rule(aten.addmm.default, check=_check_addmm)
def emit_addmm(node: Node, e: Emitter) -> None:
    fully_connected(e, node, node.args[1], node.args[2], e.constant(node.args[0]))


@rule(aten.mm.default)
def emit_mm(node: Node, e: Emitter) -> None:
    fully_connected(e, node, node.args[0], node.args[1], None)


@rule(aten.bmm.default)
def emit_bmm(node: Node, e: Emitter) -> None:
    a, b = e.get(node.args[0]), e.get(node.args[1])
    e.put(node, e.b.binary("BatchMatrixMultiply", a, b, e.shape(node)))
