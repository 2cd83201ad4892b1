"""Calls that only move int8 elements: reshapes, (un)squeezes, permutes, getitem of a pool's result.

A reshape of a channels-last value that keeps batch and channels and only adds or drops size-1 spatial
dims stays channels-last (a RESHAPE, which Vela elides); any other goes back to PyTorch's order first.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.tosa.aot.compute import requantize
from etbuild.backends.tosa.aot.quant import QParams
from etbuild.backends.tosa.aot.tables import output_params
from etbuild.backends.tosa.aot.values import (
    CHANNELS_LAST,
    TORCH,
    Context,
    Value,
    in_layout,
    reshape,
    stored_shape,
    transpose,
)


def _keeps_channels_last(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Whether a reshape keeps batch and channels and only regroups the spatial dims (their elements stay
    in order, so a channels-last value stays channels-last)."""
    if len(before) < 3 or len(after) < 3 or before[:2] != after[:2]:
        return False
    return int(np.prod(before[2:])) == int(np.prod(after[2:]))


def view(lw: Context, node: Node) -> Value:
    """view, reshape, (un)squeeze, flatten, clone: the same elements in the result's shape."""
    value = lw.value(node.args[0])
    shape = tuple(node.meta["val"].shape)
    if value.layout == CHANNELS_LAST and _keeps_channels_last(value.shape, shape):
        target = replace(value, shape=shape)
        return replace(target, tensor=reshape(lw.b, value, target.stored))
    value = in_layout(lw.b, value, TORCH)
    return Value(reshape(lw.b, value, shape), shape, TORCH, value.params, value.scales, value.clamp)


def permute(lw: Context, node: Node) -> Value:
    value = lw.value(node.args[0])
    perm = [d % len(value.shape) for d in node.args[1]]
    return permuted(lw, value, perm, tuple(node.meta["val"].shape))


def permuted(lw: Context, value: Value, perm: list[int], shape: tuple[int, ...]) -> Value:
    """The value's dims in `perm` order (PyTorch's), in PyTorch's layout: one TRANSPOSE of the stored tensor
    (values.transpose: of the fewest dims), or a RESHAPE when only size-1 dims move."""
    rank = len(value.shape)
    order = [stored_axis(p, rank, value.layout) for p in perm]
    tensor = transpose(lw.b, value.tensor, value.stored, order, value.dtype)
    return Value(tensor, shape, TORCH, value.params, value.scales, value.clamp)


def first_result(lw: Context, node: Node) -> Value:
    """getitem(pool, 0): the pool's value."""
    return lw.value(node.args[0])


def stored_axis(dim: int, rank: int, layout: str) -> int:
    """Where PyTorch dim `dim` of a rank-`rank` value sits in its stored tensor."""
    dim %= rank
    if layout != CHANNELS_LAST or rank < 3:
        return dim
    return rank - 1 if dim == 1 else (dim - 1 if dim > 1 else 0)


def cat(lw: Context, node: Node) -> Value:
    """cat of int8 values → CONCAT. Each part takes the first part's parameters (a RESCALE where they
    differ; the quantizer shares them, so usually none), all in the layout of the first channels-last one."""
    known = [lw.value(p) for p in node.args[0] if p not in lw.constants]
    params = output_params(node) or known[0].params
    parts = [_constant(lw, lw.constants[p], params) if p in lw.constants else lw.value(p) for p in node.args[0]]
    rank = len(parts[0].shape)
    layout = CHANNELS_LAST if any(p.layout == CHANNELS_LAST for p in parts) and rank >= 3 else TORCH
    parts = [in_layout(lw.b, requantize(lw, p, params), layout) for p in parts]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    shape = tuple(node.meta["val"].shape)
    tensor = lw.b.op("CONCAT", [p.tensor for p in parts], stored_shape(shape, layout), parts[0].dtype,
                     "ConcatAttribute", stored_axis(dim, rank, layout))
    return Value(tensor, shape, layout, params)


def _constant(lw: Context, values: torch.Tensor, params: QParams) -> Value:
    """A float constant part quantized with `params`."""
    codes = np.clip(np.round(values.double().numpy() / params.scale) + params.zero_point, -128, 127)
    return Value(lw.b.const(codes.astype(np.int8), "constant"), tuple(values.shape), TORCH, params)


def pad(lw: Context, node: Node) -> Value:
    """constant_pad_nd of an int8 value → PAD with the pad value quantized with the value's parameters."""
    x = lw.value(node.args[0])
    widths, rank = list(node.args[1]), len(x.shape)
    value = float(node.args[2]) if len(node.args) > 2 else 0.0
    padding = [0] * (2 * rank)
    for k in range(len(widths) // 2):  # PyTorch lists (before, after) pairs from the last dim back
        axis = stored_axis(rank - 1 - k, rank, x.layout)
        padding[2 * axis], padding[2 * axis + 1] = widths[2 * k], widths[2 * k + 1]
    shape = tuple(node.meta["val"].shape)
    fill = lw.b.const(np.array([x.params.quantize(value)], dtype=np.int8), "pad_const")
    tensor = lw.b.op("PAD", [x.tensor, lw.b.shape(padding), fill], stored_shape(shape, x.layout), np.int8,
                     "PadAttribute")
    return Value(tensor, shape, x.layout, x.params)


def slice_(lw: Context, node: Node) -> Value:
    """slice.Tensor(x, dim, start, end, 1) of an int8 value → SLICE in its own layout."""
    x = lw.value(node.args[0])
    rank = len(x.shape)
    dim = (node.args[1] if len(node.args) > 1 else 0) % rank
    shape = tuple(node.meta["val"].shape)
    start = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
    start = max(0, start + x.shape[dim] if start < 0 else start)
    axis = stored_axis(dim, rank, x.layout)
    begin = [0] * rank
    begin[axis] = min(start, x.shape[dim])
    stored = stored_shape(shape, x.layout)
    tensor = lw.b.op("SLICE", [x.tensor, lw.b.shape(begin), lw.b.shape(stored)], stored, x.dtype, "SliceAttribute")
    return replace(x, tensor=tensor, shape=shape)


def swap(lw: Context, node: Node) -> Value:
    """transpose.int(x, a, b): the permute that swaps two dims."""
    value = lw.value(node.args[0])
    rank = len(value.shape)
    perm = list(range(rank))
    a, c = node.args[1] % rank, node.args[2] % rank
    perm[a], perm[c] = perm[c], perm[a]
    return permuted(lw, value, perm, tuple(node.meta["val"].shape))


def select(lw: Context, node: Node) -> Value:
    """select.int(x, dim, index) of an int8 value → SLICE of that one index, then RESHAPE without the dim."""
    x = in_layout(lw.b, lw.value(node.args[0]), TORCH)
    rank, shape = len(x.shape), tuple(node.meta["val"].shape)
    dim = node.args[1] % rank
    index = node.args[2] % x.shape[dim]
    begin, size = [0] * rank, list(x.shape)
    begin[dim], size[dim] = index, 1
    cut = lw.b.op("SLICE", [x.tensor, lw.b.shape(begin), lw.b.shape(size)], tuple(size), x.dtype, "SliceAttribute")
    part = replace(x, tensor=cut, shape=tuple(size))
    return replace(part, tensor=reshape(lw.b, part, shape), shape=shape)
