"""The values of a TOSA lowering: which tensor holds a graph value, in which layout, in which number form.

A value the graph computes in float between a dequantize and a quantize is held as integers: `int8` (real =
scale × (q − zero point)) or an int32 accumulator (real = scale[c] × q, one scale per channel, with a clamp
still to apply once it is quantized). Layout `torch` keeps PyTorch's dim order; `channels_last` moves dim 1
(channels) last, as TOSA's convolutions and pools read NHWC; a 3-D value [N, C, L] is then [N, L, C].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from etbuild.backends.tosa.aot.builder import TosaBuilder
from etbuild.backends.tosa.aot.quant import QParams

TORCH, CHANNELS_LAST = "torch", "channels_last"


@dataclass(frozen=True)
class Value:
    """One graph value as the TOSA graph holds it."""

    tensor: str
    shape: tuple[int, ...]  # PyTorch's shape
    layout: str = TORCH
    params: QParams | None = None  # int8 values
    scales: np.ndarray | None = None  # int32 accumulator: one scale per channel (or one)
    clamp: tuple[float, float] | None = None  # real bounds an accumulator is clamped to once quantized

    @property
    def stored(self) -> tuple[int, ...]:
        return stored_shape(self.shape, self.layout)

    @property
    def dtype(self) -> type:
        return np.int32 if self.scales is not None else np.int8


class Context(Protocol):
    """What a rule sees of the walk (etbuild.backends.tosa.aot.lower.Lowering)."""

    b: TosaBuilder
    constants: Mapping[Any, Any]

    def value(self, node: Any) -> Value:
        """The value a node of the partition has become."""
        ...


def stored_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    if layout == CHANNELS_LAST and len(shape) >= 3:
        return (shape[0], *shape[2:], shape[1])
    return tuple(shape)


def same_order(value: Value) -> bool:
    """Whether both layouts of the value list its elements in the same order (its spatial size is one)."""
    return len(value.shape) < 3 or int(np.prod(value.shape[2:])) == 1


def in_layout(b: TosaBuilder, value: Value, layout: str) -> Value:
    """The value in `layout`: relabelled (a reshape) when the order is the same, else transposed."""
    if value.layout == layout:
        return value
    target = stored_shape(value.shape, layout)
    if same_order(value):
        return replace(value, tensor=reshape(b, value, target), layout=layout)
    rank = len(value.shape)
    perm = [0, *range(2, rank), 1] if layout == CHANNELS_LAST else [0, rank - 1, *range(1, rank - 1)]
    out = b.op("TRANSPOSE", [value.tensor], target, value.dtype, "TransposeAttribute", perm)
    return replace(value, tensor=out, layout=layout)


def reshape(b: TosaBuilder, value: Value, shape: tuple[int, ...]) -> str:
    """A tensor holding the value's stored elements in `shape` (the value's own when they agree)."""
    if tuple(shape) == value.stored:
        return value.tensor
    return b.op("RESHAPE", [value.tensor, b.shape(shape)], shape, value.dtype, "ReshapeAttribute")


def transpose(b: TosaBuilder, tensor: str, shape: tuple[int, ...], perm: list[int], dtype: type) -> str:
    """`tensor` of `shape` with its axes in `perm` order, by a TRANSPOSE of the fewest dims: size-1 dims
    dropped and dims that stay side by side merged (Vela runs a 5-D or 6-D transpose as many 2-D ones),
    then RESHAPEd to the result's shape. No TRANSPOSE when the elements keep their order."""
    result = tuple(shape[p] for p in perm)
    kept = [p for p in perm if shape[p] != 1]
    groups: list[list[int]] = []
    for p in kept:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    if len(groups) <= 1:
        return reshaped(b, tensor, shape, result, dtype)
    starts = sorted(g[0] for g in groups)
    merged = tuple(int(np.prod([shape[a] for a in next(g for g in groups if g[0] == s)])) for s in starts)
    order = [starts.index(g[0]) for g in groups]
    source = reshaped(b, tensor, shape, merged, dtype)
    moved = b.op("TRANSPOSE", [source], tuple(merged[o] for o in order), dtype, "TransposeAttribute", order)
    return reshaped(b, moved, tuple(merged[o] for o in order), result, dtype)


def reshaped(b: TosaBuilder, tensor: str, shape: tuple[int, ...], target: tuple[int, ...], dtype: type) -> str:
    """`tensor` of `shape` RESHAPEd to `target` (itself when they agree)."""
    if tuple(shape) == tuple(target):
        return tensor
    return b.op("RESHAPE", [tensor, b.shape(target)], target, dtype, "ReshapeAttribute")
