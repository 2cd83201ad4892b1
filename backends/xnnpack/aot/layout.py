"""How a torch value is held by an XNNPACK value: a permutation of its dims, then a shape. Pure functions.

A value of logical (torch) shape S is held as `x.permute(perm).reshape(dims)`: `perm` says
in which order its dims lie in memory, `dims` is the XNNPACK value's shape (any shape with
as many elements). Torch's own layout is the identity perm; NHWC for a 4-D NCHW tensor is
(0, 2, 3, 1). Dims of size 1 do not move bytes, so two layouts that order the other dims
alike hold the same bytes (`same_bytes`): then a reshape, not a transpose, turns one into
the other. A permute or a view that only adds or removes dims of size 1 is free: it
changes the layout, not the bytes (`permute_layout`, `view_layout`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

Shape = tuple[int, ...]
Perm = tuple[int, ...]


@dataclass(frozen=True)
class Quant:
    """How a float value is held in int8: value = (q - zero_point) · scale (static), or, with
    scale None, quantized per row at run time from the float value itself (dynamic)."""

    scale: float | None
    zero_point: int = 0


@dataclass(frozen=True)
class Held:
    """An XNNPACK value holding a torch value: its id, the perm of the torch dims and its dims;
    `quant` when the value is an int8 one standing for a float value (static: `id` is the int8
    value; dynamic: `id` is the float value, quantized where an operator reads it quantized)."""

    id: int
    perm: Perm
    dims: Shape
    quant: Quant | None = None


def relabel(held: Held, perm: Sequence[int]) -> Held:
    """The same bytes (and quantization), held in another layout."""
    return replace(held, perm=tuple(perm))


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def nhwc(rank: int) -> Perm:
    """Channels last: the channel dim (1) moved to the end."""
    return (0, *range(2, rank), 1)


def permuted(shape: Sequence[int], perm: Sequence[int]) -> Shape:
    return tuple(shape[p] for p in perm)


def inverse(perm: Sequence[int]) -> Perm:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def moved_last(rank: int, dim: int) -> Perm:
    """The identity with `dim` moved to the end."""
    return (*(d for d in range(rank) if d != dim), dim)


def same_bytes(a: Sequence[int], b: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether perms a and b of a tensor of `shape` lay its elements out alike."""
    return [d for d in a if shape[d] != 1] == [d for d in b if shape[d] != 1]


def transpose_between(src: Sequence[int], dst: Sequence[int]) -> Perm:
    """The perm that takes a tensor held in layout src to layout dst."""
    where = inverse(src)
    return tuple(where[d] for d in dst)


def permute_layout(perm: Sequence[int], permute: Sequence[int]) -> Perm:
    """The layout of `x.permute(permute)` whose bytes are those of x held in `perm`."""
    where = inverse(permute)
    return tuple(where[d] for d in perm)


def view_layout(perm: Sequence[int], old: Sequence[int], new: Sequence[int]) -> Perm | None:
    """The layout of `x.view(new)` holding the bytes of x (shape old) held in `perm`; None when
    the view needs x's bytes in torch's order (it does more than add or remove dims of size 1)."""
    if math.prod(old) != math.prod(new):
        return None
    if tuple(perm) == identity(len(old)):
        return identity(len(new))
    old_kept = [d for d in range(len(old)) if old[d] != 1]
    new_kept = [d for d in range(len(new)) if new[d] != 1]
    if [old[d] for d in old_kept] != [new[d] for d in new_kept]:
        return None
    to_new = dict(zip(old_kept, new_kept))
    ones = [d for d in range(len(new)) if new[d] == 1]
    return (*ones, *(to_new[d] for d in perm if old[d] != 1))


def held_axis(held: Held, shape: Sequence[int], dim: int) -> int | None:
    """The dim of `held.dims` that is torch dim `dim` (of size > 1) of a value of `shape`, when
    the held dims are its permuted shape up to dims of size 1; None otherwise."""
    expected = permuted(shape, held.perm)
    want = [(i, s) for i, s in enumerate(expected) if s != 1]
    have = [(j, s) for j, s in enumerate(held.dims) if s != 1]
    if shape[dim] == 1 or [s for _, s in want] != [s for _, s in have]:
        return None
    at = held.perm.index(dim)
    return next(j for (i, _), (j, _) in zip(want, have) if i == at)
