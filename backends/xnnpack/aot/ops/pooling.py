"""Poolings and reductions: max and average pooling (NHWC), means and sums over dims.

A mean over the two spatial dims of a 4-D tensor is GlobalAvgPooling2d. Any other mean or
sum (with the `decompose` option) is a FullyConnected of the reduced elements, laid out as
the last dim, with a filter of ones (divided by their count for a mean); a long row is summed
in two such products (see `reduce_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.builder import is_dynamic
from etbuild.backends.xnnpack.aot.emitter import Emitter
from etbuild.backends.xnnpack.aot.ops.base import (
    Checker,
    arg,
    aten,
    normalize_dims,
    only_first_used,
    rule,
    shape_of,
)
from etbuild.backends.xnnpack.aot.quant import per_tensor, result_quant, static
from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.nodes import KEEP_DIMS


def _pair(v: Any, default: list[int]) -> tuple[int, int]:
    v = list(v) if v else default
    return (int(v[0]), int(v[-1]))


def _ceil_extra(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Padding to add after the input so a floor-mode pooling gives ceil mode's output size."""
    span = dilation * (kernel - 1) + 1
    floor_out = (size + 2 * pad - span) // stride + 1
    ceil_out = -(-(size + 2 * pad - span) // stride) + 1
    if (ceil_out - 1) * stride >= size + pad:  # torch drops a last window that starts in the padding
        ceil_out -= 1
    return (ceil_out - floor_out) * stride


def _check_max_pool(node: Node, c: Checker) -> str | None:
    if len(shape_of(node.args[0])) != 4:
        return "an input without a batch dim"
    return only_first_used(node) if node.target is aten.max_pool2d_with_indices.default else None


def _pool(e: Emitter, node: Node, kind: str, ceil_mode: bool, dilation: tuple[int, int],
          quant: lay.Quant | None = None) -> int:
    x = node.args[0]
    kernel = _pair(node.args[1], [1, 1])
    stride = _pair(arg(node, 2, "stride"), list(kernel))
    pad = _pair(arg(node, 3, "padding", [0, 0]), [0, 0])
    _, _, h, w = e.shape(x)
    extra = (_ceil_extra(h, kernel[0], stride[0], pad[0], dilation[0]),
             _ceil_extra(w, kernel[1], stride[1], pad[1], dilation[1])) if ceil_mode else (0, 0)
    perm = lay.nhwc(4)
    xid = e.get(x, perm) if quant is None else e.quantized(x, perm)
    dims = lay.permuted(_first_result(node), perm)
    out = e.b.tensor(dims) if quant is None else e.b.tensor(dims, g.XNNDatatype.QINT8, per_tensor(quant))
    e.node(g.MEMBER_TYPES[kind](
        padding_top=pad[0], padding_right=pad[1] + extra[1], padding_bottom=pad[0] + extra[0], padding_left=pad[1],
        pooling_height=kernel[0], pooling_width=kernel[1], stride_height=stride[0], stride_width=stride[1],
        dilation_height=dilation[0], dilation_width=dilation[1], input_id=xid, output_id=out, flags=0,
    ), out)
    return out


def _first_result(node: Node) -> tuple[int, ...]:
    """The shape of a pooling's values (its first result when it has several)."""
    val = node.meta["val"]
    return tuple(int(s) for s in (val[0] if isinstance(val, (list, tuple)) else val).shape)


@rule(aten.max_pool2d_with_indices.default, aten.max_pool2d.default, check=_check_max_pool)
def emit_max_pool(node: Node, e: Emitter) -> None:
    dilation = _pair(arg(node, 4, "dilation", [1, 1]), [1, 1])
    values = next((u for u in node.users if u.args[1] == 0), node)  # the result a quantize reads
    quant = e.kept_quant(node, values)
    out = _pool(e, node, "MaxPooling2d", bool(arg(node, 5, "ceil_mode", False)), dilation, quant)
    held = lay.Held(out, lay.nhwc(4), e.b.dims(out), quant)
    e.made_by.setdefault(out, node)
    if node.target is aten.max_pool2d.default:
        e.alias(node, held)
    else:
        e.tuples[node] = [held, None]


def _check_avg_pool(node: Node, c: Checker) -> str | None:
    if len(shape_of(node.args[0])) != 4:
        return "an input without a batch dim"
    pad = _pair(arg(node, 3, "padding", [0, 0]), [0, 0])
    if arg(node, 4, "ceil_mode", False):
        return "ceil_mode"
    if any(pad) and arg(node, 5, "count_include_pad", True):
        return "count_include_pad with padding (XNNPACK averages real pixels only)"
    return "divisor_override" if arg(node, 6, "divisor_override") is not None else None


@rule(aten.avg_pool2d.default, check=_check_avg_pool)
def emit_avg_pool(node: Node, e: Emitter) -> None:
    e.put(node, _pool(e, node, "AvgPooling2d", False, (1, 1)), lay.nhwc(4))


# ---------------------------------------------------------------------------- reductions


def _reduced(node: Node) -> list[int]:
    return normalize_dims(arg(node, 1, "dim"), len(shape_of(node.args[0])))


def _spatial_mean(node: Node) -> bool:
    return node.target is aten.mean.dim and len(shape_of(node.args[0])) == 4 and _reduced(node) == [2, 3]


def _check_reduce(node: Node, c: Checker) -> str | None:
    return "a dtype argument" if arg(node, 3, "dtype") is not None else None


def _decomposed(node: Node) -> bool:
    return not _spatial_mean(node)


def emit_reduce(node: Node, e: Emitter) -> None:
    x = node.args[0]
    shape, dims = e.shape(x), _reduced(node)
    if _spatial_mean(node):
        _global_average(e, node, x, shape)
        return
    kept = [d for d in range(len(shape)) if d not in dims]
    count = math.prod(shape[d] for d in dims)
    # FullyConnected reads rows of its last dim whatever the dims before it: a reduction over trailing dims
    # keeps the leading ones (no reshape before, none after for keepdim's broadcast)
    trailing = dims == list(range(len(kept), len(shape)))
    rows = [shape[d] for d in kept] if trailing else [math.prod(shape[d] for d in kept)]
    xid = e.get(x, (*kept, *dims), (*rows, count))
    scale = 1.0 / count if node.target is aten.mean.dim else 1.0
    out = reduce_rows(e, xid, count, scale, rows)
    e.put(node, out)


def _global_average(e: Emitter, node: Node, x: Node, shape: tuple[int, ...]) -> None:
    """GlobalAvgPooling2d, on int8 values when the graph quantizes both its input and its result."""
    perm = lay.nhwc(4)
    quant = result_quant(node) if static(e.raw(x)) is not None else None
    dims = (shape[0], 1, 1, shape[1])
    if quant is None:
        xid, out = e.get(x, perm), e.b.tensor(dims)
    else:
        xid, out = e.quantized(x, perm), e.b.tensor(dims, g.XNNDatatype.QINT8, per_tensor(quant))
    e.node(g.MEMBER_TYPES["GlobalAvgPooling2d"](input_id=xid, output_id=out, flags=KEEP_DIMS), out)
    kept = (shape[0], shape[1], 1, 1)
    e.alias(node, lay.Held(out, lay.view_layout(perm, kept, e.shape(node)) or perm, e.b.dims(out), quant))
    e.made_by.setdefault(out, node)


def reduce_rows(e: Emitter, xid: int, count: int, scale: float, rows: Sequence[int] | None = None) -> int:
    """Each row of `count` elements of value xid, summed and scaled: a FullyConnected with one
    output.

    XNNPACK pads a one-output filter to a tile of 16 outputs, so a filter of `count` rows takes
    64 × `count` bytes, and its product is one chain of `count` dependent multiply-adds. In a
    language model's decode step, where the int4 weights stream through the caches, a 512-wide
    RMSNorm's product took 1.3 µs. So a row longer than 64 that splits into chunks of 8 to 64
    elements is summed in two products (chunks, then their sums), with filters of a few KiB,
    when `rows`, xid's leading dims as torch's shape has them (a dynamic size marked), are given.
    """
    chunk = _chunk(count)
    if chunk is None or rows is None or len(rows) + 1 != len(e.b.dims(xid)) or sum(map(is_dynamic, rows)) > 1:
        return _fully_connected(e, xid, (*e.b.dims(xid)[:-1], 1), np.full((1, count), scale, np.float32))
    parts = count // chunk
    lines = e.b.reshape(xid, (math.prod(rows) * parts, chunk))
    sums = _fully_connected(e, lines, (*e.b.dims(lines)[:-1], 1), np.ones((1, chunk), np.float32))
    per_row = e.b.reshape(sums, (*rows, parts))
    return _fully_connected(e, per_row, (*rows, 1), np.full((1, parts), scale, np.float32))


def _chunk(count: int) -> int | None:
    """The divisor of `count` in [8, 64] nearest its square root, for a row longer than 64 (of a static size)."""
    if count <= 64 or is_dynamic(count):
        return None
    divisors = [d for d in range(8, 65) if count % d == 0]
    return min(divisors, key=lambda d: abs(d - math.sqrt(count)), default=None)


def _fully_connected(e: Emitter, xid: int, dims: Sequence[int], weights: np.ndarray) -> int:
    out = e.b.tensor(dims)
    e.node(g.FullyConnected(xid, e.b.constant(weights), g.NO_ID, out, 0), out)
    return out


rule(aten.mean.dim, aten.sum.dim_IntList, check=_check_reduce, decomposes=_decomposed)(emit_reduce)
