"""Normalizations XNNPACK has no node for, as nodes it has.

layer_norm over the last k dims (R elements per row), with the `decompose` option:
    mean = FC(x, 1/R)          d = x - mean          var = FC(d², 1/R)
    y = d · rsqrt(var + eps) · weight + bias
so a transformer block needs no operator outside the delegate. A layer_norm over fewer than
`SMALL` elements (a few tokens) stays outside: each of its nine nodes is split over XNNPACK's
thread pool, which on so small a tensor costs more than the portable kernel's one pass (14-35% of
a 16-token model at two threads), as in ExecuTorch's own XNNPACK programs. An inference BatchNorm that
lowering could not fold into a convolution is y = x · scale + shift per channel.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.xnnpack.aot import layout as lay
from etbuild.backends.xnnpack.aot.emitter import Emitter, as_float32
from etbuild.backends.xnnpack.aot.ops.base import Checker, aten, only_first_used, rule, shape_of, small
from etbuild.backends.xnnpack.aot.ops.elementwise import with_constant
from etbuild.backends.xnnpack.aot.ops.pooling import reduce_rows


def _check_layer_norm(node: Node, c: Checker) -> str | None:
    too_small = small(node.args[0], "layer_norm")
    if too_small is not None:
        return too_small
    for k in (2, 3):
        if node.args[k] is not None and not c.is_constant(node.args[k]):
            return "a weight or bias computed at run time"
    return only_first_used(node)


@rule(aten.native_layer_norm.default, check=_check_layer_norm, decomposes=True)
def emit_layer_norm(node: Node, e: Emitter) -> None:
    x, normalized, weight, bias, eps = node.args[:5]
    shape = e.shape(x)
    count = math.prod(normalized)
    rows = (*shape[: len(shape) - len(normalized)], count)
    xid = e.rows(x, count) if len(normalized) == 1 else e.get(x, None, rows)
    dims = e.b.dims(xid)
    lead = rows[:-1] if len(dims) == len(rows) else None
    mean = reduce_rows(e, xid, count, 1.0 / count, lead)
    centered = e.b.binary("Subtract", xid, mean, dims)
    var = reduce_rows(e, e.b.unary("Square", centered, dims), count, 1.0 / count, lead)
    shifted = e.b.binary("Add", var, e.b.constant(np.array([eps], np.float32)), e.b.dims(var))
    y = e.b.binary("Multiply", centered, e.b.unary("ReciprocalSquareRoot", shifted, e.b.dims(var)), dims)
    for kind, param in (("Multiply", weight), ("Add", bias)):
        if param is not None:
            y = e.b.binary(kind, y, e.b.constant(as_float32(e.constant(param).reshape(count))), dims)
    e.made_by.setdefault(y, node)
    e.tuples[node] = [lay.Held(y, lay.identity(len(shape)), dims), None, None]


def _check_batch_norm(node: Node, c: Checker) -> str | None:
    if any(a is not None and not c.is_constant(a) for a in node.args[1:5]):
        return "statistics or parameters computed at run time"
    if len(shape_of(node.args[0])) < 2:
        return "an input without a channel dim"
    return only_first_used(node)


@rule(aten._native_batch_norm_legit_no_training.default, check=_check_batch_norm)
def emit_batch_norm(node: Node, e: Emitter) -> None:
    x = node.args[0]
    channels = e.shape(x)[1]
    weight, bias, mean, var = (None if a is None else e.constant(a).to(torch.float32) for a in node.args[1:5])
    ones = torch.ones(channels)
    scale = (weight if weight is not None else ones) / torch.sqrt((var if var is not None else ones) + node.args[6])
    shift = (bias if bias is not None else 0 * ones) - (mean if mean is not None else 0 * ones) * scale
    shape = e.shape(x)
    per_channel = (channels, *([1] * (len(shape) - 2)))
    perm = e.held(x).perm
    y = with_constant(e, "Multiply", e.get(x, perm), perm, shape, scale.reshape(per_channel))
    y = with_constant(e, "Add", y, perm, shape, shift.reshape(per_channel))
    e.made_by.setdefault(y, node)
    e.tuples[node] = [lay.Held(y, perm, e.b.dims(y)), None, None]
